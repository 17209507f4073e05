"""Pipeline configuration: one YAML file per pipeline, validated at start-up.

A bad or unknown key fails with one line naming the file and the key. Relative paths resolve
against ``$TIDEMARK_HOME`` when set (Airflow workers run from arbitrary directories), otherwise
against the current directory.
"""

from __future__ import annotations

import math
import os
import re
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tidemark import storage
from tidemark.timeutil import MS_PER_HOUR, format_duration_ms, parse_duration_ms, parse_instant_ms


class ConfigError(ValueError):
    """A pipeline config that cannot be used; the message is one line naming file and field."""


def _duration(value: Any) -> int:
    return parse_duration_ms(value)


def _instant(value: Any) -> int:
    return parse_instant_ms(value)


DurationMs = Annotated[int, BeforeValidator(_duration)]
InstantMs = Annotated[int, BeforeValidator(_instant)]


def _at_most(limit: str) -> AfterValidator:
    """A duration's upper bound, checked after parsing: ``Annotated[DurationMs, _at_most("7d")]``.

    Every duration has one. Beyond it a value is a typo (``90d`` for ``90m``), and a huge one
    overflows Spark's long milliseconds or keeps state, files or a stalled job for months; the
    error names the bound (the field comes from the location)."""
    most = parse_duration_ms(limit)

    def check(value: int) -> int:
        if value > most:
            raise ValueError(f"{format_duration_ms(value)} is above the maximum, {limit}")
        return value

    return AfterValidator(check)


class _Strict(BaseModel):
    # allow_inf_nan=False: every float setting (precision, targets, quality thresholds, Spark conf
    # values) must be a finite number. YAML spells NaN and infinity (.nan, .inf), and either
    # compares false with every bound, so a NaN threshold would pass every check it guards.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SourceConfig(_Strict):
    # files: NDJSON landing directory; kafka: a topic; delta: another Tidemark pipeline's
    # events table, whose rows carry that pipeline's low watermark (see watermark_column).
    kind: Literal["files", "kafka", "delta"] = "files"
    path: str | None = None
    watermark_column: str = "low_watermark"
    max_files_per_trigger: int = Field(default=20, ge=1)
    bootstrap_servers: str | None = None
    topic: str | None = None
    max_offsets_per_trigger: int = Field(default=200_000, ge=1)
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    # Kafka: the batch recompute indexes a partition's offsets in chunks of this many
    # (tidemark.pruning); a chunk of a few minutes of one partition suits an hourly reconcile.
    index_chunk_offsets: int = Field(default=10_000, ge=1)

    @model_validator(mode="after")
    def _kind_needs(self) -> SourceConfig:
        if self.kind in ("files", "delta") and not self.path:
            raise ValueError(f"path: required when source.kind is {self.kind}")
        if self.kind == "kafka" and not (self.bootstrap_servers and self.topic):
            raise ValueError("bootstrap_servers and topic: required when source.kind is kafka")
        return self


class WatermarkConfig(_Strict):
    precision: float = Field(default=0.999, gt=0, le=1)
    # Expected source hosts, one per line ('#' comments allowed); re-read when it changes.
    # Without it, the hosts seen so far are the population.
    hosts_file: str | None = None
    # A host is lagging when it is this far behind the median host's progress.
    lag_threshold: Annotated[DurationMs, _at_most("1d")] = Field(default=parse_duration_ms("1m"))
    # STALLED: not advanced for this long (processing time) while > (1 - precision) of the
    # expected hosts lag.
    stall_after: Annotated[DurationMs, _at_most("1d")] = Field(default=parse_duration_ms("2m"))

    @property
    def precision_fraction(self) -> Fraction:
        """Exact rational form, so ceil(q*N) is not thrown off by binary floating point."""
        return Fraction(str(self.precision))


