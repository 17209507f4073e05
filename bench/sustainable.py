"""Sustainable rate: batch time as the input rate doubles, until the job falls behind.

    .venv/bin/python bench/sustainable.py [--hosts 10000] [--rates 10,20,40,80,160,320,640]
        [--minutes 2] [--mode exactly_once]

For each rate (events per host per minute, doubling) a scenario of ``--minutes`` one-minute
files is generated (1% retries, 0.01% malformed lines, no lag) and a fresh Tidemark pipeline
reads it one file per micro-batch, so each batch holds one minute of input. A live job keeps up
while a minute of input takes less than a minute to process; the first rate whose batches take
longer is where it falls behind, and the sweep stops there. All in one Spark session (the first
rate also warms the JVM, so its first batch is shown but not used). Markdown; nothing is
asserted. Work directory: ``var/bench/sustainable``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import DEFAULT_WORKDIR, load_line, machine_line, md_table, median, pipeline_config, session

from tidemark.generator import Scenario, generate_files
from tidemark.stream import start_stream

MINUTE_S = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--rates", default="10,20,40,80,160,320,640", help="events per host per minute")
    parser.add_argument("--minutes", type=int, default=2, help="one-minute files (= batches) per rate")
    parser.add_argument("--mode", default="exactly_once", choices=("exactly_once", "at_least_once"))
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "sustainable")
    args = parser.parse_args()

    print(f"machine: {machine_line()}", flush=True)
    shutil.rmtree(args.workdir, ignore_errors=True)
    spark = session()
    rows = []
    sustainable = None
    for rate in (int(r) for r in args.rates.split(",")):
        root = args.workdir / f"rate-{rate}"
        landing = root / "landing"
        scenario = Scenario(
            hosts=args.hosts, minutes=args.minutes, events_per_host_per_minute=rate, lag_share=0
        )
        truth = generate_files(scenario, landing)
        config = pipeline_config(root, f"rate-{rate}", landing, 1, mode=args.mode)
        started = time.monotonic()
        query, processor = start_stream(spark, config, once=True, echo=lambda m: None)
        query.awaitTermination()
        wall = time.monotonic() - started
        batches = [b for b in processor.summaries if not b.skipped and b.events]
        per_minute = truth.lines / args.minutes
        seconds = [b.seconds for b in batches]
        # The full one-minute batches (the scenario ends with a small file of final heartbeats
        # and late stragglers); the sweep's very first batch also pays for a cold JVM.
        full = [b.seconds for b in batches if b.events + b.heartbeats + b.quarantined >= per_minute / 2]
        steady = median(full[1:] if len(full) > 1 and not rows else full)
        keeps_up = steady < MINUTE_S
        rows.append(
            [
                f"{rate}",
                f"{per_minute:,.0f}",
                f"{per_minute / MINUTE_S:,.0f}",
                ", ".join(f"{s:.1f}" for s in seconds),
                f"{steady:.1f}",
                f"{steady / MINUTE_S:.0%}",
                f"{per_minute / steady:,.0f}",
                "yes" if keeps_up else "**no: falls behind**",
            ]
        )
        print(
            f"  rate {rate}/host/min: {per_minute:,.0f} lines per minute, batches {seconds} "
            f"(wall {wall:.0f}s, {load_line()})",
            flush=True,
        )
        shutil.rmtree(landing, ignore_errors=True)  # the inputs grow with the rate; keep the disk
        if not keeps_up:
            break
        sustainable = per_minute / MINUTE_S
    spark.stop()
    print()
    print(
        md_table(
            [
                "events/host/min",
                "lines per minute of input",
                "input lines/s",
                "batch seconds (one minute each)",
                "steady batch (s)",
                "share of the minute",
                "lines/s processed",
                "keeps up",
            ],
            rows,
            "rrrlrrrl",
        )
    )
    if sustainable is not None:
        print(f"\nsustainable input rate ({args.mode}): at least {sustainable:,.0f} lines/s")
    print(f"\nfinished: {load_line()}")


if __name__ == "__main__":
    main()
