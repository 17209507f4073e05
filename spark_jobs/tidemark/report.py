"""The reconciliation report: one self-contained HTML page per pipeline, for people.

**What it shows**, from the pipeline's Delta tables (read with delta-rs: no JVM, so the Airflow DAG
and ``tidemark report`` call it without Spark):

1. alignment per closed window over time against the ``reconcile.target`` line (99.9% by default);
2. stream vs batch events per window;
3. late events per window;
4. the watermark's event-time lag behind the median host per batch over processing time, with
   recorded stalls shaded;
5. the worst windows with their explanation: the late records by host (``late_events``), and any
   unexplained difference (lost or double-counted records, which late records cannot explain);

plus the headline numbers and, when given, the data-quality verdict and a link to the Data Docs.

**Why self-contained.** The page is mailed, attached to DAG runs and opened from the Airflow UI,
often without network access: plots are inline SVG drawn here (no plotting dependency, no
JavaScript, no CDN), styles are inline. Every plotted mark carries its number in ``data-*``
attributes and a ``<title>`` tooltip, so a reader can hover for the value and a test can check the
picture against the tables.

**Where reports live.** :func:`write_report` without ``out`` publishes the page at
:func:`report_path`, ``<warehouse>/<pipeline>/_quality/reconciliation.html``, beside the pipeline's
Data Docs (``tidemark.quality``). :func:`report_locations` lists the published pages that exist,
by a one-segment label, for the Airflow Tidemark view (``/reports/{pipeline}/{label}``).
"""

from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import ConfigError, PipelineConfig
from tidemark.timeutil import format_instant_ms, humanize_ms, now_ms

if TYPE_CHECKING:
    from tidemark.quality import ValidationOutcome

WORST_WINDOWS = 10
HOSTS_PER_EXPLANATION = 5
REPORT_FILE = "reconciliation.html"
HOURS_DIR = "hours"  # one published report per reconciled range: hours/<start>--<end>.html


