"""What a validation found, as plain values: one :class:`ExpectationOutcome` per expectation, one
:class:`SuiteOutcome` per suite, one :class:`ValidationOutcome` per run of
:func:`tidemark.quality.validate.validate_pipeline`. No Great Expectations types leak into these:
the report, the command line and the Airflow alerts read them without importing GX."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
from dataclasses import dataclass, field
from typing import Any

from tidemark.timeutil import format_instant_ms


def plain_value(value: Any) -> Any:
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
