"""The data-quality runner: Great Expectations 1.x suites over a pipeline's tables, the results
store and the Data Docs.

**What.** Five expectation suites, kept as data in ``expectations/tidemark_*.json`` (GX's own suite
format, loaded here by :func:`load_suites`; nothing is inlined in code), each validated against one
frame built from the pipeline's Delta tables (the frames: :mod:`tidemark.quality_frames`):

=============== ===================================================================================
raw_events      the ``events`` table: schema, required fields not null, event time within bounds,
                ``event_id`` unique (exactly_once only)
raw_batches     one row per micro-batch (``watermarks``): quarantine rate below a threshold
windows         window rows: (window_start, key, revision) unique, at most one final revision
                per (window, key), revisions accumulate, counts non-negative, every window
                ended at or before the watermark recorded at its commit (on its row and in its
                batch's ``watermarks`` row), length and grid
reconciliation  closed windows of ``reconciliation``: final alignment (latest revision) >=
                ``reconcile.target``, on-time alignment reported, unexplained difference 0, a
                final gap only from records beyond the allowed lateness, late-event share below
                a threshold
watermarks      per batch: never decreasing, never below the watermark the batch started from,
                event-time lag behind the median host below a bound except during recorded stalls
=============== ===================================================================================

Raw events are two suites because GX validates one batch of rows per suite: the records
themselves, and the per-batch counts the quarantine rate needs.

**Thresholds** are suite parameters (``$PARAMETER``). Each suite's ``meta.tidemark.parameters``
says where a value comes from: the pipeline config (``{"config": "reconcile.target"}``) or a default
in the suite (``{"default": 0.01}``); ``thresholds={...}`` overrides either per call.

**Engines.** The small tables are read with delta-rs into pandas: no JVM, so an Airflow task can
call :func:`validate_pipeline` directly. The large ``events`` table is validated with GX's Spark
engine given a Spark session, else read into pandas up to ``max_local_events`` rows (see
:mod:`tidemark.quality_frames`).

**Where GX keeps its state.** The suites' source of truth is ``expectations/`` in the repository
(read-only at run time). Each run copies them into a GX *file* context owned by the pipeline,
``<warehouse>/<pipeline>/_quality/gx`` by default (``quality_dir=`` to move it; :func:`quality_root`),
which holds the data sources, validation definitions, every validation result (history) and the
Data Docs site (:func:`data_docs_index`) rebuilt after each validation, with the offline history
page (:mod:`tidemark.quality_site`). Keeping it beside the tables means two pipelines never
write the same GX files and a code checkout is never modified by a run; run one validation of a
pipeline at a time (the reconciliation DAG's ``max_active_runs=1``).

**Modules.** :mod:`~tidemark.quality.suites` (the suites and their parameters),
:mod:`~tidemark.quality.outcome` (the plain outcome types), :mod:`~tidemark.quality.validate`
(:func:`validate_pipeline`), :mod:`~tidemark.quality.docs` (Data Docs) and
:mod:`~tidemark.quality.gx`, the only module that imports Great Expectations. The frames the
suites validate (:mod:`tidemark.quality_frames`) and where the site lives
(:mod:`tidemark.quality_site`) stay outside the package: the charts, the report and the Airflow
view read them without the runner (inside it they would sit a floor above the charts that use
them). The names below are the package's public interface.

Importing this package is cheap: Great Expectations (~4 s) is imported inside the functions.
"""

from tidemark.quality.docs import INERT_MARK, build_data_docs, fix_static_links, make_results_inert
from tidemark.quality.gx import SAMPLE_ROWS
from tidemark.quality.outcome import ExpectationOutcome, SuiteOutcome, ValidationOutcome
from tidemark.quality.suites import (
    SUITE_FILE_PREFIX,
    SUITE_NAMES,
    SuiteSpec,
    load_suites,
    suite_parameters,
)
from tidemark.quality.validate import validate_pipeline

__all__ = [
    "INERT_MARK",
    "SAMPLE_ROWS",
    "SUITE_FILE_PREFIX",
    "SUITE_NAMES",
    "ExpectationOutcome",
    "SuiteOutcome",
    "SuiteSpec",
    "ValidationOutcome",
    "build_data_docs",
    "fix_static_links",
    "load_suites",
    "make_results_inert",
    "suite_parameters",
    "validate_pipeline",
]
