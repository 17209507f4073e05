"""The steps of one micro-batch, and what each hands the next.

Each step is a function of the batch's rows (already on the driver) and the state the previous
batch committed (:class:`tidemark.pipeline_state.PipelineState`); none writes, none reads a
table::

    count_per_host ─ advance_watermark ─ close_windows ─ (writes) ─ track_stalls ─ (commit)
    Counts           Advance              Closing                    Stalls

The batch function (:class:`tidemark.batch.BatchProcessor`) runs them in this order and writes
what they return (:mod:`tidemark.batch_outputs`). Every value is a frozen dataclass built by
keyword. Times are integer epoch milliseconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tidemark import schemas as S
from tidemark.config import WatermarkConfig
from tidemark.pipeline_state import PipelineState, empty_open_windows
from tidemark.progress import Advanced
from tidemark.records import is_event_col, is_heartbeat_col, is_quarantined_col
from tidemark.revisions import Folded, fold
from tidemark.timeutil import format_instant_ms, humanize_ms, now_ms
from tidemark.watermark import WatermarkUpdate, update_watermark
from tidemark.watermark_stages import PIPELINE_STAGES, WatermarkServer
from tidemark.watermark_status import STALLED, WatermarkStatus, evaluate_status
from tidemark.windows import TumblingWindows

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "COUNTED",
    "PHASES",
    "Advance",
    "BatchInput",
    "BatchSummary",
    "Closing",
    "Counts",
    "EndedStall",
    "OpenStall",
    "Phases",
    "Stalls",
    "advance_watermark",
    "close_windows",
    "count_columns",
    "count_columns_per_host",
    "count_per_host",
    "per_host",
    "sum_partials",
    "summarize",
    "track_stalls",
]

# The per-row 0/1 flags the count step sums per host.
COUNTED = ("events", "heartbeats", "quarantined")


# The phases of a batch, in the order it runs them (a batch has those of its route: dedup_spark,
# dedup_whole (a small batch cut on the driver) or dedup_suspects .. dedup_back, write_* only for
# what it writes). Stable: the benchmarks and
# the metrics (tidemark.metrics, label ``phase``) name them.
PHASES = (
    "load_state",
    "dedup_hashes",
    "dedup_spark",
    "dedup_whole",
    "dedup_suspects",
    "dedup_lookup",
    "dedup_back",
    "parse_dedup_count",
    "host_progress",
    "aggregate_windows",
    "write_quarantine",
    "write_events",
    "write_windows",
    "write_out_of_order",
    "write_state",
    "write_marker",
)


class Phases:
    """Wall time per step of a batch (seconds), for progress output and benchmarks. The names
    are stable (:data:`PHASES`): the benchmarks read them."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self._mark = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.times[name] = self.times.get(name, 0.0) + now - self._mark
        self._mark = now


@dataclass(frozen=True)
class BatchSummary:
    """One batch as the progress line, the benchmarks and the commit marker see it."""

    batch_id: int
    events: int = 0
    heartbeats: int = 0
    late: int = 0
    late_folded: int = 0  # of the late records, those folded into window revisions
    revisions: int = 0  # window rows written with revision >= 1
    quarantined: int = 0
    watermark: int | None = None
    previous: int | None = None
    hosts_total: int = 0
    hosts_reporting: int = 0
    hosts_required: int = 0
    hosts_behind: int = 0
    hosts_lagging: int = 0
    state: str = ""
    windows_closed: int = 0
    open_windows: int = 0
    seconds: float = 0.0
    skipped: bool = False
    retries_dropped: int = 0  # exactly_once: publisher retries deduplication removed
    retries_looked_up: int = 0  # exactly_once: ids looked up in the catalog (events table)
    out_of_order: int = 0  # exactly_once: records behind their host's progress (input out of order)
    batch_ts_ms: int | None = None  # the batch's processing time (None: an empty batch)
    frontier_ms: int | None = None  # the median reporting host's progress
    stall_since_ms: int | None = None  # an open stall: since when the watermark has held
    phases: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def hosts_seen(self) -> int:
        return self.hosts_reporting

    def line(self) -> str:
        if self.skipped:
            return f"batch {self.batch_id}: already committed, replay skipped"
        moved = (
            f" (+{humanize_ms(self.watermark - self.previous)})"
            if self.watermark is not None and self.previous is not None and self.watermark > self.previous
            else ""
        )
        return (
            f"batch {self.batch_id}: {self.events:,} events, {self.late:,} late"
            + (f" ({self.late_folded:,} folded into {self.revisions:,} revisions)" if self.revisions else "")
            + ", "
            f"{self.quarantined:,} quarantined, {self.retries_dropped:,} retries dropped"
            + (f", {self.out_of_order:,} out of order" if self.out_of_order else "")
            + " "
            f"| watermark {format_instant_ms(self.watermark)}"
            f"{moved} {self.state} | hosts {self.hosts_reporting:,}/{self.hosts_total:,} reporting, "
            f"{self.hosts_lagging:,} lagging | {self.windows_closed:,} window rows closed, "
            f"{self.open_windows:,} open | {self.seconds:.1f}s"
        )


