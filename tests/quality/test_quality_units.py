"""Suites as data, parameters and the frames the suites see: no Spark, no pipeline."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import write_config

from tidemark.config import ConfigError
from tidemark.quality import SUITE_NAMES, load_suites, suite_parameters
from tidemark.quality_frames import batches_in_range, raw_batches_frame, watermarks_frame, windows_frame
from tidemark.resources import suites_dir


def test_every_suite_file_loads_and_names_each_expectation():
    specs = load_suites()
    assert [s.name for s in specs] == list(SUITE_NAMES)
    checks = [e["meta"]["check"] for s in specs for e in s.data["expectations"]]
    assert len(checks) == len(set(checks)), "check names must be unique across suites"
    from great_expectations.core.expectation_suite import ExpectationSuite

    for spec in specs:  # GX itself accepts every file as a suite
        assert len(ExpectationSuite(**spec.data).expectations) == len(spec.data["expectations"])


def test_thresholds_come_from_config_then_suite_defaults_then_overrides(tmp_path):
    config = write_config(tmp_path, reconcile={"target": 0.995}, watermark={"lag_threshold": "90s"})
    specs = load_suites()
    params = suite_parameters(config, specs)
    assert params["reconcile_target"] == 0.995
    assert params["max_watermark_lag_ms"] == 90_000
    assert params["window_ms"] == 60_000
    assert params["max_late_share"] == 0.01  # the suite's default
    assert suite_parameters(config, specs, {"max_late_share": 0.2})["max_late_share"] == 0.2
    tuned = write_config(tmp_path, quality={"thresholds": {"max_late_share": 0.05}})
    assert suite_parameters(tuned, specs)["max_late_share"] == 0.05  # the pipeline's own value
    assert suite_parameters(tuned, specs, {"max_late_share": 0.2})["max_late_share"] == 0.2


def test_unknown_threshold_is_a_one_line_error(tmp_path):
    config = write_config(tmp_path)
    with pytest.raises(
        ConfigError, match=r"^unknown threshold max_lag \(the suites define: .*max_late_share"
    ):
        suite_parameters(config, load_suites(), {"max_lag": 1})
    misnamed = write_config(tmp_path, quality={"thresholds": {"max_late": 0.1}})
    with pytest.raises(ConfigError, match=r"^config quality.thresholds: unknown threshold max_late \("):
        suite_parameters(misnamed, load_suites())


def test_missing_or_unnamed_suite_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"tidemark_raw_events.json: file not found"):
        load_suites(tmp_path)
    for name in SUITE_NAMES:
        (tmp_path / f"tidemark_{name}.json").write_text((suites_dir() / f"tidemark_{name}.json").read_text())
    data = json.loads((tmp_path / "tidemark_windows.json").read_text())
    del data["expectations"][0]["meta"]["check"]
    (tmp_path / "tidemark_windows.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"expect_compound_columns_to_be_unique has no meta.check name"):
        load_suites(tmp_path)


def test_at_least_once_pipelines_skip_the_event_id_uniqueness_check():
    raw = next(s for s in load_suites() if s.name == "raw_events")
    checks = lambda mode: [e["meta"]["check"] for e in raw.for_mode(mode)["expectations"]]  # noqa: E731
    assert "event_id_unique" in checks("exactly_once")
    assert "event_id_unique" not in checks("at_least_once")


def _marks(watermarks, frontier=None, ts=None, stall_since=None):
    n = len(watermarks)
    return pd.DataFrame(
        {
            "batch_id": range(n),
            "watermark_ms": watermarks,
            "previous_ms": [None, *watermarks[:-1]],
            "frontier_ms": frontier or [w if w is not None else None for w in watermarks],
            "batch_ts_ms": ts or [1_000 * i for i in range(n)],
            "stall_since_ms": stall_since or [None] * n,
            "state": ["ADVANCING"] * n,
            "events": [100] * n,
            "heartbeats": [0] * n,
            "quarantined": [0] * n,
        }
    )


def test_range_keeps_the_batch_before_it_so_a_regression_at_the_start_is_seen():
    marks = _marks([10, 20, 30, 40, 50])
    assert batches_in_range(marks, 30, 40)["batch_id"].tolist() == [1, 2, 3]
    assert batches_in_range(marks, None, None)["batch_id"].tolist() == [0, 1, 2, 3, 4]
    assert batches_in_range(marks, 10, 20)["batch_id"].tolist() == [0, 1]


def test_small_batches_are_not_rated_for_quarantine():
    marks = _marks([1, 2, 3]).assign(events=[990, 2, 0], quarantined=[10, 1, 0])
    frame = raw_batches_frame(marks, min_batch_lines=100)
    assert frame["quarantine_rate"].iloc[0] == pytest.approx(0.01)
    assert frame["quarantine_rate"].iloc[1:].isna().all()


def test_lag_inside_an_open_stall_is_not_held_against_the_watermark():
    marks = _marks([100, 100, 100], frontier=[100, 90_100, 90_100], stall_since=[None, None, 5])
    frame = watermarks_frame(marks, None)
    assert frame["lag_ms"].tolist() == [0, 90_000, 90_000]
    assert frame["in_stall"].tolist() == [False, False, True]
    assert frame["lag_outside_stall_ms"].iloc[:2].tolist() == [0, 90_000]
    assert pd.isna(frame["lag_outside_stall_ms"].iloc[2])


def test_report_locations_lists_only_published_pages_without_spark(tmp_path):
    from tidemark.quality_site import data_docs_index
    from tidemark.report import report_locations, report_path

    config = write_config(tmp_path)
    assert report_locations(config) == {}
    report_path(config).parent.mkdir(parents=True)
    report_path(config).write_text("<html></html>")
    assert report_locations(config) == {
        "reconciliation": tmp_path / "warehouse" / "t" / "_quality" / "reconciliation.html"
    }
    data_docs_index(config).parent.mkdir(parents=True)
    data_docs_index(config).write_text("<html></html>")
    assert list(report_locations(config)) == ["reconciliation", "data-docs"]


def test_windows_of_a_batch_in_flight_are_not_validated_but_a_missing_marker_is_seen():
    minute = 60_000
    ts = lambda ms: pd.Timestamp(ms, unit="ms", tz="UTC")  # noqa: E731
    windows = pd.DataFrame(
        {
            "window_start": [ts(0), ts(minute), ts(2 * minute)],
            "window_end": [ts(minute), ts(2 * minute), ts(3 * minute)],
            "key": ["k", "k", "k"],
            "events": [1, 1, 1],
            "value_sum": [1.0, 1.0, 1.0],
            "batch_id": [0, 2, 3],  # batch 1 has no marker; batch 3 is not committed yet
            "low_watermark": [ts(minute), ts(2 * minute), ts(3 * minute)],
        }
    )
    marks = _marks([minute, 2 * minute, 2 * minute]).drop(index=1)  # batches 0 and 2
    frame = windows_frame(windows, marks, minute)
    assert frame["batch_id"].tolist() == [0, 2]
    assert frame["batch_watermark_ms"].tolist() == [minute, 2 * minute]
    marks = _marks([minute, 2 * minute, 2 * minute, 3 * minute]).drop(index=1)
    frame = windows_frame(windows.assign(batch_id=[0, 1, 3]), marks, minute)
    assert frame["batch_id"].tolist() == [0, 1, 3] and pd.isna(frame["batch_watermark_ms"].iloc[1])


def test_data_docs_links_to_static_resolve_at_every_depth(tmp_path):
    from tidemark.quality import fix_static_links

    site = tmp_path / "local_site"
    (site / "static" / "images").mkdir(parents=True)
    (site / "static" / "images" / "favicon.ico").write_bytes(b"icon")
    pages = {
        "index.html": "./static/images/favicon.ico",
        "expectations/s.html": "../static/images/favicon.ico",
        # what GX 1.24 writes four levels deep: one ../ short
        "validations/s/run/20251122T100000Z/batch.html": "../../../static/images/favicon.ico",
    }
    for rel, link in pages.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(f'<link rel="icon" href="{link}"><a href="https://x.io/static/a">x</a>')
    assert fix_static_links(site) == 1
    for rel in pages:
        text = (site / rel).read_text()
        link = text.split('href="')[1].split('"')[0]
        assert ((site / rel).parent / link).resolve().is_file(), (rel, link)
        assert 'href="https://x.io/static/a"' in text  # external links untouched
    assert fix_static_links(site) == 0  # idempotent
