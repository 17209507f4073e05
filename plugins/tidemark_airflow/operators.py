"""Operators that run Tidemark from Airflow.

Heavy imports (the Tidemark job code, delta-rs, the SMTP provider) happen inside ``execute``, so
parsing a DAG never starts a JVM or touches the warehouse. Every operator takes the pipeline's
config path: the config is re-read when the task runs.

* ``TidemarkSparkSubmitOperator``: the Spark provider's ``SparkSubmitOperator`` for a Tidemark
  entrypoint (jars from the local cache, the Python that runs Airflow for the driver).
* ``ReconcileSubmitOperator``: the batch recompute-and-diff of the run's interval.
* ``DataQualitySubmitOperator``: the Great Expectations suites of the interval, Data Docs, report.
* ``MaintenanceSubmitOperator``: compaction, VACUUM and log cleanup of the pipeline's tables.
* ``StreamLauncherOperator``: starts the streaming job through the same provider hook, detached,
  so the job does not pin a worker slot; returns once the job's first heartbeat is written.
  Process control (start detached, wait, find by pid, stop) belongs to ``tidemark_airflow.hooks``.
* ``StreamHealthOperator``: branch: healthy, or (re)start (kills a hung job first).
* ``WatermarkMonitorOperator``: one stall alert per stall, one recovery notice when it ends.
* ``ReconciliationGateOperator``: alerts on windows below target; the hour's Asset event.

Operators hold their arguments and call the hook, the core (``tidemark``) and the alert builders
(``tidemark_airflow.alerts``); they build no command and no alert themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseBranchOperator, BaseOperator, Context

from tidemark_airflow.context import interval_ms
from tidemark_airflow.hooks import StreamProcessHook, lineage_env, submit_arguments
from tidemark_airflow.pipelines import entrypoint, load_pipeline


def _require_connection(conn_id: str, what: str) -> None:
    from airflow.sdk import BaseHook

    try:
        BaseHook.get_connection(conn_id)
    except Exception as exc:
        raise RuntimeError(
            f"Airflow connection {conn_id!r} ({what}) is not defined: {type(exc).__name__}"
        ) from None


class TidemarkSparkSubmitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` for one of Tidemark's entrypoints (``stream_job``, ``reconcile_job``).

    The master comes from the Spark connection (``airflow.spark_conn_id`` in the pipeline config,
    default ``tidemark_spark``), never from code. Jars come from the local cache that set-up
    filled (no network at run time); ``py_files`` ships the project to a cluster's executors.
    """

    template_fields = (*SparkSubmitOperator.template_fields, "config_path")

    def __init__(self, *, config_path: str, job: str, conn_id: str = "tidemark_spark", **kwargs: Any) -> None:
        kwargs.setdefault("name", f"tidemark-{job}")
        super().__init__(application=entrypoint(job), conn_id=conn_id, **kwargs)
        self.config_path = config_path
        self.job = job
        self.spark_conn_id = conn_id

    def job_args(self, context: Context) -> list[str]:
        return ["--config", self.config_path]

    def prepare(self, context: Context) -> None:
        """Fill jars, conf, env and arguments from :func:`tidemark_airflow.hooks.submit_arguments`."""
        _require_connection(self.spark_conn_id, "the Spark master to submit to")
        args = submit_arguments(
            conn_id=self.spark_conn_id,
            name=self.name,
            application_args=[*self.job_args(context), *(self.application_args or [])],
            conf=self.conf,
            jars=self.jars,
            env_vars={**lineage_env(context), **(self.env_vars or {})},
            config=load_pipeline(self.config_path).config,
        )
        self.jars, self.conf = args["jars"], args["conf"]
        self.env_vars, self.application_args = args["env_vars"], args["application_args"]

    def execute(self, context: Context) -> None:
        self.prepare(context)
        super().execute(context)


