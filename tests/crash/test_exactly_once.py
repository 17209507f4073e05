"""Exactly-once under crashes: SIGKILL the streaming job (and its JVM) at chosen points inside a
micro-batch and at random moments, restart it from its checkpoint until the input is consumed,
and compare with an independent recompute: zero lost, zero duplicated, zero unexplained."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_exactly_once, commit_adds, kafka_pipeline, small_scenario, write_config

from tidemark.config import load_config
from tidemark.generator import generate_files
from tidemark.reconcile import reconcile

JOB_TIMEOUT_S = 300


def start_job(config_path: Path, kill_at: str | None = None, flags: tuple[str, ...] = ()) -> subprocess.Popen:
    env = {**os.environ, "TIDEMARK_SPARK_LOG_LEVEL": "ERROR"}
    env.pop("TIDEMARK_KILL_AT", None)
    if kill_at:
        env["TIDEMARK_KILL_AT"] = kill_at
    return subprocess.Popen(
        [sys.executable, "-m", "tidemark.cli", "stream", "--config", str(config_path), "--once", *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a kill takes the JVM down too
    )


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"streaming job did not finish in {JOB_TIMEOUT_S}s:\n{out[-3000:]}")
    return proc.returncode, out


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def _spark_log_entries(checkpoint: Path) -> int:
    """Batches Spark has planned or committed in a checkpoint (its offset and commit log files)."""
    return sum(1 for log in ("offsets", "commits") for _ in (checkpoint / log).glob("[0-9]*"))


def kill_at_random_moments(
    config_path: Path, rng: random.Random, low: float, high: float, kills: int = 5
) -> list[tuple[float, bool]]:
    """Start the job and SIGKILL it (with its JVM) ``kills`` times, each a random ``low``-``high`` s
    after the run's first write to Spark's offset or commit log, so that the kill lands inside the
    stream however long the JVM takes to start. Returns (delay, killed while running) per kill."""
    checkpoint = Path(load_config(config_path).checkpoint)
    outcomes = []
    for _ in range(kills):
        delay = round(rng.uniform(low, high), 1)
        before = _spark_log_entries(checkpoint)
        proc = start_job(config_path)
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while proc.poll() is None and _spark_log_entries(checkpoint) == before:
            if time.monotonic() > deadline:
                kill_group(proc)
                pytest.fail(f"the job wrote nothing to {checkpoint} in {JOB_TIMEOUT_S}s")
            time.sleep(0.1)
        time.sleep(delay)
        running = proc.poll() is None
        kill_group(proc)
        outcomes.append((delay, running))
    return outcomes


def assert_kills_landed(outcomes: list[tuple[float, bool]], at_least: int) -> None:
    landed = sum(running for _delay, running in outcomes)
    assert landed >= at_least, f"only {landed} kills hit a running job: {outcomes}"


@pytest.fixture
def pipeline(tmp_path):
    # A 2-minute allowed lateness: the late records revise their windows and later batches make
    # the windows final, so the kills below land among revision writes too.
    config = write_config(tmp_path, name="crash", window={"size": "1m", "allowed_lateness": "2m"})
    truth = generate_files(small_scenario(), config.source.path)
    return tmp_path / "crash.yaml", config, truth


# One kill right after every write a batch makes, so every restart replays a batch that is
# committed in some tables and not in others. In this scenario the two lagging hosts' outage
# backlog, the late records, lands in batch 4: there every write is a boundary, one kill each, so
# each restart replays batch 4 one write further on. Between the late records' arrival (events,
# late_events) and the revision's commit (windows, the revisable state, the marker), a kill
# must neither lose nor double-count them.
KILL_POINTS = [
    "after:quarantine@0",
    "after:windows@2",
    "after:events@4",
    "after:late_events@4",
    "after:windows@4",
    "after:_state/host_progress@4",
    "after:_state/open_windows@4",
    "after:_state/revisable_windows@4",
    "before:watermarks@4",
    "after:watermarks@7",
]


def test_kills_after_each_write_inside_a_batch_lose_and_duplicate_nothing(spark, pipeline):
    config_path, config, truth = pipeline
    for point in KILL_POINTS:
        code, out = finish(start_job(config_path, kill_at=point))
        assert code == -signal.SIGKILL, f"kill point {point} was not reached:\n{out[-3000:]}"
        assert f"SIGKILL at {point.split('@')[0]}" in out
    code, out = finish(start_job(config_path))
    assert code == 0, out[-3000:]
    # The last kill came after batch 7's commit marker, before Spark's commit: the restart
    # replays batch 7 and must skip it whole, saying so, and run no other batch twice.
    assert "batch 7: already committed, replay skipped" in out, out[-3000:]
    assert out.count("already committed, replay skipped") == 1, out[-3000:]
    assert_exactly_once(spark, config, truth)  # revisions: latest + late beyond, on-time + late
    report = reconcile(spark, config, config_start(truth, config), config_end(config))
    assert report.closed and all(w.unexplained == 0 for w in report.closed)
    # the late records were folded in (once) and windows were made final
    assert sum(w.late_folded for w in report.closed) > 0 and any(w.final for w in report.closed)
    assert all(w.alignment == 1.0 for w in report.closed), report.table()


@pytest.mark.parametrize("per_row_work", ["driver", "executors"])
def test_a_kill_between_a_large_batchs_files_and_their_commit_loses_and_duplicates_nothing(
    spark, tmp_path, per_row_work
):
    """Batches over COLLECT_MAX_ROWS events append as Parquet files Spark writes and delta-rs
    commits (tidemark.filecommit). SIGKILL after batch 1's event files are written, before their
    commit: the restart replays the batch, writes its files again and commits them once; the
    first attempt's files stay unreferenced (VACUUM's to remove). With the per-row work on the
    executors too (``spark.per_row_work``: the replay finds the same suspects and counts)."""
    from tidemark.batch_outputs import COLLECT_MAX_ROWS

    config = write_config(
        tmp_path, name="big", source={"max_files_per_trigger": 4}, spark={"per_row_work": per_row_work}
    )
    truth = generate_files(small_scenario(hosts=1000, seed=29), config.source.path)
    assert truth.unique_events / 3 > COLLECT_MAX_ROWS  # three batches of 4 files, each over it
    config_path = tmp_path / "big.yaml"
    code, out = finish(start_job(config_path, kill_at="files:events@1"))
    assert code == -signal.SIGKILL, f"kill point not reached:\n{out[-3000:]}"
    events = Path(config.table_path("events"))
    orphans = {p.name for p in events.glob("tm-1-*")}
    assert len(orphans) == 1
    code, out = finish(start_job(config_path))
    assert code == 0, out[-3000:]
    committed = set()
    for log in (events / "_delta_log").glob("*.json"):
        committed |= {a["path"].split("/")[0] for a in commit_adds(events, int(log.stem))}
    assert {d for d in committed if d.startswith("tm-1-")} and not orphans & committed
    assert_exactly_once(spark, config, truth)
    report = reconcile(spark, config, config_start(truth, config), config_end(config))
    assert report.closed and all(w.unexplained == 0 for w in report.closed), report.table()


def test_random_kills_then_restart_equal_the_batch_recompute(spark, tmp_path):
    # Its own pipeline, with more and smaller batches than the fixture's (~32 instead of 6): the
    # job got fast enough that the fixture's input was done before the fourth kill 0.5-5 s into
    # a run could land.
    config = write_config(tmp_path, name="crash", source={"max_files_per_trigger": 1})
    truth = generate_files(small_scenario(minutes=16), config.source.path)
    config_path = tmp_path / "crash.yaml"
    outcomes = kill_at_random_moments(config_path, random.Random(20261122), 0.5, 5.0)
    assert_kills_landed(outcomes, at_least=4)
    code, out = finish(start_job(config_path))
    assert code == 0, out[-3000:]
    assert_exactly_once(spark, config, truth)
    report = reconcile(spark, config, config_start(truth, config), config_end(config))
    assert all(w.unexplained == 0 for w in report.closed), report.table()
    print(f"random kills (delay after the run's first batch log write, s; job running): {outcomes}")


def config_start(truth, config) -> int:
    from tidemark.generator import read_manifest
    from tidemark.timeutil import parse_instant_ms

    return parse_instant_ms(read_manifest(config.source.path)["scenario"]["start"])


def config_end(config) -> int:
    from tidemark.generator import read_manifest

    s = read_manifest(config.source.path)["scenario"]
    return s["start_ms"] + s["minutes"] * 60_000


def test_random_kills_with_the_kafka_source_equal_the_recompute(spark, kafka, tmp_path):
    scenario, config, oracle_config, truth = kafka_pipeline(tmp_path, kafka, "clicks-kills")
    config_path = tmp_path / "kfk.yaml"
    # Smaller batches than the helper's (~10 instead of ~5), so that five kills land inside the input.
    config_path.write_text(
        config_path.read_text().replace("max_offsets_per_trigger: 700", "max_offsets_per_trigger: 350")
    )
    assert load_config(config_path).source.max_offsets_per_trigger == 350
    outcomes = kill_at_random_moments(config_path, random.Random(4), 0.5, 5.0)
    assert_kills_landed(outcomes, at_least=4)
    code, out = finish(start_job(config_path))
    assert code == 0, out[-3000:]
    assert_exactly_once(spark, config.model_copy(update={"source": oracle_config.source}), truth)
    report = reconcile(spark, config, scenario.start_ms, scenario.end_ms)
    assert all(w.unexplained == 0 for w in report.closed), report.table()
    print(f"random kills (delay after the run's first batch log write, s; job running): {outcomes}")


def _committed_events(config) -> int:
    from tidemark.tables import read_local, table_exists

    path = config.table_path("watermarks")
    return int(read_local(path)["events"].sum()) if table_exists(path) else 0


def test_broker_stopped_and_restarted_mid_stream_loses_and_duplicates_nothing(spark, kafka, tmp_path):
    _scenario, config, oracle_config, truth = kafka_pipeline(tmp_path, kafka, "clicks-outage", name="kout")
    config_path = tmp_path / "kout.yaml"
    config_path.write_text(
        config_path.read_text().replace("trigger_interval: 10s", "") + "trigger_interval: 1s\n"
    )
    env_job = [sys.executable, "-m", "tidemark.cli", "stream", "--config", str(config_path)]

    def start_continuous() -> subprocess.Popen:
        return subprocess.Popen(
            env_job, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )

    job = start_continuous()
    deadline = time.monotonic() + 240
    while _committed_events(config) == 0 and time.monotonic() < deadline:
        time.sleep(1)
    assert _committed_events(config) > 0, "no batch committed before the broker outage"
    try:
        kafka.stop()
        time.sleep(8)
    finally:
        kafka.start()  # the broker is shared by the session
    restarts = 0
    while _committed_events(config) < truth.unique_events and time.monotonic() < deadline + 240:
        if job.poll() is not None:  # it failed while the broker was away: restart it, as the supervisor does
            restarts += 1
            job = start_continuous()
        time.sleep(2)
    kill_group(job)
    assert _committed_events(config) == truth.unique_events
    assert_exactly_once(spark, config.model_copy(update={"source": oracle_config.source}), truth)
    print(f"job restarts after the broker outage: {restarts}")
