"""The reconciliation report's page: :func:`render_report` turns a :class:`ReportData` (what
:func:`tidemark.report.load_report_data` reads from the tables) into one self-contained HTML
string (what it shows and why: :mod:`tidemark.report`).

The page, its tables, headline numbers and data-quality section are the Jinja2 template
``templates/report.html.j2`` (blocks in ``_report_parts.html.j2``), autoescaped: a host, suite or
pipeline name is text on the page, never markup. The four charts are inline SVG: their geometry
(where each point and bar goes, the axis ticks, the stall shades) is computed here with
:class:`tidemark.charts.Plot`, and their markup comes from the macros of
``templates/_report_charts.svg.j2``. Every plotted mark carries its number in ``data-*``
attributes and a ``<title>`` tooltip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from markupsafe import Markup

from tidemark.charts import (
    BATCH_COLOR,
    LATE_COLOR,
    LEFT,
    STREAM_COLOR,
    Mark,
    Plot,
    environment,
    macros,
    time_axis,
)
from tidemark.timeutil import now_ms

if TYPE_CHECKING:
    from tidemark.alignment import AlignmentSummary, WindowResult
    from tidemark.passes import PassResult
    from tidemark.quality import ValidationOutcome

TEMPLATE = "report.html.j2"
CHARTS = "_report_charts.svg.j2"
WORST_WINDOWS = 10


@dataclass(frozen=True)
class LagPoint:
    batch_id: int
    batch_ts_ms: int
    watermark_ms: int
    lag_ms: int


@dataclass(frozen=True)
class ReportData:
    """What the page shows: the closed windows of the range and their verdict, the watermark's lag
    per batch and the recorded stalls."""

    pipeline: str
    target: float
    windows: list[WindowResult]  # the closed windows in range, oldest first
    summary: AlignmentSummary  # of the windows in range, closed and open
    lag: list[LagPoint]
    stalls: list[tuple[int, int]]  # processing-time [start, end] ms; an open stall ends at the last batch
    watermark_ms: int | None
    state: str | None
    # the recorded reconciliation passes of the range (on time, final: tidemark.passes)
    passes: list[PassResult] = field(default_factory=list)

    @property
    def misaligned(self) -> list[WindowResult]:
        below = set(self.summary.misaligned_ms)
        return [w for w in self.windows if w.window_start_ms in below]

    @property
    def examined(self) -> list[WindowResult]:
        """Closed windows whose unexplained difference was examined record by record."""
        return [w for w in self.windows if w.examined]

    @property
    def not_examined(self) -> list[WindowResult]:
        """Closed windows with something unexplained whose records were not looked for."""
        return [w for w in self.windows if w.records_not_examined]

    def worst(self, n: int = WORST_WINDOWS) -> list[WindowResult]:
        return sorted(self.windows, key=lambda w: (w.alignment or 0.0, -w.abs_diff, w.window_start_ms))[:n]


def _band(n: int, i: int, inner_w: float) -> tuple[float, float]:
    """x of band i of n and the band's width."""
    w = inner_w / max(n, 1)
    return LEFT + i * w, w


def _window_ticks(windows: list[WindowResult], inner_w: float) -> list[tuple[float, str]]:
    """About 12 ``HH:MM`` ticks under the windows' bands."""
    n = len(windows)
    every = max(1, math.ceil(n / 12))
    ticks = []
    for i, w in enumerate(windows):
        if i % every == 0:
            x, bw = _band(n, i, inner_w)
            ticks.append((x + bw / 2, w.iso[11:16]))
    return ticks


