"""The watermark's status at one instant, as pure math (no Spark): ADVANCING, STALLED or WAITING.

With a population of ``N`` hosts and precision ``q``, up to ``floor((1-q) * N)`` hosts may lag.
A host **lags** when it is more than ``lag_threshold`` behind the median reporting host (the
**frontier**), or when it is expected and has sent nothing. The watermark is

* **WAITING** while there is none (fewer than ``ceil(q * N)`` hosts have reported);
* **STALLED** when it has not advanced for ``stall_after`` while more than ``floor((1-q) * N)``
  hosts lag (:func:`classify`);
* **ADVANCING** otherwise.

:func:`evaluate_status` classifies from the hosts' progress; :func:`classify` is the rule alone,
which a reader of the commit marker applies to the counts the marker recorded
(:mod:`tidemark.committed`). All times are epoch milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from tidemark.watermark import required_hosts

ADVANCING = "ADVANCING"
STALLED = "STALLED"
WAITING = "WAITING"  # fewer than ceil(q*N) hosts have reported: no watermark yet


@dataclass(frozen=True, slots=True)
class LaggingHost:
    host: str
    progress_ms: int | None  # None: an expected host that has sent nothing
    lag_ms: int | None  # behind the median host; None when it has sent nothing


@dataclass(frozen=True, slots=True)
class WatermarkStatus:
    """What an operator needs to know about a pipeline's watermark at one instant."""

    state: str
    watermark_ms: int | None
    frontier_ms: int | None  # median progress of the reporting expected hosts
    since_advance_ms: int | None  # processing time since the watermark last moved
    hosts_total: int
    hosts_reporting: int
    allowed_lagging: int  # floor((1-q) * N)
    lagging: tuple[LaggingHost, ...]  # worst first

    @property
    def hosts_lagging(self) -> int:
        return len(self.lagging)


def classify(
    watermark_ms: int | None,
    since_advance_ms: int | None,
    lagging: int,
    allowed_lagging: int,
    stall_after_ms: int,
) -> str:
    """The state of a watermark: WAITING without one; STALLED when it has not advanced for
    ``stall_after_ms`` (``since_advance_ms`` ago) while more than ``allowed_lagging`` hosts lag;
    else ADVANCING."""
    if watermark_ms is None:
        return WAITING
    if since_advance_ms is not None and since_advance_ms >= stall_after_ms and lagging > allowed_lagging:
        return STALLED
    return ADVANCING


def evaluate_status(
    hosts: Iterable[str] | np.ndarray,
    progress_ms: Iterable[int] | np.ndarray,
    precision: Fraction | float | str,
    watermark_ms: int | None,
    advanced_at_ms: int | None,
    now_ms: int,
    lag_threshold_ms: int,
    stall_after_ms: int,
    expected: frozenset[str] | set[str] | None = None,
    silent: Sequence[str] = (),
) -> WatermarkStatus:
    """Classify the watermark: STALLED when it has not advanced for ``stall_after`` while more
    than ``floor((1-q) * N)`` of the population lag (are more than ``lag_threshold`` behind the
    median host, or have sent nothing). Lagging hosts are listed worst first.

    ``hosts``/``progress_ms`` are parallel arrays of the reporting hosts' progress; vectorised,
    so a million hosts cost milliseconds, not a Python loop each. The population is either
    ``expected`` (the reporting hosts are filtered by it here) or, when the caller has filtered
    them already, the reporting hosts plus ``silent`` (expected hosts that sent nothing)."""
    names = np.asarray(list(hosts) if not isinstance(hosts, np.ndarray) else hosts, dtype=object)
    values = np.asarray(
        list(progress_ms) if not isinstance(progress_ms, np.ndarray) else progress_ms, dtype=np.int64
    )
    if expected is not None:
        keep = np.fromiter((h in expected for h in names), dtype=bool, count=len(names))
        names, values = names[keep], values[keep]
        silent = sorted(set(expected).difference(names.tolist()))
    n = len(values) + len(silent)
    allowed = n - required_hosts(n, precision) if n else 0
    frontier = int(np.median(values)) if len(values) else None
    lagging = [LaggingHost(h, None, None) for h in silent]
    if frontier is not None:
        behind = np.flatnonzero(frontier - values > lag_threshold_ms)
        order = behind[np.lexsort((names[behind].astype(str), values[behind]))]
        lagging += [
            LaggingHost(str(names[i]), int(values[i]), int(frontier - values[i])) for i in order.tolist()
        ]
    since = None if advanced_at_ms is None else max(0, now_ms - advanced_at_ms)
    return WatermarkStatus(
        state=classify(watermark_ms, since, len(lagging), allowed, stall_after_ms),
        watermark_ms=watermark_ms,
        frontier_ms=frontier,
        since_advance_ms=since,
        hosts_total=n,
        hosts_reporting=len(values),
        allowed_lagging=allowed,
        lagging=tuple(lagging),
    )
