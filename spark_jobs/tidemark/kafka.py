"""Kafka side of Tidemark: publish scenarios point to point, and read a topic as source lines.

Publishing keys every record by its host, so one host's records land in one partition in the
order they were produced (the producer is idempotent, so its own retries cannot reorder them).
Reading keeps Spark's offsets in the checkpoint, bounds a batch with ``maxOffsetsPerTrigger`` and
fails loudly on data loss; the batch recompute re-reads the topic by offset ranges (those that can
hold its range, :mod:`tidemark.pruning`), which is why the broker keeps records
(``log.retention.ms=-1`` in scripts/kafka.sh).

Every client here reaches the cluster through a :class:`~tidemark.kafka_access.KafkaAccess` (a
bare bootstrap string is a plaintext cluster): its security settings, secrets and the check that
the cluster accepts them live in :mod:`tidemark.kafka_access`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from tidemark.generator import Scenario, Truth, iter_buckets
from tidemark.kafka_access import KafkaAccess, KafkaAccessError, as_access, check_access
from tidemark.timeutil import now_ms

if TYPE_CHECKING:
    from confluent_kafka import Producer
    from pyspark.sql import DataFrame, SparkSession

# KafkaAccessError is raised for this module's clients too; it stays importable from here.
__all__ = [
    "KafkaAccess",
    "KafkaAccessError",
    "PartitionOffsets",
    "check_access",
    "ensure_topic",
    "flush",
    "partition_offsets",
    "produce_line",
    "producer",
    "publish_scenario",
    "read_offset_ranges",
    "read_topic",
]

_HOST = re.compile(r'"host"\s*:\s*"([^"\\]{1,253})"')


def ensure_topic(target: str | KafkaAccess, topic: str, partitions: int = 4) -> None:
    """Create the topic if it does not exist (idempotent). A secured cluster is asked first
    (:func:`check_access`): a refusal fails in one line."""
    from confluent_kafka.admin import AdminClient, NewTopic

    access = as_access(target)
    if access.secured:
        check_access(access)
    admin = AdminClient(access.client_conf())
    if topic in admin.list_topics(timeout=30).topics:
        return
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    try:
        futures[topic].result(timeout=30)
    except Exception as exc:  # TOPIC_ALREADY_EXISTS from a concurrent creator is fine
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def producer(target: str | KafkaAccess) -> Producer:
    """An idempotent producer (the broker de-duplicates its own retries, so they cannot reorder a
    host's records)."""
    from confluent_kafka import Producer

    return Producer(
        {
            **as_access(target).client_conf(),
            "enable.idempotence": True,
            "linger.ms": 20,
            "compression.type": "lz4",
        }
    )


def produce_line(to: Producer, topic: str, line: str, timestamp_ms: int | None = None) -> None:
    """Publish one line keyed by its host (a line without one goes unkeyed), waiting for the local
    queue when it is full; ``timestamp_ms`` sets the record's timestamp (its arrival)."""
    match = _HOST.search(line)
    key = match.group(1).encode() if match else None
    while True:
        try:
            if timestamp_ms is None:
                to.produce(topic, value=line.encode(), key=key)
            else:
                to.produce(topic, value=line.encode(), key=key, timestamp=timestamp_ms)
            break
        except BufferError:  # local queue full: let it drain
            to.poll(0.5)
    to.poll(0)


def flush(to: Producer, target: str | KafkaAccess, timeout_s: float = 120) -> None:
    """Wait for every record to be acknowledged."""
    remaining = to.flush(timeout_s)
    if remaining:
        access = as_access(target)
        raise RuntimeError(
            f"kafka: {remaining} records were not acknowledged by {access.bootstrap} within {timeout_s:g} s"
        )


def publish_scenario(
    s: Scenario,
    bootstrap: str | KafkaAccess,
    topic: str,
    live: bool = False,
    progress: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    spans: Container[int] | None = None,
    history_minutes: int = 0,
) -> Truth:
    """Publish a scenario's lines in arrival order, keyed by host (malformed lines without a host
    go unkeyed). ``live`` paces each arrival span to the clock, as the file generator does;
    ``history_minutes`` (with ``live``) starts the scenario that long ago: the spans already due
    are published at once, each record timestamped with its span's arrival time (as the file
    generator dates its past files), then the rest paced. ``spans`` publishes only those arrival
    spans (file indexes), so a test can let the rest of the input arrive later; the returned truth
    still describes the whole scenario."""
    if history_minutes and not live:
        raise ValueError("history_minutes needs live")
    ensure_topic(bootstrap, topic)
    to = producer(bootstrap)
    truth = Truth()
    if live:
        from dataclasses import asdict

        start = (now_ms() - history_minutes * 60_000) // 1000 * 1000
        s = Scenario(**{**asdict(s), "keys": tuple(s.keys), "start_ms": start})
    for index, end_ms, lines in iter_buckets(s, truth):
        if spans is not None and index not in spans:
            continue
        if live and (wait := (end_ms - now_ms()) / 1000) > 0:
            sleep(wait)
        past = end_ms if live and history_minutes and end_ms < now_ms() else None
        for line in lines:
            produce_line(to, topic, line, past)
        truth.files += 1
        truth.lines += len(lines)
        if progress:
            progress(f"span {index + 1}: {len(lines):,} records published ({truth.lines:,} so far)")
    flush(to, bootstrap)
    return truth


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition of a topic as the broker answers for a range: ``first``, its oldest offset
    kept; ``start``, the first with a timestamp at or after :func:`earliest_arrival_ms`;
    ``current_end``, the first at or after ``end + max_clock_skew``; ``end``, the next offset to
    be written (``start`` and ``current_end`` are ``end`` when no record is that recent)."""

    partition: int
    first: int
    start: int
    current_end: int
    end: int


def partition_offsets(
    target: str | KafkaAccess, topic: str, earliest_ms: int, current_end_ms: int
) -> tuple[str, list[PartitionOffsets]]:
    """The topic's id and, per partition, its oldest offset, the first offsets with a timestamp
    at or after ``earliest_ms`` and ``current_end_ms``, and its end (one broker round trip
    each)."""
    from confluent_kafka import Consumer, KafkaException, TopicCollection, TopicPartition
    from confluent_kafka.admin import AdminClient

    access = as_access(target)
    if access.secured:
        check_access(access)
    bootstrap = access.bootstrap
    admin = AdminClient(access.client_conf())  # kept: its futures die with it
    try:
        description = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    except KafkaException as exc:
        raise RuntimeError(f"kafka: topic {topic} at {bootstrap}: {exc.args[0]}") from exc
    partitions = sorted(p.id for p in description.partitions)
    consumer = Consumer(
        {**access.client_conf(), "group.id": "tidemark-recompute", "enable.auto.commit": False}
    )
    try:
        bounds = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in partitions}

        def at(ms: int) -> dict[int, int]:
            found = consumer.offsets_for_times([TopicPartition(topic, p, ms) for p in partitions], timeout=30)
            if failed := [tp for tp in found if tp.error is not None]:
                raise RuntimeError(
                    f"kafka: offsets of {topic}/{failed[0].partition} at {ms}: {failed[0].error}"
                )
            return {tp.partition: tp.offset for tp in found}

        starts, current_ends = at(earliest_ms), at(current_end_ms)
    finally:
        consumer.close()
    offsets = []
    for p in partitions:
        first, end = bounds[p]
        start = starts[p] if starts[p] >= 0 else end  # -1: no record that recent
        current_end = current_ends[p] if current_ends[p] >= 0 else end
        offsets.append(PartitionOffsets(p, first, start, max(start, current_end), end))
    return str(description.topic_id), offsets


def read_offset_ranges(
    spark: SparkSession,
    target: str | KafkaAccess,
    topic: str,
    ranges: Mapping[int, Sequence[tuple[int, int]]],
) -> DataFrame:
    """The records of the given ``[from, to)`` offset ranges per partition, as :func:`read_topic`
    lines: one Kafka read per range of each partition's (the first ranges of all partitions
    together, then the second, ...), unioned."""
    reads = []
    for wave in range(max((len(r) for r in ranges.values()), default=0)):
        part = {p: r[wave] for p, r in ranges.items() if len(r) > wave}
        reader = (
            spark.read.format("kafka")
            .options(**as_access(target).spark_options())
            .option("assign", json.dumps({topic: sorted(part)}))
            .option("startingOffsets", json.dumps({topic: {str(p): a for p, (a, _) in part.items()}}))
            .option("endingOffsets", json.dumps({topic: {str(p): b for p, (_, b) in part.items()}}))
            .option("failOnDataLoss", "true")
        )
        reads.append(_lines(reader.load()))
    if not reads:
        return spark.createDataFrame([], "raw string, source string, arrival_ms bigint")
    return reduce(lambda a, b: a.unionByName(b), reads)


def read_topic(
    spark: SparkSession,
    target: str | KafkaAccess,
    topic: str,
    streaming: bool,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int = 200_000,
) -> DataFrame:
    """A topic as ``(raw, source, arrival_ms)`` lines; ``source`` is ``topic/partition@offset``.
    A batch read takes everything from ``starting_offsets`` to the end (the recompute reads
    chosen offsets with :func:`read_offset_ranges`)."""
    reader = (spark.readStream if streaming else spark.read).format("kafka")
    reader = (
        reader.options(**as_access(target).spark_options())
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if streaming:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    else:
        reader = reader.option("endingOffsets", "latest")
    return _lines(reader.load())


def _lines(records: DataFrame) -> DataFrame:
    """Kafka records as ``(raw, source, arrival_ms)`` lines."""
    from pyspark.sql import functions as F

    return records.select(
        F.col("value").cast("string").alias("raw"),
        F.concat(
            F.col("topic"),
            F.lit("/"),
            F.col("partition").cast("string"),
            F.lit("@"),
            F.col("offset").cast("string"),
        ).alias("source"),
        F.unix_millis("timestamp").alias("arrival_ms"),
    )
