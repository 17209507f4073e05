"""Which pipelines Airflow runs: one YAML config per pipeline in ``$TIDEMARK_PIPELINES_DIR``.

Read at DAG-parse time, so it only lists files and validates YAML (milliseconds, no Spark, no
network). A config that does not validate (or names a pipeline an earlier file in name order
already names) is left out: the other pipelines' DAGs still load, and the DAG file
``tidemark_pipeline_configs.py`` fails with one import error naming each bad file and its
one-line message (:func:`config_errors`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tidemark.config import ConfigError, PipelineConfig, load_config
from tidemark.errors import TidemarkError

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


def read_pipelines() -> tuple[list[Pipeline], dict[str, str]]:
    """The pipelines whose configs load, and {config file: one-line reason} for those that do not."""
    folder = pipelines_dir()
    if not folder.is_dir():
        return [], {}
    found: dict[str, Pipeline] = {}
    errors: dict[str, str] = {}
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            config = load_config(path)
        except Exception as exc:  # ConfigError's one line; anything else with its type
            errors[str(path.resolve())] = (
                str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
            )
            continue
        if config.pipeline in found:
            errors[str(path.resolve())] = (
                f"pipeline {config.pipeline!r} is configured twice: "
                f"{found[config.pipeline].config_path} and {path.resolve()} (this one is left out)"
            )
            continue
        found[config.pipeline] = Pipeline(str(path.resolve()), config)
    return list(found.values()), errors


def configured_pipelines() -> list[Pipeline]:
    """The pipelines whose configs load (a bad config leaves out its own pipeline only)."""
    return read_pipelines()[0]


class PipelineConfigError(TidemarkError):
    """Pipeline configs that do not load: one line per file."""


def config_errors() -> PipelineConfigError | None:
    """The error ``tidemark_pipeline_configs.py`` raises, naming each bad config file with its
    reason; None when every config loads."""
    errors = read_pipelines()[1]
    if not errors:
        return None
    lines = [reason if path in reason else f"{path}: {reason}" for path, reason in errors.items()]
    return PipelineConfigError(
        f"{len(errors)} pipeline config(s) in {pipelines_dir()} do not load; their pipelines have no "
        "DAGs (the other pipelines' DAGs load):\n" + "\n".join(lines)
    )


def load_pipeline(config_path: str) -> Pipeline:
    """At task run time: re-read the config (it may have changed since the DAG was parsed)."""
    return Pipeline(config_path, load_config(config_path))


def entrypoint(name: str) -> str:
    """The spark-submit application of a Tidemark job (``stream_job``, ``reconcile_job``,
    ``quality_job``, ``maintain_job``), shipped inside the installed package."""
    from tidemark.resources import entrypoint as shipped

    return str(shipped(name))


def table_asset_uri(config: PipelineConfig, table: str) -> str:
    """The Asset URI of one of the pipeline's Delta tables, by the providers' conventions:
    ``file:///<warehouse>/<pipeline>/<table>`` (common-io) on a local disk,
    ``s3://<bucket>/<key>`` (amazon) for an ``s3a://`` warehouse. Airflow's OpenLineage provider
    turns them into the dataset names Tidemark's own run events use (:mod:`tidemark.lineage`)."""
    from tidemark.lineage import asset_uri

    return asset_uri(config.table_path(table))


def reconciled_asset(config: PipelineConfig):
    """The Asset a reconciled hour of ``config``'s pipeline publishes (its event's extra holds the
    figures): the ``windows`` table, whose hour consumers may now read."""
    from airflow.sdk import Asset

    return Asset(
        name=f"tidemark.{config.pipeline}.reconciled",
        uri=table_asset_uri(config, "windows"),  # tidemark.schemas.WINDOWS (no pyarrow at parse time)
        group="tidemark",
    )


def reconciled_on_time_asset(config: PipelineConfig):
    """The Asset the on-time pass of an hour of ``config``'s pipeline publishes (every window
    closed, not yet final; its event's extra holds the pass's figures): the
    ``reconciliation_passes`` table, which holds that pass's row. Not gated: the target is checked
    on the final pass, which publishes :func:`reconciled_asset`."""
    from airflow.sdk import Asset

    return Asset(
        name=f"tidemark.{config.pipeline}.reconciled_on_time",
        uri=table_asset_uri(config, "reconciliation_passes"),  # tidemark.schemas.RECONCILIATION_PASSES
        group="tidemark",
    )
