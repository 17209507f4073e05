"""The reconciliation row (tidemark.alignment.WindowResult): one type for the table's schema, the
writer's columns and the readers, rows from before a column existed read with its legacy value."""

from __future__ import annotations

import pandas as pd

from tidemark.alignment import (
    CLOSED,
    OPEN,
    RECONCILIATION_SCHEMA,
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
