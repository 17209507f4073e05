"""The stream's metrics for Prometheus: one endpoint per running pipeline.

With ``metrics.prometheus_port`` set (:class:`tidemark.config_blocks.MetricsConfig`), the stream
(:func:`tidemark.stream.run_stream`) serves ``http://<metrics.host>:<port>/metrics`` in the
Prometheus text format from a registry of its own (never ``prometheus_client``'s global one), for
as long as it runs. Every sample carries the label ``pipeline``. Two collectors answer a scrape:

* :class:`StreamCollector`: what the batches reported (:meth:`StreamMetrics.observe`, called by
  :class:`tidemark.batch.BatchProcessor` after each committed batch): counters since the process
  started, the batch-duration histogram, and gauges of the newest batch (the watermark, hosts,
  stall, phase times). The lags and the stall's duration are computed at the scrape, against the
  scrape's clock, so they keep growing while no batch runs.
* :class:`ReconcileCollector`: the latest reconciled hour from the ``reconciliation`` table (the
  hourly reconciliation writes it: :func:`tidemark.reconcile.write_report`), read with delta-rs
  (no JVM) at most every ``metrics.reconcile_refresh`` and only when the table has a new version:
  a scrape never waits on Spark.

:data:`METRICS` is the one list of what is exported (name, type, labels, meaning): the collectors
build their families from it and ``docs/operations.md`` lists it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.alignment import CLOSED, alignment_summary
from tidemark.batch_steps import PHASES
from tidemark.config import PipelineConfig
from tidemark.errors import SetupError
from tidemark.metrics_catalog import (
    BATCH_BUCKETS,
    BATCH_COUNTERS,
    GAUGE,
    METRICS,
    SPECS,
    MetricSpec,
)
from tidemark.stream_side import rows_in_range
from tidemark.timeutil import MS_PER_HOUR
from tidemark.watermark_status import STALLED

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from tidemark.batch_steps import BatchSummary

__all__ = [
    "BATCH_BUCKETS",
    "METRICS",
    "MetricSpec",
    "MetricsEndpoint",
    "ReconcileCollector",
    "StreamCollector",
    "StreamMetrics",
    "registry_for",
    "serve",
]


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000.0


def input_rows(summary: BatchSummary) -> int:
    """The rows a batch read: what it stored, quarantined or dropped as a retry."""
    return summary.events + summary.heartbeats + summary.quarantined + summary.retries_dropped


def commit_seconds(phases: dict[str, float]) -> float:
    """A batch's time in its Delta writes: the ``write_*`` phases."""
    return sum(v for k, v in phases.items() if k.startswith("write_"))


class _Families:
    """The families of one scrape, by name, each sample labelled with the pipeline."""

    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline
        self.out: dict[str, Metric] = {}

    def _family(self, name: str) -> Metric:
        if name not in self.out:
            self.out[name] = SPECS[name].family()
        return self.out[name]

    def add(self, name: str, value: float | None, **labels: str) -> None:
        """A sample of a counter or gauge; None: no sample (the family is still exposed)."""
        family = self._family(name)
        if value is not None:
            values = [self.pipeline, *(labels[k] for k in SPECS[name].labels)]
            family.add_metric(values, float(value))  # type: ignore[attr-defined]

    def histogram(self, name: str, buckets: list[tuple[str, float]], total: float) -> None:
        self._family(name).add_metric([self.pipeline], buckets, total)  # type: ignore[attr-defined]