# -- what each step hands the next -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BatchInput:
    """A batch's rows after deduplication, and where its counts are read."""

    batch_id: int
    rows: DataFrame  # the batch's unique rows (good and bad), with ingest_ts
    counted: DataFrame  # where per-host counts and quarantined lines are read (see count_per_host)
    removed: pd.DataFrame  # (host, event_time) of the retries deduplication took out on the driver
    # the count columns (count_columns) of every row of ``counted``, when deduplication's hash
    # pass collected them already; None: collected by the count step
    scanned: pa.Table | None
    batch_ts_ms: int
    source_progress: str | None
    # per host, the records kept although behind its progress (tidemark.dedup); None: not counted
    out_of_order: pd.DataFrame | None = None
    # a small batch's unique rows on the driver (tidemark.dedup.DedupResult.local): when set, the
    # events and the bad lines are cut from it, not from ``rows`` and ``counted``
    local: pa.Table | None = None


@dataclass(frozen=True, kw_only=True)
class Counts:
    """Step 1: the batch per host."""

    per_host: pa.Table  # host (NULL: quarantined lines), progress_ms, events, heartbeats, ...
    events: int
    heartbeats: int
    quarantined: int
    upstream_lw: int | None
    batch_ts_ms: int | None  # None for an empty batch: it has no processing time of its own


@dataclass(frozen=True, kw_only=True)
class Advance:
    """Step 2: host progress, the precise watermark and its status."""

    hosts: Advanced  # the host progress after the batch, and what to store of it
    update: WatermarkUpdate
    status: WatermarkStatus
    hosts_total: int
    advanced_at_ms: int | None

    @property
    def watermark(self) -> int | None:
        return self.update.watermark


@dataclass(frozen=True, kw_only=True)
class Closing:
    """Step 3: the batch's late events, the windows that close, those that stay open, and the
    window rows to write (closed now, revised, made final)."""

    late: int
    closing: pd.DataFrame
    remaining: pd.DataFrame
    server: WatermarkServer
    folded: Folded

    @property
    def global_lw(self) -> int | None:
        return self.server.global_low_watermark


@dataclass(frozen=True)
class OpenStall:
    """A stall the next batch inherits: since when the watermark has held (None: no stall) and
    the hosts that lagged when it began."""

    since_ms: int | None = None
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class EndedStall:
    """A stall the batch ended (the watermark moved again): one row of ``stalls``."""

    since_ms: int
    until_ms: int | None  # the processing time of the batch that moved the watermark
    watermark: int | None  # where the watermark held
    hosts: tuple[str, ...]

    @property
    def duration_ms(self) -> int | None:
        return None if self.until_ms is None else self.until_ms - self.since_ms


@dataclass(frozen=True, kw_only=True)
class Stalls:
    """Step 5: the stall the next batch inherits, and the one the batch ended (to write)."""

    open: OpenStall
    ended: EndedStall | None = None


# -- step 1: count per host ---------------------------------------------------------------------


def count_columns() -> list[Column]:
    """Per row, what the count step sums per host: ``host`` and ``progress_ms`` (NULL for a
    quarantined line), the three kinds as 0/1 flags, and the upstream low watermark."""
    from pyspark.sql import functions as F

    ok = ~is_quarantined_col()
    return [
        F.when(ok, F.col("host")).alias("host"),
        F.when(ok, F.col("event_time")).alias("progress_ms"),
        is_event_col().alias("events"),
        is_heartbeat_col().alias("heartbeats"),
        is_quarantined_col().alias("quarantined"),
        F.col("upstream_lw"),
    ]


