"""Kafka side of Tidemark: publish scenarios point to point, and read a topic as source lines.

Publishing keys every record by its host, so one host's records land in one partition in the
order they were produced (the producer is idempotent, so its own retries cannot reorder them).
Reading keeps Spark's offsets in the checkpoint, bounds a batch with ``maxOffsetsPerTrigger`` and
fails loudly on data loss; the batch recompute re-reads the topic by offset ranges (those that can
hold its range, :mod:`tidemark.pruning`), which is why the broker keeps records
(``log.retention.ms=-1`` in scripts/kafka.sh).

Every client reaches the cluster through a :class:`KafkaAccess`: the bootstrap servers and, for a
secured cluster (``source.kafka`` of the pipeline config, :class:`tidemark.config.KafkaClientConfig`),
the security protocol, SASL mechanism and credentials, the CA file and the further client options.
:func:`kafka_access` resolves the password from the environment variable the config names or from
its Airflow connection (an Airflow task hands the connection to the job in its environment,
``AIRFLOW_CONN_<ID>``: tidemark_airflow.hooks), never from the file. The same access gives Spark's
Kafka source its ``kafka.*`` options (:meth:`KafkaAccess.spark_options`: ``kafka.sasl.jaas.config``
with the Scram or Plain login module, the CA as a PEM truststore) and confluent-kafka (the
publisher, the recompute's offset look-ups) its settings (:meth:`KafkaAccess.client_conf`). The
password is a :class:`Secret` and both option maps are :class:`SecretOptions`: printed, logged or
formatted into an error they show ``***``. A wrong password fails a stream's start or a publisher in
one line naming the pipeline and the broker (:func:`check_access`), within a bounded time.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.generator import Scenario, Truth, iter_buckets
from tidemark.resources import SetupError
from tidemark.timeutil import now_ms

if TYPE_CHECKING:
    from confluent_kafka import Producer
    from pyspark.sql import DataFrame, SparkSession

    from tidemark.config import PipelineConfig

_HOST = re.compile(r'"host"\s*:\s*"([^"\\]{1,253})"')

# -- access: security settings and secrets ---------------------------------------------------------

MASK = "***"
# option keys whose values are secrets, in Spark's (kafka.*), the Java client's and confluent-kafka's names
SECRET_OPTION_KEYS = frozenset({"kafka.sasl.jaas.config", "sasl.jaas.config", "sasl.password"})
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# how long check_access waits for the broker's answer (an unreachable broker, not a refusal)
CHECK_TIMEOUT_S = 30.0


class Secret:
    """A password: ``str``, ``repr`` and formatting show ``***``; :meth:`reveal` gives the value to
    the one client setting that needs it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __format__(self, spec: str) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> Any:  # never pickled into a plan, a task or a file
        raise TypeError("a Secret is not pickled")


class SecretOptions(dict[str, Any]):
    """Client options whose secret values (:data:`SECRET_OPTION_KEYS`) print as ``***``: the dict
    itself holds them, for the client."""

    def redacted(self) -> dict[str, Any]:
        return {k: (MASK if k in SECRET_OPTION_KEYS else v) for k, v in self.items()}

    def __repr__(self) -> str:
        return repr(self.redacted())

    __str__ = __repr__


