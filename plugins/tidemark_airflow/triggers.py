"""Deferrable wait for the precise watermark, run by Airflow's triggerer.

The trigger polls the pipeline's committed watermark (``tidemark.committed``: the commit marker
alone, read with delta-rs, no JVM, tens of milliseconds) in a worker thread, so thousands of
waiting hours cost the triggerer a few coroutines and no worker slots.
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


def _one_line(exc: Exception) -> str:
    """A set-up problem (an unreadable object store: tidemark.object_store.StorageError) as the line the
    CLI prints; anything else with its type."""
    from tidemark.resources import SetupError

    return str(exc) if isinstance(exc, SetupError) else f"{type(exc).__name__}: {exc}"


class WatermarkTrigger(BaseTrigger):
    """Fires once the pipeline's precise watermark is at or past ``target_ms``."""

    def __init__(self, config_path: str, target_ms: int, poll_interval: float = 30.0) -> None:
        super().__init__()
        self.config_path = config_path
        self.target_ms = int(target_ms)
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "config_path": self.config_path,
                "target_ms": self.target_ms,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                watermark, state = await asyncio.to_thread(committed_watermark, self.config_path)
            except Exception as exc:  # unreadable tables: report, let the sensor fail with the reason
                yield TriggerEvent({"status": "error", "message": _one_line(exc)})
                return
            if watermark is not None and watermark >= self.target_ms:
                yield TriggerEvent({"status": "passed", "watermark_ms": watermark, "state": state})
                return
            self.log.info("watermark %s (%s) has not reached %s yet", watermark, state, self.target_ms)
            await asyncio.sleep(self.poll_interval)
