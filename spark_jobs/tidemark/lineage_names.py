"""The names in Tidemark's lineage (:mod:`tidemark.lineage`): which tables each job reads and writes,
and the dataset names of tables, sources and Airflow Assets.

Datasets are named as OpenLineage's naming spec and Spark's own integration name them: a local
path is namespace ``file`` and the absolute path; ``s3a://bucket/key`` is ``s3://bucket`` and
``key``; a Kafka topic is ``kafka://host:port`` (the first bootstrap server) and the topic. The
same names are what Airflow's ``file://`` and ``s3://`` Asset URIs (:func:`asset_uri`) translate to.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tidemark.config import PipelineConfig


@dataclass(frozen=True, order=True)
class Dataset:
    """An OpenLineage dataset: namespace and name (the naming spec), and whether it is a Delta table."""

    namespace: str
    name: str
    delta: bool = field(default=False, compare=False)


def dataset_for(location: str, delta: bool = False) -> Dataset:
    """The dataset of a location as Spark names it: ``/abs/path`` or ``file:/abs/path`` is
    (``file``, ``/abs/path``); ``s3a://bucket/key`` (or ``s3://``, ``s3n://``) is
    (``s3://bucket``, ``key``); ``hdfs://nn:8020/p`` is (``hdfs://nn:8020``, ``/p``); any other
    ``scheme://authority/path`` is (``scheme://authority``, ``path``)."""
    parsed = urllib.parse.urlsplit(location)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        path = parsed.path if scheme else location
        return Dataset("file", os.path.normpath(path) if path else "/", delta)
    if scheme in ("s3", "s3a", "s3n"):
        return Dataset(f"s3://{parsed.netloc}", parsed.path.strip("/") or "/", delta)
    path = parsed.path.rstrip("/")
    if scheme != "hdfs":
        path = path.lstrip("/")
    return Dataset(f"{scheme}://{parsed.netloc}", path or "/", delta)


def kafka_datasets(bootstrap_servers: str, topics: str) -> list[Dataset]:
    """``kafka://host:port`` (the first bootstrap server; port 9092 when none is given) and each
    topic of a comma-separated list."""
    first = bootstrap_servers.split(",")[0].strip()
    host, _, port = first.rpartition(":") if ":" in first else (first, ":", "9092")
    namespace = f"kafka://{host}:{port or '9092'}"
    return [Dataset(namespace, t.strip()) for t in topics.split(",") if t.strip()]


def source_datasets(config: PipelineConfig) -> list[Dataset]:
    """The pipeline's source: the landing directory, the Kafka topic, or the upstream pipeline's
    ``events`` table."""
    source = config.source
    if source.kind == "kafka":
        return kafka_datasets(source.bootstrap_servers or "", source.topic or "")
    return [dataset_for(source.path or "", delta=source.kind == "delta")]


def table_dataset(config: PipelineConfig, table: str) -> Dataset:
    return dataset_for(config.table_path(table), delta=True)


def asset_uri(location: str) -> str:
    """The Airflow Asset URI of a location, as the providers define them: ``file:///abs/path``
    (common-io) for a local path, ``s3://bucket/key`` (amazon) for ``s3a://``; any other URI as
    it is. Airflow's OpenLineage provider turns both into the :func:`dataset_for` names."""
    parsed = urllib.parse.urlsplit(location)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        return f"file://{os.path.normpath(parsed.path if scheme else location)}"
    if scheme in ("s3a", "s3n"):
        return urllib.parse.urlunsplit(("s3", parsed.netloc, parsed.path.rstrip("/"), "", ""))
    return location


# -- which jobs read and write what ------------------------------------------------------------


@dataclass(frozen=True)
class JobSpec:
    """A job's lineage: its name, whether it reads the source, the tables it reads (each one an
    input when it exists at the start) and the tables it may write (each one an output when its
    Delta version moved during the run); ``every_table``: maintenance (every existing table)."""

    name: str
    processing: str  # STREAMING or BATCH (OpenLineage's job type facet)
    source: bool = False
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    every_table: bool = False


def job_tables() -> dict[str, tuple[str, ...]]:
    from tidemark import schemas as S

    stream = (
        S.EVENTS,
        S.QUARANTINE,
        S.WINDOWS,
        S.LATE_EVENTS,
        S.WATERMARKS,
        S.STALLS,
        S.OUT_OF_ORDER,
        S.HOST_PROGRESS,
        S.OPEN_WINDOWS,
        S.REVISABLE_WINDOWS,
    )
    reconcile = (S.RECONCILIATION, S.RECONCILIATION_PASSES, S.LANDING_INDEX)
    validate = (S.EVENTS, S.WINDOWS, S.WATERMARKS, S.STALLS, S.RECONCILIATION)
    return {
        "stream": stream,
        "reconcile": reconcile,
        "reconcile_reads": (S.WATERMARKS, S.WINDOWS, S.LATE_EVENTS, S.LANDING_INDEX),
        "validate_reads": validate,
        # the report beside the suites: late records by host and the reconciliation passes
        "report_reads": (*validate, S.LATE_EVENTS, S.RECONCILIATION_PASSES),
        "all": (*stream, *reconcile),
    }


def job_spec(command: str) -> JobSpec:
    """The lineage of a ``tidemark`` command that runs a job (``stream``, ``reconcile``,
    ``maintain``, ``validate``, ``report`` with ``--validate``)."""
    t = job_tables()
    specs = {
        "stream": JobSpec("stream", "STREAMING", source=True, writes=t["stream"]),
        "reconcile": JobSpec(
            "reconcile", "BATCH", source=True, reads=t["reconcile_reads"], writes=t["reconcile"]
        ),
        "validate": JobSpec("quality", "BATCH", reads=t["validate_reads"]),
        "report": JobSpec("quality", "BATCH", reads=t["report_reads"]),
        "maintain": JobSpec("maintain", "BATCH", every_table=True),
    }
    return specs[command]


JOB_COMMANDS = ("stream", "reconcile", "validate", "report", "maintain")
