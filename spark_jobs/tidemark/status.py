"""Watermark status from the persisted state, without Spark.

Reads the pipeline's newest ``watermarks`` row and the host progress it points at through delta-rs
(the ``deltalake`` package: no JVM, tens of milliseconds), re-reads the expected-host list, and
classifies the watermark *now*: a watermark that stopped moving while too many hosts lag is
STALLED even if no batch has run since. This is the code the UI views and ``tidemark watermark``
call; the watermark itself comes from the commit marker (:mod:`tidemark.committed`), which is all
the Airflow sensor and trigger read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.committed import CommittedWatermark
from tidemark.config import PipelineConfig
from tidemark.errors import NotRunError as NotRunError
from tidemark.hosts import read_hosts_file
from tidemark.pipeline_state import Marker, committed_marker, host_progress_at
from tidemark.timeutil import format_instant_ms, humanize_ms, now_ms
from tidemark.watermark_status import WatermarkStatus, evaluate_status


@dataclass(frozen=True)
class OutOfOrder:
    """Records the committed batches read behind their own host's progress (``out_of_order``):
    the host's files or partition were read out of order (README, Input contract)."""

    records: int
    hosts: int
    top: list[dict]  # the hosts with the most, most first: host, records, batches, last_batch


@dataclass(frozen=True)
class PipelineStatus:
    pipeline: str
    batch_id: int | None
    committed_at_ms: int | None
    stall_since_ms: int | None
    status: WatermarkStatus
    out_of_order: OutOfOrder | None = None  # None: no batch has read a host out of order

    def to_dict(self, limit: int = 20) -> dict:
        s = self.status
        return {
            "pipeline": self.pipeline,
            "state": s.state,
            "watermark": format_instant_ms(s.watermark_ms),
            "watermark_ms": s.watermark_ms,
            "frontier": format_instant_ms(s.frontier_ms),
            "event_time_lag_ms": _lag(s),
            "since_advance_ms": s.since_advance_ms,
            "stalled_since": format_instant_ms(self.stall_since_ms) if self.stall_since_ms else None,
            "last_batch_id": self.batch_id,
            "last_commit": format_instant_ms(self.committed_at_ms),
            "hosts_total": s.hosts_total,
            "hosts_reporting": s.hosts_reporting,
            "hosts_lagging": s.hosts_lagging,
            "allowed_lagging": s.allowed_lagging,
            "lagging_hosts": [asdict(h) for h in s.lagging[:limit]],
            "out_of_order": (
                None
                if self.out_of_order is None
                else {**asdict(self.out_of_order), "top": self.out_of_order.top[:limit]}
            ),
        }

    def text(self, limit: int = 20) -> str:
        s, lag = self.status, _lag(self.status)
        lines = [
            f"pipeline      {self.pipeline}",
            f"state         {s.state}",
            f"watermark     {format_instant_ms(s.watermark_ms)}"
            + (f"  ({humanize_ms(lag)} behind the median host)" if lag is not None else ""),
            "last advanced "
            + (f"{humanize_ms(s.since_advance_ms)} ago" if s.since_advance_ms is not None else "-")
            + f"; last batch {self.batch_id if self.batch_id is not None else '-'} committed "
            f"{format_instant_ms(self.committed_at_ms)}",
            f"hosts         {s.hosts_total:,} expected, {s.hosts_reporting:,} reporting, "
            f"{s.hosts_lagging:,} lagging (allowed {s.allowed_lagging:,})",
        ]
        if s.lagging:
            lines.append(f"lagging hosts (worst first, {min(limit, len(s.lagging))} of {len(s.lagging)}):")
            for h in s.lagging[:limit]:
                progress = format_instant_ms(h.progress_ms) if h.progress_ms is not None else "never reported"
                behind = humanize_ms(h.lag_ms) if h.lag_ms is not None else "-"
                lines.append(f"  {h.host:<24} {progress:<26} lag {behind}")
        if (o := self.out_of_order) is not None:
            lines.append(
                f"out of order  {o.records:,} records from {o.hosts:,} hosts were read behind their host's "
                "own progress (its files or partition out of order; see the README's input contract)"
            )
            for row in o.top[:limit]:
                lines.append(
                    f"  {row['host']:<24} {row['records']:,} records in {row['batches']:,} batches, "
                    f"last in batch {row['last_batch']}"
                )
        return "\n".join(lines)


