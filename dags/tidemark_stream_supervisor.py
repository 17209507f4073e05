"""
### Tidemark stream supervisor (every 5 minutes, per pipeline)

Keeps the exactly-once streaming job running and making progress.

1. **check_stream** reads the job's heartbeat (written every 5 s beside the checkpoint) and its
   committed progress (batch id, watermark). RUNNING: nothing to do. HUNG (heartbeat or one
   trigger older than `airflow.hang_after`): the job is killed. DEAD or STOPPED: it is started.
   `airflow.max_restarts` restarts within `airflow.restart_window` send one alert.
2. **start_stream** submits the job with the Spark provider (connection `airflow.spark_conn_id`),
   detached: it returns at the job's first heartbeat, so the job never pins a worker slot. The job
   resumes from its checkpoint; exactly-once holds across any restart.

A failed run (the job did not start, a hung job could not be stopped) alerts once.
"""

from datetime import UTC, datetime, timedelta

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from tidemark_airflow.notifications import RunFailureNotifier
from tidemark_airflow.operators import StreamHealthOperator, StreamLauncherOperator
from tidemark_airflow.pipelines import configured_pipelines

for pipeline in configured_pipelines():
    with DAG(
        dag_id=f"tidemark_stream_supervisor__{pipeline.name}",
        description=f"Keep the streaming job of {pipeline.name} alive and progressing",
        schedule=timedelta(minutes=5),
        start_date=datetime(2025, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=timedelta(minutes=10),
        default_args={"retries": 2, "retry_delay": timedelta(seconds=30), "owner": "tidemark"},
        tags=["tidemark", "streaming", pipeline.name],
        on_failure_callback=RunFailureNotifier(config_path=pipeline.config_path),
        doc_md=__doc__,
    ) as dag:
        check = StreamHealthOperator(
            task_id="check_stream",
            config_path=pipeline.config_path,
            healthy_task_id="stream_healthy",
            start_task_id="start_stream",
        )
        healthy = EmptyOperator(task_id="stream_healthy")
        start = StreamLauncherOperator(
            task_id="start_stream",
            config_path=pipeline.config_path,
            conn_id=pipeline.config.airflow.spark_conn_id,
            pool=pipeline.config.airflow.spark_pool,
        )
        check >> [healthy, start]