def report_path(config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the pipeline's reconciliation report is published: ``<quality root>/reconciliation.html``
    (``<warehouse>/<pipeline>/_quality`` unless ``quality_dir`` is given)."""
    from tidemark.quality import quality_root

    return quality_root(config, quality_dir) / REPORT_FILE


def report_locations(
    config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None
) -> dict[str, Path]:
    """The pipeline's published report pages that exist, by label (no Spark, no GX import).

    ``reconciliation``: the report :func:`write_report` publishes; ``data-docs``: the Great
    Expectations Data Docs index; ``quality-history``: the offline page of every stored validation.
    Labels are single URL path segments (the Airflow view serves ``/reports/{pipeline}/{label}``);
    every value is an HTML file.
    """
    from tidemark.quality import data_docs_index, docs_history_page

    candidates = {
        "reconciliation": report_path(config, quality_dir),
        "data-docs": data_docs_index(config, quality_dir),
        "quality-history": docs_history_page(config, quality_dir),
    }
    return {label: path for label, path in candidates.items() if path.is_file()}


def _compact(ms: int) -> str:
    """``2025-11-22T10:00:00.000Z`` -> ``20251122T1000Z`` (seconds kept when not zero): a file name
    without ':' that sorts by time."""
    iso = format_instant_ms(ms)
    hhmm = iso[11:13] + iso[14:16] + ("" if iso[17:23] == "00.000" else iso[17:19])
    return f"{iso[0:4]}{iso[5:7]}{iso[8:10]}T{hhmm}Z"


def range_report_path(
    config: PipelineConfig, start_ms: int, end_ms: int, quality_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Where the report of one reconciled range (a scheduled run's hour) is published:
    ``<quality root>/hours/<start>--<end>.html``, e.g. ``hours/20251122T1000Z--20251122T1100Z.html``."""
    from tidemark.quality import quality_root

    return quality_root(config, quality_dir) / HOURS_DIR / f"{_compact(start_ms)}--{_compact(end_ms)}.html"


@dataclass(frozen=True)
class RangeReport:
    start_ms: int
    end_ms: int
    path: Path


def range_reports(
    config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None
) -> list[RangeReport]:
    """The published per-range reports, newest range first."""
    from tidemark.quality import quality_root
    from tidemark.timeutil import parse_instant_ms

    found = []
    for path in (quality_root(config, quality_dir) / HOURS_DIR).glob("*--*.html"):
        start, _, end = path.stem.partition("--")
        try:
            found.append(RangeReport(parse_instant_ms(_expand(start)), parse_instant_ms(_expand(end)), path))
        except ValueError:  # not one of ours
            continue
    return sorted(found, key=lambda r: (r.start_ms, r.end_ms), reverse=True)


def _expand(compact: str) -> str:
    d, t = compact.rstrip("Z").split("T")
    seconds = t[4:6] or "00"
    return f"{d[0:4]}-{d[4:6]}-{d[6:8]}T{t[0:2]}:{t[2:4]}:{seconds}Z"


@dataclass(frozen=True)
class WindowRow:
    window_start_ms: int
    stream_events: int
    batch_events: int
    late_events: int
    abs_diff: int
    alignment: float
    unexplained: int
    late_by_host: list[tuple[str, int]] = field(default_factory=list)  # most late first

    @property
    def iso(self) -> str:
        return format_instant_ms(self.window_start_ms)

    def explanation(self, hosts: int = HOSTS_PER_EXPLANATION) -> str:
        parts = []
        if self.late_by_host:
            shown = ", ".join(f"{h} ×{n:,}" for h, n in self.late_by_host[:hosts])
            more = len(self.late_by_host) - hosts
            parts.append(
                f"{self.late_events:,} late record(s) from {len(self.late_by_host)} host(s): {shown}"
                + (f" and {more} more host(s)" if more > 0 else "")
            )
        if self.unexplained:
            kind = "missing from stream and late events" if self.unexplained > 0 else "counted twice"
            parts.append(f"{abs(self.unexplained):,} record(s) {kind} (unexplained)")
        if not parts:
            parts.append("exact: stream equals batch")
        return "; ".join(parts)


@dataclass(frozen=True)
class LagPoint:
    batch_id: int
    batch_ts_ms: int
    watermark_ms: int
    lag_ms: int


@dataclass(frozen=True)
class ReportData:
    pipeline: str
    target: float
    windows: list[WindowRow]
    lag: list[LagPoint]
    stalls: list[tuple[int, int]]  # processing-time [start, end] ms; an open stall ends at the last batch
    open_windows: int
    watermark_ms: int | None
    state: str | None

    @property
    def misaligned(self) -> list[WindowRow]:
        return [w for w in self.windows if w.alignment < self.target]

    def worst(self, n: int = WORST_WINDOWS) -> list[WindowRow]:
        return sorted(self.windows, key=lambda w: (w.alignment, -w.abs_diff, w.window_start_ms))[:n]


def _read(config: PipelineConfig, table: str, columns: list[str] | None = None):
    path = config.table_path(table)
    if not T.table_exists(path):
        return None
    from deltalake import DeltaTable

    return DeltaTable(path).to_pandas(columns=columns)


def load_report_data(
    config: PipelineConfig, start_ms: int | None = None, end_ms: int | None = None
) -> ReportData:
    """Everything the report plots, from the tables (closed windows with ``window_start`` in range)."""
    from tidemark.dashboard import stall_spans
    from tidemark.quality import _in_range

    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise ConfigError(
            f"report: --end ({format_instant_ms(end_ms)}) must be after "
            f"--start ({format_instant_ms(start_ms)})"
        )

    rec = _read(config, S.RECONCILIATION)
    if rec is None:
        raise ConfigError(
            f"report: no reconciliation table at {config.table_path(S.RECONCILIATION)}; "
            "run `tidemark reconcile` first"
        )
    rec = rec.assign(window_start_ms=T.epoch_ms(rec["window_start"]))
    rec = rec[_in_range(rec["window_start_ms"], start_ms, end_ms)]
    closed = rec[rec["status"] == "closed"].sort_values("window_start_ms")

    late = _read(config, S.LATE_EVENTS, ["host", "window_start"])
    by_window: dict[int, list[tuple[str, int]]] = {}
    if late is not None and not late.empty:
        counts = (
            late.assign(window_start_ms=T.epoch_ms(late["window_start"]))
            .groupby(["window_start_ms", "host"])
            .size()
            .reset_index(name="n")
            .sort_values(["window_start_ms", "n", "host"], ascending=[True, False, True])
        )
        for ws, group in counts.groupby("window_start_ms", sort=False):
            by_window[int(ws)] = list(zip(group["host"], group["n"].astype(int), strict=True))

    windows = [
        WindowRow(
            window_start_ms=int(r.window_start_ms),
            stream_events=int(r.stream_events),
            batch_events=int(r.batch_events),
            late_events=int(r.late_events),
            abs_diff=int(r.abs_diff),
            alignment=float(r.alignment),
            unexplained=int(r.unexplained),
            late_by_host=by_window.get(int(r.window_start_ms), []),
        )
        for r in closed.itertuples()
    ]

    marks = _read(config, S.WATERMARKS)
    lag: list[LagPoint] = []
    stalls: list[tuple[int, int]] = []
    watermark_ms = state = None
    if marks is not None and not marks.empty:
        marks = marks.sort_values("batch_id")
        last = marks.iloc[-1]
        watermark_ms = None if last["watermark_ms"] != last["watermark_ms"] else int(last["watermark_ms"])
        state = str(last["state"])
        for r in marks.itertuples():
            if (
                r.watermark_ms == r.watermark_ms
                and r.frontier_ms == r.frontier_ms
                and r.batch_ts_ms == r.batch_ts_ms
            ):
                lag.append(
                    LagPoint(
                        int(r.batch_id),
                        int(r.batch_ts_ms),
                        int(r.watermark_ms),
                        int(r.frontier_ms - r.watermark_ms),
                    )
                )
        stalls = stall_spans(marks, _read(config, S.STALLS))
    return ReportData(
        pipeline=config.pipeline,
        target=float(config.reconcile.target),
        windows=windows,
        lag=lag,
        stalls=sorted(stalls),
        open_windows=int((rec["status"] != "closed").sum()),
        watermark_ms=watermark_ms,
        state=state,
    )


# ---------------------------------------------------------------------------------------------
# Inline SVG
# ---------------------------------------------------------------------------------------------

WIDTH, HEIGHT = 860, 260
LEFT, RIGHT, TOP, BOTTOM = 78, 34, 18, 50
STREAM_COLOR, BATCH_COLOR, LATE_COLOR = "#2b6cb0", "#a0aec0", "#dd6b20"
OK_COLOR, BAD_COLOR, TARGET_COLOR, STALL_COLOR = "#2f855a", "#c53030", "#c53030", "#fed7d7"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks, v = [], first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 12))
        v += step
    return ticks