class ReconcileSubmitOperator(TidemarkSparkSubmitOperator):
    """Recompute the run's interval from the raw data and diff it with the stream (Spark job), as
    the ``reconcile_pass`` (``on_time`` or ``final``, :mod:`tidemark.passes`) of the interval.

    The job replaces the interval's ``reconciliation`` rows and its pass's row in
    ``reconciliation_passes`` (idempotent: a re-run writes the same rows). The pass's figures are
    the ``pass`` XCom and, when the task has outlets, the extra of its Asset events.
    """

    def __init__(self, *, reconcile_pass: str = "final", **kwargs: Any) -> None:
        from tidemark.passes import check_pass

        super().__init__(job="reconcile_job", **kwargs)
        self.reconcile_pass = check_pass(reconcile_pass)

    def job_args(self, context: Context) -> list[str]:
        from tidemark.timeutil import format_instant_ms

        start, end = interval_ms(context)
        return [
            "--config",
            self.config_path,
            "--start",
            format_instant_ms(start),
            "--end",
            format_instant_ms(end),
            "--pass",
            self.reconcile_pass,
        ]

    def execute(self, context: Context) -> None:
        from tidemark_airflow.reconciliation import recorded_pass

        super().execute(context)
        start, end = interval_ms(context)
        figures = recorded_pass(load_pipeline(self.config_path).config, self.reconcile_pass, start, end)
        self.log.info("%s pass: %s", self.reconcile_pass, figures)
        context["ti"].xcom_push(key="pass", value=figures)
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = figures


