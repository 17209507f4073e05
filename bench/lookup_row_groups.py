"""The dedup lookup after compaction, by the Parquet row-group size ZORDER writes events with.

    .venv/bin/python bench/lookup_row_groups.py [--hosts 10000] [--minutes 60] [--sizes 128,8,4,2]
        [--rounds 20] [--suspects 2000] [--width 5]

An hour of 10,000 hosts (3.6M events) is generated and streamed into ``events``, which is then
compacted as ``tidemark maintain`` does (``OPTIMIZE ... ZORDER BY (event_time)``) into one copy
per ``--sizes`` entry (``parquet.block.size`` in MiB; 128 is Spark's default, which makes one row
group per file; 4 is what maintenance now uses: ``tidemark.maintenance.ZORDER_ROW_GROUP_BYTES``).

Per copy, in a fresh process each: ``--rounds`` lookups as a batch makes them
(``tidemark.dedup._Catalog.stored``: delta-rs and pyarrow on the driver), each for ``--suspects``
stored ids drawn from a ``--width``-minute stretch of event time (the stretch moves back a minute
per round, over the last 10 minutes); the lookup time, the process's RSS after each lookup over
its RSS before the first, and its peak RSS over that. Then per copy, in one Spark session, a full
scan (count per window, as the quality job reads events) and the copy's size. Markdown; raw figures
to ``bench/results/lookup_row_groups-<date>.json``; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

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

PY = sys.executable

# The child: lookups on one copy, with the probes the parent drew.
CHILD = r"""
import json, sys, time
import pandas as pd
from tidemark.dedup import _Catalog

def status(field):  # MiB; VmHWM is this program's peak (ru_maxrss would carry the parent's over exec)
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) // 1024 for l in f if l.startswith(field))

def rss():
    return status("VmRSS")

path, probes = sys.argv[1], json.load(open(sys.argv[2]))
catalog = _Catalog(path, probes["batch_id"], horizon_ms=10**15)
base = rss()
out = []
for ids, ranges in probes["rounds"]:
    candidates = pd.DataFrame({**ids, "arrival_ms": 0})
    began = time.perf_counter()
    found = catalog.stored(candidates, [tuple(r) for r in ranges])
    out.append({"s": time.perf_counter() - began, "rss": rss() - base, "found": len(found)})
