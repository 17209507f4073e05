"""tidemark.retries.kept_mask, the driver's form of the retry rule, against a plain reference: per
(host, event_id, event_time), copies in read order, each kept when first or when it arrives more
than the horizon after the last kept copy (stored copies of earlier batches come first)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.retries import ORDER, RETRY_KEY, kept_mask


def reference(rows: list[dict], horizon: int, stored: dict[tuple, int]) -> set[int]:
    order = sorted(
        range(len(rows)),
        key=lambda i: (
            *(rows[i][k] for k in RETRY_KEY),
            rows[i]["arrival_ms"],
            rows[i]["_src"],
            -1 if rows[i]["_offset"] is None else rows[i]["_offset"],
            rows[i]["key"],
            rows[i]["value"],
        ),
    )
    kept, last = set(), dict(stored)
    for i in order:
        key = tuple(rows[i][k] for k in RETRY_KEY)
        if key not in last or rows[i]["arrival_ms"] - last[key] > horizon:
            kept.add(i)
            last[key] = rows[i]["arrival_ms"]
    return kept


row = st.fixed_dictionaries(
    {
        "host": st.sampled_from(["a", "b"]),
        "event_id": st.sampled_from(["x", "y", "z"]),
        "event_time": st.sampled_from([1_000, 2_000]),
        "arrival_ms": st.integers(0, 400),
        "_src": st.sampled_from(["f1", "f2"]),
        "_offset": st.none() | st.integers(0, 5),
        "key": st.sampled_from(["k", "q"]),
        "value": st.sampled_from([1.0, 2.0]),
    }
)


def frame(rows: list[dict]) -> pd.DataFrame:
    out = pd.DataFrame(rows, columns=[*RETRY_KEY, *ORDER])
    out["_offset"] = out["_offset"].astype("float64")
    return out


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(row, max_size=25),
    horizon=st.sampled_from([0, 50, 150, 10_000]),
    stored=st.dictionaries(
        st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"]), st.sampled_from([1_000, 2_000])),
        st.integers(-200, 100),
        max_size=3,
    ),
)
def test_kept_mask_is_the_reference_rule(rows, horizon, stored):
    stored_frame = pd.DataFrame([(*k, v) for k, v in stored.items()], columns=[*RETRY_KEY, "last_ms"]).astype(
        {"event_time": "int64", "last_ms": "int64"}
    )
    mask = kept_mask(frame(rows), horizon, stored_frame)
    assert set(np.flatnonzero(mask)) == reference(rows, horizon, stored)


def test_copies_of_one_record_and_ids_reused_at_another_time():
    def copy(host="h", event_time=10, arrival_ms=100):
        return {"host": host, "event_id": "r", "event_time": event_time, "arrival_ms": arrival_ms,
                "_src": "f", "_offset": None, "key": "k", "value": 1.0}  # fmt: skip

    rows = [copy(), copy(), copy(event_time=20), copy(host="g"), copy(arrival_ms=400)]
    # the copy, dropped; another time and another host: records; 300 ms later than the first
    # copy, beyond a 200 ms horizon: counted again
    assert kept_mask(frame(rows), 200).tolist() == [True, False, True, True, True]
    assert kept_mask(frame(rows), 500).tolist() == [True, False, True, True, False]
    stored = pd.DataFrame([("h", "r", 10, 350)], columns=[*RETRY_KEY, "last_ms"])
    assert kept_mask(frame(rows), 200, stored).tolist() == [False, False, True, True, False]
