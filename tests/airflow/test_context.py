"""Which hour a reconciliation run covers, for each way a run comes to be."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from tidemark.timeutil import parse_instant_ms
from tidemark_airflow.context import interval_ms, last_complete_hour_ms


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def ms(text: str) -> int:
    return parse_instant_ms(text)


def test_a_scheduled_run_reconciles_its_data_interval():
    context = {
        "params": {"start": None, "end": None},
        "data_interval_start": at("2025-11-22T10:00:00Z"),
        "data_interval_end": at("2025-11-22T11:00:00Z"),
        "dag_run": SimpleNamespace(run_after=at("2025-11-22T11:00:00Z")),
    }
    assert interval_ms(context) == (ms("2025-11-22T10:00:00Z"), ms("2025-11-22T11:00:00Z"))


def test_a_manual_run_without_params_or_logical_date_reconciles_the_last_complete_hour():
    context = {
        "params": {"start": None, "end": None},
        "data_interval_start": None,
        "data_interval_end": None,
        "dag_run": SimpleNamespace(run_after=at("2025-11-22T11:20:31Z")),
    }
    assert interval_ms(context) == (ms("2025-11-22T10:00:00Z"), ms("2025-11-22T11:00:00Z"))


def test_an_empty_data_interval_is_never_reconciled_as_zero_windows():
    # what a trigger timetable (@hourly in Airflow 3) gives every run: start == end
    context = {
        "params": {},
        "data_interval_start": at("2025-11-22T11:00:00Z"),
        "data_interval_end": at("2025-11-22T11:00:00Z"),
        "dag_run": SimpleNamespace(run_after=at("2025-11-22T11:00:00Z")),
    }
    assert interval_ms(context) == (ms("2025-11-22T10:00:00Z"), ms("2025-11-22T11:00:00Z"))


def test_params_give_the_range_and_must_be_complete_and_ordered():
    context = {"params": {"start": "2025-11-22T10:00:00Z", "end": "2025-11-22T13:00:00Z"}}
    assert interval_ms(context) == (ms("2025-11-22T10:00:00Z"), ms("2025-11-22T13:00:00Z"))
    with pytest.raises(ValueError, match="give both start and end"):
        interval_ms({"params": {"start": "2025-11-22T10:00:00Z"}})
    with pytest.raises(ValueError, match=r"end \(2025-11-22T09:00:00Z\) must be after start"):
        interval_ms({"params": {"start": "2025-11-22T10:00:00Z", "end": "2025-11-22T09:00:00Z"}})


def test_the_last_complete_hour_at_an_hour_boundary_is_the_hour_that_just_ended():
    assert last_complete_hour_ms(ms("2025-11-22T11:00:00Z")) == (
        ms("2025-11-22T10:00:00Z"),
        ms("2025-11-22T11:00:00Z"),
    )
