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

**Kafka**: rule 1 by offset. Each partition is read from its first offset whose timestamp (the
record's arrival) is at or after :func:`earliest_arrival_ms` (Spark's ``startingTimestamp``:
Kafka answers with the *earliest* offset at or after it, so every record before it arrived
earlier). There is no rule 2: a backlog published late carries late timestamps, and knowing
which later offsets hold the range would take an index of the topic. A Kafka recompute reads from
its range's start to the end of the topic: its cost grows with the time since the range, not with
the topic's retention.

**Another pipeline's events** (``kind: delta``): the rows are filtered to the range before
anything else, so Delta skips files by their ``event_time`` statistics.
"""

from __future__ import annotations

import os
import string
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlparse

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import PipelineConfig
from tidemark.timeutil import now_ms

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
