"""``tidemark completeness``: what a pipeline table claims complete and final, read from the
table's own Delta metadata (:mod:`tidemark.completeness`), as any Delta reader would. No JVM."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from tidemark import schemas as S
from tidemark.cli.common import ExitCode, check_has_run, echo, instant
from tidemark.config import load_config
from tidemark.timeutil import MS_PER_HOUR, format_duration_ms, format_instant_ms

if TYPE_CHECKING:
    from tidemark.completeness import Completeness

# The tables whose commits carry a claim (only windows has the properties).
TABLES = (S.WINDOWS, S.EVENTS, S.LATE_EVENTS)


def hour_of(ms: int) -> tuple[int, int]:
    """The UTC hour ``[start, end)`` holding the instant ``ms``."""
    start = ms - ms % MS_PER_HOUR
    return start, start + MS_PER_HOUR


def _text(pipeline: str, table: str, claim: Completeness) -> str:
    if claim.watermark_ms is None:
        return f"[{pipeline}] {table}: nothing claimed complete yet"
    where = "table properties" if claim.source == "properties" else "commit userMetadata"
    size = f"{format_duration_ms(claim.window_ms)} windows, " if claim.window_ms else ""
    return (
        f"[{pipeline}] {table}: complete through {format_instant_ms(claim.watermark_ms)}, final through "
        f"{format_instant_ms(claim.final_through_ms)} ({size}batch {claim.batch_id}, "
        f"version {claim.version}, from the {where})"
    )


def cmd_completeness(args: argparse.Namespace) -> int:
    from tidemark import tables as T
    from tidemark.completeness import Completeness, completeness

    config = load_config(args.config)
    check_has_run(config)
    path = config.table_path(args.table)
    claim = completeness(path) if T.table_exists(path) else Completeness()
    found: dict[str, Any] = {
        "pipeline": config.pipeline,
        "table": args.table,
        "path": path,
        **claim.to_dict(),
    }
    lines = [_text(config.pipeline, args.table, claim)]
    if args.hour is not None:
        start, end = hour_of(args.hour)
        complete, final = claim.is_complete(start, end), claim.is_final(start, end)
        found["hour"] = {
            "start": format_instant_ms(start),
            "end": format_instant_ms(end),
            "start_ms": start,
            "end_ms": end,
            "complete": complete,
            "final": final,
        }
        lines.append(
            f"[{config.pipeline}] hour {format_instant_ms(start)} .. {format_instant_ms(end)}: "
            f"{'complete' if complete else 'not complete'}, {'final' if final else 'not final'}"
        )
    echo(json.dumps(found, indent=2) if args.json else "\n".join(lines))
    return ExitCode.OK


def add_completeness_command(sub: argparse._SubParsersAction) -> None:
    cp = sub.add_parser(
        "completeness",
        help="print how far a table is complete and final, as its own Delta metadata says (no Spark)",
        description="Print what a pipeline table claims in its own Delta metadata: complete (every "
        "window ending at or before the watermark closed) and final (no more revisions) through which "
        "instants, from the table properties tidemark.watermark and tidemark.final_through (windows) "
        "or its newest commit's userMetadata (events, late_events); with --hour, whether that hour is "
        "complete and final. Reads the Delta log with delta-rs; starts no JVM.",
    )
    cp.add_argument("--config", required=True, help="pipeline YAML file")
    cp.add_argument("--table", choices=TABLES, default=S.WINDOWS, help="the table (default %(default)s)")
    cp.add_argument(
        "--hour",
        type=instant,
        help="an instant, ISO-8601 or epoch ms: is the UTC hour holding it complete, and final?",
    )
    cp.add_argument("--json", action="store_true", help="print the answer as JSON for machines")
    cp.set_defaults(func=cmd_completeness)