class _Plot:
    """Linear y axis over [y0, y1] and an x mapping supplied per chart; emits SVG text."""

    def __init__(
        self, chart_id: str, title: str, y0: float, y1: float, y_label: str, y_fmt, svg_class: str = "plot"
    ) -> None:
        self.svg_class = svg_class
        self.id, self.title, self.y0, self.y1 = chart_id, title, y0, y1 if y1 > y0 else y0 + 1
        self.y_label, self.y_fmt = y_label, y_fmt
        self.parts: list[str] = []
        self.inner_w = WIDTH - LEFT - RIGHT
        self.inner_h = HEIGHT - TOP - BOTTOM

    def sy(self, y: float) -> float:
        return TOP + self.inner_h * (1 - (y - self.y0) / (self.y1 - self.y0))

    def axes(self, x_ticks: list[tuple[float, str]], x_label: str = "window start (UTC)") -> None:
        for t in _nice_ticks(self.y0, self.y1):
            y = self.sy(t)
            self.parts.append(
                f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                f"{_e(self.y_fmt(t))}</text>"
            )
        for x, label in x_ticks:
            self.parts.append(
                f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                f"{_e(label)}</text>"
            )
        self.parts.append(
            f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + self.inner_h}" '
            f'y2="{TOP + self.inner_h}"/>'
            f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + self.inner_h}"/>'
            f'<text class="label" transform="translate(14,{TOP + self.inner_h / 2}) rotate(-90)" '
            f'text-anchor="middle">{_e(self.y_label)}</text>'
            f'<text class="label" x="{LEFT + self.inner_w / 2}" y="{HEIGHT - 8}" '
            f'text-anchor="middle">{_e(x_label)}</text>'
        )

    def stalls(self, spans: list[tuple[int, int]], sx, x0: int, x1: int) -> None:
        """Shade processing-time stall spans (clipped to ``[x0, x1]``; ``sx`` maps time to x)."""
        for start, end in spans:
            a, b = sx(max(start, x0)), sx(min(end, x1))
            self.parts.append(
                f'<rect class="stall" x="{a:.1f}" y="{TOP}" width="{max(b - a, 2):.1f}" '
                f'height="{self.inner_h}" fill="{STALL_COLOR}" data-start="{format_instant_ms(start)}" '
                f'data-end="{format_instant_ms(end)}" data-start-ms="{start}" data-end-ms="{end}">'
                f"<title>stall {format_instant_ms(start)} .. {format_instant_ms(end)} "
                f"({humanize_ms(end - start)})</title></rect>"
            )

    def svg(self, legend: str = "") -> str:
        return (
            f'<figure class="chart" id="{self.id}"><figcaption>{_e(self.title)}{legend}</figcaption>'
            f'<svg class="{self.svg_class}" xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
            f'height="{HEIGHT}" role="img" aria-label="{_e(self.title)}">'
            + "".join(self.parts)
            + "</svg></figure>"
        )


