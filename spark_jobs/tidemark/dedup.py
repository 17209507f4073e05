"""exactly_once deduplication: the catalog of seen records is the ``events`` table itself.

What a retry is, :mod:`tidemark.retries` defines, once, for this module and the recompute alike:
a copy of a record (the same ``event_id``, host and event time) that arrives within
``dedup_horizon`` of the last copy that counted. The design source (Streaming Systems, chapter
5) keeps a catalog of seen ids and puts a filter in front of it, so most records never read the
catalog. Tidemark's filter is exact for its sources, because a host publishes in event-time
order:

* A record whose event time is past its host's **progress** (the latest event time the batches
  before this one committed for the host) cannot be a copy of a committed record: that record's
  time would be at most the progress. Nearly every record is such a record, and is never looked up.
* The others (retries; ties at the progress mark; records of a host out of order) are
  **candidates**: they are looked up in the events earlier batches stored that arrived within
  ``dedup_horizon`` of them (``arrival_ms``), with delta-rs on the driver, pruned by the
  candidates' event-time ranges through Delta's file statistics: times far apart are looked up
  as separate ranges (:func:`time_ranges`), so a retry from hours ago reads the files of its own
  time, not every file stored since.
* Copies inside the batch are found by a 64-bit hash of the record's key
  (:func:`tidemark.retries.key_hash`): the batch's hashes are sorted on the driver
  (:func:`suspects_of`, 8 bytes and a flag a row); only keys whose hash repeats are compared.
  The same Spark job collects any other per-row columns the caller asks for (the batch counts
  its hosts from them: :attr:`DedupResult.scanned`). With ``spark.per_row_work: executors``
  Spark groups the hashes instead (:func:`suspects_on_executors`), the catalog is read by Spark
  (the files decoded on the executors), and the driver receives only the suspects and what the
  catalog holds of them: on a cluster, one driver core caps the input rate far higher
  (docs/benchmarks.md). A small batch collected whole stays on the driver either way.

Only the rows of the two suspect kinds leave the cached batch: they are collected, resolved on
the driver (:func:`tidemark.retries.kept_mask`, the catalog's copies first) and put back beside
the rest. Above :data:`DRIVER_MAX_ROWS` suspects (a publisher replaying hours of input) Spark
resolves them instead (:func:`tidemark.retries.keep_copies`), reading the catalog with Spark's
Delta reader.

Why a replay gives the same rows: the batch's lines come from Spark's offset log, the progress
from the state the previous batch committed, and the catalog lookup only sees batches below this
one (``batch_id < N``), so rows a crashed attempt of this batch wrote are not in it. Why another
cut of the same input gives the same rows: the rule compares arrivals and read order, which the
input carries, never when a batch ran. The catalog outlives the checkpoint: after
``--reset-checkpoint`` (:mod:`tidemark.reset`) a retry of a record an earlier run stored is
still found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tidemark import retries
from tidemark import tables as T
from tidemark.suspects import HASH, suspects_of, suspects_on_executors
from tidemark.suspects import at_or_below as _at_or_below

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from tidemark.progress import HostProgress

NO_REMOVED = pd.DataFrame({"host": pd.Series(dtype="object"), "event_time": pd.Series(dtype="int64")})
# Per host, the kept records behind its progress (read out of order): how many, the earliest, the
# progress they were behind.
NO_OUT_OF_ORDER = pd.DataFrame(
    {
        "host": pd.Series(dtype="object"),
        "records": pd.Series(dtype="int64"),
        "earliest_ms": pd.Series(dtype="int64"),
        "progress_ms": pd.Series(dtype="int64"),
    }
)
# Up to this many suspect rows in a batch are resolved on the driver; more by Spark.
DRIVER_MAX_ROWS = 200_000
# A batch read from at most this many bytes of files on this machine is collected whole by its
# first Spark job, and cut on the driver (DedupResult.local): one Spark job for a small batch
# instead of four. 1 MiB is ~7,000 lines of 150 bytes, under the rows the route takes
# (``whole_max_rows``); a batch of more rows goes on by Spark's route, having paid for the wider
# collect.
WHOLE_MAX_BYTES = 1 << 20
# The same for a batch of Kafka records, counted from its offsets.
WHOLE_MAX_RECORDS = 7_000
# Candidates' event times closer than this share one lookup range; ranges farther apart are
# looked up each alone, so a retry from hours ago costs the catalog files of its own time, not
# every file stored since. At most MAX_LOOKUP_RANGES ranges (the widest gaps stay breaks).
RANGE_GAP_MS = 10 * 60_000
MAX_LOOKUP_RANGES = 64


@dataclass(frozen=True)
class DedupResult:
    rows: DataFrame  # the batch without retries
    looked_up: int  # candidates looked up in the catalog
    dropped: int  # retries removed (catalog hits and in-batch copies)
    # (host, event_time) of the removed rows when the driver resolved them, else None: counts
    # taken over the batch before deduplication are corrected by them (no read of ``rows``).
    removed: pd.DataFrame | None = None
    cached: tuple = ()  # frames persisted for the batch (the caller unpersists them)
    # Per host, the records kept although behind the host's progress: a host's input read out of
    # order (ties at the progress mark are not). None when Spark resolved the suspects (not
    # counted there).
    out_of_order: pd.DataFrame | None = None
    # The ``columns`` the caller asked for, of every row of the batch before deduplication
    # (collected by the hash pass); None when Spark resolved the suspects (no ``removed`` to
    # correct them by: read ``rows`` instead).
    scanned: pa.Table | None = None
    # A small batch asked for whole (``whole``): its rows without the retries, on the driver,
    # every column of the batch and the count columns' ``events``/``quarantined`` flags as
    # :data:`LOCAL_FLAGS`. Then ``rows`` is the batch as it came, and nothing reads it.
    local: pa.Table | None = None


# The flags a whole batch's rows carry on the driver (DedupResult.local): an event, a bad line.
LOCAL_FLAGS = {"events": "_is_event", "quarantined": "_is_quarantined"}


def deduplicate(
    spark: SparkSession,
    batch: DataFrame,
    *,
    batch_id: int,
    progress: HostProgress,
    batch_ts_ms: int,
    horizon_ms: int,
    events_path: str,
    columns: Sequence[Column] = (),
    lap=lambda name: None,
    whole: bool = False,
    whole_max_rows: int = 0,
    on_executors: bool = False,
) -> DedupResult:
    """``batch`` (cached, with ``ingest_ts``) without the publisher retries it holds.

    ``progress`` is the host progress the previous batch committed. The batch's :data:`HASH`
    column holds each event's key hash (NULL for a heartbeat or bad line: those are never
    retries). ``columns`` (named expressions over the batch) are collected per row by the same
    Spark job as the hashes and returned as :attr:`DedupResult.scanned`. ``whole`` (a small
    batch): that job collects the whole batch, and up to ``whole_max_rows`` rows it is resolved
    on the driver (:func:`_resolve_whole`); over them, as any batch. ``on_executors`` (and not
    ``whole``): Spark finds the suspect hashes (:func:`suspects_on_executors`) and reads the
    catalog (:attr:`_Catalog.spark`); nothing is collected per row, so
    :attr:`DedupResult.scanned` is None, and the driver receives the suspects only."""
    from pyspark.sql import functions as F

    ceiling = progress.max_ms()
    found, scanned, suspect_hashes, n_suspects = _find_suspects(batch, ceiling, columns, whole, on_executors)
    lap("dedup_hashes")
    if whole and found is not None and found.num_rows <= whole_max_rows and n_suspects <= DRIVER_MAX_ROWS:
        # small: on the driver whole, its catalog lookup too (a Spark read costs more)
        catalog = _Catalog(events_path, batch_id, horizon_ms)
        return _resolve_whole(found, scanned, batch, suspect_hashes, progress, catalog, lap)
    # executors: the catalog is read by Spark's Delta reader (on the executors), not on the driver
    catalog = _Catalog(events_path, batch_id, horizon_ms, spark if on_executors else None)
    if n_suspects == 0:
        # A record behind its host's progress is at or below the ceiling: a suspect. None here.
        return DedupResult(batch, 0, 0, removed=NO_REMOVED, out_of_order=NO_OUT_OF_ORDER, scanned=scanned)
    hashes = spark.createDataFrame(pa.table({"_suspect": pa.array(suspect_hashes, pa.int64())}))
    on_hash = F.col(HASH) == F.col("_suspect")
    clean = batch.join(F.broadcast(hashes), on_hash, "left_anti")
    suspects = batch.join(F.broadcast(hashes), on_hash, "left_semi")
    if n_suspects <= DRIVER_MAX_ROWS:
        return _resolve_on_the_driver(spark, batch, clean, suspects, progress, catalog, scanned, lap)
    # Many suspects: Spark resolves them, looking every one up in the catalog (a suspect that is
    # no candidate cannot be there, so the lookup only costs time).
    suspects = suspects.persist()
    stored = catalog.stored_spark(spark, suspects, _suspect_ranges(suspects, ceiling))
    kept = retries.keep_copies(retries.with_read_order(suspects), horizon_ms, stored=stored)
    kept = kept.select(*batch.columns).persist()
    n_kept = kept.count()
    lap("dedup_spark")
    return DedupResult(
        clean.unionByName(kept), n_suspects, n_suspects - n_kept, removed=None, cached=(suspects, kept)
    )


def _resolve_on_the_driver(
    spark: SparkSession,
    batch: DataFrame,
    clean: DataFrame,
    suspects: DataFrame,
    progress: HostProgress,
    catalog: _Catalog,
    scanned: pa.Table,
    lap,
) -> DedupResult:
    """Few suspects: collected, each tested against its host's progress and looked up in the
    catalog on the driver; the kept ones go back to Spark beside the clean rows."""
    rows = retries.with_read_order(suspects).toArrow()
    lap("dedup_suspects")
    keep, looked_up, out_of_order = _resolve_on_driver(rows, progress, catalog)
    rows = rows.drop_columns(["_src", "_offset"])
    kept = rows.filter(pa.array(keep))
    removed = rows.filter(pa.array(~keep)).select(["host", "event_time"]).to_pandas()
    lap("dedup_lookup")
    back = spark.createDataFrame(kept, schema=batch.schema) if kept.num_rows else None
    lap("dedup_back")
    result = clean if back is None else clean.unionByName(back)
    return DedupResult(
        result, looked_up, len(removed), removed=removed, out_of_order=out_of_order, scanned=scanned
    )


def whole_input(local_bytes: int | None, records: int | None = None) -> bool:
    """Is a batch read from ``local_bytes`` of files on this machine, or of ``records`` Kafka
    records (None: not known), small enough to collect whole (:data:`WHOLE_MAX_BYTES`,
    :data:`WHOLE_MAX_RECORDS`)?"""
    if local_bytes is not None:
        return local_bytes <= WHOLE_MAX_BYTES
    return records is not None and records <= WHOLE_MAX_RECORDS


def _hash_pass(
    batch: DataFrame, below: Column, columns: Sequence[Column], whole: bool
) -> tuple[pa.Table, pa.Table]:
    """The batch's first Spark job: per row its :data:`HASH`, ``_below`` and ``columns``, and
    when ``whole`` every column of the batch and its read order too; (that, the ``columns``)."""
    from pyspark.sql import functions as F

    if not whole:
        found = batch.select(HASH, below.alias("_below"), *columns).toArrow()
        return found, found.drop_columns([HASH, "_below"])
    order = retries.read_order(batch)[1:3]  # _src, _offset
    found = batch.select("*", *order, below.alias("_below"), F.struct(*columns).alias("_scan")).toArrow()
    return found, pa.Table.from_struct_array(found["_scan"])


def _find_suspects(
    batch: DataFrame, ceiling: int | None, columns: Sequence[Column], whole: bool, on_executors: bool
) -> tuple[pa.Table | None, pa.Table | None, np.ndarray, int]:
    """Step 1, the suspect hashes: repeated in the batch, or held by a row at or below the
    ``ceiling`` (the highest host progress). A candidate's event time is at most its host's
    progress, so at most the ceiling: one comparison with a constant finds a superset of the
    candidates without joining the hosts (docs/benchmarks.md); the driver then tests each
    suspect against its host's. Returns the hash pass's rows (None when Spark found the
    suspects), the ``columns`` it collected, the suspect hashes, and how many rows hold them."""
    from pyspark.sql import functions as F

    below = _at_or_below(ceiling) if ceiling is not None else F.lit(False)
    if on_executors and not whole:
        return (None, None, *suspects_on_executors(batch, below))
    found, scanned = _hash_pass(batch, below, columns, whole)
    hashed = pc.is_valid(found[HASH])
    hashes, below_ = found[HASH].filter(hashed).to_numpy(), found["_below"].filter(hashed).to_numpy()
    return (found, scanned, *suspects_of(hashes, below_))


def _resolve_whole(
    found: pa.Table,
    scanned: pa.Table,
    batch: DataFrame,
    suspect_hashes: np.ndarray,
    progress: HostProgress,
    catalog: _Catalog,
    lap,
) -> DedupResult:
    """A whole small batch on the driver (``found``: its columns, read order, ``_below``,
    ``_scan``): the suspects are cut from it and resolved as :func:`_resolve_on_the_driver`
    resolves them, and the rows kept are :attr:`DedupResult.local`: the batch's one Spark job."""
    flags = [scanned[name].fill_null(False) for name in LOCAL_FLAGS]
    rows = found.drop_columns(["_below", "_scan"])
    for name, flag in zip(LOCAL_FLAGS.values(), flags, strict=True):
        rows = rows.append_column(name, flag)
    is_suspect = pc.fill_null(pc.is_in(rows[HASH], value_set=pa.array(suspect_hashes, pa.int64())), False)
    suspects = rows.filter(is_suspect)
    keep = np.ones(rows.num_rows, dtype=bool)
    looked_up, removed, out_of_order = 0, NO_REMOVED, NO_OUT_OF_ORDER
    if suspects.num_rows:
        kept, looked_up, out_of_order = _resolve_on_driver(suspects, progress, catalog)
        keep[np.flatnonzero(is_suspect.to_numpy(zero_copy_only=False))] = kept
        removed = suspects.filter(pa.array(~kept)).select(["host", "event_time"]).to_pandas()
    local = rows.filter(pa.array(keep)).drop_columns(["_src", "_offset"])
    lap("dedup_whole")
    return DedupResult(
        batch,
        looked_up,
        len(removed),
        removed=removed,
        out_of_order=out_of_order,
        scanned=scanned,
        local=local,
    )


