"""The frames the data-quality suites validate: pandas (and, for events, Spark) frames built from a
pipeline's Delta tables. Pure functions of the tables, testable without Great Expectations, which
this module never imports (the runner is :mod:`tidemark.quality`).

=============== ===================================================================================
raw_events      :func:`events_frame_local` / :func:`events_frame_spark`: the ``events`` rows of
                the range, with ``arrival_lead_ms``
raw_batches     :func:`raw_batches_frame`: one row per micro-batch, its quarantine rate
windows         :func:`windows_frame`: committed closed windows with the watermark of their batch
reconciliation  :func:`reconciliation_frame`: closed reconciled windows with their late share
watermarks      :func:`watermarks_frame`: batches with a watermark, their lag, ``in_stall``
=============== ===================================================================================

**Engines.** The small tables (windows, reconciliation, watermarks, stalls) are read with delta-rs
(the ``deltalake`` package) into pandas (:func:`table_frames`): no JVM, so an Airflow task can
validate directly. The ``events`` table is the large one. Given a Spark session it is read as a
Spark DataFrame (:func:`events_frame_spark`; GX's Spark engine collects nothing but the sample
rows). Without one it is read with delta-rs, the range pushed down and only the table's own
columns kept, into pandas (:func:`events_frame_local`), and refused above ``max_rows`` rows
(default :data:`DEFAULT_MAX_LOCAL_EVENTS`, 2,000,000, ~35 minutes of the demo's 10,000 hosts, a
few hundred MB) with a message asking for Spark: a reconciliation-sized range of a modest pipeline
validates in seconds without a JVM, and a large one cannot exhaust a worker.

Also used by the report and the dashboard: :func:`in_range` (event-time range mask) and
:func:`stall_intervals` (recorded stalls as intervals). pandas is imported inside the functions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import ConfigError, PipelineConfig
from tidemark.timeutil import format_instant_ms

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_MAX_LOCAL_EVENTS = 2_000_000

RAW_BATCHES_COLUMNS = ["batch_id", "lines", "events", "heartbeats", "quarantined", "quarantine_rate"]
WINDOWS_COLUMNS = [
    "window_start",
    "window_end",
    "key",
    "events",
    "value_sum",
    "batch_id",
    "low_watermark",
    "batch_watermark",
    "window_start_ms",
    "window_end_ms",
    "low_watermark_ms",
    "batch_watermark_ms",
    "length_ms",
    "start_offset_ms",
    "revision",
    "is_final",
    "late_events",
    "finals",
    "events_growth",
]
RECONCILIATION_COLUMNS = [
    "window_start",
    "window_start_ms",
    "stream_events",
    "batch_events",
    "late_events",
    "abs_diff",
    "alignment",
    "unexplained",
    "late_share",
    "ontime_events",
    "late_folded",
    "ontime_alignment",
    "final",
    "final_gap_explained",
]
WATERMARKS_COLUMNS = [
    "batch_id",
    "watermark",
    "previous",
    "watermark_ms",
    "previous_ms",
    "frontier_ms",
    "batch_ts_ms",
    "lag_ms",
    "state",
    "in_stall",
    "lag_outside_stall_ms",
]


def table_frames(
    config: PipelineConfig, start_ms: int | None, end_ms: int | None, min_batch_lines: int
) -> dict[str, pd.DataFrame]:
    """The frames of the four small-table suites (raw_batches, windows, reconciliation,
    watermarks) over ``[start, end)``, read with delta-rs. ``watermarks`` is read before
    ``windows``, so windows of a batch committed after that read are seen as in flight."""
    markers = T.read_if_exists(config, S.WATERMARKS)
    stalls = T.read_if_exists(config, S.STALLS)
    batches = batches_in_range(markers, start_ms, end_ms) if markers is not None else None
    windows = T.read_if_exists(config, S.WINDOWS)
    reconciled = T.read_if_exists(config, S.RECONCILIATION)
    return {
        "raw_batches": raw_batches_frame(batches, min_batch_lines),
        "windows": windows_frame(windows, markers, config.window, start_ms, end_ms),
        "reconciliation": reconciliation_frame(reconciled, start_ms, end_ms),
        "watermarks": watermarks_frame(markers, stalls, start_ms, end_ms),
    }


def _empty(columns: list[str]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})


def _iso(values: pd.Series) -> pd.Series:
    import pandas as pd

    return values.map(lambda v: None if pd.isna(v) else format_instant_ms(int(v)))


def in_range(ms: pd.Series, start_ms: int | None, end_ms: int | None) -> pd.Series:
    """Mask of the (epoch ms) values in ``[start, end)``; missing values are outside, a bound that
    is None does not limit."""
    mask = ms.notna()
    if start_ms is not None:
        mask &= ms >= start_ms
    if end_ms is not None:
        mask &= ms < end_ms
    return mask


def batches_in_range(markers: pd.DataFrame, start_ms: int | None, end_ms: int | None) -> pd.DataFrame:
    """Marker rows whose watermark is in ``[start, end]``, plus the batch before the first one (so a
    regression across the range's start is seen); all rows without a range."""
    marks = markers.sort_values("batch_id").reset_index(drop=True)
    if start_ms is None and end_ms is None:
        return marks
    wm = marks["watermark_ms"]
    inside = wm.notna()
    if start_ms is not None:
        inside &= wm >= start_ms
    if end_ms is not None:
        inside &= wm <= end_ms
    if inside.any():
        first = int(inside.idxmax())
        if first > 0:
            inside.iloc[first - 1] = True
    return marks[inside].reset_index(drop=True)


def raw_batches_frame(markers: pd.DataFrame | None, min_batch_lines: int) -> pd.DataFrame:
    """One row per batch with its line counts; ``quarantine_rate`` only for batches of at least
    ``min_batch_lines`` lines (NaN, not rated, below)."""
    import numpy as np

    if markers is None or markers.empty:
        return _empty(RAW_BATCHES_COLUMNS)
    frame = markers[["batch_id", "events", "heartbeats", "quarantined"]].copy()
    frame["lines"] = frame["events"] + frame["heartbeats"] + frame["quarantined"]
    rated = frame["lines"] >= max(1, int(min_batch_lines))
    frame["quarantine_rate"] = np.where(rated, frame["quarantined"] / frame["lines"].clip(lower=1), np.nan)
    return frame[RAW_BATCHES_COLUMNS].reset_index(drop=True)


def windows_frame(
    windows: pd.DataFrame | None,
    markers: pd.DataFrame | None,
    window_ms: int,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> pd.DataFrame:
    """Committed window rows (every revision) starting in ``[start, end)`` with the watermark
    recorded for their batch (``batch_watermark_ms``, NaN when the batch has no ``watermarks``
    row), length and grid offset; per (window, key) how many rows are final (``finals``) and each
    revision's growth over the one before (``events_growth``, NaN on the first)."""
    import pandas as pd

    from tidemark.revisions import normalized

    if windows is None or windows.empty:
        return _empty(WINDOWS_COLUMNS)
    windows = normalized(windows)
    frame = pd.DataFrame(
        {
            "window_start_ms": T.epoch_ms(windows["window_start"]),
            "window_end_ms": T.epoch_ms(windows["window_end"]),
            "key": windows["key"],
            "events": windows["events"],
            "value_sum": windows["value_sum"],
            "batch_id": windows["batch_id"],
            "low_watermark_ms": T.epoch_ms(windows["low_watermark"]),
            "revision": windows["revision"],
            "is_final": windows["is_final"],
            "late_events": windows["late_events"],
        }
    )
    frame = frame[in_range(frame["window_start_ms"], start_ms, end_ms)]
    # A batch is committed by its watermarks row, written last: windows of a newer batch are a
    # batch in flight (validation concurrent with the stream), not a window without a watermark.
    committed = markers["batch_id"].max() if markers is not None and not markers.empty else -1
    frame = frame[frame["batch_id"] <= committed]
    by_batch = (
        markers.set_index("batch_id")["watermark_ms"] if markers is not None else pd.Series(dtype="float64")
    )
    by_batch = by_batch[~by_batch.index.duplicated(keep="last")]
    frame["batch_watermark_ms"] = frame["batch_id"].map(by_batch).astype("float64")
    frame["length_ms"] = frame["window_end_ms"] - frame["window_start_ms"]
    frame["start_offset_ms"] = frame["window_start_ms"] % window_ms
    for name in ("window_start", "window_end", "low_watermark", "batch_watermark"):
        frame[name] = _iso(frame[f"{name}_ms"])
    frame = frame.sort_values(["window_start_ms", "key", "revision"])
    per_key = frame.groupby(["window_start_ms", "key"], dropna=False)
    # distinct final revisions: a row written twice is window_key_unique's to report
    final_revisions = frame["revision"].where(frame["is_final"].astype(bool))
    frame["finals"] = final_revisions.groupby(
        [frame["window_start_ms"], frame["key"]], dropna=False
    ).transform("nunique")
    frame["finals"] = frame["finals"].fillna(0).astype("int64")
    frame["events_growth"] = per_key["events"].diff()
    return frame[WINDOWS_COLUMNS].reset_index(drop=True)


def reconciliation_frame(
    rows: pd.DataFrame | None, start_ms: int | None = None, end_ms: int | None = None
) -> pd.DataFrame:
    """Closed windows of the ``reconciliation`` table starting in ``[start, end)``, with
    ``late_share`` = late events / batch events (0 for an empty window)."""
    import numpy as np

    from tidemark.alignment import CLOSED, normalized

    if rows is None or rows.empty:
        return _empty(RECONCILIATION_COLUMNS)
    # The row type's reading: rows reconciled before window revisions existed have nothing
    # folded, and their on-time result is the final one.
    frame = normalized(rows[rows["status"] == CLOSED])
    frame = frame[in_range(frame["window_start_ms"], start_ms, end_ms)].copy()
    batch = frame["batch_events"].astype("float64")
    frame["late_share"] = np.where(batch > 0, frame["late_events"] / batch.clip(lower=1), 0.0)
    # A final alignment below 1.0 is only ever records beyond the allowed lateness (late_events).
    frame["final_gap_explained"] = (
        (frame["alignment"].astype("float64") >= 1.0)
        | (frame["late_events"] > 0)
        | (frame["unexplained"] != 0)
    )
    frame["window_start"] = _iso(frame["window_start_ms"])
    return frame.sort_values("window_start_ms")[RECONCILIATION_COLUMNS].reset_index(drop=True)


def stall_intervals(stalls: pd.DataFrame | None) -> list[tuple[int, int | None]]:
    """Recorded stalls as (start, end) processing-time ms; an end of None means still open."""
    import pandas as pd

    if stalls is None or stalls.empty:
        return []
    starts, ends = T.epoch_ms(stalls["started_at"]), T.epoch_ms(stalls["ended_at"])
    return [
        (int(s), None if pd.isna(e) else int(e))
        for s, e in zip(starts, ends, strict=True)
        if not pd.isna(s)  # skip rows without a start
    ]


def watermarks_frame(
    markers: pd.DataFrame | None,
    stalls: pd.DataFrame | None,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> pd.DataFrame:
    """Batches with a watermark, in batch order; ``in_stall`` when the batch ran during a recorded
    stall (stalls table) or while one was open (its row's ``stall_since_ms``, state STALLED)."""
    import numpy as np

    if markers is None or markers.empty:
        return _empty(WATERMARKS_COLUMNS)
    marks = batches_in_range(markers, start_ms, end_ms)
    marks = marks[marks["watermark_ms"].notna()].copy()
    ts = marks["batch_ts_ms"].astype("float64")
    in_stall = marks["stall_since_ms"].notna() | (marks["state"] == "STALLED")
    for begin, end in stall_intervals(stalls):
        in_stall |= (ts >= begin) & (ts <= (end if end is not None else math.inf))
    marks["in_stall"] = in_stall.to_numpy(dtype=bool)
    marks["lag_ms"] = marks["frontier_ms"].astype("float64") - marks["watermark_ms"].astype("float64")
    marks["lag_outside_stall_ms"] = np.where(marks["in_stall"], np.nan, marks["lag_ms"])
    marks["watermark"] = _iso(marks["watermark_ms"])
    marks["previous"] = _iso(marks["previous_ms"])
    return marks[WATERMARKS_COLUMNS].reset_index(drop=True)


def events_frame_local(
    config: PipelineConfig,
    start_ms: int | None = None,
    end_ms: int | None = None,
    max_rows: int = DEFAULT_MAX_LOCAL_EVENTS,
) -> pd.DataFrame:
    """The events table's rows with event time in ``[start, end)`` through delta-rs (no JVM);
    :class:`~tidemark.config.ConfigError` when there are more than ``max_rows``."""
    import pandas as pd
    import pyarrow.dataset as ds

    path = config.table_path(S.EVENTS)
    if not T.table_exists(path):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in [*S.EVENT_COLUMNS, "arrival_lead_ms"]})

    dataset = T.open_table(path).to_pyarrow_dataset()
    condition = None
    if start_ms is not None:
        condition = ds.field("event_time") >= start_ms
    if end_ms is not None:
        upper = ds.field("event_time") < end_ms
        condition = upper if condition is None else condition & upper
    rows = dataset.count_rows(filter=condition)
    if rows > max_rows:
        raise ConfigError(
            f"validate: {rows:,} events in the range exceed the {max_rows:,} read without Spark; "
            "give a narrower --start/--end or use --spark"
        )
    frame = dataset.to_table(filter=condition).to_pandas()
    frame["arrival_lead_ms"] = frame["event_time"] - T.epoch_ms(frame["ingest_ts"])
    return frame


def events_frame_spark(
    spark: SparkSession, config: PipelineConfig, start_ms: int | None = None, end_ms: int | None = None
) -> DataFrame | None:
    """The same rows as :func:`events_frame_local`, as a Spark DataFrame; None without a table."""
    from pyspark.sql import functions as F

    path = config.table_path(S.EVENTS)
    if not T.table_exists(path):
        return None
    frame = T.read_table(spark, path)
    if start_ms is not None:
        frame = frame.where(F.col("event_time") >= start_ms)
    if end_ms is not None:
        frame = frame.where(F.col("event_time") < end_ms)
    return frame.withColumn("arrival_lead_ms", F.col("event_time") - F.unix_millis("ingest_ts"))
