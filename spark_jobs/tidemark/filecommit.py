"""Spark writes a batch's Parquet files, delta-rs commits them: one idempotent append, no Spark
state reconstruction.

Spark's Delta writer, given ``txnAppId``/``txnVersion``, reads the table's app-transaction
versions from the snapshot's *whole* reconstructed state (``OptimisticTransaction.txnVersion`` ->
``Snapshot.computedState``, a Spark job over the checkpoint and every commit since), on every
versioned write: 0.55 s a write measured here (docs/benchmarks.md, "Where the time goes"). delta-rs
reads the same version from its log replay in milliseconds. So a large frame is appended in three
steps:

1. delta-rs: is (app id, batch) already committed? Then nothing is written (a replayed batch).
2. Spark writes the frame as plain Parquet into a fresh directory inside the table
   (``tm-<batch>-<token>/``), with the session's Parquet settings, so the files are the ones
   Delta's writer would have written.
3. delta-rs commits those files as one append carrying the app transaction (run, batch), with the
   statistics Delta's writer would have computed, read from the files' footers (row count, null
   counts, minimum and maximum of the table's statistics columns).

A crash between 2 and 3 leaves files no commit refers to: the replay writes new ones in a new
directory, and VACUUM deletes the orphans once they are older than its retention (their directory
name does not start with ``_`` or ``.``, which VACUUM would skip). Readers only ever see committed
files. Two writers of one run racing to commit the same batch are stopped by the same check as
every delta-rs write of the stream (:meth:`tidemark.tables.TableWriter.write_local`).

A table's first append creates it empty through delta-rs (:func:`create_table`, with the table's
properties), so a pipeline's first batch takes this path too. :func:`plan` says when this path
applies: an append whose columns and types are the table's exactly, to a table whose protocol
delta-rs writes (writer version 2 or lower). Anything else (a schema merge, a newer protocol)
goes through Spark's Delta writer, as does any append to a table on object storage
(:func:`applies_to`).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidemark import object_store, storage

if TYPE_CHECKING:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame

# Delta's defaults when a table names no statistics columns, and the string prefix it keeps.
DEFAULT_INDEXED_COLUMNS = 32
STRING_PREFIX = 32
# Delta types whose minimum and maximum Delta records (booleans and others get null counts only).
MIN_MAX_TYPES = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "date", "timestamp", "string"}
)
# Spark's Delta checkpoints a table every 10 commits unless delta.checkpointInterval says otherwise.
CHECKPOINT_INTERVAL = 10
# Hadoop's committer marker file: a name VACUUM skips, so never written.
WRITE_OPTIONS = {"mapreduce.fileoutputcommitter.marksuccessfuljobs": "false"}


@dataclass(frozen=True)
class Plan:
    """How to append to one table through this path: its columns' Delta types and the columns
    whose statistics Delta keeps."""

    types: dict[str, str]
    stats_columns: tuple[str, ...]


def plan(table: DeltaTable, frame: DataFrame) -> Plan | None:
    """The plan for appending ``frame`` to ``table``, or None when Spark's Delta writer must do it
    (columns or types differ, a column is nested, the protocol is newer than delta-rs writes)."""
    if table.protocol().min_writer_version > 2:
        return None
    types: dict[str, str] = {}
    for field in table.schema().fields:
        kind = getattr(field.type, "type", None)
        if not isinstance(kind, str):  # struct, array, map: not handled here
            return None
        types[field.name] = kind
    frame_types = {f.name: f.dataType.typeName() for f in frame.schema.fields}
    if frame_types != types:
        return None
    return Plan(types, stats_columns(table.metadata().configuration, list(types)))


def applies_to(table_path: str) -> bool:
    """Only where a file system renames cheaply: Spark's plain Parquet writer commits a task's
    files by renaming them, a copy and a delete per file on S3 (Delta's writer writes them in
    place), so a table on object storage keeps Spark's Delta writer."""
    return not storage.is_object_store(table_path)


