"""Reading and writing a pipeline's Delta tables (their names and schemas: :mod:`tidemark.schemas`).

Every write of batch N carries Delta's ``txnAppId``/``txnVersion`` = (run identity, N): Delta skips
a write whose version it has already committed for that app id, so a replayed batch changes
nothing. Frames that come from executors (events, late events, quarantine) are written by Spark
when they are large and collected to the driver when they are small; the driver's frames (those,
closed windows, state, the watermark row) are written by delta-rs (the ``deltalake`` package)
with the same app-transaction check, which saves a Spark job and most of a second per write.

A table is created with the retention properties of the pipeline's ``maintenance`` config
(:meth:`tidemark.config.MaintenanceConfig.table_properties`). When ``tidemark maintain`` changes
them later (a table created before they were set, a changed config), its metadata commit fails a
write racing it before anything of the write is committed: such a write is tried again
(:data:`WRITE_ATTEMPTS`), and the app-transaction check keeps the retry idempotent.

Readers outside Spark (the Airflow side, the report, ``tidemark watermark``) use delta-rs:
:func:`read_if_exists` and :func:`latest_marker`.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from tidemark import faults, object_store, storage
from tidemark.config import PipelineConfig
from tidemark.identity import RunIdentity
from tidemark.schemas import CREATE_OPTIONS

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")


# Tries of a write whose commit lost to a concurrent change of the table's metadata.
WRITE_ATTEMPTS = 3


def metadata_changed(exc: BaseException) -> bool:
    """Did a commit fail because a concurrent commit changed the table's metadata (its properties)?
    delta-rs says so in a ``CommitFailedError``, Delta on Spark with ``MetadataChangedException``."""
    from deltalake.exceptions import CommitFailedError

    if isinstance(exc, CommitFailedError):
        return "Metadata changed" in str(exc)
    return type(exc).__name__ == "MetadataChangedException" and type(exc).__module__.startswith("delta.")


class TableWriter:
    """Idempotent Delta writes keyed by (run identity, batch id)."""

    def __init__(self, config: PipelineConfig, identity: RunIdentity) -> None:
        self.config = config
        self.identity = identity
        # Called before every write: raises when this writer may no longer write (the stream's
        # lease was taken over: tidemark.lease.Lease.check).
        self.fence: Callable[[], None] = lambda: None

    def path(self, table: str) -> str:
        return self.config.table_path(table)

    def create_options(self, table: str) -> dict[str, str]:
        """Table properties for a table a write creates (ignored when the table exists)."""
        return {**self.config.maintenance.table_properties(), **CREATE_OPTIONS.get(table, {})}

    def app_id(self, table: str) -> str:
        """The Delta app id of this run's writes to ``table``."""
        return f"{self.identity.app_id}:{table}"

    def commit_properties(
        self, table: str, batch_id: int, user_metadata: str | None = None
    ) -> CommitProperties:
        """A delta-rs commit's app transaction (run, batch), batch tag and ``userMetadata``."""
        from deltalake import CommitProperties, Transaction

        custom: dict[str, Any] = {"tidemark_batch": str(batch_id)}
        if user_metadata is not None:
            custom["userMetadata"] = user_metadata
        return CommitProperties(
            app_transactions=[Transaction(self.app_id(table), batch_id)], custom_metadata=custom
        )

    def committed(self, delta: DeltaTable, table: str, batch_id: int) -> bool:
        """Has this run already committed batch ``batch_id`` (or a later one) to ``delta``?"""
        done = delta.transaction_version(self.app_id(table))
        return done is not None and done >= batch_id

    def write(
        self,
        frame: DataFrame,
        table: str,
        batch_id: int,
        mode: str = "append",
        options: dict[str, Any] | None = None,
        user_metadata: str | None = None,
    ) -> None:
        """``user_metadata``: the commit's ``userMetadata`` (default: the batch tag), whichever
        route commits it (:mod:`tidemark.completeness`)."""
        import delta.exceptions  # noqa: F401  (Delta's commit conflicts raised as Python exceptions)

        self.fence()
        faults.reached(f"before:{table}", batch_id)
        if not (mode == "append" and self._append_files(frame, table, batch_id, user_metadata)):
            writer = (
                frame.write.format("delta")
                .mode(mode)
                .option("txnAppId", self.app_id(table))
                .option("txnVersion", batch_id)
                .option("userMetadata", user_metadata or json.dumps({"tidemark_batch": batch_id}))
            )
            # Table properties for a table this write creates (Delta ignores them on appends).
            for key, value in {**self.create_options(table), **(options or {})}.items():
                writer = writer.option(key, value)
            retrying(lambda: writer.save(self.path(table)))
        faults.reached(f"after:{table}", batch_id)

    def _append_files(
        self, frame: DataFrame, table: str, batch_id: int, user_metadata: str | None = None
    ) -> bool:
        """Append ``frame`` as Parquet files Spark writes and delta-rs commits
        (:mod:`tidemark.filecommit`), creating the table first (empty, with its properties) if
        need be; False when that path does not apply (a schema change, a type delta-rs does not
        write) and Spark's Delta writer must do it."""
        from deltalake import PostCommitHookProperties

        from tidemark import filecommit

        path = self.path(table)
        if not filecommit.applies_to(path):
            return False
        existing = open_if_exists(path)
        if existing is None:
            if not filecommit.create_table(path, frame, self.create_options(table)):
                return False
            existing = open_table(path)
        if self.committed(existing, table, batch_id):
            return True
        plan = filecommit.plan(existing, frame)
        if plan is None:
            return False
        directory = filecommit.write_files(frame, path, batch_id)
        actions = filecommit.add_actions(path, directory, plan)
        faults.reached(f"files:{table}", batch_id)

        def commit() -> None:
            existing.update_incremental()  # a retry after a concurrent metadata change
            if not self.committed(existing, table, batch_id):
                existing.create_write_transaction(
                    actions,
                    mode="append",
                    schema=existing.schema(),
                    commit_properties=self.commit_properties(table, batch_id, user_metadata),
                    # checkpointed below, at Spark's interval rather than delta-rs's
                    post_commithook_properties=PostCommitHookProperties(create_checkpoint=False),
                )

        retrying(commit)
        existing.update_incremental()
        filecommit.checkpoint_if_due(existing)
        drop_stale_checksum(path)
        return True

    def write_local(
        self,
        data: pa.Table,
        table: str,
        batch_id: int,
        mode: Literal["append", "overwrite"] = "append",
        merge_schema: bool = False,
        user_metadata: str | None = None,
    ) -> int:
        """Idempotent delta-rs write of a driver-side frame; returns the table version after it.

        ``merge_schema`` lets an append add columns (tables written before a column existed);
        ``user_metadata`` is the commit's ``userMetadata``."""
        self.fence()
        faults.reached(f"before:{table}", batch_id)
        path = self.path(table)

        def write() -> int | None:
            """The version when the batch is already committed, else None after writing it."""
            existing = open_if_exists(path)
            if existing is not None and self.committed(existing, table, batch_id):
                return existing.version()
            write_rs(
                path,
                data,
                mode=mode,
                # Table properties for a table this write creates (ignored by delta-rs otherwise).
                configuration=self.create_options(table),
                schema_mode="overwrite" if mode == "overwrite" else ("merge" if merge_schema else None),
                commit_properties=self.commit_properties(table, batch_id, user_metadata),
            )
            return None

        already = retrying(write)
        if already is not None:
            return already
        faults.reached(f"after:{table}", batch_id)
        return open_table(path).version()


