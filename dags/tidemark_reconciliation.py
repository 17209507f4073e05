"""
### Tidemark reconciliation (hourly, per pipeline)

Proves, window by window, that the stream agrees with a batch recompute of the raw data, twice
per hour: **on time**, as soon as every window of the hour is closed, and **final**, once every
window is final (the watermark past its end + `window.allowed_lateness`, no more revisions).

1. **wait_for_close**: waits until every window of the hour is closed by the pipeline's precise
   watermark (`TumblingWindows.is_closed` of the hour's last window, plus the small margin
   `airflow.reconcile_grace`): in the triggerer when Airflow's `[operators] default_deferrable` is
   true, else in reschedule mode (no worker slot held between pokes). A stalled watermark keeps it
   waiting (the watermark monitor alerts about stalls).
2. **reconcile_on_time**: Spark job (the Spark provider, connection `airflow.spark_conn_id`) that
   recomputes the hour's windows from the raw source with the stream's own code, writes the
   per-window comparison to the `reconciliation` table and records the **on-time pass** (on-time
   alignment: what each window held when it closed) in `reconciliation_passes`; publishes the
   Asset `tidemark.<p>.reconciled_on_time` with its figures. Nothing is gated on it.
3. **wait_for_final**: waits until every window of the hour is final
   (`TumblingWindows.is_final`, plus the grace): late records within the allowed lateness have
   been folded in by then.
4. **reconcile_final**: the same recompute again, recording the **final pass** (final alignment:
   the latest revision of each window), the one the target is checked on. Both passes are
   idempotent: a re-run replaces the hour's rows and its pass's row with the same ones.
5. **data_quality**: Spark job running the Great Expectations suites of `expectations/` over the
   hour (raw events, micro-batches, windows, reconciliation, watermark), storing the results and
   rebuilding the Data Docs, and publishing the reconciliation report with both passes (linked
   from the Tidemark view), also when a suite fails. A failing suite (a window below
   `reconcile.target`, an unexplained difference, a duplicated window row, a watermark that moved
   backwards, ...) sends one alert naming the failing expectations with sample rows, and fails.
6. **check_alignment**: the final gate: fails (alerting) when a window is below the target or a
   difference is unexplained, retries while windows are still open; otherwise publishes the
   pipeline's `reconciled` Asset event with the hour's figures and both passes. Only hours that
   passed both the suites and the gate publish it.

**Which hour a run covers.** Each run carries its hour as its data interval (UTC): the run for
`[10:00, 11:00)` is created after 11:00 (its logical date is 10:00), reconciles those 60 windows
once the watermark has passed 11:00 + grace and again once it has passed 11:00 + allowed
lateness + grace. Catchup from `airflow.reconcile_start` and backfills (UI or `airflow backfill
create`) create one run per past hour (both passes run at once there: the windows are long
final); re-running an hour replaces its rows (idempotent). A manual run without params reconciles
the last complete hour before it was triggered; with the `start` and `end` params (ISO-8601),
that range.

Spark tasks run in the pool `airflow.spark_pool`; any failed run alerts once (email, webhook,
Slack).
"""

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, CronDataIntervalTimetable, Param

from tidemark_airflow.context import RECONCILE_CRON
from tidemark_airflow.notifications import RunFailureNotifier
from tidemark_airflow.operators import (
    DataQualitySubmitOperator,
    ReconcileSubmitOperator,
    ReconciliationGateOperator,
)
from tidemark_airflow.pipelines import configured_pipelines, reconciled_asset, reconciled_on_time_asset
from tidemark_airflow.sensors import WatermarkSensor

for pipeline in configured_pipelines():
    cfg = pipeline.config.airflow
    first_hour = cfg.reconcile_start
    with DAG(
        dag_id=f"tidemark_reconciliation__{pipeline.name}",
        description=f"Hourly stream-vs-batch reconciliation of {pipeline.name}",
        schedule=CronDataIntervalTimetable(RECONCILE_CRON, timezone="UTC"),
        start_date=datetime.fromtimestamp(first_hour / 1000, UTC)
        if first_hour
        else datetime(2025, 1, 1, tzinfo=UTC),
        catchup=first_hour is not None,
        # one validation of a pipeline's GX context and one writer of its reconciliation tables at
        # a time; a run waiting for its hour to be final holds the next hour's run back (docs/airflow.md)
        max_active_runs=1,
        default_args={"retries": 2, "retry_delay": timedelta(minutes=2), "owner": "tidemark"},
        params={
            "start": Param(
                None,
                type=["null", "string"],
                format="date-time",  # the trigger form's date-time picker
                title="Range start (ISO-8601, UTC)",
                description="Leave start and end empty to reconcile the last complete hour before "
                "this run (triggered at 11:20: 10:00 to 11:00). Or give both, e.g. 2025-11-22T10:00:00Z.",
            ),
            "end": Param(
                None,
                type=["null", "string"],
                format="date-time",
                title="Range end (ISO-8601, UTC, exclusive)",
                description="e.g. 2025-11-22T11:00:00Z; empty with start empty.",
            ),
        },
        on_failure_callback=RunFailureNotifier(config_path=pipeline.config_path),
        tags=["tidemark", "reconciliation", pipeline.name],
        doc_md=__doc__,
    ) as dag:
        wait_close = WatermarkSensor(
            task_id="wait_for_close",
            config_path=pipeline.config_path,
            reconcile_pass="on_time",
            grace_ms=cfg.reconcile_grace,
            poll_interval=15,
        )
        on_time = ReconcileSubmitOperator(
            task_id="reconcile_on_time",
            config_path=pipeline.config_path,
            reconcile_pass="on_time",
            conn_id=cfg.spark_conn_id,
            pool=cfg.spark_pool,
            execution_timeout=timedelta(hours=1),
            outlets=[reconciled_on_time_asset(pipeline.config)],
        )
        wait_final = WatermarkSensor(
            task_id="wait_for_final",
            config_path=pipeline.config_path,
            reconcile_pass="final",
            grace_ms=cfg.reconcile_grace,
            poll_interval=15,
            # it waits the allowed lateness beyond the hour's close: a day more than that
            timeout=timedelta(days=1, milliseconds=pipeline.config.allowed_lateness).total_seconds(),
        )
        final = ReconcileSubmitOperator(
            task_id="reconcile_final",
            config_path=pipeline.config_path,
            reconcile_pass="final",
            conn_id=cfg.spark_conn_id,
            pool=cfg.spark_pool,
            execution_timeout=timedelta(hours=1),
        )
        quality = DataQualitySubmitOperator(
            task_id="data_quality",
            config_path=pipeline.config_path,
            conn_id=cfg.spark_conn_id,
            pool=cfg.spark_pool,
            execution_timeout=timedelta(hours=1),
        )
        gate = ReconciliationGateOperator(
            task_id="check_alignment",
            config_path=pipeline.config_path,
            outlets=[reconciled_asset(pipeline.config)],
        )
        wait_close >> on_time >> wait_final >> final >> quality >> gate
