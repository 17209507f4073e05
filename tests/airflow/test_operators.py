"""The operators (tidemark_airflow.operators): the stream health branch decided on fake liveness
with a fake process hook and ledger, and the templated config path and interval arguments."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import ClassVar

import pytest
from helpers import write_config

from tidemark import liveness
from tidemark.liveness import Liveness


class FakeTI:
    def __init__(self):
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


class FakeHook:
    stopped: ClassVar[list[str]] = []

    def __init__(self, config):
        self.config = config

    def stop_recorded(self, timeout: float = 30.0) -> bool:
        FakeHook.stopped.append(self.config.pipeline)
        return True


class FakeLedger:
    restarts: ClassVar[list[int]] = []

    def __init__(self, pipeline):
        self.pipeline = pipeline

    def note_restart(self, at_ms, window_ms):
        FakeLedger.restarts.append(at_ms)
        return list(FakeLedger.restarts)


@pytest.fixture
def health(tmp_path, monkeypatch):
    """(decide(state, reason) -> (branch, xcom), alerts sent): a StreamHealthOperator whose job
    is in ``state``, the process hook, ledger and channels faked."""
    import tidemark.status
    import tidemark_airflow.alerts as alerts
    import tidemark_airflow.operators as operators
    from tidemark_airflow.operators import StreamHealthOperator

    write_config(tmp_path, name="clicks", airflow={"max_restarts": 2})
    FakeHook.stopped, FakeLedger.restarts, sent = [], [], []
    status = SimpleNamespace(batch_id=4, status=SimpleNamespace(watermark_ms=None, state="WAITING"))
    monkeypatch.setattr(tidemark.status, "read_status", lambda config: status)
    monkeypatch.setattr(operators, "StreamProcessHook", FakeHook)
    monkeypatch.setattr(alerts, "AlertLedger", FakeLedger)
    monkeypatch.setattr(alerts, "restarts_alert", lambda config, restarts, state, progress: list(restarts))
    monkeypatch.setattr(alerts, "send", lambda alert, config, context, ledger=None: sent.append(alert))
    task = StreamHealthOperator(
        task_id="health",
        config_path=str(tmp_path / "clicks.yaml"),
        healthy_task_id="healthy",
        start_task_id="start_stream",
    )

    def decide(state: str, reason: str = "because"):
        monkeypatch.setattr(liveness, "assess", lambda config, hang_after_ms: Liveness(state, reason))
        ti = FakeTI()
        return task.choose_branch({"ti": ti}), ti.xcom["liveness"]

    return decide, sent


@pytest.mark.parametrize("state", [liveness.RUNNING, liveness.STARTING])
def test_a_running_or_starting_job_is_healthy_and_left_alone(health, state):
    decide, sent = health
    assert decide(state) == ("healthy", {"state": state, "reason": "because"})
    assert (FakeHook.stopped, FakeLedger.restarts, sent) == ([], [], [])


def test_a_hung_job_is_killed_then_started_and_counted_as_a_restart(health):
    decide, sent = health
    assert decide(liveness.HUNG, "heartbeat 6m old")[0] == "start_stream"
    assert FakeHook.stopped == ["clicks"]
    assert len(FakeLedger.restarts) == 1 and sent == []


def test_a_dead_job_is_started_and_counted_but_a_never_started_or_stopped_one_is_not(health):
    decide, _ = health
    assert decide(liveness.DEAD, "never started")[0] == "start_stream"
    assert decide(liveness.STOPPED, "stopped")[0] == "start_stream"
    assert FakeLedger.restarts == []
    assert decide(liveness.DEAD, "process 42 is gone")[0] == "start_stream"
    assert len(FakeLedger.restarts) == 1 and FakeHook.stopped == []


def test_max_restarts_within_the_window_sends_the_restarts_alert(health):
    decide, sent = health
    decide(liveness.DEAD, "process 42 is gone")
    assert sent == []  # 1 of max_restarts 2
    decide(liveness.HUNG, "heartbeat 6m old")
    assert sent == [FakeLedger.restarts] and len(sent[0]) == 2


def test_the_config_path_is_templated(tmp_path):
    from tidemark_airflow.operators import ReconcileSubmitOperator, StreamHealthOperator

    context = {"params": {"dir": str(tmp_path)}}
    path = "{{ params.dir }}/clicks.yaml"
    for task in (
        ReconcileSubmitOperator(task_id="r", config_path=path),
        StreamHealthOperator(task_id="h", config_path=path, healthy_task_id="a", start_task_id="b"),
    ):
        task.render_template_fields(context)
        assert task.config_path == f"{tmp_path}/clicks.yaml", task.task_id


def test_the_reconciliation_job_gets_the_runs_hour_or_its_params_range():
    from tidemark_airflow.operators import ReconcileSubmitOperator

    task = ReconcileSubmitOperator(task_id="r", config_path="/p/clicks.yaml")
    scheduled = {
        "data_interval_start": datetime(2025, 11, 22, 10, tzinfo=UTC),
        "data_interval_end": datetime(2025, 11, 22, 11, tzinfo=UTC),
    }
    manual = {**scheduled, "params": {"start": "2025-11-21T00:00:00Z", "end": "2025-11-21T06:00:00Z"}}
    assert task.job_args(scheduled) == [
        "--config",
        "/p/clicks.yaml",
        "--start",
        "2025-11-22T10:00:00.000Z",
        "--end",
        "2025-11-22T11:00:00.000Z",
        "--pass",
        "final",
    ]
    assert task.job_args(manual)[3:6:2] == ["2025-11-21T00:00:00.000Z", "2025-11-21T06:00:00.000Z"]
    on_time = ReconcileSubmitOperator(task_id="o", config_path="/p/clicks.yaml", reconcile_pass="on_time")
    assert on_time.job_args(scheduled)[-2:] == ["--pass", "on_time"]
