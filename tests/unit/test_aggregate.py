"""Window aggregation (tidemark.aggregate): per (window, key) counts and sums on a tiny frame,
also for event times before the epoch."""

from __future__ import annotations

import pytest

from tidemark.aggregate import aggregate_windows

pytestmark = pytest.mark.spark

SCHEMA = "event_time long, key string, value double"


def test_counts_and_sums_per_window_and_key(spark):
    events = spark.createDataFrame(
        [
            (0, "a", 1.0),
            (999, "a", 2.0),  # last ms of window [0, 1000)
            (1000, "a", 4.0),  # first ms of the next window
            (500, "b", None),  # no value: counted, sums to 0.0
            (1500, "b", 3.0),
            (1999, "b", 5.0),
        ],
        SCHEMA,
    )
    rows = aggregate_windows(events, 1000).collect()
    got = {(r["window_start_ms"], r["key"]): (r["events"], r["value_sum"]) for r in rows}
    assert got == {
        (0, "a"): (2, 3.0),
        (1000, "a"): (1, 4.0),
        (0, "b"): (1, 0.0),
        (1000, "b"): (2, 8.0),
    }


def test_events_before_the_epoch_are_counted_in_the_window_that_holds_them(spark):
    # window_start_col against the spec before the epoch: tests/spark/test_window_start.py; here
    # the aggregation groups -1 ms with -1000 ms in [-1000, 0), not with 0 in [0, 1000)
    events = spark.createDataFrame([(-1000, "a", 1.0), (-1, "a", 2.0), (0, "a", 4.0)], SCHEMA)
    got = {
        (r["window_start_ms"], r["events"], r["value_sum"]) for r in aggregate_windows(events, 1000).collect()
    }
    assert got == {(-1000, 2, 3.0), (0, 1, 4.0)}
