"""Pipeline configuration: one YAML file per pipeline, validated at start-up.

A bad or unknown key fails with one line naming the file, the line and column, and the key
(``config clicks.yaml:7:9: window: 90 is a bare number; ...``). Relative paths resolve against
``$TIDEMARK_HOME`` when set (Airflow workers run from arbitrary directories), otherwise against
the current directory. The JSON Schema of the file is ``docs/pipeline.schema.json``
(``tidemark schema`` prints it; :func:`config_json_schema`).

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

import difflib
import math
import os
import re
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import CoreSchema, core_schema

from tidemark import storage
from tidemark.timeutil import (
    DURATION_FORMS,
    MS_PER_HOUR,
    bare_number_message,
    format_duration_ms,
    format_instant_ms,
    parse_duration_ms,
    parse_instant_ms,
)


class ConfigError(ValueError):
    """A pipeline config that cannot be used; the message is one line naming file and field."""


# The validation context under which the file rules hold (a bare number is no duration, no
# top-level allowed_lateness): set by load_config, absent for Python callers.
FROM_FILE = "from_file"


def _from_file(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get(FROM_FILE))


def _duration(value: Any, info: ValidationInfo) -> int:
    if _from_file(info) and isinstance(value, int | float) and not isinstance(value, bool) and value != 0:
        raise ValueError(bare_number_message(value))
    return parse_duration_ms(value)


def _instant(value: Any) -> int:
    return parse_instant_ms(value)


def _ci(word: str) -> str:
    """``abc`` -> ``[aA][bB][cC]``: JSON Schema patterns have no case-insensitive flag."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


_NUM = "[0-9]+(?:[.][0-9]+)?"
_WORD = "(?:" + "|".join(_ci(w) for w in ("millisecond", "second", "minute", "hour", "day", "week")) + ")"
# the forms parse_duration_ms accepts, as a JSON Schema (ECMA-262) pattern
DURATION_PATTERN = (
    rf"^[ \t]*(?:0|{_NUM}[ \t]*(?:ms|s|m|h|d)"
    rf"|(?:{_ci('interval')}[ \t]+)?(?:{_NUM}[ \t]*{_WORD}[sS]?[ \t]*)+"
    rf"|(?![pP]$)[pP](?:{_NUM}[wW])?(?:{_NUM}[dD])?"
    rf"(?:[tT](?=[0-9])(?:{_NUM}[hH])?(?:{_NUM}[mM])?(?:{_NUM}[sS])?)?)[ \t]*$"
)
_DURATION_DESCRIPTION = f"A duration: {DURATION_FORMS}. A bare number is refused, except 0."
_DURATION_SCHEMA = {"anyOf": [{"type": "string", "pattern": DURATION_PATTERN}, {"const": 0}]}
_INSTANT_DESCRIPTION = "An instant: ISO-8601 (2025-11-22T10:00:00Z; no zone means UTC) or epoch milliseconds."

DurationMs = Annotated[
    int,
    BeforeValidator(_duration),
    WithJsonSchema({**_DURATION_SCHEMA, "description": _DURATION_DESCRIPTION}),
]
InstantMs = Annotated[
    int,
    BeforeValidator(_instant),
    WithJsonSchema({"type": ["string", "integer"], "description": _INSTANT_DESCRIPTION}),
]


