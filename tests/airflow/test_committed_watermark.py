"""The watermark sensor and its trigger wait on the committed watermark, read from the commit
marker alone: never the host-progress table, and the same watermark and state the full status
(``tidemark watermark``, the view) reports."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from helpers import write_config

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.committed import CommittedWatermark, committed_watermark, read_committed
from tidemark.progress import HostProgress
from tidemark.status import read_status

pytestmark = pytest.mark.airflow

NOW = 1_763_805_600_000
MINUTE = 60_000
WATERMARK = NOW - 5 * MINUTE


@pytest.fixture
def committed(tmp_path):
    """A pipeline that committed batch 3: four hosts, one of them 10 minutes behind the others
    (so it lags), precision 1 (no host may lag), the watermark last advanced 10 minutes before NOW."""
    config = write_config(
        tmp_path,
        name="cw",
        watermark={"precision": 1.0, "stall_after": "1m", "lag_threshold": "1m"},
    )
    progress = {"a": NOW, "b": NOW, "c": NOW, "d": NOW - 10 * MINUTE}
    T.write_rs(config.table_path(S.HOST_PROGRESS), HostProgress.from_mapping(progress).to_table())
    marker = dict.fromkeys(S.MARKER_SCHEMA.names) | {
        "batch_id": 3,
        "watermark_ms": WATERMARK,
        "watermark": WATERMARK,
        "state": "ADVANCING",
        "hosts_seen": 4,
        "hosts_total": 4,
        "hosts_required": 4,
        "hosts_lagging": 1,
        "batch_ts_ms": NOW - 10 * MINUTE,
        "advanced_at_ms": NOW - 10 * MINUTE,
        "frontier_ms": NOW,
        "hosts_version": 0,
        "committed_at_ms": NOW - 10 * MINUTE,
        "committed_at": NOW - 10 * MINUTE,
    }
    T.write_rs(config.table_path(S.WATERMARKS), pa.Table.from_pylist([marker], schema=S.MARKER_SCHEMA))
    return config, str(tmp_path / "cw.yaml")


@pytest.fixture
def opened(monkeypatch):
    """Every table path the code under test opens or looks for, in order."""
    paths: list[str] = []
    open_table, table_exists = T.open_table, T.table_exists

    def recording_open(path, version=None):
        paths.append(path)
        return open_table(path, version)

    def recording_exists(path):
        paths.append(path)
        return table_exists(path)

    monkeypatch.setattr(T, "open_table", recording_open)
    monkeypatch.setattr(T, "table_exists", recording_exists)
    return paths


@pytest.mark.parametrize(("now", "state"), [(NOW, "STALLED"), (NOW - 10 * MINUTE, "ADVANCING")])
def test_committed_watermark_and_state_are_those_of_the_full_status(committed, now, state):
    committed, _ = committed
    full = read_status(committed, now).status
    assert (full.watermark_ms, full.state) == (WATERMARK, state)
    assert committed_watermark(committed, now) == (WATERMARK, state)


def test_nothing_committed_is_no_watermark_waiting(tmp_path):
    config = write_config(tmp_path, name="never")
    assert read_committed(config) == CommittedWatermark.from_marker(None)
    assert committed_watermark(config) == (None, "WAITING")
    assert read_status(config).status.state == "WAITING"


def test_sensor_and_trigger_never_open_the_host_progress_table(committed, opened):
    from tidemark_airflow.sensors import WatermarkSensor
    from tidemark_airflow.triggers import WatermarkTrigger

    committed, config_path = committed
    host_progress = committed.table_path(S.HOST_PROGRESS)

    def context(end_ms: int) -> dict:
        start, end = (datetime.fromtimestamp(ms / 1000, tz=UTC) for ms in (end_ms - MINUTE, end_ms))
        return {"data_interval_start": start, "data_interval_end": end}

    sensor = WatermarkSensor(task_id="wait", config_path=config_path, deferrable=False)
    assert sensor.poke(context(WATERMARK)) is True
    assert sensor.poke(context(WATERMARK + 1)) is False

    async def first_event():
        return await anext(
            WatermarkTrigger(config_path, WATERMARK - MINUTE, WATERMARK, "on_time", poll_interval=0.1).run()
        )

    event = asyncio.run(first_event()).payload
    # long after NOW, the host that lagged at the commit still holds the watermark: STALLED
    assert event == {"status": "passed", "watermark_ms": WATERMARK, "state": "STALLED"}
    assert committed.table_path(S.WATERMARKS) in opened
    assert host_progress not in opened

    # the guard sees the table when it is read: the full status opens it
    read_status(committed, NOW)
    assert host_progress in opened
