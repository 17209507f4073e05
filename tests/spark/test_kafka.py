"""The Kafka source against a real broker: point-to-point publishing, exactly-once streaming,
and a batch recompute that re-reads the topic by offset range."""

from __future__ import annotations

from helpers import assert_exactly_once, kafka_pipeline
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