class DataQualitySubmitOperator(TidemarkSparkSubmitOperator):
    """Run the Great Expectations suites over the run's interval and publish the reports (Spark job).

    The job (``quality_job``: ``tidemark report --validate --spark``) validates the interval's events
    with Spark and the small tables with delta-rs, stores every result in the pipeline's GX context,
    rebuilds the Data Docs and publishes the reconciliation report, also when a suite fails: that
    is when people need to read it. It writes its outcome as JSON; this operator reads it and, when a
    suite failed, sends one ``quality`` alert naming the failing expectations with sample rows and
    fails the task (no retry: re-validating the same rows gives the same verdict).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(job="quality_job", **kwargs)

    def outcome_path(self, context: Context) -> Path:
        from tidemark.quality_site import quality_root

        start, end = interval_ms(context)
        config = load_pipeline(self.config_path).config
        return quality_root(config) / "outcomes" / f"{start}-{end}.json"

    def job_args(self, context: Context) -> list[str]:
        from tidemark.timeutil import format_instant_ms

        start, end = interval_ms(context)
        return [
            *("--config", self.config_path),
            *("--start", format_instant_ms(start), "--end", format_instant_ms(end)),
            *("--outcome", str(self.outcome_path(context))),
        ]

    def execute(self, context: Context) -> None:
        """Run the quality job; its verdict (and the report's pages) is the ``verdict`` XCom."""
        import json

        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from tidemark.report import report_locations
        from tidemark_airflow.alerts import quality_alert, send

        self.prepare(context)
        path = self.outcome_path(context)
        path.unlink(missing_ok=True)  # never judge this run by an earlier run's verdict
        job_error = None
        try:
            SparkSubmitOperator.execute(self, context)
        except AirflowException as exc:  # exit 5 (a suite failed) lands here too
            job_error = exc
        if not path.is_file():
            raise job_error or RuntimeError(f"the quality job wrote no outcome to {path}")
        outcome = json.loads(path.read_text(encoding="utf-8"))
        config = load_pipeline(self.config_path).config
        pages = {label: str(p) for label, p in report_locations(config).items()}
        self.log.info("data quality %s; published pages: %s", outcome["success"], pages)
        context["ti"].xcom_push(
            key="verdict",
            value={"success": bool(outcome["success"]), "failing": outcome["failing"], "pages": pages},
        )
        if outcome["success"]:
            return
        alert = quality_alert(config, outcome, pages, context.get("run_id"))
        send(alert, config, context)
        raise AirflowFailException(alert.subject)


class MaintenanceSubmitOperator(TidemarkSparkSubmitOperator):
    """Maintain the pipeline's Delta tables (Spark job ``maintain_job``: ``tidemark maintain``).

    Safe beside the running stream (``tidemark.maintenance``); its log has one line per table
    (files, bytes, versions, log files before and after, time). A pipeline that has not run yet
    has nothing to maintain: the task is skipped with that line, before any Spark job is submitted
    (``tidemark maintain`` would exit 7 for it)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(job="maintain_job", **kwargs)

    def execute(self, context: Context) -> None:
        from airflow.sdk.exceptions import AirflowSkipException

        from tidemark.status import NotRunError, check_has_run

        try:
            check_has_run(load_pipeline(self.config_path).config)
        except NotRunError as exc:
            raise AirflowSkipException(str(exc)) from None
        super().execute(context)


class StreamLauncherOperator(BaseOperator):
    """Start the streaming job detached, through the provider's ``SparkSubmitHook.submit()``.

    A streaming job never ends, so waiting on it (what ``SparkSubmitOperator`` does) would pin a
    worker slot forever. ``StreamProcessHook`` (``tidemark_airflow.hooks``) runs the provider's
    hook with this operator's arguments in a process of its own session, log beside the checkpoint,
    and records pid, host and log in the launch file; this task waits only until the job's first
    heartbeat (``tidemark.liveness``). If the process exits first, the task fails with the log's
    tail. Between supervisor runs the job runs on its own; the supervisor DAG checks it.

    ``submit`` holds any further ``SparkSubmitHook`` argument (``executor_memory``, ``packages``,
    ...); jars, JVM options and the Python come from :func:`tidemark_airflow.hooks.submit_arguments`.
    """

    template_fields = ("config_path",)

    def __init__(
        self,
        *,
        config_path: str,
        conn_id: str = "tidemark_spark",
        start_timeout: float = 180.0,
        submit: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path
        self.conn_id = conn_id
        self.start_timeout = start_timeout
        self.submit = dict(submit or {})

    def execute(self, context: Context) -> dict[str, Any]:
        config = load_pipeline(self.config_path).config
        _require_connection(self.conn_id, "the Spark master to submit to")
        hook = StreamProcessHook(config)
        extra = {"name": "tidemark-stream_job", **self.submit}
        args = submit_arguments(
            conn_id=self.conn_id,
            application_args=["--config", self.config_path],
            config=config,
            env_vars=lineage_env(context),
            **extra,
        )
        pid = hook.start_detached(entrypoint("stream_job"), args, {"dag_run": str(context.get("run_id"))})
        try:
            state = hook.wait_for_heartbeat(self.start_timeout)
        except BaseException:
            # A job that did not come up in time is stopped, not left running beside the job
            # the task's retry starts (two writers of one pipeline).
            hook.stop(hook.identity, timeout=30)
            raise
        return {"pid": pid, "log": str(hook.log_path), "state": state.state}


class StreamHealthOperator(BaseBranchOperator):
    """Is the streaming job running and making progress? Branch to ``healthy`` or ``start``.

    Reads the heartbeat (``tidemark.liveness``) and the committed progress (batch id and watermark,
    ``tidemark.status``). A HUNG job is killed first. Restarts of a job that had died or hung are
    counted in the alert ledger; ``airflow.max_restarts`` within ``airflow.restart_window`` sends
    one alert.
    """

    template_fields = ("config_path",)

    def __init__(self, *, config_path: str, healthy_task_id: str, start_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path
        self.healthy_task_id = healthy_task_id
        self.start_task_id = start_task_id

    def choose_branch(self, context: Context) -> str:
        from tidemark import liveness
        from tidemark.status import read_status
        from tidemark.timeutil import format_instant_ms, now_ms
        from tidemark_airflow.alerts import AlertLedger, restarts_alert, send

        config = load_pipeline(self.config_path).config
        state = liveness.assess(config, hang_after_ms=config.airflow.hang_after)
        progress = read_status(config)
        self.log.info(
            "stream %s: %s (%s); last committed batch %s, watermark %s (%s)",
            config.pipeline,
            state.state,
            state.reason,
            progress.batch_id,
            format_instant_ms(progress.status.watermark_ms),
            progress.status.state,
        )
        context["ti"].xcom_push(key="liveness", value={"state": state.state, "reason": state.reason})
        if not state.needs_start:
            return self.healthy_task_id
        if state.state == liveness.HUNG:
            self.log.warning("stream %s is hung (%s): killing it", config.pipeline, state.reason)
            StreamProcessHook(config).stop_recorded()
        if state.state in (liveness.HUNG, liveness.DEAD) and state.reason != "never started":
            ledger = AlertLedger(config.pipeline)
            restarts = ledger.note_restart(now_ms(), config.airflow.restart_window)
            if len(restarts) >= config.airflow.max_restarts:
                send(restarts_alert(config, restarts, state, progress), config, context, ledger)
        return self.start_task_id


class WatermarkMonitorOperator(BaseOperator):
    """Alert once when the precise watermark STALLS because too many hosts lag; notice on recovery.

    A stall is identified by the watermark value it stalled at (the watermark never moves
    backwards, so a later stall has a different id): the alert ``stall:<pipeline>:<watermark>``
    is sent once, and the stall is kept as the ledger's open incident until the watermark moves
    past it, when one ``recovery`` notice goes out.
    """

    template_fields = ("config_path",)

    def __init__(self, *, config_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path

    def execute(self, context: Context) -> dict[str, Any]:
        from tidemark.status import read_status
        from tidemark.timeutil import now_ms
        from tidemark.watermark_status import STALLED
        from tidemark_airflow.alerts import AlertLedger, recovery_alert, send, stall_alert

        config = load_pipeline(self.config_path).config
        status = read_status(config)
        s = status.status
        ledger = AlertLedger(config.pipeline)
        incident = ledger.open_incident("stall")
        limit = config.alerts.max_hosts_listed
        self.log.info("%s", status.text(limit))
        if s.state == STALLED and s.watermark_ms is not None:
            alert = stall_alert(config, status)
            send(alert, config, context, ledger)
            if not incident or incident.get("alert_id") != alert.alert_id:
                ledger.set_incident(
                    "stall",
                    {"alert_id": alert.alert_id, "watermark_ms": s.watermark_ms, "noticed_at_ms": now_ms()},
                )
        elif incident and s.watermark_ms is not None and s.watermark_ms > incident["watermark_ms"]:
            send(recovery_alert(config, status, incident), config, context, ledger)
            ledger.set_incident("stall", None)
        return status.to_dict(limit)


class ReconciliationGateOperator(BaseOperator):
    """Read the reconciliation rows of the run's interval; alert and fail if a window misses target.

    Runs after the final pass (every window final) and the quality suites: the target is checked
    on the final alignment. Passing, it publishes the DAG's outlet Asset event with the interval,
    its figures and both passes' (``passes``), so downstream consumers start only on reconciled
    hours.
    """

    template_fields = ("config_path",)

    def __init__(self, *, config_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from tidemark.passes import FINAL
        from tidemark.timeutil import format_instant_ms
        from tidemark_airflow.alerts import misaligned_alert, send
        from tidemark_airflow.reconciliation import interval_passes, interval_summary

        config = load_pipeline(self.config_path).config
        start, end = interval_ms(context)
        summary = interval_summary(config, start, end)
        self.log.info("%s", summary["text"])
        if not summary["ok"]:  # tidemark.alignment.AlignmentSummary.ok: the one verdict
            alert = misaligned_alert(config, summary)
            send(alert, config, context)
            raise AirflowFailException(alert.subject)
        if summary["open"]:
            raise RuntimeError(f"{summary['open']} windows of the interval are still open; retrying later")
        passes = interval_passes(config, start, end)
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = {
                "pipeline": config.pipeline,
                "pass": FINAL,
                "start": format_instant_ms(start),
                "end": format_instant_ms(end),
                "windows": summary["windows"],
                "windows_final": summary["windows_final"],
                "aligned_share": summary["aligned_share"],
                "worst_alignment": summary["worst_alignment"],
                "worst_ontime_alignment": summary["worst_ontime_alignment"],
                "late_folded": summary["late_folded"],
                # the hour's two passes as recorded (tidemark.passes): on time, then final
                "passes": passes,
            }
        return {k: v for k, v in summary.items() if k != "text"} | {"passes": passes}
