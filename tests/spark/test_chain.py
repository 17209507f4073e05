"""Watermark propagation: a downstream pipeline reads an upstream pipeline's events table and
uses the low watermark each row carries as its own input low watermark."""

from __future__ import annotations

import shutil
from pathlib import Path

from helpers import oracle_window_counts, small_scenario, stream_window_counts, write_config
from pyspark.sql import functions as F

from tidemark.generator import generate_files
from tidemark.reconcile import reconcile
from tidemark.status import latest_marker
from tidemark.stream import run_stream


def _land(staging: Path, landing: Path, names: list[str]) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy2(staging / name, landing / name)


def test_two_pipeline_chain_closes_downstream_windows_on_the_propagated_watermark(spark, tmp_path):
    scenario = small_scenario(seed=5)
    upstream = write_config(tmp_path, name="up")
    downstream = write_config(
        tmp_path,
        name="down",
        window="2m",
        source={"kind": "delta", "path": upstream.table_path("events")},
    )
    staging = tmp_path / "staging"
    generate_files(scenario, staging)
    files = sorted(p.name for p in staging.glob("part-*"))

    for part in (files[: len(files) // 2], files[len(files) // 2 :]):
        _land(staging, Path(upstream.source.path), part)
        run_stream(spark, upstream, once=True, echo=lambda m: None)
        run_stream(spark, downstream, once=True, echo=lambda m: None)
        up_rows = spark.read.format("delta").load(upstream.table_path("events"))
        carried = up_rows.agg(F.max(F.unix_millis("low_watermark"))).first()[0]
        down = latest_marker(downstream)
        # The downstream watermark is exactly what the upstream's rows carried, never ahead of it.
        assert down["watermark_ms"] == carried
        assert carried <= latest_marker(upstream)["global_lw_ms"]
        windows = spark.read.format("delta").load(downstream.table_path("windows"))
        assert windows.where(F.col("window_end") > F.col("low_watermark")).count() == 0

    assert latest_marker(downstream)["watermark_ms"] == scenario.end_ms
    combined, _late, duplicates = stream_window_counts(spark, downstream)
    assert duplicates == 0
    assert combined == oracle_window_counts(Path(upstream.source.path), window_ms=120_000)
    report = reconcile(spark, downstream, scenario.start_ms, scenario.end_ms)
    assert report.closed and all(w.unexplained == 0 for w in report.closed)