def _hhmm(ms: int) -> str:
    return format_instant_ms(ms)[11:16]


def _band(n: int, i: int, inner_w: float) -> tuple[float, float]:
    """x of band i of n and the band's width."""
    w = inner_w / max(n, 1)
    return LEFT + i * w, w


def _window_ticks(windows: list[WindowRow], inner_w: float) -> list[tuple[float, str]]:
    n = len(windows)
    every = max(1, math.ceil(n / 12))
    ticks = []
    for i, w in enumerate(windows):
        if i % every == 0:
            x, bw = _band(n, i, inner_w)
            ticks.append((x + bw / 2, _hhmm(w.window_start_ms)))
    return ticks


def alignment_chart(data: ReportData) -> str:
    ws = data.windows
    lo = min([w.alignment for w in ws] + [data.target])
    pad = max((1 - lo) * 0.15, 0.0002)
    plot = _Plot(
        "chart-alignment", "Alignment per window", lo - pad, 1 + pad / 3, "alignment", lambda v: f"{v:.4f}"
    )
    plot.axes(_window_ticks(ws, plot.inner_w))
    ty = plot.sy(data.target)
    plot.parts.append(
        f'<line class="target" data-value="{data.target}" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{ty:.2f}" '
        f'y2="{ty:.2f}"><title>target {data.target}</title></line>'
        f'<text class="target-label" x="{WIDTH - RIGHT - 4}" y="{ty - 5:.1f}" text-anchor="end">'
        f"target {data.target}</text>"
    )
    points = []
    for i, w in enumerate(ws):
        x, bw = _band(len(ws), i, plot.inner_w)
        points.append((x + bw / 2, plot.sy(w.alignment), w))
    if points:
        plot.parts.append(
            '<polyline class="series" points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points) + '"/>'
        )
    for x, y, w in points:
        ok = w.alignment >= data.target
        plot.parts.append(
            f'<circle class="point alignment{"" if ok else " below"}" cx="{x:.1f}" cy="{y:.2f}" r="4" '
            f'fill="{OK_COLOR if ok else BAD_COLOR}" data-window="{w.iso}" data-value="{w.alignment!r}" '
            f'data-aligned="{str(ok).lower()}"><title>{w.iso}: alignment {w.alignment:.6f}'
            f"{'' if ok else ' (below target)'}</title></circle>"
        )
    return plot.svg(f' <span class="legend target-key">— target {data.target}</span>')


