"""Latency cost of each watermark: processing time from a window's end to its commit, live.

    .venv/bin/python bench/latency.py [--hosts 10000] [--minutes 14] [--rate 1] [--window 1m]
        [--lag-minutes 10] [--regimes 0,0.0005,0.005] [--trigger 10s] [--heartbeat-every 10s]

Every regime's scenario is written live (``tidemark.generator.generate_live``: event time is
now, each file lands when its span has passed; lagging hosts are in a collector outage of
``--lag-minutes`` from minute 1, their records landing in one burst when it ends). With
``--heartbeat-every`` each host's collector also sends a heartbeat that often, at the host's own
phase within the interval (``--heartbeat-phase per-host``, drawn once per host from the seed; the
generator's own heartbeats fall on the interval's multiples, a best case: ``aligned``).
While it is written, streaming queries read the same landing directory with a ``--trigger``
processing-time trigger, all in one Spark session, all regimes at once:

* Tidemark, precision 0.999 (``tidemark.stream``; ``windows.committed_at`` is when the window's
  row was committed);
* the plain Spark job of :mod:`benchlib` (``withWatermark(event_time, DELAY)``, windowed
  count, Delta) at each of ``--delays``, through ``foreachBatch`` so that each window row carries
  the wall-clock time of its batch's write; in the first regime only, or in every one with
  ``--peer-all-regimes``.

Per system and regime: median, p99 and max of ``commit time - window end`` over the windows it
closed after its first batch (the windows the stream's first, cold batch closed are reported
apart), and how many it closed. A first row per regime is the floor the records themselves set
(:func:`definition_floor`): for each window end, when the file that lets the ⌈0.999·N⌉-th host
pass it landed. No precise watermark fed only these files can close a window earlier; Tidemark's
latency above it (its p99 is graded against one trigger + 2 s) is the trigger's wait and the
batch. The queries stop ``--grace`` after the last file. Markdown; nothing is asserted. Work
directory: ``var/bench/latency``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import random
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

from tidemark import generator, revisions
from tidemark import schemas as S
from tidemark import tables as T
from tidemark.generator import generate_live, read_manifest
from tidemark.stream import start_stream
from tidemark.timeutil import MS_PER_MINUTE, parse_duration_ms, parse_instant_ms

TARGET = 0.999
GOAL_OVER_FLOOR_MS = 2_000  # the goal: p99 <= the definition floor + one trigger + 2 s


@dataclasses.dataclass
class StaggeredHosts(generator._Hosts):
    """The generator's collectors, each heartbeating at its own phase within the interval.

    ``generator._Hosts`` puts every host's heartbeat on the interval's multiples, so a window end
    is passed by every host's heartbeat at once. Real collectors flush on their own clocks: here
    host ``h``'s ticks are ``phase[h] + k * interval``, the phases drawn once from the scenario's
    seed (a separate stream, so records, retries and delays stay what the scenario makes them). A
    heartbeat still travels with its host's delay, so it lands after every record before it."""

    @functools.cached_property
    def phases(self) -> list[int]:
        step = self.s.heartbeat_every_s * 1000
        rng = random.Random(self.s.seed ^ 0x4EA7)
        return [rng.randrange(step) for _ in self.names]

    def heartbeats(self, base: int) -> None:
        step = self.s.heartbeat_every_s * 1000
        outage_start, outage_end = self.outage
        for h, host in enumerate(self.names):
            for tick in range(base + (self.phases[h] - base) % step, base + MS_PER_MINUTE, step):
                if self.held[h] and outage_start <= tick < outage_end:
                    continue  # the collector is down: it claims nothing
                self.pending.put(
                    tick + self.delays[h], f'{{"host":"{host}","event_time":{tick},"heartbeat":true}}'
                )
                self.truth.heartbeats += 1


