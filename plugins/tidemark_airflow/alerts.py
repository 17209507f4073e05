"""Alerts: email through Airflow's SMTP notifier, a JSON webhook and Slack, each sent once, each
with the links an operator acts on: its runbook and the dashboards.

An alert has a stable ``alert_id`` (``stall:<pipeline>:<watermark>``, ...). Before a channel is
used, a ledger kept in an Airflow Variable (``tidemark_alerts__<pipeline>``) is checked; after it
succeeded, the send is recorded. So a retried task, or the next run of a monitor DAG, does not
send the same alert twice. The one gap a ledger cannot close (the process dies between the send
and the record) is covered at the receiver: the webhook payload carries ``alert_id`` and the
email a ``Message-ID`` derived from it, which receivers and mail clients use to drop the copy.

Channels are Airflow connections named in the pipeline config (``alerts.smtp_conn_id``,
``alerts.webhook_conn_id``, ``alerts.slack_conn_id``: a Slack incoming webhook through the Slack
provider's ``SlackWebhookNotifier``): no address, URL or secret is written in code. A channel whose
connection does not exist is skipped with a warning; an alert with no channel at all fails loudly.

Every alert carries ``links`` (:func:`alert_links`): ``runbook``, its section of the operations page
of the documentation site (``alerts.docs_url`` + ``operations/#runbook-...``, stable anchors:
:data:`RUNBOOKS`), ``tidemark_view``, the Tidemark view in the Airflow UI (Airflow's ``[api]
base_url`` + ``/tidemark/``) and, with ``alerts.dashboard_url`` set, ``dashboard`` (Grafana). The
email lists them under the text, the webhook's JSON has them, the Slack message links them.

Every alert is made by one builder per kind, so its id, subject and body are written in one place:
:func:`stall_alert`, :func:`recovery_alert`, :func:`restarts_alert`, :func:`misaligned_alert`,
:func:`quality_alert` and :func:`failure_alert`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseNotifier

from tidemark.config import PipelineConfig
from tidemark.timeutil import format_instant_ms, humanize_ms, now_ms

if TYPE_CHECKING:
    from tidemark.liveness import Liveness
    from tidemark.status import PipelineStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Alert:
    alert_id: str
    pipeline: str
    kind: str  # stall | recovery | misaligned | restarts | quality | failure
    subject: str
    text: str
    details: dict[str, Any] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # label -> URL (alert_links)

    def payload(self) -> dict[str, Any]:
        return {"source": "tidemark", **asdict(self), "sent_at_ms": now_ms()}

    def html(self) -> str:
        from html import escape

        listed = "".join(
            f'<li><a href="{escape(url)}">{escape(LINK_NAMES.get(label, label))}</a></li>'
            for label, url in self.links.items()
        )
        return f"<h3>{escape(self.subject)}</h3><pre>{escape(self.text)}</pre>" + (
            f"<ul>{listed}</ul>" if listed else ""
        )

    def slack_text(self) -> str:
        """The Slack message (mrkdwn): the subject in bold, the text as a block, then the links."""

        def esc(text: str) -> str:  # Slack's three control characters
            return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

        links = " · ".join(f"<{url}|{LINK_NAMES.get(label, label)}>" for label, url in self.links.items())
        return f"*{esc(self.subject)}*\n```{esc(self.text)}```" + (f"\n{links}" if links else "")

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

    def note_restart(self, at_ms: int, window_ms: int) -> list[int]:
        """Record a restart at ``at_ms``; return the restarts within ``window_ms`` of it, oldest first."""
        restarts = [t for t in self.data.get("restarts", []) if at_ms - t <= window_ms] + [at_ms]
        self.data["restarts"] = restarts
        self.save()
        return restarts


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


# The runbook of each kind of alert: a stable anchor of a section of docs/operations.md.
# (each heading there carries it as an explicit {#id}, so rewording a heading keeps the links)
RUNBOOKS = {
    "stall": "runbook-the-watermark-stalled",
    "recovery": "runbook-the-watermark-stalled",
    "restarts": "runbook-a-dead-stream",
    "misaligned": "runbook-a-misaligned-hour",
    "quality": "runbook-a-failing-data-quality-suite",
    "failure": "runbook-a-failed-run",
}
LINK_NAMES = {"runbook": "Runbook", "tidemark_view": "Tidemark view", "dashboard": "Dashboard"}
OPERATIONS_PAGE = "operations/"  # docs/operations.md on the mkdocs site (directory URLs)


def alert_links(config: PipelineConfig, kind: str) -> dict[str, str]:
    """The links of an alert of ``kind``: its runbook on the documentation site, the Tidemark view
    in the Airflow UI and, when configured, the pipeline's dashboard (``alerts.dashboard_url``)."""
    from airflow.sdk.configuration import conf

    cfg = config.alerts
    links = {"runbook": f"{cfg.docs_url.rstrip('/')}/{OPERATIONS_PAGE}#{RUNBOOKS[kind]}"}
    airflow = (conf.get("api", "base_url", fallback=None) or "http://localhost:8080").rstrip("/")
    links["tidemark_view"] = f"{airflow}/tidemark/"
    if cfg.dashboard_url:
        links["dashboard"] = cfg.dashboard_url
    return links


