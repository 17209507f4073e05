"""Soak: SIGKILL the streaming job at random moments N times (default 50), restarting it from its
checkpoint each time, then check exactly-once against the independent oracle and the recompute.

    .venv/bin/python bench/soak_kills.py [--kills 50] [--source files|kafka] [--seed 1] [--minutes 30]

Prints one line per kill and a summary. With --source kafka it starts the project's broker
(scripts/kafka.sh) on a free port and stops it at the end. Exits non-zero on any difference.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "crash"))

from brokers import KafkaBroker  # noqa: E402
from helpers import assert_exactly_once, small_scenario, write_config  # noqa: E402
from test_exactly_once import kill_at_random_moments, start_job  # noqa: E402

from tidemark.generator import generate_files  # noqa: E402
from tidemark.kafka import publish_scenario  # noqa: E402
from tidemark.reconcile import reconcile  # noqa: E402
from tidemark.sparkenv import build_session  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50, help="how many SIGKILLs (default %(default)s)")
    parser.add_argument("--source", choices=["files", "kafka"], default="files", help="source kind")
    parser.add_argument("--seed", type=int, default=1, help="seed for the kill delays")
    parser.add_argument("--min-delay", type=float, default=0.5, help="shortest run before a kill, s")
    parser.add_argument("--max-delay", type=float, default=8.0, help="longest run before a kill, s")
    parser.add_argument(
        "--minutes", type=int, default=30, help="scenario length (100 hosts; 30 min is ~60 batches)"
    )
    parser.add_argument("--final-timeout", type=float, default=3600, help="limit for the last run, s")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tidemark-soak-"))
    broker = None
    # A larger scenario than the tests' (~45-60 batches) so that 50 kills land inside the run, not after it.
    scenario = small_scenario(minutes=args.minutes, hosts=100)
    config = write_config(root, name="soak", source={"max_files_per_trigger": 1})
    if args.source == "kafka":
        broker = KafkaBroker(root / "kafka")
        broker.start()
        oracle = config  # the same scenario as files, for the oracle
        kafka_source = {
            "kind": "kafka",
            "bootstrap_servers": broker.bootstrap,
            "topic": "soak",
            "max_offsets_per_trigger": 700,
            "path": None,
        }
        config = write_config(root, name="soak-kafka", source=kafka_source)
        truth = generate_files(scenario, oracle.source.path)
        publish_scenario(scenario, broker.bootstrap, "soak")
        config_path, check_config = (
            root / "soak-kafka.yaml",
            config.model_copy(update={"source": oracle.source}),
        )
    else:
        truth = generate_files(scenario, config.source.path)
        config_path, check_config = root / "soak.yaml", config
    rng = random.Random(args.seed)
    started = time.monotonic()
    try:
        # Each kill: a random delay after the run's first batch log write (JVM start-up excluded).
        outcomes = []
        for kill in range(1, args.kills + 1):
            ((delay, running),) = kill_at_random_moments(
                config_path, rng, args.min_delay, args.max_delay, kills=1
            )
            outcomes.append(running)
            state = "killed while running" if running else "had already exited"
            print(f"kill {kill:>3}/{args.kills}: {delay:4.1f}s into the stream, job {state}", flush=True)
        # The last run consumes what is left, possibly most of the input: no per-test time limit.
        proc = start_job(config_path)
        out, _ = proc.communicate(timeout=args.final_timeout)
        code = proc.returncode
        if code != 0:
            print(out[-3000:])
            return 1
        spark = build_session(shuffle_partitions=2)
        assert_exactly_once(spark, check_config, truth)
        report = reconcile(spark, config, scenario.start_ms, scenario.end_ms, write=False)
        unexplained = sum(w.unexplained for w in report.closed)
        print(
            f"soak ({args.source}): {args.kills} kills ({sum(outcomes)} hit a running job), "
            f"{truth.unique_events:,} events, exactly-once holds; "
            f"{len(report.closed)} windows closed, unexplained {unexplained}; "
            f"{time.monotonic() - started:.0f}s"
        )
        return 0 if unexplained == 0 else 1
    finally:
        if broker:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
