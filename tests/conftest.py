from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"


def pytest_configure(config):
    # The JVMs the tests start as jobs (subprocesses, spark-submit) are short-lived: C1 only starts
    # one ~25% faster (the demo test: 36-38 s -> 27-28 s; a storage-fault test with three job
    # runs 79 s -> 67 s). The session fixture's JVM lives for the whole run and keeps C2 (C1 made
    # the dedup tests run in it 100 s -> 102 s). The benchmarks keep C2.
    os.environ.setdefault("TIDEMARK_JVM_OPTIONS", "-XX:TieredStopAtLevel=1")


def pytest_collection_modifyitems(items):
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "spark" in parts:
            item.add_marker(pytest.mark.spark)
        if "crash" in parts:
            item.add_marker(pytest.mark.slow)
        if "cluster" in parts:  # one Spark cluster for the package: keep its tests on one xdist worker
            item.add_marker(pytest.mark.xdist_group("cluster"))
        elif getattr(item.module, "ONE_WORKER", False) and item.config.pluginmanager.hasplugin("xdist"):
            # tests that build on one module fixture, in order: one worker runs them all
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One small, fast local Spark for the whole run (UI off, 2 shuffle partitions)."""
    from tidemark.sparkenv import JVM_OPTIONS, build_session

    os.environ.setdefault("TIDEMARK_SPARK_LOG_LEVEL", "ERROR")
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = build_session(
        app_name="tidemark-tests",
        master="local[2]",
        shuffle_partitions=2,
        extra_conf={
            "spark.sql.warehouse.dir": str(warehouse),
            "spark.driver.memory": "2g",
            # long-lived: C2 as in production, without the jobs' TIDEMARK_JVM_OPTIONS
            "spark.driver.extraJavaOptions": JVM_OPTIONS,
            "spark.executor.extraJavaOptions": JVM_OPTIONS,
        },
    )
    yield session
    session.stop()


@pytest.fixture
def workdir(tmp_path):
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


class KafkaBroker:
    """The project's own single-broker KRaft Kafka (scripts/kafka.sh) on free loopback ports."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.script = Path(__file__).resolve().parents[1] / "scripts" / "kafka.sh"
        self._ports()

    def _ports(self) -> None:
        from helpers import listen_ports

        port, controller = listen_ports(2)
        self.env = {
            **os.environ,
            "TIDEMARK_KAFKA_DIR": str(self.directory),
            "TIDEMARK_KAFKA_PORT": str(port),
            "TIDEMARK_KAFKA_CONTROLLER_PORT": str(controller),
        }
        self.bootstrap = f"127.0.0.1:{port}"

    def _run(self, action: str) -> None:
        import subprocess

        done = subprocess.run(
            [str(self.script), action], env=self.env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            log = self.directory / "broker.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"scripts/kafka.sh {action} failed: {done.stderr.strip()}\n{tail}")

    def start(self) -> None:
        self._run("start")

    def first_start(self, attempts: int = 3) -> None:
        """Start it, on new ports and an empty directory when a port was taken between the check
        and the broker's bind (a later restart keeps its ports: clients know them)."""
        for attempt in range(attempts):
            try:
                self.start()
                return
            except RuntimeError:
                if attempt == attempts - 1:
                    raise
                self.stop()  # a broker that never opened its port, if still alive
                shutil.rmtree(self.directory, ignore_errors=True)
                self.directory.mkdir()
                self._ports()

    def stop(self) -> None:
        self._run("stop")


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.first_start()
    yield broker
    broker.stop()
