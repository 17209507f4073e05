"""What each committed batch read, and where a run resumes.

Every batch records, in its watermark row (the commit marker, written last), the source input it
covered, read from Spark's own logs in the checkpoint while the checkpoint still exists
(:func:`batch_source`): Kafka end offsets per partition (``offsets/<n>``, exclusive, so they are
the next offsets to read), or the files the batch read (the file source's ``sources/0/<n>`` log).
These logs are complete, unlike the rows reaching ``foreachBatch``: blank lines and deduplicated
retries never get there. The batch's timestamp comes from the same logs, so a replay sees the
value the first attempt saw.

A run started by ``--reset-checkpoint`` (:mod:`tidemark.reset`) resumes from these records
(:func:`resume_point`): Kafka at the recorded end offsets; for files, lines of files committed
batches read are dropped before parsing.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import PipelineConfig
from tidemark.identity import IdentityError, RunIdentity
from tidemark.storage import Location, location

if TYPE_CHECKING:
    import pandas as pd

RESETTABLE_SOURCES = ("files", "kafka")
# Written for a Kafka partition no committed batch has read: Spark's code for "earliest".
EARLIEST = -2


@dataclass(frozen=True)
class BatchSource:
    """What Spark's checkpoint logs say about one micro-batch."""

    batch_ts_ms: int  # Spark's batch timestamp (the value of current_timestamp() in the batch)
    # JSON for the commit marker: {"kafka": {topic: {partition: end}}} or {"files": [...]}
    progress: str | None
    # Kafka records in the batch, from the offsets before it and its own; None when not known
    # (the first batch, a partition new in the batch, any other source)
    records: int | None = None

    def local_bytes(self) -> int | None:
        """The size of the batch's input files when each is a file on this machine (one stat
        each); None for any other input (Kafka, object storage, a file gone)."""
        files = json.loads(self.progress).get("files") if self.progress else None
        if files is None:
            return None
        total = 0
        for name in files:
            if not name.startswith("file:"):
                return None
            try:
                total += os.stat(unquote(re.sub(r"^file:/*", "/", name))).st_size
            except OSError:
                return None
        return total


def _log_lines(path: Location) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0].startswith("v"):
        raise RuntimeError(f"{path}: not a Spark metadata log file")
    return lines[1:]


def normalize_file(path: str) -> str:
    """Spark's file-source log writes ``file:///x``; ``_metadata.file_path`` says ``file:/x``."""
    return re.sub(r"^file:/+", "file:/", path)


def _files_of_log_batch(source_log: Location, log_batch: int) -> list[str]:
    """Files the file source added in its log batch ``log_batch`` (plain or compacted file)."""
    plain, compact = source_log / str(log_batch), source_log / f"{log_batch}.compact"
    entries = [json.loads(line) for line in _log_lines(plain if plain.is_file() else compact)]
    return [normalize_file(e["path"]) for e in entries if int(e["batchId"]) == log_batch]


def _batch_ts(meta: str) -> int:
    return int(json.loads(meta)["batchTimestampMs"])


def batch_timestamp_ms(config: PipelineConfig, batch_id: int) -> int:
    """Spark batch ``batch_id``'s timestamp (what ``current_timestamp()`` is in the batch), from
    the offset log Spark writes before it runs the batch, so a replay reads the same value."""
    return _batch_ts(_log_lines(location(config.checkpoint) / "offsets" / str(batch_id))[0])


def _records_between(start: dict, end: dict) -> int | None:
    """Records between two Kafka offset maps ({topic: {partition: offset}}); None when a
    partition of ``end`` has no start."""
    total = 0
    for topic, partitions in end.items():
        for partition, offset in partitions.items():
            begin = start.get(topic, {}).get(partition)
            if begin is None:
                return None
            total += int(offset) - int(begin)
    return total


def batch_source(config: PipelineConfig, batch_id: int) -> BatchSource:
    """Read Spark batch ``batch_id``'s timestamp and source range from the checkpoint.

    Spark writes ``offsets/<n>`` (and the file source its ``sources/0`` entries) before it runs
    batch ``n``, so both exist while the batch runs, and a replay reads the same values.
    """
    offsets = location(config.checkpoint) / "offsets"
    meta, *sources = _log_lines(offsets / str(batch_id))
    batch_ts = _batch_ts(meta)
    kind = config.source.kind
    before = None  # the source's offset before the batch: the previous batch's end
    if kind in RESETTABLE_SOURCES and batch_id > 0 and (offsets / str(batch_id - 1)).is_file():
        before = json.loads(_log_lines(offsets / str(batch_id - 1))[1])
    if kind == "kafka":
        end = json.loads(sources[0])
        records = None if before is None else _records_between(before, end)
        return BatchSource(batch_ts, json.dumps({"kafka": end}, sort_keys=True), records)
    if kind == "files":
        last = int(json.loads(sources[0])["logOffset"])
        start = -1 if before is None else int(before["logOffset"])
        log = location(config.checkpoint) / "sources" / "0"
        files = [f for b in range(start + 1, last + 1) for f in _files_of_log_batch(log, b)]
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
            raise IdentityError(f"reset: Kafka topic {topic} at {bootstrap} has no partitions")
        return json.dumps({topic: {str(p): int(recorded.get(str(p), EARLIEST)) for p in partitions}})


def committed_markers(config: PipelineConfig) -> pd.DataFrame | None:
    """The ``watermarks`` table (one row per committed batch); None before the first commit."""
    return T.read_if_exists(config, S.WATERMARKS)


def recorded_progress(config: PipelineConfig, markers) -> tuple[dict | None, frozenset[str]]:
    """(Kafka offsets of the newest committed batch, files of every committed batch)."""
    if markers is None or markers.empty:
        return None, frozenset()
    kind = config.source.kind
    if "source_progress" not in markers.columns:
        raise IdentityError(
            f"reset: the committed batches under {config.tables_root} do not record their source "
            "progress (written by an older Tidemark); restore the checkpoint instead"
        )
    markers = markers.sort_values("batch_id")
    if kind == "kafka":
        newest = markers["source_progress"].iloc[-1]
        if newest is None or "kafka" not in json.loads(newest):
            raise IdentityError(
                f"reset: the last committed batch under {config.tables_root} did not record Kafka "
                "offsets; restore the checkpoint instead"
            )
        offsets = json.loads(newest)["kafka"]
        if config.source.topic not in offsets:
            raise IdentityError(
                f"reset: the committed batches read topic(s) {', '.join(sorted(offsets))}, the "
                f"config reads {config.source.topic}; a new topic needs a new pipeline"
            )
        return offsets, frozenset()
    files: set[str] = set()
    for value in markers["source_progress"]:
        if value is None or "files" not in json.loads(value):
            raise IdentityError(
                f"reset: a committed batch under {config.tables_root} did not record its files; "
                "restore the checkpoint instead"
            )
        files.update(json.loads(value)["files"])
    return None, frozenset(files)


def resume_point(config: PipelineConfig, identity: RunIdentity) -> ResumePoint | None:
    """The resume point of a run started by a reset (None for a run that started fresh)."""
    if identity.previous_run_id is None:
        return None
    markers = committed_markers(config)
    if markers is not None:
        markers = markers[markers["batch_id"] < identity.batch_offset]
    kafka_offsets, files = recorded_progress(config, markers)
    return ResumePoint(
        kafka_offsets=kafka_offsets,
        files_done=files,
    )
