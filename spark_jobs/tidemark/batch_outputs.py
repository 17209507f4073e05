"""What one micro-batch writes: its rows, its windows, its stall, its state and its commit marker.

Every write of batch N commits under the app transaction (run identity, N)
(:class:`tidemark.tables.TableWriter`): a replayed batch writes nothing twice. Few rows are
collected to the driver and written by delta-rs, many by Spark (:data:`COLLECT_MAX_ROWS`); both
write the column types Spark would. The order of the writes is the commit protocol
(:mod:`tidemark.batch`): the batch's rows, the ended stall, the state, and the marker last; after
it, the completeness properties of ``windows`` (:mod:`tidemark.completeness`), whose claim the
batch's ``events``, ``late_events`` and ``windows`` commits carry as ``userMetadata`` too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from tidemark import completeness
from tidemark import schemas as S
from tidemark import tables as T
from tidemark.aggregate import window_start_col
from tidemark.batch_steps import (
    Advance,
    BatchInput,
    BatchSummary,
    Closing,
    Counts,
    EndedStall,
    OpenStall,
    Phases,
)
from tidemark.config import PipelineConfig
from tidemark.dedup import LOCAL_FLAGS
from tidemark.identity import RunIdentity
from tidemark.pipeline_state import PipelineState
from tidemark.progress import Advanced, HostProgress
from tidemark.records import EVENT_FIELDS, is_quarantined_col
from tidemark.revisions import Folded
from tidemark.timeutil import format_instant_ms, humanize_ms, now_ms
from tidemark.windows import TumblingWindows, start_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "COLLECT_MAX_ROWS",
    "BatchOutputs",
    "StoredState",
    "closed_windows_table",
    "collect",
    "collect_events",
    "driver_events",
]

# Up to this many events, quarantined or late rows of a batch are written by delta-rs from the
# driver: a small Spark Delta commit costs ten times delta-rs's (docs/benchmarks.md).
COLLECT_MAX_ROWS = 10_000
# What a small batch's events are collected with (:func:`collect_events`), and the columns
# ``events`` and ``late_events`` derive from them (:meth:`BatchOutputs._event_rows`, in order).
EVENT_INPUT = (*EVENT_FIELDS, "ingest_ts", "source", "arrival_ms")
EVENT_DERIVED = (*S.EVENT_COLUMNS[len(EVENT_FIELDS) :], "window_end", "watermark_at_arrival", "folded")


@dataclass(frozen=True, kw_only=True)
class StoredState:
    """The state a batch wrote for the next one, and the table versions that hold it (what its
    commit marker records)."""

    progress: HostProgress  # its ``version``: the host-progress table's
    open_windows: pd.DataFrame
    open_version: int
    revisable: pd.DataFrame
    revisable_version: int | None


class BatchOutputs:
    """The writers of a batch's tables, through one :class:`tidemark.tables.TableWriter`."""

    def __init__(
        self,
        writer: T.TableWriter,
        config: PipelineConfig,
        identity: RunIdentity,
        echo: Callable[[str], object] = print,
    ) -> None:
        self.writer = writer
        self.config = config
        self.identity = identity
        self.echo = echo
        self.windows = TumblingWindows(config.window, config.allowed_lateness)
        # The watermark the ``windows`` properties claim, as far as this writer knows (None:
        # not read yet); the stream is their one writer, so it reads them once.
        self.claimed: int | None = None

    def write_outputs(
        self,
        inp: BatchInput,
        good: DataFrame | pa.Table,
        counts: Counts,
        closing: Closing,
        previous: int | None,
        phases: Phases,
        watermark: int | None = None,
    ) -> None:
        """Step 4: quarantine, events (and late events), the windows that closed, the records
        kept out of order. The events, late events and windows commits carry the batch's
        ``watermark`` as their ``userMetadata`` (:mod:`tidemark.completeness`)."""
        from pyspark.sql import functions as F

        claim = completeness.Completeness.of(inp.batch_id, watermark, self.windows).user_metadata()

        if counts.quarantined and inp.local is not None:  # cut on the driver, as Spark would
            bad = inp.local.filter(inp.local[LOCAL_FLAGS["quarantined"]])
            quarantine = bad.select(["raw", "reason", "source"]).append_column(
                "batch_id", _batch_ids(inp.batch_id, bad.num_rows)
            )
            quarantine = _nullable(quarantine.append_column("ingest_ts", bad["ingest_ts"]))
            self.writer.write_local(quarantine, S.QUARANTINE, inp.batch_id)
            phases.lap("write_quarantine")
        elif counts.quarantined:
            quarantine = inp.counted.where(is_quarantined_col()).select(
                "raw", "reason", "source", F.lit(inp.batch_id).alias("batch_id"), "ingest_ts"
            )
            self.write_rows(quarantine, counts.quarantined, S.QUARANTINE, inp.batch_id)
            phases.lap("write_quarantine")
        if counts.events:
            self.write_events(
                good, counts.events, inp.batch_id, previous, closing.late, closing.global_lw, claim
            )
            phases.lap("write_events")
        if closing.folded.changed:
            table = closed_windows_table(
                closing.folded.rows, self.config.window, inp.batch_id, closing.global_lw
            )
            # merge_schema: a windows table written before revisions existed gains their columns
            self.writer.write_local(table, S.WINDOWS, inp.batch_id, merge_schema=True, user_metadata=claim)
            phases.lap("write_windows")
        if inp.out_of_order is not None and len(inp.out_of_order):
            rows = inp.out_of_order.assign(batch_id=inp.batch_id, ingest_ts=inp.batch_ts_ms)
            table = pa.Table.from_pandas(rows, schema=S.OUT_OF_ORDER_SCHEMA, preserve_index=False)
            self.writer.write_local(table, S.OUT_OF_ORDER, inp.batch_id)
            phases.lap("write_out_of_order")

    def write_rows(
        self,
        frame: DataFrame,
        count: int,
        table: str,
        batch_id: int,
        merge_schema: bool = False,
        user_metadata: str | None = None,
    ) -> None:
        """Write ``count`` rows: few are collected and written by delta-rs (no Spark job per
        commit), many by Spark. Both commit under the same (run, batch) app transaction, so
        either way a replay writes them once, and both write the column types Spark would."""
        if count > COLLECT_MAX_ROWS:
            options = {"mergeSchema": "true"} if merge_schema else None
            self.writer.write(frame, table, batch_id, options=options, user_metadata=user_metadata)
            return
        self.writer.write_local(
            collect(frame), table, batch_id, merge_schema=merge_schema, user_metadata=user_metadata
        )

    def write_events(
        self,
        good: DataFrame | pa.Table,
        n_events: int,
        batch_id: int,
        prev_wm: int | None,
        late_count: int,
        low_watermark: int | None,
        user_metadata: str | None = None,
    ) -> None:
        """Write the batch's ``n_events`` events, and the late ones (``late_count`` of them) again
        to ``late_events``. A small batch comes collected (``good`` as Arrow, :data:`EVENT_INPUT`:
        :func:`collect_events`) and both tables are cut from it on the driver.
        ``user_metadata``: the commits' ``userMetadata``."""
        has_late = prev_wm is not None and late_count > 0
        meta = user_metadata
        if isinstance(good, pa.Table):
            local = self.event_rows_arrow(good, batch_id, prev_wm, low_watermark)
            # merge_schema: an events table from before ``arrival_ms`` gains it
            events = local.select(S.EVENT_COLUMNS)
            self.writer.write_local(events, S.EVENTS, batch_id, merge_schema=True, user_metadata=meta)
            if has_late:
                late = local.filter(local["is_late"]).select(S.LATE_COLUMNS)
                # merge_schema: a late_events table from before revisions gains ``folded``
                self.writer.write_local(late, S.LATE_EVENTS, batch_id, merge_schema=True, user_metadata=meta)
            return
        rows = self._event_rows(good, batch_id, prev_wm, low_watermark)
        self.writer.write(
            rows.select(*S.EVENT_COLUMNS),
            S.EVENTS,
            batch_id,
            options={"mergeSchema": "true"},
            user_metadata=meta,
        )
        if has_late:
            late_rows = rows.where("is_late").select(*S.LATE_COLUMNS)
            self.write_rows(
                late_rows, late_count, S.LATE_EVENTS, batch_id, merge_schema=True, user_metadata=meta
            )

    def _event_rows(
        self, good: DataFrame, batch_id: int, prev_wm: int | None, low_watermark: int | None
    ) -> DataFrame:
        """The batch's events with every column ``events`` and ``late_events`` store."""
        from pyspark.sql import functions as F

        size = self.config.window
        start_ms = window_start_col("event_time", size)
        window_start = F.timestamp_millis(start_ms)
        return good.select(
            *EVENT_FIELDS,
            window_start.alias("window_start"),
            # A record is late when its window had closed before the batch (previous watermark).
            self.windows.is_closed(start_ms, prev_wm).alias("is_late"),
            F.lit(batch_id).alias("batch_id"),
            "ingest_ts",
            "source",
            F.timestamp_millis(F.lit(low_watermark).cast("long")).alias("low_watermark"),
            "arrival_ms",
            (window_start + F.expr(f"INTERVAL {size} MILLISECONDS")).alias("window_end"),
            F.timestamp_millis(F.lit(prev_wm).cast("long")).alias("watermark_at_arrival"),
            # A late record of a window not final before the batch revises it (tidemark.revisions).
            (~self.windows.is_final(start_ms, prev_wm)).alias("folded"),
        )

    def event_rows_arrow(
        self, good: pa.Table, batch_id: int, prev_wm: int | None, low_watermark: int | None
    ) -> pa.Table:
        """:meth:`_event_rows` on the driver, over the batch's events collected as
        :data:`EVENT_INPUT`: the same columns, types and values as that frame collected
        (:func:`collect`)."""
        n = good.num_rows
        size = self.config.window
        starts = start_of(good["event_time"].to_numpy(zero_copy_only=False).astype("int64"), size)
        return pa.Table.from_arrays(
            [
                *(good[name] for name in EVENT_FIELDS),
                _micros(starts),
                pa.array(self.windows.is_closed(starts, prev_wm), pa.bool_()),
                _batch_ids(batch_id, n),
                good["ingest_ts"],
                good["source"],
                _micros(low_watermark, n),
                good["arrival_ms"],
                _micros(starts + size),
                _micros(prev_wm, n),
                pa.array(~self.windows.is_final(starts, prev_wm), pa.bool_()),
            ],
            names=[*EVENT_FIELDS, *EVENT_DERIVED],
        )

    def write_stall(self, batch_id: int, stall: EndedStall) -> None:
        """One row of ``stalls`` for the stall the batch ended, and a line saying so."""
        row: dict[str, Any] = {
            "started_at": stall.since_ms,
            "ended_at": stall.until_ms,
            "duration_ms": stall.duration_ms,
            "watermark": stall.watermark,
            "hosts_count": len(stall.hosts),
            "hosts": list(stall.hosts),
            "closed_batch_id": batch_id,
        }
        self.writer.write_local(pa.Table.from_pylist([row], schema=S.STALL_SCHEMA), S.STALLS, batch_id)
        self.echo(
            f"[{self.config.pipeline}] stall ended: watermark held at {format_instant_ms(stall.watermark)} "
            f"for {humanize_ms(stall.duration_ms or 0)} by {len(stall.hosts)} lagging hosts"
        )

    def write_state(
        self, hosts: Advanced, closing: Closing, state: PipelineState, batch_id: int
    ) -> StoredState:
        """The state for the next batch: host progress, open windows (overwrite), revisable
        windows."""
        remaining = closing.remaining[S.OPEN_COLUMNS].reset_index(drop=True)
        progress = self.write_progress(hosts, batch_id)
        open_table = pa.Table.from_pandas(remaining, schema=S.OPEN_SCHEMA, preserve_index=False)
        open_version = self.writer.write_local(open_table, S.OPEN_WINDOWS, batch_id, mode="overwrite")
        revisable, revisable_version = self.write_revisable(closing.folded, state, batch_id)
        return StoredState(
            progress=progress,
            open_windows=remaining,
            open_version=open_version,
            revisable=revisable,
            revisable_version=revisable_version,
        )

    def write_progress(self, hosts: Advanced, batch_id: int) -> HostProgress:
        """Store the hosts the batch moved (an append to the host-progress log), or a snapshot
        of every host when the log has grown long (see tidemark.progress); nothing when no host
        moved. Returns the state with the table version that holds it."""
        state = hosts.progress
        if hosts.changed.num_rows or state.version is None:
            mode: Literal["append", "overwrite"] = (
                "overwrite" if hosts.snapshot or state.version is None else "append"
            )
            state.version = self.writer.write_local(hosts.rows, S.HOST_PROGRESS, batch_id, mode=mode)
        return state

    def write_revisable(
        self, folded: Folded, state: PipelineState, batch_id: int
    ) -> tuple[pd.DataFrame, int | None]:
        """Store the closed windows that may still be revised (overwrite), when the batch changed
        them; (them, the table version that holds them: the previous one when unchanged, None
        while there have never been any, as with allowed_lateness 0)."""
        if not folded.changed or (folded.revisable.empty and state.revisable.empty):
            return state.revisable, state.revisable_version
        table = pa.Table.from_pandas(folded.revisable, schema=S.REVISABLE_SCHEMA, preserve_index=False)
        version = self.writer.write_local(table, S.REVISABLE_WINDOWS, batch_id, mode="overwrite")
        return folded.revisable, version

    def write_marker(
        self,
        s: BatchSummary,
        *,
        counts: Counts,
        advance: Advance,
        closing: Closing,
        stall: OpenStall,
        stored: StoredState,
        inp: BatchInput,
    ) -> None:
        """The batch's commit marker (its row of ``watermarks``): written last. It records the
        versions of the state the next batch reads (:mod:`tidemark.pipeline_state`)."""
        committed = now_ms()
        row = {
            "batch_id": s.batch_id,
            "run_id": self.identity.run_id,
            "watermark_ms": s.watermark,
            "watermark": s.watermark,
            "previous_ms": s.previous,
            "state": s.state,
            "hosts_seen": s.hosts_reporting,
            "hosts_total": s.hosts_total,
            "hosts_required": s.hosts_required,
            "hosts_behind": s.hosts_behind,
            "hosts_lagging": s.hosts_lagging,
            "events": s.events,
            "heartbeats": s.heartbeats,
            "late_events": s.late,
            "quarantined": s.quarantined,
            "windows_closed": s.windows_closed,
            "open_windows": s.open_windows,
            "committed_at_ms": committed,
            "committed_at": committed,
            "batch_ts_ms": counts.batch_ts_ms,
            "advanced_at_ms": advance.advanced_at_ms,
            "frontier_ms": advance.status.frontier_ms,
            "stall_since_ms": stall.since_ms,
            "stall_hosts": json.dumps(list(stall.hosts)),
            "hosts_version": stored.progress.version,
            "open_version": stored.open_version,
            "revisable_version": stored.revisable_version,
            "late_folded": s.late_folded,
            "revisions": s.revisions,
            "global_lw_ms": closing.global_lw,
            "stages": closing.server.to_json(),
            "source_progress": inp.source_progress,
        }
        table = pa.Table.from_pylist([row], schema=S.MARKER_SCHEMA)
        self.writer.write_local(table, S.WATERMARKS, s.batch_id, merge_schema=True)

    def publish_completeness(self, batch_id: int, watermark: int | None) -> None:
        """Raise the completeness properties of ``windows`` to batch ``batch_id``'s committed
        ``watermark``, never lowering them (:func:`tidemark.completeness.publish`): called after
        the batch's commit marker, and by the replay of a batch found committed (a kill between
        the two). Nothing when they already claim as much. A commit that keeps losing to
        concurrent metadata commits is left to the next batch, with a line saying so."""
        from deltalake.exceptions import CommitFailedError

        if watermark is None or (self.claimed is not None and watermark <= self.claimed):
            return
        claim = completeness.Completeness.of(batch_id, watermark, self.windows)
        self.writer.fence()
        try:
            now = completeness.publish(self.writer.path(S.WINDOWS), claim, S.WINDOWS)
        except CommitFailedError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.echo(f"[{self.config.pipeline}] completeness properties not raised (next batch): {first}")
            return
        self.claimed = None if now is None else now.watermark_ms


