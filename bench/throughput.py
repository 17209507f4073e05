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
Every system runs ``--rounds`` times (default 5), the order rotated every round so that no
system always gets the coldest JVM; the medians are compared, with the spread (min-max) shown.
With ``--peer-sweep`` the baseline first runs once at each of its candidate settings (files per
trigger k, 2k, 5k; shuffle partitions 2 and 4; RocksDB and the HDFS-backed state store) and the
rounds use its fastest: the peer gets its own best settings, not Tidemark's.
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
    write_results,
)

from tidemark.generator import Scenario, generate_files
from tidemark.records import parse_records
from tidemark.sources import drop_blank_lines, read_landing_files
from tidemark.stream import start_stream

SYSTEMS = ("ceiling", "parse", "baseline", "exactly_once", "at_least_once")
STATE_STORES = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}


@dataclass(frozen=True)
class PeerSettings:
    """What the plain Spark job may tune for itself: its trigger size, its shuffle partitions and
    its state store."""

    files_per_trigger: int
    shuffle_partitions: int = 2
    state_store: str = "rocksdb"

    def label(self) -> str:
        return (
            f"{self.files_per_trigger} files a trigger, {self.shuffle_partitions} shuffle partitions, "
            f"{self.state_store} state store"
        )


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


GOALS = {"exactly_once": 1.0, "at_least_once": 1.15}  # issue 22: x the plain Spark job, medians
SPARK_PHASES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


def render(data: dict) -> str:
    """The tables of one results file (also what ``bench/report.py`` puts in the docs): the peer's
    sweep, the medians with their spread graded against the goals, and where each system's median
    round spent its time (Spark's ``durationMs`` summed over batches, Tidemark's own phases)."""
    lines = data["input"]["lines"]
    rounds = data["rounds"]
    order = [name for name in SYSTEMS if name in rounds]
    base = data["median_lines_per_s"].get("baseline")
    ceiling = data["median_lines_per_s"].get("ceiling")
    parts = [
        f"{lines:,} lines in {data['input']['files']} one-minute files; "
        f"{len(next(iter(rounds.values())))} rounds per system, order rotated every round; "
        + _tidemark_triggers(data)
    ]
    if data.get("tidemark_sweep"):
        rows = [
            [t["system"], t["files_per_trigger"], t["batches"], f"{t['wall_s']:.1f}", f"{t['lines_per_s']:,}"]
            for t in data["tidemark_sweep"]
        ]
        parts.append(
            "Tidemark's own trigger size, one run each (each mode then runs at its fastest):\n\n"
            + md_table(["system", "files per trigger", "batches", "wall (s)", "lines/s"], rows)
        )
    if data.get("peer_sweep"):
        rows = [
            [t["files_per_trigger"], t["shuffle_partitions"], t["state_store"], f"{t['wall_s']:.1f}",
             f"{t['lines_per_s']:,}"]
            for t in data["peer_sweep"]
        ]  # fmt: skip
        peer = data["peer_settings"]
        parts.append(
            "The plain Spark job's own settings, one run each (it then runs at the fastest: "
            f"{peer['files_per_trigger']} files per trigger, {peer['shuffle_partitions']} shuffle "
            f"partitions, {peer['state_store']} state store):\n\n"
            + md_table(
                ["files per trigger", "shuffle partitions", "state store", "wall (s)", "lines/s"], rows
            )
        )
    rows = []
    for name in order:
        rates = [lines / r["wall_s"] for r in rounds[name]]
        rate = data["median_lines_per_s"][name]
        goal = GOALS.get(name)
        ratio = rate / base if base else None
        rows.append(
            [
                LABELS[name],
                f"{rate:,}",
                f"{min(rates):,.0f}-{max(rates):,.0f}",
                f"{ratio:.2f}x" if ratio else "-",
                f"{rate / ceiling:.2f}x" if ceiling else "-",
                (f">= {goal:.2f}x: {'met' if ratio >= goal else 'NOT met'}" if goal and ratio else "-"),
            ]
        )
    parts.append(
        md_table(
            ["system", "median lines/s", "spread (min-max)", "x plain Spark", "x ceiling", "goal (issue 22)"],
            rows,
        )
    )
    rows = []
    for name in order:
        median_round = sorted(rounds[name], key=lambda r: r["wall_s"])[len(rounds[name]) // 2]
        spark_ms = median_round["spark_ms"]
        phases = median_round.get("phases_s") or {}
        rows.append(
            [
                name,
                f"{median_round['wall_s']:.1f}",
                median_round["batches"],
                *(f"{spark_ms.get(k, 0) / 1000:.1f}" for k in SPARK_PHASES),
                ", ".join(f"{k} {v:.1f}" for k, v in phases.items()) or "-",
            ]
        )
    parts.append(
        "Where the median round's time went (seconds summed over its batches; `addBatch` holds the "
        "sink's work, for Tidemark the whole `foreachBatch`, split by its own phase timer):\n\n"
        + md_table(["system", "wall (s)", "batches", *SPARK_PHASES, "Tidemark phases (s)"], rows)
    )
    return "\n\n".join(parts) + "\n"


def _tidemark_triggers(data: dict) -> str:
    chosen = data.get("tidemark_files_per_trigger")
    if not chosen:
        return f"Tidemark reads {data['args']['files_per_trigger']} files per trigger."
    return "Tidemark reads " + ", ".join(f"{n}: {k} files per trigger" for n, k in chosen.items()) + "."


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


def run_peer(spark, root: Path, landing: Path, settings: PeerSettings) -> Run:
    """The baseline with ``settings`` (session settings restored afterwards)."""
    keys = {
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.streaming.stateStore.providerClass": STATE_STORES[settings.state_store],
    }
    before = {key: spark.conf.get(key) for key in keys}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        wall, progress = run_baseline(spark, landing, root / "baseline", settings.files_per_trigger)
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)
    batches, durations = spark_durations(progress)
    return Run("baseline", wall, batches, durations)


