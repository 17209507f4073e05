"""Completeness in the tables (tidemark.completeness) against delta-rs, without Spark: the claim's
properties and commit metadata, raised and never lowered, read back by a reader that knows only
the table, and ``tidemark completeness``. The stream writing them, killed anywhere:
tests/crash/test_completeness.py."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from helpers import write_config

from tidemark import completeness as C
from tidemark import tables as T
from tidemark.cli import main
from tidemark.timeutil import parse_instant_ms
from tidemark.windows import TumblingWindows

MINUTE = 60_000
HOUR = 60 * MINUTE
T0 = parse_instant_ms("2026-01-01T10:00:00Z")
WINDOWS = TumblingWindows(MINUTE, 2 * MINUTE)


def _table(path, metadata: str | None = None) -> None:
    custom = {"userMetadata": metadata} if metadata is not None else None
    write_deltalake(
        str(path), pa.table({"v": [1]}), mode="append", commit_properties=CommitProperties(custom)
    )


def _claim(batch: int, watermark: int) -> C.Completeness:
    return C.Completeness.of(batch, watermark, WINDOWS)


def test_a_claim_is_iso_instants_and_milliseconds_in_properties_and_commit_metadata():
    claim = _claim(7, T0 + 20 * MINUTE)
    assert claim.final_through_ms == T0 + 18 * MINUTE  # the watermark less the allowed lateness
    assert claim.properties() == {
        "tidemark.watermark": "2026-01-01T10:20:00.000Z",
        "tidemark.watermark_ms": str(T0 + 20 * MINUTE),
        "tidemark.final_through": "2026-01-01T10:18:00.000Z",
        "tidemark.final_through_ms": str(T0 + 18 * MINUTE),
        "tidemark.window_ms": "60000",
        "tidemark.batch": "7",
    }
    assert json.loads(claim.user_metadata()) == {
        "tidemark.batch": 7,
        "tidemark.watermark": "2026-01-01T10:20:00.000Z",
        "tidemark.watermark_ms": T0 + 20 * MINUTE,
        "tidemark.final_through": "2026-01-01T10:18:00.000Z",
        "tidemark.final_through_ms": T0 + 18 * MINUTE,
        "tidemark.window_ms": 60_000,
    }
    read = C.Completeness.from_properties(claim.properties(), version=3)
    assert (read.watermark_ms, read.final_through_ms, read.window_ms, read.batch_id) == (
        claim.watermark_ms,
        claim.final_through_ms,
        60_000,
        7,
    )
    assert read.source == "properties"
    assert C.Completeness.from_user_metadata(claim.user_metadata(), 4) == C.Completeness(
        claim.watermark_ms, claim.final_through_ms, 60_000, 7, version=4, source="commit"
    )
    # before the first watermark a batch claims nothing, and its commits say only which batch
    assert json.loads(C.Completeness.of(0, None, WINDOWS).user_metadata()) == {
        "tidemark.batch": 0,
        "tidemark.window_ms": 60_000,
    }
    assert C.Completeness.from_user_metadata('{"tidemark_batch": 3}') is None
    assert C.Completeness.from_user_metadata("not json") is None


def test_complete_and_final_are_the_closing_and_finality_rules_over_the_windows_covering_a_range():
    claim = _claim(1, T0 + HOUR + 90_000)  # 11:01:30; final through 10:59:30
    assert claim.is_complete(T0, T0 + HOUR)  # every window of 10:00-11:00 ended by 11:01:30
    assert not claim.is_final(T0, T0 + HOUR)  # 10:59-11:00 is not final before 11:02
    assert claim.is_final(T0, T0 + 59 * MINUTE)
    assert claim.is_complete(T0 + HOUR, T0 + HOUR + MINUTE)
    # a range inside a window needs the whole window closed: 11:01:00-11:01:10 is in 11:01-11:02
    assert not claim.is_complete(T0 + HOUR + MINUTE, T0 + HOUR + MINUTE + 10_000)
    for start in range(T0, T0 + 2 * HOUR, MINUTE):  # the same answers as tidemark.windows
        assert claim.is_complete(start, start + MINUTE) == WINDOWS.is_closed(start, claim.watermark_ms)
        assert claim.is_final(start, start + MINUTE) == WINDOWS.is_final(start, claim.watermark_ms)
    nothing = C.Completeness()
    assert not nothing.is_complete(0, 1) and not nothing.is_final(0, 1)
    with pytest.raises(ValueError, match="empty range"):
        claim.is_complete(T0, T0)


def test_properties_are_raised_and_never_lowered(tmp_path):
    path = str(tmp_path / "windows")
    assert C.publish(path, _claim(1, T0), "windows") is None  # no table yet: nothing to claim on
    _table(path)
    assert C.publish(path, _claim(1, T0 + 5 * MINUTE), "windows").watermark_ms == T0 + 5 * MINUTE
    version = DeltaTable(path).version()
    # a replayed or older batch, a restart with a lower watermark: nothing written, nothing lowered
    for lower in (_claim(1, T0 + 5 * MINUTE), _claim(0, T0 + MINUTE), _claim(9, T0)):
        after = C.publish(path, lower, "windows")
        assert after.watermark_ms == T0 + 5 * MINUTE and after.batch_id == 1
    assert DeltaTable(path).version() == version
    # a longer allowed lateness lowers the claim's final_through: the table keeps the larger one
    longer = C.Completeness.of(2, T0 + 6 * MINUTE, TumblingWindows(MINUTE, 10 * MINUTE))
    after = C.publish(path, longer, "windows")
    assert (after.watermark_ms, after.final_through_ms) == (T0 + 6 * MINUTE, T0 + 3 * MINUTE)
    got = C.completeness(path)
    assert (got.watermark_ms, got.final_through_ms, got.batch_id, got.source) == (
        T0 + 6 * MINUTE,
        T0 + 3 * MINUTE,
        2,
        "properties",
    )
    assert got.version == DeltaTable(path).version() == version + 1
    configuration = DeltaTable(path).metadata().configuration
    assert configuration["tidemark.watermark"] == "2026-01-01T10:06:00.000Z"
    assert configuration["tidemark.final_through"] == "2026-01-01T10:03:00.000Z"
    # the property commit says what it claims, as every commit of the batch does
    newest = DeltaTable(path).history(1)[0]
    assert newest["operation"] == "SET TBLPROPERTIES"
    assert json.loads(newest["userMetadata"])["tidemark.watermark_ms"] == T0 + 6 * MINUTE


def test_a_property_commit_that_loses_to_a_concurrent_metadata_commit_is_tried_again(tmp_path, monkeypatch):
    """`tidemark maintain` setting retention properties races the stream's raise: the raise fails
    ("Metadata changed") and is tried again on a fresh read, keeping maintenance's change."""
    path = str(tmp_path / "windows")
    _table(path)
    real, raced = T.open_if_exists, []

    def racing_open(target):
        stale = real(target)
        if not raced:
            DeltaTable(target).alter.set_table_properties({"delta.logRetentionDuration": "interval 31 days"})
            raced.append(stale.version())
        return stale

    monkeypatch.setattr(T, "open_if_exists", racing_open)
    after = C.publish(path, _claim(3, T0 + 4 * MINUTE), "windows")
    assert raced and after.watermark_ms == T0 + 4 * MINUTE
    configuration = DeltaTable(path).metadata().configuration
    assert configuration["delta.logRetentionDuration"] == "interval 31 days"
    assert configuration["tidemark.watermark_ms"] == str(T0 + 4 * MINUTE)


