"""Chart ticks a person can read: round values, distinct labels, on every range the charts meet.
The watermark plot once read "00:25 00:25 ... 00:27 00:27" (seven ticks over two minutes
labelled HH:MM), its event-time axis "06:13:20, 06:46:40, 07:20:00" (round numbers of
milliseconds, not round times), and the report's late-events axis "1, 1, 0, 0, 0" (a count axis
in quarters)."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from tidemark.charts import TIME_STEPS_MS, Plot, faithful, nice_ticks, time_ticks
from tidemark.timeutil import format_instant_ms, parse_instant_ms

T0 = parse_instant_ms("2026-11-27T00:25:13.400Z")


@pytest.mark.parametrize(
    ("span_ms", "step_ms", "label"),
    [
        (1, 1, "00:25:13.401"),  # zero to one millisecond: an instant, as the x axis of one batch
        (800, 200, "00:25:13.600"),  # under a second
        (20_000, 5_000, "00:25:15"),  # seconds
        (130_000, 30_000, "00:25:30"),  # two minutes: HH:MM alone would repeat
        (45 * 60_000, 10 * 60_000, "00:30"),  # minutes
        (5 * 3_600_000, 3_600_000, "01:00"),  # hours
        (3 * 86_400_000, 43_200_000, "11-27 12:00"),  # days
    ],
)
def test_time_ticks_are_round_distinct_and_few(span_ms, step_ms, label):
    ticks = time_ticks(T0, T0 + span_ms)
    instants = [t for t, _ in ticks]
    labels = [text for _, text in ticks]
    assert 2 <= len(ticks) <= 7, labels
    assert len(set(labels)) == len(labels), labels
    assert all(t % step_ms == 0 for t in instants), (instants, labels)
    assert all(T0 <= t <= T0 + span_ms for t in instants)
    assert label in labels, labels


def test_a_zero_to_one_count_axis_has_whole_numbers_only():
    plot = Plot(id="late", title="late", y0=0, y1=1, y_label="late events", y_fmt=lambda v: f"{v:,.0f}")
    plot.axes([])
    assert [t.label for t in plot.y_ticks] == ["0", "1"]


def test_a_zero_to_one_share_axis_keeps_its_fractions():
    plot = Plot(id="a", title="a", y0=0, y1=1, y_label="alignment", y_fmt=lambda v: f"{v:.0%}")
    plot.axes([])
    assert [t.label for t in plot.y_ticks] == ["0%", "20%", "40%", "60%", "80%", "100%"]


@pytest.mark.parametrize(("lo", "hi"), [(0, 1), (0, 7), (0, 1234), (0.990, 1.0), (5, 5)])
def test_nice_ticks_cover_the_range_with_round_steps(lo, hi):
    ticks = nice_ticks(lo, hi)
    assert ticks[0] >= lo and ticks[-1] <= max(hi, lo + 1) + 1e-9 and len(ticks) >= 2
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1, ticks


def _round_and_distinct(ticks: list[tuple[int, str]], lo: int, hi: int, most: int = 7) -> None:
    instants = [t for t, _ in ticks]
    labels = [text for _, text in ticks]
    assert 2 <= len(ticks) <= most, (lo, hi, labels)
    assert len(set(labels)) == len(labels), labels
    assert all(lo <= t <= max(hi, lo + 1) for t in instants), (lo, hi, labels)
    [step] = {b - a for a, b in itertools.pairwise(instants)}
    assert step in TIME_STEPS_MS or step % 86_400_000 == 0, step
    assert all(t % step == 0 for t in instants), labels
    # each label is its instant, as precisely as the step needs
    for t, label in ticks:
        text = format_instant_ms(t)
        assert label in (text[11:23], text[11:19], text[11:16], f"{text[5:10]} {text[11:16]}"), (t, label)


@pytest.mark.parametrize("span_ms", [0, 1, 7, 999, 1_000, 59_000, 61_000, 599_999, 3_600_000, 86_399_999])
@pytest.mark.parametrize("offset_ms", [0, 1, 13_400, 59_999, 3_599_999, 86_399_999])
def test_time_ticks_on_every_range(span_ms, offset_ms):
    lo = T0 - T0 % 86_400_000 + offset_ms
    _round_and_distinct(time_ticks(lo, lo + span_ms), lo, lo + span_ms)


def test_time_ticks_across_a_sweep_of_spans():
    rng = np.random.default_rng(11)
    for span in np.unique(np.logspace(0, 10, 400).astype(int)):  # 1 ms .. 115 days
        lo = T0 + int(rng.integers(0, 86_400_000))
        _round_and_distinct(time_ticks(lo, lo + int(span)), lo, lo + int(span))


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        ("00:25:13.400", "00:25:58", ["00:25:20", "00:25:30", "00:25:40", "00:25:50"]),  # seconds
        ("00:25:13.400", "00:41:00", ["00:30", "00:35", "00:40"]),  # minutes
        ("06:13:20", "07:53:20", ["06:15", "06:30", "06:45", "07:00", "07:15", "07:30", "07:45"]),
        ("01:10:00", "09:00:00", ["02:00", "04:00", "06:00", "08:00"]),  # hours
    ],
)
def test_an_event_time_axis_shows_round_instants(lo, hi, expected):
    """The watermark plot's y axis (``axes(..., y_time=True)``): the event time it reached."""
    day = "2026-11-27T"
    plot = Plot("wm", "wm", parse_instant_ms(day + lo), parse_instant_ms(day + hi), "watermark", str)
    plot.axes([], y_time=True)
    labels = [t.label for t in plot.y_ticks]
    assert labels[:7] == expected[:7], labels
    ys = [t.at for t in plot.y_ticks]
    assert ys == sorted(ys, reverse=True) and all(plot.top <= y <= plot.axis_y for y in ys)  # upwards


