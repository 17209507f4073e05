"""OpenLineage run events of real runs (tidemark.lineage).

A short stream over a small generated scenario, two recomputes of its range and the quality job,
each through ``tidemark``'s own command line, with the OpenLineage client's file transport: every job run is
one START and one COMPLETE of ``<pipeline>.<job>``, and its inputs and outputs are exactly the
datasets it read and the Delta tables it wrote (set equality of namespace and name; the written
tables found independently, from the Delta logs under the warehouse). The events are kept in
test-artifacts/lineage/ (docs/operations.md#lineage shows them).

Then OpenLineage's own Spark listener (openlineage-spark 1.53.0) in a stream's session, on Spark
4.1 and Delta 4.4: its events reach an HTTP receiver beside Tidemark's and are children of the
stream's run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import small_scenario, write_config

from tidemark.cli import main
from tidemark.generator import generate_files

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "lineage"


def file_transport(monkeypatch, path: Path) -> None:
    for key in list(os.environ):
        if key.startswith("OPENLINEAGE"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(path))
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def names(datasets: list[dict]) -> set[tuple[str, str]]:
    return {(d["namespace"], d["name"]) for d in datasets}


def delta_tables(root: Path) -> dict[str, int]:
    """Every Delta table under ``root`` (relative name) with its newest version, from its log."""
    found = {}
    for log in root.rglob("_delta_log"):
        versions = [int(f.name.split(".")[0]) for f in log.glob("*.json") if f.name.split(".")[0].isdigit()]
        found[str(log.parent.relative_to(root))] = max(versions)
    return found


def one_run(events: list[dict], job: str) -> tuple[dict, dict]:
    """The START and the COMPLETE of the one run of ``job``."""
    mine = [e for e in events if e["job"]["name"] == job]
    assert [e["eventType"] for e in mine] == ["START", "COMPLETE"], [(e["eventType"], job) for e in mine]
    start, complete = mine
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert start["job"]["namespace"] == complete["job"]["namespace"] == "tidemark"
    return start, complete


def test_stream_and_reconcile_runs_emit_their_exact_datasets(spark, tmp_path, monkeypatch):
    config = write_config(tmp_path, "lin", source={"max_files_per_trigger": 4})
    scenario = small_scenario(seed=5)
    generate_files(scenario, config.source.path)
    out = tmp_path / "lineage.ndjson"
    file_transport(monkeypatch, out)
    path = str(tmp_path / "lin.yaml")
    warehouse = tmp_path / "warehouse" / "lin"
    landing = ("file", str(tmp_path / "landing"))

    def table(name: str) -> tuple[str, str]:
        return ("file", str(warehouse / name))

    assert main(["stream", "--config", path, "--once"]) == 0
    written_by_stream = delta_tables(warehouse)
    start, complete = one_run(read_events(out), "lin.stream")
    assert names(start["inputs"]) == names(complete["inputs"]) == {landing}
    assert start["outputs"] == []
    assert names(complete["outputs"]) == {table(t) for t in written_by_stream}
    # what this scenario makes the stream write (a stall ended, hosts read out of order: more)
    assert set(written_by_stream) == {
        "events",
        "quarantine",
        "windows",
        "late_events",
        "watermarks",
        "_state/host_progress",
        "_state/open_windows",
        "_state/revisable_windows",
    }
    assert complete["job"]["facets"]["jobType"]["processingType"] == "STREAMING"
    assert all(d["facets"]["storage"]["storageLayer"] == "delta" for d in complete["outputs"])

    span = ["--start", str(scenario.start_ms), "--end", str(scenario.end_ms)]
    assert main(["reconcile", "--config", path, *span]) == 0
    after_first = delta_tables(warehouse)
    start, complete = one_run(read_events(out), "lin.reconcile")
    stream_side = {table("watermarks"), table("windows"), table("late_events")}
    assert names(start["inputs"]) == names(complete["inputs"]) == {landing, *stream_side}
    moved = {t for t, v in after_first.items() if written_by_stream.get(t) != v}
    assert moved == {"reconciliation", "_reconcile/landing_index"}
    assert names(complete["outputs"]) == {table(t) for t in moved}
    nominal = complete["run"]["facets"]["nominalTime"]
    assert (nominal["nominalStartTime"], nominal["nominalEndTime"]) == (
        "2025-11-22T10:00:00Z",
        "2025-11-22T10:06:00Z",
    )

    # again, as the on-time pass: the landing index is read now, and has nothing new to take
    os.rename(out, tmp_path / "first.ndjson")
    assert main(["reconcile", "--config", path, *span, "--pass", "on_time"]) == 0
    start, complete = one_run(read_events(out), "lin.reconcile")
    assert names(complete["inputs"]) == {landing, *stream_side, table("_reconcile/landing_index")}
    moved = {t for t, v in delta_tables(warehouse).items() if after_first.get(t) != v}
    assert moved == {"reconciliation", "reconciliation_passes"}
    assert names(complete["outputs"]) == {table(t) for t in moved}

    # the quality job (what the DAG's data_quality runs, here with delta-rs instead of Spark): it
    # reads the stream's and the recompute's tables and writes no table (a failing suite: FAIL)
    os.rename(out, tmp_path / "second.ndjson")
    before = delta_tables(warehouse)
    code = main(["report", "--config", path, *span, "--validate"])
    quality = [e for e in read_events(out) if e["job"]["name"] == "lin.quality"]
    assert [e["eventType"] for e in quality] == ["START", "COMPLETE" if code == 0 else "FAIL"]
    read = ["events", "windows", "late_events", "watermarks", "reconciliation", "reconciliation_passes"]
    assert all(names(e["inputs"]) == {table(t) for t in read} for e in quality)
    assert quality[1]["outputs"] == [] and delta_tables(warehouse) == before

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    events = [*read_events(tmp_path / "first.ndjson"), *read_events(tmp_path / "second.ndjson"), *quality]
    (ARTIFACTS / "stream_and_reconcile.json").write_text(json.dumps(events, indent=2), encoding="utf-8")


@pytest.mark.slow
def test_the_spark_listener_runs_on_spark_4_1_as_a_child_of_the_job(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "airflow"))
    from receivers import HttpReceiver

    config = write_config(
        tmp_path, "sl", source={"max_files_per_trigger": 20}, lineage={"spark_listener": True}
    )
    generate_files(small_scenario(hosts=20, minutes=3, seed=3), config.source.path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENLINEAGE")}
    with HttpReceiver() as receiver:
        # the simple variable of OpenLineage's clients: Tidemark hands it to the listener, also
        # beside the copies an Airflow task's OpenLineage client leaves in the job's environment
        env["OPENLINEAGE_URL"] = f"http://127.0.0.1:{receiver.port}"
        env["OPENLINEAGE__TRANSPORT__TRANSPORTS__DEFAULT_HTTP__TYPE"] = "http"
        env["OPENLINEAGE__TRANSPORT__TRANSPORTS__DEFAULT_HTTP__URL"] = env["OPENLINEAGE_URL"]
        done = subprocess.run(
            [sys.executable, "-m", "tidemark.cli", "stream", "--config", str(tmp_path / "sl.yaml"), "--once"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        events = [p["json"] for p in receiver.posts]
    assert {p["path"] for p in receiver.posts} == {"/api/v1/lineage"}
    start, complete = one_run(events, "sl.stream")
    spark_events = [e for e in events if "/integration/spark" in e["producer"]]
    assert spark_events, [e["producer"] for e in events]
    assert all(
        e["producer"].startswith("https://github.com/OpenLineage/OpenLineage/tree/1.53.0/")
        for e in spark_events
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "spark_listener.json").write_text(json.dumps(events, indent=2), encoding="utf-8")
    # the Spark application's run is the child of the stream's; each query's run the application's,
    # with the stream's run as the root of them all
    application = [e for e in spark_events if e["job"]["name"] == "tidemark_stream_sl"]
    assert [e["eventType"] for e in application] == ["START", "COMPLETE"]
    app_run = application[0]["run"]["runId"]
    stream = ("tidemark", "sl.stream", start["run"]["runId"])
    for event in spark_events:
        parent = event["run"]["facets"]["parent"]
        root = parent["root"]
        assert (root["job"]["namespace"], root["job"]["name"], root["run"]["runId"]) == stream
        if event in application:
            assert (parent["job"]["namespace"], parent["job"]["name"], parent["run"]["runId"]) == stream
        else:
            assert parent["run"]["runId"] == app_run
    # its queries read the landing directory (the stream's writes are delta-rs commits, which
    # Spark never sees: Tidemark's own COMPLETE names them)
    queries = [e for e in spark_events if e not in application]
    assert queries and set().union(*(names(e["inputs"]) for e in queries)) == {
        ("file", str(tmp_path / "landing"))
    }
    assert names(complete["outputs"]) >= {("file", str(tmp_path / "warehouse" / "sl" / "events"))}
