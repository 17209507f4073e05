"""OpenLineage run events of Tidemark's jobs, and the dataset names they use.

Each run of a job is one OpenLineage run of the job ``<pipeline>.<job>`` in the pipeline's
namespace (``lineage.namespace``, else ``$OPENLINEAGE_NAMESPACE``, else ``tidemark``):

========== ================================ ===========================================================
job        command                          datasets
========== ================================ ===========================================================
stream     ``tidemark stream``              in: the source; out: the stream's tables it committed to
reconcile  ``tidemark reconcile``           in: the source, ``watermarks``, ``windows``, ``late_events``,
                                            the landing index (and ``events`` when an unexplained
                                            difference was looked up there); out: ``reconciliation``,
                                            ``reconciliation_passes``, the landing index it wrote
quality    ``tidemark report --validate``   in: the tables the suites and the report read; out: none
           (and ``tidemark validate``)      (the results and Data Docs are files, not tables)
maintain   ``tidemark maintain``            in and out: every table it maintains
========== ================================ ===========================================================

A START when the command begins its work, then COMPLETE when it ends with exit code 0, FAIL
otherwise (with the error or the exit code), ABORT on Ctrl-C. Inputs are the source and the
tables the job reads that exist when it starts; outputs are read off the Delta logs: the job's
tables whose version moved during the run (a short stream that quarantined nothing has no
``quarantine`` output), so START carries the inputs and COMPLETE/FAIL the outputs too.
Maintenance runs beside the stream, so its outputs are every table it maintains, by name.

Datasets are named as OpenLineage's naming spec and Spark's own integration name them
(:mod:`tidemark.lineage_names`).

**When.** Lineage is on when OpenLineage is configured in the job's environment, the way its
clients read it: ``OPENLINEAGE_URL`` (with ``OPENLINEAGE_API_KEY``, ``OPENLINEAGE_ENDPOINT``),
``OPENLINEAGE_CONFIG`` (an ``openlineage.yml``), ``OPENLINEAGE__TRANSPORT__*`` variables, or an
``openlineage.yml`` in the working directory or ``~/.openlineage``; ``OPENLINEAGE_DISABLED=true``
or ``lineage.enabled: false`` turn it off. Off, nothing here imports the OpenLineage client.
Emitting never fails a job: a transport error is one warning on stderr.

**Parents.** ``OPENLINEAGE_PARENT_ID`` (``namespace/job/run-id``, OpenLineage's convention; the
Airflow operators set it from the provider's ``lineage_parent_id`` macro) and
``OPENLINEAGE_ROOT_PARENT_ID`` make a job's run the child of an Airflow task's run. With
``lineage.spark_listener`` the Spark session also runs OpenLineage's Spark listener
(:data:`LISTENER`, the jar set-up cached in ``<jar cache>/lineage``), whose events are children of
the job's run.
"""

from __future__ import annotations

import contextvars
import logging
import os
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.lineage_names import (  # noqa: F401 - the names are part of this module's API
    JOB_COMMANDS,
    Dataset,
    JobSpec,
    asset_uri,
    dataset_for,
    job_spec,
    job_tables,
    kafka_datasets,
    source_datasets,
    table_dataset,
)
from tidemark.resources import SetupError, find_jars, jars_dir

if TYPE_CHECKING:
    from tidemark.config import PipelineConfig

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "tidemark"
LISTENER = "io.openlineage.spark.agent.OpenLineageSparkListener"
LISTENER_JAR_PREFIX = "openlineage-spark_"
# Where the Python client copies OPENLINEAGE_URL in its process's environment (an Airflow task's
# OpenLineage client does, and the spark-submit it starts inherits them): not a transport of their own.
URL_ALIAS = "OPENLINEAGE__TRANSPORT__TRANSPORTS__DEFAULT_HTTP__"
PARENT_ENV = "OPENLINEAGE_PARENT_ID"
ROOT_PARENT_ENV = "OPENLINEAGE_ROOT_PARENT_ID"
# The facets of a Delta table (OpenLineage's storage facet).
DELTA = ("delta", "parquet")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tidemark")
    except PackageNotFoundError:
        return "0+unknown"


PRODUCER = f"urn:tidemark:{_version()}"


# -- on or off -----------------------------------------------------------------------------------


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "1", "t")


