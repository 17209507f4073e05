"""Tidemark on a real Spark standalone cluster (scripts/spark_cluster.sh: a master and two 1-core
workers on loopback), with the code shipped to the executors as a zip.

The executors run a Python that cannot import ``tidemark`` by itself (a bare venv that sees the
project's dependencies but not its editable install), so a job only works if the archive was
shipped. One worker is SIGKILLed (with its executor) in the middle of the stream; the result must
still equal the independent recompute exactly, and the reconciliation on the cluster must leave
nothing unexplained.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_exactly_once

from tidemark.resources import dist_dir

from .conftest import JOB_TIMEOUT_S, committed_batches, job_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PROBE = Path(__file__).with_name("executor_probe.py")


def _probe_output(out: str) -> list[dict]:
    lines = [line for line in out.splitlines() if line.startswith("PROBE ")]
    assert lines, f"probe printed nothing:\n{out[-3000:]}"
    return json.loads(lines[-1].removeprefix("PROBE "))


@pytest.mark.parametrize("launch", ["spark-submit", "session-builder"])
def test_executors_import_tidemark_only_from_the_shipped_archive(jobs, executor_python, launch, tmp_path):
    log, out = tmp_path / "probe.log", tmp_path / "probe.out"
    if launch == "spark-submit":
        probe = jobs.submit(str(PROBE), [], log, out)
    else:  # plain python: build_session ships the archive itself (SparkContext.addPyFile)
        command = [sys.executable, str(PROBE), "--master", jobs.cluster.url]
        probe = jobs.start(command, {**job_env(), "PYSPARK_PYTHON": executor_python}, log, out)
    assert jobs.wait(probe, log, JOB_TIMEOUT_S) == 0, log.read_text()[-3000:]
    seen = _probe_output(out.read_text())
    workers = {Path(s["cwd"]).parents[2].name for s in seen}  # <dir>/worker-N/work/<app>/<executor>
    assert workers == {"worker-1", "worker-2"}, f"tasks did not run on both workers: {seen}"
    for s in seen:
        assert s["python"] == executor_python, s
        assert not s["importable_without_archive"], f"an executor finds tidemark by itself: {s}"
        # <executor dir>/tidemark-<version>-<sha of the sources>.zip: the driver's code, shipped
        archive = (Path(s["cwd"]) / s["tidemark"]).parent.parent.resolve()
        assert archive.parent == Path(s["cwd"]) and re.fullmatch(
            r"tidemark-.+-[0-9a-f]{12}\.zip", archive.name
        )
        assert (dist_dir() / archive.name).is_file(), f"not an archive the driver built: {s}"


def test_worker_killed_mid_stream_then_result_equals_batch_recompute(
    cluster, jobs, stream_with_a_worker_killed, tmp_path, request
):
    run = stream_with_a_worker_killed
    config, truth = run.config, run.truth
    assert any("CoarseGrainedExecutorBackend" in p for p in run.victims), (
        f"worker 1 ran no executor when it was killed: {run.victims}"
    )
    assert run.restarts or "Lost executor" in run.output, "the job never noticed the killed worker"
    assert committed_batches(config) > run.batches_before_kill, "nothing committed after the kill"
    assert "worker 1 registered" in run.restart_output, run.restart_output
    assert "worker 2 already running" in run.restart_output, run.restart_output
    assert cluster.worker_pid(1) != run.killed_pid and cluster.worker_pid(2) == run.survivor_pid

    started = time.monotonic()
    rec_log, rec_out = tmp_path / "reconcile.log", tmp_path / "reconcile.json"
    reconcile = jobs.submit(
        "reconcile_job.py", ["--config", str(run.config_path), "--json"], rec_log, rec_out
    )
    assert jobs.wait(reconcile, rec_log, JOB_TIMEOUT_S) == 0, rec_log.read_text()[-3000:]
    report = json.loads(rec_out.read_text())
    assert report["windows_closed"] == 6 and report["windows_open"] == 0, report
    assert report["totals"]["unexplained"] == 0
    assert all(w["unexplained"] == 0 for w in report["windows"]), report["windows"]
    assert report["totals"]["batch_events"] == truth.unique_events
    reconciled_s = time.monotonic() - started

    assert_exactly_once(request.getfixturevalue("spark"), config, truth)
    print(
        f"worker 1 killed {run.timings['killed']:.1f}s into the stream, after {run.batches_before_kill} "
        f"committed batch(es); job restarts {run.restarts}; "
        f"stream done at {run.timings['stream done']:.1f}s, "
        f"worker back at {run.timings['worker back']:.1f}s; reconcile on the cluster {reconciled_s:.1f}s, "
        f"oracle check {time.monotonic() - started - reconciled_s:.1f}s"
    )
