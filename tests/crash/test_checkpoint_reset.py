"""``--reset-checkpoint``: after a lost or foreign checkpoint the job refuses to start; with the
flag it starts a new run identity that resumes where the committed batches stopped. The rest of
the input, including publisher retries of records committed before the reset, then ends exactly
as the independent oracle says: nothing skipped, nothing repeated, 0 unexplained."""

from __future__ import annotations

import json
import re
import shutil
import signal
from pathlib import Path

from helpers import assert_exactly_once, small_scenario, write_config
from test_exactly_once import finish, start_job

from tidemark.cli import main
from tidemark.generator import generate_files
from tidemark.identity import ensure_identity, read_identities
from tidemark.kafka import publish_scenario
from tidemark.reconcile import reconcile
from tidemark.stream import run_stream
from tidemark.tables import read_local

PRE_RESET_SPANS = 6  # arrival spans (files) committed before the checkpoint is lost
FILES_PER_BATCH = 3


def _event_ids(lines) -> list[str]:
    ids = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("event_id"), str):
            ids.append(record["event_id"])
    return ids


def _retries_of_committed(files_before: list[Path], files_after: list[Path]) -> int:
    """Retry copies arriving after the reset of records that arrived before it."""

    def ids(files: list[Path]) -> list[str]:
        return _event_ids(line for f in files for line in f.read_text().splitlines())

    before = set(ids(files_before))
    return sum(1 for i in ids(files_after) if i in before)


def _markers(config):
    return read_local(config.table_path("watermarks")).sort_values("batch_id").reset_index(drop=True)


def _refusal(config_path: Path, capsys) -> str:
    capsys.readouterr()
    assert main(["stream", "--config", str(config_path), "--once"]) == 2
    return capsys.readouterr().err


def _assert_continues(config, old_run: str, last_before) -> None:
    """The new run's first batch builds on the old run's last committed state."""
    _ck, identity = read_identities(config)
    assert identity.previous_run_id == old_run and identity.run_id != old_run
    assert identity.batch_offset == last_before["batch_id"] + 1
    marks = _markers(config)
    first = marks[marks["batch_id"] == identity.batch_offset].iloc[0]
    assert first["run_id"] == identity.run_id
    assert first["previous_ms"] == last_before["watermark_ms"]
    assert first["watermark_ms"] >= last_before["watermark_ms"]
    assert first["hosts_seen"] >= last_before["hosts_seen"] > 0  # host progress was not restarted


def test_lost_checkpoint_reset_resumes_the_files_exactly_even_when_killed_in_its_first_batch(
    spark, tmp_path, capsys
):
    config = write_config(tmp_path, name="rst", source={"max_files_per_trigger": FILES_PER_BATCH})
    config_path = tmp_path / "rst.yaml"
    scenario = small_scenario(minutes=4, seed=41)
    truth = generate_files(scenario, config.source.path)
    files = sorted(Path(config.source.path).glob("part-*.jsonl"))
    before, after = files[:PRE_RESET_SPANS], files[PRE_RESET_SPANS:]
    assert _retries_of_committed(before, after) > 0, "the scenario must retry committed records"
    # The old run commits the first spans, then dies inside the next batch right after its events
    # commit: those rows are in `events` without a commit marker when the checkpoint is lost.
    crashed = PRE_RESET_SPANS // FILES_PER_BATCH
    code, out = finish(start_job(config_path, kill_at=f"after:events@{crashed}"))
    assert code == -signal.SIGKILL, f"the old run did not reach its kill point:\n{out[-3000:]}"
    old_run = read_identities(config)[1].run_id
    last_before = _markers(config).iloc[-1]
    assert last_before["batch_id"] == crashed - 1
    uncommitted = read_local(config.table_path("events")).query(f"batch_id == {crashed}")
    assert len(uncommitted) > 0

    shutil.rmtree(config.checkpoint)
    assert re.fullmatch(
        r"tidemark: error: checkpoint \S+ is missing or empty but the tables under \S+ were written "
        rf"by run {old_run}; restore that checkpoint .*, or, if it is lost for good, start a new run "
        r"identity with --reset-checkpoint\n",
        _refusal(config_path, capsys),
    )

    # The reset deletes the crashed batch's rows (its files are read again). The new checkpoint
    # lists the committed files again (their lines are dropped: 2 empty batches); kill the first
    # batch that has data, right after its events commit.
    kill_at = f"after:events@{last_before['batch_id'] + 1 + PRE_RESET_SPANS // FILES_PER_BATCH}"
    code, out = finish(start_job(config_path, kill_at=kill_at, flags=("--reset-checkpoint",)))
    assert code == -signal.SIGKILL, f"kill point {kill_at} was not reached:\n{out[-3000:]}"
    assert "checkpoint reset: run" in out
    events = read_local(config.table_path("events"))
    assert set(events["batch_id"]) == {*range(crashed), last_before["batch_id"] + 1 + crashed}
    run_stream(spark, config, once=True, echo=lambda m: None)  # plain restart, no flag

    assert_exactly_once(spark, config, truth)
    _assert_continues(config, old_run, last_before)
    report = reconcile(spark, config, scenario.start_ms, scenario.end_ms, write=False)
    assert report.closed and all(w.unexplained == 0 for w in report.closed), report.table()


