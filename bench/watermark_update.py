"""Micro-benchmark: one watermark update (merge a batch's host maxima into the progress table,
compute the precise watermark, classify the status) for 1k-1M hosts.

    .venv/bin/python bench/watermark_update.py [--repeat 5]

Prints a markdown table of median milliseconds per step. A benchmark, not a test: figures are
read by people, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pandas as pd

from tidemark.watermark import evaluate_status, merge_progress, precise_watermark


def one_update(progress: pd.DataFrame, batch: pd.DataFrame, q: str) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    merged = merge_progress(progress, batch, 1)
    t1 = time.perf_counter()
    values = merged["progress_ms"].to_numpy(dtype=np.int64)
    wm = precise_watermark(values, q)
    t2 = time.perf_counter()
    evaluate_status(merged.index.to_numpy(), values, q, wm, 0, 1, 60_000, 120_000)
    t3 = time.perf_counter()
    return (t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per size; the median is reported")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    print("| hosts | merge batch (ms) | precise watermark (ms) | status + lagging list (ms) | total (ms) |")
    print("|---:|---:|---:|---:|---:|")
    for n in (1_000, 10_000, 100_000, 1_000_000):
        hosts = pd.Index([f"h{i:07d}" for i in range(n)], name="host")
        base = 1_763_805_600_000
        progress = pd.DataFrame(
            {"progress_ms": base + rng.integers(0, 60_000, n), "last_batch": np.zeros(n, dtype="int64")},
            index=hosts,
        )
        batch = pd.DataFrame({"progress_ms": base + 60_000 + rng.integers(0, 60_000, n)}, index=hosts)
        runs = [one_update(progress, batch, "0.999") for _ in range(args.repeat)]
        merge, wm, status = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"| {n:,} | {merge:.1f} | {wm:.2f} | {status:.1f} | {merge + wm + status:.1f} |")


if __name__ == "__main__":
    main()
