"""The two reconciliation passes of a range: **on time**, once its windows are closed, and
**final**, once they are final (no more revisions).

A window closes when the watermark passes its end and becomes final when it passes its end plus
``window.allowed_lateness`` (:class:`tidemark.windows.TumblingWindows`, the one place the rules
are written). Between the two, late records within the allowed lateness revise it. So the
Airflow reconciliation DAG reconciles each hour twice:

* ``on_time``: as soon as every window of the hour is closed. Its figure is the **on-time
  alignment** (what each window held when it closed, revision 0, against the batch recompute);
  nothing is gated on it, late records may still come.
* ``final``: as soon as every window of the hour is final. Its figure is the **final
  alignment** (the latest revision against the recompute), the one ``reconcile.target`` is
  checked on.

:func:`pass_due` is the decision the sensor and its trigger make (``is_closed`` / ``is_final`` of
the range's last window, which closes and becomes final last). :func:`record_pass` keeps one row
per (range, pass) in the ``reconciliation_passes`` table, replaced when the pass is re-run
(idempotent: catchup, backfill, a cleared task); the per-window rows stay in ``reconciliation``
(the latest pass's). :func:`read_passes` reads them back for the report, the Airflow view, the
gate and the Asset events (delta-rs, no JVM).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.alignment import CLOSED
from tidemark.config import PipelineConfig
from tidemark.errors import UsageError
from tidemark.timeutil import format_instant_ms
from tidemark.windows import TumblingWindows

if TYPE_CHECKING:
    from tidemark.reconcile import ReconcileReport

ON_TIME = "on_time"
FINAL = "final"
PASSES = (ON_TIME, FINAL)
LABELS = {ON_TIME: "on time", FINAL: "final"}


def check_pass(name: str) -> str:
    if name not in PASSES:
        raise UsageError(f"reconcile pass must be one of {', '.join(PASSES)}, got {name!r}")
    return name


def windows_of(config: PipelineConfig) -> TumblingWindows:
    """The pipeline's windows with their allowed lateness."""
    return TumblingWindows(config.window, config.allowed_lateness)


def pass_due(
    windows: TumblingWindows,
    pass_name: str,
    start_ms: int,
    end_ms: int,
    watermark_ms: int | None,
    margin_ms: int = 0,
) -> bool:
    """May ``pass_name`` of ``[start, end)`` run at ``watermark_ms``: is every window of the range
    closed (``on_time``) or final (``final``) by the watermark less ``margin_ms``?

    Windows close and become final in order of their start, so the range's last window (the one
    holding ``end - 1``) decides: :meth:`TumblingWindows.is_closed` or
    :meth:`TumblingWindows.is_final` of it. ``margin_ms`` (``airflow.reconcile_grace``) asks the
    watermark to be that much further along. No watermark yet: never due."""
    check_pass(pass_name)
    if watermark_ms is None or end_ms <= start_ms:
        return False
    last = windows.start_of(end_ms - 1)
    rule = windows.is_closed if pass_name == ON_TIME else windows.is_final
    return bool(rule(last, watermark_ms - margin_ms))


@dataclass(frozen=True)
class PassResult:
    """One pass over a range: a row of the ``reconciliation_passes`` table (fields in table order).

    ``aligned`` and ``worst_alignment`` are the final alignment (latest revision) of the closed
    windows, ``ontime_aligned`` and ``worst_ontime_alignment`` the on-time one (revision 0), both
    against ``target``; ``final`` counts the closed windows already final; ``ok`` is
    :attr:`tidemark.alignment.AlignmentSummary.ok` of the pass's rows."""

    pipeline: str
    pass_name: str
    start_ms: int
    end_ms: int
    reconciled_at_ms: int
    stream_watermark_ms: int | None
    target: float
    windows: int
    closed: int
    final: int
    aligned: int
    ontime_aligned: int
    worst_alignment: float | None
    worst_ontime_alignment: float | None
    stream_events: int
    batch_events: int
    late_events: int
    late_folded: int
    unexplained: int
    ok: bool

    @property
    def label(self) -> str:
        return LABELS[self.pass_name]

    @property
    def alignment(self) -> float | None:
        """The pass's figure: worst on-time alignment for ``on_time``, worst final for ``final``."""
        return self.worst_ontime_alignment if self.pass_name == ON_TIME else self.worst_alignment

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, times as ISO-8601 (the Asset events' extra, the view)."""
        data = asdict(self)
        data["pass"] = data.pop("pass_name")
        for key in ("start_ms", "end_ms", "reconciled_at_ms", "stream_watermark_ms"):
            data[key.removesuffix("_ms")] = format_instant_ms(data[key]) if data[key] is not None else None
        data["alignment"] = self.alignment
        return data


# Each field's Python type ("int", "float", "bool", "str", from its annotation), its Arrow type,
# and the stored names that differ: the table's schema is the row type's.
_TYPES = {f.name: str(f.type).split(" |")[0] for f in fields(PassResult)}
_ARROW = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}
_CASTS: dict[str, Any] = {"int": int, "float": float, "bool": bool, "str": str}
_COLUMN = {"pass_name": "pass"}
PASSES_SCHEMA = pa.schema([(_COLUMN.get(name, name), _ARROW[kind]) for name, kind in _TYPES.items()])


