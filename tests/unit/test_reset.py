"""check_reset (tidemark.reset): ``--reset-checkpoint`` is refused unless the checkpoint is lost or
another run's, and the checking writes nothing. No Spark: identities are files, markers delta-rs."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from helpers import write_config

from tidemark.identity import IdentityError, ensure_identity, new_identity, read_identities
from tidemark.reset import check_reset
from tidemark.schemas import IDENTITY_FILE


@pytest.fixture
def started(tmp_path):
    """A pipeline whose checkpoint and tables share the identity of its first run."""
    config = write_config(tmp_path, name="rst")
    return config, ensure_identity(config)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _markers(config, **columns) -> None:
    write_deltalake(
        config.table_path("watermarks"), pa.table({"batch_id": pa.array([0, 1], pa.int64()), **columns})
    )


def test_a_checkpoint_of_the_tables_run_is_not_lost_and_the_reset_is_refused(started):
    config, identity = started
    with pytest.raises(
        IdentityError, match=rf"refused: checkpoint \S+ belongs to the tables' run {identity.run_id}"
    ):
        check_reset(config)


def test_nothing_to_reset_without_tables(tmp_path):
    config = write_config(tmp_path, name="fresh")
    with pytest.raises(IdentityError, match=r"no Tidemark tables under \S+, nothing to reset"):
        check_reset(config)


def test_a_lost_checkpoint_is_accepted_with_the_tables_identity_and_nothing_written(started, tmp_path):
    config, identity = started
    shutil.rmtree(config.checkpoint)
    before = _files(tmp_path)
    assert check_reset(config) == identity
    assert _files(tmp_path) == before
    assert read_identities(config) == (None, identity)


def _checkpoint_says(config, identity) -> None:
    Path(config.checkpoint, IDENTITY_FILE).write_text(json.dumps(asdict(identity)), encoding="utf-8")


def test_a_checkpoint_of_another_run_of_the_pipeline_is_accepted(started):
    config, identity = started
    other = new_identity(config)
    _checkpoint_says(config, other)
    assert read_identities(config) == (other, identity)
    assert check_reset(config) == identity


def test_a_checkpoint_of_another_pipeline_is_never_taken_over(started):
    config, _ = started
    _checkpoint_says(config, new_identity(config.model_copy(update={"pipeline": "stranger"})))
    with pytest.raises(IdentityError, match=r"belongs to pipeline 'stranger'.*never takes over"):
        check_reset(config)


def test_a_source_that_cannot_resume_is_refused(started):
    config, _ = started
    shutil.rmtree(config.checkpoint)
    delta = config.model_copy(update={"source": config.source.model_copy(update={"kind": "delta"})})
    with pytest.raises(IdentityError, match=r"supports source\.kind files and kafka, not delta"):
        check_reset(delta)


def test_committed_batches_must_record_their_input(started):
    config, _ = started
    shutil.rmtree(config.checkpoint)
    _markers(config)  # an older Tidemark's markers: no source_progress
    with pytest.raises(IdentityError, match=r"do not record their source progress"):
        check_reset(config)


def test_committed_batches_that_record_their_files_are_accepted(started):
    config, identity = started
    shutil.rmtree(config.checkpoint)
    progress = [json.dumps({"files": [f"/landing/part-{i}.jsonl"]}) for i in range(2)]
    _markers(config, source_progress=pa.array(progress, pa.string()))
    assert check_reset(config) == identity
