"""The recompute's pruning rule at its boundaries (pure, no Spark): a file is skipped only when its
modification time or its indexed span proves it holds no record of the range."""

from __future__ import annotations

import os

import pytest

from tidemark.kafka import PartitionOffsets
from tidemark.pruning import (
    MTIME_MARGIN_MS,
    FileSpan,
    LandingFile,
    chunk_name,
    earliest_arrival_ms,
    list_landing,
    past_retention,
    select_files,
    select_offsets,
    spark_file_name,
)

START, END = 10_000_000, 13_600_000  # one hour
SKEW = 300_000
LIMIT = 65_536
EARLIEST = START - SKEW - MTIME_MARGIN_MS


def _select(files, spans=(), **kwargs):
    return select_files(files, {s.path: s for s in spans}, START, END, SKEW, LIMIT, **kwargs)


def _span(file: LandingFile, lo: int | None, hi: int | None, **changes) -> FileSpan:
    fields = dict(
        path=file.path,
        size=file.size,
        modified_ms=file.modified_ms,
        max_record_bytes=LIMIT,
        lines=0 if lo is None else 3,
        min_event_ms=lo,
        max_event_ms=hi,
    )
    return FileSpan(**{**fields, **changes})


def test_earliest_arrival_is_the_range_start_less_the_allowed_skew_and_a_second():
    assert earliest_arrival_ms(START, SKEW) == START - SKEW - 1_000 == EARLIEST


@pytest.mark.parametrize(
    ("modified_ms", "skipped"),
    [(EARLIEST - 1, True), (EARLIEST, False), (START, False), (END + 5 * 3_600_000, False)],
)
def test_a_file_is_skipped_by_time_only_when_modified_before_the_earliest_arrival(modified_ms, skipped):
    file = LandingFile("file:/l/a", 10, modified_ms)
    selection = _select([file])
    assert selection.before_range == (("file:/l/a",) if skipped else ())
    assert selection.read == (() if skipped else ("file:/l/a",))  # not indexed: read


@pytest.mark.parametrize(
    ("modified_ms", "indexed"),
    [(START, False), (END + SKEW - 1, False), (END + SKEW, True), (END + 5 * 3_600_000, True)],
)
def test_a_file_without_an_entry_is_read_and_indexed_only_when_modified_after_the_range_and_skew(
    modified_ms, indexed
):
    file = LandingFile("file:/l/a", 10, modified_ms)
    selection = _select([file])
    assert selection.read == ("file:/l/a",)
    assert selection.to_index == ((file,) if indexed else ())


def test_an_entry_rules_out_a_file_modified_while_the_range_was_current_too():
    file = LandingFile("file:/l/a", 10, START + 60_000)
    assert _select([file], [_span(file, START - 500, START - 1)]).outside_span == ("file:/l/a",)


@pytest.mark.parametrize(
    ("lo", "hi", "read"),
    [
        (START - 500, START - 1, False),  # ends just before the range
        (START - 500, START, True),  # its last line is the range's first instant
        (END - 1, END + 500, True),  # its first line is the range's last instant
        (END, END + 500, False),  # starts at the range's end (exclusive)
        (START - 10 * 3_600_000, END + 10 * 3_600_000, True),  # a backlog around the range
        (None, None, False),  # no line with an event time
    ],
)
def test_an_indexed_file_is_read_exactly_when_its_span_meets_the_range(lo, hi, read):
    file = LandingFile("file:/l/a", 10, END + 3_600_000)  # landed an hour after the range
    selection = _select([file], [_span(file, lo, hi)])
    assert selection.to_index == ()
    assert (selection.read, selection.outside_span) == (
        (("file:/l/a",), ()) if read else ((), ("file:/l/a",))
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"size": 11},  # rewritten: another size
        {"modified_ms": END + 3_600_001},  # rewritten: another modification time
        {"max_record_bytes": LIMIT - 1},  # indexed under a smaller record-size limit
        {"path": "file:/l/b"},  # another file's entry
    ],
)
def test_an_entry_that_no_longer_describes_the_file_is_ignored_and_the_file_read(changes):
    file = LandingFile("file:/l/a", 10, END + 3_600_000)
    stale = _span(file, END + 1, END + 2, **changes)  # would put the file outside the range
    selection = _select([file], [stale])
    assert selection.read == ("file:/l/a",) and selection.to_index == (file,)


def test_an_entry_built_under_a_larger_record_size_limit_still_describes_the_file():
    file = LandingFile("file:/l/a", 10, END + 3_600_000)
    selection = _select([file], [_span(file, END + 1, END + 2, max_record_bytes=LIMIT * 2)])
    assert selection.outside_span == ("file:/l/a",)


def test_the_summary_counts_every_file_once():
    files = [
        LandingFile("file:/l/old", 1, EARLIEST - 60_000),
        LandingFile("file:/l/hour", 1, START + 60_000),
        LandingFile("file:/l/next", 1, END + 60_000),
        LandingFile("file:/l/new", 1, END + 60_000),
    ]
    spans = [_span(files[1], START, START + 5), _span(files[2], END, END + 5)]
    selection = _select(files, spans)
    assert selection.read == ("file:/l/hour", "file:/l/new")
    assert selection.skipped == {"file:/l/old", "file:/l/next"}
    assert selection.summary() == {
        "listed": 4,
        "read": 2,
        "skipped_before_range": 1,
        "skipped_by_index": 1,
        "indexed_now": 0,
    }


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/l/part-000001.jsonl", "file:/l/part-000001.jsonl"),
        ("/l/a b%c.jsonl", "file:/l/a%20b%25c.jsonl"),
        ("/l/o'clock+é(1).jsonl", "file:/l/o'clock+é(1).jsonl"),
        ("/l/back\\slash#?[x].jsonl", "file:/l/back%5Cslash%23%3F%5Bx%5D.jsonl"),
        ("/l//x/../y.jsonl", "file:/l/y.jsonl"),
    ],
)
def test_a_local_file_is_named_as_spark_names_it(path, name):
    assert spark_file_name(path) == name


