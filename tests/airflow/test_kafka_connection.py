"""A secured Kafka source run by Airflow: the Kafka password comes from the Airflow connection the
pipeline names (source.kafka.airflow_connection), read in the task and handed to the job in its
environment (AIRFLOW_CONN_<ID>), never on spark-submit's command line or in its --conf."""

from __future__ import annotations

import json

import tidemark_airflow  # noqa: F401  (installs the Airflow connection reader)
from tidemark.config import parse_config
from tidemark.kafka_access import Secret, kafka_access
from tidemark_airflow.hooks import kafka_connection_env, submit_arguments

SECRET = "kafka-airflow-held-secret"


def test_the_kafka_connection_travels_to_the_job_in_its_environment_only(monkeypatch, tmp_path):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_MSK",
        json.dumps({"conn_type": "generic", "login": "svc-tidemark", "password": SECRET}),
    )
    config = parse_config(
        {
            "pipeline": "msk",
            "source": {
                "kind": "kafka",
                "bootstrap_servers": "b-1.msk:9096",
                "topic": "clicks",
                "kafka": {
                    "security_protocol": "SASL_SSL",
                    "sasl_mechanism": "SCRAM-SHA-512",
                    "airflow_connection": "kafka_msk",
                },
            },
            "warehouse": str(tmp_path / "w"),
            "checkpoint": str(tmp_path / "c"),
        }
    )
    access = kafka_access(config)  # in the task: through Airflow's Connection.get
    assert access.username == "svc-tidemark" and access.password == Secret(SECRET)
    args = submit_arguments(
        conn_id="tidemark_spark", name="t", application_args=["--config", "x"], config=config
    )
    env = kafka_connection_env(config)
    assert json.loads(env["AIRFLOW_CONN_KAFKA_MSK"])["password"] == SECRET
    assert args["env_vars"]["AIRFLOW_CONN_KAFKA_MSK"] == env["AIRFLOW_CONN_KAFKA_MSK"]
    assert SECRET not in json.dumps(args["conf"]) and SECRET not in json.dumps(args["application_args"])
