"""What every ``tidemark`` command shares: exit codes, output, option types, the has-run check.

Command modules import this, never their package (``tidemark.cli``), which imports them.
"""

from __future__ import annotations

import argparse
import sys

from tidemark.config import PipelineConfig
from tidemark.errors import ExitCode, UsageError
from tidemark.timeutil import check_range, format_instant_ms, parse_instant_ms

__all__ = [
    "ExitCode",
    "check_has_run",
    "check_options_range",
    "echo",
    "echo_stderr",
    "fraction",
    "instant",
]


def echo(message: str) -> None:
    """A line on stdout, flushed (progress must show while a long command runs)."""
    print(message, flush=True)


def echo_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def instant(text: str) -> int:
    """An option's instant, ISO-8601 or epoch ms, as epoch milliseconds."""
    try:
        return parse_instant_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def fraction(text: str) -> float:
    """An option's number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def check_options_range(command: str, start_ms: int | None, end_ms: int | None) -> None:
    """``--start``/``--end`` that hold no instant: one line naming the command and its options."""
    try:
        check_range(start_ms, end_ms)
    except UsageError:
        raise UsageError(
            f"{command}: --end ({format_instant_ms(end_ms)}) must be after "
            f"--start ({format_instant_ms(start_ms)})"
        ) from None


def check_has_run(config: PipelineConfig) -> None:
    """Every command that reads a pipeline's tables answers a pipeline that never ran the same way:
    one line, exit :attr:`ExitCode.NOT_RUN`, nothing written, no JVM (tidemark.status)."""
    from tidemark.status import check_has_run as has_run

    has_run(config)
