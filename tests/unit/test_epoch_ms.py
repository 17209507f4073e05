"""Timestamps from Delta tables to epoch ms, whatever unit the reader hands back.

delta-rs returns ``datetime64[us]``, Spark's ``toPandas`` ``datetime64[ns]``; the reconciliation
gate once divided microseconds as if they were nanoseconds and found no rows in any interval.
"""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import write_config

from tidemark import schemas as S
from tidemark import tables as T
from tidemark_airflow.reconciliation import interval_summary, reconciliation_rows

START = 1_763_805_600_000  # 2025-11-22T10:00:00Z


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_epoch_ms_is_exact_for_every_timestamp_unit(unit):
    stamps = pd.Series(pd.to_datetime([START, START + 60_123], unit="ms", utc=True)).astype(
        f"datetime64[{unit}, UTC]"
    )
    expected = [START, START + (60_000 if unit == "s" else 60_123)]
    assert T.epoch_ms(stamps).tolist() == expected


def test_epoch_ms_passes_integers_through_and_keeps_missing_values_missing():
    assert T.epoch_ms(pd.Series([START, START + 1])).tolist() == [START, START + 1]
    converted = T.epoch_ms(pd.Series(pd.to_datetime([START, None], unit="ms", utc=True)))
    assert converted.iloc[0] == START and pd.isna(converted.iloc[1])


def test_gate_reads_the_interval_from_a_delta_table_written_in_microseconds(tmp_path):
    from deltalake import write_deltalake

    config = write_config(tmp_path, name="gate", reconcile={"target": 0.999})
    starts = pd.to_datetime([START + i * 60_000 for i in range(4)], unit="ms", utc=True).astype(
        "datetime64[us, UTC]"
    )
    frame = pd.DataFrame(
        {
            "window_start": starts,
            "status": ["closed"] * 4,
            "stream_events": [500, 480, 500, 500],
            "batch_events": [500, 500, 500, 500],
            "late_events": [0, 20, 0, 0],
            "alignment": [1.0, 0.96, 1.0, 1.0],
            "aligned": [True, False, True, True],
            "unexplained": [0, 0, 0, 0],
            "reconciled_at": starts,
        }
    )
    write_deltalake(config.table_path(S.RECONCILIATION), frame)
    assert str(T.read_local(config.table_path(S.RECONCILIATION))["window_start"].dtype).startswith(
        "datetime64[us"
    )

    rows = reconciliation_rows(config, START + 60_000, START + 3 * 60_000)
    assert rows["window_start_ms"].tolist() == [START + 60_000, START + 120_000]
    summary = interval_summary(config, START, START + 4 * 60_000)
    assert summary["windows"] == 4 and summary["misaligned"] == ["2025-11-22T10:01:00.000Z"]
