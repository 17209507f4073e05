"""The DAG failure notifier (tidemark_airflow.notifications): what it sends, to real local SMTP and
HTTP receivers, and when it stays quiet (a repeated callback, a run a task already alerted on)."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

pytestmark = pytest.mark.airflow

START, END = "2025-11-22T10:00:00Z", "2025-11-22T11:00:00Z"


@pytest.fixture
def notifier(airflow_db, receivers, tmp_path):
    """(notifier, pipeline name) for a fresh pipeline (its own alert ledger) alerting by both."""
    from tidemark_airflow.notifications import RunFailureNotifier

    name = f"n{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "pipeline": name,
                "source": {"kind": "files", "path": str(tmp_path / "landing")},
                "warehouse": str(tmp_path / "warehouse"),
                "checkpoint": str(tmp_path / "checkpoints" / name),
                "alerts": {"email_to": ["oncall@example.com"], "webhook_endpoint": "/alerts"},
            }
        ),
        encoding="utf-8",
    )
    return RunFailureNotifier(config_path=str(path)), name


def _context(pipeline: str, task_id: str | None = "recompute_and_diff", run_id: str = "manual__1") -> dict:
    ti = SimpleNamespace(task_id=task_id, try_number=2, log_url="http://airflow/log") if task_id else None
    return {
        "dag": SimpleNamespace(dag_id=f"tidemark_reconciliation__{pipeline}"),
        "run_id": run_id,
        "ti": ti,
        "reason": "task_failure",
        "params": {"start": START, "end": END},
    }


def test_a_failed_run_is_one_email_and_one_webhook_naming_dag_run_task_and_range(notifier, receivers):
    (task, name), (smtp, http) = notifier, receivers
    task.notify(_context(name))
    dag_id = f"tidemark_reconciliation__{name}"
    subject = f"[tidemark] {name}: {dag_id} FAILED at recompute_and_diff (task_failure)"
    [post] = http.posts
    alert = post["json"]
    assert post["path"] == "/alerts"
    assert (alert["kind"], alert["pipeline"], alert["subject"]) == ("failure", name, subject)
    assert alert["alert_id"] == f"failure:{dag_id}:manual__1"
    assert alert["details"] == {
        "dag_id": dag_id,
        "run_id": "manual__1",
        "task_id": "recompute_and_diff",
        "reason": "task_failure",
    }
    assert alert["text"].splitlines() == [
        f"DAG {dag_id}, run manual__1: task_failure.",
        "Failed task: recompute_and_diff (try 2).",
        f"Range (params): {START} .. {END}.",
        "Log: http://airflow/log",
    ]
    [mail] = smtp.messages
    assert mail["to"] == ["oncall@example.com"]
    assert mail["message"]["Subject"] == subject
    assert mail["message"]["X-Tidemark-Alert"] == alert["alert_id"]


def test_a_run_failing_outside_any_task_names_no_task(notifier, receivers):
    (task, name), (_, http) = notifier, receivers
    task.notify(_context(name, task_id=None))
    [post] = http.posts
    assert post["json"]["subject"].endswith("FAILED (task_failure)")
    assert "Failed task: -." in post["json"]["text"]


def test_the_scheduler_calling_back_twice_sends_once_and_another_run_again(notifier, receivers):
    (task, name), (smtp, http) = notifier, receivers
    task.notify(_context(name))
    task.notify(_context(name))
    assert (len(http.posts), len(smtp.messages)) == (1, 1)
    task.notify(_context(name, run_id="manual__2"))
    assert (len(http.posts), len(smtp.messages)) == (2, 2)


def test_a_run_whose_task_already_alerted_gets_no_failure_notice(notifier, receivers):
    from tidemark_airflow.alerts import AlertLedger

    (task, name), (smtp, http) = notifier, receivers
    ledger = AlertLedger(name)
    ledger.note_run(f"tidemark_reconciliation__{name}/manual__1", f"misaligned:{name}:x")
    task.notify(_context(name))
    assert (http.posts, smtp.messages) == ([], [])
    task.notify(_context(name, run_id="manual__2"))  # another run of the DAG still alerts
    assert len(http.posts) == 1


@pytest.fixture
def slack(monkeypatch):
    """A local HTTP receiver answering as a Slack incoming webhook (200 ``ok``), wired as the
    default Slack connection ``tidemark_slack``."""
    from receivers import HttpReceiver

    with HttpReceiver(status=200, body=b"ok") as receiver:
        monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_SLACK", receiver.slack_connection_json())
        yield receiver


def test_every_channel_links_the_runbook_and_the_dashboards_and_slack_gets_it_too(
    airflow_db, receivers, slack, tmp_path, monkeypatch
):
    from test_alert_builders import _status

    from tidemark.config import load_config
    from tidemark_airflow.alerts import RUNBOOKS, send, stall_alert

    smtp, http = receivers
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com")
    name = f"s{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "pipeline": name,
                "source": {"kind": "files", "path": str(tmp_path / "landing")},
                "warehouse": str(tmp_path / "warehouse"),
                "checkpoint": str(tmp_path / "checkpoints" / name),
                "alerts": {
                    "email_to": ["oncall@example.com"],
                    "webhook_endpoint": "/alerts",
                    "docs_url": "https://docs.example.com/tidemark",
                    "dashboard_url": f"https://grafana.example.com/d/tidemark?var-pipeline={name}",
                },
            }
        ),
        encoding="utf-8",
    )
    config = load_config(path)
    alert = stall_alert(config, _status(1_763_805_600_000))
    assert send(alert, config) == ["email", "webhook", "slack"]
    runbook = "https://docs.example.com/tidemark/operations/#runbook-the-watermark-stalled"
    links = {
        "runbook": runbook,
        "tidemark_view": "https://airflow.example.com/tidemark/",
        "dashboard": f"https://grafana.example.com/d/tidemark?var-pipeline={name}",
    }
    assert RUNBOOKS["stall"] == "runbook-the-watermark-stalled"
    # Slack, through the provider's incoming-webhook notifier: one message, subject, text and links
    [post] = slack.posts
    assert post["path"] == slack.SLACK_PATH
    text = post["json"]["text"]
    assert text.startswith(f"*{alert.subject}*\n```")
    assert f"<{runbook}|Runbook>" in text and "<https://airflow.example.com/tidemark/|Tidemark view>" in text
    assert f"<{links['dashboard']}|Dashboard>" in text
    # the webhook's JSON and the email carry the same links
    assert http.posts[0]["json"]["links"] == links
    html = smtp.messages[0]["message"].get_body(("html",)).get_content()
    assert all(f'href="{url}"' in html.replace("&amp;", "&") for url in links.values())
    # sent once per channel: a retried task sends nothing more
    assert send(alert, config) == []
    assert (len(slack.posts), len(http.posts), len(smtp.messages)) == (1, 1, 1)


def test_every_kind_of_alert_links_a_runbook_section_with_a_stable_anchor():
    """The runbook links point at sections of docs/operations.md that carry the anchor explicitly
    (``{#...}``), so rewording a heading cannot break the links in alerts already sent."""
    import re

    repo = Path(__file__).resolve().parents[2]

    from tidemark_airflow.alerts import RUNBOOKS

    assert set(RUNBOOKS) == {"stall", "recovery", "restarts", "misaligned", "quality", "failure"}
    page = (repo / "docs" / "operations.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r"^## Runbook: .*\{#([a-z0-9-]+)\}$", page, re.MULTILINE))
    assert set(RUNBOOKS.values()) <= anchors, set(RUNBOOKS.values()) - anchors
