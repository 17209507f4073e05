"""The reconciliation rows of one interval, summarised for alerts, Asset events and the UI (no JVM).

The rows are :class:`tidemark.alignment.WindowResult`, the figures (closed, misaligned, share
aligned, worst, unexplained) and the verdict (``ok``) :func:`tidemark.alignment.alignment_summary`'s,
the one definition the CLI, the report and the quality step use too. A window whose unexplained
difference was examined carries the records behind it (:mod:`tidemark.unexplained`): the summary
names a few of each kind with their hosts, and the totals.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pandas as pd

from tidemark.alignment import CLOSED, EXTRA, MISSING, WindowResult, alignment_summary, window_results
from tidemark.config import PipelineConfig
from tidemark.stream_side import reconciled_rows
from tidemark.timeutil import format_instant_ms


def reconciliation_rows(
    config: PipelineConfig, start_ms: int | None = None, end_ms: int | None = None
) -> pd.DataFrame:
    """Rows of the ``reconciliation`` table (pandas), optionally those with start <= window_start < end."""
    frame = reconciled_rows(config, start_ms, end_ms)
    return pd.DataFrame() if frame is None else frame


# Records named per window and kind in the summary's text and details (the totals are exact).
RECORDS_NAMED = 5


def interval_summary(config: PipelineConfig, start_ms: int, end_ms: int, worst: int = 10) -> dict[str, Any]:
    """The interval's windows against ``reconcile.target``: figures, and a text naming the worst
    and, per window with something unexplained, a few of the records behind it."""
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
    records = _unexplained_records(window_results(closed.sort_values("window_start_ms")))
    if records["windows"] or records["not_examined"]:
        lines.append(
            f"records behind the unexplained difference: {records['missing']:,} missing from events, "
            f"{records['extra']:,} extra in events"
        )
        lines.extend(f"  {w['window_start']}: {w['line']}" for w in records["windows"])
        if records["not_examined"]:
            skipped = records["not_examined"]
            lines.append(f"  {len(skipped)} window(s) not examined: {', '.join(skipped)}")
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
        "windows_final": summary.final,
        "unexplained_records": records,
        "reconciled_at_ms": int(reconciled_at.timestamp() * 1000) if not pd.isna(reconciled_at) else 0,
        "text": "\n".join(lines),
    }


def _unexplained_records(windows: list[WindowResult]) -> dict[str, Any]:
    """The examined windows' records (a few per kind: host, id, event time, copies, source,
    batch) and totals, and the windows with something unexplained that were not examined."""
    examined = [w for w in windows if w.examined]
    return {
        "missing": sum(w.missing_records or 0 for w in examined),
        "extra": sum(w.extra_records or 0 for w in examined),
        "windows": [
            {
                "window_start": w.iso,
                "unexplained": w.unexplained,
                "missing": w.missing_records,
                "extra": w.extra_records,
                "records": [
                    asdict(r) for kind in (MISSING, EXTRA) for r in w.sample_of(kind)[:RECORDS_NAMED]
                ],
                "line": w.records_line(RECORDS_NAMED),
            }
            for w in examined
            if w.unexplained
        ],
        "not_examined": [w.iso for w in windows if w.records_not_examined],
    }


def interval_passes(config: PipelineConfig, start_ms: int, end_ms: int) -> dict[str, Any]:
    """The recorded passes (:mod:`tidemark.passes`) of exactly the interval's windows, by pass
    name (``on_time``, ``final``), JSON-ready; those not run yet are absent."""
    from tidemark.passes import read_passes, windows_of

    lo, hi = windows_of(config).covering(start_ms, end_ms)
    return {
        p.pass_name: p.to_dict() for p in read_passes(config, lo, hi) if (p.start_ms, p.end_ms) == (lo, hi)
    }


def recorded_pass(config: PipelineConfig, reconcile_pass: str, start_ms: int, end_ms: int) -> dict[str, Any]:
    """The figures the ``reconcile_pass`` of the interval recorded; a RuntimeError when it has none."""
    found = interval_passes(config, start_ms, end_ms).get(reconcile_pass)
    if found is None:
        raise RuntimeError(
            f"no {reconcile_pass} pass recorded for {config.pipeline} in {format_instant_ms(start_ms)} .. "
            f"{format_instant_ms(end_ms)}: did the recompute run?"
        )
    return found