def _batch_ids(batch_id: int, n: int) -> pa.Array:
    """``batch_id`` ``n`` times, typed as Spark's ``F.lit(batch_id)`` comes to the driver: an int
    unless the id needs a long."""
    return pa.array(np.full(n, batch_id, dtype="int32" if batch_id < 2**31 else "int64"))


def _micros(ms, n: int | None = None) -> pa.Array:
    """Epoch milliseconds (an array, or one value or None repeated ``n`` times) as Spark's
    timestamps come to the driver: UTC microseconds."""
    if n is not None:
        if ms is None:
            return pa.nulls(n, S.TS_US)
        ms = np.full(n, ms, dtype="int64")
    return pa.array(np.asarray(ms, dtype="int64") * 1000, pa.int64()).cast(S.TS_US)


def driver_events(good: DataFrame, n_events: int, local: pa.Table | None = None) -> DataFrame | pa.Table:
    """A batch's ``n_events`` events where its window sums and its writes take them from: few
    (up to :data:`COLLECT_MAX_ROWS`) on the driver, cut from the batch's rows there (``local``,
    :attr:`tidemark.dedup.DedupResult.local`) or collected (:func:`collect_events`); many left in
    Spark."""
    if local is not None and n_events:
        return _nullable(local.filter(local[LOCAL_FLAGS["events"]]).select(list(EVENT_INPUT)))
    return collect_events(good) if 0 < n_events <= COLLECT_MAX_ROWS else good


