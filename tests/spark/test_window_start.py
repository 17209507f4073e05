"""The window start's two forms agree: :func:`tidemark.windows.start_of` (the spec, Python ints) and
:func:`tidemark.aggregate.window_start_col` (the Spark Column the stream and the recompute run),
also before the epoch, where Spark's ``%`` (a remainder) and a floor modulo differ."""

from __future__ import annotations

from tidemark.aggregate import window_start_col
from tidemark.windows import covering, start_of

SIZE = 60_000
TIMES = [-120_001, -60_001, -60_000, -59_999, -1, 0, 1, 59_999, 60_000, 125_000]


def test_the_spark_column_is_start_of_also_for_times_before_the_epoch(spark):
    frame = spark.createDataFrame([(t,) for t in TIMES], "event_time long")
    got = [r[0] for r in frame.select(window_start_col("event_time", SIZE)).collect()]
    assert got == [start_of(t, SIZE) for t in TIMES]
    assert start_of(-1, SIZE) == -SIZE  # the floor, not the remainder's 0


def test_a_range_is_widened_to_the_whole_windows_that_cover_it():
    assert covering(-1, 1, SIZE) == (-SIZE, SIZE)
    assert covering(0, SIZE, SIZE) == (0, SIZE)  # on boundaries: unchanged
    assert covering(1, SIZE + 1, SIZE) == (0, 2 * SIZE)
    assert covering(-SIZE - 1, -SIZE + 1, SIZE) == (-2 * SIZE, 0)
