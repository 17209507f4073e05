"""The reconciliation report without Spark: its data from Delta tables written with delta-rs, its
verdict from alignment.alignment_summary, and its page rendered from autoescaped templates."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
from deltalake import write_deltalake
from helpers import write_config

from tidemark.alignment import WindowResult, alignment_summary
from tidemark.report import LagPoint, ReportData, load_report_data, write_report
from tidemark.report_render import render_report

T0 = 1_763_805_600_000
MINUTE = 60_000


def _reconciliation(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    frame["abs_diff"] = (frame["batch_events"] - frame["stream_events"]).abs()
    frame["alignment"] = 1 - frame["abs_diff"] / frame["batch_events"]
    frame["window_start"] = pd.to_datetime(frame.pop("window_start_ms"), unit="ms", utc=True)
    return frame


def test_report_escapes_every_name_it_did_not_write():
    hostile = "<script>alert(1)</script>"
    window = WindowResult(
        window_start_ms=T0,
        stream_events=990,
        batch_events=1000,
        late_events=10,
        abs_diff=10,
        alignment=0.99,
        unexplained=0,
        late_by_host=[(f"h{hostile}", 10)],
    )
    frame = pd.DataFrame(
        [
            {
                "window_start_ms": T0,
                "status": "closed",
                "alignment": 0.99,
                "stream_events": 990,
                "batch_events": 1000,
                "late_events": 10,
                "unexplained": 0,
            }
        ]
    )
    data = ReportData(
        pipeline=f"p{hostile}",
        target=0.999,
        windows=[window],
        summary=alignment_summary(frame, 0.999),
        lag=[LagPoint(0, T0, T0, 1000)],
        stalls=[],
        watermark_ms=T0,
        state=f"OK{hostile}",
    )
    outcome = SimpleNamespace(
        success=False,
        failing=["x"],
        start_ms=None,
        end_ms=None,
        validated_at_ms=T0,
        suites=[
            SimpleNamespace(
                suite="<b>suite</b>",
                success=False,
                failing=[SimpleNamespace(check=hostile)],
                rows=1,
                expectations=[1],
            )
        ],
    )
    page = render_report(data, outcome, docs_href='docs/"><script>x()</script>.html')
    assert "<script" not in page  # the page has no script of its own: any is an injection
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4  # title, heading, host, check
    assert "<title>Tidemark reconciliation — p&lt;script&gt;" in page
    assert "h&lt;script&gt;alert(1)&lt;/script&gt; ×10" in page
    assert 'data-suite="&lt;b&gt;suite&lt;/b&gt;"' in page and "<b>&lt;b&gt;suite&lt;/b&gt;</b>" in page
    assert 'href="docs/&#34;&gt;&lt;script&gt;x()&lt;/script&gt;.html"' in page


def test_report_verdict_and_totals_are_the_alignment_summary(tmp_path):
    """A record counted twice in one window cannot hide one missing from another: the report's
    verdict is alignment_summary's (|unexplained| summed), not a signed total of its own."""
    config = write_config(tmp_path, name="rep", reconcile={"target": 0.99})
    rows = [
        # window, status, stream, batch, late, unexplained (= batch - stream - late)
        (T0, "closed", 9_990, 10_000, 5, 5),  # 5 missing
        (T0 + MINUTE, "closed", 10_005, 10_000, 0, -5),  # 5 counted twice
        (T0 + 2 * MINUTE, "closed", 9_000, 10_000, 0, 1_000),  # below target
        (T0 + 3 * MINUTE, "open", 10, 10_000, 0, 0),  # open: counted, never measured
    ]
    keys = ("window_start_ms", "status", "stream_events", "batch_events", "late_events", "unexplained")
    rec = _reconciliation([dict(zip(keys, r, strict=True)) for r in rows])
    write_deltalake(config.table_path("reconciliation"), rec)
    late = pd.DataFrame({"host": ["b", "a", "b", "a", "b"], "window_start": [rec["window_start"][0]] * 5})
    write_deltalake(config.table_path("late_events"), late)

    first_two = load_report_data(config, T0, T0 + 2 * MINUTE)
    assert [w.window_start_ms for w in first_two.windows] == [T0, T0 + MINUTE]
    assert first_two.summary.ok is False and first_two.summary.unexplained == 10
    assert first_two.misaligned == [] and first_two.windows[0].late_by_host == [("b", 3), ("a", 2)]
    out = write_report(config, tmp_path / "first_two.html", T0, T0 + 2 * MINUTE)
    page = out.read_text(encoding="utf-8")
    assert 'id="verdict">stream needs attention<' in page
    assert '<div class="kpi"><b>10</b><span>unexplained difference</span></div>' in page
    assert '<div class="kpi"><b>2/2</b><span>windows at or above target 0.99</span></div>' in page

    data = load_report_data(config)
    assert data.summary == alignment_summary(rec.assign(window_start_ms=rec.index * MINUTE + T0), 0.99)
    assert [w.window_start_ms for w in data.misaligned] == [T0 + 2 * MINUTE]
    page = write_report(config, tmp_path / "all.html").read_text(encoding="utf-8")
    assert "3 closed windows, 1 open" in page
    assert '<div class="kpi"><b>2/3</b><span>windows at or above target 0.99</span></div>' in page
    assert '<tr class="below" data-window="2025-11-22T10:02:00.000Z"' in page
    assert "No reconciled windows yet." not in page and 'id="chart-lag"' in page


