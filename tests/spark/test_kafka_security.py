"""A secured Kafka source: SASL (SCRAM-SHA-512, PLAIN) over TLS, configured in the pipeline YAML,
the password from the environment or an Airflow connection, never from the file.

The broker is the project's own (scripts/kafka.sh) with a SASL_SSL listener, SCRAM users and a CA
this module makes (tests/kafka_secure.py), started once for the module. The unit tests at the top
need no broker."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_exactly_once, files_holding, small_scenario, write_config
from kafka_secure import PLAIN_USERS, SCRAM_USERS, start_secure_broker

from tidemark.config import ConfigError, load_config, parse_config
from tidemark.kafka_access import KafkaAccessError, Secret, kafka_access

PASSWORD_ENV = "TIDEMARK_KAFKA_PASSWORD"
SECRET = 'canary-7Qz"p\\w'  # with a quote and a backslash: JAAS quoting


def _config(tmp_path, **kafka):
    block = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "username": "tidemark",
        "password_env": PASSWORD_ENV,
        **kafka,
    }
    return parse_config(
        {
            "pipeline": "kafka-sec",
            "source": {"kind": "kafka", "bootstrap_servers": "b1:9096,b2:9096", "topic": "t", "kafka": block},
            "warehouse": str(tmp_path / "w"),
            "checkpoint": str(tmp_path / "c"),
        }
    )


# -- options and secrets, no broker -----------------------------------------------------------------


def test_the_options_for_spark_and_confluent_kafka_and_no_secret_in_their_text(tmp_path, monkeypatch, caplog):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv(PASSWORD_ENV, SECRET)
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path))
    config = _config(tmp_path, ssl_ca_file="ca.pem", options={"kafka.client.dns.lookup": "use_all_dns_ips"})
    access = kafka_access(config)
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="tidemark" password="canary-7Qz\\"p\\\\w";'
    )
    assert access.spark_options() == {
        "kafka.bootstrap.servers": "b1:9096,b2:9096",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": jaas,
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca),
        "kafka.ssl.endpoint.identification.algorithm": "https",
        "kafka.client.dns.lookup": "use_all_dns_ips",
    }
    assert access.client_conf() == {
        "bootstrap.servers": "b1:9096,b2:9096",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "tidemark",
        "sasl.password": SECRET,
        "ssl.ca.location": str(ca),
        "ssl.endpoint.identification.algorithm": "https",
    }
    plain = kafka_access(_config(tmp_path, sasl_mechanism="PLAIN", ssl_endpoint_identification=False))
    assert plain.spark_options()["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required username="
    )
    assert plain.spark_options()["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert plain.client_conf()["ssl.endpoint.identification.algorithm"] == "none"
    assert "ssl.truststore.location" not in str(plain.spark_options())  # none: the JVM's own CAs

    caplog.set_level(logging.DEBUG)
    logging.getLogger("tidemark.test").info("access %s %r %s %r", access, access, access.password, plain)
    shown = [
        repr(access),
        str(access),
        f"{access.password}",
        repr(access.spark_options()),
        str(access.spark_options()),
        repr(access.client_conf()),
        str(access.client_conf()),
        access.describe(),
        repr(config),
        caplog.text,
    ]
    for text in shown:
        assert SECRET not in text and "canary" not in text, text
    assert "***" in repr(access.spark_options()) and "***" in str(access.client_conf())
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(access.password)


def test_the_password_comes_from_an_airflow_connection_in_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_PROD", json.dumps({"conn_type": "kafka", "login": "svc", "password": SECRET})
    )
    config = _config(tmp_path, username=None, password_env=None, airflow_connection="kafka_prod")
    access = kafka_access(config)
    assert access.username == "svc" and access.password == Secret(SECRET)
    assert 'username="svc"' in access.spark_options()["kafka.sasl.jaas.config"]
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_PROD")
    with pytest.raises(KafkaAccessError, match=r"pipeline kafka-sec: .*Airflow connection 'kafka_prod'"):
        kafka_access(config)


def test_secrets_in_the_yaml_and_owned_options_are_config_errors(tmp_path, monkeypatch):
    def error(**kafka) -> str:
        with pytest.raises(ConfigError) as caught:
            _config(tmp_path, **kafka)
        return str(caught.value)

    message = error(password=SECRET)
    assert "source.kafka" in message and "password_env" in message and "airflow_connection" in message
    assert SECRET not in message
    assert "password_env" in error(sasl_jaas_config="x")
    assert "set by Tidemark" in error(options={"kafka.group.id": "mine"})
    assert "set by Tidemark" in error(options={"enable.auto.commit": True})
    assert "set by Tidemark" in error(options={"value.deserializer": "x"})
    assert "password_env" in error(options={"ssl.keystore.password": "x"})
    assert "sasl_mechanism" in error(sasl_mechanism=None)
    assert "environment variable" in error(password_env="hunter2 pass")
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    unset = rf"pipeline kafka-sec: source.kafka.password_env: {PASSWORD_ENV} is not set"
    with pytest.raises(KafkaAccessError, match=unset):
        kafka_access(_config(tmp_path))


# -- against the secured broker -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory):
    started = time.monotonic()
    broker = start_secure_broker(tmp_path_factory.mktemp("kafka-secure"))
    print(f"secured broker up in {time.monotonic() - started:.1f} s")
    yield broker
    broker.stop()


def _secure_pipeline(root: Path, broker, topic: str, name: str):
    """A pipeline reading ``topic`` over SASL_SSL (SCRAM-SHA-512) and the same scenario as files
    for the oracle, published through the secured listener (the password in the environment)."""
    from tidemark.generator import generate_files
    from tidemark.kafka import publish_scenario

    scenario = small_scenario(seed=21)
    source = broker.source(topic, max_offsets_per_trigger=350, max_files_per_trigger=1)
    config = write_config(root, name=name, source=source)
    oracle_config = write_config(root, name=f"{name}-oracle")
    truth = generate_files(scenario, oracle_config.source.path)
    published = publish_scenario(scenario, kafka_access(config), topic)
    assert published.lines == truth.lines
    return scenario, config, oracle_config, truth


def test_exactly_once_on_the_secured_broker_through_kills_equals_the_recompute(
    spark, secure_kafka, tmp_path, monkeypatch
):
    from crash.test_exactly_once import assert_kills_landed, finish, kill_at_random_moments, start_job

    from tidemark.reconcile import reconcile
    from tidemark.sources import parsed_range

    monkeypatch.setenv(PASSWORD_ENV, SCRAM_USERS["tidemark"])
    scenario, config, oracle_config, truth = _secure_pipeline(tmp_path, secure_kafka, "sec-kills", "ksec")
    config_path = tmp_path / "ksec.yaml"
    assert "password:" not in config_path.read_text()
    started = time.monotonic()
    outcomes = kill_at_random_moments(config_path, random.Random(5), 0.5, 4.0, kills=3)
    assert_kills_landed(outcomes, at_least=2)
    code, out = finish(start_job(config_path))
    assert code == 0, out[-3000:]
    assert SCRAM_USERS["tidemark"] not in out
    assert_exactly_once(spark, config.model_copy(update={"source": oracle_config.source}), truth)
    # the batch recompute re-reads the topic through the secured listener too
    report = reconcile(spark, config, scenario.start_ms, scenario.end_ms)
    assert len(report.closed) == scenario.minutes and all(w.unexplained == 0 for w in report.closed)
    # and a PLAIN user reads the same records
    monkeypatch.setenv(PASSWORD_ENV, PLAIN_USERS["plainuser"])
    plain = load_config(config_path).model_copy(deep=True)
    plain = plain.model_copy(
        update={
            "source": plain.source.model_copy(
                update={
                    "kafka": plain.source.kafka.model_copy(
                        update={"sasl_mechanism": "PLAIN", "username": "plainuser"}
                    )
                }
            )
        }
    )
    rows = parsed_range(spark, plain, scenario.start_ms, scenario.end_ms, prune=False).rows
    assert rows.count() == truth.lines
    print(f"kills {outcomes}; stream, kills and recompute took {time.monotonic() - started:.0f} s")
    assert not files_holding(tmp_path, SCRAM_USERS["tidemark"], follow_symlinks=False)


def test_a_wrong_password_fails_the_stream_and_the_publisher_in_one_bounded_line(
    secure_kafka, tmp_path, monkeypatch
):
    from dataclasses import replace

    from tidemark.kafka import publish_scenario

    config = write_config(tmp_path, name="kafka-sec", source=secure_kafka.source("sec-refused"))
    expected = (
        f"pipeline kafka-sec: Kafka broker {secure_kafka.secure_bootstrap} refused the credentials of "
        "user tidemark (SASL authentication failed)"
    )
    wrong = "not-the-password-5521"
    monkeypatch.setenv(PASSWORD_ENV, wrong)
    env = {**os.environ, PASSWORD_ENV: wrong, "TIDEMARK_SPARK_LOG_LEVEL": "ERROR"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tidemark.cli", "stream", "--config", str(tmp_path / "kafka-sec.yaml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    took_stream = time.monotonic() - started
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert done.returncode != 0
    assert errors == [f"tidemark: error: {expected}"], done.stderr[-3000:]
    assert "Traceback" not in done.stderr and wrong not in done.stderr + done.stdout
    assert took_stream < 120, "the refused stream start hung"  # ~8 s here, the JVM's start included

    started = time.monotonic()
    bad = kafka_access(config)
    assert bad.password == Secret(wrong) and replace(bad, pipeline=None).password == bad.password
    with pytest.raises(KafkaAccessError) as caught:
        publish_scenario(small_scenario(minutes=1), bad, "sec-refused")
    took_publisher = time.monotonic() - started
    assert str(caught.value) == expected and wrong not in str(caught.value)
    assert took_publisher < 30
    print(f"refused: stream start {took_stream:.1f} s (JVM start included), publisher {took_publisher:.1f} s")


def test_generate_with_a_secured_config_publishes_through_its_settings(secure_kafka, tmp_path):
    """``tidemark generate --config`` publishes to the config's cluster as the stream reads it:
    SASL_SSL with the password from the environment; the wrong one is the same one line."""
    write_config(tmp_path, name="kafka-gen", source=secure_kafka.source("sec-generate"))
    argv = [sys.executable, "-m", "tidemark.cli", "generate", "--config", str(tmp_path / "kafka-gen.yaml")]
    argv += ["--hosts", "20", "--minutes", "2", "--seed", "3"]
    done = subprocess.run(
        argv,
        env={**os.environ, PASSWORD_ENV: SCRAM_USERS["tidemark"]},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"to {secure_kafka.secure_bootstrap} (SASL_SSL, SCRAM-SHA-512 as tidemark)" in done.stdout
    assert re.search(r"published [\d,]+ records", done.stdout)
    done = subprocess.run(
        argv, env={**os.environ, PASSWORD_ENV: "wrong-5521"}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and "refused the credentials of user tidemark" in done.stderr
    assert "Traceback" not in done.stderr and "wrong-5521" not in done.stderr + done.stdout
