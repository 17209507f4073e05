"""The reconciliation rows of one interval, summarised for alerts, Asset events and the UI (no JVM)."""

from __future__ import annotations

from typing import Any

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import PipelineConfig
from tidemark.timeutil import format_instant_ms


def reconciliation_rows(config: PipelineConfig, start_ms: int | None = None, end_ms: int | None = None):
    """Rows of the ``reconciliation`` table (pandas), optionally those with start <= window_start < end."""
    import pandas as pd

    path = config.table_path(S.RECONCILIATION)
    if not T.table_exists(path):
        return pd.DataFrame()
    frame = T.read_local(path)
    if frame.empty:
        return frame
    frame = frame.assign(window_start_ms=T.epoch_ms(frame["window_start"]).astype("int64"))
    if start_ms is not None:
        frame = frame[frame["window_start_ms"] >= start_ms]
    if end_ms is not None:
        frame = frame[frame["window_start_ms"] < end_ms]
    return frame.sort_values("window_start_ms").reset_index(drop=True)


def interval_summary(config: PipelineConfig, start_ms: int, end_ms: int, worst: int = 10) -> dict[str, Any]:
    frame = reconciliation_rows(config, start_ms, end_ms)
    target = config.reconcile.target
    if frame.empty:
        raise RuntimeError(
            f"no reconciliation rows for {config.pipeline} in {format_instant_ms(start_ms)} .. "
            f"{format_instant_ms(end_ms)}: did the recompute run?"
        )
    closed = frame[frame["status"] == "closed"]
    misaligned = closed[closed["alignment"] < target]
    unexplained = int(frame["unexplained"].abs().sum())
    lines = [
        f"{config.pipeline} {format_instant_ms(start_ms)} .. {format_instant_ms(end_ms)}: "
        f"{len(closed)} closed windows, {len(closed) - len(misaligned)} aligned at {target}, "
        f"{len(frame) - len(closed)} open, unexplained {unexplained}"
    ]
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
        "closed": len(closed),
        "open": int(len(frame) - len(closed)),
        "misaligned": [format_instant_ms(int(ms)) for ms in misaligned["window_start_ms"]],
        "unexplained": unexplained,
        "aligned_share": float((len(closed) - len(misaligned)) / len(closed)) if len(closed) else None,
        "worst_alignment": float(closed["alignment"].min()) if len(closed) else None,
        "reconciled_at_ms": int(reconciled_at.timestamp() * 1000) if reconciled_at is not None else 0,
        "text": "\n".join(lines),
    }
