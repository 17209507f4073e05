"""The dashboard's numbers and pictures (tidemark.dashboard), checked against brute force."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tidemark.charts import stall_spans
from tidemark.dashboard import (
    LAG_EDGES_MS,
    AlignmentPoint,
    Dashboard,
    LagBin,
    alignment_plot,
    alignment_points,
    lag_histogram,
    lag_histogram_plot,
    watermark_plot,
    watermark_points,
)
from tidemark.report import _compact, _expand
from tidemark.timeutil import parse_instant_ms


def test_lag_histogram_counts_every_host_once_in_the_bin_of_its_lag():
    rng = np.random.default_rng(7)
    frontier = 1_000_000_000
    progress = frontier - rng.integers(-5_000, 2 * 3_600_000, size=5_000)
    bins = lag_histogram(progress, frontier)
    assert sum(b.hosts for b in bins) == 5_000
    lags = np.maximum(frontier - progress, 0)
    for b in bins:
        hi = b.hi_ms if b.hi_ms is not None else np.inf
        assert b.hosts == int(((lags >= b.lo_ms) & (lags < hi)).sum()), b
    # edges exactly on a bin boundary go to the upper bin; a host ahead counts as 0 behind
    exact = lag_histogram(np.array([frontier - 10_000, frontier + 5]), frontier)
    assert [b.hosts for b in exact[:2]] == [1, 1]
    assert lag_histogram(np.array([], dtype="int64"), None) == [
        LagBin(lo, hi, 0) for lo, hi in zip(LAG_EDGES_MS, (*LAG_EDGES_MS[1:], None), strict=True)
    ]


def test_watermark_points_keep_the_newest_and_thin_evenly():
    marks = pd.DataFrame(
        {
            "batch_id": range(2_000),
            "batch_ts_ms": [1_000 * i for i in range(2_000)],
            "watermark_ms": [60_000 * i for i in range(2_000)],
            "committed_at_ms": [1_000 * i + 5 for i in range(2_000)],
            "stall_since_ms": [None] * 2_000,
        }
    )
    points = watermark_points(marks, since_ms=500_000, limit=100)
    assert len(points) == 100
    assert points[0].batch_id == 500 and points[-1].batch_id == 1_999
    assert all(p.watermark_ms == 60_000 * p.batch_id and p.committed_ms == p.batch_ts_ms + 5 for p in points)


def test_an_open_stall_ends_at_the_last_batch():
    marks = pd.DataFrame(
        {"batch_id": [0, 1, 2], "batch_ts_ms": [10, 20, 30], "stall_since_ms": [None, 15, 15]}
    )
    stalls = pd.DataFrame(
        {
            "started_at": pd.to_datetime([1, 15], unit="ms", utc=True),
            "ended_at": pd.to_datetime([5, None], unit="ms", utc=True),
        }
    )
    assert stall_spans(marks, stalls) == [(1, 5), (15, 30)]


def test_alignment_points_cover_the_last_24_hours_of_closed_windows():
    hour = 3_600_000
    starts = [i * 60_000 for i in range(0, 30 * 60, 30)]  # every 30 min over 30 hours
    rec = pd.DataFrame(
        {
            "window_start": pd.to_datetime(starts, unit="ms", utc=True),
            "status": ["closed"] * (len(starts) - 1) + ["open"],
            "alignment": [0.9985 if i % 7 == 0 else 1.0 for i in range(len(starts))],
        }
    )
    points = alignment_points(rec, target=0.999)
    newest_closed = starts[-2]
    assert [p.window_start_ms for p in points] == [s for s in starts[:-1] if s > newest_closed - 24 * hour]
    assert [p.aligned for p in points] == [p.alignment >= 0.999 for p in points]


def _dashboard(**kw) -> Dashboard:
    base = {
        "pipeline": "p",
        "target": 0.999,
        "status": None,
        "watermarks": [],
        "stalls": [],
        "lag_bins": lag_histogram(np.array([0, -20_000, -120_000]), 0),
        "never_reported": 2,
        "alignment": [],
    }
    return Dashboard(**{**base, **kw})


def test_pictures_carry_their_numbers():
    from tidemark.dashboard import WatermarkPoint

    d = _dashboard(
        watermarks=[WatermarkPoint(i, 1_000_000 + 10_000 * i, 60_000 * i, None) for i in range(5)],
        stalls=[(1_010_000, 1_030_000)],
        alignment=[AlignmentPoint(0, 1.0, True), AlignmentPoint(60_000, 0.99, False)],
    )
    svg = watermark_plot(d)
    assert 'class="watermark-plot"' in svg
    assert re.findall(r'data-batch-id="(\d+)"', svg) == ["0", "1", "2", "3", "4"]
    assert re.findall(r'data-watermark-ms="(\d+)"', svg) == [str(60_000 * i) for i in range(5)]
    assert 'class="stall"' in svg and 'data-start-ms="1010000"' in svg
    hist = lag_histogram_plot(d)
    assert [int(n) for n in re.findall(r'data-hosts="(\d+)"', hist)] == [b.hosts for b in d.lag_bins] + [2]
    align = alignment_plot(d)
    assert re.findall(r'data-alignment="([\d.]+)"', align) == ["1.0", "0.99"]
    assert 'class="target"' in align and 'class="window below"' in align
    assert "No committed batch yet" in watermark_plot(_dashboard())


def test_range_report_names_round_trip():
    for ms in (0, 1_763_805_600_000, 1_763_805_630_000):
        assert _compact(ms) <= _compact(ms + 60_000)
        assert parse_instant_ms(_expand(_compact(ms))) == ms
