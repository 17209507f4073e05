"""scripts/postgres.sh: a real PostgreSQL 15 on loopback for Airflow's metadata database.

Starts it in a private directory on a free port, connects with the SQLAlchemy URL the script
prints (the psycopg2 driver Airflow uses), checks that the password is enforced, that a second
start is a no-op, and stops it (also when an assertion fails).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers import listen_ports

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "postgres.sh"


def _free_port() -> int:
    [port] = listen_ports(1)
    return port


@pytest.fixture
def postgres():
    # Not under pytest's tmp_path: as root the server runs as `postgres`, which cannot enter
    # /tmp/pytest-of-root (mode 700).
    directory = Path(tempfile.mkdtemp(prefix="tidemark-pg-"))
    directory.chmod(0o755)
    env = {**os.environ, "TIDEMARK_POSTGRES_DIR": str(directory), "TIDEMARK_POSTGRES_PORT": str(_free_port())}

    def run(action: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(SCRIPT), action], env=env, capture_output=True, text=True, timeout=180)

    try:
        yield run, directory
    finally:
        run("stop")
        shutil.rmtree(directory, ignore_errors=True)


def test_postgres_script_serves_the_airflow_database_with_a_generated_password(postgres):
    import sqlalchemy as sa

    run, directory = postgres
    started = run("start")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "database airflow" in started.stdout
    password_file = directory / "airflow.password"
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    password = password_file.read_text()
    assert len(password) >= 32

    url = run("url").stdout.strip()
    assert url.startswith("postgresql+psycopg2://airflow:") and url.endswith("/airflow")
    assert "@127.0.0.1:" in url
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT current_user, current_database()")).one() == (
            "airflow",
            "airflow",
        )
        conn.execute(sa.text("CREATE TABLE probe (id int)"))  # the role owns its database
    engine.dispose()
    with pytest.raises(sa.exc.OperationalError, match="password authentication failed"):
        sa.create_engine(url.replace(password, "not-the-password")).connect()

    again = run("start")
    assert again.returncode == 0 and "already running" in again.stdout
    assert password_file.read_text() == password, "a restart must keep the password"
    assert run("status").returncode == 0
    stopped = run("stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert run("status").returncode == 3


def test_postgres_script_refuses_a_port_in_use_with_one_line(postgres):
    _run, directory = postgres
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "TIDEMARK_POSTGRES_DIR": str(directory), "TIDEMARK_POSTGRES_PORT": str(port)}
        done = subprocess.run([str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"postgres: error: port 127.0.0.1:{port} is in use by another process (set TIDEMARK_POSTGRES_PORT)"
    )
