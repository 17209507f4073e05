"""One validation of a pipeline: the five suites over ``[start, end)`` of event time.

:func:`validate_pipeline` resolves the suites and their thresholds (:mod:`tidemark.quality.suites`),
builds the frame each suite validates (the events with Spark or pandas, the small tables with
delta-rs: :mod:`tidemark.quality_frames`), runs them in the pipeline's GX context
(:mod:`tidemark.quality.gx`), rebuilds the Data Docs (:mod:`tidemark.quality.docs`) and returns a
plain :class:`~tidemark.quality.outcome.ValidationOutcome`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tidemark.config import PipelineConfig
from tidemark.quality.docs import rebuild_docs
from tidemark.quality.gx import SuiteBatch, gx_context, gx_run_id, validate_suite
from tidemark.quality.outcome import ValidationOutcome, plain_value
from tidemark.quality.suites import load_suites, suite_parameters
from tidemark.quality_frames import (
    DEFAULT_MAX_LOCAL_EVENTS,
    events_frame_local,
    events_frame_spark,
    table_frames,
)
from tidemark.quality_site import quality_root
from tidemark.timeutil import check_range, now_ms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def validate_pipeline(
    config: PipelineConfig,
    start_ms: int | None = None,
    end_ms: int | None = None,
    spark: SparkSession | None = None,
    *,
    thresholds: Mapping[str, Any] | None = None,
    quality_dir: str | os.PathLike[str] | None = None,
    build_docs: bool = True,
    max_local_events: int = DEFAULT_MAX_LOCAL_EVENTS,
) -> ValidationOutcome:
    """Run the five suites over ``[start, end)`` of event time (all of it when not given).

    ``spark``: validate ``events`` with Spark (else delta-rs + pandas, at most ``max_local_events``
    rows). ``thresholds``: override suite parameters, e.g. ``{"max_late_share": 0.02}``.
    ``quality_dir``: the GX context root (default ``<warehouse>/<pipeline>/_quality``). Stores every
    result there and, with ``build_docs``, rebuilds the Data Docs (``outcome.docs_index``). Raises
    :class:`~tidemark.config.ConfigError` (one line) for bad input; a failing suite is not an error:
    check ``outcome.success`` / ``outcome.failing``.
    """
    check_range(start_ms, end_ms)
    specs = load_suites()
    params = suite_parameters(config, specs, thresholds)
    batches = _suite_batches(config, start_ms, end_ms, spark, params, max_local_events)
    events = batches["raw_events"]
    context = gx_context(quality_root(config, quality_dir))  # imports Great Expectations
    validated_at = now_ms()
    run_id = gx_run_id(config.pipeline, start_ms, end_ms, validated_at)
    try:
        outcomes = [
            validate_suite(context, spec, batches[spec.name], config.mode, params, run_id) for spec in specs
        ]
    finally:
        if events.engine == "spark":
            events.frame.unpersist()
    docs = history = None
    if build_docs:
        index, history_page = rebuild_docs(context, config, quality_dir)
        docs, history = str(index), str(history_page)
    return ValidationOutcome(
        pipeline=config.pipeline,
        start_ms=start_ms,
        end_ms=end_ms,
        events_engine=events.engine,
        suites=outcomes,
        parameters={k: plain_value(v) for k, v in params.items()},
        docs_index=docs,
        docs_history=history,
        validated_at_ms=validated_at,
    )


def _suite_batches(
    config: PipelineConfig,
    start_ms: int | None,
    end_ms: int | None,
    spark: SparkSession | None,
    params: Mapping[str, Any],
    max_local_events: int,
) -> dict[str, SuiteBatch]:
    """What each suite validates, by suite name: the events (:func:`_events_batch`), then the
    small tables' frames (:func:`tidemark.quality_frames.table_frames`)."""
    events = _events_batch(config, start_ms, end_ms, spark, max_local_events)
    min_batch_lines = int(params.get("min_batch_lines", 1))
    frames = table_frames(config, start_ms, end_ms, min_batch_lines)
    return {"raw_events": events, **{name: SuiteBatch("pandas", f, len(f)) for name, f in frames.items()}}


def _events_batch(
    config: PipelineConfig,
    start_ms: int | None,
    end_ms: int | None,
    spark: SparkSession | None,
    max_local_events: int,
) -> SuiteBatch:
    """The raw_events batch: a cached, counted Spark frame given a session and an events table
    (unpersist it after validating), else pandas read with delta-rs."""
    spark_events = events_frame_spark(spark, config, start_ms, end_ms) if spark is not None else None
    if spark_events is not None:
        spark_events = spark_events.cache()
        return SuiteBatch("spark", spark_events, spark_events.count())
    local = events_frame_local(config, start_ms, end_ms, max_local_events)
    return SuiteBatch("pandas", local, len(local))