class _AtMost:
    """A duration's upper bound, checked after parsing: ``Annotated[DurationMs, _at_most("7d")]``.

    Every duration has one. Beyond it a value is a typo (``90d`` for ``90m``), and a huge one
    overflows Spark's long milliseconds or keeps state, files or a stalled job for months; the
    error names the bound (the field comes from the location), and so does the JSON Schema."""

    def __init__(self, limit: str) -> None:
        self.limit = limit
        self.most = parse_duration_ms(limit)

    def _check(self, value: int) -> int:
        if value > self.most:
            raise ValueError(f"{format_duration_ms(value)} is above the maximum, {self.limit}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        out = dict(handler(schema))
        out["description"] = f"{out.get('description', '')} At most {self.limit}.".strip()
        return out


def _at_most(limit: str) -> _AtMost:
    return _AtMost(limit)


class _Strict(BaseModel):
    # allow_inf_nan=False: every float setting (precision, targets, quality thresholds, Spark conf
    # values) must be a finite number. YAML spells NaN and infinity (.nan, .inf), and either
    # compares false with every bound, so a NaN threshold would pass every check it guards.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# Kafka client options Tidemark sets itself (or Spark refuses): source.kafka.options cannot set them.
KAFKA_OWNED_OPTIONS = frozenset(
    {
        "bootstrap.servers",
        "group.id",
        "group.instance.id",
        "enable.auto.commit",
        "auto.offset.reset",
        "key.deserializer",
        "value.deserializer",
        "key.serializer",
        "value.serializer",
        "interceptor.classes",
        "enable.idempotence",
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.jaas.config",
        "sasl.username",
        "sasl.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.ca.location",
        "ssl.endpoint.identification.algorithm",
    }
)
_KAFKA_SECRET_WORDS = ("password", "secret", "jaas", "token", "credential", "ssl.keystore.key")
_KAFKA_SECRET_HOME = (
    "secrets are never read from the config file: name the environment variable that holds the "
    "password in source.kafka.password_env, or an Airflow connection (login, password) in "
    "source.kafka.airflow_connection"
)


class KafkaClientConfig(_Strict):
    """How Tidemark's Kafka clients (Spark's source, the batch recompute, the publisher) reach a
    secured cluster (:func:`tidemark.kafka.kafka_access`). The password comes from the environment
    variable ``password_env`` names or from the Airflow connection ``airflow_connection`` (login,
    password), never from this file; ``options`` passes further non-secret Java client options to
    Spark's Kafka source (``kafka.<name>``)."""

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    username: str | None = None
    password_env: str | None = None
    airflow_connection: str | None = None
    # the CA certificates (PEM) the brokers' certificates are checked against; None: the system's
    ssl_ca_file: str | None = None
    # check that a broker's certificate names the host it is reached at (off: the certificate only)
    ssl_endpoint_identification: bool = True
    options: dict[str, str | int | bool] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key not in ("password_env", "airflow_connection", "options") and any(
                    w in str(key).lower() for w in _KAFKA_SECRET_WORDS
                ):
                    raise ValueError(f"{key}: {_KAFKA_SECRET_HOME}")
        return data

    @field_validator("options")
    @classmethod
    def _passthrough(cls, value: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, option in value.items():
            name = key.removeprefix("kafka.")
            if any(w in name.lower() for w in _KAFKA_SECRET_WORDS):
                raise ValueError(f"{key}: {_KAFKA_SECRET_HOME}")
            if name in KAFKA_OWNED_OPTIONS:
                raise ValueError(
                    f"{key}: set by Tidemark (security_protocol, sasl_mechanism, username, "
                    "ssl_ca_file and ssl_endpoint_identification cover the security ones)"
                )
            if not re.fullmatch(r"[a-z][a-z0-9.\-]*", name):
                raise ValueError(f"{key}: not a Kafka client option name")
            out[name] = str(option).lower() if isinstance(option, bool) else option
        return out

    @field_validator("password_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"{value!r} must be an environment variable's name, not the password")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> KafkaClientConfig:
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and not self.sasl_mechanism:
            raise ValueError(f"sasl_mechanism: required with {self.security_protocol}")
        if sasl and not (self.password_env or self.airflow_connection):
            raise ValueError(
                "password_env: required with SASL (or name an Airflow connection in "
                "source.kafka.airflow_connection)"
            )
        if sasl and not (self.username or self.airflow_connection):
            raise ValueError("username: required with SASL (or the login of an Airflow connection)")
        if not sasl and (
            self.sasl_mechanism or self.username or self.password_env or self.airflow_connection
        ):
            raise ValueError(
                f"sasl_mechanism, username, password_env and airflow_connection need a "
                f"SASL security_protocol (it is {self.security_protocol})"
            )
        if self.ssl_ca_file and not self.security_protocol.endswith("SSL"):
            raise ValueError(f"ssl_ca_file: needs SSL or SASL_SSL (it is {self.security_protocol})")
        return self


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
    # Kafka: security (SASL, TLS) and further client options (KafkaClientConfig)
    kafka: KafkaClientConfig = Field(default_factory=KafkaClientConfig)

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
    def _window_block(cls, data: Any, info: ValidationInfo) -> Any:
        """``window`` is a size (``window: 1m``) or a block (``window: {size: 1m,
        allowed_lateness: 1h}``); the block's keys become ``window`` and ``allowed_lateness``.
        The model's top-level ``allowed_lateness`` is where the block lands, for Python callers;
        a file writes it in the block."""
        if _from_file(info) and isinstance(data, dict) and "allowed_lateness" in data:
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


# -- where an error is: the file's line and column, the key's right place ------------------------

Mark = tuple[int, int]
Path_ = tuple[str | int, ...]


class Located:
    """Where each node of a config file starts (line, column; 1-based): ``values[path]`` a value,
    ``keys[path]`` its key; a path is the keys and list indexes down to the node."""

    def __init__(self) -> None:
        self.values: dict[Path_, Mark] = {}
        self.keys: dict[Path_, Mark] = {}

    def at(self, path: Path_, *, key: bool = False) -> Mark | None:
        """The mark of ``path`` (its key's with ``key``), else of the nearest enclosing node."""
        if key and path in self.keys:
            return self.keys[path]
        for n in range(len(path), -1, -1):
            if path[:n] in self.values:
                return self.values[path[:n]]
        return None


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_submodel, get_args(annotation)) if m is not None), None)


