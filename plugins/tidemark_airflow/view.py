"""The Tidemark view in the Airflow UI: a FastAPI app mounted by the plugin at ``/tidemark``.

**Who may see what.** Plugin FastAPI apps are not protected by default; every route here goes
through Airflow's auth manager (the UI's session cookie or a ``Bearer`` token from
``/auth/token``) and checks *authorization*, not only a login: the user must be allowed to
access plugin views (``requires_access_view(AccessView.PLUGINS)``, else 403); each pipeline is
shown, and its reports served, only to users who may read *its* reconciliation DAG
(``is_authorized_dag`` with that DAG's id): another pipeline's pages are 404 to them.

**What it shows**, per pipeline, read through delta-rs (never Spark) by :mod:`tidemark.dashboard`:
the watermark over processing time with recorded stalls shaded, how many hosts are how far behind
(the lagging ones named), the last 24 hours of window alignment against the target, the job's
liveness, and links to each reconciled hour's report, the latest report and the Data Docs. The
page refreshes its dashboard every 15 s (``?refresh=SECONDS``) by fetching ``fragment``: no page
reload, so scroll position and the browser history stay.

Routes: ``/`` (the page, embedded in the Airflow UI as an external view), ``/fragment`` (the
dashboard's HTML), ``/api/pipelines`` (JSON of the same), ``/reports/{pipeline}/{path}`` (the
published reports and the whole Data Docs site, so the links inside them resolve).
"""

from __future__ import annotations

import html
import json
import logging
import mimetypes
from pathlib import Path
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_view
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse

from tidemark_airflow.pipelines import Pipeline, configured_pipelines

log = logging.getLogger(__name__)

REFRESH_SECONDS = 15
HOUR_REPORTS_LISTED = 24
# what /reports serves from a pipeline's quality root (GX's own config and outcomes stay private)
SERVED = ("reconciliation.html", "hours/", "gx/uncommitted/data_docs/")

