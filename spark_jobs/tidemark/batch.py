"""One micro-batch of the stream: the ``foreachBatch`` function and its commit protocol.

A batch is a sequence of named steps (:mod:`tidemark.batch_steps`), each a function of the
batch's rows and the state the previous batch committed
(:class:`tidemark.pipeline_state.PipelineState`)::

    count per host ─ advance the watermark ─ close windows ─ write outputs ─ track stalls ─ commit
    (one Spark job)  (tidemark.watermark)    (tidemark.   (events, late,  (stalls)       (state, then
                                              windows,     quarantine,                   the watermark
                                              revisions)   windows)                      row, then the
                                                                                         completeness
                                                                                         properties)

This module reads the batch's input (:mod:`tidemark.batch_input`: its rows less publisher
retries), runs the steps in that order and writes what they return (:mod:`tidemark.batch_outputs`).
Closing a window writes its revision 0; late records of a closed window that is not final yet
(``window.allowed_lateness``) revise it, and the watermark passing end + allowed lateness writes
its final revision (:mod:`tidemark.revisions`).

Why a replay writes nothing twice: every Delta write of batch N carries (run identity, N) as
``txnAppId``/``txnVersion`` (:class:`tidemark.tables.TableWriter`), the state a batch starts from
is read at the Delta versions batch N-1's watermark row recorded, and a batch whose watermark row
exists is skipped whole. The step timings (:class:`tidemark.batch_steps.Phases`) are printed per
batch and read by the benchmarks; their names are stable.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.aggregate import window_partials
from tidemark.batch_input import read_input, with_retry_figures
from tidemark.batch_outputs import BatchOutputs, driver_events
from tidemark.batch_steps import (
    Advance,
    BatchInput,
    BatchSummary,
    Closing,
    Counts,
    OpenStall,
    Phases,
    advance_watermark,
    close_windows,
    count_columns,
    count_columns_per_host,
    count_per_host,
    summarize,
    track_stalls,
)
from tidemark.config import PipelineConfig
from tidemark.hosts import ExpectedHosts
from tidemark.identity import RunIdentity
from tidemark.pipeline_state import PipelineState, StateCache
from tidemark.records import is_event_col
from tidemark.timeutil import now_ms
from tidemark.windows import TumblingWindows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BatchProcessor"]

# Batch summaries a processor keeps in memory (the benchmarks and the demo read them).
SUMMARIES_KEPT = 10_000


class BatchProcessor:
    """The ``foreachBatch`` function. Holds the state of the last committed batch in memory and
    reloads it from Delta only when it is not the one the incoming batch builds on."""

    def __init__(
        self,
        spark: SparkSession,
        config: PipelineConfig,
        identity: RunIdentity,
        echo: Callable[[str], object] = print,
    ) -> None:
        self.spark = spark
        self.config = config
        self.identity = identity
        self.writer = T.TableWriter(config, identity)
        self.outputs = BatchOutputs(self.writer, config, identity, echo)
        self.echo = echo
        self.hosts = ExpectedHosts(config.watermark.hosts_file)
        self.windows = TumblingWindows(config.window, config.allowed_lateness)
        self.states = StateCache(config)
        # The newest batches' summaries (a job runs for weeks: bounded), and how many ran.
        self.summaries: deque[BatchSummary] = deque(maxlen=SUMMARIES_KEPT)
        self.batches_run = 0
        # Called with the time after each committed batch, before the next starts: the stream's
        # own table maintenance on object storage (tidemark.stream, tidemark.maintenance).
        self.between_batches: Callable[[int], object] | None = None
        # Called with each batch's summary (a replay skipped too) once it is committed: the
        # stream's metrics endpoint (tidemark.stream, tidemark.metrics).
        self.on_batch: Callable[[BatchSummary], object] | None = None

    # -- the batch ---------------------------------------------------------------------------
    def __call__(self, batch: DataFrame, spark_batch_id: int) -> None:
        started = time.monotonic()
        phases = Phases()
        # Table batch ids continue across checkpoint resets (the run's batch_offset).
        batch_id = self.identity.batch_offset + spark_batch_id
        state, committed = self.states.before(batch_id)
        phases.lap("load_state")
        if committed:
            # Every table already holds this batch (the plan keeps no Spark state to commit).
            # A kill between its marker and its completeness properties left them behind: raise them.
            self.outputs.publish_completeness(batch_id, state.watermark)
            self.states.forget()  # reload from Delta for the next batch
            self._report(BatchSummary(batch_id, skipped=True))
            return
        cached: list[DataFrame] = []
        try:
            inp, dedup = read_input(
                self.spark,
                batch,
                self.config,
                spark_batch_id=spark_batch_id,
                batch_id=batch_id,
                progress=state.progress,
                events_path=self.writer.path(S.EVENTS),
                cached=cached,
                lap=phases.lap,
            )
            summary, new_state = self.step(inp, state, phases)
        finally:
            for frame in cached:
                frame.unpersist()
        summary = with_retry_figures(summary, inp, dedup)
        summary = dataclasses.replace(summary, seconds=time.monotonic() - started, phases=phases.times)
        self.states.keep(new_state)
        self._report(summary)
        if self.between_batches is not None:
            self.between_batches(now_ms())

    def step(
        self, inp: BatchInput, state: PipelineState, phases: Phases
    ) -> tuple[BatchSummary, PipelineState]:
        """One batch's tables and state, step by step (each step's wall time is a phase)."""
        counts = self._count_per_host(inp)
        phases.lap("parse_dedup_count")
        advance = advance_watermark(
            counts,
            state,
            inp.batch_id,
            rules=self.config.watermark,
            expected=self.hosts.current(),
            # Propagated (delta source): the upstream's global low watermark is this pipeline's input.
            propagated=self.config.source.kind == "delta",
        )
        phases.lap("host_progress")
        good = driver_events(inp.rows.where(is_event_col()), counts.events, inp.local)
        closing = self._close_windows(good, counts, state, advance.watermark)
        phases.lap("aggregate_windows")
        self.outputs.write_outputs(
            inp, good, counts, closing, state.watermark, phases, watermark=advance.watermark
        )
        stalls = track_stalls(state, advance, counts.batch_ts_ms)
        if stalls.ended is not None:
            self.outputs.write_stall(inp.batch_id, stalls.ended)
        return self._commit(inp, counts, advance, closing, stalls.open, state, phases)

    def _count_per_host(self, inp: BatchInput) -> Counts:
        """Step 1 (:func:`tidemark.batch_steps.count_per_host`) over the count columns of every
        row, collected as Arrow (~32 bytes a row) by deduplication's hash pass (``inp.scanned``)
        or by one Spark job here, and grouped on the driver: a quarter of what Spark's shuffle
        costs at a million hosts (docs/benchmarks.md). With ``spark.per_row_work: executors``
        Spark groups them per host first, and the driver receives a row per host."""
        scanned = inp.scanned
        if scanned is None and self.config.spark.per_row_work == "executors":
            scanned = count_columns_per_host(inp.counted)  # one row per host, grouped by Spark
        elif scanned is None:
            scanned = inp.counted.select(*count_columns()).toArrow()
        return count_per_host(scanned, inp.removed, inp.batch_ts_ms)

    def _close_windows(
        self, good: DataFrame | pa.Table, counts: Counts, state: PipelineState, watermark: int | None
    ) -> Closing:
        """Step 3 (:func:`tidemark.batch_steps.close_windows`) over the batch's partial sums per
        window and key (:func:`tidemark.aggregate.window_partials`)."""
        partials = window_partials(good, self.config.window, counts.events > 0)
        return close_windows(partials, state, watermark, self.windows)

    def _commit(
        self,
        inp: BatchInput,
        counts: Counts,
        advance: Advance,
        closing: Closing,
        stall: OpenStall,
        state: PipelineState,
        phases: Phases,
    ) -> tuple[BatchSummary, PipelineState]:
        """Step 6: the state for the next batch, then the watermark row that marks the batch
        committed (last: it records the state's Delta versions), then the completeness properties
        of ``windows``, a copy of the committed watermark (:mod:`tidemark.completeness`; timed
        with the marker)."""
        stored = self.outputs.write_state(advance.hosts, closing, state, inp.batch_id)
        phases.lap("write_state")
        summary = summarize(inp.batch_id, counts, advance, closing, state.watermark, stall)
        stages = closing.server.to_json()
        self.outputs.write_marker(
            summary, counts=counts, advance=advance, closing=closing, stall=stall, stored=stored, inp=inp
        )
        self.outputs.publish_completeness(inp.batch_id, advance.watermark)
        phases.lap("write_marker")
        new_state = PipelineState(
            batch_id=inp.batch_id,
            watermark=advance.watermark,
            advanced_at_ms=advance.advanced_at_ms,
            stall_since_ms=stall.since_ms,
            stall_hosts=stall.hosts,
            stages=stages,
            progress=stored.progress,
            open_windows=stored.open_windows,
            revisable=stored.revisable,
            revisable_version=stored.revisable_version,
        )
        return summary, new_state

    def _report(self, summary: BatchSummary) -> None:
        self.summaries.append(summary)
        self.batches_run += 1
        if self.on_batch is not None:
            self.on_batch(summary)
        self.echo(f"[{self.config.pipeline}] {summary.line()}")
