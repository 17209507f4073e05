"""What the inline SVG charts of the report (:mod:`tidemark.report_render`) and of the Airflow view's
dashboard (:mod:`tidemark.dashboard`) share: the layout, the colours, the y axis and its ticks, the
stall shading, and the Jinja2 environment whose templates draw them.

**Geometry here, markup in templates.** A chart computes where its marks go in Python (a
:class:`Plot` maps values to SVG coordinates and holds the axis ticks and the stall shades); the
markup is emitted by template macros (``templates/_charts.svg.j2`` for the frame, axes and shades,
one template per consumer for the marks), with autoescape on, so a host or pipeline name lands in
the page as text, never as markup. :func:`macros` returns a template's macros as Python callables
returning :class:`markupsafe.Markup`.

The templates are package data (``tidemark/templates/*.j2``) loaded with ``PackageLoader``, so the
same call works from the checkout and from an installed wheel.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidemark.timeutil import format_instant_ms, humanize_ms, now_ms

if TYPE_CHECKING:
    import pandas as pd
    from jinja2 import Environment

WIDTH, HEIGHT = 860, 260
LEFT, RIGHT, TOP, BOTTOM = 78, 34, 18, 50
STREAM_COLOR, BATCH_COLOR, LATE_COLOR = "#2b6cb0", "#a0aec0", "#dd6b20"
OK_COLOR, BAD_COLOR, TARGET_COLOR, STALL_COLOR = "#2f855a", "#c53030", "#c53030", "#fed7d7"


@functools.cache
def environment() -> Environment:
    """The Jinja2 environment of Tidemark's pages and charts: templates from the package, every one
    autoescaped (they are all HTML or SVG), undefined names an error. One per process: Jinja
    compiles each template once and keeps it (the Airflow view draws on every page load)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("tidemark", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(fmt=format, instant=format_instant_ms, duration=humanize_ms)
    env.globals.update(
        stall_color=STALL_COLOR, ok_color=OK_COLOR, bad_color=BAD_COLOR, stream_color=STREAM_COLOR
    )
    return env


def macros(template: str) -> Any:
    """The macros of one template, callable from Python (each returns ``Markup``)."""
    return environment().get_template(template).module


def nice_ticks(
    lo: float, hi: float, n: int = 5, min_step: float = 0, mantissas: tuple[float, ...] = (1, 2, 2.5, 5)
) -> list[float]:
    """About ``n`` round tick values covering ``[lo, hi]`` (steps of 1, 2, 2.5 or 5 times a power
    of ten, or the given ``mantissas``, and at least ``min_step``: 1 for an axis of counts)."""
    if hi <= lo:
        hi = lo + 1
    raw = max((hi - lo) / n, 1e-12)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (*mantissas, 10) if m * mag >= raw)
    if step < min_step:
        step = float(min_step)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, v = [], first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 12))
        v += step
    return ticks


def _number(label: str) -> float | None:
    """The number a value label shows (``1,234``, ``0.9995``, ``20%``), None if it shows none."""
    text = label.replace(",", "").strip()
    scale = 1.0
    if text.endswith("%"):
        text, scale = text[:-1], 0.01
    try:
        return float(text) * scale
    except ValueError:
        return None


def faithful(values: list[float], labels: list[str]) -> bool:
    """Whether value-axis labels read as what they mark: distinct, none empty, and each (when it
    is a number) within a hundredth of a step of its value: ``0.99925`` shown as ``0.9992`` or a
    count of ``0.75`` shown as ``1`` is not."""
    if len(set(labels)) < len(labels) or not all(labels):
        return False
    step = min((b - a for a, b in itertools.pairwise(values)), default=1.0)
    for v, label in zip(values, labels, strict=True):
        shown = _number(label)
        if shown is not None and abs(shown - v) > abs(step) * 0.01:
            return False
    return True


# round steps for a time axis (ms), smallest first: milliseconds (a range under a second), seconds,
# minutes, hours, a day
TIME_STEPS_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500] + [
    s * 1000
    for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
]


