"""One small real pipeline for the data-quality tests, built once per session and copied per fault.

200 hosts x 4 minutes x 5 events/min at precision 0.99: one host (0.5%, within the 1% allowed to
lag) is in a 2-minute outage, so the stream closes windows without it and keeps its records as
late events; reconcile.target 0.99 for this pipeline (the 0.999 default would need 1,000+ hosts).
The 18 landing files go in 3 micro-batches of 6 (fewer batches, less Spark time; three is what
the regression and stall tests need).

The session pipeline is never validated in place: every test that writes (GX results, a report,
a fault) works on :func:`copy_pipeline`, so tests do not see each other's history.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import small_scenario, write_config

from tidemark.config import PipelineConfig
from tidemark.generator import Scenario
from tidemark.quality_site import QUALITY_DIR

# tests/conftest.py ARTIFACTS / "quality" (that module is shadowed by this one's name here)
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "quality"
NAME = "dq"
OVERRIDES = {
    # allowed_lateness 0: the lagging host's records stay late, so a window is short of them and
    # the reconciliation suite has late records to weigh (revisions: tests/spark/test_window_revisions.py)
    "window": {"size": "1m", "allowed_lateness": 0},
    "watermark": {"precision": 0.99},
    "reconcile": {"target": 0.99},
    "source": {"max_files_per_trigger": 6},
}


def scenario() -> Scenario:
    return small_scenario(
        hosts=200,
        minutes=4,
        events_per_host_per_minute=5,
        lag_share=0.005,
        lag_minutes=2.0,
        lag_start_minute=1.0,
        seed=5,
    )


@dataclass(frozen=True)
class Pipeline:
    root: Path
    config: PipelineConfig
    scenario: Scenario

    @property
    def config_path(self) -> Path:
        return self.root / f"{NAME}.yaml"


def pipeline_config(root: Path, **extra) -> PipelineConfig:
    overrides = {**OVERRIDES}
    for key, value in extra.items():
        overrides[key] = {**overrides.get(key, {}), **value} if isinstance(value, dict) else value
    return write_config(root, name=NAME, **overrides)


@pytest.fixture(scope="session")
def quality_pipeline(spark, tmp_path_factory) -> Pipeline:
    """Generate, stream (availableNow) and reconcile the scenario once for the whole session."""
    from tidemark.generator import generate_files
    from tidemark.reconcile import reconcile
    from tidemark.stream import run_stream

    root = tmp_path_factory.mktemp("quality") / "pipeline"
    root.mkdir()
    config = pipeline_config(root)
    sc = scenario()
    generate_files(sc, config.source.path)
    run_stream(spark, config, once=True, echo=lambda m: None)
    report = reconcile(spark, config, sc.start_ms, sc.end_ms)
    assert len(report.closed) == sc.minutes and report.totals()["late_events"] > 0, "scenario lost its point"
    assert read_table(config, "watermarks")["watermark_ms"].notna().sum() >= 3, "too few batches"
    return Pipeline(root, config, sc)


def copy_pipeline(source: Pipeline, dest: Path, **extra) -> Pipeline:
    """A private copy of the pipeline's landing files, tables and checkpoint to seed a fault in
    (without any GX results or reports the source has: each copy starts with no history)."""
    shutil.copytree(source.root, dest, ignore=shutil.ignore_patterns(QUALITY_DIR))
    return Pipeline(dest, pipeline_config(dest, **extra), source.scenario)


def rewrite_table(config: PipelineConfig, table: str, change) -> None:
    """Overwrite a Delta table of ``config`` with ``change(pandas frame)`` (delta-rs, schema kept)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    path = config.table_path(table)
    current = DeltaTable(path).to_pyarrow_table()
    frame = change(current.to_pandas())
    write_deltalake(
        path, pa.Table.from_pandas(frame, schema=current.schema, preserve_index=False), mode="overwrite"
    )


def read_table(config: PipelineConfig, table: str):
    from deltalake import DeltaTable

    return DeltaTable(config.table_path(table)).to_pandas()
