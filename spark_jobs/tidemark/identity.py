"""Run identity: who may write a pipeline's tables.

One run = one checkpoint = one Delta ``txnAppId``. The identity lives in the checkpoint *and*
beside the tables (``_tidemark.json``); a job whose checkpoint is missing or belongs to other
tables refuses to start instead of skipping or repeating writes. ``--reset-checkpoint``
(:mod:`tidemark.reset`) is the one way to start a new run on existing tables.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from tidemark.config import PipelineConfig
from tidemark.errors import TidemarkError
from tidemark.schemas import EVENTS, IDENTITY_FILE, WATERMARKS
from tidemark.storage import Location, location, write_text_atomic
from tidemark.timeutil import format_instant_ms, now_ms


class IdentityError(TidemarkError, RuntimeError):
    """Checkpoint and tables do not belong together; starting would skip or repeat writes."""


@dataclass(frozen=True)
class RunIdentity:
    """Who may write a pipeline's tables: one run = one checkpoint = one Delta ``txnAppId``.

    A run started by ``--reset-checkpoint`` continues the tables' batch numbering: its Spark batch
    ``n`` is table batch ``batch_offset + n``, so ``batch_id`` stays increasing in every table and
    the first batch of the run builds on the last batch the previous run committed.
    """

    pipeline: str
    run_id: str
    tables_root: str
    created_at: str
    batch_offset: int = 0
    previous_run_id: str | None = None
    reset_at_ms: int | None = None

    @property
    def app_id(self) -> str:
        """Delta txnAppId: unique per (pipeline, run), stable across restarts of the run."""
        return f"tidemark:{self.pipeline}:{self.run_id}"


def _read_identity(path: Location) -> RunIdentity | None:
    if not path.is_file():
        return None
    try:
        return RunIdentity(**json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as exc:
        raise IdentityError(f"{path}: unreadable Tidemark identity ({exc})") from None


def _write_identity(path: Location, identity: RunIdentity) -> None:
    write_text_atomic(path, json.dumps(asdict(identity), indent=2))


def _checkpoint_has_progress(checkpoint: Location) -> bool:
    offsets = checkpoint / "offsets"
    return offsets.is_dir() and any(offsets.iterdir())


def _tables_have_data(tables_root: Location) -> bool:
    return (tables_root / WATERMARKS / "_delta_log").is_dir() or (
        tables_root / EVENTS / "_delta_log"
    ).is_dir()


RESET_HINT = "or, if it is lost for good, start a new run identity with --reset-checkpoint"


def check_identity(config: PipelineConfig) -> RunIdentity | None:
    """The run identity checkpoint and tables share; None when neither has one yet (first start).

    Raises :class:`IdentityError` with a one-line explanation when they disagree. Writes nothing.
    """
    checkpoint = location(config.checkpoint)
    tables_root = location(config.tables_root)
    ck_id = _read_identity(checkpoint / IDENTITY_FILE)
    tb_id = _read_identity(tables_root / IDENTITY_FILE)

    if ck_id is None and _checkpoint_has_progress(checkpoint):
        raise IdentityError(
            f"checkpoint {checkpoint} holds Spark progress but no Tidemark identity: it belongs "
            "to another job; point `checkpoint:` at this pipeline's own directory"
            + (f", {RESET_HINT}" if tb_id is not None else "")
        )
    if ck_id is None and tb_id is None:
        if _tables_have_data(tables_root):
            raise IdentityError(
                f"tables under {tables_root} exist without a Tidemark identity; refusing to write into them"
            )
        return None
    if ck_id is None:
        assert tb_id is not None
        raise IdentityError(
            f"checkpoint {checkpoint} is missing or empty but the tables under {tables_root} "
            f"were written by run {tb_id.run_id}; restore that checkpoint (starting fresh "
            f"would re-read the source and duplicate or skip writes), {RESET_HINT}"
        )
    if tb_id is None:
        raise IdentityError(
            f"checkpoint {checkpoint} belongs to run {ck_id.run_id} whose tables were under "
            f"{ck_id.tables_root}, but {tables_root} has none; a new warehouse needs a new "
            "checkpoint directory"
        )
    if ck_id.pipeline != config.pipeline or ck_id.run_id != tb_id.run_id:
        hint = f", {RESET_HINT}" if ck_id.pipeline == config.pipeline else ""
        raise IdentityError(
            f"checkpoint {checkpoint} belongs to pipeline {ck_id.pipeline!r} run {ck_id.run_id} "
            f"but the tables under {tables_root} belong to pipeline {tb_id.pipeline!r} run "
            f"{tb_id.run_id}; point `checkpoint:` at this pipeline's own checkpoint{hint}"
        )
    return tb_id


def ensure_identity(config: PipelineConfig) -> RunIdentity:
    """Return the run identity shared by checkpoint and tables, creating it on first start.

    Raises :class:`IdentityError` with a one-line explanation when they disagree.
    """
    identity = check_identity(config)
    if identity is not None:
        return identity
    identity = new_identity(config)
    write_identity(config, identity)
    return identity


def new_identity(config: PipelineConfig, **fields: Any) -> RunIdentity:
    return RunIdentity(
        pipeline=config.pipeline,
        run_id=uuid.uuid4().hex[:12],
        tables_root=str(location(config.tables_root)),
        created_at=format_instant_ms(now_ms()),
        **fields,
    )


def read_identities(config: PipelineConfig) -> tuple[RunIdentity | None, RunIdentity | None]:
    """(checkpoint's identity, tables' identity), either None when absent."""
    return (
        _read_identity(location(config.checkpoint) / IDENTITY_FILE),
        _read_identity(location(config.tables_root) / IDENTITY_FILE),
    )


def write_identity(config: PipelineConfig, identity: RunIdentity) -> None:
    """Tables first, checkpoint second: a crash in between leaves a checkpoint without identity,
    which refuses to start, never a checkpoint that claims tables of another run."""
    _write_identity(location(config.tables_root) / IDENTITY_FILE, identity)
    _write_identity(location(config.checkpoint) / IDENTITY_FILE, identity)
