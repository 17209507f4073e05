"""Airflow test environment: a throw-away AIRFLOW_HOME with a SQLite metadata DB, the project's
dags/ and plugins/, and pipeline configs in a temp TIDEMARK_PIPELINES_DIR.

Airflow reads its configuration when it is first imported, so the environment is set when this
file is collected, before any test imports Airflow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_HOME = Path(tempfile.mkdtemp(prefix="tidemark-airflow-"))
PIPELINES = _HOME / "pipelines"
PIPELINES.mkdir()
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(_HOME / "home"),
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
    "TIDEMARK_PIPELINES_DIR": str(PIPELINES),
}
os.environ.update(AIRFLOW_ENV)


@pytest.fixture(scope="session")
def airflow_db():
    """The metadata DB, migrated once per run (a few seconds)."""
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True, env=os.environ.copy())
    return _HOME


@pytest.fixture
def pipelines_dir():
    """An empty TIDEMARK_PIPELINES_DIR for one test (configs written into it become DAGs)."""
    for old in PIPELINES.glob("*.y*ml"):
        old.unlink()
    yield PIPELINES
    for old in PIPELINES.glob("*.y*ml"):
        old.unlink()


def load_dag(dag_file: str, dag_id: str):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / dag_file))
    assert not bag.import_errors, bag.import_errors
    return bag.dags[dag_id]


@pytest.fixture
def receivers(monkeypatch):
    """Real local SMTP and HTTP receivers, wired as the default alert connections."""
    from receivers import HttpReceiver, SmtpReceiver

    with SmtpReceiver() as smtp, HttpReceiver() as http:
        monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_SMTP", smtp.connection_json())
        monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_WEBHOOK", http.connection_json())
        yield smtp, http
