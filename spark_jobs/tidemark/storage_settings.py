"""Which storage settings reach a location, and with which credentials (no I/O, no pyarrow).

A location is a local path or an object-store URI (``s3a://bucket/...``). Parsing a pipeline
config registers its ``storage:`` block, as :class:`Settings`, for the buckets its locations
name (:func:`register`, called by :func:`tidemark.config.parse_config`), so a module that only
has a table's URI (``tables.open_table``) finds the settings of its bucket (:func:`storage_for`).
This module knows a config only by the two things it asks of one (:class:`StoredPipeline`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from tidemark.connections import connection_for
from tidemark.errors import SetupError

OBJECT_SCHEMES = ("s3a", "s3")


@dataclass(frozen=True)
class Settings:
    """A config's ``storage:`` block (:class:`tidemark.config_blocks.StorageConfig`), as registered."""

    endpoint: str | None = None
    region: str = "us-east-1"
    path_style: bool = False
    airflow_connection: str | None = None


class StoredPipeline(Protocol):
    """What storage asks of a pipeline config (:class:`tidemark.config.PipelineConfig`)."""

    @property
    def locations(self) -> list[str]:
        """The locations it reads and writes (warehouse, checkpoint, source path)."""
        ...

    @property
    def storage_settings(self) -> Settings: ...


# bucket -> the storage block of the config that names it (see register)
_BUCKETS: dict[str, Settings] = {}


def scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def is_object_store(uri: str | None) -> bool:
    return uri is not None and scheme(uri) in OBJECT_SCHEMES


def bucket_of(uri: str) -> str:
    return uri.split("://", 1)[1].split("/", 1)[0]


def register(pipeline: StoredPipeline) -> None:
    """Remember ``pipeline``'s storage block for the buckets its locations name."""
    for uri in pipeline.locations:
        if is_object_store(uri):
            _BUCKETS[bucket_of(uri)] = pipeline.storage_settings


def storage_for(uri: str) -> Settings:
    return _BUCKETS.get(bucket_of(uri)) or Settings()


def credentials(storage: Settings) -> dict[str, str]:
    """``access_key``, ``secret_key`` and maybe ``session_token`` and ``endpoint``: from the Airflow
    connection ``storage.airflow_connection`` (login, password, extra ``endpoint_url``), else from
    ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``. Empty when neither is
    set: each client then uses its own default chain (instance profile, web identity, ...)."""
    if storage.airflow_connection:
        return _connection_credentials(storage.airflow_connection)
    found = {
        "access_key": os.environ.get("AWS_ACCESS_KEY_ID", ""),
        "secret_key": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        "session_token": os.environ.get("AWS_SESSION_TOKEN", ""),
    }
    return {k: v for k, v in found.items() if v}


def _connection_credentials(conn_id: str) -> dict[str, str]:
    conn = connection_for(conn_id, "storage.airflow_connection", SetupError)
    extra = conn.get("extra") or {}
    found = {
        "access_key": conn.get("login") or "",
        "secret_key": conn.get("password") or "",
        "session_token": str(extra.get("aws_session_token") or ""),
        "endpoint": str(extra.get("endpoint_url") or ""),
    }
    return {k: v for k, v in found.items() if v}


def endpoint(storage: Settings, creds: dict[str, str]) -> str | None:
    return storage.endpoint or creds.get("endpoint") or None
