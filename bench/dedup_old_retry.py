"""Dedup under old retries: a retry 20 hours after its original, against 24 hours of stored events.

    .venv/bin/python bench/dedup_old_retry.py [--hosts 500] [--rate 6] [--hours 24]
        [--retry-age-hours 20] [--retries 200] [--rounds 5]

exactly_once looks a batch's candidates up in the events earlier batches stored, by the
candidates' event-time ranges (:func:`tidemark.dedup.time_ranges`), which Delta's file statistics
prune the catalog's files by. This script builds a real 24-hour catalog by streaming 24 hours of
generated landing files (5-minute files, one per batch: 288 batches), then lands probe files,
each one batch:

* ``fresh``: a new minute of events from every host (nothing to look up but ties);
* ``recent retries``: the same, plus ``--retries`` copies of records from the last hour;
* ``old + recent retries``: the same, plus ``--retries`` copies of records from
  ``--retry-age-hours`` before the end.

Per probe: the batch time and its dedup phases, the ids looked up and the retries dropped. Then
the catalog lookup itself, on the 24-hour catalog, for the old + recent candidates: the files
Delta's statistics leave to read and the lookup time, with the ranges the code uses and with one
[min, max] range over every candidate (what it did before: a scan of everything in between),
medians of ``--rounds``. Markdown; raw figures to ``bench/results/dedup_old_retry-<date>.json``;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pandas as pd
from benchlib import (
    DEFAULT_WORKDIR,
    load_line,
    machine_line,
    md_table,
    median,
    pipeline_config,
    session,
    write_results,
)

from tidemark import schemas as S
from tidemark.dedup import _Catalog, time_ranges
from tidemark.generator import Scenario, generate_files, write_file
from tidemark.stream import start_stream

SPAN_S = 300


def event_lines(path: Path, count: int) -> list[str]:
    """The first ``count`` event lines of a landing file (copies of them are retries)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if '"key"' in line and '"event_id":"h' in line:
            out.append(line)
            if len(out) == count:
                break
    return out


def fresh_lines(hosts: list[str], at_ms: int, tag: str) -> list[str]:
    return [
        f'{{"event_id":"{h}-{tag}","host":"{h}","event_time":{at_ms + i},"msg_time":{at_ms + i},'
        f'"key":"view","value":1.0}}'
        for i, h in enumerate(hosts)
    ]


def run_batch(spark, config) -> dict:
    query, processor = start_stream(spark, config, once=True, echo=lambda _m: None)
    query.awaitTermination()
    done = [s for s in processor.summaries if not s.skipped]
    s = done[-1]
    return {
        "batches": len(done),
        "seconds": round(s.seconds, 3),
        "events": s.events,
        "looked_up": s.retries_looked_up,
        "dropped": s.retries_dropped,
        "phases": {k: round(v, 3) for k, v in s.phases.items() if k.startswith("dedup")},
    }


