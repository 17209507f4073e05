"""An unexplained difference, shown: the records behind it, on real Spark and Delta.

After a stream run, rows are deleted from ``events`` by hand (a simulated loss) and copies of rows
appended to it (a simulated duplicate), with Delta. A real loss or duplicate is in the window
counts too (the stream counts what it stores), so the latest revision of the windows concerned is
changed by as many: the reconciliation then finds ``unexplained`` differences, and must name
exactly the records changed, with their hosts, sources and totals, in the report, the JSON and the
HTML page (a planted id with markup shown as text).
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import small_scenario, write_config

from tidemark.alignment import EXTRA, MISSING
from tidemark.cli import main
from tidemark.generator import generate_files
from tidemark.reconcile import reconcile
from tidemark.report import write_report
from tidemark.stream import run_stream

pytestmark = [pytest.mark.spark]
# the tests share module fixtures (a streamed pipeline, then a damaged copy): one xdist worker
# builds them once (split over two, each built its own: 37 s twice)
ONE_WORKER = True

MINUTE = 60_000
HOSTILE = "<i>lost</i>&\"'<script>x()</script>"
WINDOW = {"size": "1m", "allowed_lateness": "0s"}  # one row per (window, key): revision 0 is final


def _plant_hostile_record(landing: Path, minute_start: int, lagging: set[str]) -> dict:
    """A record with ``HOSTILE`` as its id beside a record of the window starting at
    ``minute_start`` (same host, time and key) in the same landing file, its modification time kept."""
    for path in sorted(landing.iterdir()):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if (
                not isinstance(rec, dict)
                or rec.get("heartbeat")
                or not isinstance(rec.get("event_time"), int)
            ):
                continue
            if rec.get("host") in lagging or not minute_start <= rec["event_time"] < minute_start + MINUTE:
                continue
            planted = {**rec, "event_id": HOSTILE}
            stat = path.stat()
            with path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(planted) + "\n")
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
            return planted
    raise AssertionError("no record to plant beside")


@pytest.fixture(scope="module")
def pipeline(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("unexplained")
    config = write_config(root, name="unx", window=WINDOW)
    scenario = small_scenario(seed=13)
    generate_files(scenario, config.source.path)
    planted = _plant_hostile_record(
        Path(config.source.path), scenario.start_ms + MINUTE, set(scenario.lagging_hosts())
    )
    run_stream(spark, config, once=True, echo=lambda m: None)
    return root, config, scenario, planted


def _copy(pipeline, tmp_path):
    root, _, scenario, planted = pipeline
    shutil.copytree(root, tmp_path / "copy")
    return write_config(tmp_path / "copy", name="unx", window=WINDOW), scenario, planted


def _on_time_rows(spark, config, window_start: int, n: int) -> list:
    """The first ``n`` on-time rows of ``events`` in a window (by host, id)."""
    from pyspark.sql import functions as F

    events = spark.read.format("delta").load(config.table_path("events"))
    t = F.col("event_time")
    rows = events.where(
        ~F.col("is_late") & (t >= window_start) & (t < window_start + MINUTE) & (F.col("event_id") != HOSTILE)
    )
    return rows.orderBy("host", "event_id").limit(n).collect()


def _matching(rows) -> object:
    """A condition on ``events`` selecting exactly ``rows`` (by host, id, event time)."""
    from functools import reduce

    from pyspark.sql import functions as F

    return reduce(
        lambda a, b: a | b,
        [
            (F.col("host") == r["host"])
            & (F.col("event_id") == r["event_id"])
            & (F.col("event_time") == r["event_time"])
            for r in rows
        ],
    )


def _shift_windows(spark, config, rows, sign: int) -> None:
    """Move the latest revision of each (window, key) of ``rows`` by ``sign`` per row: a real loss
    or duplicate is counted as the stream stores it."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    windows = DeltaTable.forPath(spark, config.table_path("windows"))
    per_key = Counter((r["event_time"] - r["event_time"] % MINUTE, r["key"]) for r in rows)
    for (ws, key), n in per_key.items():
        where = (F.unix_millis("window_start") == ws) & F.col("key").eqNullSafe(key)
        assert windows.toDF().where(where).count() == 1  # allowed_lateness 0: one row
        windows.update(where, {"events": F.col("events") + sign * n})


def _lose(spark, config, rows) -> None:
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, config.table_path("events")).delete(_matching(rows))
    _shift_windows(spark, config, rows, -1)


