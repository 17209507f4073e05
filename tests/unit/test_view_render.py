"""The Tidemark view's pages as a person reads them, without a browser or a running Airflow: the
view's own render functions (autoescaped Jinja2 templates) with a fixture pipeline, parsed with
html.parser. No markup shows as text, the page keeps its approved outline
(tests/airflow/baselines/tidemark_view.json, shared with the platform's browser test), a hostile
pipeline, host or error text stays text, and the error states render.

Once, the dashboard showed ``<div class="row">`` and ``<p class="lagging-none">…</p></div>`` as
text: the view concatenated HTML strings with ``Markup``, and ``Markup + str`` escapes the str."""

from __future__ import annotations

import re

import numpy as np
import pytest
from view_outline import check_against_baseline, markup_shown_as_text, outline, parse, visible_text

from tidemark.dashboard import AlignmentPoint, Dashboard, WatermarkPoint, lag_histogram
from tidemark.timeutil import format_instant_ms, parse_instant_ms

HOSTILE = "<img src=x onerror=alert(1)>"
NOW = parse_instant_ms("2026-11-27T08:03:45.618Z")
HOUR = parse_instant_ms("2026-11-27T06:00:00Z")


def _summary(name: str = "live", host: str = "host-0042", error: str | None = None, status: bool = True):
    """What view.pipeline_summary returns for a pipeline like the platform test's."""
    prefix = f"/tidemark/reports/{name}/"
    summary = {
        "pipeline": name,
        "config": f"/etc/tidemark/{name}.yaml",
        "status": {
            "pipeline": name,
            "state": "ADVANCING",
            "watermark": format_instant_ms(NOW - 51_000),
            "event_time_lag_ms": 30_300,
            "since_advance_ms": 5_100,
            "stalled_since": None,
            "last_batch_id": 21,
            "last_commit": format_instant_ms(NOW - 3_100),
            "hosts_total": 200,
            "hosts_reporting": 199,
            "hosts_lagging": 2,
            "allowed_lagging": 2,
            "lagging_hosts": [{"host": host, "lag_ms": 125_000}, {"host": "host-0007", "lag_ms": None}],
        }
        if status
        else None,
        "job": {"state": "RUNNING", "reason": "heartbeat 2.7s ago, Waiting for next trigger"},
        "target": 0.999,
        "reports": {
            "pages": {
                "reconciliation": prefix + "reconciliation.html",
                "data-docs": prefix + "gx/uncommitted/data_docs/local_site/index.html",
                "quality-history": prefix + "gx/uncommitted/data_docs/local_site/history.html",
            },
            # the newest hour had its on-time pass only (no report until the final pass)
            "hours": [
                {
                    "start": format_instant_ms(HOUR - i * 3_600_000),
                    "end": format_instant_ms(HOUR - (i - 1) * 3_600_000),
                    "href": prefix + f"hours/{i}.html" if i else None,
                    "passes": {name: _pass(name, i) for name in (("on_time",) if i == 0 else PASSES)},
                }
                for i in range(3)
            ],
        },
    }
    if error is not None:
        summary["error"] = error
    return summary


PASSES = ("on_time", "final")


def _pass(name: str, i: int) -> dict:
    """An hour's recorded pass as the view's summary carries it (PassResult.to_dict())."""
    end = HOUR - (i - 1) * 3_600_000
    ontime, final = 0.9995, 1.0
    return {
        "pass": name,
        "start": format_instant_ms(end - 3_600_000),
        "end": format_instant_ms(end),
        "reconciled_at": format_instant_ms(end + (120_000 if name == "on_time" else 3_720_000)),
        "stream_watermark": format_instant_ms(end + (121_000 if name == "on_time" else 3_721_000)),
        "windows": 60,
        "closed": 60,
        "final": 0 if name == "on_time" else 60,
        "worst_alignment": final,
        "worst_ontime_alignment": ontime,
        "alignment": ontime if name == "on_time" else final,
        "ok": True,
    }


def _dashboard(name: str = "live") -> Dashboard:
    start = NOW - 180_000
    return Dashboard(
        pipeline=name,
        target=0.999,
        status=None,  # the view reads the summary's status
        watermarks=[
            WatermarkPoint(i, start + 8_500 * i, HOUR + 13 * 60_000 + 300_000 * min(i, 11) + 900 * i, None)
            for i in range(22)
        ],
        stalls=[(start + 40_000, start + 52_000)],
        lag_bins=lag_histogram(np.array([-5_000] * 170 + [-20_000] * 24 + [-45_000] * 4 + [-125_000] * 2), 0),
        never_reported=1,
        alignment=[AlignmentPoint(HOUR + 60_000 * i, 1.0 if i % 17 else 0.9994, True) for i in range(120)],
    )


def _page(items) -> str:
    from tidemark_airflow.view import render_page

    return render_page(items, "/tidemark", 15, format_instant_ms(NOW))


@pytest.fixture(scope="module")
def page() -> str:
    return _page([(_summary(), _dashboard())])


def test_no_markup_shows_as_text(page):
    shown = markup_shown_as_text(visible_text(page))
    assert not shown, f"markup shown as text: {shown[:5]}"
    assert "&amp;lt;" not in page and "&amp;gt;" not in page  # nothing escaped twice
    text = visible_text(page)
    assert "No host lags" not in text and "host-0042" in text and "2m5.0s" in text


