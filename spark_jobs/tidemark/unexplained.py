"""The records behind an unexplained difference: which ids the stream lost, which it holds twice.

``unexplained`` (``batch - stream - late``, :mod:`tidemark.alignment`) is 0 when exactly-once
holds; a window where it is not has lost records, stored some twice, or counted wrong. The
reconciliation (:func:`tidemark.reconcile.reconcile`) then asks this module for the records, for
those windows only, so a reconciliation with nothing unexplained costs nothing more:

* the recompute at the record level (:func:`tidemark.recompute.recompute_records`: the same input,
  parser and retry rule) for the windows, restricted to the keys whose counts differ;
* the stream's ``events`` table (every unique valid record it stored, late ones too) restricted to
  the same event times and keys, by Delta's file statistics;
* both counted per record (``host``, ``event_id``, ``event_time``, ``key``) and joined: a record
  the recompute counts more times than ``events`` holds is **missing** (its ``source``, the
  landing file or ``topic/partition@offset``, is the raw input's copy); one ``events`` holds more
  times than the recompute counts is **extra** (a record the raw input does not have, or a
  duplicate; its ``source`` and ``batch_id`` are what ``events`` stored).

One Spark job; only the totals and a sample (the first ``sample`` records of each window and kind
by host, id and time) reach the driver. When ``events`` and the recompute agree on every record
of an examined window, the difference is in the window counts (``windows`` or ``late_events``),
not in the records: the window says so (:meth:`tidemark.alignment.WindowResult.records_line`).

The window counts and the record lists are read a little apart in time: a record the stream
stores in between (a late one) can show as extra. Reconcile again to tell.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.aggregate import window_start_col
from tidemark.alignment import EXTRA, MISSING, RecordDiff
from tidemark.config import PipelineConfig
from tidemark.recompute import recompute_records
from tidemark.sources import RangeInput

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

DEFAULT_SAMPLE = 20  # records listed per window and kind (missing, extra); the totals are exact
DEFAULT_MAX_WINDOWS = 10  # windows examined per reconciliation, the largest differences first
IDENTITY = ("host", "event_id", "event_time")


@dataclass(frozen=True)
class WindowRecords:
    """One window's records behind its difference: copies missing from ``events`` and extra in
    it (totals), and up to the sample size of each kind."""

    missing: int
    extra: int
    sample: tuple[RecordDiff, ...]


def windows_to_examine(
    differing: Mapping[int, int], max_windows: int = DEFAULT_MAX_WINDOWS
) -> tuple[list[int], list[int]]:
    """Of the windows (start -> unexplained) with a difference, those examined (the largest
    ``|unexplained|`` first, then the earliest; at most ``max_windows``) and those skipped, each
    in window order."""
    ranked = sorted((ws for ws, n in differing.items() if n), key=lambda ws: (-abs(differing[ws]), ws))
    return sorted(ranked[:max_windows]), sorted(ranked[max_windows:])


def _key_in(keys: Collection[str | None]) -> Column:
    from pyspark.sql import functions as F

    named = sorted(k for k in keys if k is not None)
    cond = F.col("key").isin(named) if named else F.lit(False)
    return cond | F.col("key").isNull() if None in keys else cond


def _in_windows(windows: Mapping[int, Collection[str | None]], size_ms: int) -> Column:
    """Event time in one of the windows, with one of that window's keys."""
    from pyspark.sql import functions as F

    t = F.col("event_time")
    return reduce(
        lambda a, b: a | b,
        [(t >= ws) & (t < ws + size_ms) & _key_in(keys) for ws, keys in sorted(windows.items())],
    )


def _stored(spark: SparkSession, config: PipelineConfig, where: Column) -> DataFrame:
    """Rows of ``events`` matching ``where``: identity, key, source, batch_id (none without a table)."""
    columns = [*IDENTITY, "key", "source", "batch_id"]
    path = config.table_path(S.EVENTS)
    if not T.table_exists(path):
        return spark.createDataFrame(
            [], "host string, event_id string, event_time bigint, key string, source string, batch_id bigint"
        )
    return T.read_table(spark, path).where(where).select(*columns)


