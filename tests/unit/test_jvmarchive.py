"""Which class-data-sharing archive a driver JVM is given (:mod:`tidemark.jvmarchive`): the key
changes with anything the JVM checks the archive against, so a stale archive is never offered."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidemark import jvmarchive


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A java, a Spark home with two jars and a jar cache with one, all under ``tmp_path``."""
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_bytes(b"java")
    spark = tmp_path / "pyspark"
    (spark / "jars").mkdir(parents=True)
    for name in ("spark-core.jar", "spark-sql.jar"):
        (spark / "jars" / name).write_bytes(b"x" * 100)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "delta-spark.jar").write_bytes(b"d" * 50)
    monkeypatch.setattr(jvmarchive, "_java", lambda: java)
    monkeypatch.setattr(jvmarchive, "spark_home", lambda: spark)
    monkeypatch.setattr(jvmarchive, "jars_dir", lambda: cache)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.delenv(jvmarchive.ARCHIVE_ENV, raising=False)
    return spark, cache


def _touch_later(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))


def test_a_reinstalled_spark_jar_of_the_same_size_changes_the_key(machine):
    """pip or uv reinstalling pyspark writes jars of the same sizes with new times; the JVM then
    refuses the old archive without a word, so the key must not find it."""
    spark, cache = machine
    before = jvmarchive.archive_key()
    assert before == jvmarchive.archive_key()  # stable while nothing changes
    _touch_later(spark / "jars" / "spark-core.jar")
    assert jvmarchive.archive_key() != before
    again = jvmarchive.archive_key()
    _touch_later(cache / "delta-spark.jar")  # a cached jar fetched again
    assert jvmarchive.archive_key() != again


def test_the_archive_is_offered_only_when_its_keyed_file_exists(machine):
    spark, cache = machine
    path = jvmarchive.archive_path()
    assert path is not None and path.parent == cache / "jvm"
    assert jvmarchive.driver_options() == ""
    path.parent.mkdir()
    path.write_bytes(b"archive")
    assert jvmarchive.driver_options() == f"-XX:SharedArchiveFile={path} {jvmarchive.QUIET}"
    _touch_later(spark / "jars" / "spark-sql.jar")  # the archive no longer matches the class path
    assert jvmarchive.driver_options() == ""