def test_the_page_keeps_its_approved_outline(page):
    check_against_baseline(outline(page))


def test_the_charts_sit_in_their_rows_with_readable_axes(page):
    root = parse(page)
    rows = [n for n in root.iter() if "row" in n.classes]
    kids = [[c for c in r.children if not isinstance(c, str)] for r in rows]
    assert [[c.attrs.get("id") or c.classes[0] for c in k] for k in kids] == [
        ["facts", "links"],
        ["plot-lag", "lagging-list"],  # the histogram and the lagging hosts side by side
    ]
    svgs = {n.classes[0]: n for n in root.iter() if n.tag == "svg"}
    assert set(svgs) == {"watermark-plot", "lag-histogram", "alignment-plot"}
    for name, svg in svgs.items():
        for axis in ("x-tick", "y-tick"):
            labels = [n.text() for n in svg.iter() if axis in n.classes]
            assert len(labels) >= 2 and all(labels) and len(set(labels)) == len(labels), (name, axis, labels)
    # both axes of the watermark plot are instants at round steps: 30 s apart on x (three minutes
    # of batches), whole multiples of 5 minutes on y (the watermark moved an hour), never the
    # "06:13:20, 06:46:40" of a plain number axis over milliseconds
    x, y = ([n.text() for n in svgs["watermark-plot"].iter() if a in n.classes] for a in ("x-tick", "y-tick"))
    assert all(re.fullmatch(r"\d\d:\d\d:[03]0", t) for t in x), x
    assert all(re.fullmatch(r"\d\d:[0-5][05]", t) for t in y), y


def test_a_hostile_pipeline_host_or_error_text_stays_text():
    items = [(_summary(HOSTILE, host=HOSTILE, error=f"OSError: {HOSTILE}"), _dashboard(HOSTILE))]
    items[0][0]["job"]["reason"] = HOSTILE
    page = _page(items)
    root = parse(page)
    assert not [n for n in root.iter() if n.tag == "img"], "the payload became an element"
    assert "<img" not in page
    text = visible_text(page)
    # as text where a name is shown: the heading, the lagging host, the error, the job's reason
    assert text.count(HOSTILE) == 4, text
    [section] = [n for n in root.iter() if n.tag == "section"]
    assert section.attrs["data-pipeline"] == HOSTILE  # an attribute, correctly quoted
    assert all(HOSTILE in a.attrs["href"] for a in root.iter() if "report" in a.classes)


def test_error_states_render_as_sentences():
    broken = _summary("broken", error="OSError: no such bucket\n  s3://tidemark/warehouse", status=False)
    page = _page([(broken, None)])
    root = parse(page)
    [error] = [n for n in root.iter() if "error" in n.classes]
    assert error.text() == broken["error"]
    assert not [n for n in root.iter() if n.tag == "svg"]  # no charts without the tables
    facts = visible_text(page)
    assert "watermark-" in facts.replace("\n", "") and "UNKNOWN" in facts
    assert not markup_shown_as_text(facts)
    empty = _page([])
    assert "No pipelines you may read are configured" in visible_text(empty)
    assert not markup_shown_as_text(visible_text(empty))


def test_the_fragment_is_the_pages_dashboard(page):
    from tidemark_airflow.view import render_fragment

    fragment = render_fragment([(_summary(), _dashboard())])
    main = page[page.index('<main id="dashboard">') + len('<main id="dashboard">') : page.index("</main>")]
    assert fragment.strip() == main.strip()


def test_the_routes_serve_the_templates(monkeypatch):
    from fastapi.testclient import TestClient

    from tidemark_airflow import view

    monkeypatch.setattr(view, "_items", lambda request, user: [(_summary(), _dashboard())])
    from airflow.api_fastapi.core_api.security import get_user

    for dep in view.app.router.dependencies:  # the plugin-views gate passes
        if dep.dependency is not None:
            view.app.dependency_overrides[dep.dependency] = lambda: None
    view.app.dependency_overrides[get_user] = lambda: object()
    try:
        client = TestClient(view.app)
        index = client.get("/")
        fragment = client.get("/fragment")
    finally:
        view.app.dependency_overrides.clear()
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert fragment.status_code == 200 and fragment.headers["content-type"].startswith("text/html")
    assert not markup_shown_as_text(visible_text(index.text))
    check_against_baseline(outline(index.text))
    assert '"/fragment"' in index.text  # the refresh's URL, from the request's root path


def test_each_reconciled_hour_shows_its_on_time_and_final_pass(page):
    root = parse(page)
    items = [n for n in root.iter() if n.tag == "li"]
    assert len(items) == 3
    passes = [
        [
            (s.attrs["data-pass"], s.attrs["data-alignment"], s.text())
            for s in li.iter()
            if "recon-pass" in s.classes
        ]
        for li in items
    ]
    # newest first: on time only (the final pass pending, no report yet), then both
    assert passes[0] == [("on_time", "0.9995", "on time 0.9995")]
    assert [n.text() for n in items[0].iter() if "recon-pass-pending" in n.classes] == ["final pending"]
    assert not [n for n in items[0].iter() if "hour-report" in n.classes]
    assert (
        passes[1]
        == passes[2]
        == [("on_time", "0.9995", "on time 0.9995"), ("final", "1.0", "final 1.0000 ✓")]
    )
    assert all([n for n in li.iter() if "hour-report" in n.classes] for li in items[1:])
