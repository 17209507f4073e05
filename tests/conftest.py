from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"


def pytest_collection_modifyitems(items):
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "spark" in parts:
            item.add_marker(pytest.mark.spark)
        if "crash" in parts:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One small, fast local Spark for the whole run (UI off, 2 shuffle partitions)."""
    from tidemark.sparkenv import build_session

    os.environ.setdefault("TIDEMARK_SPARK_LOG_LEVEL", "ERROR")
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = build_session(
        app_name="tidemark-tests",
        master="local[2]",
        shuffle_partitions=2,
        extra_conf={"spark.sql.warehouse.dir": str(warehouse), "spark.driver.memory": "2g"},
    )
    yield session
    session.stop()


@pytest.fixture
def workdir(tmp_path):
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)