def start_baseline(spark, landing: Path, out: Path, trigger_ms: int, delay_s: int = 120, window_s: int = 60):
    """The plain Spark job, live: each batch's closed windows stamped with their write time."""
    from pyspark.sql import functions as F

    counts = (
        baseline_events(spark, landing, 1000)
        .withWatermark("ts", f"{delay_s} seconds")
        .groupBy(F.window("ts", f"{window_s} seconds"), "key")
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
    label: str,
    system: str,
    ends_ms: np.ndarray,
    commits_ms: np.ndarray,
    expected: int,
    complete: str = "-",
    floor: dict[int, int] | None = None,
    cold_apart: bool = True,
):
    """One system's row. The windows its first committing batch closed (the cold start: the
    session's first Delta writes and compilations) are reported apart; the median, p99 and max are
    over the others. With ``floor`` (window end -> when the landed records allowed it to close),
    also the p99 of each window's commit over its floor."""
    if len(ends_ms) == 0:
        return [label, system, f"0/{expected}", complete, "-", "-", "-", "-", "-"]
    lat = (commits_ms - ends_ms) / 1000
    cold = commits_ms == commits_ms.min() if cold_apart else np.zeros(len(lat), dtype=bool)
    cold_cell = f"{int(cold.sum())}: {lat[cold].max():.1f}" if cold.any() else "-"
    warm = lat[~cold]
    if len(warm) == 0:
        return [label, system, f"{len(lat)}/{expected}", complete, cold_cell, "-", "-", "-", "-"]
    over = "-"
    if floor is not None:
        pairs = zip(ends_ms[~cold], commits_ms[~cold], strict=True)
        excess = [(c - floor[int(e)]) / 1000 for e, c in pairs if int(e) in floor]
        over = f"{np.percentile(excess, 99):.1f}" if excess else "-"
    return [
        label,
        system,
        f"{len(lat)}/{expected}",
        complete,
        cold_cell,
        f"{np.median(warm):.1f}",
        f"{np.percentile(warm, 99):.1f}",
        f"{warm.max():.1f}",
        over,
    ]


HEADERS = [
    "regime",
    "system",
    "windows closed",
    "events in them vs Tidemark",
    "cold start: windows, max (s)",
    "median latency (s)",
    "p99 latency (s)",
    "max (s)",
    "p99 over the floor (s)",
]
# results written before the cold start was reported apart (2026-11-26 and earlier)
OLD_HEADERS = [*HEADERS[:4], *HEADERS[5:8]]