def configured(env: Mapping[str, str] | None = None) -> bool:
    """Is OpenLineage configured in this environment (the rule its Python client and Airflow
    provider follow): a URL, a config file, a transport variable, or an ``openlineage.yml``
    where the clients look; and not ``OPENLINEAGE_DISABLED``."""
    env = os.environ if env is None else env
    if _true(env.get("OPENLINEAGE_DISABLED")):
        return False
    if env.get("OPENLINEAGE_URL") or env.get("OPENLINEAGE_CONFIG"):
        return True
    if any(k.startswith("OPENLINEAGE__TRANSPORT") and v for k, v in env.items()):
        return True
    return any(
        p.is_file() for p in (Path.cwd() / "openlineage.yml", Path.home() / ".openlineage/openlineage.yml")
    )


def enabled(config: PipelineConfig) -> bool:
    """Does ``config``'s pipeline emit run events here (``lineage.enabled`` and :func:`configured`)?"""
    return config.lineage.enabled and configured()


def namespace(config: PipelineConfig) -> str:
    return config.lineage.namespace or os.environ.get("OPENLINEAGE_NAMESPACE") or DEFAULT_NAMESPACE


@dataclass(frozen=True)
class RunRef:
    """A run elsewhere (a parent): job namespace, job name and run id."""

    namespace: str
    name: str
    run_id: str

    @classmethod
    def parse(cls, value: str | None) -> RunRef | None:
        """``namespace/job/run-id`` (a job name may hold ``/``); None when absent or malformed."""
        import uuid

        parts = (value or "").strip().split("/")
        if len(parts) < 3 or not parts[0] or not all(parts[1:-1]):
            return None
        try:
            uuid.UUID(parts[-1])
        except ValueError:
            return None
        return cls(parts[0], "/".join(parts[1:-1]), parts[-1])


# -- a run ---------------------------------------------------------------------------------------