# the tables a pipeline's first committed batch creates; any of them means it has run
RUN_TABLES = (S.WATERMARKS, S.WINDOWS, S.EVENTS)


def check_has_run(config: PipelineConfig) -> None:
    """Raise :class:`NotRunError` ("pipeline X has not run yet: no tables under <location>") when
    none of the pipeline's tables exists. Reads the Delta logs only: no JVM, writes nothing; an
    unreadable object store raises :class:`tidemark.object_store.StorageError` (one line)."""
    if not any(T.table_exists(config.table_path(table)) for table in RUN_TABLES):
        raise NotRunError(f"pipeline {config.pipeline} has not run yet: no tables under {config.tables_root}")


def _lag(s: WatermarkStatus) -> int | None:
    if s.frontier_ms is None or s.watermark_ms is None:
        return None
    return max(0, s.frontier_ms - s.watermark_ms)


def latest_marker(config: PipelineConfig) -> Marker | None:
    return committed_marker(config)


def host_progress(config: PipelineConfig, marker: dict | None) -> tuple[np.ndarray, np.ndarray]:
    """(hosts, progress ms) as of the committed ``marker`` (the host-progress version it points at);
    empty arrays before the first batch."""
    if marker is None:
        return np.array([], dtype=object), np.array([], dtype="int64")
    state = host_progress_at(config, marker)
    return state.hosts, state.progress_ms


def out_of_order(config: PipelineConfig, marker: dict | None) -> OutOfOrder | None:
    """What ``out_of_order`` holds for the batches up to the committed ``marker``; None when
    nothing (a row of a batch that did not commit is not counted)."""
    if marker is None:
        return None
    rows = T.read_if_exists(config, S.OUT_OF_ORDER, columns=["host", "batch_id", "records"])
    if rows is None:
        return None
    rows = rows[rows["batch_id"] <= int(marker["batch_id"])]
    if rows.empty:
        return None
    per_host = (
        rows.groupby("host")
        .agg(records=("records", "sum"), batches=("batch_id", "nunique"), last_batch=("batch_id", "max"))
        .sort_values(["records", "last_batch"], ascending=[False, False])
        .reset_index()
    )
    top = [
        {
            "host": str(r.host),
            "records": int(r.records),
            "batches": int(r.batches),
            "last_batch": int(r.last_batch),
        }
        for r in per_host.itertuples(index=False)
    ]
    return OutOfOrder(records=int(rows["records"].sum()), hosts=len(per_host), top=top)


def read_status(
    config: PipelineConfig,
    now: int | None = None,
    marker: dict | None = None,
    hosts_progress: tuple[np.ndarray, np.ndarray] | None = None,
) -> PipelineStatus:
    """The pipeline's watermark status at ``now``, from ``marker`` (default: the newest committed one)
    and the host progress it points at (``hosts_progress`` when the caller has read it already)."""
    marker = marker if marker is not None else latest_marker(config)
    committed = CommittedWatermark.from_marker(marker)
    wm_cfg = config.watermark
    expected = read_hosts_file(wm_cfg.hosts_file) if wm_cfg.hosts_file else None
    hosts, progress = hosts_progress if hosts_progress is not None else host_progress(config, marker)
    status = evaluate_status(
        hosts,
        progress,
        wm_cfg.precision_fraction,
        committed.watermark_ms,
        committed.advanced_at_ms,
        now if now is not None else now_ms(),
        wm_cfg.lag_threshold,
        wm_cfg.stall_after,
        expected=expected,
    )
    return PipelineStatus(
        pipeline=config.pipeline,
        batch_id=committed.batch_id,
        committed_at_ms=committed.committed_at_ms,
        stall_since_ms=committed.stall_since_ms,
        status=status,
        out_of_order=out_of_order(config, marker),
    )


def status_json(config: PipelineConfig, limit: int = 20, now: int | None = None) -> str:
    return json.dumps(read_status(config, now).to_dict(limit), indent=2)
