"""Process control of a detached streaming job, on the Spark provider's public API.

A streaming job never ends, so a task cannot wait on ``SparkSubmitHook.submit()`` (that is what
``SparkSubmitOperator`` does, and it would pin a worker slot forever). ``StreamProcessHook``
instead starts a small *runner* process in its own session (``python -m tidemark_airflow.hooks
SPEC``) that builds a ``SparkSubmitHook`` with the operator's arguments and calls its public
``submit()``: the provider builds and masks the ``spark-submit`` command and logs its output, and
the runner's output goes to the job's log file beside the checkpoint. The task returns; the job
lives on in that process group.

* :meth:`StreamProcessHook.spawn` starts the runner and records pid, host and log in the launch
  file (``tidemark.liveness.launch_path``); the connection travels to the runner as an
  ``AIRFLOW_CONN_<ID>`` variable of its environment (JSON), so the runner needs no metadata DB.
* :meth:`StreamProcessHook.stop` stops the job's whole process group (TERM, then KILL) and refuses
  a pid recorded on another host: a pid means nothing there, and killing it could hit anything.
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
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

PLUGINS_DIR = Path(__file__).resolve().parents[1]
RUNNER_DB_SETTINGS = ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__SQL_ALCHEMY_CONN")


class StreamProcessHook(BaseHook):
    """Start, stop and read the log of one pipeline's detached streaming job."""

    def __init__(self, *, launch_path: Path, log_path: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.launch_path = Path(launch_path)
        self.log_path = Path(log_path)

    def spawn(self, application: str, submit_kwargs: dict[str, Any], note: dict[str, Any]) -> int:
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
        return process.pid

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
