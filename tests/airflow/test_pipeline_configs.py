"""Bad pipeline configs beside good ones: each bad file is named in Airflow's import errors, once,
with its reason, and every good pipeline's DAGs load, through the DagBag and through a real
``airflow dag-processor`` that writes the metadata DB."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from test_dag_integrity import write_pipeline

KINDS = ("maintenance", "reconciliation", "stream_supervisor", "watermark_monitor")

BAG_PROBE = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({"errors": bag.import_errors, "dags": sorted(bag.dags)}))
"""


def write_configs(folder: Path) -> None:
    """``good`` loads; ``typo`` has an unknown key; ``twice`` names the pipeline ``good`` again."""
    write_pipeline(folder, "good")
    write_pipeline(folder, "typo", watermark={"precison": 0.999})
    write_pipeline(folder, "twice")
    text = (folder / "twice.yaml").read_text().replace("pipeline: twice", "pipeline: good")
    (folder / "twice.yaml").write_text(text)


def check_errors(errors: dict[str, str], folder: Path) -> None:
    """One import error, of tidemark_pipeline_configs.py, naming each bad file once with its reason."""
    [(path, message)] = errors.items()
    assert path.endswith("tidemark_pipeline_configs.py"), errors
    assert "2 pipeline config(s)" in message
    [typo] = [line for line in message.splitlines() if "typo.yaml" in line]
    assert "watermark.precison: unknown key" in typo
    [twice] = [line for line in message.splitlines() if "twice.yaml" in line and "configured twice" in line]
    assert str(folder / "good.yaml") in twice
    assert message.count("typo.yaml") == 1


def test_the_dagbag_names_each_bad_config_once_and_loads_the_good_pipelines(pipelines_dir):
    write_configs(pipelines_dir)
    out = subprocess.run(
        [sys.executable, "-c", BAG_PROBE, str(REPO / "dags")],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    check_errors(result["errors"], pipelines_dir)
    assert result["dags"] == [f"tidemark_{kind}__good" for kind in KINDS]


@pytest.mark.timeout(600)
def test_the_dag_processor_records_one_import_error_and_serializes_the_good_dags(tmp_path):
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    write_configs(pipelines)
    home = tmp_path / "home"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "TIDEMARK_PIPELINES_DIR": str(pipelines),
    }
    airflow = str(Path(sys.executable).with_name("airflow"))
    subprocess.run([airflow, "db", "migrate"], check=True, capture_output=True, env=env, timeout=300)
    done = subprocess.run(
        [airflow, "dag-processor", "--num-runs", "1", "--bundle-name", "dags-folder"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with sqlite3.connect(tmp_path / "airflow.db") as db:
        errors = dict(db.execute("SELECT filename, stacktrace FROM import_error").fetchall())
        serialized = sorted(row[0] for row in db.execute("SELECT dag_id FROM serialized_dag"))
        active = sorted(row[0] for row in db.execute("SELECT dag_id FROM dag WHERE is_stale = 0"))
    check_errors(errors, pipelines)
    assert serialized == active == [f"tidemark_{kind}__good" for kind in KINDS]
