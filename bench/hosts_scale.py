"""Batch time against the number of hosts: the same events per batch from 10k, 100k and 1M hosts.

    .venv/bin/python bench/hosts_scale.py [--hosts 10000,100000,1000000] [--lines-per-batch 500000]
        [--batches 10] [--rounds 2] [--mode exactly_once] [--per-row-work driver,executors]
        [--files-per-trigger 1] [--tag TAG]

For every host count, one scenario is generated whose 30-second files hold ``--lines-per-batch``
lines (10k hosts x 100 events a minute, 100k x 10, 1M x 1; 1% publisher retries, no lagging
host), and Tidemark reads one file per micro-batch (availableNow) in one Spark session, the
host counts in alternating order each round. Per run, over the full batches (the retries'
delays leave a tail of small files, not counted): the median and the worst batch time of the
steady ones (the first adds the hosts and is reported apart), every phase's median, the rows the
host-progress log held at the end, and the RSS of the driver JVM and of the Python driver after
the run. The goal (issue 21): the batch
time at 1M hosts at most 1.5x the batch time at 10k. Markdown out, raw figures to
``bench/results/hosts_scale-<UTC date>.json``; nothing is asserted.

``--per-row-work driver,executors`` runs each host count both ways (``spark.per_row_work``) in
the same rounds, in alternating order: the Python driver's CPU per million lines of each (and per
batch phase: the CPU of the Python process, all its threads, between the phase's laps), and the
paired ratio of their steady batch medians. The host-count goal is graded on the ``driver`` runs
(the default). ``--files-per-trigger 5`` reads five 30-second files a batch (2.5M lines), where a
batch's fixed costs weigh less per line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    DEFAULT_WORKDIR,
    cpu_s,
    jvm_pid,
    load_line,
    machine_line,
    md_table,
    median,
    pipeline_config,
    rss_kb,
    session,
    write_results,
)

from tidemark.generator import Scenario, generate_files
from tidemark.stream import start_stream

WARMUP = 1  # full batches that add the hosts (reported apart from the steady ones)
FULL = 0.8  # a batch with at least this share of the largest batch's lines is a full one


@dataclass
class Run:
    hosts: int
    round: int
    wall_s: float
    batch_s: list[float]  # the full batches (the retries' tail files make a few small ones)
    phases: dict[str, list[float]] = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)
    host_rows: int = 0  # rows of the host-progress log at the end
    jvm_rss_mb: float = 0.0
    py_rss_mb: float = 0.0
    # the Python driver's CPU seconds over the run (all its threads) and the lines it read: the
    # driver's share of the per-row work (hash collection, per-host grouping, window state)
    py_cpu_s: float = 0.0
    rows: int = 0
    per_row_work: str = "driver"  # spark.per_row_work of the run
    # the driver JVM's CPU seconds over the run: on a cluster (``master`` not local) the driver
    # alone; in local mode it holds the executors' work too
    jvm_cpu_s: float = 0.0
    master: str = "local[2]"
    phase_cpu_s: dict[str, float] = field(default_factory=dict)  # the Python CPU per phase, summed

    @property
    def steady(self) -> list[float]:
        return self.batch_s[WARMUP:]


def scenario(hosts: int, lines_per_batch: int, batches: int) -> Scenario:
    rate = max(1, round(2 * lines_per_batch / hosts))  # events per host per minute; files of 30 s
    return Scenario(
        hosts=hosts,
        minutes=max(1, batches // 2),
        events_per_host_per_minute=rate,
        lag_share=0.0,
        lag_minutes=0.0,
        file_span_s=30,
        final_heartbeat=False,
    )


def run_once(
    spark, hosts: int, round_: int, root: Path, landing: Path, k: int, mode: str, where: str = "driver"
) -> Run:
    from deltalake import DeltaTable

    config = pipeline_config(
        root / f"h{hosts}-{where}", "scale", landing, k, mode=mode, spark={"per_row_work": where}
    )
    jvm = jvm_pid(spark)
    jvm_cpu = cpu_s(jvm)
    cpu = time.process_time()
    started = time.monotonic()
    with phase_cpu() as per_phase:
        query, processor = start_stream(spark, config, once=True, echo=lambda _line: None)
        query.awaitTermination()
    wall = time.monotonic() - started
    cpu = time.process_time() - cpu
    jvm_cpu = cpu_s(jvm) - jvm_cpu
    done = [s for s in processor.summaries if not s.skipped]
    size = [s.events + s.heartbeats + s.quarantined + s.retries_dropped for s in done]
    full = [s for s, n in zip(done, size, strict=True) if n >= FULL * max(size)]
    run = Run(
        hosts, round_, wall, [s.seconds for s in full], lines=[n for n in size if n >= FULL * max(size)]
    )
    for name in sorted({p for s in full for p in s.phases}):
        run.phases[name] = [s.phases.get(name, 0.0) for s in full]
    run.host_rows = len(DeltaTable(config.table_path("_state/host_progress")).to_pyarrow_table())
    run.jvm_rss_mb = rss_kb(jvm_pid(spark))[0] / 1024
    run.py_rss_mb = rss_kb()[0] / 1024
    run.py_cpu_s, run.rows = cpu, sum(size)
    run.per_row_work, run.jvm_cpu_s, run.master = where, jvm_cpu, spark.sparkContext.master
    run.phase_cpu_s = {name: round(v, 3) for name, v in per_phase.items()}
    return run


@contextmanager
def phase_cpu():
    """Sums the Python process's CPU (``time.process_time``: every thread, not the JVM) between
    the laps of each batch phase (:class:`tidemark.batch_steps.Phases`) while it is open."""
    from tidemark import batch_steps

    sums: dict[str, float] = {}
    init, lap = batch_steps.Phases.__init__, batch_steps.Phases.lap

    def timed_init(self) -> None:
        init(self)
        self._cpu = time.process_time()

    def timed_lap(self, name: str) -> None:
        lap(self, name)
        now = time.process_time()
        sums[name] = sums.get(name, 0.0) + now - self._cpu
        self._cpu = now

    batch_steps.Phases.__init__, batch_steps.Phases.lap = timed_init, timed_lap
    try:
        yield sums
    finally:
        batch_steps.Phases.__init__, batch_steps.Phases.lap = init, lap


def table(runs: dict[int, Run], base: int) -> str:
    rows = []
    ref = median(runs[base].steady)
    for hosts, run in runs.items():
        steady = median(run.steady)
        rows.append(
            [
                f"{hosts:,}",
                len(run.batch_s),
                f"{median(run.lines):,.0f}",
                ", ".join(f"{s:.2f}" for s in run.batch_s[:WARMUP]),
                f"{steady:.2f}",
                f"{max(run.steady):.2f}",
                f"{steady / ref:.2f}x",
                f"{run.host_rows:,}",
                f"{run.jvm_rss_mb:,.0f}",
                f"{run.py_rss_mb:,.0f}",
            ]
        )
    headers = [
        "hosts",
        "full batches",
        "lines a batch",
        "first batch (s)",
        "steady batch, median (s)",
        "worst (s)",
        f"vs {base:,}",
        "host-log rows",
        "JVM RSS (MiB)",
        "Python RSS (MiB)",
    ]
    return md_table(headers, rows, "r" * len(headers))


def phase_table(runs: dict[int, Run]) -> str:
    """Median seconds of each phase of the steady batches (phases of at least 10 ms somewhere)."""
    names = sorted({p for run in runs.values() for p in run.phases})
    shown = [
        p for p in names if max(median(r.phases.get(p, [0])[WARMUP:] or [0]) for r in runs.values()) >= 0.01
    ]
    rows = [
        [p, *(f"{median(r.phases.get(p, [0])[WARMUP:] or [0]):.2f}" for r in runs.values())] for p in shown
    ]
    return md_table(["phase, steady median (s)", *(f"{h:,} hosts" for h in runs)], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="10000,100000,1000000", help="host counts, comma-separated")
    parser.add_argument("--lines-per-batch", type=int, default=500_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--mode", default="exactly_once", choices=("exactly_once", "at_least_once"))
    parser.add_argument("--per-row-work", default="driver", help="spark.per_row_work values, comma-separated")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "hosts_scale")
    parser.add_argument("--tag", default="", help="results file suffix (report: hosts_scale@TAG)")
    parser.add_argument("--files-per-trigger", type=int, default=1, help="30-second files a batch")
    args = parser.parse_args()
    sizes = [int(h) for h in args.hosts.split(",")]
    print(f"machine: {machine_line()}", flush=True)
    shutil.rmtree(args.workdir, ignore_errors=True)
    landings: dict[int, tuple[Path, int]] = {}
    for hosts in sizes:
        landing = args.workdir / f"landing-{hosts}"
        t0 = time.monotonic()
        truth = generate_files(scenario(hosts, args.lines_per_batch, args.batches), landing)
        landings[hosts] = (landing, args.files_per_trigger)  # 30-second files
        print(
            f"input {hosts:,} hosts: {truth.lines:,} lines in {truth.files} files, "
            f"generated in {time.monotonic() - t0:.0f}s",
            flush=True,
        )
    spark = session()
    rounds: list[Run] = []
    wheres = args.per_row_work.split(",")
    for r in range(args.rounds):
        runs = [(h, w) for h in sizes for w in wheres]
        for hosts, where in runs if r % 2 == 0 else runs[::-1]:
            landing, k = landings[hosts]
            run = run_once(spark, hosts, r + 1, args.workdir / f"round{r + 1}", landing, k, args.mode, where)
            rounds.append(run)
            print(
                f"round {r + 1}, {hosts:,} hosts, per-row work on the {where}: {run.wall_s:.1f}s, "
                f"{len(run.batch_s)} batches, steady median {median(run.steady):.2f}s, Python CPU "
                f"{run.py_cpu_s / max(run.rows, 1) * 1e6:.2f}s per M lines ({load_line()})",
                flush=True,
            )
    out = write_results("hosts_scale", args, runs=[asdict(r) for r in rounds])
    print()
    print(render(json.loads(out.read_text())))


GOAL = 1.3  # issue 41: the median of the paired per-round ratios, largest host count over the first


def paired_ratios(rounds: list[Run], base: int, hosts: int) -> list[float]:
    """Per round, the steady batch median at ``hosts`` over the one at ``base`` of that round."""
    by_round: dict[int, dict[int, Run]] = {}
    for run in rounds:
        by_round.setdefault(run.round, {})[run.hosts] = run
    return [
        median(r[hosts].steady) / median(r[base].steady)
        for r in by_round.values()
        if hosts in r and base in r
    ]


def driver_cpu_per_million(rounds: list[Run], hosts: int) -> list[float]:
    """The Python driver's CPU-seconds per million lines, per round at ``hosts``."""
    return [r.py_cpu_s / r.rows * 1e6 for r in rounds if r.hosts == hosts and r.rows]


