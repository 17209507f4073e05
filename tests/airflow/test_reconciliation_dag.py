"""The reconciliation DAG end to end with ``dag.test()``: the watermark sensor, the recompute as a
real ``spark-submit`` through the Spark provider, the alignment gate and the Asset event."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import load_dag
from helpers import small_scenario

from tidemark.config import load_config
from tidemark.generator import generate_files
from tidemark.stream import run_stream
from tidemark.timeutil import format_instant_ms
from tidemark_airflow.reconciliation import reconciliation_rows
from tidemark_airflow.triggers import WatermarkTrigger

pytestmark = [pytest.mark.spark, pytest.mark.airflow]


@pytest.fixture
def pipeline(pipelines_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    scenario = small_scenario()
    config_path = pipelines_dir / "rec.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "pipeline": "rec",
                "source": {"kind": "files", "path": str(tmp_path / "landing"), "max_files_per_trigger": 4},
                "warehouse": str(tmp_path / "warehouse"),
                "checkpoint": str(tmp_path / "checkpoints" / "rec"),
                "watermark": {"precision": 0.96},
                "spark": {"shuffle_partitions": 2},
                "airflow": {"reconcile_grace": "0s"},
            }
        ),
        encoding="utf-8",
    )
    staging = tmp_path / "staging"
    generate_files(scenario, staging)
    return scenario, load_config(config_path), staging, tmp_path / "landing"


def land(staging: Path, landing: Path, names: list[str]) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy2(staging / name, landing / name)


def test_trigger_waits_for_the_watermark_then_fires(spark, pipeline):
    scenario, config, staging, landing = pipeline
    files = sorted(p.name for p in staging.glob("part-*"))
    land(staging, landing, files[:4])
    run_stream(spark, config, once=True, echo=lambda m: None)
    target = scenario.start_ms + 5 * 60_000

    async def first_event(timeout: float):
        return await asyncio.wait_for(
            anext(WatermarkTrigger(config_path(config), target, 0.2).run()), timeout
        )

    with pytest.raises(TimeoutError):
        asyncio.run(first_event(1.5))  # still behind: the trigger keeps waiting
    land(staging, landing, files[4:])
    run_stream(spark, config, once=True, echo=lambda m: None)
    event = asyncio.run(first_event(30)).payload
    assert event["status"] == "passed" and event["watermark_ms"] >= target


def config_path(config) -> str:
    from tidemark_airflow.pipelines import configured_pipelines

    return next(p.config_path for p in configured_pipelines() if p.name == config.pipeline)


def test_reconciliation_dag_writes_the_rows_and_publishes_the_asset_event(spark, airflow_db, pipeline):
    scenario, config, staging, landing = pipeline
    land(staging, landing, sorted(p.name for p in staging.glob("part-*")))
    run_stream(spark, config, once=True, echo=lambda m: None)
    start, end = scenario.start_ms, scenario.start_ms + 5 * 60_000

    dag = load_dag("tidemark_reconciliation.py", "tidemark_reconciliation__rec")
    run = dag.test(run_conf={"start": format_instant_ms(start), "end": format_instant_ms(end)})
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states == {
        "wait_for_watermark": "success",
        "recompute_and_diff": "success",
        "check_alignment": "success",
    }

    rows = reconciliation_rows(config, start, end)
    assert len(rows) == 5 and set(rows["status"]) == {"closed"}
    assert (rows["unexplained"] == 0).all() and (rows["alignment"] >= config.reconcile.target).all()
    assert rows["batch_events"].sum() == rows["stream_events"].sum() + rows["late_events"].sum()

    event = _asset_events("tidemark.rec.reconciled")[-1]
    assert event["extra"]["start"] == format_instant_ms(start) and event["extra"]["end"] == format_instant_ms(
        end
    )
    assert event["extra"]["windows"] == 5 and event["extra"]["aligned_share"] == 1.0
    assert event["source_dag_id"] == "tidemark_reconciliation__rec"


def _asset_events(name: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        events = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == name)
        ).all()
        return [{"extra": e.extra, "source_dag_id": e.source_dag_id} for e in events]
