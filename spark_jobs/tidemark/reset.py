"""``--reset-checkpoint``: a new run identity over existing tables when the checkpoint is lost.

A lost (or foreign) checkpoint makes the job refuse to start, because a fresh checkpoint would
re-read the source from the beginning. The reset starts a new run instead, and earlier writes are
neither skipped nor repeated:

* **Where the committed batches stopped.** Every batch records, in its watermark row (the commit
  marker, written last), the source input it covered (:mod:`tidemark.checkpoint`).
* **A new identity.** The reset moves the old checkpoint aside (never deletes it) and writes a new
  run id (so a new Delta ``txnAppId``) whose batch ids continue after the last committed batch
  (``batch_offset``), with the previous run id and the reset time. Rows that an uncommitted,
  crashed batch of the old run left behind (``batch_id`` above the last marker) are deleted first
  (Delta keeps them in its history): their input is read again by the new run.
* **Resuming.** Kafka starts at the recorded end offsets; for files the new checkpoint lists every
  file again, so lines of files recorded by committed batches are dropped before parsing
  (:class:`tidemark.checkpoint.ResumePoint`). Host progress, open windows and the watermark live
  in Delta and continue from the last committed marker, as after any restart.
* **The dedup catalog** is the ``events`` table (:mod:`tidemark.dedup`), not the checkpoint, so a
  publisher retry of a record an earlier run stored is dropped after the reset as before it.

The checkpoint is a local (or mounted) directory, as for the run identity.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.checkpoint import RESETTABLE_SOURCES, committed_markers, recorded_progress
from tidemark.config import PipelineConfig
from tidemark.identity import IdentityError, RunIdentity, new_identity, read_identities, write_identity
from tidemark.storage import location
from tidemark.timeutil import format_instant_ms, now_ms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def check_reset(config: PipelineConfig) -> RunIdentity:
    """Refuse (:class:`~tidemark.tables.IdentityError`, one line) unless a reset is what is needed:
    tables with an identity whose checkpoint is missing or belongs to another run of this
    pipeline. Returns the tables' identity. Writes nothing."""
    if config.source.kind not in RESETTABLE_SOURCES:
        raise IdentityError(
            f"--reset-checkpoint supports source.kind {' and '.join(RESETTABLE_SOURCES)}, not "
            f"{config.source.kind}"
        )
    ck_id, tb_id = read_identities(config)
    if tb_id is None:
        raise IdentityError(
            f"--reset-checkpoint: no Tidemark tables under {config.tables_root}, nothing to reset; "
            "start without it"
        )
    if ck_id is not None and ck_id.pipeline != config.pipeline:
        raise IdentityError(
            f"--reset-checkpoint: checkpoint {config.checkpoint} belongs to pipeline "
            f"{ck_id.pipeline!r}; point `checkpoint:` at this pipeline's own directory (a reset "
            "never takes over another pipeline's checkpoint)"
        )
    if ck_id is not None and ck_id.run_id == tb_id.run_id:
        raise IdentityError(
            f"--reset-checkpoint refused: checkpoint {config.checkpoint} belongs to the tables' "
            f"run {tb_id.run_id}; it is not lost, start without --reset-checkpoint"
        )
    recorded_progress(config, committed_markers(config))  # refuses when the progress is not recorded
    return tb_id


UNCOMMITTED_COLUMNS = {
    S.EVENTS: "batch_id",
    S.LATE_EVENTS: "batch_id",
    S.QUARANTINE: "batch_id",
    S.WINDOWS: "batch_id",
    S.STALLS: "closed_batch_id",
    S.OUT_OF_ORDER: "batch_id",
}


def reset_checkpoint(spark: SparkSession, config: PipelineConfig, echo=print) -> RunIdentity:
    """Start a new run identity over the tables (see the module docstring); returns it.

    Every step can be repeated: a crash part-way leaves either the old state (the next reset
    redoes it) or a new tables identity with no checkpoint (the next reset replaces it; that run
    wrote nothing)."""
    previous = check_reset(config)
    markers = committed_markers(config)
    last = int(markers["batch_id"].max()) if markers is not None and not markers.empty else -1
    for table, column in UNCOMMITTED_COLUMNS.items():
        path = config.table_path(table)
        if T.table_exists(path):
            spark.sql(f"DELETE FROM delta.`{path}` WHERE {column} > {last}")
    reset_at = now_ms()
    checkpoint = location(config.checkpoint)
    if checkpoint.exists():
        stamp = format_instant_ms(reset_at).replace(":", "").replace("-", "").replace(".", "")
        aside = checkpoint.with_name(f"{checkpoint.name}.before-reset-{stamp}")
        checkpoint.rename(aside)
        echo(f"[{config.pipeline}] moved checkpoint {checkpoint} aside to {aside}")
    identity = new_identity(
        config, batch_offset=last + 1, previous_run_id=previous.run_id, reset_at_ms=reset_at
    )
    write_identity(config, identity)
    echo(
        f"[{config.pipeline}] checkpoint reset: run {identity.run_id} replaces run "
        f"{previous.run_id}, continuing after committed batch {last}"
    )
    return identity
