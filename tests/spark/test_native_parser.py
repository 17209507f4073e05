"""The record parser's JVM fast path gives exactly the rows of the SQL validator.

The fast path (``spark_jobs/jvm/tidemark/udf/RecordParser.java``) claims a line only when it is
sure the SQL validator would accept it with the same fields; these tests parse the same lines both
ways and compare every column of every row, and check that the fast path does claim the ordinary
lines (else the comparison would be empty of meaning)."""

from __future__ import annotations

import json
import random

import pytest
from pyspark.sql import functions as F
from test_hostile_input import MAX_BYTES, T0, good_record, hostile_line
from test_records import CASES

from tidemark import records
from tidemark.config import ValidationConfig
from tidemark.records import NATIVE_UDF, parse_records, register_native_parser
from tidemark.resources import SetupError

ET = 1763805601123
BASE = f'"event_id":"e","host":"h1","event_time":{ET}'


def rec(**fields) -> str:
    return json.dumps({"event_id": "e", "host": "h1", "event_time": ET, **fields})


# Lines at the edges of what the fast path claims: each must come out as the SQL validator says.
EDGES = [
    "{" + BASE + "}",
    "  {" + BASE + "}  ",
    "\ufeff{" + BASE + "}",
    "{" + BASE + "} trailing",
    "{" + BASE + '}{"a":1}',
    "{" + BASE + "}}",
    "{" + BASE + ',"event_id":"f"}',
    '{"a":1,"a":2,' + BASE + "}",
    '{"EVENT_ID":"x",' + BASE + "}",
    '{"event_id":"e","Host":"h2","host":"h1","event_time":' + str(ET) + "}",
    '{"EVENT_TIME":5,' + BASE + "}",
    "{" + BASE + ',"x":[1,{"a":1,"a":2}]}',
    "{" + BASE + ',"x":{"y":{"z":[]}}}',
    "{/*c*/" + BASE + "}",
    "{'event_id':'e','host':'h1','event_time':" + str(ET) + "}",
    '{event_id:"e",host:"h1",event_time:' + str(ET) + "}",
    "{" + BASE + ',"value":NaN}',
    '{"event_id":"e","host":"h1","event_time":0' + str(ET) + "}",
    "{" + BASE + ',"n":1e999}',
    "{" + BASE + ',"n":123456789012345678901234567890123456789012}',
    "{" + BASE + ',"n":-0.0,"b":true,"z":null,"s":"' + "x" * 200 + '"}',
    '{"event_id":"e\tx","host":"h1","event_time":' + str(ET) + "}",
    rec(host="h1\n"),
    rec(host="h1\r\n"),
    rec(host="\nh1"),
    rec(host="h" * 253),
    rec(host="h" * 254),
    rec(host="a b"),
    rec(event_id="e\u00e9\u4e2d"),
    rec(event_id="e\u0000"),  # JSON-escaped: no NUL byte in the line, a valid record
    rec(event_id="\U0001f600"),
    "{" + BASE + ',"key":"a\ufffdb"}',  # a literal U+FFFD: valid UTF-8, left to SQL
    rec(key="a\ufffdb"),  # JSON-escaped: no U+FFFD in the line
    '{"event_id":"\\ud800","host":"h1","event_time":' + str(ET) + "}",
    '{"event_id":"\\u0065\\u005f","host":"\\u0068\\u0031","event_time":' + str(ET) + "}",
    '{"event\\u005fid":"e","host":"h1","event_time":' + str(ET) + "}",
    rec(event_id=""),
    rec(event_id=" "),
    rec(event_id=" e "),
    rec(event_id="\te"),
    rec(event_id="x" * 256),
    rec(event_id="x" * 257),
    rec(event_id=None),
    rec(host=None),
    rec(event_time=None),
    rec(event_time=9223372036854775807),
    '{"event_id":"e","host":"h1","event_time":9223372036854775808}',
    rec(event_time=-1),
    rec(event_time=float(ET)),
    '{"event_id":"e","host":"h1","event_time":1.7e12}',
    rec(event_time=True),
    rec(msg_time=None),
    rec(msg_time=ET + 1),
    rec(msg_time=ET - 400_000),
    rec(msg_time="soon"),
    rec(msg_time=1.5),
    rec(key=None),
    rec(key=""),
    rec(key="k\u00e9"),
    rec(key=["a"]),
    rec(value=None),
    rec(value=True),
    rec(value=100),
    rec(value=-9223372036854775808),
    '{"event_id":"e","host":"h1","event_time":' + str(ET) + ',"value":-0}',
    '{"event_id":"e","host":"h1","event_time":' + str(ET) + ',"value":-0.0}',
    '{"event_id":"e","host":"h1","event_time":' + str(ET) + ',"value":0.000}',
    '{"event_id":"e","host":"h1","event_time":' + str(ET) + ',"value":1e3}',
    '{"event_id":"e","host":"h1","event_time":' + str(ET) + ',"value":1E-3}',
    '{"event_id":"e","host":"h1","event_time":' + str(ET) + ',"value":12345678901234567890}',
    '{"event_id":"e","host":"h1","event_time":' + str(ET) + ',"value":123456789012345.6}',
    '{"event_id":"e","host":"h1","event_time":' + str(ET) + ',"value":1234567890123456.7}',
    '{"event_id":"e","host":"h1","event_time":' + str(ET) + ',"value":0.000000000000000000001234}',
    '{"event_id":"e","host":"h1","event_time":' + str(ET) + ',"value":1.7976931348623157e308}',
    '{"event_id":"e","host":"h1","event_time":' + str(ET) + ',"value":9007199254740993}',
    rec(heartbeat=True),
    rec(heartbeat=False),
    rec(heartbeat=None),
    rec(heartbeat=1),
    '{"host":"h1","event_time":' + str(ET) + ',"heartbeat":true}',
    '{"event_id":7,"host":"h1","event_time":' + str(ET) + ',"heartbeat":true}',
    '{"event_id":"","host":"h1","event_time":' + str(ET) + ',"heartbeat":true}',
    '{"host":"h1","event_time":' + str(ET) + ',"heartbeat":false}',
    '{"host":"h1","heartbeat":true}',
    "{}",
    "{" + BASE + ",}",
    "{" + BASE,
    "null",
    "",
]


