"""Table maintenance (tidemark.maintenance) on real Spark + Delta: it compacts, vacuums and
checkpoints without changing a row, keeps what a restart after a crash reads, and runs beside a
live stream without breaking it."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from helpers import assert_exactly_once, small_scenario, write_config

from tidemark import faults
from tidemark import schemas as S
from tidemark import tables as T
from tidemark.generator import generate_files
from tidemark.maintenance import COMPACT, STATE, ZORDER, layout, maintain, plan
from tidemark.reconcile import reconcile
from tidemark.status import read_status
from tidemark.stream import run_stream, start_stream

# The crash fixture's tests run in order on one xdist worker (the last one resumes the stream).
ONE_WORKER = True
QUIET = {"echo": lambda m: None}
ROW_TABLES = (S.EVENTS, S.WINDOWS, S.LATE_EVENTS, S.QUARANTINE, S.WATERMARKS, S.HOST_PROGRESS, S.OPEN_WINDOWS)
CRASHED_BATCH = 2


def _rows(config, table: str) -> pd.DataFrame:
    """Every row of a table, in a canonical order (what maintenance must not change)."""
    frame = T.read_local(config.table_path(table))
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def _all_rows(config) -> dict[str, pd.DataFrame]:
    return {t: _rows(config, t) for t in ROW_TABLES if T.table_exists(config.table_path(t))}


def _verdict(spark, config, scenario):
    """Reconcile's per-window verdict over the scenario's span (not written)."""
    end = scenario.start_ms + scenario.minutes * 60_000
    return reconcile(spark, config, scenario.start_ms, end, write=False).windows


def _no_retention(config):
    """The config with VACUUM and log retention 0: every removed file and old log entry is due
    at once, as if the retention had passed. (Built past validation, which refuses it.)"""
    harsh = config.maintenance.model_copy(update={"vacuum_retention": 0, "log_retention": 0})
    return config.model_copy(update={"maintenance": harsh})


def _hold_back(landing: Path, held: Path, keep: int) -> list[Path]:
    held.mkdir()
    moved = []
    for file in sorted(landing.glob("part-*.jsonl"))[keep:]:
        moved.append(Path(shutil.move(str(file), held / file.name)))
    return moved


@pytest.fixture(scope="module")
def crashed_then_maintained(spark, tmp_path_factory):
    """A stream that crashed in batch 2 after writing its state and before its commit marker,
    then maintained with retention 0 (the most VACUUM could ever delete)."""
    root = tmp_path_factory.mktemp("maintenance")
    config = write_config(root, name="mt")
    scenario = small_scenario(seed=11, minutes=5)
    truth = generate_files(scenario, config.source.path)
    files = sorted(Path(config.source.path).glob("part-*.jsonl"))
    held = _hold_back(Path(config.source.path), root / "held", keep=2 * len(files) // 3)

    def crash(point: str, batch_id: int) -> None:
        if (point, batch_id) == ("after:_state/open_windows", CRASHED_BATCH):
            raise RuntimeError("crash after the state write")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(faults, "reached", crash)
        with pytest.raises(Exception, match="crash after the state write"):
            run_stream(spark, config, once=True, **QUIET)
    rows, verdict = _all_rows(config), _verdict(spark, config, scenario)
    started = time.monotonic()
    report = maintain(spark, _no_retention(config), **QUIET)
    took = time.monotonic() - started
    return config, scenario, truth, held, rows, verdict, report, took


def test_the_stream_crashed_between_its_state_and_its_commit_marker(crashed_then_maintained):
    config, *_ = crashed_then_maintained
    marker = T.latest_marker(config.table_path(S.WATERMARKS))
    assert marker is not None and marker["batch_id"] == CRASHED_BATCH - 1
    assert layout(config.table_path(S.OPEN_WINDOWS)).version > marker["open_version"]


def test_maintenance_compacts_the_small_tables_and_events(crashed_then_maintained):
    config, *_, report, took = crashed_then_maintained
    kinds = dict(plan(config))
    assert kinds[S.EVENTS] == ZORDER and kinds[S.WATERMARKS] == COMPACT and kinds[S.OPEN_WINDOWS] == STATE
    compacted = [r for r in report.tables if r.kind in (ZORDER, COMPACT) and r.before.files >= 2]
    assert {S.EVENTS, S.WINDOWS, S.WATERMARKS, S.QUARANTINE} <= {r.table for r in compacted}
    for result in compacted:
        assert result.after.files < result.before.files, result
        # retention 0: the files compaction removed are gone from disk at once
        assert result.after.disk_files == result.after.files, result
    events = report.result(S.EVENTS)
    assert events.after.files == 1 and "zorder by event_time" in events.done
    # log retention 0: each log is its newest commit and the checkpoint written at it
    assert all(r.after.log_files == 2 for r in report.tables if r.kind != STATE)
    print(f"\nmaintenance after the crash ({took:.1f}s):")
    for result in report.tables:
        print(result.line(config.pipeline))


def test_maintenance_changes_no_row_and_no_verdict(spark, crashed_then_maintained):
    config, scenario, _truth, _held, rows, verdict, *_ = crashed_then_maintained
    after = _all_rows(config)
    assert list(after) == list(rows)
    for table, frame in rows.items():
        pd.testing.assert_frame_equal(after[table], frame, obj=table)
    assert _verdict(spark, config, scenario) == verdict


def test_vacuum_keeps_the_state_version_a_restart_reads_though_a_crashed_batch_removed_it(
    crashed_then_maintained,
):
    from deltalake import DeltaTable

    config, *_, report, _took = crashed_then_maintained
    marker = T.latest_marker(config.table_path(S.WATERMARKS))
    state = report.result(S.OPEN_WINDOWS)
    recorded = marker["open_version"]
    assert state.note == f"kept version {recorded}, which a restart reads"
    assert state.after.disk_files < state.before.disk_files  # older versions' files are gone
    kept = DeltaTable(config.table_path(S.OPEN_WINDOWS), version=recorded)
    assert kept.to_pyarrow_table().num_rows > 0  # what the replay of the crashed batch starts from
    assert (
        report.result(S.HOST_PROGRESS).note
        == f"kept version {marker['hosts_version']}, which a restart reads"
    )


def test_after_maintenance_the_stream_resumes_exactly_once_and_reconciles(spark, crashed_then_maintained):
    config, scenario, truth, held, *_ = crashed_then_maintained
    for file in held:
        shutil.move(str(file), Path(config.source.path) / file.name)
    processor = run_stream(spark, config, once=True, **QUIET)
    assert next(s.batch_id for s in processor.summaries if not s.skipped) == CRASHED_BATCH
    assert_exactly_once(spark, config, truth)
    # every window closed; the lagging hosts' records are late (folded into revisions after the
    # maintenance vacuumed the revisable state too), nothing else differs
    closed = [w for w in _verdict(spark, config, scenario) if w.status == "closed"]
    assert len(closed) == scenario.minutes and all(w.unexplained == 0 for w in closed)
    assert sum(w.late_events + w.late_folded for w in closed) > 0

    # Committed again, the state tables are vacuumed too; the state the newest marker records
    # still loads: the status reads it, and a restart with no new input changes nothing.
    before = {t: _rows(config, t) for t in (S.EVENTS, S.WINDOWS, S.WATERMARKS)}
    report = maintain(spark, _no_retention(config), **QUIET)
    for table in S.HOST_PROGRESS, S.OPEN_WINDOWS, S.REVISABLE_WINDOWS:
        result = report.result(table)
        assert result.after.disk_files == result.after.files, result  # the newest version is all
    assert read_status(config).batch_id == max(s.batch_id for s in processor.summaries)
    again = run_stream(spark, config, once=True, **QUIET)
    assert not [s for s in again.summaries if not s.skipped and s.events]
    for table, frame in before.items():
        pd.testing.assert_frame_equal(_rows(config, table), frame, obj=table)

    # The pipeline's own retention goes back on every table (the tables stayed as created)
    report = maintain(spark, config, **QUIET)
    assert all("properties" in r.done for r in report.tables)
    from deltalake import DeltaTable

    for table in (S.EVENTS, S.OPEN_WINDOWS):
        properties = DeltaTable(config.table_path(table)).metadata().configuration
        assert properties["delta.deletedFileRetentionDuration"] == "interval 7 days"


def test_an_append_survives_a_concurrent_optimize_but_an_overwrite_would_duplicate(spark, tmp_path):
    """Why the _state tables are never compacted: a delta-rs write whose snapshot predates a Spark
    OPTIMIZE's commit. An append commits beside it, every row once; a full overwrite (what the
    stream does to _state/open_windows every batch) commits *over* it and the table holds the
    compacted rows and the new ones, with no error on either side."""
    from deltalake import DeltaTable, write_deltalake

    def rows(n: int) -> pa.Table:
        return pa.table({"batch_id": pa.array([n] * 5, pa.int64())})

    counts = {}
    for mode in ("append", "overwrite"):
        path = str(tmp_path / mode)
        for n in range(4):
            write_deltalake(path, rows(n), mode="append")
        stale = DeltaTable(path)  # the writer's snapshot ...
        spark.sql(f"OPTIMIZE delta.`{path}`").collect()  # ... and a compaction commits first
        write_deltalake(stale, rows(9), mode=mode)
        counts[mode] = DeltaTable(path).to_pyarrow_table().num_rows
    assert counts["append"] == 25
    assert counts["overwrite"] == 25, "the overwrite left its 5 rows only: delta-rs now keeps it apart"


def test_maintenance_beside_a_live_stream_breaks_nothing(spark, tmp_path, monkeypatch):
    """The stream runs on a 2 s trigger over files landing one by one while maintenance runs over
    and over (the first time also changing every table's retention: a metadata commit racing the
    stream's writes). Events, late events and quarantine go through Spark's writer, the rest
    through delta-rs. The stream keeps committing, and the result equals the oracle exactly."""
    import tidemark.batch_outputs as batch_outputs

    monkeypatch.setattr(batch_outputs, "COLLECT_MAX_ROWS", 0)
    retried = []  # stream writes that lost their commit to a property change and were retried

    def metadata_changed(exc: BaseException, seen=T.metadata_changed) -> bool:
        retried.append(seen(exc))
        return retried[-1]

    monkeypatch.setattr(T, "metadata_changed", metadata_changed)
    config = write_config(tmp_path, name="live", trigger_interval="2s", source={"max_files_per_trigger": 1})
    truth = generate_files(small_scenario(seed=5, minutes=4, file_span_s=15), config.source.path)
    landing = Path(config.source.path)
    names = {f.name for f in landing.glob("part-*.jsonl")}
    held = _hold_back(landing, tmp_path / "held", keep=2)

    def committed() -> tuple[int, set[str]]:
        markers = T.read_if_exists(config, S.WATERMARKS, ["batch_id", "source_progress"])
        if markers is None or markers.empty:
            return -1, set()
        read = {Path(f).name for p in markers["source_progress"] for f in json.loads(p)["files"]}
        return int(markers["batch_id"].max()), read

    def feed() -> None:
        # One file at a time, the next once the stream has committed the last: the stream keeps
        # committing for as long as there are files, however slow the machine is.
        for file in held:
            shutil.move(str(file), landing / file.name)
            until = time.monotonic() + 120
            while file.name not in committed()[1] and time.monotonic() < until:
                time.sleep(0.3)

    query, _processor = start_stream(spark, config, once=False, **QUIET)
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    overlapped, runs = [], []
    try:
        deadline = time.monotonic() + 240
        while committed()[0] < 1:
            assert time.monotonic() < deadline and query.isActive, query.exception()
            time.sleep(0.5)
        eight_days = 8 * 86_400_000
        longer = config.maintenance.model_copy(
            update={"vacuum_retention": eight_days, "log_retention": eight_days}
        )
        configs = [config.model_copy(update={"maintenance": longer}), config]
        while feeder.is_alive() or len(runs) < 2:
            first = committed()[0]
            runs.append(maintain(spark, configs[min(len(runs), 1)], **QUIET))
            overlapped.append(committed()[0] > first)
            assert query.isActive, query.exception()
        # The last files: the deadline counts from the stream's last commit, not from the start
        # (maintenance runs beside it take minutes on a loaded 2-core machine).
        last, quiet_until = committed()[0], time.monotonic() + 120
        while committed()[1] != names:
            assert time.monotonic() < quiet_until and query.isActive, (query.exception(), last)
            if committed()[0] > last:
                last, quiet_until = committed()[0], time.monotonic() + 120
            time.sleep(0.5)
    finally:
        query.stop()
    assert query.exception() is None
    assert sum(overlapped) >= 2, "the stream committed no batch while maintenance ran"
    assert all("properties" in r.done for r in runs[0].tables)
    assert any(
        r.after.files < r.before.files for run in runs for r in run.tables if r.kind in (ZORDER, COMPACT)
    )
    assert_exactly_once(spark, config, truth)
    print(
        f"\n{len(runs)} maintenance runs beside the live stream, {sum(overlapped)} while it committed; "
        f"{sum(retried)} stream writes retried after a property change"
    )
    for run in runs:
        print(run.summary())


def test_a_delta_rs_checkpoint_after_a_spark_one_leaves_the_checkpoint_readable_by_spark(spark, tmp_path):
    """Spark checkpoints every 10 of its commits and its local file system writes a checksum of
    ``_last_checkpoint``; delta-rs rewriting that file (a maintenance checkpoint) left the
    checksum stale, so every fresh Spark reader of the table failed to read it (ChecksumException),
    logged it as corrupted and slept ~3 s before listing the log instead (found by
    bench/soak.py: the stream's restart after a maintenance run)."""
    from deltalake import DeltaTable

    path = str(tmp_path / "table")
    for i in range(11):  # Spark's own checkpoint at version 10
        spark.range(i, i + 1).write.format("delta").mode("append").save(path)
    log = tmp_path / "table" / "_delta_log"
    jvm = spark.sparkContext._jvm
    target = jvm.org.apache.hadoop.fs.Path(f"file:{log / '_last_checkpoint'}")
    fs = target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def read_through_hadoop() -> bytes:  # how Spark's Delta reads it: checksummed
        stream = fs.open(target)
        try:
            return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    assert (log / "._last_checkpoint.crc").exists() and not T.drop_stale_checksum(path)  # it matches
    assert read_through_hadoop() == (log / "_last_checkpoint").read_bytes()
    spark.range(11, 12).write.format("delta").mode("append").save(path)
    DeltaTable(path).create_checkpoint()  # version 11: delta-rs rewrites _last_checkpoint
    with pytest.raises(Exception, match="ChecksumException"):
        read_through_hadoop()  # the bug, as Spark meets it
    assert T.drop_stale_checksum(path) and not (log / "._last_checkpoint.crc").exists()
    assert b'"version":11' in read_through_hadoop()
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    assert spark.read.format("delta").load(path).count() == 12


def test_zorder_writes_row_groups_a_lookup_can_skip_and_leaves_the_session_as_it_was(spark, tmp_path):
    """Compacted events come in small row groups, so the dedup lookup, which reads every row group
    whose event-time statistics cover a retry, reads a few of them instead of the whole file (one
    group per file by Spark's default). The stream appends roughly in event-time order and
    ZORDER's range shuffle keeps that order within a file (local master): each group spans a
    short stretch of time."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from tidemark.maintenance import ZORDER_ROW_GROUP_BYTES, maintain_table

    config = write_config(tmp_path, name="rg")
    path = config.table_path(S.EVENTS)
    rows, appends = 1_200_000, 3
    frame = spark.range(rows).select(
        F.expr("uuid()").alias("event_id"), (F.col("id") * 1000).alias("event_time")
    )
    for part in range(appends):  # like batches: each a later stretch of event time
        lo, hi = part * rows // appends, (part + 1) * rows // appends
        frame.where(F.col("id").between(lo, hi - 1)).coalesce(1).write.format("delta").mode("append").save(
            path
        )
    spark.conf.unset("parquet.block.size")
    result = maintain_table(spark, config, S.EVENTS, ZORDER, echo=lambda m: None)
    assert "zorder by event_time" in result.done and result.after.files == 1
    assert spark.conf.get("parquet.block.size", None) is None  # the session's own setting back
    [file] = T.open_table(path).file_uris()
    meta = pq.ParquetFile(file).metadata
    assert meta.num_rows == rows and meta.num_row_groups >= 8, meta.num_row_groups
    column = next(i for i in range(meta.num_columns) if meta.schema.column(i).name == "event_time")
    spans = []
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        assert group.total_byte_size < 4 * ZORDER_ROW_GROUP_BYTES
        stats = group.column(column).statistics
        spans.append((stats.min, stats.max))
    # A retry's event time falls in a few groups, not in all of them: its own, a neighbour at a
    # boundary, and a group that straddles two appends (the shuffle joins them in any order).
    covering = [sum(lo <= t <= hi for lo, hi in spans) for t in range(0, rows * 1000, 1000 * (rows // 97))]
    assert min(covering) >= 1 and max(covering) <= appends + 1, (covering, spans)
    assert sum(covering) / len(covering) <= 2.5, (covering, len(spans))
    assert len(T.read_local(path)) == rows
