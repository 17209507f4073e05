"""The ``tidemark`` process ends with its command's exit code, after the Python ``atexit``
functions and a flush of its output, and without the interpreter's teardown, where native
thread pools (Arrow, delta-rs) could abort it after the work was done (exit -6; seen 3 in 96
concurrent runs of ``tidemark watermark`` before, 0 in 96 after)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROGRAM = """
import atexit, sys, threading
from tidemark.cli import {entry}
atexit.register(lambda: print("atexit ran", flush=True))
# What the teardown would wait for: a non-daemon thread that never ends (a native pool's thread
# that is still alive plays the same part in the abort).
threading.Thread(target=threading.Event().wait, daemon=False).start()
print("buffered output", end="")  # no newline, no flush: the exit flushes it
{call}
"""


def run(entry: str, call: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM.format(entry=entry, call=call)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_exit_code_output_and_atexit_survive_and_no_teardown_is_waited_for():
    done = run("console", "console(['schema', '--no-such-option'])")  # argparse: usage, exit 2
    assert done.returncode == 2, done.stderr
    assert done.stdout.startswith("buffered output")
    assert "atexit ran" in done.stdout
    assert "unrecognized arguments: --no-such-option" in done.stderr
    done = run("console", "console(['completeness', '--config', '/nonexistent.yaml'])")  # a TidemarkError
    assert done.returncode == 2 and "/nonexistent.yaml" in done.stderr, done.stderr
    done = run("console", "console(['schema'])")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("buffered output") and "atexit ran" in done.stdout


def test_the_ordinary_exit_would_wait_for_the_teardown():
    """The same program through ``sys.exit(main())`` never ends: what ``console`` skips."""
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run(
            [sys.executable, "-c", PROGRAM.format(entry="main", call="sys.exit(main(['schema']))")],
            capture_output=True,
            timeout=10,
        )


def test_every_entry_point_ends_through_console():
    from importlib.metadata import entry_points
    from pathlib import Path

    [script] = [e for e in entry_points(group="console_scripts") if e.name == "tidemark"]
    assert script.value == "tidemark.cli:console"
    jobs = Path(__file__).resolve().parents[2] / "spark_jobs" / "tidemark" / "jobs"
    for path in [*jobs.glob("*_job.py"), jobs.parent / "cli" / "__main__.py"]:
        text = path.read_text(encoding="utf-8")
        assert "console(" in text and "sys.exit(main" not in text, path