def sweep_sizes(k: int) -> list[int]:
    """The trigger sizes every sweep tries: ``k``, ``2k`` and ``5k`` files a trigger."""
    return sorted({k, 2 * k, 5 * k})


def timing(run: Run, lines: int) -> dict:
    """A sweep entry's figures: wall seconds and lines a second."""
    return {"wall_s": round(run.wall_s, 2), "lines_per_s": round(lines / run.wall_s)}


def sweep_peer(spark, root: Path, landing: Path, k: int, lines: int) -> tuple[PeerSettings, list[dict]]:
    """One run of the baseline at each candidate setting; the fastest and every figure."""
    tried = []
    for files in sweep_sizes(k):
        for partitions in (2, 4):
            for store in STATE_STORES:
                settings = PeerSettings(files, partitions, store)
                run = run_peer(spark, root / f"sweep-{files}-{partitions}-{store}", landing, settings)
                tried.append({**vars(settings), **timing(run, lines)})
                print(f"  peer sweep: {settings.label()}: {run.wall_s:.1f}s ({load_line()})", flush=True)
    best = min(tried, key=lambda t: t["wall_s"])
    return PeerSettings(best["files_per_trigger"], best["shuffle_partitions"], best["state_store"]), tried


TIDEMARK_SYSTEMS = ("exactly_once", "at_least_once")


def sweep_tidemark(
    spark, root: Path, landing: Path, k: int, lines: int, systems: list[str]
) -> tuple[dict[str, int], list[dict]]:
    """Tidemark's own trigger size, as the peer gets its own: one run of each mode at ``k``,
    ``2k`` and ``5k`` files a trigger; per mode the fastest, and every figure."""
    tried = []
    for system in systems:
        for files in sweep_sizes(k):
            run = run_system(spark, system, root / f"sweep-{system}-{files}", landing, files)
            tried.append(
                {"system": system, "files_per_trigger": files, "batches": run.batches, **timing(run, lines)}
            )
            print(
                f"  tidemark sweep: {system}, {files} files a trigger: {run.wall_s:.1f}s ({load_line()})",
                flush=True,
            )
    best = {
        system: min((t for t in tried if t["system"] == system), key=lambda t: t["wall_s"])[
            "files_per_trigger"
        ]
        for system in systems
    }
    return best, tried


def run_system(
    spark, system: str, root: Path, landing: Path, k: int, peer: PeerSettings | None = None
) -> Run:
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
        return run_peer(spark, root, landing, peer or PeerSettings(k))

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


def median_rate(rounds: list[Run], lines: int) -> float:
    return median([lines / r.wall_s for r in rounds])


def throughput_table(rounds: dict[str, list[Run]], lines: int) -> str:
    """Median rate of each system's rounds, their spread, and the ratios of the medians."""
    base = median_rate(rounds["baseline"], lines) if rounds.get("baseline") else None
    ceiling = median_rate(rounds["ceiling"], lines) if rounds.get("ceiling") else None
    rows = []
    for name in SYSTEMS:
        runs = rounds.get(name)
        if not runs:
            continue
        rates = [lines / r.wall_s for r in runs]
        rate = median(rates)
        stored = runs[-1].events_stored
        rows.append(
            [
                LABELS[name],
                f"{runs[-1].batches}",
                f"{median([r.wall_s for r in runs]):.1f}",
                f"{rate:,.0f}",
                f"{min(rates):,.0f}-{max(rates):,.0f}",
                f"{rate / base:.2f}" if base else "-",
                f"{rate / ceiling:.2f}" if ceiling else "-",
                f"{stored:,}" if stored is not None else "-",
            ]
        )
    headers = [
        "system",
        "batches",
        "median wall (s)",
        "median lines/s",
        "spread (lines/s)",
        "× baseline",
        "× ceiling",
        "events stored",
    ]
    return md_table(headers, rows)


