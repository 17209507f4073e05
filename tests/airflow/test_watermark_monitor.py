"""The watermark monitor DAG against a real stalled pipeline and real SMTP and HTTP receivers.

2,000 hosts at precision 0.999 may leave 2 behind; 10 (0.5%) go through a 6-minute outage, so the
watermark stalls. The monitor must send exactly one stall alert (email + webhook) naming the
pipeline, the watermark, how long it has stalled and the lagging hosts worst first with their
count; say nothing more while the same stall lasts; and send one recovery notice when the hosts
catch up and the watermark advances.
"""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from conftest import load_dag
from receivers import HttpReceiver, free_port

from tidemark.config import load_config
from tidemark.generator import Scenario, generate_files
from tidemark.status import read_status
from tidemark.stream import run_stream
from tidemark.timeutil import format_instant_ms
from tidemark.watermark_status import ADVANCING, STALLED

pytestmark = [pytest.mark.spark, pytest.mark.airflow]


def land(staging: Path, landing: Path, names: list[str]) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy2(staging / name, landing / name)


def run_monitor(dag) -> str:
    return str(dag.test().state)


def test_one_stall_alert_no_repeat_and_one_recovery_notice(
    spark, airflow_db, pipelines_dir, tmp_path, receivers
):
    smtp, http = receivers
    scenario = Scenario(
        hosts=2_000,
        minutes=9,
        events_per_host_per_minute=1,
        lag_share=0.005,
        lag_minutes=6,
        lag_start_minute=1,
        duplicate_rate=0.0,
        malformed_rate=0.0,
        seed=11,
    )
    config_path = pipelines_dir / "mon.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "pipeline": "mon",
                "source": {"kind": "files", "path": str(tmp_path / "landing"), "max_files_per_trigger": 4},
                "warehouse": str(tmp_path / "warehouse"),
                "checkpoint": str(tmp_path / "checkpoints" / "mon"),
                "watermark": {"precision": 0.999, "stall_after": "0ms", "lag_threshold": "2m"},
                "spark": {"shuffle_partitions": 2},
                "alerts": {
                    "email_to": ["oncall@example.com"],
                    "max_hosts_listed": 5,
                    "webhook_endpoint": "hooks/tidemark",
                },
            }
        ),
        encoding="utf-8",
    )
    config = load_config(config_path)
    staging = tmp_path / "staging"
    generate_files(scenario, staging)
    files = sorted(p.name for p in staging.glob("part-*"))
    lagging = set(scenario.lagging_hosts())
    assert len(lagging) == 10

    land(staging, tmp_path / "landing", files[:5])
    run_stream(spark, config, once=True, echo=lambda m: None)
    status = read_status(config).status
    assert status.state == STALLED
    dag = load_dag("tidemark_watermark_monitor.py", "tidemark_watermark_monitor__mon")
    # The DAG's two retries run as written; only their 20 s delay is cut, which `dag.test()`
    # would otherwise sit out twice: 40 s of pure waiting.
    (task,) = dag.tasks
    assert task.retries == 2
    task.retry_delay = timedelta(seconds=1)

    # The webhook is down: the email goes out, the task fails. Its retry must not mail again.
    with pytest.MonkeyPatch.context() as mp:
        down = json.loads(http.connection_json())
        down["port"] = free_port()
        mp.setenv("AIRFLOW_CONN_TIDEMARK_WEBHOOK", json.dumps(down))
        run = dag.test()
        assert str(run.state) == "failed"
        (failed,) = run.get_task_instances()
        assert failed.try_number == 3  # the first try and both retries ran
    assert len(smtp.messages) == 1 and len(http.posts) == 0
    assert run_monitor(dag) == "success"
    assert len(smtp.messages) == 1 and len(http.posts) == 1
    mail = smtp.messages[0]
    assert mail["to"] == ["oncall@example.com"]
    subject = mail["message"]["Subject"]
    assert "mon" in subject and "STALLED" in subject and format_instant_ms(status.watermark_ms) in subject
    assert "10 hosts lag (allowed 2)" in subject
    body = mail["message"].get_body(("html", "plain")).get_content()
    worst_first = [h.host for h in status.lagging][:5]
    positions = [body.index(h) for h in worst_first]
    assert positions == sorted(positions)  # worst first, capped at max_hosts_listed
    assert "lagging hosts (worst first, 5 of 10)" in body
    hook = http.posts[0]["json"]
    # the HTTP provider's hook: the connection's schema, host and port, the pipeline's endpoint,
    # the connection's password as the bearer token
    assert http.posts[0]["path"] == "/hooks/tidemark"
    assert http.posts[0]["headers"]["Authorization"] == f"Bearer {HttpReceiver.TOKEN}"
    assert hook["kind"] == "stall" and hook["pipeline"] == "mon"
    assert hook["alert_id"] == f"stall:mon:{status.watermark_ms}"
    assert hook["details"]["hosts_lagging"] == 10
    assert [h["host"] for h in hook["details"]["lagging_hosts"]] == worst_first
    assert {h["host"] for h in hook["details"]["lagging_hosts"]} <= lagging
    assert mail["message"]["Message-ID"] and "tidemark" in mail["message"]["Message-ID"]

    # the same stall: no repeat
    assert run_monitor(dag) == "success"
    assert len(smtp.messages) == 1 and len(http.posts) == 1

    # the outage ends, the backlog lands, the watermark advances: one recovery notice
    land(staging, tmp_path / "landing", files[5:])
    run_stream(spark, config, once=True, echo=lambda m: None)
    after = read_status(config).status
    assert after.state == ADVANCING and after.watermark_ms > status.watermark_ms
    assert run_monitor(dag) == "success"
    assert len(smtp.messages) == 2 and len(http.posts) == 2
    recovery = http.posts[1]["json"]
    assert (
        recovery["kind"] == "recovery"
        and recovery["alert_id"] == f"stall:mon:{status.watermark_ms}:recovered"
    )
    assert "advancing again" in smtp.messages[1]["message"]["Subject"]
    assert format_instant_ms(after.watermark_ms) in smtp.messages[1]["message"]["Subject"]

    assert run_monitor(dag) == "success"
    assert len(smtp.messages) == 2 and len(http.posts) == 2
    ledger = json.loads(_variable("tidemark_alerts__mon"))
    assert ledger["open"] == {}
    assert sorted(ledger["sent"]) == [
        f"stall:mon:{status.watermark_ms}",
        f"stall:mon:{status.watermark_ms}:recovered",
    ]


def _variable(key: str) -> str:
    from airflow.models import Variable

    return Variable.get(key)