def _suspect_ranges(suspects: DataFrame, ceiling: int | None) -> list[tuple[int, int]]:
    """Lookup ranges of many suspects, from the RANGE_GAP_MS buckets their times fall in (a few
    rows to collect), cut at the ceiling: a candidate's time is at most its host's progress."""
    from pyspark.sql import functions as F

    if ceiling is None:
        return []
    buckets = [
        r[0] for r in suspects.select(F.floor(F.col("event_time") / RANGE_GAP_MS)).distinct().collect()
    ]
    ranges: list[tuple[int, int]] = []
    for bucket in sorted(int(b) for b in buckets):
        lo, hi = bucket * RANGE_GAP_MS, (bucket + 1) * RANGE_GAP_MS - 1
        if ranges and lo == ranges[-1][1] + 1:  # the next bucket: one range
            ranges[-1] = (ranges[-1][0], hi)
        else:
            ranges.append((lo, hi))
    return [(lo, min(hi, ceiling)) for lo, hi in ranges if lo <= ceiling]


def time_ranges(
    times, gap_ms: int = RANGE_GAP_MS, max_ranges: int = MAX_LOOKUP_RANGES
) -> list[tuple[int, int]]:
    """Sorted, disjoint ``[lo, hi]`` ranges (inclusive) covering every one of ``times``: times
    closer than ``gap_ms`` share a range; at most ``max_ranges``, breaking at the widest gaps."""
    t = np.unique(np.asarray(times, dtype=np.int64))
    if len(t) == 0:
        return []
    gaps = np.diff(t)
    breaks = np.flatnonzero(gaps > gap_ms)
    if len(breaks) > max_ranges - 1:
        breaks = np.sort(breaks[np.argsort(gaps[breaks], kind="stable")[::-1][: max_ranges - 1]])
    starts, ends = np.concatenate([[0], breaks + 1]), np.concatenate([breaks, [len(t) - 1]])
    return [(int(t[s]), int(t[e])) for s, e in zip(starts, ends, strict=True)]


