"""Chart ticks a person can read: round values, distinct labels, on every range the charts meet.
The watermark plot once read "00:25 00:25 ... 00:27 00:27" (seven ticks over two minutes
labelled HH:MM) and the report's late-events axis "1, 1, 0, 0, 0" (a count axis in quarters)."""

from __future__ import annotations

import itertools

import pytest

from tidemark.charts import Plot, nice_ticks, time_ticks
from tidemark.timeutil import parse_instant_ms

T0 = parse_instant_ms("2026-11-27T00:25:13.400Z")


@pytest.mark.parametrize(
    ("span_ms", "step_ms", "label"),
    [
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
