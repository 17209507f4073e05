"""The Kafka source against a real broker: point-to-point publishing, exactly-once streaming,
and a batch recompute that re-reads the topic by offset range."""

from __future__ import annotations

import json

from helpers import assert_exactly_once, kafka_pipeline, write_config
from pyspark.sql import functions as F

from tidemark.reconcile import reconcile
from tidemark.stream import run_stream


def test_kafka_stream_is_exactly_once_and_hosts_stay_in_one_partition(spark, kafka, tmp_path):
    scenario, config, oracle_config, truth = kafka_pipeline(tmp_path, kafka, "clicks-basic")
    processor = run_stream(spark, config, once=True, echo=lambda m: None)
    assert len([s for s in processor.summaries if not s.skipped]) >= 4  # maxOffsetsPerTrigger bounds batches
    # The oracle reads the same scenario's files; the tables must match it exactly.
    assert_exactly_once(spark, config.model_copy(update={"source": oracle_config.source}), truth)
    events = spark.read.format("delta").load(config.table_path("events"))
    partitions = events.select("host", F.regexp_extract("source", r"/(\d+)@", 1).alias("p")).distinct()
    assert partitions.groupBy("host").count().where("count > 1").count() == 0
    report = reconcile(spark, config, scenario.start_ms, scenario.end_ms)
    assert len(report.closed) == scenario.minutes and all(w.unexplained == 0 for w in report.closed)


