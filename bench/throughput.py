"""Throughput and cost: Tidemark (exactly_once, at_least_once) against the plain Spark baseline
and the read-and-parse ceiling, on the same landing files, in one run.

    .venv/bin/python bench/throughput.py [--hosts 10000] [--minutes 10] [--rate 10]
        [--files-per-trigger 2] [--order ceiling,parse,baseline,exactly_once,at_least_once]

One scenario (1% publisher retries, 0.01% malformed lines, 0.05% of hosts in a 5-minute
outage) is generated into ``var/bench/throughput/landing``; every system then reads all of it,
``--files-per-trigger`` one-minute files per micro-batch (availableNow), in one Spark session,
one after the other:

* ``ceiling``: text read + ``from_json`` into a no-op sink (Spark reading and parsing, nothing
  else);
* ``parse``: text read + Tidemark's validating parser (``tidemark.records``) into a no-op sink;
* ``baseline``: the plain Spark job of :mod:`benchlib` (``withWatermark`` 2 minutes, windowed
  count, Delta sink);
* ``exactly_once`` / ``at_least_once``: ``tidemark.stream`` with that mode.

Rates are input lines / wall time (query start to end), the same numerator for every system.
Every system runs ``--rounds`` times (default 2), the order reversed in every other round so
that no system always gets the coldest JVM; each system's fastest round is the one compared.
Then: the per-batch fixed overhead (a tiny input, one small file per batch),
where a Tidemark batch's time goes (its own phase timer, ``BatchSummary.phases``, and Spark's
``durationMs``), and the RSS of the driver JVM (local mode: driver and executors are one JVM)
and the Python driver after N and 2N input events of the exactly_once run. Markdown; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    DEFAULT_WORKDIR,
    json_progress,
    jvm_pid,
    load_line,
    machine_line,
    md_table,
    median,
    pipeline_config,
    rss_kb,
    run_baseline,
    session,
)

from tidemark.generator import Scenario, generate_files
from tidemark.records import parse_records
from tidemark.sources import drop_blank_lines, read_landing_files
from tidemark.stream import start_stream

SYSTEMS = ("ceiling", "parse", "baseline", "exactly_once", "at_least_once")
LABELS = {
    "ceiling": "ceiling: read + from_json, no-op sink",
    "parse": "read + Tidemark validating parse, no-op sink",
    "baseline": 'plain Spark: withWatermark("2 minutes") + window count + Delta',
    "exactly_once": "Tidemark exactly_once",
    "at_least_once": "Tidemark at_least_once",
}


@dataclass
class Run:
    system: str
    wall_s: float
    batches: int
    spark_ms: dict[str, list[int]] = field(default_factory=dict)  # durationMs per batch
    phases: dict[str, float] = field(default_factory=dict)  # Tidemark phase totals (s)
    phase_lists: dict[str, list[float]] = field(default_factory=dict)  # per batch (s)
    batch_s: list[float] = field(default_factory=list)  # Tidemark batch seconds
    events_stored: int | None = None
    rss: list[tuple[int, int, int]] = field(default_factory=list)  # (input events, jvm kB, py kB)


def spark_durations(progress: list[dict]) -> tuple[int, dict[str, list[int]]]:
    per: dict[str, list[int]] = defaultdict(list)
    batches = 0
    for p in progress:
        if not p.get("numInputRows"):
            continue
        batches += 1
        for k, v in p.get("durationMs", {}).items():
            per[k].append(int(v))
    return batches, dict(per)


def noop_query(spark, frame, root: Path, name: str) -> tuple[float, list[dict]]:
    started = time.monotonic()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(root / "checkpoints" / name))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.monotonic() - started, [json_progress(p) for p in query.recentProgress]


def run_system(spark, system: str, root: Path, landing: Path, k: int, sample_every: int = 0) -> Run:
    from pyspark.sql import functions as F

    if system in ("ceiling", "parse"):
        lines = spark.readStream.format("text").option("maxFilesPerTrigger", k).load(str(landing))
        if system == "ceiling":
            frame = lines.select(
                F.from_json("value", "event_id string, host string, event_time long").alias("r")
            )
        else:
            frame = parse_records(
                drop_blank_lines(read_landing_files(spark, str(landing), True, k)), _rules()
            )
        wall, progress = noop_query(spark, frame, root, system)
        batches, durations = spark_durations(progress)
        return Run(system, wall, batches, durations)
    if system == "baseline":
        wall, progress = run_baseline(spark, landing, root / "baseline", k)
        batches, durations = spark_durations(progress)
        return Run(system, wall, batches, durations)

    config = pipeline_config(root, system.replace("_", "-"), landing, k, mode=system)
    pid = jvm_pid(spark)
    run = Run(system, 0.0, 0)
    holder: dict = {}

    def on_batch(_line: str) -> None:  # the stream's echo, called after each batch
        processor = holder.get("processor")
        if processor is None or not processor.summaries:
            return
        seen = sum(b.events + b.heartbeats + b.quarantined for b in processor.summaries)
        run.rss.append((seen, rss_kb(pid)[0], rss_kb()[0]))

    started = time.monotonic()
    query, processor = start_stream(spark, config, once=True, echo=on_batch)
    holder["processor"] = processor
    query.awaitTermination()
    run.wall_s = time.monotonic() - started
    run.batches, run.spark_ms = spark_durations([json_progress(p) for p in query.recentProgress])
    done = [s for s in processor.summaries if not s.skipped]
    for s in done:
        for name, secs in s.phases.items():
            run.phases[name] = run.phases.get(name, 0.0) + secs
            run.phase_lists.setdefault(name, []).append(secs)
    run.batch_s = [s.seconds for s in done]
    run.events_stored = sum(s.events for s in done)
    return run


def _rules():
    from tidemark.config import ValidationConfig

    return ValidationConfig()


def throughput_table(runs: dict[str, Run], lines: int) -> str:
    base = runs.get("baseline")
    ceiling = runs.get("ceiling")
    rows = []
    for name in SYSTEMS:
        r = runs.get(name)
        if r is None:
            continue
        rate = lines / r.wall_s
        rows.append(
            [
                LABELS[name],
                f"{r.batches}",
                f"{r.wall_s:.1f}",
                f"{rate:,.0f}",
                f"{rate / (lines / base.wall_s):.2f}" if base else "-",
                f"{rate / (lines / ceiling.wall_s):.2f}" if ceiling else "-",
                f"{r.events_stored:,}" if r.events_stored is not None else "-",
            ]
        )
    headers = ["system", "batches", "wall (s)", "lines/s", "× baseline", "× ceiling", "events stored"]
    return md_table(headers, rows)


def rounds_table(rounds: dict[str, list[Run]], order: list[str], lines: int) -> str:
    """Every round's wall time, to show how much the machine moved under the figures."""
    n = max(len(v) for v in rounds.values())
    rows = [
        [
            LABELS[name],
            *(f"{run.wall_s:.1f}" for run in rounds[name]),
            f"{lines / min(r.wall_s for r in rounds[name]):,.0f}",
        ]
        for name in order
    ]
    headers = ["system", *(f"round {i + 1} wall (s)" for i in range(n)), "lines/s (fastest)"]
    return md_table(headers, rows)


