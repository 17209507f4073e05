"""Deferrable wait for a reconciliation pass to be due, run by Airflow's triggerer.

The trigger polls the pipeline's committed watermark (``tidemark.committed``: the commit marker
alone, read with delta-rs, no JVM, tens of milliseconds) in a worker thread, and asks
:func:`tidemark.passes.pass_due` (``TumblingWindows.is_closed`` or ``is_final`` of the range's
last window) whether the pass may run, so thousands of waiting hours cost the triggerer a few
coroutines and no worker slots.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


def committed_watermark(config_path: str) -> tuple[int | None, str]:
    """(watermark ms, state) from the newest committed batch of the pipeline in ``config_path``:
    its commit marker alone (:func:`tidemark.committed.committed_watermark`), never the host
    progress."""
    from tidemark.committed import committed_watermark as read_committed_watermark
    from tidemark.config import load_config

    return read_committed_watermark(load_config(config_path))


def pass_check(
    config_path: str, reconcile_pass: str, start_ms: int, end_ms: int, grace_ms: int
) -> tuple[bool, int | None, str]:
    """(due, watermark ms, state): may ``reconcile_pass`` of ``[start, end)`` run now? Every window
    of the range closed (``on_time``) or final (``final``) by the committed watermark less
    ``grace_ms``: :func:`tidemark.passes.pass_due`, with the pipeline's windows and lateness."""
    from tidemark.config import load_config
    from tidemark.passes import pass_due, windows_of

    watermark, state = committed_watermark(config_path)
    windows = windows_of(load_config(config_path))
    return pass_due(windows, reconcile_pass, start_ms, end_ms, watermark, grace_ms), watermark, state


def _one_line(exc: Exception) -> str:
    """A set-up problem (an unreadable object store: tidemark.object_store.StorageError) as the line the
    CLI prints; anything else with its type."""
    from tidemark.resources import SetupError

    return str(exc) if isinstance(exc, SetupError) else f"{type(exc).__name__}: {exc}"


class WatermarkTrigger(BaseTrigger):
    """Fires once ``reconcile_pass`` (``on_time`` or ``final``) of ``[start_ms, end_ms)`` is due:
    every window of the range closed, or final, by the pipeline's precise watermark less
    ``grace_ms`` (:func:`pass_check`)."""

    def __init__(
        self,
        config_path: str,
        start_ms: int,
        end_ms: int,
        reconcile_pass: str = "on_time",
        grace_ms: int = 0,
        poll_interval: float = 30.0,
    ) -> None:
        super().__init__()
        self.config_path = config_path
        self.start_ms = int(start_ms)
        self.end_ms = int(end_ms)
        self.reconcile_pass = reconcile_pass
        self.grace_ms = int(grace_ms)
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "config_path": self.config_path,
                "start_ms": self.start_ms,
                "end_ms": self.end_ms,
                "reconcile_pass": self.reconcile_pass,
                "grace_ms": self.grace_ms,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                due, watermark, state = await asyncio.to_thread(
                    pass_check,
                    self.config_path,
                    self.reconcile_pass,
                    self.start_ms,
                    self.end_ms,
                    self.grace_ms,
                )
            except Exception as exc:  # unreadable tables: report, let the sensor fail with the reason
                yield TriggerEvent({"status": "error", "message": _one_line(exc)})
                return
            if due:
                yield TriggerEvent({"status": "passed", "watermark_ms": watermark, "state": state})
                return
            self.log.info(
                "watermark %s (%s): the %s pass of %s..%s is not due yet",
                watermark,
                state,
                self.reconcile_pass,
                self.start_ms,
                self.end_ms,
            )
            await asyncio.sleep(self.poll_interval)
