"""``--reset-checkpoint``: a new run identity over existing tables when the checkpoint is lost.

A lost (or foreign) checkpoint makes the job refuse to start, because a fresh checkpoint would
re-read the source from the beginning. The reset starts a new run instead, and earlier writes are
neither skipped nor repeated:

* **Where the committed batches stopped.** Every batch records, in its watermark row (the commit
  marker, written last), the source input it covered, read from Spark's own logs in the checkpoint
  while the checkpoint still exists (:func:`batch_source`): Kafka end offsets per partition
  (``offsets/<n>``, exclusive, so they are the next offsets to read), or the files the batch read
  (the file source's ``sources/0/<n>`` log). These logs are complete, unlike the rows reaching
  ``foreachBatch``: blank lines and deduplicated retries never get there.
* **A new identity.** The reset moves the old checkpoint aside (never deletes it) and writes a new
  run id (so a new Delta ``txnAppId``) whose batch ids continue after the last committed batch
  (``batch_offset``), with the previous run id and the reset time. Rows that an uncommitted,
  crashed batch of the old run left behind (``batch_id`` above the last marker) are deleted first
  (Delta keeps them in its history): their input is read again by the new run.
* **Resuming.** Kafka starts at the recorded end offsets; for files the new checkpoint lists every
  file again, so lines of files recorded by committed batches are dropped before parsing
  (:class:`ResumePoint`). Host progress, open windows and the watermark live in Delta and continue
  from the last committed marker, as after any restart.
* **The dedup catalog** is the ``events`` table (:mod:`tidemark.dedup`), not the checkpoint, so a
  publisher retry of a record an earlier run stored is dropped after the reset as before it.

The checkpoint is a local (or mounted) directory, as for the run identity.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark import tables as T
from tidemark.config import PipelineConfig
from tidemark.timeutil import format_instant_ms, now_ms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESETTABLE_SOURCES = ("files", "kafka")
# Written for a Kafka partition no committed batch has read: Spark's code for "earliest".
EARLIEST = -2


@dataclass(frozen=True)
class BatchSource:
    """What Spark's checkpoint logs say about one micro-batch."""

    batch_ts_ms: int  # Spark's batch timestamp (the value of current_timestamp() in the batch)
    # JSON for the commit marker: {"kafka": {topic: {partition: end}}} or {"files": [...]}
    progress: str | None


def _log_lines(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0].startswith("v"):
        raise RuntimeError(f"{path}: not a Spark metadata log file")
    return lines[1:]


def normalize_file(path: str) -> str:
    """Spark's file-source log writes ``file:///x``; ``_metadata.file_path`` says ``file:/x``."""
    return re.sub(r"^file:/+", "file:/", path)


def _files_of_log_batch(source_log: Path, log_batch: int) -> list[str]:
    """Files the file source added in its log batch ``log_batch`` (plain or compacted file)."""
    plain, compact = source_log / str(log_batch), source_log / f"{log_batch}.compact"
    entries = [json.loads(line) for line in _log_lines(plain if plain.is_file() else compact)]
    return [normalize_file(e["path"]) for e in entries if int(e["batchId"]) == log_batch]


def _batch_ts(meta: str) -> int:
    return int(json.loads(meta)["batchTimestampMs"])


def batch_timestamp_ms(config: PipelineConfig, batch_id: int) -> int:
    """Spark batch ``batch_id``'s timestamp (what ``current_timestamp()`` is in the batch), from
    the offset log Spark writes before it runs the batch, so a replay reads the same value."""
    return _batch_ts(_log_lines(Path(config.checkpoint) / "offsets" / str(batch_id))[0])


def batch_source(config: PipelineConfig, batch_id: int) -> BatchSource:
    """Read Spark batch ``batch_id``'s timestamp and source range from the checkpoint.

    Spark writes ``offsets/<n>`` (and the file source its ``sources/0`` entries) before it runs
    batch ``n``, so both exist while the batch runs, and a replay reads the same values.
    """
    offsets = Path(config.checkpoint) / "offsets"
    meta, *sources = _log_lines(offsets / str(batch_id))
    batch_ts = _batch_ts(meta)
    kind = config.source.kind
    if kind == "kafka":
        return BatchSource(batch_ts, json.dumps({"kafka": json.loads(sources[0])}, sort_keys=True))
    if kind == "files":
        end = int(json.loads(sources[0])["logOffset"])
        start = -1
        if batch_id > 0 and (offsets / str(batch_id - 1)).is_file():
            start = int(json.loads(_log_lines(offsets / str(batch_id - 1))[1])["logOffset"])
        log = Path(config.checkpoint) / "sources" / "0"
        files = [f for b in range(start + 1, end + 1) for f in _files_of_log_batch(log, b)]
        return BatchSource(batch_ts, json.dumps({"files": sorted(files)}))
    return BatchSource(batch_ts, None)


@dataclass(frozen=True)
class ResumePoint:
    """How a run that started with a reset continues exactly where earlier runs stopped."""

    kafka_offsets: dict[str, dict[str, int]] | None  # topic -> partition -> next offset to read
    files_done: frozenset[str]  # files committed batches read (normalized)

    def kafka_starting_offsets(self, bootstrap: str, topic: str) -> str:
        """``startingOffsets`` JSON: the recorded end of every partition; earliest for a partition
        no committed batch has seen (Spark wants every partition named)."""
        from confluent_kafka.admin import AdminClient

        recorded = (self.kafka_offsets or {}).get(topic, {})
        meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
        partitions = sorted(meta.topics[topic].partitions) if topic in meta.topics else []
        if not partitions:
            raise T.IdentityError(f"reset: Kafka topic {topic} at {bootstrap} has no partitions")
        return json.dumps({topic: {str(p): int(recorded.get(str(p), EARLIEST)) for p in partitions}})


