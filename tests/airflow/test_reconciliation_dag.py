"""The reconciliation DAG end to end with ``dag.test()``: the watermark sensor, the recompute as a
real ``spark-submit`` through the Spark provider, the alignment gate and the Asset event."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import load_dag
from helpers import small_scenario

from tidemark.config import load_config
from tidemark.generator import generate_files
from tidemark.report import report_locations
from tidemark.stream import run_stream
from tidemark.timeutil import format_instant_ms
from tidemark_airflow.reconciliation import reconciliation_rows
from tidemark_airflow.triggers import WatermarkTrigger

pytestmark = [pytest.mark.spark, pytest.mark.airflow]


def write_pipeline(path: Path, root: Path, **extra) -> None:
    data = {
        "pipeline": "rec",
        "source": {"kind": "files", "path": str(root / "landing"), "max_files_per_trigger": 4},
        "warehouse": str(root / "warehouse"),
        "checkpoint": str(root / "checkpoints" / "rec"),
        # allowed_lateness 0: the outage's late records are not folded into revisions, so the
        # hour stays misaligned for the alert to name (revisions: tests/spark/test_window_revisions.py)
        "window": {"size": "1m", "allowed_lateness": 0},
        "watermark": {"precision": 0.96},
        "spark": {"shuffle_partitions": 2},
        "airflow": {"reconcile_grace": "0s"},
        "alerts": {"email_to": ["oncall@example.com"]},
        **extra,
    }
    path.write_text(yaml.safe_dump(data), encoding="utf-8")


@pytest.fixture
def pipeline(pipelines_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    scenario = small_scenario()  # 2 of 50 hosts (4%) in an outage: their records in one window land late
    config_path = pipelines_dir / "rec.yaml"
    write_pipeline(config_path, tmp_path)
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
            anext(WatermarkTrigger(config_path(config), scenario.start_ms, target, "on_time", 0, 0.2).run()),
            timeout,
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


def test_reconciliation_dag_alerts_on_a_misaligned_hour_then_publishes_it_once_within_the_pipelines_targets(
    spark, airflow_db, pipeline, receivers, tmp_path
):
    scenario, config, staging, landing = pipeline
    smtp, http = receivers
    land(staging, landing, sorted(p.name for p in staging.glob("part-*")))
    run_stream(spark, config, once=True, echo=lambda m: None)
    start, end = scenario.start_ms, scenario.start_ms + 5 * 60_000
    conf = {"start": format_instant_ms(start), "end": format_instant_ms(end)}
    dag = load_dag("tidemark_reconciliation.py", "tidemark_reconciliation__rec")
    for task in dag.tasks:
        task.retries = 0  # dag.test() would otherwise sleep through retry delays on a failure

    # 1. At the default 0.999 target the outage window (4% of its records late) is misaligned:
    # the suites fail, one alert names the failing expectations and the window, the report is
    # still published, and the hour gets no Asset event.
    run = dag.test(run_conf=conf)
    assert _states(run) == {
        "wait_for_close": "success",
        "reconcile_on_time": "success",
        "wait_for_final": "success",
        "reconcile_final": "success",
        "data_quality": "failed",
        "check_alignment": "upstream_failed",
    }
    rows = reconciliation_rows(config, start, end)
    misaligned = sorted(
        format_instant_ms(int(ms)) for ms in rows[rows["alignment"] < 0.999]["window_start_ms"]
    )
    assert len(rows) == 5 and len(misaligned) == 1
    assert len(http.posts) == 1 and len(smtp.messages) == 1
    alert = http.posts[0]["json"]
    assert alert["kind"] == "quality" and alert["pipeline"] == "rec"
    failing = alert["details"]["failing"]
    assert "reconciliation.alignment_at_or_above_target" in failing
    assert "reconciliation.late_share_below_max" in failing
    assert [
        r["window_start"] for r in alert["details"]["samples"]["reconciliation.alignment_at_or_above_target"]
    ] == (misaligned)
    email = smtp.messages[0]["message"]
    assert "data quality FAILED" in email["Subject"] and "alignment_at_or_above_target" in email["Subject"]
    assert misaligned[0] in email.get_body(("html",)).get_content()
    pages = report_locations(config)
    assert {"reconciliation", "data-docs", "quality-history"} <= set(pages)
    assert misaligned[0] in pages["reconciliation"].read_text(encoding="utf-8")
    assert _asset_events("tidemark.rec.reconciled") == []
    # the on-time pass is not gated: its event is published (allowed_lateness 0: final at close)
    [on_time] = _asset_events("tidemark.rec.reconciled_on_time")
    assert on_time["extra"]["pass"] == "on_time" and on_time["extra"]["start"] == conf["start"]

    # 2. The pipeline's own targets (the outage is expected here): the same hour passes the suites
    # and the gate, and the reconciled Asset event carries its figures. No further alert.
    write_pipeline(
        Path(config_path(config)),
        tmp_path,
        reconcile={"target": 0.95},
        quality={"thresholds": {"max_late_share": 0.05}},
    )
    run = dag.test(run_conf=conf)
    assert set(_states(run).values()) == {"success"}
    rows = reconciliation_rows(config, start, end)
    assert len(rows) == 5 and set(rows["status"]) == {"closed"}
    assert (rows["unexplained"] == 0).all() and (rows["alignment"] >= 0.95).all()
    assert rows["batch_events"].sum() == rows["stream_events"].sum() + rows["late_events"].sum()
    event = _asset_events("tidemark.rec.reconciled")[-1]
    assert event["extra"]["start"] == conf["start"] and event["extra"]["end"] == conf["end"]
    assert event["extra"]["windows"] == 5 and event["extra"]["aligned_share"] == 1.0
    assert event["source_dag_id"] == "tidemark_reconciliation__rec"
    assert event["extra"]["pass"] == "final" and set(event["extra"]["passes"]) == {"on_time", "final"}
    assert event["extra"]["passes"]["final"]["worst_alignment"] == event["extra"]["worst_alignment"]
    assert len(http.posts) == 1 and len(smtp.messages) == 1

    # The Tidemark view shows the hour's windows (window starts as committed, not in seconds
    # since 1970) and links the pages the DAG published: the hour's own report among them.
    from tidemark_airflow.pipelines import load_pipeline
    from tidemark_airflow.view import pipeline_summary, render_fragment

    summary, dashboard = pipeline_summary(load_pipeline(config_path(config)), root="/tidemark")
    assert [w["window_start"] for w in summary["alignment"]] == [
        format_instant_ms(start + i * 60_000) for i in range(5)
    ]
    assert all(w["aligned"] for w in summary["alignment"])
    assert set(summary["reports"]["pages"]) == {"reconciliation", "data-docs", "quality-history"}
    assert summary["reports"]["pages"]["reconciliation"] == "/tidemark/reports/rec/reconciliation.html"
    [hour] = summary["reports"]["hours"]
    assert (hour["start"], hour["end"]) == (format_instant_ms(start), format_instant_ms(end))
    published = Path(str(pages["reconciliation"].parent) + hour["href"].removeprefix("/tidemark/reports/rec"))
    assert misaligned[0] in published.read_text(encoding="utf-8")  # the hour's page has its windows
    page = render_fragment([(summary, dashboard)])
    escaped = re.search(r"&lt;/?[a-z]", page)  # a tag as text ("&lt; 10 s" is a label)
    assert escaped is None, (
        f"markup escaped into text: {page[max(0, escaped.start() - 200) : escaped.end() + 200]}"
    )
    assert 'class="hour-report" data-start="' + format_instant_ms(start) + '"' in page
    docs = "/tidemark/reports/rec/gx/uncommitted/data_docs/local_site/index.html"
    assert f'data-label="data-docs" href="{docs}"' in page


def _states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


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
