"""How Tidemark's Kafka clients reach a cluster: a :class:`KafkaAccess` and its secrets.

Every client reaches the cluster through a :class:`KafkaAccess`: the bootstrap servers and, for a
secured cluster (``source.kafka`` of the pipeline config, :class:`tidemark.config.KafkaClientConfig`),
the security protocol, SASL mechanism and credentials, the CA file and the further client options.
:func:`kafka_access` resolves the password from the environment variable the config names or from
its Airflow connection (an Airflow task hands the connection to the job in its environment,
``AIRFLOW_CONN_<ID>``: tidemark_airflow.hooks; :mod:`tidemark.connections`), never from the file.
The same access gives Spark's Kafka source its ``kafka.*`` options
(:meth:`KafkaAccess.spark_options`: ``kafka.sasl.jaas.config`` with the Scram or Plain login
module, the CA as a PEM truststore) and confluent-kafka (the publisher, the recompute's offset
look-ups) its settings (:meth:`KafkaAccess.client_conf`). The password is a :class:`Secret` and
both option maps are :class:`SecretOptions`: printed, logged or formatted into an error they show
``***``. A wrong password fails a stream's start or a publisher in one line naming the pipeline and
the broker (:func:`check_access`), within a bounded time.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidemark.config import PipelineConfig
from tidemark.connections import connection_for
from tidemark.errors import SetupError

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
        conn = connection_for(
            sec.airflow_connection, f"{who}source.kafka.airflow_connection", KafkaAccessError
        )
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
