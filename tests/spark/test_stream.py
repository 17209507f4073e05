"""The streaming job on real Spark + Delta, checked against the independent oracle."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from helpers import (
    commit_adds,
    oracle_good_records,
    oracle_window_counts,
    small_scenario,
    stream_window_counts,
    write_config,
)
from pyspark.sql import functions as F

from tidemark.generator import generate_files, read_manifest
from tidemark.identity import IdentityError, ensure_identity
from tidemark.stream import run_stream

# the tests read one streamed pipeline (a module fixture): one xdist worker builds it once
ONE_WORKER = True


@pytest.fixture(scope="module")
def streamed(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    config = write_config(root)
    scenario = small_scenario(max_retry_copies=2)  # a retried record is published 2 or 3 times
    truth = generate_files(scenario, config.source.path)
    processor = run_stream(spark, config, once=True, echo=lambda m: None)
    return config, scenario, truth, processor


def _table(spark, config, name):
    return spark.read.format("delta").load(config.table_path(name))


def test_streams_in_several_micro_batches(streamed):
    *_, processor = streamed
    assert len([s for s in processor.summaries if not s.skipped]) >= 5


def test_every_unique_record_is_stored_once_and_retries_are_dropped(spark, streamed):
    config, _, truth, _ = streamed
    events = _table(spark, config, "events")
    oracle = oracle_good_records(__import__("pathlib").Path(config.source.path))
    assert truth.duplicate_copies > 0
    assert events.count() == len(oracle) == truth.unique_events
    assert events.select("event_id").distinct().count() == events.count()


def test_a_record_published_three_times_minutes_apart_in_three_batches_is_stored_once(spark, streamed):
    config, scenario, _truth, _ = streamed
    # Which batch read each file, as Spark's checkpoint log says (recorded in every commit marker).
    batch_of: dict[str, int] = {}
    for row in _table(spark, config, "watermarks").select("batch_id", "source_progress").collect():
        for file in json.loads(row["source_progress"])["files"]:
            batch_of[Path(file).name] = row["batch_id"]
    copies: dict[str, list[str]] = defaultdict(list)  # a good record's line -> files it landed in
    for file in sorted(Path(config.source.path).glob("part-*.jsonl")):
        for line in file.read_text(encoding="utf-8").splitlines():
            if line.startswith('{"event_id":"') and '"event_time":' in line:
                copies[line].append(file.name)
    thrice = {json.loads(line)["event_id"]: files for line, files in copies.items() if len(files) == 3}
    span_s = scenario.file_span_s

    def minutes_apart(files: list[str]) -> bool:  # first to last copy, by their arrival files
        first, last = (int(f.removeprefix("part-").removesuffix(".jsonl")) for f in (files[0], files[-1]))
        return (last - first - 1) * span_s >= 60

    spread = [
        e for e, files in thrice.items() if len({batch_of[f] for f in files}) == 3 and minutes_apart(files)
    ]
    assert len(spread) >= 5, f"only {len(spread)} records have 3 copies minutes apart in 3 batches"
    stored = Counter(
        r["event_id"]
        for r in _table(spark, config, "events").where(F.col("event_id").isin(list(thrice))).collect()
    )
    assert stored == Counter(dict.fromkeys(thrice, 1)), "a record published 3 times was not stored once"


def test_malformed_lines_are_quarantined_with_reason_and_batch(spark, streamed):
    config, _, truth, _ = streamed
    rows = _table(spark, config, "quarantine").collect()
    assert truth.malformed_lines > 0
    assert len(rows) == truth.malformed_lines
    assert all(r["reason"] and r["raw"] and r["batch_id"] is not None for r in rows)
    reasons = Counter(r["reason"].split(":")[0] for r in rows)
    assert {"invalid JSON", "truncated JSON", "missing event_id"} <= set(reasons)


def test_windows_close_only_once_the_watermark_has_passed_them(spark, streamed):
    config, *_ = streamed
    windows = _table(spark, config, "windows")
    assert windows.count() > 0
    assert windows.where(F.col("window_end") > F.col("low_watermark")).count() == 0
    marks = [r["watermark_ms"] for r in _table(spark, config, "watermarks").orderBy("batch_id").collect()]
    assert marks == sorted(marks), "watermark moved backwards"
    # A window's on-time row (revision 0, nothing late in it) is written by the batch whose
    # watermark passed it, and the previous one had not.
    per_batch = {r["batch_id"]: r["previous_ms"] for r in _table(spark, config, "watermarks").collect()}
    first = windows.where((F.col("revision") == 0) & (F.col("late_events") == 0))
    for row in first.select("batch_id", F.unix_millis("window_end").alias("end")).collect():
        previous = per_batch[row["batch_id"]]
        assert previous is None or row["end"] > previous


def test_windows_plus_late_events_equal_the_oracle_exactly(spark, streamed):
    config, *_ = streamed
    combined, _late, duplicate_rows = stream_window_counts(spark, config)
    assert duplicate_rows == 0
    assert combined == oracle_window_counts(__import__("pathlib").Path(config.source.path))


def test_late_records_are_the_lagging_hosts_and_their_window_was_closed(spark, streamed):
    config, scenario, *_ = streamed
    late = _table(spark, config, "late_events")
    assert late.count() > 0
    hosts = {r["host"] for r in late.select("host").distinct().collect()}
    assert hosts <= set(scenario.lagging_hosts())
    assert late.where(F.col("window_end") > F.col("watermark_at_arrival")).count() == 0
    manifest = read_manifest(config.source.path)
    assert manifest["lagging_hosts"] == scenario.lagging_hosts()


def test_events_file_statistics_cover_the_filter_columns_only(spark, streamed):
    import pyarrow as pa
    from deltalake import DeltaTable

    from tidemark.schemas import EVENTS_STATS_COLUMNS

    config, *_ = streamed
    table = DeltaTable(config.table_path("events"))
    assert table.metadata().configuration["delta.dataSkippingStatsColumns"] == EVENTS_STATS_COLUMNS
    wanted = set(EVENTS_STATS_COLUMNS.split(","))
    adds = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    with_min = {
        k.removeprefix("min.")
        for k, v in adds.items()
        if k.startswith("min.") and any(x is not None for x in v)
    }
    assert with_min == wanted  # event_id, key, value, source ... carry no statistics


def test_replaying_a_committed_batch_skips_it_and_changes_nothing(spark, streamed):
    """Spark's commit of the last batch lost (a crash after the batch's commit marker, before
    Spark's own commit): the restart replays that batch, which must be skipped whole."""
    from deltalake import DeltaTable

    config, *_ = streamed
    tables = ("events", "windows", "late_events", "quarantine", "watermarks")
    before = {
        t: (DeltaTable(config.table_path(t)).version(), _table(spark, config, t).count()) for t in tables
    }
    commits = Path(config.checkpoint) / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    for lost in (commits / str(last), commits / f".{last}.crc"):  # the log file and its checksum
        lost.unlink(missing_ok=True)
    lines: list[str] = []
    processor = run_stream(spark, config, once=True, echo=lines.append)
    assert [(s.batch_id, s.skipped) for s in processor.summaries] == [(last, True)]
    assert f"[{config.pipeline}] batch {last}: already committed, replay skipped" in lines
    assert (commits / str(last)).is_file()  # Spark committed the replay
    after = {
        t: (DeltaTable(config.table_path(t)).version(), _table(spark, config, t).count()) for t in tables
    }
    assert after == before


