"""Deterministic fault injection for the crash tests.

``TIDEMARK_KILL_AT="<point>@<batch_id>"`` makes the streaming job SIGKILL itself when it reaches
``<point>`` in that micro-batch, e.g. ``after:events@2`` right after batch 2's events commit.
Points are named ``before:<table>`` and ``after:<table>`` for every table write of a batch,
``files:<table>`` between a large append's Parquet files and their commit (:mod:`tidemark.filecommit`),
and ``before:properties:<table>`` and ``after:properties:<table>`` around the commit that raises a
table's completeness properties (:mod:`tidemark.completeness`).
Unset in production; reading one environment variable per write costs nothing measurable.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "TIDEMARK_KILL_AT"


def reached(point: str, batch_id: int) -> None:
    target = os.environ.get(ENV)
    if target and target == f"{point}@{batch_id}":
        print(f"[tidemark] fault injection: SIGKILL at {point} in batch {batch_id}", flush=True)
        sys.stdout.flush()
        # The JVM is our child; when we lead our own process group (as the tests arrange),
        # take it down in the same instant, as a machine failure would.
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
