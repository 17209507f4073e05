"""Is the streaming job alive and making progress? A heartbeat file, read without Spark.

The running job (``stream.run_stream``) rewrites ``<checkpoint>/_tidemark_alive.json`` every
``HEARTBEAT_EVERY_S`` seconds, whether or not a batch ran: its pid and host, when it started, and
what Spark says it is doing (trigger active or waiting, the last batch id, the last progress
time). The Airflow supervisor reads that file and the committed ``watermarks`` rows, and decides:

========== ===================================================================================
RUNNING    the heartbeat is fresh and no trigger has been running longer than ``hang_after``
STARTING   the job was launched less than ``start_grace`` ago and has not beaten yet
HUNG       the process is alive, but its heartbeat is older than ``hang_after`` or one trigger
           has run longer than ``hang_after``: the supervisor kills it and starts it again
DEAD       no heartbeat, or the heartbeat's process is gone (crash, kill, machine restart)
STOPPED    the job stopped cleanly (``--once`` finished, Ctrl-C); starting it again is normal
========== ===================================================================================

The file is written atomically (temp file + rename), so a reader never sees half of it. The
supervisor only trusts the pid when the heartbeat comes from its own host; elsewhere it goes by
the heartbeat's age alone.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.config import PipelineConfig
from tidemark.storage import Location, is_object_store, location, write_text_atomic
from tidemark.timeutil import humanize_ms, now_ms

HEARTBEAT_EVERY_S = 5
HEARTBEAT_FILE = "_tidemark_alive.json"
LAUNCH_FILE = "_tidemark_launch.json"

RUNNING = "RUNNING"
STARTING = "STARTING"
HUNG = "HUNG"
DEAD = "DEAD"
STOPPED = "STOPPED"


def heartbeat_path(config: PipelineConfig) -> Location:
    return location(config.checkpoint) / HEARTBEAT_FILE


def launch_path(config: PipelineConfig) -> Location:
    """Written by whoever launches the job (the supervisor): pid, command, log, launch time."""
    return location(config.checkpoint).parent / f"{config.pipeline}{LAUNCH_FILE}"


def log_dir(config: PipelineConfig) -> Path:
    """Where a launcher keeps the job's stdout log: beside the checkpoint on a local disk; for a
    checkpoint on object storage (no appends there), ``$TIDEMARK_HOME/var/logs`` (or the current
    directory's)."""
    if not is_object_store(config.checkpoint):
        return Path(config.checkpoint).parent
    return Path(os.environ.get("TIDEMARK_HOME", os.getcwd())) / "var" / "logs"


def write_json_atomic(path: Location, data: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(data, indent=1))


def read_json(path: Location) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class Heartbeat:
    """Written by the job's driver; one instance per run of ``run_stream``."""

    def __init__(self, config: PipelineConfig) -> None:
        self.path = heartbeat_path(config)
        self.started_at_ms = now_ms()
        self.trigger_since_ms: int | None = None

    def beat(self, query, processor, stopped: bool = False) -> None:
        status = query.status if not stopped else {}
        active = bool(status.get("isTriggerActive")) if status else False
        now = now_ms()
        if active and self.trigger_since_ms is None:
            self.trigger_since_ms = now
        elif not active:
            self.trigger_since_ms = None
        last = processor.summaries[-1] if processor.summaries else None
        write_json_atomic(
            self.path,
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started_at_ms": self.started_at_ms,
                "written_at_ms": now,
                "stopped": stopped,
                "trigger_active": active,
                "trigger_since_ms": self.trigger_since_ms,
                "message": status.get("message") if status else "stopped",
                "last_batch_id": last.batch_id if last else None,
                "batches_this_run": processor.batches_run,
            },
        )


@dataclass(frozen=True)
class Liveness:
    state: str
    reason: str
    pid: int | None = None
    heartbeat_age_ms: int | None = None
    last_batch_id: int | None = None

    @property
    def needs_start(self) -> bool:
        return self.state in (DEAD, STOPPED, HUNG)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    try:  # Linux: the state letter follows the command name in parentheses
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] != "Z"


def assess(
    config: PipelineConfig,
    hang_after_ms: int,
    start_grace_ms: int = 120_000,
    now: int | None = None,
) -> Liveness:
    """Classify the job from its heartbeat and launch files (see the module docstring)."""
    now = now if now is not None else now_ms()
    beat = read_json(heartbeat_path(config))
    launch = read_json(launch_path(config))
    local = socket.gethostname()
    launched_at = launch.get("launched_at_ms") if launch else None
    if beat is None or (launched_at is not None and beat.get("written_at_ms", 0) < launched_at):
        # Nothing written since the last launch: still starting, or it died on the way up.
        if launch and launch.get("host") == local and launch.get("pid"):
            launched_pid = int(launch["pid"])
            since = None if launched_at is None else now - int(launched_at)
            if pid_alive(launched_pid) and since is not None and since <= start_grace_ms:
                return Liveness(STARTING, f"launched {humanize_ms(since)} ago", launched_pid)
            if pid_alive(launched_pid):
                after = "" if since is None else f" {humanize_ms(since)}"
                return Liveness(HUNG, f"no heartbeat{after} after launch", launched_pid)
        reason = "no heartbeat since the last launch" if launch else "never started"
        return Liveness(DEAD, reason)
    age = now - int(beat["written_at_ms"])
    pid = int(beat["pid"]) if beat.get("pid") else None
    same_host = beat.get("host") == local
    last_batch = beat.get("last_batch_id")
    if beat.get("stopped"):
        return Liveness(STOPPED, "stopped cleanly", pid, age, last_batch)
    if same_host and pid is not None and not pid_alive(pid):
        return Liveness(
            DEAD, f"process {pid} is gone (last heartbeat {humanize_ms(age)} ago)", pid, age, last_batch
        )
    if age > hang_after_ms:
        if same_host:
            return Liveness(HUNG, f"heartbeat {humanize_ms(age)} old", pid, age, last_batch)
        return Liveness(
            DEAD, f"heartbeat {humanize_ms(age)} old (remote host {beat.get('host')})", pid, age, last_batch
        )
    since = beat.get("trigger_since_ms")
    if beat.get("trigger_active") and since is not None and now - since > hang_after_ms:
        return Liveness(HUNG, f"one trigger running for {humanize_ms(now - since)}", pid, age, last_batch)
    return Liveness(RUNNING, f"heartbeat {humanize_ms(age)} ago, {beat.get('message')}", pid, age, last_batch)