class ValidationConfig(_Strict):
    """Record-level limits; a record outside them is quarantined with the reason."""

    max_record_bytes: int = Field(default=64 * 1024, ge=64)
    min_event_time: InstantMs = Field(default=parse_instant_ms("2000-01-01T00:00:00Z"))
    max_clock_skew: Annotated[DurationMs, _at_most("7d")] = Field(default=parse_duration_ms("5m"))
    # Read well-formed lines with the JVM fast path (tidemark-udf.jar); the SQL validator still
    # decides every other line. Off: every line takes the SQL way (same rows, slower).
    native_parser: bool = True


class ReconcileConfig(_Strict):
    target: float = Field(default=0.999, gt=0, le=1)


class QualityConfig(_Strict):
    """Per-pipeline values for the data-quality suites' parameters (``expectations/*.json``), e.g.
    ``max_late_share: 0.02``. A name the suites do not declare fails when the suites run."""

    thresholds: dict[str, float] = Field(default_factory=dict)


class AlertsConfig(_Strict):
    """Where alerts go. Channels are Airflow connections (ids, never credentials, live here); a
    channel whose connection is not defined in Airflow is skipped with a warning."""

    email_to: list[str] = Field(default_factory=list)
    smtp_conn_id: str = "tidemark_smtp"
    # an Airflow HTTP connection in its standard meaning (schema = http|https, host, port; login +
    # password = basic auth, a password alone = bearer token); the endpoint is the path posted to
    webhook_conn_id: str = "tidemark_webhook"
    webhook_endpoint: str = ""
    # lagging hosts named in a stall alert (worst first); the count is always given
    max_hosts_listed: int = Field(default=20, ge=1)


class AirflowConfig(_Strict):
    """How the Airflow DAGs run this pipeline (schedules live in the DAG files)."""

    # first hour the reconciliation DAG covers (catchup backfills from here); None = no catchup
    reconcile_start: InstantMs | None = None
    # the precise watermark must pass an hour's end by this much before the hour is reconciled
    reconcile_grace: Annotated[DurationMs, _at_most("1d")] = Field(default=parse_duration_ms("2m"))
    spark_conn_id: str = "tidemark_spark"
    # the Airflow pool every Spark task of this pipeline runs in (stream start, recompute, quality),
    # and its size: at most this many Spark jobs submitted by Airflow at once (pools are shared by
    # name; `python -m tidemark_airflow.pools` creates or resizes them to the largest size asked for)
    spark_pool: str = "spark"
    spark_pool_slots: int = Field(default=2, ge=1)
    # the supervisor restarts a job whose heartbeat or current trigger is older than this
    hang_after: Annotated[DurationMs, _at_most("1d")] = Field(default=parse_duration_ms("5m"))
    # ... and alerts when it had to restart it this many times within restart_window
    max_restarts: int = Field(default=3, ge=1)
    restart_window: Annotated[DurationMs, _at_most("7d")] = Field(default=parse_duration_ms("1h"))


# Delta's own default for ``delta.deletedFileRetentionDuration``, below which its retention check
# (kept on by Tidemark) refuses a VACUUM: the least ``maintenance.vacuum_retention`` may be.
MIN_VACUUM_RETENTION_MS = parse_duration_ms("7d")
_CRON = re.compile(r"^(@(hourly|daily|weekly|monthly)|\S+( \S+){4})$")


def _delta_interval(ms: int) -> str:
    """A whole-hour duration as a Delta table property value: ``interval 7 days``, ``interval 36 hours``."""
    hours = ms // MS_PER_HOUR
    return f"interval {hours // 24} days" if hours % 24 == 0 else f"interval {hours} hours"


