"""One micro-batch of the stream: the ``foreachBatch`` function and its commit protocol.

A batch is a sequence of named steps, each a function of the batch's rows and the state the
previous batch committed (:class:`PipelineState`)::

    count per host ─ advance the watermark ─ close windows ─ write outputs ─ track stalls ─ commit
    (one Spark job)  (tidemark.watermark)    (tidemark.   (events, late,  (stalls)       (state, then
                                              windows,     quarantine,                   the watermark
                                              revisions)   windows)                      row, last)

Closing a window writes its revision 0; late records of a closed window that is not final yet
(``window.allowed_lateness``) revise it, and the watermark passing end + allowed lateness writes
its final revision (:mod:`tidemark.revisions`).

Why a replay writes nothing twice: every Delta write of batch N carries (run identity, N) as
``txnAppId``/``txnVersion`` (:class:`tidemark.tables.TableWriter`), the state a batch starts from
is read at the Delta versions batch N-1's watermark row recorded, and a batch whose watermark row
exists is skipped whole. The step timings (:class:`Phases`) are printed per batch and read by the
benchmarks; their names are stable.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tidemark import checkpoint as C
from tidemark import schemas as S
from tidemark import tables as T
from tidemark.aggregate import aggregate_windows, window_start_col
from tidemark.config import PipelineConfig
from tidemark.dedup import NO_REMOVED, deduplicate
from tidemark.hosts import ExpectedHosts
from tidemark.identity import RunIdentity
from tidemark.progress import Advanced, HostProgress
from tidemark.records import EVENT_FIELDS
from tidemark.revisions import Folded, empty_revisable, fold
from tidemark.sources import is_event_col
from tidemark.timeutil import format_instant_ms, humanize_ms, now_ms
from tidemark.watermark import (
    PIPELINE_STAGES,
    STALLED,
    WatermarkServer,
    WatermarkStatus,
    WatermarkUpdate,
    evaluate_status,
    update_watermark,
)
from tidemark.windows import TumblingWindows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["COLLECT_MAX_ROWS", "BatchProcessor", "BatchSummary", "PipelineState"]

# Up to this many events, quarantined or late rows of a batch are written by delta-rs from the
# driver: a small Spark Delta commit costs ten times delta-rs's (docs/benchmarks.md).
COLLECT_MAX_ROWS = 10_000
# Batch summaries a processor keeps in memory (the benchmarks and the demo read them).
SUMMARIES_KEPT = 10_000


def _empty_open() -> pd.DataFrame:
    return S.OPEN_SCHEMA.empty_table().to_pandas()


@dataclass
class PipelineState:
    """What batch ``batch_id`` left behind; the input of batch ``batch_id + 1``."""

    batch_id: int = -1
    watermark: int | None = None
    advanced_at_ms: int | None = None  # processing time of the batch that last moved it
    stall_since_ms: int | None = None  # an open stall: when the watermark stopped moving
    stall_hosts: tuple[str, ...] = ()
    stages: str | None = None  # WatermarkServer state (JSON)
    progress: HostProgress = field(default_factory=HostProgress.empty)
    open_windows: pd.DataFrame = field(default_factory=_empty_open)
    # closed windows a late record may still revise, and the state table version holding them
    revisable: pd.DataFrame = field(default_factory=empty_revisable)
    revisable_version: int | None = None


@dataclass(frozen=True)
class BatchSummary:
    batch_id: int
    events: int = 0
    heartbeats: int = 0
    late: int = 0
    late_folded: int = 0  # of the late records, those folded into window revisions
    revisions: int = 0  # window rows written with revision >= 1
    quarantined: int = 0
    watermark: int | None = None
    previous: int | None = None
    hosts_total: int = 0
    hosts_reporting: int = 0
    hosts_required: int = 0
    hosts_behind: int = 0
    hosts_lagging: int = 0
    state: str = ""
    windows_closed: int = 0
    open_windows: int = 0
    seconds: float = 0.0
    skipped: bool = False
    retries_dropped: int = 0  # exactly_once: publisher retries deduplication removed
    retries_looked_up: int = 0  # exactly_once: ids looked up in the catalog (events table)
    out_of_order: int = 0  # exactly_once: records behind their host's progress (input out of order)
    phases: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def hosts_seen(self) -> int:
        return self.hosts_reporting

    def line(self) -> str:
        if self.skipped:
            return f"batch {self.batch_id}: already committed, replay skipped"
        moved = (
            f" (+{humanize_ms(self.watermark - self.previous)})"
            if self.watermark is not None and self.previous is not None and self.watermark > self.previous
            else ""
        )
        return (
            f"batch {self.batch_id}: {self.events:,} events, {self.late:,} late"
            + (f" ({self.late_folded:,} folded into {self.revisions:,} revisions)" if self.revisions else "")
            + ", "
            f"{self.quarantined:,} quarantined, {self.retries_dropped:,} retries dropped"
            + (f", {self.out_of_order:,} out of order" if self.out_of_order else "")
            + " "
            f"| watermark {format_instant_ms(self.watermark)}"
            f"{moved} {self.state} | hosts {self.hosts_reporting:,}/{self.hosts_total:,} reporting, "
            f"{self.hosts_lagging:,} lagging | {self.windows_closed:,} window rows closed, "
            f"{self.open_windows:,} open | {self.seconds:.1f}s"
        )


class Phases:
    """Wall time per step of a batch (seconds), for progress output and benchmarks."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self._mark = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.times[name] = self.times.get(name, 0.0) + now - self._mark
        self._mark = now


