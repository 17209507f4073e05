"""Where a pipeline's data-quality site is on disk, and its offline history page.

:func:`quality_root` is the Great Expectations project (``<warehouse>/<pipeline>/_quality`` by
default), :func:`data_docs_index` its Data Docs index. The history page of the validations,
``tidemark_history.html``
(:data:`HISTORY_PAGE`) beside the Great Expectations Data Docs index, one row per stored
validation result (newest first) with its verdict and failing checks, linking to GX's page for it.

Why: GX's own index lists results with JavaScript from public CDNs, so on an air-gapped worker,
in a headless browser or served with scripts off (the Airflow view's ``sandbox`` policy) its
result table is empty; this page is plain HTML with inline styles, and the newest results are
written onto the index page itself the same way. :func:`write_docs_history` writes both (the
runner, :mod:`tidemark.quality`, calls it after every Data Docs build); :func:`docs_history_page`
says where the page is.
"""

from __future__ import annotations

import html as H
import json
import os
from pathlib import Path
from urllib.parse import quote

from tidemark.config import PipelineConfig
from tidemark.storage import is_object_store

QUALITY_DIR = "_quality"
HISTORY_PAGE = "tidemark_history.html"
HISTORY_LIMIT = 500
INDEX_LIMIT = 50  # validations listed on the index page itself
_INDEX_OPEN, _INDEX_CLOSE = "<!-- tidemark:validations -->", "<!-- /tidemark:validations -->"

_STYLE = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;padding:0 16px;"
    "color:#1a202c}"
    "table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #e2e8f0;padding:4px 6px;"
    "text-align:left}th{background:#f7fafc}tr.bad td{background:#fff5f5}"
    "tr.bad td:nth-child(4){color:#c53030;"
    "font-weight:600}tr.ok td:nth-child(4){color:#2f855a}"
)


def quality_root(config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None) -> Path:
    """The GX file context's project root: ``quality_dir`` or ``<warehouse>/<pipeline>/_quality``.

    GX's file context and the pages the Airflow view serves need a local directory: for a
    warehouse on object storage the default is ``$TIDEMARK_HOME/var/quality/<pipeline>``."""
    if quality_dir is not None:
        return Path(quality_dir)
    if is_object_store(config.tables_root):
        return Path(os.environ.get("TIDEMARK_HOME", os.getcwd())) / "var" / "quality" / config.pipeline
    return Path(config.tables_root) / QUALITY_DIR