def phase_table(runs: dict[str, Run]) -> str:
    rows = []
    for name in ("exactly_once", "at_least_once"):
        r = runs.get(name)
        if r is None or not r.batch_s:
            continue
        total = sum(r.batch_s)
        for phase, secs in r.phases.items():
            rows.append([name, phase, f"{secs:.1f}", f"{secs / total:.0%}"])
        spark_total = sum(r.spark_ms.get("triggerExecution", [])) / 1000
        rows.append([name, "all of foreachBatch (sum of batch seconds)", f"{total:.1f}", "100%"])
        rows.append(
            [name, "Spark triggerExecution (incl. source listing, offsets, commit)", f"{spark_total:.1f}", ""]
        )
    return md_table(["mode", "phase", "seconds (all batches)", "share of foreachBatch"], rows, "llrr")


def rss_table(run: Run) -> str:
    """RSS after every batch: bounded memory shows as a flat column from N to 2N lines (with
    enough batches; use more files or fewer --files-per-trigger to get them)."""
    if not run.rss:
        return "(no samples)"
    rows = [
        [f"{i + 1}", f"{lines:,}", f"{jvm / 1024:.0f}", f"{py / 1024:.0f}"]
        for i, (lines, jvm, py) in enumerate(run.rss)
    ]
    return md_table(
        [
            "exactly_once batch",
            "records so far (after dedup)",
            "driver JVM RSS (MiB)",
            "Python driver RSS (MiB)",
        ],
        rows,
    )