def rounds_table(rounds: dict[str, list[Run]], order: list[str], lines: int) -> str:
    """Every round's wall time, to show how much the machine moved under the figures."""
    n = max(len(v) for v in rounds.values())
    rows = [
        [
            LABELS[name],
            *(f"{run.wall_s:.1f}" for run in rounds[name]),
            f"{median_rate(rounds[name], lines):,.0f}",
        ]
        for name in order
    ]
    headers = ["system", *(f"round {i + 1} wall (s)" for i in range(n)), "lines/s (median)"]
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
        default=5,
        help="runs of every system, order rotated every round; the medians count",
    )
    parser.add_argument(
        "--no-results", action="store_true", help="write no results file (a caller keeps its own)"
    )
    parser.add_argument(
        "--tidemark-sweep",
        action="store_true",
        help="first find each Tidemark mode's fastest trigger size (files per trigger x1, x2, x5)",
    )
    parser.add_argument(
        "--peer-sweep",
        action="store_true",
        help="first find the baseline's fastest settings (trigger size, partitions, state store)",
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
    peer, sweep = PeerSettings(args.files_per_trigger), []
    if args.peer_sweep and "baseline" in order:
        peer, sweep = sweep_peer(spark, args.workdir / "sweep", landing, args.files_per_trigger, truth.lines)
        print(f"peer settings: {peer.label()} (the fastest of {len(sweep)})", flush=True)
    triggers = {name: args.files_per_trigger for name in order}
    tidemark_sweep: list[dict] = []
    swept = [name for name in TIDEMARK_SYSTEMS if name in order]
    if args.tidemark_sweep and swept:
        best, tidemark_sweep = sweep_tidemark(
            spark, args.workdir / "sweep", landing, args.files_per_trigger, truth.lines, swept
        )
        triggers.update(best)
        print(f"tidemark settings: {', '.join(f'{n} {best[n]} files a trigger' for n in swept)}", flush=True)
    rounds: dict[str, list[Run]] = defaultdict(list)
    for r in range(args.rounds):
        # The order rotates every round, so no system always gets the coldest JVM or the warmest
        # page cache.
        names = order[r % len(order) :] + order[: r % len(order)]
        print(f"round {r + 1}: {', '.join(names)}", flush=True)
        for name in names:
            run = run_system(spark, name, args.workdir / f"round{r + 1}", landing, triggers[name], peer)
            rounds[name].append(run)
            print(f"  {name}: {run.wall_s:.1f}s, {run.batches} batches ({load_line()})", flush=True)
    # Each system's median round (the phase and memory tables show that run).
    runs = {name: sorted(rounds[name], key=lambda run: run.wall_s)[len(rounds[name]) // 2] for name in order}
    print()
    if args.rounds > 1:
        print(rounds_table(rounds, order, truth.lines))
        print()
    print(f"baseline settings: {peer.label()}\n")
    print(throughput_table(rounds, truth.lines))
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
    if args.no_results:
        return
    base = median_rate(rounds["baseline"], truth.lines) if rounds.get("baseline") else None
    write_results(
        "throughput",
        args,
        input={"lines": truth.lines, "files": truth.files, "unique_events": truth.unique_events},
        peer_settings=vars(peer),
        peer_sweep=sweep,
        tidemark_files_per_trigger={n: triggers[n] for n in swept},
        tidemark_sweep=tidemark_sweep,
        rounds={
            name: [
                {
                    "wall_s": round(r.wall_s, 2),
                    "batches": r.batches,
                    "events_stored": r.events_stored,
                    "spark_ms": {k: sum(v) for k, v in r.spark_ms.items()},
                    "phases_s": {k: round(v, 2) for k, v in r.phases.items()},
                }
                for r in rounds[name]
            ]
            for name in order
        },
        median_lines_per_s={name: round(median_rate(rounds[name], truth.lines)) for name in order},
        ratio_to_baseline=(
            {name: round(median_rate(rounds[name], truth.lines) / base, 3) for name in order}
            if base
            else None
        ),
    )


if __name__ == "__main__":
    main()