def test_lost_checkpoint_against_existing_tables_refuses_to_start(streamed, tmp_path):
    config, *_ = streamed
    moved = tmp_path / "ck-backup"
    shutil.move(config.checkpoint, moved)
    try:
        with pytest.raises(
            IdentityError,
            match=r"checkpoint .* is missing or empty but the tables under .* were written by run",
        ):
            ensure_identity(config)
    finally:
        shutil.rmtree(config.checkpoint, ignore_errors=True)
        shutil.move(moved, config.checkpoint)
    assert ensure_identity(config).pipeline == config.pipeline


def test_checkpoint_of_another_pipeline_refuses_to_start(streamed, tmp_path):
    config, *_ = streamed
    other = write_config(tmp_path, name="other")
    ensure_identity(other)  # the other pipeline's own checkpoint + tables
    foreign = config.model_copy(update={"checkpoint": other.checkpoint})
    with pytest.raises(
        IdentityError,
        match=r"belongs to pipeline 'other' run \w+ but the tables under .* belong to pipeline 't'",
    ):
        ensure_identity(foreign)


def test_at_least_once_mode_skips_deduplication(spark, tmp_path):
    from helpers import small_scenario

    config = write_config(tmp_path, name="alo", mode="at_least_once")
    truth = generate_files(small_scenario(seed=13), config.source.path)
    run_stream(spark, config, once=True, echo=lambda m: None)
    events = _table(spark, config, "events")
    # every publisher-retry copy is stored and counted: the cheaper, duplicate-tolerant mode
    assert events.count() == truth.unique_events + truth.duplicate_copies
    assert events.select("event_id").distinct().count() == truth.unique_events
    assert _table(spark, config, "quarantine").count() == truth.malformed_lines


