"""Shared pieces of the comparative benchmarks: the machine line, markdown tables, pipeline
configs, and the plain Spark baseline (the job users would write without Tidemark).

The baseline is Spark Structured Streaming as documented: the same landing files read as text,
``from_json`` with a fixed schema, ``withWatermark(event_time, "2 minutes")`` (the heuristic
watermark: newest event time seen minus an allowed delay), a tumbling 1-minute windowed count
per key, appended to a Delta table. No validation, no deduplication, no late-record table: a
record older than the watermark is dropped silently (Spark counts it in the progress metric
``numRowsDroppedByWatermark``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from tidemark.config import PipelineConfig, load_config

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKDIR = ROOT / "var" / "bench"
BASELINE_SCHEMA = "event_id string, host string, event_time long, key string, value double, heartbeat boolean"


def machine_line() -> str:
    """Date, cores, RAM and load: what a reader needs to weigh absolute numbers."""
    mem_kb = 0
    with open("/proc/meminfo", encoding="ascii") as info:
        for line in info:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{now}; nproc {os.cpu_count()}; RAM {mem_kb / 1024**2:.1f} GiB; load average {load}; "
        f"Python {platform.python_version()}"
    )


RESULTS = Path(__file__).resolve().parent / "results"


ENV_SETTINGS = ("MALLOC_ARENA_MAX", "TIDEMARK_JVM_OPTIONS", "TIDEMARK_SPARK_MASTER")


def _code_state() -> tuple[str, str, bool]:
    """(HEAD's short commit, its ``spark_jobs/`` tree, uncommitted changes there)."""

    def git(*command: str) -> str:
        return subprocess.run(["git", *command], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD"), git("rev-parse", "HEAD:spark_jobs"), _dirty("spark_jobs")


def result_header(bench: str, args) -> dict:
    """What every raw result file starts with: the bench, when, on which commit and machine,
    with which arguments. The commit is the one checked out when the bench started (the code
    its process imported), not when it ended: a commit made during a run would otherwise label
    figures it never measured."""
    commit, tree, dirty = AT_START
    return {
        "bench": bench,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        # uncommitted changes when it ran, or the measured code changed during the run (then
        # bench/report.py --check refuses the figures), and anywhere in the tree
        "dirty": {"spark_jobs": dirty or _code_state()[1:] != (tree, dirty), "tree": _dirty(".")},
        "machine": machine_line(),
        "load": load_line(),
        "args": {k: str(v) for k, v in vars(args).items()},
        # settings from the environment that change what a run measures
        "env": {k: os.environ[k] for k in ENV_SETTINGS if k in os.environ},
    }


def _dirty(path: str) -> bool:
    done = subprocess.run(
        ["git", "status", "--porcelain", "--", path],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    return bool(done.stdout.strip())


# The code a bench measures: what was checked out when its process started (this import).
AT_START = _code_state()


def write_results(bench: str, args, **figures) -> Path:
    """``bench/results/<bench>-<UTC date>[-<tag>].json``: the header and the figures; prints its path."""
    RESULTS.mkdir(exist_ok=True)
    header = result_header(bench, args)
    tag = getattr(args, "tag", "")  # a variant kept beside the untagged runs (report: NAME@TAG)
    out = RESULTS / f"{bench}-{header['date'][:10]}{'-' + tag if tag else ''}.json"
    out.write_text(json.dumps({**header, **figures}, indent=1))
    print(f"\nraw results: {out}")
    return out


def load_line() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def md_table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A markdown table; ``align`` is one letter per column (l or r, default r after the first)."""
    align = align or "l" + "r" * (len(headers) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pipeline_config(
    root: Path, name: str, landing: Path, files_per_trigger: int, **overrides
) -> PipelineConfig:
    """A files pipeline under ``root`` (its own warehouse and checkpoint), local[2]."""
    data: dict = {
        "pipeline": name,
        "source": {"kind": "files", "path": str(landing), "max_files_per_trigger": files_per_trigger},
        "warehouse": str(root / "warehouse"),
        "checkpoint": str(root / "checkpoints" / name),
        "window": "1m",
        "watermark": {"precision": 0.999},
        "dedup_horizon": "24h",
        "spark": {"shuffle_partitions": 2},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return load_config(path)


def stream_once(spark: SparkSession, config: PipelineConfig) -> tuple[list, float]:
    """Run a pipeline's stream over what is there (availableNow), quietly: (the batches it ran,
    skipped replays left out; wall seconds)."""
    from tidemark.stream import start_stream

    started = time.monotonic()
    query, processor = start_stream(spark, config, once=True, echo=lambda m: None)
    query.awaitTermination()
    return [b for b in processor.summaries if not b.skipped], time.monotonic() - started


def session() -> SparkSession:
    from tidemark.sparkenv import build_session

    return build_session(app_name="tidemark-bench", shuffle_partitions=2)


def baseline_events(spark: SparkSession, landing: Path, files_per_trigger: int) -> DataFrame:
    """The landing files as the baseline parses them: events only, event time as a timestamp."""
    lines = spark.readStream.format("text").option("maxFilesPerTrigger", files_per_trigger).load(str(landing))
    return baseline_parse(lines)


def baseline_kafka_events(spark: SparkSession, bootstrap: str, topic: str, max_offsets: int) -> DataFrame:
    """A topic as the plain Spark Kafka job reads it (the same reader options as Tidemark's
    ``tidemark.kafka.read_topic``: earliest, ``maxOffsetsPerTrigger``, failOnDataLoss), parsed like
    the files."""
    from pyspark.sql import functions as F

    lines = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
        .select(F.col("value").cast("string").alias("value"))
    )
    return baseline_parse(lines)


def baseline_parse(lines: DataFrame) -> DataFrame:
    """``value`` lines as the baseline parses them: ``from_json``, events only, ``ts``."""
    from pyspark.sql import functions as F

    rec = F.from_json(F.col("value"), BASELINE_SCHEMA)
    return (
        lines.select(rec.alias("r"))
        .select("r.*")
        .where(F.col("event_id").isNotNull() & F.col("event_time").isNotNull())
        .where(~F.coalesce(F.col("heartbeat"), F.lit(False)))
        .withColumn("ts", F.timestamp_millis("event_time"))
    )


def run_baseline(
    spark: SparkSession,
    landing: Path | None,
    out: Path,
    files_per_trigger: int,
    delay: str = "2 minutes",
    events: DataFrame | None = None,
    dedup: bool = False,
) -> tuple[float, list[dict]]:
    """Run the plain Spark job over every file once (availableNow); return (wall s, progress).
    ``events`` (:func:`baseline_kafka_events`) replaces the landing files as its input. ``dedup``:
    drop publisher retries first with ``dropDuplicatesWithinWatermark("event_id")`` (Spark's own
    answer to retries, which forgets an id once the watermark passes it).

    Spark's own default, ``noDataMicroBatches.enabled=true``, is used for this query so the
    heuristic watermark can close windows after the last data batch, as it would in production
    (Tidemark's sessions turn it off; it is restored afterwards).
    """
    from pyspark.sql import functions as F

    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "true")
    try:
        watermarked = (
            events if events is not None else baseline_events(spark, landing, files_per_trigger)
        ).withWatermark("ts", delay)
        if dedup:
            watermarked = watermarked.dropDuplicatesWithinWatermark(["event_id"])
        counts = (
            watermarked.groupBy(F.window("ts", "1 minute"), "key")
            .count()
            .select(
                F.unix_millis("window.start").alias("window_start_ms"),
                "key",
                F.col("count").alias("events"),
                F.current_timestamp().alias("committed_at"),
            )
        )
        started = time.monotonic()
        query = (
            counts.writeStream.format("delta")
            .outputMode("append")
            .option("checkpointLocation", str(out / "_checkpoint"))
            .trigger(availableNow=True)
            .start(str(out / "windows"))
        )
        query.awaitTermination()
        wall = time.monotonic() - started
        progress = [json_progress(p) for p in query.recentProgress]
    finally:
        spark.conf.set(key, before)
    return wall, progress


def json_progress(p) -> dict:
    """A progress update as plain JSON data (PySpark 4 returns StreamingQueryProgress objects)."""
    return json.loads(p.json) if hasattr(p, "json") else dict(p)


def dropped_by_watermark(progress: list[dict]) -> int:
    return sum(
        int(op.get("numRowsDroppedByWatermark", 0) or 0)
        for p in progress
        for op in p.get("stateOperators", [])
    )


def rss_kb(pid: int | str = "self") -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in kB."""
    values = {"VmRSS": 0, "VmHWM": 0}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            name = line.split(":", 1)[0]
            if name in values:
                values[name] = int(line.split()[1])
    return values["VmRSS"], values["VmHWM"]


def cpu_s(pid: int | str = "self") -> float:
    """A process's CPU seconds so far (user + system, all its threads), from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jvm_pid(spark: SparkSession) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def kafka_broker_class():
    """The project's broker as the tests start it (``tests/brokers.py``), imported with the tests'
    directory on the path (the broker takes its free ports from the tests' helpers)."""
    import sys

    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.append(tests)
    from brokers import KafkaBroker

    return KafkaBroker
