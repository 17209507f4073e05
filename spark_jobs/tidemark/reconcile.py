"""Batch recompute-and-diff: does the stream agree with a batch recompute, window by window?

The recompute reads the **raw source** (never the stream's tables), parses it with the same
:func:`tidemark.records.parse_records`, removes publisher retries by ``event_id`` and aggregates
with the same :func:`tidemark.aggregate.aggregate_windows`. Per window (summed over keys):

* ``stream_events``  what the stream committed to ``windows``;
* ``batch_events``   what the recompute found;
* ``late_events``    records of the window the stream kept in ``late_events``;
* ``abs_diff``       ``sum_k |stream_k - batch_k|``;
* ``alignment``      ``1 - abs_diff / batch_events`` (1.0 when both are empty);
* ``aligned``        ``alignment >= target``;
* ``unexplained``    ``batch - stream - late``: 0 when exactly-once holds, since every unique
  record is counted once in windows or in late events.

Windows the stream has not closed yet (end after its watermark) are reported as ``open`` and
do not count towards alignment. Results replace the range's rows in the ``reconciliation``
table, so re-running a range never duplicates them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from tidemark import tables as T
from tidemark.aggregate import aggregate_windows
from tidemark.config import PipelineConfig
from tidemark.stream import parsed_source
from tidemark.timeutil import format_instant_ms, now_ms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class WindowResult:
    window_start_ms: int
    window_end_ms: int
    status: str  # closed | open
    stream_events: int
    batch_events: int
    late_events: int
    abs_diff: int
    alignment: float | None
    aligned: bool | None
    unexplained: int


@dataclass(frozen=True)
class ReconcileReport:
    pipeline: str
    start_ms: int
    end_ms: int
    target: float
    stream_watermark_ms: int | None
    windows: list[WindowResult]

    @property
    def closed(self) -> list[WindowResult]:
        return [w for w in self.windows if w.status == "closed"]

    @property
    def misaligned(self) -> list[WindowResult]:
        return [w for w in self.closed if not w.aligned]

    @property
    def share_aligned(self) -> float | None:
        closed = self.closed
        return sum(1 for w in closed if w.aligned) / len(closed) if closed else None

    @property
    def worst_alignment(self) -> float | None:
        closed = self.closed
        return min(w.alignment for w in closed if w.alignment is not None) if closed else None

    def totals(self) -> dict[str, int]:
        closed = self.closed
        return {
            "stream_events": sum(w.stream_events for w in closed),
            "batch_events": sum(w.batch_events for w in closed),
            "late_events": sum(w.late_events for w in closed),
            "unexplained": sum(w.unexplained for w in closed),
        }

    def to_json(self) -> str:
        return json.dumps(
            {
                "pipeline": self.pipeline,
                "start": format_instant_ms(self.start_ms),
                "end": format_instant_ms(self.end_ms),
                "target": self.target,
                "stream_watermark": format_instant_ms(self.stream_watermark_ms),
                "windows_closed": len(self.closed),
                "windows_open": len(self.windows) - len(self.closed),
                "share_aligned": self.share_aligned,
                "worst_alignment": self.worst_alignment,
                "totals": self.totals(),
                "windows": [
                    {
                        **asdict(w),
                        "window_start": format_instant_ms(w.window_start_ms),
                        "window_end": format_instant_ms(w.window_end_ms),
                    }
                    for w in self.windows
                ],
            },
            indent=2,
        )

    def table(self) -> str:
        head = (
            f"{'window_start':24} {'status':6} {'stream':>9} {'batch':>9} {'late':>6} "
            f"{'|diff|':>7} {'alignment':>10} {'ok':>3} {'unexpl.':>7}"
        )
        rows = [head, "-" * len(head)]
        for w in self.windows:
            align = f"{w.alignment:.6f}" if w.alignment is not None else "-"
            ok = "-" if w.aligned is None else ("yes" if w.aligned else "NO")
            # An open window's stream count is still accumulating: no difference to report.
            diff, unexplained = (
                (f"{w.abs_diff:,}", f"{w.unexplained:,}") if w.status == "closed" else ("-", "-")
            )
            rows.append(
                f"{format_instant_ms(w.window_start_ms):24} {w.status:6} {w.stream_events:9,} "
                f"{w.batch_events:9,} {w.late_events:6,} {diff:>7} {align:>10} {ok:>3} "
                f"{unexplained:>7}"
            )
        t = self.totals()
        share = self.share_aligned
        rows.append("-" * len(head))
        rows.append(
            f"{len(self.closed)} closed windows, "
            + (f"{share:.2%} aligned at target {self.target}" if share is not None else "none")
            + f"; worst alignment {self.worst_alignment if self.worst_alignment is not None else '-'}"
            + f"; stream {t['stream_events']:,} + late {t['late_events']:,} vs batch "
            f"{t['batch_events']:,}; unexplained {t['unexplained']:,}"
        )
        return "\n".join(rows)


def recompute_windows(spark: SparkSession, config: PipelineConfig, start_ms: int, end_ms: int) -> DataFrame:
    """Window results for ``[start, end)`` recomputed from the raw source.

    Publisher retries are removed by ``event_id``; of copies that differ (not a retry, a clash),
    the one with the smallest (window, key, value) is kept. Written without a filter on the
    parsed rows: Spark pushes a filter below the parse, inlining the validation into the
    predicate where it runs once per reference (each re-parsing the JSON; 10× the time at 1M
    lines). Non-events fall into one NULL-id group instead, dropped after the aggregation.
    """
    from pyspark.sql import functions as F

    parsed = parsed_source(spark, config, streaming=False)
    wanted = (
        F.col("reason").isNull()
        & ~F.col("heartbeat")
        & (F.col("event_time") >= start_ms)
        & (F.col("event_time") < end_ms)
    )
    unique = (
        parsed.select(F.when(wanted, F.col("event_id")).alias("_id"), "event_time", "key", "value")
        .groupBy("_id")
        .agg(
            F.min(F.struct("event_time", "key", "value")).alias("_r"),
            F.max(F.col("_id").isNotNull()).alias("_event"),
        )
        .where("_event")
        .select("_r.event_time", "_r.key", "_r.value")
    )
    return aggregate_windows(unique, config.window)


def stream_watermark(config: PipelineConfig) -> int | None:
    """The stream's latest committed watermark (delta-rs read, no Spark job)."""
    path = config.table_path(T.WATERMARKS)
    if not T.table_exists(path):
        return None
    marks = T.read_local(path)["watermark_ms"].dropna()
    return int(marks.max()) if len(marks) else None


