"""Throughput on the standalone cluster with 1 and with 2 workers, each worker the same cores.

    .venv/bin/python bench/cluster_scaling.py [--workers 1,2] [--cores 1] [--memory 1536m]
        [--minutes 50] [--hosts 10000] [--rate 10] [--rounds 2]
        [--systems exactly_once,at_least_once,baseline]

For each worker count: ``scripts/spark_cluster.sh`` is restarted with that many workers of
``--cores`` cores and ``--memory`` each (in its own directory and ports, so a running test cluster
is not touched), then ``bench/throughput.py`` runs the same scenario (10,000 hosts x 50 minutes x
10 events a minute: ~5M lines) with ``TIDEMARK_SPARK_MASTER`` pointing at it: the driver in
this machine's process, the executors on the workers. Prints lines/s per system and worker
count, and per worker. Raw figures to ``bench/results/cluster_scaling-<date>.json``. On a
2-core machine, two 1-core workers are the most this can show: the driver and the generator
share the same two cores, which the table's load column makes visible. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import DEFAULT_WORKDIR, machine_line, md_table, write_results

ROOT = Path(__file__).resolve().parents[1]
PORT, UI_PORT = 7177, 18180
RUN_LINE = re.compile(r"^\s+(\w+): ([\d.]+)s, (\d+) batches \((load average [\d. ]+)\)")
INPUT_LINE = re.compile(r"^input: ([\d,]+) lines")


def cluster(action: str, workers: int, cores: int, memory: str) -> None:
    env = {
        **os.environ,
        "TIDEMARK_SPARK_CLUSTER_DIR": str(DEFAULT_WORKDIR / "cluster_scaling" / "cluster"),
        "TIDEMARK_SPARK_MASTER_PORT": str(PORT),
        "TIDEMARK_SPARK_MASTER_UI_PORT": str(UI_PORT),
        "TIDEMARK_SPARK_WORKERS": str(workers),
        "TIDEMARK_SPARK_WORKER_CORES": str(cores),
        "TIDEMARK_SPARK_WORKER_MEMORY": memory,
    }
    subprocess.run([str(ROOT / "scripts" / "spark_cluster.sh"), action], env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="1536m", help="memory per worker")
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=50)
    parser.add_argument("--rate", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--systems", default="exactly_once,at_least_once,baseline")
    args = parser.parse_args()
    print(f"machine: {machine_line()}", flush=True)
    results: dict = {"runs": []}
    lines = 0
    for workers in (int(w) for w in args.workers.split(",")):
        cluster("stop", workers, args.cores, args.memory)
        cluster("start", workers, args.cores, args.memory)
        command = [
            sys.executable, str(ROOT / "bench" / "throughput.py"), "--hosts", str(args.hosts),
            "--minutes", str(args.minutes), "--rate", str(args.rate), "--rounds", str(args.rounds),
            "--order", args.systems, "--skip-overhead", "--no-results",
            "--workdir", str(DEFAULT_WORKDIR / "cluster_scaling" / f"w{workers}"),
        ]  # fmt: skip
        env = {**os.environ, "TIDEMARK_SPARK_MASTER": f"spark://127.0.0.1:{PORT}"}
        print(f"{workers} worker(s) x {args.cores} core(s): {' '.join(command[1:])}", flush=True)
        proc = subprocess.run(command, env=env, capture_output=True, text=True)
        for line in proc.stdout.splitlines():
            if m := INPUT_LINE.match(line):
                lines = int(m.group(1).replace(",", ""))
            if m := RUN_LINE.match(line):
                run = {
                    "workers": workers,
                    "system": m.group(1),
                    "wall_s": float(m.group(2)),
                    "load": m.group(4),
                }
                results["runs"].append(run)
                print(f"  {run}", flush=True)
        if proc.returncode:
            print(proc.stdout[-3000:], proc.stderr[-3000:])
            raise SystemExit(f"throughput.py failed with {workers} worker(s)")
        cluster("stop", workers, args.cores, args.memory)
    out = write_results("cluster_scaling", args, lines=lines, **results)
    print()
    print(render(json.loads(out.read_text())))


def render(data: dict) -> str:
    """The table of one results file (also what ``bench/report.py`` puts in the docs): each
    system's fastest round per worker count."""
    args, lines = data["args"], data["lines"]
    systems = args["systems"].split(",")
    best: dict[tuple[str, int], float] = {}
    for run in data["runs"]:
        key = (run["system"], run["workers"])
        if key not in best or run["wall_s"] < best[key]:
            best[key] = run["wall_s"]
    one = {s: best.get((s, 1)) for s in systems}
    rows = []
    for (system, workers), wall in sorted(best.items(), key=lambda kv: (systems.index(kv[0][0]), kv[0][1])):
        rate = lines / wall
        speedup = one[system] / wall if one.get(system) else float("nan")
        rows.append(
            [system, workers, f"{wall:.1f}", f"{rate:,.0f}", f"{rate / workers:,.0f}", f"{speedup:.2f}x"]
        )
    headers = ["system", "workers", "wall (s)", "lines/s", "lines/s per worker", "vs 1 worker"]
    return (
        f"{lines:,} lines, best of {args['rounds']} rounds, {args['cores']} core(s) and "
        f"{args['memory']} per worker:\n\n" + md_table(headers, rows)
    )


if __name__ == "__main__":
    main()