def random_decimal(rng: random.Random) -> str:
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 20)))
    point = rng.randint(0, len(digits))
    text = (digits[:point] or "0") + ("." + digits[point:] if point < len(digits) else "")
    text = text.lstrip("0") or "0"
    if text.startswith("."):
        text = "0" + text
    return ("-" if rng.random() < 0.3 else "") + text


def _frame(spark, lines: list[str | bytes]):
    rows = [(i, line if isinstance(line, bytes) else line.encode()) for i, line in enumerate(lines)]
    return spark.createDataFrame(rows, "i int, b binary").select(
        F.col("b").cast("string").alias("raw"),
        F.lit("test").alias("source"),
        F.lit(T0 + 60_000).cast("long").alias("arrival_ms"),
    )


def _both_ways(spark, lines, rules: ValidationConfig):
    frame = _frame(spark, lines)
    native = parse_records(frame, rules).collect()
    sql = parse_records(frame, rules.model_copy(update={"native_parser": False})).collect()
    key = lambda row: (row["raw"] or "", repr(tuple(row)))  # noqa: E731
    return sorted(native, key=key), sorted(sql, key=key)


def test_fast_path_and_sql_agree_on_edge_lines_and_the_record_contract_cases(spark):
    lines = [raw for raw, _ in CASES] + EDGES
    native, sql = _both_ways(spark, lines, ValidationConfig(max_record_bytes=4096))
    assert len(native) == len(lines)
    for a, b in zip(native, sql, strict=True):
        assert repr(a.asDict()) == repr(b.asDict()), a["raw"]


def test_fast_path_and_sql_agree_on_random_numbers_and_hostile_lines(spark):
    rng = random.Random(20261124)
    lines: list[str | bytes] = [hostile_line(rng, i) for i in range(600)]
    lines += [json.dumps(good_record(i)) for i in range(200)]
    for i in range(1500):
        value = random_decimal(rng)
        lines.append(f'{{"event_id":"n{i}","host":"h1","event_time":{ET + i},"value":{value}}}')
    native, sql = _both_ways(spark, lines, ValidationConfig(max_record_bytes=MAX_BYTES))
    for a, b in zip(native, sql, strict=True):
        assert repr(a.asDict()) == repr(b.asDict()), a["raw"]


def test_fast_path_claims_ordinary_records_and_leaves_the_rest(spark):
    register_native_parser(spark)
    claimed_lines = [
        "{" + BASE + "}",
        rec(msg_time=ET, key="k", value=2.5, extra="x", n=3),
        '{"host":"h1","event_time":' + str(ET) + ',"heartbeat":true}',
        json.dumps(good_record(1)),
    ]
    left = [
        "{" + BASE + "} x",
        "{" + BASE + ',"x":{}}',
        '{"Host":"h",' + BASE + "}",
        rec(value=1e300),
        "{}",
        '{"event_id":"e\u0000",' + BASE[len('"event_id":"e",') :] + "}",  # a raw NUL byte
        b'{"event_id":"e\xff",' + BASE[len('"event_id":"e",') :].encode() + b"}",  # invalid UTF-8
        "{" + BASE + ',"key":"a\ufffdb"}',  # U+FFFD itself, what invalid UTF-8 decodes to
    ]
    frame = _frame(spark, claimed_lines + left)
    got = [r["c"] for r in frame.select(F.call_function(NATIVE_UDF, "raw").isNotNull().alias("c")).collect()]
    assert got == [True] * len(claimed_lines) + [False] * len(left)
    row = frame.select(F.call_function(NATIVE_UDF, "raw").alias("n")).first()["n"]
    assert row.asDict() == {
        "event_id": "e",
        "host": "h1",
        "event_time": ET,
        "msg_time": None,
        "key": None,
        "value": None,
        "heartbeat": False,
    }


def test_java_constants_equal_the_python_ones(spark):
    parser = spark.sparkContext._jvm.tidemark.udf.RecordParser
    assert parser.HOST_PATTERN == records.HOST_PATTERN
    assert parser.MAX_ID_CHARS == records.MAX_ID_CHARS
    assert parser.RETURN_TYPE == records.NATIVE_TYPE


def test_missing_parser_class_is_a_one_line_setup_error(spark, monkeypatch):
    monkeypatch.setattr(records, "NATIVE_CLASS", "tidemark.udf.NoSuchParser")
    fresh = spark.newSession()  # its own function registry: nothing registered yet
    with pytest.raises(SetupError, match=r"tidemark.udf.NoSuchParser is not on the classpath.*make setup"):
        register_native_parser(fresh)
