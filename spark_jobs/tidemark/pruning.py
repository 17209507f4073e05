"""Which part of a source can hold records of an event-time range ``[start, end)``, so that the
batch recompute (:mod:`tidemark.reconcile`) reads that part only: reconciling an hour costs the
hour, not the landing area's or the topic's retention.

A record counts in the recompute of ``[start, end)`` when it is a valid event (not a heartbeat)
with ``start <= event_time < end``. Input is skipped only when a rule below proves that none of
its records can count; everything else is read.

**Landing files** (:func:`select_files`):

1. *Modification time.* A valid record is at most ``validation.max_clock_skew`` ahead of its
   arrival, which for a file is its modification time (the ``skew_arrival`` rule of
   :mod:`tidemark.records`; the recompute applies it with that same modification time). So a file
   modified before ``start - max_clock_skew`` holds no record of the range (:func:`earliest_arrival_ms`
   keeps a second more, for a file system or client that rounds modification times rather than
   truncating them). A file that landed late -- a host that was down publishing its backlog hours
   after the hour -- was modified *later*, so this rule never skips it.
2. *The landing index* (``<warehouse>/<pipeline>/_reconcile/landing_index``). Whether a file
   modified later holds records of the range only its content can say. An index entry records the
   smallest and largest event time of a file's lines, parsed as the recompute parses them, valid
   or not, events and heartbeats (:class:`FileSpan`), beside the size and modification time the
   file was listed with. A file whose span misses the range has no line there, so no record that
   counts. An entry speaks for its file only while the size and modification time are unchanged
   (landing files are written whole and never rewritten; a rewritten one is read and indexed
   again), and only under a record-size limit no larger than the one it was built with (a line
   over the limit is not parsed, so its event time is not in the span).

Which files get indexed is a matter of cost only, never of completeness (a file without an entry
is read). A file modified while the range was current, before ``end + max_clock_skew``, is read
without being indexed: nearly all such files hold records of the range, and indexing them would
read them twice. A later one is indexed by the first recompute that needs it (one Spark pass over
those files before the recompute), and from then on read only for ranges its span meets. So an
hourly reconcile run soon after its hour reads its hour's files once and indexes nothing; a
recompute of an older range indexes, once, what landed after it.

The recompute reads the landing directory with two filters that Spark evaluates on each file's
metadata before opening it: rule 1 on the file's own modification time (the arrival the skew rule
compares with), and rule 2 naming the files the index rules out -- never the files to read, so a
file the listing did not know (in a subdirectory, landed meanwhile) is read. Only local
directories are indexed: on another file system (``s3a://``, ...) rule 1 alone applies.

**Kafka** (:func:`select_offsets`): the same two rules, a partition's offsets standing for the
files.

1. *Timestamp.* Each partition is read from its first offset whose timestamp (the record's
   arrival) is at or after :func:`earliest_arrival_ms` (the broker's offsets-for-times answers
   with the *earliest* offset at or after it, so every record before it arrived earlier).
2. *The landing index*, over *chunks*: a partition's offsets cut at multiples of
   ``source.index_chunk_offsets``, chunk ``k`` holding ``[k*C, (k+1)*C)``. Offsets are
   immutable, so an entry (named ``kafka://<topic id>/<topic>/<partition>/<k>``: a topic deleted
   and created again under its name has another id, and its entries do not apply) speaks for its
   chunk for good, under the same record-size limit. Offsets published while the range was
   current (timestamp before ``end + max_clock_skew``) are read without an index, up to the next
   chunk boundary; the complete chunks after them are indexed the first time a recompute needs
   them and then read only when their span meets the range; the last, incomplete chunk is read.

A backlog published hours late carries late timestamps, lands in later chunks, and is read
because its chunks' spans meet the range. So a Kafka recompute reads its range's own offsets, the
chunks that hold its late records, and the partial chunk at the end of each partition: its cost
follows the range, not the topic's retention nor the time since.

**Another pipeline's events** (``kind: delta``): the rows are filtered to the range before
anything else, so Delta skips files by their ``event_time`` statistics.
"""