class KafkaAccessError(SetupError):
    """The cluster refused Tidemark's credentials or TLS, or could not be reached: one line naming
    the pipeline and the broker."""


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class KafkaAccess:
    """How to reach one Kafka cluster: its bootstrap servers and, when secured, the security
    protocol, SASL mechanism, user, password (a :class:`Secret`), CA file (PEM) and whether a
    broker's certificate must name its host; ``options`` are further Java client options (Spark's
    source only). ``pipeline`` names the pipeline in messages."""

    bootstrap: str
    pipeline: str | None = None
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: Secret | None = None
    ca_file: str | None = None
    endpoint_identification: bool = True
    options: tuple[tuple[str, str], ...] = field(default=())

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")

    @property
    def secured(self) -> bool:
        return self.protocol != "PLAINTEXT"

    def describe(self) -> str:
        """The broker and how it is reached, for people (no secret)."""
        how = self.protocol
        if self.sasl:
            how += f", {self.mechanism} as {self.username}"
        return f"{self.bootstrap} ({how})"

    def jaas_config(self) -> str:
        """``sasl.jaas.config`` for the Java client (holds the password: never print it)."""
        assert self.mechanism is not None and self.password is not None
        user, password = _jaas_quote(self.username or ""), _jaas_quote(self.password.reveal())
        return f"{LOGIN_MODULES[self.mechanism]} required username={user} password={password};"

    def spark_options(self) -> SecretOptions:
        """Spark's Kafka source options for this cluster (``kafka.*``)."""
        out = SecretOptions({f"kafka.{k}": v for k, v in self.options})
        out["kafka.bootstrap.servers"] = self.bootstrap
        if self.secured:
            out["kafka.security.protocol"] = self.protocol
        if self.sasl:
            assert self.mechanism is not None
            out["kafka.sasl.mechanism"] = self.mechanism
            out["kafka.sasl.jaas.config"] = self.jaas_config()
        if self.tls:
            if self.ca_file:
                out["kafka.ssl.truststore.type"] = "PEM"
                out["kafka.ssl.truststore.location"] = self.ca_file
            out["kafka.ssl.endpoint.identification.algorithm"] = (
                "https" if self.endpoint_identification else ""
            )
        return out

    def client_conf(self) -> SecretOptions:
        """confluent-kafka (librdkafka) settings for this cluster; ``options`` (Java client names)
        are not among them."""
        out = SecretOptions({"bootstrap.servers": self.bootstrap})
        if self.secured:
            out["security.protocol"] = self.protocol
        if self.sasl:
            assert self.mechanism is not None and self.password is not None
            out["sasl.mechanisms"] = self.mechanism
            out["sasl.username"] = self.username or ""
            out["sasl.password"] = self.password.reveal()
        if self.tls:
            if self.ca_file:
                out["ssl.ca.location"] = self.ca_file
            out["ssl.endpoint.identification.algorithm"] = "https" if self.endpoint_identification else "none"
        return out

    def who(self) -> str:
        return f"pipeline {self.pipeline}: " if self.pipeline else ""


def as_access(target: str | KafkaAccess) -> KafkaAccess:
    """A bootstrap string is a plaintext cluster."""
    return target if isinstance(target, KafkaAccess) else KafkaAccess(target)


def read_connection(conn_id: str) -> dict[str, Any]:
    """An Airflow connection as login, password and extra: through Airflow in an Airflow process,
    else from ``AIRFLOW_CONN_<ID>`` (as :mod:`tidemark.storage` reads its connection)."""
    from tidemark import storage

    reader = storage._connection_reader or storage._env_connection
    return reader(conn_id)


