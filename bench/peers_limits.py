"""The limits outside Spark: how fast this machine reads the landing files' bytes, and how fast the
fastest JSON readers in Python parse them, alone and followed by a ``deltalake`` write.

    .cache/peers-venv/bin/python bench/peers_limits.py LANDING CLEAN OUT

``LANDING`` holds the one-minute files as every system reads them; ``CLEAN`` the same files
without their malformed lines (neither ``pyarrow.json`` nor ``polars`` skips a line that is not
JSON; the clean copy is made before any timing and has 0.01% fewer lines). Each figure is the wall
time of one pass over the page cache (the caller reads the files once before). Prints one JSON
line: seconds and rows per measurement.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

SCHEMA = {
    "event_id": "string",
    "host": "string",
    "event_time": "int64",
    "key": "string",
    "value": "float64",
    "heartbeat": "bool_",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("landing", type=Path)
    parser.add_argument("clean", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()

    import polars as pl
    import pyarrow as pa
    import pyarrow.json as pj
    from deltalake import write_deltalake

    files = sorted(args.landing.glob("part-*.jsonl"))
    clean = sorted(args.clean.glob("part-*.jsonl"))
    figures: dict[str, dict] = {}

    started = time.monotonic()
    size = sum(len(p.read_bytes()) for p in files)
    figures["raw_read"] = {"s": time.monotonic() - started, "bytes": size}

    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in SCHEMA.items()])
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")

    def arrow_table():
        return pa.concat_tables([pj.read_json(p, parse_options=options) for p in clean])

    started = time.monotonic()
    table = arrow_table()
    figures["pyarrow_json"] = {"s": time.monotonic() - started, "rows": table.num_rows}

    target = args.out / "pyarrow_delta"
    shutil.rmtree(target, ignore_errors=True)
    started = time.monotonic()
    table = arrow_table()
    write_deltalake(str(target), table, mode="append")
    figures["pyarrow_json_delta"] = {"s": time.monotonic() - started, "rows": table.num_rows}

    pl_schema = {
        "event_id": pl.String, "host": pl.String, "event_time": pl.Int64, "key": pl.String,
        "value": pl.Float64, "heartbeat": pl.Boolean,
    }  # fmt: skip
    pattern = str(args.clean / "part-*.jsonl")
    started = time.monotonic()
    frame = pl.scan_ndjson(pattern, schema=pl_schema).collect()
    figures["polars_ndjson"] = {"s": time.monotonic() - started, "rows": frame.height}

    target = args.out / "polars_delta"
    shutil.rmtree(target, ignore_errors=True)
    started = time.monotonic()
    frame = pl.scan_ndjson(pattern, schema=pl_schema).collect()
    frame.write_delta(str(target), mode="append")
    figures["polars_ndjson_delta"] = {"s": time.monotonic() - started, "rows": frame.height}
    print(json.dumps({k: {**v, "s": round(v["s"], 6)} for k, v in figures.items()}))


if __name__ == "__main__":
    main()
