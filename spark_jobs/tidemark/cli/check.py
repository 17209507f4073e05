"""``tidemark reconcile``, ``watermark``, ``validate`` and ``report``: the commands that check a
pipeline's output (recompute-and-diff, the watermark's state, the expectation suites, the report).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark import schemas as S
from tidemark import sparkenv
from tidemark.cli.common import (
    ExitCode,
    check_has_run,
    check_options_range,
    echo,
    fraction,
    instant,
)
from tidemark.config import PipelineConfig, load_config
from tidemark.errors import ConfigError, UsageError
from tidemark.timeutil import format_instant_ms
from tidemark.unexplained import DEFAULT_MAX_WINDOWS, DEFAULT_SAMPLE

if TYPE_CHECKING:
    from tidemark.reconcile import ReconcileReport

# ---------------------------------------------------------------------------------------------
# reconcile
# ---------------------------------------------------------------------------------------------


def _reconcile_range(config: PipelineConfig, args: argparse.Namespace) -> tuple[int, int]:
    """``--start``/``--end``, an open end filled from the committed windows."""
    from tidemark.stream_side import default_range

    check_options_range("reconcile", args.start, args.end)
    if args.start is not None and args.end is not None:
        return args.start, args.end
    committed = default_range(config)
    if committed is None:
        path = config.table_path(S.WINDOWS)
        raise UsageError(f"reconcile: no windows table at {path} yet; give --start and --end")
    start = args.start if args.start is not None else committed[0]
    end = args.end if args.end is not None else committed[1]
    check_options_range("reconcile", start, end)
    return start, end


def _misaligned(report: ReconcileReport, fail_below: float | None) -> int:
    """``--fail-below``: :attr:`ExitCode.MISALIGNED` unless the interval is ok at that bound
    (:attr:`tidemark.alignment.AlignmentSummary.ok`, the Airflow gate's verdict: no closed window
    below it, nothing unexplained); the line names the first window below, or the unexplained."""
    if fail_below is None:
        return ExitCode.OK
    summary = report.summary(fail_below)
    if summary.ok:
        return ExitCode.OK
    below = summary.misaligned_ms
    print(
        f"tidemark: {len(below)} window(s) below {fail_below}, first at {format_instant_ms(below[0])}"
        if below
        else f"tidemark: {summary.unexplained:,} record(s) unexplained (counted twice or missing)",
        file=sys.stderr,
    )
    return ExitCode.MISALIGNED


def cmd_reconcile(args: argparse.Namespace) -> int:
    from tidemark.reconcile import reconcile

    config = load_config(args.config)
    check_has_run(config)  # before a JVM starts
    start, end = _reconcile_range(config, args)
    spark = sparkenv.session_for(config, "reconcile")
    if not args.json:
        echo(f"[{config.pipeline}] reconciling {format_instant_ms(start)} .. {format_instant_ms(end)}")
    report = reconcile(
        spark,
        config,
        start,
        end,
        target=args.target,
        write=not args.dry_run,
        sample=args.sample_records,
        max_windows=args.examine_windows,
    )
    if report.examined:  # the records behind a difference were looked up in events
        from tidemark.lineage import note_read

        note_read(S.EVENTS)
    if args.reconcile_pass and not args.dry_run:
        from tidemark.passes import pass_of, record_pass
        from tidemark.timeutil import now_ms

        record_pass(config, pass_of(report, args.reconcile_pass, now_ms()))
    echo(report.to_json() if args.json else report.table())
    return _misaligned(report, args.fail_below)


def add_reconcile_command(sub: argparse._SubParsersAction) -> None:
    rc = sub.add_parser(
        "reconcile",
        help="recompute windows in batch from the raw source and diff them with the stream",
        description="Recompute [start, end) from the raw source with the stream's own parsing "
        "and aggregation code, diff per window, write the reconciliation table and print it.",
    )
    _add_range_options(rc)
    rc.add_argument(
        "--target",
        type=fraction,
        help="alignment target (default: the config's reconcile.target, 0.999)",
    )
    rc.add_argument("--json", action="store_true", help="print the result as JSON for machines")
    rc.add_argument(
        "--fail-below",
        type=fraction,
        metavar="ALIGNMENT",
        help=f"exit with code {ExitCode.MISALIGNED:d} unless the interval is ok at this target (the "
        "Airflow gate's verdict): a closed window's alignment below it, or any record unexplained",
    )
    rc.add_argument(
        "--dry-run",
        action="store_true",
        help="print only; do not write the reconciliation table nor add to the landing index",
    )
    rc.add_argument(
        "--pass",
        dest="reconcile_pass",
        choices=("on_time", "final"),
        help="also record the run as this pass of the range in the reconciliation_passes table "
        "(replacing the pass's row): on_time once its windows are closed, final once they are "
        "final (what the Airflow reconciliation DAG runs)",
    )
    rc.add_argument(
        "--sample-records",
        type=_count,
        default=DEFAULT_SAMPLE,
        metavar="N",
        help="records listed per window and kind (missing from events, extra in it) behind an "
        "unexplained difference; the totals are always exact (default %(default)s)",
    )
    rc.add_argument(
        "--examine-windows",
        type=_count,
        default=DEFAULT_MAX_WINDOWS,
        metavar="N",
        help="closed windows with an unexplained difference whose records are looked for, the "
        "largest differences first; the others are named as not examined (default %(default)s)",
    )
    rc.set_defaults(func=cmd_reconcile)


def _add_range_options(parser: argparse.ArgumentParser) -> None:
    """The pipeline and the range reconciled: --config, --start, --end."""
    parser.add_argument("--config", required=True, help="pipeline YAML file")
    parser.add_argument(
        "--start",
        type=instant,
        help="range start, ISO-8601 or epoch ms (default: first committed window)",
    )
    parser.add_argument(
        "--end",
        type=instant,
        help="range end, exclusive (default: end of the last committed window)",
    )


def _count(text: str) -> int:
    """A whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