def kafka_access(config: PipelineConfig) -> KafkaAccess:
    """The pipeline's Kafka cluster as a :class:`KafkaAccess`, its password read now: from the
    Airflow connection ``source.kafka.airflow_connection`` (login, password; the login is the user
    unless ``username`` is set), else from the variable ``source.kafka.password_env`` names. A
    relative ``ssl_ca_file`` is under ``$TIDEMARK_HOME`` (else the current directory)."""
    src, sec = config.source, config.source.kafka
    assert src.bootstrap_servers is not None
    who = f"pipeline {config.pipeline}: "
    username, password = sec.username, None
    if sec.airflow_connection:
        try:
            conn = read_connection(sec.airflow_connection)
        except Exception as exc:  # no such connection, or not readable here
            detail = str(exc).splitlines()[0] if str(exc) else "no detail"
            raise KafkaAccessError(
                f"{who}source.kafka.airflow_connection: Airflow connection {sec.airflow_connection!r} "
                f"could not be read ({type(exc).__name__}: {detail})"
            ) from None
        username = username or conn.get("login") or None
        if conn.get("password"):
            password = Secret(str(conn["password"]))
        if password is None or not username:
            raise KafkaAccessError(
                f"{who}source.kafka.airflow_connection: Airflow connection {sec.airflow_connection!r} "
                "has no " + ("password" if password is None else "login (the Kafka user)")
            )
    elif sec.password_env:
        value = os.environ.get(sec.password_env)
        if not value:
            raise KafkaAccessError(
                f"{who}source.kafka.password_env: {sec.password_env} is not set (it holds the password "
                f"of Kafka user {username})"
            )
        password = Secret(value)
    ca_file = None
    if sec.ssl_ca_file:
        base = Path(os.environ.get("TIDEMARK_HOME", os.getcwd()))
        ca = Path(os.path.expanduser(sec.ssl_ca_file))
        ca = ca if ca.is_absolute() else (base / ca).resolve()
        if not ca.is_file():
            raise KafkaAccessError(f"{who}source.kafka.ssl_ca_file: {ca} not found")
        ca_file = str(ca)
    return KafkaAccess(
        bootstrap=src.bootstrap_servers,
        pipeline=config.pipeline,
        protocol=sec.security_protocol,
        mechanism=sec.sasl_mechanism,
        username=username,
        password=password,
        ca_file=ca_file,
        endpoint_identification=sec.ssl_endpoint_identification,
        options=tuple((k, str(v)) for k, v in sorted(sec.options.items())),
    )


def refusal(access: KafkaAccess, error: Any) -> KafkaAccessError | None:
    """The one-line error for a client error that is a refusal (credentials, TLS), else None.
    ``error`` is a confluent-kafka ``KafkaError``, or any exception (a JVM's, through Spark)."""
    code = error.code() if hasattr(error, "code") and callable(error.code) else None
    text = error.str() if hasattr(error, "str") and callable(error.str) else str(error)
    from confluent_kafka import KafkaError

    if (
        code == KafkaError._AUTHENTICATION
        or "SaslAuthenticationException" in text
        or ("Authentication failed" in text)
    ):
        return KafkaAccessError(
            f"{access.who()}Kafka broker {access.bootstrap} refused the credentials of user "
            f"{access.username} (SASL authentication failed)"
        )
    if code == KafkaError._SSL or "SSLHandshakeException" in text or "certificate verify failed" in text:
        return KafkaAccessError(
            f"{access.who()}Kafka broker {access.bootstrap}: the TLS handshake failed (is "
            "source.kafka.ssl_ca_file the CA that signed the broker's certificate, and does the "
            "certificate name the host?)"
        )
    return None