def time_ticks(x0: int, x1: int, most: int = 7) -> list[tuple[int, str]]:
    """At most ``most`` ticks (and at least two) at round instants in ``[x0, x1]`` ms (every 1 ms,
    ... 1 s, 2 s, ... 1 min, 5 min, ... 1 h, ... 1 day, the smallest step that fits), each labelled
    as precisely as its step needs (``HH:MM:SS.mmm`` below a second, ``HH:MM:SS`` below a minute,
    ``HH:MM``, or ``MM-DD HH:MM`` over a day or more): distinct labels."""
    x0, x1 = math.ceil(x0), math.floor(x1)
    span = max(x1 - x0, 1)
    x1 = max(x1, x0 + 1)
    step = next((s for s in TIME_STEPS_MS if x1 // s + x0 // -s + 1 <= most), None)  # ticks that fit
    if step is None:  # longer than (most - 1) days: whole days
        step = 86_400_000 * math.ceil(span / 86_400_000 / (most - 1))
    first = -(-x0 // step) * step
    ticks = []
    for t in range(first, x1 + 1, step):
        text = format_instant_ms(t)
        if span >= 86_400_000:
            label = f"{text[5:10]} {text[11:16]}"
        elif step < 1000:
            label = text[11:23]
        elif step < 60_000:
            label = text[11:19]
        else:
            label = text[11:16]
        ticks.append((t, label))
    return ticks


@dataclass(frozen=True)
class Tick:
    at: float  # x (on the time axis) or y (on the value axis) in SVG units
    label: str


@dataclass(frozen=True)
class Shade:
    """A recorded stall drawn as a band over the plot: ``x``/``width`` in SVG units."""

    x: float
    width: float
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class Mark:
    """One plotted mark at (x, y), with the row it stands for (None for a line's vertex)."""

    x: float
    y: float
    item: Any = None
    ok: bool = True


@dataclass
class Plot:
    """A chart's frame: a linear y axis over ``[y0, y1]``, the x ticks the chart supplies and the
    stall shades; the chart's macro draws the marks inside it (``_charts.svg.j2``: ``figure``)."""

    id: str
    title: str
    y0: float
    y1: float
    y_label: str
    y_fmt: Callable[[float], str]
    svg_class: str = "plot"
    x_label: str = "window start (UTC)"
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    stalls: list[Shade] = field(default_factory=list)

    width = WIDTH
    height = HEIGHT
    left = LEFT
    top = TOP
    right_x = WIDTH - RIGHT  # where the plotting area ends
    inner_w = WIDTH - LEFT - RIGHT
    inner_h = HEIGHT - TOP - BOTTOM
    axis_y = TOP + inner_h  # the x axis
    mid_x = LEFT + inner_w / 2  # the x axis' label
    mid_y = TOP + inner_h / 2  # the y axis' label

    def __post_init__(self) -> None:
        if self.y1 <= self.y0:
            self.y1 = self.y0 + 1

    def sy(self, y: float) -> float:
        return TOP + self.inner_h * (1 - (y - self.y0) / (self.y1 - self.y0))

    def axes(
        self, x_ticks: list[tuple[float, str]], x_label: str | None = None, y_time: bool = False
    ) -> None:
        """Set the x ticks (position, label) and label; the y ticks follow from ``[y0, y1]``: round
        values whose labels read as what they mark (:func:`faithful`), or with ``y_time`` (a y
        axis of instants in ms) round instants (:func:`time_ticks`)."""
        if y_time:
            self.y_ticks = [
                Tick(self.sy(t), label) for t, label in time_ticks(math.ceil(self.y0), math.floor(self.y1))
            ]
        else:
            candidates = (
                nice_ticks(self.y0, self.y1),
                nice_ticks(self.y0, self.y1, mantissas=(1, 2, 5)),  # 0.99925 needs a digit more
                nice_ticks(self.y0, self.y1, min_step=1),  # e.g. counts 0-1 in steps of 0.25
            )
            values = next((c for c in candidates if faithful(c, [self.y_fmt(t) for t in c])), candidates[-1])
            self.y_ticks = [Tick(self.sy(t), self.y_fmt(t)) for t in values]
        self.x_ticks = [Tick(x, label) for x, label in x_ticks]
        if x_label is not None:
            self.x_label = x_label

    def shade_stalls(
        self, spans: list[tuple[int, int]], sx: Callable[[float], float], x0: int, x1: int
    ) -> None:
        """Shade processing-time stall spans (clipped to ``[x0, x1]``; ``sx`` maps time to x)."""
        for start, end in spans:
            a, b = sx(max(start, x0)), sx(min(end, x1))
            self.stalls.append(Shade(a, max(b - a, 2), start, end))


def time_axis(
    x0: int, x1: int, inner_w: float, label_chars: int = 5
) -> tuple[Callable[[float], float], list[tuple[float, str]]]:
    """The x mapping of a time axis over ``[x0, x1]`` ms and its ticks (:func:`time_ticks`: round
    instants, distinct labels; ``label_chars=8`` shows seconds on every label)."""
    span = max(x1 - x0, 1)

    def sx(t: float) -> float:
        return LEFT + inner_w * (t - x0) / span

    ticks = []
    for t, label in time_ticks(x0, x1):
        if label_chars == 8 and len(label) == 5:
            label = format_instant_ms(t)[11:19]
        ticks.append((sx(t), label))
    return sx, ticks


def stall_spans(marks: pd.DataFrame | None, stalls: pd.DataFrame | None) -> list[tuple[int, int]]:
    """Recorded stalls as closed processing-time spans, what the charts shade: an open stall (the
    ``stalls`` table's row without an end, or the newest marker's ``stall_since_ms``) ends at the
    last batch."""
    from tidemark.quality_frames import stall_intervals

    if marks is None or marks.empty:
        return []
    last = marks.sort_values("batch_id").iloc[-1]
    has_ts = marks["batch_ts_ms"].notna().any()
    last_ts = int(marks["batch_ts_ms"].max()) if has_ts else now_ms()
    spans = [(s, e if e is not None else last_ts) for s, e in stall_intervals(stalls)]
    since = last["stall_since_ms"]
    if since is not None and since == since:  # None and NaN are missing
        spans.append((int(since), last_ts))
    return sorted(set(spans))
