"""The reconciliation report: one self-contained HTML page per pipeline, for people.

**What it shows**, from the pipeline's Delta tables (read with delta-rs: no JVM, so the Airflow DAG
and ``tidemark report`` call it without Spark):

1. alignment per closed window over time against the ``reconcile.target`` line (99.9% by default);
2. stream vs batch events per window;
3. late events per window;
4. the watermark's event-time lag behind the median host per batch over processing time, with
   recorded stalls shaded;
5. the worst windows with their explanation: the late records by host (``late_events``), and any
   unexplained difference (lost or double-counted records, which late records cannot explain);

plus the headline numbers and, when given, the data-quality verdict and a link to the Data Docs.

**Why self-contained.** The page is mailed, attached to DAG runs and opened from the Airflow UI,
often without network access: plots are inline SVG (no plotting dependency, no JavaScript, no
CDN), styles are inline. Every plotted mark carries its number in ``data-*`` attributes and a
``<title>`` tooltip, so a reader can hover for the value and a test can check the picture against
the tables.

**Data here, page elsewhere.** This module reads the tables (through
:mod:`tidemark.stream_side`) into a :class:`tidemark.report_render.ReportData` of
:class:`tidemark.alignment.WindowResult` rows (the verdict, the misaligned windows and the headline
totals are :func:`tidemark.alignment.alignment_summary`'s, the one definition the CLI, the Airflow
side and the quality suites use) and writes files; :mod:`tidemark.report_render` renders the page
from Jinja2 templates.

**Where reports live.** :func:`write_report` without ``out`` publishes the page at
:func:`report_path`, ``<warehouse>/<pipeline>/_quality/reconciliation.html``, beside the pipeline's
Data Docs (``tidemark.quality``). :func:`report_locations` lists the published pages that exist,
by a one-segment label, for the Airflow Tidemark view (``/reports/{pipeline}/{label}``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.charts import stall_spans
from tidemark.config import ConfigError, PipelineConfig
from tidemark.report_render import WORST_WINDOWS, LagPoint, ReportData, render_report
from tidemark.timeutil import check_range, format_instant_ms, parse_instant_ms

if TYPE_CHECKING:
    import pandas as pd

    from tidemark.quality import ValidationOutcome

REPORT_FILE = "reconciliation.html"
HOURS_DIR = "hours"  # one published report per reconciled range: hours/<start>--<end>.html


def report_path(config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the pipeline's reconciliation report is published: ``<quality root>/reconciliation.html``
    (``<warehouse>/<pipeline>/_quality`` unless ``quality_dir`` is given)."""
    from tidemark.quality_site import quality_root

    return quality_root(config, quality_dir) / REPORT_FILE


def report_locations(
    config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None
) -> dict[str, Path]:
    """The pipeline's published report pages that exist, by label (no Spark, no GX import).

    ``reconciliation``: the report :func:`write_report` publishes; ``data-docs``: the Great
    Expectations Data Docs index; ``quality-history``: the offline page of every stored validation.
    Labels are single URL path segments (the Airflow view serves ``/reports/{pipeline}/{label}``);
    every value is an HTML file.
    """
    from tidemark.quality_site import data_docs_index, docs_history_page

    candidates = {
        "reconciliation": report_path(config, quality_dir),
        "data-docs": data_docs_index(config, quality_dir),
        "quality-history": docs_history_page(config, quality_dir),
    }
    return {label: path for label, path in candidates.items() if path.is_file()}


def _compact(ms: int) -> str:
    """``2025-11-22T10:00:00.000Z`` -> ``20251122T1000Z`` (seconds kept when not zero): a file name
    without ':' that sorts by time."""
    iso = format_instant_ms(ms)
    hhmm = iso[11:13] + iso[14:16] + ("" if iso[17:23] == "00.000" else iso[17:19])
    return f"{iso[0:4]}{iso[5:7]}{iso[8:10]}T{hhmm}Z"


