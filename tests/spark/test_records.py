"""parse_records on real Spark: every bad line gets a precise reason, good lines none."""

from __future__ import annotations

import pytest

from tidemark.config import ValidationConfig
from tidemark.records import parse_records

ARRIVAL = 1_763_805_700_000
GOOD = (
    '{"event_id":"e1","host":"h1","event_time":1763805601123,"msg_time":1763805601500,'
    '"key":"checkout","value":2.5}'
)

CASES = [
    (GOOD, None),
    ('{"event_id":"e2","host":"h-2.a:b_c","event_time":1763805601123}', None),
    ('{"event_id":"e3","host":"h1","event_time":1763805601123,"extra":{"deep":[1,2,3]}}', None),
    ('{"host":"h1","event_time":1763805601123,"heartbeat":true}', None),
    ("not json", "invalid JSON"),
    ('{"event_id":"e1","host":"h1","event_t', "truncated JSON"),
    ("[1,2,3]", "not a JSON object: ARRAY<BIGINT>"),
    ('{"host":"h1","event_time":1763805601123}', "missing event_id"),
    ('{"event_id":null,"host":"h1","event_time":1763805601123}', "missing event_id"),
    ('{"event_id":"  ","host":"h1","event_time":1763805601123}', "empty event_id"),
    ('{"event_id":7,"host":"h1","event_time":1763805601123}', "event_id must be a string, got BIGINT"),
    ('{"event_id":"e","host":42,"event_time":1763805601123}', "host must be a string, got BIGINT"),
    ('{"event_id":"e","event_time":1763805601123}', "missing host"),
    ('{"event_id":"e","host":"../etc/passwd","event_time":1763805601123}', "host has characters outside"),
    (
        '{"event_id":"e","host":"h1","event_time":"1763805601123"}',
        "event_time must be integer epoch ms, got STRING",
    ),
    ('{"event_id":"e","host":"h1"}', "missing event_time"),
    ('{"event_id":"e","host":"h1","event_time":5}', "event_time before 2000-01-01"),
    (
        '{"event_id":"e","host":"h1","event_time":1763805601123.5}',
        "event_time must be integer epoch ms, got DECIMAL",
    ),
    (
        '{"event_id":"e","host":"h1","event_time":1763806601123,"msg_time":1763805601123}',
        "clock skew: event_time 1000s ahead of msg_time (limit 300s)",
    ),
    ('{"event_id":"e","host":"h1","event_time":32503680000000}', "clock skew: event_time"),
    ('{"event_id":"e","host":"h1","event_time":1763805601123,"key":5}', "key must be a string, got BIGINT"),
    (
        '{"event_id":"e","host":"h1","event_time":1763805601123,"value":"x"}',
        "value must be a number, got STRING",
    ),
    (
        '{"event_id":"e","host":"h1","event_time":1763805601123,"heartbeat":"yes"}',
        "heartbeat must be a boolean",
    ),
    ('{"event_id":"e\u0000","host":"h1","event_time":1763805601123}', "NUL byte in record"),
    (b'{"event_id":"e\xff\xfe","host":"h1","event_time":1763805601123}', "invalid UTF-8"),
]
OVERSIZED = '{"event_id":"' + "x" * 300 + '","host":"h1","event_time":1}'
CASES.append((OVERSIZED, f"oversized record: {len(OVERSIZED.encode())} bytes > limit 256"))


@pytest.fixture(scope="module")
def parsed(spark):
    from pyspark.sql import functions as F

    # Lines arrive as bytes (as from a file or a Kafka value), so invalid UTF-8 can be tested.
    lines = spark.createDataFrame(
        [
            (i, raw if isinstance(raw, bytes) else raw.encode(), "test", ARRIVAL)
            for i, (raw, _) in enumerate(CASES)
        ],
        "case int, bytes binary, source string, arrival_ms long",
    ).select("case", F.col("bytes").cast("string").alias("raw"), "source", "arrival_ms")
    rules = ValidationConfig(max_record_bytes=256)
    rows = parse_records(lines.drop("case"), rules).collect()
    by_raw = {r["raw"]: r for r in rows}
    case_raw = {r["case"]: r["raw"] for r in lines.collect()}
    return {raw: by_raw[case_raw[i]] for i, (raw, _) in enumerate(CASES)}


@pytest.mark.parametrize(("raw", "reason"), CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_each_line_gets_the_expected_reason(parsed, raw, reason):
    got = parsed[raw]["reason"]
    if reason is None:
        assert got is None
    else:
        assert got is not None and got.startswith(reason), got


def test_good_record_fields_are_typed(parsed):
    row = parsed[GOOD]
    assert (row["event_id"], row["host"], row["key"], row["value"]) == ("e1", "h1", "checkout", 2.5)
    assert row["event_time"] == 1763805601123 and row["msg_time"] == 1763805601500
    assert row["heartbeat"] is False


def test_heartbeat_is_valid_and_flagged(parsed):
    row = parsed['{"host":"h1","event_time":1763805601123,"heartbeat":true}']
    assert row["reason"] is None and row["heartbeat"] is True


def test_blank_lines_are_separators_and_every_other_line_is_kept(spark):
    from tidemark.sources import drop_blank_lines

    lines = ["", "   ", GOOD, "  " + GOOD, "{", "x", " \t "]
    frame = spark.createDataFrame([(line,) for line in lines], "raw string")
    kept = [r["raw"] for r in drop_blank_lines(frame).collect()]
    # Spark's trim strips spaces only: a line with a tab is not blank; it is quarantined later.
    assert sorted(kept) == sorted([GOOD, "  " + GOOD, "{", "x", " \t "])


def test_closing_rule_on_a_spark_column_is_the_scalar_rule(spark):
    """The stream flags late events with the rule applied to a Spark column (tidemark.batch)."""
    from pyspark.sql import functions as F

    from tidemark.windows import TumblingWindows

    w = TumblingWindows(60_000)
    starts = [-60_000, 0, 60_000, 120_000]
    frame = spark.createDataFrame([(s,) for s in starts], "start long")
    for watermark in (None, 59_999, 60_000, 120_005):
        flags = frame.select("start", w.is_closed(F.col("start"), watermark).alias("closed")).collect()
        assert {r["start"]: r["closed"] for r in flags} == {s: w.is_closed(s, watermark) for s in starts}
