"""The five expectation suites as data, and the values of their ``$PARAMETER`` thresholds.

The suites live in ``expectations/tidemark_<name>.json`` (GX's own suite format; packaged as
``tidemark.expectations``), read by :func:`load_suites` in validation order (:data:`SUITE_NAMES`).
Each suite's ``meta.tidemark.parameters`` says where a threshold comes from: the pipeline config
(``{"config": "reconcile.target"}``) or a default in the suite (``{"default": 0.01}``);
:func:`suite_parameters` resolves them, a call's ``thresholds`` and the config's
``quality.thresholds`` first. Reading them needs no Great Expectations.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.config import ConfigError, PipelineConfig
from tidemark.resources import suites_dir

SUITE_FILE_PREFIX = "tidemark_"
SUITE_NAMES = ("raw_events", "raw_batches", "windows", "reconciliation", "watermarks")


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
