from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tidemark.timeutil import (
    format_duration_ms,
    format_instant_ms,
    humanize_ms,
    parse_duration_ms,
    parse_instant_ms,
)
from tidemark.windows import TumblingWindows

MIN = 60_000


@pytest.mark.parametrize(
    ("t", "start"), [(0, 0), (59_999, 0), (60_000, 60_000), (-1, -60_000), (125_000, 120_000)]
)
def test_window_start_is_floor_to_the_size(t, start):
    assert TumblingWindows(MIN).start_of(t) == start
    assert TumblingWindows(MIN).end_of(t) == start + MIN


def test_window_closes_only_when_watermark_reaches_its_end():
    w = TumblingWindows(MIN)
    assert not w.is_closed(0, None)
    assert not w.is_closed(0, MIN - 1)
    assert w.is_closed(0, MIN)


def test_closing_rule_has_the_same_answer_on_arrays_and_series():
    """The stream applies the rule to pandas columns; each element gets the scalar's answer."""
    w = TumblingWindows(MIN)
    starts = np.array([-MIN, 0, MIN, 2 * MIN], dtype=np.int64)
    for watermark in (None, MIN - 1, MIN, 2 * MIN + 5):
        expected = [w.is_closed(int(s), watermark) for s in starts]
        assert w.is_closed(starts, watermark).tolist() == expected
        series = pd.Series(starts, index=list("abcd"))
        closed = w.is_closed(series, watermark)
        assert closed.tolist() == expected and list(closed.index) == list("abcd")


def test_event_is_late_only_if_its_window_closed_before_it_arrived():
    w = TumblingWindows(MIN)
    assert w.is_late(59_999, watermark_before_ms=MIN)
    assert not w.is_late(60_000, watermark_before_ms=MIN)
    assert not w.is_late(0, watermark_before_ms=None)


def test_window_size_must_be_positive():
    with pytest.raises(ValueError, match="window size must be positive"):
        TumblingWindows(0)


@pytest.mark.parametrize(
    ("text", "ms"), [("500ms", 500), ("10s", 10_000), ("1m", MIN), ("24h", 86_400_000), (7, 7)]
)
def test_parse_duration(text, ms):
    assert parse_duration_ms(text) == ms


def test_parse_duration_error_names_the_value():
    with pytest.raises(ValueError, match=r"not a duration: '5 minuets'"):
        parse_duration_ms("5 minuets")


def test_instant_round_trip_and_formats():
    ms = parse_instant_ms("2025-11-22T10:00:00Z")
    assert ms == 1_763_805_600_000
    assert parse_instant_ms("2025-11-22T10:00:00") == ms  # no zone means UTC
    assert format_instant_ms(ms + 5) == "2025-11-22T10:00:00.005Z"
    assert format_duration_ms(90_000) == "90s" and format_duration_ms(MIN) == "1m"
    assert humanize_ms(235_583) == "3m55.6s"