def render(data: dict) -> str:
    """The latency table of one results file (also what ``bench/report.py`` puts in the docs)."""
    a = data["args"]
    rows = data["rows"]
    headers = HEADERS if rows and len(rows[0]) == len(HEADERS) else OLD_HEADERS
    window = a.get("window", "60s")
    beats = "no heartbeats but the last"
    if a.get("heartbeat_every", "0s") != "0s":
        phase = a.get("heartbeat_phase", "aligned")
        beats = f"a heartbeat per host every {a['heartbeat_every']}" + (
            ", each host at its own phase" if phase == "per-host" else ", all on the interval's multiples"
        )
    text = (
        f"{int(a['hosts']):,} hosts x {a['rate']} events a minute, a landing file every {a['file_span']}, "
        f"trigger {a['trigger']}, {window} windows, {a['minutes']} min written live, {beats}:\n\n"
        + md_table(headers, rows, "llrr" + "r" * (len(headers) - 4))
        + "\n"
    )
    if headers is HEADERS:
        goal = parse_duration_ms(a["trigger"]) + GOAL_OVER_FLOOR_MS
        text += (
            f"\nGoal: Tidemark's p99 at most the floor + one trigger + 2 s, so p99 over the floor "
            f"<= {goal / 1000:.1f} s: "
            + "; ".join(
                f"{r[0]} {r[8]} s ({'met' if r[8] != '-' and float(r[8]) <= goal / 1000 else 'NOT met'})"
                for r in rows
                if r[1].startswith("Tidemark")
            )
            + ".\n"
        )
    return text


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
    parser.add_argument("--window", default="60s", help="the tumbling window of every query")
    parser.add_argument("--delays", default="2m", help="the plain Spark job's watermark delays")
    parser.add_argument(
        "--peer-all-regimes",
        action="store_true",
        help="the plain Spark job in every regime (default: the first)",
    )
    parser.add_argument("--duplicate-rate", type=float, default=0.0, help="publisher retries")
    parser.add_argument(
        "--heartbeat-every", default="0s", help="each host's collector heartbeat interval (0s: none)"
    )
    parser.add_argument(
        "--heartbeat-phase",
        choices=("per-host", "aligned"),
        default="per-host",
        help="each host's heartbeats at its own phase, or all on the interval's multiples",
    )
    parser.add_argument("--no-results", action="store_true", help="write no results file")
    parser.add_argument("--tag", default="", help="results file latency-<date>-TAG.json (a variant)")
    parser.add_argument("--grace", default="3m", help="how long the queries run after the last file")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "latency")
    args = parser.parse_args()
    trigger_ms, grace_ms = parse_duration_ms(args.trigger), parse_duration_ms(args.grace)
    window_ms = parse_duration_ms(args.window)
    if window_ms % 1000 or MS_PER_MINUTE % window_ms:
        raise SystemExit(f"latency: --window {args.window}: give whole seconds that divide a minute")
    if args.heartbeat_phase == "per-host":
        generator._Hosts = StaggeredHosts  # iter_buckets builds its collectors through this name
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
    peered = runs if args.peer_all_regimes else runs[:1]
    queries = [
        start_baseline(spark, landing, root / f"baseline-{d}s", trigger_ms, d, window_ms // 1000)
        for _, _, root, landing in peered
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
            window=args.window,
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
        first_end = -(-start // window_ms) * window_ms
        window_ends = list(range(first_end, start + s.minutes * MS_PER_MINUTE + 1, window_ms))
        expected = s.minutes * MS_PER_MINUTE // window_ms
        # the windows Tidemark closed, so both rows describe the same windows
        floor_ends, floors = definition_floor(
            root / "landing", s.hosts, [int(e) for e in ends] if len(ends) else window_ends
        )
        system = "floor: the landed records alone (any precise 0.999 watermark)"
        floor = dict(zip(floor_ends.tolist(), floors.tolist(), strict=True))
        rows.append(latency_row(label, system, floor_ends, floors, expected, cold_apart=False))
        rows.append(latency_row(label, "Tidemark, precise 0.999", ends, commits, expected, floor=floor))
        for delay in delays if any(root == r for _, _, r, _ in peered) else []:
            ends, commits = np.array([]), np.array([])
            complete = "-"
            baseline = str(root / f"baseline-{delay}s" / "windows")
            if T.table_exists(baseline):
                frame = T.read_local(baseline)
                per = frame.groupby("window_start_ms")["committed_at_ms"].min()
                ends, commits = per.index.to_numpy(dtype="int64") + window_ms, per.to_numpy()
                got = frame.assign(end=frame["window_start_ms"] + window_ms).groupby("end")["events"].sum()
                both = [e for e in got.index if e in tidemark_events]
                if both:
                    ratio = sum(int(got[e]) for e in both) / sum(tidemark_events[e] for e in both)
                    complete = f"{ratio:.5f} ({len(both)} windows)"
            system = f'Spark withWatermark("{delay} seconds")'
            rows.append(latency_row(label, system, ends, commits, expected, complete, floor=floor))
    spark.stop()
    print()
    print(render({"args": vars(args) | {"workdir": str(args.workdir)}, "rows": rows}))
    print(f"\nfinished: {load_line()}")
    if not args.no_results:
        write_results("latency", args, rows=rows)


if __name__ == "__main__":
    main()