def paired_table(rounds: list[Run], sizes: list[int]) -> str:
    """Per round, each host count's steady median over the first host count's of the same round;
    the median and the spread (min-max) of those ratios, graded against the goal at the largest."""
    base = sizes[0]
    rows = []
    for hosts in sizes[1:]:
        ratios = paired_ratios(rounds, base, hosts)
        verdict = (
            (f"<= {GOAL}x: " + ("met" if median(ratios) <= GOAL else "NOT met"))
            if hosts == sizes[-1]
            else "-"
        )
        rows.append(
            [f"{hosts:,} / {base:,}", len(ratios), f"{median(ratios):.2f}x",
             f"{min(ratios):.2f}x-{max(ratios):.2f}x", ", ".join(f"{x:.2f}" for x in ratios), verdict]
        )  # fmt: skip
    return md_table(["hosts", "rounds", "median ratio", "spread", "every round", "goal"], rows, "lrrrll")


def driver_table(rounds: list[Run], sizes: list[int]) -> str:
    """The Python driver's CPU per million lines (median over rounds) and the input rate at which
    one driver core would be saturated if the executors scaled out and the driver's per-row work
    stayed as measured."""
    rows = []
    for hosts in sizes:
        per_m = driver_cpu_per_million(rounds, hosts)
        if not per_m:
            continue
        rows.append([f"{hosts:,}", f"{median(per_m):.2f}", f"{min(per_m):.2f}-{max(per_m):.2f}",
                     f"{1e6 / median(per_m):,.0f}"])  # fmt: skip
    return md_table(
        ["hosts", "driver CPU s per M lines (median)", "spread", "lines/s that saturate one driver core"],
        rows,
    )


