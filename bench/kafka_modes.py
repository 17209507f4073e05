"""Tidemark on Kafka against the plain Spark Kafka job, and exactly_once against at_least_once.

    .venv/bin/python bench/kafka_modes.py [--hosts 10000] [--minutes 10] [--rate 10] [--rounds 5]
        [--per-trigger 200000] [--systems baseline,exactly_once,at_least_once] [--no-recovery]

Starts the project's broker on a free port, publishes one scenario (1% publisher retries), then
in one run, ``--rounds`` times each, the order rotated every round: the plain Spark Kafka job
(``baseline``: the same topic and ``maxOffsetsPerTrigger``, ``from_json``, ``withWatermark`` 2
minutes, 1-minute window count, Delta sink) and Tidemark with each mode (separate checkpoints).
Rates are Kafka records read / wall time (query start to end), the same numerator for every
system; medians with the spread (min-max), and each system's Spark ``durationMs`` per batch and
Tidemark's phase times beside them, so one can see where the time goes. Then the time from a
restart after SIGKILL to the first committed batch. Raw figures to
``bench/results/kafka_modes-<date>.json``; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from benchlib import (  # noqa: E402
    baseline_kafka_events,
    json_progress,
    kafka_broker_class,
    load_line,
    machine_line,
    md_table,
    median,
    run_baseline,
    write_results,
)
from helpers import write_config  # noqa: E402

from tidemark.generator import Scenario  # noqa: E402
from tidemark.kafka import publish_scenario  # noqa: E402
from tidemark.sparkenv import build_session  # noqa: E402
from tidemark.stream import start_stream  # noqa: E402
from tidemark.tables import read_local, table_exists  # noqa: E402

SYSTEMS = ("baseline", "exactly_once", "at_least_once")


if TYPE_CHECKING:
    from brokers import KafkaBroker


def kafka_config(root: Path, name: str, broker: KafkaBroker, topic: str, per_trigger: int, **extra):
    return write_config(
        root,
        name=name,
        watermark={"precision": 0.999},
        source={
            "kind": "kafka",
            "bootstrap_servers": broker.bootstrap,
            "topic": topic,
            "path": None,
            "max_offsets_per_trigger": per_trigger,
        },
        **extra,
    )


def run_mode(spark, root: Path, broker: KafkaBroker, topic: str, mode: str, per_trigger: int, rnd: int):
    name = f"bench-{mode.replace('_', '-')}-r{rnd}"
    config = kafka_config(root, name, broker, topic, per_trigger, mode=mode)
    started = time.monotonic()
    query, processor = start_stream(spark, config, once=True, echo=lambda m: None)
    query.awaitTermination()
    wall = time.monotonic() - started
    events = sum(s.events for s in processor.summaries)
    dropped = sum(s.retries_dropped for s in processor.summaries)
    phases: dict[str, float] = defaultdict(float)
    for summary in processor.summaries:
        for name, seconds in summary.phases.items():
            phases[name] += seconds
    progress = [json_progress(p) for p in query.recentProgress]
    return {
        "wall_s": round(wall, 2),
        "events": events,
        "retries_dropped": dropped,
        "batches": len(processor.summaries),
        "spark_ms": spark_ms(progress),
        "phases_s": {k: round(v, 2) for k, v in phases.items()},
    }


def run_peer(spark, root: Path, broker: KafkaBroker, topic: str, per_trigger: int, rnd: int) -> dict:
    out = root / f"bench-baseline-r{rnd}"
    events = baseline_kafka_events(spark, broker.bootstrap, topic, per_trigger)
    wall, progress = run_baseline(spark, None, out, 0, events=events)
    stored = spark.read.format("delta").load(str(out / "windows")).groupBy().sum("events").first()[0]
    data = [p for p in progress if p.get("numInputRows")]
    return {
        "wall_s": round(wall, 2),
        "events": int(stored or 0),
        "retries_dropped": 0,
        "batches": len(data),
        "spark_ms": spark_ms(progress),
        "phases_s": {},
    }


def spark_ms(progress: list[dict]) -> dict[str, int]:
    """Spark's durationMs summed over the batches that read data."""
    total: dict[str, int] = defaultdict(int)
    for p in progress:
        if p.get("numInputRows"):
            for name, ms in p.get("durationMs", {}).items():
                total[name] += int(ms)
    return dict(total)


