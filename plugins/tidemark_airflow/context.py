"""What time range a DAG run covers: its data interval, or the ``start``/``end`` of a manual run."""

from __future__ import annotations

from typing import Any

from tidemark.timeutil import parse_instant_ms


def interval_ms(context: Any) -> tuple[int, int]:
    params = context.get("params") or {}
    start, end = params.get("start"), params.get("end")
    if start or end:
        if not (start and end):
            raise ValueError(
                "params: give both start and end (ISO-8601, e.g. 2025-11-22T10:00:00Z), or neither"
            )
        start_ms, end_ms = parse_instant_ms(start), parse_instant_ms(end)
    else:
        lo, hi = context.get("data_interval_start"), context.get("data_interval_end")
        if lo is None or hi is None:
            raise ValueError("this run has no data interval: trigger it with the start and end params")
        start_ms, end_ms = int(lo.timestamp() * 1000), int(hi.timestamp() * 1000)
    if end_ms <= start_ms:
        raise ValueError(f"params: end ({end}) must be after start ({start})")
    return start_ms, end_ms