def _places(model: type[BaseModel] = PipelineConfig, prefix: str = "") -> list[tuple[str, str]]:
    """Every key a file may write, with its dotted place: ``("precision", "watermark.precision")``."""
    out: list[tuple[str, str]] = []
    for name, field in model.model_fields.items():
        if model is PipelineConfig and name == "allowed_lateness":  # written in the window block
            out += [("allowed_lateness", "window.allowed_lateness"), ("size", "window.size")]
            continue
        out.append((name, f"{prefix}{name}"))
        sub = _submodel(field.annotation)
        if sub is not None:
            out += _places(sub, f"{prefix}{name}.")
    return out


def _fields_at(path: Path_) -> list[str]:
    model: type[BaseModel] | None = PipelineConfig
    for key in path:
        field = model.model_fields.get(str(key)) if model else None
        model = _submodel(field.annotation) if field else None
    if model is None:
        return []
    return [
        name for name in model.model_fields if not (model is PipelineConfig and name == "allowed_lateness")
    ]


def _unknown_key(path: Path_) -> str:
    """``x.y: unknown key``, saying where the key belongs when it is another block's."""
    dotted = ".".join(map(str, path))
    parent, key = path[:-1], str(path[-1])
    elsewhere = [place for name, place in _places() if name == key and place != dotted]
    if elsewhere:
        where = f"not a key of {'.'.join(map(str, parent))}" if parent else "not a top-level key"
        return f"{dotted}: {where}; did you mean {' or '.join(elsewhere)}?"
    close = difflib.get_close_matches(key, _fields_at(parent), n=1)
    return f"{dotted}: unknown key" + (f"; did you mean {close[0]}?" if close else "")


def _file_path(loc: Path_, data: Any) -> Path_:
    """A model location as the file writes it: the window block's keys are flattened into the
    model's ``window`` and ``allowed_lateness`` (PipelineConfig._window_block)."""
    block = isinstance(data, dict) and isinstance(data.get("window"), dict)
    if loc[:1] == ("window",) and block:
        return ("window", "size", *loc[1:])
    if loc[:1] == ("allowed_lateness",) and (
        block or not (isinstance(data, dict) and "allowed_lateness" in data)
    ):
        return ("window", "allowed_lateness", *loc[1:])
    return loc


def _absent(path: Path_, data: Any) -> bool:
    """Is ``path`` a key its mapping (present in ``data``) lacks?"""
    node = data
    for key in path[:-1]:
        if not _holds(node, key):
            return False
        node = node[key]
    return isinstance(node, dict) and path[-1] not in node


