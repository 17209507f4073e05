"""What the stream's Prometheus endpoint exports (:mod:`tidemark.metrics`): :data:`METRICS`, the
one list of each metric's name, type, labels and meaning. The collectors build their families
from it and ``docs/operations.md`` lists it.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

# Batch wall time buckets (seconds): a 10 s trigger's batches are ~1-10 s; minutes mean trouble.
BATCH_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric: its name as exposed (a counter's with ``_total``), its Prometheus
    type, its labels besides ``pipeline``, and what it means."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()

    def family(self) -> Metric:
        """An empty family of this metric, labelled ``pipeline`` and its own labels."""
        labels = ["pipeline", *self.labels]
        if self.kind == COUNTER:
            return CounterMetricFamily(self.name.removesuffix("_total"), self.help, labels=labels)
        if self.kind == HISTOGRAM:
            return HistogramMetricFamily(self.name, self.help, labels=labels)
        return GaugeMetricFamily(self.name, self.help, labels=labels)


_M = MetricSpec
METRICS: tuple[MetricSpec, ...] = (
    # the stream process
    _M(
        "tidemark_stream_start_timestamp_seconds",
        GAUGE,
        "When this stream process started (a change is a restart)",
    ),
    _M(
        "tidemark_stream_info",
        GAUGE,
        "Always 1; the run identity, mode and source kind as labels",
        ("run_id", "mode", "source"),
    ),
    # batches
    _M("tidemark_batches_total", COUNTER, "Micro-batches committed since the process started"),
    _M(
        "tidemark_replays_skipped_total", COUNTER, "Batches skipped whole: already committed before a restart"
    ),
    _M("tidemark_last_batch_id", GAUGE, "The newest committed batch's id (the watermarks table's batch_id)"),
    _M("tidemark_last_batch_timestamp_seconds", GAUGE, "When the newest batch was committed (wall clock)"),
    _M("tidemark_last_batch_duration_seconds", GAUGE, "The newest batch's wall time"),
    _M("tidemark_last_batch_phase_seconds", GAUGE, "The newest batch's wall time per phase", ("phase",)),
    _M(
        "tidemark_last_batch_delta_commit_seconds",
        GAUGE,
        "The newest batch's time in its Delta writes (the write_* phases)",
    ),
    _M(
        "tidemark_last_batch_input_rows",
        GAUGE,
        "Rows the newest batch read: events, heartbeats, quarantined lines, dropped retries",
    ),
    _M(
        "tidemark_last_batch_input_rows_per_second", GAUGE, "The newest batch's input rows over its wall time"
    ),
    _M("tidemark_batch_duration_seconds", HISTOGRAM, "Batch wall time"),
    _M(
        "tidemark_batch_phase_seconds_total",
        COUNTER,
        "Wall time spent per phase, summed over batches",
        ("phase",),
    ),
    _M(
        "tidemark_delta_commit_seconds_total",
        COUNTER,
        "Wall time spent in Delta writes (the write_* phases), summed over batches",
    ),
    # records
    _M(
        "tidemark_input_rows_total",
        COUNTER,
        "Rows read: events, heartbeats, quarantined lines and dropped retries",
    ),
    _M("tidemark_events_total", COUNTER, "Unique valid events stored in the events table"),
    _M("tidemark_heartbeats_total", COUNTER, "Heartbeat records read"),
    _M(
        "tidemark_late_events_total",
        COUNTER,
        "Events whose window had already closed (stored in late_events)",
    ),
    _M(
        "tidemark_late_folded_total",
        COUNTER,
        "Late events folded into a window revision (within the allowed lateness)",
    ),
    _M("tidemark_quarantined_total", COUNTER, "Lines quarantined (they break the record contract)"),
    _M(
        "tidemark_retries_dropped_total", COUNTER, "Publisher retries dropped by deduplication (exactly_once)"
    ),
    _M(
        "tidemark_dedup_lookups_total",
        COUNTER,
        "Dedup candidates looked up in the events table (exactly_once)",
    ),
    _M("tidemark_windows_closed_total", COUNTER, "Window rows closed by the watermark (revision 0)"),
    _M(
        "tidemark_window_revisions_total",
        COUNTER,
        "Window rows written with revision 1 or more (late folded, final)",
    ),
    _M("tidemark_open_windows", GAUGE, "Open window rows (window and key) after the newest batch"),
    # the watermark
    _M(
        "tidemark_watermark_timestamp_seconds",
        GAUGE,
        "The precise watermark (event time); absent while WAITING",
    ),
    _M(
        "tidemark_watermark_frontier_timestamp_seconds",
        GAUGE,
        "The median reporting host's progress (event time)",
    ),
    _M("tidemark_watermark_lag_seconds", GAUGE, "Processing time (at the scrape) minus the watermark"),
    _M("tidemark_watermark_frontier_lag_seconds", GAUGE, "The median host's progress minus the watermark"),
    _M("tidemark_watermark_stalled", GAUGE, "1 while the watermark is STALLED, else 0"),
    _M(
        "tidemark_watermark_stall_duration_seconds",
        GAUGE,
        "How long the open stall has lasted (at the scrape); 0 without one",
    ),
    # hosts
    _M("tidemark_hosts_expected", GAUGE, "Hosts in the population (the hosts file, or every host seen)"),
    _M("tidemark_hosts_reporting", GAUGE, "Hosts of the population that have sent something"),
    _M(
        "tidemark_hosts_lagging",
        GAUGE,
        "Hosts more than watermark.lag_threshold behind the median host, or silent",
    ),
    _M(
        "tidemark_hosts_lagging_allowed",
        GAUGE,
        "Lagging hosts the watermark tolerates: floor((1 - precision) * expected)",
    ),
    # reconciliation: the latest reconciled hour
    _M("tidemark_reconcile_hour_end_timestamp_seconds", GAUGE, "The end of the latest reconciled hour"),
    _M("tidemark_reconcile_hour_windows", GAUGE, "Closed windows reconciled in that hour"),
    _M(
        "tidemark_reconcile_hour_open_windows",
        GAUGE,
        "Windows of that hour still open when it was reconciled",
    ),
    _M(
        "tidemark_reconcile_hour_misaligned_windows",
        GAUGE,
        "Closed windows of that hour below the alignment target",
    ),
    _M(
        "tidemark_reconcile_hour_aligned_ratio",
        GAUGE,
        "Share of that hour's closed windows at or above the target",
    ),
    _M(
        "tidemark_reconcile_hour_worst_alignment_ratio",
        GAUGE,
        "The lowest alignment of a closed window of that hour",
    ),
    _M(
        "tidemark_reconcile_hour_unexplained",
        GAUGE,
        "Records of that hour the stream lacks or holds twice beyond late ones (sum of abs(unexplained))",
    ),
    _M("tidemark_reconcile_hour_reconciled_timestamp_seconds", GAUGE, "When that hour was reconciled"),
    _M("tidemark_reconcile_alignment_target_ratio", GAUGE, "The alignment target (reconcile.target)"),
    _M(
        "tidemark_reconcile_read_errors_total",
        COUNTER,
        "Failed reads of the reconciliation table (the previous values are kept)",
    ),
)
SPECS = {m.name: m for m in METRICS}
# The stream's counters without a label of their own (StreamMetrics.observe adds to them).
BATCH_COUNTERS = tuple(
    m.name
    for m in METRICS
    if m.kind == COUNTER and not m.labels and not m.name.startswith("tidemark_reconcile_")
)
