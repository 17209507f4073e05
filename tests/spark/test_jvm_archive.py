"""The driver JVM of a job maps the class-data-sharing archive set-up trained
(:mod:`tidemark.jvmarchive`): the classes come from the archive, not from the jars, and the job
does what it does without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import small_scenario, write_config

from tidemark import jvmarchive
from tidemark.generator import generate_files
from tidemark.sparkenv import cached_jars
from tidemark.tables import read_local


def _stream(config_path, tmp_path, name: str, **env: str) -> str:
    log = tmp_path / f"{name}-classes.log"
    options = f"{os.environ.get('TIDEMARK_JVM_OPTIONS', '')} -Xlog:class+load=info:file={log}".strip()
    done = subprocess.run(
        [sys.executable, "-m", "tidemark.cli", "stream", "--config", str(config_path), "--once"],
        env={**os.environ, "TIDEMARK_JVM_OPTIONS": options, "TIDEMARK_SPARK_LOG_LEVEL": "ERROR", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "[cds" not in done.stdout + done.stderr and "shared archive" not in done.stdout + done.stderr
    return log.read_text()


def _source(classes: str, name: str) -> str:
    line = next(line for line in classes.splitlines() if f" {name} source: " in line)
    return line.split(" source: ", 1)[1]


def test_a_jobs_driver_loads_spark_from_the_archive_set_up_trained(tmp_path):
    path = jvmarchive.archive_path()
    assert path is not None and path.is_file(), f"no class archive at {path}: run scripts/setup.sh"
    config = write_config(tmp_path, name="boot")
    truth = generate_files(small_scenario(minutes=2), config.source.path)
    classes = _stream(tmp_path / "boot.yaml", tmp_path, "with")
    # Spark's, Delta's (loaded by Spark's jar class loader) and the JDK's own, from the archive
    assert _source(classes, "org.apache.spark.SparkContext") == "shared objects file (top)"
    assert _source(classes, "org.apache.spark.sql.delta.metering.DeltaLogging") == "shared objects file (top)"
    events = len(read_local(config.table_path("events")))
    assert events == truth.unique_events

    # Without the archive: the same classes from the jars, the same result.
    (tmp_path / "off").mkdir()
    config = write_config(tmp_path / "off", name="boot")
    generate_files(small_scenario(minutes=2), config.source.path)
    classes = _stream(tmp_path / "off" / "boot.yaml", tmp_path, "without", TIDEMARK_JVM_ARCHIVE="off")
    assert _source(classes, "org.apache.spark.SparkContext").startswith("file:")
    # Delta from the cached jar itself, on the driver's class path (sparkenv.jar_conf)
    cached = next(j for j in cached_jars() if j.name.startswith("delta-spark_"))
    delta = _source(classes, "org.apache.spark.sql.delta.metering.DeltaLogging")
    assert delta.startswith("file:") and Path(delta.removeprefix("file:")).resolve() == cached.resolve()
    assert len(read_local(config.table_path("events"))) == events


def test_a_local_session_copies_no_jars_to_its_temporary_directory(spark, tmp_path):
    """With a local master the jars are on the driver's class path and nowhere else: Spark copies
    a ``spark.jars`` entry into the session's temporary directory for its executor (660 MB with
    the S3 jars), and a killed driver never deletes that directory."""
    from pyspark import SparkFiles

    spark.range(10).write.format("delta").save(str(tmp_path / "t"))  # a task ran, Delta loaded
    assert spark.read.format("delta").load(str(tmp_path / "t")).count() == 10
    assert not spark.sparkContext.getConf().get("spark.jars", "")
    root = Path(SparkFiles.getRootDirectory())
    assert root.is_dir() and not list(root.rglob("*.jar")), list(root.rglob("*.jar"))