def test_foreign_checkpoint_reset_resumes_kafka_at_the_committed_offsets(spark, kafka, tmp_path, capsys):
    scenario = small_scenario(minutes=4, seed=43)
    source = {
        "kind": "kafka",
        "bootstrap_servers": kafka.bootstrap,
        "topic": "clicks-reset",
        "max_offsets_per_trigger": 700,
        "path": None,
    }
    config = write_config(tmp_path, name="krst", source=source)
    config_path = tmp_path / "krst.yaml"
    oracle = write_config(tmp_path, name="krst-oracle")  # the same scenario as files, for the oracle
    truth = generate_files(scenario, oracle.source.path)
    publish_scenario(scenario, kafka.bootstrap, "clicks-reset", spans=range(PRE_RESET_SPANS))
    run_stream(spark, config, once=True, echo=lambda m: None)
    old_run = read_identities(config)[1].run_id
    last_before = _markers(config).iloc[-1]

    # A foreign checkpoint: another run of this pipeline (say, restored from an old backup).
    (tmp_path / "old").mkdir()
    foreign = write_config(tmp_path / "old", name="krst", source=source)
    foreign_run = ensure_identity(foreign).run_id
    shutil.rmtree(config.checkpoint)
    shutil.copytree(foreign.checkpoint, config.checkpoint)
    assert re.fullmatch(
        rf"tidemark: error: checkpoint \S+ belongs to pipeline 'krst' run {foreign_run} but the tables "
        rf"under \S+ belong to pipeline 'krst' run {old_run}; point `checkpoint:` at this pipeline's "
        r"own checkpoint, or, if it is lost for good, .*--reset-checkpoint\n",
        _refusal(config_path, capsys),
    )

    publish_scenario(scenario, kafka.bootstrap, "clicks-reset", spans=range(PRE_RESET_SPANS, 10**6))
    assert main(["stream", "--config", str(config_path), "--once", "--reset-checkpoint"]) == 0
    (aside,) = Path(config.checkpoint).parent.glob("krst.before-reset-*")
    assert json.loads((aside / "_tidemark.json").read_text())["run_id"] == foreign_run  # moved, not deleted

    assert_exactly_once(spark, config.model_copy(update={"source": oracle.source}), truth)
    _assert_continues(config, old_run, last_before)
    report = reconcile(spark, config, scenario.start_ms, scenario.end_ms, write=False)
    assert report.closed and all(w.unexplained == 0 for w in report.closed), report.table()


def test_reset_is_refused_while_the_checkpoint_belongs_to_the_tables(tmp_path, capsys):
    config = write_config(tmp_path, name="keep")
    ensure_identity(config)
    capsys.readouterr()
    assert main(["stream", "--config", str(tmp_path / "keep.yaml"), "--once", "--reset-checkpoint"]) == 2
    assert re.fullmatch(
        r"tidemark: error: --reset-checkpoint refused: checkpoint \S+ belongs to the tables' run \w+; "
        r"it is not lost, start without --reset-checkpoint\n",
        capsys.readouterr().err,
    )
