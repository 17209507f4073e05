"""Pipeline configuration: one YAML file per pipeline, validated at start-up.

A bad or unknown key fails with one line naming the file, the line and column, and the key
(``config clicks.yaml:7:9: window: 90 is a bare number; ...``). Relative paths resolve against
``$TIDEMARK_HOME`` when set (Airflow workers run from arbitrary directories), otherwise against
the current directory. The JSON Schema of the file is ``docs/pipeline.schema.json``
(``tidemark schema`` prints it; :func:`tidemark.config_schema.config_json_schema`).

The rooms: :class:`PipelineConfig` and the two entries, :func:`parse_config` and
:func:`load_config`, live here; its blocks in :mod:`tidemark.config_blocks`, the field types
(durations, instants, bounds) in :mod:`tidemark.config_types`, reading a file and saying where an
error is in :mod:`tidemark.config_yaml`. A parsed config registers its ``storage:`` block for the
buckets it names (:mod:`tidemark.storage_settings`); nothing here imports storage I/O.

What a file (:func:`load_config`) may say:

* **Durations** carry a unit: ``500ms``, ``10s``, ``1m``, ``24h``, ``7d``; Spark's form,
  ``'10 seconds'``, ``'1 minute'``, ``'2 hours'``, ``'1 hour 30 minutes'`` (singular or plural);
  or ISO-8601, ``PT10S``, ``PT1H30M``, ``P1D`` (whole milliseconds; months and years have no
  fixed length). A bare number is an error (90 what?), except ``0``. Python callers
  (:func:`parse_config` with a mapping, ``PipelineConfig(...)``, ``model_copy``) keep passing
  ints of milliseconds: the file rules hold under the validation context ``{"from_file": True}``,
  which only :func:`load_config` sets.
* **Keys** are those of the models, in their place: an unknown key is an error, and one that
  belongs elsewhere says where (``allowed_lateness: not a top-level key; did you mean
  window.allowed_lateness?``). A key given twice in one mapping is an error.
* **Environment variables** fill in string values that change between environments (paths,
  hosts, topics): ``${VAR}``, or ``${VAR:-default}`` when ``VAR`` is unset or empty; ``$${``
  is a literal ``${``. An unset variable without a default is an error naming it and its place.
  Keys are never substituted, and interpolation is no way to put a secret in the file: secrets
  come from the environment or Airflow connections by name (``storage``, ``source.kafka``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from tidemark.config_blocks import (
    KAFKA_OWNED_OPTIONS,
    MIN_VACUUM_RETENTION_MS,
    AirflowConfig,
    AlertsConfig,
    KafkaClientConfig,
    LineageConfig,
    MaintenanceConfig,
    MetricsConfig,
    QualityConfig,
    ReconcileConfig,
    SourceConfig,
    SparkConfig,
    StorageConfig,
    ValidationConfig,
    WatermarkConfig,
)
from tidemark.config_types import FROM_FILE, ConfigError, DurationMs, StrictModel, at_most, from_file
from tidemark.config_yaml import Located, format_error, one_line, read_file
from tidemark.storage_settings import Settings, is_object_store, register
from tidemark.timeutil import format_duration_ms, parse_duration_ms

# The config's error and its blocks are part of the config's interface (tidemark.config.X), as
# they were before the models were split into rooms.
__all__ = [
    "KAFKA_OWNED_OPTIONS",
    "MIN_VACUUM_RETENTION_MS",
    "AirflowConfig",
    "AlertsConfig",
    "ConfigError",
    "KafkaClientConfig",
    "LineageConfig",
    "MaintenanceConfig",
    "MetricsConfig",
    "PipelineConfig",
    "QualityConfig",
    "ReconcileConfig",
    "SourceConfig",
    "SparkConfig",
    "StorageConfig",
    "ValidationConfig",
    "WatermarkConfig",
    "load_config",
    "parse_config",
]


class PipelineConfig(StrictModel):
    pipeline: str
    source: SourceConfig
    warehouse: str
    checkpoint: str
    window: Annotated[DurationMs, at_most("7d")] = Field(default=parse_duration_ms("1m"))
    # window.allowed_lateness: a record whose window the watermark closed less than this before
    # the record arrived revises the window (tidemark.revisions); later ones stay in late_events
    # only. 0: a window is final when it closes (one row per window and key).
    allowed_lateness: Annotated[DurationMs, at_most("30d")] = Field(default=parse_duration_ms("1h"))
    watermark: WatermarkConfig = Field(default_factory=WatermarkConfig)
    # A copy of a record (same event_id, host and event time: tidemark.retries) arriving within
    # this of the last copy that counted is a retry; arrival is the input's (file modification
    # time, Kafka timestamp), so where batches are cut changes nothing.
    dedup_horizon: Annotated[DurationMs, at_most("90d")] = Field(default=parse_duration_ms("24h"))
    # One writer per pipeline (tidemark.lease): the stream's lease expires this long after its
    # last renewal (every few seconds while it runs); a second starter waits for that, or for a
    # clean stop, before it takes over.
    lease_ttl: Annotated[DurationMs, at_most("1h")] = Field(default=parse_duration_ms("1m"), ge=3_000)
    mode: Literal["exactly_once", "at_least_once"] = "exactly_once"
    trigger_interval: Annotated[DurationMs, at_most("1h")] = Field(default=parse_duration_ms("10s"))
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    reconcile: ReconcileConfig = Field(default_factory=ReconcileConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    airflow: AirflowConfig = Field(default_factory=AirflowConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    lineage: LineageConfig = Field(default_factory=LineageConfig)

    @field_validator("pipeline")
    @classmethod
    def _pipeline_name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z0-9_-]+", value):
            raise ValueError(f"{value!r} must match [a-z0-9_-]+ (it is used in table paths)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _window_block(cls, data: Any, info: ValidationInfo) -> Any:
        """``window`` is a size (``window: 1m``) or a block (``window: {size: 1m,
        allowed_lateness: 1h}``); the block's keys become ``window`` and ``allowed_lateness``.
        The model's top-level ``allowed_lateness`` is where the block lands, for Python callers;
        a file writes it in the block."""
        if from_file(info) and isinstance(data, dict) and "allowed_lateness" in data:
            raise ValueError("allowed_lateness: not a top-level key; did you mean window.allowed_lateness?")
        if not isinstance(data, dict) or not isinstance(data.get("window"), dict):
            return data
        block = dict(data["window"])
        unknown = sorted(set(block) - {"size", "allowed_lateness"})
        if unknown:
            raise ValueError(
                f"window.{unknown[0]}: unknown key (the window block takes size, allowed_lateness)"
            )
        if "allowed_lateness" in data:
            raise ValueError("allowed_lateness: give it once, in the window block")
        out = {k: v for k, v in data.items() if k != "window"}
        if "size" in block:
            out["window"] = block["size"]
        if "allowed_lateness" in block:
            out["allowed_lateness"] = block["allowed_lateness"]
        return out

    @field_validator("allowed_lateness")
    @classmethod
    def _not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must be 0 or a positive duration")
        return value

    @field_validator("window", "dedup_horizon", "trigger_interval")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("must be a positive duration")
        return value

    # -- derived locations ------------------------------------------------------------------
    @property
    def tables_root(self) -> str:
        return f"{self.warehouse.rstrip('/')}/{self.pipeline}"

    def table_path(self, name: str) -> str:
        return f"{self.tables_root}/{name}"

    @property
    def maintained_in_stream(self) -> bool:
        """Does the stream maintain its tables itself (``maintenance.in_stream``; by default when
        the warehouse is on object storage: :mod:`tidemark.maintenance`)?"""
        flag = self.maintenance.in_stream
        return is_object_store(self.warehouse) if flag is None else flag

    @property
    def locations(self) -> list[str]:
        """The locations the pipeline reads and writes: warehouse, checkpoint, source path."""
        return [x for x in (self.warehouse, self.checkpoint, self.source.path) if x]

    @property
    def storage_settings(self) -> Settings:
        """The ``storage:`` block as storage registers it (:func:`tidemark.storage_settings.register`)."""
        return self.storage.settings()

    def describe(self) -> str:
        return (
            f"pipeline={self.pipeline} source={self.source.kind} window="
            f"{format_duration_ms(self.window)} allowed_lateness={format_duration_ms(self.allowed_lateness)} "
            f"precision={self.watermark.precision} "
            f"mode={self.mode} dedup_horizon={format_duration_ms(self.dedup_horizon)}"
        )


def _resolve(path: str, base: Path, field: str = "path") -> str:
    if path.lower().startswith("s3://"):
        raise ValueError(f"{field}: {path!r}: Spark reads S3 as s3a:// (hadoop-aws); write s3a://{path[5:]}")
    if "://" in path:  # s3a://, abfss://, file:// ... are left to Hadoop
        return path
    candidate = Path(os.path.expanduser(path))
    return str(candidate if candidate.is_absolute() else (base / candidate).resolve())


def parse_config(
    data: Any, source: str = "<config>", base: Path | None = None, *, located: Located | None = None
) -> PipelineConfig:
    """A config from a mapping. From Python (``located`` None) a duration may be an int of
    milliseconds; :func:`load_config` passes where each node of the file is, and then the file
    rules hold (validation context ``{"from_file": True}``) and errors name line and column."""
    if not isinstance(data, dict):
        raise ConfigError(f"config {source}: expected a mapping of keys, got {type(data).__name__}")
    try:
        config = PipelineConfig.model_validate(data, context={FROM_FILE: located is not None})
    except ValidationError as exc:
        raise ConfigError(format_error(source, exc, PipelineConfig, data, located)) from None
    base = base or Path(os.environ.get("TIDEMARK_HOME", os.getcwd()))
    try:
        updates: dict[str, Any] = {
            "warehouse": _resolve(config.warehouse, base, "warehouse"),
            "checkpoint": _resolve(config.checkpoint, base, "checkpoint"),
        }
        if config.source.path:
            updates["source"] = config.source.model_copy(
                update={"path": _resolve(config.source.path, base, "source.path")}
            )
    except ValueError as exc:
        field = str(exc).split(":", 1)[0]
        mark = located.at(tuple(field.split("."))) if located else None
        raise ConfigError(one_line(source, [(str(exc), mark)])) from None
    resolved = config.model_copy(update=updates)
    register(resolved)
    return resolved


def load_config(path: str | os.PathLike[str]) -> PipelineConfig:
    """The pipeline config in a YAML file (see the module's docstring for what it may say)."""
    data, located = read_file(path)
    return parse_config(data, source=str(Path(path)), located=located)
