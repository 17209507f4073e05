"""OpenLineage of Tidemark's jobs without Spark (tidemark.lineage): dataset names by the naming
spec, when lineage is on, the Spark listener's settings, and the events one job run emits through
the Python client's file transport (tables absent: inputs are the source only, no outputs).

The events of real runs (a stream, a reconcile, the Spark listener) are in
tests/spark/test_lineage.py; the Airflow side in tests/airflow/test_lineage_dag.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import write_config

from tidemark import lineage
from tidemark.errors import SetupError, UsageError
from tidemark.lineage import RunRef
from tidemark.lineage_names import Dataset, asset_uri, dataset_for, kafka_datasets, source_datasets

RUN = "01a21ce9-1fce-7d95-be40-097c0b9aaf87"
ROOT = "01a21ce9-1fce-7d95-be40-097c0b9aaf88"


@pytest.fixture
def no_openlineage(monkeypatch, tmp_path):
    """No OpenLineage configuration in the environment, the working directory or the home."""
    for key in list(__import__("os").environ):
        if key.startswith("OPENLINEAGE"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def file_transport(monkeypatch, path: Path) -> None:
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(path))
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")


def events(path: Path) -> list[dict]:
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    )


def test_dataset_names_follow_the_naming_spec(tmp_path):
    assert dataset_for("/data/landing/") == Dataset("file", "/data/landing")
    assert dataset_for("file:///data/w/p/events") == Dataset("file", "/data/w/p/events")
    assert dataset_for("s3a://bucket/wh/p/events") == Dataset("s3://bucket", "wh/p/events")
    assert dataset_for("hdfs://nn:8020/wh/p") == Dataset("hdfs://nn:8020", "/wh/p")
    assert kafka_datasets("b1:9093,b2:9093", "logs") == [Dataset("kafka://b1:9093", "logs")]
    assert kafka_datasets("broker", "a,b") == [
        Dataset("kafka://broker:9092", "a"),
        Dataset("kafka://broker:9092", "b"),
    ]
    files = write_config(tmp_path)
    assert source_datasets(files) == [Dataset("file", str(tmp_path / "landing"))]
    kafka = write_config(
        tmp_path, "k", source={"kind": "kafka", "bootstrap_servers": "k1:29092", "topic": "clicks"}
    )
    assert source_datasets(kafka) == [Dataset("kafka://k1:29092", "clicks")]
    upstream = write_config(
        tmp_path, "d", source={"kind": "delta", "path": str(tmp_path / "warehouse/up/events")}
    )
    assert source_datasets(upstream) == [Dataset("file", str(tmp_path / "warehouse/up/events"), delta=True)]


def test_asset_uris_follow_the_providers_conventions():
    assert asset_uri("/data/w/p/windows") == "file:///data/w/p/windows"
    assert asset_uri("s3a://bucket/w/p/windows/") == "s3://bucket/w/p/windows"
    assert asset_uri("gs://bucket/w") == "gs://bucket/w"


def test_parent_ids_parse_as_openlineage_writes_them():
    assert RunRef.parse(f"default/dag.task/{RUN}") == RunRef("default", "dag.task", RUN)
    assert RunRef.parse(f"ns/a/b/{RUN}") == RunRef("ns", "a/b", RUN)
    assert RunRef.parse("ns/job/not-a-uuid") is None
    assert RunRef.parse(None) is None


def test_on_only_when_openlineage_is_configured(no_openlineage, monkeypatch, tmp_path):
    config = write_config(tmp_path)
    assert not lineage.configured() and not lineage.enabled(config)
    monkeypatch.setenv("OPENLINEAGE_URL", "http://marquez:5000")
    assert lineage.enabled(config)
    monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")
    assert not lineage.enabled(config)
    monkeypatch.delenv("OPENLINEAGE_DISABLED")
    monkeypatch.delenv("OPENLINEAGE_URL")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "console")
    assert lineage.enabled(config)
    off = write_config(tmp_path, "off", lineage={"enabled": False})
    assert not lineage.enabled(off)
    monkeypatch.delenv("OPENLINEAGE__TRANSPORT__TYPE")
    (tmp_path / "openlineage.yml").write_text("transport:\n  type: console\n")
    assert lineage.enabled(config)


def test_spark_listener_settings_and_jar(no_openlineage, monkeypatch, tmp_path):
    config = write_config(
        tmp_path,
        "sl",
        lineage={"spark_listener": True, "namespace": "prod"},
        spark={"conf": {"spark.extraListeners": "com.example.Mine"}},
    )
    monkeypatch.setenv("OPENLINEAGE_URL", "http://marquez:5000")
    monkeypatch.setenv("OPENLINEAGE_API_KEY", "k")
    monkeypatch.setenv(lineage.PARENT_ENV, f"airflow/dag.task/{RUN}")
    assert lineage.spark_conf(config) == {}  # no job run
    monkeypatch.setenv("TIDEMARK_JARS_DIR", str(tmp_path / "jars"))
    with pytest.raises(SetupError, match="openlineage-spark"):
        lineage.spark_jars(config)
    (tmp_path / "jars" / "lineage").mkdir(parents=True)
    jar = tmp_path / "jars" / "lineage" / "openlineage-spark_2.13-1.53.0.jar"
    jar.write_bytes(b"")
    assert lineage.spark_jars(config) == [jar]
    run = lineage.JobRun(config, lineage.job_spec("stream"))  # what job_run makes, no event sent
    token = lineage._CURRENT.set(run)
    try:
        conf = lineage.spark_conf(config)
    finally:
        lineage._CURRENT.reset(token)
    # the client's copies of OPENLINEAGE_URL do not reach the JVM the job starts next
    assert not [k for k in __import__("os").environ if k.startswith("OPENLINEAGE__")]
    assert conf == {
        "spark.extraListeners": f"com.example.Mine,{lineage.LISTENER}",
        "spark.openlineage.namespace": "prod",
        "spark.openlineage.parentJobNamespace": "prod",
        "spark.openlineage.parentJobName": "sl.stream",
        "spark.openlineage.parentRunId": run.run_id,
        # the root of the hierarchy stays the Airflow task's run
        "spark.openlineage.rootParentJobNamespace": "airflow",
        "spark.openlineage.rootParentJobName": "dag.task",
        "spark.openlineage.rootParentRunId": RUN,
        # the listener does not read OPENLINEAGE_URL itself
        "spark.openlineage.transport.type": "http",
        "spark.openlineage.transport.url": "http://marquez:5000",
        "spark.openlineage.transport.endpoint": "api/v1/lineage",
        "spark.openlineage.transport.auth.type": "api_key",
        "spark.openlineage.transport.auth.apiKey": "k",
    }
    # the copies of OPENLINEAGE_URL an Airflow task's client leaves are no transport of their own;
    # a transport of the listener's own (OPENLINEAGE__TRANSPORT__*, OPENLINEAGE_CONFIG) is left to it
    alias = "OPENLINEAGE__TRANSPORT__TRANSPORTS__DEFAULT_HTTP__TYPE"
    assert (
        lineage._listener_transport({"OPENLINEAGE_URL": "http://m", alias: "http"})[
            "spark.openlineage.transport.url"
        ]
        == "http://m"
    )
    assert (
        lineage._listener_transport({"OPENLINEAGE_URL": "http://m", "OPENLINEAGE__TRANSPORT__TYPE": "kafka"})
        == {}
    )
    assert (
        lineage._listener_transport({"OPENLINEAGE_URL": "http://m", "OPENLINEAGE_CONFIG": "/etc/ol.yml"})
        == {}
    )
    # off for a pipeline that does not ask for it, and nothing without OpenLineage configured
    plain = write_config(tmp_path, "plain")
    assert lineage.spark_jars(plain) == []
    monkeypatch.delenv("OPENLINEAGE_URL")
    for key in [k for k in __import__("os").environ if k.startswith("OPENLINEAGE__")]:
        monkeypatch.delenv(key)
    assert lineage.spark_jars(config) == []


def test_one_run_start_then_complete_or_fail(no_openlineage, monkeypatch, tmp_path):
    config = write_config(tmp_path, "t")
    out = tmp_path / "events.ndjson"
    with lineage.job_run(config, "reconcile") as ended:  # off: nothing
        ended(0)
    assert events(out) == []

    file_transport(monkeypatch, out)
    monkeypatch.setenv(lineage.PARENT_ENV, f"airflow/dag.recompute/{RUN}")
    monkeypatch.setenv(lineage.ROOT_PARENT_ENV, f"airflow/dag/{ROOT}")
    with lineage.job_run(config, "reconcile", (1_763_805_600_000, 1_763_809_200_000)) as ended:
        ended(3)  # e.g. --fail-below: exit 3
    start, fail = events(out)
    assert [start["eventType"], fail["eventType"]] == ["START", "FAIL"]
    assert start["run"]["runId"] == fail["run"]["runId"]
    assert start["job"] == fail["job"] | {"facets": start["job"]["facets"]}
    assert (start["job"]["namespace"], start["job"]["name"]) == ("tidemark", "t.reconcile")
    assert start["job"]["facets"]["jobType"]["processingType"] == "BATCH"
    # no table exists yet: the source is the only input, nothing was written
    landing = {"namespace": "file", "name": str(tmp_path / "landing")}
    for event in (start, fail):
        assert [{k: d[k] for k in ("namespace", "name")} for d in event["inputs"]] == [landing]
        assert event["outputs"] == []
    facets = fail["run"]["facets"]
    assert facets["errorMessage"]["message"] == "exit code 3"
    assert facets["parent"]["run"]["runId"] == RUN and facets["parent"]["job"]["name"] == "dag.recompute"
    assert facets["parent"]["root"]["run"]["runId"] == ROOT
    assert facets["nominalTime"] == {
        **facets["nominalTime"],
        "nominalStartTime": "2025-11-22T10:00:00Z",
        "nominalEndTime": "2025-11-22T11:00:00Z",
    }
    assert facets["processing_engine"]["name"] == "tidemark"

    out.unlink()
    with pytest.raises(UsageError), lineage.job_run(config, "maintain"):
        raise UsageError("no such range")
    start, fail = events(out)
    assert (start["eventType"], fail["eventType"], fail["job"]["name"]) == ("START", "FAIL", "t.maintain")
    assert fail["run"]["facets"]["errorMessage"]["message"] == "tidemark: error: no such range"
    assert start["inputs"] == start["outputs"] == []  # maintenance: every table there is, none yet

    out.unlink()
    with lineage.job_run(config, "validate") as ended:
        ended(0)
    assert [(e["eventType"], e["job"]["name"]) for e in events(out)] == [
        ("START", "t.quality"),
        ("COMPLETE", "t.quality"),
    ]


def test_a_transport_that_fails_never_fails_the_job(no_openlineage, monkeypatch, tmp_path, caplog):
    config = write_config(tmp_path, "t")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "http")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__RETRY", '{"total": 0}')
    with lineage.job_run(config, "stream") as ended:
        ended(0)
    assert "lineage: START event of t.stream not sent" in caplog.text
