"""The exactly-once streaming job.

Plan (per micro-batch, Spark Structured Streaming with ``foreachBatch``)::

    source lines ─ parse/validate ─ dedup retries ─────┬─ quarantine   (bad lines)
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

Deduplication catches a retry (:mod:`tidemark.retries`: the same ``event_id``, host and event
time) that arrives within ``dedup_horizon`` of the copy stored before it, however old its event
time; arrival is the input's (file modification time, Kafka timestamp), so where batches are cut
changes nothing. The plan keeps no Spark state.

Each commit marker also records the source range its batch covered (``source_progress``), so a
run started with ``--reset-checkpoint`` (:mod:`tidemark.reset`) resumes exactly there
(:mod:`tidemark.checkpoint`).

This module plans and runs the query; the rows come from :mod:`tidemark.sources` and each
micro-batch is :class:`tidemark.batch.BatchProcessor`. With ``metrics.prometheus_port`` set, the
run serves its metrics for Prometheus while it lasts (:mod:`tidemark.metrics`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark import liveness
from tidemark.batch import BatchProcessor
from tidemark.checkpoint import ResumePoint, resume_point
from tidemark.config import PipelineConfig
from tidemark.identity import ensure_identity
from tidemark.lease import Fenced, Lease, holder_record
from tidemark.maintenance import InStreamMaintenance
from tidemark.metrics import MetricsEndpoint, StreamMetrics, serve
from tidemark.records import PARSED_COLUMNS as PARSED
from tidemark.records import is_event_col, is_quarantined_col
from tidemark.reset import reset_checkpoint
from tidemark.retries import key_hash
from tidemark.sources import parsed_source
from tidemark.suspects import HASH

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


def build_stream(
    spark: SparkSession, config: PipelineConfig, resume: ResumePoint | None = None, streaming: bool = True
) -> DataFrame:
    """The stream's plan: the source's validated rows, in either mode (``streaming=False``: the
    same plan over the source as it is, a static frame). The plan keeps no Spark state:
    exactly_once removes publisher retries inside the batch (:mod:`tidemark.dedup`).

    Nothing that changes from batch to batch (a literal: the batch timestamp, a random seed)
    goes into the stage that parses: Spark generates its code with literals inlined, so one
    would make every micro-batch compile that ~2,400-line class again with Janino and run it
    cold until HotSpot compiles it, ~0.25 s per 500k lines. ``ingest_ts`` joins the rows after
    the batch cache (:func:`tidemark.batch_input.read_input`)."""
    from pyspark.sql import functions as F

    # The raw line is kept for the quarantine only: good rows do not cache it.
    bad_raw = F.when(is_quarantined_col(), F.col("raw")).alias("raw")
    parsed = parsed_source(spark, config, streaming=streaming, resume=resume).select(
        *(bad_raw if c == "raw" else c for c in PARSED)
    )
    if config.mode == "at_least_once":
        return parsed
    # exactly_once: the 64-bit hash of an event's key (tidemark.retries), computed once per row in
    # the parsing stage and cached with it, is what deduplication sorts and joins by (NULL: no
    # event).
    return parsed.select("*", F.when(is_event_col(), key_hash()).alias(HASH))


def start_stream(
    spark: SparkSession,
    config: PipelineConfig,
    once: bool,
    echo=print,
    reset: bool = False,
    metrics: StreamMetrics | None = None,
) -> tuple[StreamingQuery, BatchProcessor]:
    """Start the query. ``reset`` (``--reset-checkpoint``) replaces a missing or foreign
    checkpoint with a new run identity that resumes where the committed batches stopped;
    ``metrics`` hears of every batch (:mod:`tidemark.metrics`)."""
    identity = reset_checkpoint(spark, config, echo) if reset else ensure_identity(config)
    resume = resume_point(config, identity)
    processor = BatchProcessor(spark, config, identity, echo=echo)
    if metrics is not None:
        metrics.started(identity.run_id)
        processor.on_batch = metrics.observe
    if config.maintained_in_stream:
        processor.between_batches = InStreamMaintenance(spark, config, echo).maybe_run
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
    """Run the stream while holding the pipeline's lease (:mod:`tidemark.lease`): a second
    writer of the pipeline refuses to start (:class:`~tidemark.lease.LeaseHeld`), and this one
    stops without writing once its lease is taken over (:class:`~tidemark.lease.Fenced`). The
    metrics endpoint (``metrics.prometheus_port``) lives as long as the run."""
    lease = Lease(config, holder_record())
    lease.acquire()
    fenced = False
    endpoint: MetricsEndpoint | None = None
    try:
        if config.metrics.prometheus_port is not None:
            endpoint = serve(config, echo)
        metrics = endpoint.metrics if endpoint is not None else None
        query, processor = start_stream(spark, config, once, echo=echo, reset=reset, metrics=metrics)
        processor.writer.fence = lease.check
        heartbeat = liveness.Heartbeat(config)
        every_s = max(1, min(liveness.HEARTBEAT_EVERY_S, lease.ttl_ms // 3000))
        try:
            # A live job rewrites its heartbeat file every few seconds, batch or no batch: the
            # Airflow supervisor tells a dead job (stale file, no process) from a hung one
            # (process alive, file stale or one trigger running for too long) without talking
            # to Spark. The same loop renews the lease.
            while not query.awaitTermination(every_s):
                heartbeat.beat(query, processor)
                lease.renew()
            heartbeat.beat(query, processor, stopped=True)
        except KeyboardInterrupt:
            echo(f"[{config.pipeline}] stopping (Ctrl-C): the current batch finishes or is replayed")
            query.stop()
        except Fenced:
            fenced = True
            query.stop()
            raise
        except Exception:
            lease.check()  # a batch refused by its fence fails the query: say why, in one line
            raise
        return processor
    except Fenced:
        fenced = True
        raise
    finally:
        if endpoint is not None:
            endpoint.close()
        if not fenced:
            lease.release()
