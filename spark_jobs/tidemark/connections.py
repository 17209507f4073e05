"""Airflow connections the core reads by name (``storage.airflow_connection``,
``source.kafka.airflow_connection``): login, password and extra.

In an Airflow process the Airflow side (tidemark_airflow) sets the reader
(:func:`set_connection_reader`: Airflow's own lookup); elsewhere the core reads
``AIRFLOW_CONN_<ID>`` itself, which is how a process Airflow started gets the connection
(tidemark_airflow.hooks).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

ConnectionReader = Callable[[str], "dict[str, Any]"]
_connection_reader: ConnectionReader | None = None


def set_connection_reader(reader: ConnectionReader | None) -> None:
    """How a connection is read in an Airflow process (None: from ``AIRFLOW_CONN_<ID>``)."""
    global _connection_reader
    _connection_reader = reader


def read_connection(conn_id: str) -> dict[str, Any]:
    """The connection ``conn_id`` as ``login``, ``password`` and ``extra`` (a dict): through
    the reader Airflow set, else from ``AIRFLOW_CONN_<ID>``. Raises when it cannot be read."""
    reader = _connection_reader or _env_connection
    return reader(conn_id)


def connection_for(conn_id: str, field: str, error: Callable[[str], Exception]) -> dict[str, Any]:
    """:func:`read_connection`, or ``error`` raised with one line naming the config ``field``,
    the connection and why it could not be read."""
    try:
        return read_connection(conn_id)
    except Exception as exc:  # no such connection, or not readable here
        detail = str(exc).splitlines()[0] if str(exc) else "no detail"
        raise error(
            f"{field}: Airflow connection {conn_id!r} could not be read ({type(exc).__name__}: {detail})"
        ) from None


def _env_connection(conn_id: str) -> dict[str, Any]:
    """``AIRFLOW_CONN_<ID>`` (Airflow's JSON or URI form) as login, password and extra, outside
    Airflow (a process Airflow started passes the connection so: tidemark_airflow.hooks)."""
    name = f"AIRFLOW_CONN_{conn_id.upper()}"
    raw = os.environ.get(name)
    if raw is None:
        raise LookupError(f"{name} is not set and this is not an Airflow process")
    if raw.lstrip().startswith("{"):
        data = json.loads(raw)
        extra = data.get("extra") or {}
        return {**data, "extra": json.loads(extra) if isinstance(extra, str) else extra}
    url = urlsplit(raw)
    return {
        "login": unquote(url.username or ""),
        "password": unquote(url.password or ""),
        "extra": dict(parse_qsl(url.query)),
    }
