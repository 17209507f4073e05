"""The reconciliation report and the Data Docs, rendered in headless Chromium as a person opens them.

Screenshots go to test-artifacts/quality/. Network is blocked (only file:// loads), as on an
air-gapped worker: the report must stand alone. Every number read off the plots is compared with
the Delta tables, read independently with delta-rs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import ARTIFACTS, copy_pipeline, read_table, rewrite_table

from tidemark.cli import EXIT_QUALITY, main
from tidemark.quality import SUITE_NAMES, validate_pipeline
from tidemark.report import report_locations, write_report
from tidemark.timeutil import format_instant_ms

pytestmark = pytest.mark.spark  # the session pipeline is built with Spark

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def open_page(browser):
    pages = []

    def _open(path: Path, screenshot: str):
        page = browser.new_page(viewport={"width": 1000, "height": 900})
        blocked: list[str] = []

        def only_files(route):
            if route.request.url.startswith("file:"):
                route.continue_()
            else:
                blocked.append(route.request.url)
                route.abort()

        page.route("**/*", only_files)
        page.goto(Path(path).resolve().as_uri(), wait_until="load")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / screenshot), full_page=True)
        page.blocked = blocked
        pages.append(page)
        return page

    yield _open
    for page in pages:
        page.close()


def _marks(page, selector: str) -> list[dict]:
    return page.eval_on_selector_all(
        selector,
        """els => els.map(e => ({...Object.fromEntries([...e.attributes].map(a => [a.name, a.value])),
                                  box: e.getBoundingClientRect().toJSON()}))""",
    )


def _ms(ts) -> int:
    return int(pd.Timestamp(ts).timestamp() * 1000)


def test_report_plots_show_exactly_the_numbers_in_the_tables(quality_pipeline, tmp_path, open_page):
    p = copy_pipeline(quality_pipeline, tmp_path / "published")
    config = p.config
    assert report_locations(config) == {}  # nothing published yet
    outcome = validate_pipeline(config, p.scenario.start_ms, p.scenario.end_ms)
    out = write_report(config, outcome=outcome, docs_index=outcome.docs_index)

    # Published where the Airflow view looks (/reports/{pipeline}/{label}): one-segment labels.
    published = report_locations(config)
    assert published == {
        "reconciliation": out,
        "data-docs": Path(outcome.docs_index),
        "quality-history": Path(outcome.docs_history),
    }
    assert out == Path(config.tables_root) / "_quality" / "reconciliation.html"
    assert all(re.fullmatch(r"[a-z0-9-]+", label) and f.is_file() for label, f in published.items())

    page = open_page(out, "report.png")
    assert page.blocked == [], "the report must not load anything from the network"

    # Four plots, each drawn with a visible size.
    for chart in ("chart-alignment", "chart-counts", "chart-late", "chart-lag"):
        box = page.locator(f"#{chart} svg").bounding_box()
        assert box and box["width"] > 500 and box["height"] > 150, chart

    rec = read_table(config, "reconciliation")
    rec = rec[rec["status"] == "closed"].assign(ws=lambda f: f["window_start"].map(_ms)).set_index("ws")
    iso = {ws: format_instant_ms(ws) for ws in rec.index}
    assert len(rec) == p.scenario.minutes

    # Alignment per window against the target line from the config.
    points = {m["data-window"]: m for m in _marks(page, "#chart-alignment circle.alignment")}
    assert set(points) == set(iso.values())
    for ws, row in rec.iterrows():
        point = points[iso[ws]]
        assert float(point["data-value"]) == row["alignment"]
        assert point["data-aligned"] == str(row["alignment"] >= 0.99).lower()
    (target,) = _marks(page, "#chart-alignment line.target")
    assert float(target["data-value"]) == config.reconcile.target == 0.99
    worst_ws = rec["alignment"].idxmin()
    assert rec.loc[worst_ws, "alignment"] < 1.0, "the scenario must have a late-affected window"
    # Higher alignment is drawn higher; the target line lies below every (aligned) point.
    assert points[iso[worst_ws]]["box"]["y"] > max(
        points[iso[ws]]["box"]["y"] for ws in rec.index if rec.loc[ws, "alignment"] == 1.0
    )
    assert all(target["box"]["y"] > m["box"]["y"] for m in points.values())

    # Stream vs batch and late events per window: values, and bar heights proportional to them.
    late_rows = read_table(config, "late_events").assign(ws=lambda f: f["window_start"].map(_ms))
    late_by_window = late_rows.groupby("ws").size()
    for chart, series, column in (
        ("chart-counts", "stream", "stream_events"),
        ("chart-counts", "batch", "batch_events"),
        ("chart-late", "late", "late_events"),
    ):
        bars = {m["data-window"]: m for m in _marks(page, f"#{chart} rect.bar.{series}")}
        assert set(bars) == set(iso.values()), series
        ratios = []
        for ws, row in rec.iterrows():
            bar = bars[iso[ws]]
            assert int(bar["data-value"]) == row[column], (series, iso[ws])
            if row[column]:
                ratios.append(bar["box"]["height"] / row[column])
        assert max(ratios) == pytest.approx(min(ratios), rel=1e-3), f"{series} bars not to scale"
    late_values = {m["data-window"]: int(m["data-value"]) for m in _marks(page, "#chart-late rect.bar")}
    assert late_values == {iso[ws]: int(late_by_window.get(ws, 0)) for ws in rec.index}

    # Watermark lag per batch (frontier - watermark) from the watermarks table.
    marks = read_table(config, "watermarks").dropna(subset=["watermark_ms", "frontier_ms", "batch_ts_ms"])
    lag = {int(m["data-batch"]): int(m["data-value"]) for m in _marks(page, "#chart-lag circle.lag")}
    assert lag == {int(r.batch_id): int(r.frontier_ms - r.watermark_ms) for r in marks.itertuples()}
    assert _marks(page, "#chart-lag rect.stall") == []  # the clean run never stalled

    # Worst window first, explained by its late records per host.
    first = page.locator("table.worst tr[data-window]").first
    assert first.get_attribute("data-window") == iso[worst_ws]
    explanation = first.locator("td.explanation").inner_text()
    hosts = late_rows[late_rows["ws"] == worst_ws].groupby("host").size()
    assert f"{int(hosts.sum())} late record(s) from {len(hosts)} host(s)" in explanation
    for host, n in hosts.items():
        assert f"{host} ×{n}" in explanation

    # The data-quality verdict and the links to the Data Docs.
    assert page.locator("#quality-verdict").inner_text() == "all suites pass"
    assert (
        page.locator("#quality-range")
        .inner_text()
        .startswith(
            f"event time {iso[p.scenario.start_ms]} .. {format_instant_ms(p.scenario.end_ms)}, validated "
        )
    )
    suites = _marks(page, "li[data-suite]")
    assert [(s["data-suite"], s["data-success"]) for s in suites] == [(n, "true") for n in SUITE_NAMES]
    for link in ("#data-docs-link", "#data-docs-history-link"):
        assert (out.parent / page.locator(link).get_attribute("href")).resolve().is_file()


def test_data_docs_render_with_every_suite_and_its_history(quality_pipeline, tmp_path, open_page):
    p = copy_pipeline(quality_pipeline, tmp_path / "docs")
    clean = validate_pipeline(p.config, p.scenario.start_ms, p.scenario.end_ms)
    rewrite_table(p.config, "windows", lambda w: pd.concat([w, w.iloc[[0]]]))
    broken = validate_pipeline(p.config, p.scenario.start_ms, p.scenario.end_ms)
    assert clean.success and broken.failing == ["windows.window_key_unique"]

    index = open_page(Path(broken.docs_index), "data_docs_index.png")
    assert "Data Docs" in index.title()
    assert index.get_by_text("Expectation Suites").count() >= 1
    assert index.get_by_text("Validation Results").count() >= 1

    history = open_page(Path(broken.docs_history), "data_docs_history.png")
    assert history.blocked == []
    rows = _marks(history, "#history tr[data-suite]")
    assert len(rows) == 2 * len(SUITE_NAMES)
    failed = [(r["data-suite"], r["data-success"]) for r in rows if r["data-success"] == "false"]
    assert failed == [("tidemark_windows", "false")]
    newest_windows = history.locator("tr[data-suite='tidemark_windows'][data-success='false']")
    assert "window_key_unique" in newest_windows.inner_text()

    # GX's own page for the failed validation, reached through the history link.
    href = newest_windows.locator("a").get_attribute("href")
    result_page = Path(broken.docs_history).parent / href.replace("%20", " ")
    assert result_page.is_file()
    page = open_page(result_page, "data_docs_failed_windows.png")
    text = page.locator("body").inner_text()
    assert "tidemark_windows" in text and "Failed" in text
    assert "Values for given compound columns must be unique together: window_start, key" in text


def test_report_shades_a_recorded_stall_and_flags_the_misaligned_window(
    quality_pipeline, tmp_path, open_page, capsys
):
    import pyarrow as pa
    from deltalake import write_deltalake

    from tidemark.schemas import STALL_SCHEMA

    p = copy_pipeline(quality_pipeline, tmp_path / "stalled")
    marks = read_table(p.config, "watermarks").dropna(subset=["batch_ts_ms"]).sort_values("batch_id")
    (before, after), (ts0, ts1) = marks["batch_id"].iloc[:2], marks["batch_ts_ms"].iloc[:2]
    # A stall from half-way between the first two batches until the second one ran.
    start = pd.Timestamp(int((ts0 + ts1) // 2), unit="ms", tz="UTC")
    end = pd.Timestamp(int(ts1), unit="ms", tz="UTC")
    stall = {
        "started_at": start,
        "ended_at": end,
        "duration_ms": int((end - start).total_seconds() * 1000),
        "watermark": start,
        "hosts_count": 1,
        "hosts": ["h00001"],
        "closed_batch_id": int(after),
    }
    write_deltalake(p.config.table_path("stalls"), pa.Table.from_pylist([stall], schema=STALL_SCHEMA))

    def misalign(r):
        r = r.copy()
        i = r["window_start"].idxmax()
        r.loc[i, "stream_events"] -= 30
        r.loc[i, "abs_diff"] += 30
        r.loc[i, "unexplained"] += 30
        r.loc[i, "alignment"] = 1 - r.loc[i, "abs_diff"] / r.loc[i, "batch_events"]
        return r

    rewrite_table(p.config, "reconciliation", misalign)
    out = tmp_path / "report.html"
    args = ["report", "--config", str(p.config_path), "--out", str(out), "--validate"]
    assert main(args) == EXIT_QUALITY  # written, and the failing suite named
    err = capsys.readouterr().err.strip()
    assert err == (
        "tidemark: 2 expectation(s) failing: "
        "reconciliation.alignment_at_or_above_target, reconciliation.unexplained_is_zero"
    )
    page = open_page(out, "report_stall_and_misaligned.png")

    (shade,) = _marks(page, "#chart-lag rect.stall")
    assert shade["data-start"] == format_instant_ms(_ms(start))
    assert shade["data-end"] == format_instant_ms(_ms(end))
    assert shade["box"]["width"] > 2
    lag_x = {
        int(m["data-batch"]): m["box"]["x"] + m["box"]["width"] / 2
        for m in _marks(page, "#chart-lag circle.lag")
    }
    left, right = shade["box"]["x"], shade["box"]["x"] + shade["box"]["width"]
    assert lag_x[int(before)] < left - 10  # the batch before the stall is outside the shade
    assert left - 1 <= lag_x[int(after)] <= right + 1  # the batch that ended it is inside

    last_window = format_instant_ms(p.scenario.end_ms - 60_000)
    (below,) = _marks(page, "#chart-alignment circle.below")
    assert below["data-window"] == last_window and float(below["data-value"]) == pytest.approx(0.97)
    assert page.locator("#verdict").inner_text() == "stream needs attention"
    first = page.locator("table.worst tr[data-window]").first
    assert first.get_attribute("data-window") == last_window
    assert "30 record(s) missing from stream and late events (unexplained)" in first.inner_text()
    assert page.locator("#quality-range").inner_text().startswith("all event times, validated ")
    failing = [s["data-suite"] for s in _marks(page, "li[data-suite]") if s["data-success"] == "false"]
    assert failing == ["reconciliation"]


def test_report_without_reconciliation_is_a_one_line_error(tmp_path, capsys):
    import pyarrow as pa
    from deltalake import write_deltalake
    from helpers import write_config

    config = write_config(tmp_path, name="empty")
    write_deltalake(config.table_path("events"), pa.table({"a": [1]}))  # it has run (no reconcile yet)
    assert main(["report", "--config", str(tmp_path / "empty.yaml"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tidemark: error: report: no reconciliation table at ") and "\n" not in err
    assert err.endswith("run `tidemark reconcile` first")

    args = ["report", "--config", str(tmp_path / "empty.yaml"), "--start", "2025-11-22T10:05:00Z"]
    assert main([*args, "--end", "2025-11-22T10:00:00Z"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "tidemark: error: report: --end (2025-11-22T10:00:00.000Z) must be after "
        "--start (2025-11-22T10:05:00.000Z)"
    )
