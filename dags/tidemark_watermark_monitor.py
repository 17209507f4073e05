"""
### Tidemark watermark monitor (every minute, per pipeline)

Reads the precise watermark's status from the committed state (no Spark). When the watermark is
**STALLED** because more than `1 - watermark.precision` of the hosts lag, sends **one** alert
(email through `alerts.smtp_conn_id`, JSON to `alerts.webhook_conn_id`) naming the pipeline, the
watermark, how long it has stalled and the lagging hosts (worst first, capped at
`alerts.max_hosts_listed`, with the count). No repeat for the same stall; one recovery notice
when the watermark advances again. A run that fails (the state cannot be read) alerts once.
"""

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from tidemark_airflow.notifications import RunFailureNotifier
from tidemark_airflow.operators import WatermarkMonitorOperator
from tidemark_airflow.pipelines import configured_pipelines

for pipeline in configured_pipelines():
    with DAG(
        dag_id=f"tidemark_watermark_monitor__{pipeline.name}",
        description=f"Alert when the precise watermark of {pipeline.name} stalls",
        schedule=timedelta(minutes=1),
        start_date=datetime(2025, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=timedelta(minutes=5),
        default_args={"retries": 2, "retry_delay": timedelta(seconds=20), "owner": "tidemark"},
        tags=["tidemark", "watermark", "alerts", pipeline.name],
        on_failure_callback=RunFailureNotifier(config_path=pipeline.config_path),
        doc_md=__doc__,
    ) as dag:
        WatermarkMonitorOperator(task_id="check_watermark", config_path=pipeline.config_path)