def alignment_chart(data: ReportData) -> Markup:
    """Alignment per closed window against the target line."""
    ws = data.windows
    # closed windows: every one is measured
    values = [w.alignment if w.alignment is not None else math.nan for w in ws]
    lo = min([*values, data.target])
    pad = max((1 - lo) * 0.15, 0.0002)
    plot = Plot(
        "chart-alignment", "Alignment per window", lo - pad, 1 + pad / 3, "alignment", lambda v: f"{v:.4f}"
    )
    plot.axes(_window_ticks(ws, plot.inner_w))
    points = []
    for i, (w, value) in enumerate(zip(ws, values, strict=True)):
        x, bw = _band(len(ws), i, plot.inner_w)
        points.append(Mark(x + bw / 2, plot.sy(value), w, value >= data.target))
    return macros(CHARTS).alignment_chart(plot, data.target, plot.sy(data.target), points)


@dataclass(frozen=True)
class Series:
    name: str
    attr: str  # the WindowResult attribute plotted
    colour: str


@dataclass(frozen=True)
class Bar:
    series: str
    colour: str
    window: str
    value: int
    x: float
    y: float
    width: float
    height: float


def _bars_chart(chart_id: str, title: str, data: ReportData, series: list[Series]) -> Markup:
    """Grouped bars per window, one per series."""
    ws = data.windows
    top = max([getattr(w, s.attr) for w in ws for s in series] + [1])
    plot = Plot(chart_id, title, 0, top * 1.1, "events", lambda v: f"{v:,.0f}")
    plot.axes(_window_ticks(ws, plot.inner_w))
    base = plot.sy(0)
    bars = []
    for i, w in enumerate(ws):
        x, bw = _band(len(ws), i, plot.inner_w)
        inner = bw * 0.8 / len(series)
        for j, s in enumerate(series):
            value = getattr(w, s.attr)
            y = plot.sy(value)
            bars.append(
                Bar(
                    s.name, s.colour, w.iso, value, x + bw * 0.1 + j * inner, y, max(inner - 1, 0.5), base - y
                )
            )
    return macros(CHARTS).bars_chart(plot, series, bars)


def counts_chart(data: ReportData) -> Markup:
    return _bars_chart(
        "chart-counts",
        "Stream vs batch events per window",
        data,
        [Series("stream", "stream_events", STREAM_COLOR), Series("batch", "batch_events", BATCH_COLOR)],
    )


def late_chart(data: ReportData) -> Markup:
    return _bars_chart(
        "chart-late", "Late events per window", data, [Series("late", "late_events", LATE_COLOR)]
    )


def lag_chart(data: ReportData) -> Markup:
    """The watermark's lag behind the median host per batch, over processing time; stalls shaded."""
    pts = data.lag
    times = [p.batch_ts_ms for p in pts] + [t for s in data.stalls for t in s]
    x0, x1 = (min(times), max(times)) if times else (0, 1)
    x1 = max(x1, x0 + 1)
    top = max([p.lag_ms for p in pts] + [1000])
    plot = Plot(
        "chart-lag",
        "Watermark lag behind the median host, per batch",
        0,
        top * 1.1 / 1000,
        "lag (s)",
        lambda v: f"{v:g}",
    )
    sx, ticks = time_axis(x0, x1, plot.inner_w, label_chars=8)
    plot.shade_stalls(data.stalls, sx, x0, x1)
    plot.axes(ticks, "batch processing time (UTC)")
    points = [Mark(sx(p.batch_ts_ms), plot.sy(p.lag_ms / 1000), p) for p in pts]
    return macros(CHARTS).lag_chart(plot, points)


def render_report(
    data: ReportData,
    outcome: ValidationOutcome | None = None,
    docs_href: str | None = None,
    worst: int | None = None,
    history_href: str | None = None,
) -> str:
    """The report page as one HTML string (no external resources). ``worst``: how many of the
    worst windows to list (default :data:`WORST_WINDOWS`)."""
    charts = (
        [alignment_chart(data), counts_chart(data), late_chart(data), lag_chart(data)]
        if data.windows or data.lag
        else []
    )
    return (
        environment()
        .get_template(TEMPLATE)
        .render(
            data=data,
            summary=data.summary,
            worst=data.worst() if worst is None else data.worst(worst),
            charts=charts,
            outcome=outcome,
            docs_href=docs_href,
            history_href=history_href,
            generated_ms=now_ms(),
        )
    )
