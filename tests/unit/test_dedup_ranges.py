"""The dedup catalog's lookup ranges (tidemark.dedup, delta-rs only: no JVM).

A retry from hours ago must cost a lookup bounded by its own event time, not a scan of every
catalog file stored between it and the batch's recent suspects."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tidemark.dedup import MAX_LOOKUP_RANGES, RANGE_GAP_MS, _Catalog, suspects_of, time_ranges

HOUR = 3_600_000
T0 = 1_763_805_600_000  # 2025-11-22T10:00Z


def test_ranges_cover_every_time_and_break_only_at_wide_gaps():
    times = [T0, T0 + 1, T0 + RANGE_GAP_MS, T0 + 5 * HOUR, T0 + 5 * HOUR + 7, T0 - 20 * HOUR]
    ranges = time_ranges(times)
    assert ranges == [
        (T0 - 20 * HOUR, T0 - 20 * HOUR),
        (T0, T0 + RANGE_GAP_MS),
        (T0 + 5 * HOUR, T0 + 5 * HOUR + 7),
    ]
    assert time_ranges([]) == []


def test_ranges_are_capped_by_keeping_the_widest_gaps():
    rng = np.random.default_rng(7)
    times = np.sort(rng.integers(T0, T0 + 48 * HOUR, 5_000))
    ranges = time_ranges(times, gap_ms=60_000, max_ranges=MAX_LOOKUP_RANGES)
    assert len(ranges) == MAX_LOOKUP_RANGES  # more gaps than that are wider than a minute
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))  # sorted, disjoint
    covered = np.zeros(len(times), dtype=bool)
    for lo, hi in ranges:
        covered |= (times >= lo) & (times <= hi)
    assert covered.all()


@pytest.fixture
def day_of_catalog(tmp_path):
    """An events-like table: one commit (one file) per hour of event time, 24 hours."""
    path = str(tmp_path / "events")
    for hour in range(24):
        times = T0 + hour * HOUR + np.arange(0, HOUR, 60_000, dtype=np.int64)
        write_deltalake(
            path,
            pa.table(
                {
                    "event_id": [f"h{hour:02d}-{i}" for i in range(len(times))],
                    "host": ["h"] * len(times),
                    "event_time": times,
                    "batch_id": np.full(len(times), hour, dtype=np.int64),
                    "ingest_ts": pa.array(times * 1000, pa.timestamp("us", tz="UTC")),
                }
            ),
            mode="append",
        )
    return path


def test_an_old_retry_reads_the_files_of_its_own_time_only(day_of_catalog):
    catalog = _Catalog(day_of_catalog, batch_id=100, horizon_ms=48 * HOUR)
    old, recent = T0 + 1 * HOUR + 5 * 60_000, T0 + 23 * HOUR + 10 * 60_000  # 22 hours apart
    dataset = DeltaTable(day_of_catalog).to_pyarrow_dataset()

    def files_read(ranges):
        return len(list(dataset.get_fragments(filter=catalog.lookup_filter(ranges))))

    assert files_read(time_ranges([old, recent])) == 2
    assert files_read([(old, recent)]) == 23  # one [min, max] range: every hour in between
    # h12-0 is not looked for in its own time; h23-11 is looked for at another time (a reuse)
    candidates = pd.DataFrame(
        {
            "host": ["h"] * 4,
            "event_id": ["h01-5", "h23-10", "h12-0", "h23-11"],
            "event_time": [old, recent, old, old],
            "arrival_ms": [T0 + 24 * HOUR] * 4,
        }
    )
    found = catalog.stored(candidates, time_ranges([old, recent]))
    assert sorted(found["event_id"]) == ["h01-5", "h23-10"]
    assert found.set_index("event_id")["last_ms"].to_dict() == {"h01-5": old, "h23-10": recent}


@pytest.mark.parametrize("seed", range(8))
def test_suspects_are_the_repeated_hashes_and_those_below_the_ceiling_counted_by_row(seed):
    import collections

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 3_000))
    # few distinct values, so some repeat (and some repeat many times)
    hashes = rng.integers(-(2**63), 2**63 - 1, size=max(1, n // 2), dtype=np.int64)[
        rng.integers(0, max(1, n // 2), n)
    ]
    below = rng.random(n) < float(rng.choice([0.0, 0.01, 0.5, 1.0]))
    suspects, rows = suspects_of(hashes, below)
    counts = collections.Counter(hashes.tolist())
    expected = {h for h, c in counts.items() if c > 1} | set(hashes[below].tolist())
    assert suspects.tolist() == sorted(expected)
    assert rows == sum(counts[h] for h in expected)


def test_no_hashes_no_suspects():
    suspects, rows = suspects_of(np.empty(0, np.int64), np.empty(0, bool))
    assert len(suspects) == 0 and rows == 0
    suspects, rows = suspects_of(np.array([5, 7, 9], np.int64), np.zeros(3, bool))
    assert len(suspects) == 0 and rows == 0
