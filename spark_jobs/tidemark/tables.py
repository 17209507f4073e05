"""The Delta tables of a pipeline, their idempotent writer, and the run identity.

Layout under ``<warehouse>/<pipeline>/``:

============== ==================================================================================
events         every unique valid record (late ones too), with the batch it arrived in
windows        closed windows: one row per (window, key), written once, with the watermark
late_events    records whose window was already closed when they arrived
quarantine     one row per bad line: raw text, reason, batch id, source
watermarks     one row per committed batch: the precise watermark and host counts. Written
               last in a batch, so a row for batch N means every write of N is committed.
reconciliation per-window stream/batch comparison written by ``tidemark reconcile``
_state/*       host progress and open-window partial sums, overwritten every batch; the
               watermark row records the Delta version of each so a restart reads exactly
               the state that batch N-1 left.
============== ==================================================================================

Every write of batch N carries Delta's ``txnAppId``/``txnVersion`` = (run identity, N): Delta skips
a write whose version it has already committed for that app id, so a replayed batch changes
nothing. Frames that come from executors (events, late events, quarantine) are written by Spark
when they are large and collected to the driver when they are small; the driver's frames (those,
closed windows, state, the watermark row) are written by delta-rs (the ``deltalake`` package)
with the same app-transaction check, which saves a Spark job and most of a second per write.

The run identity lives in the checkpoint *and* beside the tables; a job whose checkpoint
is missing or belongs to other tables refuses to start instead of skipping or repeating writes.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark import faults
from tidemark.config import PipelineConfig
from tidemark.records import EVENT_FIELDS
from tidemark.timeutil import format_instant_ms, now_ms

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

EVENTS = "events"
WINDOWS = "windows"
LATE_EVENTS = "late_events"
QUARANTINE = "quarantine"
WATERMARKS = "watermarks"
RECONCILIATION = "reconciliation"
STALLS = "stalls"
HOST_PROGRESS = "_state/host_progress"
OPEN_WINDOWS = "_state/open_windows"
IDENTITY_FILE = "_tidemark.json"

# Columns of ``events`` and ``late_events``, in table order.
EVENT_COLUMNS = [
    *EVENT_FIELDS,
    "window_start",
    "is_late",
    "batch_id",
    "ingest_ts",
    "source",
    "low_watermark",
]
LATE_COLUMNS = [
    *EVENT_FIELDS,
    "window_start",
    "window_end",
    "watermark_at_arrival",
    "batch_id",
    "ingest_ts",
    "source",
    "low_watermark",
]

# Delta collects min/max/null-count statistics for these columns of ``events`` only (by default
# it takes the first 32): the ones readers filter on (batch, event time, window, arrival, host).
# Statistics for every column cost a quarter of the write (1M rows: 1.86 s -> 1.35 s). Set when
# the table is created; an older table keeps its own (``ALTER TABLE ... SET TBLPROPERTIES``).
EVENTS_STATS_COLUMNS = "batch_id,event_time,window_start,ingest_ts,host"
CREATE_OPTIONS = {EVENTS: {"delta.dataSkippingStatsColumns": EVENTS_STATS_COLUMNS}}


class IdentityError(RuntimeError):
    """Checkpoint and tables do not belong together; starting would skip or repeat writes."""


@dataclass(frozen=True)
class RunIdentity:
    """Who may write a pipeline's tables: one run = one checkpoint = one Delta ``txnAppId``.

    A run started by ``--reset-checkpoint`` continues the tables' batch numbering: its Spark batch
    ``n`` is table batch ``batch_offset + n``, so ``batch_id`` stays increasing in every table and
    the first batch of the run builds on the last batch the previous run committed.
    """

    pipeline: str
    run_id: str
    tables_root: str
    created_at: str
    batch_offset: int = 0
    previous_run_id: str | None = None
    reset_at_ms: int | None = None

    @property
    def app_id(self) -> str:
        """Delta txnAppId: unique per (pipeline, run), stable across restarts of the run."""
        return f"tidemark:{self.pipeline}:{self.run_id}"


def _read_identity(path: Path) -> RunIdentity | None:
    if not path.is_file():
        return None
    try:
        return RunIdentity(**json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as exc:
        raise IdentityError(f"{path}: unreadable Tidemark identity ({exc})") from None


def _write_identity(path: Path, identity: RunIdentity) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(asdict(identity), indent=2), encoding="utf-8")
    os.replace(tmp, path)


def _checkpoint_has_progress(checkpoint: Path) -> bool:
    offsets = checkpoint / "offsets"
    return offsets.is_dir() and any(offsets.iterdir())


def _tables_have_data(tables_root: Path) -> bool:
    return (tables_root / WATERMARKS / "_delta_log").is_dir() or (
        tables_root / EVENTS / "_delta_log"
    ).is_dir()


RESET_HINT = "or, if it is lost for good, start a new run identity with --reset-checkpoint"


def check_identity(config: PipelineConfig) -> RunIdentity | None:
    """The run identity checkpoint and tables share; None when neither has one yet (first start).

    Raises :class:`IdentityError` with a one-line explanation when they disagree. Writes nothing.
    """
    checkpoint = Path(config.checkpoint)
    tables_root = Path(config.tables_root)
    ck_id = _read_identity(checkpoint / IDENTITY_FILE)
    tb_id = _read_identity(tables_root / IDENTITY_FILE)

    if ck_id is None and _checkpoint_has_progress(checkpoint):
        raise IdentityError(
            f"checkpoint {checkpoint} holds Spark progress but no Tidemark identity: it belongs "
            "to another job; point `checkpoint:` at this pipeline's own directory"
            + (f", {RESET_HINT}" if tb_id is not None else "")
        )
    if ck_id is None and tb_id is None:
        if _tables_have_data(tables_root):
            raise IdentityError(
                f"tables under {tables_root} exist without a Tidemark identity; refusing to write into them"
            )
        return None
    if ck_id is None:
        assert tb_id is not None
        raise IdentityError(
            f"checkpoint {checkpoint} is missing or empty but the tables under {tables_root} "
            f"were written by run {tb_id.run_id}; restore that checkpoint (starting fresh "
            f"would re-read the source and duplicate or skip writes), {RESET_HINT}"
        )
    if tb_id is None:
        raise IdentityError(
            f"checkpoint {checkpoint} belongs to run {ck_id.run_id} whose tables were under "
            f"{ck_id.tables_root}, but {tables_root} has none; a new warehouse needs a new "
            "checkpoint directory"
        )
    if ck_id.pipeline != config.pipeline or ck_id.run_id != tb_id.run_id:
        hint = f", {RESET_HINT}" if ck_id.pipeline == config.pipeline else ""
        raise IdentityError(
            f"checkpoint {checkpoint} belongs to pipeline {ck_id.pipeline!r} run {ck_id.run_id} "
            f"but the tables under {tables_root} belong to pipeline {tb_id.pipeline!r} run "
            f"{tb_id.run_id}; point `checkpoint:` at this pipeline's own checkpoint{hint}"
        )
    return tb_id


def ensure_identity(config: PipelineConfig) -> RunIdentity:
    """Return the run identity shared by checkpoint and tables, creating it on first start.

    Raises :class:`IdentityError` with a one-line explanation when they disagree.
    """
    identity = check_identity(config)
    if identity is not None:
        return identity
    identity = new_identity(config)
    write_identity(config, identity)
    return identity


def new_identity(config: PipelineConfig, **fields: Any) -> RunIdentity:
    return RunIdentity(
        pipeline=config.pipeline,
        run_id=uuid.uuid4().hex[:12],
        tables_root=str(Path(config.tables_root)),
        created_at=format_instant_ms(now_ms()),
        **fields,
    )


def read_identities(config: PipelineConfig) -> tuple[RunIdentity | None, RunIdentity | None]:
    """(checkpoint's identity, tables' identity), either None when absent."""
    return (
        _read_identity(Path(config.checkpoint) / IDENTITY_FILE),
        _read_identity(Path(config.tables_root) / IDENTITY_FILE),
    )


def write_identity(config: PipelineConfig, identity: RunIdentity) -> None:
    """Tables first, checkpoint second: a crash in between leaves a checkpoint without identity,
    which refuses to start, never a checkpoint that claims tables of another run."""
    _write_identity(Path(config.tables_root) / IDENTITY_FILE, identity)
    _write_identity(Path(config.checkpoint) / IDENTITY_FILE, identity)


class TableWriter:
    """Idempotent Delta writes keyed by (run identity, batch id)."""

    def __init__(self, config: PipelineConfig, identity: RunIdentity) -> None:
        self.config = config
        self.identity = identity

    def path(self, table: str) -> str:
        return self.config.table_path(table)

    def write(
        self,
        frame: DataFrame,
        table: str,
        batch_id: int,
        mode: str = "append",
        options: dict[str, Any] | None = None,
    ) -> None:
        faults.reached(f"before:{table}", batch_id)
        writer = (
            frame.write.format("delta")
            .mode(mode)
            .option("txnAppId", f"{self.identity.app_id}:{table}")
            .option("txnVersion", batch_id)
            .option("userMetadata", json.dumps({"tidemark_batch": batch_id}))
        )
        # Table properties for a table this write creates (Delta ignores them on appends).
        for key, value in {**CREATE_OPTIONS.get(table, {}), **(options or {})}.items():
            writer = writer.option(key, value)
        writer.save(self.path(table))
        faults.reached(f"after:{table}", batch_id)

    def write_local(
        self, data: pa.Table, table: str, batch_id: int, mode: str = "append", merge_schema: bool = False
    ) -> int:
        """Idempotent delta-rs write of a driver-side frame; returns the table version after it.

        ``merge_schema`` lets an append add columns (tables written before a column existed)."""
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

        faults.reached(f"before:{table}", batch_id)
        path = self.path(table)
        app_id = f"{self.identity.app_id}:{table}"
        if DeltaTable.is_deltatable(path):
            existing = DeltaTable(path)
            done = existing.transaction_version(app_id)
            if done is not None and done >= batch_id:
                return existing.version()
        write_deltalake(
            path,
            data,
            mode=mode,
            # Table properties for a table this write creates (ignored by delta-rs otherwise).
            configuration=CREATE_OPTIONS.get(table),
            schema_mode="overwrite" if mode == "overwrite" else ("merge" if merge_schema else None),
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id, batch_id)],
                custom_metadata={"tidemark_batch": str(batch_id)},
            ),
        )
        faults.reached(f"after:{table}", batch_id)
        return DeltaTable(path).version()


def table_exists(path: str) -> bool:
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(path)


def latest_marker(path: str, max_batch: int | None = None) -> dict | None:
    """The newest row of a ``watermarks`` table (with ``batch_id <= max_batch`` if given), as plain
    Python values, read with delta-rs; None when there is none."""
    if not table_exists(path):
        return None
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    table = DeltaTable(path).to_pyarrow_table()
    if max_batch is not None:
        table = table.filter(pc.less_equal(table["batch_id"], max_batch))
    return newest_row(table)


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
    from deltalake import DeltaTable

    table = DeltaTable(path) if version is None else DeltaTable(path, version=version)
    return table.to_pandas()


def read_table(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)
