"""The compose deployment, built and run end to end on a private Docker engine (issue 37).

``make test-deploy`` runs it (about 40 minutes here; CI runs test_images.py instead). The steps
are docs/deployment.md's "first start", in the same order, on the machine's terms: every service
on the host's network at ports the test chose, nothing pulled, the base images Debian stand-ins.

1. build both images from the Dockerfiles users build (bases swapped by build argument);
2. write docker/.env with strong secrets, ``docker compose up -d`` (PostgreSQL, Kafka and its
   topic, the Spark master and a worker, airflow-init, the Airflow api-server, scheduler,
   dag-processor and triggerer);
3. a producer container publishes the Kafka pipeline's records, with history from before the last
   complete hour; the DAGs are unpaused with the CLI, as a user would;
4. wait for the stream's first batch (driver in the scheduler container, executors on the worker),
   the scheduler's own reconciliation run of the first hour (all four tasks, the Asset event) and
   the view and the hour's report in a logged-in browser;
5. faults: ``docker compose restart airflow-scheduler`` and ``docker kill`` of the Spark worker,
   mid-stream; the stream resumes both times;
6. ``docker compose down`` (volumes kept) and ``up``: the stream resumes from its checkpoint and
   the next hour is reconciled;
7. the tables are exact against what was published (0 lost, 0 duplicated), and the timings are
   reported (var/deploy/report.json).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import harness as h
import pytest

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(4800)]

PIPELINE = "orders"
SUPERVISOR = f"tidemark_stream_supervisor__{PIPELINE}"
RECONCILIATION = f"tidemark_reconciliation__{PIPELINE}"
HOUR = 3_600_000
HOSTS = 200
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


class Deployment:
    """The running compose project: commands, the REST API as admin, the shared volume."""

    def __init__(self, engine: h.Engine, work: Path, first_hour_ms: int):
        self.engine, self.work = engine, work
        self.ports = h.Ports.free()
        self.env = h.secrets_env()
        self.alerts: list[dict] = []
        self.webhook = self._receiver()
        self.env["AIRFLOW_CONN_TIDEMARK_WEBHOOK"] = json.dumps(
            {"conn_type": "http", "host": "127.0.0.1", "schema": "http", "port": self.webhook}
        )
        self.volume = work / "var"
        self.volume.mkdir(parents=True, exist_ok=True)
        os.chmod(self.volume, 0o777)  # the containers' uid 50000 writes it
        project = h.project_dir(work, self.env, {PIPELINE: h.orders_pipeline(self.ports, first_hour_ms)})
        override = h.dump_yaml(
            h.host_override(self.ports, self.volume, self.env["POSTGRES_PASSWORD"]), work / "override.yml"
        )
        self.compose_file = h.merged_compose(engine, project, override, work / "compose.yml")
        self._token: str | None = None

    def _receiver(self) -> int:
        alerts = self.alerts

        class Hook(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                alerts.append({"path": self.path, "body": body.decode(errors="replace")})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server.server_address[1]

    def compose(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        done = subprocess.run(
            ["docker-compose", "-f", str(self.compose_file), *args],
            env={**self.engine.env, **h.COMPOSE_ENV},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"docker-compose {' '.join(args)}: {done.stderr.strip()[-3000:]}")
        return done

    def container(self, service: str) -> str:
        return f"{h.COMPOSE_PROJECT}_{service}_1"

    def exec(self, service: str, *command: str) -> str:
        return self.engine.docker("exec", self.container(service), *command).stdout

    def password(self) -> str:
        text = self.exec("airflow-apiserver", "cat", "/opt/airflow/auth/simple_auth_manager_passwords.json")
        return json.loads(text)["admin"]

    def api(self, path: str, body: dict | None = None, method: str | None = None):
        base = f"http://127.0.0.1:{self.ports.api}"
        for attempt in (0, 1):
            if self._token is None:
                self._token = self._request(
                    f"{base}/auth/token", None, {"username": "admin", "password": self.password()}
                )["access_token"]
            try:
                return self._request(base + path, self._token, body, method)
            except urllib.error.HTTPError as exc:
                if exc.code != 401 or attempt:
                    raise
                self._token = None  # expired, or the api-server came back with a new secret

    @staticmethod
    def _request(url: str, token: str | None, body: dict | None = None, method: str | None = None):
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def table(self, name: str):
        from deltalake import DeltaTable

        path = self.volume / "warehouse" / PIPELINE / name
        if not (path / "_delta_log").is_dir():
            return None
        return DeltaTable(str(path)).to_pandas()

    def last_batch(self) -> int:
        marks = self.table("watermarks")
        return -1 if marks is None or marks.empty else int(marks["batch_id"].max())

    def hour_runs(self, start_ms: int) -> list[dict]:
        from tidemark.timeutil import parse_instant_ms

        runs = self.api(f"/api/v2/dags/{RECONCILIATION}/dagRuns?limit=100")["dag_runs"]
        return [
            r
            for r in runs
            if r.get("data_interval_start") and parse_instant_ms(r["data_interval_start"]) == start_ms
        ]

    def task_states(self, run_id: str) -> dict[str, str]:
        path = f"/api/v2/dags/{RECONCILIATION}/dagRuns/{urllib.request.quote(run_id, safe='')}/taskInstances"
        return {ti["task_id"]: ti["state"] for ti in self.api(path)["task_instances"]}


def wait(what: str, check, timeout: float, every: float = 5.0):
    h.log(f"waiting for {what} (at most {timeout:.0f} s)")
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (urllib.error.URLError, ConnectionError, RuntimeError, OSError) as exc:
            last = f"{type(exc).__name__}: {exc}"[:300]
        else:
            if last:
                h.log(f"... {what}: done in {timeout - (deadline - time.monotonic()):.0f} s")
                return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def all_healthy(d: Deployment) -> bool:
    for service in h.SERVICES:
        state = h.inspect(d.engine, d.container(service))["State"]
        if service in ("airflow-init", "kafka-init"):
            if state["Status"] != "exited" or state["ExitCode"] != 0:
                return False
        elif state.get("Health", {}).get("Status") != "healthy":
            return False
    return True


def up(d: Deployment) -> None:
    d.compose("up", "-d", "--no-build", *h.SERVICES)


def topic_records(spark, d: Deployment) -> list[str]:
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", f"127.0.0.1:{d.ports.kafka}")
        .option("subscribe", "orders")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("CAST(value AS STRING) AS v")
        .collect()
    )
    return [r["v"] for r in rows]


def reconciled(d: Deployment, start_ms: int) -> dict | None:
    """The scheduler's own run of the hour, once it and its six tasks succeeded."""
    runs = [r for r in d.hour_runs(start_ms) if r["run_type"] == "scheduled"]
    if not runs or runs[0]["state"] != "success":
        assert not runs or runs[0]["state"] != "failed", (runs[0], d.task_states(runs[0]["dag_run_id"]))
        return None
    return runs[0]