class MaintenanceConfig(_Strict):
    """Table maintenance (``tidemark maintain``, :mod:`tidemark.maintenance`): compaction, VACUUM,
    Delta log checkpoints and cleanup, run by the pipeline's maintenance DAG on ``schedule``."""

    # when the maintenance DAG runs: cron (UTC) or @hourly/@daily/@weekly/@monthly; the default
    # stays clear of the top of the hour, when the hourly reconciliation starts
    schedule: str = "30 3 * * *"
    # VACUUM deletes the files a commit removed (compaction, state overwrites) this long ago. Every
    # reader of an older snapshot needs them until it is done: a running reconcile or quality job,
    # a downstream pipeline streaming this one's events, a restart after a long outage. Whole hours.
    vacuum_retention: Annotated[DurationMs, _at_most("365d")] = Field(default=MIN_VACUUM_RETENTION_MS)
    # How long Delta keeps the log (time travel, a downstream Delta source resuming from an old
    # version). Whole hours, at least vacuum_retention; by default the same: an older version's
    # files are vacuumed by then, so more log would only keep history that cannot be read (and
    # a 10 s pipeline writes ~0.13 MiB of log a minute over its tables, ~1.3 GiB a week).
    log_retention: Annotated[DurationMs, _at_most("365d")] = Field(default=MIN_VACUUM_RETENTION_MS)
    # OPTIMIZE events ZORDER BY (event_time). Delta's ZORDER rewrites the whole table each run; set
    # false for an events table too large to rewrite on every schedule (it is then vacuumed and
    # checkpointed only).
    zorder_events: bool = True
    # Run maintenance inside the stream, between two batches, instead of the maintenance DAG: one
    # writer per table, which Delta on S3 needs (tidemark.maintenance). None: when the warehouse
    # is on object storage.
    in_stream: bool | None = None

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        if not _CRON.match(value.strip()):
            raise ValueError(f"{value!r} is not a 5-field cron expression or @hourly/@daily/@weekly/@monthly")
        return value.strip()

    @field_validator("vacuum_retention", "log_retention")
    @classmethod
    def _whole_hours(cls, value: int) -> int:
        if value % MS_PER_HOUR:
            raise ValueError(f"{format_duration_ms(value)} is not a whole number of hours")
        return value

    @field_validator("vacuum_retention")
    @classmethod
    def _at_least_a_week(cls, value: int) -> int:
        if value < MIN_VACUUM_RETENTION_MS:
            raise ValueError(
                f"{format_duration_ms(value)} is below the minimum, "
                f"{format_duration_ms(MIN_VACUUM_RETENTION_MS)}: "
                "readers of older snapshots (a running reconcile, a stream restarting after an outage, a "
                "downstream pipeline) need removed files that long, and Delta's retention check refuses less"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _log_as_long_as_files(cls, data: Any) -> Any:
        """log_retention, when not given, is vacuum_retention."""
        if isinstance(data, dict) and "log_retention" not in data and "vacuum_retention" in data:
            return {**data, "log_retention": data["vacuum_retention"]}
        return data

    @model_validator(mode="after")
    def _log_outlives_files(self) -> MaintenanceConfig:
        if self.log_retention < self.vacuum_retention:
            raise ValueError(
                f"log_retention ({format_duration_ms(self.log_retention)}) must be at least "
                f"vacuum_retention ({format_duration_ms(self.vacuum_retention)}): reading an old "
                "version needs its log as well as its files"
            )
        return self

    def table_properties(self) -> dict[str, str]:
        """The Delta table properties these retentions are: set when a table is created
        (:class:`tidemark.tables.TableWriter`) or by the first maintenance after they change, so a
        VACUUM or log cleanup run by hand keeps them too."""
        return {
            "delta.deletedFileRetentionDuration": _delta_interval(self.vacuum_retention),
            "delta.logRetentionDuration": _delta_interval(self.log_retention),
        }


_SECRET_WORDS = ("key", "secret", "token", "password", "credential")


class StorageConfig(_Strict):
    """S3-compatible object storage for ``s3a://`` locations (:mod:`tidemark.storage`). Credentials
    never live here: they come from the environment (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, or the clients' default chain) or from the
    Airflow connection named by ``airflow_connection`` (login, password, extra ``endpoint_url``)."""

    # the S3 API's URL, e.g. http://127.0.0.1:9878 for a local server; None = AWS itself
    endpoint: str | None = None
    region: str = "us-east-1"
    # bucket in the path (http://host/bucket/key), as MinIO, moto and s3proxy want; AWS: false
    path_style: bool = False
    airflow_connection: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key != "airflow_connection" and any(w in str(key).lower() for w in _SECRET_WORDS):
                    raise ValueError(
                        f"{key}: credentials are never read from the config file; set "
                        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment or name an "
                        "Airflow connection in storage.airflow_connection"
                    )
        return data

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^/\s]+/?", value):
            raise ValueError(f"{value!r} must be a URL like http://host:port or https://host")
        return value.rstrip("/") if value else value


