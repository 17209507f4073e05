"""The blocks of a pipeline config (:class:`tidemark.config.PipelineConfig`): the source and its
Kafka security, the watermark, record validation, reconciliation, quality, alerts, Airflow,
table maintenance, object storage, the stream's metrics, lineage and Spark. Each is a frozen model
with no unknown key (:class:`tidemark.config_types.StrictModel`); durations are
:data:`~tidemark.config_types.DurationMs` with an upper bound."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from tidemark.config_types import DurationMs, InstantMs, StrictModel, at_most
from tidemark.storage_settings import Settings
from tidemark.timeutil import MS_PER_HOUR, format_duration_ms, parse_duration_ms, parse_instant_ms

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


class KafkaClientConfig(StrictModel):
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


class SourceConfig(StrictModel):
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


class WatermarkConfig(StrictModel):
    precision: float = Field(default=0.999, gt=0, le=1)
    # Expected source hosts, one per line ('#' comments allowed); re-read when it changes.
    # Without it, the hosts seen so far are the population.
    hosts_file: str | None = None
    # A host is lagging when it is this far behind the median host's progress.
    lag_threshold: Annotated[DurationMs, at_most("1d")] = Field(default=parse_duration_ms("1m"))
    # STALLED: not advanced for this long (processing time) while > (1 - precision) of the
    # expected hosts lag.
    stall_after: Annotated[DurationMs, at_most("1d")] = Field(default=parse_duration_ms("2m"))

    @property
    def precision_fraction(self) -> Fraction:
        """Exact rational form, so ceil(q*N) is not thrown off by binary floating point."""
        return Fraction(str(self.precision))


class ValidationConfig(StrictModel):
    """Record-level limits; a record outside them is quarantined with the reason."""

    max_record_bytes: int = Field(default=64 * 1024, ge=64)
    min_event_time: InstantMs = Field(default=parse_instant_ms("2000-01-01T00:00:00Z"))
    max_clock_skew: Annotated[DurationMs, at_most("7d")] = Field(default=parse_duration_ms("5m"))
    # Read well-formed lines with the JVM fast path (tidemark-udf.jar); the SQL validator still
    # decides every other line. Off: every line takes the SQL way (same rows, slower).
    native_parser: bool = True


class ReconcileConfig(StrictModel):
    target: float = Field(default=0.999, gt=0, le=1)


class QualityConfig(StrictModel):
    """Per-pipeline values for the data-quality suites' parameters (``expectations/*.json``), e.g.
    ``max_late_share: 0.02``. A name the suites do not declare fails when the suites run."""

    thresholds: dict[str, float] = Field(default_factory=dict)


class AlertsConfig(StrictModel):
    """Where alerts go. Channels are Airflow connections (ids, never credentials, live here); a
    channel whose connection is not defined in Airflow is skipped with a warning."""

    email_to: list[str] = Field(default_factory=list)
    smtp_conn_id: str = "tidemark_smtp"
    # an Airflow HTTP connection in its standard meaning (schema = http|https, host, port; login +
    # password = basic auth, a password alone = bearer token); the endpoint is the path posted to
    webhook_conn_id: str = "tidemark_webhook"
    webhook_endpoint: str = ""
    # an Airflow Slack incoming-webhook connection (type slackwebhook: the webhook URL, or its
    # token with the host, in the password), posted to through the Slack provider
    slack_conn_id: str = "tidemark_slack"
    # lagging hosts named in a stall alert (worst first); the count is always given
    max_hosts_listed: int = Field(default=20, ge=1)
    # where the documentation site (`make docs`, mkdocs) is served: each alert links its runbook,
    # <docs_url>/operations/#runbook-<kind>; the default is `mkdocs serve`'s address
    docs_url: str = "http://127.0.0.1:8000/"
    # a Grafana (or other) dashboard of the pipeline each alert links beside the Tidemark view;
    # None: the Tidemark view only
    dashboard_url: str | None = None

    @field_validator("docs_url", "dashboard_url")
    @classmethod
    def _web_address(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^\s]+", value):
            raise ValueError(f"{value!r} must be an http:// or https:// URL")
        return value


class AirflowConfig(StrictModel):
    """How the Airflow DAGs run this pipeline (schedules live in the DAG files)."""

    # first hour the reconciliation DAG covers (catchup backfills from here); None = no catchup
    reconcile_start: InstantMs | None = None
    # the precise watermark must pass an hour's end by this much before the hour is reconciled
    reconcile_grace: Annotated[DurationMs, at_most("1d")] = Field(default=parse_duration_ms("2m"))
    spark_conn_id: str = "tidemark_spark"
    # the Airflow pool every Spark task of this pipeline runs in (stream start, recompute, quality),
    # and its size: at most this many Spark jobs submitted by Airflow at once (pools are shared by
    # name; `python -m tidemark_airflow.pools` creates or resizes them to the largest size asked for)
    spark_pool: str = "spark"
    spark_pool_slots: int = Field(default=2, ge=1)
    # the supervisor restarts a job whose heartbeat or current trigger is older than this
    hang_after: Annotated[DurationMs, at_most("1d")] = Field(default=parse_duration_ms("5m"))
    # ... and alerts when it had to restart it this many times within restart_window
    max_restarts: int = Field(default=3, ge=1)
    restart_window: Annotated[DurationMs, at_most("7d")] = Field(default=parse_duration_ms("1h"))


class MetricsConfig(StrictModel):
    """The stream's metrics for Prometheus (:mod:`tidemark.metrics`): while ``prometheus_port`` is
    set, the running stream serves ``http://<host>:<prometheus_port>/metrics`` (the Prometheus text
    format): the watermark, host lag, stalls, batch and phase times, record counters, and the
    latest reconciled hour's alignment. Off by default."""

    # the port the stream serves /metrics on; None: no endpoint. One port per pipeline: a second
    # stream on the same machine needs its own (a port in use stops the stream at start-up)
    prometheus_port: int | None = Field(default=None, ge=1, le=65535)
    # the address it listens on: loopback by default; 0.0.0.0 (every interface) for a Prometheus
    # on another machine or container
    host: str = "127.0.0.1"
    # the reconciliation gauges are read from the reconciliation table (delta-rs, no Spark) at
    # most this often; scrapes in between are answered from memory
    reconcile_refresh: Annotated[DurationMs, at_most("1h")] = Field(default=parse_duration_ms("30s"))

    @field_validator("host")
    @classmethod
    def _address(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9.:_-]+", value):
            raise ValueError(f"{value!r} must be a host name or an IP address to listen on")
        return value


