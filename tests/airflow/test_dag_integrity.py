"""Policy over the whole DagBag: every DAG imports, has docs, tags and retries, and parsing the
DAG folder starts no Spark and opens no network connection. The DAG folder is parsed once per
module (in a subprocess, as the DAG processor does) and each test checks one rule of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from conftest import PIPELINES, REPO

PARSE_PROBE = r"""
import json, socket, sys
def refuse(*a, **k):
    raise RuntimeError("network use at DAG parse time")
socket.socket.connect = refuse
socket.create_connection = refuse
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import LazyDeserializedDAG
bag = DagBag(dag_folder=sys.argv[1])

def scheduled_intervals(dag, count=2):
    # the first runs the scheduler creates, as it computes them (DagModel.calculate_dagrun_date_fields):
    # the serialized DAG's next_dagrun_info under its own start date, end date and catchup
    serialized, last, out = LazyDeserializedDAG.from_dag(dag), None, []
    for _ in range(count):
        last = serialized.next_dagrun_info(last_automated_run_info=last)
        out.append([last.data_interval.start.isoformat(), last.data_interval.end.isoformat(),
                    last.run_after.isoformat()])
    return out

dags = {}
for dag_id, dag in bag.dags.items():
    dags[dag_id] = {
        "intervals": scheduled_intervals(dag),
        "failure_callback": type(dag.on_failure_callback).__name__,
        "pools": {t.task_id: t.pool for t in dag.tasks},
        "tags": sorted(dag.tags),
        "retries": [t.retries for t in dag.tasks],
        "doc_md": bool(dag.doc_md and dag.doc_md.strip()),
        "owner": dag.owner,
        "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "params": {k: dag.params.get_param(k).value for k in dag.params.keys()},
    }
