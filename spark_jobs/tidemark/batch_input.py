"""A micro-batch's input as the steps read it (:class:`tidemark.batch_steps.BatchInput`).

The batch's rows with ``ingest_ts`` (Spark's batch timestamp), less the publisher retries they
hold in exactly_once mode (:mod:`tidemark.dedup`), and what Spark's checkpoint says of the batch
before any Spark job runs (:func:`tidemark.checkpoint.batch_source`): its timestamp, the source
range the commit marker records, and whether the batch is small enough to be collected whole by
deduplication's one Spark job (:func:`tidemark.dedup.whole_input`).

Why a replay reads the same input: the timestamp and the range come from the offset log Spark
writes before it runs the batch, and deduplication depends only on them and on the state the
previous batch committed (:mod:`tidemark.dedup`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidemark import batch_outputs
from tidemark import checkpoint as C
from tidemark.batch_steps import BatchInput, BatchSummary, count_columns
from tidemark.dedup import NO_REMOVED, DedupResult, deduplicate, whole_input

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from tidemark.config import PipelineConfig
    from tidemark.progress import HostProgress

__all__ = ["read_input", "with_retry_figures"]


def read_input(
    spark: SparkSession,
    batch: DataFrame,
    config: PipelineConfig,
    *,
    spark_batch_id: int,
    batch_id: int,
    progress: HostProgress,
    events_path: str,
    cached: list[DataFrame],
    lap: Callable[[str], object] = lambda name: None,
) -> tuple[BatchInput, DedupResult | None]:
    """Batch ``batch_id`` (Spark's ``spark_batch_id``) as the steps read it, and the result of
    deduplication (None in at_least_once mode). ``progress`` is the host progress the previous
    batch committed. Every frame this caches is appended to ``cached``: the caller unpersists
    them once the batch is written."""
    from pyspark.sql import functions as F

    source, batch_ts = _checkpoint_says(config, spark_batch_id)
    cached.append(batch.persist())
    rows = cached[0].select("*", F.timestamp_millis(F.lit(batch_ts)).alias("ingest_ts"))
    inp = BatchInput(
        batch_id=batch_id,
        rows=rows,
        counted=rows,
        removed=NO_REMOVED,
        scanned=None,
        batch_ts_ms=batch_ts,
        source_progress=source.progress if source is not None else None,
    )
    if config.mode != "exactly_once":
        return inp, None
    dedup = deduplicate(
        spark,
        rows,
        batch_id=batch_id,
        progress=progress,
        batch_ts_ms=batch_ts,
        horizon_ms=config.dedup_horizon,
        events_path=events_path,
        columns=count_columns(),
        lap=lap,
        whole=source is not None and whole_input(source.local_bytes(), source.records),
        whole_max_rows=batch_outputs.COLLECT_MAX_ROWS,
        on_executors=config.spark.per_row_work == "executors",
    )
    cached.extend(dedup.cached)
    # Resolved by Spark: count the deduplicated rows. Resolved on the driver: count the cache as
    # it is, less the copies removed.
    removed = dedup.removed
    found = dataclasses.replace(
        inp,
        rows=dedup.rows,
        counted=rows if removed is not None else dedup.rows,
        removed=removed if removed is not None else NO_REMOVED,
        scanned=dedup.scanned,
        local=dedup.local,
        out_of_order=dedup.out_of_order,
    )
    return found, dedup


def _checkpoint_says(config: PipelineConfig, spark_batch_id: int) -> tuple[C.BatchSource | None, int]:
    """(what the checkpoint says of a files or Kafka batch, else None; the batch timestamp).

    The batch timestamp joins the rows after the cache (see tidemark.stream.build_stream): Spark's,
    from the offset log, the value current_timestamp() has, so a replay sees the same."""
    if config.source.kind not in C.RESETTABLE_SOURCES:
        return None, C.batch_timestamp_ms(config, spark_batch_id)
    source = C.batch_source(config, spark_batch_id)
    return source, source.batch_ts_ms


def with_retry_figures(summary: BatchSummary, inp: BatchInput, dedup: DedupResult | None) -> BatchSummary:
    """``summary`` with the batch's deduplication figures."""
    return dataclasses.replace(
        summary,
        retries_dropped=dedup.dropped if dedup else 0,
        retries_looked_up=dedup.looked_up if dedup else 0,
        out_of_order=int(inp.out_of_order["records"].sum()) if inp.out_of_order is not None else 0,
    )
