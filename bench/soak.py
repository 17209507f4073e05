"""Hours of micro-batches: does anything grow? Batch time, files per table, Delta log, heap.

    .venv/bin/python bench/soak.py [--hours 2] [--hosts 10000] [--rate 6] [--file-span 10]
        [--sample-every 60] [--maintain-every 0] [--maintain-from 0] [--trigger 10s]
        [--dedup-horizon 24h] [--no-zorder] [--delete-consumed] [--min-free-gb 3]

A live generator (``tidemark generate --live``, its own process) lands a file every
``--file-span`` seconds; the stream runs in this process with a ``--trigger`` processing-time
trigger. Every ``--sample-every`` seconds one sample: the batches since the last sample (count,
median and worst batch time, each phase's median), per table the live files (delta-rs), the
``_delta_log`` files and bytes, and the commits since the last checkpoint, read by a monitor
process of its own (reading Delta logs in the stream's process would count the reader's memory as
the stream's); the driver JVM's heap used after a full GC (``System.gc()`` through py4j, then the
memory MXBean), the JVM's and Python's RSS, and where the Python RSS is: glibc's heap
(``mallinfo2``: in use and free over all arenas), Arrow's pool, Python objects, threads. With
``--maintain-every N`` (minutes), ``tidemark maintain`` runs against the pipeline every N minutes
from ``--maintain-from`` minutes on, in its own process, while the stream runs, as the
maintenance DAG would. ``--dedup-horizon`` shortens the horizon so the dedup catalog (the events
within it) reaches its steady size inside the run; ``--no-zorder`` sets
``maintenance.zorder_events: false`` (an events table too large to rewrite whole every run);
``--delete-consumed`` deletes, at each sample, the landing files of the batches whose commit
marker is written (a collector's retention: at half the sustainable rate the landing area takes
~50 GB an hour); the run ends early, saying so, when the disk has less than ``--min-free-gb``
free. Samples go to ``bench/results/soak-<UTC start>.jsonl`` as they are taken; at the end a
markdown table per ``--table-every`` minutes. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    DEFAULT_WORKDIR,
    RESULTS,
    jvm_pid,
    load_line,
    machine_line,
    md_table,
    median,
    pipeline_config,
    result_header,
    rss_kb,
    session,
)

from tidemark import schemas as S
from tidemark.stream import start_stream

TABLES = (S.EVENTS, S.WINDOWS, S.LATE_EVENTS, S.QUARANTINE, S.WATERMARKS, S.HOST_PROGRESS, S.OPEN_WINDOWS)
PY = sys.executable


def table_stats(path: str) -> dict:
    """Live files, log files and bytes, commits since the newest checkpoint."""
    from deltalake import DeltaTable

    log = Path(path) / "_delta_log"
    if not log.is_dir():
        return {}
    sizes = []
    for entry in log.iterdir():  # a writer's temporary files come and go while this lists
        if entry.name.startswith("."):
            continue
        try:
            sizes.append(entry.stat().st_size)
        except FileNotFoundError:
            continue
    version = DeltaTable(path).version()
    last = log / "_last_checkpoint"
    checkpoint = json.loads(last.read_text())["version"] if last.is_file() else -1
    return {
        "files": len(DeltaTable(path).file_uris()),
        "log_files": len(sizes),
        "log_bytes": sum(sizes),
        "version": version,
        "since_checkpoint": version - checkpoint,
    }


def all_table_stats(paths: dict[str, str]) -> dict:
    return {name: table_stats(path) for name, path in paths.items()}


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
            "keepcost",
        )
    ]  # fmt: skip


def allocator_mb() -> dict:
    """This process's allocations: glibc (over all arenas; mmapped chunks apart), Arrow's pool,
    Python's objects and threads."""
    import pyarrow

    out: dict = {
        "arrow_pool_mb": round(pyarrow.total_allocated_bytes() / 2**20, 1),
        "py_objects": len(gc.get_objects()),
        "threads": threading.active_count(),
    }
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):  # not glibc ≥ 2.33
        return out
    return {
        **out,
        "glibc_in_use_mb": round((info.uordblks + info.hblkhd) / 2**20, 1),
        "glibc_free_mb": round(info.fordblks / 2**20, 1),
    }


