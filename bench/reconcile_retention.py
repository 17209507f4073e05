"""Reconcile cost against retention: one hour reconciled with a day of landing files present, and
with only the files holding that hour present.

    .venv/bin/python bench/reconcile_retention.py [--hosts 300] [--rate 10] [--hours 24]
        [--rounds 5] [--before-rounds 3] [--workdir var/bench/retention]
        [--source kafka [--chunk-offsets 2000]]

Generates ``--hours`` of landing files, one per minute of arrival and dated at the end of it, as a
collector writes them (1% publisher retries, 0.01% bad lines; one host is down from an hour before
the middle hour to an hour after it and delivers its backlog when it is back, so records of the
hour also land in a file dated an hour after the hour ended). The files holding any record of the
middle hour (a plain scan of their event times) are copied, modification times kept, to a second
landing directory; the files landed until two minutes after the hour (``airflow.reconcile_grace``:
what the hourly reconciliation DAG finds) are linked into a third. Each directory gets its own
pipeline (its own landing index).

``--source kafka`` does the same with topics instead of directories: the project's broker
(``scripts/kafka.sh``) is started on free ports, and each arrival span is published, keyed by host,
with the span's end as its records' timestamp, to a topic per case (the day; the spans holding a
record of the hour; those landed until two minutes after it). Each topic is its own pipeline with
``source.index_chunk_offsets`` ``--chunk-offsets`` (2,000: 2.7 minutes of one of the 4
partitions at the default rate). Choosing the input asks the broker for offsets and reads the
landing index (no Spark job).

Timed, in one Spark session, after a warm-up parse of the hour's directory (topic):

* ``cold``: the first :func:`tidemark.reconcile.reconcile` of the middle hour in each directory
  (what ``tidemark reconcile`` runs): the landing index is empty, so the files that landed more
  than ``max_clock_skew`` after the hour are indexed first;
* ``--rounds`` rounds, the order alternating: the same reconcile in each directory, the index
  built (``warm``);
* and, after each, its input alone (:func:`tidemark.sources.parsed_range`: listing, landing index
  lookup, the filters and the parse's plan; no Spark job): where the directory's size shows;
* then ``--before-rounds`` recomputes of the day directory without pruning
  (``parsed_range(prune=False)``: what every reconcile read before, collected), apart, so that
  their 4M-line jobs do not sit between the runs compared.

Medians and bests, the ratio day/hour of the warm medians, the files each case read, and the
batch totals (the day's and the hour's must agree; the hourly directory lacks the backlog, which
lands later); markdown; nothing is asserted. Regenerates the files only when
the parameters change.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    DEFAULT_WORKDIR,
    kafka_broker_class,
    load_line,
    machine_line,
    md_table,
    median,
    pipeline_config,
    session,
    write_results,
)

from tidemark.generator import Scenario, iter_buckets, write_file
from tidemark.kafka import ensure_topic, flush, produce_line, producer
from tidemark.recompute import recompute_windows
from tidemark.reconcile import reconcile
from tidemark.sources import parsed_range
from tidemark.timeutil import MS_PER_MINUTE, format_instant_ms

HOUR_MS = 60 * MS_PER_MINUTE
EVENT_TIME = re.compile(rb'"event_time":(\d+)')
PARAMS_FILE = "_bench.json"


def scenario(hosts: int, rate: int, hours: int) -> Scenario:
    middle = hours // 2
    return Scenario(
        hosts=hosts,
        minutes=hours * 60,
        events_per_host_per_minute=rate,
        lag_share=1 / hosts,  # one host
        lag_start_minute=(middle - 1) * 60,
        lag_minutes=180,
        duplicate_rate=0.01,
        malformed_rate=0.0001,
        file_span_s=60,
        seed=24,
    )


def generate(s: Scenario, landing: Path) -> tuple[int, int]:
    """Write the scenario's files, each dated at the end of its arrival minute; (files, lines)."""
    params = json.dumps({"hosts": s.hosts, "minutes": s.minutes, "rate": s.events_per_host_per_minute})
    marker = landing / PARAMS_FILE
    if marker.is_file() and marker.read_text(encoding="utf-8") == params:
        files = list(landing.glob("part-*"))
        return len(files), sum(f.read_bytes().count(b"\n") for f in files)
    shutil.rmtree(landing, ignore_errors=True)
    landing.mkdir(parents=True)
    files = lines = 0
    for index, end_ms, bucket in iter_buckets(s):
        write_file(landing, index, bucket, mtime=end_ms / 1000)
        files += 1
        lines += len(bucket)
        if files % 240 == 0:
            print(f"  generated {files:,} files, {lines:,} lines", flush=True)
    marker.write_text(params, encoding="utf-8")
    return files, lines


