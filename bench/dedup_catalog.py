"""Dedup catalog cost as it fills: the exactly_once batch as the events table (the catalog of
seen ids) grows.

    .venv/bin/python bench/dedup_catalog.py [--landing var/bench/throughput/landing]
        [--files-per-trigger 1] [--every 5]

exactly_once looks a batch's candidates (records at or below their host's progress: retries,
ties, out-of-order records) up in the events earlier batches stored (:mod:`tidemark.dedup`),
pruning the table's files by their event-time statistics. This script streams the landing files
``bench/throughput.py`` leaves (5M events by its issue-scale command) through a fresh
exactly_once pipeline, ``--files-per-trigger`` one-minute files per batch, and prints, per
batch, the events stored before it (the catalog), the suspects, the ids looked up, the retries
dropped, the seconds of each deduplication step (Tidemark's phase timer) and of the batch, and
the lookup's cost per million stored events (a least-squares line through the batches: flat
means the lookup does not grow with the catalog). Markdown; nothing is asserted.
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
    load_line,
    machine_line,
    md_table,
    pipeline_config,
    session,
)

from tidemark.stream import start_stream


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
    config = pipeline_config(root, "dedup-catalog", args.landing, args.files_per_trigger)
    started = time.monotonic()
    query, processor = start_stream(spark, config, once=True, echo=lambda _m: None)
    query.awaitTermination()
    wall = time.monotonic() - started
    summaries = [s for s in processor.summaries if not s.skipped and s.events]
    spark.stop()
    print(f"streamed in {wall:.1f}s, {len(summaries)} batches ({load_line()})", flush=True)

    stored = 0
    table, xs, ys = [], [], []
    for i, s in enumerate(summaries):
        phase = {name: s.phases.get(f"dedup_{name}", 0.0) for name in ("hashes", "suspects", "lookup")}
        xs.append(stored / 1e6)
        ys.append(phase["lookup"] * 1000)
        if i % args.every == 0 or i == len(summaries) - 1:
            table.append(
                [
                    f"{s.batch_id}",
                    f"{stored:,}",
                    f"{s.retries_looked_up:,}",
                    f"{s.retries_dropped:,}",
                    *(f"{phase[name]:.2f}" for name in ("hashes", "suspects", "lookup")),
                    f"{s.seconds:.2f}",
                ]
            )
        stored += s.events
    print()
    print(
        md_table(
            [
                "batch",
                "events stored before (catalog)",
                "ids looked up",
                "retries dropped",
                "hash pass (s, with the batch's parse and cache)",
                "suspects collected (s)",
                "catalog lookup (s)",
                "batch (s)",
            ],
            table,
        )
    )
    if len(summaries) > 2:
        print(
            f"\ncatalog lookup: {np.polyfit(xs, ys, 1)[0]:,.1f} ms more per million stored events "
            f"(least squares over {len(summaries)} batches)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