def _union_of(err: Any, held: Path_, data: Any) -> bool:
    path = _file_path(tuple(err["loc"]), data)
    return len(path) == len(held) + 1 and path[: len(held)] == held


def _holds(node: Any, key: str | int) -> bool:
    return (isinstance(node, dict) and key in node) or (
        isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)
    )


def _held(path: Path_, data: Any) -> Path_:
    """The longest start of ``path`` that ``data`` holds (a union's member names are not keys)."""
    node = data
    for n, key in enumerate(path):
        if not _holds(node, key):
            return path[:n]
        node = node[key]
    return path


def _explain(err: Any, data: Any, located: Located | None) -> tuple[str, Mark | None]:
    """One validation error as ``dotted.key: what is wrong`` and where it is in the file."""
    path = _file_path(tuple(err["loc"]), data)
    dotted = ".".join(map(str, path))
    msg = str(err["msg"]).removeprefix("Value error, ")
    at = located.at if located else (lambda _path, key=False: None)
    if err["type"] == "extra_forbidden":
        return _unknown_key(path), at(path, key=True)
    if err["type"] == "missing":
        return f"{dotted}: required key is missing", at(path[:-1])
    named = re.match(r"^([A-Za-z_][\w.]*): ", msg)
    if named and not path:  # a model check naming its key
        return msg, at(tuple(named.group(1).split(".")), key=True)
    text = f"{dotted}: {msg.removeprefix(dotted + ': ')}" if path else msg
    if (
        named and located and (*path, *named.group(1).split(".")) in located.keys
    ):  # a block's check naming a key
        return text, at((*path, *named.group(1).split(".")), key=True)
    return text, at(path)


def _one_line(source: str, found: list[tuple[str, Mark | None]]) -> str:
    """``config f.yaml:7:9: a: ...; 9:3: b: ...`` (with a file), ``config <config>: a: ...; b: ...``."""
    parts = [(f"{m[0]}:{m[1]}: " if m else "") + text for text, m in found]
    head = parts[0]
    if found[0][1]:
        return f"config {source}:{head}" + "".join(f"; {p}" for p in parts[1:])
    return f"config {source}: {head}" + "".join(f"; {p}" for p in parts[1:])


def _format_error(source: str, exc: ValidationError, data: Any = None, located: Located | None = None) -> str:
    found: list[tuple[str, Mark | None]] = []
    errors = exc.errors()
    for err in errors:
        path = _file_path(tuple(err["loc"]), data)
        if path and err["type"] not in ("missing", "extra_forbidden"):
            if _absent(path, data):
                continue  # not in the mapping: copied from a value that is (log_retention), told there
            held = _held(path, data)
            members = [
                str(_file_path(tuple(e["loc"]), data)[len(held)]) for e in errors if _union_of(e, held, data)
            ]
            if held != path and members:  # one value failing every member of a union: one error
                err = {**err, "loc": held, "msg": f"must be one of: {', '.join(members)}", "type": "union"}
                path = held
        if (explained := _explain(err, data, located)) not in found:
            found.append(explained)
    return _one_line(source, found or [_explain(exc.errors()[0], data, located)])


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
        raise ConfigError(_format_error(source, exc, data, located)) from None
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
        raise ConfigError(_one_line(source, [(str(exc), mark)])) from None
    resolved = config.model_copy(update=updates)
    storage.register(resolved)
    return resolved


# -- reading a file: marks, duplicate keys, ${VAR} ---------------------------------------------

_ENV_TOKEN = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_ENV_REF = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_EMPTY = "the file is empty (a pipeline config is a mapping: pipeline, source, warehouse, checkpoint, ...)"


