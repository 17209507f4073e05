"""The exactly-once streaming job.

Plan (per micro-batch, Spark Structured Streaming with ``foreachBatch``)::

    source lines ─ parse/validate ─ dedup by event_id ─┬─ quarantine   (bad lines)
       (files | kafka)   (records.py)   (Spark state,    ├─ events       (all unique valid records)
                                         processing-time  ├─ late_events  (window already closed)
                                         horizon)         ├─ windows      (closed by the watermark)
                                                          ├─ _state/*     (host progress, open sums)
                                                          └─ watermarks   (commit marker, last)

Why it is exactly-once:

* The source is replayable and Spark writes a batch's offsets (and its batch timestamp) to the
  checkpoint before running it, so a batch re-run after a crash sees the same lines.
* Deduplication uses Spark's state store, which reloads the state version the batch started
  from on a re-run, so the same records survive deduplication again.
* Everything else the batch computes is a function of (its lines, the state batch N-1 left):
  that state is read from the Delta versions recorded in batch N-1's watermark row, never from
  tables a crashed attempt of N may already have changed.
* Every Delta write of batch N carries (run identity, N) as ``txnAppId``/``txnVersion``; a
  write Delta has already committed is skipped. The watermark row is written last; when it
  exists for N the whole batch is skipped.

Deduplication keeps each ``event_id`` for ``dedup_horizon`` of *processing* time (the column it
watermarks is the batch timestamp, not the event time), so a lagging host's records are never
expired as late and a retry is caught however old its event time.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa

from tidemark import tables as T
from tidemark.aggregate import aggregate_windows, window_start_col
from tidemark.config import PipelineConfig
from tidemark.records import drop_blank_lines, parse_records, read_landing_files
from tidemark.timeutil import format_instant_ms, humanize_ms, now_ms
from tidemark.watermark import precise_watermark, required_hosts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

HOST_COLUMNS = ["host", "progress_ms", "last_batch"]
OPEN_COLUMNS = ["window_start_ms", "key", "events", "value_sum"]


@dataclass
class PipelineState:
    """What batch ``batch_id`` left behind; the input of batch ``batch_id + 1``."""

    batch_id: int = -1
    watermark: int | None = None
    progress: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(
            {"progress_ms": pd.Series(dtype="int64"), "last_batch": pd.Series(dtype="int64")},
            index=pd.Index([], name="host", dtype="object"),
        )
    )
    open_windows: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(
            {
                "window_start_ms": pd.Series(dtype="int64"),
                "key": pd.Series(dtype="object"),
                "events": pd.Series(dtype="int64"),
                "value_sum": pd.Series(dtype="float64"),
            }
        )
    )


@dataclass(frozen=True)
class BatchSummary:
    batch_id: int
    events: int
    heartbeats: int
    late: int
    quarantined: int
    watermark: int | None
    previous: int | None
    hosts_seen: int
    hosts_required: int
    hosts_behind: int
    windows_closed: int
    open_windows: int
    seconds: float
    skipped: bool = False
    phases: dict[str, float] = field(default_factory=dict, compare=False)

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
            f"{self.quarantined:,} quarantined | watermark {format_instant_ms(self.watermark)}"
            f"{moved} | hosts {self.hosts_seen:,} seen, {self.hosts_behind:,} behind | "
            f"{self.windows_closed:,} window rows closed, {self.open_windows:,} open | "
            f"{self.seconds:.1f}s"
        )


# --------------------------------------------------------------------------------------------
# Plan
# --------------------------------------------------------------------------------------------


def source_lines(spark: SparkSession, config: PipelineConfig, streaming: bool) -> DataFrame:
    """The source as ``(raw, source, arrival_ms)`` lines."""
    src = config.source
    if src.kind == "files":
        assert src.path is not None
        return read_landing_files(spark, src.path, streaming, src.max_files_per_trigger)
    raise NotImplementedError("source.kind kafka is not available yet")


def build_stream(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    from pyspark.sql import functions as F

    parsed = parse_records(drop_blank_lines(source_lines(spark, config, True)), config.validation)
    parsed = parsed.withColumn("ingest_ts", F.current_timestamp())
    if config.mode == "at_least_once":
        return parsed
    good = F.col("reason").isNull() & ~F.col("heartbeat")
    # Bad lines and heartbeats get a key no other line has: they are never deduplicated.
    dedup_key = F.when(good, F.col("event_id")).otherwise(F.concat(F.lit("\u0000"), F.expr("uuid()")))
    return (
        parsed.withColumn("_dedup_key", dedup_key)
        .withWatermark("ingest_ts", f"{dedup_delay_ms(config.dedup_horizon)} milliseconds")
        .dropDuplicatesWithinWatermark(["_dedup_key"])
        .drop("_dedup_key")
    )


def dedup_delay_ms(horizon_ms: int) -> int:
    """Spark watermark delay that gives a dedup catalog of ``horizon_ms`` processing time.

    Spark's StreamingDeduplicateWithinWatermarkExec stores ``expiresAt = first_seen + delay`` and
    evicts when the watermark (newest batch timestamp - delay) reaches it, i.e. a key lives
    ``2 * delay`` of processing time. Half the horizon as delay keeps each id for exactly the
    horizon.
    """
    return max(1, horizon_ms // 2)


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
        self._state: PipelineState | None = None
        self.summaries: list[BatchSummary] = []

    # -- state ----------------------------------------------------------------------------
    def _marker_before(self, batch_id: int) -> tuple[dict | None, bool]:
        """(newest watermark row with batch_id <= the given one, is it that very batch?)."""
        path = self.writer.path(T.WATERMARKS)
        if not T.table_exists(path):
            return None, False
        marks = T.read_local(path)
        marks = marks[marks["batch_id"] <= batch_id]
        if marks.empty:
            return None, False
        row = marks.loc[marks["batch_id"].idxmax()].to_dict()
        return row, int(row["batch_id"]) == batch_id

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
        watermark = marker["watermark_ms"]
        return PipelineState(
            batch_id=int(marker["batch_id"]),
            watermark=None if pd.isna(watermark) else int(watermark),
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
    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        started = time.monotonic()
        phases = _Phases()
        state, committed = self.state_before(batch_id)
        phases.lap("load_state")
        if committed:
            # Every table already holds this batch; still run the plan to its end so the dedup
            # operator commits its state version for the batch (Spark validates that it did).
            batch.write.format("noop").mode("overwrite").save()
            self._state = None  # reload from Delta for the next batch
            summary = BatchSummary(batch_id, 0, 0, 0, 0, None, None, 0, 0, 0, 0, 0, 0.0, True)
            self._report(summary)
            return
        cfg = self.config
        size = cfg.window
        prev_wm = state.watermark
        batch = batch.persist()
        try:
            ok = F.col("reason").isNull()
            is_event = ok & ~F.col("heartbeat")
            events = batch.where(is_event).select(
                "event_id",
                "host",
                "event_time",
                "msg_time",
                "key",
                "value",
                window_start_col("event_time", size).alias("window_start_ms"),
                "source",
                "ingest_ts",
            )
            late_flag = (
                F.col("window_start_ms") + F.lit(size) <= F.lit(prev_wm)
                if prev_wm is not None
                else F.lit(False)
            )
            events = events.withColumn("is_late", late_flag)

            counts = batch.agg(
                F.count_if(is_event).alias("events"),
                F.count_if(ok & F.col("heartbeat")).alias("heartbeats"),
                F.count_if(~ok).alias("quarantined"),
            ).first()
            n_events, n_hb, n_bad = counts["events"], counts["heartbeats"], counts["quarantined"]
            phases.lap("parse_dedup_count")

            if n_bad:
                quarantine = batch.where(~ok).select(
                    "raw",
                    "reason",
                    "source",
                    F.lit(batch_id).alias("batch_id"),
                    "ingest_ts",
                )
                self.writer.write(quarantine, T.QUARANTINE, batch_id)
                phases.lap("write_quarantine")

            late_count = 0
            batch_partials = pd.DataFrame(columns=OPEN_COLUMNS)
            if n_events:
                events_out = events.select(
                    "event_id",
                    "host",
                    "event_time",
                    "msg_time",
                    "key",
                    "value",
                    F.timestamp_millis("window_start_ms").alias("window_start"),
                    "is_late",
                    F.lit(batch_id).alias("batch_id"),
                    "ingest_ts",
                    "source",
                )
                self.writer.write(events_out, T.EVENTS, batch_id)
                phases.lap("write_events")
                if prev_wm is not None:
                    late = events.where("is_late")
                    late_count = late.count()
                    if late_count:
                        late_out = late.select(
                            "event_id",
                            "host",
                            "event_time",
                            "msg_time",
                            "key",
                            "value",
                            F.timestamp_millis("window_start_ms").alias("window_start"),
                            F.timestamp_millis(F.col("window_start_ms") + F.lit(size)).alias("window_end"),
                            F.timestamp_millis(F.lit(prev_wm)).alias("watermark_at_arrival"),
                            F.lit(batch_id).alias("batch_id"),
                            "ingest_ts",
                            "source",
                        )
                        self.writer.write(late_out, T.LATE_EVENTS, batch_id)
                    phases.lap("write_late")
                batch_partials = (
                    aggregate_windows(events.where(~F.col("is_late")), size)
                    .toPandas()
                    .astype({"window_start_ms": "int64", "events": "int64"})
                )
                phases.lap("aggregate_windows")

            # Host progress: events and heartbeats both move their host.
            batch_hosts = (
                batch.where(ok)
                .groupBy("host")
                .agg(F.max("event_time").alias("progress_ms"))
                .toPandas()
                .set_index("host")
            )
            progress = _merge_progress(state.progress, batch_hosts, batch_id)
            values = progress["progress_ms"].to_numpy(dtype=np.int64)
            candidate = precise_watermark(values, cfg.watermark.precision_fraction)
            watermark = (
                prev_wm if candidate is None or (prev_wm is not None and candidate < prev_wm) else candidate
            )
            phases.lap("host_progress")
            hosts_behind = int(np.count_nonzero(values < watermark)) if watermark is not None else len(values)

            open_windows = _sum_partials(state.open_windows, batch_partials)
            closing_mask = (
                open_windows["window_start_ms"] + size <= watermark
                if watermark is not None
                else pd.Series(False, index=open_windows.index)
            )
            closing = open_windows[closing_mask]
            remaining = open_windows[~closing_mask]

            if len(closing):
                self.writer.write_local(
                    _closed_windows_table(closing, size, batch_id, watermark), T.WINDOWS, batch_id
                )
                phases.lap("write_windows")

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
                hosts_seen=len(progress),
                hosts_required=required_hosts(len(progress), cfg.watermark.precision_fraction),
                hosts_behind=hosts_behind,
                windows_closed=len(closing),
                open_windows=len(remaining),
                seconds=time.monotonic() - started,
                phases=phases.times,
            )
            self._write_marker(summary, hosts_version, open_version)
            phases.lap("write_marker")
            self._state = PipelineState(
                batch_id=batch_id,
                watermark=watermark,
                progress=progress,
                open_windows=remaining[OPEN_COLUMNS].reset_index(drop=True),
            )
            self._report(summary)
        finally:
            batch.unpersist()

    def _write_marker(self, s: BatchSummary, hosts_version: int, open_version: int) -> None:
        committed = now_ms()
        row = {
            "batch_id": s.batch_id,
            "run_id": self.identity.run_id,
            "watermark_ms": s.watermark,
            "watermark": s.watermark,
            "previous_ms": s.previous,
            "hosts_seen": s.hosts_seen,
            "hosts_required": s.hosts_required,
            "hosts_behind": s.hosts_behind,
            "events": s.events,
            "heartbeats": s.heartbeats,
            "late_events": s.late,
            "quarantined": s.quarantined,
            "windows_closed": s.windows_closed,
            "open_windows": s.open_windows,
            "hosts_version": hosts_version,
            "open_version": open_version,
            "batch_seconds": s.seconds,
            "committed_at_ms": committed,
            "committed_at": committed,
        }
        table = pa.Table.from_pylist([row], schema=MARKER_SCHEMA)
        self.writer.write_local(table, T.WATERMARKS, s.batch_id)

    def _report(self, summary: BatchSummary) -> None:
        self.summaries.append(summary)
        self.echo(f"[{self.config.pipeline}] {summary.line()}")


_TS = pa.timestamp("ms", tz="UTC")
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
        ("watermark", _TS),
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
        ("hosts_seen", pa.int64()),
        ("hosts_required", pa.int64()),
        ("hosts_behind", pa.int64()),
        ("events", pa.int64()),
        ("heartbeats", pa.int64()),
        ("late_events", pa.int64()),
        ("quarantined", pa.int64()),
        ("windows_closed", pa.int64()),
        ("open_windows", pa.int64()),
        ("hosts_version", pa.int64()),
        ("open_version", pa.int64()),
        ("batch_seconds", pa.float64()),
        ("committed_at_ms", pa.int64()),
        ("committed_at", _TS),
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
    spark: SparkSession, config: PipelineConfig, once: bool, echo=print
) -> tuple[StreamingQuery, BatchProcessor]:
    identity = T.ensure_identity(config)
    processor = BatchProcessor(spark, config, identity, echo=echo)
    writer = (
        build_stream(spark, config)
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


def run_stream(spark: SparkSession, config: PipelineConfig, once: bool, echo=print) -> BatchProcessor:
    query, processor = start_stream(spark, config, once, echo=echo)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        echo(f"[{config.pipeline}] stopping (Ctrl-C): the current batch finishes or is replayed")
        query.stop()
    return processor