def _store_again(spark, config, rows) -> None:
    """Append ``rows`` (Rows of ``events``, repeats allowed) to ``events`` as they are."""
    path = config.table_path("events")
    events = spark.read.format("delta").load(path)
    values = [tuple(r[c] for c in events.columns) for r in rows]
    spark.createDataFrame(values, events.schema).write.format("delta").mode("append").save(path)
    _shift_windows(spark, config, rows, +1)


@pytest.fixture(scope="module")
def damaged(spark, pipeline, tmp_path_factory):
    """A copy of the pipeline with 4 records lost from one window (the planted id among them) and
    4 extra copies in another (one record stored once more, one twice more, one the input never
    had), reconciled (the rows written)."""
    config, scenario, planted = _copy(pipeline, tmp_path_factory.mktemp("damaged"))
    loss_ws, dup_ws = scenario.start_ms + MINUTE, scenario.start_ms + 3 * MINUTE
    events = spark.read.format("delta").load(config.table_path("events"))
    (hostile,) = events.where(events["event_id"] == HOSTILE).collect()
    assert not hostile["is_late"] and hostile["event_time"] == planted["event_time"]
    lost = [*_on_time_rows(spark, config, loss_ws, 3), hostile]
    _lose(spark, config, lost)
    a, b, c = _on_time_rows(spark, config, dup_ws, 3)
    ghost = {**c.asDict(), "event_id": "ghost-1", "batch_id": 9_999}  # in events, not in the input
    _store_again(spark, config, [a, b, b, ghost])
    report = reconcile(spark, config, scenario.start_ms, scenario.end_ms)
    by_start = {w.window_start_ms: w for w in report.closed}
    return SimpleNamespace(
        config=config,
        report=report,
        loss=by_start[loss_ws],
        dup=by_start[dup_ws],
        lost=lost,
        stored_again=(a, b, c),
        hostile=hostile,
    )


def test_a_loss_and_a_duplicate_are_named_record_by_record(damaged):
    loss, dup, lost = damaged.loss, damaged.dup, damaged.lost
    a, b, c = damaged.stored_again
    assert (loss.unexplained, loss.missing_records, loss.extra_records) == (4, 4, 0)
    assert {(r.kind, r.event_id, r.host, r.copies) for r in loss.record_sample} == {
        (MISSING, r["event_id"], r["host"], 1) for r in lost
    }
    # the raw input's copy: the landing file the stream read it from (the copy's: same name)
    sources = {r["event_id"]: Path(r["source"]).name for r in lost}
    assert all(r.source for r in loss.record_sample), loss.record_sample
    assert {r.event_id: Path(r.source).name for r in loss.record_sample} == sources
    assert all(r.batch_id is None for r in loss.record_sample)
    assert (dup.unexplained, dup.missing_records, dup.extra_records) == (-4, 0, 4)
    assert {(r.kind, r.event_id, r.host, r.copies, r.batch_id, r.source) for r in dup.record_sample} == {
        (EXTRA, a["event_id"], a["host"], 1, a["batch_id"], a["source"]),
        (EXTRA, b["event_id"], b["host"], 2, b["batch_id"], b["source"]),
        (EXTRA, "ghost-1", c["host"], 1, 9_999, c["source"]),
    }
    others = [w for w in damaged.report.closed if w not in (loss, dup)]
    assert others and all(w.unexplained == 0 and not w.examined for w in others)
    assert damaged.report.not_examined == []


def test_the_listing_for_people_names_them(damaged):
    text = damaged.report.table()
    loss, dup = damaged.loss, damaged.dup
    assert f"unexplained in {loss.iso} (+4): 4 missing from events (4 listed), 0 extra in events\n" in text
    assert f"unexplained in {dup.iso} (-4): 0 missing from events, 4 extra in events (3 listed)\n" in text
    for r in damaged.lost:
        assert f"  missing host {r['host']} id {r['event_id']!r} at " in text
    assert "id 'ghost-1' at " in text and "(batch 9999)" in text