def _interpolate(text: str, fail: Any) -> str:
    """``${VAR}``, ``${VAR:-default}`` (unset or empty: the default), ``$${`` a literal ``${``."""

    def value(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "$${":
            return "${"
        ref = _ENV_REF.fullmatch(match.group(1)) if match.group(1) is not None else None
        if ref is None:
            raise fail(f"{token!r} is not ${{VAR}} or ${{VAR:-default}} (write $${{ for a literal ${{)")
        name, default = ref.groups()
        found = os.environ.get(name)
        if found is None or (found == "" and default is not None):
            if default is None:
                raise fail(f"environment variable {name} is not set (give a default: ${{{name}:-value}})")
            return str(default)
        return found

    return _ENV_TOKEN.sub(value, text)


def _mark(mark: Any) -> Mark:
    return (mark.line + 1, mark.column + 1)


def _walk(source: str, node: yaml.Node, path: Path_, located: Located, seen: set[int]) -> None:
    """Record where each node starts, refuse a key given twice, substitute ``${VAR}`` in strings."""
    if id(node) in seen:  # an alias: its anchor's node, done
        return
    seen.add(id(node))
    located.values[path] = _mark(node.start_mark)

    def fail(problem: str, at: Any = node.start_mark, where: Path_ = path) -> ConfigError:
        line, column = _mark(at)
        return ConfigError(f"config {source}:{line}:{column}: {'.'.join(map(str, where))}: {problem}")

    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = key_node.value
            if key in first:
                raise fail(f"given twice (first on line {first[key]})", key_node.start_mark, (*path, key))
            first[key] = key_node.start_mark.line + 1
            located.keys[(*path, key)] = _mark(key_node.start_mark)
            _walk(source, value_node, (*path, key), located, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(source, item, (*path, index), located, seen)
    elif node.tag == _STR_TAG and "${" in node.value:
        node.value = _interpolate(node.value, fail)


def _read(source: str, text: str) -> tuple[Any, Located]:
    """The file's mapping and where each node is; ConfigError (one line, with line and column)
    for what is not a config."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise ConfigError(f"config {source}: {_EMPTY}")
        located = Located()
        _walk(source, root, (), located, set())
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ConfigError(f"config {source}{where}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {source}: not valid YAML: {str(exc).splitlines()[0]}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        kind = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}
        line, column = located.values[()]
        raise ConfigError(
            f"config {source}:{line}:{column}: expected a mapping of keys (pipeline: ..., source: ...), "
            f"got {kind.get(type(data), type(data).__name__)}"
        )
    return data, located


def load_config(path: str | os.PathLike[str]) -> PipelineConfig:
    """The pipeline config in a YAML file (see the module's docstring for what it may say)."""
    file = Path(path)
    if file.is_dir():
        raise ConfigError(f"config {file}: is a directory, not a config file")
    if not file.is_file():
        raise ConfigError(f"config {file}: file not found")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config {file}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"config {file}: cannot be read ({exc.strerror})") from None
    if not text.strip():
        raise ConfigError(f"config {file}: {_EMPTY}")
    data, located = _read(str(file), text)
    return parse_config(data, source=str(file), located=located)


# -- JSON Schema ---------------------------------------------------------------------------------


def _readable_defaults(node: Any) -> None:
    """Durations' and instants' defaults as a file writes them (``1m``, not ``60000``)."""
    if isinstance(node, dict):
        text = str(node.get("description", ""))
        default = node.get("default")
        if isinstance(default, int) and not isinstance(default, bool):
            if text.startswith("A duration"):
                node["default"] = format_duration_ms(default)
            elif text.startswith("An instant"):
                node["default"] = format_instant_ms(default)
        for value in node.values():
            _readable_defaults(value)
    elif isinstance(node, list):
        for value in node:
            _readable_defaults(value)


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of a pipeline config file, from the models: durations are
    strings in the accepted forms, the window is a size or a block, no unknown key anywhere.
    Committed as ``docs/pipeline.schema.json``; ``tidemark schema`` prints it."""
    schema = PipelineConfig.model_json_schema()
    _readable_defaults(schema)
    props = schema["properties"]
    lateness = props.pop("allowed_lateness")
    size = props.pop("window")
    default = size.pop("default")
    block = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"size": {**size, "default": default}, "allowed_lateness": lateness},
    }
    props["window"] = {
        "description": "The tumbling window: its size (a duration), or a block of size and allowed_lateness.",
        "default": default,
        "anyOf": [size, block],
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
        "title": "Tidemark pipeline config",
        "description": (
            "One YAML file per pipeline (tidemark.config). String values may use ${VAR} and "
            "${VAR:-default} (environment variables); $${ is a literal ${."
        ),
    }
