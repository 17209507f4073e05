"""The exactly-once streaming job.

Plan (per micro-batch, Spark Structured Streaming with ``foreachBatch``)::

    source lines ─ parse/validate ─ dedup by event_id ─┬─ quarantine   (bad lines)
       (files | kafka)   (records.py)   (dedup.py: the    ├─ events       (all unique valid records)
                                         events table as  ├─ late_events  (window already closed)
                                         the catalog)     ├─ windows      (closed by the watermark)
                                                          ├─ _state/*     (host progress, open sums)
                                                          └─ watermarks   (commit marker, last)

Why it is exactly-once:

* The source is replayable and Spark writes a batch's offsets (and its batch timestamp) to the
  checkpoint before running it, so a batch re-run after a crash sees the same lines.
* Deduplication looks retries up in the events earlier batches stored (``batch_id`` below the
  batch's own), against the host progress the previous batch committed, so a re-run drops the
  same records again (:mod:`tidemark.dedup`).
* Everything else the batch computes is a function of (its lines, the state batch N-1 left):
  that state is read from the Delta versions recorded in batch N-1's watermark row, never from
  tables a crashed attempt of N may already have changed.
* Every Delta write of batch N carries (run identity, N) as ``txnAppId``/``txnVersion``; a
  write Delta has already committed is skipped. The watermark row is written last; when it
  exists for N the whole batch is skipped.

Deduplication catches a retry of any event stored within ``dedup_horizon`` of *processing* time
(the events' ``ingest_ts``), however old its event time. The plan keeps no Spark state.

Each commit marker also records the source range its batch covered (``source_progress``), so a
run started with ``--reset-checkpoint`` (:mod:`tidemark.reset`) resumes exactly there.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa

from tidemark import liveness
from tidemark import reset as R
from tidemark import tables as T
from tidemark.aggregate import aggregate_windows, window_start_col
from tidemark.config import ConfigError, PipelineConfig
from tidemark.dedup import HASH, NO_REMOVED, deduplicate
from tidemark.records import (
    EVENT_FIELDS,
    drop_blank_lines,
    parse_records,
    read_landing_files,
    read_upstream_events,
)
from tidemark.records import PARSED_COLUMNS as PARSED
from tidemark.timeutil import format_instant_ms, humanize_ms, now_ms
from tidemark.watermark import (
    PIPELINE_STAGES,
    STALLED,
    WatermarkServer,
    evaluate_status,
    read_hosts_file,
    update_watermark,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

HOST_COLUMNS = ["host", "progress_ms", "last_batch"]
OPEN_COLUMNS = ["window_start_ms", "key", "events", "value_sum"]


def _empty_progress() -> pd.DataFrame:
    return pd.DataFrame(
        {"progress_ms": pd.Series(dtype="int64"), "last_batch": pd.Series(dtype="int64")},
        index=pd.Index([], name="host", dtype="object"),
    )


def _empty_open() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "window_start_ms": pd.Series(dtype="int64"),
            "key": pd.Series(dtype="object"),
            "events": pd.Series(dtype="int64"),
            "value_sum": pd.Series(dtype="float64"),
        }
    )


@dataclass
class PipelineState:
    """What batch ``batch_id`` left behind; the input of batch ``batch_id + 1``."""

    batch_id: int = -1
    watermark: int | None = None
    advanced_at_ms: int | None = None  # processing time of the batch that last moved it
    stall_since_ms: int | None = None  # an open stall: when the watermark stopped moving
    stall_hosts: tuple[str, ...] = ()
    stages: str | None = None  # WatermarkServer state (JSON)
    progress: pd.DataFrame = field(default_factory=_empty_progress)
    open_windows: pd.DataFrame = field(default_factory=_empty_open)


@dataclass(frozen=True)
class BatchSummary:
    batch_id: int
    events: int = 0
    heartbeats: int = 0
    late: int = 0
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
            f"batch {self.batch_id}: {self.events:,} events, {self.late:,} late, "
            f"{self.quarantined:,} quarantined, {self.retries_dropped:,} retries dropped "
            f"| watermark {format_instant_ms(self.watermark)}"
            f"{moved} {self.state} | hosts {self.hosts_reporting:,}/{self.hosts_total:,} reporting, "
            f"{self.hosts_lagging:,} lagging | {self.windows_closed:,} window rows closed, "
            f"{self.open_windows:,} open | {self.seconds:.1f}s"
        )


# --------------------------------------------------------------------------------------------
# Plan
# --------------------------------------------------------------------------------------------


def source_lines(
    spark: SparkSession, config: PipelineConfig, streaming: bool, resume: R.ResumePoint | None = None
) -> DataFrame:
    """A line-oriented source as ``(raw, source, arrival_ms)`` lines.

    After a checkpoint reset (``resume``) Kafka starts at the offsets the committed batches
    ended at, and lines of files committed batches already read are dropped (a new checkpoint's
    file source lists every file again)."""
    from pyspark.sql import functions as F

    src = config.source
    if src.kind == "files":
        assert src.path is not None
        lines = read_landing_files(spark, src.path, streaming, src.max_files_per_trigger)
        if resume is not None and resume.files_done:
            done = spark.createDataFrame([(f,) for f in sorted(resume.files_done)], "source string")
            lines = lines.join(F.broadcast(done), "source", "left_anti")
        return lines
    if src.kind == "kafka":
        from tidemark.kafka import read_topic

        assert src.bootstrap_servers is not None and src.topic is not None
        starting = src.starting_offsets
        if resume is not None and resume.kafka_offsets is not None:
            starting = resume.kafka_starting_offsets(src.bootstrap_servers, src.topic)
        return read_topic(
            spark,
            src.bootstrap_servers,
            src.topic,
            streaming,
            starting,
            src.max_offsets_per_trigger,
        )
    raise ConfigError(f"source.kind {src.kind} has no line reader")


def parsed_source(
    spark: SparkSession, config: PipelineConfig, streaming: bool, resume: R.ResumePoint | None = None
) -> DataFrame:
    """The source as validated rows (:data:`tidemark.records.PARSED_COLUMNS`), stream or batch.

    The stream and the batch recompute both start here, so they see the same rows."""
    src = config.source
    if src.kind == "delta":
        assert src.path is not None
        return read_upstream_events(
            spark, src.path, streaming, src.watermark_column, src.max_files_per_trigger
        )
    lines = source_lines(spark, config, streaming, resume)
    return parse_records(drop_blank_lines(lines), config.validation)


def is_event_col():
    """A valid record that is not a heartbeat: the only rows that can be publisher retries."""
    from pyspark.sql import functions as F

    return F.col("reason").isNull() & ~F.coalesce(F.col("heartbeat"), F.lit(False))


def build_stream(
    spark: SparkSession, config: PipelineConfig, resume: R.ResumePoint | None = None
) -> DataFrame:
    """The stream's plan: the source's validated rows, in either mode. The plan keeps no Spark
    state: exactly_once removes publisher retries inside the batch (:mod:`tidemark.dedup`).

    Nothing that changes from batch to batch (a literal: the batch timestamp, a random seed)
    goes into the stage that parses: Spark generates its code with literals inlined, so one
    would make every micro-batch compile that ~2,400-line class again with Janino and run it
    cold until HotSpot compiles it, ~0.25 s per 500k lines. ``ingest_ts`` joins the rows after
    the batch cache (:meth:`BatchProcessor.__call__`)."""
    from pyspark.sql import functions as F

    # The raw line is kept for the quarantine only: good rows do not cache it.
    bad_raw = F.when(F.col("reason").isNotNull(), F.col("raw")).alias("raw")
    parsed = parsed_source(spark, config, streaming=True, resume=resume).select(
        *(bad_raw if c == "raw" else c for c in PARSED)
    )
    if config.mode == "at_least_once":
        return parsed
    # exactly_once: the 64-bit hash of an event's id, computed once per row in the parsing stage
    # and cached with it, is what deduplication groups and joins by (NULL: no event).
    return parsed.select("*", F.when(is_event_col(), F.xxhash64("event_id")).alias(HASH))


# --------------------------------------------------------------------------------------------
# Per-batch commit protocol
# --------------------------------------------------------------------------------------------


class _Phases:
    """Wall time per phase of a batch (seconds), for progress output and benchmarks."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self._mark = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.times[name] = self.times.get(name, 0.0) + now - self._mark
        self._mark = now