# -- what each step hands the next -------------------------------------------------------------


@dataclass(frozen=True)
class _Input:
    """A batch's rows after deduplication, and where its counts are read."""

    batch_id: int
    rows: DataFrame  # the batch's unique rows (good and bad), with ingest_ts
    counted: DataFrame  # where per-host counts and quarantined lines are read (see _count_per_host)
    removed: pd.DataFrame  # (host, event_time) of the retries deduplication took out on the driver
    # the count columns (_count_columns) of every row of ``counted``, when deduplication's hash
    # pass collected them already; None: collected by the count step
    scanned: pa.Table | None
    batch_ts_ms: int
    source_progress: str | None
    # per host, the records kept although behind its progress (tidemark.dedup); None: not counted
    out_of_order: pd.DataFrame | None = None


@dataclass(frozen=True)
class _Counts:
    """Step 1: the batch per host."""

    per_host: pa.Table  # host (NULL: quarantined lines), progress_ms, events, heartbeats, ...
    events: int
    heartbeats: int
    quarantined: int
    upstream_lw: int | None
    batch_ts_ms: int | None  # None for an empty batch: it has no processing time of its own


@dataclass(frozen=True)
class _Advance:
    """Step 2: host progress, the precise watermark and its status."""

    hosts: Advanced  # the host progress after the batch, and what to store of it
    update: WatermarkUpdate
    status: WatermarkStatus
    hosts_total: int
    advanced_at_ms: int | None

    @property
    def watermark(self) -> int | None:
        return self.update.watermark


@dataclass(frozen=True)
class _Closing:
    """Step 3: the batch's late events, the windows that close, those that stay open, and the
    window rows to write (closed now, revised, made final)."""

    late: int
    closing: pd.DataFrame
    remaining: pd.DataFrame
    server: WatermarkServer
    folded: Folded

    @property
    def global_lw(self) -> int | None:
        return self.server.global_low_watermark


