"""A class-data-sharing archive for the driver JVM: start every job ~3 s sooner.

A Tidemark job's driver JVM loads, parses and verifies some 20,000 classes (Spark, Delta, the
Kafka connector) before its first batch, every time it starts: the supervisor's restarts, each
Airflow task's spark-submit, every test. A JDK dynamic CDS archive (``-XX:ArchiveClassesAtExit``,
JDK 13+) holds them parsed and verified; a JVM started with ``-XX:SharedArchiveFile`` maps it.
Measured here (2 cores, JDK 17, C1 only): a session up in 2.8-3.4 s instead of 5.2-6.3 s, its
first query 1.1-1.3 s instead of 2.5-2.7 s.

``tidemark jvm-archive`` (run by ``scripts/setup.sh``) trains it once: a small demo in a JVM that
dumps its loaded classes at exit. The archive is only valid for the JVM and the Spark class path
that made it, so its file name carries a key of both (:func:`archive_key`): a different Java, a
new pyspark, other cached jars or another ``SPARK_CONF_DIR`` finds no archive and starts as
before. The JVM itself checks the class path it runs with against the archive's and ignores the
archive on a mismatch: a pipeline on object storage, whose S3 jars join the driver's class path,
starts without it. Only the driver uses it (executors on workers have other class paths).
``TIDEMARK_JVM_ARCHIVE=off`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tidemark.resources import SetupError, jars_dir, spark_home

ARCHIVE_ENV = "TIDEMARK_JVM_ARCHIVE"
# CDS reports a mismatch (another class path, a changed jar) as a warning and starts without the
# archive; that is the intended fallback, not news for a job's log.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java() -> Path | None:
    """The ``java`` spark-submit's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_key() -> str | None:
    """A digest of what a CDS archive depends on: the JVM (its resolved binary and libjvm, their
    sizes and modification times) and the driver's class path (Spark's jars and the cached ones,
    names, sizes and modification times, and the configuration directory); None without a
    ``java``."""
    java = _java()
    if java is None:
        return None
    parts = [str(java)]
    for path in [java, *sorted(java.parents[1].glob("lib/server/libjvm.so"))]:
        stat = path.stat()
        parts.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")
    spark = spark_home()
    parts.append(os.environ.get("SPARK_CONF_DIR") or str(spark / "conf"))
    parts += sorted(_jar(jar) for jar in (spark / "jars").glob("*.jar"))
    # the cached jars lead the driver's class path (tidemark.sparkenv.jar_conf)
    parts += sorted(f"cache/{_jar(jar)}" for jar in jars_dir().glob("*.jar"))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _jar(jar: Path) -> str:
    """A class path jar as the JVM checks it against an archive: its size and its modification
    time. A reinstalled pyspark has jars of the same sizes and new times; the JVM then ignores
    the archive (silently: :data:`QUIET`), so the key must change with them and set-up trains a
    new one."""
    stat = jar.stat()
    return f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}"


def archive_path() -> Path | None:
    """Where this JVM's archive is (whether or not it exists yet); None when archives are off."""
    if os.environ.get(ARCHIVE_ENV, "").strip().lower() in ("off", "0", "false", "no"):
        return None
    key = archive_key()
    return jars_dir() / "jvm" / f"driver-{key}.jsa" if key else None


def driver_options() -> str:
    """The driver's JVM options for the archive, or "" when there is none for this JVM."""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def create(force: bool = False, echo=print) -> Path:
    """Train the archive for this JVM and class path unless it exists: ``tidemark demo``, small
    (stream, reconcile, quality), in a JVM that dumps the classes it loaded as it exits. Written
    beside, then renamed: a job starting meanwhile sees the whole archive or none. Its path."""
    path = archive_path()
    if path is None:
        raise SetupError(f"no JVM class archive: no java found, or {ARCHIVE_ENV} is off")
    if path.is_file() and not force:
        echo(f"jvm-archive: {path} exists")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    with tempfile.TemporaryDirectory(prefix="tidemark-jvm-archive-") as work:
        options = os.environ.get("TIDEMARK_JVM_OPTIONS", "")
        env = {
            **os.environ,
            ARCHIVE_ENV: "off",
            "TIDEMARK_JVM_OPTIONS": f"{options} -XX:ArchiveClassesAtExit={partial} {QUIET}".strip(),
            "TIDEMARK_SPARK_LOG_LEVEL": "ERROR",
        }
        demo = ["demo", "--workdir", work, "--hosts", "20", "--minutes", "3", "--files-per-batch", "2"]
        # Returns once the JVM, which shares this output, has dumped the archive and exited.
        done = subprocess.run(
            [sys.executable, "-m", "tidemark.cli", *demo], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            raise SetupError(f"jvm-archive: the training demo failed:\n{(done.stdout + done.stderr)[-3000:]}")
    if not partial.is_file() or partial.stat().st_size == 0:
        raise SetupError(f"jvm-archive: the training JVM wrote no archive to {partial}")
    os.replace(partial, path)
    echo(f"jvm-archive: {path} ({path.stat().st_size / 2**20:.0f} MiB) in {time.monotonic() - began:.0f}s")
    return path