def overhead(spark, root: Path) -> str:
    """Per-batch fixed cost: a tiny input (20 hosts, 1 event/min), one file per micro-batch."""
    landing = root / "tiny" / "landing"
    generate_files(
        Scenario(
            hosts=20, minutes=6, events_per_host_per_minute=1, lag_share=0, duplicate_rate=0, malformed_rate=0
        ),
        landing,
    )
    rows = []
    phases: dict[str, list[float]] = defaultdict(list)
    for name in ("baseline", "exactly_once", "at_least_once"):
        r = run_system(spark, name, root / "tiny", landing, 1)
        trig = r.spark_ms.get("triggerExecution", [])
        add = r.spark_ms.get("addBatch", [])
        rows.append(
            [
                LABELS[name],
                f"{r.batches}",
                f"{median(trig) / 1000:.2f}",
                f"{median(add) / 1000:.2f}",
                f"{r.wall_s:.1f}",
            ]
        )
        if name == "exactly_once":
            phases = r.phase_lists
    headers = ["system (tiny batches)", "batches", "median trigger (s)", "median addBatch (s)", "wall (s)"]
    phase_rows = [[name, f"{median(values):.2f}"] for name, values in phases.items()]
    return (
        md_table(headers, rows)
        + "\n\n"
        + md_table(["exactly_once tiny batch: phase", "median seconds"], phase_rows)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--rate", type=int, default=10, help="events per host per minute")
    parser.add_argument("--files-per-trigger", type=int, default=2, help="1-minute files per micro-batch")
    parser.add_argument(
        "--order", default=",".join(SYSTEMS), help=f"systems to run, in order ({','.join(SYSTEMS)})"
    )
    parser.add_argument("--skip-overhead", action="store_true", help="skip the tiny-batch overhead runs")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "throughput")
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="runs of every system, order alternating; the fastest counts",
    )
    args = parser.parse_args()

    print(f"machine: {machine_line()}", flush=True)
    shutil.rmtree(args.workdir, ignore_errors=True)
    landing = args.workdir / "landing"
    s = Scenario(hosts=args.hosts, minutes=args.minutes, events_per_host_per_minute=args.rate)
    t0 = time.monotonic()
    truth = generate_files(s, landing)
    print(
        f"input: {truth.lines:,} lines in {truth.files} files ({truth.unique_events:,} unique events, "
        f"{truth.duplicate_copies:,} retry copies, {truth.malformed_lines:,} malformed, "
        f"{truth.heartbeats:,} heartbeats); {s.hosts:,} hosts x {s.minutes} min x {args.rate}/min; "
        f"generated in {time.monotonic() - t0:.0f}s",
        flush=True,
    )
    spark = session()
    order = args.order.split(",")
    rounds: dict[str, list[Run]] = defaultdict(list)
    for r in range(args.rounds):
        # Every other round runs the systems in reverse order, so none of them always gets the
        # coldest JVM or the warmest page cache.
        names = order if r % 2 == 0 else order[::-1]
        print(f"round {r + 1}: {', '.join(names)}", flush=True)
        for name in names:
            run = run_system(spark, name, args.workdir / f"round{r + 1}", landing, args.files_per_trigger)
            rounds[name].append(run)
            print(f"  {name}: {run.wall_s:.1f}s, {run.batches} batches ({load_line()})", flush=True)
    # Each system's fastest round: the one least disturbed by whatever else ran on the machine.
    runs = {name: min(rounds[name], key=lambda run: run.wall_s) for name in order}
    print()
    if args.rounds > 1:
        print(rounds_table(rounds, order, truth.lines))
        print()
    print(throughput_table(runs, truth.lines))
    if "exactly_once" in runs or "at_least_once" in runs:
        print()
        print(phase_table(runs))
    if "exactly_once" in runs:
        print()
        print(rss_table(runs["exactly_once"]))
    if not args.skip_overhead:
        print()
        print(overhead(spark, args.workdir))
    spark.stop()
    print(f"\nfinished: {load_line()}")


if __name__ == "__main__":
    main()
