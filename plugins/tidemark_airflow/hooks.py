"""Process control of a detached streaming job, on the Spark provider's public API.

A streaming job never ends, so a task cannot wait on ``SparkSubmitHook.submit()`` (that is what
``SparkSubmitOperator`` does, and it would pin a worker slot forever). ``StreamProcessHook``
instead starts a small *runner* process in its own session (``python -m tidemark_airflow.hooks
SPEC``) that builds a ``SparkSubmitHook`` with the job's arguments and calls its public
``submit()``: the provider builds and masks the ``spark-submit`` command and logs its output, and
the runner's output goes to the job's log file beside the checkpoint. The task returns; the job
lives on in that process group. No private method of the provider is called anywhere.

* :func:`submit_arguments` is the one place the ``SparkSubmitHook`` arguments of a Tidemark job
  are made (jars from the local cache, the JVM options, the Python that runs Airflow for the
  driver); ``TidemarkSparkSubmitOperator`` and the stream launcher both use it.
* :meth:`StreamProcessHook.start_detached` starts the runner and records pid, host and log in the
  launch file (``tidemark.liveness.launch_path``); the connection travels to the runner as an
  ``AIRFLOW_CONN_<ID>`` variable of its environment (JSON), so the runner needs no metadata DB.
* :meth:`StreamProcessHook.wait_for_heartbeat` waits for the job's first heartbeat and fails
  with the log's tail when the process exits first or writes none in time.
* :meth:`StreamProcessHook.recorded` finds the job's recorded processes (launch and heartbeat
  files) with their identity (pid, start time, token: :mod:`tidemark.liveness`);
  :meth:`StreamProcessHook.stop` stops one's whole process group (TERM, then KILL), each signal
  only after the pid is verified to still be the job, and refuses a pid recorded on another host
  or started by hand. :meth:`StreamProcessHook.stop_recorded` stops every recorded one.
* :meth:`StreamProcessHook.tail` reads the end of the job's log for error messages.
* The job's log, ``<pipeline>.stream.log`` in :func:`tidemark.liveness.log_dir`, is bounded: once
  it holds :data:`STREAM_LOG_MAX_BYTES` (64 MiB) it is rotated to ``.1`` (the newest older
  generation; :data:`STREAM_LOG_KEEP`, 5, are kept, the oldest beyond is deleted), so a pipeline's
  logs take at most about 6 x 64 MiB. A launch rotates an oversize log before it appends
  (:func:`rotate_log`), and the runner rotates its own output while the job runs
  (:class:`_OutputRotator`): a job streams for weeks, and its output would otherwise grow
  without end.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from tidemark.config import PipelineConfig
    from tidemark.liveness import Liveness

PLUGINS_DIR = Path(__file__).resolve().parents[1]
RUNNER_DB_SETTINGS = ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__SQL_ALCHEMY_CONN")
# The stream log's rotation (module docstring): the size at which it is rotated, the older
# generations kept, and how often the runner checks the size of its output while the job runs (a
# job writing 1 MiB/s overshoots the bound by 1 MiB at most).
STREAM_LOG_MAX_BYTES = 64 * 1024 * 1024
STREAM_LOG_KEEP = 5
STREAM_LOG_CHECK_S = 1.0
# tail() reads at most this much of the end of each log file (a log holds up to 64 MiB)
TAIL_BYTES = 256 * 1024


def submit_arguments(
    *,
    conn_id: str,
    name: str,
    application_args: Sequence[str],
    conf: dict[str, Any] | None = None,
    jars: str | None = None,
    env_vars: dict[str, Any] | None = None,
    config: PipelineConfig | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The ``SparkSubmitHook`` arguments of a Tidemark job (``extra``: any further hook argument).

    Jars come from the local cache set-up filled (no network at run time) unless given; the JVM
    options (``tidemark.sparkenv.jvm_conf``) under any given ``conf``; the driver and executors run
    the Python that runs Airflow, and the ``spark-submit`` found first is the one beside it
    (pyspark's), whatever PATH the worker has. Given ``env_vars`` win. With the pipeline's
    ``config``, a pipeline on object storage also gets the S3 jars and ``fs.s3a`` settings
    (:mod:`tidemark.storage`) and its storage connection travels in the environment, as does the
    Kafka connection of a secured Kafka source (:func:`kafka_connection_env`).
    """
    from tidemark import lineage, storage
    from tidemark.sparkenv import cached_jars, driver_class_path, jvm_conf

    all_jars = [
        *cached_jars(),
        *(storage.spark_jars(config) if config is not None else []),
        *(lineage.spark_jars(config) if config is not None else []),  # lineage.spark_listener
    ]
    # settings, never credentials: those would show on spark-submit's command line; the driver
    # reads them from the connection in its environment (tidemark.sparkenv.session_for)
    s3_conf = {
        k: v
        for k, v in (storage.spark_conf(config) if config is not None else {}).items()
        if not k.endswith(storage.S3A_SECRET_KEYS)
    }
    s3_env = storage_connection_env(config) if config is not None else {}
    kafka_env = kafka_connection_env(config) if config is not None else {}

    python = sys.executable
    bin_dir = str(Path(python).parent)
    path = os.environ.get("PATH", "")
    return {
        **extra,
        "conn_id": conn_id,
        "name": name,
        "application_args": list(application_args),
        "jars": jars or ",".join(str(j) for j in all_jars),  # to the executors
        "conf": {**jvm_conf(), **driver_class_path(all_jars), **s3_conf, **(conf or {})},
        "env_vars": {
            **s3_env,
            **kafka_env,
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            "PATH": path if path.startswith(bin_dir + os.pathsep) else f"{bin_dir}{os.pathsep}{path}",
            **(env_vars or {}),
        },
    }


