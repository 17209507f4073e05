"""The recompute of one hour reads the files that can hold the hour, not the whole landing area,
and still counts every record of the hour: one landing late, one rewritten after it was indexed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import oracle_window_counts, write_config

from tidemark.checkpoint import normalize_file
from tidemark.generator import Scenario, iter_buckets, write_file
from tidemark.pruning import list_landing
from tidemark.recompute import recompute_windows
from tidemark.sources import parsed_range

MINUTE = 60_000
HOUR = 60 * MINUTE
# Three hours; 2 of 20 hosts are down from minute 50 to 140 and deliver the backlog when they are
# back, so records of the middle hour also land 20 minutes after it, in a file of their own time.
SCENARIO = Scenario(
    hosts=20,
    minutes=180,
    events_per_host_per_minute=4,
    lag_share=0.1,
    lag_start_minute=50,
    lag_minutes=90,
    duplicate_rate=0.05,
    malformed_rate=0.01,
    file_span_s=300,
    seed=3,
)
START = SCENARIO.start_ms + HOUR  # the hour reconciled: the middle one
END = START + HOUR


@pytest.fixture(scope="module")
def staging(tmp_path_factory) -> Path:
    """The scenario's files, each dated at the end of its arrival span (as the collector writes
    them: a file's modification time follows its records' arrival)."""
    out = tmp_path_factory.mktemp("staging")
    for index, end_ms, lines in iter_buckets(SCENARIO):
        write_file(out, index, lines, mtime=end_ms / 1000)
    return out


def _pipeline(root: Path, files: Path, name: str):
    root.mkdir(parents=True, exist_ok=True)
    config = write_config(root, name=name)
    shutil.copytree(files, config.source.path)  # copy2: modification times kept
    return config


def _recomputed(spark, config, **kwargs) -> dict[tuple[int, str], int]:
    rows = recompute_windows(spark, config, START, END, **kwargs).collect()
    return {(r.window_start_ms, r.key): r.events for r in rows}


def _uri(file: Path) -> str:
    """A file's path as Spark names it (``_metadata.file_path``)."""
    return file.as_uri().replace("file:///", "file:/")


def _files_holding_the_hour(landing: Path) -> set[str]:
    """Files with a line whose event time is in the hour (plain Python, valid or not)."""
    holding = set()
    for file in landing.glob("part-*"):
        for line in file.read_text(encoding="utf-8").splitlines():
            try:
                t = json.loads(line).get("event_time")
            except (ValueError, AttributeError):
                continue
            if isinstance(t, int) and START <= t < END:
                holding.add(_uri(file))
                break
    return holding


def _record(event_id: str, event_time: int, host: str = "h-late") -> str:
    return json.dumps(
        {
            "event_id": event_id,
            "host": host,
            "event_time": event_time,
            "msg_time": event_time,
            "key": "late",
            "value": 1.0,
        }
    )


def _oracle(landing: Path) -> dict[tuple[int, str], int]:
    counts = oracle_window_counts(landing)
    return {k: n for k, n in counts.items() if START <= k[0] < END}


def test_an_hour_out_of_three_reads_fewer_files_and_equals_the_hour_alone(spark, staging, tmp_path):
    config = _pipeline(tmp_path / "all", staging, "all")
    landing = Path(config.source.path)
    # A name the skip filter has to quote (the file is from before the hour).
    os.rename(landing / "part-000000.jsonl", landing / "part-000000 o'clock.jsonl")
    holding = _files_holding_the_hour(landing)
    (tmp_path / "alone").mkdir()
    alone = write_config(tmp_path / "alone", name="alone")
    Path(alone.source.path).mkdir(parents=True)
    for uri in holding:
        name = uri.rsplit("/", 1)[1]
        shutil.copy2(landing / name, Path(alone.source.path) / name)

    source = parsed_range(spark, config, START, END)
    files = source.files
    assert files is not None and files.indexed > 0
    assert files.before_range and files.outside_span  # both rules prune
    assert any(path.endswith("part-000000%20o'clock.jsonl") for path in files.before_range)
    read = {r.source for r in source.rows.select("source").distinct().collect()}
    everything = {_uri(f) for f in landing.glob("part-*")}
    assert holding <= read <= set(files.read) < everything
    assert len(read) <= len(everything) // 2

    pruned = _recomputed(spark, config, source=source)
    assert pruned == _recomputed(spark, alone) == _oracle(landing)
    assert sum(pruned.values()) > 0

    again = parsed_range(spark, config, START, END).files  # the index now describes every file
    assert again is not None and again.indexed == 0 and not again.to_index
    assert set(again.read) == set(files.read)


def test_a_file_landing_hours_late_or_rewritten_after_indexing_is_still_counted(spark, staging, tmp_path):
    config = _pipeline(tmp_path, staging, "late")
    landing = Path(config.source.path)
    before = _recomputed(spark, config)  # indexes every file modified since the hour began
    first = parsed_range(spark, config, START, END).files
    assert first is not None and first.indexed == 0 and first.outside_span

    # A host that was down publishes its backlog three hours after the hour.
    late = landing / "part-backlog.jsonl"
    late.write_text("\n".join(_record(f"bk-{i}", START + i * 7 * MINUTE + 5) for i in range(8)) + "\n")
    landed = (END + 3 * HOUR) / 1000
    os.utime(late, (landed, landed))
    # A file the index put outside the hour is rewritten with records of the hour.
    rewritten = landing / first.outside_span[-1].rsplit("/", 1)[1]
    with open(rewritten, "a", encoding="utf-8") as out:
        out.write("\n".join(_record(f"rw-{i}", START + i * 11 * MINUTE + 9) for i in range(5)) + "\n")

    after = _recomputed(spark, config)
    added = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
    expected: dict[tuple[int, str], int] = {}
    for t in [START + i * 7 * MINUTE + 5 for i in range(8)] + [START + i * 11 * MINUTE + 9 for i in range(5)]:
        window = (t - t % MINUTE, "late")
        expected[window] = expected.get(window, 0) + 1
    assert {k: n for k, n in added.items() if n} == expected
    everything = parsed_range(spark, config, START, END, prune=False)
    assert after == _oracle(landing) == _recomputed(spark, config, source=everything)


def test_the_landing_listing_names_each_file_as_spark_does(spark, tmp_path):
    """The landing index and the skip filter match files by Spark's name for them."""
    names = ["part 1.jsonl", "o'clock+é(2).jsonl", "100%.jsonl", "back\\slash#?[3].jsonl", "_m.json", ".t"]
    for name in names:
        (tmp_path / name).write_text('{"a": 1}\n')
    spark_names = {normalize_file(p) for p in spark.read.format("text").load(str(tmp_path)).inputFiles()}
    listed = list_landing(str(tmp_path))
    assert listed is not None and {f.path for f in listed} == spark_names and len(spark_names) == 4
