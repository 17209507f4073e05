"""Config numbers a pipeline cannot run with fail at start-up, in one line naming the field: a
float setting that is NaN or infinite, a duration beyond its sane maximum."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tidemark.config import ConfigError, load_config

BASE = {
    "pipeline": "clicks",
    "source": {"kind": "files", "path": "landing"},
    "warehouse": "wh",
    "checkpoint": "ck",
}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "clicks.yaml"
    path.write_text(yaml.safe_dump(BASE) + text, encoding="utf-8")
    return path


def _error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "\n" not in message, message
    where = re.match(rf"config {re.escape(str(path))}:\d+:\d+: ", message)  # file:line:column
    assert where, message
    return message.removeprefix(where.group(0))


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("quality:\n  thresholds:\n    max_late_share: .nan\n", "quality.thresholds.max_late_share"),
        ("quality:\n  thresholds:\n    max_late_share: .inf\n", "quality.thresholds.max_late_share"),
        ("quality:\n  thresholds:\n    min_rows: -.inf\n", "quality.thresholds.min_rows"),
        ("watermark:\n  precision: .nan\n", "watermark.precision"),
        ("reconcile:\n  target: .nan\n", "reconcile.target"),
        ("reconcile:\n  target: .inf\n", "reconcile.target"),
        ("spark:\n  conf:\n    spark.memory.fraction: .nan\n", "spark.conf.spark.memory.fraction"),
    ],
)
def test_a_float_setting_that_is_nan_or_infinite_is_refused(tmp_path, text, field):
    message = _error(tmp_path, text)
    assert message.startswith(f"{field}: "), message
    assert "finite number" in message, message


@pytest.mark.parametrize(
    ("text", "field", "bound"),
    [
        ("window: 8d\n", "window", "7d"),
        ("window:\n  size: 1m\n  allowed_lateness: 31d\n", "window.allowed_lateness", "30d"),
        ("dedup_horizon: 91d\n", "dedup_horizon", "90d"),
        ("trigger_interval: 2h\n", "trigger_interval", "1h"),
        ("watermark:\n  lag_threshold: 2d\n", "watermark.lag_threshold", "1d"),
        ("watermark:\n  stall_after: 25h\n", "watermark.stall_after", "1d"),
        ("validation:\n  max_clock_skew: 8d\n", "validation.max_clock_skew", "7d"),
        ("airflow:\n  reconcile_grace: 2d\n", "airflow.reconcile_grace", "1d"),
        ("airflow:\n  hang_after: 2d\n", "airflow.hang_after", "1d"),
        ("airflow:\n  restart_window: 8d\n", "airflow.restart_window", "7d"),
        ("maintenance:\n  vacuum_retention: 366d\n", "maintenance.vacuum_retention", "365d"),
        ("maintenance:\n  log_retention: 8784h\n", "maintenance.log_retention", "365d"),
        # a number that would overflow a long in Spark once in milliseconds
        ("window: 99999999999999999999d\n", "window", "7d"),
    ],
)
def test_a_duration_beyond_its_maximum_is_refused_naming_field_and_bound(tmp_path, text, field, bound):
    message = _error(tmp_path, text)
    assert message.startswith(f"{field}: "), message
    assert f"maximum, {bound}" in message, message


def test_durations_at_their_maximum_and_finite_floats_are_accepted(tmp_path):
    text = (
        "window:\n  size: 7d\n  allowed_lateness: 30d\n"
        "dedup_horizon: 90d\ntrigger_interval: 1h\n"
        "watermark:\n  precision: 0.5\n  lag_threshold: 1d\n  stall_after: 1d\n"
        "validation:\n  max_clock_skew: 7d\n"
        "reconcile:\n  target: 0.99\n"
        "quality:\n  thresholds:\n    max_late_share: 0.02\n"
        "spark:\n  conf:\n    spark.memory.fraction: 0.6\n"
        "airflow:\n  reconcile_grace: 1d\n  hang_after: 1d\n  restart_window: 7d\n"
        "maintenance:\n  vacuum_retention: 365d\n  log_retention: 365d\n"
    )
    config = load_config(_write(tmp_path, text))
    assert config.window == 7 * 86_400_000 and config.allowed_lateness == 30 * 86_400_000
    assert config.quality.thresholds == {"max_late_share": 0.02}
    assert config.maintenance.log_retention == 365 * 86_400_000
