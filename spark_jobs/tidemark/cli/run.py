"""``tidemark stream``, ``maintain`` and ``jvm-archive``: the commands that run a pipeline's jobs."""

from __future__ import annotations

import argparse

from tidemark import sparkenv
from tidemark.cli.common import ExitCode, check_has_run, echo, echo_stderr
from tidemark.config import load_config


def cmd_stream(args: argparse.Namespace) -> int:
    from tidemark.stream import run_stream

    config = load_config(args.config)
    # Refuse a mismatched checkpoint (or a needless reset) before starting a JVM.
    if args.reset_checkpoint:
        from tidemark.reset import check_reset

        check_reset(config)
    else:
        from tidemark.identity import check_identity

        check_identity(config)
    spark = sparkenv.session_for(config, "stream")
    processor = run_stream(spark, config, once=args.once, echo=echo, reset=args.reset_checkpoint)
    done = [s for s in processor.summaries if not s.skipped]
    echo(f"[{config.pipeline}] stopped after {len(done)} batches, {sum(s.events for s in done):,} events")
    return 0


def add_stream_command(sub: argparse._SubParsersAction) -> None:
    st = sub.add_parser(
        "stream",
        help="run the exactly-once streaming job for a pipeline",
        description="Read the pipeline's source, quarantine bad lines, drop publisher retries, "
        "track every host's progress, close windows on the precise watermark and commit each "
        "micro-batch idempotently to Delta. Restart it any time: it resumes from its checkpoint. "
        f"One writer per pipeline: exit {ExitCode.LEASE:d} when another stream holds the pipeline's "
        "lease, or took it over from this one.",
    )
    st.add_argument("--config", required=True, help="pipeline YAML file")
    st.add_argument(
        "--once",
        action="store_true",
        help="process everything available now, then stop (Spark's availableNow trigger); "
        "without it the job runs until stopped",
    )
    st.add_argument(
        "--reset-checkpoint",
        action="store_true",
        help="the checkpoint is lost or foreign: move it aside and start a new run identity that "
        "resumes where the committed batches stopped (refused when the checkpoint is fine)",
    )
    st.set_defaults(func=cmd_stream)


def cmd_maintain(args: argparse.Namespace) -> int:
    from tidemark.maintenance import check_stream_stopped, maintain, plan

    config = load_config(args.config)
    check_has_run(config)
    if args.dry_run:
        for table, kind in plan(config):
            echo(f"[{config.pipeline}] {table}: {kind}")
        return 0
    check_stream_stopped(config)
    spark = sparkenv.session_for(config, "maintain")
    # with --json the per-table lines go to stderr, so stdout is the JSON alone
    report = maintain(spark, config, echo=echo_stderr if args.json else echo)
    echo(report.to_json() if args.json else report.summary())
    return 0


def add_maintain_command(sub: argparse._SubParsersAction) -> None:
    mt = sub.add_parser(
        "maintain",
        help="compact, VACUUM and checkpoint a pipeline's Delta tables (safe beside the stream)",
        description="OPTIMIZE the small append-only tables, OPTIMIZE events ZORDER BY (event_time), "
        "VACUUM every table with maintenance.vacuum_retention (Delta's retention check on), write a "
        "Delta checkpoint and remove log entries older than maintenance.log_retention. The _state "
        "tables are never compacted, and left as they are while a batch has written them without "
        "committing. Prints one line per table: files, bytes, versions, log files, time.",
    )
    mt.add_argument("--config", required=True, help="pipeline YAML file")
    mt.add_argument("--json", action="store_true", help="print the measurements as JSON for machines")
    mt.add_argument(
        "--dry-run", action="store_true", help="list the tables and what each would get; start no JVM"
    )
    mt.set_defaults(func=cmd_maintain)


def cmd_jvm_archive(args: argparse.Namespace) -> int:
    from tidemark.jvmarchive import create

    create(force=args.force, echo=echo)
    return 0


def add_jvm_archive_command(sub: argparse._SubParsersAction) -> None:
    ja = sub.add_parser(
        "jvm-archive",
        help="train the driver JVM's class archive once (every later job starts ~3 s sooner)",
        description="Run a small demo in a JVM that dumps the classes it loaded into a class-data-"
        "sharing archive under the jar cache; every later Tidemark driver JVM with the same java and "
        "Spark class path maps it instead of loading Spark, Delta and the Kafka connector from their "
        "jars. scripts/setup.sh runs it; run it after installing the wheel, or after a new Java or "
        "pyspark (the old archive is then not used). TIDEMARK_JVM_ARCHIVE=off turns archives off.",
    )
    ja.add_argument("--force", action="store_true", help="train again even if the archive exists")
    ja.set_defaults(func=cmd_jvm_archive)