def count_columns_per_host(frame: DataFrame) -> pa.Table:
    """The count columns (:func:`count_columns`) of ``frame``'s rows grouped per host by Spark
    (partially aggregated before the shuffle), as Arrow: one row per host of the batch instead of
    one per row, for :func:`per_host` to group again (``spark.per_row_work: executors``)."""
    from pyspark.sql import functions as F

    return (
        frame.select(*count_columns())
        .groupBy("host")
        .agg(
            F.max("progress_ms").alias("progress_ms"),
            *(F.sum(F.col(name).cast("long")).alias(name) for name in COUNTED),
            F.max("upstream_lw").alias("upstream_lw"),
        )
        .toArrow()
    )


def per_host(rows: pa.Table, removed: pd.DataFrame) -> pa.Table:
    """One row per host of the batch's count columns (:func:`count_columns`, a row per record or
    already grouped per host: :func:`count_columns_per_host`): the latest progress, the counts,
    the upstream low watermark; each removed copy (``removed``: host, event_time) takes one event
    off its host."""
    table = rows.select(["host", "progress_ms", *COUNTED, "upstream_lw"])
    for name in COUNTED:  # the 0/1 flags, summed as counts
        table = table.set_column(table.schema.get_field_index(name), name, pc.cast(table[name], pa.int64()))
    if len(removed):
        n = len(removed)
        zeros = pa.array(np.zeros(n, np.int64))
        less = pa.table(
            {
                "host": pa.array(removed["host"].to_numpy(dtype=object), pa.string()),
                "progress_ms": pa.nulls(n, pa.int64()),
                "events": pa.array(np.full(n, -1, np.int64)),
                "heartbeats": zeros,
                "quarantined": zeros,
                "upstream_lw": pa.nulls(n, pa.int64()),
            }
        )
        table = pa.concat_tables([table, less.cast(table.schema)])
    grouped = table.group_by("host").aggregate(
        [("progress_ms", "max"), *((name, "sum") for name in COUNTED), ("upstream_lw", "max")]
    )
    return grouped.rename_columns(
        {
            "progress_ms_max": "progress_ms",
            "upstream_lw_max": "upstream_lw",
            **{f"{n}_sum": n for n in COUNTED},
        }
    ).select(["host", "progress_ms", *COUNTED, "upstream_lw"])


def count_per_host(scanned: pa.Table, removed: pd.DataFrame, batch_ts_ms: int) -> Counts:
    """Step 1: per host, the batch's counts and progress, from the count columns of its rows
    (``scanned``) less the copies deduplication removed on the driver (``removed``).

    Events and heartbeats move a host; quarantined lines (clock skew included) never do, and
    group under a NULL host whatever host they name. A removed copy never moves its host: the
    row it copies has the same time."""
    counted = per_host(scanned, removed)
    return Counts(
        per_host=counted,
        events=_total(counted["events"]),
        heartbeats=_total(counted["heartbeats"]),
        quarantined=_total(counted["quarantined"]),
        upstream_lw=pc.max(counted["upstream_lw"]).as_py(),
        batch_ts_ms=batch_ts_ms if counted.num_rows else None,
    )


def _total(column: pa.ChunkedArray) -> int:
    return int(pc.sum(column).as_py() or 0)


# -- step 2: advance the watermark -------------------------------------------------------------


def advance_watermark(
    counts: Counts,
    state: PipelineState,
    batch_id: int,
    *,
    rules: WatermarkConfig,
    expected: frozenset[str] | None,
    propagated: bool,
) -> Advance:
    """Step 2: host progress -> precise watermark (never backwards) -> status. ``expected``: the
    population's hosts (None: every host seen); ``propagated`` (a delta source): the upstream's
    global low watermark is this pipeline's input."""
    moved = counts.per_host.filter(pc.is_valid(counts.per_host["progress_ms"]))
    hosts = state.progress.advance(moved["host"], moved["progress_ms"].to_numpy(), batch_id)
    names, values, silent = hosts.progress.population(expected)
    n_total = len(hosts.progress) if expected is None else len(expected)
    update = update_watermark(
        values,
        rules.precision_fraction,
        state.watermark,
        n_total,
        propagated=propagated,
        upstream_watermark=counts.upstream_lw,
    )
    advanced_at = counts.batch_ts_ms if update.advanced else state.advanced_at_ms
    status = evaluate_status(
        names,
        values,
        rules.precision_fraction,
        update.watermark,
        advanced_at,
        counts.batch_ts_ms if counts.batch_ts_ms is not None else now_ms(),
        rules.lag_threshold,
        rules.stall_after,
        silent=silent,
    )
    return Advance(hosts=hosts, update=update, status=status, hosts_total=n_total, advanced_at_ms=advanced_at)


