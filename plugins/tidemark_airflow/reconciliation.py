"""The reconciliation rows of one interval, summarised for alerts, Asset events and the UI (no JVM).

The rows are :class:`tidemark.alignment.WindowResult`, the figures (closed, misaligned, share
aligned, worst, unexplained) and the verdict (``ok``) :func:`tidemark.alignment.alignment_summary`'s,
the one definition the CLI, the report and the quality step use too.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tidemark.alignment import CLOSED, alignment_summary, window_results
from tidemark.config import PipelineConfig
from tidemark.stream_side import reconciled_rows
from tidemark.timeutil import format_instant_ms


def reconciliation_rows(
    config: PipelineConfig, start_ms: int | None = None, end_ms: int | None = None
) -> pd.DataFrame:
    """Rows of the ``reconciliation`` table (pandas), optionally those with start <= window_start < end."""
    frame = reconciled_rows(config, start_ms, end_ms)
    return pd.DataFrame() if frame is None else frame


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
    closed = frame[frame["status"] == CLOSED].sort_values("alignment")
    for w in window_results(closed.head(worst)):
        lines.append(
            f"  {w.iso} alignment {w.alignment:.6f} stream {w.stream_events:,} batch "
            f"{w.batch_events:,} late {w.late_events:,} unexplained {w.unexplained:,}"
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
        "ok": summary.ok,
        "misaligned": [format_instant_ms(ms) for ms in summary.misaligned_ms],
        "unexplained": summary.unexplained,
        "aligned_share": summary.share_aligned,
        "worst_alignment": summary.worst_alignment,
        "worst_ontime_alignment": summary.worst_ontime_alignment,
        "late_folded": summary.late_folded,
        "reconciled_at_ms": int(reconciled_at.timestamp() * 1000) if not pd.isna(reconciled_at) else 0,
        "text": "\n".join(lines),
    }
