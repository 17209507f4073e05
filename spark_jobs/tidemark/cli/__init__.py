"""``tidemark``: the command line.

Sub-commands, one module each (a command's options beside its handler): ``generate`` and ``demo``
(:mod:`.scenario`), ``stream``, ``maintain`` and ``jvm-archive`` (:mod:`.run`), ``reconcile``,
``watermark``, ``validate`` and ``report`` (:mod:`.check`), ``completeness``
(:mod:`.completeness`), ``schema`` (:mod:`.schema`); what they share is in :mod:`.common`. A
:class:`tidemark.errors.TidemarkError` (bad input or config, object storage that cannot be read,
another writer, a pipeline that has not run yet) ends the command with one line on stderr and its
exit code (:class:`tidemark.errors.ExitCode`), before any JVM where it can; any other exception is
a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from typing import NoReturn

from tidemark.cli.check import (
    add_reconcile_command,
    add_report_command,
    add_validate_command,
    add_watermark_command,
)
from tidemark.cli.completeness import add_completeness_command
from tidemark.cli.run import add_jvm_archive_command, add_maintain_command, add_stream_command
from tidemark.cli.scenario import add_demo_command, add_generate_command
from tidemark.cli.schema import add_schema_command
from tidemark.errors import ExitCode, TidemarkError

__all__ = [
    "EXIT_LEASE",
    "EXIT_MISALIGNED",
    "EXIT_NOT_RUN",
    "EXIT_QUALITY",
    "EXIT_STALLED",
    "EXIT_USAGE",
    "ExitCode",
    "build_parser",
    "console",
    "exit_now",
    "main",
]

# the exit codes under their earlier names
EXIT_USAGE = ExitCode.USAGE
EXIT_MISALIGNED = ExitCode.MISALIGNED
EXIT_STALLED = ExitCode.STALLED
EXIT_QUALITY = ExitCode.QUALITY
EXIT_LEASE = ExitCode.LEASE
EXIT_NOT_RUN = ExitCode.NOT_RUN

COMMANDS = (
    add_generate_command,
    add_stream_command,
    add_reconcile_command,
    add_maintain_command,
    add_watermark_command,
    add_completeness_command,
    add_validate_command,
    add_report_command,
    add_demo_command,
    add_jvm_archive_command,
    add_schema_command,
)


def _version() -> str:
    """The installed distribution's version (pyproject's ``version``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tidemark")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The ``tidemark`` parser with every sub-command; each sets ``func``, its handler."""
    parser = argparse.ArgumentParser(
        prog="tidemark",
        description="Exactly-once streaming with a precise watermark, reconciled against batch.",
        epilog=f"Exit codes: 0 done; {ExitCode.USAGE:d} an error in input, config or storage (one line "
        f"on stderr); {ExitCode.MISALIGNED:d} reconcile --fail-below; {ExitCode.STALLED:d} watermark "
        f"--fail-on-stall; {ExitCode.QUALITY:d} a failing expectation; {ExitCode.LEASE:d} another "
        f"stream holds the lease; {ExitCode.NOT_RUN:d} the pipeline has not run yet (no tables under "
        "its warehouse): watermark, completeness, report, validate, maintain and reconcile say so in "
        "one line, write nothing and start no JVM.",
    )
    parser.add_argument("--version", action="version", version=f"tidemark {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code (a :class:`TidemarkError` is one line on stderr)."""
    args = build_parser().parse_args(argv)
    try:
        with _job_lineage(args) as ended:
            code = int(args.func(args) or 0)
            ended(code)
        return code
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except TidemarkError as exc:
        print(exc.one_line(), file=sys.stderr)
        return int(exc.exit_code)


def console(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``tidemark`` process (the console script, ``python -m tidemark.cli`` and the jobs'
    spark-submit entrypoints): :func:`main`, then the process ends with its exit code.

    It ends through ``os._exit`` once the Python ``atexit`` functions have run and stdout and
    stderr are flushed, skipping the interpreter's and the C++ runtime's teardown: Arrow's and
    delta-rs's native thread pools can still be alive then, and a ``std::thread`` destroyed while
    joinable aborts the process (``terminate called without an active exception``, exit -6) after
    the command has done its work (seen 1 in 32 runs of ``tidemark watermark`` under load). An
    exception ``main`` does not handle still ends the ordinary way, with its traceback."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors, --help, --version
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` after the ``atexit`` functions and a flush of stdout and
    stderr, without the native teardown (see :func:`console`)."""
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with suppress(OSError, ValueError):  # closed (a BrokenPipeError closes stderr)
                stream.flush()
        os._exit(code)


def _job_lineage(args: argparse.Namespace) -> AbstractContextManager[Callable[[int], None]]:
    """The OpenLineage run of a command that runs a job (:mod:`tidemark.lineage`: START now,
    COMPLETE or FAIL with the exit code it is told); for any other command, or a config that does
    not load (the command says why), nothing."""
    from tidemark import lineage
    from tidemark.config import load_config

    command = getattr(args, "command", None)  # a Namespace built by hand (tests) may have none
    if (
        command not in lineage.JOB_COMMANDS
        or (command == "report" and not getattr(args, "validate", False))
        or (command == "maintain" and getattr(args, "dry_run", False))
    ):
        return nullcontext(lambda code: None)
    try:
        config = load_config(args.config)
    except Exception:
        return nullcontext(lambda code: None)
    return lineage.job_run(config, command, (getattr(args, "start", None), getattr(args, "end", None)))