def test_the_kafka_recompute_reads_the_range_and_the_chunks_holding_its_late_backlog(spark, kafka, tmp_path):
    """Records published before the range could hold it (timestamp < start - skew) are not read;
    of the offsets published after the range, only the chunks whose indexed span meets it are
    (indexed by the first recompute, used by the next); a backlog published hours after the range
    is counted; a partition with nothing recent is read from its end."""
    from confluent_kafka import Producer

    from tidemark.kafka import ensure_topic
    from tidemark.recompute import recompute_windows
    from tidemark.sources import parsed_range

    minute, hour = 60_000, 3_600_000
    start = 1_763_805_600_000  # 2025-11-22T10:00Z
    end = start + hour
    topic = "prune-by-offsets"
    ensure_topic(kafka.bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    published: dict[str, int] = {}  # event_id -> event time, of the records that count

    def publish(event_id: str, event_time: int, timestamp: int, partition: int, counts: bool) -> None:
        value = json.dumps(
            {"event_id": event_id, "host": f"h{partition}", "event_time": event_time, "key": "k"}
        )
        producer.produce(topic, value=value.encode(), partition=partition, timestamp=timestamp)
        if counts:
            published[event_id] = event_time

    for i in range(18):  # the hour before, published on time; partition 3 holds nothing else
        t = start - hour + i * 3 * minute
        publish(f"old-{i}", t, t + 1_000, i % 4, counts=False)
    for i in range(30):  # the hour, published on time
        t = start + i * 2 * minute
        publish(f"hour-{i}", t, t + 1_000, i % 3, counts=True)
    for i in range(60):  # the two hours after, published on time
        t = end + i * 2 * minute
        publish(f"after-{i}", t, t + 1_000, i % 3, counts=False)
    for i in range(5):  # the hour again, from a host that was down: published three hours later
        t = start + i * 11 * minute
        publish(f"backlog-{i}", t, end + 3 * hour, 0, counts=True)
    for i in range(6):  # and more of the hours after
        t = end + 3 * hour + i * minute
        publish(f"later-{i}", t, t + 1_000, 0, counts=False)
    assert producer.flush(60) == 0

    config = write_config(
        tmp_path,
        name="kprune",
        source={
            "kind": "kafka",
            "bootstrap_servers": kafka.bootstrap,
            "topic": topic,
            "path": None,
            "index_chunk_offsets": 4,
        },
    )
    first = parsed_range(spark, config, start, end)
    assert first.offsets is not None
    assert first.offsets.before_range == 18  # the last old record was published at start - 9 min
    assert first.offsets.indexed > 0 and first.offsets.outside_span > 0
    read = {r.event_id for r in first.rows.select("event_id").collect()}
    assert read >= set(published) and not any(e.startswith("old-") for e in read)
    after_read = len([e for e in read if e.startswith(("after-", "later-"))])
    # of 66: those up to the chunk boundary after the range, the backlog's chunks and the tails
    assert after_read <= 16 and first.offsets.outside_span >= 12, first.describe()

    again = parsed_range(spark, config, start, end)  # the index now speaks for the chunks
    assert again.offsets is not None and again.offsets.indexed == 0
    assert again.offsets.ranges == first.offsets.ranges
    assert "read" in again.describe() and "indexed now" in again.describe()

    rows = recompute_windows(spark, config, start, end, source=again).collect()
    everything = parsed_range(spark, config, start, end, prune=False)
    assert len({r.event_id for r in everything.rows.select("event_id").collect()}) == 18 + 30 + 60 + 5 + 6
    unpruned = recompute_windows(spark, config, start, end, source=everything).collect()
    counts = {r.window_start_ms: r.events for r in rows}
    expected: dict[int, int] = {}
    for t in published.values():
        expected[t - t % minute] = expected.get(t - t % minute, 0) + 1
    assert counts == expected == {r.window_start_ms: r.events for r in unpruned}


def test_a_range_the_brokers_retention_has_reached_is_refused_with_one_line(spark, kafka, tmp_path, capsys):
    """Records deleted by the broker may have held the range: the recompute refuses rather than
    count short, and `tidemark reconcile` says so in one line."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from tidemark.cli import main
    from tidemark.kafka import ensure_topic, flush, produce_line, producer
    from tidemark.sources import SourceRangeError, parsed_range
    from tidemark.timeutil import format_instant_ms

    minute = 60_000
    start = 1_763_805_600_000
    topic = "past-retention"
    ensure_topic(kafka.bootstrap, topic, partitions=1)
    to = producer(kafka.bootstrap)
    for i in range(20):
        t = start + i * minute
        produce_line(
            to, topic, json.dumps({"event_id": f"e{i}", "host": "h", "event_time": t, "key": "k"}), t + 1_000
        )
    flush(to, kafka.bootstrap, 60)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, 0, 10)])  # the first 10 minutes are gone
    assert all(f.result(timeout=30).low_watermark == 10 for f in deleted.values())

    config = write_config(
        tmp_path,
        name="kretention",
        source={"kind": "kafka", "bootstrap_servers": kafka.bootstrap, "topic": topic, "path": None},
    )
    # the second ten minutes are still all there: recomputed
    kept = parsed_range(spark, config, start + 16 * minute, start + 20 * minute)
    assert {r.event_id for r in kept.rows.collect()} >= {"e16", "e17", "e18", "e19"}
    try:
        parsed_range(spark, config, start, start + 20 * minute)
    except SourceRangeError as exc:
        assert "partition(s) 0" in str(exc)
    else:
        raise AssertionError("a range whose records the broker deleted was recomputed")

    code = main(
        [
            "reconcile",
            "--config",
            str(tmp_path / "kretention.yaml"),
            "--start",
            format_instant_ms(start),
            "--end",
            format_instant_ms(start + 20 * minute),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "retention" in err[0], err


def test_the_live_generator_publishes_its_history_at_once_dated_at_arrival(spark, kafka):
    """``tidemark generate --kafka --live --history N`` (what a deployment's producer runs) starts
    N minutes ago: the past is published at once, each record timestamped with its span's arrival
    (as the file generator dates its past files), then the rest paced. It once ignored --history."""
    import time

    from tidemark.cli import main

    started = int(time.time() * 1000)
    # 31 minutes ago, 30 minutes long: all of it is history, so no span waits on the clock
    args = ["generate", "--kafka", kafka.bootstrap, "--topic", "history", "--live", "--history", "31"]
    assert main([*args, "--minutes", "30", "--hosts", "20", "--rate", "2", "--seed", "3"]) == 0
    took = int(time.time() * 1000) - started
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", "history")
        .option("startingOffsets", "earliest")
        .load()
        .select((F.col("timestamp").cast("double") * 1000).cast("long").alias("ts"), "value")
        .collect()
    )
    times = [json.loads(r["value"]).get("event_time") for r in rows]
    times = [t for t in times if isinstance(t, int)]
    assert took < 4 * 60_000, "the history was paced, not published at once"
    assert min(times) < started - 25 * 60_000, "no event time from 30 minutes ago: --history ignored"
    past = [r["ts"] for r in rows if r["ts"] < started - 60_000]
    assert past and min(past) >= started - 31 * 60_000, "past records not dated at their arrival"
