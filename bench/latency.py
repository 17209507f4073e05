"""Latency cost of each watermark: processing time from a window's end to its commit, live.

    .venv/bin/python bench/latency.py [--hosts 10000] [--minutes 14] [--rate 1]
        [--lag-minutes 10] [--regimes 0,0.0005,0.005] [--trigger 10s]

Every regime's scenario is written live (``tidemark.generator.generate_live``: event time is
now, each one-minute file lands when its minute has passed; lagging hosts are in a collector
outage of ``--lag-minutes`` from minute 1, their records landing in one burst when it ends).
While it is written, two streaming queries per regime read the same landing directory with a
``--trigger`` processing-time trigger, all in one Spark session, all regimes at once:

* Tidemark, precision 0.999 (``tidemark.stream``; ``windows.committed_at`` is when the window's
  row was committed);
* the plain Spark job of :mod:`benchlib` (``withWatermark(event_time, "2 minutes")``, windowed
  count, Delta), through ``foreachBatch`` so that each window row carries the wall-clock time of
  its batch's write.

Per system and regime: median and p99 of ``commit time - window end`` over the windows it
closed, and how many it closed. A first row per regime is the floor the records themselves set
(:func:`definition_floor`): for each window end, when the file that lets the ⌈0.999·N⌉-th host
pass it landed. No precise watermark fed only these files can close a window earlier; Tidemark's
latency above it is the trigger's wait and the batch. The queries stop ``--grace`` after the last
file. Markdown; nothing is asserted. Work directory: ``var/bench/latency``.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from accuracy import regime_label, scenario_for
from benchlib import (
    DEFAULT_WORKDIR,
    baseline_events,
    load_line,
    machine_line,
    md_table,
    pipeline_config,
    session,
    write_results,
)

from tidemark import revisions
from tidemark import schemas as S
from tidemark import tables as T
from tidemark.generator import generate_live, read_manifest
from tidemark.stream import start_stream
from tidemark.timeutil import parse_duration_ms, parse_instant_ms

TARGET = 0.999


def start_baseline(spark, landing: Path, out: Path, trigger_ms: int, delay_s: int = 120):
    """The plain Spark job, live: each batch's closed windows stamped with their write time."""
    from pyspark.sql import functions as F

    counts = (
        baseline_events(spark, landing, 1000)
        .withWatermark("ts", f"{delay_s} seconds")
        .groupBy(F.window("ts", "1 minute"), "key")
        .count()
        .select(F.unix_millis("window.start").alias("window_start_ms"), "key", F.col("count").alias("events"))
    )

    def write(batch, _batch_id: int) -> None:
        stamped = batch.withColumn("committed_at_ms", F.lit(int(time.time() * 1000)))
        stamped.write.format("delta").mode("append").save(str(out / "windows"))

    return (
        counts.writeStream.outputMode("append")
        .foreachBatch(write)
        .option("checkpointLocation", str(out / "_checkpoint"))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )


def definition_floor(landing: Path, hosts: int, ends_ms: list[int], precision: float = TARGET):
    """When the landed records first allow a precise watermark to pass each window end.

    A host passes ``W`` when a record (or heartbeat) with event time ≥ ``W`` has landed; its
    file's landing time is the file's mtime (live files are written when their span has passed).
    The window ending at ``W`` may close once ⌈precision·hosts⌉ hosts have passed it: the floor is
    that host's landing time. Returns ``(ends, floors)`` for the ends some file allows."""
    import json

    from tidemark.watermark import required_hosts

    host, event_time, landed = [], [], []
    for path in sorted(landing.glob("part-*.jsonl")):
        at = int(path.stat().st_mtime * 1000)
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
                h, et = record["host"], int(record["event_time"])
            except (ValueError, KeyError, TypeError):
                continue  # malformed lines move no host
            host.append(h)
            event_time.append(et)
            landed.append(at)
    names, host_code = np.unique(np.array(host), return_inverse=True)
    event_time_ms, landed_ms = np.array(event_time), np.array(landed)
    k = required_hosts(hosts, precision)  # the watermark's own ⌈q·N⌉
    never = np.iinfo(np.int64).max
    ends, floors = [], []
    for end in ends_ms:
        passed = event_time_ms >= end
        first = np.full(len(names), never)  # each host's first landing past `end`
        np.minimum.at(first, host_code[passed], landed_ms[passed])
        first = first[first < never]
        if len(first) >= k:
            ends.append(end)
            floors.append(np.partition(first, k - 1)[k - 1])  # the k-th host to pass it
    return np.array(ends), np.array(floors)