def recovery_seconds(root: Path, broker: KafkaBroker, topic: str, per_trigger: int) -> float:
    """A fresh exactly_once pipeline on the same topic: SIGKILL it right after its first commit,
    restart it, and time the restart to its next committed batch (it replays the killed batch)."""
    import os
    import signal

    config = kafka_config(root, "bench-recovery", broker, topic, per_trigger)
    config_path = root / "bench-recovery.yaml"

    def batches() -> int:
        path = config.table_path("watermarks")
        return len(read_local(path)) if table_exists(path) else 0

    def wait_for_more_than(n: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while batches() <= n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no batch committed within {timeout:.0f}s")
            time.sleep(0.1)

    cmd = [sys.executable, "-m", "tidemark.cli", "stream", "--config", str(config_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_more_than(0)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = batches()
    restarted = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_more_than(before)
        return time.monotonic() - restarted
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


GOALS = {"exactly_once": 0.9, "at_least_once": 1.1}  # issue 22: x the plain Spark Kafka job


def _median_table(runs: dict, systems: list[str], field: str, label: str, scale: float = 1) -> str:
    """One row per name found in the runs' ``field`` dicts: its median over the rounds, per system."""
    names = sorted({k for s in systems for r in runs[s] for k in r[field]})
    rows = [
        [n, *(f"{median([r[field].get(n, 0) for r in runs[s]]) / scale:.2f}" for s in systems)] for n in names
    ]
    return md_table([label, *systems], rows)


def render(data: dict) -> str:
    """The tables of one results file (also what ``bench/report.py`` puts in the docs): medians
    with their spread graded against the goals, Spark's ``durationMs`` and Tidemark's phases."""
    runs = data["runs"]
    systems = list(runs)
    records = data["input"]["records"]
    rates = {s: [records / r["wall_s"] for r in runs[s]] for s in systems}
    peer = median(rates["baseline"]) if "baseline" in rates else None
    rows = []
    for system in systems:
        rate = median(rates[system])
        ratio = rate / peer if peer else None
        goal = GOALS.get(system)
        rows.append(
            [
                system,
                f"{runs[system][-1]['events']:,}",
                f"{median([r['wall_s'] for r in runs[system]]):.1f}",
                f"{rate:,.0f}",
                f"{min(rates[system]):,.0f}-{max(rates[system]):,.0f}",
                f"{ratio:.2f}x" if ratio else "-",
                (f">= {goal:.2f}x: {'met' if ratio >= goal else 'NOT met'}" if goal and ratio else "-"),
                f"{median([r['batches'] for r in runs[system]]):.0f}",
            ]
        )
    headers = ["system", "events stored", "wall (s)", "records/s", "spread", "vs baseline", "goal", "batches"]
    parts = [
        f"{records:,} Kafka records, `maxOffsetsPerTrigger` {int(data['args']['per_trigger']):,} for every "
        f"system; medians of {len(next(iter(runs.values())))} rounds, the order rotated every round:",
        md_table(headers, rows),
    ]
    parts.append("Spark `durationMs`, summed over the data batches (median over rounds, s):")
    parts.append(_median_table(runs, systems, "spark_ms", "durationMs", scale=1000))
    tidemark = [s for s in systems if s != "baseline"]
    if any(r["phases_s"] for s in tidemark for r in runs[s]):
        parts.append("Tidemark's phases, summed over the batches (median over rounds, s):")
        parts.append(_median_table(runs, tidemark, "phases_s", "phase"))
    if data.get("recovery_s") is not None:
        parts.append(
            f"Recovery after SIGKILL (restart to the first committed batch, exactly_once): "
            f"{data['recovery_s']:.1f}s"
        )
    return "\n\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--rate", type=int, default=10, help="events per host per minute")
    parser.add_argument("--per-trigger", type=int, default=200_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each system (medians shown)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--no-recovery", action="store_true", help="skip the SIGKILL recovery timing")
    args = parser.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    print(f"machine: {machine_line()}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="tidemark-bench-"))
    broker = kafka_broker_class()(root / "kafka")
    broker.start()
    try:
        scenario = Scenario(
            hosts=args.hosts,
            minutes=args.minutes,
            events_per_host_per_minute=args.rate,
            lag_share=0.0005,
            duplicate_rate=0.01,
            malformed_rate=0.0001,
        )
        t0 = time.monotonic()
        truth = publish_scenario(scenario, broker.bootstrap, "bench")
        publish_s = time.monotonic() - t0
        print(
            f"input: {truth.lines:,} Kafka records ({truth.unique_events:,} unique events, "
            f"{truth.duplicate_copies:,} retry copies), published in {publish_s:.1f}s\n",
            flush=True,
        )
        spark = build_session(shuffle_partitions=4)
        runs: dict[str, list[dict]] = {s: [] for s in systems}
        for rnd in range(1, args.rounds + 1):
            shift = (rnd - 1) % len(systems)
            for system in systems[shift:] + systems[:shift]:
                if system == "baseline":
                    run = run_peer(spark, root, broker, "bench", args.per_trigger, rnd)
                else:
                    run = run_mode(spark, root, broker, "bench", system, args.per_trigger, rnd)
                run["load"] = load_line()
                runs[system].append(run)
                print(f"round {rnd}: {system} {run['wall_s']:.1f}s ({run['load']})", flush=True)
        spark.stop()
        rates = {s: [truth.lines / r["wall_s"] for r in runs[s]] for s in systems}
        peer = median(rates["baseline"]) if "baseline" in rates else None
        recovery = None
        if not args.no_recovery:
            recovery = recovery_seconds(root, broker, "bench", args.per_trigger)
        out = write_results(
            "kafka_modes",
            args,
            input={
                "records": truth.lines,
                "unique_events": truth.unique_events,
                "publish_s": round(publish_s, 1),
            },
            runs=runs,
            medians={s: round(median(rates[s])) for s in systems},
            ratios_to_baseline={s: round(median(rates[s]) / peer, 3) for s in systems} if peer else None,
            recovery_s=recovery,
        )
        print("\n" + render(json.loads(out.read_text())))
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
