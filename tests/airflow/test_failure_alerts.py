"""Every failed run of a Tidemark DAG reaches email and webhook once, whatever failed.

The tasks that fail on purpose (a failing suite, a misaligned hour) send their own alert
(test_reconciliation_dag); these are the other failures: a ``spark-submit`` that crashed, a
watermark sensor that timed out, a streaming job that did not start. Each run is a real
``dag.test()`` with the DAG's own failure callback, real SMTP and HTTP receivers.
"""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import load_dag
from receivers import HttpReceiver

pytestmark = [pytest.mark.spark, pytest.mark.airflow]

START, END = "2025-11-22T10:00:00Z", "2025-11-22T11:00:00Z"


@pytest.fixture
def empty_pipeline(pipelines_dir, tmp_path, monkeypatch):
    """A pipeline whose landing directory does not exist: any Spark job of it fails."""
    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    (pipelines_dir / "broken.yaml").write_text(
        yaml.safe_dump(
            {
                "pipeline": "broken",
                "source": {"kind": "files", "path": str(tmp_path / "no-such-landing")},
                "warehouse": str(tmp_path / "warehouse"),
                "checkpoint": str(tmp_path / "checkpoints" / "broken"),
                "spark": {"shuffle_partitions": 2},
                "alerts": {"email_to": ["oncall@example.com"], "webhook_endpoint": "/alerts"},
            }
        ),
        encoding="utf-8",
    )


def _test_run(dag, **kwargs):
    for task in dag.tasks:
        task.retries = 0  # dag.test() would sleep through retry delays
    return dag.test(**kwargs)


def _failure_alert(smtp, http, dag_id: str, task_id: str) -> dict:
    assert len(http.posts) == 1, [p["json"]["subject"] for p in http.posts]
    assert len(smtp.messages) == 1, [m["message"]["Subject"] for m in smtp.messages]
    post = http.posts[0]
    assert post["path"] == "/alerts"
    assert post["headers"]["Authorization"] == f"Bearer {HttpReceiver.TOKEN}"
    alert = post["json"]
    assert alert["kind"] == "failure" and alert["pipeline"] == "broken"
    assert alert["details"]["dag_id"] == dag_id and alert["details"]["task_id"] == task_id
    assert alert["alert_id"] == f"failure:{dag_id}:{alert['details']['run_id']}"
    email = smtp.messages[0]["message"]
    assert email["Subject"] == alert["subject"] and f"FAILED at {task_id}" in email["Subject"]
    return alert


def test_a_crashed_spark_submit_alerts_once_by_email_and_webhook(
    spark, airflow_db, empty_pipeline, receivers
):
    smtp, http = receivers
    dag = load_dag("tidemark_reconciliation.py", "tidemark_reconciliation__broken")
    run = _test_run(dag, run_conf={"start": START, "end": END}, mark_success_pattern="wait_for_close")
    assert str(run.state) == "failed"
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states["reconcile_on_time"] == "failed"
    alert = _failure_alert(smtp, http, dag.dag_id, "reconcile_on_time")
    assert f"{START} .. {END}" in alert["text"]  # the range the run covered


def test_a_timed_out_watermark_sensor_alerts_once(airflow_db, empty_pipeline, receivers):
    smtp, http = receivers
    dag = load_dag("tidemark_reconciliation.py", "tidemark_reconciliation__broken")
    sensor = dag.get_task("wait_for_close")
    # poke mode: dag.test() runs a deferred trigger inline without its timeout; the triggerer
    # enforces the same timeout on the deferrable sensor in production
    sensor.deferrable, sensor.mode, sensor.timeout, sensor.poke_interval = False, "poke", 2, 0.5
    run = _test_run(dag, run_conf={"start": START, "end": END})
    assert str(run.state) == "failed"
    _failure_alert(smtp, http, dag.dag_id, "wait_for_close")


def test_a_stream_that_fails_to_start_alerts_once(spark, airflow_db, empty_pipeline, receivers):
    smtp, http = receivers
    dag = load_dag("tidemark_stream_supervisor.py", "tidemark_stream_supervisor__broken")
    dag.get_task("start_stream").start_timeout = 120
    run = _test_run(dag)
    assert str(run.state) == "failed"
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states == {"check_stream": "success", "stream_healthy": "skipped", "start_stream": "failed"}
    alert = _failure_alert(smtp, http, dag.dag_id, "start_stream")
    assert alert["details"]["reason"]
