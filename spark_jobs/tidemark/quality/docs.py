"""The pipeline's Data Docs: rebuilt from every stored validation result, made safe to serve.

:func:`rebuild_docs` escapes the stored results' values (:func:`make_results_inert`), has GX build
the site, repairs its links to ``static/`` (:func:`fix_static_links`) and writes the offline
history page (:func:`tidemark.quality_site.write_docs_history`). The context is duck-typed here:
only :mod:`tidemark.quality.gx` imports Great Expectations.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidemark.config import PipelineConfig
from tidemark.quality.gx import gx_context
from tidemark.quality_site import data_docs_index, quality_root, write_docs_history


def build_data_docs(config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None) -> Path:
    """Rebuild the pipeline's Data Docs from every stored validation result; return the index page."""
    index, _ = rebuild_docs(gx_context(quality_root(config, quality_dir)), config, quality_dir)
    return index


def rebuild_docs(
    context: Any, config: PipelineConfig, quality_dir: str | os.PathLike[str] | None
) -> tuple[Path, Path]:
    """Build the context's Data Docs, fix their static links and write the history page; return
    the index page and the history page."""
    make_results_inert(context)
    context.build_data_docs()
    index = data_docs_index(config, quality_dir)
    fix_static_links(index.parent)
    return index, write_docs_history(config, quality_dir)


# Set in a stored validation result's meta once its values are escaped (never escaped twice).
INERT_MARK = "tidemark_values_escaped"


def make_results_inert(context: Any) -> int:
    """HTML-escape every value in the context's stored validation results before Data Docs are
    built from them; returns how many results were rewritten.

    The values come from the data: an ``event_id`` such as ``<img src=x onerror=...>`` that
    fails ``event_id_unique`` is a sample in the result, and GX 1.24 writes samples into the
    validation page unescaped (its Jinja environment autoescapes only ``.html``/``.xml``
    templates; its templates are ``.j2``). Escaped here, the page shows the text as it was sent.
    The Airflow view serves the pages under ``Content-Security-Policy: sandbox`` as well
    (``tidemark_airflow.view``)."""
    store = context.validation_results_store
    rewritten = 0
    for key in store.list_keys():
        result = store.get(key)
        meta = result.meta if isinstance(result.meta, dict) else {}
        if meta.get(INERT_MARK):
            continue
        for one in result.results:
            one.result = _escaped(one.result)
            if one.exception_info:
                one.exception_info = _escaped(one.exception_info)
        result.meta = {**meta, INERT_MARK: True}
        store.set(key, result)
        rewritten += 1
    return rewritten


def _escaped(value: Any) -> Any:
    """``value`` with every string in it HTML-escaped (dict keys too), structure kept."""
    import html

    if isinstance(value, str):
        return html.escape(value, quote=True)
    if isinstance(value, Mapping):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_escaped(v) for v in value)
    return value


_STATIC_LINK = re.compile(r'((?:href|src)=")((?:\.\./)+|\./)static/')


def fix_static_links(site: Path) -> int:
    """Point every Data Docs page's links to the site's ``static/`` at the right depth.

    GX 1.24 writes validation result pages four directories deep
    (``validations/<suite>/<run>/<time>/<batch>.html``) but links their favicon with three ``../``,
    a file that does not exist; served over HTTP (the Airflow view) that link is a 404. Returns the
    number of pages rewritten (atomically); pages already right are left alone.
    """
    fixed = 0
    for page in site.rglob("*.html"):
        depth = len(page.relative_to(site).parts) - 1
        prefix = "../" * depth if depth else "./"
        text = page.read_text(encoding="utf-8")
        # sub() calls the function within this iteration: it sees this page's prefix
        new = _STATIC_LINK.sub(lambda m: f"{m.group(1)}{prefix}static/", text)  # noqa: B023
        if new != text:
            tmp = page.with_name(f".{page.name}.tmp")
            tmp.write_text(new, encoding="utf-8")
            os.replace(tmp, page)
            fixed += 1
    return fixed
