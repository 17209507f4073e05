"""Tidemark on a real Spark standalone cluster (scripts/spark_cluster.sh: a master and two 1-core
workers on loopback), with the code shipped to the executors as a zip.

The executors run a Python that cannot import ``tidemark`` by itself (a bare venv that sees the
project's dependencies but not its editable install), so a job only works if the archive was
shipped. One worker is SIGKILLed (with its executor) in the middle of the stream; the result must
still equal the independent recompute exactly, and the reconciliation on the cluster must leave
nothing unexplained.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_exactly_once, small_scenario, write_config

from tidemark.generator import generate_files
from tidemark.packaging import dist_dir, spark_submit_command, submit_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "spark_cluster.sh"
PROBE = Path(__file__).with_name("executor_probe.py")
JOB_TIMEOUT_S = 600  # a hang, not a slow machine: 2 shared cores can be very slow


def _free_port(preferred: int | None = None) -> int:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred or 0))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SparkCluster:
    """scripts/spark_cluster.sh with its own directory and ports."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        port = int(os.environ.get("TIDEMARK_SPARK_MASTER_PORT") or _free_port(7077))
        self.url = f"spark://127.0.0.1:{port}"
        self.env = {
            **os.environ,
            "TIDEMARK_SPARK_CLUSTER_DIR": str(directory),
            "TIDEMARK_SPARK_MASTER_PORT": str(port),
            "TIDEMARK_SPARK_MASTER_UI_PORT": str(_free_port()),
        }

    def run(self, action: str) -> str:
        done = subprocess.run(
            [str(SCRIPT), action], env=self.env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, f"spark_cluster.sh {action}: {done.stdout}{done.stderr}"
        return done.stdout

    def worker_pid(self, index: int) -> int:
        return int((self.directory / f"worker-{index}.pid").read_text())

    def processes_of_worker(self, index: int) -> list[str]:
        pgid = self.worker_pid(index)
        ps = subprocess.run(["ps", "-ww", "-eo", "pgid=,args="], capture_output=True, text=True, check=True)
        return [line.split(None, 1)[1] for line in ps.stdout.splitlines() if int(line.split()[0]) == pgid]

    def kill_worker(self, index: int) -> None:
        """SIGKILL the worker's process group: the worker, its executor and their Python workers."""
        os.killpg(self.worker_pid(index), signal.SIGKILL)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spark_cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        started = time.monotonic()
        out = spark_cluster.run("start")
        print(f"cluster started in {time.monotonic() - started:.1f}s: {out.strip()}")
        yield spark_cluster
    finally:
        spark_cluster.run("stop")


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory) -> str:
    """A Python that sees the venv's packages but not the editable ``tidemark`` install."""
    import sysconfig

    venv = tmp_path_factory.mktemp("executor-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    # A path line adds the directory without running the .pth files in it (the editable install).
    (site / "venv-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = str(venv / "bin" / "python")
    check = subprocess.run([python, "-c", "import pyspark, pandas, tidemark"], capture_output=True, text=True)
    assert "No module named 'tidemark'" in check.stderr, "the bare executor Python must not see tidemark"
    return python


def _cluster_conf(executor_python: str) -> dict[str, str]:
    return {
        "spark.pyspark.python": executor_python,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executor.memory": "1g",
    }


def _env() -> dict[str, str]:
    return submit_env({**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "TIDEMARK_SPARK_LOG_LEVEL": "WARN"})


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
        probe = jobs.start(command, {**_env(), "PYSPARK_PYTHON": executor_python}, log, out)
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


def _committed_batches(config) -> int:
    from tidemark.tables import read_local, table_exists

    path = config.table_path("watermarks")
    return len(read_local(path)) if table_exists(path) else 0


class Jobs:
    """spark-submit on the cluster; whatever is still running at teardown is killed with its JVM."""

    def __init__(self, cluster: SparkCluster, executor_python: str) -> None:
        self.cluster, self.executor_python = cluster, executor_python
        self.running: list[subprocess.Popen] = []

    def submit(self, job: str, args: list[str], log: Path, stdout: Path | None = None) -> subprocess.Popen:
        command = spark_submit_command(
            job, args, master=self.cluster.url, conf=_cluster_conf(self.executor_python)
        )
        return self.start(command, _env(), log, stdout)

    def start(self, command: list[str], env: dict, log: Path, stdout: Path | None = None) -> subprocess.Popen:
        with log.open("a") as err, (stdout or log).open("a") as out:
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=err, start_new_session=True)
        self.running.append(proc)
        return proc

    @staticmethod
    def wait(proc: subprocess.Popen, log: Path, timeout: float) -> int:
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"job did not finish in {timeout:.0f}s:\n{log.read_text()[-3000:]}")

    def kill_all(self) -> None:
        for proc in self.running:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def jobs(cluster, executor_python):
    submitted = Jobs(cluster, executor_python)
    yield submitted
    submitted.kill_all()