peak = status("VmHWM") - base
print(json.dumps({"base_mb": base, "peak_mb": peak, "lookups": out}))
"""


def build(args, root: Path) -> Path:
    """Generate and stream the hour; the events table's path."""
    landing = root / "landing"
    config = pipeline_config(root, "rg", landing, 6)
    cli = [PY, "-m", "tidemark.cli"]
    began = time.monotonic()
    subprocess.run(
        [*cli, "generate", "--out", str(landing), "--hosts", str(args.hosts), "--minutes", str(args.minutes),
         "--file-span", "60"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    subprocess.run(
        [*cli, "stream", "--config", str(root / "rg.yaml"), "--once"], check=True, stdout=subprocess.DEVNULL
    )
    print(f"streamed {args.hosts} hosts x {args.minutes} min in {time.monotonic() - began:.0f}s", flush=True)
    return Path(config.table_path("events"))


def compact_copies(events: Path, root: Path, sizes: list[int]) -> dict[int, dict]:
    """One ZORDERed copy per row-group size; per copy its path, row groups, bytes, ZORDER time."""
    import pyarrow.parquet as pq

    from tidemark import tables as T

    spark = session()
    out = {}
    for size in sizes:
        copy = root / f"events-{size}mb"
        shutil.copytree(events, copy)
        spark.conf.set("parquet.block.size", str(size << 20))
        began = time.monotonic()
        spark.sql(f"OPTIMIZE delta.`{copy}` ZORDER BY (event_time)").collect()
        took = time.monotonic() - began
        files = T.open_table(str(copy)).file_uris()
        metas = [pq.ParquetFile(f).metadata for f in files]
        out[size] = {
            "path": str(copy),
            "zorder_s": round(took, 1),
            "files": len(files),
            "row_groups": sum(m.num_row_groups for m in metas),
            "rows": sum(m.num_rows for m in metas),
            "mb": round(sum(Path(f.removeprefix("file://")).stat().st_size for f in files) / 2**20, 1),
        }
        print(f"{size} MiB: {out[size]}", flush=True)
    for size in sizes:  # a full scan, median of three, after every copy exists
        times = []
        for _ in range(3):
            began = time.monotonic()
            spark.read.format("delta").load(out[size]["path"]).groupBy("window_start").count().collect()
            times.append(time.monotonic() - began)
        out[size]["scan_s"] = round(median(times), 2)
    spark.stop()
    return out


def draw_probes(events: Path, args, root: Path) -> Path:
    """Each round's ids (stored ones, so each lookup finds them all) and their time ranges."""
    import numpy as np
    import pyarrow.compute as pc

    from tidemark import tables as T
    from tidemark.dedup import time_ranges

    table = T.open_table(str(events)).to_pyarrow_table(columns=["event_id", "host", "event_time", "batch_id"])
    times = table["event_time"].to_numpy()
    ids = table["event_id"].to_numpy(zero_copy_only=False)
    hosts = table["host"].to_numpy(zero_copy_only=False)
    end = int(pc.max(table["event_time"]).as_py())
    rng = np.random.default_rng(7)
    rounds = []
    for r in range(args.rounds):
        hi = end - (r % 10) * 60_000
        pool = np.flatnonzero((times >= hi - args.width * 60_000) & (times <= hi))
        pick = rng.choice(pool, size=min(args.suspects, len(pool)), replace=False)
        found = {
            "host": hosts[pick].tolist(),
            "event_id": ids[pick].tolist(),
            "event_time": times[pick].tolist(),
        }
        rounds.append([found, time_ranges(times[pick])])
    path = root / "probes.json"
    batch_id = int(pc.max(table["batch_id"]).as_py()) + 1
    path.write_text(json.dumps({"batch_id": batch_id, "rounds": rounds}))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--sizes", default="128,8,4,2", help="parquet.block.size values, MiB")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--suspects", type=int, default=2000)
    parser.add_argument("--width", type=int, default=5, help="minutes of event time the suspects come from")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "lookup_row_groups")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(machine_line(), "|", load_line(), flush=True)
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    events = build(args, args.workdir)
    probes = draw_probes(events, args, args.workdir)
    copies = compact_copies(events, args.workdir, sizes)
    for size in sizes:
        done = subprocess.run(
            [PY, "-c", CHILD, copies[size]["path"], str(probes)], capture_output=True, text=True
        )
        # the figures are printed before exit; the exit itself may abort in a native library's
        # thread-pool teardown ("terminate called without an active exception"), after them
        if not done.stdout.strip().startswith("{"):
            raise SystemExit(
                f"lookup child for {size} MiB printed no figures (exit {done.returncode}):\n{done.stderr}"
            )
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        lookups = figures["lookups"]
        assert all(
            x["found"] == len(ids["event_id"])
            for x, (ids, _) in zip(lookups, json.loads(probes.read_text())["rounds"], strict=True)
        )
        copies[size].update(
            base_mb=figures["base_mb"],
            peak_mb=figures["peak_mb"],
            lookup_s=round(median([x["s"] for x in lookups]), 3),
            rss_median_mb=median([x["rss"] for x in lookups]),
            rss_max_mb=max(x["rss"] for x in lookups),
        )
    result = {"copies": {str(k): v for k, v in copies.items()}, "load_after": load_line()}
    print(render({**result, "args": vars(args) | {"workdir": str(args.workdir)}}))
    write_results("lookup_row_groups", args, **result)
    shutil.rmtree(args.workdir, ignore_errors=True)


def render(data: dict) -> str:
    """The table of one results file (also what ``bench/report.py`` puts in the docs)."""
    args = data["args"]
    rows = []
    for size, c in data["copies"].items():
        rows.append([
            f"{size} MiB" + (" (Spark's default)" if size == "128" else ""), c["row_groups"], c["mb"],
            c["lookup_s"], c["rss_median_mb"], c["rss_max_mb"], c["peak_mb"], c["scan_s"], c["zorder_s"],
        ])  # fmt: skip
    head = (
        f"{args['hosts']} hosts x {args['minutes']} min streamed, then ZORDERed per row-group size; "
        f"{args['rounds']} lookups of {args['suspects']} stored ids from {args['width']}-minute stretches "
        f"(fresh process per size; RSS over the process's RSS before the first lookup)."
    )
    table = md_table(
        ["parquet.block.size", "row groups", "MB", "lookup (s, median)", "RSS after (median MB)",
         "RSS after (max MB)", "peak RSS (MB)", "full scan (s)", "ZORDER (s)"],
        rows,
    )  # fmt: skip
    return f"{head}\n\n{table}\n"


if __name__ == "__main__":
    main()
