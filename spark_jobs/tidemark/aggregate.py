"""Window aggregation shared by the stream and the batch recompute.

One function computes ``(window_start_ms, key) -> events, value_sum`` for tumbling windows of
``window_ms`` (see :mod:`tidemark.windows` for the formula). The stream applies it to each
batch's on-time events and sums the partial results; the recompute applies it to all raw
events. Counts add exactly, so a stream/batch difference is a difference in data, never in code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def window_start_col(event_time: str, window_ms: int) -> Column:
    """:func:`tidemark.windows.start_of` as a Spark Column: ``t - pmod(t, S)``. ``pmod``, not
    ``%``: Spark's ``%`` is a remainder (negative for ``t < 0``), Python's a floor modulo."""
    from pyspark.sql import functions as F

    return F.col(event_time) - F.pmod(F.col(event_time), F.lit(window_ms))


def aggregate_windows(events: DataFrame, window_ms: int) -> DataFrame:
    """``events(event_time, key, value)`` -> ``(window_start_ms, key, events, value_sum)``."""
    from pyspark.sql import functions as F

    return (
        events.select(
            window_start_col("event_time", window_ms).alias("window_start_ms"),
            "key",
            "value",
        )
        .groupBy("window_start_ms", "key")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.coalesce(F.sum("value"), F.lit(0.0)).alias("value_sum"),
        )
    )
