"""Finding 3: the storage secret must not touch the disk when the supervisor starts a job.

The job is started the way the supervisor starts the stream (StreamProcessHook.start_detached:
the runner process, the provider's SparkSubmitHook, a real spark-submit); the application is a
probe that records whether the connection reached it and then waits to be stopped. Every file
the start wrote (launch file, log, anything beside the checkpoint) is scanned for the secret."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time

import pytest
from helpers import files_holding, write_config

pytestmark = [pytest.mark.airflow]

SECRET = "tidemark-leak-canary-7f3a9c"
CONNECTION = {"conn_type": "aws", "login": "AKIDCANARY", "password": SECRET}
PROBE = """
import hashlib, os, sys, time
conn = os.environ.get("AIRFLOW_CONN_LAKE_S3", "")
open(sys.argv[1], "w").write(hashlib.sha256(conn.encode()).hexdigest())
time.sleep(600)
"""


def test_the_connection_travels_in_the_environment_only(tmp_path, monkeypatch):
    from tidemark_airflow.hooks import StreamProcessHook, submit_arguments

    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_SPARK", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    config = write_config(tmp_path, name="leak")
    probe, marker = tmp_path / "probe.py", tmp_path / "probe.out"
    probe.write_text(PROBE)
    conn = json.dumps(CONNECTION)
    args = submit_arguments(
        conn_id="tidemark_spark",
        name="probe",
        application_args=[str(marker)],
        env_vars={"AIRFLOW_CONN_LAKE_S3": conn},
    )
    hook = StreamProcessHook(config)
    hook.start_detached(str(probe), args, {"dag_run": "test"})
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            assert hook.process.poll() is None, hook.tail()
            time.sleep(0.5)
        assert marker.read_text() == hashlib.sha256(conn.encode()).hexdigest(), "the job lost the connection"
        leaks = files_holding(tmp_path, SECRET)
        assert not leaks, f"the secret is on disk in {leaks}"
        specs = list(hook.log_path.parent.glob("*submit*"))
        assert not specs, f"spec files left once the job started: {specs}"
    finally:
        hook.stop_recorded(timeout=10)


def test_a_private_file_is_never_readable_by_others(tmp_path):
    from tidemark_airflow.hooks import write_private

    path = tmp_path / "spec.json"
    old = os.umask(0)
    try:
        write_private(path, "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):  # never opened over an existing file (or a planted link)
        write_private(path, "{}")


def test_a_start_that_times_out_stops_what_it_started(tmp_path, monkeypatch):
    """Finding 4, first way: the start timed out and the task's retry would start a second job
    beside the first. The launcher stops its own job before it fails."""
    from tidemark_airflow import operators

    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_SPARK", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    config = write_config(tmp_path, name="slow")
    probe, marker = tmp_path / "probe.py", tmp_path / "probe.out"
    probe.write_text(PROBE)  # never writes a heartbeat
    monkeypatch.setattr(operators, "entrypoint", lambda name: str(probe))
    monkeypatch.setattr(operators, "submit_arguments", _with_args([str(marker)]))
    task = operators.StreamLauncherOperator(
        task_id="start", config_path=str(tmp_path / "slow.yaml"), start_timeout=15
    )
    with pytest.raises(RuntimeError, match="no heartbeat"):
        task.execute({"run_id": "manual__1"})
    from tidemark_airflow.hooks import StreamProcessHook

    hook = StreamProcessHook(config)
    [identity] = hook.recorded()
    assert marker.exists(), "the probe never ran"
    from tidemark import liveness

    assert not liveness.verify(identity).ours, "the job that did not come up is still running"


def _with_args(application_args):
    from tidemark_airflow import hooks

    def submit_arguments(**kwargs):
        return hooks.submit_arguments(**{**kwargs, "application_args": application_args})

    return submit_arguments
