"""The Tidemark view in the Airflow UI: a FastAPI app mounted by the plugin at ``/tidemark``.

Every route requires an authenticated Airflow user (plugin FastAPI apps are not protected by
default; the dependency below uses Airflow's own auth manager: the UI's session cookie or a
``Bearer`` token from ``/auth/token``). Reading state never starts Spark: the watermark status
and reconciliation rows come from the Delta tables through delta-rs, and the job's liveness from
its heartbeat file.

Routes: ``/`` (HTML page, shown inside the Airflow UI as an external view), ``/api/pipelines``
(JSON of the same), ``/reports/{pipeline}/{path}`` (the data-quality reports and Data Docs).
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import Any

from airflow.api_fastapi.core_api.security import requires_authenticated
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse

from tidemark_airflow.pipelines import Pipeline, configured_pipelines

log = logging.getLogger(__name__)

app = FastAPI(
    title="Tidemark",
    description="Watermark, lag, lagging hosts and reconciliation per pipeline",
    dependencies=[Depends(requires_authenticated())],
)


def report_files(pipeline: Pipeline) -> dict[str, Path]:
    """The data-quality reports of a pipeline that exist on disk, by label."""
    try:
        from tidemark.report import report_locations
    except ImportError:  # reports not built by this installation
        return {}
    return {label: Path(p) for label, p in report_locations(pipeline.config).items() if Path(p).is_file()}


def pipeline_summary(pipeline: Pipeline, windows: int = 12) -> dict[str, Any]:
    from tidemark import liveness
    from tidemark.status import read_status
    from tidemark.timeutil import format_instant_ms
    from tidemark_airflow.reconciliation import reconciliation_rows

    config = pipeline.config
    summary: dict[str, Any] = {"pipeline": pipeline.name, "config": pipeline.config_path}
    try:
        summary["status"] = read_status(config).to_dict(limit=config.alerts.max_hosts_listed)
    except Exception as exc:  # one broken pipeline must not hide the others
        summary["status"] = None
        summary["error"] = f"status: {type(exc).__name__}: {exc}"
    job = liveness.assess(config, hang_after_ms=config.airflow.hang_after)
    summary["job"] = {"state": job.state, "reason": job.reason}
    try:
        rows = reconciliation_rows(config)
    except Exception as exc:
        rows = None
        summary["error"] = f"reconciliation: {type(exc).__name__}: {exc}"
    recent = []
    if rows is not None and not rows.empty:
        for _, row in rows.tail(windows).iterrows():
            alignment = row["alignment"]
            recent.append(
                {
                    "window_start": format_instant_ms(int(row["window_start_ms"])),
                    "status": row["status"],
                    "stream": int(row["stream_events"]),
                    "batch": int(row["batch_events"]),
                    "late": int(row["late_events"]),
                    "alignment": None if alignment != alignment else float(alignment),  # NaN -> None
                    "aligned": None
                    if row["aligned"] is None or row["aligned"] != row["aligned"]
                    else bool(row["aligned"]),
                    "unexplained": int(row["unexplained"]),
                }
            )
    summary["reconciliation"] = recent
    summary["target"] = config.reconcile.target
    summary["reports"] = {label: f"reports/{pipeline.name}/{label}" for label in report_files(pipeline)}
    return summary


@app.get("/api/pipelines")
def api_pipelines() -> list[dict[str, Any]]:
    return [pipeline_summary(p) for p in configured_pipelines()]


@app.get("/reports/{pipeline}/{label}")
def report(pipeline: str, label: str) -> FileResponse:
    for p in configured_pipelines():
        if p.name == pipeline:
            files = report_files(p)
            if label in files:
                return FileResponse(files[label], media_type="text/html")
    raise HTTPException(status_code=404, detail=f"no report {label!r} for pipeline {pipeline!r}")


_STATE_COLOURS = {"ADVANCING": "#1a7f37", "STALLED": "#cf222e", "WAITING": "#9a6700", "RUNNING": "#1a7f37"}


def _fmt_alignment(value: float | None) -> str | None:
    return None if value is None else f"{value:.6f}"


def _e(value: Any) -> str:
    return html.escape("-" if value is None else str(value))


def render(summaries: list[dict[str, Any]]) -> str:
    from tidemark.timeutil import humanize_ms

    parts = []
    for s in summaries:
        st = s.get("status") or {}
        state = st.get("state", "UNKNOWN")
        lag = st.get("event_time_lag_ms")
        job = s["job"]
        parts.append(
            f'<section class="pipeline" data-pipeline="{_e(s["pipeline"])}">'
            f"<h2>{_e(s['pipeline'])}</h2>"
            + (f'<p class="error">{_e(s["error"])}</p>' if s.get("error") else "")
            + '<table class="facts">'
            f'<tr><th>watermark</th><td class="watermark">{_e(st.get("watermark"))}</td></tr>'
            f'<tr><th>state</th><td class="state" style="color:{_STATE_COLOURS.get(state, "#57606a")}">'
            f"<b>{_e(state)}</b>"
            + (f" since {_e(st.get('stalled_since'))}" if st.get("stalled_since") else "")
            + "</td></tr>"
            f"<tr><th>lag</th><td>{_e(humanize_ms(lag) if lag is not None else None)} behind the median host</td></tr>"
            f"<tr><th>last advanced</th><td>{_e(humanize_ms(st['since_advance_ms']) + ' ago' if st.get('since_advance_ms') is not None else None)}</td></tr>"
            f"<tr><th>last batch</th><td>{_e(st.get('last_batch_id'))} committed {_e(st.get('last_commit'))}</td></tr>"
            f"<tr><th>hosts</th><td>{_e(st.get('hosts_total'))} expected, {_e(st.get('hosts_reporting'))} reporting, "
            f"{_e(st.get('hosts_lagging'))} lagging (allowed {_e(st.get('allowed_lagging'))})</td></tr>"
            f'<tr><th>streaming job</th><td style="color:{_STATE_COLOURS.get(job["state"], "#57606a")}">'
            f"{_e(job['state'])}: {_e(job['reason'])}</td></tr>"
            "</table>"
        )
        lagging = st.get("lagging_hosts") or []
        if lagging:
            rows = "".join(
                f"<tr><td>{_e(h['host'])}</td><td>{_e(humanize_ms(h['lag_ms']) if h.get('lag_ms') is not None else 'never reported')}</td></tr>"
                for h in lagging
            )
            parts.append(
                f"<h3>Lagging hosts ({len(lagging)} of {_e(st.get('hosts_lagging'))}, worst first)</h3>"
                f'<table class="lagging"><tr><th>host</th><th>lag</th></tr>{rows}</table>'
            )
        recon = s.get("reconciliation") or []
        if recon:
            rows = "".join(
                f'<tr class="{"bad" if w["aligned"] is False else ""}"><td>{_e(w["window_start"])}</td><td>{_e(w["status"])}</td>'
                f"<td>{w['stream']:,}</td><td>{w['batch']:,}</td><td>{w['late']:,}</td>"
                f"<td>{_e(_fmt_alignment(w['alignment']))}</td><td>{w['unexplained']:,}</td></tr>"
                for w in recon
            )
            parts.append(
                f"<h3>Last reconciled windows (target {_e(s['target'])})</h3>"
                '<table class="reconciliation"><tr><th>window start</th><th>status</th><th>stream</th>'
                f"<th>batch</th><th>late</th><th>alignment</th><th>unexplained</th></tr>{rows}</table>"
            )
        else:
            parts.append("<p>No reconciliation yet.</p>")
        links = " · ".join(
            f'<a href="{_e(href)}" target="_blank">{_e(label)}</a>' for label, href in s["reports"].items()
        )
        parts.append(f'<p class="reports">Data-quality reports: {links or "none yet"}</p></section>')
    body = "".join(parts) or "<p>No pipelines configured (TIDEMARK_PIPELINES_DIR).</p>"
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Tidemark</title>"
        "<meta http-equiv='refresh' content='30'>"
        "<style>body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1f2328}"
        "table{border-collapse:collapse;margin:.5rem 0 1rem}td,th{padding:.25rem .7rem;border-bottom:1px solid #d0d7de;"
        "text-align:left}th{color:#57606a;font-weight:600}tr.bad td{background:#ffebe9}.error{color:#cf222e}"
        "section{margin-bottom:2rem}</style></head><body><h1>Tidemark</h1>" + body + "</body></html>"
    )


@app.get("/", response_class=HTMLResponse)
def index() -> str:
    return render(api_pipelines())