def _markers(config: PipelineConfig):
    path = config.table_path(T.WATERMARKS)
    return T.read_local(path) if T.table_exists(path) else None


def _recorded_progress(config: PipelineConfig, markers) -> tuple[dict | None, frozenset[str]]:
    """(Kafka offsets of the newest committed batch, files of every committed batch)."""
    if markers is None or markers.empty:
        return None, frozenset()
    kind = config.source.kind
    if "source_progress" not in markers.columns:
        raise T.IdentityError(
            f"reset: the committed batches under {config.tables_root} do not record their source "
            "progress (written by an older Tidemark); restore the checkpoint instead"
        )
    markers = markers.sort_values("batch_id")
    if kind == "kafka":
        newest = markers["source_progress"].iloc[-1]
        if newest is None or "kafka" not in json.loads(newest):
            raise T.IdentityError(
                f"reset: the last committed batch under {config.tables_root} did not record Kafka "
                "offsets; restore the checkpoint instead"
            )
        offsets = json.loads(newest)["kafka"]
        if config.source.topic not in offsets:
            raise T.IdentityError(
                f"reset: the committed batches read topic(s) {', '.join(sorted(offsets))}, the "
                f"config reads {config.source.topic}; a new topic needs a new pipeline"
            )
        return offsets, frozenset()
    files: set[str] = set()
    for value in markers["source_progress"]:
        if value is None or "files" not in json.loads(value):
            raise T.IdentityError(
                f"reset: a committed batch under {config.tables_root} did not record its files; "
                "restore the checkpoint instead"
            )
        files.update(json.loads(value)["files"])
    return None, frozenset(files)


def resume_point(config: PipelineConfig, identity: T.RunIdentity) -> ResumePoint | None:
    """The resume point of a run started by a reset (None for a run that started fresh)."""
    if identity.previous_run_id is None:
        return None
    markers = _markers(config)
    if markers is not None:
        markers = markers[markers["batch_id"] < identity.batch_offset]
    kafka_offsets, files = _recorded_progress(config, markers)
    return ResumePoint(
        kafka_offsets=kafka_offsets,
        files_done=files,
    )


def check_reset(config: PipelineConfig) -> T.RunIdentity:
    """Refuse (:class:`~tidemark.tables.IdentityError`, one line) unless a reset is what is needed:
    tables with an identity whose checkpoint is missing or belongs to another run of this
    pipeline. Returns the tables' identity. Writes nothing."""
    if config.source.kind not in RESETTABLE_SOURCES:
        raise T.IdentityError(
            f"--reset-checkpoint supports source.kind {' and '.join(RESETTABLE_SOURCES)}, not "
            f"{config.source.kind}"
        )
    ck_id, tb_id = T.read_identities(config)
    if tb_id is None:
        raise T.IdentityError(
            f"--reset-checkpoint: no Tidemark tables under {config.tables_root}, nothing to reset; "
            "start without it"
        )
    if ck_id is not None and ck_id.pipeline != config.pipeline:
        raise T.IdentityError(
            f"--reset-checkpoint: checkpoint {config.checkpoint} belongs to pipeline "
            f"{ck_id.pipeline!r}; point `checkpoint:` at this pipeline's own directory (a reset "
            "never takes over another pipeline's checkpoint)"
        )
    if ck_id is not None and ck_id.run_id == tb_id.run_id:
        raise T.IdentityError(
            f"--reset-checkpoint refused: checkpoint {config.checkpoint} belongs to the tables' "
            f"run {tb_id.run_id}; it is not lost, start without --reset-checkpoint"
        )
    _recorded_progress(config, _markers(config))  # refuses when the progress is not recorded
    return tb_id


UNCOMMITTED_COLUMNS = {
    T.EVENTS: "batch_id",
    T.LATE_EVENTS: "batch_id",
    T.QUARANTINE: "batch_id",
    T.WINDOWS: "batch_id",
    T.STALLS: "closed_batch_id",
}


def reset_checkpoint(spark: SparkSession, config: PipelineConfig, echo=print) -> T.RunIdentity:
    """Start a new run identity over the tables (see the module docstring); returns it.

    Every step can be repeated: a crash part-way leaves either the old state (the next reset
    redoes it) or a new tables identity with no checkpoint (the next reset replaces it; that run
    wrote nothing)."""
    previous = check_reset(config)
    markers = _markers(config)
    last = int(markers["batch_id"].max()) if markers is not None and not markers.empty else -1
    for table, column in UNCOMMITTED_COLUMNS.items():
        path = config.table_path(table)
        if T.table_exists(path):
            spark.sql(f"DELETE FROM delta.`{path}` WHERE {column} > {last}")
    reset_at = now_ms()
    checkpoint = Path(config.checkpoint)
    if checkpoint.exists():
        stamp = format_instant_ms(reset_at).replace(":", "").replace("-", "").replace(".", "")
        aside = checkpoint.with_name(f"{checkpoint.name}.before-reset-{stamp}")
        checkpoint.rename(aside)
        echo(f"[{config.pipeline}] moved checkpoint {checkpoint} aside to {aside}")
    identity = T.new_identity(
        config, batch_offset=last + 1, previous_run_id=previous.run_id, reset_at_ms=reset_at
    )
    T.write_identity(config, identity)
    echo(
        f"[{config.pipeline}] checkpoint reset: run {identity.run_id} replaces run "
        f"{previous.run_id}, continuing after committed batch {last}"
    )
    return identity
