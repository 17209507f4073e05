"""A small batch's events are collected once and cut on the driver; a large batch's stay in Spark.
The two forms must give the same answer, or the stream's tables would depend on how its input
was cut into batches: here, on random batches (times before the epoch, NULL keys and values,
repeated keys), the window sums of :func:`tidemark.aggregate.aggregate_windows_arrow` equal
Spark's :func:`tidemark.aggregate.aggregate_windows`, and the ``events``/``late_events`` rows of
:meth:`tidemark.batch_outputs.BatchOutputs.event_rows_arrow` equal Spark's, column types included.
"""

from __future__ import annotations

import random

import pytest
from helpers import write_config

from tidemark.aggregate import aggregate_windows, aggregate_windows_arrow
from tidemark.batch_outputs import BatchOutputs, collect, collect_events

SIZE = 60_000
SCHEMA = (
    "event_id string, host string, event_time long, msg_time long, key string, value double, "
    "source string, arrival_ms long, ingest_ts timestamp"
)


def _batch(spark, rng: random.Random, n: int):
    rows = []
    for i in range(n):
        t = rng.randrange(-3 * SIZE, 6 * SIZE)
        key = rng.choice(["a", "b", "c", None])
        value = rng.choice([None, float(rng.randrange(-50, 50)) / 4])
        arrival = rng.choice([None, 1_700_000_000_000 + i])
        rows.append((f"e{i}", f"h{i % 7}", t, t + 5, key, value, f"file-{i % 3}", arrival, None))
    from pyspark.sql import functions as F

    frame = spark.createDataFrame(rows, SCHEMA)
    return frame.withColumn("ingest_ts", F.timestamp_millis(F.lit(1_700_000_123_456)))


def _sums(frame):
    return {
        (int(r.window_start_ms), r.key): (int(r.events), float(r.value_sum))
        for r in frame.itertuples(index=False)
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_window_sums_on_the_driver_equal_spark(spark, seed):
    good = _batch(spark, random.Random(seed), 400)
    spark_sums = aggregate_windows(good, SIZE).toPandas()
    driver_sums = aggregate_windows_arrow(collect_events(good), SIZE)
    assert len(driver_sums) == len(spark_sums)
    assert _sums(driver_sums) == _sums(spark_sums)
    assert dict(driver_sums.dtypes.astype(str)) == {
        "window_start_ms": "int64",
        "key": "object",
        "events": "int64",
        "value_sum": "float64",
    }


# (batch id, watermark before the batch, low watermark): none yet; windows closed and final on
# both sides of the watermark; an id past an int (Spark's literal becomes a long).
CASES = [(0, None, None), (7, 2 * SIZE, SIZE), (2**31 + 5, 4 * SIZE + 1, -SIZE)]


@pytest.mark.parametrize(("batch_id", "previous", "low"), CASES)
def test_event_rows_on_the_driver_equal_spark(spark, tmp_path, batch_id, previous, low):
    config = write_config(tmp_path, name="forms", window={"size": "1m", "allowed_lateness": "2m"})
    outputs = BatchOutputs(writer=None, config=config, identity=None, echo=lambda m: None)  # type: ignore[arg-type]
    good = _batch(spark, random.Random(batch_id), 300)
    on_spark = collect(outputs._event_rows(good, batch_id, previous, low))
    on_driver = outputs.event_rows_arrow(collect_events(good), batch_id, previous, low)
    assert on_driver.schema == on_spark.schema
    assert on_driver.to_pylist() == on_spark.to_pylist()
    flags = on_driver.select(["is_late", "folded"]).to_pylist()
    if previous is not None:  # the case reaches both sides of each rule
        assert {f["is_late"] for f in flags} == {True, False}
        assert {f["folded"] for f in flags if f["is_late"]} == {True, False}