print(json.dumps({
    "errors": {k: str(v).strip().splitlines()[-1] for k, v in bag.import_errors.items()},
    "dags": dags,
    "heavy": sorted(
        m for m in sys.modules
        if m.split(".")[0] in ("pyspark", "py4j", "great_expectations", "deltalake")
    ),
}))
"""


def write_pipeline(folder, name, **extra):
    data = {
        "pipeline": name,
        "source": {"kind": "files", "path": str(folder / name / "landing")},
        "warehouse": str(folder / "warehouse"),
        "checkpoint": str(folder / "checkpoints" / name),
        **extra,
    }
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def parse_dags() -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PARSE_PROBE, str(REPO / "dags")],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def parsed():
    """The DAG folder parsed once, with two pipelines: `clicks` (reconciled from a start date)
    and `orders` (its own Spark pool, weekly maintenance). (parse result, before, after)."""
    for old in PIPELINES.glob("*.y*ml"):
        old.unlink()
    write_pipeline(PIPELINES, "clicks", airflow={"reconcile_start": "2025-11-22T00:00:00Z"})
    write_pipeline(
        PIPELINES,
        "orders",
        airflow={"spark_pool": "spark_orders", "spark_pool_slots": 1},
        maintenance={"schedule": "0 2 * * 0"},
    )
    try:
        before = datetime.now(UTC)
        result = parse_dags()
        return result, before, datetime.now(UTC)
    finally:
        for old in PIPELINES.glob("*.y*ml"):
            old.unlink()


@pytest.fixture(scope="module")
def dags(parsed):
    return parsed[0]["dags"]


KINDS = [
    "tidemark_reconciliation",
    "tidemark_stream_supervisor",
    "tidemark_watermark_monitor",
    "tidemark_maintenance",
]


def test_every_dag_file_imports_without_errors_spark_or_network(parsed):
    result, *_ = parsed
    assert result["errors"] == {}
    assert result["heavy"] == []  # the probe also refuses every socket connect


def test_each_pipeline_gets_one_dag_of_each_kind(dags):
    assert sorted(dags) == sorted(f"{k}__{p}" for k in KINDS for p in ("clicks", "orders"))


def test_every_dag_is_tagged_tidemark_its_kind_and_its_pipeline(dags):
    for dag_id, dag in dags.items():
        assert "tidemark" in dag["tags"] and len(dag["tags"]) >= 3, dag_id
        assert dag_id.rsplit("__", 1)[1] in dag["tags"], dag_id
    assert "maintenance" in dags["tidemark_maintenance__clicks"]["tags"]


def test_every_task_retries(dags):
    for dag_id, dag in dags.items():
        assert dag["retries"] and all(r >= 1 for r in dag["retries"]), dag_id


def test_every_dag_has_docs_and_the_tidemark_owner(dags):
    for dag_id, dag in dags.items():
        assert dag["doc_md"], dag_id
        assert dag["owner"] == "tidemark", dag_id


def test_every_failed_run_alerts_whatever_task_failed(dags):
    # email + webhook, from the DAG's failure callback
    for dag_id, dag in dags.items():
        assert dag["failure_callback"] == "RunFailureNotifier", dag_id


def test_the_reconciliation_is_scheduled_hour_by_hour_from_reconcile_start(dags):
    # [00:00, 01:00) runs after 01:00, then [01:00, 02:00) (@hourly gave runs with an empty
    # interval, which every scheduled and catchup run failed on)
    assert dags["tidemark_reconciliation__clicks"]["intervals"] == [
        ["2025-11-22T00:00:00+00:00", "2025-11-22T01:00:00+00:00", "2025-11-22T01:00:00+00:00"],
        ["2025-11-22T01:00:00+00:00", "2025-11-22T02:00:00+00:00", "2025-11-22T02:00:00+00:00"],
    ]


def test_the_reconciliation_backfills_from_reconcile_start_and_the_monitors_never_overlap(dags):
    assert dags["tidemark_reconciliation__clicks"]["catchup"] is True
    assert dags["tidemark_reconciliation__orders"]["catchup"] is False
    assert dags["tidemark_watermark_monitor__clicks"]["max_active_runs"] == 1
    assert dags["tidemark_stream_supervisor__clicks"]["max_active_runs"] == 1


def test_only_the_reconciliation_takes_params_and_they_default_to_its_scheduled_hour(dags):
    # empty start and end: the run's own hour (their date-time form is checked in
    # test_sensor_and_operators); the other DAGs take none
    for dag_id, dag in dags.items():
        expected = {"start": None, "end": None} if dag_id.startswith("tidemark_reconciliation__") else {}
        assert dag["params"] == expected, dag_id


def test_spark_tasks_run_in_the_pipelines_pool(dags):
    # default `spark`; `orders` sets its own
    assert dags["tidemark_reconciliation__clicks"]["pools"] == {
        "wait_for_close": "default_pool",
        "reconcile_on_time": "spark",
        "wait_for_final": "default_pool",
        "reconcile_final": "spark",
        "data_quality": "spark",
        "check_alignment": "default_pool",
    }
    assert dags["tidemark_reconciliation__orders"]["pools"]["reconcile_final"] == "spark_orders"
    assert dags["tidemark_stream_supervisor__orders"]["pools"]["start_stream"] == "spark_orders"
    assert dags["tidemark_maintenance__clicks"]["pools"] == {"maintain": "spark"}
    assert dags["tidemark_maintenance__orders"]["pools"] == {"maintain": "spark_orders"}


def test_maintenance_runs_one_at_a_time_on_maintenance_schedule(parsed):
    # default 03:30 UTC daily; orders: Sundays at 02:00. No start date: the first run is the next
    # scheduled time after the DAG appears, at whatever time of day the test runs (Airflow's
    # default would run 03:30 at once if it appeared before 05:54)
    result, before, after = parsed
    maintenance = result["dags"]["tidemark_maintenance__clicks"]
    assert (maintenance["max_active_runs"], maintenance["catchup"]) == (1, False)
    first, second = (datetime.fromisoformat(i[2]) for i in maintenance["intervals"])
    assert (first.hour, first.minute, second - first) == (3, 30, timedelta(days=1))
    assert before < first <= after + timedelta(days=1)
    first, second = (
        datetime.fromisoformat(i[2]) for i in result["dags"]["tidemark_maintenance__orders"]["intervals"]
    )
    assert (first.isoweekday(), first.hour, second - first) == (7, 2, timedelta(days=7))
    assert before < first <= after + timedelta(days=7)


def test_a_bad_pipeline_config_is_one_import_error_naming_the_key_and_the_others_load(pipelines_dir):
    write_pipeline(pipelines_dir, "clicks", watermark={"precison": 0.999})
    write_pipeline(pipelines_dir, "orders")
    result = parse_dags()
    # one import error, of the file that reports bad configs; the last line names file and key
    [(path, message)] = result["errors"].items()
    assert path.endswith("tidemark_pipeline_configs.py")
    assert "clicks.yaml" in message and "watermark.precison: unknown key" in message
    # every DAG of the good pipeline still loads
    assert sorted(result["dags"]) == [
        "tidemark_maintenance__orders",
        "tidemark_reconciliation__orders",
        "tidemark_stream_supervisor__orders",
        "tidemark_watermark_monitor__orders",
    ]


def test_no_pipelines_configured_means_no_dags_and_no_errors(pipelines_dir):
    result = parse_dags()
    assert result == {"errors": {}, "dags": {}, "heavy": []}


def test_pools_are_sized_to_the_largest_slots_any_pipeline_asks_for(pipelines_dir):
    from tidemark_airflow.pipelines import configured_pipelines
    from tidemark_airflow.pools import pool_sizes

    write_pipeline(pipelines_dir, "clicks", airflow={"spark_pool_slots": 3})
    write_pipeline(pipelines_dir, "views")
    write_pipeline(pipelines_dir, "orders", airflow={"spark_pool": "spark_orders", "spark_pool_slots": 1})
    assert pool_sizes(configured_pipelines()) == {"spark": 3, "spark_orders": 1}
