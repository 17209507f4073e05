"""Landing files with equal modification times are read in name order (Spark's file source sorts
by time only; tidemark.fs.NameOrderedLocalFileSystem breaks the ties), so a host's records
split over files that land within one second are still read in the order the host wrote them."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path

from helpers import write_config

from tidemark.status import read_status
from tidemark.stream import run_stream

T0 = 1_763_805_600_000  # 2025-11-22T10:00:00Z
FILES, HOSTS, PER_MINUTE = 50, 20, 2
MAX_FILES_PER_TRIGGER = 4


def land_in_one_second(landing: Path, name=lambda i: f"part-{i:06d}.jsonl") -> Counter:
    """File ``i`` (named ``name(i)``) holds minute ``i`` of every host; the files are created in a
    shuffled order and all get the same whole-second modification time, as on S3. Returns the
    events per window."""
    landing.mkdir(parents=True)
    expected: Counter = Counter()
    order = list(range(FILES))
    random.Random(5).shuffle(order)
    for i in order:
        lines = []
        for slot in range(PER_MINUTE):
            for h in range(HOSTS):
                et = T0 + i * 60_000 + slot * 30_000 + h
                record = {"event_id": f"e{i}-{slot}-{h}", "host": f"h{h:02d}", "event_time": et}
                lines.append(json.dumps({**record, "msg_time": et + 5, "key": "k", "value": 1.0}))
                expected[T0 + i * 60_000] += 1
        (landing / name(i)).write_text("\n".join(lines) + "\n", encoding="utf-8")
    second = (T0 + FILES * 60_000) // 1000
    for path in landing.iterdir():
        os.utime(path, (second, second))
    return expected


def stream_landing(spark, workdir: Path, name: str):
    """Stream ``workdir/landing`` once, MAX_FILES_PER_TRIGGER files a batch: (config, processor)."""
    config = write_config(
        workdir,
        name,
        source={"max_files_per_trigger": MAX_FILES_PER_TRIGGER},
        watermark={"precision": 0.999},
    )
    return config, run_stream(spark, config, once=True, echo=lambda m: None)


def test_files_of_one_second_are_read_in_name_order(spark, workdir):
    expected = land_in_one_second(workdir / "landing")
    listed = os.listdir(workdir / "landing")
    # The directory itself does not list in name order, so the order below is the listing's.
    assert listed != sorted(listed)
    config, processor = stream_landing(spark, workdir, "order")

    assert processor.batches_run == -(-FILES // MAX_FILES_PER_TRIGGER)
    assert sum(s.out_of_order for s in processor.summaries) == 0
    assert not (Path(config.table_path("out_of_order")) / "_delta_log").exists()
    late = Path(config.table_path("late_events"))
    late_rows = spark.read.format("delta").load(str(late)).count() if (late / "_delta_log").is_dir() else 0
    assert late_rows == 0, f"{late_rows} records read after their window closed"
    windows = spark.read.format("delta").load(config.table_path("windows"))
    rows = windows.selectExpr("unix_millis(window_start) AS w", "events").collect()
    counted = Counter({r["w"]: r["events"] for r in rows})
    # every window the watermark passed is there, complete; only the newest stay open
    assert counted == Counter({w: n for w, n in expected.items() if w in counted})
    assert len(counted) >= FILES - 2
    assert spark.read.format("delta").load(config.table_path("events")).count() == sum(expected.values())


def behind_their_host(landing: Path, per_batch: int) -> tuple[int, set[str]]:
    """The oracle: read the files in (modification time, name) order, ``per_batch`` a batch; a
    record is out of order when its event time is below the latest its host reached in the
    batches before."""
    files = sorted(landing.iterdir(), key=lambda p: (p.stat().st_mtime_ns, p.name))
    progress: dict[str, int] = {}
    behind, hosts = 0, set()
    for start in range(0, len(files), per_batch):
        reached = dict(progress)
        for path in files[start : start + per_batch]:
            for line in path.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                host, et = record["host"], record["event_time"]
                if et < progress.get(host, et):
                    behind += 1
                    hosts.add(host)
                reached[host] = max(reached.get(host, et), et)
        progress = reached
    return behind, hosts


def test_files_named_out_of_order_are_counted_per_host_and_nothing_is_lost(spark, workdir):
    """The contract broken: file ``i`` holds minute ``i`` but is named so that name order is
    minute order backwards. Every record still lands once; the records behind their host's
    progress are counted per host in ``out_of_order`` and shown by ``tidemark watermark``."""
    expected = land_in_one_second(workdir / "landing", name=lambda i: f"part-{FILES - 1 - i:06d}.jsonl")
    behind, hosts = behind_their_host(workdir / "landing", MAX_FILES_PER_TRIGGER)
    assert behind > 0  # the scenario really reads hosts out of order
    config, processor = stream_landing(spark, workdir, "disorder")

    assert sum(s.out_of_order for s in processor.summaries) == behind
    table = spark.read.format("delta").load(config.table_path("out_of_order"))
    per_host = {
        r["host"]: r["n"] for r in table.groupBy("host").agg({"records": "sum"}).toDF("host", "n").collect()
    }
    assert set(per_host) == hosts and sum(per_host.values()) == behind
    assert spark.read.format("delta").load(config.table_path("events")).count() == sum(expected.values())
    status = read_status(config)
    assert status.out_of_order is not None and status.out_of_order.records == behind
    assert f"out of order  {behind:,} records from {len(hosts):,} hosts" in status.text()
