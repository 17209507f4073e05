"""Set-up leaves current bytecode for what the jobs, Airflow and the tests import.

With ``PYTHONDONTWRITEBYTECODE`` set (as on this machine) Python never writes a ``.pyc``: without
set-up's (uv's ``--compile-bytecode``, ``compileall`` for the project's trees) every process would
compile every module it imports, each time (importing Airflow and the operators: 5.2 CPU-s instead
of 2.3; the suite, 2,371 s against 2,117 s).
"""

from __future__ import annotations

import importlib.util
import os
import struct
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# the lock's packages (uv compiles them as it installs; nobody edits them afterwards)
MODULES = [
    "pandas",
    "pyarrow",
    "pyspark.sql.dataframe",
    "airflow.sdk",
    "great_expectations",
    "sqlalchemy.orm",
]
# the project's own trees (compileall at each set-up: a file edited since is compiled in memory
# until the next `make`, so each tree is checked for having been compiled, not each file)
PROJECT_TREES = [
    "spark_jobs/tidemark",
    "spark_jobs/tidemark/cli",
    "plugins/tidemark_airflow",
    "dags",
    "tests",
]


def stale_reason(source: Path) -> str | None:
    """Why Python would compile ``source`` instead of loading its cached bytecode (None: it loads)."""
    cached = Path(importlib.util.cache_from_source(str(source)))
    if not cached.is_file():
        return f"no {cached.name}"
    header = cached.read_bytes()[:16]
    if header[:4] != importlib.util.MAGIC_NUMBER:
        return "another Python's bytecode"
    flags, mtime, size = struct.unpack("<3I", header[4:16])
    if flags:  # hash-based: checked or not, it stands for this source only when compiled from it
        return None
    st = os.stat(source)
    if (mtime, size) != (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF):
        return "older than its source"
    return None


@pytest.mark.parametrize("module", MODULES)
def test_the_locks_packages_have_current_bytecode(module):
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    reason = stale_reason(Path(spec.origin))
    assert reason is None, f"{module} ({spec.origin}): {reason}; run scripts/setup.sh"


@pytest.mark.parametrize("tree", PROJECT_TREES)
def test_the_projects_trees_are_compiled(tree):
    sources = sorted((REPO / tree).glob("*.py"))
    compiled = [p for p in sources if Path(importlib.util.cache_from_source(str(p))).is_file()]
    # a module added since the last set-up has none yet: only none at all is set-up's fault
    assert sources and compiled, (
        f"{tree}: none of its {len(sources)} modules has bytecode; run scripts/setup.sh"
    )


def test_a_missing_or_stale_cache_is_reported(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("X = 1\n")
    assert stale_reason(source) is not None
    import py_compile

    py_compile.compile(str(source), cfile=importlib.util.cache_from_source(str(source)))
    assert stale_reason(source) is None
    source.write_text("X = 22\n")  # edited after compiling: the cache no longer stands for it
    assert stale_reason(source) == "older than its source"
