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
import urllib.request
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
    kind: str  # stall | recovery | misaligned | restarts | quality
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
        from airflow.sdk import Variable

        raw = Variable.get(self.key, default=None)
        data = json.loads(raw) if raw else {}
        data.setdefault("sent", {})
        data.setdefault("open", {})
        return data

    def save(self) -> None:
        from airflow.sdk import Variable

        sent = self.data["sent"]
        if len(sent) > self.KEEP:
            for old in sorted(sent, key=lambda k: sent[k].get("at", 0))[: len(sent) - self.KEEP]:
                del sent[old]
        Variable.set(self.key, json.dumps(self.data, sort_keys=True), description="Tidemark alert ledger")

    def was_sent(self, alert_id: str, channel: str) -> bool:
        return channel in self.data["sent"].get(alert_id, {}).get("channels", [])

    def record(self, alert_id: str, channel: str) -> None:
        entry = self.data["sent"].setdefault(alert_id, {"channels": [], "at": now_ms()})
        entry["channels"].append(channel)
        self.save()

    def open_incident(self, kind: str) -> dict[str, Any] | None:
        return self.data["open"].get(kind)

    def set_incident(self, kind: str, value: dict[str, Any] | None) -> None:
        if value is None:
            self.data["open"].pop(kind, None)
        else:
            self.data["open"][kind] = value
        self.save()


class WebhookNotifier(BaseNotifier):
    """POST a JSON document to the URL of an Airflow HTTP connection.

    The connection's host (with scheme), port and schema (path) form the URL; its ``extra`` may
    hold ``headers`` (e.g. an auth token) and ``timeout`` seconds. Chat tools (Slack, Teams,
    Mattermost incoming webhooks) accept such a POST; ``text`` carries the readable message.
    """

    template_fields = ("payload",)

    def __init__(self, *, payload: dict[str, Any], conn_id: str = "tidemark_webhook", **kwargs) -> None:
        super().__init__(**kwargs)
        self.payload = payload
        self.conn_id = conn_id

    def url(self) -> tuple[str, dict[str, str], float]:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(self.conn_id)
        host = conn.host or ""
        if "://" not in host:
            scheme = "https" if conn.conn_type == "https" else "http"
            host = f"{scheme}://{host}"
        url = host.rstrip("/")
        if conn.port:
            url += f":{conn.port}"
        if conn.schema:
            url += "/" + conn.schema.lstrip("/")
        extra = conn.extra_dejson or {}
        headers = {"Content-Type": "application/json", **extra.get("headers", {})}
        return url, headers, float(extra.get("timeout", 10))

    def notify(self, context) -> None:
        url, headers, timeout = self.url()
        body = json.dumps(self.payload).encode()
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            if response.status >= 300:
                raise RuntimeError(f"webhook {self.conn_id} answered HTTP {response.status}")


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
        notifiers["webhook"] = WebhookNotifier(payload=alert.payload(), conn_id=cfg.webhook_conn_id)
    if not notifiers:
        raise RuntimeError(
            f"alert {alert.alert_id} has no channel: define Airflow connection {cfg.webhook_conn_id!r} "
            f"and/or {cfg.smtp_conn_id!r} with alerts.email_to in the pipeline config"
        )
    used = []
    for channel, notifier in notifiers.items():
        if ledger.was_sent(alert.alert_id, channel):
            log.info("alert %s already sent by %s; not sending again", alert.alert_id, channel)
            continue
        notifier.notify(context or {})
        ledger.record(alert.alert_id, channel)
        used.append(channel)
        log.info("alert %s sent by %s: %s", alert.alert_id, channel, alert.subject)
    return used
