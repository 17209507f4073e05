"""Dedup catalog cost as it fills: the exactly_once batch as the number of remembered event ids
grows.

    .venv/bin/python bench/dedup_catalog.py [--landing var/bench/throughput/landing]
        [--files-per-trigger 1] [--every 5]

Spark's ``dropDuplicatesWithinWatermark`` looks up each incoming key in the state store, and
after every batch it iterates over *every* key of the store to evict the expired ones
(``StreamingDeduplicateWithinWatermarkExec.evictDupInfoFromState``). With a long
``dedup_horizon`` nothing expires for a day, so the scan grows with the catalog. This script
streams the landing files ``bench/throughput.py`` leaves (5M events by its issue-scale command)
through a fresh exactly_once pipeline, ``--files-per-trigger`` one-minute files per batch, and
prints, per batch, the catalog size (the sum of the operator's new keys so far), Spark's
``allUpdatesTimeMs`` (lookups and inserts), ``allRemovalsTimeMs`` (the eviction scan) and
``commitTimeMs``, and the eviction scan's cost per million keys (a least-squares line through
the batches). Markdown; nothing is asserted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from benchlib import (
    DEFAULT_WORKDIR,
    json_progress,
    load_line,
    machine_line,
    md_table,
    pipeline_config,
    session,
)

from tidemark.stream import start_stream


def dedup_metrics(progress: list[dict]) -> list[dict]:
    """Per batch with input: the dedup operator's metrics (summed over its partitions)."""
    rows = []
    for p in progress:
        ops = [op for op in p.get("stateOperators", []) if op.get("operatorName", "").startswith("dedupe")]
        if not ops or not p.get("numInputRows"):
            continue
        op = ops[0]
        rows.append(
            {
                "batch": p["batchId"],
                "input": int(p["numInputRows"]),
                "new_keys": int(op.get("numRowsUpdated", 0)),
                "removed": int(op.get("numRowsRemoved", 0)),
                "updates_ms": int(op.get("allUpdatesTimeMs", 0)),
                "removals_ms": int(op.get("allRemovalsTimeMs", 0)),
                "commit_ms": int(op.get("commitTimeMs", 0)),
                "trigger_ms": int(p.get("durationMs", {}).get("triggerExecution", 0)),
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landing", type=Path, default=DEFAULT_WORKDIR / "throughput" / "landing")
    parser.add_argument("--files-per-trigger", type=int, default=1)
    parser.add_argument("--every", type=int, default=5, help="print every N-th batch (and the last)")
    args = parser.parse_args()
    if not (args.landing / "_scenario.json").is_file():
        print(f"--landing {args.landing}: no generated scenario there; run bench/throughput.py first")
        return 2
    root = DEFAULT_WORKDIR / "dedup-catalog"
    shutil.rmtree(root, ignore_errors=True)
    print(f"machine: {machine_line()}", flush=True)
    spark = session()
    # Spark keeps the last 100 progress updates by default; keep every batch's.
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    config = pipeline_config(root, "dedup-catalog", args.landing, args.files_per_trigger)
    started = time.monotonic()
    query, _processor = start_stream(spark, config, once=True, echo=lambda _m: None)
    query.awaitTermination()
    wall = time.monotonic() - started
    rows = dedup_metrics([json_progress(p) for p in query.recentProgress])
    spark.stop()
    print(f"streamed in {wall:.1f}s, {len(rows)} batches ({load_line()})", flush=True)

    keys = 0
    table, xs, ys = [], [], []
    for i, r in enumerate(rows):
        before = keys  # the eviction scan runs after the batch's inserts
        keys += r["new_keys"] - r["removed"]
        xs.append(keys / 1e6)
        ys.append(r["removals_ms"])
        if i % args.every == 0 or i == len(rows) - 1:
            table.append(
                [
                    f"{r['batch']}",
                    f"{r['input']:,}",
                    f"{before:,}",
                    f"{keys:,}",
                    f"{r['updates_ms']:,}",
                    f"{r['removals_ms']:,}",
                    f"{r['commit_ms']:,}",
                    f"{r['trigger_ms']:,}",
                ]
            )
    print()
    print(
        md_table(
            [
                "batch",
                "input rows",
                "catalog before",
                "catalog after",
                "lookups + inserts (ms)",
                "eviction scan (ms)",
                "state commit (ms)",
                "batch (ms)",
            ],
            table,
        )
    )
    if len(rows) > 2:
        print(
            f"\neviction scan: {np.polyfit(xs, ys, 1)[0]:,.0f} ms per million keys in the catalog "
            f"(least squares over {len(rows)} batches; summed over the operator's partitions)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
