"""What counts as a publisher retry: the one definition the stream and the recompute both call.

**A retry is a copy of a record: the same** ``event_id`` **from the same** ``host`` **at the same**
``event_time`` (:data:`RETRY_KEY`). A record that reuses an id at another event time (a
per-process counter that restarted, say) is a distinct record: it is stored and counted, and the
events suite's ``event_id_unique`` reports the reuse as a data-quality finding.

Which copies count, so that the answer is a function of the input alone and never of where the
batches are cut:

* Copies are taken in the order they were read (:func:`read_order`): arrival (file modification
  time, Kafka record timestamp), then the file's name or the Kafka partition and offset, then the
  payload, so even copies whose payload differs (outside the contract) resolve the same way.
* The first copy counts. A later copy is a retry when it arrives within ``dedup_horizon`` of the
  last copy that counted, else it counts again (the catalog forgot it): the horizon is measured in
  arrival time, which the input carries, not in processing time, which depends on when batches
  ran.

Where it is applied:

* the stream, inside a batch: :func:`key_hash` finds the rows that share a key (:mod:`tidemark.dedup`),
  and :func:`kept_mask` (on the driver) or :func:`keep_copies` (Spark, many suspects) resolves them;
* the stream, across batches: the earlier batches' copies of a key (their arrival, ``arrival_ms`` in
  ``events``) are the "last copy that counted" those functions start from;
* the batch recompute (:mod:`tidemark.recompute`): :func:`keep_copies` over the raw input, grouped
  by :func:`hashed_key` (the same key, its strings hashed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# The identity of a record: copies share all three.
RETRY_KEY = ("host", "event_id", "event_time")
# The retry key hashed (:func:`key_hashes`), as the recompute groups by it (:func:`hashed_key`).
HASHED_KEY = ("_h1", "_h2", "event_time")
# The read order's columns (:func:`with_read_order`), compared left to right.
ORDER = ("arrival_ms", "_src", "_offset", "key", "value")
# A Kafka line's source is ``topic/partition@offset``: the offset orders a partition's lines.
_OFFSET = r"@(\d+)$"


def key_hash() -> Column:
    """The 64-bit hash (xxhash64) of a row's :data:`RETRY_KEY`: rows of one record share it."""
    from pyspark.sql import functions as F

    return F.xxhash64(*RETRY_KEY)


def key_hashes(wanted: Column | None = None) -> list[Column]:
    """Two hashes of :data:`RETRY_KEY` (xxhash64 and murmur3: 96 bits with ``event_time`` beside
    them), named ``_h1`` and ``_h2``, for grouping without keeping strings in the aggregation's
    buffers. Two distinct records of one hour of 5M events share both with odds of about 1e-16.
    ``wanted`` false: NULL hashes (rows that are no events)."""
    from pyspark.sql import functions as F

    cols = [F.xxhash64(*RETRY_KEY), F.hash(*RETRY_KEY)]
    if wanted is not None:
        cols = [F.when(wanted, c) for c in cols]
    return [cols[0].alias("_h1"), cols[1].alias("_h2")]


def hashed_key() -> list[Column]:
    """:data:`RETRY_KEY` as :func:`keep_copies` groups rows that carry :func:`key_hashes`: the two
    hashes, with ``event_time`` (a long) kept beside them."""
    from pyspark.sql import functions as F

    return [F.col(c) for c in HASHED_KEY]


def read_order(rows: DataFrame) -> list[Column]:
    """The :data:`ORDER` columns of ``rows`` (``raw``-less parsed rows with ``source`` and
    ``arrival_ms``): ``_src`` is the source less a Kafka offset, ``_offset`` the offset (NULL for
    a file)."""
    from pyspark.sql import functions as F

    offset = F.regexp_extract(F.col("source"), _OFFSET, 1)
    return [
        F.col("arrival_ms"),
        F.regexp_replace(F.col("source"), _OFFSET, "").alias("_src"),
        F.when(offset != "", offset.cast("long")).alias("_offset"),
        F.col("key"),
        F.col("value"),
    ]


def with_read_order(rows: DataFrame) -> DataFrame:
    """``rows`` with ``_src`` and ``_offset`` added (see :func:`read_order`)."""
    return rows.select("*", *read_order(rows)[1:3])


