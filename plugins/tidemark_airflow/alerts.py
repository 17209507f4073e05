"""Alerts: email through Airflow's SMTP notifier and a JSON webhook, each sent once.

An alert has a stable ``alert_id`` (``stall:<pipeline>:<watermark>``, ...). Before a channel is
used, a ledger kept in an Airflow Variable (``tidemark_alerts__<pipeline>``) is checked; after it
succeeded, the send is recorded. So a retried task, or the next run of a monitor DAG, does not
send the same alert twice. The one gap a ledger cannot close (the process dies between the send
and the record) is covered at the receiver: the webhook payload carries ``alert_id`` and the
email a ``Message-ID`` derived from it, which receivers and mail clients use to drop the copy.

Channels are Airflow connections named in the pipeline config (``alerts.smtp_conn_id``,
``alerts.webhook_conn_id``): no address, URL or secret is written in code. A channel whose
connection does not exist is skipped with a warning; an alert with no channel at all fails loudly.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow.sdk import BaseNotifier

from tidemark.config import PipelineConfig
from tidemark.timeutil import now_ms

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Alert:
    alert_id: str
    pipeline: str
    kind: str  # stall | recovery | misaligned | restarts | quality | failure
    subject: str
    text: str
    details: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        return {"source": "tidemark", **asdict(self), "sent_at_ms": now_ms()}

    def html(self) -> str:
        from html import escape

        return f"<h3>{escape(self.subject)}</h3><pre>{escape(self.text)}</pre>"

    @property
    def message_id(self) -> str:
        digest = hashlib.sha256(self.alert_id.encode()).hexdigest()[:32]
        return f"<tidemark.{digest}@tidemark.alerts>"


class AlertLedger:
    """Which alerts were sent on which channel, plus open incidents, per pipeline.

    Kept in one Airflow Variable per pipeline, so every worker and every retry sees it. The
    monitor DAGs run with ``max_active_runs=1``, so one writer at a time.
    """

    KEEP = 500  # sent alert ids remembered per pipeline (old ones are dropped first)

    def __init__(self, pipeline: str) -> None:
        self.key = f"tidemark_alerts__{pipeline}"
        self.data = self._load()

    def _load(self) -> dict[str, Any]:
        raw = _variable_model().get(self.key, None)
        data = json.loads(raw) if raw else {}
        data.setdefault("sent", {})
        data.setdefault("open", {})
        data.setdefault("runs", {})  # "<dag_id>/<run_id>" -> the alert a task of that run sent
        return data

    def save(self) -> None:
        sent, runs = self.data["sent"], self.data["runs"]
        if len(sent) > self.KEEP:
            for old in sorted(sent, key=lambda k: sent[k].get("at", 0))[: len(sent) - self.KEEP]:
                del sent[old]
        for old in list(runs)[: max(0, len(runs) - self.KEEP)]:  # insertion order: oldest first
            del runs[old]
        value = json.dumps(self.data, sort_keys=True)
        _variable_model().set(self.key, value, description="Tidemark alert ledger")

    def was_sent(self, alert_id: str, channel: str) -> bool:
        return channel in self.data["sent"].get(alert_id, {}).get("channels", [])

    def record(self, alert_id: str, channel: str) -> None:
        entry = self.data["sent"].setdefault(alert_id, {"channels": [], "at": now_ms()})
        entry["channels"].append(channel)
        self.save()

    def note_run(self, run_key: str, alert_id: str) -> None:
        """Remember that a task of the run ``run_key`` (``<dag_id>/<run_id>``) alerted already."""
        self.data["runs"][run_key] = alert_id
        self.save()

    def run_alert(self, run_key: str) -> str | None:
        """The alert a task of the run ``run_key`` sent, if any (a DAG failure then says no more)."""
        return self.data["runs"].get(run_key)

    def open_incident(self, kind: str) -> dict[str, Any] | None:
        return self.data["open"].get(kind)

    def set_incident(self, kind: str, value: dict[str, Any] | None) -> None:
        if value is None:
            self.data["open"].pop(kind, None)
        else:
            self.data["open"][kind] = value
        self.save()


def _variable_model():
    """Airflow's ``Variable`` for where this runs.

    Task and DAG-processor processes (task alerts, DAG failure callbacks) reach Variables through
    their supervisor: the Task SDK's ``Variable``. A process with no supervisor (the callbacks
    ``dag.test()`` runs in its own process, the CLI) writes the metadata DB through the model.
    """
    from airflow.sdk.execution_time import task_runner

    if getattr(task_runner, "SUPERVISOR_COMMS", None) is not None:
        from airflow.sdk import Variable
    else:
        from airflow.models import Variable
    return Variable


def webhook_notifier(alert: Alert, conn_id: str, endpoint: str) -> BaseNotifier:
    """The HTTP provider's ``HttpNotifier`` POSTing the alert as JSON to the webhook connection.

    The connection has its standard meaning (``HttpHook``): schema ``http``/``https``, host, port;
    login and password authenticate (basic auth); a password without a login is sent as a bearer
    token, which is how chat and incident tools' webhooks usually take a secret. Extra headers come
    from the connection's ``extra`` as for any HTTP connection. ``endpoint`` is the path posted to.
    """
    from airflow.providers.http.notifications.http import HttpNotifier
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    headers = {"Content-Type": "application/json"}
    if conn.password and not conn.login:
        headers["Authorization"] = f"Bearer {conn.password}"
    return HttpNotifier(
        http_conn_id=conn_id, endpoint=endpoint, json=alert.payload(), headers=headers, method="POST"
    )


def _connection_exists(conn_id: str) -> bool:
    from airflow.sdk import BaseHook

    try:
        BaseHook.get_connection(conn_id)
    except Exception:  # AirflowNotFoundException, or a secrets backend error: treat as absent
        return False
    return True


def send(
    alert: Alert, config: PipelineConfig, context: Any = None, ledger: AlertLedger | None = None
) -> list[str]:
    """Send ``alert`` on every configured channel it was not yet sent on; return those used."""
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier

    ledger = ledger or AlertLedger(config.pipeline)
    cfg = config.alerts
    notifiers: dict[str, BaseNotifier] = {}
    if cfg.email_to and _connection_exists(cfg.smtp_conn_id):
        notifiers["email"] = SmtpNotifier(
            to=cfg.email_to,
            subject=alert.subject,
            html_content=alert.html(),
            smtp_conn_id=cfg.smtp_conn_id,
            custom_headers={"Message-ID": alert.message_id, "X-Tidemark-Alert": alert.alert_id},
        )
    elif cfg.email_to:
        log.warning(
            "alert %s: SMTP connection %r is not defined; email skipped", alert.alert_id, cfg.smtp_conn_id
        )
    if _connection_exists(cfg.webhook_conn_id):
        notifiers["webhook"] = webhook_notifier(alert, cfg.webhook_conn_id, cfg.webhook_endpoint)
    if not notifiers:
        raise RuntimeError(
            f"alert {alert.alert_id} has no channel: define Airflow connection {cfg.webhook_conn_id!r} "
            f"and/or {cfg.smtp_conn_id!r} with alerts.email_to in the pipeline config"
        )
    key = run_key(context)
    if key and alert.kind != "failure" and ledger.run_alert(key) != alert.alert_id:
        ledger.note_run(key, alert.alert_id)  # before sending: the run's own failure notice stays quiet
    used = []
    for channel, notifier in notifiers.items():
        if ledger.was_sent(alert.alert_id, channel):
            log.info("alert %s already sent by %s; not sending again", alert.alert_id, channel)
            continue
        notifier.notify({})  # an alert is finished text, not a template: nothing to render
        ledger.record(alert.alert_id, channel)
        used.append(channel)
        log.info("alert %s sent by %s: %s", alert.alert_id, channel, alert.subject)
    return used


def run_key(context: Any) -> str | None:
    """``<dag_id>/<run_id>`` of the run a task or DAG callback ``context`` belongs to."""
    if not context:
        return None
    dag, run_id = context.get("dag"), context.get("run_id")
    return f"{dag.dag_id}/{run_id}" if dag is not None and run_id else None