class BatchProcessor:
    """The ``foreachBatch`` function. Holds the state of the last committed batch in memory and
    reloads it from Delta only when it is not the one the incoming batch builds on."""

    def __init__(
        self,
        spark: SparkSession,
        config: PipelineConfig,
        identity: T.RunIdentity,
        echo=print,
    ) -> None:
        self.spark = spark
        self.config = config
        self.identity = identity
        self.writer = T.TableWriter(config, identity)
        self.echo = echo
        self.hosts = ExpectedHosts(config.watermark.hosts_file)
        self._state: PipelineState | None = None
        self.summaries: list[BatchSummary] = []

    # -- state -------------------------------------------------------------------------------
    def _marker_before(self, batch_id: int) -> tuple[dict | None, bool]:
        """(newest watermark row with batch_id <= the given one, is it that very batch?)."""
        row = T.latest_marker(self.writer.path(T.WATERMARKS), max_batch=batch_id)
        return row, row is not None and int(row["batch_id"]) == batch_id

    def _load_state(self, marker: dict | None) -> PipelineState:
        if marker is None:
            return PipelineState()
        progress = (
            T.read_local(self.writer.path(T.HOST_PROGRESS), int(marker["hosts_version"]))
            .astype({"progress_ms": "int64", "last_batch": "int64"})
            .set_index("host")
        )
        open_windows = T.read_local(self.writer.path(T.OPEN_WINDOWS), int(marker["open_version"])).astype(
            {"window_start_ms": "int64", "events": "int64", "value_sum": "float64"}
        )
        return PipelineState(
            batch_id=int(marker["batch_id"]),
            watermark=_optional_int(marker["watermark_ms"]),
            advanced_at_ms=_optional_int(marker["advanced_at_ms"]),
            stall_since_ms=_optional_int(marker["stall_since_ms"]),
            stall_hosts=tuple(json.loads(marker["stall_hosts"] or "[]")),
            stages=marker["stages"],
            progress=progress[["progress_ms", "last_batch"]],
            open_windows=open_windows[OPEN_COLUMNS],
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
        phases = _Phases()
        # Table batch ids continue across checkpoint resets (the run's batch_offset).
        batch_id = self.identity.batch_offset + spark_batch_id
        source = (
            R.batch_source(self.config, spark_batch_id)
            if self.config.source.kind in R.RESETTABLE_SOURCES
            else None
        )
        state, committed = self.state_before(batch_id)
        phases.lap("load_state")
        if committed:
            # Every table already holds this batch (the plan keeps no Spark state to commit).
            self._state = None  # reload from Delta for the next batch
            self._report(BatchSummary(batch_id, skipped=True))
            return
        from pyspark.sql import functions as F

        cached = [batch.persist()]
        # The batch timestamp joins after the cache (see build_stream): Spark's, from the offset
        # log, the value current_timestamp() has, so a replay sees the same.
        batch_ts = (
            source.batch_ts_ms if source is not None else R.batch_timestamp_ms(self.config, spark_batch_id)
        )
        rows = cached[0].select("*", F.timestamp_millis(F.lit(batch_ts)).alias("ingest_ts"))
        counted, removed, dedup = rows, NO_REMOVED, None
        if self.config.mode == "exactly_once":
            dedup = deduplicate(
                self.spark,
                rows,
                batch_id=batch_id,
                progress=state.progress,
                batch_ts_ms=batch_ts,
                horizon_ms=self.config.dedup_horizon,
                events_path=self.writer.path(T.EVENTS),
                lap=phases.lap,
            )
            if dedup.removed is None:  # resolved by Spark: count the deduplicated rows
                counted = dedup.rows
            else:  # resolved on the driver: count the cache as it is, less the removed copies
                removed = dedup.removed
            rows = dedup.rows
            cached.extend(dedup.cached)
        try:
            summary, new_state = self._process(
                rows,
                batch_id,
                state,
                phases,
                source.progress if source else None,
                counted=counted,
                removed=removed,
                batch_ts_ms=batch_ts,
            )
        finally:
            for frame in cached:
                frame.unpersist()
        summary = dataclasses.replace(
            summary,
            seconds=time.monotonic() - started,
            phases=phases.times,
            retries_dropped=dedup.dropped if dedup else 0,
            retries_looked_up=dedup.looked_up if dedup else 0,
        )
        self._state = new_state
        self._report(summary)

    def _process(
        self,
        batch: DataFrame,
        batch_id: int,
        state: PipelineState,
        phases: _Phases,
        source_progress: str | None = None,
        counted: DataFrame | None = None,
        removed: pd.DataFrame = NO_REMOVED,
        batch_ts_ms: int | None = None,
    ) -> tuple[BatchSummary, PipelineState]:
        """One batch's tables and state.

        The per-host counts and the quarantined lines are read from ``counted`` (default
        ``batch``): the batch before deduplication when deduplication resolved its retries on
        the driver, so those reads skip its joins; ``removed`` holds the (host, event_time) of
        the events it took out, which the counts are corrected by. A removed copy never moves
        its host's progress (the row it copies has the same time)."""
        from pyspark.sql import functions as F

        cfg, size, prev_wm = self.config, self.config.window, state.watermark
        ok = F.col("reason").isNull()
        is_event = ok & ~F.col("heartbeat")
        # A record is late when its window had closed before the batch (the previous watermark).
        window_start = window_start_col("event_time", size)
        late_flag = (window_start + F.lit(size) <= F.lit(prev_wm)) if prev_wm is not None else F.lit(False)

        # 1. One pass, per host: the batch's counts and its hosts' progress. Events and heartbeats
        #    move a host; quarantined lines (clock skew included) never do, and group under a NULL
        #    host whatever host they name. One Spark job instead of two (a global count, then a
        #    group-by) on each batch.
        counted = batch if counted is None else counted
        per_host = (
            counted.groupBy(F.when(ok, F.col("host")).alias("host"))
            .agg(
                F.max(F.when(ok, F.col("event_time"))).alias("progress_ms"),
                F.count_if(is_event).alias("events"),
                F.count_if(ok & F.col("heartbeat")).alias("heartbeats"),
                F.count_if(~ok).alias("quarantined"),
                F.max("upstream_lw").alias("upstream_lw"),
            )
            .toPandas()
        )
        if len(removed):
            per_host = _without_removed(per_host, removed)
        n_events, n_hb, n_bad = (int(per_host[c].sum()) for c in ("events", "heartbeats", "quarantined"))
        upstream_lw = _optional_int(per_host["upstream_lw"].dropna().max())
        batch_ts = batch_ts_ms if len(per_host) else None
        phases.lap("parse_dedup_count")

        # 2. Host progress -> precise watermark -> status.
        moved = per_host[per_host["progress_ms"].notna()]
        batch_hosts = pd.DataFrame(
            {"progress_ms": moved["progress_ms"].astype("int64").to_numpy()},
            index=pd.Index(moved["host"].to_numpy(), name="host"),
        )
        progress = _merge_progress(state.progress, batch_hosts, batch_id)
        expected = self.hosts.current()
        population = progress if expected is None else progress[progress.index.isin(expected)]
        n_total = len(progress) if expected is None else len(expected)
        values = population["progress_ms"].to_numpy(dtype=np.int64)
        # Propagated (delta source): the upstream's global low watermark is this pipeline's input.
        update = update_watermark(
            values,
            cfg.watermark.precision_fraction,
            prev_wm,
            n_total,
            propagated=cfg.source.kind == "delta",
            upstream_watermark=upstream_lw,
        )
        watermark, advanced = update.watermark, update.advanced
        advanced_at = batch_ts if advanced else state.advanced_at_ms
        status = evaluate_status(
            population.index.to_numpy(),
            values,
            cfg.watermark.precision_fraction,
            watermark,
            advanced_at,
            batch_ts if batch_ts is not None else now_ms(),
            cfg.watermark.lag_threshold,
            cfg.watermark.stall_after,
            expected=expected,
        )
        phases.lap("host_progress")

        # 3. On-time partial sums; windows the watermark has passed close now, each written once.
        # The batch's sums cover every window, and the late ones (closed before the batch) are
        # taken out here, on the driver: the stage holds no per-batch value (see build_stream).
        good = batch.where(is_event)
        batch_partials, late_count = _empty_open(), 0
        if n_events:
            partials = (
                aggregate_windows(good, size)
                .toPandas()
                .astype({"window_start_ms": "int64", "events": "int64"})
            )
            late = (
                partials["window_start_ms"] + size <= prev_wm
                if prev_wm is not None
                else pd.Series(False, index=partials.index)
            )
            late_count = int(partials.loc[late, "events"].sum())
            batch_partials = partials[~late].reset_index(drop=True)
        open_windows = _sum_partials(state.open_windows, batch_partials)
        closing_mask = (
            open_windows["window_start_ms"] + size <= watermark
            if watermark is not None
            else pd.Series(False, index=open_windows.index)
        )
        closing, remaining = open_windows[closing_mask], open_windows[~closing_mask]
        phases.lap("aggregate_windows")

        # 4. The watermark server: source -> window operator (held by its oldest open window)
        #    -> sink. Every row committed below carries the resulting global low watermark.
        server = WatermarkServer.from_json(PIPELINE_STAGES, state.stages)
        oldest_open = int(remaining["window_start_ms"].min()) if len(remaining) else None
        server.update(watermark, {"window": oldest_open})
        global_lw = server.global_low_watermark

        if n_bad:
            quarantine = counted.where(~ok).select(
                "raw", "reason", "source", F.lit(batch_id).alias("batch_id"), "ingest_ts"
            )
            self._write_rows(quarantine, n_bad, T.QUARANTINE, batch_id)
            phases.lap("write_quarantine")
        if n_events:
            self._write_events(good, n_events, late_flag, batch_id, prev_wm, late_count, global_lw)
            phases.lap("write_events")
        if len(closing):
            self.writer.write_local(
                _closed_windows_table(closing, size, batch_id, global_lw), T.WINDOWS, batch_id
            )
            phases.lap("write_windows")

        # 5. Stalls open when the watermark is STALLED and close when it moves again.
        stall_since, stall_hosts = state.stall_since_ms, state.stall_hosts
        if stall_since is not None and advanced:
            self._write_stall(batch_id, stall_since, batch_ts, prev_wm, stall_hosts)
            stall_since, stall_hosts = None, ()
        if stall_since is None and status.state == STALLED:
            stall_since = state.advanced_at_ms
            stall_hosts = tuple(h.host for h in status.lagging)

        # 6. State for the next batch, then the watermark row that marks the batch committed.
        hosts_version = self.writer.write_local(
            pa.Table.from_pandas(
                progress.reset_index()[HOST_COLUMNS], schema=HOST_SCHEMA, preserve_index=False
            ),
            T.HOST_PROGRESS,
            batch_id,
            mode="overwrite",
        )
        open_version = self.writer.write_local(
            pa.Table.from_pandas(remaining[OPEN_COLUMNS], schema=OPEN_SCHEMA, preserve_index=False),
            T.OPEN_WINDOWS,
            batch_id,
            mode="overwrite",
        )
        phases.lap("write_state")
        summary = BatchSummary(
            batch_id=batch_id,
            events=n_events,
            heartbeats=n_hb,
            late=late_count,
            quarantined=n_bad,
            watermark=watermark,
            previous=prev_wm,
            hosts_total=n_total,
            hosts_reporting=status.hosts_reporting,
            hosts_required=update.required,
            hosts_behind=update.behind,
            hosts_lagging=status.hosts_lagging,
            state=status.state,
            windows_closed=len(closing),
            open_windows=len(remaining),
        )
        self._write_marker(
            summary,
            {
                "batch_ts_ms": batch_ts,
                "advanced_at_ms": advanced_at,
                "frontier_ms": status.frontier_ms,
                "stall_since_ms": stall_since,
                "stall_hosts": json.dumps(list(stall_hosts)),
                "hosts_version": hosts_version,
                "open_version": open_version,
                "global_lw_ms": global_lw,
                "stages": server.to_json(),
                "source_progress": source_progress,
            },
        )
        phases.lap("write_marker")
        new_state = PipelineState(
            batch_id=batch_id,
            watermark=watermark,
            advanced_at_ms=advanced_at,
            stall_since_ms=stall_since,
            stall_hosts=stall_hosts,
            stages=server.to_json(),
            progress=progress,
            open_windows=remaining[OPEN_COLUMNS].reset_index(drop=True),
        )
        return summary, new_state

    def _write_rows(self, frame: DataFrame, count: int, table: str, batch_id: int) -> None:
        """Write ``count`` rows: few are collected and written by delta-rs (no Spark job per
        commit), many by Spark. Both commit under the same (run, batch) app transaction, so
        either way a replay writes them once, and both write the column types Spark would."""
        if count > COLLECT_MAX_ROWS:
            self.writer.write(frame, table, batch_id)
            return
        self.writer.write_local(_collect(frame), table, batch_id)

    def _write_events(
        self,
        good: DataFrame,
        n_events: int,
        late_flag,
        batch_id: int,
        prev_wm: int | None,
        late_count: int,
        low_watermark: int | None,
    ) -> None:
        """Write the batch's ``n_events`` events, and the late ones (``late_count`` of them) again
        to ``late_events``. A small batch is collected once and both tables are cut from it."""
        from pyspark.sql import functions as F

        size = self.config.window
        window_start = F.timestamp_millis(window_start_col("event_time", size))
        rows = good.select(
            *EVENT_FIELDS,
            window_start.alias("window_start"),
            late_flag.alias("is_late"),
            F.lit(batch_id).alias("batch_id"),
            "ingest_ts",
            "source",
            F.timestamp_millis(F.lit(low_watermark).cast("long")).alias("low_watermark"),
            (window_start + F.expr(f"INTERVAL {size} MILLISECONDS")).alias("window_end"),
            F.timestamp_millis(F.lit(prev_wm).cast("long")).alias("watermark_at_arrival"),
        )
        has_late = prev_wm is not None and late_count > 0
        if n_events <= COLLECT_MAX_ROWS:
            local = _collect(rows)
            self.writer.write_local(local.select(T.EVENT_COLUMNS), T.EVENTS, batch_id)
            if has_late:
                late = local.filter(local["is_late"]).select(T.LATE_COLUMNS)
                self.writer.write_local(late, T.LATE_EVENTS, batch_id)
            return
        self.writer.write(rows.select(*T.EVENT_COLUMNS), T.EVENTS, batch_id)
        if has_late:
            late_rows = rows.where("is_late").select(*T.LATE_COLUMNS)
            self._write_rows(late_rows, late_count, T.LATE_EVENTS, batch_id)

    def _write_stall(
        self, batch_id: int, since: int, until: int | None, watermark: int | None, hosts: tuple[str, ...]
    ) -> None:
        row = {
            "started_at": since,
            "ended_at": until,
            "duration_ms": None if until is None else until - since,
            "watermark": watermark,
            "hosts_count": len(hosts),
            "hosts": list(hosts),
            "closed_batch_id": batch_id,
        }
        self.writer.write_local(pa.Table.from_pylist([row], schema=STALL_SCHEMA), T.STALLS, batch_id)
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
        table = pa.Table.from_pylist([row], schema=MARKER_SCHEMA)
        self.writer.write_local(table, T.WATERMARKS, s.batch_id, merge_schema=True)

    def _report(self, summary: BatchSummary) -> None:
        self.summaries.append(summary)
        self.echo(f"[{self.config.pipeline}] {summary.line()}")


def _without_removed(per_host: pd.DataFrame, removed: pd.DataFrame) -> pd.DataFrame:
    """Per-host event counts less the removed events."""
    less = removed.groupby("host").size()
    out = per_host.set_index("host", drop=False)
    hit = out.index.isin(less.index)
    out.loc[hit, "events"] = out.loc[hit, "events"] - less.reindex(out.index[hit]).to_numpy()
    return out.reset_index(drop=True)


def _optional_int(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


class ExpectedHosts:
    """The expected-host list (the naming service), re-read when the file changes."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._mtime: float | None = None
        self._hosts: frozenset[str] | None = None

    def current(self) -> frozenset[str] | None:
        if self.path is None:
            return None
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            raise ConfigError(f"watermark.hosts_file {self.path}: file not found") from None
        if mtime != self._mtime:
            self._hosts, self._mtime = read_hosts_file(self.path), mtime
        return self._hosts


_TS = pa.timestamp("ms", tz="UTC")
# Up to this many events, quarantined or late rows of a batch are written by delta-rs from the
# driver: a small batch's Spark Delta commit costs ~0.4 s, delta-rs's a tenth of that.
COLLECT_MAX_ROWS = 10_000


def _collect(frame: DataFrame) -> pa.Table:
    """A small frame on the driver, its columns nullable as Spark's table schemas are."""
    rows = frame.toArrow()
    return rows.cast(pa.schema([f.with_nullable(True) for f in rows.schema]))


HOST_SCHEMA = pa.schema([("host", pa.string()), ("progress_ms", pa.int64()), ("last_batch", pa.int64())])
OPEN_SCHEMA = pa.schema(
    [
        ("window_start_ms", pa.int64()),
        ("key", pa.string()),
        ("events", pa.int64()),
        ("value_sum", pa.float64()),
    ]
)
WINDOW_SCHEMA = pa.schema(
    [
        ("window_start", _TS),
        ("window_end", _TS),
        ("key", pa.string()),
        ("events", pa.int64()),
        ("value_sum", pa.float64()),
        ("batch_id", pa.int64()),
        ("low_watermark", _TS),
        ("committed_at", _TS),
    ]
)
MARKER_SCHEMA = pa.schema(
    [
        ("batch_id", pa.int64()),
        ("run_id", pa.string()),
        ("watermark_ms", pa.int64()),
        ("watermark", _TS),
        ("previous_ms", pa.int64()),
        ("state", pa.string()),
        ("hosts_seen", pa.int64()),
        ("hosts_total", pa.int64()),
        ("hosts_required", pa.int64()),
        ("hosts_behind", pa.int64()),
        ("hosts_lagging", pa.int64()),
        ("events", pa.int64()),
        ("heartbeats", pa.int64()),
        ("late_events", pa.int64()),
        ("quarantined", pa.int64()),
        ("windows_closed", pa.int64()),
        ("open_windows", pa.int64()),
        ("batch_ts_ms", pa.int64()),
        ("advanced_at_ms", pa.int64()),
        ("frontier_ms", pa.int64()),
        ("stall_since_ms", pa.int64()),
        ("stall_hosts", pa.string()),
        ("hosts_version", pa.int64()),
        ("open_version", pa.int64()),
        ("global_lw_ms", pa.int64()),
        ("stages", pa.string()),
        ("source_progress", pa.string()),  # where the batch's input ended (tidemark.reset)
        ("committed_at_ms", pa.int64()),
        ("committed_at", _TS),
    ]
)
STALL_SCHEMA = pa.schema(
    [
        ("started_at", _TS),
        ("ended_at", _TS),
        ("duration_ms", pa.int64()),
        ("watermark", _TS),
        ("hosts_count", pa.int64()),
        ("hosts", pa.list_(pa.string())),
        ("closed_batch_id", pa.int64()),
    ]
)


def _closed_windows_table(closing: pd.DataFrame, size: int, batch_id: int, watermark: int) -> pa.Table:
    starts = closing["window_start_ms"].to_numpy(dtype="int64")
    n = len(closing)
    return pa.Table.from_arrays(
        [
            pa.array(starts, pa.int64()).cast(_TS),
            pa.array(starts + size, pa.int64()).cast(_TS),
            pa.array(closing["key"].astype(str).to_list(), pa.string()),
            pa.array(closing["events"].to_numpy(dtype="int64")),
            pa.array(closing["value_sum"].to_numpy(dtype="float64")),
            pa.array(np.full(n, batch_id, dtype="int64")),
            pa.array(np.full(n, watermark, dtype="int64")).cast(_TS),
            pa.array(np.full(n, now_ms(), dtype="int64")).cast(_TS),
        ],
        schema=WINDOW_SCHEMA,
    )


def _merge_progress(state: pd.DataFrame, batch: pd.DataFrame, batch_id: int) -> pd.DataFrame:
    """Per-host max of progress; ``last_batch`` is the batch that last moved the host."""
    if batch.empty:
        return state
    incoming = batch.assign(last_batch=batch_id).astype({"progress_ms": "int64", "last_batch": "int64"})
    if state.empty:
        return incoming[["progress_ms", "last_batch"]]
    joined = state.join(incoming, how="outer", lsuffix="_old")
    old = joined["progress_ms_old"]
    new = joined["progress_ms"]
    moved = new.notna() & (old.isna() | (new > old))
    return pd.DataFrame(
        {
            "progress_ms": np.where(moved, new, old).astype("int64"),
            "last_batch": np.where(moved, joined["last_batch"], joined["last_batch_old"]).astype("int64"),
        },
        index=joined.index.rename("host"),
    )


def _sum_partials(current: pd.DataFrame, batch: pd.DataFrame) -> pd.DataFrame:
    if batch.empty:
        return current.reset_index(drop=True)
    if current.empty:
        return batch[OPEN_COLUMNS].reset_index(drop=True)
    both = pd.concat([current[OPEN_COLUMNS], batch[OPEN_COLUMNS]], ignore_index=True)
    return both.groupby(["window_start_ms", "key"], as_index=False, sort=True).agg(
        events=("events", "sum"), value_sum=("value_sum", "sum")
    )


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def start_stream(
    spark: SparkSession, config: PipelineConfig, once: bool, echo=print, reset: bool = False
) -> tuple[StreamingQuery, BatchProcessor]:
    """Start the query. ``reset`` (``--reset-checkpoint``) replaces a missing or foreign
    checkpoint with a new run identity that resumes where the committed batches stopped."""
    identity = R.reset_checkpoint(spark, config, echo) if reset else T.ensure_identity(config)
    resume = R.resume_point(config, identity)
    processor = BatchProcessor(spark, config, identity, echo=echo)
    writer = (
        build_stream(spark, config, resume)
        .writeStream.queryName(f"tidemark_{config.pipeline}")
        .foreachBatch(processor)
        .option("checkpointLocation", config.checkpoint)
    )
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.trigger_interval} milliseconds")
    echo(f"[{config.pipeline}] starting stream ({config.describe()}), run {identity.run_id}")
    return writer.start(), processor


def run_stream(
    spark: SparkSession, config: PipelineConfig, once: bool, echo=print, reset: bool = False
) -> BatchProcessor:
    query, processor = start_stream(spark, config, once, echo=echo, reset=reset)
    heartbeat = liveness.Heartbeat(config)
    try:
        # A live job rewrites its heartbeat file every few seconds, batch or no batch: the
        # Airflow supervisor tells a dead job (stale file, no process) from a hung one (process
        # alive, file stale or one trigger running for too long) without talking to Spark.
        while not query.awaitTermination(liveness.HEARTBEAT_EVERY_S):
            heartbeat.beat(query, processor)
        heartbeat.beat(query, processor, stopped=True)
    except KeyboardInterrupt:
        echo(f"[{config.pipeline}] stopping (Ctrl-C): the current batch finishes or is replayed")
        query.stop()
    return processor
