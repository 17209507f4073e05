"""Soak: SIGKILL the streaming job at random moments N times (default 50), restarting it from its
checkpoint each time, then check exactly-once against the independent oracle and the recompute.

    .venv/bin/python bench/soak_kills.py [--kills 50] [--source files|kafka] [--seed 1]

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

from conftest import KafkaBroker  # noqa: E402
from helpers import assert_exactly_once, kafka_pipeline, small_scenario, write_config  # noqa: E402
from test_exactly_once import finish, kill_group, start_job  # noqa: E402

from tidemark.generator import generate_files  # noqa: E402
from tidemark.reconcile import reconcile  # noqa: E402
from tidemark.sparkenv import build_session  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50, help="how many SIGKILLs (default %(default)s)")
    parser.add_argument("--source", choices=["files", "kafka"], default="files", help="source kind")
    parser.add_argument("--seed", type=int, default=1, help="seed for the kill delays")
    parser.add_argument("--min-delay", type=float, default=6.0, help="shortest run before a kill, s")
    parser.add_argument("--max-delay", type=float, default=25.0, help="longest run before a kill, s")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tidemark-soak-"))
    broker = None
    # A larger scenario than the tests' so that 50 kills land inside the run, not after it.
    scenario_kwargs = dict(minutes=30, hosts=100)
    if args.source == "kafka":
        broker = KafkaBroker(root / "kafka")
        broker.start()
        scenario, config, oracle, truth = kafka_pipeline(root, broker, "soak", name="soak")
        config_path, check_config = root / "soak.yaml", config.model_copy(update={"source": oracle.source})
    else:
        config = write_config(root, name="soak", source={"max_files_per_trigger": 1})
        scenario = small_scenario(**scenario_kwargs)
        truth = generate_files(scenario, config.source.path)
        config_path, check_config = root / "soak.yaml", config
    rng = random.Random(args.seed)
    started = time.monotonic()
    try:
        for kill in range(1, args.kills + 1):
            delay = rng.uniform(args.min_delay, args.max_delay)
            proc = start_job(config_path)
            time.sleep(delay)
            state = "killed" if proc.poll() is None else f"had already exited ({proc.returncode})"
            kill_group(proc)
            print(f"kill {kill:>3}/{args.kills}: after {delay:5.1f}s, job {state}", flush=True)
        code, out = finish(start_job(config_path))
        if code != 0:
            print(out[-3000:])
            return 1
        spark = build_session(shuffle_partitions=2)
        assert_exactly_once(spark, check_config, truth)
        report = reconcile(spark, config, scenario.start_ms, scenario.end_ms, write=False)
        unexplained = sum(w.unexplained for w in report.closed)
        print(
            f"soak ({args.source}): {args.kills} kills, {truth.unique_events:,} events, exactly-once holds; "
            f"{len(report.closed)} windows closed, unexplained {unexplained}; "
            f"{time.monotonic() - started:.0f}s"
        )
        return 0 if unexplained == 0 else 1
    finally:
        if broker:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