def lineage_env(context: Any) -> dict[str, str]:
    """The environment that makes a Tidemark job's OpenLineage run (:mod:`tidemark.lineage`) the
    child of this task's run: ``OPENLINEAGE_PARENT_ID`` and ``OPENLINEAGE_ROOT_PARENT_ID`` from the
    OpenLineage provider's macros, and the provider's transport when it is configured in Airflow's
    ``[openlineage]`` section rather than the environment the job inherits. Nothing when the
    provider is not installed or OpenLineage is off in Airflow."""
    try:
        from airflow.providers.openlineage import conf as ol_conf
        from airflow.providers.openlineage.plugins.macros import lineage_parent_id, lineage_root_parent_id
    except ImportError:
        return {}
    if ol_conf.is_disabled():
        return {}
    from tidemark.lineage import PARENT_ENV, ROOT_PARENT_ENV

    ti = context["ti"]
    env = {PARENT_ENV: lineage_parent_id(ti), ROOT_PARENT_ENV: lineage_root_parent_id(ti)}
    if not os.environ.get("OPENLINEAGE_URL") and not any(
        k.startswith("OPENLINEAGE__TRANSPORT") for k in os.environ
    ):
        if transport := ol_conf.transport():
            env["OPENLINEAGE__TRANSPORT"] = json.dumps(transport)  # env, never argv: it may hold a key
        if path := ol_conf.config_path(check_legacy_env_var=False):
            env["OPENLINEAGE_CONFIG"] = path
    return env


def storage_connection_env(config: PipelineConfig) -> dict[str, str]:
    """``AIRFLOW_CONN_<ID>`` of the pipeline's storage connection, for a process Airflow starts
    outside the task (spark-submit, the detached stream): the credentials stay out of argv."""
    conn_id = config.storage.airflow_connection
    if not conn_id:
        return {}
    from airflow.sdk import Connection

    return {f"AIRFLOW_CONN_{conn_id.upper()}": Connection.get(conn_id).as_json()}


def kafka_connection_env(config: PipelineConfig) -> dict[str, str]:
    """``AIRFLOW_CONN_<ID>`` of the pipeline's Kafka connection (``source.kafka.airflow_connection``:
    login, password), resolved here in the task and handed to the job in its environment, never in
    argv (:func:`tidemark.kafka_access.kafka_access` reads it there)."""
    conn_id = config.source.kafka.airflow_connection if config.source.kind == "kafka" else None
    if not conn_id:
        return {}
    from airflow.sdk import Connection

    return {f"AIRFLOW_CONN_{conn_id.upper()}": Connection.get(conn_id).as_json()}


