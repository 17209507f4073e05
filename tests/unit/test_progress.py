"""Host progress kept in slots (tidemark.progress): the same state and the same exact watermark
as the definition, at a million hosts, with storage that holds only what batches moved."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tidemark.progress import SNAPSHOT_FACTOR, HostProgress, merge_progress
from tidemark.watermark import update_watermark
from tidemark.watermark_status import evaluate_status

BASE = 1_763_805_600_000


def names(ids: np.ndarray) -> np.ndarray:
    return np.array([f"h{i:07d}" for i in ids], dtype=object)


def definition(values: np.ndarray, q: Fraction, population: int) -> int | None:
    """The precise watermark by its definition, checked literally: the latest time t that at
    least ceil(q*N) hosts have reached (a full sort, not the partition the code uses)."""
    need = math.ceil(q * population)
    if need == 0 or need > len(values):
        return None
    t = int(np.sort(values)[::-1][need - 1])
    assert np.count_nonzero(values >= t) >= need and np.count_nonzero(values >= t + 1) < need
    return t


def test_a_million_hosts_batch_by_batch_equal_the_definition():
    """Batches of 400k random hosts (some new) over 1M: the slots equal a dense reference
    array, and the watermark over them equals the definition after every batch. Names come as
    Arrow (as the stream hands them) and as Python strings, batch about."""
    rng = np.random.default_rng(7)
    n, q = 1_000_000, Fraction(999, 1000)
    reference = np.full(n, -1, dtype=np.int64)  # -1: not seen yet
    state, stored = HostProgress.empty(), []
    previous = None
    for batch_id in range(6):
        ids = rng.choice(n if batch_id else n - 50_000, size=400_000, replace=False)
        times = BASE + batch_id * 60_000 + rng.integers(-90_000, 60_000, len(ids))
        hosts = pa.array(names(ids), pa.large_string()) if batch_id % 2 else names(ids)
        advanced = state.advance(hosts, times, batch_id)
        assert advanced.changed.schema.field("host").type == pa.string()
        state = advanced.progress
        np.maximum.at(reference, ids, times)
        stored = [advanced.rows] if advanced.snapshot else [*stored, advanced.rows]
        seen = np.flatnonzero(reference >= 0)
        assert len(state) == len(seen)
        assert np.array_equal(state.of(names(seen)), reference[seen].astype(float))
        assert state.max_ms() == reference.max()
        update = update_watermark(state.progress_ms, q, previous)
        expected = definition(reference[seen], q, len(seen))
        assert update.watermark == (expected if previous is None else max(previous, expected))
        previous = update.watermark
    # What was stored (snapshots and the batches' rows since) folds back to the same state.
    folded = HostProgress.from_rows(pa.concat_tables(stored).to_pandas())
    assert folded.as_dict() == state.as_dict()


def test_a_batch_stores_only_the_hosts_it_moved():
    state = HostProgress.from_mapping({"a": 10, "b": 20, "c": 30})
    advanced = state.advance(["a", "b", "d"], [15, 5, 1], batch_id=4)
    changed = advanced.changed.to_pydict()
    assert changed == {"host": ["a", "d"], "progress_ms": [15, 1], "last_batch": [4, 4]}
    assert advanced.progress.as_dict() == {"a": 15, "b": 20, "c": 30, "d": 1}
    assert state.as_dict() == {"a": 10, "b": 20, "c": 30}  # the previous state is unchanged
    # The same batch with its names as Arrow (chunked, as a grouped table holds them).
    arrow = state.advance(pa.chunked_array([["a"], ["b", "d"]]), [15, 5, 1], batch_id=4)
    assert arrow.changed.to_pydict() == changed
    assert arrow.progress.as_dict() == advanced.progress.as_dict()


def test_the_log_is_replaced_by_a_snapshot_once_it_is_long():
    state = HostProgress.empty()
    snapshots = []
    for batch_id in range(20):
        advanced = state.advance(["a", "b"], [batch_id + 1, batch_id + 1], batch_id)
        state = advanced.progress
        snapshots.append(advanced.snapshot)
        assert state.stored_rows <= SNAPSHOT_FACTOR * len(state)
        assert advanced.rows.num_rows == (len(state) if advanced.snapshot else 2)
    assert any(snapshots) and not all(snapshots)


def test_fold_keeps_each_hosts_highest_row():
    rows = pd.DataFrame(
        {"host": ["a", "b", "a", "a"], "progress_ms": [5, 7, 9, 9], "last_batch": [1, 1, 2, 3]}
    )
    folded = HostProgress.from_rows(rows, version=12)
    assert folded.as_dict() == {"a": 9, "b": 7}
    assert dict(zip(folded.hosts, folded.last_batch, strict=True)) == {"a": 3, "b": 1}
    assert folded.version == 12 and folded.stored_rows == 4


@pytest.mark.parametrize("expected", [frozenset({"a", "c", "z"}), None])
def test_population_with_and_without_an_expected_list(expected):
    state = HostProgress.from_mapping({"a": 10, "b": 20, "c": 30})
    hosts, values, silent = state.population(expected)
    if expected is None:
        assert (list(hosts), list(values), silent) == (["a", "b", "c"], [10, 20, 30], ())
        return
    assert (list(hosts), list(values), silent) == (["a", "c"], [10, 30], ("z",))
    # Carried to the next state while no host is added; recomputed when one is.
    moved = state.advance(["a"], [11], 1).progress
    assert moved.population(expected)[1].tolist() == [11, 30]
    grown = state.advance(["z"], [40], 1).progress
    assert grown.population(expected)[2] == ()
    # The status from the filtered population equals the one that filters by itself.
    one = evaluate_status(hosts, values, "0.5", 10, 0, 1, 5, 100, silent=silent)
    other = evaluate_status(state.hosts, state.progress_ms, "0.5", 10, 0, 1, 5, 100, expected=expected)
    assert one == other


def test_merge_progress_keeps_each_hosts_maximum():
    assert merge_progress({"a": 5, "b": 9}, {"a": 7, "b": 3, "c": 1}) == {"a": 7, "b": 9, "c": 1}


def test_a_state_from_a_mapping_is_the_state_before_the_first_batch():
    assert len(HostProgress.from_mapping({})) == 0 and HostProgress.from_mapping({}).max_ms() is None
    state = HostProgress.from_mapping({"a": 5, "b": 9})
    assert state.to_table().to_pylist() == [
        {"host": "a", "progress_ms": 5, "last_batch": 0},
        {"host": "b", "progress_ms": 9, "last_batch": 0},
    ]
    assert state.max_ms() == 9
    # batch 1 moves "a" only: its row alone is the change, stamped with batch 1
    assert state.advance(["a", "b"], [7, 3], 1).changed.to_pylist() == [
        {"host": "a", "progress_ms": 7, "last_batch": 1}
    ]
