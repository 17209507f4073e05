"""tidemark.liveness.assess on the launch and heartbeat files alone (no Spark, no Airflow)."""

from __future__ import annotations

import os
import subprocess

import pytest
from helpers import write_config

from tidemark import liveness


@pytest.fixture
def job():
    """A live stand-in job started with a token in its environment, and its identity."""
    token = liveness.new_token()
    process = subprocess.Popen(["sleep", "600"], env={**os.environ, liveness.TOKEN_VAR: token})
    yield liveness.ProcessIdentity.of(process.pid, token)
    process.kill()
    process.wait()


def _launch(config, identity, **fields) -> None:
    liveness.write_json_atomic(liveness.launch_path(config), {**identity.record(), **fields})


def test_a_live_launch_without_a_heartbeat_is_starting_then_hung(tmp_path, job):
    config = write_config(tmp_path)
    _launch(config, job, launched_at_ms=1_000_000)
    starting = liveness.assess(config, hang_after_ms=60_000, start_grace_ms=120_000, now=1_060_000)
    assert (starting.state, starting.pid) == (liveness.STARTING, job.pid)
    hung = liveness.assess(config, hang_after_ms=60_000, start_grace_ms=120_000, now=1_200_000)
    assert (hung.state, hung.reason) == (liveness.HUNG, "no heartbeat 3m20.0s after launch")


def test_a_launch_file_without_its_time_is_judged_not_a_crash(tmp_path, job):
    """A launch record written by hand or by an older launcher may lack launched_at_ms."""
    config = write_config(tmp_path)
    _launch(config, job)
    verdict = liveness.assess(config, hang_after_ms=60_000, now=5_000_000)
    assert (verdict.state, verdict.reason) == (liveness.HUNG, "no heartbeat after launch")


def test_nothing_written_is_never_started(tmp_path):
    verdict = liveness.assess(write_config(tmp_path), hang_after_ms=60_000, now=1)
    assert (verdict.state, verdict.reason) == (liveness.DEAD, "never started")
