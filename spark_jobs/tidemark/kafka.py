"""Kafka side of Tidemark: publish scenarios point to point, and read a topic as source lines.

Publishing keys every record by its host, so one host's records land in one partition in the
order they were produced (the producer is idempotent, so its own retries cannot reorder them).
Reading keeps Spark's offsets in the checkpoint, bounds a batch with ``maxOffsetsPerTrigger`` and
fails loudly on data loss; the batch recompute re-reads the topic by offset range (from the first
offset that can hold its range, :mod:`tidemark.pruning`, to the latest), which is why the broker
keeps records (``log.retention.ms=-1`` in scripts/kafka.sh).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidemark.generator import Scenario, Truth, iter_buckets
from tidemark.timeutil import now_ms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_HOST = re.compile(r'"host":"([^"\\]{1,253})"')


def ensure_topic(bootstrap: str, topic: str, partitions: int = 4) -> None:
    """Create the topic if it does not exist (idempotent)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    try:
        futures[topic].result(timeout=30)
    except Exception as exc:  # TOPIC_ALREADY_EXISTS from a concurrent creator is fine
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def publish_scenario(
    s: Scenario,
    bootstrap: str,
    topic: str,
    live: bool = False,
    progress: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    spans: range | None = None,
) -> Truth:
    """Publish a scenario's lines in arrival order, keyed by host (malformed lines without a host
    go unkeyed). ``live`` paces each arrival span to the clock, as the file generator does.
    ``spans`` publishes only those arrival spans (file indexes), so a test can let the rest of
    the input arrive later; the returned truth still describes the whole scenario."""
    from confluent_kafka import Producer

    ensure_topic(bootstrap, topic)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,  # broker de-duplicates the producer's own retries
            "linger.ms": 20,
            "compression.type": "lz4",
        }
    )
    truth = Truth()
    if live:
        from dataclasses import asdict

        s = Scenario(**{**asdict(s), "keys": tuple(s.keys), "start_ms": now_ms() // 1000 * 1000})
    for index, end_ms, lines in iter_buckets(s, truth):
        if spans is not None and index not in spans:
            continue
        if live and (wait := (end_ms - now_ms()) / 1000) > 0:
            sleep(wait)
        for line in lines:
            match = _HOST.search(line)
            while True:
                try:
                    producer.produce(
                        topic, value=line.encode(), key=match.group(1).encode() if match else None
                    )
                    break
                except BufferError:  # local queue full: let it drain
                    producer.poll(0.5)
            producer.poll(0)
        truth.files += 1
        truth.lines += len(lines)
        if progress:
            progress(f"span {index + 1}: {len(lines):,} records published ({truth.lines:,} so far)")
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"kafka: {remaining} records were not acknowledged by {bootstrap} within 120 s")
    return truth


def read_topic(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    streaming: bool,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int = 200_000,
    from_timestamp_ms: int | None = None,
) -> DataFrame:
    """A topic as ``(raw, source, arrival_ms)`` lines; ``source`` is ``topic/partition@offset``.

    ``from_timestamp_ms`` (batch reads) starts each partition at its earliest offset whose
    timestamp is at or after it, instead of ``starting_offsets``; a partition with no such
    record is read from its end (nothing)."""
    from pyspark.sql import functions as F

    reader = (spark.readStream if streaming else spark.read).format("kafka")
    reader = (
        reader.option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if streaming:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    else:
        reader = reader.option("endingOffsets", "latest")
        if from_timestamp_ms is not None:
            reader = reader.option("startingTimestamp", str(from_timestamp_ms)).option(
                "startingOffsetsByTimestampStrategy", "latest"
            )
    return reader.load().select(
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