def _per_key(spark: SparkSession, config: PipelineConfig, table: str, start_ms: int, end_ms: int):
    from pyspark.sql import functions as F

    path = config.table_path(table)
    schema = "window_start_ms long, key string, n long"
    if not T.table_exists(path):
        return spark.createDataFrame([], schema)
    frame = T.read_table(spark, path).select(
        F.unix_millis("window_start").alias("window_start_ms"),
        "key",
        *(["events"] if table == T.WINDOWS else []),
    )
    frame = frame.where((F.col("window_start_ms") >= start_ms) & (F.col("window_start_ms") < end_ms))
    measure = F.sum("events") if table == T.WINDOWS else F.count(F.lit(1))
    return frame.groupBy("window_start_ms", "key").agg(measure.cast("long").alias("n"))


def reconcile(
    spark: SparkSession,
    config: PipelineConfig,
    start_ms: int,
    end_ms: int,
    target: float | None = None,
    write: bool = True,
) -> ReconcileReport:
    from pyspark.sql import functions as F

    if end_ms <= start_ms:
        raise ValueError(
            f"--end ({format_instant_ms(end_ms)}) must be after --start ({format_instant_ms(start_ms)})"
        )
    size = config.window
    start_ms -= start_ms % size
    end_ms += (-end_ms) % size
    target = config.reconcile.target if target is None else target
    watermark = stream_watermark(config)

    batch = recompute_windows(spark, config, start_ms, end_ms).select(
        "window_start_ms", "key", F.col("events").alias("batch")
    )
    stream = _per_key(spark, config, T.WINDOWS, start_ms, end_ms).withColumnRenamed("n", "stream")
    late = _per_key(spark, config, T.LATE_EVENTS, start_ms, end_ms).withColumnRenamed("n", "late")
    joined = (
        batch.join(stream, ["window_start_ms", "key"], "full_outer")
        .join(late, ["window_start_ms", "key"], "full_outer")
        .na.fill(0, ["batch", "stream", "late"])
    )
    per_window = (
        joined.groupBy("window_start_ms")
        .agg(
            F.sum("stream").alias("stream_events"),
            F.sum("batch").alias("batch_events"),
            F.sum("late").alias("late_events"),
            F.sum(F.abs(F.col("stream") - F.col("batch"))).alias("abs_diff"),
        )
        .orderBy("window_start_ms")
        .collect()
    )
    windows: list[WindowResult] = []
    for row in per_window:
        ws = int(row["window_start_ms"])
        stream_n, batch_n = int(row["stream_events"]), int(row["batch_events"])
        late_n, diff = int(row["late_events"]), int(row["abs_diff"])
        closed = watermark is not None and ws + size <= watermark
        if not closed:
            alignment, aligned = None, None
        elif batch_n == 0:
            alignment = 1.0 if stream_n == 0 else 0.0
            aligned = alignment >= target
        else:
            alignment = 1.0 - diff / batch_n
            aligned = alignment >= target
        windows.append(
            WindowResult(
                window_start_ms=ws,
                window_end_ms=ws + size,
                status="closed" if closed else "open",
                stream_events=stream_n,
                batch_events=batch_n,
                late_events=late_n,
                abs_diff=diff,
                alignment=alignment,
                aligned=aligned,
                unexplained=batch_n - stream_n - late_n,
            )
        )
    report = ReconcileReport(config.pipeline, start_ms, end_ms, target, watermark, windows)
    if write:
        write_report(spark, config, report)
    return report