def data_docs_index(config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the Data Docs index page of the pipeline is (built or not): link this from the UI."""
    return (
        quality_root(config, quality_dir) / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    )


def docs_history_page(config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None) -> Path:
    """The offline history page beside the Data Docs index (see :func:`write_docs_history`)."""
    return data_docs_index(config, quality_dir).with_name(HISTORY_PAGE)


def write_docs_history(
    config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None, limit: int = HISTORY_LIMIT
) -> Path:
    """Write ``tidemark_history.html`` next to the Data Docs index: every stored validation (newest
    ``limit`` runs) with its verdict and failing checks, linking to GX's page for it."""
    root = quality_root(config, quality_dir) / "gx" / "uncommitted"
    rows = [
        row
        for run_time, suite, file in _stored_results(root / "validations")[:limit]
        if (row := _history_row(root, run_time, suite, file)) is not None
    ]
    index = data_docs_index(config, quality_dir)
    site = index.parent
    site.mkdir(parents=True, exist_ok=True)
    path = site / HISTORY_PAGE
    path.write_text(_history_html(config.pipeline, rows), encoding="utf-8")
    if index.is_file():
        _list_on_index(index, rows[:INDEX_LIMIT], len(rows))
    return path


def _list_on_index(index: Path, rows: list[str], total: int) -> None:
    """Put the newest validations on GX's index page itself as plain HTML, at the top of its body.

    GX builds its result table in the browser from a JavaScript array; the Airflow view serves
    every page with scripts off (``Content-Security-Policy: sandbox``), and an air-gapped browser
    cannot load GX's scripts from their CDNs either, so without this the index lists no result.
    Replaces the block a previous call left (GX rewrites the page on every build anyway)."""
    text = index.read_text(encoding="utf-8")
    start, end = text.find(_INDEX_OPEN), text.find(_INDEX_CLOSE)
    if start >= 0 and end > start:
        text = text[:start] + text[end + len(_INDEX_CLOSE) :]
    block = (
        f"{_INDEX_OPEN}<section id='tidemark-validations' style='margin:16px;font:14px/1.45 "
        "system-ui,sans-serif'><style>#tidemark-validations table{border-collapse:collapse;width:100%}"
        "#tidemark-validations th,#tidemark-validations td{border-bottom:1px solid #e2e8f0;"
        "padding:4px 6px;text-align:left}#tidemark-validations tr.bad td{background:#fff5f5}"
        "#tidemark-validations tr.bad td:nth-child(4){color:#c53030;font-weight:600}</style>"
        f"<h2>Validation results</h2><p>Newest {len(rows)} of {total} stored · "
        f"<a href='{HISTORY_PAGE}'>full history</a></p>"
        "<table><tr><th>run time</th><th>run</th><th>suite</th><th>verdict</th><th>passed</th>"
        "<th>failing checks</th></tr>" + "".join(rows) + f"</table></section>{_INDEX_CLOSE}"
    )
    body = text.find("<body")
    at = text.find(">", body) + 1 if body >= 0 else 0
    tmp = index.with_name(index.name + ".tmp")
    tmp.write_text(text[:at] + block + text[at:], encoding="utf-8")
    os.replace(tmp, index)


def _stored_results(store: Path) -> list[tuple[str, str, Path]]:
    """``(run_time, suite, file)`` of every result in GX's validations store
    (``<suite>/<run>/<run_time>/<batch>.json``), newest first."""
    runs: list[tuple[str, str, Path]] = []
    if store.is_dir():
        for file in store.glob("*/*/*/*.json"):
            runs.append((file.parent.name, file.parent.parent.parent.name, file))
    runs.sort(key=lambda r: (r[0], r[1]), reverse=True)
    return runs


def _history_row(root: Path, run_time: str, suite: str, file: Path) -> str | None:
    """One ``<tr>`` of the page for a stored result; None when the file is not valid JSON."""
    try:
        result = json.loads(file.read_text(encoding="utf-8"))
    except ValueError:
        return None
    ok = bool(result.get("success"))
    failing = [
        (r.get("expectation_config", {}).get("meta") or {}).get("check")
        or r.get("expectation_config", {}).get("type", "?")
        for r in result.get("results", [])
        if not r.get("success")
    ]
    stats = result.get("statistics", {})
    rel = file.relative_to(root).with_suffix(".html")
    href = "/".join(quote(part) for part in rel.parts)
    run_name = file.parent.parent.name
    return (
        f'<tr class="{"ok" if ok else "bad"}" data-suite="{H.escape(suite)}" '
        f'data-run="{H.escape(run_name)}" '
        f'data-success="{str(ok).lower()}"><td>{H.escape(run_time)}</td><td>{H.escape(run_name)}</td>'
        f'<td><a href="{H.escape(href)}">{H.escape(suite)}</a></td>'
        f"<td>{'passed' if ok else 'FAILED'}</td>"
        f"<td>{stats.get('successful_expectations', '?')}/{stats.get('evaluated_expectations', '?')}</td>"
        f"<td>{H.escape(', '.join(failing))}</td></tr>"
    )


def _history_html(pipeline: str, rows: list[str]) -> str:
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>Tidemark data quality history — {H.escape(pipeline)}</title><style>"
        f"{_STYLE}</style></head><body>"
        f"<h1>Data quality history — {H.escape(pipeline)}</h1>"
        f"<p>{len(rows)} stored validation(s), newest first · "
        "<a href='index.html'>Great Expectations Data Docs</a>"
        " (its own styles need network)</p>"
        "<table id='history'><tr><th>run time</th><th>run</th><th>suite</th><th>verdict</th><th>passed</th>"
        "<th>failing checks</th></tr>" + "".join(rows) + "</table></body></html>"
    )