def test_the_json_of_reconcile_names_them(damaged, capsys):
    """`tidemark reconcile --json` (a dry run: the rows the fixture wrote stay)."""
    loss, dup = damaged.loss, damaged.dup
    config_file = Path(damaged.config.warehouse).parent / "unx.yaml"
    assert main(["reconcile", "--config", str(config_file), "--json", "--dry-run"]) == 0
    payload = json.loads(capsys.readouterr().out)
    summary = payload["unexplained_records"]
    assert summary["examined"] == [loss.iso, dup.iso] and summary["not_examined"] == []
    assert (summary["missing"], summary["extra"], summary["sample_per_kind"]) == (4, 4, 20)
    rows = {w["window_start"]: w for w in payload["windows"]}
    assert (rows[loss.iso]["missing_records"], rows[dup.iso]["extra_records"]) == (4, 4)
    assert {(r["kind"], r["event_id"], r["host"]) for r in rows[loss.iso]["record_sample"]} == {
        (MISSING, r["event_id"], r["host"]) for r in damaged.lost
    }
    assert {(r["event_id"], r["copies"]) for r in rows[dup.iso]["record_sample"]} == {
        (damaged.stored_again[0]["event_id"], 1),
        (damaged.stored_again[1]["event_id"], 2),
        ("ghost-1", 1),
    }
    clean = [w for w in payload["windows"] if w["window_start"] not in (loss.iso, dup.iso)]
    assert clean and all(w["missing_records"] is None and w["record_sample"] == [] for w in clean)


def test_the_html_report_shows_them_as_text(damaged, tmp_path):
    """The page reads the reconciliation rows (delta-rs): a table per window, every name escaped."""
    page = write_report(damaged.config, tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<script" not in page and "<i>lost" not in page
    escaped = "&lt;i&gt;lost&lt;/i&gt;&amp;&#34;&#39;&lt;script&gt;x()&lt;/script&gt;"
    assert f'<td class="l"><code>{escaped}</code></td>' in page
    assert f'data-event-id="{escaped}"' in page
    assert page.count('<tr class="record missing"') == 4 and page.count('<tr class="record extra"') == 3
    for r in damaged.lost:
        assert f'data-host="{r["host"]}" data-event-id="' in page
    assert f'data-window="{damaged.loss.iso}" data-missing="4" data-extra="0"' in page
    assert f'data-window="{damaged.dup.iso}" data-missing="0" data-extra="4"' in page
    assert 'id="not-examined"' not in page


def test_the_sample_is_capped_and_windows_beyond_the_bound_are_named(spark, pipeline, tmp_path):
    config, scenario, _ = _copy(pipeline, tmp_path)
    starts = [scenario.start_ms + m * MINUTE for m in (0, 2, 4)]
    lost = {ws: _on_time_rows(spark, config, ws, n) for ws, n in zip(starts, (8, 3, 1), strict=True)}
    _lose(spark, config, [r for rows in lost.values() for r in rows])

    report = reconcile(
        spark, config, scenario.start_ms, scenario.end_ms, write=False, sample=5, max_windows=2
    )
    by_start = {w.window_start_ms: w for w in report.closed}
    big, small, skipped = (by_start[ws] for ws in starts)
    assert (big.unexplained, big.missing_records, big.extra_records, len(big.record_sample)) == (8, 8, 0, 5)
    ids = {(r["event_id"], r["host"]) for r in lost[starts[0]]}
    assert {(r.event_id, r.host) for r in big.record_sample} < ids
    assert (small.missing_records, len(small.record_sample)) == (3, 3)
    assert {(r.event_id, r.host) for r in small.record_sample} == {
        (r["event_id"], r["host"]) for r in lost[starts[1]]
    }
    # the smallest difference is beyond the bound: named, not examined
    assert skipped.unexplained == 1 and not skipped.examined and report.not_examined == [skipped]
    assert (
        f"1 more window(s) with an unexplained difference not examined (at most 2 per run): {skipped.iso}"
        in (report.table())
    )
    assert "8 missing from events (5 listed)" in report.table()
    payload = json.loads(report.to_json())
    assert payload["unexplained_records"]["not_examined"] == [skipped.iso]
    assert payload["unexplained_records"]["missing"] == 11


def test_nothing_unexplained_costs_no_record_search(spark, pipeline, monkeypatch):
    _, config, scenario, _ = pipeline

    def searched(*args, **kwargs):
        raise AssertionError("records looked for with nothing unexplained")

    monkeypatch.setattr("tidemark.reconcile.differing_records", searched)
    report = reconcile(spark, config, scenario.start_ms, scenario.end_ms, write=False)
    assert report.closed and all(w.unexplained == 0 and not w.examined for w in report.windows)
    assert report.records_text() == []