class StreamProcessHook(BaseHook):
    """Start, wait for, stop and read the log of one pipeline's detached streaming job."""

    def __init__(self, config: PipelineConfig, **kwargs: Any) -> None:
        from tidemark import liveness

        super().__init__(**kwargs)
        self.config = config
        self.launch_path = liveness.launch_path(config)
        self.heartbeat_path = liveness.heartbeat_path(config)
        self.log_path = liveness.log_dir(config) / f"{config.pipeline}.stream.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.identity: Any = None

    # -- start ------------------------------------------------------------------------------
    def start_detached(self, application: str, submit_kwargs: dict[str, Any], note: dict[str, Any]) -> int:
        """Start ``SparkSubmitHook(**submit_kwargs).submit(application)`` detached; return its pid.

        No secret touches the disk: connections (``AIRFLOW_CONN_*``, the Spark one and the
        storage one in ``env_vars``) travel in the runner's environment only, the spec file names
        them without their values, is created ``0600`` and is removed by the runner as soon as
        it has read it. The job's random token (``TIDEMARK_JOB_TOKEN``) goes in the environment
        too, and the launch file records the runner's :class:`~tidemark.liveness.ProcessIdentity`."""
        from tidemark import liveness
        from tidemark.timeutil import now_ms

        conn_id = submit_kwargs["conn_id"]
        hook_args = dict(submit_kwargs)
        env_vars = dict(hook_args.pop("env_vars", None) or {})
        secret = {k: str(v) for k, v in env_vars.items() if k.startswith("AIRFLOW_CONN_")}
        plain = {k: v for k, v in env_vars.items() if k not in secret}
        spec = self._write_spec(application, hook_args, plain, sorted(secret))
        pythonpath = os.pathsep.join(filter(None, [str(PLUGINS_DIR), os.environ.get("PYTHONPATH")]))
        token = liveness.new_token()
        env = {
            **os.environ,
            **secret,
            "PYTHONPATH": pythonpath,
            f"AIRFLOW_CONN_{conn_id.upper()}": self.get_connection(conn_id).as_json(),
            liveness.TOKEN_VAR: token,
            # the runner needs no metadata DB (its one connection is in its environment); a task's
            # environment names a deliberately unparsable DB URL that would stop Airflow's import
            **dict.fromkeys(RUNNER_DB_SETTINGS, "sqlite://"),
        }
        launched_at = now_ms()
        rotate_log(self.log_path, STREAM_LOG_MAX_BYTES, STREAM_LOG_KEEP)
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"\n--- launched by Airflow at {launched_at} ---\n".encode())
            log_file.flush()
            try:
                process = subprocess.Popen(
                    [sys.executable, "-m", "tidemark_airflow.hooks", str(spec)],
                    env=env,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # outlives the task; its own process group for stop()
                )
            except BaseException:
                spec.unlink(missing_ok=True)
                raise
        identity = liveness.ProcessIdentity.of(process.pid, token)
        record = {**identity.record(), "launched_at_ms": launched_at}
        liveness.write_json_atomic(self.launch_path, {**record, "log": str(self.log_path), **note})
        self.process = process
        self.identity = identity
        self.log.info("started %s as pid %s, log %s", self.config.pipeline, process.pid, self.log_path)
        return process.pid

    def _write_spec(
        self, application: str, hook_args: dict[str, Any], env_vars: dict[str, Any], from_runner: list[str]
    ) -> Path:
        """The runner's spec file (0600, no secret values: it names the variables it inherits)."""
        from tidemark.timeutil import now_ms

        spec = self.log_path.with_name(f".{self.config.pipeline}.submit.{os.getpid()}.{now_ms()}.json")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        write_private(
            spec,
            json.dumps(
                {
                    "application": application,
                    "hook": hook_args,
                    "env_vars": env_vars,
                    "env_from_runner": from_runner,
                    # the runner rotates its output (the log) by these (_OutputRotator)
                    "log": {
                        "path": str(self.log_path),
                        "max_bytes": STREAM_LOG_MAX_BYTES,
                        "keep": STREAM_LOG_KEEP,
                        "check_s": STREAM_LOG_CHECK_S,
                    },
                }
            ),
        )
        return spec

    def wait_for_heartbeat(self, timeout: float, poll: float = 2.0) -> Liveness:
        """Wait until the job started by :meth:`start_detached` writes its first heartbeat.

        Raises with the log's tail when the process exits first or no heartbeat comes in ``timeout``.
        """
        from tidemark import liveness

        if self.process is None:
            raise RuntimeError("wait_for_heartbeat() needs a job started by this hook")
        pipeline = self.config.pipeline
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = liveness.assess(
                self.config, hang_after_ms=self.config.airflow.hang_after, start_grace_ms=10**12
            )
            if state.state == liveness.RUNNING:
                self.log.info("stream %s is running: %s", pipeline, state.reason)
                return state
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"streaming job {pipeline} exited with code {self.process.returncode} before "
                    f"its first heartbeat; log {self.log_path}:\n{self.tail()}"
                )
            time.sleep(poll)
        raise RuntimeError(
            f"streaming job {pipeline} (pid {self.process.pid}) wrote no heartbeat within "
            f"{timeout:.0f}s; log {self.log_path}:\n{self.tail()}"
        )

    # -- stop -------------------------------------------------------------------------------
    def recorded(self) -> list[Any]:
        """The job's recorded processes (launch and heartbeat files; often one), as
        :class:`~tidemark.liveness.ProcessIdentity`."""
        from tidemark.liveness import ProcessIdentity, read_json

        found: dict[int, Any] = {}
        for record in (read_json(self.launch_path) or {}, read_json(self.heartbeat_path) or {}):
            identity = ProcessIdentity.from_record(record)
            if identity is not None:
                found.setdefault(identity.pid, identity)
        return list(found.values())

    def recorded_pids(self) -> dict[int, str | None]:
        """The job's pids and the hosts they were recorded on."""
        return {i.pid: i.host for i in self.recorded()}

    def stop_recorded(self, timeout: float = 30.0) -> bool:
        """Stop every recorded process that is verifiably the job; whether one stopped. Raises
        for a job recorded on another host, or one alive but not provably ours (started by hand)."""
        stopped = False
        for identity in self.recorded():
            stopped |= self.stop(identity, timeout)
        return stopped

    def stop(self, identity: Any, timeout: float = 30.0) -> bool:
        """Stop the process group of the job recorded as ``identity``: TERM, then KILL after
        ``timeout``, each sent only after :func:`tidemark.liveness.verify` says the pid is still
        the job (a recycled pid, another user's process or a restarted container's record is
        left alone: the job is gone). Returns whether it stopped."""
        from tidemark import liveness

        verdict = liveness.verify(identity)
        if not verdict.ours and not verdict.gone:
            raise RuntimeError(f"refusing to stop pid {identity.pid}: {verdict.reason}")
        if verdict.gone:
            self.log.info("not signalling pid %s: %s", identity.pid, verdict.reason)
            return False
        for sig in liveness.SIGNALS:
            if not liveness.signal_group(identity, sig):
                return not liveness.verify(identity).ours
            deadline = time.monotonic() + (timeout if sig == signal.SIGTERM else 5)
            while time.monotonic() < deadline and liveness.verify(identity).ours:
                time.sleep(0.5)
            if not liveness.verify(identity).ours:
                self.log.info("stopped the process group of pid %s", identity.pid)
                return True
        return False

    # -- log --------------------------------------------------------------------------------
    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` of the job's log, continued from ``.1`` when the log was rotated
        just before; at most :data:`TAIL_BYTES` of each file are read."""
        found: list[str] = []
        read_any = False
        for path in (self.log_path, _generation(self.log_path, 1)):
            try:
                with open(path, "rb") as log_file:
                    log_file.seek(max(0, os.fstat(log_file.fileno()).st_size - TAIL_BYTES))
                    text = log_file.read().decode("utf-8", errors="replace")
            except OSError:
                continue
            read_any = True
            found = text.splitlines()[-(lines - len(found)) :] + found
            if len(found) >= lines:
                break
        return "\n".join(found) if read_any else "(no log)"


def _generation(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


def rotate_log(path: Path, max_bytes: int = STREAM_LOG_MAX_BYTES, keep: int = STREAM_LOG_KEEP) -> bool:
    """Rotate the log ``path`` when it holds ``max_bytes`` or more: ``.1`` becomes ``.2`` and so on,
    ``.<keep>`` (the oldest) is replaced, and ``path`` becomes ``.1``; the next write starts a new
    file. True when it rotated; a missing or smaller log is left alone."""
    try:
        if path.stat().st_size < max_bytes:
            return False
    except FileNotFoundError:
        return False
    if keep < 1:
        path.unlink(missing_ok=True)
        return True
    for n in range(keep - 1, 0, -1):
        older = _generation(path, n)
        if older.exists():
            os.replace(older, _generation(path, n + 1))
    os.replace(path, _generation(path, 1))
    return True


class _OutputRotator(threading.Thread):
    """The runner's output rotated while the job runs, by :func:`rotate_log`'s rules.

    The runner's stdout and stderr (fds 1 and 2) are the log file the launch opened, and every
    line of the job reaches them whoever writes it: the provider's lines of spark-submit's output
    (Airflow's structlog), warnings, a traceback. Every ``check_s`` seconds this thread looks at
    the size of that file; at ``max_bytes`` it rotates the log and points fds 1 and 2 at a new file
    at the log's path. Nothing is lost: a write racing the rotation lands in ``.1``. A log that is
    not the runner's output any more (replaced by hand) is left alone; one removed is started again.
    """

    def __init__(self, path: Path, max_bytes: int, keep: int, check_s: float) -> None:
        super().__init__(name="stream-log-rotation", daemon=True)
        self.path, self.max_bytes, self.keep, self.check_s = path, max_bytes, keep, check_s
        self._last_error = ""

    def run(self) -> None:
        while True:
            time.sleep(self.check_s)
            try:
                self.check()
            except OSError as exc:  # a full or read-only disk: said once, tried again
                if str(exc) != self._last_error:
                    self._last_error = str(exc)
                    print(f"stream log {self.path}: rotation failed: {exc}", file=sys.stderr, flush=True)

    def check(self) -> bool:
        """Rotate when the output file is the log and has reached the bound; whether it did."""
        out = os.fstat(1)
        try:
            log = os.stat(self.path)
        except FileNotFoundError:
            self._redirect()
            return False
        if (log.st_dev, log.st_ino) != (out.st_dev, out.st_ino) or out.st_size < self.max_bytes:
            return False
        rotate_log(self.path, self.max_bytes, self.keep)
        self._redirect()
        return True

    def _redirect(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            os.dup2(fd, 1)
            os.dup2(fd, 2)
        finally:
            os.close(fd)


def write_private(path: Path, text: str) -> None:
    """Create ``path`` readable by its owner only (``0600`` from the start, never wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def _run(spec_path: str) -> int:
    """The runner: the provider's ``SparkSubmitHook.submit()`` with the spawned spec, log to stdout.
    The spec is removed once read; the connections it names come from this process's environment."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(message)s", force=True)
    path = Path(spec_path)
    spec = json.loads(path.read_text(encoding="utf-8"))
    path.unlink(missing_ok=True)
    if log := spec.get("log"):
        _OutputRotator(
            Path(log["path"]), int(log["max_bytes"]), int(log["keep"]), float(log["check_s"])
        ).start()
    env_vars = {**spec.get("env_vars", {}), **{k: os.environ[k] for k in spec.get("env_from_runner", [])}}
    SparkSubmitHook(**spec["hook"], env_vars=env_vars).submit(spec["application"])
    return 0


if __name__ == "__main__":
    sys.exit(_run(sys.argv[1]))