def test_a_table_without_properties_is_read_from_its_newest_commit_with_a_claim(tmp_path):
    path = str(tmp_path / "events")
    _table(path, _claim(1, T0 + MINUTE).user_metadata())
    _table(path, _claim(2, T0 + 3 * MINUTE).user_metadata())
    _table(path)  # a commit without a claim (maintenance's, another writer's) is passed over
    got = C.completeness(path)
    assert (got.watermark_ms, got.batch_id, got.version, got.source) == (T0 + 3 * MINUTE, 2, 1, "commit")
    assert C.completeness(path, storage_options={}).watermark_ms == T0 + 3 * MINUTE
    bare = str(tmp_path / "bare")
    _table(bare)
    assert C.completeness(bare) == C.Completeness(version=0)


def test_the_completeness_command_prints_the_tables_claim_and_an_hours_answer(tmp_path, capsys):
    config = write_config(tmp_path, name="clicks", window={"size": "1m", "allowed_lateness": "2m"})
    config_path = str(tmp_path / "clicks.yaml")
    windows = config.table_path("windows")
    _table(windows)
    C.publish(
        windows, C.Completeness.of(12, T0 + HOUR + MINUTE, TumblingWindows(MINUTE, 2 * MINUTE)), "windows"
    )

    assert main(["completeness", "--config", config_path, "--hour", "2026-01-01T10:30:00Z", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {
        "pipeline": "clicks",
        "table": "windows",
        "path": windows,
        "watermark": "2026-01-01T11:01:00.000Z",
        "watermark_ms": T0 + HOUR + MINUTE,
        "final_through": "2026-01-01T10:59:00.000Z",
        "final_through_ms": T0 + HOUR - MINUTE,
        "window_ms": 60_000,
        "batch": 12,
        "version": 1,
        "source": "properties",
        "hour": {
            "start": "2026-01-01T10:00:00.000Z",
            "end": "2026-01-01T11:00:00.000Z",
            "start_ms": T0,
            "end_ms": T0 + HOUR,
            "complete": True,
            "final": False,
        },
    }
    assert main(["completeness", "--config", config_path, "--hour", str(T0 - 1)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "[clicks] windows: complete through 2026-01-01T11:01:00.000Z, final through "
        "2026-01-01T10:59:00.000Z (1m windows, batch 12, version 1, from the table properties)",
        "[clicks] hour 2026-01-01T09:00:00.000Z .. 2026-01-01T10:00:00.000Z: complete, final",
    ]
    # a table without a claim yet, and one that does not exist yet: nothing claimed, exit 0
    assert main(["completeness", "--config", config_path, "--table", "events", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["watermark"], out["source"], out["version"]) == (None, "none", None)
    assert main(["completeness", "--config", config_path, "--table", "late_events"]) == 0
    assert capsys.readouterr().out == "[clicks] late_events: nothing claimed complete yet\n"


def test_the_stream_writer_carries_the_claim_in_a_commits_user_metadata(tmp_path):
    """delta-rs commits (tidemark.tables.TableWriter.write_local) take the batch's claim as
    Delta's ``userMetadata``, beside the app transaction; Spark's route: the crash test."""
    from tidemark.identity import RunIdentity

    config = write_config(tmp_path)
    identity = RunIdentity(
        pipeline=config.pipeline, run_id="r1", tables_root=config.tables_root, created_at="2025-11-22T10:00Z"
    )
    writer = T.TableWriter(config, identity)
    claim = _claim(4, T0 + 7 * MINUTE).user_metadata()
    writer.write_local(pa.table({"v": [1]}), "windows", 4, user_metadata=claim)
    writer.write_local(pa.table({"v": [1]}), "windows", 4, user_metadata=claim)  # a replay: no commit
    history = DeltaTable(writer.path("windows")).history()
    assert len(history) == 1 and history[0]["userMetadata"] == claim and history[0]["tidemark_batch"] == "4"
    assert C.completeness(writer.path("windows")).watermark_ms == T0 + 7 * MINUTE