# Every published page and Data Docs file is served inert: scripts do not run (``sandbox`` without
# ``allow-scripts``), nothing loads from another origin, and the browser never guesses a type. A
# value from the data that reached a page as markup (a hostile event_id in a GX sample) cannot
# act as the logged-in user on Airflow's own origin. Data Docs read well without their scripts.
REPORT_HEADERS = {
    "Content-Security-Policy": (
        "sandbox allow-popups allow-popups-to-escape-sandbox; default-src 'none'; "
        "img-src 'self' data:; style-src 'self' 'unsafe-inline'; font-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

app = FastAPI(
    title="Tidemark",
    description="Watermark, host lag, alignment and reports per pipeline",
    # no public /docs, /redoc or /openapi.json: the API is this view's, not a published one
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
    # plugin views only: which pipelines a user sees is decided per pipeline (readable_pipelines),
    # never by a DAG check without a DAG id, which any DAG's reader would pass
    dependencies=[Depends(requires_access_view(AccessView.PLUGINS))],
)


def reconciliation_dag_id(pipeline: str) -> str:
    return f"tidemark_reconciliation__{pipeline}"


def readable_pipelines(user) -> list[Pipeline]:
    """The configured pipelines whose DAGs the user may read."""
    from airflow.api_fastapi.app import get_auth_manager

    manager = get_auth_manager()
    return [
        p
        for p in configured_pipelines()
        if manager.is_authorized_dag(
            method="GET", details=DagDetails(id=reconciliation_dag_id(p.name)), user=user
        )
    ]


def _quality_root(pipeline: Pipeline) -> Path:
    from tidemark.quality_site import quality_root

    return quality_root(pipeline.config)


def report_links(pipeline: Pipeline, root: str = "") -> dict[str, Any]:
    """Hrefs of the pipeline's published pages: ``pages`` by label (latest report, Data Docs,
    validation history) and ``hours`` (one report per reconciled range, newest first)."""
    from tidemark.report import range_reports, report_locations
    from tidemark.timeutil import format_instant_ms

    base = _quality_root(pipeline)
    prefix = f"{root}/reports/{pipeline.name}/"
    pages = {
        label: prefix + path.relative_to(base).as_posix()
        for label, path in report_locations(pipeline.config).items()
    }
    hours = [
        {
            "start": format_instant_ms(r.start_ms),
            "end": format_instant_ms(r.end_ms),
            "href": prefix + r.path.relative_to(base).as_posix(),
        }
        for r in range_reports(pipeline.config)[:HOUR_REPORTS_LISTED]
    ]
    return {"pages": pages, "hours": hours}


def pipeline_summary(pipeline: Pipeline, root: str = "") -> tuple[dict[str, Any], Any]:
    """The pipeline's numbers as JSON-ready data, and the :class:`tidemark.dashboard.Dashboard`
    they came from (None when its tables could not be read)."""
    from tidemark import liveness
    from tidemark.dashboard import load_dashboard
    from tidemark.timeutil import format_instant_ms

    config = pipeline.config
    summary: dict[str, Any] = {"pipeline": pipeline.name, "config": pipeline.config_path}
    dashboard = None
    try:
        dashboard = load_dashboard(config)
    except Exception as exc:  # one broken pipeline must not hide the others
        summary["error"] = f"{type(exc).__name__}: {exc}"
    status = dashboard.status if dashboard is not None else None
    summary["status"] = status.to_dict(limit=config.alerts.max_hosts_listed) if status is not None else None
    job = liveness.assess(config, hang_after_ms=config.airflow.hang_after)
    summary["job"] = {"state": job.state, "reason": job.reason}
    summary["target"] = config.reconcile.target
    if dashboard is not None:
        summary["lag_histogram"] = [
            {"lo_ms": b.lo_ms, "hi_ms": b.hi_ms, "hosts": b.hosts} for b in dashboard.lag_bins
        ]
        summary["never_reported"] = dashboard.never_reported
        summary["alignment"] = [
            {
                "window_start": format_instant_ms(p.window_start_ms),
                "alignment": p.alignment,
                "aligned": p.aligned,
            }
            for p in dashboard.alignment
        ]
        summary["stalls"] = [
            {"start": format_instant_ms(s), "end": format_instant_ms(e)} for s, e in dashboard.stalls
        ]
    summary["reports"] = report_links(pipeline, root)
    return summary, dashboard


@app.get("/api/pipelines")
def api_pipelines(request: Request, user: GetUserDep) -> list[dict[str, Any]]:
    root = request.scope.get("root_path", "")
    return [pipeline_summary(p, root)[0] for p in readable_pipelines(user)]


@app.get("/reports/{pipeline}/{path:path}")
def report(pipeline: str, path: str, user: GetUserDep) -> FileResponse:
    """A published page or Data Docs file of a pipeline the user may read (404 otherwise), with
    :data:`REPORT_HEADERS`."""
    if "\x00" in path or "\x00" in pipeline:  # a NUL is no path: 404, not a 500 from resolve()
        raise HTTPException(status_code=404, detail="no such page")
    for p in readable_pipelines(user):
        if p.name != pipeline:
            continue
        base = _quality_root(p).resolve()
        target = (base / path).resolve()
        inside = target.is_relative_to(base)
        relative = target.relative_to(base).as_posix() if inside else ""
        if inside and target.is_file() and any(relative == s or relative.startswith(s) for s in SERVED):
            media = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
            return FileResponse(target, media_type=media, headers=REPORT_HEADERS)
        break
    raise HTTPException(status_code=404, detail=f"no page {path!r} for pipeline {pipeline!r}")


_STATE_COLOURS = {"ADVANCING": "#1a7f37", "STALLED": "#cf222e", "WAITING": "#9a6700", "RUNNING": "#1a7f37"}


def _e(value: Any) -> str:
    return html.escape("-" if value is None else str(value))


def _facts(s: dict[str, Any]) -> str:
    from tidemark.timeutil import humanize_ms

    st = s.get("status") or {}
    state = st.get("state", "UNKNOWN")
    lag = st.get("event_time_lag_ms")
    job = s["job"]
    since = st.get("since_advance_ms")
    return (
        '<table class="facts">'
        f'<tr><th>watermark</th><td class="watermark">{_e(st.get("watermark"))}</td></tr>'
        f'<tr><th>state</th><td class="state" style="color:{_STATE_COLOURS.get(state, "#57606a")}">'
        f"<b>{_e(state)}</b>"
        + (f" since {_e(st.get('stalled_since'))}" if st.get("stalled_since") else "")
        + "</td></tr>"
        f"<tr><th>lag</th><td>{_e(humanize_ms(lag) if lag is not None else None)} behind the median host</td></tr>"
        f"<tr><th>last advanced</th><td>{_e(humanize_ms(since) + ' ago' if since is not None else None)}</td></tr>"
        f"<tr><th>last batch</th><td>{_e(st.get('last_batch_id'))} committed {_e(st.get('last_commit'))}</td></tr>"
        f"<tr><th>hosts</th><td>{_e(st.get('hosts_total'))} expected, {_e(st.get('hosts_reporting'))} reporting, "
        f"{_e(st.get('hosts_lagging'))} lagging (allowed {_e(st.get('allowed_lagging'))})</td></tr>"
        f'<tr><th>streaming job</th><td class="job" style="color:{_STATE_COLOURS.get(job["state"], "#57606a")}">'
        f"{_e(job['state'])}: {_e(job['reason'])}</td></tr>"
        "</table>"
    )


def _lagging(s: dict[str, Any]) -> str:
    from tidemark.timeutil import humanize_ms

    st = s.get("status") or {}
    lagging = st.get("lagging_hosts") or []
    if not lagging:
        return '<p class="lagging-none">No host lags beyond the threshold.</p>'
    rows = "".join(
        f'<tr><td class="host">{_e(h["host"])}</td><td>'
        f"{_e(humanize_ms(h['lag_ms']) if h.get('lag_ms') is not None else 'never reported')}</td></tr>"
        for h in lagging
    )
    return (
        f"<h3>Lagging hosts ({len(lagging)} of {_e(st.get('hosts_lagging'))}, worst first)</h3>"
        f'<table class="lagging"><tr><th>host</th><th>behind the median host</th></tr>{rows}</table>'
    )


def _links(s: dict[str, Any]) -> str:
    reports = s["reports"]
    names = {
        "reconciliation": "latest report",
        "data-docs": "Data Docs",
        "quality-history": "validation history",
    }
    pages = " · ".join(
        f'<a class="report" data-label="{_e(label)}" href="{_e(href)}" target="_blank">{_e(names.get(label, label))}</a>'
        for label, href in reports["pages"].items()
    )
    hours = "".join(
        f'<li><a class="hour-report" data-start="{_e(h["start"])}" data-end="{_e(h["end"])}" '
        f'href="{_e(h["href"])}" target="_blank">{_e(h["start"][:16].replace("T", " "))} – '
        f"{_e(h['end'][11:16])} UTC</a></li>"
        for h in reports["hours"]
    )
    return f'<p class="reports">Reports: {pages or "none yet"}</p>' + (
        f'<details class="hours" open><summary>Reconciled hours</summary><ul>{hours}</ul></details>'
        if hours
        else ""
    )


def render_fragment(items: list[tuple[dict[str, Any], Any]]) -> str:
    """The dashboard's HTML (the part the page refreshes)."""
    from tidemark.dashboard import alignment_plot, lag_histogram_plot, watermark_plot

    parts = []
    for s, d in items:
        parts.append(
            f'<section class="pipeline" data-pipeline="{_e(s["pipeline"])}"><h2>{_e(s["pipeline"])}</h2>'
            + (f'<p class="error">{_e(s["error"])}</p>' if s.get("error") else "")
            + '<div class="row">'
            + _facts(s)
            + _links(s)
            + "</div>"
        )
        if d is not None:
            # The charts are Markup (rendered by Jinja2); joined as str, since Markup + str would
            # escape the str (the row's markup once showed on the page as text).
            parts.append(
                str(watermark_plot(d))
                + '<div class="row">'
                + str(lag_histogram_plot(d))
                + f'<div class="lagging-list">{_lagging(s)}</div>'
                + "</div>"
                + str(alignment_plot(d))
            )
        parts.append("</section>")
    return "".join(parts) or "<p>No pipelines you may read are configured (TIDEMARK_PIPELINES_DIR).</p>"


PAGE_CSS = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem;color:#1f2328}"
    "h2{margin:.2rem 0 .6rem}section{margin-bottom:2.5rem;border-bottom:2px solid #d0d7de}"
    "table{border-collapse:collapse;margin:.5rem 0 1rem}td,th{padding:.25rem .7rem;"
    "border-bottom:1px solid #d0d7de;text-align:left}th{color:#57606a;font-weight:600}"
    ".row{display:flex;flex-wrap:wrap;gap:1.5rem;align-items:flex-start}.error{color:#cf222e}"
    "figure.chart{margin:12px 0;border:1px solid #e2e8f0;border-radius:6px;padding:8px}"
    "figcaption{font-weight:600;margin:0 0 4px}.legend{font-weight:400;color:#4a5568;margin-left:12px;"
    "font-size:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}"
    ".target-key{color:#c53030}svg{max-width:100%;height:auto}svg .grid{stroke:#edf2f7}"
    "svg .axis{stroke:#718096}svg .tick{font-size:11px;fill:#4a5568}svg .label{font-size:12px;fill:#2d3748}"
    "svg .series{fill:none;stroke:#2b6cb0;stroke-width:1.5}"
    "svg .target{stroke:#c53030;stroke-dasharray:6 4;stroke-width:1.5}"
    ".hours ul{columns:2;margin:.3rem 0;padding-left:1.2rem}#updated{color:#57606a;font-size:12px}"
)


def render_page(fragment: str, root: str, refresh_seconds: int, refreshed_at: str) -> str:
    script = (
        "<script>(function(){"
        f"const url={json.dumps(root + '/fragment')};const every={refresh_seconds * 1000};"
        "async function refresh(){try{const r=await fetch(url,{credentials:'same-origin',cache:'no-store'});"
        "if(!r.ok){document.getElementById('updated').textContent='refresh failed: HTTP '+r.status;return;}"
        "const html=await r.text();document.getElementById('dashboard').innerHTML=html;"
        "const at=new Date().toISOString();document.body.dataset.refreshedAt=at;"
        "document.getElementById('updated').textContent='updated '+at;"
        "}catch(e){document.getElementById('updated').textContent='refresh failed: '+e;}}"
        "setInterval(refresh,every);})();</script>"
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Tidemark</title>"
        f"<style>{PAGE_CSS}</style></head><body data-refreshed-at='{_e(refreshed_at)}'>"
        f"<h1>Tidemark</h1><p id='updated'>updated {_e(refreshed_at)} · refreshes every {refresh_seconds} s</p>"
        f"<main id='dashboard'>{fragment}</main>{script}</body></html>"
    )


def _items(request: Request, user) -> list[tuple[dict[str, Any], Any]]:
    root = request.scope.get("root_path", "")
    return [pipeline_summary(p, root) for p in readable_pipelines(user)]


@app.get("/fragment", response_class=HTMLResponse)
def fragment(request: Request, user: GetUserDep) -> str:
    return render_fragment(_items(request, user))


@app.get("/", response_class=HTMLResponse)
def index(request: Request, user: GetUserDep, refresh: int = REFRESH_SECONDS) -> str:
    from tidemark.timeutil import format_instant_ms, now_ms

    root = request.scope.get("root_path", "")
    return render_page(
        render_fragment(_items(request, user)), root, max(2, refresh), format_instant_ms(now_ms())
    )
