"""`make run`'s first reconciled hour: the last complete hour that had settled at start-up, so the
scheduler's first run never waits on the clock for that hour's last records and lateness."""

from __future__ import annotations

import pytest

from tidemark.timeutil import parse_duration_ms, parse_instant_ms
from tidemark_airflow.launcher import first_hour_ms


@pytest.mark.parametrize(
    ("now", "lateness", "hour"),
    [
        # half past: the previous hour ended 30 minutes ago and its 3 minutes of lateness with it
        ("2026-11-27T19:30:00Z", "3m", "2026-11-27T18:00:00Z"),
        # 5 minutes past: 3 minutes of lateness + 2 of margin have just passed
        ("2026-11-27T19:05:00Z", "3m", "2026-11-27T18:00:00Z"),
        # just after the top of the hour the previous hour has not settled: the one before it
        ("2026-11-27T19:04:59Z", "3m", "2026-11-27T17:00:00Z"),
        ("2026-11-27T19:00:30Z", "0s", "2026-11-27T17:00:00Z"),
        ("2026-11-27T19:02:00Z", "0s", "2026-11-27T18:00:00Z"),
        # `make run`'s 1 h lateness counts up to 10 minutes: the previous hour from 12 past
        ("2026-11-27T19:11:59Z", "1h", "2026-11-27T17:00:00Z"),
        ("2026-11-27T19:12:00Z", "1h", "2026-11-27T18:00:00Z"),
        # across midnight
        ("2026-11-28T00:01:00Z", "3m", "2026-11-27T22:00:00Z"),
    ],
)
def test_the_first_hour_is_the_last_one_settled_at_start_up(now, lateness, hour):
    assert first_hour_ms(parse_instant_ms(now), parse_duration_ms(lateness)) == parse_instant_ms(hour)
