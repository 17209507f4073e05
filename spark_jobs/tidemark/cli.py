"""``tidemark``: the command line.

Sub-commands: ``generate`` (write a synthetic scenario), ``stream`` (the exactly-once streaming
job), ``reconcile`` (batch recompute-and-diff), ``maintain`` (compaction, VACUUM, log cleanup),
``demo`` (the first three, bounded, on the embedded default). Errors in input or config, and
object storage that cannot be read, end the command with one line on stderr and exit code 2; a
pipeline that has not run yet, with one line and exit code 7 (EXIT_NOT_RUN), before any JVM.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tidemark import schemas as S
from tidemark import storage
from tidemark.config import ConfigError, PipelineConfig, load_config
from tidemark.sparkenv import session_for
from tidemark.timeutil import format_instant_ms, parse_instant_ms

EXIT_USAGE = 2
EXIT_MISALIGNED = 3
# `stream`: another writer holds the pipeline's lease, or took it over (tidemark.lease)
EXIT_LEASE = 6
# watermark/report/validate/maintain/reconcile: the pipeline has no tables yet (tidemark.status)
EXIT_NOT_RUN = 7


def _echo(message: str) -> None:
    print(message, flush=True)


def _echo_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _instant(text: str) -> int:
    try:
        return parse_instant_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


# ---------------------------------------------------------------------------------------------
# generate
# ---------------------------------------------------------------------------------------------


def _add_scenario_options(p: argparse.ArgumentParser, defaults) -> None:
    g = p.add_argument_group("scenario")
    g.add_argument(
        "--hosts",
        type=int,
        default=defaults.hosts,
        help="number of source hosts (default %(default)s)",
    )
    g.add_argument(
        "--minutes",
        type=int,
        default=defaults.minutes,
        help="event-time span in minutes (default %(default)s)",
    )
    g.add_argument(
        "--rate",
        type=int,
        default=defaults.events_per_host_per_minute,
        help="events per host per minute (default %(default)s)",
    )
    g.add_argument(
        "--keys",
        default=",".join(defaults.keys),
        help="comma-separated event keys (default %(default)s)",
    )
    g.add_argument(
        "--lag-share",
        type=_fraction,
        default=defaults.lag_share,
        help="share of hosts that lag (default %(default)s)",
    )
    g.add_argument(
        "--lag-minutes",
        type=float,
        default=defaults.lag_minutes,
        help="how long the lagging hosts' outage lasts, minutes (default %(default)s)",
    )
    g.add_argument(
        "--lag-start",
        type=float,
        default=defaults.lag_start_minute,
        help="minute of the scenario at which the lagging hosts' outage starts (default %(default)s)",
    )
    g.add_argument(
        "--duplicate-rate",
        type=_fraction,
        default=defaults.duplicate_rate,
        help="share of records re-sent by a publisher retry (same event_id), landing 30 s-5 min "
        "later (default %(default)s)",
    )
    g.add_argument(
        "--malformed-rate",
        type=_fraction,
        default=defaults.malformed_rate,
        help="share of records followed by a malformed line (default %(default)s)",
    )
    g.add_argument(
        "--seed",
        type=int,
        default=defaults.seed,
        help="random seed; same seed, same files (default %(default)s)",
    )
    g.add_argument(
        "--start",
        type=_instant,
        default=defaults.start_ms,
        help="first event time, ISO-8601 or epoch ms, bounded mode only (default 2025-11-22T10:00:00Z)",
    )
    g.add_argument(
        "--file-span",
        type=int,
        default=defaults.file_span_s,
        help="seconds of arrival time per landing file (default %(default)s)",
    )


def _scenario_from(args):
    from tidemark.generator import Scenario

    try:
        return Scenario(
            hosts=args.hosts,
            minutes=args.minutes,
            events_per_host_per_minute=args.rate,
            keys=tuple(k.strip() for k in args.keys.split(",") if k.strip()),
            lag_share=args.lag_share,
            lag_minutes=args.lag_minutes,
            lag_start_minute=args.lag_start,
            duplicate_rate=args.duplicate_rate,
            malformed_rate=args.malformed_rate,
            seed=args.seed,
            start_ms=args.start,
            file_span_s=args.file_span,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def cmd_generate(args) -> int:
    from tidemark.generator import generate_files, generate_live

    if args.kafka:
        return _generate_kafka(args)
    if args.out:
        out = args.out
    elif args.config:
        cfg = load_config(args.config)
        if cfg.source.kind == "kafka":  # publish to the config's broker and topic, as configured
            from tidemark.kafka import kafka_access

            args.topic = cfg.source.topic
            return _generate_kafka(args, kafka_access(cfg))
        if cfg.source.kind != "files":
            raise ConfigError(
                f"config {args.config}: generate writes files or publishes to Kafka; source.kind is "
                f"{cfg.source.kind} (a delta source reads another pipeline's events)"
            )
        out = cfg.source.path
    else:
        raise ConfigError("generate: give --out DIR or --config FILE (its source.path)")
    scenario = _scenario_from(args)
    started = time.monotonic()
    total = scenario.hosts * scenario.minutes * scenario.events_per_host_per_minute
    _echo(
        f"generating {'live' if args.live else 'bounded'} scenario: {scenario.hosts:,} hosts x "
        f"{scenario.minutes} min x {scenario.events_per_host_per_minute}/min = {total:,} events "
        f"-> {out}"
    )
    if args.history and not args.live:
        raise ConfigError("generate: --history needs --live")
    if args.history < 0:
        raise ConfigError(f"generate: --history must be >= 0 minutes, got {args.history}")
    progress = _echo if args.verbose or args.live else None
    if storage.is_object_store(out):
        truth = _generate_to_object_store(args, scenario, out, progress)
    elif args.live:
        truth = generate_live(scenario, out, progress=progress, history_minutes=args.history)
    else:
        truth = generate_files(scenario, out, progress=progress)
    _echo(
        f"wrote {truth.files} files, {truth.lines:,} lines: {truth.unique_events:,} unique events, "
        f"{truth.duplicate_copies:,} retry copies, {truth.malformed_lines:,} malformed lines, "
        f"{len(scenario.lagging_hosts())} lagging hosts ({time.monotonic() - started:.1f}s)"
    )
    return 0


def _generate_to_object_store(args, scenario, uri: str, progress):
    """Object storage: the files are written locally, then uploaded in name order (an object's
    arrival is its upload time, so arrival order is name order); the bucket is made if missing."""
    import tempfile

    from tidemark.generator import generate_files

    if args.live:
        raise ConfigError(f"generate: --live writes a local directory; {uri} is on object storage")
    with tempfile.TemporaryDirectory(prefix="tidemark-generate-") as local:
        truth = generate_files(scenario, local, progress=progress)
        storage.ensure_bucket(uri)
        uploaded = storage.upload_tree(local, uri)
    _echo(f"uploaded {uploaded} files to {uri}")
    return truth


def _generate_kafka(args, access=None) -> int:
    """Publish to ``--kafka``/``--topic``, or to a config's cluster (``access``: its security
    settings and secrets, as the stream reads them)."""
    from tidemark.kafka import publish_scenario

    if not args.topic:
        raise ConfigError("generate: --kafka needs --topic")
    if args.history and not args.live:
        raise ConfigError("generate: --history needs --live")
    if args.history < 0:
        raise ConfigError(f"generate: --history must be >= 0 minutes, got {args.history}")
    target = access if access is not None else args.kafka
    where = access.describe() if access is not None else args.kafka
    scenario = _scenario_from(args)
    started = time.monotonic()
    _echo(
        f"publishing {'live' if args.live else 'bounded'} scenario to {where} "
        f"topic {args.topic} (keyed by host)"
    )
    truth = publish_scenario(
        scenario,
        target,
        args.topic,
        live=args.live,
        progress=_echo if args.verbose or args.live else None,
        history_minutes=args.history,
    )
    _echo(
        f"published {truth.lines:,} records: {truth.unique_events:,} unique events, "
        f"{truth.duplicate_copies:,} retry copies, {truth.malformed_lines:,} malformed "
        f"({time.monotonic() - started:.1f}s)"
    )
    return 0


# ---------------------------------------------------------------------------------------------
# stream / reconcile
# ---------------------------------------------------------------------------------------------


def cmd_stream(args) -> int:
    from tidemark.stream import run_stream

    config = load_config(args.config)
    # Refuse a mismatched checkpoint (or a needless reset) before starting a JVM.
    if args.reset_checkpoint:
        from tidemark.reset import check_reset

        check_reset(config)
    else:
        from tidemark.identity import check_identity

        check_identity(config)
    spark = session_for(config, "stream")
    processor = run_stream(spark, config, once=args.once, echo=_echo, reset=args.reset_checkpoint)
    done = [s for s in processor.summaries if not s.skipped]
    _echo(f"[{config.pipeline}] stopped after {len(done)} batches, {sum(s.events for s in done):,} events")
    return 0


def _default_range(spark, config: PipelineConfig) -> tuple[int, int]:
    from pyspark.sql import functions as F

    from tidemark import tables as T

    path = config.table_path(S.WINDOWS)
    if not T.table_exists(path):
        raise ConfigError(f"reconcile: no windows table at {path} yet; give --start and --end")
    row = (
        T.read_table(spark, path)
        .agg(F.min(F.unix_millis("window_start")), F.max(F.unix_millis("window_end")))
        .collect()[0]
    )
    return int(row[0]), int(row[1])


def _check_has_run(config: PipelineConfig) -> None:
    """Every command that reads a pipeline's tables answers a pipeline that never ran the same way:
    one line, exit EXIT_NOT_RUN, nothing written, no JVM (tidemark.status.check_has_run)."""
    from tidemark.status import check_has_run

    check_has_run(config)


def cmd_reconcile(args) -> int:
    from tidemark.reconcile import reconcile

    config = load_config(args.config)
    _check_has_run(config)  # before a JVM starts
    spark = session_for(config, "reconcile")
    if args.start is None or args.end is None:
        start, end = _default_range(spark, config)
        start = args.start if args.start is not None else start
        end = args.end if args.end is not None else end
    else:
        start, end = args.start, args.end
    if not args.json:
        _echo(f"[{config.pipeline}] reconciling {format_instant_ms(start)} .. {format_instant_ms(end)}")
    try:
        report = reconcile(spark, config, start, end, target=args.target, write=not args.dry_run)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    _echo(report.to_json() if args.json else report.table())
    if args.fail_below is not None:
        below = [w for w in report.closed if w.alignment is not None and w.alignment < args.fail_below]
        if below:
            print(
                f"tidemark: {len(below)} window(s) below {args.fail_below}, first at "
                f"{format_instant_ms(below[0].window_start_ms)}",
                file=sys.stderr,
            )
            return EXIT_MISALIGNED
    return 0


# a heartbeat this old means the stream is gone, for `tidemark maintain`'s check
MAINTAIN_HANG_MS = 10 * 60_000


def cmd_maintain(args) -> int:
    from tidemark import liveness
    from tidemark.maintenance import maintain, plan

    config = load_config(args.config)
    _check_has_run(config)
    if args.dry_run:
        for table, kind in plan(config):
            _echo(f"[{config.pipeline}] {table}: {kind}")
        return 0
    if config.maintained_in_stream:
        alive = liveness.assess(config, hang_after_ms=MAINTAIN_HANG_MS)
        if alive.state in (liveness.RUNNING, liveness.STARTING, liveness.HUNG):
            raise ConfigError(
                f"[{config.pipeline}] its stream is {alive.state} ({alive.reason}) and maintains the tables "
                "itself (maintenance.in_stream: one writer per table on object storage); stop it first"
            )
    spark = session_for(config, "maintain")
    # with --json the per-table lines go to stderr, so stdout is the JSON alone
    report = maintain(spark, config, echo=_echo_stderr if args.json else _echo)
    _echo(report.to_json() if args.json else report.summary())
    return 0


def cmd_jvm_archive(args) -> int:
    from tidemark.jvmarchive import create

    create(force=args.force, echo=_echo)
    return 0


EXIT_STALLED = 4


def cmd_watermark(args) -> int:
    from tidemark.status import read_status

    config = load_config(args.config)
    _check_has_run(config)
    status = read_status(config)
    if args.json:
        _echo(json.dumps(status.to_dict(args.limit), indent=2))
    else:
        _echo(status.text(args.limit))
    return EXIT_STALLED if args.fail_on_stall and status.status.state == "STALLED" else 0


# ---------------------------------------------------------------------------------------------
# validate / report (data quality: tidemark.quality, tidemark.report)
# ---------------------------------------------------------------------------------------------

EXIT_QUALITY = 5


def _threshold(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        if not sep or not name.strip():
            raise ValueError
        return name.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=NUMBER, got {text!r}") from None


def cmd_validate(args) -> int:
    from tidemark.quality import validate_pipeline

    config = load_config(args.config)
    _check_has_run(config)  # before a JVM starts or the GX context is made
    spark = session_for(config, "validate") if args.spark else None
    outcome = validate_pipeline(
        config,
        args.start,
        args.end,
        spark=spark,
        thresholds=dict(args.threshold or []),
        quality_dir=args.quality_dir,
        build_docs=not args.no_docs,
    )
    _echo(outcome.to_json() if args.json else outcome.text())
    return _quality_failed(outcome) if not outcome.success else 0


def _quality_failed(outcome) -> int:
    print(
        f"tidemark: {len(outcome.failing)} expectation(s) failing: {', '.join(outcome.failing)}",
        file=sys.stderr,
    )
    return EXIT_QUALITY


def cmd_report(args) -> int:
    from tidemark.quality import validate_pipeline
    from tidemark.quality_site import data_docs_index
    from tidemark.report import range_report_path, report_path, write_report

    config = load_config(args.config)
    if (args.spark or args.outcome) and not args.validate:
        raise ConfigError("report: --spark and --outcome need --validate")
    _check_has_run(config)
    outcome, docs = None, data_docs_index(config, args.quality_dir)
    if args.validate:
        spark = session_for(config, "quality") if args.spark else None
        outcome = validate_pipeline(config, args.start, args.end, spark=spark, quality_dir=args.quality_dir)
        if args.outcome:
            from tidemark.liveness import write_json_atomic

            written = {**json.loads(outcome.to_json()), "text": outcome.text(), "samples": outcome.samples}
            write_json_atomic(Path(args.outcome), json.loads(json.dumps(written, default=str)))
    targets = [Path(args.out)] if args.out is not None else [report_path(config, args.quality_dir)]
    if args.out is None and args.start is not None and args.end is not None:
        # a range (a scheduled run's hour) is also published on its own page, which stays
        targets.insert(0, range_report_path(config, args.start, args.end, args.quality_dir))
    for target in targets:
        path = write_report(
            config, target, args.start, args.end, outcome=outcome, docs_index=docs if docs.is_file() else None
        )
        _echo(f"[{config.pipeline}] reconciliation report: {path}")
    if docs.is_file():
        _echo(f"[{config.pipeline}] data docs: {docs}")
    return _quality_failed(outcome) if outcome is not None and not outcome.success else 0


# ---------------------------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------------------------


def cmd_demo(args) -> int:
    from tidemark.demo import run_demo

    return run_demo(args, scenario=_scenario_from(args), echo=_echo)


# ---------------------------------------------------------------------------------------------


def _version() -> str:
    """The installed distribution's version (pyproject's ``version``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tidemark")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidemark",
        description="Exactly-once streaming with a precise watermark, reconciled against batch.",
        epilog=f"Exit codes: 0 done; {EXIT_USAGE} an error in input, config or storage (one line on "
        f"stderr); {EXIT_MISALIGNED} reconcile --fail-below; {EXIT_STALLED} watermark --fail-on-stall; "
        f"{EXIT_QUALITY} a failing expectation; {EXIT_LEASE} another stream holds the lease; "
        f"{EXIT_NOT_RUN} the pipeline has not run yet (no tables under its warehouse): watermark, "
        "report, validate, maintain and reconcile say so in one line, write nothing and start no JVM.",
    )
    parser.add_argument("--version", action="version", version=f"tidemark {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in (
        _add_generate_command,
        _add_stream_command,
        _add_reconcile_command,
        _add_maintain_command,
        _add_watermark_command,
        _add_validate_command,
        _add_report_command,
        _add_demo_command,
        _add_jvm_archive_command,
        _add_schema_command,
    ):
        add_command(sub)
    return parser


