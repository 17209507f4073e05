"""Tumbling event-time windows.

A window of size ``S`` (ms) covers ``[N * S, (N + 1) * S)`` in epoch milliseconds; an event at
``t`` belongs to the window starting at ``t - (t mod S)`` (floor semantics, also for t < 0).

Closing rule: a window ``[start, end)`` is closed by watermark ``W`` when ``end <= W``. A host
whose progress is ``p >= end`` has already sent an event at or after ``end`` and, because each
host writes in event-time order, can send nothing more below ``end``. A record whose window is
already closed by the watermark *before* its batch is a late record.

Finality: with allowed lateness ``L`` a closed window stays revisable until the watermark passes
``end + L`` (:meth:`TumblingWindows.is_final`); a late record of a window not final before its
batch revises it (:mod:`tidemark.revisions`), one of a final window stays in ``late_events`` only.
With ``L = 0`` a window is final when it closes.

This module is the one place the rules are written: the stream (:mod:`tidemark.batch`) applies
:meth:`TumblingWindows.is_closed` to a Spark column (the late flag of each event) and to pandas
columns (late partial sums, windows to close), the recompute (:mod:`tidemark.reconcile`) to ints.
:func:`start_of` is the window start; its Spark Column form is
:func:`tidemark.aggregate.window_start_col` (``pmod``: Spark's ``%`` is a remainder, which differs
for ``t < 0``), kept there because this module imports no pyspark, not even inside a function.
"""

from __future__ import annotations

from dataclasses import dataclass

# Where no watermark is yet (epoch ms): before the end of every window.
NO_WATERMARK = -(2**63)


def start_of(event_time_ms: int, size_ms: int) -> int:
    """The start of the window of size ``size_ms`` holding ``event_time_ms``: ``t - (t mod S)``
    with a floor modulo, so ``start_of(-1, 60_000) == -60_000``."""
    return event_time_ms - (event_time_ms % size_ms)


def covering(start_ms: int, end_ms: int, size_ms: int) -> tuple[int, int]:
    """The whole windows covering ``[start, end)``: ``start`` down to its window's start, ``end``
    up to the next window boundary (unchanged when on one)."""
    return start_of(start_ms, size_ms), -start_of(-end_ms, size_ms)


@dataclass(frozen=True, slots=True)
class TumblingWindows:
    size_ms: int
    allowed_lateness_ms: int = 0

    def __post_init__(self) -> None:
        if self.size_ms <= 0:
            raise ValueError(f"window size must be positive, got {self.size_ms} ms")
        if self.allowed_lateness_ms < 0:
            raise ValueError(f"allowed lateness must not be negative, got {self.allowed_lateness_ms} ms")

    def start_of(self, event_time_ms: int) -> int:
        return start_of(event_time_ms, self.size_ms)

    def covering(self, start_ms: int, end_ms: int) -> tuple[int, int]:
        """The whole windows covering ``[start, end)`` (:func:`covering`)."""
        return covering(start_ms, end_ms, self.size_ms)

    def end_of(self, event_time_ms: int) -> int:
        return self.start_of(event_time_ms) + self.size_ms

    def is_closed(self, window_start_ms, watermark_ms: int | None):
        """Is the window starting at ``window_start_ms`` closed by ``watermark_ms``?

        ``window_start_ms`` is an int, a numpy array, a pandas Series or a Spark Column, and the
        answer has the same form. No watermark yet (``None``) closes nothing: it compares as
        :data:`NO_WATERMARK`, below every window's end, so each form needs no case of its own."""
        watermark = NO_WATERMARK if watermark_ms is None else watermark_ms
        return window_start_ms + self.size_ms <= watermark

    def is_final(self, window_start_ms, watermark_ms: int | None):
        """Is the window starting at ``window_start_ms`` final (no more revisions) by
        ``watermark_ms``: has the watermark passed its end plus the allowed lateness? Same forms
        as :meth:`is_closed`."""
        watermark = NO_WATERMARK if watermark_ms is None else watermark_ms
        return window_start_ms + (self.size_ms + self.allowed_lateness_ms) <= watermark

    def is_late(self, event_time_ms: int, watermark_before_ms: int | None) -> bool:
        """True when the event's window was already closed before the event arrived."""
        return self.is_closed(self.start_of(event_time_ms), watermark_before_ms)
