"""Which batches are collected whole (tidemark.dedup.whole_input): a batch is sized from what
Spark's checkpoint says of it (tidemark.checkpoint.BatchSource), by its files' bytes on this
machine or its Kafka records; anything not known takes Spark's route."""

from __future__ import annotations

import json

from tidemark import dedup
from tidemark.checkpoint import BatchSource, _records_between


def test_local_files_are_sized_by_their_bytes_and_anything_else_is_not_known(tmp_path):
    small, big = tmp_path / "a b.jsonl", tmp_path / "b.jsonl"
    small.write_bytes(b"x" * 100)
    big.write_bytes(b"x" * 300)
    uri = "file:" + str(small).replace(" ", "%20")  # Spark's log writes URIs
    both = BatchSource(0, json.dumps({"files": [uri, f"file:{big}"]}))
    assert both.local_bytes() == 400
    assert BatchSource(0, json.dumps({"files": [f"file:{tmp_path}/gone.jsonl"]})).local_bytes() is None
    assert BatchSource(0, json.dumps({"files": ["s3a://bucket/a.jsonl"]})).local_bytes() is None
    assert BatchSource(0, json.dumps({"kafka": {"t": {"0": 5}}})).local_bytes() is None
    assert BatchSource(0, None).local_bytes() is None


def test_kafka_records_are_counted_between_offsets_and_a_new_partition_is_not_known():
    start = {"t": {"0": 10, "1": 0}}
    assert _records_between(start, {"t": {"0": 25, "1": 4}}) == 19
    assert _records_between(start, {"t": {"0": 10, "1": 0}}) == 0
    assert _records_between(start, {"t": {"0": 25, "1": 4, "2": 1}}) is None


def test_the_limits_decide_and_an_unknown_size_is_never_whole(monkeypatch):
    monkeypatch.setattr(dedup, "WHOLE_MAX_BYTES", 1000)
    monkeypatch.setattr(dedup, "WHOLE_MAX_RECORDS", 10)
    assert dedup.whole_input(1000) and not dedup.whole_input(1001)
    assert dedup.whole_input(None, 10) and not dedup.whole_input(None, 11)
    assert not dedup.whole_input(None, None)
