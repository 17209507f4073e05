"""The reconciliation rows of one interval, summarised for alerts, Asset events and the UI (no JVM).

The figures (closed, misaligned, share aligned, worst, unexplained) are
:func:`tidemark.reconcile.alignment_summary`'s, the one definition the CLI, the report and the
quality step use too.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import PipelineConfig
from tidemark.reconcile import alignment_summary
from tidemark.timeutil import format_instant_ms


def reconciliation_rows(
    config: PipelineConfig, start_ms: int | None = None, end_ms: int | None = None
) -> pd.DataFrame:
    """Rows of the ``reconciliation`` table (pandas), optionally those with start <= window_start < end."""
    frame = T.read_if_exists(config, S.RECONCILIATION)
    if frame is None:
        return pd.DataFrame()
    if frame.empty:
        return frame
    frame = frame.assign(window_start_ms=T.epoch_ms(frame["window_start"]).astype("int64"))
    if start_ms is not None:
        frame = frame[frame["window_start_ms"] >= start_ms]
    if end_ms is not None:
        frame = frame[frame["window_start_ms"] < end_ms]
    return frame.sort_values("window_start_ms").reset_index(drop=True)


def interval_summary(config: PipelineConfig, start_ms: int, end_ms: int, worst: int = 10) -> dict[str, Any]:
    """The interval's windows against ``reconcile.target``: figures, and a text naming the worst."""
    frame = reconciliation_rows(config, start_ms, end_ms)
    if frame.empty:
        raise RuntimeError(
            f"no reconciliation rows for {config.pipeline} in {format_instant_ms(start_ms)} .. "
            f"{format_instant_ms(end_ms)}: did the recompute run?"
        )
    target = config.reconcile.target
    summary = alignment_summary(frame, target)
    lines = [
        f"{config.pipeline} {format_instant_ms(start_ms)} .. {format_instant_ms(end_ms)}: "
        f"{summary.closed} closed windows, {summary.aligned} aligned at {target}, "
        f"{summary.open} open, unexplained {summary.unexplained}; worst alignment final "
        f"{summary.worst_alignment}, on-time {summary.worst_ontime_alignment} "
        f"({summary.late_folded:,} late records folded into revisions)"
    ]
    closed = frame[frame["status"] == "closed"]
    for _, row in closed.sort_values("alignment").head(worst).iterrows():
        lines.append(
            f"  {format_instant_ms(int(row['window_start_ms']))} alignment {row['alignment']:.6f} "
            f"stream {int(row['stream_events']):,} batch {int(row['batch_events']):,} late "
            f"{int(row['late_events']):,} unexplained {int(row['unexplained']):,}"
        )
    reconciled_at = frame["reconciled_at"].max()
    return {
        "pipeline": config.pipeline,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "target": target,
        "windows": len(frame),
        "closed": summary.closed,
        "open": summary.open,
        "misaligned": [format_instant_ms(ms) for ms in summary.misaligned_ms],
        "unexplained": summary.unexplained,
        "aligned_share": summary.share_aligned,
        "worst_alignment": summary.worst_alignment,
        "worst_ontime_alignment": summary.worst_ontime_alignment,
        "late_folded": summary.late_folded,
        "reconciled_at_ms": int(reconciled_at.timestamp() * 1000) if not pd.isna(reconciled_at) else 0,
        "text": "\n".join(lines),
    }
