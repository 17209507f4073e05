"""The supervisor's process control (StreamProcessHook.stop_recorded) on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from helpers import write_config

from tidemark import liveness
from tidemark_airflow.hooks import StreamProcessHook

pytestmark = pytest.mark.airflow


TOKEN = liveness.new_token()


@pytest.fixture
def job():
    """A stand-in streaming job: a process group (a parent and a child) that ignores nothing,
    started with a job token in its environment as the supervisor starts one."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess,sys,time; "
            "subprocess.Popen([sys.executable,'-c','import time; time.sleep(600)']); time.sleep(600)",
        ],
        start_new_session=True,
        env={**os.environ, liveness.TOKEN_VAR: TOKEN},
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


def test_stop_recorded_refuses_a_pid_recorded_on_another_host(tmp_path, job):
    config = write_config(tmp_path, "hook")
    liveness.launch_path(config).parent.mkdir(parents=True, exist_ok=True)
    liveness.write_json_atomic(liveness.launch_path(config), {"pid": job.pid, "host": "another-host.example"})
    with pytest.raises(RuntimeError, match=r"refusing to stop pid.*another-host\.example"):
        StreamProcessHook(config).stop_recorded(timeout=2)
    time.sleep(0.5)
    assert job.poll() is None  # untouched


def test_stop_recorded_stops_the_whole_process_group_recorded_here(tmp_path, job):
    config = write_config(tmp_path, "hook")
    liveness.launch_path(config).parent.mkdir(parents=True, exist_ok=True)
    identity = liveness.ProcessIdentity.of(job.pid, TOKEN)
    liveness.write_json_atomic(liveness.launch_path(config), identity.record())
    time.sleep(0.5)  # let the child start
    group = subprocess.run(["pgrep", "-g", str(job.pid)], capture_output=True, text=True).stdout.split()
    assert len(group) == 2
    assert StreamProcessHook(config).stop_recorded(timeout=5) is True
    assert job.wait(timeout=10) is not None
    deadline = time.monotonic() + 10
    while (
        time.monotonic() < deadline
        and subprocess.run(["pgrep", "-g", str(job.pid)], capture_output=True).returncode == 0
    ):
        time.sleep(0.2)
    assert (
        subprocess.run(["pgrep", "-g", str(job.pid)], capture_output=True).returncode == 1
    )  # child gone too
