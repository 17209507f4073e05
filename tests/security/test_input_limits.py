"""Hostile input at the record contract's edges, on real Spark: a ``value`` that is not a finite
number (``1e400`` overflows a double to Infinity) is quarantined whichever parse path reads the
line, and an oversized line is quarantined with its size and only a bounded prefix of its text."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import write_config
from pyspark.sql import functions as F

from tidemark import records
from tidemark.config import ValidationConfig
from tidemark.records import parse_records
from tidemark.stream import run_stream

pytestmark = pytest.mark.spark

ET = 1_763_805_601_123
ARRIVAL = ET + 60_000
MAX_BYTES = 4096
PREFIX_CHARS = 1024


def line(event_id: str, value: str) -> str:
    return f'{{"event_id":"{event_id}","host":"h1","event_time":{ET},"key":"k","value":{value}}}'


# event_id -> (the value as written, how the reason shows it)
NON_FINITE = {
    "inf": ("1e400", "Infinity"),
    "neg": ("-1e400", "-Infinity"),
    "exp": ("1.5E+999", "Infinity"),
    "int": ("9" * 400, "Infinity"),  # an integer too large for any decimal: a double, infinite
}
FINITE = {"ok1": "2.5", "ok2": "1e308", "ok3": "-1.7976931348623157e308", "ok4": "0", "ok5": "123456789"}
BIG = '{"event_id":"big","host":"h1","event_time":' + str(ET) + ',"pad":"' + "x" * 200_000 + '"}'
WIDE = '{"event_id":"wide","host":"h1","event_time":' + str(ET) + ',"pad":"' + "\U0001f600" * 50_000 + '"}'


def _lines(spark, texts: list[str]):
    return spark.createDataFrame(
        [(text.encode(), "test", ARRIVAL) for text in texts], "b binary, source string, arrival_ms long"
    ).select(F.col("b").cast("string").alias("raw"), "source", "arrival_ms")


def _by_id(spark, texts: list[str], native: bool) -> dict[str, dict]:
    rules = ValidationConfig(max_record_bytes=MAX_BYTES, native_parser=native)
    rows = parse_records(_lines(spark, texts), rules).select("event_id", "value", "reason").collect()
    return {row["event_id"]: row.asDict() for row in rows}


@pytest.mark.parametrize("native", [True, False], ids=["native", "sql"])
def test_a_value_that_is_not_a_finite_number_is_quarantined_on_both_paths(spark, native):
    texts = [line(i, v) for i, (v, _) in NON_FINITE.items()] + [line(i, v) for i, v in FINITE.items()]
    rows = _by_id(spark, texts, native)
    for event_id, (_, shown) in NON_FINITE.items():
        assert (
            rows[event_id]["reason"]
            == f"value must be a finite number, got {shown} (beyond the range of a double)"
        ), rows[event_id]
    for event_id, written in FINITE.items():
        assert rows[event_id]["reason"] is None, rows[event_id]
        assert rows[event_id]["value"] == float(written)


def test_a_claimed_line_with_a_non_finite_value_is_quarantined_too(spark, monkeypatch):
    """The fast path never claims such a line today (it leaves exponents and big integers to SQL);
    the check holds on claimed lines anyway: a stand-in fast path that claims a line with an
    infinite value must not get it accepted."""
    name = "tidemark_test_claims_infinity"
    if not spark.catalog.functionExists(name):

        def claim(raw):
            return ("claimed", "h1", ET, None, "k", float("inf"), False)

        spark.udf.register(name, claim, records.NATIVE_TYPE)
    monkeypatch.setattr(records, "NATIVE_UDF", name)
    row = _by_id(spark, [line("claimed", "1")], native=True)["claimed"]
    assert row["value"] == float("inf")  # the stand-in did claim it
    assert row["reason"] == "value must be a finite number, got Infinity (beyond the range of a double)"


@pytest.mark.parametrize("native", [True, False], ids=["native", "sql"])
def test_an_oversized_line_is_quarantined_with_its_size_and_a_bounded_prefix(spark, native):
    rules = ValidationConfig(max_record_bytes=MAX_BYTES, native_parser=native)
    rows = parse_records(_lines(spark, [BIG, WIDE]), rules).select("raw", "reason").collect()
    assert len(rows) == 2
    for text in (BIG, WIDE):
        matching = [r for r in rows if r["raw"] == text[:PREFIX_CHARS]]
        assert len(matching) == 1, [len(r["raw"]) for r in rows]
        reason = matching[0]["reason"]
        assert reason == (
            f"oversized record: {len(text.encode())} bytes > limit {MAX_BYTES} "
            f"(raw: its first {PREFIX_CHARS} characters)"
        )
        assert len(matching[0]["raw"].encode()) <= 4 * PREFIX_CHARS


def test_an_oversized_line_shorter_than_the_prefix_is_kept_whole(spark):
    short = '{"event_id":"s","host":"h1","event_time":' + str(ET) + ',"pad":"' + "x" * 200 + '"}'
    rules = ValidationConfig(max_record_bytes=64)
    row = parse_records(_lines(spark, [short]), rules).select("raw", "reason").collect()[0]
    assert row["raw"] == short
    assert row["reason"] == f"oversized record: {len(short)} bytes > limit 64"


def test_the_stream_quarantines_both_and_counts_only_the_good_records(spark, tmp_path):
    config = write_config(tmp_path, name="limits", validation={"max_record_bytes": MAX_BYTES})
    landing = Path(config.source.path)
    landing.mkdir(parents=True, exist_ok=True)
    good = [line(f"good{i}", str(i)) for i in range(5)]
    bad = [line(i, v) for i, (v, _) in NON_FINITE.items()]
    (landing / "part-000001.jsonl").write_text("\n".join([*good, *bad, BIG]) + "\n", encoding="utf-8")
    run_stream(spark, config, once=True, echo=lambda m: None)
    events = spark.read.format("delta").load(config.table_path("events"))
    assert sorted(r["event_id"] for r in events.select("event_id").collect()) == [
        f"good{i}" for i in range(5)
    ]
    quarantine = spark.read.format("delta").load(config.table_path("quarantine")).select("raw", "reason")
    rows = sorted((r["reason"], r["raw"]) for r in quarantine.collect())
    expected = [
        (
            f"oversized record: {len(BIG)} bytes > limit {MAX_BYTES} "
            f"(raw: its first {PREFIX_CHARS} characters)",
            BIG[:PREFIX_CHARS],
        ),
        *(
            (f"value must be a finite number, got {shown} (beyond the range of a double)", line(i, v))
            for i, (v, shown) in NON_FINITE.items()
        ),
    ]
    assert rows == sorted(expected)
