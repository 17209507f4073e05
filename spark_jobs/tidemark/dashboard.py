"""The live dashboard of a pipeline: what the Airflow Tidemark view draws, read without Spark.

Three pictures per pipeline, each an inline SVG whose marks carry their numbers in ``data-*``
attributes (hover for a ``<title>``; tests compare them with the Delta tables):

* **watermark vs time** (``svg.watermark-plot``): the committed watermark of each batch over the
  batch's processing time, the recorded stalls shaded (``rect.stall``);
* **host lag** (``svg.lag-histogram``): how many hosts are how far behind the median host (the
  frontier), in fixed bins, with the lagging hosts named in a table beside it;
* **alignment, last 24 hours** (``svg.alignment-plot``): stream/batch alignment per reconciled
  closed window against the ``reconcile.target`` line.

Everything comes from the committed tables through delta-rs: ``watermarks`` (one row per batch),
``stalls``, the host-progress version the newest marker points at, and ``reconciliation``. The
pictures' geometry is computed here (:class:`tidemark.charts.Plot`); their markup comes from the
autoescaped macros of ``templates/dashboard.svg.j2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.charts import LEFT, Mark, Plot, macros, stall_spans, time_axis
from tidemark.timeutil import format_instant_ms, now_ms

if TYPE_CHECKING:
    import pandas as pd
    from markupsafe import Markup

    from tidemark.config import PipelineConfig
    from tidemark.status import PipelineStatus

HOUR_MS = 3_600_000
HISTORY_MS = 24 * HOUR_MS
MAX_POINTS = 720  # watermark marks drawn at most (evenly thinned, the newest always kept)
LAG_EDGES_MS = (0, 10_000, 30_000, 60_000, 120_000, 300_000, 900_000, HOUR_MS)
LINE_COLOR = "#2b6cb0"
TEMPLATE = "dashboard.svg.j2"


@dataclass(frozen=True)
class WatermarkPoint:
    batch_id: int
    batch_ts_ms: int
    watermark_ms: int
    committed_ms: int | None


@dataclass(frozen=True)
class LagBin:
    lo_ms: int
    hi_ms: int | None  # None: no upper bound
    hosts: int

    @property
    def label(self) -> str:
        """``< 10 s``, ``10 s–30 s``, ``1 min–2 min``, ``≥ 1 h``."""
        if self.hi_ms is None:
            return f"≥ {_short(self.lo_ms)}"
        return f"< {_short(self.hi_ms)}" if self.lo_ms == 0 else f"{_short(self.lo_ms)}–{_short(self.hi_ms)}"


def _short(ms: int) -> str:
    if ms and ms % HOUR_MS == 0:
        return f"{ms // HOUR_MS} h"
    if ms and ms % 60_000 == 0:
        return f"{ms // 60_000} min"
    return f"{ms / 1000:g} s"


@dataclass(frozen=True)
class AlignmentPoint:
    window_start_ms: int
    alignment: float
    aligned: bool


@dataclass(frozen=True)
class Dashboard:
    pipeline: str
    target: float
    status: PipelineStatus | None
    watermarks: list[WatermarkPoint]
    stalls: list[tuple[int, int]]  # processing-time [start, end]; an open stall ends at the last batch
    lag_bins: list[LagBin]
    never_reported: int
    alignment: list[AlignmentPoint]


def _present(value) -> bool:
    return value is not None and value == value  # None and NaN are missing


def watermark_points(
    marks: pd.DataFrame | None, since_ms: int, limit: int = MAX_POINTS
) -> list[WatermarkPoint]:
    """The committed watermark per batch whose processing time is at or after ``since_ms``, thinned
    evenly to at most ``limit`` points (the newest is always kept)."""
    if marks is None or marks.empty:
        return []
    rows = marks[marks["watermark_ms"].notna() & marks["batch_ts_ms"].notna()]
    rows = rows[rows["batch_ts_ms"] >= since_ms].sort_values("batch_id")
    if len(rows) > limit:
        keep = np.unique(np.linspace(0, len(rows) - 1, limit).round().astype(int))
        rows = rows.iloc[keep]
    return [
        WatermarkPoint(
            int(r.batch_id),
            int(r.batch_ts_ms),
            int(r.watermark_ms),
            int(r.committed_at_ms) if _present(r.committed_at_ms) else None,
        )
        for r in rows.itertuples()
    ]


def lag_histogram(
    progress_ms: np.ndarray, frontier_ms: int | None, edges: tuple[int, ...] = LAG_EDGES_MS
) -> list[LagBin]:
    """How many hosts are how far behind the frontier: bins ``[edge_i, edge_i+1)`` and a last open
    bin; hosts ahead of the frontier count as 0 behind."""
    values = np.asarray(progress_ms, dtype="int64")
    if frontier_ms is None or values.size == 0:
        return [LagBin(lo, hi, 0) for lo, hi in zip(edges, (*edges[1:], None), strict=True)]
    lags = np.maximum(frontier_ms - values, 0)
    index = np.searchsorted(np.asarray(edges[1:], dtype="int64"), lags, side="right")
    counts = np.bincount(index, minlength=len(edges))
    return [
        LagBin(lo, hi, int(n)) for lo, hi, n in zip(edges, (*edges[1:], None), counts.tolist(), strict=True)
    ]


def alignment_points(rec: pd.DataFrame | None, target: float, hours: int = 24) -> list[AlignmentPoint]:
    """The closed reconciled windows of the last ``hours`` before the newest one."""
    if rec is None or rec.empty:
        return []
    closed = rec[rec["status"] == "closed"]
    if closed.empty:
        return []
    starts = T.epoch_ms(closed["window_start"]).astype("int64")
    closed = closed.assign(window_start_ms=starts)
    closed = closed[closed["window_start_ms"] > int(starts.max()) - hours * HOUR_MS]
    closed = closed.sort_values("window_start_ms")
    return [
        AlignmentPoint(int(r.window_start_ms), float(r.alignment), float(r.alignment) >= target)
        for r in closed.itertuples()
        if _present(r.alignment)
    ]


def load_dashboard(config: PipelineConfig, now: int | None = None) -> Dashboard:
    """Read everything the dashboard draws (delta-rs only; tens of milliseconds for small tables)."""

    from tidemark.hosts import read_hosts_file
    from tidemark.status import host_progress, read_status

    now = now if now is not None else now_ms()
    path = config.table_path(S.WATERMARKS)
    arrow = T.open_table(path).to_pyarrow_table() if T.table_exists(path) else None  # read once
    marks = arrow.to_pandas() if arrow is not None else None
    marker = T.newest_row(arrow) if arrow is not None else None
    hosts, progress = host_progress(config, marker)
    status = (
        read_status(config, now, marker=marker, hosts_progress=(hosts, progress))
        if marker is not None
        else None
    )
    if config.watermark.hosts_file:
        expected = set(read_hosts_file(config.watermark.hosts_file))
        keep = np.fromiter((h in expected for h in hosts), dtype=bool, count=len(hosts))
        progress = progress[keep]
    frontier = status.status.frontier_ms if status is not None else None
    never = status.status.hosts_total - status.status.hosts_reporting if status is not None else 0
    since = (int(marks["batch_ts_ms"].max()) if marks is not None and not marks.empty else now) - HISTORY_MS
    target = float(config.reconcile.target)
    return Dashboard(
        pipeline=config.pipeline,
        target=target,
        status=status,
        watermarks=watermark_points(marks, since),
        stalls=[(s, e) for s, e in stall_spans(marks, T.read_if_exists(config, S.STALLS)) if e >= since],
        lag_bins=lag_histogram(progress, frontier),
        never_reported=max(0, int(never)),
        alignment=alignment_points(T.read_if_exists(config, S.RECONCILIATION), target),
    )


# ---------------------------------------------------------------------------------------------
# Pictures
# ---------------------------------------------------------------------------------------------


def watermark_plot(d: Dashboard) -> Markup:
    pts = d.watermarks
    if not pts:
        return macros(TEMPLATE).empty("No committed batch yet.")
    times = [p.batch_ts_ms for p in pts] + [t for span in d.stalls for t in span]
    x0, x1 = min(times), max(max(times), min(times) + 1)
    y0, y1 = min(p.watermark_ms for p in pts), max(p.watermark_ms for p in pts)
    pad = max((y1 - y0) * 0.08, 30_000)
    plot = Plot(
        "plot-watermark",
        "Watermark (event time) over processing time, stalls shaded",
        y0 - pad,
        y1 + pad,
        "watermark (UTC)",
        lambda v: format_instant_ms(int(v))[11:19],
        svg_class="watermark-plot",
    )
    sx, ticks = time_axis(x0, x1, plot.inner_w)
    plot.shade_stalls(d.stalls, sx, x0, x1)
    plot.axes(ticks, "batch processing time (UTC)", y_time=True)  # round instants, as on x
    # a step line: the watermark holds its value until the next batch moves it
    steps = []
    for prev, cur in pairwise(pts):
        steps += [
            Mark(sx(prev.batch_ts_ms), plot.sy(prev.watermark_ms)),
            Mark(sx(cur.batch_ts_ms), plot.sy(prev.watermark_ms)),
        ]
    steps.append(Mark(sx(pts[-1].batch_ts_ms), plot.sy(pts[-1].watermark_ms)))
    marks = [Mark(sx(p.batch_ts_ms), plot.sy(p.watermark_ms), p) for p in pts]
    return macros(TEMPLATE).watermark_plot(plot, steps, marks, LINE_COLOR)


@dataclass(frozen=True)
class HistogramColumn:
    """One bar of the lag histogram: a bin, or the hosts that never reported (``bin`` None)."""

    label: str
    bin: LagBin | None
    hosts: int
    bad: bool
    x: float
    centre: float
    width: float
    y: float
    height: float


def lag_histogram_plot(d: Dashboard) -> Markup:
    bins = d.lag_bins
    top = max([b.hosts for b in bins] + [d.never_reported, 1])
    plot = Plot(
        "plot-lag",
        "Hosts by how far they are behind the median host",
        0,
        top * 1.1,
        "hosts",
        lambda v: f"{v:,.0f}" if v == int(v) else "",
        svg_class="lag-histogram",
    )
    columns = [(b.label, b) for b in bins] + ([("never reported", None)] if d.never_reported else [])
    width = plot.inner_w / len(columns)
    plot.axes(
        [(LEFT + width * (i + 0.5), label) for i, (label, _) in enumerate(columns)],
        "lag behind the median host",
    )
    base = plot.sy(0)
    drawn = []
    for i, (label, b) in enumerate(columns):
        hosts = b.hosts if b is not None else d.never_reported
        y = plot.sy(hosts)
        drawn.append(
            HistogramColumn(
                label=label,
                bin=b,
                hosts=hosts,
                bad=b is None or b.lo_ms >= 60_000,
                x=LEFT + width * i + width * 0.1,
                centre=LEFT + width * (i + 0.5),
                width=width * 0.8,
                y=y,
                height=base - y,
            )
        )
    return macros(TEMPLATE).lag_histogram_plot(plot, drawn, LINE_COLOR)


def alignment_plot(d: Dashboard) -> Markup:
    pts = d.alignment
    if not pts:
        return macros(TEMPLATE).empty("No reconciled window in the last 24 hours.")
    lo = min([p.alignment for p in pts] + [d.target])
    pad = max((1 - lo) * 0.15, 0.0002)
    plot = Plot(
        "plot-alignment",
        "Alignment per window, last 24 hours of reconciled windows",
        lo - pad,
        1 + pad / 3,
        "alignment",
        lambda v: f"{v:.4f}",
        svg_class="alignment-plot",
    )
    x0, x1 = pts[0].window_start_ms, max(pts[-1].window_start_ms, pts[0].window_start_ms + 60_000)
    sx, ticks = time_axis(x0, x1, plot.inner_w)
    plot.axes(ticks)
    marks = [Mark(sx(p.window_start_ms), plot.sy(p.alignment), p, p.aligned) for p in pts]
    radius = 3.5 if len(pts) <= 120 else 1.8
    return macros(TEMPLATE).alignment_plot(plot, d.target, plot.sy(d.target), marks, radius)
