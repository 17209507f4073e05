"""Sensors: wait until a reconciliation pass is due, i.e. until the precise watermark has closed
(``on_time``) or made final (``final``) every window of the run's interval (deferrable as
Airflow's ``[operators] default_deferrable`` says, unless told)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.configuration import conf

from tidemark_airflow.context import interval_ms
from tidemark_airflow.triggers import WatermarkTrigger, pass_check


class WatermarkSensor(BaseSensorOperator):
    """Succeeds once ``reconcile_pass`` of the run's interval is due: every window of it closed
    (``on_time``: ``TumblingWindows.is_closed``) or final (``final``: ``TumblingWindows.is_final``,
    the watermark past each window's end + ``window.allowed_lateness``) by the pipeline's committed
    watermark less ``grace_ms`` (``airflow.reconcile_grace``, a small extra margin). The decision
    is :func:`tidemark.passes.pass_due`'s, the same the trigger makes.

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
        reconcile_pass: str = "on_time",
        grace_ms: int = 0,
        poll_interval: float = 30.0,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        from tidemark.passes import check_pass

        kwargs.setdefault("timeout", timedelta(days=1).total_seconds())
        kwargs.setdefault("mode", "reschedule")
        super().__init__(poke_interval=poll_interval, **kwargs)
        self.config_path = config_path
        self.reconcile_pass = check_pass(reconcile_pass)
        self.grace_ms = grace_ms
        self.poll_interval = poll_interval
        self.deferrable = (
            conf.getboolean("operators", "default_deferrable", fallback=False)
            if deferrable is None
            else deferrable
        )

    def poke(self, context) -> bool:
        start, end = interval_ms(context)
        due, watermark, state = pass_check(self.config_path, self.reconcile_pass, start, end, self.grace_ms)
        self.log.info(
            "watermark %s (%s): the %s pass of %s..%s is %s (grace %s ms)",
            watermark,
            state,
            self.reconcile_pass,
            start,
            end,
            "due" if due else "not due yet",
            self.grace_ms,
        )
        return due

    def execute(self, context) -> Any:
        if not self.deferrable or self.poke(context):
            return super().execute(context) if not self.deferrable else None
        start, end = interval_ms(context)
        self.defer(
            trigger=WatermarkTrigger(
                self.config_path, start, end, self.reconcile_pass, self.grace_ms, self.poll_interval
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "passed":
            raise RuntimeError(f"watermark wait failed: {event.get('message')}")
        self.log.info(
            "watermark %s (%s): the %s pass is due",
            event["watermark_ms"],
            event["state"],
            self.reconcile_pass,
        )
        return event
