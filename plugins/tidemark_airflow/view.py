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

**How it is drawn.** Both pages are autoescaped Jinja2 templates of the ``tidemark`` package
(``view.html.j2``, ``view_fragment.html.j2``, their blocks in ``_view_parts.html.j2``; the charts
from ``dashboard.svg.j2``), as the reconciliation report is: no HTML is assembled here, and a
pipeline, host or error text is text on the page, never markup.

Routes: ``/`` (the page, embedded in the Airflow UI as an external view), ``/fragment`` (the
dashboard's HTML), ``/api/pipelines`` (JSON of the same), ``/reports/{pipeline}/{path}`` (the
published reports and the whole Data Docs site, so the links inside them resolve).
"""

from __future__ import annotations

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
    validation history) and ``hours``: each reconciled range, newest first, with its published
    report (``href``, None until the final pass published it) and its recorded reconciliation
    ``passes`` by name (``on_time``, ``final``: :mod:`tidemark.passes`)."""
    from tidemark.report import range_reports, report_locations
    from tidemark.timeutil import format_instant_ms

    base = _quality_root(pipeline)
    prefix = f"{root}/reports/{pipeline.name}/"
    pages = {
        label: prefix + path.relative_to(base).as_posix()
        for label, path in report_locations(pipeline.config).items()
    }
    reports = {
        (r.start_ms, r.end_ms): prefix + r.path.relative_to(base).as_posix()
        for r in range_reports(pipeline.config)
    }
    passes = _passes(pipeline)
    hours = [
        {
            "start": format_instant_ms(start),
            "end": format_instant_ms(end),
            "href": reports.get((start, end)),
            "passes": {name: p.to_dict() for name, p in passes.get((start, end), {}).items()},
        }
        for start, end in sorted(set(reports) | set(passes), reverse=True)[:HOUR_REPORTS_LISTED]
    ]
    return {"pages": pages, "hours": hours}


def _passes(pipeline: Pipeline) -> dict[tuple[int, int], dict[str, Any]]:
    """The pipeline's recorded reconciliation passes by range; none when they cannot be read (the
    dashboard then shows why)."""
    from tidemark.passes import passes_by_range, read_passes

    try:
        return passes_by_range(read_passes(pipeline.config))
    except Exception as exc:  # one unreadable table must not hide the rest of the page
        log.warning("reconciliation passes of %s unreadable: %s", pipeline.name, exc)
        return {}


def pipeline_summary(pipeline: Pipeline, root: str = "") -> tuple[dict[str, Any], Any]:
    """The pipeline's numbers as JSON-ready data, and the :class:`tidemark.dashboard.Dashboard`
    they came from (None when its tables could not be read)."""
    from tidemark import liveness
    from tidemark.dashboard import load_dashboard
    from tidemark.resources import SetupError
    from tidemark.timeutil import format_instant_ms

    config = pipeline.config
    summary: dict[str, Any] = {"pipeline": pipeline.name, "config": pipeline.config_path}
    dashboard = None
    try:
        dashboard = load_dashboard(config)
    except Exception as exc:  # one broken pipeline must not hide the others
        summary["error"] = str(exc) if isinstance(exc, SetupError) else f"{type(exc).__name__}: {exc}"
    status = dashboard.status if dashboard is not None else None
    summary["status"] = status.to_dict(limit=config.alerts.max_hosts_listed) if status is not None else None
    try:
        job = liveness.assess(config, hang_after_ms=config.airflow.hang_after)
        summary["job"] = {"state": job.state, "reason": job.reason}
    except SetupError as exc:  # an unreadable object store: the CLI's one line
        summary["job"] = {"state": "UNKNOWN", "reason": str(exc)}
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


# The view's pages are autoescaped Jinja2 templates (tidemark/templates: view.html.j2, the page;
# view_fragment.html.j2, the dashboard it refreshes; _view_parts.html.j2, their blocks): a
# pipeline, host or error text lands on the page as text, never as markup. No HTML is assembled
# here: the charts come as Markup from their own templates and are placed by the page's.
PAGE_TEMPLATE = "view.html.j2"
FRAGMENT_TEMPLATE = "view_fragment.html.j2"


def dashboard_context(items: list[tuple[dict[str, Any], Any]]) -> list[dict[str, Any]]:
    """What the templates draw per pipeline: its summary and its charts (None when its tables
    could not be read)."""
    from tidemark.dashboard import alignment_plot, lag_histogram_plot, watermark_plot

    return [
        {
            "summary": s,
            "charts": None
            if d is None
            else {
                "watermark": watermark_plot(d),
                "lag": lag_histogram_plot(d),
                "alignment": alignment_plot(d),
            },
        }
        for s, d in items
    ]


def render_fragment(items: list[tuple[dict[str, Any], Any]]) -> str:
    """The dashboard's HTML (the part the page refreshes)."""
    from tidemark.charts import environment

    return environment().get_template(FRAGMENT_TEMPLATE).render(pipelines=dashboard_context(items))


def render_page(
    items: list[tuple[dict[str, Any], Any]], root: str, refresh_seconds: int, refreshed_at: str
) -> str:
    """The whole page: the dashboard and the script that refreshes it from ``root/fragment``."""
    from tidemark.charts import environment

    return (
        environment()
        .get_template(PAGE_TEMPLATE)
        .render(
            pipelines=dashboard_context(items),
            fragment_url=f"{root}/fragment",
            refresh_seconds=refresh_seconds,
            refreshed_at=refreshed_at,
        )
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
    return render_page(_items(request, user), root, max(2, refresh), format_instant_ms(now_ms()))