def _bars_chart(chart_id: str, title: str, data: ReportData, series: list[tuple[str, str, str]]) -> str:
    """Grouped bars per window; ``series`` = (name, WindowRow attribute, colour)."""
    ws = data.windows
    top = max([getattr(w, attr) for w in ws for _, attr, _ in series] + [1])
    plot = _Plot(chart_id, title, 0, top * 1.1, "events", lambda v: f"{v:,.0f}")
    plot.axes(_window_ticks(ws, plot.inner_w))
    base = plot.sy(0)
    for i, w in enumerate(ws):
        x, bw = _band(len(ws), i, plot.inner_w)
        inner = bw * 0.8 / len(series)
        for j, (name, attr, colour) in enumerate(series):
            value = getattr(w, attr)
            y = plot.sy(value)
            plot.parts.append(
                f'<rect class="bar {name}" x="{x + bw * 0.1 + j * inner:.2f}" y="{y:.3f}" '
                f'width="{max(inner - 1, 0.5):.2f}" height="{base - y:.3f}" fill="{colour}" '
                f'data-series="{name}" data-window="{w.iso}" data-value="{value}">'
                f"<title>{w.iso} {name}: {value:,}</title></rect>"
            )
    legend = "".join(
        f' <span class="legend"><i style="background:{c}"></i>{_e(n)}</span>' for n, _, c in series
    )
    return plot.svg(legend)


def counts_chart(data: ReportData) -> str:
    return _bars_chart(
        "chart-counts",
        "Stream vs batch events per window",
        data,
        [("stream", "stream_events", STREAM_COLOR), ("batch", "batch_events", BATCH_COLOR)],
    )


def late_chart(data: ReportData) -> str:
    return _bars_chart("chart-late", "Late events per window", data, [("late", "late_events", LATE_COLOR)])


def lag_chart(data: ReportData) -> str:
    pts = data.lag
    times = [p.batch_ts_ms for p in pts] + [t for s in data.stalls for t in s]
    x0, x1 = (min(times), max(times)) if times else (0, 1)
    if x1 <= x0:
        x1 = x0 + 1
    top = max([p.lag_ms for p in pts] + [1000])
    plot = _Plot(
        "chart-lag",
        "Watermark lag behind the median host, per batch",
        0,
        top * 1.1 / 1000,
        "lag (s)",
        lambda v: f"{v:g}",
    )

    def sx(t: float) -> float:
        return LEFT + plot.inner_w * (t - x0) / (x1 - x0)

    plot.stalls(data.stalls, sx, x0, x1)
    ticks = [
        (sx(x0 + (x1 - x0) * k / 6), format_instant_ms(int(x0 + (x1 - x0) * k / 6))[11:19]) for k in range(7)
    ]
    plot.axes(ticks, "batch processing time (UTC)")
    if pts:
        plot.parts.append(
            '<polyline class="series" points="'
            + " ".join(f"{sx(p.batch_ts_ms):.1f},{plot.sy(p.lag_ms / 1000):.1f}" for p in pts)
            + '"/>'
        )
    for p in pts:
        plot.parts.append(
            f'<circle class="point lag" cx="{sx(p.batch_ts_ms):.1f}" '
            f'cy="{plot.sy(p.lag_ms / 1000):.2f}" r="3.5" '
            f'fill="{STREAM_COLOR}" data-batch="{p.batch_id}" data-value="{p.lag_ms}" '
            f'data-watermark="{format_instant_ms(p.watermark_ms)}"><title>batch {p.batch_id} at '
            f"{format_instant_ms(p.batch_ts_ms)}: watermark {format_instant_ms(p.watermark_ms)}, "
            f"lag {humanize_ms(p.lag_ms)}</title></circle>"
        )
    legend = f' <span class="legend"><i style="background:{STALL_COLOR}"></i>recorded stall</span>'
    return plot.svg(legend)


