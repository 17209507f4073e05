"""Hostile input: thousands of generated bad records mixed with good ones. No crash, every good
record counted once, every bad one quarantined with a reason."""

from __future__ import annotations

import json
import random
from pathlib import Path

from helpers import small_scenario, write_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from tidemark.config import ValidationConfig
from tidemark.generator import generate_files
from tidemark.records import parse_records
from tidemark.stream import run_stream

T0 = 1_763_805_600_000
MAX_BYTES = 4096


def good_record(i: int, host: str = "hgood") -> dict:
    return {
        "event_id": f"fz-{i}",
        "host": host,
        "event_time": T0 + i,
        "msg_time": T0 + i + 5,
        "key": "k",
        "value": 1.5,
    }


def hostile_line(rng: random.Random, i: int) -> bytes:
    """One line that breaks the contract, of a kind chosen by ``rng``."""
    rec = good_record(i)
    kind = rng.randrange(13)
    if kind == 0:  # garbage text
        text = "".join(rng.choice("abc xyz:,;'\"\\}]0123") for _ in range(rng.randint(1, 60)))
        return ("~" + text).encode()
    if kind == 1:  # truncated
        line = json.dumps(rec)
        return line[: rng.randint(1, len(line) - 1)].encode()
    if kind == 2:  # missing required field
        del rec[rng.choice(["event_id", "host", "event_time"])]
    elif kind == 3:  # wrong types
        field, value = rng.choice(
            [
                ("event_time", str(T0)),
                ("host", 12345),
                ("event_id", 7),
                ("value", "x"),
                ("key", 5),
                ("msg_time", "soon"),
                ("heartbeat", "yes"),
                ("event_time", 1.5e12 + 0.5),
            ]
        )
        rec[field] = value
    elif kind == 4:  # empty identifiers
        rec[rng.choice(["event_id", "host"])] = rng.choice(["", "   "])
    elif kind == 5:  # host with path or control characters
        rec["host"] = rng.choice(["../etc/passwd", "a b", "h\tx", "h/x", "h\u0001x", "-lead", "h" * 300])
    elif kind == 6:  # absurd timestamps: negative, 1970, year 3000
        rec["event_time"] = rng.choice([-5, 0, 86_400_000, 32_503_680_000_000])
        rec.pop("msg_time")
    elif kind == 7:  # clock skew against msg_time
        rec["event_time"] = rec["msg_time"] + 86_400_000
    elif kind == 8:  # oversized
        rec["pad"] = "x" * (MAX_BYTES + rng.randint(1, 500))
    elif kind == 9:  # deeply nested
        depth = rng.randint(1200, 3000)
        return (
            ("[" * depth + "]" * depth).encode()
            if rng.random() < 0.5
            else (json.dumps(rec)[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}").encode()
        )
    elif kind == 10:  # NUL byte
        line = json.dumps(rec).encode()
        return line.replace(b"fz-", b"fz\x00-", 1)
    elif kind == 11:  # invalid UTF-8
        return json.dumps(rec).encode().replace(b"fz-", b"fz\xff\xfe-", 1)
    else:  # valid JSON, not an object
        return rng.choice([b"[1,2]", b"123", b'"text"', b"null", b"true"])
    return json.dumps(rec).encode()


def _parse(spark, lines: list[bytes]):
    frame = spark.createDataFrame([(i, line) for i, line in enumerate(lines)], "i int, b binary").select(
        "i",
        F.col("b").cast("string").alias("raw"),
        F.lit("fuzz").alias("source"),
        F.lit(T0 + 60_000).alias("arrival_ms"),
    )
    parsed = parse_records(frame.drop("i"), ValidationConfig(max_record_bytes=MAX_BYTES))
    return parsed.select("raw", "reason", "event_id").collect()


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(seed=st.integers(0, 2**32 - 1), n_bad=st.integers(300, 700), n_good=st.integers(50, 300))
def test_parser_quarantines_every_generated_bad_line_and_passes_every_good_one(spark, seed, n_bad, n_good):
    rng = random.Random(seed)
    lines = [hostile_line(rng, i) for i in range(n_bad)]
    lines += [json.dumps(good_record(10_000 + i)).encode() for i in range(n_good)]
    rng.shuffle(lines)
    rows = _parse(spark, lines)
    assert len(rows) == len(lines)
    good = [r for r in rows if r["reason"] is None]
    assert sorted(r["event_id"] for r in good) == sorted(f"fz-{10_000 + i}" for i in range(n_good))
    assert sum(1 for r in rows if r["reason"]) == n_bad


def test_stream_survives_thousands_of_hostile_lines_and_counts_good_ones_once(spark, tmp_path):
    config = write_config(tmp_path, name="fuzz", validation={"max_record_bytes": MAX_BYTES})
    scenario = small_scenario(seed=9)
    truth = generate_files(scenario, config.source.path)
    rng = random.Random(2026)
    lines = [hostile_line(rng, i) for i in range(3000)]
    hosts = scenario.host_names
    lines += [json.dumps(good_record(50_000 + i, host=rng.choice(hosts))).encode() for i in range(1000)]
    rng.shuffle(lines)
    last = sorted(Path(config.source.path).glob("part-*.jsonl"))[-1]
    hostile = last.with_name("part-999999.jsonl")
    hostile.write_bytes(b"\n".join(lines) + b"\n")
    run_stream(spark, config, once=True, echo=lambda m: None)
    events = spark.read.format("delta").load(config.table_path("events"))
    assert events.count() == truth.unique_events + 1000
    assert events.select("event_id").distinct().count() == events.count()
    quarantine = spark.read.format("delta").load(config.table_path("quarantine"))
    assert quarantine.count() == truth.malformed_lines + 3000
    assert quarantine.where(F.col("reason").isNull() | (F.col("reason") == "")).count() == 0
    reasons = {r["reason"].split(":")[0] for r in quarantine.select("reason").distinct().collect()}
    assert {
        "invalid JSON",
        "NUL byte in record",
        "invalid UTF-8",
        "truncated JSON",
        "missing event_id",
    } <= reasons
