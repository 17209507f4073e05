"""Data-quality suites over a pipeline's tables (Great Expectations 1.x) and their Data Docs.

**What.** Five expectation suites, kept as data in ``expectations/tidemark_*.json`` (GX's own suite
format, loaded here; nothing is inlined in code), each validated against one frame built from the
pipeline's Delta tables:

=============== ===================================================================================
raw_events      the ``events`` table: schema, required fields not null, event time within bounds,
                ``event_id`` unique (exactly_once only)
raw_batches     one row per micro-batch (``watermarks``): quarantine rate below a threshold
windows         closed windows: (window_start, key) unique, counts non-negative, every window
                ended at or before the watermark recorded at its commit (on its row and in its
                batch's ``watermarks`` row), length and grid
reconciliation  closed windows of ``reconciliation``: alignment >= ``reconcile.target``,
                unexplained difference 0, late-event share below a threshold
watermarks      per batch: never decreasing, never below the watermark the batch started from,
                event-time lag behind the median host below a bound except during recorded stalls
=============== ===================================================================================

Raw events are two suites because GX validates one batch of rows per suite: the records
themselves, and the per-batch counts the quarantine rate needs.

**Thresholds** are suite parameters (``$PARAMETER``). Each suite's ``meta.tidemark.parameters``
says where a value comes from: the pipeline config (``{"config": "reconcile.target"}``) or a default
in the suite (``{"default": 0.01}``); ``thresholds={...}`` overrides either per call.

**Engines.** The small tables (windows, reconciliation, watermarks, stalls) are read with delta-rs
(the ``deltalake`` package) into pandas: no JVM, so an Airflow task can call
:func:`validate_pipeline` directly. The ``events`` table is the large one. Given a Spark session it
is validated as a Spark DataFrame (GX's Spark engine; nothing is collected but the sample rows).
Without one it is read with delta-rs, the range pushed down and only the table's own columns kept,
into pandas, and refused above ``max_local_events`` rows (default 2,000,000, ~35 minutes of the
demo's 10,000 hosts, a few hundred MB) with a message asking for Spark: a reconciliation-sized range
of a modest pipeline validates in seconds without a JVM, and a large one cannot exhaust a worker.

**Where GX keeps its state.** The suites' source of truth is ``expectations/`` in the repository
(read-only at run time). Each run copies them into a GX *file* context owned by the pipeline,
``<warehouse>/<pipeline>/_quality/gx`` by default (``quality_dir=`` to move it), which holds the
data sources, validation definitions, every validation result (history) and the Data Docs site
rebuilt after each validation. Keeping it beside the tables means two pipelines never write the
same GX files and a code checkout is never modified by a run; run one validation of a pipeline at a
time (the reconciliation DAG's ``max_active_runs=1``).

Importing this module is cheap: Great Expectations (~4 s) is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.config import ConfigError, PipelineConfig
from tidemark.resources import suites_dir
from tidemark.timeutil import format_instant_ms, now_ms

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

SUITE_FILE_PREFIX = "tidemark_"
SUITE_NAMES = ("raw_events", "raw_batches", "windows", "reconciliation", "watermarks")
DEFAULT_MAX_LOCAL_EVENTS = 2_000_000
SAMPLE_ROWS = 5
QUALITY_DIR = "_quality"


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
# Frames: what each suite validates (pure pandas functions of the tables, testable without GX)
# ---------------------------------------------------------------------------------------------


def _read(config: PipelineConfig, table: str, columns: list[str] | None = None) -> pd.DataFrame | None:
    path = config.table_path(table)
    if not T.table_exists(path):
        return None
    from deltalake import DeltaTable

    return DeltaTable(path).to_pandas(columns=columns)


def _iso(values: pd.Series) -> pd.Series:
    return values.map(lambda v: None if v is None or v != v else format_instant_ms(int(v)))


def _in_range(ms: pd.Series, start_ms: int | None, end_ms: int | None) -> pd.Series:
    mask = ms.notna()
    if start_ms is not None:
        mask &= ms >= start_ms
    if end_ms is not None:
        mask &= ms < end_ms
    return mask


def batches_in_range(markers: pd.DataFrame, start_ms: int | None, end_ms: int | None) -> pd.DataFrame:
    """Marker rows whose watermark is in ``[start, end]``, plus the batch before the first one (so a
    regression across the range's start is seen); all rows without a range."""
    marks = markers.sort_values("batch_id").reset_index(drop=True)
    if start_ms is None and end_ms is None:
        return marks
    wm = marks["watermark_ms"]
    inside = wm.notna()
    if start_ms is not None:
        inside &= wm >= start_ms
    if end_ms is not None:
        inside &= wm <= end_ms
    if inside.any():
        first = int(inside.idxmax())
        if first > 0:
            inside.iloc[first - 1] = True
    return marks[inside].reset_index(drop=True)


def raw_batches_frame(markers: pd.DataFrame | None, min_batch_lines: int) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    columns = ["batch_id", "lines", "events", "heartbeats", "quarantined", "quarantine_rate"]
    if markers is None or markers.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
    frame = markers[["batch_id", "events", "heartbeats", "quarantined"]].copy()
    frame["lines"] = frame["events"] + frame["heartbeats"] + frame["quarantined"]
    rated = frame["lines"] >= max(1, int(min_batch_lines))
    frame["quarantine_rate"] = np.where(rated, frame["quarantined"] / frame["lines"].clip(lower=1), np.nan)
    return frame[columns].reset_index(drop=True)


def windows_frame(
    windows: pd.DataFrame | None,
    markers: pd.DataFrame | None,
    window_ms: int,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> pd.DataFrame:
    import pandas as pd

    columns = [
        "window_start",
        "window_end",
        "key",
        "events",
        "value_sum",
        "batch_id",
        "low_watermark",
        "batch_watermark",
        "window_start_ms",
        "window_end_ms",
        "low_watermark_ms",
        "batch_watermark_ms",
        "length_ms",
        "start_offset_ms",
    ]
    if windows is None or windows.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
    frame = pd.DataFrame(
        {
            "window_start_ms": T.epoch_ms(windows["window_start"]),
            "window_end_ms": T.epoch_ms(windows["window_end"]),
            "key": windows["key"],
            "events": windows["events"],
            "value_sum": windows["value_sum"],
            "batch_id": windows["batch_id"],
            "low_watermark_ms": T.epoch_ms(windows["low_watermark"]),
        }
    )
    frame = frame[_in_range(frame["window_start_ms"], start_ms, end_ms)]
    # A batch is committed by its watermarks row, written last: windows of a newer batch are a
    # batch in flight (validation concurrent with the stream), not a window without a watermark.
    committed = markers["batch_id"].max() if markers is not None and not markers.empty else -1
    frame = frame[frame["batch_id"] <= committed]
    by_batch = (
        markers.set_index("batch_id")["watermark_ms"] if markers is not None else pd.Series(dtype="float64")
    )
    by_batch = by_batch[~by_batch.index.duplicated(keep="last")]
    frame["batch_watermark_ms"] = frame["batch_id"].map(by_batch).astype("float64")
    frame["length_ms"] = frame["window_end_ms"] - frame["window_start_ms"]
    frame["start_offset_ms"] = frame["window_start_ms"] % window_ms
    for name in ("window_start", "window_end", "low_watermark", "batch_watermark"):
        frame[name] = _iso(frame[f"{name}_ms"])
    return frame.sort_values(["window_start_ms", "key"])[columns].reset_index(drop=True)


def reconciliation_frame(
    rows: pd.DataFrame | None, start_ms: int | None = None, end_ms: int | None = None
) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    columns = [
        "window_start",
        "window_start_ms",
        "stream_events",
        "batch_events",
        "late_events",
        "abs_diff",
        "alignment",
        "unexplained",
        "late_share",
    ]
    if rows is None or rows.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
    frame = rows[rows["status"] == "closed"].copy()
    frame["window_start_ms"] = T.epoch_ms(frame["window_start"])
    frame = frame[_in_range(frame["window_start_ms"], start_ms, end_ms)]
    batch = frame["batch_events"].astype("float64")
    frame["late_share"] = np.where(batch > 0, frame["late_events"] / batch.clip(lower=1), 0.0)
    frame["window_start"] = _iso(frame["window_start_ms"])
    return frame.sort_values("window_start_ms")[columns].reset_index(drop=True)


def stall_intervals(stalls: pd.DataFrame | None) -> list[tuple[int, int | None]]:
    """Recorded stalls as (start, end) processing-time ms; an end of None means still open."""
    if stalls is None or stalls.empty:
        return []
    starts, ends = T.epoch_ms(stalls["started_at"]), T.epoch_ms(stalls["ended_at"])
    return [
        (int(s), None if e != e else int(e))
        for s, e in zip(starts, ends, strict=True)
        if s == s  # skip rows without a start
    ]


def watermarks_frame(
    markers: pd.DataFrame | None,
    stalls: pd.DataFrame | None,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> pd.DataFrame:
    """Batches with a watermark, in batch order; ``in_stall`` when the batch ran during a recorded
    stall (stalls table) or while one was open (its row's ``stall_since_ms``, state STALLED)."""
    import numpy as np
    import pandas as pd

    columns = [
        "batch_id",
        "watermark",
        "previous",
        "watermark_ms",
        "previous_ms",
        "frontier_ms",
        "batch_ts_ms",
        "lag_ms",
        "state",
        "in_stall",
        "lag_outside_stall_ms",
    ]
    if markers is None or markers.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
    marks = batches_in_range(markers, start_ms, end_ms)
    marks = marks[marks["watermark_ms"].notna()].copy()
    ts = marks["batch_ts_ms"].astype("float64")
    in_stall = marks["stall_since_ms"].notna() | (marks["state"] == "STALLED")
    for begin, end in stall_intervals(stalls):
        in_stall |= (ts >= begin) & (ts <= (end if end is not None else math.inf))
    marks["in_stall"] = in_stall.to_numpy(dtype=bool)
    marks["lag_ms"] = marks["frontier_ms"].astype("float64") - marks["watermark_ms"].astype("float64")
    marks["lag_outside_stall_ms"] = np.where(marks["in_stall"], np.nan, marks["lag_ms"])
    marks["watermark"] = _iso(marks["watermark_ms"])
    marks["previous"] = _iso(marks["previous_ms"])
    return marks[columns].reset_index(drop=True)


def events_frame_local(
    config: PipelineConfig,
    start_ms: int | None = None,
    end_ms: int | None = None,
    max_rows: int = DEFAULT_MAX_LOCAL_EVENTS,
) -> pd.DataFrame:
    """The events table's rows with event time in ``[start, end)`` through delta-rs (no JVM)."""
    import pandas as pd
    import pyarrow.dataset as ds

    path = config.table_path(S.EVENTS)
    if not T.table_exists(path):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in [*S.EVENT_COLUMNS, "arrival_lead_ms"]})
    from deltalake import DeltaTable

    dataset = DeltaTable(path).to_pyarrow_dataset()
    condition = None
    if start_ms is not None:
        condition = ds.field("event_time") >= start_ms
    if end_ms is not None:
        upper = ds.field("event_time") < end_ms
        condition = upper if condition is None else condition & upper
    rows = dataset.count_rows(filter=condition)
    if rows > max_rows:
        raise ConfigError(
            f"validate: {rows:,} events in the range exceed the {max_rows:,} read without Spark; "
            "give a narrower --start/--end or use --spark"
        )
    frame = dataset.to_table(filter=condition).to_pandas()
    frame["arrival_lead_ms"] = frame["event_time"] - T.epoch_ms(frame["ingest_ts"])
    return frame


def events_frame_spark(
    spark: SparkSession, config: PipelineConfig, start_ms: int | None = None, end_ms: int | None = None
) -> DataFrame | None:
    """The same rows as :func:`events_frame_local`, as a Spark DataFrame; None without a table."""
    from pyspark.sql import functions as F

    path = config.table_path(S.EVENTS)
    if not T.table_exists(path):
        return None
    frame = T.read_table(spark, path)
    if start_ms is not None:
        frame = frame.where(F.col("event_time") >= start_ms)
    if end_ms is not None:
        frame = frame.where(F.col("event_time") < end_ms)
    return frame.withColumn("arrival_lead_ms", F.col("event_time") - F.unix_millis("ingest_ts"))


# ---------------------------------------------------------------------------------------------
# Great Expectations
# ---------------------------------------------------------------------------------------------


def quality_root(config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None) -> Path:
    """The GX file context's project root: ``quality_dir`` or ``<warehouse>/<pipeline>/_quality``."""
    return Path(quality_dir) if quality_dir is not None else Path(config.tables_root) / QUALITY_DIR


def data_docs_index(config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the Data Docs index page of the pipeline is (built or not): link this from the UI."""
    return (
        quality_root(config, quality_dir) / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    )


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


def _plain(value: Any) -> Any:
    """JSON-safe plain Python for sample rows (numpy scalars, timestamps, NaN)."""
    import datetime as dt

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
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise ConfigError(
            f"validate: --end ({format_instant_ms(end_ms)}) must be after "
            f"--start ({format_instant_ms(start_ms)})"
        )
    specs = load_suites()
    params = suite_parameters(config, specs, thresholds)

    markers = _read(config, S.WATERMARKS)
    stalls = _read(config, S.STALLS)
    frames: dict[str, tuple[str, Any, int]] = {}
    raw_engine = "pandas"
    spark_events = events_frame_spark(spark, config, start_ms, end_ms) if spark is not None else None
    if spark_events is not None:
        spark_events = spark_events.cache()
        frames["raw_events"] = ("spark", spark_events, spark_events.count())
        raw_engine = "spark"
    else:
        local = events_frame_local(config, start_ms, end_ms, max_local_events)
        frames["raw_events"] = ("pandas", local, len(local))
    batches = batches_in_range(markers, start_ms, end_ms) if markers is not None else None
    local_frames = {
        "raw_batches": raw_batches_frame(batches, int(params.get("min_batch_lines", 1))),
        "windows": windows_frame(_read(config, S.WINDOWS), markers, config.window, start_ms, end_ms),
        "reconciliation": reconciliation_frame(_read(config, S.RECONCILIATION), start_ms, end_ms),
        "watermarks": watermarks_frame(markers, stalls, start_ms, end_ms),
    }
    for name, frame in local_frames.items():
        frames[name] = ("pandas", frame, len(frame))

    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.core.validation_definition import ValidationDefinition

    validated_at = now_ms()
    root = quality_root(config, quality_dir)
    context = _context(root)
    import datetime as dt

    def compact(ms: int | None) -> str:  # no ':' or spaces: run names become Data Docs paths
        return (
            "all"
            if ms is None
            else dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        )

    run_id = RunIdentifier(
        run_name=f"{config.pipeline}_{compact(start_ms)}-{compact(end_ms)}",
        run_time=dt.datetime.fromtimestamp(validated_at / 1000, tz=dt.UTC),
    )
    outcomes: list[SuiteOutcome] = []
    try:
        for spec in specs:
            engine, frame, rows = frames[spec.name]
            suite = context.suites.add_or_update(ExpectationSuite(**spec.for_mode(config.mode)))
            definition = _batch_definition(_datasource(context, engine), spec.name)
            validation = context.validation_definitions.add_or_update(
                ValidationDefinition(name=spec.name, data=definition, suite=suite)
            )
            result = validation.run(
                batch_parameters={"dataframe": frame},
                expectation_parameters=params,
                result_format={
                    "result_format": "SUMMARY",
                    "partial_unexpected_count": SAMPLE_ROWS,
                    "include_unexpected_rows": True,
                },
                run_id=run_id,
            )
            outcomes.append(_outcome(spec, result, rows))
    finally:
        if spark_events is not None:
            spark_events.unpersist()
    docs = history = None
    if build_docs:
        context.build_data_docs()
        fix_static_links(data_docs_index(config, quality_dir).parent)
        docs = str(data_docs_index(config, quality_dir))
        history = str(write_docs_history(config, quality_dir))
    return ValidationOutcome(
        pipeline=config.pipeline,
        start_ms=start_ms,
        end_ms=end_ms,
        events_engine=raw_engine,
        suites=outcomes,
        parameters={k: _plain(v) for k, v in params.items()},
        docs_index=docs,
        docs_history=history,
        validated_at_ms=validated_at,
    )


def build_data_docs(config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None) -> Path:
    """Rebuild the pipeline's Data Docs from every stored validation result; return the index page."""
    _context(quality_root(config, quality_dir)).build_data_docs()
    index = data_docs_index(config, quality_dir)
    fix_static_links(index.parent)
    write_docs_history(config, quality_dir)
    return index


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
        new = _STATIC_LINK.sub(lambda m, prefix=prefix: f"{m.group(1)}{prefix}static/", text)
        if new != text:
            tmp = page.with_name(f".{page.name}.tmp")
            tmp.write_text(new, encoding="utf-8")
            os.replace(tmp, page)
            fixed += 1
    return fixed


HISTORY_PAGE = "tidemark_history.html"
HISTORY_LIMIT = 500


def docs_history_page(config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None) -> Path:
    """The offline history page beside the Data Docs index (see :func:`write_docs_history`)."""
    return data_docs_index(config, quality_dir).with_name(HISTORY_PAGE)


def write_docs_history(
    config: PipelineConfig, quality_dir: str | os.PathLike[str] | None = None, limit: int = HISTORY_LIMIT
) -> Path:
    """Write ``tidemark_history.html`` next to the Data Docs index: every stored validation (newest
    ``limit`` runs) with its verdict and failing checks, linking to GX's page for it.

    Why: GX's own index lists results with JavaScript from public CDNs, so on an air-gapped worker
    or in a headless browser its history table is empty; this page is plain HTML with inline styles.
    """
    import html as H
    from urllib.parse import quote

    root = quality_root(config, quality_dir) / "gx" / "uncommitted"
    site = data_docs_index(config, quality_dir).parent
    runs: list[tuple[str, str, Path]] = []  # (run_time, suite, file)
    store = root / "validations"
    if store.is_dir():
        for file in store.glob("*/*/*/*.json"):
            runs.append((file.parent.name, file.parent.parent.parent.name, file))
    runs.sort(key=lambda r: (r[0], r[1]), reverse=True)
    rows = []
    for run_time, suite, file in runs[:limit]:
        try:
            result = json.loads(file.read_text(encoding="utf-8"))
        except ValueError:
            continue
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
        rows.append(
            f'<tr class="{"ok" if ok else "bad"}" data-suite="{H.escape(suite)}" '
            f'data-run="{H.escape(run_name)}" '
            f'data-success="{str(ok).lower()}"><td>{H.escape(run_time)}</td><td>{H.escape(run_name)}</td>'
            f'<td><a href="{H.escape(href)}">{H.escape(suite)}</a></td>'
            f"<td>{'passed' if ok else 'FAILED'}</td>"
            f"<td>{stats.get('successful_expectations', '?')}/{stats.get('evaluated_expectations', '?')}</td>"
            f"<td>{H.escape(', '.join(failing))}</td></tr>"
        )
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>Tidemark data quality history — {H.escape(config.pipeline)}</title><style>"
        "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;padding:0 16px;"
        "color:#1a202c}"
        "table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #e2e8f0;padding:4px 6px;"
        "text-align:left}th{background:#f7fafc}tr.bad td{background:#fff5f5}"
        "tr.bad td:nth-child(4){color:#c53030;"
        "font-weight:600}tr.ok td:nth-child(4){color:#2f855a}</style></head><body>"
        f"<h1>Data quality history — {H.escape(config.pipeline)}</h1>"
        f"<p>{len(rows)} stored validation(s), newest first · "
        "<a href='index.html'>Great Expectations Data Docs</a>"
        " (needs network for its styles and tables)</p>"
        "<table id='history'><tr><th>run time</th><th>run</th><th>suite</th><th>verdict</th><th>passed</th>"
        "<th>failing checks</th></tr>" + "".join(rows) + "</table></body></html>"
    )
    site.mkdir(parents=True, exist_ok=True)
    path = site / HISTORY_PAGE
    path.write_text(page, encoding="utf-8")
    return path