def pass_of(report: ReconcileReport, pass_name: str, reconciled_at_ms: int) -> PassResult:
    """The pass ``pass_name`` a reconcile run (:class:`tidemark.reconcile.ReconcileReport`) made."""
    check_pass(pass_name)
    summary = report.summary()
    # a window's on-time alignment (revision 0); rows from before revisions: their only one
    ontime = [
        w.ontime_alignment if w.ontime_alignment is not None else w.alignment
        for w in report.windows
        if w.status == CLOSED
    ]
    return PassResult(
        pipeline=report.pipeline,
        pass_name=pass_name,
        start_ms=report.start_ms,
        end_ms=report.end_ms,
        reconciled_at_ms=reconciled_at_ms,
        stream_watermark_ms=report.stream_watermark_ms,
        target=report.target,
        windows=len(report.windows),
        closed=summary.closed,
        final=summary.final,
        aligned=summary.aligned,
        ontime_aligned=sum(1 for a in ontime if a is not None and a >= report.target),
        worst_alignment=summary.worst_alignment,
        worst_ontime_alignment=summary.worst_ontime_alignment,
        stream_events=summary.stream_events,
        batch_events=summary.batch_events,
        late_events=summary.late_events,
        late_folded=summary.late_folded,
        unexplained=summary.unexplained,
        ok=summary.ok,
    )


def record_pass(config: PipelineConfig, result: PassResult) -> None:
    """Write ``result`` as the row of its (range, pass), replacing the one a run before wrote."""
    data = pa.Table.from_pylist(
        [{_COLUMN.get(k, k): v for k, v in asdict(result).items()}], schema=PASSES_SCHEMA
    )
    path = config.table_path(S.RECONCILIATION_PASSES)
    if not T.table_exists(path):
        T.write_rs(path, data, mode="append")
        return
    predicate = (
        f"start_ms = {int(result.start_ms)} AND end_ms = {int(result.end_ms)} "
        f"AND pass = '{check_pass(result.pass_name)}'"
    )
    T.write_rs(path, data, mode="overwrite", predicate=predicate)


def read_passes(
    config: PipelineConfig, start_ms: int | None = None, end_ms: int | None = None
) -> list[PassResult]:
    """The recorded passes of ranges overlapping ``[start, end)`` (all without bounds), oldest
    range first and, per range, on time before final; none before the first pass."""
    frame = T.read_if_exists(config, S.RECONCILIATION_PASSES)
    if frame is None or frame.empty:
        return []
    if start_ms is not None:
        frame = frame[frame["end_ms"] > start_ms]
    if end_ms is not None:
        frame = frame[frame["start_ms"] < end_ms]
    records = frame.rename(columns={"pass": "pass_name"}).to_dict("records")
    results = [
        PassResult(**{n: _cast(record.get(n), kind) for n, kind in _TYPES.items()}) for record in records
    ]
    return sorted(results, key=lambda r: (r.start_ms, r.end_ms, PASSES.index(r.pass_name)))


def _cast(value: Any, kind: str) -> Any:
    """A pandas cell as the field holds it: missing (None, NaN) as None, else its field's type."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    return _CASTS[kind](value)


def passes_by_range(passes: list[PassResult]) -> dict[tuple[int, int], dict[str, PassResult]]:
    """``{(start, end): {pass name: result}}``."""
    ranges: dict[tuple[int, int], dict[str, PassResult]] = {}
    for p in passes:
        ranges.setdefault((p.start_ms, p.end_ms), {})[p.pass_name] = p
    return ranges