def _table_version(path: str) -> int | None:
    """The Delta version of the table at ``path`` (from its newest checkpoint on), None when there
    is none."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from tidemark import storage

    try:
        return DeltaTable(path, storage_options=storage.delta_options(path)).version()
    except TableNotFoundError:
        return None


class JobRun:
    """One run of a job: emits START, then COMPLETE, FAIL or ABORT (:func:`job_run`)."""

    def __init__(
        self, config: PipelineConfig, spec: JobSpec, nominal: tuple[int | None, int | None] = (None, None)
    ):
        from openlineage.client.uuid import generate_new_uuid

        self.config = config
        self.spec = spec
        self.namespace = namespace(config)
        self.job_name = f"{config.pipeline}.{spec.name}"
        self.run_id = str(generate_new_uuid())
        self.parent = RunRef.parse(os.environ.get(PARENT_ENV))
        self.root = RunRef.parse(os.environ.get(ROOT_PARENT_ENV)) or self.parent
        self.nominal = nominal
        self.listener_transport = _listener_transport(os.environ)
        self.client = _client()
        named = tuple(dict.fromkeys((*spec.reads, *spec.writes)))
        tables = job_tables()["all"] if spec.every_table else named
        self.before = {t: _table_version(config.table_path(t)) for t in tables}
        self.extra_reads: list[str] = []

    # what it read and wrote
    def inputs(self) -> list[Dataset]:
        found = [t for t in self.before if self.before[t] is not None]
        tables = found if self.spec.every_table else [t for t in self.spec.reads if t in found]
        datasets = source_datasets(self.config) if self.spec.source else []
        return _unique([*datasets, *(table_dataset(self.config, t) for t in [*tables, *self.extra_reads])])

    def outputs(self) -> list[Dataset]:
        if self.spec.every_table:
            return [table_dataset(self.config, t) for t, v in self.before.items() if v is not None]
        moved = [t for t in self.spec.writes if _table_version(self.config.table_path(t)) != self.before[t]]
        return [table_dataset(self.config, t) for t in moved]

    def note_read(self, table: str) -> None:
        """``table`` was read too (a read that depends on what the run found)."""
        if table not in self.extra_reads:
            self.extra_reads.append(table)

    # the events
    def start(self) -> None:
        self._emit("START", self.inputs(), [])

    def finish(self, state: str, error: str | None = None, stack: str | None = None) -> None:
        try:
            outputs = self.outputs()
        except Exception as exc:  # the run's own error says more; name the tables unread
            log.warning("lineage: could not read the outputs' Delta versions: %s", exc)
            outputs = []
        self._emit(state, self.inputs(), outputs, error, stack)
        try:
            self.client.close(timeout=10)
        except Exception as exc:
            log.warning("lineage: closing the OpenLineage client: %s", exc)

    def _emit(
        self,
        state: str,
        inputs: list[Dataset],
        outputs: list[Dataset],
        error: str | None = None,
        stack: str | None = None,
    ) -> None:
        try:
            self.client.emit(self.event(state, inputs, outputs, error, stack))
        except Exception as exc:
            log.warning("lineage: %s event of %s not sent: %s", state, self.job_name, exc)

    def event(
        self,
        state: str,
        inputs: list[Dataset],
        outputs: list[Dataset],
        error: str | None = None,
        stack: str | None = None,
    ) -> Any:
        from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
        from openlineage.client.facet_v2 import job_type_job

        job_facets: dict[str, Any] = {
            "jobType": job_type_job.JobTypeJobFacet(
                processingType=self.spec.processing, integration="TIDEMARK", jobType="JOB", producer=PRODUCER
            )
        }
        return RunEvent(
            eventType=RunState(state),
            eventTime=datetime.now(UTC).isoformat(),
            run=Run(runId=self.run_id, facets=self._run_facets(error, stack)),
            job=Job(namespace=self.namespace, name=self.job_name, facets=job_facets),
            inputs=[InputDataset(namespace=d.namespace, name=d.name, facets=_facets(d)) for d in inputs],
            outputs=[OutputDataset(namespace=d.namespace, name=d.name, facets=_facets(d)) for d in outputs],
            producer=PRODUCER,
        )

    def _run_facets(self, error: str | None, stack: str | None) -> dict[str, Any]:
        """The run's facets: the engine, the parent (and root) run, the nominal time, the error."""
        from importlib.metadata import version

        from openlineage.client.facet_v2 import (
            error_message_run,
            nominal_time_run,
            parent_run,
            processing_engine_run,
        )

        facets: dict[str, Any] = {
            "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
                version=_version(),
                name="tidemark",
                openlineageAdapterVersion=version("openlineage-python"),
                producer=PRODUCER,
            )
        }
        if self.parent is not None:
            root = self.root or self.parent
            facets["parent"] = parent_run.ParentRunFacet(
                run=parent_run.Run(runId=self.parent.run_id),
                job=parent_run.Job(namespace=self.parent.namespace, name=self.parent.name),
                root=parent_run.Root(
                    run=parent_run.RootRun(runId=root.run_id),
                    job=parent_run.RootJob(namespace=root.namespace, name=root.name),
                ),
                producer=PRODUCER,
            )
        start, end = self.nominal
        if start is not None:
            facets["nominalTime"] = nominal_time_run.NominalTimeRunFacet(
                nominalStartTime=_iso(start),
                nominalEndTime=_iso(end) if end is not None else None,
                producer=PRODUCER,
            )
        if error is not None:
            facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=error, programmingLanguage="python", stackTrace=stack, producer=PRODUCER
            )
        return facets

    # the Spark listener
    def spark_conf(self, given: Mapping[str, Any]) -> dict[str, str]:
        """The Spark settings that run OpenLineage's listener as this run's child (never one
        ``given`` already sets, but ``spark.extraListeners`` is extended)."""
        root = self.root or RunRef(self.namespace, self.job_name, self.run_id)
        conf = {
            "spark.openlineage.namespace": self.namespace,
            "spark.openlineage.parentJobNamespace": self.namespace,
            "spark.openlineage.parentJobName": self.job_name,
            "spark.openlineage.parentRunId": self.run_id,
            "spark.openlineage.rootParentJobNamespace": root.namespace,
            "spark.openlineage.rootParentJobName": root.name,
            "spark.openlineage.rootParentRunId": root.run_id,
            **(
                {}
                if any(str(k).startswith("spark.openlineage.transport.") for k in given)
                else self.listener_transport
            ),
        }
        out = {k: v for k, v in conf.items() if k not in given}
        listeners = [x for x in str(given.get("spark.extraListeners", "")).split(",") if x.strip()]
        out["spark.extraListeners"] = ",".join(dict.fromkeys([*listeners, LISTENER]))
        return out


def _client() -> Any:
    """The OpenLineage client, as its environment configures it. The client copies
    ``OPENLINEAGE_URL`` into ``OPENLINEAGE__TRANSPORT__TRANSPORTS__DEFAULT_HTTP__*`` variables of
    this process; they go again once it has read them, so the JVM a job starts next does not take
    them for a transport of its own (the Spark listener reads ``OPENLINEAGE__*``)."""
    from openlineage.client import OpenLineageClient

    before = set(os.environ)
    try:
        return OpenLineageClient()
    finally:
        for key in set(os.environ) - before:
            if key.startswith("OPENLINEAGE__"):
                del os.environ[key]