def test_large_batches_are_written_by_spark_with_the_same_result(spark, tmp_path, monkeypatch):
    """Batches over COLLECT_MAX_ROWS rows are written by Spark (the path of every
    production-sized batch; the small test batches otherwise take delta-rs's): as files Spark
    writes and delta-rs commits (tidemark.filecommit)."""
    from deltalake import DeltaTable

    import tidemark.batch_outputs as batch_outputs
    from tidemark.schemas import EVENTS_STATS_COLUMNS

    monkeypatch.setattr(batch_outputs, "COLLECT_MAX_ROWS", 0)
    config = write_config(tmp_path, name="big")
    truth = generate_files(small_scenario(seed=17), config.source.path)
    run_stream(spark, config, once=True, echo=lambda m: None)
    events = DeltaTable(config.table_path("events"))
    # delta-rs creates events, late events and quarantine empty; every commit after that adds
    # files that Spark wrote into a directory of the batch (no commit is Spark's Delta writer's).
    for table in ("events", "late_events", "quarantine"):
        path = Path(config.table_path(table))
        *appends, first = DeltaTable(str(path)).history()
        assert first["operation"] == "CREATE TABLE" and appends, table
        for commit in appends:
            assert "Apache-Spark" not in str(commit.get("engineInfo", "")), table
            adds = commit_adds(path, commit["version"])
            assert adds and all(a["path"].startswith("tm-") for a in adds), table
    assert events.metadata().configuration["delta.dataSkippingStatsColumns"] == EVENTS_STATS_COLUMNS
    assert events.to_pyarrow_dataset().count_rows() == truth.unique_events
    combined, late, duplicate_rows = stream_window_counts(spark, config)
    assert late and duplicate_rows == 0
    assert combined == oracle_window_counts(Path(config.source.path))
    assert _table(spark, config, "quarantine").count() == truth.malformed_lines


def test_spark_delta_writes_skip_the_dictionary_for_per_row_unique_columns(spark, tmp_path):
    """The session's Parquet settings reach Delta writes: a column named like a per-row-unique
    event column is written plain even when its values repeat; any other column keeps the
    dictionary. (Unique values end up plain either way: the setting saves the attempt.)"""
    import pyarrow.parquet as pq

    from tidemark.sparkenv import PLAIN_ENCODED_COLUMNS

    repeated = F.concat(F.lit("v"), (F.col("id") % 3).cast("string"))
    frame = spark.range(3000).select(
        *(repeated.alias(c) for c in PLAIN_ENCODED_COLUMNS), repeated.alias("host")
    )
    frame.coalesce(1).write.format("delta").save(str(tmp_path / "t"))
    part = pq.ParquetFile(next((tmp_path / "t").glob("*.parquet"))).metadata.row_group(0)
    encodings = {part.column(i).path_in_schema: part.column(i).encodings for i in range(part.num_columns)}
    dictionary = {c for c, used in encodings.items() if any("DICTIONARY" in e for e in used)}
    assert dictionary == {"host"}


def test_a_column_call_sends_no_call_site_to_the_jvm(spark, monkeypatch):
    """A Tidemark session does not record the Python call site of each Column call
    (``spark.python.sql.dataFrameDebugging.enabled``, tidemark.sparkenv): with it on, this
    expression takes 48 py4j round trips instead of 8, and the record parser ~3,700 instead of
    ~1,200, on every job's start and in every batch."""
    client = spark.sparkContext._gateway._gateway_client
    F.col("warm") + 1  # the first call reads the setting, once per process
    sent: list[str] = []
    send = client.send_command

    def counted(command, *args, **kwargs):
        sent.append(command)
        return send(command, *args, **kwargs)

    monkeypatch.setattr(client, "send_command", counted)
    _ = (F.col("a") + 1) > F.col("b")
    assert not [c for c in sent if "PySparkCurrentOrigin" in c]
    assert len(sent) <= 12, f"{len(sent)} py4j round trips for four Column calls"


def _parse_stage(query) -> tuple[str, str]:
    """(plan, generated Java) of the last batch's whole-stage-codegen stage that reads the source."""
    stages = query._jsq.streamingQuery().lastExecution().debug().codegenToSeq()
    found = [(stages.apply(i)._1(), stages.apply(i)._2()) for i in range(stages.length())]
    # A stage's plan string goes on below it; the one that reads the files has the shortest.
    reading = [stage for stage in found if "FileScan" in stage[0]]
    assert reading, "no codegen stage reads the source"
    return min(reading, key=lambda stage: len(stage[0]))


@pytest.mark.parametrize("mode", ["exactly_once", "at_least_once"])
def test_the_parsing_stage_compiles_to_the_same_code_in_every_batch(spark, tmp_path, mode):
    """Spark inlines literals into generated code: a per-batch value (the batch timestamp, a
    random seed) in the stage that parses would make every micro-batch compile that large class
    again and run it cold. Two runs of the same pipeline, minutes of input apart, must generate
    the same parsing code."""
    from tidemark.records import NATIVE_UDF
    from tidemark.stream import start_stream

    config = write_config(tmp_path, name="cg", mode=mode)
    generate_files(small_scenario(seed=21), config.source.path)
    files = sorted(Path(config.source.path).glob("part-*.jsonl"))
    hold = tmp_path / "later"
    hold.mkdir()
    for f in files[len(files) // 2 :]:
        shutil.move(str(f), hold / f.name)
    codes = []
    for _ in range(2):
        query, processor = start_stream(spark, config, once=True, echo=lambda m: None)
        query.awaitTermination()
        assert [s for s in processor.summaries if not s.skipped and s.events]
        codes.append(_parse_stage(query))
        for f in sorted(hold.iterdir()):
            shutil.move(str(f), Path(config.source.path) / f.name)
    (plan, code), (_, again) = codes
    assert NATIVE_UDF in plan and "reason" in plan  # the stage that parses and validates
    assert code == again
