"""Every Airflow setting the project sets is one Airflow 3.3 knows, under its current name.

Airflow 3 moved options between sections (``[scheduler] min_file_process_interval`` is now
``[dag_processor] min_file_process_interval``); an old name is ignored without an error, so the
setting silently does nothing. The launcher (``make run``), the docker compose services and the
example env file are read as the user starts them.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tidemark_airflow.launcher import Platform

REPO = Path(__file__).resolve().parents[2]
SETTING = re.compile(r"^AIRFLOW__([A-Z0-9_]+?)__([A-Z0-9_]+)$")


def _settings(names) -> set[tuple[str, str]]:
    found = set()
    for name in names:
        match = SETTING.match(name)
        if match:
            found.add((match[1].lower(), match[2].lower()))
    return found


def _compose_names() -> set[str]:
    compose = yaml.safe_load((REPO / "docker" / "docker-compose.yml").read_text(encoding="utf-8"))
    names = set()
    for service in compose["services"].values():
        names |= set((service.get("environment") or {}).keys())
    return names


def _env_example_names() -> set[str]:
    text = (REPO / "docker" / ".env.example").read_text(encoding="utf-8")
    return {line.split("=", 1)[0].lstrip("# ").strip() for line in text.splitlines() if "=" in line}


def test_every_airflow_setting_the_launcher_and_docker_set_is_a_current_airflow_option(tmp_path):
    from airflow.configuration import conf

    known = {
        (section, option)
        for section, spec in conf.configuration_description.items()
        for option in (spec.get("options") or {})
    }
    launcher = _settings(Platform(tmp_path).env())
    docker = _settings(_compose_names() | _env_example_names())
    assert ("dag_processor", "min_file_process_interval") in launcher  # the check sees what is set
    unknown = sorted(f"[{s}] {o}" for s, o in launcher | docker if (s, o) not in known)
    assert unknown == [], f"not Airflow 3.3 options (renamed or removed): {unknown}"


WRITER = """
import sys, time
import sqlalchemy
from airflow.settings import _get_connect_args

engine = sqlalchemy.create_engine(sys.argv[1], connect_args=_get_connect_args("sync"))
print("ready", flush=True)
started = time.monotonic()
with engine.begin() as connection:
    connection.exec_driver_sql("INSERT INTO t VALUES (2)")
print(f"waited {time.monotonic() - started:.1f}")
"""


def test_the_launchers_sqlite_waits_out_a_writer_that_holds_the_lock_past_5_s(tmp_path):
    """`make run`'s metadata database is SQLite with five kinds of writers: an Airflow process's
    connection (the launcher's [database] connect args) waits for a lock held 8 s, past sqlite3's
    default 5 s (the API server's 500 of a loaded platform run)."""
    import sqlite3
    import subprocess
    import sys

    db = tmp_path / "airflow.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    env = {**Platform(tmp_path).env(), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{db}"}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, f"sqlite:///{db}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    import time

    # the lock is held 8 s from when the writer is about to write, not from its start: importing
    # Airflow took over 4 s on a loaded machine, and the writer then waited only 3.8 s
    assert writer.stdout.readline().strip() == "ready", writer.stderr.read()[-2000:]
    time.sleep(8)
    holder.execute("COMMIT")
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err[-2000:]
    assert float(out.split()[-1]) >= 5, out
    assert [r[0] for r in holder.execute("SELECT x FROM t ORDER BY x")] == [1, 2]
