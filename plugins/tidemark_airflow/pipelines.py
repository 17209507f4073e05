"""Which pipelines Airflow runs: one YAML config per pipeline in ``$TIDEMARK_PIPELINES_DIR``.

Read at DAG-parse time, so it only lists files and validates YAML (milliseconds, no Spark, no
network). A config that does not validate raises with its one-line message, which Airflow shows
as the DAG file's import error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tidemark.config import PipelineConfig, load_config

PIPELINES_DIR_ENV = "TIDEMARK_PIPELINES_DIR"


@dataclass(frozen=True)
class Pipeline:
    """A configured pipeline: its config file (passed to every job) and the parsed config."""

    config_path: str
    config: PipelineConfig

    @property
    def name(self) -> str:
        return self.config.pipeline


def pipelines_dir() -> Path:
    """``$TIDEMARK_PIPELINES_DIR``, else ``pipelines/`` in the current directory."""
    return Path(os.environ.get(PIPELINES_DIR_ENV) or "pipelines")


def configured_pipelines() -> list[Pipeline]:
    folder = pipelines_dir()
    if not folder.is_dir():
        return []
    found: dict[str, Pipeline] = {}
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        config = load_config(path)
        if config.pipeline in found:
            raise ValueError(
                f"pipeline {config.pipeline!r} is configured twice: "
                f"{found[config.pipeline].config_path} and {path}"
            )
        found[config.pipeline] = Pipeline(str(path.resolve()), config)
    return list(found.values())


def load_pipeline(config_path: str) -> Pipeline:
    """At task run time: re-read the config (it may have changed since the DAG was parsed)."""
    return Pipeline(config_path, load_config(config_path))


def entrypoint(name: str) -> str:
    """The spark-submit application of a Tidemark job (``stream_job``, ``reconcile_job``,
    ``quality_job``, ``maintain_job``), shipped inside the installed package."""
    from tidemark.resources import entrypoint as shipped

    return str(shipped(name))


def reconciled_asset(pipeline: str):
    """The Asset a reconciled hour of ``pipeline`` publishes (its event's extra holds the figures)."""
    from airflow.sdk import Asset

    return Asset(
        name=f"tidemark.{pipeline}.reconciled", uri=f"tidemark://{pipeline}/reconciled", group="tidemark"
    )
