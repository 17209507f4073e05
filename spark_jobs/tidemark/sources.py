"""Where a pipeline's rows come from: the landing files, a Kafka topic or another pipeline's
``events`` table, read as lines and parsed into the record contract (:mod:`tidemark.records`).

The stream (:mod:`tidemark.stream`) and the batch recompute (:mod:`tidemark.reconcile`) both read
through :func:`parsed_source`, so they see the same rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.checkpoint import ResumePoint
from tidemark.config import ConfigError, PipelineConfig
from tidemark.records import EVENT_FIELDS, parse_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_landing_files(spark, path: str, streaming: bool, max_files_per_trigger: int = 20):
    """Lines of the landing directory as ``(raw, source, arrival_ms)``.

    Files whose names start with ``_`` or ``.`` are skipped (in-flight writes, manifests).
    """
    from pyspark.sql import functions as F

    if streaming:
        reader = spark.readStream.format("text").option("maxFilesPerTrigger", max_files_per_trigger)
    else:
        reader = spark.read.format("text")
    frame = reader.load(path)
    return frame.select(
        F.col("value").alias("raw"),
        F.col("_metadata.file_path").alias("source"),
        F.unix_millis(F.col("_metadata.file_modification_time")).alias("arrival_ms"),
    )


def read_upstream_events(spark, path: str, streaming: bool, watermark_column: str, max_files: int = 20):
    """Another Tidemark pipeline's ``events`` table as parsed rows (:data:`PARSED_COLUMNS`).

    Its rows are already validated; each carries the upstream's global low watermark at commit
    (``watermark_column``), which becomes this pipeline's input low watermark (``upstream_lw``).
    """
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("delta").option("maxFilesPerTrigger", max_files)
        if streaming
        else (spark.read.format("delta"))
    )
    rows = reader.load(path)
    fields = list(EVENT_FIELDS)
    return rows.select(
        F.to_json(F.struct(*fields)).alias("raw"),
        F.lit(path).alias("source"),
        F.unix_millis("ingest_ts").alias("arrival_ms"),
        *fields,
        F.lit(False).alias("heartbeat"),
        F.lit(None).cast("string").alias("reason"),
        F.unix_millis(F.col(watermark_column)).alias("upstream_lw"),
    )


def drop_blank_lines(lines: DataFrame) -> DataFrame:
    """Whitespace-only lines are line separators, not records."""
    from pyspark.sql import functions as F

    raw = F.col("raw")
    # A line that opens with "{" is not blank: one byte compare spares almost every line the
    # trimmed copy.
    return lines.where(raw.startswith("{") | (F.length(F.trim(raw)) > 0))


def source_lines(
    spark: SparkSession, config: PipelineConfig, streaming: bool, resume: ResumePoint | None = None
) -> DataFrame:
    """A line-oriented source as ``(raw, source, arrival_ms)`` lines.

    After a checkpoint reset (``resume``) Kafka starts at the offsets the committed batches
    ended at, and lines of files committed batches already read are dropped (a new checkpoint's
    file source lists every file again)."""
    from pyspark.sql import functions as F

    src = config.source
    if src.kind == "files":
        assert src.path is not None
        lines = read_landing_files(spark, src.path, streaming, src.max_files_per_trigger)
        if resume is not None and resume.files_done:
            done = spark.createDataFrame([(f,) for f in sorted(resume.files_done)], "source string")
            lines = lines.join(F.broadcast(done), "source", "left_anti")
        return lines
    if src.kind == "kafka":
        from tidemark.kafka import read_topic

        assert src.bootstrap_servers is not None and src.topic is not None
        starting: str = src.starting_offsets
        if resume is not None and resume.kafka_offsets is not None:
            starting = resume.kafka_starting_offsets(src.bootstrap_servers, src.topic)
        return read_topic(
            spark,
            src.bootstrap_servers,
            src.topic,
            streaming,
            starting,
            src.max_offsets_per_trigger,
        )
    raise ConfigError(f"source.kind {src.kind} has no line reader")


def parsed_source(
    spark: SparkSession, config: PipelineConfig, streaming: bool, resume: ResumePoint | None = None
) -> DataFrame:
    """The source as validated rows (:data:`tidemark.records.PARSED_COLUMNS`), stream or batch.

    The stream and the batch recompute both start here, so they see the same rows."""
    src = config.source
    if src.kind == "delta":
        assert src.path is not None
        return read_upstream_events(
            spark, src.path, streaming, src.watermark_column, src.max_files_per_trigger
        )
    lines = source_lines(spark, config, streaming, resume)
    return parse_records(drop_blank_lines(lines), config.validation)


def is_event_col():
    """A valid record that is not a heartbeat: the only rows that can be publisher retries."""
    from pyspark.sql import functions as F

    return F.col("reason").isNull() & ~F.coalesce(F.col("heartbeat"), F.lit(False))