def retrying(commit: Callable[[], T]) -> T:
    """``commit()``, tried again (:data:`WRITE_ATTEMPTS` in all) while it fails because a
    concurrent commit changed the table's metadata; its result."""
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            return commit()
        except Exception as exc:
            if attempt == WRITE_ATTEMPTS or not metadata_changed(exc):
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def write_rs(path: str, data, **options) -> None:
    """The project's one delta-rs write (``deltalake.write_deltalake``): a commit may checkpoint
    (delta-rs's post-commit hook), so Spark's checksum of ``_last_checkpoint`` is checked after it
    (:func:`drop_stale_checksum`)."""
    from deltalake import write_deltalake

    write_deltalake(path, data, storage_options=storage.delta_options(path), **options)
    drop_stale_checksum(path)


def drop_stale_checksum(path: str) -> bool:
    """Remove Spark's checksum of ``_delta_log/_last_checkpoint`` when it no longer matches the
    file; True when one was removed.

    Spark reads ``file:`` paths through Hadoop's checksummed local file system, which writes a
    ``.<name>.crc`` beside every file (CRC-32 per 512-byte chunk) and fails a read whose file no
    longer matches it (``ChecksumException``). ``_last_checkpoint`` is the one log file rewritten
    in place: once Spark has written it (its own checkpoint, every 10 Spark commits) and delta-rs
    rewrites it (a checkpoint by a delta-rs commit or by ``tidemark maintain``), every Spark read
    of the table fails until the stale checksum is gone. Found by the soak benchmark
    (docs/benchmarks.md). A checksum that matches is kept; object stores have no such files.
    """
    local = path.removeprefix("file://").removeprefix("file:")
    if "://" in local:
        return False
    log = os.path.join(local, "_delta_log")
    crc_path = os.path.join(log, "._last_checkpoint.crc")
    try:
        with open(crc_path, "rb") as f:
            crc = f.read()
        with open(os.path.join(log, "_last_checkpoint"), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return False
    if _hadoop_crc_matches(crc, data):
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(crc_path)
    return True


def _hadoop_crc_matches(crc: bytes, data: bytes) -> bool:
    """Does a Hadoop ``.crc`` file (``crc\\0``, bytes per checksum, a big-endian CRC-32 per chunk)
    describe ``data``? Anything else (another checksum type, a truncated file) counts as no."""
    if len(crc) < 8 or crc[:4] != b"crc\x00":
        return False
    (chunk,) = struct.unpack(">i", crc[4:8])
    if chunk <= 0:
        return False
    sums = [zlib.crc32(data[i : i + chunk]) for i in range(0, len(data), chunk)]
    return crc[8:] == b"".join(struct.pack(">I", x) for x in sums)


def open_table(path: str, version: int | None = None) -> DeltaTable:
    """A pipeline table through delta-rs, with the storage options of its location
    (:func:`tidemark.storage.delta_options`: none on a local disk)."""
    from deltalake import DeltaTable

    with object_store.reading(path):
        return DeltaTable(path, version=version, storage_options=storage.delta_options(path))


def open_if_exists(path: str) -> DeltaTable | None:
    """:func:`open_table`, or None when there is no table at ``path`` (one read of the log)."""
    from deltalake.exceptions import TableNotFoundError

    try:
        return open_table(path)
    except TableNotFoundError:
        return None


def table_exists(path: str) -> bool:
    from deltalake import DeltaTable

    with object_store.reading(path):
        return DeltaTable.is_deltatable(path, storage_options=storage.delta_options(path))


def read_if_exists(
    config: PipelineConfig, table: str, columns: list[str] | None = None, version: int | None = None
) -> pd.DataFrame | None:
    """A pipeline's table as pandas through delta-rs (no JVM); None when it does not exist yet."""
    path = config.table_path(table)
    if not table_exists(path):
        return None
    return open_table(path, version).to_pandas(columns=columns)


def latest_marker(path: str, max_batch: int | None = None) -> dict | None:
    """The newest row of a ``watermarks`` table (with ``batch_id <= max_batch`` if given), as plain
    Python values, read with delta-rs; None when there is none.

    Only the files that can hold it are read: the row is at least the largest ``batch_id`` some
    file's statistics prove present (a file's minimum, or its maximum when within
    ``max_batch``), so files whose maximum is below that are skipped. The table holds a row per
    batch (8,640 a day at a 10 s trigger, a file each until maintenance compacts them); status
    readers (Airflow sensors, ``tidemark watermark``) ask for this often."""
    if not table_exists(path):
        return None
    import pyarrow as pa
    import pyarrow.dataset as ds

    delta = open_table(path)
    found = ds.field("batch_id") <= max_batch if max_batch is not None else None
    floor = _present_batch_floor(pa.table(delta.get_add_actions(flatten=True)), max_batch)
    if floor is not None:
        at_least = ds.field("batch_id") >= floor
        found = at_least if found is None else found & at_least
    return newest_row(delta.to_pyarrow_dataset().to_table(filter=found))


def _present_batch_floor(adds: pa.Table, max_batch: int | None) -> int | None:
    """A ``batch_id`` (at most ``max_batch``) that some file's statistics prove is in the table;
    None without statistics."""
    if adds.num_rows == 0 or "min.batch_id" not in adds.column_names:
        return None
    lows, highs = adds["min.batch_id"].to_pylist(), adds["max.batch_id"].to_pylist()
    present = []
    for low, high in zip(lows, highs, strict=True):
        if low is None or high is None:
            return None  # a file without statistics: it could hold anything
        if max_batch is None or high <= max_batch:
            present.append(high)
        elif low <= max_batch:
            present.append(low)
    return max(present, default=None)


def newest_row(table: pa.Table) -> dict | None:
    """The row of an Arrow ``watermarks`` table with the largest ``batch_id``, as plain Python
    values; None when it is empty."""
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return None
    index = pc.index(table["batch_id"], pc.max(table["batch_id"])).as_py()
    return {name: table[name][index].as_py() for name in table.column_names}


def epoch_ms(series: pd.Series) -> pd.Series:
    """Timestamps of any unit (delta-rs gives microseconds, Spark's pandas nanoseconds) to epoch ms;
    integer series pass through; NaT stays missing (float NaN)."""
    import pandas as pd

    if series.dtype.kind in "iuf":
        return series
    return (pd.to_datetime(series, utc=True) - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)


def read_local(path: str, version: int | None = None) -> pd.DataFrame:
    """A small Delta table as pandas, through delta-rs (no JVM)."""
    return open_table(path, version).to_pandas()


def read_table(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)


def to_pandas(frame: DataFrame) -> pd.DataFrame:
    """A Spark frame on the driver through Arrow (``toArrow``: a fifth of ``toPandas``'s
    row-by-row transfer at 500k rows, docs/benchmarks.md); counts stay int64, a nullable long
    column becomes float64 with NaN, as ``toPandas`` gives."""
    return cast("pd.DataFrame", frame.toArrow().to_pandas())
