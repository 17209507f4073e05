"""Where a pipeline's rows come from: the landing files, a Kafka topic or another pipeline's
``events`` table, read as lines and parsed into the record contract (:mod:`tidemark.records`).

The stream (:mod:`tidemark.stream`) reads through :func:`parsed_source`, the batch recompute
(:mod:`tidemark.reconcile`) through :func:`parsed_range`, the same reader and parser restricted
to the input that can hold an event-time range (:mod:`tidemark.pruning`), so they see the same
rows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tidemark import pruning
from tidemark.checkpoint import ResumePoint
from tidemark.config import ConfigError, PipelineConfig, ValidationConfig
from tidemark.errors import TidemarkError
from tidemark.records import EVENT_FIELDS, parse_records
from tidemark.timeutil import format_instant_ms

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from tidemark.kafka_access import KafkaAccess


# Hadoop options of the landing files' stream: local directories are listed in name order
# (spark_jobs/jvm/tidemark/fs, in tidemark-udf.jar). Spark's file source orders new files by
# modification time alone, keeping the listing's order for equal times, and a local directory
# lists in storage order; with these, files that land within one clock tick (whole seconds on S3
# and on many copies) are read in name order, as object stores list them. Only this reader's
# Hadoop configuration gets them (the file system cache is off for it, or the cached plain local
# file system would answer): the rest of the session, Delta's log included, is untouched.
NAME_ORDERED_LISTING = {
    "fs.file.impl": "tidemark.fs.NameOrderedLocalFileSystem",
    "fs.file.impl.disable.cache": "true",
}


def read_landing_files(spark, path: str, streaming: bool, max_files_per_trigger: int = 20):
    """Lines of the landing directory as ``(raw, source, arrival_ms)``.

    Files whose names start with ``_`` or ``.`` are skipped (in-flight writes, manifests). A
    filter on ``source`` or ``arrival_ms`` of a batch read prunes files before any is opened
    (Spark evaluates it on each file's metadata).
    """
    from pyspark.sql import functions as F

    if streaming:
        reader = (
            spark.readStream.format("text")
            .option("maxFilesPerTrigger", max_files_per_trigger)
            .options(**NAME_ORDERED_LISTING)
        )
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
    spark: SparkSession,
    config: PipelineConfig,
    streaming: bool,
    resume: ResumePoint | None = None,
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
        from tidemark.kafka import check_access, read_topic
        from tidemark.kafka_access import kafka_access

        assert src.bootstrap_servers is not None and src.topic is not None
        # the password is read now; a secured cluster that refuses it fails here, in one line
        access = kafka_access(config)
        if access.secured:
            check_access(access)
        starting: str = src.starting_offsets
        if resume is not None and resume.kafka_offsets is not None:
            starting = _kafka_resume_offsets(access, src.topic, resume)
        return read_topic(
            spark,
            access,
            src.topic,
            streaming,
            starting,
            src.max_offsets_per_trigger,
        )
    raise ConfigError(f"source.kind {src.kind} has no line reader")


def _kafka_resume_offsets(access: KafkaAccess, topic: str, resume: ResumePoint) -> str:
    """``startingOffsets`` JSON after a checkpoint reset: the recorded end of every partition;
    earliest for one no committed batch has seen (Spark wants every partition named). As
    :meth:`ResumePoint.kafka_starting_offsets`, through the pipeline's Kafka access."""
    import json

    from confluent_kafka.admin import AdminClient

    from tidemark.checkpoint import EARLIEST
    from tidemark.identity import IdentityError

    recorded = (resume.kafka_offsets or {}).get(topic, {})
    meta = AdminClient(access.client_conf()).list_topics(topic, timeout=30)
    partitions = sorted(meta.topics[topic].partitions) if topic in meta.topics else []
    if not partitions:
        raise IdentityError(f"reset: Kafka topic {topic} at {access.bootstrap} has no partitions")
    return json.dumps({topic: {str(p): int(recorded.get(str(p), EARLIEST)) for p in partitions}})


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
    return parse_lines(source_lines(spark, config, streaming, resume), config.validation)


def parse_lines(lines: DataFrame, rules: ValidationConfig) -> DataFrame:
    """``(raw, source, arrival_ms)`` lines as validated rows: blank lines dropped, the rest parsed."""
    return parse_records(drop_blank_lines(lines), rules)


class SourceRangeError(TidemarkError, RuntimeError):
    """The source no longer holds everything a range's recompute needs."""


@dataclass(frozen=True)
class RangeInput:
    """A batch read of the source restricted to what can hold records of ``[start, end)``."""

    rows: DataFrame  # validated rows (:data:`tidemark.records.PARSED_COLUMNS`)
    note: str  # what was read, for people
    files: pruning.FileSelection | None = None  # landing files read and skipped (local directories)
    offsets: pruning.OffsetSelection | None = None  # Kafka offsets read and skipped

    def describe(self) -> str:
        if self.files is not None:
            return self.files.describe()
        return self.offsets.describe() if self.offsets is not None else self.note


def parsed_range(
    spark: SparkSession,
    config: PipelineConfig,
    start_ms: int,
    end_ms: int,
    prune: bool = True,
    update_index: bool = True,
) -> RangeInput:
    """The source as validated rows (batch), pruned to what can hold a record with event time in
    ``[start, end)`` by the rules of :mod:`tidemark.pruning`; every row that can count in the
    range is there. Rows outside the range remain: the caller selects.

    ``prune=False`` reads everything. Files the landing index does not describe yet are indexed
    first (a Spark job); ``update_index=False`` keeps those entries in memory only."""
    from pyspark.sql import functions as F

    src = config.source
    if not prune:
        return RangeInput(parsed_source(spark, config, streaming=False), "the whole source")
    if src.kind == "delta":
        rows = parsed_source(spark, config, streaming=False)
        # Upstream rows are parsed already: this filter goes to the Delta scan's file skipping.
        in_range = (F.col("event_time") >= start_ms) & (F.col("event_time") < end_ms)
        return RangeInput(rows.where(in_range), "upstream events of the range (by event time)")
    earliest = pruning.earliest_arrival_ms(start_ms, config.validation.max_clock_skew)
    since = format_instant_ms(earliest)
    if src.kind == "kafka":
        return _kafka_range(spark, config, start_ms, end_ms, update_index)
    assert src.path is not None
    lines = read_landing_files(spark, src.path, streaming=False)
    files = _select_landing_files(config, lines, start_ms, end_ms, update_index)
    # Rule 1 applied by Spark to each file's modification time, the very arrival the skew rule
    # compares with (on any file system); rule 2 names the files the landing index rules out.
    kept = lines.where(F.col("arrival_ms") >= earliest)
    if files is not None and files.outside_span:
        kept = kept.where(_source_in(files.outside_span, negate=True))
    note = f"landing files modified at or after {since}"
    return RangeInput(parse_lines(kept, config.validation), note, files=files)


def _source_in(files: Collection[str], negate: bool = False) -> Column:
    """``source [NOT] IN (files)``, written as SQL: one call to the JVM, where a Column built from
    Python literals costs one per file (0.4 s for 1,400 files). Spark evaluates it on each file's
    metadata, before opening any."""
    from pyspark.sql import functions as F

    def quoted(value: str) -> str:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

    listed = ", ".join(quoted(f) for f in sorted(files))
    return F.expr(f"source {'NOT ' if negate else ''}IN ({listed})")


def _select_landing_files(
    config: PipelineConfig,
    lines: DataFrame,
    start_ms: int,
    end_ms: int,
    update_index: bool,
) -> pruning.FileSelection | None:
    """The landing files to read for the range, indexing those the landing index does not
    describe yet with ``lines`` (a batch read of the directory); None when the directory is not
    local (rule 1 alone applies)."""
    assert config.source.path is not None
    listed = pruning.list_landing(config.source.path)
    if listed is None:
        return None
    files: list[pruning.LandingFile] = listed
    rules = config.validation
    spans = pruning.read_spans(config, [f.path for f in files])

    def select() -> pruning.FileSelection:
        skew, limit = rules.max_clock_skew, rules.max_record_bytes
        return pruning.select_files(files, spans, start_ms, end_ms, skew, limit)

    selection = select()
    if not selection.to_index:
        return selection
    new = index_landing_files(lines, selection.to_index, rules)
    if update_index:
        pruning.append_spans(config, new)
    spans.update((span.path, span) for span in new)
    return replace(select(), indexed=len(new))


def _kafka_range(
    spark: SparkSession, config: PipelineConfig, start_ms: int, end_ms: int, update_index: bool
) -> RangeInput:
    """The offsets of the topic that can hold ``[start, end)`` (:func:`pruning.select_offsets`),
    indexing first the chunks the landing index does not describe yet."""
    from tidemark.kafka import partition_offsets, read_offset_ranges
    from tidemark.kafka_access import kafka_access

    src, rules = config.source, config.validation
    assert src.bootstrap_servers is not None and src.topic is not None
    access, topic, size = kafka_access(config), src.topic, src.index_chunk_offsets
    earliest = pruning.earliest_arrival_ms(start_ms, rules.max_clock_skew)
    topic_id, partitions = partition_offsets(access, topic, earliest, end_ms + rules.max_clock_skew)
    if lost := pruning.past_retention(partitions):
        raise SourceRangeError(
            f"kafka: topic {topic} partition(s) {', '.join(map(str, lost))} no longer hold what was "
            f"published before {format_instant_ms(earliest)} (deleted by the broker's retention): "
            f"the range starting {format_instant_ms(start_ms)} cannot be recomputed in full"
        )

    def name(partition: int, chunk: int) -> str:
        return pruning.chunk_name(topic_id, topic, partition, chunk)

    candidates = [name(p.partition, k) for p in partitions for k in pruning.later_chunks(p, size)]
    spans = pruning.read_spans(config, candidates)

    def select() -> pruning.OffsetSelection:
        return pruning.select_offsets(partitions, spans, name, start_ms, end_ms, size, rules.max_record_bytes)

    selection = select()
    if selection.to_index:
        new = index_chunks(spark, config, selection.to_index, name)
        if update_index:
            pruning.append_spans(config, new)
        spans.update((span.path, span) for span in new)
        selection = replace(select(), indexed=len(new))
    lines = read_offset_ranges(spark, access, topic, selection.ranges)
    return RangeInput(parse_lines(lines, rules), selection.describe(), offsets=selection)


def index_chunks(
    spark: SparkSession,
    config: PipelineConfig,
    chunks: Sequence[tuple[int, int]],
    name: Callable[[int, int], str],
) -> list[pruning.FileSpan]:
    """Landing index entries for Kafka ``chunks`` (partition, chunk): one Spark job reads their
    offsets, parses them as the recompute does and keeps, per chunk, how many records have an
    event time and the smallest and largest (valid or not). A chunk with no parsed record gets no
    entry."""
    from pyspark.sql import functions as F

    from tidemark.kafka import read_offset_ranges
    from tidemark.kafka_access import kafka_access

    src, rules = config.source, config.validation
    assert src.bootstrap_servers is not None and src.topic is not None
    size = src.index_chunk_offsets
    ranges: dict[int, list[tuple[int, int]]] = {}
    for partition, chunk in sorted(chunks):
        pruning.add_range(ranges.setdefault(partition, []), chunk * size, (chunk + 1) * size)
    lines = read_offset_ranges(
        spark, kafka_access(config), src.topic, {p: tuple(r) for p, r in ranges.items()}
    )
    position = (
        F.regexp_extract("source", r"/(\d+)@(\d+)$", 1),
        F.regexp_extract("source", r"/(\d+)@(\d+)$", 2),
    )
    rows = (
        parse_lines(lines, rules)
        .select(
            position[0].cast("int").alias("partition"),
            F.floor(position[1].cast("long") / size).alias("chunk"),
            "event_time",
        )
        .groupBy("partition", "chunk")
        .agg(
            F.count("event_time").alias("lines"),
            F.min("event_time").alias("min_event_ms"),
            F.max("event_time").alias("max_event_ms"),
        )
        .collect()
    )
    wanted = set(chunks)
    return [
        pruning.FileSpan(
            path=name(row["partition"], row["chunk"]),
            size=size,
            modified_ms=0,
            max_record_bytes=rules.max_record_bytes,
            lines=int(row["lines"]),
            min_event_ms=row["min_event_ms"],
            max_event_ms=row["max_event_ms"],
        )
        for row in rows
        if (row["partition"], row["chunk"]) in wanted
    ]


def index_landing_files(
    lines: DataFrame, files: Sequence[pruning.LandingFile], rules: ValidationConfig
) -> list[pruning.FileSpan]:
    """Landing index entries for ``files`` of ``lines`` (a batch read of the directory): one Spark
    job parses them as the recompute does and keeps, per file, how many lines have an event time
    and the smallest and largest (valid records or not). A file with no parsed line (empty or
    blank) gets no entry and is read again next time."""
    from pyspark.sql import functions as F

    by_path = {f.path: f for f in files}
    parsed = parse_lines(lines.where(_source_in(by_path)), rules)
    rows = (
        parsed.groupBy("source")
        .agg(
            F.count("event_time").alias("lines"),
            F.min("event_time").alias("min_event_ms"),
            F.max("event_time").alias("max_event_ms"),
        )
        .collect()
    )
    return [
        pruning.FileSpan(
            path=row["source"],
            size=by_path[row["source"]].size,
            modified_ms=by_path[row["source"]].modified_ms,
            max_record_bytes=rules.max_record_bytes,
            lines=int(row["lines"]),
            min_event_ms=row["min_event_ms"],
            max_event_ms=row["max_event_ms"],
        )
        for row in rows
        if row["source"] in by_path
    ]
