"""The watermark sensor, its trigger and the Tidemark view on object storage that cannot be read
(the CLI's one line, not a Rust error chain); the sensor follows Airflow's ``[operators]
default_deferrable``; the reconciliation DAG's date params get the trigger form's date-time picker;
the maintenance task of a pipeline that never ran is skipped before any Spark job."""

from __future__ import annotations

import asyncio
import os

import pytest
from conftest import load_dag
from helpers import listen_ports, write_config

pytestmark = pytest.mark.airflow


@pytest.fixture
def closed_port_config(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "tidemark-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "tidemark-test-secret")
    [port] = listen_ports(1)  # nothing listens on it
    bucket = "sensor-closed-port"
    write_config(
        tmp_path,
        name="clicks",
        source={"kind": "files", "path": f"s3a://{bucket}/landing"},
        warehouse=f"s3a://{bucket}/warehouse",
        checkpoint=f"s3a://{bucket}/checkpoints/clicks",
        storage={"path_style": True, "endpoint": f"http://127.0.0.1:{port}"},
    )
    line = (
        f"cannot read s3a://{bucket}/warehouse/clicks/watermarks: connection refused by "
        f"http://127.0.0.1:{port} (storage.endpoint)"
    )
    return str(tmp_path / "clicks.yaml"), line


def test_sensor_trigger_and_view_show_the_cli_line_for_unreadable_storage(closed_port_config):
    from tidemark_airflow.pipelines import load_pipeline
    from tidemark_airflow.sensors import WatermarkSensor
    from tidemark_airflow.triggers import WatermarkTrigger
    from tidemark_airflow.view import pipeline_summary

    path, line = closed_port_config
    sensor = WatermarkSensor(task_id="wait", config_path=path, deferrable=False)
    with pytest.raises(Exception) as raised:
        sensor.poke({"params": {"start": "2025-11-22T10:00:00Z", "end": "2025-11-22T11:00:00Z"}})
    assert str(raised.value) == line

    async def first_event():
        return await anext(WatermarkTrigger(path, 0, 60_000, "on_time", poll_interval=0.1).run())

    assert asyncio.run(first_event()).payload == {"status": "error", "message": line}

    summary, dashboard = pipeline_summary(load_pipeline(path))
    assert dashboard is None and summary["error"] == line
    assert summary["job"]["state"] == "UNKNOWN" and "\n" not in summary["job"]["reason"]


def test_the_sensor_follows_airflows_default_deferrable(monkeypatch):
    from tidemark_airflow.sensors import WatermarkSensor

    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "true")
    assert WatermarkSensor(task_id="a", config_path="x.yaml").deferrable is True
    assert WatermarkSensor(task_id="b", config_path="x.yaml", deferrable=False).deferrable is False
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "false")
    assert WatermarkSensor(task_id="c", config_path="x.yaml").deferrable is False
    assert WatermarkSensor(task_id="d", config_path="x.yaml", deferrable=True).deferrable is True


def test_the_reconciliation_range_params_are_date_times(pipelines_dir):
    from test_dag_integrity import write_pipeline

    write_pipeline(pipelines_dir, "clicks")
    dag = load_dag("tidemark_reconciliation.py", "tidemark_reconciliation__clicks")
    for name in ("start", "end"):
        schema = dag.params.get_param(name).schema
        assert schema["format"] == "date-time" and schema["type"] == ["null", "string"], name


def test_maintenance_of_a_pipeline_that_never_ran_is_skipped_without_spark(tmp_path, monkeypatch):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowSkipException

    from tidemark_airflow.operators import MaintenanceSubmitOperator

    def no_submit(self, context):
        raise AssertionError("a Spark job was submitted")

    monkeypatch.setattr(SparkSubmitOperator, "execute", no_submit)
    config = write_config(tmp_path, name="fresh")
    task = MaintenanceSubmitOperator(task_id="maintain", config_path=str(tmp_path / "fresh.yaml"))
    with pytest.raises(AirflowSkipException) as skipped:
        task.execute({})
    assert str(skipped.value) == f"pipeline fresh has not run yet: no tables under {config.tables_root}"


def test_the_sensor_and_its_trigger_decide_with_is_closed_and_is_final(tmp_path, monkeypatch):
    """The on-time wait ends when every window of the hour is closed, the final one when every
    window is final (end + allowed lateness): TumblingWindows' own rules, with the grace as margin."""
    from datetime import UTC, datetime

    from tidemark.windows import TumblingWindows
    from tidemark_airflow import triggers
    from tidemark_airflow.sensors import WatermarkSensor
    from tidemark_airflow.triggers import WatermarkTrigger

    minute, hour = 60_000, 1_763_805_600_000  # 2025-11-22T10:00:00Z
    write_config(tmp_path, name="due", window={"size": "1m", "allowed_lateness": "3m"})
    path = str(tmp_path / "due.yaml")
    windows = TumblingWindows(minute, 3 * minute)
    start, end, grace = hour, hour + 60 * minute, 30_000
    committed: dict[str, int | None] = {"watermark": None}
    monkeypatch.setattr(
        triggers, "committed_watermark", lambda config_path: (committed["watermark"], "ADVANCING")
    )
    context = {
        "data_interval_start": datetime.fromtimestamp(start / 1000, UTC),
        "data_interval_end": datetime.fromtimestamp(end / 1000, UTC),
    }
    sensors = {
        p: WatermarkSensor(task_id=p, config_path=path, reconcile_pass=p, grace_ms=grace, deferrable=False)
        for p in ("on_time", "final")
    }
    every = range(start, end, minute)
    seen = []
    for watermark in (
        None,
        end - 1,
        end,
        end + grace - 1,
        end + grace,
        end + 3 * minute + grace - 1,
        end + 4 * minute,
    ):
        committed["watermark"] = watermark
        less = None if watermark is None else watermark - grace
        closed, final = (all(rule(s, less) for s in every) for rule in (windows.is_closed, windows.is_final))
        assert (sensors["on_time"].poke(context), sensors["final"].poke(context)) == (closed, final), (
            watermark
        )
        seen.append((closed, final))
    assert seen == [(False, False)] * 4 + [(True, False)] * 2 + [(True, True)]  # every case met

    async def first_event(reconcile_pass: str, timeout: float):
        trigger = WatermarkTrigger(path, start, end, reconcile_pass, grace, poll_interval=0.05)
        return await asyncio.wait_for(anext(trigger.run()), timeout)

    committed["watermark"] = end + grace  # closed, not final
    assert asyncio.run(first_event("on_time", 5)).payload["status"] == "passed"
    with pytest.raises(TimeoutError):
        asyncio.run(first_event("final", 0.5))
    committed["watermark"] = end + 3 * minute + grace
    assert asyncio.run(first_event("final", 5)).payload == {
        "status": "passed",
        "watermark_ms": end + 3 * minute + grace,
        "state": "ADVANCING",
    }
