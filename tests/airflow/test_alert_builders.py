"""The alert builders (one per kind) and the gate's interval summary, without Airflow running."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
from helpers import write_config

from tidemark import schemas as S
from tidemark.liveness import Liveness
from tidemark.status import PipelineStatus
from tidemark.timeutil import format_instant_ms, humanize_ms, now_ms
from tidemark.watermark_status import STALLED, LaggingHost, WatermarkStatus
from tidemark_airflow.alerts import (
    failure_alert,
    misaligned_alert,
    quality_alert,
    recovery_alert,
    restarts_alert,
    stall_alert,
)
from tidemark_airflow.reconciliation import interval_summary

START = 1_763_805_600_000  # 2025-11-22T10:00:00Z


@pytest.fixture
def config(tmp_path):
    return write_config(tmp_path, "alerts", reconcile={"target": 0.99})


def _status(watermark_ms: int, lagging: int = 3) -> PipelineStatus:
    hosts = tuple(LaggingHost(f"h{i}", watermark_ms - 60_000, 90_000) for i in range(lagging))
    status = WatermarkStatus(STALLED, watermark_ms, watermark_ms + 60_000, 600_000, 10, 10, 1, hosts)
    return PipelineStatus("alerts", 7, START, START, status)


def test_stall_and_recovery_alerts_name_the_stall_by_its_watermark(config):
    stall = stall_alert(config, _status(START))
    assert stall.kind == "stall" and stall.alert_id == f"stall:alerts:{START}"
    assert stall.subject == (
        f"[tidemark] alerts: watermark STALLED at {format_instant_ms(START)} "
        f"for {humanize_ms(600_000)}: 3 hosts lag (allowed 1)"
    )
    assert stall.details["hosts_lagging"] == 3
    incident = {"alert_id": stall.alert_id, "watermark_ms": START, "noticed_at_ms": now_ms()}
    recovery = recovery_alert(config, _status(START + 60_000, 0), incident)
    assert recovery.kind == "recovery" and recovery.alert_id == f"stall:alerts:{START}:recovered"
    assert f"stalled at {format_instant_ms(START)}" in recovery.subject
    assert recovery.details["stalled_at_ms"] == START


def test_restarts_quality_and_failure_alerts(config):
    restarts = restarts_alert(
        config, [START, START + 1], Liveness("DEAD", "process 1 is gone"), _status(START)
    )
    assert restarts.alert_id == f"restarts:alerts:{START}" and "restarted 2 times" in restarts.subject

    outcome = {
        "start": "a",
        "end": "b",
        "text": "two suites failed",
        "failing": [f"e{i}" for i in range(7)],
        "samples": {"e0": [1, 2, 3, 4]},
    }
    quality = quality_alert(config, outcome, {"report": "/r.html"}, "run-1")
    assert quality.alert_id == "quality:alerts:a:b:run-1:" + ",".join(f"e{i}" for i in range(7))
    assert quality.subject.endswith("e0, e1, e2, e3, e4 (+2)")
    assert quality.text == "two suites failed\nreport: /r.html" and quality.details["samples"] == {
        "e0": [1, 2, 3]
    }

    context = {
        "dag": SimpleNamespace(dag_id="d"),
        "run_id": "r",
        "ti": SimpleNamespace(task_id="t", try_number=2, log_url=None),
        "reason": "task_failure",
        "params": {"start": "x", "end": "y"},
    }
    failure = failure_alert(config, context)
    assert (
        failure.alert_id == "failure:d:r"
        and failure.subject == "[tidemark] alerts: d FAILED at t (task_failure)"
    )
    assert failure.text.splitlines() == [
        "DAG d, run r: task_failure.",
        "Failed task: t (try 2).",
        "Range (params): x .. y.",
    ]


def test_interval_summary_is_the_core_alignment_summary(config):
    from deltalake import write_deltalake

    starts = pd.to_datetime([START + i * 60_000 for i in range(4)], unit="ms", utc=True)
    write_deltalake(
        config.table_path(S.RECONCILIATION),
        pd.DataFrame(
            {
                "window_start": starts,
                "status": ["closed", "closed", "closed", "open"],
                "stream_events": [500, 480, 502, 10],
                "batch_events": [500, 500, 500, 40],
                "late_events": [0, 20, 0, 0],
                "alignment": [1.0, 0.96, 0.996, 0.25],
                "aligned": [True, False, True, None],
                "unexplained": [0, 0, -2, 30],
                "reconciled_at": starts,
            }
        ),
    )
    summary = interval_summary(config, START, START + 4 * 60_000)
    assert (summary["windows"], summary["closed"], summary["open"]) == (4, 3, 1)
    assert summary["misaligned"] == [format_instant_ms(START + 60_000)]
    assert summary["aligned_share"] == pytest.approx(2 / 3) and summary["worst_alignment"] == 0.96
    assert summary["unexplained"] == 2  # |unexplained| over the closed windows; the open one is not measured
    alert = misaligned_alert(config, summary)
    assert alert.alert_id == f"misaligned:alerts:{START}:{START + 4 * 60_000}:{START + 3 * 60_000}"
    assert alert.subject == (
        f"[tidemark] alerts: 1 windows below 0.99 in {format_instant_ms(START)} .. "
        f"{format_instant_ms(START + 4 * 60_000)}"
    )
    assert "text" not in alert.details and alert.details["unexplained"] == 2