def create_table(path: str, frame: DataFrame, configuration: dict[str, str]) -> bool:
    """Create the table empty with ``frame``'s columns (all nullable, as Spark's Delta writer
    makes them) and ``configuration``; False when delta-rs cannot represent a column's type."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        schema = pa.schema([f.with_nullable(True) for f in to_arrow_schema(frame.schema)])
    except TypeError:  # PySparkTypeError: no Arrow type for a column
        return False
    DeltaTable.create(
        path, schema, mode="ignore", configuration=configuration, storage_options=storage.delta_options(path)
    )
    return True


def stats_columns(configuration: dict[str, str], columns: list[str]) -> tuple[str, ...]:
    """The columns Delta keeps statistics for: ``delta.dataSkippingStatsColumns`` when set, else
    the first ``delta.dataSkippingNumIndexedCols`` (32; -1 for all)."""
    named = configuration.get("delta.dataSkippingStatsColumns")
    if named:
        wanted = {c.strip() for c in named.split(",") if c.strip()}
        return tuple(c for c in columns if c in wanted)
    count = int(configuration.get("delta.dataSkippingNumIndexedCols", DEFAULT_INDEXED_COLUMNS))
    return tuple(columns if count < 0 else columns[:count])


def write_files(frame: DataFrame, table_path: str, batch_id: int) -> str:
    """Spark writes ``frame`` as Parquet into a new directory inside the table; its name."""
    name = f"tm-{batch_id}-{uuid.uuid4().hex[:12]}"
    writer = frame.write.mode("errorifexists")
    for key, value in WRITE_OPTIONS.items():
        writer = writer.option(key, value)
    writer.parquet(f"{table_path.rstrip('/')}/{name}")
    return name


def add_actions(table_path: str, directory: str, p: Plan) -> list[Any]:
    """An ``AddAction`` for each Parquet file Spark wrote in ``directory``, with its statistics."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    fs, root = object_store.filesystem(f"{table_path.rstrip('/')}/{directory}")
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    actions = []
    for info in sorted(infos, key=lambda i: i.path):
        name = info.path.rsplit("/", 1)[-1]
        if info.type != pafs.FileType.File or name.startswith(("_", ".")) or not name.endswith(".parquet"):
            continue
        with fs.open_input_file(info.path) as f:
            meta = pq.read_metadata(f)
        relative = directory + info.path[len(root) :]
        mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
        actions.append(AddAction(relative, info.size, {}, mtime, True, file_stats(meta, p)))
    return actions


def file_stats(meta: pq.FileMetaData, p: Plan) -> str:
    """Delta's statistics JSON of one Parquet file, from its footer: ``numRecords`` and, for each
    statistics column, ``nullCount`` and (when every row group has them) ``minValues`` and
    ``maxValues`` as Delta writes them (timestamps as UTC ISO strings to the millisecond, strings
    cut to Delta's 32-character prefix: a cut minimum still bounds, a cut maximum is left out)."""
    index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in p.stats_columns:
        i = index.get(name)
        if i is None:
            continue
        null_count, low, high, known = 0, None, None, True
        for g in range(meta.num_row_groups):
            column = meta.row_group(g).column(i)
            st = column.statistics
            if st is None or not st.has_null_count:
                known, null_count = False, -1
                break
            null_count += st.null_count
            if st.has_min_max:
                low = st.min if low is None else min(low, st.min)
                high = st.max if high is None else max(high, st.max)
            elif st.null_count < meta.row_group(g).num_rows:
                known = False  # values without a minimum and maximum (e.g. INT96 timestamps)
        if null_count < 0:
            continue
        nulls[name] = null_count
        if not known or low is None or p.types[name] not in MIN_MAX_TYPES:
            continue
        lo, hi = _delta_value(low, p.types[name]), _delta_value(high, p.types[name])
        if isinstance(lo, str) and len(lo) > STRING_PREFIX:
            lo = lo[:STRING_PREFIX]
        mins[name] = lo
        if not (isinstance(hi, str) and len(hi) > STRING_PREFIX):
            maxs[name] = hi
    return json.dumps(
        {"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
        separators=(",", ":"),
    )


def checkpoint_if_due(table: DeltaTable) -> bool:
    """Write a Delta checkpoint when the table's version is a multiple of its
    ``delta.checkpointInterval`` (Spark's default, 10; delta-rs's own hook would wait for 100), so
    the commits that took over from Spark's writer leave readers as short a log to replay as
    Spark's did. True when one was written."""
    interval = int(table.metadata().configuration.get("delta.checkpointInterval", CHECKPOINT_INTERVAL))
    if interval <= 0 or table.version() % interval:
        return False
    table.create_checkpoint()
    return True


def _delta_value(value: Any, kind: str) -> Any:
    if kind == "timestamp":  # Spark's TIMESTAMP_MICROS, adjusted to UTC: an aware datetime
        value = value.astimezone(dt.UTC)
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    if kind == "date":
        return value.isoformat()
    return value