def _listener_transport(env: Mapping[str, str]) -> dict[str, str]:
    """``OPENLINEAGE_URL`` (with its key and endpoint) as the Spark listener's settings: it reads
    ``OPENLINEAGE_CONFIG``, an ``openlineage.yml`` and ``OPENLINEAGE__*`` variables itself, not the
    URL."""
    url = env.get("OPENLINEAGE_URL")
    native = env.get("OPENLINEAGE_CONFIG") or any(
        k.startswith("OPENLINEAGE__TRANSPORT") and not k.startswith(URL_ALIAS) and v for k, v in env.items()
    )
    if not url or native:
        return {}
    conf = {
        "spark.openlineage.transport.type": "http",
        "spark.openlineage.transport.url": url,
        "spark.openlineage.transport.endpoint": env.get("OPENLINEAGE_ENDPOINT", "api/v1/lineage"),
    }
    if key := env.get("OPENLINEAGE_API_KEY"):
        conf["spark.openlineage.transport.auth.type"] = "api_key"
        conf["spark.openlineage.transport.auth.apiKey"] = key
    return conf


def _facets(dataset: Dataset) -> dict[str, Any]:
    if not dataset.delta:
        return {}
    from openlineage.client.facet_v2 import storage_dataset

    return {
        "storage": storage_dataset.StorageDatasetFacet(
            storageLayer=DELTA[0], fileFormat=DELTA[1], producer=PRODUCER
        )
    }


def _unique(datasets: list[Dataset]) -> list[Dataset]:
    return list({(d.namespace, d.name): d for d in datasets}.values())


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


_CURRENT: contextvars.ContextVar[JobRun | None] = contextvars.ContextVar("tidemark_lineage_run", default=None)


def current() -> JobRun | None:
    """The job run this process is in (:func:`job_run`), if lineage is on."""
    return _CURRENT.get()


def note_read(table: str) -> None:
    """The current run also read ``table`` (nothing when lineage is off)."""
    if (run := current()) is not None:
        run.note_read(table)


@contextmanager
def job_run(
    config: PipelineConfig, command: str, nominal: tuple[int | None, int | None] = (None, None)
) -> Iterator[Callable[[int], None]]:
    """Emit START, run the body, then COMPLETE or FAIL. The body reports its exit code through
    the function it is given (non-zero: FAIL naming it); an exception is a FAIL with its message
    (Ctrl-C: ABORT) and goes on. Nothing happens when lineage is off (:func:`enabled`), and a
    failure to emit never fails the job."""
    run = None
    if enabled(config):
        try:
            run = JobRun(config, job_spec(command), nominal)
            run.start()
        except Exception as exc:
            log.warning("lineage: no run events for this %s: %s", command, exc)
            run = None
    if run is None:
        yield lambda code: None
        return
    codes: list[int] = []
    token = _CURRENT.set(run)
    try:
        yield codes.append
    except KeyboardInterrupt:
        run.finish("ABORT")
        raise
    except BaseException as exc:
        one_line = getattr(exc, "one_line", None)
        message = one_line() if callable(one_line) else f"{type(exc).__name__}: {exc}"
        run.finish("FAIL", message, "".join(traceback.format_exception(exc)))
        raise
    else:
        code = codes[-1] if codes else 0
        run.finish("COMPLETE" if code == 0 else "FAIL", None if code == 0 else f"exit code {code}")
    finally:
        _CURRENT.reset(token)


# -- the Spark session ------------------------------------------------------------------------------


def listener_on(config: PipelineConfig) -> bool:
    """Does ``config``'s pipeline run OpenLineage's Spark listener (``lineage.spark_listener``
    and :func:`enabled`)?"""
    return config.lineage.spark_listener and enabled(config)


def spark_jars(config: PipelineConfig) -> list[Path]:
    """The listener's jar when :func:`listener_on`; a one-line SetupError when set-up did not
    cache it."""
    if not listener_on(config):
        return []
    folder = jars_dir() / "lineage"
    jars, missing = find_jars(folder, (LISTENER_JAR_PREFIX,))
    if missing:
        raise SetupError(
            f"lineage.spark_listener needs openlineage-spark in {folder}: run `make setup` "
            "(scripts/setup.sh) once with network access"
        )
    return jars


def spark_conf(config: PipelineConfig) -> dict[str, str]:
    """The settings of a job's session for the listener: as the child of the current run, when
    :func:`listener_on` and the job is in one; else none."""
    run = current()
    if run is None or not listener_on(config):
        return {}
    return run.spark_conf(config.spark.conf)
