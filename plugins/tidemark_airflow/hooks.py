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
* :meth:`StreamProcessHook.recorded_pids` finds the job's pids (launch and heartbeat files);
  :meth:`StreamProcessHook.stop` stops one pid's whole process group (TERM, then KILL) and refuses
  a pid recorded on another host: a pid means nothing there, and killing it could hit anything.
  :meth:`StreamProcessHook.stop_recorded` stops every recorded one.
* :meth:`StreamProcessHook.tail` reads the end of the job's log for error messages.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
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
    (:mod:`tidemark.storage`) and its storage connection travels in the environment.
    """
    from tidemark import storage
    from tidemark.sparkenv import cached_jars, driver_class_path, jvm_conf

    all_jars = [*cached_jars(), *(storage.spark_jars(config) if config is not None else [])]
    # settings, never credentials: those would show on spark-submit's command line; the driver
    # reads them from the connection in its environment (tidemark.sparkenv.session_for)
    s3_conf = {
        k: v
        for k, v in (storage.spark_conf(config) if config is not None else {}).items()
        if not k.endswith(storage.S3A_SECRET_KEYS)
    }
    s3_env = storage_connection_env(config) if config is not None else {}

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
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            "PATH": path if path.startswith(bin_dir + os.pathsep) else f"{bin_dir}{os.pathsep}{path}",
            **(env_vars or {}),
        },
    }


def storage_connection_env(config: PipelineConfig) -> dict[str, str]:
    """``AIRFLOW_CONN_<ID>`` of the pipeline's storage connection, for a process Airflow starts
    outside the task (spark-submit, the detached stream): the credentials stay out of argv."""
    conn_id = config.storage.airflow_connection
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

    # -- start ------------------------------------------------------------------------------
    def start_detached(self, application: str, submit_kwargs: dict[str, Any], note: dict[str, Any]) -> int:
        """Start ``SparkSubmitHook(**submit_kwargs).submit(application)`` detached; return its pid."""
        from tidemark.liveness import write_json_atomic
        from tidemark.timeutil import now_ms

        conn_id = submit_kwargs["conn_id"]
        spec = self.log_path.with_suffix(".submit.json")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(spec, {"application": application, "hook": submit_kwargs})
        pythonpath = os.pathsep.join(filter(None, [str(PLUGINS_DIR), os.environ.get("PYTHONPATH")]))
        env = {
            **os.environ,
            "PYTHONPATH": pythonpath,
            f"AIRFLOW_CONN_{conn_id.upper()}": self.get_connection(conn_id).as_json(),
            # the runner needs no metadata DB (its one connection is in its environment); a task's
            # environment names a deliberately unparsable DB URL that would stop Airflow's import
            **dict.fromkeys(RUNNER_DB_SETTINGS, "sqlite://"),
        }
        launched_at = now_ms()
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"\n--- launched by Airflow at {launched_at} ---\n".encode())
            log_file.flush()
            process = subprocess.Popen(
                [sys.executable, "-m", "tidemark_airflow.hooks", str(spec)],
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives the task; its own process group for stop()
            )
        record = {"pid": process.pid, "host": socket.gethostname(), "launched_at_ms": launched_at}
        write_json_atomic(self.launch_path, {**record, "log": str(self.log_path), **note})
        self.process = process
        self.log.info("started %s as pid %s, log %s", self.config.pipeline, process.pid, self.log_path)
        return process.pid

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
    def recorded_pids(self) -> dict[int, str | None]:
        """The job's pids and the hosts they were recorded on (launch and heartbeat files; often one)."""
        from tidemark.liveness import read_json

        records = (read_json(self.launch_path) or {}, read_json(self.heartbeat_path) or {})
        return {int(r["pid"]): r.get("host") for r in records if r.get("pid")}

    def stop_recorded(self, timeout: float = 30.0) -> bool:
        """Stop every recorded pid's process group; whether one stopped. Raises for another host's."""
        stopped = False
        for pid, host in self.recorded_pids().items():
            stopped |= self.stop(pid, host, timeout)
        return stopped

    def stop(self, pid: int, host: str | None, timeout: float = 30.0) -> bool:
        """Stop the process group of ``pid`` recorded on ``host``: TERM, then KILL after ``timeout``.

        Returns whether it stopped. Raises when ``host`` is another machine: its pids are not ours.
        """
        from tidemark.liveness import pid_alive

        local = socket.gethostname()
        if host and host != local:
            raise RuntimeError(
                f"refusing to stop pid(s) [{pid}] recorded on host {host!r}: this is {local!r}; "
                "stop the job on its own host"
            )
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(os.getpgid(pid), sig)
            except ProcessLookupError:
                return False
            deadline = time.monotonic() + (timeout if sig == signal.SIGTERM else 5)
            while time.monotonic() < deadline and pid_alive(pid):
                time.sleep(0.5)
            if not pid_alive(pid):
                self.log.info("stopped the process group of pid %s", pid)
                return True
        return False

    # -- log --------------------------------------------------------------------------------
    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _run(spec_path: str) -> int:
    """The runner: the provider's ``SparkSubmitHook.submit()`` with the spawned spec, log to stdout."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(message)s", force=True)
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    SparkSubmitHook(**spec["hook"]).submit(spec["application"])
    return 0


if __name__ == "__main__":
    sys.exit(_run(sys.argv[1]))
