"""``spark.per_row_work: executors``: Spark finds a batch's suspect hashes and groups its count
columns per host, so the driver receives a row per suspect and per host instead of one per row.
Both must give exactly what the driver computes from the rows collected whole
(:func:`tidemark.dedup.suspects_of`, :func:`tidemark.batch_steps.per_host`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.batch_steps import count_columns, count_columns_per_host, per_host
from tidemark.dedup import HASH, _at_or_below, suspects_of, suspects_on_executors

SCHEMA = "host string, event_time long, heartbeat boolean, reason string, upstream_lw long, _id_hash long"

rows = st.lists(
    st.tuples(
        st.sampled_from(["h1", "h2", "h3", None]),
        st.integers(0, 20),
        st.sampled_from([None, False, True]),  # heartbeat
        st.sampled_from([None, None, None, "bad json"]),  # reason: a quarantined line
        st.sampled_from([None, 5, 9]),  # upstream_lw
        st.one_of(st.none(), st.integers(-3, 6)),  # the key hash (NULL: no event)
    ),
    max_size=40,
)


def _sorted(table: pa.Table) -> pd.DataFrame:
    frame = table.to_pandas()
    return frame.sort_values("host", na_position="first").reset_index(drop=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, ceiling=st.one_of(st.none(), st.integers(0, 20)), removed=st.integers(0, 3))
def test_the_executors_give_the_drivers_suspects_and_counts(spark, data, ceiling, removed):
    from pyspark.sql import functions as F

    frame = spark.createDataFrame(data, SCHEMA)
    below = _at_or_below(ceiling) if ceiling is not None else F.lit(False)
    collected = frame.select(HASH, below.alias("_below"), *count_columns()).toArrow()
    hashed = collected.filter(collected[HASH].is_valid())
    want_hashes, want_rows = suspects_of(hashed[HASH].to_numpy(), hashed["_below"].to_numpy())
    got_hashes, got_rows = suspects_on_executors(frame, below)
    assert got_hashes.tolist() == want_hashes.tolist() and got_rows == want_rows

    # the copies deduplication removed on the driver: one event off a host each
    gone = pd.DataFrame(
        {"host": ["h1", "h2", "h1"][:removed], "event_time": np.arange(removed, dtype=np.int64)}
    )
    by_row = per_host(collected.drop_columns([HASH, "_below"]), gone)
    by_host = per_host(count_columns_per_host(frame), gone)
    pd.testing.assert_frame_equal(_sorted(by_host), _sorted(by_row), check_dtype=True)
