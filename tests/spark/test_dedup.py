"""exactly_once deduplication (tidemark.dedup): the events table as the catalog, host progress
as the filter in front of it, in-batch copies by id hash; on the driver and in Spark."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import assert_exactly_once, small_scenario, write_config

from tidemark import batch, dedup
from tidemark.generator import generate_files
from tidemark.stream import run_stream


def _record(event_id: str, host: str, t: int) -> str:
    return json.dumps(
        {"event_id": event_id, "host": host, "event_time": t, "msg_time": t + 50, "key": "k", "value": 1.5}
    )


def _files(landing: Path, batches: list[list[str]]) -> None:
    """One file per batch, oldest first (the file source takes them in modification order)."""
    landing.mkdir(parents=True)
    now = time.time()
    for i, lines in enumerate(batches):
        path = landing / f"part-{i:06d}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        stamp = now - 60 + 10 * i
        os.utime(path, (stamp, stamp))


@pytest.fixture(params=["driver", "spark", "executors"])
def resolution(request, monkeypatch):
    """Where the suspects are resolved: on the driver (the default for up to DRIVER_MAX_ROWS), or
    by Spark (above it: a publisher replaying hours of input); or found by Spark, the catalog read
    by Spark, and resolved on the driver, nothing collected per row (``spark.per_row_work:
    executors``; every batch past the whole-batch route, which a small batch would take)."""
    if request.param == "spark":
        monkeypatch.setattr(dedup, "DRIVER_MAX_ROWS", 0)
    if request.param == "executors":
        monkeypatch.setattr(dedup, "WHOLE_MAX_BYTES", 0)
        monkeypatch.setattr(dedup, "_hash_pass", _no_per_row_pass)
        monkeypatch.setattr(batch, "count_columns", _no_per_row_pass)  # the per-row count collect
        monkeypatch.setattr(dedup._Catalog, "_read_locally", _no_per_row_pass)  # delta-rs lookup
    return request.param


def _no_per_row_pass(*args, **kwargs):
    raise AssertionError("spark.per_row_work: executors collected the batch per row")


def _spark_settings(resolution: str) -> dict:
    return {"spark": {"per_row_work": "executors"}} if resolution == "executors" else {}


def test_retries_across_and_within_batches_are_dropped_and_out_of_order_records_kept(
    spark, tmp_path, resolution
):
    t0 = int(time.time() * 1000) - 180_000
    a, b, c = (_record(i, "h1", t0 + d) for i, d in (("a", 0), ("b", 1000), ("c", 2000)))
    x = _record("x", "h2", t0 + 500)
    d = _record("d", "h1", t0 + 1500)  # new, but behind h1's progress (t0+2000): a candidate
    e = _record("e", "h1", t0 + 3000)
    y = _record("y", "h2", t0 + 600)
    config = write_config(
        tmp_path,
        name=f"dd-{resolution}",
        source={"max_files_per_trigger": 1},
        watermark={"precision": 0.5},
        **_spark_settings(resolution),
    )
    _files(
        Path(config.source.path),
        [
            [a, b, c, x],  # batch 0: h1 reaches t0+2000, h2 t0+500
            [b, d, e, e, y, x],  # a retry of b and of x, d out of order, e twice in the batch
            [e, d, a],  # retries of records batch 1 kept (d was a candidate) and batch 0 stored
        ],
    )
    processor = run_stream(spark, config, once=True, echo=lambda m: None)
    batches = [s for s in processor.summaries if not s.skipped]
    assert [s.events for s in batches] == [4, 3, 0]
    assert [s.retries_dropped for s in batches] == [0, 3, 3]
    events = spark.read.format("delta").load(config.table_path("events"))
    assert Counter(r.event_id for r in events.select("event_id").collect()) == Counter("abcxdey")
    by_id = {r.event_id: r.batch_id for r in events.select("event_id", "batch_id").collect()}
    assert by_id == {"a": 0, "b": 0, "c": 0, "x": 0, "d": 1, "e": 1, "y": 1}


def test_the_scenario_is_stored_exactly_once_either_way(spark, tmp_path, resolution):
    config = write_config(tmp_path, name=f"sc-{resolution}", **_spark_settings(resolution))
    truth = generate_files(small_scenario(max_retry_copies=2, seed=29), config.source.path)
    processor = run_stream(spark, config, once=True, echo=lambda m: None)
    assert_exactly_once(spark, config, truth)
    assert sum(s.retries_dropped for s in processor.summaries) == truth.duplicate_copies > 0


def test_a_retry_older_than_the_horizon_is_stored_again(spark, tmp_path):
    """The catalog is the events stored within ``dedup_horizon`` of processing time; the horizon
    here (1 ms) is shorter than the gap between the two batches' timestamps."""
    t0 = int(time.time() * 1000) - 180_000
    a, b = _record("a", "h1", t0), _record("b", "h1", t0 + 1000)
    config = write_config(tmp_path, name="hz", source={"max_files_per_trigger": 1}, dedup_horizon="1ms")
    _files(Path(config.source.path), [[a, b], [a]])
    processor = run_stream(spark, config, once=True, echo=lambda m: None)
    assert [s.events for s in processor.summaries if not s.skipped] == [2, 1]


def _code_body(frame) -> str:
    """The Java Spark generates for ``frame``'s whole-stage-codegen stages (adaptive execution
    off, so the plan is the final one)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        stages = frame._jdf.queryExecution().debug().codegenToSeq()
        assert stages.length() > 0
        return "\n".join(stages.apply(i)._2() for i in range(stages.length()))
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")


def test_the_ceiling_comparison_compiles_to_the_same_code_for_every_ceiling(spark):
    """A ceiling that changed the generated code would make every batch compile its stage again."""
    from pyspark.sql import functions as F

    times = spark.range(100).select((F.col("id") + 1_763_800_000_000).alias("event_time"))
    ceilings = (1_763_800_000_050, 1_763_800_123_456)
    codes = {_code_body(times.where(dedup._at_or_below(c))) for c in ceilings}
    assert len(codes) == 1
    assert [times.where(dedup._at_or_below(c)).count() for c in ceilings] == [51, 100]
    # The check can tell: a long literal is inlined, so it gives two different classes.
    inlined = {_code_body(times.where(F.col("event_time") <= F.lit(c))) for c in ceilings}
    assert len(inlined) == 2
