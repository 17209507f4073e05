"""exactly_once's suspects: the rows of a batch whose record key may repeat a stored record or
another row of the batch (:mod:`tidemark.dedup` resolves them).

A row is a suspect when its key's hash (:data:`HASH`) is held by two rows of the batch, or by a
row whose event time is at or below the highest host progress committed (:func:`at_or_below`):
a candidate for a stored copy. By default the driver collects every row's hash and sorts them
(:func:`suspects_of`); with ``spark.per_row_work: executors`` Spark groups them
(:func:`suspects_on_executors`) and the driver receives the suspects only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# The column of the record key's 64-bit hash (tidemark.retries.key_hash) that exactly_once adds
# in the parsing stage.
HASH = "_id_hash"


def suspects_of(hashes: np.ndarray, below: np.ndarray) -> tuple[np.ndarray, int]:
    """The suspect hashes (sorted, unique) of a batch whose rows hold ``hashes`` (of their
    record keys) and ``below`` (at or below the ceiling), and how many rows hold them: a hash is
    a suspect when two rows hold it or a row below the ceiling does.

    The batch's hashes come to the driver as Arrow (9 bytes a row) and are sorted once here:
    at 5M rows ~1 s, against ~3 s for Spark's shuffle and hash aggregation over as many distinct
    keys, nearly all seen once (docs/benchmarks.md)."""
    if len(hashes) == 0:
        return np.empty(0, np.int64), 0
    ordered = np.sort(hashes)
    same = ordered[1:] == ordered[:-1]
    repeated = np.unique(ordered[1:][same])
    in_repeat = int(np.count_nonzero(same)) + len(repeated)  # rows of repeated hashes
    held_below = np.unique(hashes[below.astype(bool)])
    alone_below = np.setdiff1d(held_below, repeated, assume_unique=True)  # one row each
    return np.union1d(repeated, alone_below), in_repeat + len(alone_below)


def suspects_on_executors(batch: DataFrame, below: Column) -> tuple[np.ndarray, int]:
    """:func:`suspects_of` computed by Spark over ``batch``'s :data:`HASH` column and ``below``
    (a Column): a shuffle of the 8-byte hashes, partially aggregated, so the driver receives one
    row per suspect hash instead of one per row (``spark.per_row_work: executors``)."""
    from pyspark.sql import functions as F

    found = (
        batch.where(F.col(HASH).isNotNull())
        .groupBy(HASH)
        .agg(F.count(F.lit(1)).alias("_rows"), F.max(below.cast("int")).alias("_below"))
        .where((F.col("_rows") > 1) | (F.col("_below") == 1))
        .select(HASH, "_rows")
        .toArrow()
    )
    if not found.num_rows:
        return np.empty(0, np.int64), 0
    hashes = np.sort(found[HASH].to_numpy())
    return hashes, int(pc.sum(found["_rows"]).as_py())


def at_or_below(ceiling: int):
    """``event_time <= ceiling``, with the ceiling out of the generated code.

    Spark inlines a long literal into the Java it generates, so a ceiling that changes from batch
    to batch would make every batch compile the stage again and run it cold (~0.1 s per 500k
    rows); a decimal literal is passed to the code as a reference instead, and the compiled class
    is reused. Times are clamped below 10^17 ms (year ~3.2 million) to fit ``decimal(18,0)``,
    whose values are longs; a clamped time compares as at the clamp, which only adds suspects."""
    from decimal import Decimal

    from pyspark.sql import functions as F

    clamp = 10**17
    t = F.least(F.col("event_time"), F.lit(clamp)).cast(_DEC)
    return t <= F.lit(Decimal(min(ceiling, clamp))).cast(_DEC)


_DEC = "decimal(18,0)"
