"""
### Tidemark table maintenance (daily by default, per pipeline)

Keeps the pipeline's Delta tables fast to read and their storage bounded while the stream runs.
The stream commits every micro-batch: a small file and a log entry per table per batch, and the
`_state` tables a removed file per batch.

**maintain**: Spark job (the Spark provider, connection `airflow.spark_conn_id`, pool
`airflow.spark_pool`) running `tidemark maintain`: `OPTIMIZE` of the small append-only tables,
`OPTIMIZE events ZORDER BY (event_time)` (`maintenance.zorder_events`), `VACUUM` of every table
keeping `maintenance.vacuum_retention` (7 days by default; Delta's retention check on), a Delta
checkpoint and log cleanup (`maintenance.log_retention`, by default `vacuum_retention`). The
`_state` tables are never compacted, and are left as they are while a batch has written them
without committing: a restart reads the state the newest commit marker records. Its log has one
line per table: files, bytes, versions and log files before and after, time taken.

A pipeline whose warehouse is on object storage (or with `maintenance.in_stream: true`) gets no
maintenance DAG: its stream maintains its tables itself between two batches on the same schedule,
since Delta on S3 allows one writer per table.

Schedule: `maintenance.schedule` (cron, UTC; default 03:30 daily), first at the next scheduled
time after deployment. One run at a time; a failed run alerts once (email + webhook) and the next
run redoes it (every step is idempotent).
"""

from datetime import timedelta

from airflow.sdk import DAG, CronTriggerTimetable

from tidemark_airflow.notifications import RunFailureNotifier
from tidemark_airflow.operators import MaintenanceSubmitOperator
from tidemark_airflow.pipelines import configured_pipelines

for pipeline in configured_pipelines():
    if pipeline.config.maintained_in_stream:
        continue  # its stream maintains its tables between batches (object storage)
    cfg = pipeline.config.airflow
    with DAG(
        dag_id=f"tidemark_maintenance__{pipeline.name}",
        description=f"Compaction, VACUUM and log cleanup of {pipeline.name}'s Delta tables",
        # no start_date: the first run is the next scheduled time, not one at deployment (the
        # default run_immediately=False still runs a scheduled time passed less than a tenth of
        # the period ago; a zero timedelta never does)
        schedule=CronTriggerTimetable(
            pipeline.config.maintenance.schedule, timezone="UTC", run_immediately=timedelta(0)
        ),
        catchup=False,
        max_active_runs=1,
        default_args={"retries": 2, "retry_delay": timedelta(minutes=5), "owner": "tidemark"},
        tags=["tidemark", "maintenance", pipeline.name],
        on_failure_callback=RunFailureNotifier(config_path=pipeline.config_path),
        doc_md=__doc__,
    ) as dag:
        MaintenanceSubmitOperator(
            task_id="maintain",
            config_path=pipeline.config_path,
            conn_id=cfg.spark_conn_id,
            pool=cfg.spark_pool,
            execution_timeout=timedelta(hours=3),
        )
