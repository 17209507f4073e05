"""The count step's per-host grouping on the driver (tidemark.batch_steps.per_host): the same counts
and progress a plain loop over the batch's rows gives, the removed retry copies taken off."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd
import pyarrow as pa

from tidemark.batch_steps import per_host


def rows_of(records: list[dict]) -> pa.Table:
    """The count columns as Spark's ``toArrow`` hands them (flags boolean, names large_string
    when Spark sends them so)."""
    return pa.table(
        {
            "host": pa.array([r["host"] for r in records], pa.large_string()),
            "progress_ms": pa.array([r["t"] for r in records], pa.int64()),
            "events": pa.array([r["kind"] == "event" for r in records]),
            "heartbeats": pa.array([r["kind"] == "heartbeat" for r in records]),
            "quarantined": pa.array([r["kind"] == "bad" for r in records]),
            "upstream_lw": pa.array([r.get("lw") for r in records], pa.int64()),
        }
    )


def expected(records: list[dict], removed: list[str]) -> dict:
    out: dict = defaultdict(lambda: {"progress_ms": None, "events": 0, "heartbeats": 0, "quarantined": 0})
    for r in records:
        row = out[r["host"]]
        if r["t"] is not None:
            row["progress_ms"] = r["t"] if row["progress_ms"] is None else max(row["progress_ms"], r["t"])
        row["events"] += r["kind"] == "event"
        row["heartbeats"] += r["kind"] == "heartbeat"
        row["quarantined"] += r["kind"] == "bad"
    for host in removed:
        out[host]["events"] -= 1
    return dict(out)


def test_per_host_counts_equal_a_loop_over_the_rows():
    rng = np.random.default_rng(3)
    records = []
    for _ in range(5_000):
        kind = rng.choice(["event", "event", "event", "heartbeat", "bad"])
        host = None if kind == "bad" else f"h{int(rng.integers(0, 300)):03d}"
        records.append(
            {"host": host, "t": None if kind == "bad" else int(rng.integers(0, 10**6)), "kind": kind}
        )
    records.append({"host": "h001", "t": 5, "kind": "event", "lw": 77})
    # Removed retry copies: their rows are in the batch (they were counted), one event off each.
    events = [r for r in records if r["kind"] == "event"]
    removed_hosts = [events[i]["host"] for i in rng.choice(len(events), 40, replace=False)]
    removed = pd.DataFrame({"host": removed_hosts, "event_time": np.zeros(40, np.int64)})

    got = per_host(rows_of(records), removed)

    assert got.column_names == ["host", "progress_ms", "events", "heartbeats", "quarantined", "upstream_lw"]
    as_dict = {
        r["host"]: {k: r[k] for k in ("progress_ms", "events", "heartbeats", "quarantined")}
        for r in got.to_pylist()
    }
    assert as_dict == expected(records, removed_hosts)
    assert got.num_rows == len(as_dict)  # one row per host, the quarantined lines under NULL
    assert as_dict[None]["progress_ms"] is None  # a quarantined line never moves a host
    assert [r["upstream_lw"] for r in got.to_pylist() if r["host"] == "h001"] == [77]


def test_an_empty_batch_has_no_host():
    got = per_host(rows_of([]), pd.DataFrame({"host": [], "event_time": []}))
    assert got.num_rows == 0