def _add_generate_command(sub) -> None:
    from tidemark.generator import Scenario

    gen = sub.add_parser(
        "generate",
        help="write a synthetic multi-host scenario to a landing directory",
        description="Write newline-delimited JSON logs from many hosts, with lagging hosts, "
        "publisher-retry duplicates and malformed lines. Deterministic for a --seed.",
    )
    target = gen.add_argument_group("output and pacing")
    target.add_argument("--out", help="landing directory to write (default: the config's source.path)")
    target.add_argument("--config", help="pipeline YAML whose source.path is the landing directory")
    target.add_argument(
        "--kafka", metavar="BOOTSTRAP", help="publish to this Kafka cluster instead of writing files"
    )
    target.add_argument("--topic", help="Kafka topic to publish to (with --kafka); created if missing")
    target.add_argument(
        "--live",
        action="store_true",
        help="event time ~ now, each file written when its arrival span has passed (paced)",
    )
    target.add_argument(
        "--history",
        type=int,
        default=0,
        metavar="MINUTES",
        help="with --live: start this many minutes in the past; the past is written at once "
        "(its files dated at their arrival time), then the rest paced as usual",
    )
    target.add_argument("--verbose", action="store_true", help="print a line per file written")
    _add_scenario_options(gen, Scenario())
    gen.set_defaults(func=cmd_generate)


