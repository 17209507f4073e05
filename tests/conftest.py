from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
SERIAL_GC = "-XX:+UseSerialGC"


def pytest_configure(config):
    # The JVMs the tests start as jobs (subprocesses, spark-submit) are short-lived: C1 only starts
    # one ~25% faster (the demo test: 36-38 s -> 27-28 s; a storage-fault test with three job
    # runs 79 s -> 67 s). The session fixture's JVM lives for the whole run and keeps C2: C1 there
    # made the modules that query in it slower over a whole run (test_dedup 95 -> 166 s) and the
    # run no faster (pytest 2,062 -> 2,126 s). The benchmarks keep C2.
    # The serial collector: two xdist workers share 2 cores, and G1's concurrent threads cost
    # more than they save on these heaps (a 2,000-host demo, 5 paired runs: CPU-seconds
    # 0.79-0.95x, median 0.89x, of G1's; wall 0.81-0.99x).
    # (One C1 compiler thread, not two, tried 2026-11-29: the small-scenario stream used ~5% fewer
    # CPU-seconds, but the jobs with no class archive to map, the S3 ones and the cluster's
    # executors, used more, and the whole run was no faster: pytest 2,111.6 -> 2,109.9 s.)
    os.environ.setdefault("TIDEMARK_JVM_OPTIONS", f"-XX:TieredStopAtLevel=1 {SERIAL_GC}")


# tryfirst: xdist's worker adds ``@group`` to each node id in its own pytest_collection_modifyitems,
# reading the xdist_group marks present then; this conftest was registered before xdist's worker
# plugin, so without tryfirst pluggy would call it after xdist's and the marks it adds (the cluster
# group, ONE_WORKER modules) would be ignored: each worker would build the shared fixtures itself.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    # The image tests last (stable sort): their images are built beside the run at a lower CPU
    # priority than the workers' (tests/deploy/harness.py, start_prebuild); by the end of the
    # run they are built, so no worker waits for them.
    items.sort(key=lambda item: Path(str(item.fspath)).parent.name == "deploy")
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


# The project's images are built beside the run (tests/deploy/harness.py, PREBUILD): the builds
# mostly wait on the network, and a worker waiting for them ran nothing else for ~5 minutes.
# They start once the run knows it has an image test; the run stops their engine as it ends.
_prebuild: list = []


def _start_prebuild(config, ids) -> None:
    if _prebuild or hasattr(config, "workerinput") or config.option.collectonly:
        return
    if not any(i.startswith("tests/deploy/") for i in ids):
        return
    deploy = str(Path(__file__).parent / "deploy")
    if deploy not in sys.path:
        sys.path.insert(0, deploy)
    import harness

    if harness.have_dockerd():  # else the engine fixture fails, naming the set-up step
        base = config._tmp_path_factory.getbasetemp()
        _prebuild.append((harness, harness.start_prebuild(base), base / harness.PREBUILD))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    _start_prebuild(node.config, ids)


def pytest_collection_finish(session):
    _start_prebuild(session.config, [item.nodeid for item in session.items])


# tryfirst: before pytest removes the run's temporary directory, which holds the engine's root
@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    while _prebuild:
        harness, proc, folder = _prebuild.pop()
        harness.stop_prebuild(proc, folder)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One small, fast local Spark for the whole run (UI off, 2 shuffle partitions)."""
    from tidemark.jvmarchive import driver_options
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
            # long-lived: C2 as in production, without the jobs' TIDEMARK_JVM_OPTIONS; the
            # serial collector as theirs; the class archive set-up trained, as a job's driver
            # gets it (tidemark.sparkenv.jvm_conf)
            "spark.driver.extraJavaOptions": f"{JVM_OPTIONS} {SERIAL_GC} {driver_options()}".strip(),
            "spark.executor.extraJavaOptions": f"{JVM_OPTIONS} {SERIAL_GC}",
        },
    )
    yield session
    session.stop()


@pytest.fixture
def workdir(tmp_path):
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    from brokers import KafkaBroker

    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.first_start()
    yield broker
    broker.stop()
