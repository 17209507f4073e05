"""`make test` keeps tests that share an expensive fixture on one xdist worker with
``--dist loadgroup`` and ``xdist_group`` marks (the Spark cluster, ONE_WORKER
modules). pytest 9 with pytest-xdist 3.8 silently stopped honouring the marks: each worker then
built its own images and started its own cluster. This runs a small session the way the Makefile
does and checks a group stays on one worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = """
import os, pytest

@pytest.fixture(scope="session")
def expensive():
    return os.getpid()
"""

GROUPED = """
import os, pytest

pytestmark = pytest.mark.xdist_group("shared")

@pytest.mark.parametrize("i", range(4))
def test_grouped(i, expensive):
    print(f"RAN grouped {i} on {os.getpid()} fixture {expensive}")
"""

LOOSE = """
import time, pytest

@pytest.mark.parametrize("i", range(8))
def test_loose(i):
    time.sleep(0.2)
"""


# What tests/conftest.py does for the cluster tests and ONE_WORKER modules: the mark is added in
# pytest_collection_modifyitems, which must run before xdist's own (it reads the marks then).
DYNAMIC = """
import os, pytest

@pytest.fixture(scope="session")
def expensive():
    return os.getpid()

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if getattr(item.module, "ONE_WORKER", False):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
"""

GROUPED_DYNAMIC = """
import os, pytest

ONE_WORKER = True

@pytest.mark.parametrize("i", range(4))
def test_grouped(i, expensive):
    print(f"RAN grouped {i} on {os.getpid()} fixture {expensive}")
"""


@pytest.mark.parametrize("how", ["module mark", "mark added by a conftest hook"])
def test_an_xdist_group_runs_on_one_worker(tmp_path: Path, how: str) -> None:
    dynamic = how != "module mark"
    (tmp_path / "conftest.py").write_text(DYNAMIC if dynamic else CONFTEST)
    (tmp_path / "test_grouped.py").write_text(GROUPED_DYNAMIC if dynamic else GROUPED)
    (tmp_path / "test_loose.py").write_text(LOOSE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
         "-rP", "-q", "-c", "/dev/null", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = [line.split() for line in done.stdout.splitlines() if line.startswith("RAN grouped")]
    assert len(ran) == 4, done.stdout[-3000:]
    workers = {words[4] for words in ran}
    assert len(workers) == 1, f"the group ran on workers {workers}: xdist_group is not honoured"
