"""Reconciliation speed: Tidemark's recompute-and-diff against a plain Spark read-and-count of the
same raw files, and against datacompy's Spark comparison of the same two window tables.

    .venv/bin/python bench/reconcile_speed.py [--config var/bench/throughput/round1/exactly-once.yaml]
        [--repeat 3]

Uses a pipeline a stream has already filled (by default the exactly_once pipeline
``bench/throughput.py`` leaves behind) and its landing files. In one Spark session, ``--repeat``
rounds, each timing in turn:

* ``read-and-count``: ``spark.read.text(landing).count()``;
* ``read-and-count as JSON``: ``spark.read.json(landing).count()`` (Spark's JSON reader; it
  infers the schema, which parses every line);
* ``read + from_json + count``: the raw files parsed with a fixed schema, counted;
* ``tidemark reconcile``: :func:`tidemark.reconcile.reconcile` over the scenario's range (parse
  and validate, drop retries, aggregate, three-way diff with the stream's windows and late
  events, write the ``reconciliation`` rows) — what ``tidemark reconcile`` runs;
* ``tidemark: the recompute alone``: :func:`tidemark.recompute.recompute_windows` collected, so
  the diff's share is the difference of the two rows;
* ``datacompy``: the batch recompute (same function) written to a Delta table, then
  ``datacompy.spark.SparkSQLCompare`` of the stream's ``windows`` table against it joined on
  (window_start, key), with ``matches()`` and ``report()``; reported as the two parts and their
  sum.

Medians and bests over the rounds, and their ratios; markdown; nothing is asserted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import BASELINE_SCHEMA, DEFAULT_WORKDIR, load_line, machine_line, md_table, median, session

from tidemark.config import load_config
from tidemark.generator import read_manifest
from tidemark.recompute import recompute_windows
from tidemark.reconcile import reconcile
from tidemark.timeutil import parse_instant_ms


def timed(fn) -> tuple[float, object]:
    started = time.monotonic()
    result = fn()
    return time.monotonic() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", type=Path, default=DEFAULT_WORKDIR / "throughput" / "round1" / "exactly-once.yaml"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not args.config.is_file():
        sys.exit(f"{args.config}: no such pipeline; run bench/throughput.py first (or pass --config)")
    config = load_config(args.config)
    landing = Path(config.source.path)
    manifest = read_manifest(landing)
    start_ms = parse_instant_ms(manifest["scenario"]["start"])
    end_ms = start_ms + manifest["scenario"]["minutes"] * 60_000
    scratch = args.config.parent / "reconcile-bench"
    print(f"machine: {machine_line()}", flush=True)
    print(
        f"input: {landing} ({manifest['truth']['lines']:,} lines, {manifest['truth']['files']} files); "
        f"pipeline {config.pipeline}",
        flush=True,
    )

    from pyspark.sql import functions as F

    spark = session()
    try:
        from datacompy.spark import SparkSQLCompare
    except ImportError:
        SparkSQLCompare = None

    def read_count() -> int:
        return spark.read.text(str(landing)).count()

    def json_count() -> int:
        return spark.read.json(str(landing)).count()

    def parse_count() -> int:
        raw = spark.read.text(str(landing))
        return (
            raw.select(F.from_json("value", BASELINE_SCHEMA).alias("r"))
            .where("r.event_id IS NOT NULL")
            .count()
        )

    def tidemark() -> int:
        report = reconcile(spark, config, start_ms, end_ms)
        return report.totals()["unexplained"]

    def recompute_only() -> int:
        return len(recompute_windows(spark, config, start_ms, end_ms).collect())

    def materialize() -> None:
        shutil.rmtree(scratch, ignore_errors=True)
        recompute_windows(spark, config, start_ms, end_ms).select(
            "window_start_ms", "key", "events"
        ).write.format("delta").save(str(scratch))

    def compare() -> bool:
        stream = (
            spark.read.format("delta")
            .load(config.table_path("windows"))
            .select(F.unix_millis("window_start").alias("window_start_ms"), "key", "events")
        )
        batch = spark.read.format("delta").load(str(scratch))
        cmp = SparkSQLCompare(spark, stream, batch, join_columns=["window_start_ms", "key"])
        same = cmp.matches()
        cmp.report()
        return same

    times: dict[str, list[float]] = {}
    notes: dict[str, str] = {}
    steps = [
        ("read-and-count (spark.read.text.count)", read_count),
        ("read-and-count as JSON (spark.read.json.count, schema inferred)", json_count),
        ("read + from_json + count", parse_count),
        ("tidemark reconcile (recompute-and-diff, writes its table)", tidemark),
        ("tidemark: the recompute alone, (window, key) rows collected", recompute_only),
    ]
    if SparkSQLCompare is not None:
        steps += [
            ("datacompy: batch recompute to Delta", materialize),
            ("datacompy: SparkSQLCompare", compare),
        ]
    for round_no in range(args.repeat):
        for name, fn in steps if round_no % 2 == 0 else reversed(steps):
            if name.startswith("datacompy: SparkSQLCompare") and not scratch.exists():
                materialize()
            secs, result = timed(fn)
            times.setdefault(name, []).append(secs)
            notes[name] = (
                f"{result:,}" if isinstance(result, int) and not isinstance(result, bool) else str(result)
            )
        print(f"  round {round_no + 1} done ({load_line()})", flush=True)
    spark.stop()

    base = median(times[steps[0][0]])
    base_json = median(times[steps[1][0]])
    best_json = min(times[steps[1][0]])
    rows = [
        [
            name,
            f"{median(t):.1f}",
            f"{min(t):.1f}",
            f"{median(t) / base:.2f}",
            f"{median(t) / base_json:.2f}",
            f"{min(t) / best_json:.2f}",
            notes[name],
        ]
        for name, t in times.items()
    ]
    if SparkSQLCompare is not None:
        both = median(times["datacompy: batch recompute to Delta"]) + median(
            times["datacompy: SparkSQLCompare"]
        )
        best_both = min(times["datacompy: batch recompute to Delta"]) + min(
            times["datacompy: SparkSQLCompare"]
        )
        rows.append(
            [
                "datacompy total (recompute + compare)",
                f"{both:.1f}",
                f"{best_both:.1f}",
                f"{both / base:.2f}",
                f"{both / base_json:.2f}",
                f"{best_both / best_json:.2f}",
                "",
            ]
        )
    print()
    print(
        md_table(
            [
                "step",
                f"median wall (s), {args.repeat} rounds",
                "best (s)",
                "× text read-and-count (medians)",
                "× JSON read-and-count (medians)",
                "× JSON read-and-count (bests)",
                "result",
            ],
            rows,
            "lrrrrrl",
        )
    )
    print("\nEach round's wall time (s), in the order the rounds ran:")
    for name, t in times.items():
        print(f"- {name}: {', '.join(f'{x:.2f}' for x in t)}")
    if SparkSQLCompare is None:
        print("\ndatacompy is not installed: `pip install datacompy` to add its row")
    print(f"\nfinished: {load_line()}")


if __name__ == "__main__":
    main()