def copy_the_hour(landing: Path, hour_dir: Path, start_ms: int, end_ms: int) -> int:
    """Copy the files with a line whose event time is in ``[start, end)``; how many."""
    shutil.rmtree(hour_dir, ignore_errors=True)
    hour_dir.mkdir(parents=True)
    copied = 0
    for file in sorted(landing.glob("part-*")):
        if any(start_ms <= int(t) < end_ms for t in EVENT_TIME.findall(file.read_bytes())):
            shutil.copy2(file, hour_dir / file.name)
            copied += 1
    return copied


def link_until(landing: Path, out: Path, until_ms: int) -> int:
    """Hard-link (same modification time) the files modified before ``until``; how many."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    linked = 0
    for file in sorted(landing.glob("part-*")):
        if file.stat().st_mtime_ns // 1_000_000 < until_ms:
            os.link(file, out / file.name)
            linked += 1
    return linked


def publish_topics(s: Scenario, bootstrap: str, start_ms: int, end_ms: int, until_ms: int) -> dict[str, int]:
    """Publish the scenario's arrival spans to one topic per case, each record stamped with its
    span's end (the files' modification time): every span to the day's, the spans holding a record
    of ``[start, end)`` to the hour's, those landed before ``until`` to the hourly one; the spans
    each topic got."""
    for name in CASES:
        ensure_topic(bootstrap, f"retention-{name}")
    to = producer(bootstrap)
    spans = dict.fromkeys(CASES, 0)
    for index, span_end_ms, lines in iter_buckets(s):
        times = EVENT_TIME.findall("\n".join(lines).encode())
        holds_hour = any(start_ms <= int(t) < end_ms for t in times)
        targets = ["day", *(["hour"] if holds_hour else []), *(["hourly"] if span_end_ms < until_ms else [])]
        for line in lines:
            for name in targets:
                produce_line(to, f"retention-{name}", line, span_end_ms)
        for name in targets:
            spans[name] += 1
        if (index + 1) % 240 == 0:
            print(f"  published {index + 1:,} spans", flush=True)
    flush(to, bootstrap, 600)
    return spans


CASES = {
    "day": "day present",
    "hour": "the hour alone",
    "hourly": "hourly: what landed until 2 min after the hour",
}


def timed(fn) -> tuple[float, object]:
    started = time.monotonic()
    result = fn()
    return time.monotonic() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--rate", type=int, default=10, help="events per host per minute")
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before-rounds", type=int, default=3, help="recomputes without pruning")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "retention")
    parser.add_argument("--source", choices=("files", "kafka"), default="files")
    parser.add_argument("--chunk-offsets", type=int, default=2_000, help="Kafka: source.index_chunk_offsets")
    parser.add_argument("--tag", default="", help="results file suffix (report: reconcile_retention@TAG)")
    args = parser.parse_args()
    s = scenario(args.hosts, args.rate, args.hours)
    start_ms = s.start_ms + (args.hours // 2) * HOUR_MS
    end_ms = start_ms + HOUR_MS
    print(f"machine: {machine_line()}", flush=True)
    files, lines = generate(s, args.workdir / "landing-day")
    day_dir = args.workdir / "landing-day"
    until_ms = end_ms + 2 * MS_PER_MINUTE
    broker = None
    if args.source == "kafka":
        shutil.rmtree(args.workdir / "kafka", ignore_errors=True)
        broker = kafka_broker_class()(args.workdir / "kafka")
        broker.first_start()
        atexit.register(broker.stop)
        t0 = time.monotonic()
        published = publish_topics(s, broker.bootstrap, start_ms, end_ms, until_ms)
        hour_files, until = published["hour"], published["hourly"]
        print(f"published 3 topics in {time.monotonic() - t0:.0f} s", flush=True)
    else:
        hour_files = copy_the_hour(day_dir, args.workdir / "landing-hour", start_ms, end_ms)
        until = link_until(day_dir, args.workdir / "landing-hourly", until_ms)
    unit = "spans" if broker else "files"
    print(
        f"input: {args.hours} h, {args.hosts} hosts x {args.rate} events/min: {files:,} {unit}, "
        f"{lines:,} lines; reconciled hour {format_instant_ms(start_ms)} .. {format_instant_ms(end_ms)}, "
        f"held by {hour_files} {unit}; {until} {unit} landed until 2 min after it",
        flush=True,
    )
    configs = {}
    for name in CASES:
        root = args.workdir / f"pipeline-{args.source}-{name}"
        shutil.rmtree(root, ignore_errors=True)  # a new landing index each run
        source = {}
        if broker is not None:
            source = {
                "kind": "kafka",
                "path": None,
                "bootstrap_servers": broker.bootstrap,
                "topic": f"retention-{name}",
                "index_chunk_offsets": args.chunk_offsets,
            }
        configs[name] = pipeline_config(
            root, f"retention-{name}", args.workdir / f"landing-{name}", 1, source=source
        )

    spark = session()
    # Warm-up: the parse and the aggregation compiled once, no landing index written.
    warm_up = parsed_range(spark, configs["hour"], start_ms, end_ms, prune=False)
    recompute_windows(spark, configs["hour"], start_ms, end_ms, warm_up).collect()

    times: dict[str, list[float]] = {}
    notes: dict[str, str] = {}

    def run_reconcile(name: str) -> None:
        secs, report = timed(lambda: reconcile(spark, configs[name], start_ms, end_ms))
        where = CASES[name]
        key = f"reconcile, {where}"
        times.setdefault(key, []).append(secs)
        n = report.input_files
        read = f"{n.get('read', 0):,} of {n.get('listed', 0):,} files read" if n else report.input
        notes[key] = f"{read}; batch events {sum(w.batch_events for w in report.windows):,}"
        print(f"  {key}: {secs:.2f} s; {report.input}", flush=True)
        # The part that depends on what the directory holds: listing, index lookup, filters.
        choosing = f"  of which choosing the input (no Spark job), {where}"
        times.setdefault(choosing, []).append(
            timed(lambda: parsed_range(spark, configs[name], start_ms, end_ms))[0]
        )
        notes[choosing] = ""

    def unpruned() -> None:
        config = configs["day"]
        source = parsed_range(spark, config, start_ms, end_ms, prune=False)
        secs, rows = timed(lambda: recompute_windows(spark, config, start_ms, end_ms, source).collect())
        key = "recompute without pruning, day present (before)"
        times.setdefault(key, []).append(secs)
        notes[key] = f"all {files:,} {unit}; batch events {sum(r.events for r in rows):,}"
        print(f"  {key}: {secs:.2f} s", flush=True)

    cold: dict[str, float] = {}
    for name in CASES:
        cold[name], report = timed(lambda name=name: reconcile(spark, configs[name], start_ms, end_ms))
        print(f"  cold reconcile, {name}: {cold[name]:.2f} s; {report.input}", flush=True)
    for round_no in range(args.rounds):
        for name in list(CASES) if round_no % 2 == 0 else reversed(CASES):
            run_reconcile(name)
        print(f"  round {round_no + 1} done ({load_line()})", flush=True)
    for _ in range(args.before_rounds):
        unpruned()
    spark.stop()

    data = {
        "input": {"files": files, "lines": lines, "unit": unit, "hour_files": hour_files, "until": until},
        "times": times,
        "notes": notes,
        "cold": {CASES[n]: cold[n] for n in CASES},
    }
    print()
    print(render(data))
    write_results("reconcile_retention", args, **data)
    print(f"\nfinished: {load_line()}")


def render(data: dict) -> str:
    """The tables of one results file (also what ``bench/report.py`` puts in the docs): medians and
    bests per case, the ratios of the warm medians, and every run's wall time."""
    times, notes = data["times"], data["notes"]
    rows = [[name, f"{median(t):.2f}", f"{min(t):.2f}", len(t), notes[name]] for name, t in times.items()]
    rows += [
        [f"cold reconcile (empty index), {where}", f"{secs:.2f}", "", 1, ""]
        for where, secs in data["cold"].items()
    ]
    inp = data["input"]
    day, hour = times[f"reconcile, {CASES['day']}"], times[f"reconcile, {CASES['hour']}"]
    hourly = times[f"reconcile, {CASES['hourly']}"]
    before = times["recompute without pruning, day present (before)"]
    parts = [
        f"{inp['files']:,} {inp['unit']}, {inp['lines']:,} lines; the hour is held by {inp['hour_files']} "
        f"{inp['unit']}, {inp['until']} landed until 2 min after it.",
        md_table(["case", "median (s)", "best (s)", "runs", "input"], rows, "lrrrl"),
        f"day present / the hour alone (warm medians): {median(day) / median(hour):.2f}; "
        f"hourly / the hour alone: {median(hourly) / median(hour):.2f}; "
        f"without pruning / the hour alone: {median(before) / median(hour):.2f}",
        "Each run's wall time (s), in the order they ran:\n\n"
        + "\n".join(f"- {name}: {', '.join(f'{x:.2f}' for x in t)}" for name, t in times.items()),
    ]
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    main()
