"""Operators that run Tidemark from Airflow.

Heavy imports (the Tidemark job code, delta-rs, the SMTP provider) happen inside ``execute``, so
parsing a DAG never starts a JVM or touches the warehouse. Every operator takes the pipeline's
config path: the config is re-read when the task runs.

* ``TidemarkSparkSubmitOperator``: the Spark provider's ``SparkSubmitOperator`` for a Tidemark
  entrypoint (jars from the local cache, the Python that runs Airflow for the driver).
* ``ReconcileSubmitOperator``: the batch recompute-and-diff of the run's interval.
* ``DataQualitySubmitOperator``: the Great Expectations suites of the interval, Data Docs, report.
* ``StreamLauncherOperator``: starts the streaming job through the same provider hook, detached,
  so the job does not pin a worker slot; returns once the job's first heartbeat is written.
* ``StreamHealthOperator``: branch: healthy, or (re)start (kills a hung job first).
* ``WatermarkMonitorOperator``: one stall alert per stall, one recovery notice when it ends.
* ``ReconciliationGateOperator``: alerts on windows below target; the hour's Asset event.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseBranchOperator, BaseOperator

from tidemark_airflow.context import interval_ms
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

    def job_args(self, context) -> list[str]:
        return ["--config", self.config_path]

    def prepare(self, context) -> None:
        from tidemark.sparkenv import cached_jars, jvm_conf

        _require_connection(self.spark_conn_id, "the Spark master to submit to")
        self.jars = self.jars or ",".join(str(j) for j in cached_jars())
        self.conf = {**jvm_conf(), **(self.conf or {})}
        self.application_args = [*self.job_args(context), *(self.application_args or [])]
        python = sys.executable
        bin_dir = str(Path(python).parent)
        path = os.environ.get("PATH", "")
        self.env_vars = {
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            # spark-submit is the one next to this Python (pyspark's), whatever PATH the worker has
            "PATH": path if path.startswith(bin_dir + os.pathsep) else f"{bin_dir}{os.pathsep}{path}",
            **(self.env_vars or {}),
        }

    def execute(self, context) -> Any:
        self.prepare(context)
        return super().execute(context)


class ReconcileSubmitOperator(TidemarkSparkSubmitOperator):
    """Recompute the run's interval from the raw data and diff it with the stream (Spark job)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(job="reconcile_job", **kwargs)

    def job_args(self, context) -> list[str]:
        from tidemark.timeutil import format_instant_ms

        start, end = interval_ms(context)
        return [
            "--config",
            self.config_path,
            "--start",
            format_instant_ms(start),
            "--end",
            format_instant_ms(end),
        ]


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

    def outcome_path(self, context) -> Path:
        from tidemark.quality import quality_root

        start, end = interval_ms(context)
        config = load_pipeline(self.config_path).config
        return quality_root(config) / "outcomes" / f"{start}-{end}.json"

    def job_args(self, context) -> list[str]:
        from tidemark.timeutil import format_instant_ms

        start, end = interval_ms(context)
        return [
            *("--config", self.config_path),
            *("--start", format_instant_ms(start), "--end", format_instant_ms(end)),
            *("--outcome", str(self.outcome_path(context))),
        ]

    def execute(self, context) -> dict[str, Any]:
        import json

        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from tidemark.report import report_locations
        from tidemark_airflow.alerts import Alert, send

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
        if outcome["success"]:
            return {"success": True, "failing": [], "pages": pages}
        lines = [outcome["text"], *(f"{label}: {page}" for label, page in pages.items())]
        failing = outcome["failing"]
        alert = Alert(
            alert_id=f"quality:{config.pipeline}:{outcome['start']}:{outcome['end']}:{context.get('run_id')}:"
            + ",".join(sorted(failing)),
            pipeline=config.pipeline,
            kind="quality",
            subject=(
                f"[tidemark] {config.pipeline}: data quality FAILED for {outcome['start']} .. "
                f"{outcome['end']}: {', '.join(failing[:5])}"
                + (f" (+{len(failing) - 5})" if len(failing) > 5 else "")
            ),
            text="\n".join(lines),
            details={
                "failing": failing,
                "pages": pages,
                "samples": {name: rows[:3] for name, rows in outcome["samples"].items()},
            },
        )
        send(alert, config, context)
        raise AirflowFailException(alert.subject)


