"""The idempotent writer (tidemark.tables) against delta-rs, without Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest
from helpers import write_config

from tidemark import tables as T
from tidemark.identity import RunIdentity


def _writer(tmp_path) -> T.TableWriter:
    config = write_config(tmp_path)
    identity = RunIdentity(
        pipeline=config.pipeline, run_id="r1", tables_root=config.tables_root, created_at="2025-11-22T10:00Z"
    )
    return T.TableWriter(config, identity)


def _rows(n: int) -> pa.Table:
    return pa.table({"batch_id": pa.array([n] * 3, pa.int64()), "v": pa.array([1, 2, 3], pa.int64())})


def test_a_new_table_carries_the_configured_retention_properties(tmp_path):
    from deltalake import DeltaTable

    writer = _writer(tmp_path)
    writer.write_local(_rows(0), "windows", 0)
    configuration = DeltaTable(writer.path("windows")).metadata().configuration
    assert configuration["delta.deletedFileRetentionDuration"] == "interval 7 days"
    assert configuration["delta.logRetentionDuration"] == "interval 7 days"


def test_a_write_that_loses_its_commit_to_a_property_change_is_retried_once(tmp_path, monkeypatch):
    """`tidemark maintain` setting a table's retention is a metadata commit; a stream write racing
    it fails before committing anything, and is written again (once: the app transaction)."""
    import deltalake
    from deltalake import DeltaTable

    writer = _writer(tmp_path)
    path = writer.path("windows")
    writer.write_local(_rows(0), "windows", 0)
    real = deltalake.write_deltalake
    raced, calls = [], []

    def racing_write(target, data, **kwargs):
        calls.append(1)
        if not raced:  # the write's snapshot is taken, then a property change commits first
            stale = DeltaTable(target)
            DeltaTable(target).alter.set_table_properties({"delta.logRetentionDuration": "interval 31 days"})
            raced.append(stale.version())
            return real(stale, data, **kwargs)
        return real(target, data, **kwargs)

    monkeypatch.setattr(deltalake, "write_deltalake", racing_write)
    writer.write_local(_rows(1), "windows", 1)
    assert raced and len(calls) == 2  # the first commit failed ("Metadata changed"), the retry did not
    table = DeltaTable(path)
    assert sorted(table.to_pyarrow_table()["batch_id"].to_pylist()) == [0, 0, 0, 1, 1, 1]
    assert table.transaction_version(f"{writer.identity.app_id}:windows") == 1


def test_other_commit_failures_are_not_retried(tmp_path, monkeypatch):
    import deltalake
    from deltalake.exceptions import CommitFailedError

    writer = _writer(tmp_path)
    calls = []

    def failing_write(*args, **kwargs):
        calls.append(1)
        raise CommitFailedError("Failed to commit transaction: a concurrent transaction deleted data")

    monkeypatch.setattr(deltalake, "write_deltalake", failing_write)
    with pytest.raises(CommitFailedError, match="concurrent transaction deleted"):
        writer.write_local(_rows(0), "windows", 0)
    assert len(calls) == 1


def test_the_latest_marker_reads_only_the_files_that_can_hold_it(tmp_path):
    """A marker per file (batches 0-4), then one file holding batches 5-7: the newest row, with
    and without an upper bound, equals a full scan's; the statistics bound the read to the
    newest files."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable, write_deltalake

    path = str(tmp_path / "watermarks")

    def markers(*batches: int) -> pa.Table:
        return pa.table(
            {
                "batch_id": pa.array(batches, pa.int64()),
                "watermark_ms": pa.array([b * 10 for b in batches], pa.int64()),
            }
        )

    for b in range(5):
        write_deltalake(path, markers(b), mode="append")
    write_deltalake(path, markers(7, 5, 6), mode="append")
    every = DeltaTable(path).to_pyarrow_table()["batch_id"].to_pylist()
    for bound in (None, -1, 0, 3, 4, 5, 6, 7, 100):
        wanted = max((b for b in every if bound is None or b <= bound), default=None)
        row = T.latest_marker(path, max_batch=bound)
        assert (row["batch_id"] if row else None) == wanted, bound
        assert row is None or row["watermark_ms"] == wanted * 10
    adds = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    assert T._present_batch_floor(adds, None) == 7
    assert T._present_batch_floor(adds, 6) == 5  # the 5-7 file proves 5 is there
    assert T._present_batch_floor(adds, 3) == 3
    # files left to read by the floor: only the newest one without a bound
    left = DeltaTable(path).to_pyarrow_dataset().get_fragments(filter=ds.field("batch_id") >= 7)
    assert len(list(left)) == 1
