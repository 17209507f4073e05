"""Window revisions: on-time against final alignment, and what revising costs per batch.

    .venv/bin/python bench/revisions.py [--hosts 10000] [--minutes 20] [--rate 6]
        [--lag-minutes 4] [--files-per-trigger 2] [--regimes 0.0005,0.001,0.005]
        [--lateness 1h] [--rounds 2]

For each regime (share of hosts in a collector outage of ``--lag-minutes`` from minute 1; their
backlog lands in one burst when it ends; 1% publisher retries) one scenario is generated and
streamed by Tidemark (precision 0.999) twice per round on the same files:

* ``allowed_lateness: 0``: windows are final when they close; late records stay in
  ``late_events`` (Tidemark before revisions);
* ``allowed_lateness: --lateness``: late records within it revise their windows.

Each run is reconciled against the batch recompute: the worst window's on-time alignment (the
first result) and final alignment (the latest revision), the share of windows at the 0.999 target
for each, late records folded in and beyond, revisions written. The cost of revising: the batch
time of the same batches with and without revisions (medians over rounds; the batches that wrote
revisions, and all), and of the phases revising adds to (aggregate the windows, write the window
rows, write the state). One unrecorded warm-up run first, so no round pays the JVM's start.
Prints markdown tables; nothing is asserted. Work directory:
``var/bench/revisions``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import regimes
from benchlib import (
    DEFAULT_WORKDIR,
    load_line,
    machine_line,
    md_table,
    median,
    pipeline_config,
    session,
    stream_once,
    write_results,
)

from tidemark.generator import Scenario
from tidemark.reconcile import reconcile
from tidemark.timeutil import format_duration_ms, parse_duration_ms

TARGET = 0.999
# The batch phases (tidemark.batch_steps.Phases) that fold, write the window rows and the state.
WINDOW_PHASES = ("aggregate_windows", "write_windows", "write_state")


@dataclass(frozen=True)
class Run:
    regime: str
    lateness: str
    round: int
    windows: int
    ontime_worst: float | None
    final_worst: float | None
    ontime_at_target: int
    final_at_target: int
    late: int  # every late record
    folded: int
    beyond: int
    revisions: int  # window rows written with revision >= 1
    window_rows: int
    unexplained: int
    batches: int
    batch_s: list[float]  # per batch, in order
    window_s: list[float]  # per batch: aggregate, write windows, write state (what revising adds to)
    revising: list[int]  # batch ids (in order) that wrote revisions
    wall_s: float


def run(spark, root: Path, landing: Path, s: Scenario, k: int, lateness_ms: int, label: str, rnd: int) -> Run:
    name = f"l{lateness_ms}-r{rnd}"
    shutil.rmtree(root / "warehouse" / name, ignore_errors=True)
    shutil.rmtree(root / "checkpoints" / name, ignore_errors=True)
    config = pipeline_config(
        root,
        name,
        landing,
        k,
        window={"size": "1m", "allowed_lateness": format_duration_ms(lateness_ms) if lateness_ms else 0},
        watermark={"precision": TARGET, "lag_threshold": "2m"},
    )
    batches, wall = stream_once(spark, config)
    report = reconcile(spark, config, s.start_ms, s.end_ms, target=TARGET, write=False)
    closed = report.closed
    summary = report.summary()
    return Run(
        regime=label,
        lateness=format_duration_ms(lateness_ms) if lateness_ms else "0",
        round=rnd,
        windows=len(closed),
        ontime_worst=summary.worst_ontime_alignment,
        final_worst=summary.worst_alignment,
        ontime_at_target=sum(1 for w in closed if (w.ontime_alignment or 0) >= TARGET),
        final_at_target=summary.aligned,
        late=sum(b.late for b in batches),
        folded=summary.late_folded,
        beyond=summary.late_events,
        revisions=sum(b.revisions for b in batches),
        window_rows=sum(b.windows_closed for b in batches) + sum(b.revisions for b in batches),
        unexplained=summary.unexplained,
        batches=len(batches),
        batch_s=[round(b.seconds, 3) for b in batches],
        window_s=[round(sum(b.phases.get(p, 0.0) for p in WINDOW_PHASES), 4) for b in batches],
        revising=[b.batch_id for b in batches if b.revisions],
        wall_s=round(wall, 1),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=20)
    parser.add_argument("--rate", type=int, default=6, help="events per host per minute")
    parser.add_argument("--lag-minutes", type=float, default=4.0)
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--regimes", default="0.0005,0.001,0.005", help="comma-separated lagging-host shares")
    parser.add_argument("--lateness", default="1h", help="allowed lateness of the revising runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duplicate-rate", type=float, default=0.01, help="publisher retries")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "revisions")
    parser.add_argument("--no-results", action="store_true", help="write no results file")
    args = parser.parse_args()
    lateness_ms = parse_duration_ms(args.lateness)

    print(f"machine: {machine_line()}", flush=True)
    spark = session()
    runs: list[Run] = []
    for regime in regimes(args):
        s, label, root, truth = regime.scenario, regime.label, regime.root, regime.truth
        print(f"{label}: {truth.unique_events:,} events in {truth.files} files ({load_line()})", flush=True)
        if not runs:  # warm-up: JIT, the parser's code generation, the Delta log caches
            run(spark, root, root / "landing", s, args.files_per_trigger, 0, label, 0)
        for rnd in range(1, args.rounds + 1):
            # alternate the order, so neither setting always runs on a warmer JVM
            for lat in (0, lateness_ms) if rnd % 2 else (lateness_ms, 0):
                r = run(spark, root, root / "landing", s, args.files_per_trigger, lat, label, rnd)
                runs.append(r)
                print(
                    f"  round {rnd} lateness {r.lateness}: on-time worst {r.ontime_worst}, final worst "
                    f"{r.final_worst}, folded {r.folded:,}, beyond {r.beyond:,}, revisions {r.revisions:,}, "
                    f"{r.batches} batches in {r.wall_s:.0f}s",
                    flush=True,
                )
    spark.stop()
    data = {"runs": [asdict(r) for r in runs], "target": TARGET}
    print()
    print(render(data))
    print(f"\nfinished: {load_line()}")
    if not args.no_results:
        write_results("revisions", args, **data)


def _fmt(x: float | None) -> str:
    return f"{x:.6f}" if x is not None else "-"


def render(data: dict) -> str:
    """The revisions tables of one results file (also what ``bench/report.py`` puts in the docs)."""
    runs = [Run(**r) for r in data["runs"]]
    regimes = list(dict.fromkeys(r.regime for r in runs))
    rows, costs = [], []
    for regime in regimes:
        mine = [r for r in runs if r.regime == regime]
        for lateness in dict.fromkeys(r.lateness for r in mine):
            first = next(r for r in mine if r.lateness == lateness)
            rows.append(
                [
                    regime,
                    lateness,
                    _fmt(first.ontime_worst),
                    f"{first.ontime_at_target}/{first.windows}",
                    _fmt(first.final_worst),
                    f"{first.final_at_target}/{first.windows}",
                    f"{first.late:,}",
                    f"{first.folded:,}",
                    f"{first.beyond:,}",
                    f"{first.revisions:,}",
                    f"{first.window_rows:,}",
                    f"{first.unexplained:,}",
                ]
            )
        plain = [r for r in mine if r.lateness == "0"]
        revised = [r for r in mine if r.lateness != "0"]
        if not plain or not revised:
            continue
        hit = sorted({b for r in revised for b in r.revising})
        n = min(len(r.batch_s) for r in mine)

        def med(group: list[Run], ids: list[int], n: int = n, field: str = "batch_s") -> float:
            # per batch the median over rounds, then the sum over the batches
            return sum(median([getattr(r, field)[i] for r in group]) for i in ids if i < n)

        every = list(range(n))
        costs.append(
            [
                regime,
                f"{len(hit)} of {n}",
                f"{med(plain, hit):.2f}",
                f"{med(revised, hit):.2f}",
                f"{med(plain, every):.1f}",
                f"{med(revised, every):.1f}",
                f"{med(revised, every) / med(plain, every):.3f}×" if med(plain, every) else "-",
                f"{med(plain, hit, field='window_s') * 1000:.0f}",
                f"{med(revised, hit, field='window_s') * 1000:.0f}",
                f"{med(plain, every, field='window_s') * 1000:.0f}",
                f"{med(revised, every, field='window_s') * 1000:.0f}",
                str(len(plain)),
            ]
        )
    out = md_table(
        [
            "regime",
            "allowed lateness",
            "on-time worst",
            f"on-time ≥ {data['target']}",
            "final worst",
            f"final ≥ {data['target']}",
            "late",
            "folded in",
            "beyond lateness",
            "revisions",
            "window rows",
            "unexplained",
        ],
        rows,
        "ll" + "r" * 10,
    )
    if costs:
        out += "\n\nCost of revising (seconds, per batch the median over rounds, summed):\n\n" + md_table(
            [
                "regime",
                "batches that revised",
                "those batches, lateness 0",
                "those batches, revising",
                "all batches, lateness 0",
                "all batches, revising",
                "ratio (all)",
                "window phases, those batches, lateness 0 (ms)",
                "window phases, those batches, revising (ms)",
                "window phases, all, lateness 0 (ms)",
                "window phases, all, revising (ms)",
                "rounds",
            ],
            costs,
        )
    return out + "\n"


if __name__ == "__main__":
    main()