# ---------------------------------------------------------------------------------------------
# Page
# ---------------------------------------------------------------------------------------------

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1a202c;margin:24px auto;
max-width:900px;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.sub{color:#4a5568;margin:0 0 16px}
.verdict{display:inline-block;padding:2px 10px;border-radius:12px;font-weight:600;color:#fff}
.pass{background:#2f855a}.fail{background:#c53030}
.kpis{display:grid;grid-template-columns:repeat(4,1fr);gap:10px;margin:12px 0}
.kpi{border:1px solid #e2e8f0;border-radius:6px;padding:8px 10px}.kpi b{display:block;font-size:19px}
.kpi span{color:#4a5568;font-size:12px}
figure.chart{margin:18px 0;border:1px solid #e2e8f0;border-radius:6px;padding:8px}
figcaption{font-weight:600;margin:0 0 4px}
.legend{font-weight:400;color:#4a5568;margin-left:12px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.target-key{color:#c53030}
svg .grid{stroke:#edf2f7}svg .axis{stroke:#718096}svg .tick{font-size:11px;fill:#4a5568}
svg .label{font-size:12px;fill:#2d3748}svg .series{fill:none;stroke:#4a5568;stroke-width:1.2}
svg .target{stroke:#c53030;stroke-dasharray:6 4;stroke-width:1.5}
svg .target-label{font-size:11px;fill:#c53030}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #e2e8f0;padding:4px 6px;text-align:right;vertical-align:top}
th{background:#f7fafc}td.l,th.l{text-align:left}tr.below td{background:#fff5f5}
.quality li{margin:2px 0}.muted{color:#718096}
"""


def _kpi(value: str, label: str) -> str:
    return f'<div class="kpi"><b>{_e(value)}</b><span>{_e(label)}</span></div>'


def _window_table(rows: list[WindowRow], target: float, cls: str, explain: bool) -> str:
    head = (
        "<tr><th class='l'>window start</th><th>stream</th><th>batch</th><th>late</th><th>|diff|</th>"
        "<th>alignment</th><th>unexplained</th>"
        + ("<th class='l'>explanation</th>" if explain else "")
        + "</tr>"
    )
    body = []
    for w in rows:
        below = w.alignment < target
        body.append(
            f'<tr class="{"below" if below else ""}" data-window="{w.iso}" data-alignment="{w.alignment!r}" '
            f'data-stream="{w.stream_events}" data-batch="{w.batch_events}" data-late="{w.late_events}" '
            f'data-unexplained="{w.unexplained}"><td class="l">{w.iso}</td><td>{w.stream_events:,}</td>'
            f"<td>{w.batch_events:,}</td><td>{w.late_events:,}</td><td>{w.abs_diff:,}</td>"
            f"<td>{w.alignment:.6f}</td><td>{w.unexplained:,}</td>"
            + (f'<td class="l explanation">{_e(w.explanation())}</td>' if explain else "")
            + "</tr>"
        )
    return f'<table class="{cls}">{head}{"".join(body)}</table>'


def _quality_section(
    outcome: ValidationOutcome | None, docs_href: str | None, history_href: str | None = None
) -> str:
    if outcome is None and docs_href is None:
        return ""
    parts = ['<h2 id="quality">Data quality</h2>']
    if outcome is not None:
        verdict = "pass" if outcome.success else "fail"
        span = (
            "all event times"
            if outcome.start_ms is None and outcome.end_ms is None
            else "event time "
            + " .. ".join(
                format_instant_ms(ms) if ms is not None else "*" for ms in (outcome.start_ms, outcome.end_ms)
            )
        )
        parts.append(
            f'<p><span class="verdict {verdict}" id="quality-verdict">'
            f"{'all suites pass' if outcome.success else f'{len(outcome.failing)} expectation(s) failing'}"
            f'</span> <span class="muted" id="quality-range">{_e(span)}, validated '
            f"{_e(format_instant_ms(outcome.validated_at_ms))}</span></p><ul class='quality'>"
        )
        for s in outcome.suites:
            fails = ", ".join(e.check for e in s.failing)
            parts.append(
                f'<li data-suite="{_e(s.suite)}" data-success="{str(s.success).lower()}">'
                f"<b>{_e(s.suite)}</b>: "
                + ("passed" if s.success else f"FAILED — {_e(fails)}")
                + f' <span class="muted">({s.rows:,} rows, {len(s.expectations)} expectations)</span></li>'
            )
        parts.append("</ul>")
    links = []
    if docs_href is not None:
        links.append(f'<a id="data-docs-link" href="{_e(docs_href)}">Great Expectations Data Docs</a>')
    if history_href is not None:
        links.append(f'<a id="data-docs-history-link" href="{_e(history_href)}">validation history</a>')
    if links:
        parts.append("<p>" + " · ".join(links) + "</p>")
    return "".join(parts)


def render_report(
    data: ReportData,
    outcome: ValidationOutcome | None = None,
    docs_href: str | None = None,
    worst: int = WORST_WINDOWS,
    history_href: str | None = None,
) -> str:
    """The report page as one HTML string (no external resources)."""
    ws = data.windows
    stream = sum(w.stream_events for w in ws)
    batch = sum(w.batch_events for w in ws)
    late = sum(w.late_events for w in ws)
    unexplained = sum(w.unexplained for w in ws)
    aligned = sum(1 for w in ws if w.alignment >= data.target)
    worst_alignment = min((w.alignment for w in ws), default=None)
    span = f"{ws[0].iso} .. {format_instant_ms(ws[-1].window_start_ms)}" if ws else "no closed windows"
    verdict_ok = not data.misaligned and unexplained == 0
    kpis = "".join(
        [
            _kpi(f"{aligned}/{len(ws)}", f"windows at or above target {data.target}"),
            _kpi(f"{worst_alignment:.6f}" if worst_alignment is not None else "-", "worst alignment"),
            _kpi(f"{late:,}", f"late events (stream {stream:,}, batch {batch:,})"),
            _kpi(f"{unexplained:,}", "unexplained difference"),
        ]
    )
    charts = (
        alignment_chart(data) + counts_chart(data) + late_chart(data) + lag_chart(data)
        if ws or data.lag
        else "<p>No reconciled windows yet.</p>"
    )
    watermark = (
        f"watermark {format_instant_ms(data.watermark_ms)} ({data.state})" if data.state is not None else ""
    )
    body = f"""
<h1>Tidemark reconciliation — {_e(data.pipeline)}</h1>
<p class="sub">{_e(span)} · {len(ws)} closed windows, {data.open_windows} open · {_e(watermark)} ·
generated {_e(format_instant_ms(now_ms()))}</p>
<p><span class="verdict {"pass" if verdict_ok else "fail"}" id="verdict">{
        "stream agrees with batch" if verdict_ok else "stream needs attention"
    }</span></p>
<div class="kpis">{kpis}</div>
{_quality_section(outcome, docs_href, history_href)}
<h2>Plots</h2>
{charts}
<h2 id="worst">Worst windows</h2>
<p class="muted">Lowest alignment first. Late records are the ones whose window had closed when they
arrived (kept in <code>late_events</code>); unexplained = batch − stream − late.</p>
{_window_table(data.worst(worst), data.target, "worst", explain=True)}
<details><summary>All {len(ws)} closed windows</summary>
{_window_table(ws, data.target, "all-windows", explain=False)}
</details>
"""
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>Tidemark reconciliation — {_e(data.pipeline)}</title><style>{CSS}</style></head>"
        f"<body>{body}</body></html>"
    )


def write_report(
    config: PipelineConfig,
    out: str | os.PathLike[str] | None = None,
    start_ms: int | None = None,
    end_ms: int | None = None,
    *,
    outcome: ValidationOutcome | None = None,
    docs_index: str | os.PathLike[str] | None = None,
    worst: int = WORST_WINDOWS,
) -> Path:
    """Write the report for the closed windows with ``window_start`` in ``[start, end)`` to ``out``
    (default :func:`report_path`, where :func:`report_locations` finds it); atomically replaced.

    ``outcome``/``docs_index``: a validation to summarise and the Data Docs page to link (relative
    to the report when possible). Returns the path written. Raises ConfigError (one line) without a
    reconciliation table or with ``end <= start``.
    """
    path = Path(out) if out is not None else report_path(config)
    data = load_report_data(config, start_ms, end_ms)

    def link(target: Path) -> str:
        try:
            return os.path.relpath(target.resolve(), path.resolve().parent)
        except ValueError:  # another drive
            return target.resolve().as_uri()

    href = history = None
    if docs_index is not None:
        href = link(Path(docs_index))
        from tidemark.quality import HISTORY_PAGE

        if (Path(docs_index).with_name(HISTORY_PAGE)).is_file():
            history = link(Path(docs_index).with_name(HISTORY_PAGE))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render_report(data, outcome, href, worst, history), encoding="utf-8")
    os.replace(tmp, path)
    return path
