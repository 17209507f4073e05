"""A pipeline's low watermark per stage (source -> window operator -> sink), as pure math.

:class:`WatermarkServer` is not a process: it is the centralised low-watermark table of design
section 4.1, kept by the streaming driver and persisted in every batch's commit marker
(``stages``). All times are epoch milliseconds; ``None`` means "none yet".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)


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
        return json.dumps({s: [m.input_lw, m.output_lw] for s, m in self.marks.items()})

    @classmethod
    def from_json(cls, upstreams: Mapping[str, Iterable[str]], text: str | None) -> WatermarkServer:
        marks = {s: StageMark(*v) for s, v in json.loads(text).items()} if text else None
        return cls(upstreams, marks)


# The stages of a Tidemark pipeline: source -> window operator -> sink.
PIPELINE_STAGES: dict[str, tuple[str, ...]] = {"source": (), "window": ("source",), "sink": ("window",)}
