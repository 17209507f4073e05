"""Every table of a pipeline: its name, its columns and, for the tables the driver writes, its Arrow
schema. Pure: pyarrow only, no Spark.

Layout under ``<warehouse>/<pipeline>/``:

============== ==================================================================================
events         every unique valid record (late ones too), with the batch it arrived in
windows        closed windows: one row per (window, key) and revision (tidemark.revisions):
               revision 0 when it closes, one more per batch that folds late records in,
               ``is_final`` on the one the watermark made final (end + allowed lateness)
late_events    records whose window was already closed when they arrived; ``folded``: the
               record revised its window (within allowed lateness), else it is counted here only
quarantine     one row per bad line: raw text, reason, batch id, source
watermarks     one row per committed batch: the precise watermark and host counts. Written
               last in a batch, so a row for batch N means every write of N is committed.
stalls         one row per ended stall: when, how long, the watermark held, the lagging hosts
out_of_order   per batch and host, the records behind the host's own progress (its files or
               partition read out of order; exactly_once): how many, the earliest, the progress
reconciliation per-window stream/batch comparison written by ``tidemark reconcile``
reconciliation_passes
               one row per reconciled range and pass (on time: its windows closed; final:
               they are final), written by ``tidemark reconcile --pass`` (tidemark.passes)
_state/*       host progress (a log of the hosts each batch moved, replaced by a snapshot when
               long: tidemark.progress), open-window partial sums (overwritten every batch) and
               the closed windows that may still be revised (revisable_windows);
               the watermark row records the Delta version of each so a restart reads exactly
               the state that batch N-1 left.
_reconcile/*   the landing index: the event-time span of each landing file the recompute has
               read, so a recompute skips files that cannot hold its range (tidemark.pruning)
============== ==================================================================================

Timestamps the driver writes are UTC milliseconds (:data:`TS_MS`); Spark writes microseconds, and
the ``reconciliation`` table, written by delta-rs, uses Spark's (:data:`TS_US`).
"""

from __future__ import annotations

import pyarrow as pa

from tidemark.progress import HOST_SCHEMA as HOST_SCHEMA  # a log: a row per host a batch moved
from tidemark.records import EVENT_FIELDS

EVENTS = "events"
WINDOWS = "windows"
LATE_EVENTS = "late_events"
QUARANTINE = "quarantine"
WATERMARKS = "watermarks"
RECONCILIATION = "reconciliation"
RECONCILIATION_PASSES = "reconciliation_passes"
STALLS = "stalls"
OUT_OF_ORDER = "out_of_order"
HOST_PROGRESS = "_state/host_progress"
OPEN_WINDOWS = "_state/open_windows"
REVISABLE_WINDOWS = "_state/revisable_windows"
LANDING_INDEX = "_reconcile/landing_index"
# The run identity's file, in the checkpoint and beside the tables (tidemark.identity).
IDENTITY_FILE = "_tidemark.json"

TS_MS = pa.timestamp("ms", tz="UTC")
TS_US = pa.timestamp("us", tz="UTC")  # Spark's timestamps: UTC microseconds

# Columns of ``events`` and ``late_events``, in table order.
EVENT_COLUMNS = [
    *EVENT_FIELDS,
    "window_start",
    "is_late",
    "batch_id",
    "ingest_ts",
    "source",
    "low_watermark",
    "arrival_ms",  # the line's arrival (file modification time, Kafka timestamp): retries' horizon
]
LATE_COLUMNS = [
    *EVENT_FIELDS,
    "window_start",
    "window_end",
    "watermark_at_arrival",
    "folded",
    "batch_id",
    "ingest_ts",
    "source",
    "low_watermark",
]