@dataclass(frozen=True)
class _Catalog:
    """The events batches before ``batch_id`` stored. Lookups name the event-time range of the
    records they look for (copies have the same time), which Delta's file statistics prune the
    files by, and the earliest arrival that matters (``horizon_ms`` before the earliest
    candidate's): a stored copy that arrived before that cannot hold a candidate back."""

    path: str
    batch_id: int
    horizon_ms: int
    # Set: :meth:`stored` reads the catalog with Spark (``spark.per_row_work: executors``), so the
    # files' decoding runs on the executors; None: with delta-rs on the driver.
    spark: SparkSession | None = None

    def lookup_filter(self, ranges: list[tuple[int, int]], since_ms: int | None = None, names=()):
        """The catalog rows a lookup may match: earlier batches, event time in one of ``ranges``
        (the files' statistics prune by each range separately), arrived at or after ``since_ms``
        (``names``: the table's columns; a table written before ``arrival_ms`` existed is
        compared by ``ingest_ts``, which is never before the arrival)."""
        import pyarrow.dataset as ds

        in_ranges = None
        for lo, hi in ranges:
            one = (ds.field("event_time") >= lo) & (ds.field("event_time") <= hi)
            in_ranges = one if in_ranges is None else in_ranges | one
        assert in_ranges is not None, "a lookup names at least one range"
        wanted = (ds.field("batch_id") < self.batch_id) & in_ranges
        if since_ms is None:
            return wanted
        ingested = ds.field("ingest_ts") >= pa.scalar(since_ms * 1000, pa.timestamp("us", tz="UTC"))
        if "arrival_ms" not in names:
            return wanted & ingested
        arrived = ds.field("arrival_ms") >= since_ms
        return wanted & (arrived | (ds.field("arrival_ms").is_null() & ingested))

    def stored(self, candidates: pd.DataFrame, ranges: list[tuple[int, int]]) -> pd.DataFrame:
        """The catalog's copies of ``candidates`` (rows with :data:`tidemark.retries.RETRY_KEY`
        and ``arrival_ms``, event times in ``ranges``): the key and ``last_ms``, the copy's
        arrival (delta-rs, on the driver; with :attr:`spark`, :meth:`stored_spark` over the
        candidates, the latest copy's arrival per key)."""
        key = list(retries.RETRY_KEY)
        none = pd.DataFrame(
            {"host": pd.Series(dtype="object"), "event_id": pd.Series(dtype="object")}
        ).assign(event_time=pd.Series(dtype="int64"), last_ms=pd.Series(dtype="int64"))
        if candidates.empty or not ranges or not T.table_exists(self.path):
            return none
        if self.spark is not None:
            wanted = pa.Table.from_pandas(candidates[[*key, "arrival_ms"]], preserve_index=False)
            first = int(candidates["arrival_ms"].min())  # known here: no Spark job for it
            by_spark = self.stored_spark(self.spark, self.spark.createDataFrame(wanted), ranges, first)
            return none if by_spark is None else by_spark.toArrow().to_pandas()
        found = self._read_locally(candidates, ranges)
        return none if found is None else found.merge(candidates[key].drop_duplicates(), on=key)

    def _read_locally(self, candidates: pd.DataFrame, ranges: list[tuple[int, int]]) -> pd.DataFrame | None:
        """The catalog rows of ``candidates``' ids in ``ranges``, read with delta-rs on the
        driver: the key and ``last_ms``; None when there are none."""
        import pyarrow.dataset as ds

        key = list(retries.RETRY_KEY)
        dataset = T.open_table(self.path).to_pyarrow_dataset()
        names = dataset.schema.names
        since = int(candidates["arrival_ms"].min()) - self.horizon_ms
        ids = pa.array(candidates["event_id"].unique(), pa.string())
        columns = [*key, *(c for c in ("arrival_ms",) if c in names), "ingest_ts"]
        found = dataset.to_table(
            columns=columns, filter=self.lookup_filter(ranges, since, names) & ds.field("event_id").isin(ids)
        ).to_pandas()
        if found.empty:
            return None
        ingested = T.epoch_ms(found["ingest_ts"]).astype("int64")
        if "arrival_ms" in found:  # rows stored before the column existed: their ingest time
            found["last_ms"] = found["arrival_ms"].astype("float64").fillna(ingested).astype("int64")
        else:
            found["last_ms"] = ingested
        return found[[*key, "last_ms"]]

    def stored_spark(
        self,
        spark: SparkSession,
        suspects: DataFrame,
        ranges: list[tuple[int, int]],
        first_arrival_ms: int | None = None,
    ) -> DataFrame | None:
        """Per key of ``suspects`` the catalog holds, ``last_ms``: the arrival of its latest
        stored copy (read by Spark: many suspects); None when nothing can be stored.
        ``first_arrival_ms``: the suspects' earliest arrival when the caller knows it (else a
        Spark job finds it)."""
        from pyspark.sql import functions as F

        if not ranges or not T.table_exists(self.path):
            return None
        in_ranges = F.lit(False)
        for lo, hi in ranges:
            in_ranges = in_ranges | F.col("event_time").between(lo, hi)
        table = T.read_table(spark, self.path)
        ingested = F.unix_millis("ingest_ts")
        arrived = F.coalesce(F.col("arrival_ms"), ingested) if "arrival_ms" in table.columns else ingested
        key = list(retries.RETRY_KEY)
        since = first_arrival_ms
        if since is None:
            first = suspects.select(F.min("arrival_ms")).first()
            since = None if first is None else first[0]
        stored = table.where((F.col("batch_id") < self.batch_id) & in_ranges).select(
            *key, arrived.alias("last_ms")
        )
        if since is not None:
            stored = stored.where(F.col("last_ms") >= int(since) - self.horizon_ms)
        return (
            stored.join(suspects.select(*key).distinct(), key, "left_semi")
            .groupBy(*key)
            .agg(F.max("last_ms").alias("last_ms"))
        )