from __future__ import annotations

import os
import string
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import PipelineConfig
from tidemark.timeutil import now_ms

if TYPE_CHECKING:
    from tidemark.kafka import PartitionOffsets

# A file system or client may round a modification time up instead of truncating it.
MTIME_MARGIN_MS = 1_000


def earliest_arrival_ms(start_ms: int, max_clock_skew_ms: int) -> int:
    """The earliest arrival (file modification time, Kafka timestamp) a valid record with event
    time at or after ``start`` can have, less :data:`MTIME_MARGIN_MS`."""
    return start_ms - max_clock_skew_ms - MTIME_MARGIN_MS


@dataclass(frozen=True)
class LandingFile:
    """A landing file as listed: its path as Spark names it (``_metadata.file_path``), its size
    and its modification time (epoch ms)."""

    path: str
    size: int
    modified_ms: int


@dataclass(frozen=True)
class FileSpan:
    """A landing index entry: a file as it was listed, and the event times of its lines (valid or
    not) as the recompute parses them; ``min_event_ms``/``max_event_ms`` are None when no line
    has one."""

    path: str
    size: int
    modified_ms: int
    max_record_bytes: int  # lines longer than this were not parsed: their times are not in the span
    lines: int  # lines with an event time
    min_event_ms: int | None
    max_event_ms: int | None

    def describes(self, file: LandingFile, max_record_bytes: int) -> bool:
        """Whether this entry speaks for ``file`` as listed now, read under ``max_record_bytes``."""
        same = (self.path, self.size, self.modified_ms) == (file.path, file.size, file.modified_ms)
        return same and self.max_record_bytes >= max_record_bytes

    def may_hold(self, start_ms: int, end_ms: int) -> bool:
        """Whether a line of the file can have its event time in ``[start, end)``."""
        if self.min_event_ms is None or self.max_event_ms is None:
            return False
        return self.min_event_ms < end_ms and self.max_event_ms >= start_ms


@dataclass(frozen=True)
class FileSelection:
    """The landing files of one recompute: those it reads, those it skips and by which rule."""

    read: tuple[str, ...]
    to_index: tuple[LandingFile, ...]  # among ``read``: to index before selecting again
    before_range: tuple[str, ...]  # skipped by rule 1, modification time
    outside_span: tuple[str, ...]  # skipped by rule 2, the landing index
    indexed: int = 0  # files this recompute indexed before selecting

    @property
    def skipped(self) -> frozenset[str]:
        return frozenset(self.before_range) | frozenset(self.outside_span)

    def summary(self) -> dict[str, int]:
        return {
            "listed": len(self.read) + len(self.before_range) + len(self.outside_span),
            "read": len(self.read),
            "skipped_before_range": len(self.before_range),
            "skipped_by_index": len(self.outside_span),
            "indexed_now": self.indexed,
        }

    def describe(self) -> str:
        n = self.summary()
        return (
            f"landing files: {n['read']:,} of {n['listed']:,} read ({n['skipped_before_range']:,} "
            f"modified before the range, {n['skipped_by_index']:,} outside it by the landing index; "
            f"{n['indexed_now']:,} indexed now)"
        )


def select_files(
    files: Iterable[LandingFile],
    spans: Mapping[str, FileSpan],
    start_ms: int,
    end_ms: int,
    max_clock_skew_ms: int,
    max_record_bytes: int,
) -> FileSelection:
    """Which of ``files`` can hold a record of ``[start, end)`` (the module's two rules);
    ``spans`` are landing index entries by path. Files without an entry are read, and those
    modified after ``end + max_clock_skew`` are named to be indexed."""
    earliest = earliest_arrival_ms(start_ms, max_clock_skew_ms)
    read: list[str] = []
    to_index: list[LandingFile] = []
    before: list[str] = []
    outside: list[str] = []
    for file in files:
        span = spans.get(file.path)
        if file.modified_ms < earliest:
            before.append(file.path)
        elif span is not None and span.describes(file, max_record_bytes):
            (read if span.may_hold(start_ms, end_ms) else outside).append(file.path)
        else:
            read.append(file.path)
            if file.modified_ms >= end_ms + max_clock_skew_ms:
                to_index.append(file)
    return FileSelection(
        read=tuple(read),
        to_index=tuple(to_index),
        before_range=tuple(before),
        outside_span=tuple(outside),
    )


