"""The reconciliation row (tidemark.alignment.WindowResult): one type for the table's schema, the
writer's columns and the readers, rows from before a column existed read with its legacy value."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from tidemark.alignment import (
    CLOSED,
    EXTRA,
    MISSING,
    OPEN,
    RECONCILIATION_SCHEMA,
    RecordDiff,
    WindowResult,
    alignment_summary,
    frame_of,
    to_arrow,
    window_results,
)

T0 = 1_763_805_600_000
MINUTE = 60_000


def _row(start: int, status: str = CLOSED, **kw) -> WindowResult:
    values = dict(
        stream_events=98, batch_events=100, late_events=2, abs_diff=2, alignment=0.98, unexplained=0
    )
    values.update(kw)
    return WindowResult(window_start_ms=start, window_end_ms=start + MINUTE, status=status, **values)


def test_the_table_schema_is_the_row_type_in_table_order():
    assert RECONCILIATION_SCHEMA.names == [
        "pipeline",
        "window_start",
        "window_end",
        "status",
        "stream_events",
        "batch_events",
        "late_events",
        "abs_diff",
        "alignment",
        "aligned",
        "unexplained",
        "ontime_events",
        "late_folded",
        "ontime_alignment",
        "final",
        "revisions",
        "missing_records",
        "extra_records",
        "record_sample",
        "target",
        "stream_watermark",
        "reconciled_at",
    ]


def test_rows_written_read_back_as_the_same_rows():
    rows = [
        _row(T0, aligned=False, ontime_events=90, late_folded=8, ontime_alignment=0.9, revisions=1),
        _row(T0 + MINUTE, OPEN, alignment=None, final=False),
    ]
    table = to_arrow(rows, pipeline="p", target=0.99, stream_watermark_ms=T0 + MINUTE, reconciled_at_ms=T0)
    assert table.schema == RECONCILIATION_SCHEMA
    assert window_results(table.to_pandas()) == rows


def test_a_row_from_before_revisions_reads_as_nothing_folded_and_final():
    legacy = pd.DataFrame(
        {
            "window_start_ms": [T0],
            "status": [CLOSED],
            "stream_events": [95],
            "batch_events": [100],
            "late_events": [5],
            "alignment": [0.95],
            "unexplained": [0],
        }
    )
    (row,) = window_results(legacy)
    assert (row.ontime_events, row.ontime_alignment, row.late_folded, row.final) == (95, 0.95, 0, True)
    assert row.abs_diff == 5 and row.window_end_ms is None


def test_the_summary_of_rows_and_of_their_frame_agree_and_ok_needs_nothing_unexplained():
    rows = [_row(T0), _row(T0 + MINUTE, unexplained=-1), _row(T0 + 2 * MINUTE, OPEN, alignment=None)]
    summary = alignment_summary(frame_of(rows), 0.98)
    assert (summary.closed, summary.open, summary.misaligned_ms, summary.unexplained) == (2, 1, (), 1)
    assert not summary.ok and alignment_summary(frame_of(rows[:1]), 0.98).ok
    assert alignment_summary(frame_of(rows[:1]), 0.99).misaligned_ms == (T0,)


def test_the_records_behind_a_difference_are_stored_and_read_back_and_absent_on_older_rows():
    """The sample is a list of structs in the row; rows without it (older, or not examined) read
    as not examined: None totals and an empty sample."""
    lost = RecordDiff(MISSING, "<i>a</i>", "h1", T0 + 5, None, 1, "file:/l/part-1.jsonl")
    twice = RecordDiff(EXTRA, "b", "h2", T0 + 6, "k", 2, "file:/l/part-2.jsonl", batch_id=3)
    examined = _row(T0, unexplained=-1, missing_records=1, extra_records=2, record_sample=(lost, twice))
    rows = [examined, _row(T0 + MINUTE, unexplained=4), _row(T0 + 2 * MINUTE)]
    rows = [replace(w, ontime_events=98, ontime_alignment=0.98) for w in rows]  # as read back
    table = to_arrow(rows, pipeline="p", target=0.99, stream_watermark_ms=T0, reconciled_at_ms=T0)
    back = window_results(table.to_pandas())
    assert back == rows and back[0].record_sample == (lost, twice)
    assert back[0].examined and back[1].records_not_examined and not back[2].records_not_examined
    assert back[0].records_line() == "1 missing from events: h1 <i>a</i>; 2 extra in events: h2 b ×2"
    assert back[0].records_totals() == "1 missing from events (1 listed), 2 extra in events (1 listed)"
    assert back[0].explanation() == ("1 record(s) counted twice (unexplained); " + back[0].records_totals())
    assert back[1].explanation().endswith("; records not examined (beyond the windows examined per run)")
    assert alignment_summary(frame_of(back), 0.9).unexplained == 5
    legacy = table.drop_columns(["missing_records", "extra_records", "record_sample"]).to_pandas()
    assert [(w.missing_records, w.extra_records, w.record_sample) for w in window_results(legacy)] == [
        (None, None, ())
    ] * 3


def test_a_sample_smaller_than_the_total_says_how_many_more():
    sample = tuple(RecordDiff(MISSING, f"id{i}", f"h{i}", T0 + i, "k", 1, "s") for i in range(3))
    w = _row(T0, unexplained=8, missing_records=8, extra_records=0, record_sample=sample)
    assert w.records_line(shown=2) == "8 missing from events: h0 id0, h1 id1 and 6 more"
    nothing = _row(T0, unexplained=-2, missing_records=0, extra_records=0)
    assert (
        nothing.records_line()
        == "no record differs between the recompute and events: the window counts differ"
    )
