"""Everything that touches Great Expectations 1.x: the only module of Tidemark that imports it.

A pipeline's GX *file* context (under :func:`tidemark.quality_site.quality_root`) holds its data
sources, suites, validation definitions and every validation result; :func:`validate_suite` stores
one suite and runs it over one :class:`SuiteBatch`, and turns GX's result into a plain
:class:`~tidemark.quality.outcome.SuiteOutcome`. Great Expectations (~4 s to import) is imported
inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any, NamedTuple

from tidemark.quality.outcome import ExpectationOutcome, SuiteOutcome, plain_value
from tidemark.quality.suites import SuiteSpec

SAMPLE_ROWS = 5  # failing rows kept per failing expectation


class SuiteBatch(NamedTuple):
    """What one suite validates: ``engine`` (spark | pandas), the frame and its row count."""

    engine: str
    frame: Any
    rows: int


def gx_context(root: Path) -> Any:
    """The GX file context rooted at ``root`` (created if missing), progress bars off."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    root.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=str(root))
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def _datasource(context: Any, engine: str) -> Any:
    name = f"tidemark_{engine}"
    try:
        return context.data_sources.get(name)
    except (KeyError, ValueError, LookupError):
        add = context.data_sources.add_spark if engine == "spark" else context.data_sources.add_pandas
        return add(name)


def _batch_definition(datasource: Any, asset_name: str) -> Any:
    try:
        asset = datasource.get_asset(asset_name)
    except LookupError:
        asset = datasource.add_dataframe_asset(asset_name)
    try:
        return asset.get_batch_definition("whole")
    except (KeyError, LookupError):
        return asset.add_batch_definition_whole_dataframe("whole")


def gx_run_id(pipeline: str, start_ms: int | None, end_ms: int | None, validated_at_ms: int) -> Any:
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


def validate_suite(
    context: Any, spec: SuiteSpec, batch: SuiteBatch, mode: str, params: dict[str, Any], run_id: Any
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


def _rows(unexpected_rows: Any, columns: list[str], limit: int) -> list[dict]:
    if unexpected_rows is None:
        return []
    if hasattr(unexpected_rows, "to_dict"):  # pandas
        records = unexpected_rows.head(limit).to_dict("records")
    else:
        records = [r.asDict() if hasattr(r, "asDict") else dict(r) for r in list(unexpected_rows)[:limit]]
    keep = [c for c in columns if records and c in records[0]] or (list(records[0]) if records else [])
    return [{c: plain_value(r.get(c)) for c in keep} for r in records]


def _columns_of(kwargs: dict) -> tuple[str, ...]:
    if "column" in kwargs:
        return (kwargs["column"],)
    if "column_A" in kwargs:
        return (kwargs["column_A"], kwargs["column_B"])
    return tuple(kwargs.get("column_list") or ())


def _outcome(spec: SuiteSpec, result: Any, rows: int) -> SuiteOutcome:
    """GX's validation ``result`` of ``spec`` as a plain outcome, failing rows sampled."""
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
                observed_value=plain_value(res.get("observed_value"))
                if not isinstance(res.get("observed_value"), list)
                else [plain_value(v) for v in res["observed_value"]],
                sample_rows=[]
                if r.success
                else _rows(res.get("unexpected_rows"), spec.sample_columns, SAMPLE_ROWS),
                notes=meta.get("notes"),
            )
        )
    return SuiteOutcome(spec.name, spec.gx_name, bool(result.success), rows, by_check)