def keep_copies(
    rows: DataFrame,
    horizon_ms: int,
    *,
    key: list[Column] | None = None,
    stored: DataFrame | None = None,
    wanted: Column | None = None,
) -> DataFrame:
    """``rows`` (with :data:`ORDER` columns) less the retries among them, by Spark: per key, the
    copies in read order, each kept when it is the first or arrives more than ``horizon_ms``
    after the last kept one.

    ``key`` groups the rows (default: the :data:`RETRY_KEY` columns; the recompute passes
    :func:`key_hashes` and ``event_time``). ``stored``: per :data:`RETRY_KEY`, ``last_ms``, the
    arrival of the latest copy earlier batches kept (they come before every row here). ``wanted``
    false: rows that are no records, dropped (they are grouped apart, not filtered first: a filter
    on parsed rows is pushed below the parse)."""
    from pyspark.sql import functions as F

    names = [c for c in rows.columns if c not in ORDER or c in ("arrival_ms", "key", "value")]
    order = [F.col(c).alias(f"_o{i}") for i, c in enumerate(ORDER)]
    element = F.struct(*order, F.struct(*names).alias("_row"))
    group = key if key is not None else [F.col(c) for c in RETRY_KEY]
    copies = rows.groupBy(*group).agg(
        F.array_sort(F.collect_list(element if wanted is None else F.when(wanted, element))).alias("_c")
    )
    if stored is not None:
        copies = copies.join(stored, list(RETRY_KEY), "left")
        last = F.col("last_ms")
    else:
        last = F.lit(None).cast("long")
    kept = F.aggregate(
        F.col("_c"),
        F.struct(last.alias("last"), F.slice(F.col("_c"), 1, 0).alias("kept")),
        lambda acc, x: F.when(
            acc["last"].isNull() | (x["_o0"] - acc["last"] > F.lit(horizon_ms)),
            F.struct(x["_o0"].alias("last"), F.concat(acc["kept"], F.array(x)).alias("kept")),
        ).otherwise(acc),
    )["kept"]
    single = (F.size("_c") == 1) & last.isNull()
    return copies.select(F.explode(F.when(single, F.col("_c")).otherwise(kept)).alias("_k")).select(
        "_k._row.*"
    )


def kept_mask(rows: pd.DataFrame, horizon_ms: int, stored: pd.DataFrame | None = None) -> np.ndarray:
    """Which of ``rows`` (a pandas frame with :data:`RETRY_KEY` and :data:`ORDER` columns) to
    keep: the same rule as :func:`keep_copies`, on the driver. ``stored``: :data:`RETRY_KEY` and
    ``last_ms``, as there."""
    n = len(rows)
    if n == 0:
        return np.zeros(0, dtype=bool)
    frame = rows[list(RETRY_KEY) + list(ORDER)].copy()
    frame["_i"] = np.arange(n)
    if stored is not None and len(stored):
        last = stored.groupby(list(RETRY_KEY), sort=False)["last_ms"].max().rename("_last")
        frame = frame.join(last, on=list(RETRY_KEY))
    else:
        frame["_last"] = np.nan
    frame = frame.sort_values([*RETRY_KEY, *ORDER], kind="stable", na_position="first")
    first = ~frame.duplicated(list(RETRY_KEY))
    arrival = frame["arrival_ms"].to_numpy(dtype="float64")
    last = frame["_last"].to_numpy(dtype="float64")
    keep = np.zeros(n, dtype=bool)
    # The common case, vectorised: one copy and nothing stored, or every copy of a key within
    # the horizon of the first (then only the first counts).
    start = first.to_numpy()
    group = np.cumsum(start) - 1
    anchor = np.where(start, arrival, np.nan)
    anchor = pd.Series(anchor).ffill().to_numpy()
    span = pd.Series(arrival).groupby(group).transform("max").to_numpy() - anchor
    simple = np.isnan(last) & (span <= horizon_ms)
    keep[simple & start] = True
    # The rest (a stored copy, or copies beyond the horizon): each key's copies in order.
    index = frame["_i"].to_numpy()
    rest = np.flatnonzero(~simple)
    prev_group, held = -1, np.nan
    for pos in rest:
        if group[pos] != prev_group:
            prev_group, held = group[pos], last[pos]
        if np.isnan(held) or arrival[pos] - held > horizon_ms:
            keep[pos], held = True, arrival[pos]
    out = np.zeros(n, dtype=bool)
    out[index] = keep
    return out
