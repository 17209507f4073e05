"""What the stream committed for a range of windows, read with delta-rs (no Spark job).

The reconciliation's stream side (:mod:`tidemark.reconcile`) and the report (:mod:`tidemark.report`)
and the Airflow side read the same ranges through here: the latest committed watermark, the
latest revision of each (window, key), the late records not folded into a revision, and the
``reconciliation`` rows of a range. A range is ``window_start`` in ``[start, end)`` (epoch ms;
a bound of None is open), pushed down to the Delta scan.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import PipelineConfig
from tidemark.revisions import latest, normalized, not_folded


def stream_watermark(config: PipelineConfig) -> int | None:
    """The stream's latest committed watermark (delta-rs read, no Spark job)."""
    marks = T.read_if_exists(config, S.WATERMARKS, ["watermark_ms"])
    if marks is None:
        return None
    values = marks["watermark_ms"].dropna()
    return int(values.max()) if len(values) else None


def default_range(config: PipelineConfig) -> tuple[int, int] | None:
    """``[first committed window's start, last committed window's end)`` in epoch ms: the range a
    reconcile without one covers; None while the pipeline has no window yet."""
    path = config.table_path(S.WINDOWS)
    if not T.table_exists(path):
        return None
    bounds = T.open_table(path).to_pyarrow_dataset().to_table(columns=["window_start", "window_end"])
    if bounds.num_rows == 0:
        return None
    first, last = pc.min(bounds["window_start"]), pc.max(bounds["window_end"])
    return first.cast(pa.int64()).as_py() // 1000, last.cast(pa.int64()).as_py() // 1000


def rows_in_range(
    path: str, columns: list[str], start_ms: int | None, end_ms: int | None
) -> pd.DataFrame | None:
    """A table's rows with ``window_start`` in ``[start, end)``, with ``window_start_ms`` (columns
    the table does not have yet are left out); None when there is no table."""
    if not T.table_exists(path):
        return None
    bounds = []
    if start_ms is not None:
        bounds.append(pc.field("window_start") >= pa.scalar(start_ms * 1000, S.TS_US))
    if end_ms is not None:
        bounds.append(pc.field("window_start") < pa.scalar(end_ms * 1000, S.TS_US))
    dataset = T.open_table(path).to_pyarrow_dataset()
    present = [c for c in columns if c in dataset.schema.names]
    where = bounds[0] & bounds[1] if len(bounds) == 2 else (bounds[0] if bounds else None)
    rows = dataset.to_table(columns=present, filter=where).to_pandas()
    rows["window_start_ms"] = T.epoch_ms(rows["window_start"]).astype("int64")
    return rows


def stream_per_key(config: PipelineConfig, start_ms: int, end_ms: int) -> pd.DataFrame:
    """Per (window_start_ms, key) of the stream's ``windows``: the latest revision's ``stream``
    events, the late records it folded in (``folded``) and the rows after the first
    (``revisions``). A few rows per window and key, so the diff needs no Spark job."""
    columns = ["window_start", "key", "events", "revision", "late_events", "is_final"]
    rows = rows_in_range(config.table_path(S.WINDOWS), columns, start_ms, end_ms)
    if rows is None or rows.empty:
        names = ("window_start_ms", "key", "stream", "folded", "revisions")
        return pd.DataFrame({n: [] for n in names}).astype({n: "int64" for n in names if n != "key"})
    # Rows of one revision are summed: a revision written twice shows as counted twice.
    rows = normalized(rows)
    per_revision = rows.groupby(["window_start_ms", "key", "revision"], as_index=False, dropna=False)[
        ["events", "late_events"]
    ].sum()
    newest = latest(per_revision, by=("window_start_ms", "key"))
    return pd.DataFrame(
        {
            "window_start_ms": newest["window_start_ms"].astype("int64"),
            "key": newest["key"],
            "stream": newest["events"].astype("int64"),
            "folded": newest["late_events"].astype("int64"),
            "revisions": newest["revision"].astype("int64"),
        }
    )


def late_per_key(config: PipelineConfig, start_ms: int, end_ms: int) -> pd.DataFrame:
    """Per (window_start_ms, key): the late records the stream did not fold into a revision
    (``folded`` false, or rows from before revisions existed)."""
    path = config.table_path(S.LATE_EVENTS)
    rows = rows_in_range(path, ["window_start", "key", "folded"], start_ms, end_ms)
    if rows is None or rows.empty:
        return pd.DataFrame({"window_start_ms": [], "key": [], "late": []}).astype(
            {"window_start_ms": "int64", "key": "object", "late": "int64"}
        )
    return (
        not_folded(rows).groupby(["window_start_ms", "key"], dropna=False).size().rename("late").reset_index()
    )


def late_by_host(
    config: PipelineConfig, start_ms: int | None = None, end_ms: int | None = None
) -> dict[int, list[tuple[str, int]]]:
    """Late records not folded into a revision (beyond the allowed lateness: what the final
    result misses) per window start and host, most late first (then by host)."""
    # only the columns the explanation needs (``folded``: tables from before revisions lack it)
    path = config.table_path(S.LATE_EVENTS)
    rows = rows_in_range(path, ["host", "window_start", "folded"], start_ms, end_ms)
    late = not_folded(rows) if rows is not None else None
    if late is None or late.empty:
        return {}
    counts = (
        late.groupby(["window_start_ms", "host"])
        .size()
        .reset_index(name="n")
        .sort_values(["window_start_ms", "n", "host"], ascending=[True, False, True])
    )
    return {
        int(ws): list(zip(group["host"], group["n"].astype(int), strict=True))
        for ws, group in counts.groupby("window_start_ms", sort=False)
    }


def reconciled_rows(config: PipelineConfig, start_ms: int | None, end_ms: int | None) -> pd.DataFrame | None:
    """The ``reconciliation`` rows (closed and open) with ``window_start`` in range, with
    ``window_start_ms``, sorted by it; None without the table."""
    rows = T.read_if_exists(config, S.RECONCILIATION)
    if rows is None or rows.empty:
        return rows
    rows = rows.assign(window_start_ms=T.epoch_ms(rows["window_start"]).astype("int64"))
    if start_ms is not None:
        rows = rows[rows["window_start_ms"] >= start_ms]
    if end_ms is not None:
        rows = rows[rows["window_start_ms"] < end_ms]
    return rows.sort_values("window_start_ms", kind="stable").reset_index(drop=True)
