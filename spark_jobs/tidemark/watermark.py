"""The precise watermark, as pure integer math (no Spark).

Definitions (all times are epoch milliseconds):

* A host's **progress** is the latest event time it has delivered. Hosts write in event-time
  order and the collector keeps one host's records in order, so a host at progress ``p`` will
  send nothing earlier than ``p``.
* With a population of ``N`` hosts and precision ``q`` (0 < q <= 1), the **precise watermark**
  is the latest time that at least ``k = ceil(q * N)`` hosts have reached: the k-th largest
  progress. Up to ``N - k`` hosts (floor((1-q)*N) of them) may lag without holding it back;
  one more and the watermark is held by the slowest of the rest.
* Hosts in the population that have not reported count as progress ``-inf``. If fewer than
  ``k`` hosts have reported there is no watermark yet (``None``).
* The published watermark never moves backwards: :class:`MonotonicWatermark` refuses regressions.

Its status at an instant (ADVANCING, STALLED, WAITING) is :mod:`tidemark.watermark_status`; the
per-stage low watermarks are :mod:`tidemark.watermark_stages`.

``k`` is computed with exact rationals: ``0.999 * 10000`` is 9990.000000000002 in binary
floating point, whose ceiling (9991) would silently demand one host too many.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

log = logging.getLogger(__name__)


def required_hosts(population: int, precision: Fraction | float | str) -> int:
    """``ceil(q * N)``: how many hosts must have reached a time for the watermark to pass it."""
    if population < 0:
        raise ValueError(f"population must not be negative, got {population}")
    q = precision if isinstance(precision, Fraction) else Fraction(str(precision))
    if not 0 < q <= 1:
        raise ValueError(f"precision must be in (0, 1], got {precision}")
    return math.ceil(q * population)


def precise_watermark(
    progress: Iterable[int] | np.ndarray,
    precision: Fraction | float | str,
    population: int | None = None,
) -> int | None:
    """The k-th largest host progress, ``k = ceil(q * population)``; None if not enough hosts.

    ``progress`` holds the reported hosts' progress. ``population`` defaults to the number of
    reported hosts; when larger (an expected-host list), the missing hosts count as lagging.
    """
    values = (
        np.fromiter(progress, dtype=np.int64)
        if not isinstance(progress, np.ndarray)
        else (progress.astype(np.int64, copy=False))
    )
    n = len(values) if population is None else population
    if n < len(values):
        raise ValueError(f"population {n} is smaller than the {len(values)} reporting hosts")
    k = required_hosts(n, precision)
    if k == 0 or len(values) < k:
        return None
    # k-th largest == element at index len-k of the ascending order; partition is O(n).
    return int(np.partition(values, len(values) - k)[len(values) - k])


@dataclass(frozen=True, slots=True)
class WatermarkUpdate:
    watermark: int | None
    previous: int | None
    population: int
    required: int
    behind: int  # hosts in the population whose progress is below the watermark

    @property
    def advanced(self) -> bool:
        return self.watermark is not None and (self.previous is None or self.watermark > self.previous)


class MonotonicWatermark:
    """Holds the published watermark and refuses to move it backwards.

    ``offer`` returns True only when the watermark changed, so callers act on change only.
    Not thread-safe: one streaming driver owns one instance.
    """

    def __init__(self, initial: int | None = None) -> None:
        self._value = initial

    @property
    def value(self) -> int | None:
        return self._value

    def offer(self, candidate: int | None) -> bool:
        if candidate is None:
            return False
        if self._value is not None and candidate < self._value:
            log.info("watermark regression refused: %s < %s", candidate, self._value)
            return False
        changed = candidate != self._value
        self._value = candidate
        return changed


def update_watermark(
    progress: Mapping[str, int] | np.ndarray,
    precision: Fraction | float | str,
    previous: int | None,
    population: int | None = None,
    *,
    propagated: bool = False,
    upstream_watermark: int | None = None,
) -> WatermarkUpdate:
    """One watermark step, never below ``previous``.

    The candidate is the precise watermark over ``progress`` (a host->progress mapping or the
    array of the population's reporting hosts), or, for a pipeline fed by another pipeline
    (``propagated``), the upstream's low watermark. ``behind`` counts population hosts below the
    result, silent expected hosts included.
    """
    values = (
        progress.astype(np.int64, copy=False)
        if isinstance(progress, np.ndarray)
        else np.fromiter(progress.values(), dtype=np.int64, count=len(progress))
    )
    n = len(values) if population is None else population
    candidate = upstream_watermark if propagated else precise_watermark(values, precision, n)
    state = MonotonicWatermark(previous)
    state.offer(candidate)
    wm = state.value
    missing = n - len(values)
    behind = missing + (int(np.count_nonzero(values < wm)) if wm is not None else len(values))
    return WatermarkUpdate(
        watermark=wm,
        previous=previous,
        population=n,
        required=required_hosts(n, precision),
        behind=behind,
    )
