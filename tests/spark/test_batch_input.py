"""A batch's input as the steps read it (tidemark.batch_input.read_input): the stream's own plan
over a landing file, with a publisher retry and a bad line, through each route (a small batch
collected whole, its retries resolved on the driver or by Spark, at_least_once). The batch
timestamp and the source range come from what the checkpoint says of the batch; every frame the
read caches is handed to the caller."""

from __future__ import annotations

import json

import pytest
from helpers import write_config

from tidemark import batch_input, dedup
from tidemark.batch_input import read_input, with_retry_figures
from tidemark.batch_steps import BatchSummary
from tidemark.checkpoint import BatchSource
from tidemark.progress import HostProgress
from tidemark.records import is_event_col
from tidemark.stream import build_stream

T0 = 1_763_805_600_000
BATCH_TS = T0 + 90_000


def rec(event_id: str, host: str, t: int) -> str:
    return json.dumps({"event_id": event_id, "host": host, "event_time": t, "key": "k", "value": 1.0})


def _persisted(spark) -> int:
    return len(spark.sparkContext._jsc.getPersistentRDDs())


@pytest.mark.parametrize("route", ["whole", "driver", "spark", "executors", "at_least_once"])
def test_the_input_is_the_batch_less_its_retries_stamped_with_the_checkpoints_time(
    spark, tmp_path, monkeypatch, route
):
    mode = "at_least_once" if route == "at_least_once" else "exactly_once"
    per_row = "executors" if route == "executors" else "driver"
    config = write_config(tmp_path, name=f"in_{route}", mode=mode, spark={"per_row_work": per_row})
    landing = tmp_path / "landing"
    landing.mkdir()
    lines = [
        rec("e1", "h1", T0),
        rec("e2", "h1", T0 + 1_000),
        rec("e1", "h1", T0),
        rec("e3", "h2", T0),
        "{oops",
    ]
    (landing / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    source = BatchSource(BATCH_TS, json.dumps({"files": [f"file:{landing / 'a.jsonl'}"]}))
    monkeypatch.setattr(batch_input.C, "batch_source", lambda cfg, n: source if n == 3 else None)
    if route in ("driver", "spark", "executors"):  # suspects resolved on the driver, or by Spark
        monkeypatch.setattr(dedup, "WHOLE_MAX_BYTES", 0)
        monkeypatch.setattr(dedup, "DRIVER_MAX_ROWS", 0 if route == "spark" else dedup.DRIVER_MAX_ROWS)
    before = _persisted(spark)
    cached: list = []
    inp, result = read_input(
        spark,
        build_stream(spark, config, streaming=False),
        config,
        spark_batch_id=3,
        batch_id=13,
        progress=HostProgress.empty(),
        events_path=str(tmp_path / "no-events-yet"),
        cached=cached,
    )
    assert (inp.batch_id, inp.batch_ts_ms, inp.source_progress) == (13, BATCH_TS, source.progress)
    assert {r.ingest_ts.timestamp() * 1000 for r in inp.rows.select("ingest_ts").collect()} == {BATCH_TS}
    assert (inp.local is not None) == (route == "whole")
    if inp.local is not None:
        events = inp.local.filter(inp.local[dedup.LOCAL_FLAGS["events"]])["event_id"].to_pylist()
        assert inp.local.filter(inp.local[dedup.LOCAL_FLAGS["quarantined"]]).num_rows == 1
    else:
        events = [r.event_id for r in inp.rows.where(is_event_col()).select("event_id").collect()]
    counted = inp.counted.where(is_event_col()).count() - len(inp.removed)
    if route == "at_least_once":
        assert result is None and sorted(events) == ["e1", "e1", "e2", "e3"] and counted == 4
    else:
        assert result is not None and result.dropped == 1
        # executors: the suspects found by Spark and resolved on the driver, nothing collected
        # per row for the count step (Spark's resolution neither: it counts the rows it kept)
        assert (inp.scanned is None) == (route in ("executors", "spark"))
        assert (result.removed is None) == (route == "spark")
        assert sorted(events) == ["e1", "e2", "e3"] and counted == 3
    summary = with_retry_figures(BatchSummary(13), inp, result)
    assert summary.retries_dropped == (0 if result is None else 1)
    # The caller's finally unpersists what the read cached: then nothing of the batch is left.
    assert _persisted(spark) > before
    for frame in cached:
        frame.unpersist()
    assert _persisted(spark) == before
