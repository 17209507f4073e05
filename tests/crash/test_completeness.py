"""Completeness in the tables under kills: the stream, SIGKILLed at chosen points around the
windows write, the commit marker and the property commit, then restarted, leaves in ``windows``
table properties and commit ``userMetadata`` that a reader knowing only Delta (delta-rs here,
Spark at the end) can trust: never more than the committed watermark, never lowered, never an
hour complete whose windows are not all in the table yet, and in the end the final watermark."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass

import pandas as pd
from deltalake import DeltaTable
from helpers import small_scenario, write_config
from test_exactly_once import finish, start_job

from tidemark import completeness as C
from tidemark.cli import main
from tidemark.committed import read_committed
from tidemark.generator import generate_files
from tidemark.tables import epoch_ms
from tidemark.windows import TumblingWindows

WINDOW_MS = 60_000

# (kill point, do the properties equal the committed watermark at the kill?) In this scenario
# batches 1-6 advance the watermark and close windows, 7-10 carry only retries (the watermark
# stays). Between a batch's commit marker and its property commit they lag the marker, never lead.
KILLS = [
    ("after:windows@3", True),  # batch 3's windows (and their userMetadata) in, its marker not
    ("before:properties:windows@4", False),  # batch 4 committed, its properties not raised yet
    ("after:properties:windows@5", True),  # raised; Spark's commit of batch 5 not written
    ("after:watermarks@6", False),  # the last advance: committed, properties not raised
    # the restart replays batch 6, finds it committed and skips it, raising the properties then:
    # batch 7 (which does not move the watermark) is killed before it could raise them itself
    ("before:_state/open_windows@7", True),
]


@dataclass
class Seen:
    """What a reader saw after one run of the stream."""

    point: str
    claim: C.Completeness  # the table properties
    commit: C.Completeness | None  # the newest commit's userMetadata claim
    committed_ms: int | None  # the committed watermark (the newest commit marker)
    windows: pd.DataFrame  # the windows table's rows
    ontime: dict  # (window, key) -> on-time records in the events table (written before windows)


def _windows(path: str) -> pd.DataFrame:
    rows = DeltaTable(path).to_pandas(
        columns=["window_start", "key", "revision", "is_final", "events", "late_events"]
    )
    rows["w"] = epoch_ms(rows["window_start"]).astype("int64")
    return rows


def _newest_commit_claim(path: str) -> C.Completeness | None:
    for commit in DeltaTable(path).history():
        found = C.Completeness.from_user_metadata(commit.get("userMetadata"), commit["version"])
        if found is not None:
            return found
    return None


def _ontime_events(path: str) -> dict:
    """(window, key) -> the on-time records of the events table (``is_late`` false)."""
    rows = DeltaTable(path).to_pandas(columns=["window_start", "key", "is_late"])
    rows = rows[~rows["is_late"].astype(bool)]
    counts = rows.groupby([epoch_ms(rows["window_start"]).astype("int64"), rows["key"]]).size()
    return {(int(w), k): int(n) for (w, k), n in counts.items()}


def _upto(counts: dict, through_ms: int) -> dict:
    return {(w, k): n for (w, k), n in counts.items() if w + WINDOW_MS <= through_ms}


def _closed(rows: pd.DataFrame, through_ms: int | None) -> dict:
    """(window, key) -> its on-time count (revision 0: events less late), for every window ending
    at or before ``through_ms`` with on-time records: what a claim through it promises present."""
    if through_ms is None:
        return {}
    first = rows[(rows["revision"] == 0) & (rows["w"] + WINDOW_MS <= through_ms)]
    ontime = first["events"] - first["late_events"]
    return {(w, k): int(n) for w, k, n in zip(first["w"], first["key"], ontime, strict=True) if n > 0}


def _final(rows: pd.DataFrame, through_ms: int | None) -> dict:
    """(window, key) -> its final count, for every window ending at or before ``through_ms``."""
    if through_ms is None:
        return {}
    done = rows[rows["is_final"] & (rows["w"] + WINDOW_MS <= through_ms)]
    return {(w, k): int(n) for w, k, n in zip(done["w"], done["key"], done["events"], strict=True)}


def _look(config, point: str) -> Seen:
    path = config.table_path("windows")
    return Seen(
        point=point,
        claim=C.completeness(path),
        commit=_newest_commit_claim(path),
        committed_ms=read_committed(config).watermark_ms,
        windows=_windows(path),
        ontime=_ontime_events(config.table_path("events")),
    )


def test_the_tables_claim_never_leads_the_commit_never_goes_back_and_ends_at_the_final_watermark(
    spark, tmp_path, capsys
):
    config = write_config(tmp_path, name="crash", window={"size": "1m", "allowed_lateness": "2m"})
    generate_files(small_scenario(), config.source.path)
    config_path = tmp_path / "crash.yaml"
    seen: list[Seen] = []
    for point, exact in KILLS:
        code, out = finish(start_job(config_path, kill_at=point))
        assert code == -signal.SIGKILL, f"kill point {point} was not reached:\n{out[-3000:]}"
        seen.append(_look(config, point))
        s = seen[-1]
        assert s.claim.source == "properties" and s.claim.watermark_ms is not None, point
        # never more than the committed watermark; equal but between a marker and its properties
        assert s.claim.watermark_ms <= s.committed_ms, (point, s.claim, s.committed_ms)
        if exact:
            assert s.claim.watermark_ms == s.committed_ms, (point, s.claim, s.committed_ms)
        assert s.claim.final_through_ms == s.claim.watermark_ms - 2 * WINDOW_MS
    code, out = finish(start_job(config_path))
    assert code == 0, out[-3000:]
    final = _look(config, "end")
    seen.append(final)
    marks = DeltaTable(config.table_path("watermarks")).to_pandas(columns=["batch_id", "watermark_ms"])
    committed = dict(zip(marks["batch_id"], marks["watermark_ms"], strict=True))
    # an older batch raising them again (a replay of batch 3 from an earlier run) lowers nothing
    windows = TumblingWindows(WINDOW_MS, 2 * WINDOW_MS)
    C.publish(config.table_path("windows"), C.Completeness.of(3, int(committed[3]), windows), "windows")
    seen.append(_look(config, "a replay of batch 3"))

    # Nothing claimed is missing: every window a reader was told complete (or final) had, at that
    # moment, all the on-time records the events table held for it (written before the windows)
    # and all the on-time rows (the final rows) the finished table has for it. The commit
    # userMetadata claims the same of the version it is on (it may lead the marker by a batch).
    for s in seen:
        for through in (s.claim.watermark_ms, s.commit.watermark_ms):
            promised = _closed(final.windows, through)
            assert promised and _closed(s.windows, through) == promised, (s.point, through)
            assert _closed(s.windows, through) == _upto(s.ontime, through), (s.point, through)
        for through in (s.claim.final_through_ms, s.commit.final_through_ms):
            assert _final(s.windows, through) == _final(final.windows, through), (s.point, through)
        assert s.commit.watermark_ms >= s.claim.watermark_ms, s.point
    # never backwards, run after run
    claims = [s.claim.watermark_ms for s in seen]
    assert claims == sorted(claims), [(s.point, s.claim.watermark_ms) for s in seen]
    assert [s.claim.final_through_ms for s in seen] == sorted(s.claim.final_through_ms for s in seen)
    # in the end: the properties, the newest commit's userMetadata and the commit marker agree
    assert final.claim.watermark_ms == final.committed_ms == final.commit.watermark_ms
    assert final.claim.batch_id == final.commit.batch_id
    assert final.claim.final_through_ms == final.committed_ms - 2 * WINDOW_MS

    # each batch's commits carry the watermark that batch committed (a replay's first attempt too)
    for table in ("windows", "events", "late_events"):
        claimed = [
            C.Completeness.from_user_metadata(c.get("userMetadata"))
            for c in DeltaTable(config.table_path(table)).history()
        ]
        claimed = [c for c in claimed if c is not None]
        assert claimed, table
        assert all(committed[c.batch_id] == c.watermark_ms for c in claimed), table

    # a Spark reader sees the same, in SQL
    path = config.table_path("windows")
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    assert int(props["tidemark.watermark_ms"]) == final.committed_ms
    assert props["tidemark.watermark"] == final.claim.to_dict()["watermark"]
    newest = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]
    assert json.loads(newest["userMetadata"])["tidemark.watermark_ms"] == final.committed_ms

    # and the command says so: the hour holding the data is not complete (the scenario ends six
    # minutes in), the hour before it is complete and final
    hour = final.committed_ms - final.committed_ms % 3_600_000
    for at, complete in ((hour, False), (hour - 1, True)):
        assert main(["completeness", "--config", str(config_path), "--hour", str(at), "--json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["watermark_ms"] == final.committed_ms and answer["source"] == "properties"
        assert answer["hour"]["complete"] is complete and answer["hour"]["final"] is complete


def test_sparks_delta_writer_carries_the_claim_in_user_metadata(spark, tmp_path):
    """The third route of tidemark.tables.TableWriter (Spark's Delta writer: object storage, a
    schema change, an overwrite) sets the same ``userMetadata``."""
    from tidemark.identity import RunIdentity
    from tidemark.tables import TableWriter

    config = write_config(tmp_path)
    identity = RunIdentity(
        pipeline=config.pipeline, run_id="r1", tables_root=config.tables_root, created_at="2025-11-22T10:00Z"
    )
    writer = TableWriter(config, identity)
    claim = C.Completeness.of(5, 1_763_805_960_000, TumblingWindows(WINDOW_MS, 0))
    writer.write(spark.range(3), "quarantine", 5, mode="overwrite", user_metadata=claim.user_metadata())
    newest = DeltaTable(writer.path("quarantine")).history(1)[0]
    assert "Apache-Spark" in newest["engineInfo"]
    assert C.Completeness.from_user_metadata(newest["userMetadata"]) == C.Completeness(
        1_763_805_960_000, 1_763_805_960_000, WINDOW_MS, 5, source="commit"
    )
    assert C.completeness(writer.path("quarantine")).watermark_ms == 1_763_805_960_000