def _add_stream_command(sub) -> None:
    st = sub.add_parser(
        "stream",
        help="run the exactly-once streaming job for a pipeline",
        description="Read the pipeline's source, quarantine bad lines, drop publisher retries, "
        "track every host's progress, close windows on the precise watermark and commit each "
        "micro-batch idempotently to Delta. Restart it any time: it resumes from its checkpoint. "
        f"One writer per pipeline: exit {EXIT_LEASE} when another stream holds the pipeline's "
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


def _add_reconcile_command(sub) -> None:
    rc = sub.add_parser(
        "reconcile",
        help="recompute windows in batch from the raw source and diff them with the stream",
        description="Recompute [start, end) from the raw source with the stream's own parsing "
        "and aggregation code, diff per window, write the reconciliation table and print it.",
    )
    rc.add_argument("--config", required=True, help="pipeline YAML file")
    rc.add_argument(
        "--start",
        type=_instant,
        help="range start, ISO-8601 or epoch ms (default: first committed window)",
    )
    rc.add_argument(
        "--end",
        type=_instant,
        help="range end, exclusive (default: end of the last committed window)",
    )
    rc.add_argument(
        "--target",
        type=_fraction,
        help="alignment target (default: the config's reconcile.target, 0.999)",
    )
    rc.add_argument("--json", action="store_true", help="print the result as JSON for machines")
    rc.add_argument(
        "--fail-below",
        type=_fraction,
        metavar="ALIGNMENT",
        help=f"exit with code {EXIT_MISALIGNED} if any closed window's alignment is below this",
    )
    rc.add_argument(
        "--dry-run",
        action="store_true",
        help="print only; do not write the reconciliation table nor add to the landing index",
    )
    rc.set_defaults(func=cmd_reconcile)


def _add_maintain_command(sub) -> None:
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


def _add_schema_command(sub) -> None:
    def cmd_schema(args) -> int:
        from tidemark.config import config_json_schema

        _echo(json.dumps(config_json_schema(), indent=2))
        return 0

    sc = sub.add_parser(
        "schema",
        help="print the JSON Schema of a pipeline config file (docs/pipeline.schema.json)",
        description="Print the JSON Schema (2020-12) of a pipeline config file, for editors and CI.",
    )
    sc.set_defaults(func=cmd_schema)


def _add_jvm_archive_command(sub) -> None:
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


def _add_watermark_command(sub) -> None:
    wm = sub.add_parser(
        "watermark",
        help="print a pipeline's watermark status (no Spark: reads the persisted state)",
        description="Print the current precise watermark, how long since it advanced, its state "
        "(ADVANCING, STALLED, WAITING), the hosts expected/reporting/lagging and the lagging hosts "
        "worst first. Reads the Delta state with delta-rs; starts no JVM.",
    )
    wm.add_argument("--config", required=True, help="pipeline YAML file")
    wm.add_argument("--json", action="store_true", help="print the status as JSON for machines")
    wm.add_argument("--limit", type=int, default=20, help="lagging hosts to list (default %(default)s)")
    wm.add_argument(
        "--fail-on-stall",
        action="store_true",
        help=f"exit with code {EXIT_STALLED} when the watermark is STALLED",
    )
    wm.set_defaults(func=cmd_watermark)


def _add_validate_command(sub) -> None:
    va = sub.add_parser(
        "validate",
        help="run the Great Expectations suites (expectations/) over a pipeline's tables",
        description="Validate raw events, micro-batches, windows, reconciliation and the watermark "
        "with the suites in expectations/, store the results and rebuild the Data Docs. Exit "
        f"{EXIT_QUALITY} naming the failing expectations when a suite fails. Without --spark it "
        "reads the tables with delta-rs and starts no JVM.",
    )
    va.add_argument("--config", required=True, help="pipeline YAML file")
    va.add_argument("--start", type=_instant, help="range start (event time), ISO-8601 or epoch ms")
    va.add_argument("--end", type=_instant, help="range end, exclusive (default: everything)")
    va.add_argument("--json", action="store_true", help="print the outcome as JSON for machines")
    va.add_argument(
        "--spark", action="store_true", help="validate the events table with Spark (large ranges)"
    )
    va.add_argument(
        "--threshold",
        type=_threshold,
        action="append",
        metavar="NAME=VALUE",
        help="override a suite parameter, e.g. max_late_share=0.02 (repeatable)",
    )
    va.add_argument(
        "--quality-dir",
        help="GX context and Data Docs directory (default <warehouse>/<pipeline>/_quality)",
    )
    va.add_argument("--no-docs", action="store_true", help="do not rebuild the Data Docs")
    va.set_defaults(func=cmd_validate)


def _add_report_command(sub) -> None:
    rp = sub.add_parser(
        "report",
        help="write the self-contained HTML reconciliation report of a pipeline",
        description="Plot alignment per window against the target, stream vs batch and late "
        "events per window, the watermark lag with stalls shaded, and list the worst windows "
        "with their late records by host. Reads the tables with delta-rs (no JVM).",
    )
    rp.add_argument("--config", required=True, help="pipeline YAML file")
    rp.add_argument(
        "--out",
        help="HTML file to write (default: the published report, "
        "<warehouse>/<pipeline>/_quality/reconciliation.html, linked from the Airflow view)",
    )
    rp.add_argument("--start", type=_instant, help="first window start, ISO-8601 or epoch ms")
    rp.add_argument("--end", type=_instant, help="range end, exclusive (default: every window)")
    rp.add_argument(
        "--validate",
        action="store_true",
        help=f"run the suites first and summarise them in the report (exit {EXIT_QUALITY} if one fails)",
    )
    rp.add_argument(
        "--spark", action="store_true", help="with --validate: validate the events table with Spark"
    )
    rp.add_argument(
        "--outcome",
        metavar="FILE",
        help="with --validate: also write the validation outcome as JSON to FILE (for Airflow)",
    )
    rp.add_argument(
        "--quality-dir",
        help="GX context and Data Docs directory (default <warehouse>/<pipeline>/_quality)",
    )
    rp.set_defaults(func=cmd_report)


def _add_demo_command(sub) -> None:
    from tidemark.generator import Scenario

    demo = sub.add_parser(
        "demo",
        help="bounded end-to-end run: generate, stream in micro-batches, reconcile, report",
        description="Generate a scenario (10,000 hosts, 20 min, 0.05% lagging 5 min, 1% "
        "duplicates, 0.01% malformed), stream it in several micro-batches, reconcile every "
        "closed window and print the alignment table, the watermark progress and the tables.",
    )
    demo.add_argument(
        "--workdir",
        default="var/demo",
        help="where landing files, checkpoint and tables go (default %(default)s)",
    )
    demo.add_argument(
        "--files-per-batch",
        type=int,
        default=2,
        help="landing files per micro-batch (default %(default)s)",
    )
    demo.add_argument(
        "--keep", action="store_true", help="keep an existing workdir instead of starting clean"
    )
    demo.add_argument(
        "--location",
        help="put landing files, checkpoint and tables under this URI instead (e.g. s3a://bucket/demo; "
        "credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)",
    )
    demo.add_argument("--s3-endpoint", help="with --location: the S3 API's URL (e.g. http://127.0.0.1:19878)")
    demo.add_argument(
        "--s3-path-style",
        action="store_true",
        help="with --location: the bucket in the URL's path (MinIO, moto, s3proxy)",
    )
    _add_scenario_options(demo, Scenario(lag_minutes=5.0))
    demo.set_defaults(func=cmd_demo)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except ConfigError as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # one line for known set-up problems; tracebacks for the rest
        from tidemark.identity import IdentityError
        from tidemark.lease import LeaseError
        from tidemark.status import NotRunError

        if isinstance(exc, NotRunError):
            print(f"tidemark: {exc}", file=sys.stderr)
            return EXIT_NOT_RUN

        if isinstance(exc, LeaseError):
            print(f"tidemark: error: {exc}", file=sys.stderr)
            return EXIT_LEASE
        from tidemark.resources import SetupError
        from tidemark.sources import SourceRangeError

        if isinstance(exc, (SetupError, IdentityError, SourceRangeError)):
            print(f"tidemark: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        raise


if __name__ == "__main__":
    sys.exit(main())