def move_files(source: Path, target: Path, prefix: str) -> None:
    """Move each finished landing file from ``source`` into ``target`` under ``prefix``, its
    modification time kept (a rename), oldest first, every second."""
    while True:
        if source.is_dir():
            ready = [p for p in source.glob("part-*.jsonl")]
            for path in sorted(ready, key=lambda p: p.stat().st_mtime):
                os.replace(path, target / f"{prefix}{path.name}")
        time.sleep(1)


def delete_consumed(config_path: str) -> None:
    """Delete the landing files of the committed batches: the files each commit marker records
    (:func:`tidemark.checkpoint.recorded_progress`, what a reset resumes from). Runs in the monitor
    process, so its Delta read is not counted as the stream's memory."""
    from tidemark.checkpoint import committed_markers, recorded_progress
    from tidemark.config import load_config

    config = load_config(config_path)
    _, files = recorded_progress(config, committed_markers(config))
    for name in files:  # file:/... URIs, as Spark's file source logs them
        Path(unquote(urlparse(name).path)).unlink(missing_ok=True)


def phase_medians(batches: list) -> dict[str, float]:
    """Each batch phase's median seconds over ``batches`` (where a batch's time goes)."""
    names = {name for b in batches for name in b.phases}
    return {name: round(median([b.phases.get(name, 0.0) for b in batches]), 3) for name in sorted(names)}


