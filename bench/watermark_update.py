"""Micro-benchmark: one watermark update (merge a batch's host maxima into the host progress,
compute the precise watermark, classify the status) for 1k-1M hosts, every host in the batch
and 10% of them.

    .venv/bin/python bench/watermark_update.py [--repeat 5]

Prints a markdown table of median milliseconds per step. A benchmark, not a test: figures are
read by people, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tidemark.progress import HostProgress
from tidemark.watermark import precise_watermark
from tidemark.watermark_status import evaluate_status


def one_update(
    progress: HostProgress, hosts: np.ndarray, times: np.ndarray, q: str
) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    merged = progress.advance(hosts, times, 1).progress
    t1 = time.perf_counter()
    wm = precise_watermark(merged.progress_ms, q)
    t2 = time.perf_counter()
    evaluate_status(merged.hosts, merged.progress_ms, q, wm, 0, 1, 60_000, 120_000)
    t3 = time.perf_counter()
    return (t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per size; the median is reported")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    print(
        "| hosts | hosts in the batch | merge batch (ms) | precise watermark (ms) "
        "| status + lagging list (ms) | total (ms) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    base = 1_763_805_600_000
    for n in (1_000, 10_000, 100_000, 1_000_000):
        hosts = np.array([f"h{i:07d}" for i in range(n)], dtype=object)
        progress = HostProgress.empty().advance(hosts, base + rng.integers(0, 60_000, n), 0).progress
        for share in (1.0, 0.1):
            batch = rng.choice(n, size=int(n * share), replace=False)
            times = base + 60_000 + rng.integers(0, 60_000, len(batch))
            runs = [one_update(progress, hosts[batch], times, "0.999") for _ in range(args.repeat)]
            merge, wm, status = (statistics.median(r[i] for r in runs) for i in range(3))
            total = merge + wm + status
            print(f"| {n:,} | {len(batch):,} | {merge:.1f} | {wm:.2f} | {status:.1f} | {total:.1f} |")


if __name__ == "__main__":
    main()
