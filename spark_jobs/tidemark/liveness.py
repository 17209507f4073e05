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

**A pid alone is no identity**: pids are recycled, a container restarts with the same hostname
and a new pid namespace, a forged file can name any process. Every record of a job's process
(the launch file, the heartbeat) carries its :class:`ProcessIdentity`: pid, start time (clock
ticks since boot, from ``/proc/<pid>/stat``), boot id, pid namespace and a random token the
launcher put in the job's environment (``TIDEMARK_JOB_TOKEN``). :func:`verify` checks all of them
against the live process before anything acts on the pid; a mismatch means the recorded job is
gone (DEAD), never "signal whatever has that pid now".
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tidemark.config import PipelineConfig
from tidemark.storage import Location, is_object_store, location, write_text_atomic
from tidemark.timeutil import humanize_ms, now_ms

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

HEARTBEAT_EVERY_S = 5
# The job's token, in its environment from its launch (readable in /proc/<pid>/environ only by its
# own user and root).
TOKEN_VAR = "TIDEMARK_JOB_TOKEN"
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


class CommittedBatch(Protocol):
    """A batch's summary, as a heartbeat reads it (:class:`tidemark.batch_steps.BatchSummary`)."""

    @property
    def batch_id(self) -> int: ...


class BatchCounter(Protocol):
    """What a heartbeat reads of the stream's batch function
    (:class:`tidemark.batch.BatchProcessor`): its newest batches and how many ran."""

    @property
    def summaries(self) -> Sequence[CommittedBatch]: ...

    @property
    def batches_run(self) -> int: ...


class Heartbeat:
    """Written by the job's driver; one instance per run of ``run_stream``."""

    def __init__(self, config: PipelineConfig) -> None:
        self.path = heartbeat_path(config)
        self.started_at_ms = now_ms()
        self.trigger_since_ms: int | None = None
        self.identity = ProcessIdentity.self().record()

    def beat(self, query: StreamingQuery, processor: BatchCounter, stopped: bool = False) -> None:
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
                **self.identity,
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


def _proc(pid: int | str, name: str) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except (FileNotFoundError, ProcessLookupError):  # no such process, or it just ended
        return None


def start_ticks(pid: int | str) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat`` field 22); None
    when there is no such process. The command name (field 2) may hold spaces and parentheses:
    fields are counted after its closing one."""
    stat = _proc(pid, "stat")
    if stat is None:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[19])


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return None


def pid_namespace(pid: int | str = "self") -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def new_token() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True)
class ProcessIdentity:
    """Who a recorded pid is: enough to tell the job from a process that got its pid later."""

    pid: int
    start_ticks: int | None
    token: str | None
    host: str
    boot_id: str | None
    pid_namespace: str | None

    @classmethod
    def of(cls, pid: int, token: str | None) -> ProcessIdentity:
        """The identity of the live process ``pid`` (started with ``token`` in its environment)."""
        return cls(pid, start_ticks(pid), token, socket.gethostname(), boot_id(), pid_namespace())

    @classmethod
    def self(cls) -> ProcessIdentity:
        return cls.of(os.getpid(), os.environ.get(TOKEN_VAR))

    def record(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "token": self.token,
            "host": self.host,
            "boot_id": self.boot_id,
            "pid_namespace": self.pid_namespace,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ProcessIdentity | None:
        if not record.get("pid"):
            return None
        return cls(
            int(record["pid"]),
            record.get("start_ticks"),
            record.get("token"),
            str(record.get("host") or ""),
            record.get("boot_id"),
            record.get("pid_namespace"),
        )


@dataclass(frozen=True)
class Verdict:
    ours: bool  # the live process is the recorded job: signals may go to it
    gone: bool  # the recorded job no longer runs here (or cannot be told from another process)
    reason: str


def verify(identity: ProcessIdentity) -> Verdict:
    """Is the process recorded as ``identity`` the one running under its pid now, on this host?

    Each check that fails says why; every failure but "another host" means the recorded job is
    gone from here (its pid, if alive, belongs to something else)."""
    pid = identity.pid
    if identity.host != socket.gethostname():
        return Verdict(False, False, f"recorded on host {identity.host!r}")
    if identity.boot_id and identity.boot_id != boot_id():
        return Verdict(False, True, f"pid {pid} was recorded before the machine restarted")
    if identity.pid_namespace and identity.pid_namespace != pid_namespace():
        return Verdict(
            False, True, f"pid {pid} was recorded in another pid namespace (a restarted container)"
        )
    if identity.start_ticks is None:
        return Verdict(False, True, f"pid {pid} was recorded without its start time")
    ticks = start_ticks(pid)
    if ticks is None or not pid_alive(pid):
        return Verdict(False, True, f"process {pid} is gone")
    if ticks != identity.start_ticks:
        return Verdict(False, True, f"pid {pid} now belongs to another process (started at another time)")
    if not identity.token:  # `tidemark stream` run by hand: alive, but nothing proves it is ours
        return Verdict(False, False, f"pid {pid} was started without a job token (by hand): stop it yourself")
    try:
        environ = _proc(pid, "environ")
    except PermissionError:
        return Verdict(False, True, f"pid {pid} belongs to another user: not the job")
    if environ is None:
        return Verdict(False, True, f"process {pid} is gone")
    if f"{TOKEN_VAR}={identity.token}".encode() not in environ.split(b"\0"):
        return Verdict(False, True, f"pid {pid} does not hold the job's token")
    return Verdict(True, False, f"pid {pid} is the job")


def signal_group(identity: ProcessIdentity, sig: int) -> bool:
    """Send ``sig`` to the process group of the verified job ``identity``; False (nothing sent)
    when it does not verify, or when its group would be init's (<= 1) or our own."""
    if not verify(identity).ours:
        return False
    try:
        group = os.getpgid(identity.pid)
    except ProcessLookupError:
        return False
    if group <= 1 or group == os.getpgrp():
        return False
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


SIGNALS = (signal.SIGTERM, signal.SIGKILL)


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
        launched = ProcessIdentity.from_record(launch) if launch else None
        if launched is not None and launched.host == local:
            verdict = verify(launched)
            since = None if launched_at is None else now - int(launched_at)
            if verdict.ours and since is not None and since <= start_grace_ms:
                return Liveness(STARTING, f"launched {humanize_ms(since)} ago", launched.pid)
            if verdict.ours:
                after = "" if since is None else f" {humanize_ms(since)}"
                return Liveness(HUNG, f"no heartbeat{after} after launch", launched.pid)
            if pid_alive(launched.pid):
                return Liveness(DEAD, f"no heartbeat since the last launch; {verdict.reason}")
        reason = "no heartbeat since the last launch" if launch else "never started"
        return Liveness(DEAD, reason)
    age = now - int(beat["written_at_ms"])
    identity = ProcessIdentity.from_record(beat)
    pid = identity.pid if identity else None
    same_host = beat.get("host") == local
    last_batch = beat.get("last_batch_id")
    if beat.get("stopped"):
        return Liveness(STOPPED, "stopped cleanly", pid, age, last_batch)
    if same_host and identity is not None:
        verdict = verify(identity)
        if verdict.gone:
            return Liveness(
                DEAD, f"{verdict.reason} (last heartbeat {humanize_ms(age)} ago)", pid, age, last_batch
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
