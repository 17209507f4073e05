"""One Spark standalone cluster (scripts/spark_cluster.sh: a master and two 1-core, 1 GB workers on
loopback, free ports) for every test in tests/cluster; stopped after the last of them, also when
one fails. Jobs reach it with spark-submit and the code archive (``--py-files``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tidemark.config import PipelineConfig
from tidemark.generator import Truth
from tidemark.packaging import spark_submit_command, submit_env

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "spark_cluster.sh"
JOB_TIMEOUT_S = 600  # a hang, not a slow machine: 2 shared cores can be very slow


def free_port(preferred: int | None = None) -> int:
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
        # Any free port, never a preferred one: two xdist workers each start a cluster, and both
        # finding 7077 free at once once put both clusters' workers on one master.
        port = int(os.environ.get("TIDEMARK_SPARK_MASTER_PORT") or free_port())
        self.ui_port = free_port()
        self.url = f"spark://127.0.0.1:{port}"
        self.env = {
            **os.environ,
            "TIDEMARK_SPARK_CLUSTER_DIR": str(directory),
            "TIDEMARK_SPARK_MASTER_PORT": str(port),
            "TIDEMARK_SPARK_MASTER_UI_PORT": str(self.ui_port),
            "TIDEMARK_SPARK_WORKER_MEMORY": "1g",
        }

    def run(self, action: str) -> str:
        done = subprocess.run(
            [str(SCRIPT), action], env=self.env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, f"spark_cluster.sh {action}: {done.stdout}{done.stderr}"
        return done.stdout

    def master_state(self) -> dict:
        """The master's own view (its web UI's /json): workers, running and completed applications."""
        import json
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=10) as answer:
            return json.load(answer)

    def worker_pid(self, index: int) -> int:
        return int((self.directory / f"worker-{index}.pid").read_text())

    def processes_of_worker(self, index: int) -> list[str]:
        pgid = self.worker_pid(index)
        ps = subprocess.run(["ps", "-ww", "-eo", "pgid=,args="], capture_output=True, text=True, check=True)
        return [line.split(None, 1)[1] for line in ps.stdout.splitlines() if int(line.split()[0]) == pgid]

    def kill_worker(self, index: int) -> None:
        """SIGKILL the worker's process group: the worker, its executor and their Python workers."""
        os.killpg(self.worker_pid(index), signal.SIGKILL)


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    spark_cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        started = time.monotonic()
        out = spark_cluster.run("start")
        print(f"cluster started in {time.monotonic() - started:.1f}s: {out.strip()}")
        yield spark_cluster
    finally:
        spark_cluster.run("stop")


@pytest.fixture(scope="package")
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


def job_env() -> dict[str, str]:
    return submit_env({**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "TIDEMARK_SPARK_LOG_LEVEL": "WARN"})


class Jobs:
    """spark-submit on the cluster; whatever is still running at teardown is killed with its JVM."""

    def __init__(self, cluster: SparkCluster, executor_python: str) -> None:
        self.cluster, self.executor_python = cluster, executor_python
        self.running: list[subprocess.Popen] = []

    def conf(self) -> dict[str, str]:
        return {
            "spark.pyspark.python": self.executor_python,
            "spark.pyspark.driver.python": sys.executable,
            "spark.executor.memory": "1g",
        }

    def submit(self, job: str, args: list[str], log: Path, stdout: Path | None = None) -> subprocess.Popen:
        command = spark_submit_command(job, args, master=self.cluster.url, conf=self.conf())
        return self.start(command, job_env(), log, stdout)

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


def committed_batches(config) -> int:
    from tidemark.tables import read_local, table_exists

    path = config.table_path("watermarks")
    return len(read_local(path)) if table_exists(path) else 0


@dataclass
class KilledWorkerRun:
    """A small scenario streamed on the cluster with worker 1 SIGKILLed after the first commit."""

    config: PipelineConfig
    config_path: Path
    pipelines_dir: Path
    truth: Truth
    batches_before_kill: int
    victims: list[str]
    killed_pid: int
    survivor_pid: int
    restarts: int
    output: str
    restart_output: str
    timings: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="package")
def stream_with_a_worker_killed(cluster, executor_python, tmp_path_factory) -> KilledWorkerRun:
    """stream_job.py --once on the cluster; worker 1 (with its executor) is SIGKILLed once a batch
    has committed; a failed job is restarted from its checkpoint (at most twice); then
    ``spark_cluster.sh start`` brings the killed worker back. Its pipeline YAML lives alone in a
    pipelines directory, so Airflow can also take it as its TIDEMARK_PIPELINES_DIR."""
    from helpers import small_scenario, write_config

    from tidemark.generator import generate_files

    root = tmp_path_factory.mktemp("killed-worker")
    pipelines = root / "pipelines"
    pipelines.mkdir()
    # 4 files per trigger: a few batches, so there is a "mid-stream" without many fixed batch costs
    config = write_config(
        pipelines,
        name="cluster",
        source={"path": str(root / "landing"), "max_files_per_trigger": 4},
        warehouse=str(root / "warehouse"),
        checkpoint=str(root / "checkpoints" / "cluster"),
        airflow={"reconcile_grace": "0s"},
        # 2 of 50 hosts lag on purpose at precision 0.96: their late records cost one window up to
        # 4% alignment; the exactness checks are on `unexplained`, which must stay 0.
        reconcile={"target": 0.95},
        quality={"thresholds": {"max_late_share": 0.05}},  # the same 4%, for the suites
    )
    config_path = pipelines / "cluster.yaml"
    truth = generate_files(small_scenario(), config.source.path)
    jobs = Jobs(cluster, executor_python)
    log = root / "stream.log"
    stream_args = ["--config", str(config_path), "--once"]
    started = time.monotonic()
    try:
        job = jobs.submit("stream_job.py", stream_args, log)
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while committed_batches(config) < 1 and job.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        batches_before_kill = committed_batches(config)
        assert job.poll() is None and batches_before_kill >= 1, (
            f"no mid-stream moment:\n{log.read_text()[-3000:]}"
        )
        victims, killed_pid = cluster.processes_of_worker(1), cluster.worker_pid(1)
        cluster.kill_worker(1)
        timings = {"killed": time.monotonic() - started}
        restarts = 0
        code = jobs.wait(job, log, max(deadline - time.monotonic(), 60))
        while code != 0 and restarts < 2:  # the job failed with its executor: restart from the checkpoint
            restarts += 1
            code = jobs.wait(jobs.submit("stream_job.py", stream_args, log), log, JOB_TIMEOUT_S)
        assert code == 0, log.read_text()[-3000:]
        timings["stream done"] = time.monotonic() - started
        survivor_pid = cluster.worker_pid(2)
        restart_output = cluster.run("start")  # idempotent: brings back only the killed worker
        timings["worker back"] = time.monotonic() - started
    finally:
        jobs.kill_all()
    return KilledWorkerRun(
        config=config,
        config_path=config_path,
        pipelines_dir=pipelines,
        truth=truth,
        batches_before_kill=batches_before_kill,
        victims=victims,
        killed_pid=killed_pid,
        survivor_pid=survivor_pid,
        restarts=restarts,
        output=log.read_text(),
        restart_output=restart_output,
        timings=timings,
    )
