"""Window revisions on real Spark and Delta: late records within the allowed lateness revise their
windows, the watermark makes each window final once, and the final revisions equal an independent
recompute exactly (the on-time ones plus every late record, too)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from helpers import (
    assert_exactly_once,
    oracle_window_counts,
    small_scenario,
    write_config,
)

from tidemark import revisions
from tidemark.generator import generate_files
from tidemark.reconcile import reconcile
from tidemark.stream import run_stream
from tidemark.tables import epoch_ms

pytestmark = pytest.mark.xdist_group("revisions")


@pytest.fixture(scope="module")
def revised(spark, tmp_path_factory):
    """The small scenario (its two lagging hosts' backlog arrives 37 s after their windows
    closed) with a 2-minute allowed lateness: every late record is folded in, and the watermark,
    driven to the end by the final heartbeats, makes the earlier windows final."""
    root = tmp_path_factory.mktemp("revisions")
    config = write_config(root, name="rev", window={"size": "1m", "allowed_lateness": "2m"})
    scenario = small_scenario(seed=11)
    truth = generate_files(scenario, config.source.path)
    lines: list[str] = []
    run_stream(spark, config, once=True, echo=lines.append)
    return config, scenario, truth, lines


def test_final_revisions_equal_the_recompute_exactly_and_nothing_is_lost(spark, revised):
    config, _scenario, truth, lines = revised
    # latest revision + late beyond lateness == oracle; on-time + every late record == oracle;
    # revisions 0, 1, ... each once, accumulating, at most one final (tests/helpers.py)
    assert_exactly_once(spark, config, truth)
    windows = spark.read.format("delta").load(config.table_path("windows")).toPandas()
    assert (windows["revision"] > 0).any(), "no window was revised"
    assert windows["late_events"].sum() > 0
    late = spark.read.format("delta").load(config.table_path("late_events")).toPandas()
    assert len(late) > 0 and late["folded"].all(), "every late record here is within the allowed lateness"
    newest = revisions.read_latest(config)
    assert newest is not None
    starts = epoch_ms(newest["window_start"])
    got = Counter(
        {(int(ms), k): int(n) for ms, k, n in zip(starts, newest["key"], newest["events"], strict=True)}
    )
    assert +got == oracle_window_counts(Path(config.source.path)), "latest revisions differ from the oracle"
    assert any("folded into" in line for line in lines), "the batch line reports its revisions"


def test_the_watermark_makes_each_window_final_once(spark, revised):
    config, _scenario, *_ = revised
    windows = revisions.normalized(spark.read.format("delta").load(config.table_path("windows")).toPandas())
    finals = windows.groupby(["window_start", "key"])["is_final"].sum()
    ends = windows.groupby(["window_start", "key"])["window_end"].first()
    watermark = spark.read.format("delta").load(config.table_path("watermarks")).agg({"watermark_ms": "max"})
    wm = watermark.collect()[0][0]
    end_ms = epoch_ms(ends)
    for key, n in finals.items():
        final_by_now = int(end_ms[key]) + config.allowed_lateness <= wm
        assert n == (1 if final_by_now else 0), key
    assert finals.sum() > 0


def test_reconcile_reports_on_time_and_final_alignment(spark, revised):
    config, scenario, *_ = revised
    report = reconcile(spark, config, scenario.start_ms, scenario.end_ms)
    oracle = oracle_window_counts(Path(config.source.path))
    assert len(report.closed) == scenario.minutes
    for w in report.closed:
        batch = sum(n for (ws, _), n in oracle.items() if ws == w.window_start_ms)
        assert w.batch_events == batch and w.stream_events == batch  # folded in: complete
        assert w.alignment == 1.0 and w.unexplained == 0 and w.late_events == 0
        assert w.ontime_events == batch - w.late_folded
        assert w.ontime_alignment == pytest.approx(1 - w.late_folded / batch)
    assert any(w.late_folded for w in report.closed)
    assert any(w.final for w in report.closed) and not all(w.final for w in report.closed)
    summary = report.summary()
    assert summary.ok and summary.worst_ontime_alignment < 1.0 == summary.worst_alignment
    assert "on-time" in report.table()
    stored = spark.read.format("delta").load(config.table_path("reconciliation")).toPandas()
    assert {"ontime_alignment", "late_folded", "final", "revisions"} <= set(stored.columns)


def test_the_documented_latest_revision_query_and_change_feed(spark, revised):
    """The README's SQL for the latest revision, and the retract-and-add change stream, give the
    same totals as tidemark.revisions.read_latest."""
    config, *_ = revised
    path = config.table_path("windows")
    sql = f"""
        SELECT window_start, key, events, late_events, is_final
        FROM (
          SELECT *, row_number() OVER (PARTITION BY window_start, key ORDER BY revision DESC) AS rn
          FROM delta.`{path}`
        ) WHERE rn = 1
    """
    rows = spark.sql(sql).toPandas()
    newest = revisions.read_latest(config)
    assert newest is not None

    def keyed(frame):
        starts = epoch_ms(frame["window_start"])
        return {(int(ms), k): int(n) for ms, k, n in zip(starts, frame["key"], frame["events"], strict=True)}

    want = keyed(newest)
    assert keyed(rows) == want
    all_rows = spark.read.format("delta").load(path).toPandas()
    changes = revisions.changes(all_rows)
    net = (
        (changes["sign"] * changes["events"])
        .groupby([epoch_ms(changes["window_start"]), changes["key"]])
        .sum()
    )
    assert {(int(ms), k): int(n) for (ms, k), n in net.items()} == want
    assert (changes["sign"] == -1).any(), "a revision retracts its predecessor"


def test_the_quality_suites_pass_on_revisions_and_catch_a_second_final_revision(spark, revised, tmp_path):
    """GX over real revisions: every suite passes (one row per (window, key, revision), at most
    one final, accumulating; final alignment at target, on-time reported); a second final revision
    of one window fails window_final_at_most_once alone."""
    import shutil

    import pyarrow as pa

    from tidemark import tables as T
    from tidemark.quality import validate_pipeline

    config, scenario, *_ = revised
    reconcile(spark, config, scenario.start_ms, scenario.end_ms)
    root = Path(config.warehouse).parent
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("checkpoints"))
    clean = validate_pipeline(
        write_config(copy, name="rev", window={"size": "1m", "allowed_lateness": "2m"}),
        scenario.start_ms,
        scenario.end_ms,
        build_docs=False,
    )
    assert clean.success, clean.text()
    assert {e.check for e in clean.suite("windows").expectations} >= {
        "window_key_unique",
        "window_final_at_most_once",
        "revisions_accumulate",
        "folded_late_within_events",
    }
    assert {e.check for e in clean.suite("reconciliation").expectations} >= {
        "ontime_alignment_reported",
        "final_gap_is_beyond_lateness",
    }
    broken = write_config(copy, name="rev", window={"size": "1m", "allowed_lateness": "2m"})
    path = broken.table_path("windows")
    rows = T.read_local(path)
    final = rows[rows["is_final"]].sort_values(["window_start", "key"]).iloc[[0]].copy()
    final["revision"] = final["revision"] + 1
    schema = T.open_table(path).to_pyarrow_dataset().schema
    T.write_rs(path, pa.Table.from_pandas(final, preserve_index=False).cast(schema), mode="append")
    outcome = validate_pipeline(broken, scenario.start_ms, scenario.end_ms, build_docs=False)
    assert outcome.failing == ["windows.window_final_at_most_once"], outcome.text()
