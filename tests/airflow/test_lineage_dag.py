"""OpenLineage from Airflow: the provider's events of a Tidemark task, the Tidemark job's own run
as the task run's child, and the reconciliation DAG's Assets as OpenLineage datasets.

The maintenance DAG runs with ``dag.test()`` (its task a real ``spark-submit`` of the maintenance
job through the Spark provider) with OpenLineage's file transport configured the way a deployment
would, in the environment: the provider emits START and COMPLETE of the task
``tidemark_maintenance__<p>.maintain``, and the job, in its own process, the run of
``<p>.maintain`` whose parent is that task run and whose root is the DAG run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import load_dag
from helpers import small_scenario

from tidemark import lineage
from tidemark.config import load_config
from tidemark.generator import generate_files
from tidemark.stream import run_stream

pytestmark = [pytest.mark.airflow]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "lineage"


def write_pipeline(path: Path, root: Path) -> None:
    data = {
        "pipeline": "lin",
        "source": {"kind": "files", "path": str(root / "landing"), "max_files_per_trigger": 20},
        "warehouse": str(root / "warehouse"),
        "checkpoint": str(root / "checkpoints" / "lin"),
        "watermark": {"precision": 0.96},
        "spark": {"shuffle_partitions": 2},
    }
    path.write_text(yaml.safe_dump(data), encoding="utf-8")


def test_reconciled_assets_are_the_tables_by_the_providers_uri_conventions(
    airflow_db, pipelines_dir, tmp_path
):
    from airflow.providers.openlineage.utils.utils import translate_airflow_asset

    write_pipeline(pipelines_dir / "lin.yaml", tmp_path)
    config = load_config(pipelines_dir / "lin.yaml")
    dag = load_dag("tidemark_reconciliation.py", "tidemark_reconciliation__lin")
    assets = {a.name: a for task in dag.tasks for a in task.outlets}
    tables = {
        "tidemark.lin.reconciled": "windows",
        "tidemark.lin.reconciled_on_time": "reconciliation_passes",
    }
    assert set(assets) == set(tables)
    for name, table in tables.items():
        path = config.table_path(table)
        assert assets[name].uri == f"file://{path}"
        # what Airflow's OpenLineage provider makes of it: the name Tidemark's own events use
        dataset = translate_airflow_asset(assets[name], lineage_context=None)
        assert dataset is not None and (dataset.namespace, dataset.name) == ("file", path)
        assert lineage.dataset_for(path) == lineage.Dataset("file", path)


@pytest.mark.spark
def test_a_task_run_and_its_job_run_emit_start_and_complete(spark, airflow_db, pipelines_dir, tmp_path):
    write_pipeline(pipelines_dir / "lin.yaml", tmp_path)
    config = load_config(pipelines_dir / "lin.yaml")
    generate_files(small_scenario(hosts=20, minutes=3, seed=3), config.source.path)
    run_stream(spark, config, once=True, echo=lambda m: None)
    tables = sorted(
        str(p.parent.relative_to(tmp_path / "warehouse" / "lin")) for p in tmp_path.rglob("_delta_log")
    )

    out = tmp_path / "lineage.ndjson"
    # A deployment configures OpenLineage in the environment of Airflow's processes before they
    # start: the provider's plugin decides at import whether to register its listener, so the DAG
    # runs in a process of its own (``airflow dags test``) that starts with the configuration.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENLINEAGE")}
    env.update(
        OPENLINEAGE__TRANSPORT__TYPE="file",
        OPENLINEAGE__TRANSPORT__LOG_FILE_PATH=str(out),
        OPENLINEAGE__TRANSPORT__APPEND="true",
        AIRFLOW_CONN_TIDEMARK_SPARK=json.dumps({"conn_type": "spark", "host": "local[2]"}),
    )
    airflow = Path(sys.executable).with_name("airflow")
    run = subprocess.run(
        [str(airflow), "dags", "test", "tidemark_maintenance__lin"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]

    events = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "airflow_maintenance.json").write_text(json.dumps(events, indent=2), encoding="utf-8")
    task_job = "tidemark_maintenance__lin.maintain"
    task = [e for e in events if e["job"]["name"] == task_job]
    assert [e["eventType"] for e in task] == ["START", "COMPLETE"], [
        (e["eventType"], e["job"]["name"]) for e in events
    ]
    assert task[0]["run"]["runId"] == task[1]["run"]["runId"]
    assert "airflow" in task[0]["producer"]

    job = [e for e in events if e["job"]["name"] == "lin.maintain"]
    assert [e["eventType"] for e in job] == ["START", "COMPLETE"]
    assert job[0]["job"]["namespace"] == "tidemark"
    for event in job:
        parent = event["run"]["facets"]["parent"]
        assert (parent["job"]["namespace"], parent["job"]["name"]) == (task[0]["job"]["namespace"], task_job)
        assert parent["run"]["runId"] == task[0]["run"]["runId"]
        assert parent["root"]["job"]["name"] == "tidemark_maintenance__lin"
        # maintenance: in and out, every table of the pipeline
        maintained = {("file", config.table_path(t)) for t in tables}
        assert {(d["namespace"], d["name"]) for d in event["inputs"]} == maintained
    assert {(d["namespace"], d["name"]) for d in job[1]["outputs"]} == maintained
    # the task's run holds the job's: the task starts first and completes last
    times = [e["eventTime"] for e in (task[0], job[0], job[1], task[1])]
    assert times == sorted(times)