def _differences(
    spark: SparkSession,
    config: PipelineConfig,
    source: RangeInput,
    windows: Mapping[int, Collection[str | None]],
) -> DataFrame:
    """One row per record identity and key whose copies the recompute of ``source`` and the
    ``events`` table count differently: its window, kind, the copies in excess, where it came from
    and (extra) the batch that stored it first."""
    from pyspark.sql import functions as F

    size = config.window
    where = _in_windows(windows, size)
    spans = [(ws, ws + size) for ws in sorted(windows)]
    recomputed = (
        recompute_records(config, source, spans)
        .where(where)
        .groupBy(*IDENTITY, "key")
        .agg(
            F.count(F.lit(1)).alias("r"),
            # the copy counted first (read order: arrival, then source)
            F.min(F.struct("arrival_ms", "source"))["source"].alias("r_source"),
        )
    )
    stored = (
        _stored(spark, config, where)
        .groupBy(*IDENTITY, "key")
        .agg(F.count(F.lit(1)).alias("e"), F.min(F.struct("batch_id", "source")).alias("_first"))
    )
    r, e = recomputed.alias("r"), stored.alias("e")
    on = [F.col(f"r.{c}") == F.col(f"e.{c}") for c in IDENTITY] + [F.col("r.key").eqNullSafe(F.col("e.key"))]
    diff = F.coalesce(F.col("r.r"), F.lit(0)) - F.coalesce(F.col("e.e"), F.lit(0))
    both = r.join(e, on, "full_outer").select(
        *[F.coalesce(F.col(f"r.{c}"), F.col(f"e.{c}")).alias(c) for c in (*IDENTITY, "key")],
        diff.alias("diff"),
        F.col("r.r_source"),
        F.col("e._first"),
    )
    kind = F.when(F.col("diff") > 0, F.lit(MISSING)).otherwise(F.lit(EXTRA))
    return both.where(F.col("diff") != 0).select(
        window_start_col("event_time", size).alias("window_start_ms"),
        kind.alias("kind"),
        *IDENTITY,
        "key",
        F.abs("diff").alias("copies"),
        F.when(F.col("diff") > 0, F.col("r_source")).otherwise(F.col("_first.source")).alias("source"),
        F.when(F.col("diff") < 0, F.col("_first.batch_id")).alias("batch_id"),
    )


def differing_records(
    spark: SparkSession,
    config: PipelineConfig,
    source: RangeInput,
    windows: Mapping[int, Collection[str | None]],
    sample: int = DEFAULT_SAMPLE,
) -> dict[int, WindowRecords]:
    """Per window start in ``windows`` (start -> the keys whose counts differ): the records the
    recompute of ``source`` and the ``events`` table disagree on. Every window given has an entry
    (totals 0 when they agree on every record)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not windows:
        return {}
    group = Window.partitionBy("window_start_ms", "kind")
    listed = (
        _differences(spark, config, source, windows)
        .select(
            "*",
            F.sum("copies").over(group).alias("total"),
            F.row_number().over(group.orderBy(*IDENTITY, "key")).alias("n"),
        )
        .where(F.col("n") <= max(sample, 1))  # one row at least: it carries the total
        .collect()
    )
    found: dict[int, dict[str, int]] = {ws: {MISSING: 0, EXTRA: 0} for ws in windows}
    records: dict[int, list[RecordDiff]] = {ws: [] for ws in windows}
    for row in sorted(listed, key=lambda x: (x["kind"] != MISSING, x["n"])):
        ws = int(row["window_start_ms"])
        found[ws][row["kind"]] = int(row["total"])
        if row["n"] <= sample:
            records[ws].append(
                RecordDiff(
                    kind=row["kind"],
                    event_id=row["event_id"],
                    host=row["host"],
                    event_time=int(row["event_time"]),
                    key=row["key"],
                    copies=int(row["copies"]),
                    source=row["source"],
                    batch_id=None if row["batch_id"] is None else int(row["batch_id"]),
                )
            )
    return {
        ws: WindowRecords(found[ws][MISSING], found[ws][EXTRA], tuple(records[ws])) for ws in sorted(windows)
    }