def test_the_compose_deployment_end_to_end(engine, images, spark, tmp_path):
    from helpers import oracle_good_records, oracle_window_counts

    from tidemark.timeutil import format_instant_ms, parse_instant_ms

    report = dict(images)
    # the compose file's other images: only this test needs them (the image tests build their bases)
    report["compose_standins_s"] = round(h.build_standins(engine, h.COMPOSE_STANDINS), 1)
    # Two complete hours of history: the scheduler's catchup (airflow.reconcile_start) creates a
    # run for each; the first is reconciled before the faults, the second after down and up.
    now = int(time.time() * 1000)
    first_hour = (now // HOUR - 2) * HOUR
    next_hour = first_hour + HOUR
    d = Deployment(engine, tmp_path, first_hour)

    # 2. up
    started = time.monotonic()
    up(d)
    wait("every service healthy", lambda: all_healthy(d), 600)
    report["up_to_healthy_s"] = round(time.monotonic() - started, 1)
    networks = engine.docker("network", "ls", "--format", "{{.Name}}").stdout.split()
    assert sorted(networks) == ["host", "none"], f"a network of its own was created: {networks}"

    # 3. the producer: history from 10 minutes before the first hour, then live for 30 minutes
    history = (int(time.time() * 1000) - first_hour) // 60_000 + 10
    h.run_image(
        engine,
        "airflow",
        f"exec tidemark generate --kafka 127.0.0.1:{d.ports.kafka} --topic orders --live --hosts {HOSTS}"
        f" --rate 6 --seed 11 --history {history} --minutes {history + 30}",
        "-d",
        "--name",
        f"{h.COMPOSE_PROJECT}-producer",
    )
    for dag_id in (SUPERVISOR, RECONCILIATION):
        d.exec("airflow-apiserver", "airflow", "dags", "unpause", dag_id)

    # 4a. the stream's first batch with data, driver in the scheduler, executors on the worker
    wait("the stream's first batch", lambda: d.last_batch() >= 1, 600)
    report["up_to_first_batch_s"] = round(time.monotonic() - started, 1)
    master = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{d.ports.spark_master_ui}/json/").read())
    apps = [a for a in master["activeapps"] if PIPELINE in a["name"]]
    assert apps, master["activeapps"]
    worker = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{d.ports.spark_worker_ui}/json/").read())
    assert any(e["appid"] == apps[0]["id"] for e in worker["executors"]), worker["executors"]
    drivers = d.exec(
        "airflow-scheduler", "bash", "-c", "ps -eo args | grep -c '[S]parkSubmit.*stream' || true"
    )
    assert int(drivers.strip() or 0) >= 1, "the stream's driver is not in the scheduler container"

    # 4b. the scheduler's own run of the first hour: six tasks (on-time and final passes), the Asset event
    run = wait(
        f"the scheduled reconciliation of {format_instant_ms(first_hour)}",
        lambda: reconciled(d, first_hour),
        1500,
        10,
    )
    report["up_to_first_reconciled_hour_s"] = round(time.monotonic() - started, 1)
    states = d.task_states(run["dag_run_id"])
    assert set(states.values()) == {"success"} and len(states) == 6, states
    events = d.api(f"/api/v2/assets/events?source_dag_id={RECONCILIATION}")["asset_events"]
    assert any(e["extra"].get("start") == format_instant_ms(first_hour) for e in events), events
    # the next hour waits while the faults run (a user pauses a DAG in the UI the same way)
    # (the scheduler leaves a paused DAG's runs alone)
    d.exec("airflow-apiserver", "airflow", "dags", "pause", RECONCILIATION)
    paused_at = time.time()

    # 4c. the view and the hour's report, served by the api-server to a logged-in user
    browse(d, first_hour, tmp_path)

    # 5a. restart the scheduler container: the pid the supervisor recorded is gone (a new pid
    # namespace; the number may even be another process's now): it must say DEAD and start the
    # stream again, never signal what it finds under that number
    before, restarted_at = d.last_batch(), time.time()
    d.compose("restart", "airflow-scheduler")
    wait("the stream to resume after the scheduler restart", lambda: d.last_batch() > before + 1, 900)
    verdicts = [v for t, v in supervisor_verdicts(d) if t > restarted_at]
    assert any(v["state"] == "DEAD" for v in verdicts), verdicts
    assert not any(v["state"] == "HUNG" for v in verdicts), f"a kill was attempted: {verdicts}"
    report["scheduler_restart_verdicts"] = verdicts
    # 5b. kill the Spark worker mid-stream; `docker kill` counts as a manual stop, so the restart
    # policy leaves it down: the operator starts it again (a crash inside it restarts by itself)
    before = d.last_batch()
    engine.docker("kill", d.container("spark-worker-1"))
    time.sleep(20)
    d.compose("start", "spark-worker-1")
    wait("the stream to resume after the worker was killed", lambda: d.last_batch() > before + 1, 900)

    # 6. down with the volumes kept, up again: resumes from the checkpoint, next hour reconciled
    before = d.last_batch()
    d.compose("down")
    up(d)
    wait("every service healthy after down/up", lambda: all_healthy(d), 600)
    d.exec("airflow-apiserver", "airflow", "dags", "unpause", RECONCILIATION)
    wait("the stream to resume after down and up", lambda: d.last_batch() > before + 1, 900)
    run = wait(
        f"the reconciliation of {format_instant_ms(next_hour)}", lambda: reconciled(d, next_hour), 1500, 10
    )
    assert parse_instant_ms(run["end_date"]) / 1000 > paused_at, f"reconciled before the faults: {run}"
    report["next_hour_reconciled"] = format_instant_ms(next_hour)

    # 7. exactly once against what was published
    producer = f"{h.COMPOSE_PROJECT}-producer"
    wait("the producer to finish", lambda: not h.inspect(engine, producer)["State"]["Running"], 2400, 15)
    assert h.inspect(engine, producer)["State"]["ExitCode"] == 0, engine.docker("logs", producer).stderr[
        -2000:
    ]
    published = topic_records(spark, d)
    landing = tmp_path / "published"
    landing.mkdir()
    (landing / "topic.jsonl").write_text("\n".join(published) + "\n")
    truth = oracle_good_records(landing)
    wait("the stream to store every record", lambda: len(d.table("events")) >= len(truth), 900)
    time.sleep(30)  # two more triggers: nothing more may arrive
    events = d.table("events")
    keys = set(zip(events["host"], events["event_id"], events["event_time"], strict=True))
    assert len(events) == len(keys), "a record stored twice"
    assert keys == {k[:3] for k in truth}, "lost or extra records"
    windows = d.table("windows")
    assert windows is not None
    report["published"] = len(published)
    report["stored"] = len(events)
    report["lost"] = len({k[:3] for k in truth} - keys)
    report["duplicated"] = len(events) - len(keys)
    counts = oracle_window_counts(landing)
    report["oracle_windows"] = len(counts)
    out = h.REPO / "var" / "deploy"
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    h.log(f"report: {json.dumps(report)}")
    d.compose("down", "-v")


def supervisor_verdicts(d: Deployment) -> list[tuple[float, dict]]:
    """(start time, liveness) of every supervisor check, as its check_stream task pushed it."""
    from tidemark.timeutil import parse_instant_ms

    out = []
    for run in d.api(f"/api/v2/dags/{SUPERVISOR}/dagRuns?limit=100")["dag_runs"]:
        if not run.get("start_date"):
            continue
        path = (
            f"/api/v2/dags/{SUPERVISOR}/dagRuns/{urllib.request.quote(run['dag_run_id'], safe='')}"
            "/taskInstances/check_stream/xcomEntries/liveness"
        )
        try:
            value = d.api(path)["value"]
        except urllib.error.HTTPError:
            continue
        value = json.loads(value) if isinstance(value, str) else value
        out.append((parse_instant_ms(run["start_date"]) / 1000, value))
    return out


def browse(d: Deployment, hour_ms: int, tmp_path: Path) -> None:
    from helpers import open_hour_report, sign_in
    from playwright.sync_api import expect, sync_playwright

    from tidemark.timeutil import format_instant_ms

    base = f"http://127.0.0.1:{d.ports.api}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            sign_in(page, base, "admin", d.password())
            page.goto(f"{base}/tidemark/", wait_until="domcontentloaded")
            section = page.locator(f'section[data-pipeline="{PIPELINE}"]')
            expect(section.locator("td.watermark")).to_have_text(
                re.compile(r"^\d{4}-\d\d-\d\dT"), timeout=60_000
            )
            report = open_hour_report(page, section, PIPELINE, format_instant_ms(hour_ms))
            report.screenshot(path=str(tmp_path / "hour_report.png"), full_page=True)
        finally:
            browser.close()