def slack_notifier(alert: Alert, conn_id: str) -> BaseNotifier:
    """The Slack provider's ``SlackWebhookNotifier`` posting the alert to the incoming webhook of
    the connection ``conn_id`` (type ``slackwebhook``: the webhook URL, or its token with the host,
    in the password)."""
    from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

    return SlackWebhookNotifier(slack_webhook_conn_id=conn_id, text=alert.slack_text(), unfurl_links=False)


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
    """Send ``alert``, with its links (:func:`alert_links`), on every configured channel it was
    not yet sent on; return those used."""
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier

    ledger = ledger or AlertLedger(config.pipeline)
    cfg = config.alerts
    alert = replace(alert, links={**alert_links(config, alert.kind), **alert.links})
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
    if _connection_exists(cfg.slack_conn_id):
        notifiers["slack"] = slack_notifier(alert, cfg.slack_conn_id)
    if not notifiers:
        raise RuntimeError(
            f"alert {alert.alert_id} has no channel: define Airflow connection {cfg.webhook_conn_id!r}, "
            f"{cfg.slack_conn_id!r} and/or {cfg.smtp_conn_id!r} with alerts.email_to in the pipeline config"
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


# -- the alerts, one builder per kind -----------------------------------------------------------
def _subject(pipeline: str, what: str) -> str:
    return f"[tidemark] {pipeline}: {what}"


def stall_alert(config: PipelineConfig, status: PipelineStatus) -> Alert:
    """The watermark stalled (too many hosts lag); one per stall: its id is the stalled watermark."""
    s, limit = status.status, config.alerts.max_hosts_listed
    return Alert(
        alert_id=f"stall:{config.pipeline}:{s.watermark_ms}",
        pipeline=config.pipeline,
        kind="stall",
        subject=_subject(
            config.pipeline,
            f"watermark STALLED at {format_instant_ms(s.watermark_ms)} for "
            f"{humanize_ms(s.since_advance_ms or 0)}: {s.hosts_lagging:,} hosts lag "
            f"(allowed {s.allowed_lagging:,})",
        ),
        text=status.text(limit),
        details=status.to_dict(limit),
    )


def recovery_alert(config: PipelineConfig, status: PipelineStatus, incident: Mapping[str, Any]) -> Alert:
    """The stall recorded as ``incident`` (``alert_id``, ``watermark_ms``, ``noticed_at_ms``) ended."""
    s, limit = status.status, config.alerts.max_hosts_listed
    stalled_at = int(incident["watermark_ms"])
    lasted = now_ms() - int(incident["noticed_at_ms"])
    return Alert(
        alert_id=f"{incident['alert_id']}:recovered",
        pipeline=config.pipeline,
        kind="recovery",
        subject=_subject(
            config.pipeline,
            f"watermark advancing again, now {format_instant_ms(s.watermark_ms)} "
            f"(stalled at {format_instant_ms(stalled_at)})",
        ),
        text=(
            f"The stall noticed {humanize_ms(lasted)} ago has ended: the watermark moved from "
            f"{format_instant_ms(stalled_at)} to {format_instant_ms(s.watermark_ms)}.\n\n"
            + status.text(limit)
        ),
        details={**status.to_dict(limit), "stalled_at_ms": stalled_at},
    )


def restarts_alert(
    config: PipelineConfig, restarts: list[int], state: Liveness, progress: PipelineStatus
) -> Alert:
    """The streaming job had to be restarted ``len(restarts)`` times within the restart window."""
    return Alert(
        alert_id=f"restarts:{config.pipeline}:{restarts[0]}",
        pipeline=config.pipeline,
        kind="restarts",
        subject=_subject(config.pipeline, f"streaming job restarted {len(restarts)} times"),
        text=(
            f"The streaming job of {config.pipeline} had to be restarted {len(restarts)} times "
            f"since {format_instant_ms(restarts[0])} (last: {state.state}, {state.reason}).\n"
            f"Last committed batch {progress.batch_id}, watermark "
            f"{format_instant_ms(progress.status.watermark_ms)}. "
            "See the job log beside the checkpoint."
        ),
        details={"restarts": restarts, "last_state": state.state},
    )


def misaligned_alert(config: PipelineConfig, summary: Mapping[str, Any]) -> Alert:
    """Windows of an interval below target, or unexplained differences (``interval_summary``). The
    text names a few of the records behind an unexplained difference with their hosts, and the
    totals (``summary["unexplained_records"]``); the details carry them."""
    start, end = summary["start_ms"], summary["end_ms"]
    span = f"{format_instant_ms(start)} .. {format_instant_ms(end)}"
    what = (
        f"{len(summary['misaligned'])} windows below {summary['target']} in {span}"
        if summary["misaligned"] or not summary.get("unexplained")
        else f"{summary['unexplained']:,} record(s) unexplained in {span}"
    )
    return Alert(
        alert_id=f"misaligned:{config.pipeline}:{start}:{end}:{summary['reconciled_at_ms']}",
        pipeline=config.pipeline,
        kind="misaligned",
        subject=_subject(config.pipeline, what),
        text=summary["text"],
        details={k: v for k, v in summary.items() if k != "text"},
    )


def quality_alert(
    config: PipelineConfig, outcome: Mapping[str, Any], pages: Mapping[str, str], run_id: Any
) -> Alert:
    """Great Expectations suites failed; ``outcome`` is the quality job's verdict (JSON)."""
    failing = list(outcome["failing"])
    more = f" (+{len(failing) - 5})" if len(failing) > 5 else ""
    return Alert(
        alert_id=f"quality:{config.pipeline}:{outcome['start']}:{outcome['end']}:{run_id}:"
        + ",".join(sorted(failing)),
        pipeline=config.pipeline,
        kind="quality",
        subject=_subject(
            config.pipeline,
            f"data quality FAILED for {outcome['start']} .. {outcome['end']}: {', '.join(failing[:5])}{more}",
        ),
        text="\n".join([outcome["text"], *(f"{label}: {page}" for label, page in pages.items())]),
        details={
            "failing": failing,
            "pages": dict(pages),
            "samples": {name: rows[:3] for name, rows in outcome["samples"].items()},
        },
    )


def failure_alert(config: PipelineConfig, context: Mapping[str, Any]) -> Alert:
    """A run of a Tidemark DAG failed (DAG callback ``context``); one per run."""
    dag_id = context["dag"].dag_id
    run_id = context.get("run_id")
    ti = context.get("ti")
    task = getattr(ti, "task_id", None)
    reason = context.get("reason") or "failed"
    lines = [
        f"DAG {dag_id}, run {run_id}: {reason}.",
        f"Failed task: {task or '-'}" + (f" (try {ti.try_number})" if ti is not None and task else "") + ".",
        *_interval_line(context),
    ]
    if ti is not None and getattr(ti, "log_url", None):
        lines.append(f"Log: {ti.log_url}")
    return Alert(
        alert_id=f"failure:{dag_id}:{run_id}",
        pipeline=config.pipeline,
        kind="failure",
        subject=_subject(
            config.pipeline, f"{dag_id} FAILED" + (f" at {task}" if task else "") + f" ({reason})"
        ),
        text="\n".join(lines),
        details={"dag_id": dag_id, "run_id": run_id, "task_id": task, "reason": reason},
    )


def _interval_line(context: Mapping[str, Any]) -> list[str]:
    """The range the run covers: its ``start``/``end`` params, else its data interval."""
    params = context.get("params") or {}
    if params.get("start") and params.get("end"):
        return [f"Range (params): {params['start']} .. {params['end']}."]
    lo, hi = context.get("data_interval_start"), context.get("data_interval_end")
    return [f"Data interval: {lo} .. {hi}."] if lo is not None and hi is not None else []
