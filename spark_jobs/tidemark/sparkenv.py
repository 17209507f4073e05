"""Build the SparkSession every Tidemark job uses.

Jars come from the local cache that ``scripts/setup.sh`` fills once from Maven Central
(``TIDEMARK_JARS_DIR``, default ``<venv>/share/tidemark/jars``: :mod:`tidemark.resources`), so a
job never touches the network.
Heavy imports stay inside functions: importing this module does not start a JVM.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.resources import SetupError, find_jars, jars_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.config import PipelineConfig

# tidemark-udf: the record parser's JVM fast path, compiled by set-up (spark_jobs/jvm).
REQUIRED_JAR_PREFIXES = ("delta-spark_", "delta-storage-", "tidemark-udf")
KAFKA_JAR_PREFIXES = (
    "spark-sql-kafka-0-10_",
    "spark-token-provider-kafka-0-10_",
    "kafka-clients-",
    "commons-pool2-",
)


def cached_jars(
    prefixes: tuple[str, ...] = REQUIRED_JAR_PREFIXES + KAFKA_JAR_PREFIXES,
) -> list[Path]:
    """The cached jars for ``prefixes``; a one-line SetupError names any that are missing."""
    folder = jars_dir()
    jars, missing = find_jars(folder, prefixes)
    if missing:
        raise SetupError(
            f"jar cache {folder} lacks {', '.join(p.rstrip('_-') for p in missing)}: "
            "run `make setup` (scripts/setup.sh) once with network access, or set TIDEMARK_JARS_DIR to a "
            "jar cache it made"
        )
    return jars


# HotSpot does not JIT-compile a method over 8,000 bytes of bytecode; a whole-stage-codegen stage
# with the record validator's rules is larger, and ran interpreted: parsing 1M lines with the JVM
# fast path took 2.5 s with the default, 1.1-1.4 s with huge methods compiled (best/median of 6).
JVM_OPTIONS = "-XX:-DontCompileHugeMethods"
# More options for every Tidemark JVM, e.g. "-XX:TieredStopAtLevel=1" for short jobs (the test
# suite sets that: C1 only starts a short job ~25% faster; a long stream wants C2's code).
JVM_OPTIONS_ENV = "TIDEMARK_JVM_OPTIONS"


# Written without Parquet dictionary encoding (see default_conf).
PLAIN_ENCODED_COLUMNS = ("event_id", "event_time", "msg_time", "value")


def jvm_options() -> str:
    """:data:`JVM_OPTIONS` and any in ``$TIDEMARK_JVM_OPTIONS``."""
    extra = os.environ.get(JVM_OPTIONS_ENV, "").strip()
    return f"{JVM_OPTIONS} {extra}" if extra else JVM_OPTIONS


def jvm_conf() -> dict[str, str]:
    """The driver's and executors' JVM options; spark-submit must pass the driver's itself. The
    driver's add its class-data-sharing archive when set-up made one for this JVM
    (:mod:`tidemark.jvmarchive`)."""
    from tidemark.jvmarchive import driver_options

    options = jvm_options()
    driver = f"{options} {driver_options()}".strip()
    return {"spark.driver.extraJavaOptions": driver, "spark.executor.extraJavaOptions": options}


DRIVER_CLASS_PATH = "spark.driver.extraClassPath"


def is_local(master: str) -> bool:
    """A master whose executors run inside the driver's JVM: ``local``, ``local[N]``, ``local[*]``
    (not ``local-cluster[...]``, which starts executor JVMs of its own)."""
    return master == "local" or master.startswith("local[")


def driver_class_path(jars: Sequence[str | os.PathLike[str]]) -> dict[str, str]:
    """``jars`` on the driver's class path: every launcher's driver runs here (client deploy mode)
    and gets them this way, which its class-data-sharing archive expects (:func:`jar_conf`)."""
    return {DRIVER_CLASS_PATH: os.pathsep.join(str(j) for j in jars)}


def jar_conf(
    master: str,
    jars: Sequence[str | os.PathLike[str]],
    conf: Mapping[str, str] | None = None,
    jvm_running: bool = False,
) -> dict[str, str]:
    """How ``jars`` reach the JVMs that need them.

    The driver (client deploy mode: always this machine) has them on its class path, in front of
    any ``spark.driver.extraClassPath`` in ``conf``, so its class-data-sharing archive
    (:mod:`tidemark.jvmarchive`) covers Delta's classes too. Executors on a cluster get them
    shipped (``spark.jars``). A local master's executors live in the driver's JVM and need nothing
    more: ``spark.jars`` there would copy every jar into a fresh temporary directory per job (19
    MB, 660 MB with the S3 jars), which a killed driver never deletes. In a process whose JVM is
    already up (``jvm_running``: a second session), a class path can no longer change and
    ``spark.jars`` adds them whatever the master.
    """
    out = driver_class_path(jars)
    if given := (conf or {}).get(DRIVER_CLASS_PATH):
        out[DRIVER_CLASS_PATH] += f"{os.pathsep}{given}"
    if jvm_running or not is_local(master):
        out["spark.jars"] = ",".join(str(j) for j in jars)
    return out


def default_conf(master: str = "local[2]", shuffle_partitions: int = 4) -> dict[str, str]:
    """Settings sized for one small machine; every key can be overridden from the config."""
    return {
        **jvm_conf(),
        "spark.master": master,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # PySpark's DataFrame debugging records the Python call site of every Column call in the
        # JVM: ~6 py4j round trips and a Python stack walk per call, on every job's start (the
        # record parser: ~3,700 round trips -> ~1,200, 1.05 s -> 0.70 s) and in every batch. A
        # job's DataFrames are Tidemark's own, so the call site names Tidemark's code, never the
        # user's (a 200-host demo, 3 paired runs: wall 0.86-0.94x, CPU-s 0.87-0.99x; the test
        # suite, one run each: within its run-to-run noise).
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        "spark.driver.memory": "3g",
        "spark.sql.adaptive.enabled": "true",
        # Input splits of at most 32 MB (Spark's default: 128 MB): a batch read of a few large
        # files runs in enough tasks to keep every core busy to the end (figures: the settings
        # table of docs/benchmarks.md). The stream's micro-batches are split finer already.
        "spark.sql.files.maxPartitionBytes": "32m",
        # Tidemark's own plan keeps no Spark state (its dedup catalog is the events table). A
        # stateful query in a Tidemark session (the benchmarks' plain Spark job) gets RocksDB,
        # off the JVM heap; changelog checkpointing makes a commit write only what changed.
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Counting the store's rows costs a RocksDB read per write; a state operator's
        # numRowsTotal metric is then not reported.
        "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        # Each micro-batch is cached once and read by a few small jobs: compressing the cache
        # costs more than it saves.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # Columns unique (or nearly) per row, in events and late_events: Parquet's dictionary
        # encoder hashes every value until the dictionary outgrows its page and falls back to
        # plain anyway. Delta ignores per-write Parquet options, so this is the session's
        # setting, by column name: any table the session writes with such a column gets it.
        **{f"spark.hadoop.parquet.enable.dictionary#{c}": "false" for c in PLAIN_ENCODED_COLUMNS},
        # Delta's VACUUM retention check stays on (its default): `tidemark maintain` vacuums within
        # it (tidemark.maintenance).
        # Timestamps as INT64 microseconds, not Spark's legacy INT96: Parquet keeps no statistics
        # for INT96, and tidemark.filecommit reads a file's statistics from its footer.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.databricks.delta.stateReconstructionValidation.enabled": "false",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    }


def build_session(
    app_name: str = "tidemark",
    master: str | None = None,
    shuffle_partitions: int = 4,
    extra_conf: dict[str, Any] | None = None,
    jars: Sequence[str | os.PathLike[str]] | None = None,
) -> SparkSession:
    """Create (or reuse) the SparkSession with Delta and the Kafka connector on the classpath.

    ``master`` defaults to ``$TIDEMARK_SPARK_MASTER`` or ``local[2]``. When the job is launched by
    spark-submit, the master, jars and ``--py-files`` given there win (the builder only fills what
    is unset). On a cluster master the executors get this code as a zip
    (:func:`tidemark.archive.code_archive`) unless spark-submit already shipped one, never
    whatever is importable on the workers. ``jars`` (default: the cached ones) reach the JVMs as
    :func:`jar_conf` says, unless ``extra_conf`` gives ``spark.jars`` itself.
    """
    from pyspark.sql import SparkSession

    master = master or os.environ.get("TIDEMARK_SPARK_MASTER", "local[2]")
    conf = default_conf(master, shuffle_partitions)
    conf.update({k: str(v) for k, v in (extra_conf or {}).items()})
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if "spark.jars" not in conf and not _launched_by_spark_submit():
        from pyspark import SparkContext

        running = SparkContext._gateway is not None
        conf.update(jar_conf(conf["spark.master"], cached_jars() if jars is None else jars, conf, running))
    for key, value in conf.items():
        if key == "spark.master" and _launched_by_spark_submit():
            continue
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    context = session.sparkContext
    if ships_code(context.master or "", context.getConf().get("spark.submit.pyFiles") or ""):
        from tidemark.archive import code_archive

        context.addPyFile(str(code_archive()))
    session.sparkContext.setLogLevel(os.environ.get("TIDEMARK_SPARK_LOG_LEVEL", "WARN"))
    return session


def session_for(config: PipelineConfig, app: str) -> SparkSession:
    """The session a ``tidemark`` command runs ``config``'s pipeline in (its ``spark:`` block; for
    ``s3a://`` locations the S3 settings and jars of :mod:`tidemark.storage`; with
    ``lineage.spark_listener``, OpenLineage's listener: :mod:`tidemark.lineage`)."""
    from tidemark import lineage, storage

    conf: dict[str, Any] = {**storage.spark_conf(config), **config.spark.conf, **lineage.spark_conf(config)}
    return build_session(
        app_name=f"tidemark-{app}-{config.pipeline}",
        master=config.spark.master,
        shuffle_partitions=config.spark.shuffle_partitions,
        extra_conf=conf,
        jars=[*cached_jars(), *storage.spark_jars(config), *lineage.spark_jars(config)],
    )


def runtime_line(spark: SparkSession) -> str:
    """``Spark 4.1.3 on Java 21.0.8 (local[2])``: what the job really runs on, for its first line."""
    java = spark.sql("SELECT reflect('java.lang.System', 'getProperty', 'java.version')").collect()[0][0]
    return f"Spark {spark.version} on Java {java} ({spark.sparkContext.master})"


def ships_code(master: str, py_files: str = "") -> bool:
    """True when the session must ship the code archive itself: a cluster master, and no Tidemark
    archive among the files spark-submit already shipped (``--py-files``, ``spark.submit.pyFiles``).

    Whoever launched the job (spark-submit by hand, Airflow's Spark provider, plain ``python``),
    the executors then run the driver's code, never a copy that happens to be on the workers.
    """
    if master.startswith("local"):
        return False
    shipped = (Path(f).name for f in py_files.split(",") if f)
    return not any(name.startswith("tidemark-") and name.endswith((".zip", ".whl")) for name in shipped)


def _launched_by_spark_submit() -> bool:
    # spark-submit starts the JVM first and hands Python its gateway port.
    return "PYSPARK_GATEWAY_PORT" in os.environ
