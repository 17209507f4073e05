"""The committed watermark: what the newest committed batch recorded, read from its commit marker.

A batch commits by appending its row to the pipeline's ``watermarks`` table last (the **commit
marker**): the watermark, when it last advanced, how many hosts lagged and how many may lag, and
the Delta versions of the state it wrote. That one row is the smallest source of the committed
watermark: :func:`tidemark.pipeline_state.committed_marker` reads it with delta-rs (no JVM),
skipping every file whose statistics prove it older. :class:`CommittedWatermark` is the one
reading of a marker: the Airflow sensor and trigger (:func:`committed_watermark`), and the status
behind the UI view and ``tidemark watermark`` (:func:`tidemark.status.read_status`), all take the
watermark from it. None of them needs the host-progress table to know the watermark; only the
list of lagging hosts does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidemark.config import PipelineConfig
from tidemark.pipeline_state import committed_marker, optional_int
from tidemark.timeutil import now_ms
from tidemark.watermark_status import classify


@dataclass(frozen=True, slots=True)
class CommittedWatermark:
    """The watermark a pipeline's newest committed batch recorded (epoch ms; None: none yet)."""

    batch_id: int | None
    watermark_ms: int | None
    advanced_at_ms: int | None  # processing time of the batch that last moved the watermark
    committed_at_ms: int | None
    stall_since_ms: int | None  # an open stall: when the watermark stopped moving
    hosts_lagging: int  # at the commit: hosts more than lag_threshold behind, or silent
    allowed_lagging: int  # floor((1-q) * N) of the population at the commit

    @classmethod
    def from_marker(cls, marker: Mapping[str, Any] | None) -> CommittedWatermark:
        """The committed watermark a commit marker holds; nothing committed for None."""
        if marker is None:
            return cls(None, None, None, None, None, 0, 0)

        def column(name: str) -> int | None:
            return optional_int(marker.get(name))

        return cls(
            batch_id=column("batch_id"),
            watermark_ms=column("watermark_ms"),
            advanced_at_ms=column("advanced_at_ms"),
            committed_at_ms=column("committed_at_ms"),
            stall_since_ms=column("stall_since_ms"),
            hosts_lagging=column("hosts_lagging") or 0,
            allowed_lagging=(column("hosts_total") or 0) - (column("hosts_required") or 0),
        )

    def state(self, now: int, stall_after_ms: int) -> str:
        """ADVANCING, STALLED or WAITING at ``now`` (:func:`tidemark.watermark_status.classify`),
        with the lagging hosts the marker counted: a watermark that stopped moving while too many
        hosts lag is STALLED even if no batch has run since."""
        since = None if self.advanced_at_ms is None else max(0, now - self.advanced_at_ms)
        return classify(self.watermark_ms, since, self.hosts_lagging, self.allowed_lagging, stall_after_ms)


def read_committed(config: PipelineConfig) -> CommittedWatermark:
    """The pipeline's committed watermark, from its newest commit marker only."""
    return CommittedWatermark.from_marker(committed_marker(config))


def committed_watermark(config: PipelineConfig, now: int | None = None) -> tuple[int | None, str]:
    """(watermark ms, state at ``now``) of the pipeline's newest committed batch: what the Airflow
    sensor and trigger wait on. Reads the commit marker alone, never the host progress."""
    committed = read_committed(config)
    at = now if now is not None else now_ms()
    return committed.watermark_ms, committed.state(at, config.watermark.stall_after)