RECONCILIATION_SCHEMA = (
    "window_start_ms long, window_end_ms long, status string, stream_events long, "
    "batch_events long, late_events long, abs_diff long, alignment double, aligned boolean, "
    "unexplained long"
)


def write_report(spark: SparkSession, config: PipelineConfig, report: ReconcileReport) -> None:
    """Replace the range's rows in the reconciliation table (idempotent per range)."""
    from pyspark.sql import functions as F

    rows = [asdict(w) for w in report.windows]
    frame = (
        spark.createDataFrame(rows, RECONCILIATION_SCHEMA)
        if rows
        else spark.createDataFrame([], RECONCILIATION_SCHEMA)
    )
    frame = frame.select(
        F.lit(config.pipeline).alias("pipeline"),
        F.timestamp_millis("window_start_ms").alias("window_start"),
        F.timestamp_millis("window_end_ms").alias("window_end"),
        *[c for c in RECONCILIATION_SCHEMA_COLUMNS if c not in ("window_start_ms", "window_end_ms")],
        F.lit(report.target).alias("target"),
        F.timestamp_millis(F.lit(report.stream_watermark_ms)).alias("stream_watermark"),
        F.timestamp_millis(F.lit(now_ms())).alias("reconciled_at"),
    )
    start = format_instant_ms(report.start_ms)
    end = format_instant_ms(report.end_ms)
    predicate = f"window_start >= '{start}' AND window_start < '{end}'"
    (
        frame.write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", predicate)
        .save(config.table_path(T.RECONCILIATION))
    )


RECONCILIATION_SCHEMA_COLUMNS = [part.split()[0] for part in RECONCILIATION_SCHEMA.split(", ")]