class StreamMetrics:
    """What the batches of one stream process reported, under a lock (the batch thread writes,
    the HTTP server's threads read)."""

    def __init__(self, config: PipelineConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.pipeline = config.pipeline
        self.mode = config.mode
        self.source = config.source.kind
        self.clock = clock
        self.started_at = clock()
        self.run_id = ""
        self._lock = threading.Lock()
        self.counters: dict[str, float] = dict.fromkeys(BATCH_COUNTERS, 0.0)
        self.phase_totals: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.buckets = [0] * (len(BATCH_BUCKETS) + 1)  # the last: +Inf
        self.duration_sum = 0.0
        self.last: BatchSummary | None = None
        self.last_at: float | None = None

    def started(self, run_id: str) -> None:
        """The run identity the stream writes under (label of ``tidemark_stream_info``)."""
        self.run_id = run_id

    def observe(self, summary: BatchSummary) -> None:
        """A committed batch (or a replay skipped): counters, histogram, the newest batch."""
        now = self.clock()
        with self._lock:
            if summary.skipped:
                self.counters["tidemark_replays_skipped_total"] += 1
                return
            c = self.counters
            c["tidemark_batches_total"] += 1
            c["tidemark_input_rows_total"] += input_rows(summary)
            c["tidemark_events_total"] += summary.events
            c["tidemark_heartbeats_total"] += summary.heartbeats
            c["tidemark_late_events_total"] += summary.late
            c["tidemark_late_folded_total"] += summary.late_folded
            c["tidemark_quarantined_total"] += summary.quarantined
            c["tidemark_retries_dropped_total"] += summary.retries_dropped
            c["tidemark_dedup_lookups_total"] += summary.retries_looked_up
            c["tidemark_windows_closed_total"] += summary.windows_closed
            c["tidemark_window_revisions_total"] += summary.revisions
            c["tidemark_delta_commit_seconds_total"] += commit_seconds(summary.phases)
            for phase, seconds in summary.phases.items():
                self.phase_totals[phase] = self.phase_totals.get(phase, 0.0) + seconds
            index = next((i for i, b in enumerate(BATCH_BUCKETS) if summary.seconds <= b), len(BATCH_BUCKETS))
            self.buckets[index] += 1
            self.duration_sum += summary.seconds
            self.last, self.last_at = summary, now

    def collect(self) -> Iterator[Metric]:
        """This process's families, as of now (lags and the stall's duration at the scrape)."""
        now = self.clock()
        with self._lock:
            counters = dict(self.counters)
            phase_totals = dict(self.phase_totals)
            buckets, duration_sum = list(self.buckets), self.duration_sum
            last, last_at = self.last, self.last_at
        f = _Families(self.pipeline)
        f.add("tidemark_stream_start_timestamp_seconds", self.started_at)
        f.add("tidemark_stream_info", 1, run_id=self.run_id, mode=self.mode, source=self.source)
        for name, value in counters.items():
            f.add(name, value)
        for phase, seconds in phase_totals.items():
            f.add("tidemark_batch_phase_seconds_total", seconds, phase=phase)
        cumulative, running = [], 0
        for bound, n in zip((*(str(b) for b in BATCH_BUCKETS), "+Inf"), buckets, strict=True):
            running += n
            cumulative.append((bound, float(running)))
        f.histogram("tidemark_batch_duration_seconds", cumulative, duration_sum)
        self._newest_batch(f, last, last_at, now)
        yield from f.out.values()

    def _newest_batch(self, f: _Families, s: BatchSummary | None, at: float | None, now: float) -> None:
        """The gauges of the newest batch (exposed without samples before the first)."""
        if s is None:
            for spec in METRICS:
                if (
                    spec.kind == GAUGE
                    and spec.name not in f.out
                    and not spec.name.startswith("tidemark_reconcile_")
                ):
                    f.add(spec.name, None)
            return
        f.add("tidemark_last_batch_id", s.batch_id)
        f.add("tidemark_last_batch_timestamp_seconds", at)
        f.add("tidemark_last_batch_duration_seconds", s.seconds)
        for phase, seconds in s.phases.items():
            f.add("tidemark_last_batch_phase_seconds", seconds, phase=phase)
        f.add("tidemark_last_batch_delta_commit_seconds", commit_seconds(s.phases))
        rows = input_rows(s)
        f.add("tidemark_last_batch_input_rows", rows)
        f.add("tidemark_last_batch_input_rows_per_second", rows / s.seconds if s.seconds > 0 else None)
        f.add("tidemark_open_windows", s.open_windows)
        watermark, frontier = _seconds(s.watermark), _seconds(s.frontier_ms)
        f.add("tidemark_watermark_timestamp_seconds", watermark)
        f.add("tidemark_watermark_frontier_timestamp_seconds", frontier)
        f.add("tidemark_watermark_lag_seconds", None if watermark is None else now - watermark)
        f.add(
            "tidemark_watermark_frontier_lag_seconds",
            None if watermark is None or frontier is None else frontier - watermark,
        )
        stalled = s.state == STALLED
        f.add("tidemark_watermark_stalled", 1 if stalled else 0)
        since = _seconds(s.stall_since_ms)
        f.add(
            "tidemark_watermark_stall_duration_seconds",
            max(0.0, now - since) if stalled and since is not None else 0,
        )
        f.add("tidemark_hosts_expected", s.hosts_total)
        f.add("tidemark_hosts_reporting", s.hosts_reporting)
        f.add("tidemark_hosts_lagging", s.hosts_lagging)
        f.add("tidemark_hosts_lagging_allowed", max(0, s.hosts_total - s.hosts_required))


class StreamCollector(Collector):
    """The registry's view of :class:`StreamMetrics`."""

    def __init__(self, metrics: StreamMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self.metrics.collect()


# The reconciliation columns the hour's summary reads (alignment.alignment_summary; the others take
# their legacy values), and when the hour was reconciled.
_HOUR_COLUMNS = [
    "window_start",
    "status",
    "alignment",
    "stream_events",
    "batch_events",
    "late_events",
    "unexplained",
    "ontime_alignment",
    "late_folded",
    "final",
    "reconciled_at",
]


class ReconcileCollector(Collector):
    """The latest reconciled hour (the newest hour with a closed window in ``reconciliation``),
    measured by :func:`tidemark.alignment.alignment_summary` against ``reconcile.target``: the
    same verdict as the Airflow gate. The table is read with delta-rs at most every
    ``refresh_s`` seconds, and again only when its version moved; a failed read keeps the values
    before it and counts ``tidemark_reconcile_read_errors_total``."""

    def __init__(
        self, config: PipelineConfig, refresh_s: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.refresh_s = refresh_s
        self.clock = clock
        self.target = config.reconcile.target
        self.errors = 0
        self.error: str | None = None
        self.reads = 0  # reads of the table's rows (tests: the cache holds)
        self._lock = threading.Lock()
        self._checked: float | None = None
        self._version: int | None = None
        self._values: dict[str, float | None] = {}

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = self.clock()
            if self._checked is None or now - self._checked >= self.refresh_s:
                self._checked = now
                try:
                    self._refresh()
                    self.error = None
                except Exception as exc:  # a scrape must answer: keep the last values, count it
                    self.errors += 1
                    self.error = f"{type(exc).__name__}: {exc}"
            values, errors = dict(self._values), self.errors
        f = _Families(self.config.pipeline)
        f.add("tidemark_reconcile_alignment_target_ratio", self.target)
        for spec in METRICS:
            if spec.name.startswith("tidemark_reconcile_hour_"):
                f.add(spec.name, values.get(spec.name))
        f.add("tidemark_reconcile_read_errors_total", errors)
        yield from f.out.values()

    def _refresh(self) -> None:
        table = T.open_if_exists(self.config.table_path(S.RECONCILIATION))
        if table is None:
            self._version, self._values = None, {}
            return
        version = table.version()
        if version == self._version:
            return
        self._values = self._hour_values(table)
        self._version = version
        self.reads += 1

    def _hour_values(self, table: Any) -> dict[str, float | None]:
        import pyarrow.compute as pc

        starts = table.to_pyarrow_dataset().to_table(
            columns=["window_start"], filter=pc.field("status") == CLOSED
        )
        newest = pc.max(starts["window_start"]).cast("int64").as_py() if starts.num_rows else None
        if newest is None:
            return {}
        hour = newest // 1000 // MS_PER_HOUR * MS_PER_HOUR
        rows = rows_in_range(
            self.config.table_path(S.RECONCILIATION), _HOUR_COLUMNS, hour, hour + MS_PER_HOUR
        )
        if rows is None or rows.empty:
            return {}
        summary = alignment_summary(rows, self.target)
        reconciled = T.epoch_ms(rows["reconciled_at"]).max() if "reconciled_at" in rows else None
        return {
            "tidemark_reconcile_hour_end_timestamp_seconds": (hour + MS_PER_HOUR) / 1000,
            "tidemark_reconcile_hour_windows": summary.closed,
            "tidemark_reconcile_hour_open_windows": summary.open,
            "tidemark_reconcile_hour_misaligned_windows": len(summary.misaligned_ms),
            "tidemark_reconcile_hour_aligned_ratio": summary.share_aligned,
            "tidemark_reconcile_hour_worst_alignment_ratio": summary.worst_alignment,
            "tidemark_reconcile_hour_unexplained": summary.unexplained,
            "tidemark_reconcile_hour_reconciled_timestamp_seconds": (
                None if reconciled is None or reconciled != reconciled else float(reconciled) / 1000
            ),
        }


def registry_for(metrics: StreamMetrics, config: PipelineConfig) -> CollectorRegistry:
    """A registry of its own (not prometheus_client's global one) with both collectors."""
    registry = CollectorRegistry()
    registry.register(StreamCollector(metrics))
    registry.register(ReconcileCollector(config, config.metrics.reconcile_refresh / 1000))
    return registry


@dataclass
class MetricsEndpoint:
    """A running endpoint: the metrics the batches update, and the server (:meth:`close`)."""

    metrics: StreamMetrics
    registry: CollectorRegistry
    url: str
    server: WSGIServer
    thread: threading.Thread

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(config: PipelineConfig, echo: Callable[[str], object] = print) -> MetricsEndpoint:
    """Serve the pipeline's metrics on ``metrics.host:metrics.prometheus_port`` (its threads are
    daemons; :meth:`MetricsEndpoint.close` stops them). A port that cannot be listened on is a
    :class:`~tidemark.errors.SetupError` naming it."""
    from prometheus_client import start_http_server

    port = config.metrics.prometheus_port
    if port is None:
        raise SetupError(f"config {config.pipeline}: metrics.prometheus_port is not set")
    metrics = StreamMetrics(config)
    registry = registry_for(metrics, config)
    host = config.metrics.host
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise SetupError(
            f"metrics: cannot listen on {host}:{port} ({exc.strerror or exc}): another process holds the "
            "port (each pipeline needs its own metrics.prometheus_port), or the address is not this host's"
        ) from None
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/metrics"
    echo(f"[{config.pipeline}] metrics on {url}")
    return MetricsEndpoint(metrics=metrics, registry=registry, url=url, server=server, thread=thread)