def _nullable(table: pa.Table) -> pa.Table:
    return table.cast(pa.schema([f.with_nullable(True) for f in table.schema]))


def collect_events(good: DataFrame) -> pa.Table:
    """A small batch's events on the driver (:data:`EVENT_INPUT`: one Spark job), from which its
    window sums (:func:`tidemark.aggregate.aggregate_windows_arrow`) and its ``events`` and
    ``late_events`` rows (:meth:`BatchOutputs.event_rows_arrow`) are cut."""
    return collect(good.select(*EVENT_INPUT))


def collect(frame: DataFrame) -> pa.Table:
    """A small frame on the driver, its columns nullable as Spark's table schemas are."""
    rows = frame.toArrow()
    return rows.cast(pa.schema([f.with_nullable(True) for f in rows.schema]))


def closed_windows_table(rows: pd.DataFrame, size: int, batch_id: int, watermark: int | None) -> pa.Table:
    """The ``windows`` rows of a batch (:data:`tidemark.revisions.REVISION_COLUMNS`)."""
    starts = rows["window_start_ms"].to_numpy(dtype="int64")
    n = len(rows)
    return pa.Table.from_arrays(
        [
            pa.array(starts, pa.int64()).cast(S.TS_MS),
            pa.array(starts + size, pa.int64()).cast(S.TS_MS),
            pa.array(rows["key"].astype(str).to_list(), pa.string()),
            pa.array(rows["events"].to_numpy(dtype="int64")),
            pa.array(rows["value_sum"].to_numpy(dtype="float64")),
            pa.array(np.full(n, batch_id, dtype="int64")),
            pa.array(np.full(n, watermark, dtype="int64")).cast(S.TS_MS),
            pa.array(np.full(n, now_ms(), dtype="int64")).cast(S.TS_MS),
            pa.array(rows["revision"].to_numpy(dtype="int64")),
            pa.array(rows["is_final"].to_numpy(dtype=bool)),
            pa.array(rows["late_events"].to_numpy(dtype="int64")),
        ],
        schema=S.WINDOW_SCHEMA,
    )