# Delta collects min/max/null-count statistics for these columns of ``events`` only (by default
# it takes the first 32): the ones readers filter on (batch, event time, window, arrival, host).
# The dedup lookup prunes by event time; its arrival bound (``arrival_ms``) only filters rows.
# Statistics for every column cost a quarter of the write (docs/benchmarks.md). Set when the table
# is created; an older table keeps its own (``ALTER TABLE ... SET TBLPROPERTIES``).
EVENTS_STATS_COLUMNS = "batch_id,event_time,window_start,ingest_ts,host"
CREATE_OPTIONS = {EVENTS: {"delta.dataSkippingStatsColumns": EVENTS_STATS_COLUMNS}}

# The stream's state between batches (tidemark.batch).
OPEN_COLUMNS = ["window_start_ms", "key", "events", "value_sum"]
OPEN_SCHEMA = pa.schema(
    [
        ("window_start_ms", pa.int64()),
        ("key", pa.string()),
        ("events", pa.int64()),
        ("value_sum", pa.float64()),
    ]
)
# Closed windows that a late record may still revise (tidemark.revisions): accumulated totals,
# the last revision written and how many of the events came late.
REVISABLE_SCHEMA = pa.schema([*OPEN_SCHEMA, ("revision", pa.int64()), ("late_events", pa.int64())])
WINDOW_SCHEMA = pa.schema(
    [
        ("window_start", TS_MS),
        ("window_end", TS_MS),
        ("key", pa.string()),
        ("events", pa.int64()),
        ("value_sum", pa.float64()),
        ("batch_id", pa.int64()),
        ("low_watermark", TS_MS),
        ("committed_at", TS_MS),
        ("revision", pa.int64()),  # 0 when the window closes, +1 per revision
        ("is_final", pa.bool_()),  # the watermark passed window end + allowed lateness
        ("late_events", pa.int64()),  # of ``events``, how many came late (folded in)
    ]
)
MARKER_SCHEMA = pa.schema(
    [
        ("batch_id", pa.int64()),
        ("run_id", pa.string()),
        ("watermark_ms", pa.int64()),
        ("watermark", TS_MS),
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
        ("revisable_version", pa.int64()),  # _state/revisable_windows; NULL: none yet
        ("late_folded", pa.int64()),  # late records the batch folded into window revisions
        ("revisions", pa.int64()),  # window rows the batch wrote with revision >= 1
        ("global_lw_ms", pa.int64()),
        ("stages", pa.string()),
        ("source_progress", pa.string()),  # where the batch's input ended (tidemark.checkpoint)
        ("committed_at_ms", pa.int64()),
        ("committed_at", TS_MS),
    ]
)
STALL_SCHEMA = pa.schema(
    [
        ("started_at", TS_MS),
        ("ended_at", TS_MS),
        ("duration_ms", pa.int64()),
        ("watermark", TS_MS),
        ("hosts_count", pa.int64()),
        ("hosts", pa.list_(pa.string())),
        ("closed_batch_id", pa.int64()),
    ]
)
# Written by a batch that read records behind their host's progress (tidemark.dedup finds them).
OUT_OF_ORDER_SCHEMA = pa.schema(
    [
        ("host", pa.string()),
        ("batch_id", pa.int64()),
        ("records", pa.int64()),
        ("earliest_ms", pa.int64()),  # the earliest event time among them
        ("progress_ms", pa.int64()),  # the host's progress before the batch
        ("ingest_ts", TS_MS),
    ]
)
# The reconciliation table's schema and columns are its row type's: tidemark.alignment
# (RECONCILIATION_SCHEMA, WindowResult); reconciliation_passes' are tidemark.passes' (PassResult).

# One row per landing file a recompute indexed: the file as it was listed (path as Spark names it,
# size, modification time) and the event times of its lines (tidemark.pruning.FileSpan).
LANDING_INDEX_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("modified_ms", pa.int64()),
        ("max_record_bytes", pa.int64()),
        ("lines", pa.int64()),
        ("min_event_ms", pa.int64()),
        ("max_event_ms", pa.int64()),
        ("indexed_at", TS_MS),
    ]
)