def check_access(target: str | KafkaAccess, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Ask the cluster for its metadata with ``target``'s settings: a refusal (credentials, TLS)
    fails at once, a cluster that does not answer after ``timeout_s``, each with one line naming
    the pipeline and the broker (:class:`KafkaAccessError`)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    access = as_access(target)
    errors: list[Any] = []
    # log_level 0: librdkafka's own lines would repeat the refusal on stderr on every retry
    conf: dict[str, Any] = {**access.client_conf(), "error_cb": errors.append, "log_level": 0}
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            errors.append(exc.args[0] if exc.args else exc)
        admin.poll(0.1)  # serves error_cb
        for error in errors:
            if (refused := refusal(access, error)) is not None:
                raise refused
        if time.monotonic() >= deadline:
            last = errors[-1] if errors else "no answer"
            detail = last.str() if hasattr(last, "str") else str(last)
            raise KafkaAccessError(
                f"{access.who()}Kafka broker {access.bootstrap} did not answer within {timeout_s:g} s "
                f"({detail})"
            )


def ensure_topic(target: str | KafkaAccess, topic: str, partitions: int = 4) -> None:
    """Create the topic if it does not exist (idempotent). A secured cluster is asked first
    (:func:`check_access`): a refusal fails in one line."""
    from confluent_kafka.admin import AdminClient, NewTopic

    access = as_access(target)
    if access.secured:
        check_access(access)
    admin = AdminClient(access.client_conf())
    if topic in admin.list_topics(timeout=30).topics:
        return
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    try:
        futures[topic].result(timeout=30)
    except Exception as exc:  # TOPIC_ALREADY_EXISTS from a concurrent creator is fine
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def producer(target: str | KafkaAccess) -> Producer:
    """An idempotent producer (the broker de-duplicates its own retries, so they cannot reorder a
    host's records)."""
    from confluent_kafka import Producer

    return Producer(
        {
            **as_access(target).client_conf(),
            "enable.idempotence": True,
            "linger.ms": 20,
            "compression.type": "lz4",
        }
    )


def produce_line(to: Producer, topic: str, line: str, timestamp_ms: int | None = None) -> None:
    """Publish one line keyed by its host (a line without one goes unkeyed), waiting for the local
    queue when it is full; ``timestamp_ms`` sets the record's timestamp (its arrival)."""
    match = _HOST.search(line)
    key = match.group(1).encode() if match else None
    while True:
        try:
            if timestamp_ms is None:
                to.produce(topic, value=line.encode(), key=key)
            else:
                to.produce(topic, value=line.encode(), key=key, timestamp=timestamp_ms)
            break
        except BufferError:  # local queue full: let it drain
            to.poll(0.5)
    to.poll(0)


def flush(to: Producer, target: str | KafkaAccess, timeout_s: float = 120) -> None:
    """Wait for every record to be acknowledged."""
    remaining = to.flush(timeout_s)
    if remaining:
        access = as_access(target)
        raise RuntimeError(
            f"kafka: {remaining} records were not acknowledged by {access.bootstrap} within {timeout_s:g} s"
        )


def publish_scenario(
    s: Scenario,
    bootstrap: str | KafkaAccess,
    topic: str,
    live: bool = False,
    progress: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    spans: Container[int] | None = None,
    history_minutes: int = 0,
) -> Truth:
    """Publish a scenario's lines in arrival order, keyed by host (malformed lines without a host
    go unkeyed). ``live`` paces each arrival span to the clock, as the file generator does;
    ``history_minutes`` (with ``live``) starts the scenario that long ago: the spans already due
    are published at once, each record timestamped with its span's arrival time (as the file
    generator dates its past files), then the rest paced. ``spans`` publishes only those arrival
    spans (file indexes), so a test can let the rest of the input arrive later; the returned truth
    still describes the whole scenario."""
    if history_minutes and not live:
        raise ValueError("history_minutes needs live")
    ensure_topic(bootstrap, topic)
    to = producer(bootstrap)
    truth = Truth()
    if live:
        from dataclasses import asdict

        start = (now_ms() - history_minutes * 60_000) // 1000 * 1000
        s = Scenario(**{**asdict(s), "keys": tuple(s.keys), "start_ms": start})
    for index, end_ms, lines in iter_buckets(s, truth):
        if spans is not None and index not in spans:
            continue
        if live and (wait := (end_ms - now_ms()) / 1000) > 0:
            sleep(wait)
        past = end_ms if live and history_minutes and end_ms < now_ms() else None
        for line in lines:
            produce_line(to, topic, line, past)
        truth.files += 1
        truth.lines += len(lines)
        if progress:
            progress(f"span {index + 1}: {len(lines):,} records published ({truth.lines:,} so far)")
    flush(to, bootstrap)
    return truth


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition of a topic as the broker answers for a range: ``first``, its oldest offset
    kept; ``start``, the first with a timestamp at or after :func:`earliest_arrival_ms`;
    ``current_end``, the first at or after ``end + max_clock_skew``; ``end``, the next offset to
    be written (``start`` and ``current_end`` are ``end`` when no record is that recent)."""

    partition: int
    first: int
    start: int
    current_end: int
    end: int


def partition_offsets(
    target: str | KafkaAccess, topic: str, earliest_ms: int, current_end_ms: int
) -> tuple[str, list[PartitionOffsets]]:
    """The topic's id and, per partition, its oldest offset, the first offsets with a timestamp
    at or after ``earliest_ms`` and ``current_end_ms``, and its end (one broker round trip
    each)."""
    from confluent_kafka import Consumer, KafkaException, TopicCollection, TopicPartition
    from confluent_kafka.admin import AdminClient

    access = as_access(target)
    if access.secured:
        check_access(access)
    bootstrap = access.bootstrap
    admin = AdminClient(access.client_conf())  # kept: its futures die with it
    try:
        description = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    except KafkaException as exc:
        raise RuntimeError(f"kafka: topic {topic} at {bootstrap}: {exc.args[0]}") from exc
    partitions = sorted(p.id for p in description.partitions)
    consumer = Consumer(
        {**access.client_conf(), "group.id": "tidemark-recompute", "enable.auto.commit": False}
    )
    try:
        bounds = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in partitions}

        def at(ms: int) -> dict[int, int]:
            found = consumer.offsets_for_times([TopicPartition(topic, p, ms) for p in partitions], timeout=30)
            if failed := [tp for tp in found if tp.error is not None]:
                raise RuntimeError(
                    f"kafka: offsets of {topic}/{failed[0].partition} at {ms}: {failed[0].error}"
                )
            return {tp.partition: tp.offset for tp in found}

        starts, current_ends = at(earliest_ms), at(current_end_ms)
    finally:
        consumer.close()
    offsets = []
    for p in partitions:
        first, end = bounds[p]
        start = starts[p] if starts[p] >= 0 else end  # -1: no record that recent
        current_end = current_ends[p] if current_ends[p] >= 0 else end
        offsets.append(PartitionOffsets(p, first, start, max(start, current_end), end))
    return str(description.topic_id), offsets


def read_offset_ranges(
    spark: SparkSession,
    target: str | KafkaAccess,
    topic: str,
    ranges: Mapping[int, Sequence[tuple[int, int]]],
) -> DataFrame:
    """The records of the given ``[from, to)`` offset ranges per partition, as :func:`read_topic`
    lines: one Kafka read per range of each partition's (the first ranges of all partitions
    together, then the second, ...), unioned."""
    reads = []
    for wave in range(max((len(r) for r in ranges.values()), default=0)):
        part = {p: r[wave] for p, r in ranges.items() if len(r) > wave}
        reader = (
            spark.read.format("kafka")
            .options(**as_access(target).spark_options())
            .option("assign", json.dumps({topic: sorted(part)}))
            .option("startingOffsets", json.dumps({topic: {str(p): a for p, (a, _) in part.items()}}))
            .option("endingOffsets", json.dumps({topic: {str(p): b for p, (_, b) in part.items()}}))
            .option("failOnDataLoss", "true")
        )
        reads.append(_lines(reader.load()))
    if not reads:
        return spark.createDataFrame([], "raw string, source string, arrival_ms bigint")
    return reduce(lambda a, b: a.unionByName(b), reads)


def read_topic(
    spark: SparkSession,
    target: str | KafkaAccess,
    topic: str,
    streaming: bool,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int = 200_000,
) -> DataFrame:
    """A topic as ``(raw, source, arrival_ms)`` lines; ``source`` is ``topic/partition@offset``.
    A batch read takes everything from ``starting_offsets`` to the end (the recompute reads
    chosen offsets with :func:`read_offset_ranges`)."""
    reader = (spark.readStream if streaming else spark.read).format("kafka")
    reader = (
        reader.options(**as_access(target).spark_options())
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if streaming:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    else:
        reader = reader.option("endingOffsets", "latest")
    return _lines(reader.load())


def _lines(records: DataFrame) -> DataFrame:
    """Kafka records as ``(raw, source, arrival_ms)`` lines."""
    from pyspark.sql import functions as F

    return records.select(
        F.col("value").cast("string").alias("raw"),
        F.concat(
            F.col("topic"),
            F.lit("/"),
            F.col("partition").cast("string"),
            F.lit("@"),
            F.col("offset").cast("string"),
        ).alias("source"),
        F.unix_millis("timestamp").alias("arrival_ms"),
    )
