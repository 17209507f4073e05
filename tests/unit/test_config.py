from __future__ import annotations

import pytest

from tidemark.config import ConfigError, load_config, parse_config

BASE = {
    "pipeline": "clicks",
    "source": {"kind": "files", "path": "landing"},
    "warehouse": "wh",
    "checkpoint": "ck",
}


def test_defaults_and_paths_resolve_against_tidemark_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path))
    config = parse_config(BASE)
    assert config.window == 60_000 and config.dedup_horizon == 86_400_000
    assert config.watermark.precision == 0.999 and config.mode == "exactly_once"
    assert config.source.path == str(tmp_path / "landing")
    assert config.table_path("windows") == f"{tmp_path}/wh/clicks/windows"


def test_unknown_key_fails_with_its_dotted_name():
    data = {**BASE, "watermark": {"precison": 0.99}}
    with pytest.raises(
        ConfigError, match=r"^config <config>: watermark\.precison: unknown key; did you mean precision\?$"
    ):
        parse_config(data)


def test_bad_values_name_the_field():
    with pytest.raises(ConfigError, match=r"^config <config>: window: not a duration: '1 minute later'"):
        parse_config({**BASE, "window": "1 minute later"})
    with pytest.raises(ConfigError, match=r"pipeline: 'Bad Name' must match \[a-z0-9_-\]\+"):
        parse_config({**BASE, "pipeline": "Bad Name"})
    with pytest.raises(ConfigError, match=r"watermark\.precision: Input should be less than or equal to 1"):
        parse_config({**BASE, "watermark": {"precision": 1.5}})


def test_missing_required_keys_are_listed():
    with pytest.raises(ConfigError, match=r"warehouse: required key is missing; checkpoint: required key"):
        parse_config({"pipeline": "x", "source": {"path": "p"}})


def test_kafka_source_needs_bootstrap_and_topic():
    with pytest.raises(ConfigError, match=r"source: bootstrap_servers and topic: required"):
        parse_config({**BASE, "source": {"kind": "kafka"}})


def test_load_config_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"config .*nope\.yaml: file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipeline: [unclosed\n")
    with pytest.raises(ConfigError, match=r"config .*bad\.yaml:2:1: not valid YAML: expected ',' or ']'"):
        load_config(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match=r"list\.yaml:1:1: expected a mapping of keys \(.*\), got a list"):
        load_config(listy)


def test_maintenance_defaults_keep_a_week_of_removed_files_and_of_log():
    maintenance = parse_config(BASE).maintenance
    assert (maintenance.vacuum_retention, maintenance.log_retention) == (7 * 86_400_000, 7 * 86_400_000)
    assert maintenance.schedule == "30 3 * * *" and maintenance.zorder_events is True
    assert maintenance.table_properties() == {
        "delta.deletedFileRetentionDuration": "interval 7 days",
        "delta.logRetentionDuration": "interval 7 days",
    }
    # the log follows a longer vacuum_retention unless given
    follows = parse_config({**BASE, "maintenance": {"vacuum_retention": "14d"}}).maintenance
    assert follows.log_retention == 14 * 86_400_000
    month = parse_config({**BASE, "maintenance": {"log_retention": "30d"}}).maintenance
    assert (month.vacuum_retention, month.log_retention) == (7 * 86_400_000, 30 * 86_400_000)
    longer = parse_config({**BASE, "maintenance": {"vacuum_retention": "180h", "log_retention": "180h"}})
    assert longer.maintenance.table_properties()["delta.deletedFileRetentionDuration"] == "interval 180 hours"


def test_a_vacuum_retention_below_a_week_is_one_line_naming_the_key():
    with pytest.raises(
        ConfigError,
        match=r"^config <config>: maintenance\.vacuum_retention: 2d is below the minimum, 7d: readers of "
        r"older snapshots \(a running reconcile, a stream restarting after an outage, a downstream "
        r"pipeline\) need removed files that long, and Delta's retention check refuses less$",
    ):
        parse_config({**BASE, "maintenance": {"vacuum_retention": "2d"}})
    with pytest.raises(ConfigError, match=r"maintenance\.vacuum_retention: 167h is below the minimum, 7d"):
        parse_config({**BASE, "maintenance": {"vacuum_retention": "167h"}})


def test_maintenance_retentions_are_whole_hours_and_the_log_outlives_the_files():
    with pytest.raises(ConfigError, match=r"maintenance\.log_retention: 90m is not a whole number of hours$"):
        parse_config({**BASE, "maintenance": {"log_retention": "90m"}})
    with pytest.raises(
        ConfigError,
        match=r"^config <config>: maintenance: log_retention \(7d\) must be at least vacuum_retention "
        r"\(14d\): reading an old version needs its log as well as its files$",
    ):
        parse_config({**BASE, "maintenance": {"vacuum_retention": "14d", "log_retention": "7d"}})
    with pytest.raises(ConfigError, match=r"maintenance\.schedule: 'daily' is not a 5-field cron expression"):
        parse_config({**BASE, "maintenance": {"schedule": "daily"}})
    assert parse_config({**BASE, "maintenance": {"schedule": "@weekly"}}).maintenance.schedule == "@weekly"


def test_window_is_a_size_or_a_block_with_allowed_lateness():
    assert parse_config(BASE).allowed_lateness == 3_600_000  # default: an hour of revisions
    short = parse_config({**BASE, "window": "2m"})
    assert short.window == 120_000 and short.allowed_lateness == 3_600_000
    block = parse_config({**BASE, "window": {"size": "5m", "allowed_lateness": "30m"}})
    assert block.window == 300_000 and block.allowed_lateness == 1_800_000
    assert "allowed_lateness=30m" in block.describe()
    off = parse_config({**BASE, "window": {"allowed_lateness": 0}})
    assert off.window == 60_000 and off.allowed_lateness == 0


def test_a_bad_window_block_is_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"window\.lateness: unknown key \(the window block takes size, "):
        parse_config({**BASE, "window": {"size": "1m", "lateness": "1h"}})
    with pytest.raises(ConfigError, match=r"allowed_lateness: not a duration: 'soon'"):
        parse_config({**BASE, "window": {"allowed_lateness": "soon"}})
    with pytest.raises(ConfigError, match=r"window\.allowed_lateness: duration must not be negative"):
        parse_config({**BASE, "window": {"allowed_lateness": -5}})
    for bad in ({"window": {"allowed_lateness": "1h"}, "allowed_lateness": "2h"},):
        with pytest.raises(ConfigError, match="give it once"):
            parse_config({**BASE, **bad})
