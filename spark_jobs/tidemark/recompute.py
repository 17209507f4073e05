"""The batch recompute: window results of a range, from the raw source, by the stream's own code.

The recompute reads the **raw source** (never the stream's tables), parses it with the same
:func:`tidemark.records.parse_records`, removes publisher retries by the stream's own rule
(:mod:`tidemark.retries`, grouped by its :func:`~tidemark.retries.hashed_key`) and aggregates with
the same :func:`tidemark.aggregate.aggregate_windows`. It reads only the input that can hold
records of the range (:mod:`tidemark.pruning`: landing files by modification time and the landing
index, Kafka from the range's start by timestamp), so its cost follows the range, not the source's
retention. :mod:`tidemark.reconcile` diffs it against the stream.

:func:`recompute_records` is the same recompute kept at the record level, for a few windows: the
records behind an unexplained difference (:mod:`tidemark.unexplained`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING

from tidemark.aggregate import aggregate_windows
from tidemark.config import PipelineConfig
from tidemark.records import is_event_col
from tidemark.retries import (
    HASHED_KEY,
    ORDER,
    RETRY_KEY,
    hashed_key,
    keep_copies,
    key_hashes,
    read_order,
)
from tidemark.sources import RangeInput, parsed_range

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# The recompute's retry removal aggregates in at least this many partitions (see
# :func:`recompute_windows`).
RECOMPUTE_MIN_PARTITIONS = 16


def recompute_windows(
    spark: SparkSession,
    config: PipelineConfig,
    start_ms: int,
    end_ms: int,
    source: RangeInput | None = None,
) -> DataFrame:
    """Window results for ``[start, end)`` recomputed from the raw source.

    ``source`` is the input (default: :func:`tidemark.sources.parsed_range`, the part of the
    source that can hold records of the range; pruning changes no result, only what is read).

    Publisher retries are removed by the stream's own rule (:func:`tidemark.retries.keep_copies`):
    copies of a record (the same ``event_id``, host and event time) count once, unless a copy
    arrived more than ``dedup_horizon`` after the last one that counted. A record that reuses an
    id at another time is counted, as the stream stores it; GX's ``event_id_unique`` reports the
    reuse.

    How, and why so (5M lines; see docs/benchmarks.md):

    * Records are grouped by the retry key with its strings hashed
      (:func:`tidemark.retries.hashed_key`: 96 bits of hash, with ``event_time`` beside them), so
      no string is kept in the grouping; such a merge of two distinct records (odds about 1e-16
      in one hour of 5M events) would show as an unexplained difference of one.
    * Rows are repartitioned by the hash before the aggregation: each record's copies meet in one
      task anyway, and the parsing tasks no longer build a hash map that removes almost nothing
      (retries are ~1% of the rows). At least :data:`RECOMPUTE_MIN_PARTITIONS` of them: smaller
      hash maps aggregate faster.
    * No filter on the parsed rows: Spark pushes a filter below the parse, inlining the
      validation into the predicate where it runs once per reference (each re-parsing the
      line). Rows that are not wanted events group apart and are dropped by the aggregation.
    """
    from pyspark.sql import functions as F

    parsed = (source or parsed_range(spark, config, start_ms, end_ms)).rows
    # The stream's own test of an event (valid, not a heartbeat), within the range.
    wanted = is_event_col() & (F.col("event_time") >= start_ms) & (F.col("event_time") < end_ms)
    partitions = max(RECOMPUTE_MIN_PARTITIONS, int(spark.conf.get("spark.sql.shuffle.partitions") or 0))
    rows = parsed.select(
        *key_hashes(wanted),
        F.coalesce(wanted, F.lit(False)).alias("_ev"),
        "event_time",
        *read_order(parsed),
    ).repartition(partitions, HASHED_KEY[0])
    unique = keep_copies(
        rows.select(*HASHED_KEY, *ORDER, "_ev"),
        config.dedup_horizon,
        key=hashed_key(),
        wanted=F.col("_ev"),
    ).select("event_time", "key", "value")
    return aggregate_windows(unique, config.window)


def recompute_records(
    config: PipelineConfig, source: RangeInput, spans: Sequence[tuple[int, int]]
) -> DataFrame:
    """The records the recompute counts with event time in one of ``spans`` (``[start, end)`` epoch
    ms, e.g. a few windows), one row per counted copy: ``host``, ``event_id``, ``event_time``,
    ``key``, ``source`` (the landing file, or ``topic/partition@offset``, of the copy counted) and
    ``arrival_ms``.

    The rule is :func:`recompute_windows`'s (:func:`tidemark.retries.keep_copies` in the same read
    order), grouped by the key's strings rather than their hashes: only the spans' records carry
    them, every other row groups under NULLs and is dropped, so no filter is put on the parsed
    rows (Spark would push it below the parse).
    """
    from pyspark.sql import functions as F

    if not spans:
        raise ValueError("recompute_records: no span")
    parsed = source.rows
    in_spans = reduce(
        lambda a, b: a | b, [(F.col("event_time") >= lo) & (F.col("event_time") < hi) for lo, hi in spans]
    )
    wanted = F.coalesce(is_event_col() & in_spans, F.lit(False))
    rows = parsed.select(
        *[F.when(wanted, F.col(c)).alias(c) for c in RETRY_KEY],
        F.when(wanted, F.col("source")).alias("source"),
        wanted.alias("_ev"),
        *read_order(parsed),
    )
    kept = keep_copies(rows, config.dedup_horizon, wanted=F.col("_ev"))
    return kept.select("host", "event_id", "event_time", "key", "source", "arrival_ms")
