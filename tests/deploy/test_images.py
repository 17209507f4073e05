"""CI's share of the deployment test (issue 37): both images build from the Dockerfiles users
build, with only their bases swapped by build argument for the Debian stand-ins, on a private
engine with no registry; each runs what compose asks of it; the compose file with the test's
host-network override is valid. The whole deployment runs with `make test-deploy`."""

from __future__ import annotations

import subprocess

import harness as h
import pytest

# No xdist group: every worker's ``images`` fixture waits on the one build the run started beside
# it (harness.PREBUILD), and tests/conftest.py moves these tests to the end of the run, by when
# that build is done.
pytestmark = [pytest.mark.docker]


def test_the_airflow_image_holds_the_platform(engine, images):
    run = h.run_image(
        engine,
        "airflow",
        "id -u; airflow version; python -c 'import tidemark, tidemark_airflow, pyspark, great_expectations;"
        " print(pyspark.__version__)'; ls /opt/tidemark/jars; java -version 2>&1 | head -1; pip check",
    ).split("\n")
    assert run[0] == "50000" and "3.3.2" in run, run[:5]
    assert "4.1.3" in run, run
    jars = "\n".join(run)
    for jar in ("tidemark-udf.jar", "delta-spark_4.1_2.13-4.4.0.jar", "spark-sql-kafka-0-10_2.13-4.1.3.jar"):
        assert jar in jars, (jar, run)
    assert 'openjdk version "17' in jars and "No broken requirements found." in jars


def test_the_spark_image_runs_the_same_python_and_pyspark(engine, images):
    run = h.run_image(
        engine,
        "spark",
        "id -u; python3 -c 'import sys, pyspark; print(sys.version_info[:2], pyspark.__version__)';"
        " spark-class org.apache.spark.deploy.master.Master --help 2>&1 | head -1",
    ).split("\n")
    assert run[0] == "50000" and run[1] == "(3, 11) 4.1.3", run


def test_a_warm_build_reuses_every_layer(images):
    for image in ("spark", "airflow"):
        assert images[f"{image}_warm_s"] < images[f"{image}_cold_s"], images


def test_the_compose_file_with_the_host_network_override_is_valid(engine, images, tmp_path):
    ports = h.Ports.free()
    env = h.secrets_env()
    project = h.project_dir(tmp_path, env, {"orders": h.orders_pipeline(ports)})
    override = h.dump_yaml(
        h.host_override(ports, tmp_path / "var", env["POSTGRES_PASSWORD"]), tmp_path / "o.yml"
    )
    done = subprocess.run(
        [*h.compose_command(project, override), "config"],
        env={**engine.env, **h.COMPOSE_ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    import yaml

    config = yaml.safe_load(done.stdout)
    for name in h.SERVICES:
        assert config["services"][name]["network_mode"] == "host", name
    # compose v1 validates pull_policy but leaves it out of its output (and pulls only a missing
    # image): the override asks for it anyway, and this engine has no registry to pull from
    asked = yaml.safe_load(override.read_text())["services"]
    assert all(asked[name]["pull_policy"] == "never" for name in h.SERVICES)
    assert config["services"]["airflow-scheduler"]["image"] == h.IMAGES["airflow"]
