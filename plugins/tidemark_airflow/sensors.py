"""Sensors: wait until the precise watermark has passed a time (deferrable as Airflow's
``[operators] default_deferrable`` says, unless told)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.configuration import conf

from tidemark_airflow.context import interval_ms
from tidemark_airflow.triggers import WatermarkTrigger, committed_watermark


class WatermarkSensor(BaseSensorOperator):
    """Succeeds once the pipeline's committed watermark >= the run's interval end + ``grace_ms``.

    The interval is the run's data interval, or the ``start``/``end`` params of a manual run.
    Deferrable when ``deferrable=True``, or when not given and Airflow's ``[operators]
    default_deferrable`` is true (as for Airflow's own operators): the wait then happens in the
    triggerer, not in a worker slot; otherwise it pokes in ``reschedule`` mode. A watermark
    that STALLS keeps the sensor waiting: the hour is not reconciled before its windows closed;
    the watermark monitor DAG is the one that alerts about the stall.
    """

    template_fields = ("config_path",)
    ui_color = "#cde4f7"

    def __init__(
        self,
        *,
        config_path: str,
        grace_ms: int = 0,
        poll_interval: float = 30.0,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("timeout", timedelta(days=1).total_seconds())
        kwargs.setdefault("mode", "reschedule")
        super().__init__(poke_interval=poll_interval, **kwargs)
        self.config_path = config_path
        self.grace_ms = grace_ms
        self.poll_interval = poll_interval
        self.deferrable = (
            conf.getboolean("operators", "default_deferrable", fallback=False)
            if deferrable is None
            else deferrable
        )

    def target_ms(self, context) -> int:
        return interval_ms(context)[1] + self.grace_ms

    def poke(self, context) -> bool:
        watermark, state = committed_watermark(self.config_path)
        target = self.target_ms(context)
        self.log.info("watermark %s (%s), waiting for %s", watermark, state, target)
        return watermark is not None and watermark >= target

    def execute(self, context) -> Any:
        if not self.deferrable or self.poke(context):
            return super().execute(context) if not self.deferrable else None
        self.defer(
            trigger=WatermarkTrigger(self.config_path, self.target_ms(context), self.poll_interval),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "passed":
            raise RuntimeError(f"watermark wait failed: {event.get('message')}")
        self.log.info(
            "watermark %s passed %s (%s)", event["watermark_ms"], self.target_ms(context), event["state"]
        )
        return event
