"""The data-quality runner: Great Expectations 1.x suites over a pipeline's tables, the results
store and the Data Docs.

**What.** Five expectation suites, kept as data in ``expectations/tidemark_*.json`` (GX's own suite
format, loaded here by :func:`load_suites`; nothing is inlined in code), each validated against one
frame built from the pipeline's Delta tables (the frames: :mod:`tidemark.quality_frames`):

=============== ===================================================================================
raw_events      the ``events`` table: schema, required fields not null, event time within bounds,
                ``event_id`` unique (exactly_once only)
raw_batches     one row per micro-batch (``watermarks``): quarantine rate below a threshold
windows         window rows: (window_start, key, revision) unique, at most one final revision
                per (window, key), revisions accumulate, counts non-negative, every window
                ended at or before the watermark recorded at its commit (on its row and in its
                batch's ``watermarks`` row), length and grid
reconciliation  closed windows of ``reconciliation``: final alignment (latest revision) >=
                ``reconcile.target``, on-time alignment reported, unexplained difference 0, a
                final gap only from records beyond the allowed lateness, late-event share below
                a threshold
watermarks      per batch: never decreasing, never below the watermark the batch started from,
                event-time lag behind the median host below a bound except during recorded stalls
=============== ===================================================================================

Raw events are two suites because GX validates one batch of rows per suite: the records
themselves, and the per-batch counts the quarantine rate needs.

**Thresholds** are suite parameters (``$PARAMETER``). Each suite's ``meta.tidemark.parameters``
says where a value comes from: the pipeline config (``{"config": "reconcile.target"}``) or a default
in the suite (``{"default": 0.01}``); ``thresholds={...}`` overrides either per call.

**Engines.** The small tables are read with delta-rs into pandas: no JVM, so an Airflow task can
call :func:`validate_pipeline` directly. The large ``events`` table is validated with GX's Spark
engine given a Spark session, else read into pandas up to ``max_local_events`` rows (see
:mod:`tidemark.quality_frames`).

**Where GX keeps its state.** The suites' source of truth is ``expectations/`` in the repository
(read-only at run time). Each run copies them into a GX *file* context owned by the pipeline,
``<warehouse>/<pipeline>/_quality/gx`` by default (``quality_dir=`` to move it; :func:`quality_root`),
which holds the data sources, validation definitions, every validation result (history) and the
Data Docs site (:func:`data_docs_index`) rebuilt after each validation, with the offline history
page (:mod:`tidemark.quality_site`). Keeping it beside the tables means two pipelines never
write the same GX files and a code checkout is never modified by a run; run one validation of a
pipeline at a time (the reconciliation DAG's ``max_active_runs=1``).

Importing this module is cheap: Great Expectations (~4 s) is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from tidemark.config import ConfigError, PipelineConfig
from tidemark.quality_frames import (
    DEFAULT_MAX_LOCAL_EVENTS,
    events_frame_local,
    events_frame_spark,
    table_frames,
)
from tidemark.quality_site import data_docs_index, quality_root, write_docs_history
from tidemark.resources import suites_dir
from tidemark.timeutil import format_instant_ms, now_ms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SUITE_FILE_PREFIX = "tidemark_"
SUITE_NAMES = ("raw_events", "raw_batches", "windows", "reconciliation", "watermarks")
SAMPLE_ROWS = 5


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's verdict; ``name`` is ``<suite>.<check>`` (the check id in the suite JSON)."""

    suite: str
    check: str
    expectation_type: str
    columns: tuple[str, ...]
    success: bool
    unexpected_count: int | None = None
    observed_value: Any = None
    sample_rows: list[dict] = field(default_factory=list)
    notes: str | None = None

    @property
    def name(self) -> str:
        return f"{self.suite}.{self.check}"

    def describe(self) -> str:
        on = f" on {', '.join(self.columns)}" if self.columns else ""
        if self.unexpected_count is not None:
            what = f"{self.unexpected_count:,} unexpected row(s)"
        else:
            what = f"observed {self.observed_value!r}"
        return f"{self.name} ({self.expectation_type}{on}): {what}"


