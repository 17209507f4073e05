"""What time range a reconciliation run covers.

* **Scheduled, catchup and backfill runs** carry the hour as their data interval: the DAGs use
  ``CronDataIntervalTimetable("0 * * * *")`` (:data:`RECONCILE_CRON`), so the run for the
  hour ``[10:00, 11:00)`` is created after 11:00 and its data interval is exactly that hour.
* **A manual run with the ``start``/``end`` params** reconciles that range.
* **A manual run without params** reconciles the last complete hour before the run was triggered
  (``run_after``): triggered at 11:20 it covers ``[10:00, 11:00)``. Airflow gives a manual run
  with a logical date that same interval; one without a logical date has none, so it is derived
  here from ``run_after``.

An empty interval (``start == end``, what a trigger timetable such as ``@hourly`` gives) is never
reconciled: it would mean zero windows.
"""

from __future__ import annotations

from typing import Any

from tidemark.timeutil import MS_PER_HOUR, parse_instant_ms

RECONCILE_CRON = "0 * * * *"  # one run per hour, the hour as its data interval (UTC)


def last_complete_hour_ms(at_ms: int) -> tuple[int, int]:
    """The hour ``[start, end)`` that ended last at or before ``at_ms``."""
    end = at_ms // MS_PER_HOUR * MS_PER_HOUR
    return end - MS_PER_HOUR, end


def _ms(value: Any) -> int:
    return int(value.timestamp() * 1000)


def interval_ms(context: Any) -> tuple[int, int]:
    params = context.get("params") or {}
    start, end = params.get("start"), params.get("end")
    if start or end:
        if not (start and end):
            raise ValueError(
                "params: give both start and end (ISO-8601, e.g. 2025-11-22T10:00:00Z), or neither"
            )
        start_ms, end_ms = parse_instant_ms(start), parse_instant_ms(end)
        if end_ms <= start_ms:
            raise ValueError(f"params: end ({end}) must be after start ({start})")
        return start_ms, end_ms
    lo, hi = context.get("data_interval_start"), context.get("data_interval_end")
    if lo is not None and hi is not None and hi > lo:
        return _ms(lo), _ms(hi)
    dag_run = context.get("dag_run")
    run_after = getattr(dag_run, "run_after", None) or hi
    if run_after is None:
        raise ValueError("this run has no data interval and no run_after: trigger it with start and end")
    return last_complete_hour_ms(_ms(run_after))
