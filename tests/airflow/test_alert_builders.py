"""The alert builders (one per kind) and the gate's interval summary, without Airflow running."""

from __future__ import annotations

import json
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


def test_the_misaligned_alert_names_records_behind_an_unexplained_difference(config):
    """A few ids of each kind with their hosts, the totals, and the windows not examined; the
    subject says records are unexplained when no window is below target."""
    from tidemark.alignment import EXTRA, MISSING, RecordDiff, WindowResult, to_arrow
    from tidemark.tables import write_rs

    lost = [
        RecordDiff(MISSING, f"id-{i}", f"h{i}", START + i, "k", 1, f"file:/l/part-{i}.jsonl")
        for i in range(6)
    ]
    twice = RecordDiff(EXTRA, "dup-1", "h9", START + 7, "k", 2, "file:/l/part-9.jsonl", batch_id=4)

    def row(i: int, unexplained: int, **kw) -> WindowResult:
        return WindowResult(
            window_start_ms=START + i * 60_000,
            window_end_ms=START + (i + 1) * 60_000,
            stream_events=1_000_000 - unexplained,
            batch_events=1_000_000,
            late_events=0,
            abs_diff=abs(unexplained),
            alignment=1 - abs(unexplained) / 1_000_000,
            aligned=True,
            unexplained=unexplained,
            **kw,
        )

    rows = [
        row(0, 0),
        row(1, 9 - 2, missing_records=9, extra_records=2, record_sample=(*lost, twice)),
        row(2, 3),  # beyond the windows examined
    ]
    table = to_arrow(rows, pipeline="alerts", target=0.99, stream_watermark_ms=START, reconciled_at_ms=START)
    write_rs(config.table_path(S.RECONCILIATION), table, mode="append")
    summary = interval_summary(config, START, START + 3 * 60_000)
    assert not summary["ok"] and summary["misaligned"] == [] and summary["unexplained"] == 10
    records = summary["unexplained_records"]
    assert (records["missing"], records["extra"]) == (9, 2)
    assert records["not_examined"] == [format_instant_ms(START + 120_000)]
    (window,) = records["windows"]
    assert [(r["kind"], r["event_id"], r["host"]) for r in window["records"]] == [
        *((MISSING, f"id-{i}", f"h{i}") for i in range(5)),
        (EXTRA, "dup-1", "h9"),
    ]
    alert = misaligned_alert(config, summary)
    assert alert.subject == (
        f"[tidemark] alerts: 10 record(s) unexplained in {format_instant_ms(START)} .. "
        f"{format_instant_ms(START + 3 * 60_000)}"
    )
    assert "records behind the unexplained difference: 9 missing from events, 2 extra in events" in alert.text
    assert (
        f"  {format_instant_ms(START + 60_000)}: 9 missing from events: h0 id-0, h1 id-1, h2 id-2, h3 id-3, "
        "h4 id-4 and 4 more; 2 extra in events: h9 dup-1 ×2"
    ) in alert.text
    assert f"1 window(s) not examined: {format_instant_ms(START + 120_000)}" in alert.text
    assert alert.details["unexplained_records"]["windows"][0]["records"][-1]["batch_id"] == 4
    json.dumps(alert.payload())  # the webhook's body