class LineageConfig(StrictModel):
    """OpenLineage run events of the pipeline's jobs (:mod:`tidemark.lineage`): each run of the
    stream, the recompute, the quality job and maintenance is an OpenLineage run with its input
    and output datasets. On whenever OpenLineage is configured in the job's environment, the way
    its clients read it (``OPENLINEAGE_URL``, ``OPENLINEAGE_CONFIG``, ``OPENLINEAGE__TRANSPORT__*``
    or an ``openlineage.yml``); ``OPENLINEAGE_DISABLED=true`` turns it off everywhere."""

    # false: never emit for this pipeline, whatever the environment says
    enabled: bool = True
    # the OpenLineage job namespace of the pipeline's jobs (<pipeline>.stream, ...); unset:
    # $OPENLINEAGE_NAMESPACE, else tidemark
    namespace: str | None = Field(default=None, min_length=1, max_length=200)
    # also run OpenLineage's Spark listener in the job's Spark session: Spark-level events (each
    # Spark application and query) as children of the job's run (the jar set-up cached)
    spark_listener: bool = False


# Delta's own default for ``delta.deletedFileRetentionDuration``, below which its retention check
# (kept on by Tidemark) refuses a VACUUM: the least ``maintenance.vacuum_retention`` may be.
MIN_VACUUM_RETENTION_MS = parse_duration_ms("7d")
_CRON = re.compile(r"^(@(hourly|daily|weekly|monthly)|\S+( \S+){4})$")


def _delta_interval(ms: int) -> str:
    """A whole-hour duration as a Delta table property value: ``interval 7 days``, ``interval 36 hours``."""
    hours = ms // MS_PER_HOUR
    return f"interval {hours // 24} days" if hours % 24 == 0 else f"interval {hours} hours"


class MaintenanceConfig(StrictModel):
    """Table maintenance (``tidemark maintain``, :mod:`tidemark.maintenance`): compaction, VACUUM,
    Delta log checkpoints and cleanup, run by the pipeline's maintenance DAG on ``schedule``."""

    # when the maintenance DAG runs: cron (UTC) or @hourly/@daily/@weekly/@monthly; the default
    # stays clear of the top of the hour, when the hourly reconciliation starts
    schedule: str = "30 3 * * *"
    # VACUUM deletes the files a commit removed (compaction, state overwrites) this long ago. Every
    # reader of an older snapshot needs them until it is done: a running reconcile or quality job,
    # a downstream pipeline streaming this one's events, a restart after a long outage. Whole hours.
    vacuum_retention: Annotated[DurationMs, at_most("365d")] = Field(default=MIN_VACUUM_RETENTION_MS)
    # How long Delta keeps the log (time travel, a downstream Delta source resuming from an old
    # version). Whole hours, at least vacuum_retention; by default the same: an older version's
    # files are vacuumed by then, so more log would only keep history that cannot be read (and
    # a 10 s pipeline writes ~0.13 MiB of log a minute over its tables, ~1.3 GiB a week).
    log_retention: Annotated[DurationMs, at_most("365d")] = Field(default=MIN_VACUUM_RETENTION_MS)
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


class StorageConfig(StrictModel):
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

    def settings(self) -> Settings:
        """This block as storage registers it for its buckets (:mod:`tidemark.storage_settings`)."""
        return Settings(self.endpoint, self.region, self.path_style, self.airflow_connection)


def _finite_conf(value: Any) -> Any:
    """A Spark conf value that is a float must be finite (checked before the union, whose error
    would list every member it failed)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value}")
    return value


class SparkConfig(StrictModel):
    master: str | None = None
    shuffle_partitions: int = Field(default=4, ge=1)
    # Where a micro-batch's per-row work runs (tidemark.dedup, tidemark.batch): "driver" collects
    # ~32 bytes a row (key hashes, per-host count columns), sorts and groups them in the Python
    # driver and reads the retries' stored copies with delta-rs there, the faster way on a few
    # cores; "executors" does those with Spark, so the driver receives a row per host and per
    # suspect (a cluster whose one driver core would otherwise cap the input rate:
    # docs/deployment.md). Same rows either way; a small batch collected whole stays on the driver.
    per_row_work: Literal["driver", "executors"] = "driver"
    conf: dict[str, Annotated[str | int | float | bool, BeforeValidator(_finite_conf)]] = Field(
        default_factory=dict
    )
