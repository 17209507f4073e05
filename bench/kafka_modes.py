"""exactly_once vs at_least_once on the same Kafka input, dedup state size, and recovery time.

    .venv/bin/python bench/kafka_modes.py [--hosts 10000] [--minutes 10] [--rate 10] [--rounds 2]

Starts the project's broker on a free port, publishes one scenario (1% publisher retries), then
in one run: streams it with exactly_once and with at_least_once (same topic, separate
checkpoints), reports events/s, the ratio and the retries exactly_once dropped, and the time from
a restart after SIGKILL to the first committed batch. Figures are printed as markdown; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import KafkaBroker  # noqa: E402
from helpers import write_config  # noqa: E402

from tidemark.generator import Scenario  # noqa: E402
from tidemark.kafka import publish_scenario  # noqa: E402
from tidemark.sparkenv import build_session  # noqa: E402
from tidemark.stream import start_stream  # noqa: E402
from tidemark.tables import read_local, table_exists  # noqa: E402


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
    return wall, events, dropped


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--rate", type=int, default=10, help="events per host per minute")
    parser.add_argument("--per-trigger", type=int, default=200_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each mode (fastest shown)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tidemark-bench-"))
    broker = KafkaBroker(root / "kafka")
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
        modes, best = ["exactly_once", "at_least_once"], {}
        for rnd in range(1, args.rounds + 1):
            for mode in modes if rnd % 2 else modes[::-1]:
                wall, events, dropped = run_mode(spark, root, broker, "bench", mode, args.per_trigger, rnd)
                print(f"round {rnd}: {mode} {wall:.1f}s", flush=True)
                if mode not in best or wall < best[mode][0]:
                    best[mode] = (wall, events, dropped)
        print(f"\nfastest of {args.rounds} round(s), the order reversed in every other round:\n")
        print("| mode | events stored | retries dropped | wall (s) | events/s | ratio to exactly_once |")
        print("|---|---:|---:|---:|---:|---:|", flush=True)
        eo_rate = best["exactly_once"][1] / best["exactly_once"][0]
        for mode in modes:
            wall, events, dropped = best[mode]
            rate = events / wall
            print(f"| {mode} | {events:,} | {dropped:,} | {wall:.1f} | {rate:,.0f} | {rate / eo_rate:.2f} |")
        spark.stop()
        recovery = recovery_seconds(root, broker, "bench", args.per_trigger)
        print(f"\nrecovery after SIGKILL (restart to first committed batch, exactly_once): {recovery:.1f}s")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