class BatchProcessor:
    """The ``foreachBatch`` function. Holds the state of the last committed batch in memory and
    reloads it from Delta only when it is not the one the incoming batch builds on."""

    def __init__(
        self, spark: SparkSession, config: PipelineConfig, identity: RunIdentity, echo=print
    ) -> None:
        self.spark = spark
        self.config = config
        self.identity = identity
        self.writer = T.TableWriter(config, identity)
        self.echo = echo
        self.hosts = ExpectedHosts(config.watermark.hosts_file)
        self.windows = TumblingWindows(config.window, config.allowed_lateness)
        self._state: PipelineState | None = None
        # The newest batches' summaries (a job runs for weeks: bounded), and how many ran.
        self.summaries: deque[BatchSummary] = deque(maxlen=SUMMARIES_KEPT)
        self.batches_run = 0
        # Called with the time after each committed batch, before the next starts: the stream's
        # own table maintenance on object storage (tidemark.stream, tidemark.maintenance).
        self.between_batches: Callable[[int], object] | None = None

    # -- state -------------------------------------------------------------------------------
    def _marker_before(self, batch_id: int) -> tuple[dict | None, bool]:
        """(newest watermark row with batch_id <= the given one, is it that very batch?)."""
        row = T.latest_marker(self.writer.path(S.WATERMARKS), max_batch=batch_id)
        return row, row is not None and int(row["batch_id"]) == batch_id

    def _load_state(self, marker: dict | None) -> PipelineState:
        if marker is None:
            return PipelineState()
        hosts_version = int(marker["hosts_version"])
        progress = HostProgress.from_rows(
            T.read_local(self.writer.path(S.HOST_PROGRESS), hosts_version), version=hosts_version
        )
        open_windows = T.read_local(self.writer.path(S.OPEN_WINDOWS), int(marker["open_version"])).astype(
            {"window_start_ms": "int64", "events": "int64", "value_sum": "float64"}
        )
        revisable_version = _optional_int(marker.get("revisable_version"))
        revisable = (
            empty_revisable()
            if revisable_version is None
            else T.read_local(self.writer.path(S.REVISABLE_WINDOWS), revisable_version)
        )
        return PipelineState(
            batch_id=int(marker["batch_id"]),
            watermark=_optional_int(marker["watermark_ms"]),
            advanced_at_ms=_optional_int(marker["advanced_at_ms"]),
            stall_since_ms=_optional_int(marker["stall_since_ms"]),
            stall_hosts=tuple(json.loads(marker["stall_hosts"] or "[]")),
            stages=marker["stages"],
            progress=progress,
            open_windows=open_windows[S.OPEN_COLUMNS],
            revisable=revisable[S.REVISABLE_SCHEMA.names].astype(
                {"window_start_ms": "int64", "events": "int64", "value_sum": "float64", "revision": "int64"}
            ),
            revisable_version=revisable_version,
        )

    def state_before(self, batch_id: int) -> tuple[PipelineState, bool]:
        """(state left by the last committed batch before ``batch_id``, already committed?)."""
        cached = self._state
        if cached is not None and cached.batch_id == batch_id - 1:
            return cached, False
        marker, committed = self._marker_before(batch_id)
        if committed:
            return PipelineState(batch_id=batch_id), True
        return self._load_state(marker), False

    # -- the batch ---------------------------------------------------------------------------
    def __call__(self, batch: DataFrame, spark_batch_id: int) -> None:
        started = time.monotonic()
        phases = Phases()
        # Table batch ids continue across checkpoint resets (the run's batch_offset).
        batch_id = self.identity.batch_offset + spark_batch_id
        resettable = self.config.source.kind in C.RESETTABLE_SOURCES
        source = C.batch_source(self.config, spark_batch_id) if resettable else None
        state, committed = self.state_before(batch_id)
        phases.lap("load_state")
        if committed:
            # Every table already holds this batch (the plan keeps no Spark state to commit).
            self._state = None  # reload from Delta for the next batch
            self._report(BatchSummary(batch_id, skipped=True))
            return
        # The batch timestamp joins after the cache (see tidemark.stream.build_stream): Spark's,
        # from the offset log, the value current_timestamp() has, so a replay sees the same.
        batch_ts = (
            source.batch_ts_ms if source is not None else C.batch_timestamp_ms(self.config, spark_batch_id)
        )
        cached = [batch.persist()]
        try:
            rows, counted, removed, dedup = self._deduplicate(cached, batch_id, state, batch_ts, phases)
            inp = _Input(
                batch_id,
                rows,
                counted,
                removed,
                dedup.scanned if dedup else None,
                batch_ts,
                source.progress if source else None,
                dedup.out_of_order if dedup else None,
            )
            summary, new_state = self.step(inp, state, phases)
        finally:
            for frame in cached:
                frame.unpersist()
        summary = dataclasses.replace(
            summary,
            seconds=time.monotonic() - started,
            phases=phases.times,
            retries_dropped=dedup.dropped if dedup else 0,
            retries_looked_up=dedup.looked_up if dedup else 0,
            out_of_order=int(inp.out_of_order["records"].sum()) if inp.out_of_order is not None else 0,
        )
        self._state = new_state
        self._report(summary)
        if self.between_batches is not None:
            self.between_batches(now_ms())

    def _deduplicate(self, cached: list, batch_id: int, state: PipelineState, batch_ts: int, phases: Phases):
        """(rows, where to count them, removed copies, dedup result): the batch's rows with
        ``ingest_ts``, less publisher retries (exactly_once)."""
        from pyspark.sql import functions as F

        rows = cached[0].select("*", F.timestamp_millis(F.lit(batch_ts)).alias("ingest_ts"))
        if self.config.mode != "exactly_once":
            return rows, rows, NO_REMOVED, None
        dedup = deduplicate(
            self.spark,
            rows,
            batch_id=batch_id,
            progress=state.progress,
            batch_ts_ms=batch_ts,
            horizon_ms=self.config.dedup_horizon,
            events_path=self.writer.path(S.EVENTS),
            columns=_count_columns(),
            lap=phases.lap,
        )
        cached.extend(dedup.cached)
        if dedup.removed is None:  # resolved by Spark: count the deduplicated rows
            return dedup.rows, dedup.rows, NO_REMOVED, dedup
        # resolved on the driver: count the cache as it is, less the removed copies
        return dedup.rows, rows, dedup.removed, dedup

    def step(self, inp: _Input, state: PipelineState, phases: Phases) -> tuple[BatchSummary, PipelineState]:
        """One batch's tables and state, step by step (each step's wall time is a phase)."""
        counts = self._count_per_host(inp)
        phases.lap("parse_dedup_count")
        advance = self._advance_watermark(counts, state, inp.batch_id)
        phases.lap("host_progress")
        good = inp.rows.where(is_event_col())
        closing = self._close_windows(good, counts, state, advance.watermark)
        phases.lap("aggregate_windows")
        self._write_outputs(inp, good, counts, closing, state.watermark, phases)
        stall = self._track_stalls(state, advance, counts.batch_ts_ms, inp.batch_id)
        return self._commit(inp, counts, advance, closing, stall, state, phases)

    def _count_per_host(self, inp: _Input) -> _Counts:
        """Step 1: per host, the batch's counts and progress.

        Events and heartbeats move a host; quarantined lines (clock skew included) never do, and
        group under a NULL host whatever host they name. The count columns of every row come to
        the driver as Arrow (~32 bytes a row) and are grouped there: deduplication's hash pass
        collects them in its own Spark job (``inp.scanned``: the batch before deduplication,
        corrected by the removed copies; a removed copy never moves its host, the row it copies
        has the same time), else one job collects them here. Grouping on the driver costs what
        the batch's rows cost; Spark's shuffle and hash aggregation over ~400k host names a
        batch at a million hosts cost four times as much (docs/benchmarks.md)."""
        scanned = inp.scanned
        if scanned is None:
            scanned = inp.counted.select(*_count_columns()).toArrow()
        per_host = _per_host(scanned, inp.removed)
        return _Counts(
            per_host=per_host,
            events=_total(per_host["events"]),
            heartbeats=_total(per_host["heartbeats"]),
            quarantined=_total(per_host["quarantined"]),
            upstream_lw=pc.max(per_host["upstream_lw"]).as_py(),
            batch_ts_ms=inp.batch_ts_ms if per_host.num_rows else None,
        )

    def _advance_watermark(self, counts: _Counts, state: PipelineState, batch_id: int) -> _Advance:
        """Step 2: host progress -> precise watermark (never backwards) -> status."""
        wm = self.config.watermark
        moved = counts.per_host.filter(pc.is_valid(counts.per_host["progress_ms"]))
        hosts = state.progress.advance(moved["host"], moved["progress_ms"].to_numpy(), batch_id)
        expected = self.hosts.current()
        names, values, silent = hosts.progress.population(expected)
        n_total = len(hosts.progress) if expected is None else len(expected)
        # Propagated (delta source): the upstream's global low watermark is this pipeline's input.
        update = update_watermark(
            values,
            wm.precision_fraction,
            state.watermark,
            n_total,
            propagated=self.config.source.kind == "delta",
            upstream_watermark=counts.upstream_lw,
        )
        advanced_at = counts.batch_ts_ms if update.advanced else state.advanced_at_ms
        status = evaluate_status(
            names,
            values,
            wm.precision_fraction,
            update.watermark,
            advanced_at,
            counts.batch_ts_ms if counts.batch_ts_ms is not None else now_ms(),
            wm.lag_threshold,
            wm.stall_after,
            silent=silent,
        )
        return _Advance(hosts, update, status, n_total, advanced_at)

    def _close_windows(
        self, good: DataFrame, counts: _Counts, state: PipelineState, watermark: int | None
    ) -> _Closing:
        """Step 3: add the batch's on-time partial sums to the open windows; those the watermark
        has passed close. The batch's sums cover every window and the late ones (closed before
        the batch, by the previous watermark) are taken out here, on the driver: the Spark
        stage holds no per-batch value (see tidemark.stream.build_stream)."""
        batch_partials, late_partials, late = _empty_open(), _empty_open(), 0
        if counts.events:
            partials = T.to_pandas(aggregate_windows(good, self.config.window)).astype(
                {"window_start_ms": "int64", "events": "int64"}
            )
            is_late = self.windows.is_closed(partials["window_start_ms"], state.watermark)
            late = int(partials.loc[is_late, "events"].sum())
            late_partials = partials[is_late].reset_index(drop=True)
            batch_partials = partials[~is_late].reset_index(drop=True)
        open_windows = _sum_partials(state.open_windows, batch_partials)
        closes = self.windows.is_closed(open_windows["window_start_ms"], watermark)
        remaining = open_windows[~closes]
        folded = fold(
            state.revisable, late_partials, open_windows[closes], self.windows, state.watermark, watermark
        )
        # The watermark server: source -> window operator (held by its oldest open window) ->
        # sink. Every row committed in the batch carries the resulting global low watermark.
        server = WatermarkServer.from_json(PIPELINE_STAGES, state.stages)
        oldest_open = int(remaining["window_start_ms"].min()) if len(remaining) else None
        server.update(watermark, {"window": oldest_open})
        return _Closing(late, open_windows[closes], remaining, server, folded)

    def _write_outputs(
        self,
        inp: _Input,
        good: DataFrame,
        counts: _Counts,
        closing: _Closing,
        previous: int | None,
        phases: Phases,
    ) -> None:
        """Step 4: quarantine, events (and late events), the windows that closed."""
        from pyspark.sql import functions as F

        if counts.quarantined:
            quarantine = inp.counted.where(F.col("reason").isNotNull()).select(
                "raw", "reason", "source", F.lit(inp.batch_id).alias("batch_id"), "ingest_ts"
            )
            self._write_rows(quarantine, counts.quarantined, S.QUARANTINE, inp.batch_id)
            phases.lap("write_quarantine")
        if counts.events:
            self._write_events(good, counts.events, inp.batch_id, previous, closing.late, closing.global_lw)
            phases.lap("write_events")
        if closing.folded.changed:
            table = _closed_windows_table(
                closing.folded.rows, self.config.window, inp.batch_id, closing.global_lw
            )
            # merge_schema: a windows table written before revisions existed gains their columns
            self.writer.write_local(table, S.WINDOWS, inp.batch_id, merge_schema=True)
            phases.lap("write_windows")
        if inp.out_of_order is not None and len(inp.out_of_order):
            rows = inp.out_of_order.assign(batch_id=inp.batch_id, ingest_ts=inp.batch_ts_ms)
            table = pa.Table.from_pandas(rows, schema=S.OUT_OF_ORDER_SCHEMA, preserve_index=False)
            self.writer.write_local(table, S.OUT_OF_ORDER, inp.batch_id)
            phases.lap("write_out_of_order")

    def _track_stalls(
        self, state: PipelineState, advance: _Advance, batch_ts: int | None, batch_id: int
    ) -> tuple[int | None, tuple[str, ...]]:
        """Step 5: a stall opens when the watermark is STALLED and is written to ``stalls`` when
        it moves again. Returns the open stall (since, lagging hosts) the next batch inherits."""
        since, hosts = state.stall_since_ms, state.stall_hosts
        if since is not None and advance.update.advanced:
            self._write_stall(batch_id, since, batch_ts, state.watermark, hosts)
            since, hosts = None, ()
        if since is None and advance.status.state == STALLED:
            since, hosts = state.advanced_at_ms, tuple(h.host for h in advance.status.lagging)
        return since, hosts

    def _commit(
        self,
        inp: _Input,
        counts: _Counts,
        advance: _Advance,
        closing: _Closing,
        stall: tuple[int | None, tuple[str, ...]],
        state: PipelineState,
        phases: Phases,
    ) -> tuple[BatchSummary, PipelineState]:
        """Step 6: the state for the next batch, then the watermark row that marks the batch
        committed (last: it records the state's Delta versions)."""
        remaining = closing.remaining[S.OPEN_COLUMNS].reset_index(drop=True)
        progress = self._write_progress(advance.hosts, inp.batch_id)
        open_table = pa.Table.from_pandas(remaining, schema=S.OPEN_SCHEMA, preserve_index=False)
        open_version = self.writer.write_local(open_table, S.OPEN_WINDOWS, inp.batch_id, mode="overwrite")
        revisable, revisable_version = self._write_revisable(closing.folded, state, inp.batch_id)
        phases.lap("write_state")
        summary = _summary(inp, counts, advance, closing, state.watermark)
        stages = closing.server.to_json()
        self._write_marker(
            summary,
            {
                "batch_ts_ms": counts.batch_ts_ms,
                "advanced_at_ms": advance.advanced_at_ms,
                "frontier_ms": advance.status.frontier_ms,
                "stall_since_ms": stall[0],
                "stall_hosts": json.dumps(list(stall[1])),
                "hosts_version": progress.version,
                "open_version": open_version,
                "revisable_version": revisable_version,
                "late_folded": summary.late_folded,
                "revisions": summary.revisions,
                "global_lw_ms": closing.global_lw,
                "stages": stages,
                "source_progress": inp.source_progress,
            },
        )
        phases.lap("write_marker")
        new_state = PipelineState(
            batch_id=inp.batch_id,
            watermark=advance.watermark,
            advanced_at_ms=advance.advanced_at_ms,
            stall_since_ms=stall[0],
            stall_hosts=stall[1],
            stages=stages,
            progress=progress,
            open_windows=remaining,
            revisable=revisable,
            revisable_version=revisable_version,
        )
        return summary, new_state

    # -- writes ------------------------------------------------------------------------------
    def _write_progress(self, hosts: Advanced, batch_id: int) -> HostProgress:
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

    def _write_revisable(
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

    def _write_rows(
        self, frame: DataFrame, count: int, table: str, batch_id: int, merge_schema: bool = False
    ) -> None:
        """Write ``count`` rows: few are collected and written by delta-rs (no Spark job per
        commit), many by Spark. Both commit under the same (run, batch) app transaction, so
        either way a replay writes them once, and both write the column types Spark would."""
        if count > COLLECT_MAX_ROWS:
            options = {"mergeSchema": "true"} if merge_schema else None
            self.writer.write(frame, table, batch_id, options=options)
            return
        self.writer.write_local(_collect(frame), table, batch_id, merge_schema=merge_schema)

    def _write_events(
        self,
        good: DataFrame,
        n_events: int,
        batch_id: int,
        prev_wm: int | None,
        late_count: int,
        low_watermark: int | None,
    ) -> None:
        """Write the batch's ``n_events`` events, and the late ones (``late_count`` of them) again
        to ``late_events``. A small batch is collected once and both tables are cut from it."""
        from pyspark.sql import functions as F

        size = self.config.window
        start_ms = window_start_col("event_time", size)
        window_start = F.timestamp_millis(start_ms)
        rows = good.select(
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
        has_late = prev_wm is not None and late_count > 0
        if n_events <= COLLECT_MAX_ROWS:
            local = _collect(rows)
            # merge_schema: an events table from before ``arrival_ms`` gains it
            self.writer.write_local(local.select(S.EVENT_COLUMNS), S.EVENTS, batch_id, merge_schema=True)
            if has_late:
                late = local.filter(local["is_late"]).select(S.LATE_COLUMNS)
                # merge_schema: a late_events table from before revisions gains ``folded``
                self.writer.write_local(late, S.LATE_EVENTS, batch_id, merge_schema=True)
            return
        self.writer.write(rows.select(*S.EVENT_COLUMNS), S.EVENTS, batch_id, options={"mergeSchema": "true"})
        if has_late:
            late_rows = rows.where("is_late").select(*S.LATE_COLUMNS)
            self._write_rows(late_rows, late_count, S.LATE_EVENTS, batch_id, merge_schema=True)

    def _write_stall(
        self, batch_id: int, since: int, until: int | None, watermark: int | None, hosts: tuple[str, ...]
    ) -> None:
        row: dict[str, Any] = {
            "started_at": since,
            "ended_at": until,
            "duration_ms": None if until is None else until - since,
            "watermark": watermark,
            "hosts_count": len(hosts),
            "hosts": list(hosts),
            "closed_batch_id": batch_id,
        }
        self.writer.write_local(pa.Table.from_pylist([row], schema=S.STALL_SCHEMA), S.STALLS, batch_id)
        self.echo(
            f"[{self.config.pipeline}] stall ended: watermark held at {format_instant_ms(watermark)} "
            f"for {humanize_ms(row['duration_ms'] or 0)} by {len(hosts)} lagging hosts"
        )

    def _write_marker(self, s: BatchSummary, extra: dict) -> None:
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
            **extra,
        }
        table = pa.Table.from_pylist([row], schema=S.MARKER_SCHEMA)
        self.writer.write_local(table, S.WATERMARKS, s.batch_id, merge_schema=True)

    def _report(self, summary: BatchSummary) -> None:
        self.summaries.append(summary)
        self.batches_run += 1
        self.echo(f"[{self.config.pipeline}] {summary.line()}")


def _summary(
    inp: _Input, counts: _Counts, advance: _Advance, closing: _Closing, previous: int | None
) -> BatchSummary:
    return BatchSummary(
        batch_id=inp.batch_id,
        events=counts.events,
        heartbeats=counts.heartbeats,
        late=closing.late,
        late_folded=closing.folded.folded_events,
        revisions=closing.folded.revisions,
        quarantined=counts.quarantined,
        watermark=advance.watermark,
        previous=previous,
        hosts_total=advance.hosts_total,
        hosts_reporting=advance.status.hosts_reporting,
        hosts_required=advance.update.required,
        hosts_behind=advance.update.behind,
        hosts_lagging=advance.status.hosts_lagging,
        state=advance.status.state,
        windows_closed=len(closing.closing),
        open_windows=len(closing.remaining),
    )


def _count_columns() -> list:
    """Per row, what the count step sums per host: ``host`` and ``progress_ms`` (NULL for a
    quarantined line), the three kinds as 0/1 flags, and the upstream low watermark."""
    from pyspark.sql import functions as F

    ok = F.col("reason").isNull()
    return [
        F.when(ok, F.col("host")).alias("host"),
        F.when(ok, F.col("event_time")).alias("progress_ms"),
        is_event_col().alias("events"),
        (ok & F.coalesce(F.col("heartbeat"), F.lit(False))).alias("heartbeats"),
        (~ok).alias("quarantined"),
        F.col("upstream_lw"),
    ]


_COUNTED = ("events", "heartbeats", "quarantined")


def _per_host(rows: pa.Table, removed: pd.DataFrame) -> pa.Table:
    """One row per host of the batch's count columns (:func:`_count_columns`): the latest
    progress, the counts, the upstream low watermark; each removed copy (``removed``: host,
    event_time) takes one event off its host."""
    table = rows.select(["host", "progress_ms", *_COUNTED, "upstream_lw"])
    for name in _COUNTED:  # the 0/1 flags, summed as counts
        table = table.set_column(table.schema.get_field_index(name), name, pc.cast(table[name], pa.int64()))
    if len(removed):
        n = len(removed)
        zeros = pa.array(np.zeros(n, np.int64))
        less = pa.table(
            {
                "host": pa.array(removed["host"].to_numpy(dtype=object), pa.string()),
                "progress_ms": pa.nulls(n, pa.int64()),
                "events": pa.array(np.full(n, -1, np.int64)),
                "heartbeats": zeros,
                "quarantined": zeros,
                "upstream_lw": pa.nulls(n, pa.int64()),
            }
        )
        table = pa.concat_tables([table, less.cast(table.schema)])
    grouped = table.group_by("host").aggregate(
        [("progress_ms", "max"), *((name, "sum") for name in _COUNTED), ("upstream_lw", "max")]
    )
    return grouped.rename_columns(
        {
            "progress_ms_max": "progress_ms",
            "upstream_lw_max": "upstream_lw",
            **{f"{n}_sum": n for n in _COUNTED},
        }
    ).select(["host", "progress_ms", *_COUNTED, "upstream_lw"])


def _total(column) -> int:
    return int(pc.sum(column).as_py() or 0)


def _optional_int(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _collect(frame: DataFrame) -> pa.Table:
    """A small frame on the driver, its columns nullable as Spark's table schemas are."""
    rows = frame.toArrow()
    return rows.cast(pa.schema([f.with_nullable(True) for f in rows.schema]))


def _closed_windows_table(rows: pd.DataFrame, size: int, batch_id: int, watermark: int | None) -> pa.Table:
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


def _sum_partials(current: pd.DataFrame, batch: pd.DataFrame) -> pd.DataFrame:
    if batch.empty:
        return current.reset_index(drop=True)
    if current.empty:
        return batch[S.OPEN_COLUMNS].reset_index(drop=True)
    both = pd.concat([current[S.OPEN_COLUMNS], batch[S.OPEN_COLUMNS]], ignore_index=True)
    return both.groupby(["window_start_ms", "key"], as_index=False, sort=True).agg(
        events=("events", "sum"), value_sum=("value_sum", "sum")
    )