class StreamLauncherOperator(TidemarkSparkSubmitOperator):
    """Start the streaming job detached, through the provider's ``SparkSubmitHook.submit()``.

    A streaming job never ends, so waiting on it (what ``SparkSubmitOperator`` does) would pin a
    worker slot forever. ``StreamProcessHook`` (``tidemark_airflow.hooks``) runs the provider's
    hook with this operator's arguments in a process of its own session, log beside the checkpoint,
    and records pid, host and log in the launch file; this task waits only until the job's first
    heartbeat (``tidemark.liveness``). If the process exits first, the task fails with the log's
    tail. Between supervisor runs the job runs on its own; the supervisor DAG checks it.
    """

    SUBMIT_ARGS = (
        *("conf", "files", "py_files", "jars", "packages", "exclude_packages", "driver_class_path"),
        *("keytab", "principal", "proxy_user", "name", "application_args", "env_vars", "properties_file"),
    )

    def __init__(self, *, start_timeout: float = 180.0, **kwargs: Any) -> None:
        super().__init__(job="stream_job", **kwargs)
        self.start_timeout = start_timeout

    def execute(self, context) -> dict[str, Any]:
        from tidemark import liveness

        self.prepare(context)
        config = load_pipeline(self.config_path).config
        hook = stream_hook(config)
        submit = {name: getattr(self, name) for name in self.SUBMIT_ARGS}
        pid = hook.spawn(
            self.application,
            {**submit, "conn_id": self.spark_conn_id},
            {"dag_run": str(context.get("run_id"))},
        )
        self.log.info("started %s as pid %s, log %s", config.pipeline, pid, hook.log_path)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            state = liveness.assess(config, hang_after_ms=config.airflow.hang_after, start_grace_ms=10**12)
            if state.state == liveness.RUNNING:
                self.log.info("stream %s is running: %s", config.pipeline, state.reason)
                return {"pid": pid, "log": str(hook.log_path), "state": state.state}
            if hook.process.poll() is not None:
                raise RuntimeError(
                    f"streaming job {config.pipeline} exited with code {hook.process.returncode} before "
                    f"its first heartbeat; log {hook.log_path}:\n{hook.tail()}"
                )
            time.sleep(2)
        raise RuntimeError(
            f"streaming job {config.pipeline} (pid {pid}) wrote no heartbeat within "
            f"{self.start_timeout:.0f}s; log {hook.log_path}:\n{hook.tail()}"
        )


def stream_hook(config):
    """The process-control hook of ``config``'s streaming job (launch file, log beside the checkpoint)."""
    from tidemark import liveness
    from tidemark_airflow.hooks import StreamProcessHook

    log_path = Path(config.checkpoint).parent / f"{config.pipeline}.stream.log"
    return StreamProcessHook(launch_path=liveness.launch_path(config), log_path=log_path)


