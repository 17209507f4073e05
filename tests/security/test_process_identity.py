"""Finding 2: a stale, forged or recycled pid record must never make the supervisor, the launcher
or the service scripts signal a process that is not the job (tidemark.liveness.verify)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import write_config

from tidemark import liveness

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def unrelated():
    """A process that is not the job (no token), in a session of its own."""
    process = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


@pytest.fixture
def tokened():
    token = liveness.new_token()
    process = subprocess.Popen(
        ["sleep", "600"], start_new_session=True, env={**os.environ, liveness.TOKEN_VAR: token}
    )
    _execed(process)
    yield process, token
    process.kill()
    process.wait()


def _heartbeat(config, record: dict, age_ms: int = 600_000) -> None:
    path = liveness.heartbeat_path(config)
    Path(str(path)).parent.mkdir(parents=True, exist_ok=True)
    now = liveness.now_ms()
    liveness.write_json_atomic(path, {**record, "written_at_ms": now - age_ms, "stopped": False})


def _supervise(config) -> liveness.Liveness:
    """What the supervisor does: assess, and stop the recorded job when it is HUNG."""
    from tidemark_airflow.hooks import StreamProcessHook

    state = liveness.assess(config, hang_after_ms=60_000)
    if state.state == liveness.HUNG:
        StreamProcessHook(config).stop_recorded(timeout=2)
    return state


def _execed(process, program: bytes = b"sleep") -> None:
    """Wait until the child runs ``program`` (on a loaded machine its /proc entry can still show
    the parent's command line and environment for a moment after Popen returns)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{process.pid}/cmdline").read_bytes().startswith(program):
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"pid {process.pid} never ran {program!r}")


def _alive(process) -> bool:
    time.sleep(0.3)
    return process.poll() is None


@pytest.mark.airflow
def test_a_ten_minute_old_heartbeat_naming_an_unrelated_process_is_dead_and_it_is_left_alone(
    tmp_path, unrelated
):
    config = write_config(tmp_path)
    _heartbeat(config, {"pid": unrelated.pid, "host": socket.gethostname()})
    state = _supervise(config)
    assert state.state == liveness.DEAD, state
    assert _alive(unrelated)


@pytest.mark.airflow
@pytest.mark.parametrize(
    ("forge", "why"),
    [
        # the record's start time is not the live process's: its pid was reused
        (lambda record, token: {**record, "start_ticks": record["start_ticks"] - 1}, "another process"),
        # the live process does not hold the job's token
        (lambda record, token: {**record, "token": liveness.new_token()}, "token"),
    ],
    ids=["recycled-pid", "wrong-token"],
)
def test_a_pid_that_is_not_the_job_any_more_is_dead_and_left_alone(tmp_path, tokened, forge, why):
    process, token = tokened
    config = write_config(tmp_path)
    _heartbeat(config, forge(liveness.ProcessIdentity.of(process.pid, token).record(), token))
    state = _supervise(config)
    assert state.state == liveness.DEAD and why in state.reason, state
    assert _alive(process)


@pytest.mark.airflow
def test_the_job_itself_is_verified_and_stopped(tmp_path, tokened):
    """The check can tell: the recorded job, hung, is stopped."""
    process, token = tokened
    config = write_config(tmp_path)
    _heartbeat(config, liveness.ProcessIdentity.of(process.pid, token).record())
    assert _supervise(config).state == liveness.HUNG
    assert process.wait(timeout=10) is not None


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to run as nobody")
def test_a_pid_owned_by_another_user_is_dead_not_an_error(tmp_path, tokened):
    """The supervisor runs as one user; the recorded pid now belongs to another (root here):
    /proc/<pid>/environ is unreadable. Old code raised PermissionError on every run."""
    import tempfile

    process, token = tokened
    shared = Path(tempfile.mkdtemp(prefix="tidemark-other-user-"))  # pytest's tmp dirs are 0700
    request_cleanup = shutil.rmtree
    os.chmod(shared, 0o777)
    config = write_config(shared, name="other")
    _heartbeat(config, liveness.ProcessIdentity.of(process.pid, token).record())
    for path in shared.rglob("*"):
        os.chmod(path, 0o777 if path.is_dir() else 0o666)
    script = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = [{str(ROOT / "tests")!r}, {str(ROOT / "plugins")!r}]
        from tidemark.config import load_config
        from tidemark import liveness
        from tidemark_airflow.hooks import StreamProcessHook
        config = load_config({str(shared / "other.yaml")!r})
        state = liveness.assess(config, hang_after_ms=60_000)
        print(state.state, state.reason)
        StreamProcessHook(config).stop_recorded(timeout=2)
        """
    )
    env = {**os.environ, "HOME": str(shared), "AIRFLOW_HOME": str(shared / "airflow")}
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    request_cleanup(shared)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("DEAD") and "another user" in done.stdout, done.stdout
    assert _alive(process)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for a pid namespace")
def test_a_record_from_a_restarted_container_names_pids_of_another_namespace(tmp_path):
    """A container restarted: its old record names a pid of the old pid namespace (small
    numbers, here the namespace's own pid 1 and 2), which on this side is some other process."""
    config = write_config(tmp_path)
    record = tmp_path / "inner.json"
    script = (
        "import json, os, subprocess, sys; from tidemark import liveness; "
        f"p = subprocess.Popen(['sleep', '60'], env={{**os.environ, liveness.TOKEN_VAR: 't'}}); "
        f"open({str(record)!r}, 'w').write(json.dumps(liveness.ProcessIdentity.of(p.pid, 't').record())); "
        "p.kill()"
    )
    subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", script], check=True, timeout=60
    )
    inner = json.loads(record.read_text())
    assert inner["pid"] < 10 and inner["pid_namespace"] != liveness.pid_namespace()
    _heartbeat(config, inner)
    state = liveness.assess(config, hang_after_ms=60_000)
    assert state.state == liveness.DEAD and "another pid namespace" in state.reason, state
    verdict = liveness.verify(liveness.ProcessIdentity.from_record(inner))
    assert not verdict.ours and verdict.gone


def test_never_our_own_process_group(tokened):
    """Even a verified job is not signalled when its group is ours (or init's)."""
    token = liveness.new_token()
    child = subprocess.Popen(["sleep", "600"], env={**os.environ, liveness.TOKEN_VAR: token})
    try:
        _execed(child)
        identity = liveness.ProcessIdentity.of(child.pid, token)
        assert liveness.verify(identity).ours
        assert liveness.signal_group(identity, signal.SIGTERM) is False
        assert _alive(child)
    finally:
        child.kill()
        child.wait()


def test_the_s3_script_does_not_kill_a_process_its_stale_pid_file_names(tmp_path, unrelated):
    """scripts/s3.sh (and kafka.sh, the same lib/pidfile.sh) with a pid file naming a pid that
    now runs something else: nothing is signalled."""
    state = tmp_path / "s3"
    state.mkdir()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    ns = os.readlink("/proc/self/ns/pid")
    (state / "server.pid").write_text(f"{unrelated.pid} 1 {boot} {ns}\n")
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "s3.sh"), "stop"],
        env={**os.environ, "TIDEMARK_S3_DIR": str(state)},
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0 and "not running" in done.stdout, done
    assert _alive(unrelated)
    # an old-format file (a bare pid) is not trusted either
    (state / "server.pid").write_text(f"{unrelated.pid}\n")
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "s3.sh"), "stop"],
        env={**os.environ, "TIDEMARK_S3_DIR": str(state)},
        cwd=ROOT,
        check=True,
    )
    assert _alive(unrelated)
