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

``k`` is computed with exact rationals: ``0.999 * 10000`` is 9990.000000000002 in binary
floating point, whose ceiling (9991) would silently demand one host too many.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from tidemark.progress import HostProgress

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
    if watermark_ms is None:
        state = WAITING
    elif since is not None and since >= stall_after_ms and len(lagging) > allowed:
        state = STALLED
    else:
        state = ADVANCING
    return WatermarkStatus(
        state=state,
        watermark_ms=watermark_ms,
        frontier_ms=frontier,
        since_advance_ms=since,
        hosts_total=n,
        hosts_reporting=len(values),
        allowed_lagging=allowed,
        lagging=tuple(lagging),
    )


def merge_progress(current: Mapping[str, int], batch: Mapping[str, int]) -> dict[str, int]:
    """Per-host maximum of host progress: a host's progress never goes back. The mapping form of
    what the stream runs, :meth:`tidemark.progress.HostProgress.advance` (the same code)."""
    advanced = HostProgress.from_mapping(current).advance(list(batch), list(batch.values()), 1)
    return advanced.progress.as_dict()


@dataclass(frozen=True, slots=True)
class StageMark:
    input_lw: int | None
    output_lw: int | None


class WatermarkServer:
    """A pipeline's centralised low-watermark table (design section 4.1).

    Stages are given upstream first, each with its upstream stages. For every stage:

    * ``InputLW(stage) = min(OutputLW(u) for u in upstreams)``; a stage with no upstream takes the
      source watermark (the precise host watermark, or an upstream pipeline's propagated one);
    * ``OutputLW(stage) = min(InputLW(stage), OldestWork(stage))``, where ``None`` oldest work means
      nothing unfinished;
    * ``GlobalLW = min(OutputLW(stage) for all stages)``.

    ``None`` as a low watermark means "none yet" and sorts below every time. No value ever moves
    backwards: a regression is refused with a log line and the previous value kept, which is what
    makes the state safe to persist every batch and recover on restart. ``update`` returns True
    when the global low watermark changed. Not thread-safe: one streaming driver owns it.
    """

    def __init__(
        self, upstreams: Mapping[str, Iterable[str]], marks: Mapping[str, StageMark] | None = None
    ) -> None:
        self.upstreams = {stage: tuple(ups) for stage, ups in upstreams.items()}
        known: set[str] = set()
        for stage, ups in self.upstreams.items():
            missing = [u for u in ups if u not in known]
            if missing:
                raise ValueError(f"stage {stage!r}: upstream {missing[0]!r} must be listed before it")
            known.add(stage)
        self.marks: dict[str, StageMark] = {s: StageMark(None, None) for s in self.upstreams}
        self.marks.update(marks or {})

    @staticmethod
    def _min(values: Iterable[int | None]) -> int | None:
        values = list(values)
        return None if not values or any(v is None for v in values) else min(values)  # type: ignore[type-var]

    @staticmethod
    def _forward(stage: str, kind: str, old: int | None, new: int | None) -> int | None:
        if new is None or (old is not None and new < old):
            if new is not None:
                log.info("stage %s %s regression refused: %s < %s", stage, kind, new, old)
            return old
        return new

    @property
    def global_low_watermark(self) -> int | None:
        return self._min(m.output_lw for m in self.marks.values())

    def update(self, source_watermark: int | None, oldest_work: Mapping[str, int | None]) -> bool:
        before = self.global_low_watermark
        for stage, ups in self.upstreams.items():
            proposed_in = self._min(self.marks[u].output_lw for u in ups) if ups else source_watermark
            old = self.marks[stage]
            input_lw = self._forward(stage, "input", old.input_lw, proposed_in)
            work = oldest_work.get(stage)
            proposed_out = input_lw if work is None or input_lw is None else min(input_lw, work)
            self.marks[stage] = StageMark(
                input_lw, self._forward(stage, "output", old.output_lw, proposed_out)
            )
        return self.global_low_watermark != before

    def to_json(self) -> str:
        import json

        return json.dumps({s: [m.input_lw, m.output_lw] for s, m in self.marks.items()})

    @classmethod
    def from_json(cls, upstreams: Mapping[str, Iterable[str]], text: str | None) -> WatermarkServer:
        import json

        marks = {s: StageMark(*v) for s, v in json.loads(text).items()} if text else None
        return cls(upstreams, marks)


# The stages of a Tidemark pipeline: source -> window operator -> sink.
PIPELINE_STAGES: dict[str, tuple[str, ...]] = {"source": (), "window": ("source",), "sink": ("window",)}