def stop_stream(config, timeout: float = 30.0) -> bool:
    """Stop the job the supervisor launched (its whole process group): TERM, then KILL.

    Refuses (raises) when the job was recorded on another host.
    """
    from tidemark import liveness

    launch = liveness.read_json(liveness.launch_path(config)) or {}
    beat = liveness.read_json(liveness.heartbeat_path(config)) or {}
    hook = stream_hook(config)
    recorded = {int(r["pid"]): r.get("host") for r in (launch, beat) if r.get("pid")}  # often one pid
    stopped = False
    for pid, host in recorded.items():
        stopped |= hook.stop(pid, host, timeout)
    return stopped


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

    def choose_branch(self, context) -> str:
        from tidemark import liveness
        from tidemark.status import read_status
        from tidemark.timeutil import format_instant_ms, now_ms
        from tidemark_airflow.alerts import Alert, AlertLedger, send

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
            stop_stream(config)
        if state.state in (liveness.HUNG, liveness.DEAD) and state.reason != "never started":
            ledger = AlertLedger(config.pipeline)
            now = now_ms()
            window = config.airflow.restart_window
            restarts = [t for t in ledger.data.get("restarts", []) if now - t <= window] + [now]
            ledger.data["restarts"] = restarts
            ledger.save()
            if len(restarts) >= config.airflow.max_restarts:
                alert = Alert(
                    alert_id=f"restarts:{config.pipeline}:{restarts[0]}",
                    pipeline=config.pipeline,
                    kind="restarts",
                    subject=f"[tidemark] {config.pipeline}: streaming job restarted {len(restarts)} times",
                    text=(
                        f"The streaming job of {config.pipeline} had to be restarted {len(restarts)} times "
                        f"since {format_instant_ms(restarts[0])} (last: {state.state}, {state.reason}).\n"
                        f"Last committed batch {progress.batch_id}, watermark "
                        f"{format_instant_ms(progress.status.watermark_ms)}. "
                        "See the job log beside the checkpoint."
                    ),
                    details={"restarts": restarts, "last_state": state.state},
                )
                send(alert, config, context, ledger)
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

    def execute(self, context) -> dict[str, Any]:
        from tidemark.status import read_status
        from tidemark.timeutil import format_instant_ms, humanize_ms, now_ms
        from tidemark.watermark import STALLED
        from tidemark_airflow.alerts import Alert, AlertLedger, send

        config = load_pipeline(self.config_path).config
        status = read_status(config)
        s = status.status
        ledger = AlertLedger(config.pipeline)
        incident = ledger.open_incident("stall")
        limit = config.alerts.max_hosts_listed
        summary = status.to_dict(limit)
        self.log.info("%s", status.text(limit))
        if s.state == STALLED and s.watermark_ms is not None:
            stalled_for = s.since_advance_ms or 0
            alert = Alert(
                alert_id=f"stall:{config.pipeline}:{s.watermark_ms}",
                pipeline=config.pipeline,
                kind="stall",
                subject=(
                    f"[tidemark] {config.pipeline}: watermark STALLED at {format_instant_ms(s.watermark_ms)} "
                    f"for {humanize_ms(stalled_for)}: {s.hosts_lagging:,} hosts lag "
                    f"(allowed {s.allowed_lagging:,})"
                ),
                text=status.text(limit),
                details=summary,
            )
            send(alert, config, context, ledger)
            if not incident or incident.get("alert_id") != alert.alert_id:
                ledger.set_incident(
                    "stall",
                    {"alert_id": alert.alert_id, "watermark_ms": s.watermark_ms, "noticed_at_ms": now_ms()},
                )
        elif incident and s.watermark_ms is not None and s.watermark_ms > incident["watermark_ms"]:
            lasted = now_ms() - int(incident["noticed_at_ms"])
            alert = Alert(
                alert_id=f"{incident['alert_id']}:recovered",
                pipeline=config.pipeline,
                kind="recovery",
                subject=(
                    f"[tidemark] {config.pipeline}: watermark advancing again, now "
                    f"{format_instant_ms(s.watermark_ms)} "
                    f"(stalled at {format_instant_ms(incident['watermark_ms'])})"
                ),
                text=(
                    f"The stall noticed {humanize_ms(lasted)} ago has ended: the watermark moved from "
                    f"{format_instant_ms(incident['watermark_ms'])} to "
                    f"{format_instant_ms(s.watermark_ms)}.\n\n" + status.text(limit)
                ),
                details={**summary, "stalled_at_ms": incident["watermark_ms"]},
            )
            send(alert, config, context, ledger)
            ledger.set_incident("stall", None)
        return summary


class ReconciliationGateOperator(BaseOperator):
    """Read the reconciliation rows of the run's interval; alert and fail if a window misses target.

    Runs after the recompute-and-diff. Passing, it publishes the DAG's outlet Asset event with the
    interval and its figures, so downstream consumers start only on reconciled hours.
    """

    template_fields = ("config_path",)

    def __init__(self, *, config_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path

    def execute(self, context) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from tidemark.timeutil import format_instant_ms
        from tidemark_airflow.alerts import Alert, send
        from tidemark_airflow.reconciliation import interval_summary

        config = load_pipeline(self.config_path).config
        start, end = interval_ms(context)
        summary = interval_summary(config, start, end)
        self.log.info("%s", summary["text"])
        if summary["misaligned"] or summary["unexplained"]:
            alert = Alert(
                alert_id=f"misaligned:{config.pipeline}:{start}:{end}:{summary['reconciled_at_ms']}",
                pipeline=config.pipeline,
                kind="misaligned",
                subject=(
                    f"[tidemark] {config.pipeline}: {len(summary['misaligned'])} windows below "
                    f"{summary['target']} in {format_instant_ms(start)} .. {format_instant_ms(end)}"
                ),
                text=summary["text"],
                details={k: v for k, v in summary.items() if k != "text"},
            )
            send(alert, config, context)
            raise AirflowFailException(alert.subject)
        if summary["open"]:
            raise RuntimeError(f"{summary['open']} windows of the interval are still open; retrying later")
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = {
                "pipeline": config.pipeline,
                "start": format_instant_ms(start),
                "end": format_instant_ms(end),
                "windows": summary["windows"],
                "aligned_share": summary["aligned_share"],
                "worst_alignment": summary["worst_alignment"],
            }
        return {k: v for k, v in summary.items() if k != "text"}
