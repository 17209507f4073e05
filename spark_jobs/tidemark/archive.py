"""The code archive: Tidemark's sources as a zip for the Spark executors.

On a cluster the executors must run the driver's copy of ``tidemark``, not whatever happens to be
importable on the worker machines. :func:`code_archive` zips the installed ``tidemark`` package
(sources and templates, fixed timestamps, so the same code gives the same bytes) into
``<dist>/tidemark-<version>-<sha12>.zip``; the content hash in the name means an executor never
reuses a stale copy. It reaches the executors through ``--py-files``
(:func:`tidemark.packaging.spark_submit_command`) or ``SparkContext.addPyFile``
(:func:`tidemark.sparkenv.build_session` on a non-local master).
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

from tidemark.resources import dist_dir

PACKAGE_DIR = Path(__file__).resolve().parent
_ZIP_TIME = (2000, 1, 1, 0, 0, 0)
# Sources, and the package data a driver started by spark-submit reads from the archive (its
# ``--py-files`` come first on the driver's path too): the report's templates, the GX suites.
SHIPPED_SUFFIXES = (".py", ".j2", ".json")


def shipped_files() -> list[Path]:
    """The package's files that go into the archive, in archive order."""
    return sorted(
        p
        for p in PACKAGE_DIR.rglob("*")
        if p.is_file() and p.suffix in SHIPPED_SUFFIXES and "__pycache__" not in p.parts
    )


def _archive_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in shipped_files():
            info = zipfile.ZipInfo(f"tidemark/{file.relative_to(PACKAGE_DIR).as_posix()}", _ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, file.read_bytes())
    return buffer.getvalue()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tidemark")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0"


def code_archive(out_dir: Path | None = None) -> Path:
    """The zip of the current ``tidemark`` sources, written once per content hash."""
    data = _archive_bytes()
    folder = out_dir or dist_dir()
    target = folder / f"tidemark-{_version()}-{hashlib.sha256(data).hexdigest()[:12]}.zip"
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        partial.write_bytes(data)
        partial.replace(target)  # atomic: a concurrent job never ships half a zip
    return target