@dataclass(frozen=True)
class SuiteOutcome:
    suite: str
    gx_suite: str
    success: bool
    rows: int
    expectations: list[ExpectationOutcome]

    @property
    def failing(self) -> list[ExpectationOutcome]:
        return [e for e in self.expectations if not e.success]


@dataclass(frozen=True)
class ValidationOutcome:
    """What :func:`validate_pipeline` found: per-suite verdicts, failing expectations, samples."""

    pipeline: str
    start_ms: int | None
    end_ms: int | None
    events_engine: str  # spark | pandas
    suites: list[SuiteOutcome]
    parameters: dict[str, Any]
    docs_index: str | None = None  # GX Data Docs index page
    docs_history: str | None = None  # offline page of every stored validation (write_docs_history)
    validated_at_ms: int = 0

    @property
    def success(self) -> bool:
        return all(s.success for s in self.suites)

    @property
    def failing(self) -> list[str]:
        """Names (``<suite>.<check>``) of every failing expectation."""
        return [e.name for s in self.suites for e in s.failing]

    @property
    def samples(self) -> dict[str, list[dict]]:
        """Up to 5 failing rows per failing expectation, by name (empty for table-level checks)."""
        return {e.name: e.sample_rows for s in self.suites for e in s.failing}

    def suite(self, name: str) -> SuiteOutcome:
        for s in self.suites:
            if s.suite == name:
                return s
        raise KeyError(f"no suite {name!r} in this outcome (have {', '.join(x.suite for x in self.suites)})")

    def to_dict(self) -> dict:
        return {
            "pipeline": self.pipeline,
            "start": format_instant_ms(self.start_ms) if self.start_ms is not None else None,
            "end": format_instant_ms(self.end_ms) if self.end_ms is not None else None,
            "success": self.success,
            "failing": self.failing,
            "events_engine": self.events_engine,
            "parameters": self.parameters,
            "docs_index": self.docs_index,
            "docs_history": self.docs_history,
            "validated_at": format_instant_ms(self.validated_at_ms),
            "suites": [
                {
                    "suite": s.suite,
                    "gx_suite": s.gx_suite,
                    "success": s.success,
                    "rows": s.rows,
                    "expectations": [
                        {
                            "name": e.name,
                            "type": e.expectation_type,
                            "columns": list(e.columns),
                            "success": e.success,
                            "unexpected_count": e.unexpected_count,
                            "observed_value": e.observed_value,
                            "sample_rows": e.sample_rows,
                        }
                        for e in s.expectations
                    ],
                }
                for s in self.suites
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def text(self, samples: int = 3) -> str:
        span = (
            f"[{format_instant_ms(self.start_ms) if self.start_ms is not None else '-'}, "
            f"{format_instant_ms(self.end_ms) if self.end_ms is not None else '-'})"
        )
        failed = [s for s in self.suites if not s.success]
        verdict = "PASSED" if not failed else f"FAILED ({len(failed)} of {len(self.suites)} suites)"
        lines = [f"validation of {self.pipeline} {span}: {verdict}; events read with {self.events_engine}"]
        for s in self.suites:
            status = "passed" if s.success else "FAILED"
            lines.append(
                f"  {s.suite:<15} {status:<7} {s.rows:>10,} rows, {len(s.expectations)} expectations"
            )
            for e in s.failing:
                lines.append(f"      failing: {e.describe()}")
                for row in e.sample_rows[:samples]:
                    lines.append("        " + " ".join(f"{k}={v}" for k, v in row.items()))
        if self.docs_index:
            lines.append(f"data docs: {self.docs_index}")
        if self.docs_history:
            lines.append(f"history:   {self.docs_history}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Suites as data
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SuiteSpec:
    name: str  # raw_events, windows, ...
    data: dict  # the GX suite JSON

    @property
    def gx_name(self) -> str:
        return self.data["name"]

    @property
    def tidemark(self) -> dict:
        return self.data.get("meta", {}).get("tidemark", {})

    @property
    def parameters(self) -> dict[str, dict]:
        return self.tidemark.get("parameters", {})

    @property
    def sample_columns(self) -> list[str]:
        return self.tidemark.get("sample_columns", [])

    def for_mode(self, mode: str) -> dict:
        """The suite JSON without expectations that do not apply to ``mode``."""
        kept = [e for e in self.data["expectations"] if mode in e.get("meta", {}).get("modes", [mode])]
        return {**self.data, "expectations": kept}


def load_suites(directory: str | os.PathLike[str] | None = None) -> list[SuiteSpec]:
    """Read the five suites from ``directory`` (default :func:`suites_dir`), in validation order."""
    base = Path(directory) if directory is not None else suites_dir()
    specs = []
    for name in SUITE_NAMES:
        path = base / f"{SUITE_FILE_PREFIX}{name}.json"
        if not path.is_file():
            raise ConfigError(f"expectation suite {path}: file not found")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ConfigError(f"expectation suite {path}: not valid JSON ({exc})") from None
        for e in data.get("expectations", []):
            if "check" not in e.get("meta", {}):
                raise ConfigError(f"expectation suite {path}: {e.get('type')} has no meta.check name")
        specs.append(SuiteSpec(name=name, data=data))
    return specs


def _config_value(config: PipelineConfig, dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        if not hasattr(value, part):
            raise ConfigError(f"expectation parameter: config has no {dotted!r}")
        value = getattr(value, part)
    return value


def suite_parameters(
    config: PipelineConfig, specs: list[SuiteSpec], thresholds: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every ``$PARAMETER`` value: ``thresholds`` first, then the pipeline's ``quality.thresholds``,
    then the config value the suite names, then the suite default."""
    known = {name for spec in specs for name in spec.parameters}
    for where, given in (("config quality.thresholds: ", config.quality.thresholds), ("", thresholds or {})):
        unknown = sorted(set(given) - known)
        if unknown:
            raise ConfigError(
                f"{where}unknown threshold {', '.join(unknown)} "
                f"(the suites define: {', '.join(sorted(known))})"
            )
    thresholds = {**config.quality.thresholds, **(thresholds or {})}
    values: dict[str, Any] = {}
    for spec in specs:
        for name, source in spec.parameters.items():
            if name in thresholds:
                values[name] = thresholds[name]
            elif "config" in source:
                values[name] = _config_value(config, source["config"])
            elif "default" in source:
                values[name] = source["default"]
            else:
                raise ConfigError(f"expectation suite {spec.gx_name}: parameter {name} has no source")
    return values


# ---------------------------------------------------------------------------------------------
# The Great Expectations context and the results store
# ---------------------------------------------------------------------------------------------


def _context(root: Path):
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    root.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=str(root))
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def _datasource(context, engine: str):
    name = f"tidemark_{engine}"
    try:
        return context.data_sources.get(name)
    except (KeyError, ValueError, LookupError):
        add = context.data_sources.add_spark if engine == "spark" else context.data_sources.add_pandas
        return add(name)


def _batch_definition(datasource, asset_name: str):
    try:
        asset = datasource.get_asset(asset_name)
    except LookupError:
        asset = datasource.add_dataframe_asset(asset_name)
    try:
        return asset.get_batch_definition("whole")
    except (KeyError, LookupError):
        return asset.add_batch_definition_whole_dataframe("whole")


# ---------------------------------------------------------------------------------------------
# GX results as plain outcomes
# ---------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """JSON-safe plain Python for sample rows (numpy scalars, timestamps, NaN)."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (list, dict, str, bytes)):
        with contextlib.suppress(ValueError, AttributeError):
            value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (str, int, bool)):
        return value
    return str(value)


def _rows(unexpected_rows: Any, columns: list[str], limit: int) -> list[dict]:
    if unexpected_rows is None:
        return []
    if hasattr(unexpected_rows, "to_dict"):  # pandas
        records = unexpected_rows.head(limit).to_dict("records")
    else:
        records = [r.asDict() if hasattr(r, "asDict") else dict(r) for r in list(unexpected_rows)[:limit]]
    keep = [c for c in columns if records and c in records[0]] or (list(records[0]) if records else [])
    return [{c: _plain(r.get(c)) for c in keep} for r in records]


def _columns_of(kwargs: dict) -> tuple[str, ...]:
    if "column" in kwargs:
        return (kwargs["column"],)
    if "column_A" in kwargs:
        return (kwargs["column_A"], kwargs["column_B"])
    return tuple(kwargs.get("column_list") or ())


def _outcome(spec: SuiteSpec, result, rows: int) -> SuiteOutcome:
    by_check: list[ExpectationOutcome] = []
    for r in result.results:
        cfg = r.expectation_config
        meta = cfg.meta or {}
        res = r.result or {}
        by_check.append(
            ExpectationOutcome(
                suite=spec.name,
                check=meta.get("check", cfg.type),
                expectation_type=cfg.type,
                columns=_columns_of(cfg.kwargs),
                success=bool(r.success),
                unexpected_count=res.get("unexpected_count"),
                observed_value=_plain(res.get("observed_value"))
                if not isinstance(res.get("observed_value"), list)
                else [_plain(v) for v in res["observed_value"]],
                sample_rows=[]
                if r.success
                else _rows(res.get("unexpected_rows"), spec.sample_columns, SAMPLE_ROWS),
                notes=meta.get("notes"),
            )
        )
    return SuiteOutcome(spec.name, spec.gx_name, bool(result.success), rows, by_check)


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


class _Batch(NamedTuple):
    """What one suite validates: ``engine`` (spark | pandas), the frame and its row count."""

    engine: str
    frame: Any
    rows: int


def validate_pipeline(
    config: PipelineConfig,
    start_ms: int | None = None,
    end_ms: int | None = None,
    spark: SparkSession | None = None,
    *,
    thresholds: Mapping[str, Any] | None = None,
    quality_dir: str | os.PathLike[str] | None = None,
    build_docs: bool = True,
    max_local_events: int = DEFAULT_MAX_LOCAL_EVENTS,
) -> ValidationOutcome:
    """Run the five suites over ``[start, end)`` of event time (all of it when not given).

    ``spark``: validate ``events`` with Spark (else delta-rs + pandas, at most ``max_local_events``
    rows). ``thresholds``: override suite parameters, e.g. ``{"max_late_share": 0.02}``.
    ``quality_dir``: the GX context root (default ``<warehouse>/<pipeline>/_quality``). Stores every
    result there and, with ``build_docs``, rebuilds the Data Docs (``outcome.docs_index``). Raises
    :class:`~tidemark.config.ConfigError` (one line) for bad input; a failing suite is not an error:
    check ``outcome.success`` / ``outcome.failing``.
    """
    _check_range(start_ms, end_ms)
    specs = load_suites()
    params = suite_parameters(config, specs, thresholds)
    batches = _suite_batches(config, start_ms, end_ms, spark, params, max_local_events)
    events = batches["raw_events"]
    context = _context(quality_root(config, quality_dir))  # imports Great Expectations
    validated_at = now_ms()
    run_id = _run_id(config.pipeline, start_ms, end_ms, validated_at)
    try:
        outcomes = [
            _validate_suite(context, spec, batches[spec.name], config.mode, params, run_id) for spec in specs
        ]
    finally:
        if events.engine == "spark":
            events.frame.unpersist()
    docs = history = None
    if build_docs:
        index, history_page = _rebuild_docs(context, config, quality_dir)
        docs, history = str(index), str(history_page)
    return ValidationOutcome(
        pipeline=config.pipeline,
        start_ms=start_ms,
        end_ms=end_ms,
        events_engine=events.engine,
        suites=outcomes,
        parameters={k: _plain(v) for k, v in params.items()},
        docs_index=docs,
        docs_history=history,
        validated_at_ms=validated_at,
    )


def _check_range(start_ms: int | None, end_ms: int | None) -> None:
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise ConfigError(
            f"validate: --end ({format_instant_ms(end_ms)}) must be after "
            f"--start ({format_instant_ms(start_ms)})"
        )


def _suite_batches(
    config: PipelineConfig,
    start_ms: int | None,
    end_ms: int | None,
    spark: SparkSession | None,
    params: Mapping[str, Any],
    max_local_events: int,
) -> dict[str, _Batch]:
    """What each suite validates, by suite name: the events (:func:`_events_batch`), then the
    small tables' frames (:func:`tidemark.quality_frames.table_frames`)."""
    events = _events_batch(config, start_ms, end_ms, spark, max_local_events)
    min_batch_lines = int(params.get("min_batch_lines", 1))
    frames = table_frames(config, start_ms, end_ms, min_batch_lines)
    return {"raw_events": events, **{name: _Batch("pandas", f, len(f)) for name, f in frames.items()}}


def _events_batch(
    config: PipelineConfig,
    start_ms: int | None,
    end_ms: int | None,
    spark: SparkSession | None,
    max_local_events: int,
) -> _Batch:
    """The raw_events batch: a cached, counted Spark frame given a session and an events table
    (unpersist it after validating), else pandas read with delta-rs."""
    spark_events = events_frame_spark(spark, config, start_ms, end_ms) if spark is not None else None
    if spark_events is not None:
        spark_events = spark_events.cache()
        return _Batch("spark", spark_events, spark_events.count())
    local = events_frame_local(config, start_ms, end_ms, max_local_events)
    return _Batch("pandas", local, len(local))


def _run_id(pipeline: str, start_ms: int | None, end_ms: int | None, validated_at_ms: int):
    """The GX run identifier of one validation: ``<pipeline>_<start>-<end>`` at ``validated_at``."""
    from great_expectations.core.run_identifier import RunIdentifier

    def compact(ms: int | None) -> str:  # no ':' or spaces: run names become Data Docs paths
        return (
            "all"
            if ms is None
            else dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        )

    return RunIdentifier(
        run_name=f"{pipeline}_{compact(start_ms)}-{compact(end_ms)}",
        run_time=dt.datetime.fromtimestamp(validated_at_ms / 1000, tz=dt.UTC),
    )


def _validate_suite(
    context, spec: SuiteSpec, batch: _Batch, mode: str, params: dict[str, Any], run_id
) -> SuiteOutcome:
    """Store the suite (its ``mode``'s expectations) and its validation definition in the context,
    run it over ``batch`` (the result is stored too) and return its outcome."""
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.core.validation_definition import ValidationDefinition

    suite = context.suites.add_or_update(ExpectationSuite(**spec.for_mode(mode)))
    definition = _batch_definition(_datasource(context, batch.engine), spec.name)
    validation = context.validation_definitions.add_or_update(
        ValidationDefinition(name=spec.name, data=definition, suite=suite)
    )
    result = validation.run(
        batch_parameters={"dataframe": batch.frame},
        expectation_parameters=params,
        result_format={
            "result_format": "SUMMARY",
            "partial_unexpected_count": SAMPLE_ROWS,
            "include_unexpected_rows": True,
        },
        run_id=run_id,
    )
    return _outcome(spec, result, batch.rows)


# ---------------------------------------------------------------------------------------------
# Data Docs
# ---------------------------------------------------------------------------------------------


def build_data_docs(config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None) -> Path:
    """Rebuild the pipeline's Data Docs from every stored validation result; return the index page."""
    index, _ = _rebuild_docs(_context(quality_root(config, quality_dir)), config, quality_dir)
    return index


def _rebuild_docs(
    context, config: PipelineConfig, quality_dir: str | os.PathLike[str] | None
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


def make_results_inert(context) -> int:
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
