"""
### Tidemark reconciliation (hourly, per pipeline)

Proves, window by window, that the stream agrees with a batch recompute of the raw data.

1. **wait_for_watermark**: waits until the pipeline's precise watermark has passed the hour's
   end plus `airflow.reconcile_grace`, so every window of the hour is closed: in the triggerer
   when Airflow's `[operators] default_deferrable` is true, else in reschedule mode (no worker
   slot held between pokes). A stalled watermark keeps it waiting (the watermark monitor alerts about stalls).
2. **recompute_and_diff**: Spark job (the Spark provider, connection `airflow.spark_conn_id`)
   that recomputes the hour's windows from the raw source with the stream's own code and writes
   the per-window comparison to the `reconciliation` table (idempotent: re-runs replace the hour).
3. **data_quality**: Spark job running the Great Expectations suites of `expectations/` over the
   hour (raw events, micro-batches, windows, reconciliation, watermark), storing the results and
   rebuilding the Data Docs, and publishing the reconciliation report (linked from the Tidemark
   view), also when a suite fails. A failing suite (a window below `reconcile.target`, an
   unexplained difference, a duplicated window row, a watermark that moved backwards, ...) sends
   one alert (email + webhook) naming the failing expectations with sample rows, and fails.
4. **check_alignment**: the final gate: fails (alerting) when a window is below the target or a
   difference is unexplained, retries while windows are still open; otherwise publishes the
   pipeline's `reconciled` Asset event with the hour's figures. Only hours that passed both the
   suites and the gate publish it.

**Which hour a run covers.** Each run carries its hour as its data interval (UTC): the run for
`[10:00, 11:00)` is created after 11:00 (its logical date is 10:00) and reconciles exactly those
60 windows once the watermark has passed 11:00 + grace. Catchup from `airflow.reconcile_start`
and backfills (UI or `airflow backfill create`) create one run per past hour; re-running an hour
replaces its rows (idempotent). A manual run without params reconciles the last complete hour
before it was triggered; with the `start` and `end` params (ISO-8601), that range.

Spark tasks run in the pool `airflow.spark_pool`; any failed run alerts once (email + webhook).
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
from tidemark_airflow.pipelines import configured_pipelines, reconciled_asset
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
        max_active_runs=1,  # one validation of a pipeline's GX context at a time
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
        wait = WatermarkSensor(
            task_id="wait_for_watermark",
            config_path=pipeline.config_path,
            grace_ms=cfg.reconcile_grace,
            poll_interval=15,
        )
        recompute = ReconcileSubmitOperator(
            task_id="recompute_and_diff",
            config_path=pipeline.config_path,
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
            outlets=[reconciled_asset(pipeline.name)],
        )
        wait >> recompute >> quality >> gate