def heap_after_gc_mb(spark) -> float:
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.gc()
    usage = jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage()
    return usage.getUsed() / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=6, help="events per host per minute")
    parser.add_argument("--file-span", type=int, default=10, help="seconds of arrivals per landing file")
    parser.add_argument("--sample-every", type=int, default=60, help="seconds between samples")
    parser.add_argument(
        "--maintain-every", type=float, default=0, help="minutes between maintenance runs (0: none)"
    )
    parser.add_argument(
        "--maintain-from", type=float, default=0, help="minutes into the run of the first one"
    )
    parser.add_argument("--trigger", default="10s", help="the stream's processing-time trigger")
    parser.add_argument("--dedup-horizon", default="24h", help="the pipeline's dedup_horizon")
    parser.add_argument(
        "--no-zorder", action="store_true", help="maintenance.zorder_events: false (events vacuumed only)"
    )
    parser.add_argument(
        "--delete-consumed", action="store_true", help="delete landing files once their batch is committed"
    )
    parser.add_argument(
        "--min-free-gb", type=float, default=3.0, help="end the run when the disk has less free"
    )
    parser.add_argument("--table-every", type=int, default=10, help="minutes per row of the final table")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "soak")
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="JSONL",
        help="continue the pipeline of an earlier run (its tables, checkpoint and landing area: a "
        "restart) and append to its samples file; minutes continue from its last sample",
    )
    args = parser.parse_args()
    print(f"machine: {machine_line()}", flush=True)
    offset, previous = 0.0, []
    if args.resume:
        lines = (json.loads(line) for line in args.resume.read_text().splitlines())
        previous = [sample for sample in lines if "minute" in sample]
        offset = previous[-1]["minute"] if previous else 0.0
    else:
        shutil.rmtree(args.workdir, ignore_errors=True)
    landing = args.workdir / "landing"
    overrides: dict = {"trigger_interval": args.trigger, "dedup_horizon": args.dedup_horizon}
    if args.no_zorder:
        overrides["maintenance"] = {"zorder_events": False}
    config = pipeline_config(args.workdir, "soak", landing, 2, **overrides)
    config_path = args.workdir / "soak.yaml"
    started = datetime.now(UTC)
    RESULTS.mkdir(exist_ok=True)
    out = args.resume or RESULTS / f"soak-{started:%Y-%m-%dT%H%M}.jsonl"
    minutes = int(args.hours * 60) + 2
    # A resumed run's generator numbers its files from 0 again: it writes beside the landing area
    # and its files are moved in under a new prefix (the file source never reads a path twice).
    target = landing
    if args.resume:
        target = args.workdir / f"incoming-{started:%H%M%S}"
        threading.Thread(
            target=move_files, args=(target, landing, f"r{started:%H%M%S}-"), daemon=True
        ).start()
    gen = subprocess.Popen(
        [PY, "-m", "tidemark.cli", "generate", "--live", "--out", str(target), "--hosts", str(args.hosts),
         "--minutes", str(minutes), "--rate", str(args.rate), "--file-span", str(args.file_span)],
        stdout=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    spark = session()
    pid = jvm_pid(spark)
    query, processor = start_stream(spark, config, once=False, echo=lambda _m: None)
    t0 = time.monotonic()
    end = t0 + args.hours * 3600
    next_maintain = t0 + args.maintain_from * 60 if args.maintain_every else float("inf")
    maint: subprocess.Popen | None = None
    maint_started = 0.0
    seen = -1  # the newest batch id sampled (the processor keeps only its newest summaries)
    samples = list(previous)
    header = result_header("soak", args)
    # The monitor: a process of its own (spawned, not forked from a process holding a JVM gateway).
    monitor = multiprocessing.get_context("spawn").Pool(1)
    paths = {t: config.table_path(t) for t in TABLES}
    with out.open("a" if args.resume else "w") as sink:
        sink.write(json.dumps({**header, "restart": True} if args.resume else header) + "\n")
        try:
            while time.monotonic() < end:
                time.sleep(args.sample_every)
                free_gb = shutil.disk_usage(args.workdir).free / 2**30
                if free_gb < args.min_free_gb:
                    sink.write(json.dumps({"ended": f"disk: {free_gb:.1f} GiB free"}) + "\n")
                    print(f"ending early: {free_gb:.1f} GiB free < {args.min_free_gb}", flush=True)
                    break
                now = time.monotonic()
                maintenance = None
                if maint is not None and maint.poll() is not None:
                    maintenance = {"exit": maint.returncode, "seconds": round(now - maint_started, 1)}
                    maint = None
                if maint is None and now >= next_maintain:
                    with open(args.workdir / "maintain.log", "a") as log:
                        # The installed tidemark (not a PYTHONPATH a frozen copy of the stream uses).
                        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                        maint = subprocess.Popen(
                            [PY, "-m", "tidemark.cli", "maintain", "--config", str(config_path)],
                            stdout=log, stderr=subprocess.STDOUT, env=env,
                        )  # fmt: skip
                    maint_started, next_maintain = now, now + args.maintain_every * 60
                if query.exception() is not None:
                    raise RuntimeError(f"stream failed: {query.exception()}")
                batches = [s for s in list(processor.summaries) if not s.skipped and s.batch_id > seen]
                seen = max((b.batch_id for b in batches), default=seen)
                secs = [b.seconds for b in batches]
                sample = {
                    "minute": round(offset + (now - t0) / 60, 1),
                    "batches": len(batches),
                    "events": sum(b.events for b in batches),
                    "batch_median_s": round(median(secs), 3) if secs else None,
                    "batch_max_s": round(max(secs), 3) if secs else None,
                    "phases_median_s": phase_medians(batches),
                    "heap_after_gc_mb": round(heap_after_gc_mb(spark), 1),
                    "jvm_rss_mb": round(rss_kb(pid)[0] / 1024, 1),
                    "py_rss_mb": round(rss_kb()[0] / 1024, 1),
                    **allocator_mb(),
                    "tables": monitor.apply(all_table_stats, (paths,)),
                    "maintenance": maintenance,
                    "load": load_line(),
                    "disk_free_gb": round(free_gb, 1),
                }
                samples.append(sample)
                if args.delete_consumed:
                    monitor.apply(delete_consumed, (str(config_path),))
                sink.write(json.dumps(sample) + "\n")
                sink.flush()
                ev = sample["tables"].get(S.EVENTS, {})
                wm = sample["tables"].get(S.WATERMARKS, {})
                print(
                    f"{sample['minute']:6.1f} min: {len(batches)} batches, "
                    f"median {sample['batch_median_s']}s, heap {sample['heap_after_gc_mb']} MiB, "
                    f"events files {ev.get('files')}, watermarks files {wm.get('files')}, "
                    f"log {wm.get('log_files')} ({load_line()})"
                    + (f"; maintenance {maintenance}" if maintenance else ""),
                    flush=True,
                )
        finally:
            monitor.terminate()
            query.stop()
            os.killpg(gen.pid, signal.SIGTERM)
            if maint is not None:
                maint.wait()
    print()
    print(summary_table(samples, args.table_every))
    print(f"\nraw samples: {out}")


def render(lines: list[dict], every: int = 10) -> str:
    """The table of one samples file (also what ``bench/report.py`` puts in the docs): its
    header, then a row per ``every`` minutes."""
    header = lines[0]
    samples = [line for line in lines if "minute" in line]
    restarts = sum(1 for line in lines[1:] if line.get("restart"))
    span = samples[-1]["minute"] if samples else 0
    args = header["args"]
    ended = [line["ended"] for line in lines if "ended" in line]
    return (
        f"{span:.0f} minutes of samples, {restarts} restart(s)"
        + (f", ended early ({ended[0]})" if ended else "")
        + f"; {args['hosts']} hosts x {args['rate']} events a minute "
        f"({int(args['hosts']) * int(args['rate']) / 60:,.0f} events/s), a file every "
        f"{args['file_span']} s, trigger {args.get('trigger', '10s')}, dedup horizon "
        f"{args.get('dedup_horizon', '24h')}, maintenance every {args['maintain_every']} min from minute "
        f"{args['maintain_from']}"
        + (" (events not ZORDERed)" if str(args.get("no_zorder")) == "True" else "")
        + (", landing files deleted once committed" if str(args.get("delete_consumed")) == "True" else "")
        + ":\n\n"
        + summary_table(samples, every)
    )


def summary_table(samples: list[dict], every: int) -> str:
    rows = []
    for start in range(0, int(max((s["minute"] for s in samples), default=0)) + 1, every):
        group = [s for s in samples if start <= s["minute"] < start + every]
        if not group:
            continue
        last = group[-1]
        before = [s["minute"] for s in samples if s["minute"] < start]
        prev = before[-1] if before else 0.0  # the minute the group's first sample counts from
        medians = [s["batch_median_s"] for s in group if s["batch_median_s"] is not None]
        worst = [s["batch_max_s"] for s in group if s["batch_max_s"] is not None]
        t = last["tables"]
        rows.append(
            [
                f"{start}-{start + every}",
                sum(s["batches"] for s in group),
                f"{sum(s['events'] for s in group) / (60 * (group[-1]['minute'] - prev)):,.0f}",
                f"{median(medians):.2f}" if medians else "",
                f"{max(worst):.2f}" if worst else "",
                *(
                    t.get(name, {}).get("files", "")
                    for name in (S.EVENTS, S.WINDOWS, S.WATERMARKS, S.HOST_PROGRESS)
                ),
                t.get(S.WATERMARKS, {}).get("log_files", ""),
                f"{sum(x.get('log_bytes', 0) for x in t.values()) / 2**20:.1f}",
                f"{last['heap_after_gc_mb']:.0f}",
                f"{last['jvm_rss_mb']:.0f}",
                f"{last['py_rss_mb']:.0f}",
                f"{last['glibc_in_use_mb']:.0f}" if "glibc_in_use_mb" in last else "",
                f"{last['glibc_free_mb']:.0f}" if "glibc_free_mb" in last else "",
                sum(1 for s in group if s["maintenance"]),
            ]
        )
    headers = [
        "minutes",
        "batches",
        "events/s",
        "batch median (s)",
        "worst (s)",
        "events files",
        "windows files",
        "watermarks files",
        "host_progress files",
        "watermarks log files",
        "all logs (MiB)",
        "heap after GC (MiB)",
        "JVM RSS (MiB)",
        "Python RSS (MiB)",
        "glibc heap in use (MiB)",
        "glibc heap free (MiB)",
        "maintenance runs ended",
    ]
    return md_table(headers, rows)


if __name__ == "__main__":
    main()