# ---------------------------------------------------------------------------------------------
# watermark
# ---------------------------------------------------------------------------------------------


def cmd_watermark(args: argparse.Namespace) -> int:
    from tidemark.status import read_status

    config = load_config(args.config)
    check_has_run(config)
    status = read_status(config)
    if args.json:
        echo(json.dumps(status.to_dict(args.limit), indent=2))
    else:
        echo(status.text(args.limit))
    stalled = args.fail_on_stall and status.status.state == "STALLED"
    return ExitCode.STALLED if stalled else ExitCode.OK


def add_watermark_command(sub: argparse._SubParsersAction) -> None:
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
        help=f"exit with code {ExitCode.STALLED:d} when the watermark is STALLED",
    )
    wm.set_defaults(func=cmd_watermark)


# ---------------------------------------------------------------------------------------------
# validate / report (data quality: tidemark.quality, tidemark.report)
# ---------------------------------------------------------------------------------------------


def _threshold(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        if not sep or not name.strip():
            raise ValueError
        return name.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=NUMBER, got {text!r}") from None


def _quality_failed(outcome: Any) -> int:
    """:attr:`ExitCode.QUALITY`, naming the failing expectations on stderr."""
    print(
        f"tidemark: {len(outcome.failing)} expectation(s) failing: {', '.join(outcome.failing)}",
        file=sys.stderr,
    )
    return ExitCode.QUALITY


def cmd_validate(args: argparse.Namespace) -> int:
    from tidemark.quality import validate_pipeline

    config = load_config(args.config)
    check_has_run(config)  # before a JVM starts or the GX context is made
    check_options_range("validate", args.start, args.end)
    spark = sparkenv.session_for(config, "validate") if args.spark else None
    outcome = validate_pipeline(
        config,
        args.start,
        args.end,
        spark=spark,
        thresholds=dict(args.threshold or []),
        quality_dir=args.quality_dir,
        build_docs=not args.no_docs,
    )
    echo(outcome.to_json() if args.json else outcome.text())
    return _quality_failed(outcome) if not outcome.success else ExitCode.OK


def add_validate_command(sub: argparse._SubParsersAction) -> None:
    va = sub.add_parser(
        "validate",
        help="run the Great Expectations suites (expectations/) over a pipeline's tables",
        description="Validate raw events, micro-batches, windows, reconciliation and the watermark "
        "with the suites in expectations/, store the results and rebuild the Data Docs. Exit "
        f"{ExitCode.QUALITY:d} naming the failing expectations when a suite fails. Without --spark it "
        "reads the tables with delta-rs and starts no JVM.",
    )
    va.add_argument("--config", required=True, help="pipeline YAML file")
    va.add_argument("--start", type=instant, help="range start (event time), ISO-8601 or epoch ms")
    va.add_argument("--end", type=instant, help="range end, exclusive (default: everything)")
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


def _validate_for_report(config: PipelineConfig, args: argparse.Namespace) -> Any:
    """``report --validate``: the suites' outcome, also written to ``--outcome`` (for Airflow)."""
    from tidemark.quality import validate_pipeline

    spark = sparkenv.session_for(config, "quality") if args.spark else None
    outcome = validate_pipeline(config, args.start, args.end, spark=spark, quality_dir=args.quality_dir)
    if args.outcome:
        from tidemark.liveness import write_json_atomic

        written = {**json.loads(outcome.to_json()), "text": outcome.text(), "samples": outcome.samples}
        write_json_atomic(Path(args.outcome), json.loads(json.dumps(written, default=str)))
    return outcome


def cmd_report(args: argparse.Namespace) -> int:
    from tidemark.quality_site import data_docs_index
    from tidemark.report import range_report_path, report_path, write_report

    config = load_config(args.config)
    if (args.spark or args.outcome) and not args.validate:
        raise ConfigError("report: --spark and --outcome need --validate")
    check_has_run(config)
    check_options_range("report", args.start, args.end)
    docs = data_docs_index(config, args.quality_dir)
    outcome = _validate_for_report(config, args) if args.validate else None
    targets = [Path(args.out)] if args.out is not None else [report_path(config, args.quality_dir)]
    if args.out is None and args.start is not None and args.end is not None:
        # a range (a scheduled run's hour) is also published on its own page, which stays
        targets.insert(0, range_report_path(config, args.start, args.end, args.quality_dir))
    for target in targets:
        path = write_report(
            config, target, args.start, args.end, outcome=outcome, docs_index=docs if docs.is_file() else None
        )
        echo(f"[{config.pipeline}] reconciliation report: {path}")
    if docs.is_file():
        echo(f"[{config.pipeline}] data docs: {docs}")
    return _quality_failed(outcome) if outcome is not None and not outcome.success else ExitCode.OK


def add_report_command(sub: argparse._SubParsersAction) -> None:
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
    rp.add_argument("--start", type=instant, help="first window start, ISO-8601 or epoch ms")
    rp.add_argument("--end", type=instant, help="range end, exclusive (default: every window)")
    rp.add_argument(
        "--validate",
        action="store_true",
        help="run the suites first and summarise them in the report "
        f"(exit {ExitCode.QUALITY:d} if one fails)",
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