def _finite_conf(value: Any) -> Any:
    """A Spark conf value that is a float must be finite (checked before the union, whose error
    would list every member it failed)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value}")
    return value


class SparkConfig(_Strict):
    master: str | None = None
    shuffle_partitions: int = Field(default=4, ge=1)
    conf: dict[str, Annotated[str | int | float | bool, BeforeValidator(_finite_conf)]] = Field(
        default_factory=dict
    )


class PipelineConfig(_Strict):
    pipeline: str
    source: SourceConfig
    warehouse: str
    checkpoint: str
    window: Annotated[DurationMs, _at_most("7d")] = Field(default=parse_duration_ms("1m"))
    # window.allowed_lateness: a record whose window the watermark closed less than this before
    # the record arrived revises the window (tidemark.revisions); later ones stay in late_events
    # only. 0: a window is final when it closes (one row per window and key).
    allowed_lateness: Annotated[DurationMs, _at_most("30d")] = Field(default=parse_duration_ms("1h"))
    watermark: WatermarkConfig = Field(default_factory=WatermarkConfig)
    # A copy of a record (same event_id, host and event time: tidemark.retries) arriving within
    # this of the last copy that counted is a retry; arrival is the input's (file modification
    # time, Kafka timestamp), so where batches are cut changes nothing.
    dedup_horizon: Annotated[DurationMs, _at_most("90d")] = Field(default=parse_duration_ms("24h"))
    # One writer per pipeline (tidemark.lease): the stream's lease expires this long after its
    # last renewal (every few seconds while it runs); a second starter waits for that, or for a
    # clean stop, before it takes over.
    lease_ttl: Annotated[DurationMs, _at_most("1h")] = Field(default=parse_duration_ms("1m"), ge=3_000)
    mode: Literal["exactly_once", "at_least_once"] = "exactly_once"
    trigger_interval: Annotated[DurationMs, _at_most("1h")] = Field(default=parse_duration_ms("10s"))
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    reconcile: ReconcileConfig = Field(default_factory=ReconcileConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    airflow: AirflowConfig = Field(default_factory=AirflowConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)

    @field_validator("pipeline")
    @classmethod
    def _pipeline_name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z0-9_-]+", value):
            raise ValueError(f"{value!r} must match [a-z0-9_-]+ (it is used in table paths)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _window_block(cls, data: Any) -> Any:
        """``window`` is a size (``window: 1m``) or a block (``window: {size: 1m,
        allowed_lateness: 1h}``); the block's keys become ``window`` and ``allowed_lateness``."""
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
        return storage.is_object_store(self.warehouse) if flag is None else flag

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


def _format_error(source: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        # allowed_lateness is written in the window block (PipelineConfig._window_block)
        loc = "window.allowed_lateness" if loc == "allowed_lateness" else loc
        msg = err["msg"].removeprefix("Value error, ")
        if loc == "(top level)" and re.match(r"^[a-z_.]+: ", msg):  # a model check naming its key
            parts.append(msg)
            continue
        if err["type"] == "extra_forbidden":
            parts.append(f"{loc}: unknown key")
        elif err["type"] == "missing":
            parts.append(f"{loc}: required key is missing")
        else:
            parts.append(f"{loc}: {msg.removeprefix(loc + ': ')}")
    return f"config {source}: " + "; ".join(parts)


def parse_config(data: Any, source: str = "<config>", base: Path | None = None) -> PipelineConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"config {source}: expected a mapping of keys, got {type(data).__name__}")
    try:
        config = PipelineConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(source, exc)) from None
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
        raise ConfigError(f"config {source}: {exc}") from None
    resolved = config.model_copy(update=updates)
    storage.register(resolved)
    return resolved


def load_config(path: str | os.PathLike[str]) -> PipelineConfig:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config {file}: file not found")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {file}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return parse_config(data, source=str(file))
