"""Tidemark's errors: one hierarchy, each class with the exit code ``tidemark`` ends with.

An error a person can act on (a bad argument or config file, missing set-up, storage that cannot be
read, another writer holding the pipeline, a pipeline that has not run yet) is a
:class:`TidemarkError`: the command line prints its message as one line on stderr and exits with
its :attr:`~TidemarkError.exit_code`. Anything else is a bug and ends in a traceback (exit 1).

::

    TidemarkError                      exit 2 unless said otherwise
    ├── UsageError (ValueError)        an argument, a range or a scenario that cannot be used
    │   └── ConfigError                a pipeline config file; the message names file and field
    ├── SetupError (RuntimeError)      the machine or its storage lacks what set-up provides
    │   └── tidemark.object_store.StorageError, tidemark.kafka_access.KafkaAccessError
    ├── tidemark.identity.IdentityError, tidemark.sources.SourceRangeError (RuntimeError)
    ├── LeaseError (RuntimeError)      exit 6: another stream holds, or took, the pipeline's lease
    └── NotRunError                    exit 7: the pipeline has no tables yet

The built-in second bases keep ``except ValueError`` / ``except RuntimeError`` callers working.
This module imports nothing from Tidemark: every other module may raise these.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class ExitCode(IntEnum):
    """The exit codes of ``tidemark`` (1 is left to Python: a traceback, a bug)."""

    OK = 0
    USAGE = 2  # an error in input, config or storage (one line on stderr)
    MISALIGNED = 3  # reconcile --fail-below: a closed window below the alignment given
    STALLED = 4  # watermark --fail-on-stall: the watermark is STALLED
    QUALITY = 5  # validate, report --validate: an expectation fails
    LEASE = 6  # stream: another writer holds the pipeline's lease, or took it over
    NOT_RUN = 7  # the pipeline has no tables yet: nothing written, no JVM started


class TidemarkError(Exception):
    """An error with a one-line message for people; ``exit_code`` is what ``tidemark`` returns."""

    exit_code: ClassVar[ExitCode] = ExitCode.USAGE
    # what the one line says before the message ("tidemark: error: ...")
    label: ClassVar[str] = "error: "

    def one_line(self) -> str:
        """The line the command line prints on stderr."""
        return f"tidemark: {self.label}{self}"


class UsageError(TidemarkError, ValueError):
    """An argument, a time range or a scenario value that cannot be used, or a command that
    cannot run now (``maintain`` while the stream maintains its own tables)."""


class ConfigError(UsageError):
    """A pipeline config that cannot be used; the message is one line naming file and field."""


class SetupError(TidemarkError, RuntimeError):
    """The machine is missing something set-up should have provided."""


class LeaseError(TidemarkError, RuntimeError):
    """The stream may not write: one line for people."""

    exit_code = ExitCode.LEASE


class NotRunError(TidemarkError):
    """The pipeline has no tables yet: its stream has not committed a batch."""

    exit_code = ExitCode.NOT_RUN
    label = ""
