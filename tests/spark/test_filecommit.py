"""Large appends: Spark writes the Parquet files, delta-rs commits them (tidemark.filecommit),
checked against Spark's own Delta writer on the same frames."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from helpers import commit_adds
from pyspark.sql import functions as F

from tidemark import faults
from tidemark.schemas import CREATE_OPTIONS, EVENTS
from tidemark.tables import TableWriter


class _Config:
    """What TableWriter reads of a pipeline config: where a table lives, its table properties."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.maintenance = type("Maintenance", (), {"table_properties": staticmethod(dict)})()

    def table_path(self, table: str) -> str:
        return str(self.root / table)


class _Identity:
    app_id = "test-run"


def _frame(spark, batch: int, rows: int = 3000):
    """An events-like frame with every kind of statistics column: long, string, timestamp, and
    a nullable column whose nulls are counted."""
    base = 1_700_000_000_000 + batch * 1_000_000
    return spark.range(rows).select(
        F.concat(F.lit(f"id-{batch}-"), F.col("id").cast("string")).alias("event_id"),
        F.concat(F.lit("host-"), (F.col("id") % 97).cast("string")).alias("host"),
        (F.lit(base) + F.col("id") * 7).alias("event_time"),
        F.timestamp_millis(F.lit(base) + F.col("id") * 7).alias("window_start"),
        F.lit(batch).cast("long").alias("batch_id"),
        F.timestamp_millis(F.lit(base + 123)).alias("ingest_ts"),
        F.when(F.col("id") % 5 == 0, F.lit(None)).otherwise(F.col("id")).alias("value"),
        (F.col("id") % 2 == 0).alias("is_late"),
    )


def _writers(tmp_path):
    """Two writers: one takes the file-commit path, the other only Spark's Delta writer."""
    fast = TableWriter(_Config(tmp_path / "fast"), _Identity())
    spark_only = TableWriter(_Config(tmp_path / "spark"), _Identity())
    spark_only._append_files = lambda *args: False  # type: ignore[method-assign]
    return fast, spark_only


def _stats(adds: list[dict]) -> list[dict]:
    return sorted((json.loads(a["stats"]) for a in adds), key=lambda s: json.dumps(s, sort_keys=True))


def _rows(spark, path: str) -> list:
    return sorted(spark.read.format("delta").load(path).collect())


def test_an_append_commits_spark_files_with_the_statistics_spark_would_write(spark, tmp_path):
    fast, spark_only = _writers(tmp_path)
    for batch in (0, 1, 2):
        for writer in (fast, spark_only):
            writer.write(_frame(spark, batch).repartition(2), EVENTS, batch)
    fast_path, spark_path = fast.path(EVENTS), spark_only.path(EVENTS)
    # delta-rs creates the table empty (version 0, with the table's properties); every append,
    # the first included, is files in a directory of their own, committed by delta-rs with the
    # app transaction. Spark's writer made the other table's versions 0-2, one per batch.
    history = DeltaTable(fast_path).history()
    assert [c["operation"] for c in reversed(history)] == ["CREATE TABLE", "WRITE", "WRITE", "WRITE"]
    assert not any("Apache-Spark" in str(c.get("engineInfo", "")) for c in history)
    table, by_spark = DeltaTable(fast_path), DeltaTable(spark_path)
    assert table.metadata().configuration == by_spark.metadata().configuration
    assert pa.schema(table.schema()) == pa.schema(by_spark.schema())
    app_id = f"{_Identity.app_id}:{EVENTS}"
    for version, batch in ((1, 0), (2, 1), (3, 2)):
        adds = commit_adds(fast_path, version)
        assert adds and all(a["path"].startswith(f"tm-{batch}-") for a in adds)
        # Same statistics as Spark's Delta writer computes for the same rows: row counts, null
        # counts, minimum and maximum of every statistics column (timestamps included).
        assert _stats(adds) == _stats(commit_adds(spark_path, batch))
        stats = json.loads(adds[0]["stats"])
        assert set(stats["minValues"]) == set(
            CREATE_OPTIONS[EVENTS]["delta.dataSkippingStatsColumns"].split(",")
        )
        assert DeltaTable(fast_path, version=version).transaction_version(app_id) == batch
    assert _rows(spark, fast_path) == _rows(spark, spark_path)
    # Data skipping works on those statistics: a filter on one batch's event times reads its files.
    one_batch = F.col("event_time").between(1_700_001_000_000, 1_700_001_999_999)
    scanned = spark.read.format("delta").load(fast_path).where(one_batch)
    assert len(scanned.collect()) == 3000
    assert _files_scanned(scanned) == len(commit_adds(fast_path, 2)) < len(DeltaTable(fast_path).file_uris())