# What java.net.URI leaves unquoted in a path, and so Spark in a file's name: ASCII letters and
# digits, "-_.!~*'()", ":@&=+$,;/", and any other character beyond ASCII but spaces and controls.
_URI_PATH_CHARS = frozenset(string.ascii_letters + string.digits + "-_.!~*'()" + ":@&=+$,;/")


def spark_file_name(path: str) -> str:
    """A local file's path as Spark names it (``_metadata.file_path``): ``file:`` and the absolute
    path, quoted as java.net.URI quotes it. A name quoted otherwise would only never match: the
    file would be read and indexed again every time, never skipped."""

    def quoted(ch: str) -> str:
        if ch in _URI_PATH_CHARS or (ord(ch) > 127 and ch.isprintable() and not ch.isspace()):
            return ch
        return "".join(f"%{byte:02X}" for byte in ch.encode("utf-8"))

    return "file:" + "".join(quoted(ch) for ch in os.path.abspath(path))


def list_landing(path: str) -> list[LandingFile] | None:
    """The files of the landing directory ``path`` that Spark reads (names not starting with ``_``
    or ``.``), with size and modification time; None when ``path`` is not a local directory.
    Files in subdirectories are not listed (Spark reads them; nothing skips them)."""
    local = urlparse(path).path if path.startswith("file:") else path
    if "://" in local or not os.path.isdir(local):
        return None
    files = []
    with os.scandir(local) as entries:
        for entry in entries:
            if entry.name.startswith(("_", ".")) or not entry.is_file():
                continue
            stat = entry.stat()
            modified_ms = stat.st_mtime_ns // 1_000_000
            files.append(LandingFile(spark_file_name(entry.path), stat.st_size, modified_ms))
    return files


def read_spans(config: PipelineConfig, paths: Collection[str]) -> dict[str, FileSpan]:
    """The landing index's entries for ``paths`` (the newest where a file was indexed twice); read
    with delta-rs."""
    frame = T.read_if_exists(config, S.LANDING_INDEX)
    if frame is None or frame.empty:
        return {}
    frame = frame[frame["path"].isin(list(paths))].sort_values("indexed_at")
    spans: dict[str, FileSpan] = {}
    for row in frame.itertuples(index=False):
        spans[row.path] = FileSpan(
            path=row.path,
            size=int(row.size),
            modified_ms=int(row.modified_ms),
            max_record_bytes=int(row.max_record_bytes),
            lines=int(row.lines),
            min_event_ms=None if row.lines == 0 else int(row.min_event_ms),
            max_event_ms=None if row.lines == 0 else int(row.max_event_ms),
        )
    return spans


def append_spans(config: PipelineConfig, spans: Collection[FileSpan]) -> None:
    """Add entries to the landing index (a delta-rs append: concurrent recomputes may both add a
    file's entry; the entries agree)."""
    if not spans:
        return
    import pyarrow as pa

    names = [f.name for f in S.LANDING_INDEX_SCHEMA if f.name != "indexed_at"]
    columns = {name: [getattr(span, name) for span in spans] for name in names}
    data = pa.table({**columns, "indexed_at": [now_ms()] * len(spans)}, schema=S.LANDING_INDEX_SCHEMA)
    T.write_rs(config.table_path(S.LANDING_INDEX), data, mode="append")


def add_range(runs: list[tuple[int, int]], start: int, end: int) -> None:
    """Append ``[start, end)`` to ascending, disjoint ``runs``, joined to the last when they meet."""
    if start >= end:
        return
    if runs and runs[-1][1] == start:
        runs[-1] = (runs[-1][0], end)
    else:
        runs.append((start, end))