def test_worker_killed_mid_stream_then_result_equals_batch_recompute(cluster, jobs, tmp_path, request):
    config = write_config(tmp_path, name="cluster")
    config_path = tmp_path / "cluster.yaml"
    truth = generate_files(small_scenario(), config.source.path)
    log = tmp_path / "stream.log"
    stream_args = ["--config", str(config_path), "--once"]
    started = time.monotonic()

    job = jobs.submit("stream_job.py", stream_args, log)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while _committed_batches(config) < 1 and job.poll() is None and time.monotonic() < deadline:
        time.sleep(1)
    batches_before_kill = _committed_batches(config)
    assert job.poll() is None and batches_before_kill >= 1, (
        f"no mid-stream moment:\n{log.read_text()[-3000:]}"
    )
    victims, killed_pid = cluster.processes_of_worker(1), cluster.worker_pid(1)
    assert any("CoarseGrainedExecutorBackend" in p for p in victims), f"worker 1 ran no executor: {victims}"
    cluster.kill_worker(1)
    killed_at = time.monotonic() - started

    restarts = 0
    code = jobs.wait(job, log, deadline - time.monotonic())
    while code != 0 and restarts < 2:  # the job failed with its executor: restart from the checkpoint
        restarts += 1
        code = jobs.wait(jobs.submit("stream_job.py", stream_args, log), log, JOB_TIMEOUT_S)
    stream_s = time.monotonic() - started
    output = log.read_text()
    assert code == 0, output[-3000:]
    assert restarts or "Lost executor" in output, "the job never noticed the killed worker"
    assert _committed_batches(config) > batches_before_kill

    survivor = cluster.worker_pid(2)
    restart = cluster.run("start")  # idempotent: brings back only the killed worker
    assert "worker 1 registered" in restart and "worker 2 already running" in restart, restart
    assert cluster.worker_pid(1) != killed_pid and cluster.worker_pid(2) == survivor
    rec_log, rec_out = tmp_path / "reconcile.log", tmp_path / "reconcile.json"
    reconcile = jobs.submit("reconcile_job.py", ["--config", str(config_path), "--json"], rec_log, rec_out)
    assert jobs.wait(reconcile, rec_log, JOB_TIMEOUT_S) == 0, rec_log.read_text()[-3000:]
    report = json.loads(rec_out.read_text())
    assert report["windows_closed"] == 6 and report["windows_open"] == 0, report
    assert report["totals"]["unexplained"] == 0
    assert all(w["unexplained"] == 0 for w in report["windows"]), report["windows"]
    assert report["totals"]["batch_events"] == truth.unique_events
    reconciled_s = time.monotonic() - started

    assert_exactly_once(request.getfixturevalue("spark"), config, truth)
    print(
        f"worker 1 killed {killed_at:.1f}s in, after {batches_before_kill} committed batch(es); "
        f"job restarts {restarts}; stream done at {stream_s:.1f}s, reconciled at {reconciled_s:.1f}s, "
        f"verified at {time.monotonic() - started:.1f}s"
    )