def per_row_work(data: dict) -> list[str]:
    """The ``spark.per_row_work`` values a results file ran (older files: the driver only)."""
    return data["args"].get("per_row_work", "driver").split(",")


def runs_on(data: dict, where: str = "driver") -> list[Run]:
    """The runs with the per-row work on ``where``; the driver's (the default) are the ones the
    goal grades."""
    return [r for r in (Run(**r) for r in data["runs"]) if r.per_row_work == where]


def where_table(rounds: list[Run], sizes: list[int], wheres: list[str]) -> str:
    """Per host count and ``spark.per_row_work``: the Python driver's CPU per million lines
    (median and spread over the rounds), the input rate that saturates one driver core at that,
    and the steady batch median over the driver way's of the same round (paired)."""
    by: dict[tuple[int, str, int], Run] = {(r.hosts, r.per_row_work, r.round): r for r in rounds}
    # on a cluster the driver JVM runs no tasks: its CPU is the driver's share too
    cluster = any(not r.master.startswith("local") and r.rows for r in rounds)
    rows = []
    for hosts in sizes:
        for where in wheres:
            per_m = driver_cpu_per_million([r for r in rounds if r.per_row_work == where], hosts)
            ratios = [
                median(run.steady) / median(by[(hosts, "driver", n)].steady)
                for (h, w, n), run in by.items()
                if (h, w) == (hosts, where) and (hosts, "driver", n) in by
            ]
            paired = f"{median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-"
            row = [f"{hosts:,}", where, f"{median(per_m):.2f}", f"{min(per_m):.2f}-{max(per_m):.2f}",
                   f"{1e6 / median(per_m):,.0f}", paired]  # fmt: skip
            if cluster:
                jvm = [
                    r.jvm_cpu_s / r.rows * 1e6
                    for r in rounds
                    if (r.hosts, r.per_row_work) == (hosts, where) and r.rows
                ]
                row.append(f"{median(jvm):.2f} ({min(jvm):.2f}-{max(jvm):.2f})")
            rows.append(row)
    headers = [
        *("hosts", "per-row work on the", "Python driver CPU s per M lines (median)", "spread"),
        *("lines/s that saturate one driver core", "steady batch vs the driver way, same round"),
    ]
    if cluster:
        headers.append("driver JVM CPU s per M lines (median, spread)")
    return md_table(headers, rows, "ll" + "r" * (len(headers) - 2))


