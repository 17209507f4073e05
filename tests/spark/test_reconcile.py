"""Reconciliation on real Spark: metrics per window, idempotent re-runs, seeded faults, CLI."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from helpers import oracle_window_counts, small_scenario, write_config

from tidemark.cli import EXIT_MISALIGNED, EXIT_USAGE, build_parser, main
from tidemark.generator import generate_files
from tidemark.recompute import recompute_windows
from tidemark.reconcile import reconcile
from tidemark.stream import run_stream


@pytest.fixture(scope="module")
def pipeline(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("reconcile")
    # The lagging hosts' records arrive 37 s after their windows closed: beyond this allowed
    # lateness, so they stay in late_events only and no window is revised.
    config = write_config(root, name="rec", window={"size": "1m", "allowed_lateness": "30s"})
    scenario = small_scenario(seed=11)
    generate_files(scenario, config.source.path)
    run_stream(spark, config, once=True, echo=lambda m: None)
    return root, config, scenario


def test_each_closed_window_is_explained_by_its_late_records(spark, pipeline):
    _, config, scenario = pipeline
    report = reconcile(spark, config, scenario.start_ms, scenario.end_ms)
    assert len(report.closed) == scenario.minutes  # final heartbeats close every window
    oracle = oracle_window_counts(__import__("pathlib").Path(config.source.path))
    for w in report.closed:
        batch = sum(n for (ws, _), n in oracle.items() if ws == w.window_start_ms)
        assert w.batch_events == batch
        assert w.stream_events + w.late_events == batch and w.unexplained == 0
        assert w.abs_diff == w.late_events
        assert w.alignment == pytest.approx(1 - w.late_events / batch)
        # nothing folded in: the on-time result is the final one
        assert w.late_folded == 0 and w.ontime_alignment == w.alignment
    assert any(w.late_events for w in report.closed)
    # final once the watermark passed end + 30 s: all but the last window (watermark = its end)
    assert [w.final for w in report.closed] == [True] * (scenario.minutes - 1) + [False]
    assert "beyond the allowed lateness" in report.table()


def test_rerunning_a_range_replaces_its_rows(spark, pipeline):
    _, config, scenario = pipeline
    reconcile(spark, config, scenario.start_ms, scenario.end_ms)
    reconcile(spark, config, scenario.start_ms, scenario.end_ms)
    rows = spark.read.format("delta").load(config.table_path("reconciliation"))
    assert rows.count() == scenario.minutes
    assert rows.select("window_start").distinct().count() == scenario.minutes


def test_reconcile_json_and_help_cover_every_option(spark, pipeline, capsys):
    root, _config, _ = pipeline
    assert main(["reconcile", "--config", str(root / "rec.yaml"), "--json", "--dry-run"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["pipeline"] == "rec" and payload["totals"]["unexplained"] == 0
    assert payload["share_aligned"] is not None
    parser = build_parser()
    for sub in parser._subparsers._group_actions[0].choices.values():
        for action in sub._actions:
            if action.dest != "help":
                assert action.help, f"{sub.prog} {action.option_strings} has no help text"


def test_duplicated_window_row_is_caught_as_misaligned_and_fails_the_cli(spark, pipeline, tmp_path, capsys):
    root, _config, scenario = pipeline
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    broken = write_config(copy, name="rec", window={"size": "1m", "allowed_lateness": "30s"})
    windows = spark.read.format("delta").load(broken.table_path("windows"))
    # the latest revision of a window, written twice (a copy of an older revision changes no
    # result a reader sees; the windows suite's window_key_unique catches that one)
    newest = windows.orderBy(windows["revision"].desc(), windows["window_start"]).limit(1)
    newest.write.format("delta").mode("append").save(broken.table_path("windows"))
    report = reconcile(spark, broken, scenario.start_ms, scenario.end_ms, write=False)
    bad = [w for w in report.closed if w.unexplained != 0]
    assert len(bad) == 1 and bad[0].unexplained < 0 and not bad[0].aligned
    # the records agree (events holds each once): the difference is in the window counts
    assert (bad[0].missing_records, bad[0].extra_records, bad[0].record_sample) == (0, 0, ())
    assert "no record differs between the recompute and events" in report.table()
    code = main(["reconcile", "--config", str(copy / "rec.yaml"), "--fail-below", "0.999"])
    assert code == EXIT_MISALIGNED
    assert "window(s) below 0.999" in capsys.readouterr().err


def test_bad_config_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipeline: x\nsource: {path: p}\nwarehouse: w\ncheckpoint: c\nwindow: soon\n")
    assert main(["stream", "--config", str(bad)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("tidemark: error: config") and "window:" in err


def test_before_the_stream_wrote_anything_every_window_is_open_with_the_batch_counts(spark, tmp_path):
    config = write_config(tmp_path, name="fresh")
    scenario = small_scenario(seed=5, minutes=3)
    generate_files(scenario, config.source.path)
    report = reconcile(spark, config, scenario.start_ms, scenario.end_ms)  # no stream table exists
    oracle = oracle_window_counts(Path(config.source.path))
    assert [w.status for w in report.windows] == ["open"] * scenario.minutes
    for w in report.windows:
        assert w.stream_events == w.late_events == 0
        assert w.batch_events == sum(n for (ws, _), n in oracle.items() if ws == w.window_start_ms) > 0
    stored = spark.read.format("delta").load(config.table_path("reconciliation"))
    assert stored.where("status = 'open' AND stream_events = 0").count() == scenario.minutes


def test_the_recompute_counts_each_record_once_however_often_it_was_published(spark, tmp_path):
    """Retries in the same file and across files count once; an id reused at another time counts
    again (the stream stores it too); of copies whose values differ the smallest is kept; bad
    lines, heartbeats and records outside the range count nowhere."""
    minute = 60_000
    t0 = int(time.time() * 1000) // minute * minute - 10 * minute  # a window start, near now

    def rec(event_id, t, key="k", value=1.0, host="h1"):
        return json.dumps(
            {"event_id": event_id, "host": host, "event_time": t, "msg_time": t, "key": key, "value": value}
        )

    config = write_config(tmp_path, name="recompute")
    landing = Path(config.source.path)
    landing.mkdir(parents=True, exist_ok=True)
    (landing / "part-000000.jsonl").write_text(
        "\n".join(
            [
                rec("a", t0 + 1),
                rec("a", t0 + 1),  # a retry in the same file
                rec("b", t0 + 2, key="j", value=2.0),
                rec("c", t0 + 3, value=5.0),
                rec("c", t0 + 3, value=4.0),  # a copy with another value: the smallest is kept
                rec("r", t0 + 4),
                json.dumps({"host": "h1", "event_time": t0 + 5, "heartbeat": True}),
                '{"event_id": "bad", "host": "h1", "event_time": "soon"}',
                "not json",
                rec("out", t0 + 2 * minute),  # after the range
            ]
        )
        + "\n"
    )
    (landing / "part-000001.jsonl").write_text(
        "\n".join(
            [
                rec("b", t0 + 2, key="j", value=2.0),  # a retry in another file
                rec("r", t0 + minute + 7),  # "r" reused at another time: a second record
                rec("d", t0 + minute + 8, host="h2"),
                rec("a", t0 + 1),  # a third copy of "a"
            ]
        )
        + "\n"
    )
    rows = {
        (r.window_start_ms - t0, r.key): (r.events, r.value_sum)
        for r in recompute_windows(spark, config, t0, t0 + 2 * minute).collect()
    }
    assert rows == {
        (0, "k"): (3, 1.0 + 4.0 + 1.0),  # a, c (4.0), r
        (0, "j"): (1, 2.0),  # b
        (minute, "k"): (2, 1.0 + 1.0),  # r again, d
    }
