"""Tidemark against the peers a user would pick instead, and against the limits, in paired rounds.

    .venv/bin/python bench/peers.py [--hosts 10000] [--minutes 50] [--rate 2] [--rounds 5]
        [--sizes 1,10,50]

One scenario (1% publisher retries, 0.01% malformed lines, 0.05% of hosts in an outage) is
generated into ``var/bench/peers/landing`` as one-minute files. Every round runs, on those files:

* ``exactly_once`` / ``at_least_once``: ``tidemark.stream`` in that mode, allowed lateness 2 min;
* ``spark_peer`` (issue 41, 1a): plain Spark at its best as its docs write it: the JSON file
  source with its schema (one parse per line, in the scan), ``withWatermark("2 minutes")`` +
  ``dropDuplicatesWithinWatermark("event_id")``, and in ``foreachBatch`` (the batch persisted) the
  events appended to Delta idempotently (``txnAppId``/``txnVersion``) and the batch's one-minute
  counts per key MERGEd into a Delta windows table (idempotent through the session's
  ``spark.databricks.delta.write.txnAppId``/``txnVersion``);
* ``spark_parse``: the limit of Spark: the same JSON source with the full schema into the no-op
  sink;

each at ``--sizes`` files per trigger (availableNow), all in one Spark session (local[2]); and once
per round (no triggers):

* ``flink`` (1b): ``bench/peers_flink.py``, PyFlink 2.3 at parallelism 2 (the same two cores), in
  the peers' venv (``scripts/peers_venv.sh``);
* ``limits``: ``bench/peers_limits.py``: a raw read of the bytes from the page cache,
  ``pyarrow.json`` and ``polars.scan_ndjson``, alone and followed by a ``deltalake`` write.

The order of the round's runs alternates: forwards in odd rounds, backwards in even ones, so no
system always runs first or on the warmest cache. Rates are input lines over the run's wall time
(query start to end; Flink's job from submit to end, its mini-cluster start apart). Ratios are
paired: Tidemark's run over the peer's run *of the same round*; the tables give their median and
spread (min-max) over the rounds, never a best-of. The plans that show each line parsed once are
kept in the results (``explain``). Raw results: ``bench/results/peers-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    BASELINE_SCHEMA,
    DEFAULT_WORKDIR,
    ROOT,
    dropped_by_watermark,
    json_progress,
    load_line,
    machine_line,
    md_table,
    median,
    pipeline_config,
    session,
    write_results,
)

from tidemark.generator import Scenario, generate_files
from tidemark.stream import start_stream

PEERS_PYTHON = ROOT / ".cache" / "peers-venv" / "bin" / "python"
SPARK_SYSTEMS = ("exactly_once", "at_least_once", "spark_peer", "spark_parse")
LIMITS = ("raw_read", "pyarrow_json", "pyarrow_json_delta", "polars_ndjson", "polars_ndjson_delta")
LABELS = {
    "exactly_once": "Tidemark exactly_once",
    "at_least_once": "Tidemark at_least_once",
    "spark_peer": "plain Spark at its best (1a)",
    "spark_parse": "Spark JSON read + full parse, no-op sink",
    "flink": "Flink 2.3 SQL, parallelism 2 (1b)",
    "raw_read": "raw read of the bytes (page cache)",
    "pyarrow_json": "pyarrow.json",
    "pyarrow_json_delta": "pyarrow.json + deltalake write",
    "polars_ndjson": "polars.scan_ndjson",
    "polars_ndjson_delta": "polars.scan_ndjson + write_delta",
}
# issue 41's goals: (name, numerator, denominator, at least)
GOALS = (
    ("exactly_once >= 1.5x the plain-Spark peer", "exactly_once", "spark_peer", 1.5),
    ("exactly_once >= 1.0x Flink, per core", "exactly_once", "flink", 1.0),
    ("exactly_once >= 0.5x the Spark read+parse limit", "exactly_once", "spark_parse", 0.5),
    ("at_least_once >= 0.65x the Spark read+parse limit", "at_least_once", "spark_parse", 0.65),
)
DELAY = "2 minutes"


def run_tidemark(spark, system: str, root: Path, landing: Path, k: int) -> dict:
    config = pipeline_config(
        root,
        system.replace("_", "-"),
        landing,
        k,
        mode=system,
        window={"size": "1m", "allowed_lateness": "2m"},
    )
    started = time.monotonic()
    query, processor = start_stream(spark, config, once=True, echo=lambda m: None)
    query.awaitTermination()
    wall = time.monotonic() - started
    done = [s for s in processor.summaries if not s.skipped]
    phases: dict[str, float] = defaultdict(float)
    for summary in done:
        for name, secs in summary.phases.items():
            phases[name] += secs
    return {
        "wall_s": wall,
        "batches": len(done),
        "events": sum(s.events for s in done),
        "batch_s": round(sum(s.seconds for s in done), 2),
        "phases_s": {name: round(secs, 2) for name, secs in phases.items()},
    }


def run_spark_peer(spark, root: Path, landing: Path, k: int) -> dict:
    """Issue 41's 1a, as Spark's and Delta's docs write it (see the module's docstring)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    events_path, windows_path = str(root / "events"), str(root / "windows")
    app = f"peer-{uuid.uuid4().hex[:8]}"
    events = (
        spark.readStream.schema(BASELINE_SCHEMA)
        .option("maxFilesPerTrigger", k)
        .json(str(landing / "part-*.jsonl"))
        .where(F.col("event_id").isNotNull() & F.col("event_time").isNotNull())
        .where(~F.coalesce(F.col("heartbeat"), F.lit(False)))
        .withColumn("ts", F.timestamp_millis("event_time"))
        .withWatermark("ts", DELAY)
        .dropDuplicatesWithinWatermark(["event_id"])
    )

    def write(batch, batch_id: int) -> None:
        session_ = batch.sparkSession
        batch.persist()
        try:
            (
                batch.drop("ts").write.format("delta").mode("append")
                .option("txnAppId", app).option("txnVersion", batch_id).save(events_path)
            )  # fmt: skip
            counts = (
                batch.groupBy(F.window("ts", "1 minute").start.alias("start"), "key")
                .agg(F.count("*").alias("events"))
                .select(F.unix_millis("start").alias("window_start_ms"), "key", "events")
            )
            if not DeltaTable.isDeltaTable(session_, windows_path):
                (
                    counts.write.format("delta").mode("append")
                    .option("txnAppId", app + "-w").option("txnVersion", batch_id).save(windows_path)
                )  # fmt: skip
                return
            session_.conf.set("spark.databricks.delta.write.txnAppId", app + "-w")
            session_.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
            try:
                (
                    DeltaTable.forPath(session_, windows_path).alias("t")
                    .merge(counts.alias("s"), "t.window_start_ms = s.window_start_ms AND t.key = s.key")
                    .whenMatchedUpdate(set={"events": "t.events + s.events"})
                    .whenNotMatchedInsertAll()
                    .execute()
                )  # fmt: skip
            finally:
                session_.conf.unset("spark.databricks.delta.write.txnAppId")
                session_.conf.unset("spark.databricks.delta.write.txnVersion")
        finally:
            batch.unpersist()

    started = time.monotonic()
    query = (
        events.writeStream.foreachBatch(write)
        .option("checkpointLocation", str(root / "_checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.monotonic() - started
    plan = query._jsq.explainInternal(False)
    progress = [json_progress(p) for p in query.recentProgress]
    stored = spark.read.format("delta").load(events_path).count()
    return {
        "wall_s": wall,
        "batches": data_batches(progress),
        "events": stored,
        "dropped_by_watermark": dropped_by_watermark(progress),
        "plan": plan,
    }


def data_batches(progress: list[dict]) -> int:
    """Micro-batches that read input (the no-data batches Spark adds left out)."""
    return sum(1 for p in progress if p.get("numInputRows"))


def run_spark_parse(spark, root: Path, landing: Path, k: int) -> dict:
    started = time.monotonic()
    query = (
        spark.readStream.schema(BASELINE_SCHEMA)
        .option("maxFilesPerTrigger", k)
        .json(str(landing / "part-*.jsonl"))
        .writeStream.format("noop")
        .option("checkpointLocation", str(root / "_checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.monotonic() - started
    progress = [json_progress(p) for p in query.recentProgress]
    return {
        "wall_s": wall,
        "batches": data_batches(progress),
        "plan": query._jsq.explainInternal(False),
    }


def run_flink(root: Path, landing: Path) -> dict:
    started = time.monotonic()
    done = subprocess.run(
        [str(PEERS_PYTHON), str(ROOT / "bench" / "peers_flink.py"), str(landing), str(root)],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"peers: the Flink job failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["process_s"] = round(time.monotonic() - started, 2)
    out["wall_s"] = out["job_s"]
    return out


def run_limits(root: Path, landing: Path, clean: Path) -> dict:
    done = subprocess.run(
        [str(PEERS_PYTHON), str(ROOT / "bench" / "peers_limits.py"), str(landing), str(clean), str(root)],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"peers: the limits failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


FIELD_TYPES = {
    "event_id": (str,), "host": (str,), "event_time": (int,), "key": (str,), "value": (int, float),
    "heartbeat": (bool,),
}  # fmt: skip


def conforms(line: str) -> bool:
    """A JSON object whose fields present have the schema's types (what pyarrow.json needs)."""
    try:
        record = json.loads(line)
    except ValueError:
        return False
    if not isinstance(record, dict):
        return False
    for name, value in record.items():
        kinds = FIELD_TYPES.get(name)
        if value is None or kinds is None:
            continue
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            return False
    return True


def run_one(spark, system: str, k: int, root: Path, landing: Path, clean: Path) -> dict:
    if system in ("exactly_once", "at_least_once"):
        return run_tidemark(spark, system, root, landing, k)
    if system == "spark_peer":
        return run_spark_peer(spark, root, landing, k)
    if system == "spark_parse":
        return run_spark_parse(spark, root, landing, k)
    if system == "flink":
        return run_flink(root, landing)
    return run_limits(root, landing, clean)


def clean_copy(landing: Path, clean: Path) -> int:
    """The landing files without their lines that are not JSON objects of the schema's types (the
    malformed lines neither pyarrow.json nor polars skips); the lines dropped."""
    shutil.rmtree(clean, ignore_errors=True)
    clean.mkdir(parents=True)
    dropped = 0
    for path in sorted(landing.glob("part-*.jsonl")):
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if conforms(line):
                kept.append(line)
            else:
                dropped += 1
        (clean / path.name).write_text("\n".join(kept) + "\n", encoding="utf-8")
    return dropped


def round_plan(sizes: list[int], r: int) -> list[tuple[str, int]]:
    """Round ``r``'s runs: forwards when r is even (0-based), backwards when odd."""
    plan = [(system, k) for k in sizes for system in SPARK_SYSTEMS] + [("flink", 0), ("limits", 0)]
    return plan if r % 2 == 0 else plan[::-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=50)
    parser.add_argument("--rate", type=int, default=2, help="events per host per minute")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="1,10,50", help="files per trigger")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "peers")
    parser.add_argument("--tag", default="", help="results file suffix (report: peers@TAG)")
    args = parser.parse_args()
    if not PEERS_PYTHON.exists():
        raise SystemExit(f"peers: no {PEERS_PYTHON}: run scripts/peers_venv.sh first (PyFlink, polars)")
    sizes = [int(s) for s in args.sizes.split(",")]

    print(f"machine: {machine_line()}", flush=True)
    shutil.rmtree(args.workdir, ignore_errors=True)
    landing, clean = args.workdir / "landing", args.workdir / "clean"
    scenario = Scenario(hosts=args.hosts, minutes=args.minutes, events_per_host_per_minute=args.rate)
    truth = generate_files(scenario, landing)
    dropped = clean_copy(landing, clean)
    print(
        f"input: {truth.lines:,} lines in {truth.files} files ({truth.unique_events:,} unique events, "
        f"{truth.duplicate_copies:,} retry copies, {truth.malformed_lines:,} malformed, "
        f"{truth.heartbeats:,} heartbeats); clean copy without {dropped} non-JSON lines",
        flush=True,
    )
    spark = session()
    runs: list[dict] = []
    plans: dict[str, str] = {}
    for r in range(args.rounds):
        plan = round_plan(sizes, r)
        print(f"round {r + 1}: {', '.join(f'{s}@{k}' if k else s for s, k in plan)}", flush=True)
        for system, k in plan:
            root = args.workdir / "runs" / f"{system}-{k}-{r}"
            shutil.rmtree(root, ignore_errors=True)
            try:
                out = run_one(spark, system, k, root, landing, clean)
            except (Exception, SystemExit) as exc:  # one failed run does not cost the others
                runs.append({"round": r + 1, "system": system, "k": k, "error": str(exc)[-2000:]})
                print(f"  {system}{f' @{k}' if k else ''}: FAILED: {str(exc)[-300:]}", flush=True)
                continue
            for name in ("plan",):
                if name in out:
                    plans[f"{system}@{k}" if k else system] = out.pop(name)
            if system == "limits":
                for limit, figures in out.items():
                    runs.append({"round": r + 1, "system": limit, "k": 0, **figures, "wall_s": figures["s"]})
                took = ", ".join(f"{name} {figures['s']:.2f}s" for name, figures in out.items())
                print(f"  limits: {took}", flush=True)
            else:
                runs.append(
                    {"round": r + 1, "system": system, "k": k, **out, "wall_s": round(out["wall_s"], 2)}
                )
                at = f" @{k}" if k else ""
                stored = f", {out['events']:,} events" if "events" in out else ""
                print(f"  {system}{at}: {out['wall_s']:.1f}s{stored} ({load_line()})", flush=True)
            shutil.rmtree(root, ignore_errors=True)
    spark.stop()
    data = {
        "input": {
            "lines": truth.lines, "files": truth.files, "unique_events": truth.unique_events,
            "clean_lines": truth.lines - dropped,
        },
        "sizes": sizes,
        "runs": runs,
        "plans": plans,
        "versions": versions(),
    }  # fmt: skip
    write_results("peers", args, **data)  # first: a rendering bug must not cost the measurements
    print()
    print(render(data))


def versions() -> dict:
    done = subprocess.run(
        [str(PEERS_PYTHON), "-c", "import importlib.metadata as m, json; print(json.dumps({p: m.version(p) "
         "for p in ('apache-flink', 'polars', 'pyarrow', 'deltalake')}))"],
        capture_output=True, text=True,
    )  # fmt: skip
    import pyspark

    return {"pyspark": pyspark.__version__, **(json.loads(done.stdout) if done.returncode == 0 else {})}


def rates(data: dict) -> dict[tuple[str, int], dict[int, float]]:
    """(system, files per trigger) -> {round: lines a second}; the limits at size 0."""
    lines, clean = data["input"]["lines"], data["input"]["clean_lines"]
    out: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    for run in data["runs"]:
        if "error" in run:
            continue
        n = clean if run["system"] in LIMITS[1:] else lines
        out[(run["system"], run["k"])][run["round"]] = n / max(run["wall_s"], 1e-6)
    return out


def paired(rate: dict, num: tuple[str, int], den: tuple[str, int]) -> list[float]:
    rounds = sorted(set(rate.get(num, {})) & set(rate.get(den, {})))
    return [rate[num][r] / rate[den][r] for r in rounds]


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    return f"{fmt.format(median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def median_run(runs: list[dict], system: str, k: int, needs: str = "wall_s") -> dict | None:
    """The run of ``system`` at ``k`` files per trigger with the median wall time (the lower of
    the two middle ones), among the runs that recorded ``needs``; None when there is none."""
    done = sorted(
        (r for r in runs if r["system"] == system and r["k"] == k and needs in r), key=lambda r: r["wall_s"]
    )
    return done[(len(done) - 1) // 2] if done else None


def render(data: dict) -> str:
    """The tables of one results file (also what ``bench/report.py`` puts in the docs)."""
    rate = rates(data)
    sizes = data["sizes"]
    rounds = max(r["round"] for r in data["runs"])
    inp = data["input"]
    parts = [
        f"{inp['lines']:,} lines in {inp['files']} one-minute files "
        f"({inp['unique_events']:,} unique events); "
        f"{rounds} paired rounds, the order reversed every other round; versions: "
        + ", ".join(f"{k} {v}" for k, v in data.get("versions", {}).items())
        + "."
    ]
    rows = []
    for system in SPARK_SYSTEMS:
        rows.append([LABELS[system], *(spread(list(rate[(system, k)].values()), "{:,.0f}") for k in sizes)])
    for system in ("flink", *LIMITS):
        if (system, 0) in rate:
            cells = [spread(list(rate[(system, 0)].values()), "{:,.0f}")] + [""] * (len(sizes) - 1)
            rows.append([LABELS[system], *cells])
    parts.append(
        "Lines a second, median (min-max) over the rounds, per files per trigger (Flink and the "
        "limits have no triggers; their figure is in the first column):\n\n"
        + md_table(["system", *(f"{k} files/trigger" for k in sizes)], rows)
    )
    rows = []
    for goal, num, den, least in GOALS:
        for k in sizes:
            ratios = paired(rate, (num, k), (den, 0 if den == "flink" else k))
            if not ratios:
                continue
            rows.append([goal, k, spread(ratios), "met" if median(ratios) >= least else "NOT met"])
    parts.append(
        "The goals as paired ratios (Tidemark's run over the peer's run of the same round), "
        "median (min-max):\n\n" + md_table(["goal", "files/trigger", "paired ratio", "verdict"], rows, "lrrl")
    )
    rows = []
    for system in ("exactly_once", "at_least_once"):
        for limit in LIMITS:
            cells = [spread(paired(rate, (system, k), (limit, 0))) for k in sizes]
            rows.append([LABELS[system], LABELS[limit], *cells])
    parts.append(
        "Tidemark as a fraction of each limit outside Spark (paired per round):\n\n"
        + md_table(["system", "limit", *(f"{k} files/trigger" for k in sizes)], rows, "ll" + "r" * len(sizes))
    )
    rows = []
    for system in ("exactly_once", "at_least_once"):
        for k in sizes:
            mid = median_run(data["runs"], system, k, "phases_s")
            if mid is None:
                continue
            top = sorted(mid["phases_s"].items(), key=lambda item: -item[1])[:6]
            rows.append(
                [system, k, f"{mid['wall_s']:.1f}", mid["batches"], f"{mid['batch_s']:.1f}",
                 ", ".join(f"{name} {secs:.1f}" for name, secs in top)]
            )  # fmt: skip
    if rows:
        parts.append(
            "Where Tidemark's median run spent its time (wall; its batches' own time, the rest being "
            "Spark's trigger, listing and offsets; the largest phases summed over the batches, s):\n\n"
            + md_table(
                ["mode", "files/trigger", "wall (s)", "batches", "in batches (s)", "largest phases"],
                rows,
                "lrrrrl",
            )
        )
    failed = [f"{r['system']}@{r['k']} round {r['round']}" for r in data["runs"] if "error" in r]
    if failed:
        parts.append("Runs that failed (left out above): " + ", ".join(failed) + ".")
    stored = defaultdict(set)
    for run in data["runs"]:
        if "events" in run:
            stored[run["system"]].add(run["events"])
    parts.append(
        "Events each system stored (every run): "
        + "; ".join(f"{LABELS[s]}: {', '.join(f'{n:,}' for n in sorted(v))}" for s, v in stored.items())
        + f". Unique events in the input: {inp['unique_events']:,}."
    )
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    main()
