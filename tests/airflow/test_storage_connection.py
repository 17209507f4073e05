"""A pipeline on object storage run by Airflow: the storage credentials come from an Airflow
connection (read through the Airflow side's reader, never from the YAML), travel to the
processes Airflow starts in their environment, and spark-submit gets the S3 jars and settings."""

from __future__ import annotations

import json

import pytest

import tidemark_airflow  # noqa: F401  (installs the Airflow connection reader)
from tidemark import connections, storage
from tidemark.config import parse_config
from tidemark_airflow.hooks import storage_connection_env, submit_arguments

CONNECTION = {
    "conn_type": "aws",
    "login": "AKIDAIRFLOW",
    "password": "airflow-held-secret",
    "extra": {"endpoint_url": "http://127.0.0.1:19878"},
}


@pytest.fixture
def config(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps(CONNECTION))
    return parse_config(
        {
            "pipeline": "lake",
            "source": {"kind": "files", "path": "s3a://lake/landing"},
            "warehouse": "s3a://lake/warehouse",
            "checkpoint": "s3a://lake/checkpoints/lake",
            "storage": {"path_style": True, "airflow_connection": "lake_s3"},
        }
    )


def test_the_airflow_side_reads_the_connection_for_every_client(config):
    assert connections._connection_reader is not None  # Airflow's Connection.get, not the env fallback
    options = storage.delta_options(config.table_path("windows"))
    assert options["AWS_ACCESS_KEY_ID"] == "AKIDAIRFLOW"
    assert options["AWS_SECRET_ACCESS_KEY"] == "airflow-held-secret"
    assert options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:19878"


def test_spark_submit_gets_the_s3_jars_settings_and_the_connection_in_its_environment(config):
    args = submit_arguments(
        conn_id="tidemark_spark", name="t", application_args=["--config", "x"], config=config
    )
    jars = args["jars"].split(",")
    assert any("/s3/hadoop-aws-" in j for j in jars) and any("/s3/bundle-" in j for j in jars)
    assert args["conf"]["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:19878"
    assert args["conf"]["spark.hadoop.fs.s3a.path.style.access"] == "true"
    env = storage_connection_env(config)
    assert json.loads(env["AIRFLOW_CONN_LAKE_S3"])["login"] == "AKIDAIRFLOW"
    assert args["env_vars"]["AIRFLOW_CONN_LAKE_S3"] == env["AIRFLOW_CONN_LAKE_S3"]
    # the keys are never on spark-submit's command line (its --conf), only in its environment
    assert not any("fs.s3a.secret.key" in k or "airflow-held-secret" in v for k, v in args["conf"].items())
    assert "AKIDAIRFLOW" not in json.dumps(args["conf"])