def test_the_dashboards_watermark_plot_has_round_time_ticks_on_both_axes():
    from tidemark.dashboard import Dashboard, WatermarkPoint, watermark_plot

    start = parse_instant_ms("2026-11-27T08:00:49.100Z")
    points = [
        WatermarkPoint(i, start + 8_700 * i, parse_instant_ms("2026-11-27T06:13:20Z") + 290_000 * i, None)
        for i in range(22)
    ]
    svg = str(watermark_plot(Dashboard("p", 0.999, None, points, [], [], 0, [])))
    y = re.findall(r'class="tick y-tick"[^>]*>([^<]+)<', svg)
    x = re.findall(r'class="tick x-tick"[^>]*>([^<]+)<', svg)
    assert y == ["06:30", "07:00", "07:30", "08:00"], y  # 06:05-08:02 with its padding
    assert x == ["08:01:00", "08:01:30", "08:02:00", "08:02:30", "08:03:00", "08:03:30"], x


@pytest.mark.parametrize(
    ("lo", "hi", "fmt"),
    [
        (0.9988, 1.0000667, "{:.4f}"),  # the dashboard's alignment: target 0.999, all windows at 1
        (0.95, 1.01, "{:.4f}"),
        (0, 1.1, "{:,.0f}"),  # one host
        (0, 7.7, "{:,.0f}"),
        (0, 191.4, "{:,.0f}"),
        (0, 1.1, "{:g}"),  # the report's lag in seconds
        (0, 1, "{:.0%}"),
    ],
)
def test_value_axes_read_as_what_they_mark(lo, hi, fmt):
    plot = Plot("v", "v", lo, hi, "v", fmt.format)
    plot.axes([])
    labels = [t.label for t in plot.y_ticks]
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    values = nice_ticks(lo, hi)
    assert faithful(values, [fmt.format(v) for v in values]) == (labels == [fmt.format(v) for v in values])


def test_a_label_that_rounds_its_value_is_not_faithful():
    assert not faithful([0.99900, 0.99925, 0.9995], ["0.9990", "0.9992", "0.9995"])
    assert not faithful([0, 0.25, 0.5], ["0", "0", "0"])
    assert not faithful([0, 0.5, 1], ["0", "", "1"])
    assert faithful([0.999, 0.9995, 1.0], ["0.9990", "0.9995", "1.0000"])
    assert faithful([0, 0.2], ["0%", "20%"])