def _resolve_on_driver(
    rows: pa.Table, progress: HostProgress, catalog: _Catalog
) -> tuple[np.ndarray, int, pd.DataFrame]:
    """Which suspect ``rows`` to keep (a mask, :func:`tidemark.retries.kept_mask` after the
    catalog's copies); how many candidates were looked up; and per host, the kept rows behind
    its progress."""
    frame = rows.select([*retries.RETRY_KEY, *retries.ORDER]).to_pandas()
    # A host with no progress yet maps to NaN, and no comparison with NaN holds.
    before = progress.of(frame["host"].to_numpy())
    candidates = frame[frame["event_time"] <= before]
    stored = catalog.stored(candidates, time_ranges(candidates["event_time"].to_numpy()))
    keep = retries.kept_mask(frame, catalog.horizon_ms, stored)
    is_behind = keep & (frame["event_time"] < before).to_numpy()
    out_of_order = NO_OUT_OF_ORDER
    if is_behind.any():
        out_of_order = (
            frame[is_behind]
            .assign(progress_ms=before[is_behind].astype("int64"))
            .groupby("host", sort=True)
            .agg(
                records=("event_id", "size"),
                earliest_ms=("event_time", "min"),
                progress_ms=("progress_ms", "first"),
            )
            .reset_index()
        )
    looked_up = len(candidates.drop_duplicates(list(retries.RETRY_KEY)))
    return keep, looked_up, out_of_order