def past_retention(partitions: Iterable[PartitionOffsets]) -> list[int]:
    """The partitions whose oldest kept record is already at or after the range's earliest
    arrival while older offsets were deleted: the broker may have dropped records of the range,
    so a recompute from what is left could be short. A partition the broker emptied is not named:
    nothing says when its last record was published, and an idle partition empties that way."""
    return [p.partition for p in partitions if 0 < p.first == p.start < p.end]


def chunk_name(topic_id: str, topic: str, partition: int, chunk: int) -> str:
    """A chunk's name in the landing index."""
    return f"kafka://{topic_id}/{topic}/{partition}/{chunk}"


@dataclass(frozen=True)
class OffsetSelection:
    """The offsets of one Kafka recompute: per partition, the ``[from, to)`` ranges it reads,
    and the chunks it skips or has to index."""

    ranges: Mapping[int, tuple[tuple[int, int], ...]]
    to_index: tuple[tuple[int, int], ...]  # (partition, chunk), among the ranges read
    chunk_offsets: int
    before_range: int  # offsets skipped by rule 1, timestamp
    outside_span: int  # chunks skipped by rule 2, the landing index
    chunks_read: int  # complete chunks read after the range's own offsets
    indexed: int = 0  # chunks this recompute indexed before selecting

    @property
    def offsets_read(self) -> int:
        return sum(b - a for runs in self.ranges.values() for a, b in runs)

    def describe(self) -> str:
        return (
            f"Kafka offsets: {self.offsets_read:,} read ({self.before_range:,} published before the "
            f"range skipped; {self.chunks_read:,} later chunks of {self.chunk_offsets:,} read, "
            f"{self.outside_span:,} outside the range by the landing index; {self.indexed:,} indexed now)"
        )


def _own_end(p: PartitionOffsets, size: int) -> int:
    """Where a partition's offsets published while the range was current end: the chunk
    boundary after ``current_end`` (or the partition's end)."""
    return min(p.end, max(p.start, -(-p.current_end // size) * size))


def later_chunks(p: PartitionOffsets, size: int) -> range:
    """The complete chunks after a partition's own offsets for the range: those the landing
    index decides (read, skipped or to index)."""
    own_end = _own_end(p, size)
    return range(own_end // size, p.end // size) if own_end % size == 0 else range(0)


def select_offsets(
    partitions: Iterable[PartitionOffsets],
    spans: Mapping[str, FileSpan],
    name: Callable[[int, int], str],
    start_ms: int,
    end_ms: int,
    chunk_offsets: int,
    max_record_bytes: int,
) -> OffsetSelection:
    """Which offsets of the topic can hold a record of ``[start, end)`` (the module's two rules
    for Kafka); ``spans`` are landing index entries by chunk name, ``name(partition, chunk)``
    names a chunk. A complete chunk after the range's own offsets without an entry is read and
    named to be indexed."""
    size = chunk_offsets
    ranges: dict[int, tuple[tuple[int, int], ...]] = {}
    to_index: list[tuple[int, int]] = []
    before = outside = chunks_read = 0
    for p in partitions:
        before += p.start - p.first
        runs: list[tuple[int, int]] = []
        read = partial(add_range, runs)
        own_end = _own_end(p, size)
        read(p.start, own_end)
        for chunk in later_chunks(p, size):
            key = name(p.partition, chunk)
            span = spans.get(key)
            if span is None or not span.describes(LandingFile(key, size, 0), max_record_bytes):
                to_index.append((p.partition, chunk))
            elif not span.may_hold(start_ms, end_ms):
                outside += 1
                continue
            chunks_read += 1
            read(chunk * size, (chunk + 1) * size)
        # The last, incomplete chunk.
        read(max(own_end, p.end // size * size), p.end)
        if runs:
            ranges[p.partition] = tuple(runs)
    return OffsetSelection(
        ranges=ranges,
        to_index=tuple(to_index),
        chunk_offsets=size,
        before_range=before,
        outside_span=outside,
        chunks_read=chunks_read,
    )
