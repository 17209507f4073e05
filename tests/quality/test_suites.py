"""The Great Expectations suites on a real pipeline: pass when clean, fail naming the expectation
(and showing the row) for each seeded fault. Faults are written into private copies of the tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import copy_pipeline, read_table, rewrite_table

from tidemark.cli import EXIT_QUALITY, main
from tidemark.quality import SUITE_NAMES, validate_pipeline
from tidemark.timeutil import format_instant_ms

pytestmark = pytest.mark.spark  # the session pipeline is built with Spark


def _run(p, **kwargs):
    return validate_pipeline(p.config, p.scenario.start_ms, p.scenario.end_ms, **kwargs)


def test_every_suite_passes_on_the_clean_pipeline_and_counts_every_row(quality_pipeline):
    outcome = _run(quality_pipeline, build_docs=False)
    assert outcome.success, outcome.text()
    assert [s.suite for s in outcome.suites] == list(SUITE_NAMES)
    assert outcome.failing == []
    config = quality_pipeline.config
    rows = {s.suite: s.rows for s in outcome.suites}
    assert rows["raw_events"] == len(read_table(config, "events")) == 4000
    assert rows["windows"] == len(read_table(config, "windows"))
    assert rows["reconciliation"] == quality_pipeline.scenario.minutes
    assert rows["watermarks"] == read_table(config, "watermarks")["watermark_ms"].notna().sum()
    assert outcome.parameters["reconcile_target"] == 0.99  # from the pipeline config
    assert outcome.events_engine == "pandas"


def test_events_suite_runs_on_spark_with_the_same_verdict(spark, quality_pipeline):
    outcome = _run(quality_pipeline, spark=spark, build_docs=False)
    assert outcome.events_engine == "spark"
    raw = outcome.suite("raw_events")
    assert raw.success and raw.rows == 4000
    assert {e.check for e in raw.expectations} >= {"events_schema", "event_id_unique", "event_time_after_min"}


def test_spark_and_pandas_both_report_failing_event_rows(spark, quality_pipeline):
    cutoff = quality_pipeline.scenario.start_ms + 60_000  # every event of the first minute is "too old"
    for session in (None, spark):
        outcome = _run(
            quality_pipeline, spark=session, build_docs=False, thresholds={"min_event_time_ms": cutoff}
        )
        assert outcome.failing == ["raw_events.event_time_after_min"], outcome.text()
        failing = outcome.suite("raw_events").failing[0]
        assert failing.unexpected_count == 1000
        assert failing.sample_rows and all(r["event_time"] < cutoff for r in failing.sample_rows)


def test_duplicated_window_row_fails_window_key_unique(quality_pipeline, tmp_path):
    p = copy_pipeline(quality_pipeline, tmp_path / "dup")
    rewrite_table(p.config, "windows", lambda w: __import__("pandas").concat([w, w.iloc[[3]]]))
    duplicated = read_table(p.config, "windows").iloc[3]

    outcome = _run(p, build_docs=False)
    assert outcome.failing == ["windows.window_key_unique"], outcome.text()
    check = outcome.suite("windows").failing[0]
    assert check.expectation_type == "expect_compound_columns_to_be_unique"
    assert check.unexpected_count == 2  # both copies of the row
    sample = {(r["window_start"], r["key"]) for r in check.sample_rows}
    start_ms = int(duplicated["window_start"].timestamp() * 1000)
    assert sample == {(format_instant_ms(start_ms), duplicated["key"])}
    assert outcome.samples == {"windows.window_key_unique": check.sample_rows}
    assert "failing: windows.window_key_unique" in outcome.text()


def test_window_committed_before_the_watermark_passed_it_fails_both_commit_checks(quality_pipeline, tmp_path):
    import pandas as pd

    p = copy_pipeline(quality_pipeline, tmp_path / "early")
    marks = read_table(p.config, "watermarks").set_index("batch_id")
    first = int(marks["watermark_ms"].dropna().index.min())  # the first batch with a watermark
    windows = read_table(p.config, "windows")
    last = windows["window_end"].idxmax()
    # The last window as if batch `first` had written it, with that batch's low watermark.
    early_lw = pd.Timestamp(int(marks.loc[first, "global_lw_ms"]), unit="ms", tz="UTC")

    def seed(w):
        w = w.copy()
        w.loc[last, "batch_id"] = first
        w.loc[last, "low_watermark"] = early_lw
        return w

    rewrite_table(p.config, "windows", seed)
    outcome = _run(p, build_docs=False)
    assert outcome.failing == [
        "windows.window_closed_at_or_before_commit_watermark",
        "windows.window_closed_at_or_before_batch_watermark",
    ], outcome.text()
    for check in outcome.suite("windows").failing:
        assert check.unexpected_count == 1
        (row,) = check.sample_rows
        assert row["batch_id"] == first and row["key"] == windows.loc[last, "key"]


def test_misaligned_window_fails_the_alignment_target_from_the_config(quality_pipeline, tmp_path):
    p = copy_pipeline(quality_pipeline, tmp_path / "misaligned")
    victim = {}

    def seed(r):  # 20 records of one window missing from the stream and not late: 0.98 < 0.99
        r = r.copy()
        i = r["window_start"].idxmin()
        r.loc[i, "stream_events"] -= 20
        r.loc[i, "abs_diff"] += 20
        r.loc[i, "unexplained"] += 20
        r.loc[i, "alignment"] = 1 - r.loc[i, "abs_diff"] / r.loc[i, "batch_events"]
        victim["alignment"] = r.loc[i, "alignment"]
        return r

    rewrite_table(p.config, "reconciliation", seed)
    outcome = _run(p, build_docs=False)
    assert outcome.failing == [
        "reconciliation.alignment_at_or_above_target",
        "reconciliation.unexplained_is_zero",
    ], outcome.text()
    (row,) = outcome.suite("reconciliation").failing[0].sample_rows
    assert row["alignment"] == pytest.approx(victim["alignment"]) and row["alignment"] < 0.99
    assert row["window_start"] == format_instant_ms(p.scenario.start_ms)

    # The target is the pipeline's: at 0.975 the same window is aligned (still unexplained).
    lenient = copy_pipeline(p, tmp_path / "lenient", reconcile={"target": 0.975})
    assert _run(lenient, build_docs=False).failing == ["reconciliation.unexplained_is_zero"]


def test_watermark_moving_backwards_fails_never_decreases(quality_pipeline, tmp_path):
    p = copy_pipeline(quality_pipeline, tmp_path / "backwards")
    marks = read_table(p.config, "watermarks").sort_values("batch_id")
    with_wm = marks[marks["watermark_ms"].notna()]
    regressed = int(with_wm["batch_id"].iloc[2])
    lower = int(with_wm["watermark_ms"].iloc[1]) - 1_000  # one second below its predecessor's

    def seed(m):
        m = m.copy()
        m.loc[m["batch_id"] == regressed, "watermark_ms"] = lower
        return m

    rewrite_table(p.config, "watermarks", seed)
    outcome = _run(p, build_docs=False)
    assert outcome.failing == [
        "watermarks.watermark_never_decreases",
        "watermarks.watermark_not_below_its_start",
    ], outcome.text()
    for check in outcome.suite("watermarks").failing:
        assert [r["batch_id"] for r in check.sample_rows] == [regressed]


def test_watermark_lag_fails_outside_a_recorded_stall_and_passes_inside_one(quality_pipeline, tmp_path):
    import pandas as pd
    import pyarrow as pa
    from deltalake import write_deltalake

    from tidemark.schemas import STALL_SCHEMA

    p = copy_pipeline(quality_pipeline, tmp_path / "lag")
    marks = read_table(p.config, "watermarks").sort_values("batch_id")
    held = marks[marks["frontier_ms"].notna()].iloc[1]
    five_min = 5 * 60_000  # above the 1m lag_threshold the bound comes from

    def seed(m):
        m = m.copy()
        m.loc[m["batch_id"] == held["batch_id"], "frontier_ms"] = held["watermark_ms"] + five_min
        return m

    rewrite_table(p.config, "watermarks", seed)
    outcome = _run(p, build_docs=False)
    assert outcome.failing == ["watermarks.watermark_lag_bounded_outside_stalls"], outcome.text()
    assert outcome.suite("watermarks").failing[0].sample_rows[0]["lag_ms"] == five_min

    ts = pd.Timestamp(int(held["batch_ts_ms"]), unit="ms", tz="UTC")
    stall = {
        "started_at": ts - pd.Timedelta(seconds=30),
        "ended_at": ts + pd.Timedelta(seconds=1),
        "duration_ms": 31_000,
        "watermark": pd.Timestamp(int(held["watermark_ms"]), unit="ms", tz="UTC"),
        "hosts_count": 3,
        "hosts": ["h00001", "h00002", "h00003"],
        "closed_batch_id": int(held["batch_id"]) + 1,
    }
    write_deltalake(p.config.table_path("stalls"), pa.Table.from_pylist([stall], schema=STALL_SCHEMA))
    assert _run(p, build_docs=False).success


def test_validate_cli_exits_5_naming_the_failing_expectation(quality_pipeline, tmp_path, capsys):
    p = copy_pipeline(quality_pipeline, tmp_path / "cli")
    args = ["validate", "--config", str(p.config_path), "--no-docs"]
    assert main(args) == 0
    assert "PASSED" in capsys.readouterr().out

    rewrite_table(p.config, "windows", lambda w: __import__("pandas").concat([w, w.iloc[[0]]]))
    assert main([*args, "--json"]) == EXIT_QUALITY
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert payload["success"] is False and payload["failing"] == ["windows.window_key_unique"]
    windows = next(s for s in payload["suites"] if s["suite"] == "windows")
    failing = [e for e in windows["expectations"] if not e["success"]]
    assert failing[0]["sample_rows"] and failing[0]["type"] == "expect_compound_columns_to_be_unique"
    assert captured.err.strip() == "tidemark: 1 expectation(s) failing: windows.window_key_unique"


def test_validate_cli_bad_range_and_threshold_are_one_line_exit_2(quality_pipeline, capsys):
    cfg = str(quality_pipeline.config_path)
    assert (
        main(
            ["validate", "--config", cfg, "--start", "2025-11-22T10:05:00Z", "--end", "2025-11-22T10:00:00Z"]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("tidemark: error: validate: --end (2025-11-22T10:00:00.000Z) must be after --start")
    assert main(["validate", "--config", cfg, "--threshold", "max_lateness=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("tidemark: error: unknown threshold max_lateness")


def test_too_many_events_for_pandas_asks_for_spark(quality_pipeline):
    from tidemark.config import ConfigError

    with pytest.raises(ConfigError, match=r"4,000 events in the range exceed the 1,000 read without Spark"):
        validate_pipeline(quality_pipeline.config, max_local_events=1000, build_docs=False)


def test_data_docs_keep_every_validation_in_their_history(quality_pipeline, tmp_path):
    p = copy_pipeline(quality_pipeline, tmp_path / "docs")
    docs_dir = tmp_path / "gx-docs"
    first = validate_pipeline(p.config, quality_dir=docs_dir)
    second = _run(p, quality_dir=docs_dir)
    assert first.docs_index == second.docs_index
    index = Path(second.docs_index)
    assert index.is_file() and index.is_relative_to(docs_dir)
    stored = sorted((docs_dir / "gx" / "uncommitted" / "validations" / "tidemark_windows").iterdir())
    assert [d.name for d in stored] == ["dq_20251122T100000Z-20251122T100400Z", "dq_all-all"]
    page = index.read_text(encoding="utf-8")
    for suite in SUITE_NAMES:
        assert f"tidemark_{suite}" in page
    assert page.count("dq_all-all") >= len(SUITE_NAMES) and page.count("dq_20251122T100000Z") >= len(
        SUITE_NAMES
    )