def phase_cpu_table(rounds: list[Run], sizes: list[int], wheres: list[str]) -> str:
    """The Python driver's CPU per million lines in each batch phase, median over the rounds, per
    host count and ``spark.per_row_work`` (phases of at least 0.02 s per M lines somewhere)."""
    columns = [(h, w) for h in sizes for w in wheres]
    per_m: dict[tuple[int, str], dict[str, float]] = {}
    for h, w in columns:
        runs = [r for r in rounds if (r.hosts, r.per_row_work) == (h, w) and r.rows and r.phase_cpu_s]
        names = {n for r in runs for n in r.phase_cpu_s}
        per_m[(h, w)] = {n: median([r.phase_cpu_s.get(n, 0.0) / r.rows * 1e6 for r in runs]) for n in names}
    names = sorted({n for v in per_m.values() for n, x in v.items() if x >= 0.02}, key=lambda n: -max(
        v.get(n, 0.0) for v in per_m.values()))  # fmt: skip
    rows = [[n, *(f"{per_m[c].get(n, 0.0):.2f}" for c in columns)] for n in names]
    return md_table(["phase: Python CPU s per M lines", *(f"{h:,} hosts, {w}" for h, w in columns)], rows)


def render(data: dict) -> str:
    """The tables of one results file (also what ``bench/report.py`` puts in the docs): each host
    count's median round (by its steady batch median), the paired per-round ratios, and the
    driver's CPU share, over the runs with the per-row work on the driver; with both ways run,
    the two side by side."""
    args = data["args"]
    everything = [Run(**r) for r in data["runs"]]
    rounds = runs_on(data)
    sizes = [int(h) for h in args["hosts"].split(",")]
    mid = {}
    for h in sizes:
        runs = sorted((r for r in rounds if r.hosts == h), key=lambda r: median(r.steady))
        mid[h] = runs[(len(runs) - 1) // 2]
    parts = [
        f"{args['mode']}, {int(args['lines_per_batch']) * int(args.get('files_per_trigger', 1)):,} lines a "
        f"batch, {args['rounds']} rounds in "
        f"alternating order; each host count's median round:\n\n" + table(mid, sizes[0]),
        phase_table(mid),
        "Paired per-round ratios of the steady batch median:\n\n" + paired_table(rounds, sizes),
    ]
    if any(r.rows for r in rounds):
        parts.append("The Python driver's share:\n\n" + driver_table(rounds, sizes))
    wheres = per_row_work(data)
    if len(wheres) > 1:
        parts[0] = "The runs with the per-row work on the driver (the default). " + parts[0]
        parts.append(
            "The per-row work on the driver and on the executors (`spark.per_row_work`), the same "
            "rounds:\n\n" + where_table(everything, sizes, wheres)
        )
    if any(r.phase_cpu_s for r in everything):
        parts.append(
            "Where the Python driver's CPU goes, per batch phase (median over the rounds):\n\n"
            + phase_cpu_table(everything, sizes, wheres)
        )
    return "\n\n".join(parts)


if __name__ == "__main__":
    main()