def test_the_records_behind_an_unexplained_difference_are_a_table_of_text():
    """Each sampled record a row (kind, host, id, time, key, copies, source, batch), every name
    escaped; windows beyond the bound named as not examined."""
    from tidemark.alignment import EXTRA, MISSING, RecordDiff

    hostile = "<script>alert(1)</script>"
    sample = (
        RecordDiff(MISSING, f"id{hostile}", "h1", T0 + 1, f"k{hostile}", 1, f"file:/l/{hostile}.jsonl"),
        RecordDiff(EXTRA, "dup", "h2", T0 + 2, None, 2, "t/0@17", batch_id=5),
    )
    examined = WindowResult(
        window_start_ms=T0,
        stream_events=1_000,
        batch_events=1_000,
        late_events=0,
        abs_diff=0,
        alignment=1.0,
        unexplained=0 + 1 - 2,
        missing_records=1,
        extra_records=2,
        record_sample=sample,
    )
    skipped = WindowResult(
        window_start_ms=T0 + MINUTE,
        stream_events=999,
        batch_events=1_000,
        late_events=0,
        abs_diff=1,
        alignment=0.999,
        unexplained=1,
    )
    frame = pd.DataFrame(
        {
            "window_start_ms": [T0, T0 + MINUTE],
            "status": ["closed", "closed"],
            "alignment": [1.0, 0.999],
            "stream_events": [1_000, 999],
            "batch_events": [1_000, 1_000],
            "late_events": [0, 0],
            "unexplained": [-1, 1],
        }
    )
    data = ReportData("p", 0.99, [examined, skipped], alignment_summary(frame, 0.99), [], [], T0, "ADVANCING")
    page = render_report(data)
    assert "<script" not in page
    assert '<h2 id="unexplained">Unexplained records</h2>' in page
    assert (
        '<tr class="record missing" data-kind="missing" data-host="h1" '
        'data-event-id="id&lt;script&gt;alert(1)&lt;/script&gt;" data-copies="1">'
        '<td class="l">missing</td><td class="l">h1</td>'
        '<td class="l"><code>id&lt;script&gt;alert(1)&lt;/script&gt;</code></td>'
        '<td class="l">2025-11-22T10:00:00.001Z</td><td class="l">k&lt;script&gt;alert(1)&lt;/script&gt;</td>'
        '<td>1</td><td class="l"><code>file:/l/&lt;script&gt;alert(1)&lt;/script&gt;.jsonl</code></td>'
        "<td>-</td></tr>"
    ) in page
    assert '<td class="l">-</td><td>2</td><td class="l"><code>t/0@17</code></td><td>5</td></tr>' in page
    assert "1 missing from events (1 listed), 2 extra in events (1 listed)" in page
    assert 'id="not-examined">1 more window(s)' in page and "2025-11-22T10:01:00.000Z</p>" in page
