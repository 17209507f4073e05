"""The detached streaming job's log (``<log dir>/<pipeline>.stream.log``) is bounded: rotated to
``.1`` (newest) ... ``.5`` when a job starts on a log over the bound, and while the job runs (its
output goes through the runner's logging, which rotates at the same bound)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

# Airflow reads its configuration when first imported: a throw-away home when this file runs
# alone (tests/airflow/conftest.py sets the same variables when the whole suite runs).
_HOME = Path(tempfile.mkdtemp(prefix="tidemark-streamlog-"))
os.environ.setdefault("AIRFLOW_HOME", str(_HOME / "home"))
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_HOME / 'airflow.db'}")
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from helpers import write_config  # noqa: E402

from tidemark_airflow import hooks  # noqa: E402
from tidemark_airflow.hooks import StreamProcessHook  # noqa: E402

pytestmark = pytest.mark.airflow


def _generations(log: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(log.parent.glob(log.name + "*"))}


def test_an_oversize_log_becomes_dot1_and_five_generations_are_kept(tmp_path):
    log = tmp_path / "p.stream.log"
    log.write_text("now\n" * 500)
    for n in range(1, 6):
        (tmp_path / f"p.stream.log.{n}").write_text(f"gen{n}\n")
    assert hooks.rotate_log(log, max_bytes=1000, keep=5) is True
    assert _generations(log) == {
        "p.stream.log.1": "now\n" * 500,
        "p.stream.log.2": "gen1\n",
        "p.stream.log.3": "gen2\n",
        "p.stream.log.4": "gen3\n",
        "p.stream.log.5": "gen4\n",
    }


def test_a_log_under_the_bound_or_missing_is_left_alone(tmp_path):
    log = tmp_path / "p.stream.log"
    assert hooks.rotate_log(log, max_bytes=1000, keep=5) is False
    log.write_text("x" * 999)
    assert hooks.rotate_log(log, max_bytes=1000, keep=5) is False
    assert _generations(log) == {"p.stream.log": "x" * 999}


def test_the_bound_is_64_mib_and_five_generations():
    assert hooks.STREAM_LOG_MAX_BYTES == 64 * 1024 * 1024
    assert hooks.STREAM_LOG_KEEP == 5


def _fake_spark_submit(folder: Path, body: str) -> dict[str, str]:
    """A ``spark-submit`` first on the job's PATH that runs ``body`` (bash) instead of Spark."""
    folder.mkdir()
    script = folder / "spark-submit"
    script.write_text("#!/usr/bin/env bash\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def _start(tmp_path: Path, monkeypatch, body: str, max_bytes: int, keep: int) -> StreamProcessHook:
    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_SPARK", '{"conn_type": "spark", "host": "local[1]"}')
    # the provider logs the job's lines at INFO (tests/airflow/conftest.py sets WARNING)
    monkeypatch.setenv("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")
    monkeypatch.setattr(hooks, "STREAM_LOG_MAX_BYTES", max_bytes)
    monkeypatch.setattr(hooks, "STREAM_LOG_KEEP", keep)
    monkeypatch.setattr(hooks, "STREAM_LOG_CHECK_S", 0.02)
    config = write_config(tmp_path, "logged")
    hook = StreamProcessHook(config)
    hook.log_path.parent.mkdir(parents=True, exist_ok=True)
    return hook


def _run(hook: StreamProcessHook, tmp_path: Path, body: str) -> int:
    env = _fake_spark_submit(tmp_path / "bin", body)
    kwargs = {"conn_id": "tidemark_spark", "name": "logged", "application_args": [], "env_vars": env}
    hook.start_detached("app.py", kwargs, {})
    assert hook.process is not None
    return hook.process.wait(timeout=180)


def test_starting_a_job_rotates_an_oversize_log_first(tmp_path, monkeypatch):
    hook = _start(tmp_path, monkeypatch, "", max_bytes=10_000, keep=5)
    old = "an earlier run\n" * 1000  # 15,000 bytes: over the bound
    hook.log_path.write_text(old)
    assert _run(hook, tmp_path, "echo fake job says hello") == 0
    assert (hook.log_path.parent / "logged.stream.log.1").read_text() == old
    current = hook.log_path.read_text()
    assert "--- launched by Airflow at" in current and "fake job says hello" in current
    assert "an earlier run" not in current


def test_a_job_writing_for_long_keeps_its_log_bounded_and_its_last_words_readable(tmp_path, monkeypatch):
    max_bytes, keep = 50_000, 3
    hook = _start(tmp_path, monkeypatch, "", max_bytes=max_bytes, keep=keep)
    # ~1 MB of output (each line ~250 bytes as the provider logs it) in 50 bursts, then a failure:
    # the runner's traceback goes to its own stderr
    body = (
        "for b in $(seq 1 50); do for i in $(seq 1 80); do "
        'echo "job line $b.$i: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"; done; sleep 0.1; done; '
        "exit 3"
    )
    assert _run(hook, tmp_path, body) != 0
    files = _generations(hook.log_path)
    total = sum(len(text.encode()) for text in files.values())
    rotated = {name: text for name, text in files.items() if name != hook.log_path.name}
    # rotated during the run, the oldest generations deleted: the disk holds a bounded part
    assert sorted(rotated) == [f"logged.stream.log.{n}" for n in range(1, keep + 1)]
    assert total < 700_000, total
    for name, text in rotated.items():
        # checked every 0.02 s: a burst (~20 KB) may overshoot the bound, never by much
        assert len(text.encode()) <= 3 * max_bytes, (name, len(text.encode()))
    newest = rotated["logged.stream.log.1"] + files[hook.log_path.name]
    assert "job line 50.80:" in newest
    # the runner's own last words (the provider's error, on stderr) are in the current log
    assert "Error code is: 3" in files[hook.log_path.name]
    assert "\n" in hook.tail(5) and hook.tail(5) != "(no log)"
