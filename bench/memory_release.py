"""Does the stream's driver keep its peaks? The same replay with and without
``tidemark.batch.release_free_memory`` after each batch, side by side, maintenance beside both.

    .venv/bin/python bench/memory_release.py [--minutes 60] [--hosts 10000] [--rate 6]
        [--maintain-every 45] [--sample-every 15]

``--minutes`` of landing files (a file per 10 s) are generated once and copied for two runs that
start together, each in its own process: the stream reads them a file a batch (availableNow, the
pipeline's own plan), and ``tidemark maintain`` runs against its pipeline in a process of its own
every ``--maintain-every`` seconds from 90 s on, as the maintenance DAG would beside a live stream
(compaction, checkpoints and VACUUM are what the soak benchmark found raises the driver's RSS). In
one run the stream releases its allocators' free memory after each batch (Tidemark's code); in
the other that call is replaced by nothing. Every ``--sample-every`` seconds each run records its
batches, RSS, glibc's heap in use and free (``mallinfo2``), Arrow's pool in use and Python's
objects. Figures: ``bench/results/memory_release-<date>.json``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import DEFAULT_WORKDIR, md_table, median, pipeline_config, rss_kb, session, write_results

PY = sys.executable
VARIANTS = ("release", "no_release")


def run_variant(root: Path, release: bool, maintain_every: float, sample_every: float) -> None:
    """One run, in this process: stream the landing files, sample, print a JSON line per sample."""
    from soak import allocator_mb

    import tidemark.batch
    from tidemark.stream import start_stream

    if not release:
        tidemark.batch.release_free_memory = lambda: None
    config = pipeline_config(root, "mem", root / "landing", 1)
    stop = threading.Event()

    def maintain() -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if stop.wait(90):
            return
        while not stop.is_set():
            with open(root / "maintain.log", "a") as log:
                subprocess.run(
                    [PY, "-m", "tidemark.cli", "maintain", "--config", str(root / "mem.yaml")],
                    stdout=log, stderr=subprocess.STDOUT, env=env, check=False,
                )  # fmt: skip
            stop.wait(maintain_every)

    spark = session()
    query, processor = start_stream(spark, config, once=True, echo=lambda _m: None)
    threading.Thread(target=maintain, daemon=True).start()
    t0 = time.monotonic()
    while True:
        active = query.isActive
        sample = {
            "seconds": round(time.monotonic() - t0, 1),
            "batches": len(processor.summaries),
            "py_rss_mb": round(rss_kb()[0] / 1024, 1),
            **allocator_mb(),
        }
        print(json.dumps(sample), flush=True)
        if not active:
            break
        time.sleep(sample_every)
    stop.set()
    if query.exception() is not None:
        raise RuntimeError(f"stream failed: {query.exception()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=6, help="events per host per minute")
    parser.add_argument("--maintain-every", type=float, default=45, help="seconds between maintenance runs")
    parser.add_argument("--sample-every", type=float, default=15)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "memory_release")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one run, internal
    args = parser.parse_args()
    if args.variant:
        run_variant(args.workdir, args.variant == "release", args.maintain_every, args.sample_every)
        return
    shutil.rmtree(args.workdir, ignore_errors=True)
    landing = args.workdir / "landing"
    subprocess.run(
        [PY, "-m", "tidemark.cli", "generate", "--out", str(landing), "--hosts", str(args.hosts),
         "--minutes", str(args.minutes), "--rate", str(args.rate), "--file-span", "10"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    procs = {}
    for variant in VARIANTS:
        root = args.workdir / variant
        shutil.copytree(landing, root / "landing", copy_function=shutil.copy2)  # arrival times kept
        common = ["--maintain-every", str(args.maintain_every), "--sample-every", str(args.sample_every)]
        procs[variant] = subprocess.Popen(
            [PY, __file__, "--variant", variant, "--workdir", str(root), *common],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
    samples: dict[str, list[dict]] = {}
    for variant, proc in procs.items():
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"the {variant} run failed (exit {proc.returncode})")
        samples[variant] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    data = {"args": {k: str(v) for k, v in vars(args).items()}, "samples": samples}
    print(render(data))
    write_results("memory_release", args, samples=samples)


def render(data: dict) -> str:
    """Per run: RSS at a few points, its peak and its median over the second half, and the
    allocators' figures at its end."""
    rows = []
    for variant, samples in data["samples"].items():
        if not samples:
            continue
        last = samples[-1]
        half = [s["py_rss_mb"] for s in samples[len(samples) // 2 :]]
        rows.append(
            [
                "after each batch" if variant == "release" else "never (the code before)",
                last["batches"],
                f"{samples[0]['py_rss_mb']:.0f}",
                f"{max(s['py_rss_mb'] for s in samples):.0f}",
                f"{median(half):.0f}",
                f"{last['py_rss_mb']:.0f}",
                f"{last.get('glibc_in_use_mb', float('nan')):.0f}",
                f"{last.get('glibc_free_mb', float('nan')):.0f}",
                f"{last['arrow_pool_mb']:.0f}",
                last["py_objects"],
            ]
        )
    args = data["args"]
    return (
        f"{int(args['hosts']):,} hosts x {args['rate']} events a minute, {args['minutes']} minutes of "
        f"files read a file a batch, `tidemark maintain` every {float(args['maintain_every']):.0f} s "
        "beside each stream; the two runs side by side:\n\n"
        + md_table(
            [
                "free memory released",
                "batches",
                "RSS first (MiB)",
                "RSS peak (MiB)",
                "RSS median, 2nd half (MiB)",
                "RSS at the end (MiB)",
                "glibc in use (MiB)",
                "glibc free (MiB)",
                "Arrow pool (MiB)",
                "Python objects",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
