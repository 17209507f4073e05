"""Window aggregation shared by the stream and the batch recompute.

One function computes ``(window_start_ms, key) -> events, value_sum`` for tumbling windows of
``window_ms`` (see :mod:`tidemark.windows` for the formula). The stream applies it to each
batch's on-time events and sums the partial results; the recompute applies it to all raw
events. Counts add exactly, so a stream/batch difference is a difference in data, never in code.

A micro-batch of few events is on the driver already (its events are written from there,
:mod:`tidemark.batch_outputs`): :func:`aggregate_windows_arrow` is the same aggregation over that
Arrow copy, without a Spark job; a test holds the two forms equal on random batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from tidemark.windows import start_of

if TYPE_CHECKING:
    import pyarrow as pa
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


def aggregate_windows_arrow(events: pa.Table, window_ms: int) -> pd.DataFrame:
    """:func:`aggregate_windows` over ``events(event_time, key, value)`` on the driver, as
    pandas: the same groups (a NULL key is a group of its own), a window with no value sums to
    0.0; int64 starts and counts, float64 sums."""
    times = events["event_time"].to_numpy(zero_copy_only=False).astype("int64")
    frame = pd.DataFrame(
        {
            "window_start_ms": start_of(times, window_ms),  # numpy's % is a floor modulo
            "key": events["key"].to_pandas(),
            "value": events["value"].to_pandas().astype("float64"),
        }
    )
    sums = frame.groupby(["window_start_ms", "key"], sort=False, dropna=False).agg(
        events=("value", "size"), value_sum=("value", "sum")
    )
    sums = sums.reset_index().astype({"window_start_ms": "int64", "events": "int64", "value_sum": "float64"})
    sums["key"] = sums["key"].astype(object).where(sums["key"].notna(), None)  # the group's NaN: None
    return sums


def window_partials(events: DataFrame | pa.Table, window_ms: int, any_events: bool) -> pd.DataFrame | None:
    """A batch's partial sums per window and key, as pandas: by the driver when its events are
    there already (an Arrow table), else by Spark; None when the batch has no event."""
    import pyarrow as pa

    from tidemark.tables import to_pandas

    if isinstance(events, pa.Table):
        return aggregate_windows_arrow(events, window_ms)
    if not any_events:
        return None
    sums = to_pandas(aggregate_windows(events, window_ms))
    return sums.astype({"window_start_ms": "int64", "events": "int64"})
