"""Production-style Airflow on this machine: PostgreSQL (scripts/postgres.sh) as the metadata
database, the LocalExecutor, an API server for the tasks' Execution API, and the reconciliation
DAG end to end against the Spark cluster of tests/cluster.

The DAG's recompute is submitted through the Airflow connection ``tidemark_spark``, stored in
PostgreSQL with ``airflow connections add`` and pointing at the test cluster; no master URL is in
the pipeline YAML nor in the environment. Airflow runs in subprocesses with their own environment,
so the SQLite settings tests/airflow/conftest.py puts into this pytest process do not leak in.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import oracle_good_records, small_scenario

from tidemark.timeutil import format_instant_ms

from .conftest import JOB_TIMEOUT_S, REPO, free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.airflow]

POSTGRES = REPO / "scripts" / "postgres.sh"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
PIPELINE = "cluster"  # the pipeline of the stream_with_a_worker_killed fixture
DAG_ID = f"tidemark_reconciliation__{PIPELINE}"


@pytest.fixture(scope="module")
def postgres_url():
    # Not under pytest's tmp_path: as root the server runs as `postgres`, which cannot enter
    # /tmp/pytest-of-root (mode 700).
    directory = Path(tempfile.mkdtemp(prefix="tidemark-pg-"))
    directory.chmod(0o755)
    env = {**os.environ, "TIDEMARK_POSTGRES_DIR": str(directory), "TIDEMARK_POSTGRES_PORT": str(free_port())}

    def run(action: str) -> str:
        done = subprocess.run([str(POSTGRES), action], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"postgres.sh {action}: {done.stdout}{done.stderr}"
        return done.stdout.strip()

    try:
        run("start")
        yield run("url")
    finally:
        subprocess.run([str(POSTGRES), "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(directory, ignore_errors=True)


class Airflow:
    """The ``airflow`` CLI and an API server, all with one environment of their own."""

    def __init__(self, home: Path, database_url: str, pipelines: Path) -> None:
        self.api_port = free_port()
        self.log = home / "airflow-commands.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TIDEMARK_SPARK"))}
        self.env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "2",
                "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.api_port}/execution/",
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
                "AIRFLOW__API__WORKERS": "1",
                "TIDEMARK_PIPELINES_DIR": str(pipelines),
                "TIDEMARK_SPARK_LOG_LEVEL": "WARN",
                "SPARK_LOCAL_IP": "127.0.0.1",
            }
        )
        self.api_server: subprocess.Popen | None = None

    def run(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout, cwd=REPO
        )
        with self.log.open("a") as log:
            log.write(f"$ airflow {' '.join(args)}\n{done.stdout}{done.stderr}\n")
        assert done.returncode == 0, f"airflow {' '.join(args)}:\n{(done.stdout + done.stderr)[-4000:]}"
        return done.stdout

    def start_api_server(self, log: Path, timeout: float = 240) -> None:
        with log.open("ab") as out:
            self.api_server = subprocess.Popen(
                [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(self.api_port)],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.api_server.poll() is None, f"api-server exited:\n{log.read_text()[-3000:]}"
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/api/v2/version", timeout=5)
                return
            time.sleep(1)
        pytest.fail(f"api-server did not answer within {timeout:.0f}s:\n{log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.api_server and self.api_server.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.api_server.pid, signal.SIGTERM)
            try:
                self.api_server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.api_server.pid, signal.SIGKILL)
                self.api_server.wait()


@pytest.fixture
def airflow(postgres_url, stream_with_a_worker_killed, tmp_path):
    instance = Airflow(tmp_path / "airflow-home", postgres_url, stream_with_a_worker_killed.pipelines_dir)
    try:
        yield instance
    finally:
        instance.stop()


def _task_log(airflow: Airflow, task_id: str) -> str:
    logs = sorted((Path(airflow.env["AIRFLOW_HOME"]) / "logs").rglob(f"*task_id={task_id}/*.log"))
    return "\n".join(p.read_text(errors="replace") for p in logs)[-6000:]


def _database_rows(url: str, query: str, **params) -> list[tuple]:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(sa.text(query), params)]
    finally:
        engine.dispose()


def _database_update(url: str, statement: str, **params) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            return conn.execute(sa.text(statement), params).rowcount
    finally:
        engine.dispose()


def test_reconciliation_dag_on_postgres_and_local_executor_submits_through_the_spark_connection(
    cluster, stream_with_a_worker_killed, airflow, postgres_url, tmp_path
):
    # The pipeline the cluster streamed (with a worker killed); its YAML names no master, so the
    # cluster is known to Airflow only through the tidemark_spark connection.
    run = stream_with_a_worker_killed
    config, scenario = run.config, small_scenario()
    assert config.spark.master is None and config.airflow.spark_conn_id == "tidemark_spark"
    assert "TIDEMARK_SPARK_MASTER" not in airflow.env
    started = time.monotonic()
    timings = {}
    airflow.run("db", "migrate", timeout=600)
    timings["db migrated"] = time.monotonic() - started
    airflow.run(
        "connections",
        "add",
        "tidemark_spark",
        "--conn-uri",
        f"{cluster.url}?deploy-mode=client&spark-binary=spark-submit",
    )
    airflow.start_api_server(tmp_path / "api-server.log")
    timings["api-server up"] = time.monotonic() - started

    start, end = scenario.start_ms, scenario.start_ms + 5 * 60_000
    apps_before = {a["id"] for a in cluster.master_state()["completedapps"]}
    run_conf = json.dumps({"start": format_instant_ms(start), "end": format_instant_ms(end)})
    test_log = tmp_path / "dags-test.log"
    with test_log.open("w") as out:
        dags_test = subprocess.Popen(
            # The bounded scenario's watermark stops at its last minute, short of the range's end +
            # the default allowed lateness (1h): its windows never become final, so the final
            # pass's wait is marked done (both passes: tests/airflow/test_platform_browser.py).
            # (`--mark-success-pattern` is not honoured with `--use-executor`: the loop below
            # marks the wait done in the database once it has poked, as a user would in the UI.)
            [AIRFLOW, "dags", "test", "--use-executor", DAG_ID, "--conf", run_conf],
            env=airflow.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
    deadline = time.monotonic() + JOB_TIMEOUT_S
    state_query = "SELECT task_id, state FROM task_instance WHERE dag_id = :dag"
    run_query = "SELECT state FROM dag_run WHERE dag_id = :dag"
    failed_task, hung_after_success = None, False
    while dags_test.poll() is None and time.monotonic() < deadline:
        # A failed try would wait out the DAG's retry delays; stop at the first one instead.
        states = dict(_database_rows(postgres_url, state_query, dag=DAG_ID))
        if states.get("wait_for_final") in ("up_for_reschedule", "deferred"):
            _database_update(
                postgres_url,
                "UPDATE task_instance SET state = 'success'"
                " WHERE dag_id = :dag AND task_id = 'wait_for_final'",
                dag=DAG_ID,
            )
        failed_task = next((t for t, st in states.items() if st in ("up_for_retry", "failed")), None)
        if failed_task:
            break
        if _database_rows(postgres_url, run_query, dag=DAG_ID) == [("success",)]:
            # The run is over. Airflow's LocalExecutor can then hang for good joining its workers
            # in end() (apache/airflow#67870; seen here once, 8 minutes after the run succeeded):
            # give the command a minute to exit, and record a hang rather than wait it out.
            try:
                dags_test.wait(timeout=60)
            except subprocess.TimeoutExpired:
                hung_after_success = True
            break
        time.sleep(3)
    if dags_test.poll() is None:
        os.killpg(dags_test.pid, signal.SIGKILL)
        dags_test.wait()
    timings["dag done"] = time.monotonic() - started
    output = test_log.read_text()
    assert failed_task is None and (dags_test.returncode == 0 or hung_after_success), (
        f"{failed_task} failed:\n{_task_log(airflow, failed_task) if failed_task else output[-4000:]}"
    )
    assert _database_rows(postgres_url, run_query, dag=DAG_ID) == [("success",)], output[-4000:]
    if hung_after_success:
        print("airflow dags test hung in LocalExecutor.end() after the run succeeded; stopped it")

    # Metadata in PostgreSQL: the connection, and every task run by a LocalExecutor worker process
    # (not in the `dags test` process itself).
    stored = _database_rows(
        postgres_url, "SELECT conn_type, host, port FROM connection WHERE conn_id = 'tidemark_spark'"
    )
    assert stored == [("spark", "127.0.0.1", int(cluster.url.rsplit(":", 1)[1]))]
    tasks = _database_rows(
        postgres_url,
        "SELECT ti.task_id, ti.state, ti.pid, ti.id FROM task_instance ti JOIN dag_run dr "
        "ON dr.dag_id = ti.dag_id AND dr.run_id = ti.run_id WHERE ti.dag_id = :dag",
        dag=DAG_ID,
    )
    ran = ["wait_for_close", "reconcile_on_time", "reconcile_final", "data_quality", "check_alignment"]
    states = {t[0]: t[1] for t in tasks}
    assert {t: states.get(t) for t in [*ran, "wait_for_final"]} == dict.fromkeys(
        [*ran, "wait_for_final"], "success"
    ), output[-4000:]
    # Each task's workload ran under a LocalExecutor worker's supervisor, which logs its end. (The
    # scheduler's "TaskInstance Finished ... executor=LocalExecutor" line is not proof either way:
    # when the last task ends first, the run can finish and the executor shut down before the
    # event of a task whose supervisor is still exiting is logged.)
    ids = {t[0]: t[3] for t in tasks}
    for task_id in ran:
        finished = rf"Workload finished .*final_state=success .*workload_id={ids[task_id]}"
        assert re.search(finished, output), f"{task_id} was not run by the LocalExecutor:\n{output[-4000:]}"
    assert all(t[2] and t[2] != dags_test.pid for t in tasks if t[0] in ran), (
        f"tasks did not run in executor workers: {tasks}"
    )

    # The recompute and the data-quality job ran on the cluster the connection names.
    new_apps = [a for a in cluster.master_state()["completedapps"] if a["id"] not in apps_before]
    names = sorted(a["name"] for a in new_apps)
    assert len(names) == 3 and "quality" in names[0] and all("reconcile" in n for n in names[1:]), new_apps

    # What the DAG wrote and published.
    import pandas as pd

    from tidemark.tables import read_local

    rows = read_local(config.table_path("reconciliation"))
    window_ms = (rows["window_start"] - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    rows = rows[(window_ms >= start) & (window_ms < end)]
    assert len(rows) == 5 and set(rows["status"]) == {"closed"}, rows
    assert (rows["unexplained"] == 0).all() and (rows["alignment"] >= config.reconcile.target).all(), rows
    assert rows["batch_events"].sum() == rows["stream_events"].sum() + rows["late_events"].sum()
    oracle = oracle_good_records(Path(config.source.path))
    assert len(oracle) == run.truth.unique_events
    assert rows["batch_events"].sum() == sum(1 for r in oracle.values() if start <= r["event_time"] < end)
    events = _database_rows(
        postgres_url,
        "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = :name",
        name=f"tidemark.{PIPELINE}.reconciled",
    )
    assert len(events) == 1
    extra = events[0][0] if isinstance(events[0][0], dict) else json.loads(events[0][0])
    assert extra["windows"] == 5 and extra["aligned_share"] == 1.0
    assert (extra["start"], extra["end"]) == (format_instant_ms(start), format_instant_ms(end))
    print("timings (s from start): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