def test_the_landing_listing_has_what_spark_reads_with_size_and_modification_time(tmp_path):
    for name in ("a b.jsonl", "_scenario.json", ".part-1.jsonl.tmp"):
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "sub").mkdir()
    os.utime(tmp_path / "a b.jsonl", (1_700_000_000.1239, 1_700_000_000.1239))
    expected = [LandingFile(spark_file_name(str(tmp_path / "a b.jsonl")), 3, 1_700_000_000_123)]
    assert list_landing(str(tmp_path)) == expected
    assert list_landing(tmp_path.as_uri()) == expected
    assert list_landing(str(tmp_path / "missing")) is None
    assert list_landing("s3a://bucket/landing") is None


# Kafka: the same rules over a partition's offsets, chunks of C standing for files.
C = 100


def _name(partition: int, chunk: int) -> str:
    return chunk_name("id-1", "clicks", partition, chunk)


def _chunk_span(partition: int, chunk: int, lo: int | None, hi: int | None, **changes) -> FileSpan:
    return _span(LandingFile(_name(partition, chunk), C, 0), lo, hi, **changes)


def _offsets(partitions, spans=()):
    return select_offsets(partitions, {s.path: s for s in spans}, _name, START, END, C, LIMIT)


def test_a_partition_is_read_from_the_range_start_to_the_chunk_after_it_then_indexed_chunks_and_its_tail():
    # offsets 0-149 published before the range could hold it; the range's own offsets end at 230.
    p = PartitionOffsets(partition=0, first=20, start=150, current_end=230, end=675)
    chosen = _offsets([p])
    # unindexed: everything from 150 is read, chunks 3, 4 and 5 named to be indexed
    assert chosen.ranges == {0: ((150, 675),)}
    assert chosen.to_index == ((0, 3), (0, 4), (0, 5))
    assert chosen.before_range == 130 and chosen.offsets_read == 525
    spans = [
        _chunk_span(0, 3, START - 1, START + 5),  # meets the range: read
        _chunk_span(0, 4, END, END + 9),  # after it: skipped
        _chunk_span(0, 5, START + 60_000, END - 1),  # a backlog of the range: read
    ]
    chosen = _offsets([p], spans)
    assert chosen.ranges == {0: ((150, 400), (500, 675))}
    assert chosen.to_index == () and chosen.outside_span == 1 and chosen.chunks_read == 2
    assert "425 read (130 published before the range skipped; 2 later chunks" in chosen.describe()


@pytest.mark.parametrize(
    "changes",
    [{"max_record_bytes": LIMIT - 1}, {"size": C + 1}, {"path": chunk_name("id-2", "clicks", 0, 3)}],
)
def test_a_chunk_entry_built_otherwise_or_for_another_topic_id_does_not_rule_it_out(changes):
    p = PartitionOffsets(partition=0, first=0, start=150, current_end=230, end=400)
    chosen = _offsets([p], [_chunk_span(0, 3, END, END + 9, **changes)])
    assert chosen.ranges == {0: ((150, 400),)} and chosen.to_index == ((0, 3),)


def test_a_partition_with_nothing_recent_is_not_read_and_an_aligned_end_reads_no_tail():
    quiet = PartitionOffsets(partition=1, first=0, start=500, current_end=500, end=500)
    aligned = PartitionOffsets(partition=2, first=0, start=100, current_end=200, end=300)
    chosen = _offsets([quiet, aligned], [_chunk_span(2, 2, END, END)])
    assert chosen.ranges == {2: ((100, 200),)} and chosen.before_range == 600
    assert chosen.outside_span == 1 and chosen.to_index == ()


def test_offsets_published_while_the_range_was_current_are_read_whatever_the_index_says():
    # chunk 1 holds the range's own offsets (up to 130): an entry saying it misses the range is
    # not consulted. Chunk 2 is complete and indexed outside: skipped; 300-340 is the tail.
    p = PartitionOffsets(partition=0, first=0, start=90, current_end=130, end=340)
    chosen = _offsets([p], [_chunk_span(0, 1, END + 1, END + 2), _chunk_span(0, 2, END + 1, END + 2)])
    assert chosen.ranges == {0: ((90, 200), (300, 340))}
    assert chosen.outside_span == 1 and chosen.chunks_read == 0


def test_the_last_chunk_is_read_even_when_an_entry_for_it_says_it_misses_the_range():
    # an entry for a chunk can only come from when it was complete; a partial one is never trusted
    p = PartitionOffsets(partition=0, first=0, start=90, current_end=130, end=260)
    chosen = _offsets([p], [_chunk_span(0, 2, END + 1, END + 2)])
    assert chosen.ranges == {0: ((90, 260),)} and chosen.outside_span == 0


def test_a_range_older_than_what_the_broker_kept_is_named_and_one_within_it_is_not():
    deleted = PartitionOffsets(partition=0, first=500, start=500, current_end=600, end=900)
    kept_before = PartitionOffsets(partition=1, first=500, start=520, current_end=600, end=900)
    never_deleted = PartitionOffsets(partition=2, first=0, start=0, current_end=10, end=20)
    emptied = PartitionOffsets(partition=3, first=70, start=70, current_end=70, end=70)
    assert past_retention([deleted, kept_before, never_deleted, emptied]) == [0]
