"""``make run``: the whole platform on one machine, for a person to open in a browser.

Starts, under ``var/platform/`` (or ``--root``):

* Airflow 3 with its own components (API server with the UI, scheduler, DAG processor,
  triggerer), the LocalExecutor and a SQLite metadata DB; Airflow's Simple auth manager, whose
  generated password is printed (nothing is hard-coded in the repository);
* a live generator writing the landing zone with event time ~ now (``tidemark generate --live``),
  starting with the history since the start of the last hour that had settled at start-up (the
  previous one, or the one before it just after the top of the hour), so one complete past hour
  is there at once; in it one host (the precision lets exactly one lag) is cut off for minutes
  27-31 of the history, so its records of the minutes before the stream's 30-minute batch
  boundary (60 files of 10 s a batch) arrive after their windows closed, within the allowed
  lateness: the past hour's on-time pass shows them missing, its final pass folded in;
* the pipeline config ``pipelines/live.yaml``, which makes the Tidemark DAGs appear, with
  ``airflow.reconcile_start`` at that past hour, and the Airflow pool its Spark tasks run in. The
  stream supervisor DAG then starts the streaming job with the Spark provider and keeps it alive;
  the scheduler's catchup run reconciles the past hour as soon as the watermark has passed it,
  and every later hour after it ends.

Ctrl-C (or SIGTERM) stops everything it started, the streaming job included.
Run: ``python -m tidemark_airflow.launcher [--port 8080] [--hosts 1000]`` (``make run``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from tidemark.timeutil import MS_PER_HOUR, MS_PER_MINUTE, format_instant_ms, now_ms, parse_duration_ms
from tidemark_airflow.pipelines import load_pipeline
from tidemark_airflow.pools import sync_pools

# The metadata database of `make run` is SQLite (WAL, as Airflow sets it), written by the scheduler,
# the dag-processor, the triggerer, the API server and the LocalExecutor's workers at once. Python's
# sqlite3 gives up on a lock after 5 s, and a busy 2-core machine held one longer (an API write
# failed with a 500 while the stream and a reconcile ran); 60 s waits the writer out.
# [database] sql_alchemy_connect_args names this dict.
SQLITE_CONNECT_ARGS = {"timeout": 60}

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
# the landing files' span and how many a batch takes: a batch covers 10 minutes of the history
FILE_SPAN_S, FILES_PER_TRIGGER = 10, 60


# How long after an hour's end its records have all landed (the collectors' delays and the last
# landing file); the allowed lateness counts towards settling up to SETTLE_LATENESS_CAP_MS.
SETTLE_MARGIN_MS = 2 * MS_PER_MINUTE
SETTLE_LATENESS_CAP_MS = 10 * MS_PER_MINUTE


def first_hour_ms(now: int, allowed_lateness_ms: int) -> int:
    """The first hour the scheduler reconciles: the last complete hour that had settled at ``now``
    (its end + the allowed lateness, at most 10 minutes, + a 2-minute margin). Just after the top of
    an hour that is the hour before the previous one: the scheduled run then reconciles history
    the stream works through at once, instead of waiting on the clock for the previous hour's last
    records and lateness (with a short lateness, as the platform test sets)."""
    settled = now - min(allowed_lateness_ms, SETTLE_LATENESS_CAP_MS) - SETTLE_MARGIN_MS
    return (settled // MS_PER_HOUR - 1) * MS_PER_HOUR


def dags_folder() -> Path:
    """The DAG files shipped with the installed package (``tidemark_airflow.dags``)."""
    from importlib.resources import files

    return Path(str(files("tidemark_airflow.dags")))


class Platform:
    def __init__(
        self,
        root: Path,
        port: int = 8080,
        hosts: int = 1000,
        minutes: int = 240,
        rate: int = 6,
        users: str = "admin:admin",
        allowed_lateness: str = "1h",
        statsd_port: int | None = None,
        trigger_interval: str = "10s",
    ) -> None:
        self.root = root.resolve()
        # Airflow's own metrics (scheduler heartbeats, DAG runs, task outcomes) go out as StatsD
        # over UDP to 127.0.0.1 (nothing is lost or logged when no one listens): point a
        # statsd_exporter or an agent at it (docs/operations.md#airflows-own-metrics).
        self.statsd_port = statsd_port or int(os.environ.get("TIDEMARK_STATSD_PORT") or 8125)
        self.users = users  # Simple auth manager's "user:role,..." (passwords are generated)
        self.port = port
        self.hosts, self.minutes, self.rate = hosts, minutes, rate
        self.allowed_lateness = allowed_lateness  # window.allowed_lateness of the live pipeline
        # the stream's micro-batch interval: how fast it works through the history, 10 min a batch
        self.trigger_interval = trigger_interval
        self.processes: dict[str, subprocess.Popen] = {}
        self.bin = Path(sys.executable).parent
        self.pipelines = self.root / "pipelines"
        self.config_path = self.pipelines / "live.yaml"
        self.first_hour_ms = first_hour_ms(now_ms(), parse_duration_ms(allowed_lateness))

    # -- environment ------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        home = self.root / "airflow"
        path = os.environ.get("PATH", "")
        return {
            **os.environ,
            "PATH": f"{self.bin}{os.pathsep}{path}",
            "AIRFLOW_HOME": str(home),
            # the DAG files shipped with the package; the view registers by its entry point
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder()),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.root / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            # deferrable sensors wait in the triggerer (which the launcher runs), not in a worker slot
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": self.users,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "tidemark_airflow.launcher.SQLITE_CONNECT_ARGS",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{self.port}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "20",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "20",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.statsd_port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "TIDEMARK_PIPELINES_DIR": str(self.pipelines),
            "AIRFLOW_CONN_TIDEMARK_SPARK": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        }

    def write_pipeline(self) -> None:
        self.pipelines.mkdir(parents=True, exist_ok=True)
        config = {
            "pipeline": "live",
            # the history's files come at once: a batch takes up to 60 of them (10 minutes)
            "source": {
                "kind": "files",
                "path": str(self.root / "landing"),
                "max_files_per_trigger": FILES_PER_TRIGGER,
            },
            "warehouse": str(self.root / "warehouse"),
            "checkpoint": str(self.root / "checkpoints" / "live"),
            "window": {"size": "1m", "allowed_lateness": self.allowed_lateness},
            # exactly one host may lag (1 - 1/N): the one the generator cuts off
            "watermark": {"precision": round(1 - 1 / self.hosts, 6)},
            "trigger_interval": self.trigger_interval,
            "spark": {"shuffle_partitions": 2},
            "airflow": {"reconcile_start": format_instant_ms(self.first_hour_ms), "reconcile_grace": "2m"},
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")

    # -- processes --------------------------------------------------------------------------
    def spawn(self, name: str, args: list[str]) -> None:
        logs = self.root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        out = open(logs / f"{name}.log", "ab")  # noqa: SIM115 (closed when the process is stopped)
        self.processes[name] = subprocess.Popen(
            args,
            env=self.env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def start(self, echo=print) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.write_pipeline()
        echo(f"platform: Airflow home {self.root / 'airflow'}; logs {self.root / 'logs'}")
        subprocess.run(
            [str(self.bin / "airflow"), "db", "migrate"],
            env=self.env(),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        sync_pools([load_pipeline(str(self.config_path))], str(self.bin / "airflow"), self.env(), echo)
        history = -(-(now_ms() - self.first_hour_ms) // MS_PER_MINUTE) + 1  # minutes, rounded up
        self.spawn(
            "generator",
            [
                str(self.bin / "tidemark"),
                "generate",
                "--out",
                str(self.root / "landing"),
                "--live",
                "--hosts",
                str(self.hosts),
                "--history",
                str(history),
                "--minutes",
                str(history + self.minutes),
                "--rate",
                str(self.rate),
                "--file-span",
                str(FILE_SPAN_S),
                # one host cut off across the stream's batch boundary at minute 30 of the history
                *("--lag-share", str(1 / self.hosts), "--lag-start", "27", "--lag-minutes", "4"),
            ],
        )
        for component in COMPONENTS:
            self.spawn(component, [str(self.bin / "airflow"), component])
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.port}/api/v2/monitor/health"
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode}; see {self.root / 'logs' / name}.log"
                    )
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(2)
        raise RuntimeError(f"Airflow API server not healthy at {url} after {timeout:.0f}s")

    def credentials(self, user: str = "admin") -> tuple[str, str]:
        path = self.root / "airflow" / "passwords.json"
        deadline = time.monotonic() + 60
        while not path.is_file() and time.monotonic() < deadline:
            time.sleep(1)
        users = json.loads(path.read_text(encoding="utf-8"))
        return user, users[user]

    def stop(self, echo=print) -> None:
        from tidemark.config import load_config
        from tidemark_airflow.hooks import StreamProcessHook

        if self.config_path.is_file():
            StreamProcessHook(load_config(self.config_path)).stop_recorded(timeout=20)
        for proc in reversed(list(self.processes.values())):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        deadline = time.monotonic() + 20
        for proc in self.processes.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        echo("platform: stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tidemark-platform", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="var/platform", help="state directory (default %(default)s)")
    parser.add_argument("--port", type=int, default=8080, help="Airflow UI/API port on 127.0.0.1")
    parser.add_argument("--hosts", type=int, default=1000, help="source hosts the live generator simulates")
    parser.add_argument("--minutes", type=int, default=240, help="how long the live generator runs")
    args = parser.parse_args(argv)
    platform = Platform(Path(args.root), args.port, args.hosts, args.minutes)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    try:
        platform.start()
        user, password = platform.credentials()
        print(
            f"\nTidemark is running: open http://127.0.0.1:{args.port}/  "
            f"(user {user}, password {password};\n"
            f"  Airflow's Simple auth manager generated it into "
            f"{platform.root / 'airflow' / 'passwords.json'}).\n"
            "  DAGs: tidemark_stream_supervisor__live starts the streaming job within a minute;\n"
            "  the Tidemark view is under Browse/Plugins -> Tidemark. Ctrl-C stops everything.\n",
            flush=True,
        )
        while all(p.poll() is None for n, p in platform.processes.items() if n != "generator"):
            time.sleep(2)
        dead = [n for n, p in platform.processes.items() if n != "generator" and p.poll() is not None]
        print(f"platform: {', '.join(dead)} exited; see {platform.root / 'logs'}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nplatform: stopping (Ctrl-C)")
        return 0
    finally:
        platform.stop()


if __name__ == "__main__":
    sys.exit(main())
