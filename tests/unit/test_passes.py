"""The two reconciliation passes (tidemark.passes): when each is due (the windows' own closing and
finality rules), what a pass records, and that re-running a pass replaces its row."""

from __future__ import annotations

import pytest
from helpers import write_config
from hypothesis import given
from hypothesis import strategies as st

from tidemark.alignment import CLOSED, WindowResult
from tidemark.passes import FINAL, ON_TIME, pass_due, pass_of, read_passes, record_pass
from tidemark.reconcile import ReconcileReport
from tidemark.windows import TumblingWindows

MIN = 60_000
HOUR = 1_763_805_600_000  # 2025-11-22T10:00:00Z


@given(
    size=st.sampled_from([10_000, MIN, 5 * MIN]),
    lateness=st.sampled_from([0, 30_000, 3 * MIN, 60 * MIN]),
    start=st.integers(-3 * MIN, 3 * MIN).map(lambda d: HOUR + d),
    length=st.integers(1, 20 * MIN),
    watermark=st.one_of(st.none(), st.integers(-5 * MIN, 90 * MIN).map(lambda d: HOUR + d)),
    margin=st.sampled_from([0, 1, 120_000]),
)
def test_a_pass_is_due_when_every_window_of_the_range_is_closed_or_final(
    size, lateness, start, length, watermark, margin
):
    windows = TumblingWindows(size, lateness)
    end = start + length
    starts = range(windows.start_of(start), end, size)  # every window the range touches
    less = None if watermark is None else watermark - margin
    assert pass_due(windows, ON_TIME, start, end, watermark, margin) == all(
        windows.is_closed(s, less) for s in starts
    )
    assert pass_due(windows, FINAL, start, end, watermark, margin) == all(
        windows.is_final(s, less) for s in starts
    )


def test_the_boundaries_of_an_hour_with_three_minutes_of_lateness_and_a_grace():
    windows = TumblingWindows(MIN, 3 * MIN)
    end, grace = HOUR + 60 * MIN, 30_000
    marks = (None, end, end + grace - 1, end + grace, end + 3 * MIN + grace - 1, end + 3 * MIN + grace)
    due = {wm: tuple(pass_due(windows, p, HOUR, end, wm, grace) for p in (ON_TIME, FINAL)) for wm in marks}
    assert due == {
        None: (False, False),
        end: (False, False),
        end + grace - 1: (False, False),
        end + grace: (True, False),  # closed: the on-time pass
        end + 3 * MIN + grace - 1: (True, False),
        end + 3 * MIN + grace: (True, True),  # final
    }


def test_an_unknown_pass_is_refused():
    with pytest.raises(Exception, match="on_time, final"):
        pass_due(TumblingWindows(MIN), "later", HOUR, HOUR + MIN, HOUR + MIN)


def _report(folded: int, final: bool, start: int = HOUR) -> ReconcileReport:
    """Two closed windows of 100 records; the second one's ``folded`` came late, within lateness."""
    windows = [
        WindowResult(
            window_start_ms=s,
            window_end_ms=s + MIN,
            status=CLOSED,
            stream_events=100,
            batch_events=100,
            late_events=0,
            abs_diff=0,
            alignment=1.0,
            aligned=True,
            unexplained=0,
            ontime_events=100 - late,
            late_folded=late,
            ontime_alignment=1 - late / 100,
            final=final,
        )
        for s, late in ((start, 0), (start + MIN, folded))
    ]
    return ReconcileReport("p", start, start + 2 * MIN, 0.999, start + 3 * MIN, windows)


def test_a_pass_records_its_alignments_and_a_rerun_replaces_its_row(tmp_path):
    config = write_config(tmp_path, "p")
    assert read_passes(config) == []
    on_time = pass_of(_report(folded=2, final=False), ON_TIME, HOUR + 3 * MIN)
    assert (on_time.worst_ontime_alignment, on_time.worst_alignment) == (0.98, 1.0)
    assert (on_time.closed, on_time.final, on_time.aligned, on_time.ontime_aligned) == (2, 0, 2, 1)
    assert on_time.alignment == 0.98 and on_time.ok  # the on-time pass's figure; not gated
    record_pass(config, on_time)
    final = pass_of(_report(folded=2, final=True), FINAL, HOUR + 6 * MIN)
    record_pass(config, final)
    record_pass(config, pass_of(_report(folded=2, final=True, start=HOUR + 2 * MIN), FINAL, HOUR + 7 * MIN))
    assert read_passes(config, HOUR, HOUR + 2 * MIN) == [on_time, final]
    # re-running a pass (a cleared task, a backfill) replaces its row
    again = pass_of(_report(folded=2, final=True), FINAL, HOUR + 9 * MIN)
    record_pass(config, again)
    assert read_passes(config, HOUR, HOUR + 2 * MIN) == [on_time, again]
    assert len(read_passes(config)) == 3
    data = again.to_dict()
    assert (data["pass"], data["alignment"], data["start"]) == ("final", 1.0, "2025-11-22T10:00:00.000Z")


def test_the_report_lists_the_ranges_two_passes(tmp_path):
    from view_outline import parse

    from tidemark import schemas as S
    from tidemark import tables as T
    from tidemark.alignment import to_arrow
    from tidemark.report import load_report_data
    from tidemark.report_render import render_report

    config = write_config(tmp_path, "p")
    report = _report(folded=2, final=True)
    rows = to_arrow(
        report.windows, pipeline="p", target=0.999, stream_watermark_ms=HOUR + 6 * MIN, reconciled_at_ms=0
    )
    T.write_rs(config.table_path(S.RECONCILIATION), rows)
    record_pass(config, pass_of(_report(folded=2, final=False), ON_TIME, HOUR + 3 * MIN))
    record_pass(config, pass_of(report, FINAL, HOUR + 6 * MIN))
    data = load_report_data(config, HOUR, HOUR + 2 * MIN)
    assert [p.pass_name for p in data.passes] == [ON_TIME, FINAL]
    listed = [n for n in parse(render_report(data)).iter() if "recon-pass" in n.classes]
    assert [
        (n.attrs["data-pass"], n.attrs["data-ontime-alignment"], n.attrs["data-alignment"]) for n in listed
    ] == [
        ("on_time", "0.98", "1.0"),
        ("final", "0.98", "1.0"),
    ]
    cells = [[c.text() for c in n.children if not isinstance(c, str)] for n in listed]
    assert [c[1] for c in cells] == ["on time", "final"] and [c[-1] for c in cells] == ["not gated", "ok"]
