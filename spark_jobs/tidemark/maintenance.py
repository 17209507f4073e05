"""Table maintenance of one pipeline (``tidemark maintain``): compaction, VACUUM, Delta log
checkpoints and log cleanup, safe to run while the stream runs.

The stream commits every micro-batch, so its tables collect a small file and a log entry per batch
(8,640 a day at a 10 s trigger) and the ``_state`` tables a removed file per batch. Readers pay for
it: the stream reads the ``watermarks`` table and the ``events`` file list (the dedup catalog)
every batch, and both loads grow with the files and the log. What each table gets (:func:`plan`):

=========================== ================================= ====================================
table                       written by                        maintenance
=========================== ================================= ====================================
``events``                  the stream, appends (delta-rs for ``OPTIMIZE ZORDER BY (event_time)``
                            small batches, Spark for large)   (``maintenance.zorder_events``)
``windows``,                the stream, appends; reconcile    ``OPTIMIZE`` (bin-packing)
``late_events``,            (``reconciliation`` by range,
``quarantine``,             ``_reconcile/landing_index``)
``watermarks``, ``stalls``,
``reconciliation``,
``_reconcile/landing_index``
``_state/host_progress``,   the stream, overwrites (open      never compacted; VACUUM (delta-rs)
``_state/open_windows``     windows every batch; host         keeping the version the newest
                            progress a log with snapshots)    commit marker records
any other Delta table       \\-                                VACUUM, checkpoint, log cleanup
=========================== ================================= ====================================

Every table is vacuumed with ``maintenance.vacuum_retention`` and Delta's retention check on
(Spark's ``VACUUM ... RETAIN n HOURS``; for ``_state``, delta-rs's with
``enforce_retention_duration``). The others then get a Delta checkpoint at their newest version
(delta-rs writes one every 100 commits and Spark every 10, so a table that commits rarely would
otherwise replay its whole log) and log cleanup (delta-rs ``cleanup_metadata``: log entries older
than ``delta.logRetentionDuration`` before the newest checkpoint). The retentions are table
properties (:meth:`tidemark.config.MaintenanceConfig.table_properties`), set here when they differ.
OPTIMIZE runs only where two or more files are below its ``minFileSize`` and VACUUM only where a
delta-rs dry run finds files due: a run with nothing to do takes milliseconds per table.

**Why ZORDER, not liquid clustering, for events.** Dedup looks retries up by event time in the
files whose ``event_time`` statistics cover them; bin-packing alone joins files of any time into
one (Delta packs them by size), ZORDER sorts by event time so each file covers a narrow span.
Liquid clustering would be incremental (Delta's ZORDER rewrites the whole table every run), but a
clustered table needs the ``clustering`` and ``domainMetadata`` writer features, which delta-rs
1.6 refuses to write ("Unsupported table features required: [DomainMetadata, ClusteredTable]"):
every small batch would have to go through Spark's ten-times-slower commit.

**Small row groups for the lookup.** Spark writes a compacted file as one Parquet row group (its
``parquet.block.size`` is 128 MB), and the dedup lookup decodes every row group whose event-time
statistics cover a retry, whole: after each compaction the stream's driver decoded the whole file
for a few thousand ids, and kept the memory. ZORDER here writes 4 MB groups
(:data:`ZORDER_ROW_GROUP_BYTES`, set for the statement only).

**Running beside the stream.** ``OPTIMIZE`` commits with ``dataChange = false`` and removes only
the files it compacted; an append removes none, so neither conflicts with the other (measured:
1,157 delta-rs appends during 6 OPTIMIZEs, Spark appends with ``txnAppId`` during ZORDERs: no
failure on either side, every row once). Spark's OPTIMIZE re-checks and retries its commit over
concurrent appends itself; any other conflict (a reconcile replacing a range of
``reconciliation``) is retried here (:data:`OPTIMIZE_ATTEMPTS`). A ``_state`` table is never
compacted: its overwrite removes every file, and a delta-rs overwrite that raced a Spark OPTIMIZE
was measured to commit *over* the compacted file, so the table held its rows twice, with no error
on either side. Setting table properties is a metadata commit that fails a write racing it; the
stream's writes retry that (:data:`tidemark.tables.WRITE_ATTEMPTS`).

**On object storage, between two batches.** The concurrency above rests on put-if-absent commits:
a local disk has them for both writers; on S3, delta-rs has them (conditional writes) but Spark's
Delta does not (``S3SingleDriverLogStore``: exclusive only within one JVM), so a maintenance job
in another driver could overwrite a commit of the stream's. There a table has one writer at a
time, as Delta documents: the stream maintains its own tables (:class:`InStreamMaintenance`,
``maintenance.in_stream``, on by default when the warehouse is on object storage), after a
batch's commit and before the next batch starts, when ``schedule`` has come round; the batch that
runs it takes that much longer (minutes, see docs/benchmarks.md). ``tidemark maintain`` refuses
to run beside a live stream of such a pipeline, and the maintenance DAG is not created for it.

**What the retention keeps.** Only the ``_state`` tables are read at old versions: a batch (and
the watermark status) starts from the versions the newest commit marker (``watermarks``:
``hosts_version``, ``open_version``) records. Those are normally the tables' newest versions,
whose files are live; but after a batch wrote its state and did not commit (in flight, or
crashed), the marker's version is older, its files are removed, and a restart (however late) must
still read them. So the ``_state`` tables are vacuumed keeping that version's files
(``keep_versions``), and their logs are never checkpointed or cleaned here, nor by the commits
made here (no post-commit hooks): a cleanup after those commits could delete the log of that
version once it is older than ``logRetentionDuration``. The stream's own writes checkpoint and
clean up, at the versions the next marker records. Everything else reads the newest snapshot;
``vacuum_retention`` (at least 7 days) is for readers holding an older one meanwhile: a reconcile
or quality job, a batch in flight, a downstream pipeline reading ``events`` as its Delta source (it
must not fall further behind than that).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from tidemark import liveness, object_store, storage
from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import PipelineConfig
from tidemark.errors import UsageError
from tidemark.pipeline_state import STATE_VERSION_COLUMNS, committed_marker, state_version
from tidemark.timeutil import MS_PER_HOUR

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ZORDER, COMPACT, STATE, VACUUM_ONLY = "zorder", "compact", "state", "vacuum only"
ZORDER_COLUMNS = ("event_time",)
# Parquet row groups of the files ZORDER writes (Spark's default: 128 MB, so one group per file).
# The stream's dedup lookup (tidemark.dedup) reads the row groups whose event-time statistics
# cover a retry's time, each of them whole. An hour of 10,000 hosts compacted (3.6M rows), 2,000
# ids looked up (bench/lookup_row_groups.py): 4 MB groups took 0.063 s a lookup and left the
# driver's RSS 199 MB over its start, against 0.207 s and 504 MB with one group; the files are
# 2% larger and a full scan is no slower (2 MB groups: 0.051 s, but a full scan 2.1x slower).
ZORDER_ROW_GROUP_BYTES = 4 << 20
# Append-only tables (the stream's and reconcile's), compacted by bin-packing.
COMPACTED = (
    S.WATERMARKS,
    S.WINDOWS,
    S.LATE_EVENTS,
    S.QUARANTINE,
    S.STALLS,
    S.OUT_OF_ORDER,
    S.RECONCILIATION,
    S.RECONCILIATION_PASSES,
    S.LANDING_INDEX,
)
# What a reader of the log replays: commits and checkpoints (not Spark's .crc checksums).
LOG_ENTRY = re.compile(r"^\d{20}\.(json|checkpoint\b)")
# Tries of an OPTIMIZE or property change that lost its commit to a conflicting one.
OPTIMIZE_ATTEMPTS = 4
# a heartbeat this old means the stream is gone, for check_stream_stopped
STREAM_GONE_AFTER_MS = 10 * 60_000


@dataclass(frozen=True)
class Layout:
    """A table as it is stored: its newest version, live files and their bytes, the commits and
    checkpoints in its Delta log, and the data files on disk (live, and removed but not yet
    vacuumed)."""

    version: int
    files: int
    bytes: int
    log_files: int
    disk_files: int


@dataclass(frozen=True)
class TableResult:
    table: str
    kind: str  # ZORDER | COMPACT | STATE | VACUUM_ONLY
    done: tuple[str, ...]  # the steps that ran, in order
    before: Layout
    after: Layout
    seconds: float
    note: str | None = None  # what the table kept and why

    def line(self, pipeline: str) -> str:
        b, a = self.before, self.after
        steps = ", ".join(self.done) + (f" ({self.note})" if self.note else "")
        return (
            f"[{pipeline}] maintain {self.table:<26} files {b.files:>5,} -> {a.files:<5,} "
            f"{_size(b.bytes):>8} -> {_size(a.bytes):<8} version {b.version:>5} -> {a.version:<5} "
            f"log files {b.log_files:>4} -> {a.log_files:<4} on disk {b.disk_files:>5,} -> "
            f"{a.disk_files:<5,} {self.seconds:5.1f}s  {steps}"
        )


@dataclass(frozen=True)
class MaintenanceReport:
    pipeline: str
    tables: tuple[TableResult, ...]
    seconds: float

    def summary(self) -> str:
        def total(field: str, side: str) -> int:
            return sum(getattr(getattr(t, side), field) for t in self.tables)

        return (
            f"[{self.pipeline}] maintained {len(self.tables)} tables in {self.seconds:.1f}s: files "
            f"{total('files', 'before'):,} -> {total('files', 'after'):,}, log files "
            f"{total('log_files', 'before'):,} -> {total('log_files', 'after'):,}, data files on disk "
            f"{total('disk_files', 'before'):,} -> {total('disk_files', 'after'):,}"
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def result(self, table: str) -> TableResult:
        return next(t for t in self.tables if t.table == table)


def table_kind(config: PipelineConfig, table: str) -> str:
    if table == S.EVENTS:
        # bin-packing would join files of any event time (see the module docstring)
        return ZORDER if config.maintenance.zorder_events else VACUUM_ONLY
    if table in COMPACTED:
        return COMPACT
    return STATE if table in STATE_VERSION_COLUMNS else VACUUM_ONLY


def plan(config: PipelineConfig) -> list[tuple[str, str]]:
    """(table, kind) for every Delta table under the pipeline's root, the known ones first (the
    small ones, then events, then the state); a table this module does not know is vacuumed and
    checkpointed, never compacted."""
    found = {
        "/".join(parts[:-2])
        for file in object_store.list_files(config.tables_root)
        if 3 <= len(parts := file.split("/")) <= 4 and parts[-2] == "_delta_log"
    }
    known = [*COMPACTED, S.EVENTS, *STATE_VERSION_COLUMNS]
    ordered = [t for t in known if t in found] + sorted(found - set(known))
    return [(table, table_kind(config, table)) for table in ordered]


def check_stream_stopped(config: PipelineConfig) -> None:
    """With ``maintenance.in_stream`` the stream maintains its tables itself (one writer per table
    on object storage): a :class:`UsageError` while it runs, starts or hangs."""
    if not config.maintained_in_stream:
        return
    alive = liveness.assess(config, hang_after_ms=STREAM_GONE_AFTER_MS)
    if alive.state in (liveness.RUNNING, liveness.STARTING, liveness.HUNG):
        raise UsageError(
            f"[{config.pipeline}] its stream is {alive.state} ({alive.reason}) and maintains the tables "
            "itself (maintenance.in_stream: one writer per table on object storage); stop it first"
        )


def maintain(
    spark: SparkSession, config: PipelineConfig, echo: Callable[[str], None] = print
) -> MaintenanceReport:
    """Maintain every table of ``config``'s pipeline (see the module docstring); prints one line
    per table as it is done and returns the measurements."""
    # VACUUM always runs with Delta's check that it retains at least the table's
    # delta.deletedFileRetentionDuration, whatever the pipeline's spark.conf says.
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "true")
    started = time.monotonic()
    results = []
    for table, kind in plan(config):
        result = maintain_table(spark, config, table, kind, echo)
        echo(result.line(config.pipeline))
        results.append(result)
    return MaintenanceReport(config.pipeline, tuple(results), round(time.monotonic() - started, 1))


def maintain_table(
    spark: SparkSession, config: PipelineConfig, table: str, kind: str, echo: Callable[[str], None] = print
) -> TableResult:

    started = time.monotonic()
    path = config.table_path(table)
    before = layout(path)
    hours = config.maintenance.vacuum_retention // MS_PER_HOUR
    done = ["properties"] if _set_properties(path, config.maintenance.table_properties()) else []
    note = None
    if kind == STATE:
        keep = _restart_version(config, table)
        done += [_vacuum_state(path, hours, keep), "log cleanup by the stream"]
        note = None if keep is None else f"kept version {keep}, which a restart reads"
    else:
        sql = _Sql(spark, path, echo)
        if kind in (ZORDER, COMPACT):
            done.append(sql.compact(kind))
        done.append(sql.vacuum(hours))
        delta = T.open_table(path)
        delta.create_checkpoint()
        T.drop_stale_checksum(path)  # Spark's checksum of the _last_checkpoint rewritten here
        delta.cleanup_metadata()
        done += ["checkpoint", "log cleanup"]
    return TableResult(
        table, kind, tuple(done), before, layout(path), round(time.monotonic() - started, 1), note
    )


MAINTAINED_FILE = "_tidemark_maintained.json"


class InStreamMaintenance:
    """Maintenance run by the stream's driver between two batches (see the module docstring):
    due when ``maintenance.schedule`` has fired since the last run, recorded in
    ``<tables root>/_tidemark_maintained.json`` (a new pipeline's first run is at the first
    scheduled time after it started)."""

    def __init__(
        self, spark: SparkSession, config: PipelineConfig, echo: Callable[[str], None] = print
    ) -> None:
        self.spark = spark
        self.config = config
        self.echo = echo
        self.record = storage.location(config.tables_root) / MAINTAINED_FILE

    def last_run_ms(self) -> int | None:
        try:
            return int(json.loads(self.record.read_text())["maintained_at_ms"])
        except (FileNotFoundError, KeyError, ValueError):
            return None

    def due(self, now: int) -> bool:
        from datetime import UTC, datetime

        from croniter import croniter

        last = self.last_run_ms()
        if last is None:
            self._write(now, None)
            return False
        start = datetime.fromtimestamp(last / 1000, tz=UTC)
        fire = croniter(self.config.maintenance.schedule, start).get_next(datetime)
        return fire.timestamp() * 1000 <= now

    def maybe_run(self, now: int) -> MaintenanceReport | None:
        if not self.due(now):
            return None
        self.echo(
            f"[{self.config.pipeline}] maintenance due ({self.config.maintenance.schedule}): "
            "running between two batches (one writer per table on object storage)"
        )
        report = maintain(self.spark, self.config, self.echo)
        self.echo(report.summary())
        self._write(now, report.seconds)
        return report

    def _write(self, now: int, seconds: float | None) -> None:
        storage.write_text_atomic(self.record, json.dumps({"maintained_at_ms": now, "seconds": seconds}))


def _restart_version(config: PipelineConfig, table: str) -> int | None:
    """The version of a ``_state`` table that the newest commit marker records: what the next
    batch (a restart after a crash too) and the watermark status read. None before the first."""
    return state_version(committed_marker(config), table)


def _vacuum_state(path: str, hours: int, keep: int | None) -> str:
    """VACUUM a ``_state`` table with delta-rs (the stream's own writer), keeping every file of the
    version a restart reads, however long ago a later write removed them (a crashed batch), and
    with Delta's retention check. Its commits run no checkpoint or log cleanup, which could
    remove the log of that version once it is old; the stream's writes clean the log up at the
    versions they record."""

    keep_versions = [keep] if keep is not None else None
    if not T.open_table(path).vacuum(hours, dry_run=True, full=True, keep_versions=keep_versions):
        return f"vacuum {hours}h: nothing due"
    deleted = T.open_table(path).vacuum(
        hours,
        dry_run=False,
        enforce_retention_duration=True,
        post_commithook_properties=_no_log_hooks(),
        full=True,
        keep_versions=keep_versions,
    )
    return f"vacuum {hours}h: {_files(len(deleted))}"


@contextmanager
def _session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """``conf`` set in the session for the block, then put back as it was (the stream's own
    session runs maintenance in-stream; its writes keep their settings)."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _no_log_hooks():
    """delta-rs commit options: no checkpoint and no log cleanup after the commit."""
    from deltalake import PostCommitHookProperties

    return PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


def _set_properties(path: str, wanted: dict[str, str]) -> bool:
    """Set the table properties that differ (a metadata commit: a stream write racing it fails and
    is retried, :data:`tidemark.tables.WRITE_ATTEMPTS`); True when there were any. Its commit runs
    no checkpoint or log cleanup (see :func:`_vacuum_state`)."""
    from deltalake.exceptions import CommitFailedError

    for attempt in range(1, OPTIMIZE_ATTEMPTS + 1):
        table = T.open_table(path)
        changed = {k: v for k, v in wanted.items() if table.metadata().configuration.get(k) != v}
        if not changed:
            return attempt > 1
        try:
            table.alter.set_table_properties(
                changed,
                post_commithook_properties=_no_log_hooks(),
            )
            return True
        except CommitFailedError:
            if attempt == OPTIMIZE_ATTEMPTS:
                raise
            time.sleep(attempt)
    raise AssertionError("unreachable")


class _Sql:
    """Delta SQL on one table by path, retried on Delta's commit conflicts."""

    def __init__(self, spark: SparkSession, path: str, echo: Callable[[str], None]) -> None:
        self.spark = spark
        self.path = path
        self.table = "delta.`" + path.replace("`", "``") + "`"
        self.echo = echo

    def retried(self, statement: str) -> None:
        from delta import exceptions as dx

        conflicts = (
            dx.ConcurrentAppendException,
            dx.ConcurrentDeleteReadException,
            dx.ConcurrentDeleteDeleteException,
            dx.ConcurrentTransactionException,
            dx.ConcurrentWriteException,
            dx.MetadataChangedException,
            dx.ProtocolChangedException,
            dx.DeltaConcurrentModificationException,
        )
        for attempt in range(1, OPTIMIZE_ATTEMPTS + 1):
            try:
                self.spark.sql(statement).collect()
                return
            except conflicts as exc:
                if attempt == OPTIMIZE_ATTEMPTS:
                    raise
                self.echo(f"  {statement.split(' ')[0]} {self.path}: {type(exc).__name__}, retrying")
                time.sleep(attempt)

    def compact(self, kind: str) -> str:
        """OPTIMIZE (ZORDER BY for ``ZORDER``) when at least two files are below OPTIMIZE's
        ``minFileSize``: with fewer there is nothing to join, and a ZORDER would rewrite the
        table for nothing. Says what it did."""
        import pyarrow as pa

        min_size = int(self.spark.conf.get("spark.databricks.delta.optimize.minFileSize", None) or 1 << 30)
        sizes = pa.table(T.open_table(self.path).get_add_actions(flatten=True))["size_bytes"].to_pylist()
        if sum(1 for size in sizes if size < min_size) < 2:
            return "nothing to compact"
        if kind == ZORDER:
            columns = ", ".join(ZORDER_COLUMNS)
            with _session_conf(self.spark, {"parquet.block.size": str(ZORDER_ROW_GROUP_BYTES)}):
                self.retried(f"OPTIMIZE {self.table} ZORDER BY ({columns})")
            return f"zorder by {columns}"
        self.retried(f"OPTIMIZE {self.table}")
        return "optimize"

    def vacuum(self, hours: int) -> str:
        """VACUUM with Delta's retention check, when there is something to delete: delta-rs lists
        it first (a dry run, milliseconds; Spark's VACUUM takes seconds even when idle)."""

        due = T.open_table(self.path).vacuum(retention_hours=hours, dry_run=True, full=True)
        if not due:
            return f"vacuum {hours}h: nothing due"
        self.spark.sql(f"VACUUM {self.table} RETAIN {hours} HOURS").collect()
        return f"vacuum {hours}h: {_files(len(due))}"


def layout(path: str) -> Layout:
    import pyarrow as pa
    import pyarrow.compute as pc

    table = T.open_table(path)
    adds = pa.table(table.get_add_actions(flatten=True))
    files = object_store.list_files(path)
    return Layout(
        version=table.version(),
        files=adds.num_rows,
        bytes=int(pc.sum(adds["size_bytes"]).as_py() or 0) if adds.num_rows else 0,
        log_files=sum(
            1 for f in files if f.startswith("_delta_log/") and LOG_ENTRY.match(f[len("_delta_log/") :])
        ),
        disk_files=sum(1 for f in files if f.endswith(".parquet") and "_delta_log" not in f.split("/")),
    )


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    value = float(n)
    for unit in ("kB", "MB", "GB"):
        value /= 1000
        if value < 1000 or unit == "GB":
            break
    return f"{value:.1f} {unit}"