# -- step 3: close windows ---------------------------------------------------------------------


def close_windows(
    partials: pd.DataFrame | None, state: PipelineState, watermark: int | None, windows: TumblingWindows
) -> Closing:
    """Step 3: add the batch's on-time partial sums to the open windows; those the watermark
    has passed close. ``partials``: the batch's sums per (window_start_ms, key) over every
    window (None: no event); the late ones (closed before the batch, by the previous watermark)
    are taken out here, on the driver: the Spark stage holds no per-batch value (see
    tidemark.stream.build_stream)."""
    batch_partials, late_partials, late = empty_open_windows(), empty_open_windows(), 0
    if partials is not None:
        is_late = windows.is_closed(partials["window_start_ms"], state.watermark)
        late = int(partials.loc[is_late, "events"].sum())
        late_partials = partials[is_late].reset_index(drop=True)
        batch_partials = partials[~is_late].reset_index(drop=True)
    open_windows = sum_partials(state.open_windows, batch_partials)
    closes = windows.is_closed(open_windows["window_start_ms"], watermark)
    remaining = open_windows[~closes]
    folded = fold(state.revisable, late_partials, open_windows[closes], windows, state.watermark, watermark)
    # The watermark server: source -> window operator (held by its oldest open window) ->
    # sink. Every row committed in the batch carries the resulting global low watermark.
    server = WatermarkServer.from_json(PIPELINE_STAGES, state.stages)
    oldest_open = int(remaining["window_start_ms"].min()) if len(remaining) else None
    server.update(watermark, {"window": oldest_open})
    return Closing(late=late, closing=open_windows[closes], remaining=remaining, server=server, folded=folded)


def sum_partials(current: pd.DataFrame, batch: pd.DataFrame) -> pd.DataFrame:
    """The open windows' sums plus the batch's (same window and key: added)."""
    if batch.empty:
        return current.reset_index(drop=True)
    if current.empty:
        return batch[S.OPEN_COLUMNS].reset_index(drop=True)
    both = pd.concat([current[S.OPEN_COLUMNS], batch[S.OPEN_COLUMNS]], ignore_index=True)
    return both.groupby(["window_start_ms", "key"], as_index=False, sort=True).agg(
        events=("events", "sum"), value_sum=("value_sum", "sum")
    )


# -- step 5: track stalls ----------------------------------------------------------------------


def track_stalls(state: PipelineState, advance: Advance, batch_ts_ms: int | None) -> Stalls:
    """Step 5: a stall opens when the watermark is STALLED (since it last advanced) and ends when
    it moves again. Returns the open stall the next batch inherits and the stall the batch
    ended, for the caller to write to ``stalls``."""
    since, hosts = state.stall_since_ms, state.stall_hosts
    ended = None
    if since is not None and advance.update.advanced:
        ended = EndedStall(since_ms=since, until_ms=batch_ts_ms, watermark=state.watermark, hosts=hosts)
        since, hosts = None, ()
    if since is None and advance.status.state == STALLED:
        since, hosts = state.advanced_at_ms, tuple(h.host for h in advance.status.lagging)
    return Stalls(open=OpenStall(since_ms=since, hosts=hosts), ended=ended)


# -- the summary -------------------------------------------------------------------------------


def summarize(
    batch_id: int,
    counts: Counts,
    advance: Advance,
    closing: Closing,
    previous: int | None,
    stall: OpenStall | None = None,
) -> BatchSummary:
    """The batch's summary (``previous``: the watermark before it; ``stall``: the stall the next
    batch inherits)."""
    return BatchSummary(
        batch_id=batch_id,
        events=counts.events,
        heartbeats=counts.heartbeats,
        late=closing.late,
        late_folded=closing.folded.folded_events,
        revisions=closing.folded.revisions,
        quarantined=counts.quarantined,
        watermark=advance.watermark,
        previous=previous,
        hosts_total=advance.hosts_total,
        hosts_reporting=advance.status.hosts_reporting,
        hosts_required=advance.update.required,
        hosts_behind=advance.update.behind,
        hosts_lagging=advance.status.hosts_lagging,
        state=advance.status.state,
        windows_closed=len(closing.closing),
        open_windows=len(closing.remaining),
        batch_ts_ms=counts.batch_ts_ms,
        frontier_ms=advance.status.frontier_ms,
        stall_since_ms=stall.since_ms if stall is not None else None,
    )
