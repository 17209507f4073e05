"""Set-up and the pipeline on each Java that Spark 4.1 supports, 17 and 21, and a clear refusal of
any other.

The machine's JDK is 17 (Debian bookworm, which packages no Java 21); the tests' Java 21 is Debian
trixie's OpenJDK 21 that ``scripts/setup.sh --test-tools`` unpacks into ``.cache/java21`` with
trixie's own glibc (``scripts/java21.sh``). The record parser's jar is compiled once with
``--release 17`` and is the same on both. The demo prints the Java version the
Spark JVM really runs, read back from inside the JVM, so a test cannot pass on the wrong Java.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
JAVA21_HOME = REPO / ".cache" / "java21" / "jdk"
OTHER_JDKS = sorted(Path("/usr/lib/jvm").glob("temurin-2[2-9]*")) + sorted(
    Path("/usr/lib/jvm").glob("*-1[1-6]*")
)


def _java_version(home: Path) -> str:
    out = subprocess.run([str(home / "bin" / "java"), "-version"], capture_output=True, text=True).stderr
    return re.search(r'version "([^"]+)"', out).group(1)


def _env(java_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["JAVA_HOME"] = str(java_home)
    return env


def _setup(java_home: Path) -> subprocess.CompletedProcess:
    # Without training a class archive for that Java (a minute's demo; tests/spark/test_jvm_archive.py
    # checks the archive set-up trains for the machine's Java).
    return subprocess.run(
        [str(REPO / "scripts" / "setup.sh")],
        env={**_env(java_home), "TIDEMARK_JVM_ARCHIVE": "off"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_java21_runtime_is_installed_by_the_test_setup():
    assert (JAVA21_HOME / "bin" / "java").is_file(), "run scripts/setup.sh --test-tools"
    assert _java_version(JAVA21_HOME).startswith("21.")


def test_setup_accepts_java_21_and_refuses_other_versions(tmp_path):
    done = _setup(JAVA21_HOME)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"setup: java {_java_version(JAVA21_HOME)} ({JAVA21_HOME})" in done.stdout

    # A real other JDK where the machine has one (Temurin 25 on this image), and a Java 11 stand-in
    # (its `java -version` output) everywhere, so the refusal is checked on every machine.
    fake = tmp_path / "jdk11"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "java").write_text(
        "#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n", encoding="utf-8"
    )
    (fake / "bin" / "java").chmod(0o755)
    for other in [fake, *OTHER_JDKS[:1]]:
        done = _setup(other)
        assert done.returncode == 1, done.stdout
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0] == (
            f"setup: error: java is version {_java_version(other)}; Spark 4.1 runs on Java 17 or 21 "
            "(set JAVA_HOME to a JDK 17 or 21)"
        )


def test_demo_runs_exactly_once_on_java_21(tmp_path):
    """The whole demo (stream, reconcile, GX suites, report) on Java 21; it exits non-zero unless
    every window aligns with nothing unexplained and the stream's count equals the input's. On
    Java 17, the machine's, the installed wheel's demo checks the same lines
    (tests/cluster/test_installed.py), so the suite runs that demo once, not twice."""
    assert _java_version(JAVA21_HOME).startswith("21.")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidemark.cli",
            "demo",
            "--workdir",
            str(tmp_path / "demo"),
            "--hosts",
            "500",
            "--minutes",
            "4",
            "--files-per-batch",
            "3",
        ],
        env=_env(JAVA21_HOME),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert re.search(r"Spark 4\.1\.\d+ on Java 21\.\d", done.stdout), done.stdout[:2000]
    assert "unexplained difference 0" in done.stdout
    # on-time and final alignment (500 hosts: no host may lag at 0.999, so nothing comes late
    # here; tests/spark/test_window_revisions.py folds late records in)
    line = next(x for x in done.stdout.splitlines() if x.startswith("alignment on-time"))
    assert "final (latest revision, allowed lateness 1h): worst 1.0, 100.00% at target" in line, line
