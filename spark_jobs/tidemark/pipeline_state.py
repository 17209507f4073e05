"""The pipeline's state as the commit marker records it.

A batch commits last of all its row in ``watermarks``, the commit marker: the watermark it
reached, its open stall, and the Delta versions of the ``_state`` tables that hold the rest
(host progress, open windows, closed windows a late record may still revise). Those tables are
overwritten by later batches, so the state a batch left is read at the versions its marker
records, never at their newest: a batch that crashed after writing its state and before its
marker leaves nothing a restart reads. Every reader of the committed state starts here: the
next batch (:class:`tidemark.batch.BatchProcessor`), the watermark status
(:mod:`tidemark.status`) and maintenance's VACUUM, which keeps the versions a restart reads
(:mod:`tidemark.maintenance`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import PipelineConfig
from tidemark.progress import HostProgress
from tidemark.revisions import empty_revisable

__all__ = [
    "STATE_VERSION_COLUMNS",
    "Marker",
    "PipelineState",
    "StateCache",
    "committed_marker",
    "empty_open_windows",
    "host_progress_at",
    "load_state",
    "marker_before",
    "optional_int",
    "state_version",
]

# A commit marker: one row of ``watermarks`` as plain Python values (schemas.MARKER_SCHEMA).
Marker = dict[str, Any]

# The ``_state`` tables, and the marker column recording the version of each a batch committed.
STATE_VERSION_COLUMNS = {
    S.HOST_PROGRESS: "hosts_version",
    S.OPEN_WINDOWS: "open_version",
    S.REVISABLE_WINDOWS: "revisable_version",
}


def empty_open_windows() -> pd.DataFrame:
    """No open window (:data:`tidemark.schemas.OPEN_COLUMNS`)."""
    return S.OPEN_SCHEMA.empty_table().to_pandas()


def optional_int(value: Any) -> int | None:
    """A marker value as an int; None for a NULL (None or NaN)."""
    return None if value is None or pd.isna(value) else int(value)


@dataclass
class PipelineState:
    """What batch ``batch_id`` left behind; the input of batch ``batch_id + 1``. The default is
    the state before the first batch."""

    batch_id: int = -1
    watermark: int | None = None
    advanced_at_ms: int | None = None  # processing time of the batch that last moved it
    stall_since_ms: int | None = None  # an open stall: when the watermark stopped moving
    stall_hosts: tuple[str, ...] = ()
    stages: str | None = None  # WatermarkServer state (JSON)
    progress: HostProgress = field(default_factory=HostProgress.empty)
    open_windows: pd.DataFrame = field(default_factory=empty_open_windows)
    # closed windows a late record may still revise, and the state table version holding them
    revisable: pd.DataFrame = field(default_factory=empty_revisable)
    revisable_version: int | None = None


def committed_marker(config: PipelineConfig, max_batch: int | None = None) -> Marker | None:
    """The newest commit marker (with ``batch_id <= max_batch`` if given); None before the
    first committed batch."""
    return T.latest_marker(config.table_path(S.WATERMARKS), max_batch=max_batch)


def marker_before(config: PipelineConfig, batch_id: int) -> tuple[Marker | None, bool]:
    """(newest commit marker with batch_id <= the given one, is it that very batch's?)."""
    row = committed_marker(config, max_batch=batch_id)
    return row, row is not None and int(row["batch_id"]) == batch_id


def state_version(marker: Marker | None, table: str) -> int | None:
    """The version of the ``_state`` ``table`` that ``marker`` records; None without a marker
    or before the table's first write (the revisable windows with allowed_lateness 0)."""
    if marker is None:
        return None
    return optional_int(marker.get(STATE_VERSION_COLUMNS[table]))


def host_progress_at(config: PipelineConfig, marker: Marker | None) -> HostProgress:
    """The host progress ``marker`` committed (empty before the first batch)."""
    version = state_version(marker, S.HOST_PROGRESS)
    if version is None:
        return HostProgress.empty()
    return HostProgress.from_rows(T.read_local(config.table_path(S.HOST_PROGRESS), version), version=version)


def load_state(config: PipelineConfig, marker: Marker | None) -> PipelineState:
    """The state ``marker``'s batch left, read at the versions it records."""
    if marker is None:
        return PipelineState()
    open_windows = T.read_local(
        config.table_path(S.OPEN_WINDOWS), int(marker[STATE_VERSION_COLUMNS[S.OPEN_WINDOWS]])
    ).astype({"window_start_ms": "int64", "events": "int64", "value_sum": "float64"})
    revisable_version = state_version(marker, S.REVISABLE_WINDOWS)
    revisable = (
        empty_revisable()
        if revisable_version is None
        else T.read_local(config.table_path(S.REVISABLE_WINDOWS), revisable_version)
    )
    return PipelineState(
        batch_id=int(marker["batch_id"]),
        watermark=optional_int(marker["watermark_ms"]),
        advanced_at_ms=optional_int(marker["advanced_at_ms"]),
        stall_since_ms=optional_int(marker["stall_since_ms"]),
        stall_hosts=tuple(json.loads(marker["stall_hosts"] or "[]")),
        stages=marker["stages"],
        progress=host_progress_at(config, marker),
        open_windows=open_windows[S.OPEN_COLUMNS],
        revisable=revisable[S.REVISABLE_SCHEMA.names].astype(
            {"window_start_ms": "int64", "events": "int64", "value_sum": "float64", "revision": "int64"}
        ),
        revisable_version=revisable_version,
    )


class StateCache:
    """The state of the last committed batch, kept in memory by the batch function and reloaded
    from Delta only when it is not the one the incoming batch builds on (a replay, a restart)."""

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self._state: PipelineState | None = None

    def before(self, batch_id: int) -> tuple[PipelineState, bool]:
        """(state left by the last committed batch before ``batch_id``, already committed?)."""
        cached = self._state
        if cached is not None and cached.batch_id == batch_id - 1:
            return cached, False
        marker, committed = marker_before(self.config, batch_id)
        if committed and marker is not None:  # with the watermark it committed (its replay skips it)
            return PipelineState(batch_id=batch_id, watermark=optional_int(marker["watermark_ms"])), True
        return load_state(self.config, marker), False

    def keep(self, state: PipelineState) -> None:
        """``state`` is committed: the next batch starts from it."""
        self._state = state

    def forget(self) -> None:
        """Read the next batch's state from Delta."""
        self._state = None