def range_report_path(
    config: PipelineConfig, start_ms: int, end_ms: int, quality_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Where the report of one reconciled range (a scheduled run's hour) is published:
    ``<quality root>/hours/<start>--<end>.html``, e.g. ``hours/20251122T1000Z--20251122T1100Z.html``."""
    from tidemark.quality_site import quality_root

    return quality_root(config, quality_dir) / HOURS_DIR / f"{_compact(start_ms)}--{_compact(end_ms)}.html"


@dataclass(frozen=True)
class RangeReport:
    start_ms: int
    end_ms: int
    path: Path


def range_reports(
    config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None
) -> list[RangeReport]:
    """The published per-range reports, newest range first."""
    from tidemark.quality_site import quality_root

    found = []
    for path in (quality_root(config, quality_dir) / HOURS_DIR).glob("*--*.html"):
        start, _, end = path.stem.partition("--")
        try:
            found.append(RangeReport(parse_instant_ms(_expand(start)), parse_instant_ms(_expand(end)), path))
        except ValueError:  # not one of ours
            continue
    return sorted(found, key=lambda r: (r.start_ms, r.end_ms), reverse=True)


def _expand(compact: str) -> str:
    d, t = compact.rstrip("Z").split("T")
    seconds = t[4:6] or "00"
    return f"{d[0:4]}-{d[4:6]}-{d[6:8]}T{t[0:2]}:{t[2:4]}:{seconds}Z"


def load_report_data(
    config: PipelineConfig, start_ms: int | None = None, end_ms: int | None = None
) -> ReportData:
    """Everything the report plots, from the tables (closed windows with ``window_start`` in range)."""
    # pandas and pyarrow: not for report_locations
    from tidemark.alignment import CLOSED, alignment_summary, window_results
    from tidemark.passes import read_passes
    from tidemark.stream_side import late_by_host, reconciled_rows

    check_range(start_ms, end_ms)
    rec = reconciled_rows(config, start_ms, end_ms)
    if rec is None:
        raise ConfigError(
            f"report: no reconciliation table at {config.table_path(S.RECONCILIATION)}; "
            "run `tidemark reconcile` first"
        )
    marks = T.read_if_exists(config, S.WATERMARKS)
    watermark_ms, state = _newest_watermark(marks)
    return ReportData(
        pipeline=config.pipeline,
        target=float(config.reconcile.target),
        windows=window_results(rec[rec["status"] == CLOSED], late_by_host(config, start_ms, end_ms)),
        summary=alignment_summary(rec, float(config.reconcile.target)),
        lag=_lag_points(marks),
        stalls=sorted(stall_spans(marks, T.read_if_exists(config, S.STALLS))),
        watermark_ms=watermark_ms,
        state=state,
        passes=read_passes(config, start_ms, end_ms),
    )


def _newest_watermark(marks: pd.DataFrame | None) -> tuple[int | None, str | None]:
    """The newest batch's watermark (None when it had none) and state; (None, None) before any."""
    if marks is None or marks.empty:
        return None, None
    last = marks.sort_values("batch_id").iloc[-1]
    present = last["watermark_ms"] == last["watermark_ms"]  # NaN: no watermark yet
    return (int(last["watermark_ms"]) if present else None), str(last["state"])


def _lag_points(marks: pd.DataFrame | None) -> list[LagPoint]:
    """The watermark's lag behind the frontier (the median host) per batch that has all three."""
    if marks is None or marks.empty:
        return []
    rows = marks.dropna(subset=["watermark_ms", "frontier_ms", "batch_ts_ms"]).sort_values("batch_id")
    return [
        LagPoint(
            int(r.batch_id), int(r.batch_ts_ms), int(r.watermark_ms), int(r.frontier_ms - r.watermark_ms)
        )
        for r in rows.itertuples()
    ]


def write_report(
    config: PipelineConfig,
    out: str | os.PathLike[str] | None = None,
    start_ms: int | None = None,
    end_ms: int | None = None,
    *,
    outcome: ValidationOutcome | None = None,
    docs_index: str | os.PathLike[str] | None = None,
    worst: int = WORST_WINDOWS,
) -> Path:
    """Write the report for the closed windows with ``window_start`` in ``[start, end)`` to ``out``
    (default :func:`report_path`, where :func:`report_locations` finds it); atomically replaced.

    ``outcome``/``docs_index``: a validation to summarise and the Data Docs page to link (relative
    to the report when possible). Returns the path written. Raises ConfigError (one line) without a
    reconciliation table or with ``end <= start``.
    """
    path = Path(out) if out is not None else report_path(config)
    data = load_report_data(config, start_ms, end_ms)

    def link(target: Path) -> str:
        try:
            return os.path.relpath(target.resolve(), path.resolve().parent)
        except ValueError:  # another drive
            return target.resolve().as_uri()

    href = history = None
    if docs_index is not None:
        from tidemark.quality_site import HISTORY_PAGE

        href = link(Path(docs_index))
        if (Path(docs_index).with_name(HISTORY_PAGE)).is_file():
            history = link(Path(docs_index).with_name(HISTORY_PAGE))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render_report(data, outcome, href, worst, history), encoding="utf-8")
    os.replace(tmp, path)
    return path