def latency_row(
    label: str, system: str, ends_ms: np.ndarray, commits_ms: np.ndarray, expected: int, complete: str = "-"
):
    if len(ends_ms) == 0:
        return [label, system, f"0/{expected}", complete, "-", "-", "-"]
    lat = (commits_ms - ends_ms) / 1000
    return [
        label,
        system,
        f"{len(lat)}/{expected}",
        complete,
        f"{np.median(lat):.1f}",
        f"{np.percentile(lat, 99):.1f}",
        f"{lat.max():.1f}",
    ]


HEADERS = [
    "regime",
    "system",
    "windows closed",
    "events in them vs Tidemark",
    "median latency (s)",
    "p99 latency (s)",
    "max (s)",
]


def render(data: dict) -> str:
    """The latency table of one results file (also what ``bench/report.py`` puts in the docs)."""
    a = data["args"]
    return (
        f"{int(a['hosts']):,} hosts x {a['rate']} events a minute, a landing file every {a['file_span']}, "
        f"trigger {a['trigger']}, {a['minutes']} min written live, "
        + (
            f"a heartbeat per host every {a['heartbeat_every']}"
            if a.get("heartbeat_every", "0s") != "0s"
            else "no heartbeats but the last"
        )
        + ":\n\n"
        + md_table(HEADERS, data["rows"], "llrrrrr")
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=14)
    parser.add_argument("--rate", type=int, default=1, help="events per host per minute")
    parser.add_argument("--lag-minutes", type=float, default=10.0)
    parser.add_argument("--regimes", default="0,0.0005,0.005", help="comma-separated lagging-host shares")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--trigger", default="10s", help="processing-time trigger of every query")
    parser.add_argument("--file-span", default="60s", help="a landing file per this much time")
    parser.add_argument("--delays", default="2m", help="the plain Spark job's watermark delays")
    parser.add_argument("--duplicate-rate", type=float, default=0.0, help="publisher retries")
    parser.add_argument(
        "--heartbeat-every", default="0s", help="each host's collector heartbeat interval (0s: none)"
    )
    parser.add_argument("--no-results", action="store_true", help="write no results file")
    parser.add_argument("--tag", default="", help="results file latency-<date>-TAG.json (a variant)")
    parser.add_argument("--grace", default="3m", help="how long the queries run after the last file")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "latency")
    args = parser.parse_args()
    trigger_ms, grace_ms = parse_duration_ms(args.trigger), parse_duration_ms(args.grace)
    delays = [parse_duration_ms(d.strip()) // 1000 for d in args.delays.split(",") if d.strip()]

    print(f"machine: {machine_line()}", flush=True)
    shutil.rmtree(args.workdir, ignore_errors=True)
    spark = session()
    regimes = [float(x) for x in args.regimes.split(",")]
    runs = []
    for share in regimes:
        root = args.workdir / f"lag-{share}"
        landing = root / "landing"
        landing.mkdir(parents=True)
        s = dataclasses.replace(  # the accuracy benchmark's scenario, written live
            scenario_for(args, share),
            file_span_s=parse_duration_ms(args.file_span) // 1000,
            heartbeat_every_s=parse_duration_ms(args.heartbeat_every) // 1000,
        )
        label = regime_label(s)
        runs.append((label, s, root, landing))

    # Spark's own default (no-data batches on) for the baseline; Tidemark's sessions turn it off.
    # Each query keeps the setting it started with.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    queries = [
        start_baseline(spark, landing, root / f"baseline-{d}s", trigger_ms, d)
        for _, _, root, landing in runs
        for d in delays
    ]
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    configs = []
    for i, (_, _, root, landing) in enumerate(runs):
        config = pipeline_config(
            root,
            f"latency-{i}",  # query names must differ
            landing,
            1000,
            trigger_interval=args.trigger,
            watermark={"precision": TARGET, "lag_threshold": "2m", "stall_after": "0ms"},
        )
        query, _ = start_stream(spark, config, once=False, echo=lambda m: None)
        queries.append(query)
        configs.append(config)

    writers = [
        threading.Thread(target=generate_live, args=(s, landing), daemon=True) for _, s, _, landing in runs
    ]
    started = time.monotonic()
    for w in writers:
        w.start()
    print(f"writing {len(runs)} live scenarios of {args.minutes} min ({load_line()})", flush=True)
    for w in writers:
        w.join()
    print(f"last file written after {time.monotonic() - started:.0f}s; grace {args.grace}", flush=True)
    time.sleep(grace_ms / 1000)
    for q in queries:
        q.stop()
    print(f"stopped ({load_line()})", flush=True)

    rows = []
    for (label, s, root, _), config in zip(runs, configs, strict=True):
        ends, commits = np.array([]), np.array([])
        tidemark_events: dict[int, int] = {}
        if T.table_exists(config.table_path(S.WINDOWS)):
            windows = revisions.normalized(T.read_local(config.table_path(S.WINDOWS)))
            # the first result (revision 0 of the keys with on-time records) is the commit a
            # reader waits for; revisions folding late records in come later by design
            first = windows[(windows["revision"] == 0) & (windows["late_events"] == 0)]
            end, commit = T.epoch_ms(first["window_end"]), T.epoch_ms(first["committed_at"])
            per = first.assign(end=end, commit=commit).groupby("end")["commit"].max()
            ends, commits = per.index.to_numpy(), per.to_numpy()
            newest = revisions.latest(windows)
            newest_end = T.epoch_ms(newest["window_end"])
            tidemark_events = newest.assign(end=newest_end).groupby("end")["events"].sum().to_dict()
        live = read_manifest(root / "landing")["scenario"]  # its start is when it was written
        start = parse_instant_ms(live["start"])
        window_ends = list(range(-(-start // 60_000) * 60_000, start + s.minutes * 60_000 + 1, 60_000))
        # the windows Tidemark closed, so both rows describe the same windows
        floor_ends, floors = definition_floor(
            root / "landing", s.hosts, [int(e) for e in ends] if len(ends) else window_ends
        )
        system = "floor: the landed records alone (any precise 0.999 watermark)"
        rows.append(latency_row(label, system, floor_ends, floors, s.minutes))
        rows.append(latency_row(label, "Tidemark, precise 0.999", ends, commits, s.minutes))
        for delay in delays:
            ends, commits = np.array([]), np.array([])
            complete = "-"
            baseline = str(root / f"baseline-{delay}s" / "windows")
            if T.table_exists(baseline):
                frame = T.read_local(baseline)
                per = frame.groupby("window_start_ms")["committed_at_ms"].min()
                ends, commits = per.index.to_numpy(dtype="int64") + 60_000, per.to_numpy()
                got = frame.assign(end=frame["window_start_ms"] + 60_000).groupby("end")["events"].sum()
                both = [e for e in got.index if e in tidemark_events]
                if both:
                    ratio = sum(int(got[e]) for e in both) / sum(tidemark_events[e] for e in both)
                    complete = f"{ratio:.5f} ({len(both)} windows)"
            system = f'Spark withWatermark("{delay} seconds")'
            rows.append(latency_row(label, system, ends, commits, s.minutes, complete))
    spark.stop()
    print()
    print(render({"args": vars(args) | {"workdir": str(args.workdir)}, "rows": rows}))
    print(f"\nfinished: {load_line()}")
    if not args.no_results:
        write_results("latency", args, rows=rows)


if __name__ == "__main__":
    main()