def _files_scanned(frame) -> int:
    """How many files the last run of ``frame`` read (its scan's ``numFiles`` metric)."""
    leaves = frame._jdf.queryExecution().executedPlan().collectLeaves()
    counts = [leaves.apply(i).metrics().get("numFiles").get().value() for i in range(leaves.size())]
    assert len(counts) == 1
    return counts[0]


def test_file_commits_checkpoint_the_table_at_sparks_interval(spark, tmp_path):
    fast, _ = _writers(tmp_path)
    for batch in range(11):
        fast.write(_frame(spark, batch, rows=50), EVENTS, batch)
    log = Path(fast.path(EVENTS)) / "_delta_log"
    # delta-rs created version 0; the file commits made 1-11 and checkpointed at 10, as Spark
    # (every 10 commits) would have; Spark reads the table from that checkpoint.
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet")) == [f"{10:020d}.checkpoint.parquet"]
    assert spark.read.format("delta").load(fast.path(EVENTS)).count() == 550


def test_a_replayed_append_commits_nothing(spark, tmp_path):
    fast, _ = _writers(tmp_path)
    # A table Spark's Delta writer created (a pipeline from before file commits), then appended to.
    legacy = TableWriter(_Config(tmp_path / "fast"), _Identity())
    legacy._append_files = lambda *args: False  # type: ignore[method-assign]
    legacy.write(_frame(spark, 0), EVENTS, 0)
    fast.write(_frame(spark, 1), EVENTS, 1)
    assert all(a["path"].startswith("tm-1-") for a in commit_adds(fast.path(EVENTS), 1))
    version = DeltaTable(fast.path(EVENTS)).version()
    fast.write(_frame(spark, 1), EVENTS, 1)  # the batch again after a restart
    fast.write(_frame(spark, 0), EVENTS, 0)
    assert DeltaTable(fast.path(EVENTS)).version() == version
    assert spark.read.format("delta").load(fast.path(EVENTS)).count() == 6000


def test_a_crash_between_the_files_and_their_commit_loses_and_duplicates_nothing(
    spark, tmp_path, monkeypatch
):
    fast, _ = _writers(tmp_path)
    fast.write(_frame(spark, 0), EVENTS, 0)

    class Killed(Exception):
        pass

    def crash_at(point: str, batch_id: int) -> None:
        if point == "files:events" and batch_id == 1:
            raise Killed

    monkeypatch.setattr(faults, "reached", crash_at)
    with pytest.raises(Killed):
        fast.write(_frame(spark, 1), EVENTS, 1)
    path = fast.path(EVENTS)
    orphans = sorted(p.name for p in Path(path).glob("tm-1-*"))
    assert len(orphans) == 1 and DeltaTable(path).version() == 1  # files written, nothing committed
    monkeypatch.undo()
    fast.write(_frame(spark, 1), EVENTS, 1)  # the replay after the restart
    assert sorted(_rows(spark, path)) == sorted(_frame(spark, 0).unionByName(_frame(spark, 1)).collect())
    committed = {a["path"].split("/")[0] for a in commit_adds(path, 2)}
    assert committed and orphans[0] not in committed
    # VACUUM deletes the orphan's files once they are past retention.
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS").collect()
    finally:
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "true")
    assert not list((Path(path) / orphans[0]).glob("*.parquet"))
    assert spark.read.format("delta").load(path).count() == 6000


def test_a_frame_with_other_columns_goes_through_sparks_writer(spark, tmp_path):
    fast, _ = _writers(tmp_path)
    fast.write(_frame(spark, 0), EVENTS, 0)
    wider = _frame(spark, 1).withColumn("extra", F.lit("x"))
    fast.write(wider, EVENTS, 1, options={"mergeSchema": "true"})
    path = fast.path(EVENTS)
    assert "Apache-Spark" in str(DeltaTable(path).history(1)[0].get("engineInfo", ""))
    assert not list(Path(path).glob("tm-1-*"))
    names = pa.schema(DeltaTable(path).schema()).names
    assert "extra" in names and spark.read.format("delta").load(path).count() == 6000
