"""Where Tidemark finds its files: inside the installed package, or where the environment says.

Nothing here depends on a checkout's layout. The spark-submit entrypoints (``tidemark.jobs``), the
Great Expectations suites (``tidemark.expectations``, from the repository's ``expectations/``) and
the record parser's Java source (``tidemark.jvm``, from ``spark_jobs/jvm``) are package data,
found with :mod:`importlib.resources`: the same call works from an editable install of the
checkout and from a wheel in any virtualenv.

Machine state lives outside the package, each with an environment override:

* the JVM jar cache (Delta, Kafka connector, the compiled record parser): ``$TIDEMARK_JARS_DIR``,
  else ``<sys.prefix>/share/tidemark/jars`` (the virtualenv's own data directory; ``make setup``
  links it to the checkout's ``.cache/jars``);
* the code archives shipped to executors: ``$TIDEMARK_DIST_DIR``, else
  ``$XDG_CACHE_HOME/tidemark/dist`` (``~/.cache/tidemark/dist``).
"""

from __future__ import annotations

import os
import sys
from importlib.resources import files
from importlib.util import find_spec
from pathlib import Path

from tidemark.errors import SetupError as SetupError

JOBS = ("stream_job", "reconcile_job", "quality_job", "maintain_job")


def _directory(package: str) -> Path:
    """The on-disk directory of a package's data (wheels install unzipped; a zipped install is
    refused with the reason rather than failing later in spark-submit)."""
    path = Path(str(files(package)))
    if not path.is_dir():
        raise FileNotFoundError(
            f"package data {package} is not a directory on disk ({path}); install tidemark unzipped"
        )
    return path


def entrypoint(name: str) -> Path:
    """The spark-submit script of a job (:data:`JOBS`)."""
    stem = name.removesuffix(".py")
    if stem not in JOBS:
        raise ValueError(f"unknown spark job {name!r}; one of {', '.join(JOBS)}")
    return _directory("tidemark.jobs") / f"{stem}.py"


def suites_dir() -> Path:
    """``$TIDEMARK_EXPECTATIONS_DIR`` or the suites shipped with the package."""
    env = os.environ.get("TIDEMARK_EXPECTATIONS_DIR")
    return Path(env) if env else _directory("tidemark.expectations")


def java_sources() -> list[Path]:
    """The record parser's Java sources shipped with the package (compiled by set-up)."""
    return sorted(_directory("tidemark.jvm").rglob("*.java"))


def jars_dir() -> Path:
    """``$TIDEMARK_JARS_DIR``, else ``<sys.prefix>/share/tidemark/jars``."""
    env = os.environ.get("TIDEMARK_JARS_DIR")
    return Path(env) if env else Path(sys.prefix) / "share" / "tidemark" / "jars"


def spark_home() -> Path:
    """pyspark's own distribution (bin/spark-submit, bin/spark-class, jars/), or ``$SPARK_HOME``."""
    spec = find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SetupError("pyspark is not installed in this Python: run scripts/setup.sh")
    return Path(os.environ.get("SPARK_HOME") or Path(spec.origin).parent)


def dist_dir() -> Path:
    """``$TIDEMARK_DIST_DIR``, else ``$XDG_CACHE_HOME/tidemark/dist`` (``~/.cache`` by default)."""
    env = os.environ.get("TIDEMARK_DIST_DIR")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "tidemark" / "dist"


def find_jars(folder: Path, prefixes: tuple[str, ...]) -> tuple[list[Path], list[str]]:
    """(the jars in ``folder`` whose names start with one of ``prefixes``, the prefixes none has)."""
    found = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    missing = [p for p in prefixes if not any(j.name.startswith(p) for j in found)]
    return [j for j in found if j.name.startswith(prefixes)], missing