def lookup(catalog: _Catalog, candidates: pd.DataFrame, ranges: list[tuple[int, int]], rounds: int) -> dict:
    from deltalake import DeltaTable

    dataset = DeltaTable(catalog.path).to_pyarrow_dataset()
    files = len(list(dataset.get_fragments(filter=catalog.lookup_filter(ranges))))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        found = catalog.stored(candidates, ranges)
        times.append(time.perf_counter() - t0)
    return {"ranges": len(ranges), "files": files, "seconds": round(median(times), 4), "found": len(found)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--rate", type=int, default=6, help="events per host per minute")
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--retry-age-hours", type=float, default=20)
    parser.add_argument("--retries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "dedup_old_retry")
    args = parser.parse_args()
    print(f"machine: {machine_line()}", flush=True)
    shutil.rmtree(args.workdir, ignore_errors=True)
    landing = args.workdir / "landing"
    s = Scenario(
        hosts=args.hosts,
        minutes=args.hours * 60,
        events_per_host_per_minute=args.rate,
        lag_share=0.0,
        lag_minutes=0.0,
        file_span_s=SPAN_S,
        final_heartbeat=False,
    )
    t0 = time.monotonic()
    truth = generate_files(s, landing)
    print(f"input: {truth.lines:,} lines in {truth.files} files, generated in {time.monotonic() - t0:.0f}s")
    spark = session()
    config = pipeline_config(args.workdir, "old-retry", landing, 1, mode="exactly_once")
    t0 = time.monotonic()
    query, processor = start_stream(spark, config, once=True, echo=lambda _m: None)
    query.awaitTermination()
    stored = sum(x.events for x in processor.summaries)
    print(
        f"catalog: {stored:,} events stored by {len(processor.summaries)} batches in "
        f"{time.monotonic() - t0:.0f}s ({load_line()})",
        flush=True,
    )
    files = sorted(landing.glob("part-*.jsonl"))
    per_hour = 3600 // SPAN_S
    old = event_lines(files[int((args.hours - args.retry_age_hours) * per_hour)], args.retries)
    recent = event_lines(files[-2], args.retries)
    end = s.start_ms + args.hours * 3_600_000
    hosts = s.host_names
    probes = {
        "fresh": fresh_lines(hosts, end + 60_000, "p1"),
        "recent retries": fresh_lines(hosts, end + 120_000, "p2") + recent,
        "old + recent retries": fresh_lines(hosts, end + 180_000, "p3") + recent + old,
    }
    results: dict = {"probes": {}, "lookup": {}}
    for i, (name, lines) in enumerate(probes.items()):
        write_file(landing, 900_000 + i, lines)
        results["probes"][name] = {**run_batch(spark, config), "lines": len(lines)}
    # The lookup itself on the 24-hour catalog, for the old + recent candidates.
    records = [json.loads(x) for x in recent + old]
    candidates = pd.DataFrame(
        {
            "host": [c["host"] for c in records],
            "event_id": [c["event_id"] for c in records],
            "event_time": [c["event_time"] for c in records],
            "arrival_ms": end,
        }
    )
    times = candidates["event_time"].tolist()
    catalog = _Catalog(config.table_path(S.EVENTS), batch_id=10**9, horizon_ms=config.dedup_horizon)
    from deltalake import DeltaTable

    results["lookup"]["catalog_files"] = len(DeltaTable(catalog.path).file_uris())
    results["lookup"]["per range"] = lookup(catalog, candidates, time_ranges(times), args.rounds)
    results["lookup"]["one [min, max]"] = lookup(catalog, candidates, [(min(times), max(times))], args.rounds)
    out = write_results("dedup_old_retry", args, catalog_events=stored, **results)
    print()
    print(render(json.loads(out.read_text())))


PROBE_HEADER = [
    "probe batch", "lines", "ids looked up", "retries dropped", "batch (s)", "catalog lookup (s)", "route",
]  # fmt: skip


def _lookup_phase(phases: dict) -> tuple[str, str]:
    """The batch's catalog lookup and the route that timed it: ``dedup_lookup`` when the suspects
    were resolved on the driver; ``dedup_whole`` when the whole batch was (small batches), a phase
    that holds the lookup and the resolution around it."""
    if "dedup_whole" in phases and "dedup_lookup" not in phases:
        return f"{phases['dedup_whole']:.3f}", "whole batch (`dedup_whole`)"
    return f"{phases.get('dedup_lookup', 0.0):.3f}", "suspects on the driver (`dedup_lookup`)"


def render(data: dict) -> str:
    """The tables of one results file (also what ``bench/report.py`` puts in the docs)."""
    probes = md_table(
        PROBE_HEADER,
        [
            [
                name,
                f"{r.get('lines', r['events'] + r['dropped']):,}",  # each line an event or a retry
                f"{r['looked_up']:,}",
                f"{r['dropped']:,}",
                f"{r['seconds']:.2f}",
                *_lookup_phase(r["phases"]),
            ]
            for name, r in data["probes"].items()
        ],
    )
    total = data["lookup"]["catalog_files"]
    lookups = md_table(
        [
            "lookup of the old + recent candidates",
            "ranges",
            "files read (of the catalog's)",
            "ids found",
            f"seconds (median of {data['args']['rounds']})",
        ],
        [
            [k, v["ranges"], f"{v['files']:,} of {total:,}", v["found"], f"{v['seconds']:.3f}"]
            for k, v in data["lookup"].items()
            if isinstance(v, dict)
        ],
    )
    return (
        f"catalog: {data['catalog_events']:,} events stored over {data['args']['hours']} hours\n\n"
        + probes
        + "\n\n"
        + lookups
    )


if __name__ == "__main__":
    main()
