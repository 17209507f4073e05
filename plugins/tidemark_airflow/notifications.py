"""The DAG-level failure notifier: every failed run of a Tidemark DAG reaches email and webhook once.

Tasks that fail on purpose (a failing quality suite, a misaligned hour) send their own, more
precise alert and note it against the run in the alert ledger; the DAG's failure callback then
says nothing more. Every other failure (a crashed ``spark-submit``, a sensor that timed out, a
stream that did not start, a run that exceeded ``dagrun_timeout``) is reported here: the DAG, the
run, the hour it covers, the failed task and Airflow's reason. The alert id is the run's
(``failure:<dag_id>:<run_id>``), so the scheduler calling back twice still sends it once.

Used as ``on_failure_callback=RunFailureNotifier(config_path=...)`` on all three DAGs; Airflow
runs DAG callbacks in the DAG processor, which has the connections and Variables it needs.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseNotifier

from tidemark_airflow.pipelines import load_pipeline


class RunFailureNotifier(BaseNotifier):
    """Alert (email + webhook, once) that a run of a Tidemark DAG failed, unless a task did already."""

    template_fields = ()  # the config path is literal

    def __init__(self, *, config_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Nothing to render; and ``dag.test()`` hands DAG callbacks a DAG without a template env."""

    def notify(self, context: Any) -> None:
        from tidemark_airflow.alerts import AlertLedger, failure_alert, run_key, send

        config = load_pipeline(self.config_path).config
        key = run_key(context)
        ledger = AlertLedger(config.pipeline)
        already = ledger.run_alert(key) if key else None
        if already:
            self.log.info("run %s already alerted (%s); no failure notice", key, already)
            return
        send(failure_alert(config, context), config, context, ledger)
