"""One reconciled window, and the verdict over an interval of them.

:class:`WindowResult` is the one shape of a ``reconciliation`` row: the recompute builds it, the
table's Arrow schema (:data:`RECONCILIATION_SCHEMA`) and the writer's columns come from its fields,
and the report, the Airflow side and the data-quality frames read rows back as it
(:func:`normalized`, :func:`window_results`). A new column is a new field here (with its Arrow type
and, when older rows lack it, the value they stand for) and, where shown, a renderer.

Per window (summed over keys), the stream's side at its latest revision:

* ``stream_events`` the stream's latest revision; ``batch_events`` the recompute;
  ``late_events`` late records the stream did not fold in (beyond ``allowed_lateness``);
* ``abs_diff`` ``sum_k |stream_k - batch_k|``; ``alignment`` ``1 - abs_diff / batch_events`` (1.0
  when both are empty; None while the window is open); ``aligned`` ``alignment >= target``;
* ``unexplained`` ``batch - stream - late``: 0 when exactly-once holds;
* ``ontime_events`` / ``ontime_alignment`` what revision 0 held when the window closed;
  ``late_folded`` late records folded into revisions; ``revisions`` rows after the first;
  ``final`` the watermark passed window end + allowed lateness;
* ``missing_records`` / ``extra_records`` / ``record_sample``: for a closed window with something
  unexplained, the records behind it (:mod:`tidemark.unexplained`): copies the recompute holds and
  the stream's ``events`` table does not, copies ``events`` holds beyond the recompute's, and a
  sample of them (:class:`RecordDiff`); None, None and empty when the window was not examined
  (nothing unexplained, or beyond the bound of windows examined per run).

:class:`AlignmentSummary` measures the closed windows against a target; its :attr:`~AlignmentSummary.ok`
is the one verdict on an interval (the Airflow gate, ``tidemark reconcile --fail-below``, the
report's headline). Pure: pandas and pyarrow, no Spark, no table I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from tidemark.schemas import TS_US
from tidemark.timeutil import format_instant_ms

if TYPE_CHECKING:
    import pandas as pd

CLOSED = "closed"
OPEN = "open"
HOSTS_PER_EXPLANATION = 5
MISSING = "missing"  # a record the recompute holds and the stream's events table does not
EXTRA = "extra"  # a record events holds and the recompute does not, or more times than it counts


@dataclass(frozen=True)
class RecordDiff:
    """A record behind an unexplained difference: ``copies`` of it missing from the stream's
    ``events`` table (``kind`` :data:`MISSING`) or held there beyond the recompute's count
    (:data:`EXTRA`: a record the raw input does not have, or one stored twice). ``source`` is where
    the record is: the landing file (as Spark names it) or ``topic/partition@offset``, read from
    the raw input for a missing record and from ``events`` for an extra one; ``batch_id`` the
    batch that stored an extra one (None for a missing one)."""

    kind: str
    event_id: str
    host: str
    event_time: int
    key: str | None
    copies: int
    source: str | None
    batch_id: int | None = None

    @property
    def iso(self) -> str:
        return format_instant_ms(self.event_time)


# The stored sample's Arrow type: a list of RecordDiff as structs (fields in order).
RECORD_TYPE = pa.struct(
    [
        ("kind", pa.string()),
        ("event_id", pa.string()),
        ("host", pa.string()),
        ("event_time", pa.int64()),
        ("key", pa.string()),
        ("copies", pa.int64()),
        ("source", pa.string()),
        ("batch_id", pa.int64()),
    ]
)


def _records_stored(sample: Sequence[RecordDiff]) -> list[dict[str, Any]]:
    return [asdict(r) for r in sample]


def _records_read(value: Any) -> tuple[RecordDiff, ...]:
    """A stored sample cell (a list or array of structs as dicts, RecordDiffs, or missing) as the
    row holds it."""
    if value is None or (isinstance(value, float) and value != value):
        return ()
    out = []
    for item in value:
        if isinstance(item, RecordDiff):
            out.append(item)
            continue
        fields_ = {k: item.get(k) for k in RECORD_TYPE.names}
        for name in ("event_time", "copies", "batch_id"):
            fields_[name] = None if fields_[name] is None else int(fields_[name])
        out.append(RecordDiff(**fields_))
    return tuple(out)


def _no_sample(frame: pd.DataFrame) -> pd.Series:
    """The sample column of rows written before it existed, or with it missing: empty."""
    import pandas as pd

    if "record_sample" not in frame:
        return pd.Series([()] * len(frame), index=frame.index, dtype=object)
    return frame["record_sample"].map(_records_read)


def _column(
    arrow: pa.DataType,
    *,
    legacy: object | Callable[[pd.DataFrame], pd.Series] = None,
    name: str | None = None,
    store: Callable[[Any], Any] | None = None,
    load: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """A stored field's metadata: its Arrow type, the value rows written before the column existed
    stand for (a constant or a function of the row frame; None: every row has it) and, for the
    window bounds, the stored column's name (a timestamp, held as epoch ms). A nested field has
    ``store`` (its value as the Arrow column takes it) and ``load`` (a cell read back as the
    field's value, missing included); its ``legacy`` function reads the whole column."""
    return {"arrow": arrow, "legacy": legacy, "column": name, "store": store, "load": load}


def _abs_diff(frame: pd.DataFrame) -> pd.Series:
    return (frame["stream_events"] - frame["batch_events"]).abs()


@dataclass(frozen=True, kw_only=True)
class WindowResult:
    """One window's reconciliation: a row of the ``reconciliation`` table (fields in table order;
    the window bounds are stored as timestamps). ``late_by_host`` is not stored: the report adds
    the late records by host (most first) from ``late_events`` to explain the window."""

    window_start_ms: int = field(metadata=_column(TS_US, name="window_start"))
    window_end_ms: int | None = field(default=None, metadata=_column(TS_US, name="window_end"))
    status: str = field(default=CLOSED, metadata=_column(pa.string()))
    stream_events: int = field(metadata=_column(pa.int64()))
    batch_events: int = field(metadata=_column(pa.int64()))
    late_events: int = field(metadata=_column(pa.int64()))
    abs_diff: int = field(metadata=_column(pa.int64(), legacy=_abs_diff))
    alignment: float | None = field(metadata=_column(pa.float64()))
    aligned: bool | None = field(default=None, metadata=_column(pa.bool_()))
    unexplained: int = field(metadata=_column(pa.int64()))
    ontime_events: int = field(default=0, metadata=_column(pa.int64(), legacy=lambda f: f["stream_events"]))
    late_folded: int = field(default=0, metadata=_column(pa.int64(), legacy=0))
    ontime_alignment: float | None = field(
        default=None, metadata=_column(pa.float64(), legacy=lambda f: f["alignment"])
    )
    final: bool = field(default=True, metadata=_column(pa.bool_(), legacy=True))
    revisions: int = field(default=0, metadata=_column(pa.int64(), legacy=0))
    missing_records: int | None = field(default=None, metadata=_column(pa.int64(), legacy=None))
    extra_records: int | None = field(default=None, metadata=_column(pa.int64(), legacy=None))
    record_sample: tuple[RecordDiff, ...] = field(
        default=(),
        metadata=_column(pa.list_(RECORD_TYPE), legacy=_no_sample, store=_records_stored, load=_records_read),
    )
    late_by_host: list[tuple[str, int]] = field(default_factory=list, compare=False)

    @property
    def iso(self) -> str:
        return format_instant_ms(self.window_start_ms)

    @property
    def examined(self) -> bool:
        """The records behind its unexplained difference were looked for."""
        return self.missing_records is not None

    @property
    def records_not_examined(self) -> bool:
        """Closed with something unexplained, but beyond the bound of windows examined per run."""
        return self.status == CLOSED and self.unexplained != 0 and not self.examined

    def sample_of(self, kind: str) -> list[RecordDiff]:
        return [r for r in self.record_sample if r.kind == kind]

    def records_totals(self) -> str:
        """The examined window's totals: ``4 missing from events (4 listed), 3 extra in events
        (2 listed)``; or why there is nothing to list."""
        if not self.examined:
            return "records not examined (beyond the windows examined per run)" if self.unexplained else ""
        if not self.missing_records and not self.extra_records:
            return "no record differs between the recompute and events: the window counts differ"
        return ", ".join(
            f"{total:,} {what}" + (f" ({len(self.sample_of(kind))} listed)" if total else "")
            for kind, total, what in (
                (MISSING, self.missing_records or 0, "missing from events"),
                (EXTRA, self.extra_records or 0, "extra in events"),
            )
        )

    def records_line(self, shown: int = HOSTS_PER_EXPLANATION) -> str:
        """The records behind the unexplained difference in one line: each kind's total and up to
        ``shown`` of its records as ``host id`` (``×n``: n copies)."""
        if not self.examined or (not self.missing_records and not self.extra_records):
            return self.records_totals()
        parts = []
        for kind, total, what in (
            (MISSING, self.missing_records or 0, "missing from events"),
            (EXTRA, self.extra_records or 0, "extra in events"),
        ):
            if not total:
                continue
            listed = self.sample_of(kind)[:shown]
            names = ", ".join(
                f"{r.host} {r.event_id}" + (f" ×{r.copies}" if r.copies > 1 else "") for r in listed
            )
            more = total - sum(r.copies for r in listed)
            parts.append(f"{total:,} {what}: {names}" + (f" and {more:,} more" if more > 0 else ""))
        return "; ".join(parts)

    def explanation(self, hosts: int = HOSTS_PER_EXPLANATION) -> str:
        """Why the window differs, in one line: late records by host, folded ones, unexplained."""
        parts = []
        if self.late_by_host:
            shown = ", ".join(f"{h} ×{n:,}" for h, n in self.late_by_host[:hosts])
            more = len(self.late_by_host) - hosts
            parts.append(
                f"{self.late_events:,} late record(s) from {len(self.late_by_host)} host(s): {shown}"
                + (f" and {more} more host(s)" if more > 0 else "")
                + (" beyond the allowed lateness" if self.late_folded else "")
            )
        if self.late_folded:
            ontime = (
                f" (on-time alignment {self.ontime_alignment:.6f})"
                if self.ontime_alignment is not None
                else ""
            )
            parts.append(f"{self.late_folded:,} late record(s) folded into revisions{ontime}")
        if self.unexplained:
            kind = "missing from stream and late events" if self.unexplained > 0 else "counted twice"
            parts.append(f"{abs(self.unexplained):,} record(s) {kind} (unexplained)")
            if self.status == CLOSED:
                parts.append(self.records_totals())
        if not parts:
            parts.append("exact: stream equals batch")
        return "; ".join(parts)


# The stored fields, in table order; the window bounds are the only ones renamed (ms -> timestamp).
STORED = tuple(f for f in fields(WindowResult) if "arrow" in f.metadata)
ROW_FIELDS: tuple[str, ...] = tuple(f.name for f in STORED)
RECONCILIATION_SCHEMA = pa.schema(
    [
        ("pipeline", pa.string()),
        *[(f.metadata["column"] or f.name, f.metadata["arrow"]) for f in STORED],
        ("target", pa.float64()),
        ("stream_watermark", TS_US),
        ("reconciled_at", TS_US),
    ]
)


def to_arrow(
    windows: Sequence[WindowResult],
    *,
    pipeline: str,
    target: float,
    stream_watermark_ms: int | None,
    reconciled_at_ms: int,
) -> pa.Table:
    """The ``reconciliation`` rows of ``windows`` as one reconcile run writes them."""

    def micros(ms: int | None) -> int | None:
        return None if ms is None else ms * 1000

    n = len(windows)
    columns: dict[str, list[Any]] = {"pipeline": [pipeline] * n}
    for f in STORED:
        values = [getattr(w, f.name) for w in windows]
        if f.metadata["store"] is not None:
            values = [f.metadata["store"](v) for v in values]
        columns[f.metadata["column"] or f.name] = (
            [micros(v) for v in values] if f.metadata["column"] else values
        )
    columns["target"] = [target] * n
    columns["stream_watermark"] = [micros(stream_watermark_ms)] * n
    columns["reconciled_at"] = [micros(reconciled_at_ms)] * n
    return pa.table(columns, schema=RECONCILIATION_SCHEMA)


def normalized(rows: pd.DataFrame) -> pd.DataFrame:
    """Reconciliation rows (the table's, or any frame of the row's fields) with
    ``window_start_ms`` (and ``window_end_ms`` when stored) and every field rows written before it
    existed lack, filled with the value they stand for (nothing folded, on-time is final)."""
    from tidemark.tables import epoch_ms

    frame = rows.copy()
    if not len(frame.columns):
        return frame
    for f in STORED:
        stored = f.metadata["column"]
        if stored is not None:
            if f.name not in frame and stored in frame:
                frame[f.name] = epoch_ms(frame[stored])
            continue
        legacy = f.metadata["legacy"]
        if f.metadata["load"] is not None:  # nested: its legacy function reads the whole column
            frame[f.name] = legacy(frame)
            continue
        if legacy is None:
            continue
        fill = legacy(frame) if callable(legacy) else legacy
        frame[f.name] = _filled(frame[f.name], fill) if f.name in frame else fill
    return frame


def _filled(column: pd.Series, fill: object) -> pd.Series:
    """``column`` with its missing values replaced by ``fill``, its dtype inferred afresh (an
    object column of booleans and None becomes booleans)."""
    import pandas as pd

    with pd.option_context("future.no_silent_downcasting", True):
        return column.fillna(fill).infer_objects()


def window_results(
    rows: pd.DataFrame, late_by_window: Mapping[int, list[tuple[str, int]]] | None = None
) -> list[WindowResult]:
    """``rows`` (see :func:`normalized`) as :class:`WindowResult`; ``late_by_window``: late
    records by host per window start, for the explanation."""
    frame = normalized(rows)
    late = late_by_window or {}
    names = [name for name in ROW_FIELDS if name in frame]
    return [
        WindowResult(
            **{name: _READERS[name](record[name]) for name in names},
            late_by_host=late.get(int(record["window_start_ms"]), []),
        )
        for record in frame[names].to_dict("records")
    ]


# Each stored field's Python type ("int", "float", "bool", "str"), from its annotation.
_TYPES = {f.name: str(f.type).split(" |")[0] for f in STORED if f.metadata["load"] is None}
_CASTS: dict[str, Callable[[Any], Any]] = {"int": int, "float": float, "bool": bool, "str": str}


def _value(value: Any, kind: str) -> Any:
    """A pandas cell as the row holds it: missing (None, NaN, NA) as None, else its field's
    Python type."""
    import pandas as pd

    return None if pd.isna(value) else _CASTS[kind](value)


# How a cell of each stored field is read: its ``load``, or :func:`_value` with its type.
def _reader(f: Any) -> Callable[[Any], Any]:
    if f.metadata["load"] is not None:
        return cast("Callable[[Any], Any]", f.metadata["load"])
    kind = _TYPES[f.name]
    return lambda value: _value(value, kind)


_READERS: dict[str, Callable[[Any], Any]] = {f.name: _reader(f) for f in STORED}


def frame_of(windows: Sequence[WindowResult]) -> pd.DataFrame:
    """The stored fields of ``windows``, one row each (the frame :func:`alignment_summary` reads)."""
    import pandas as pd

    return pd.DataFrame([[getattr(w, n) for n in ROW_FIELDS] for w in windows], columns=list(ROW_FIELDS))


@dataclass(frozen=True)
class AlignmentSummary:
    """Closed windows measured against the alignment target: the one definition that the CLI
    table, the report, the Airflow alerts and Asset events, and the quality step all use.

    Open windows (the stream has not closed them yet) are counted, never measured. The event
    totals and ``unexplained`` are over the closed windows; ``unexplained`` adds each window's
    ``|batch - stream - late|``, so a record counted twice in one window cannot hide one missing
    from another."""

    target: float
    closed: int
    open: int
    misaligned_ms: tuple[int, ...]  # starts of the closed windows below target, in order
    worst_alignment: float | None
    stream_events: int
    batch_events: int
    late_events: int
    unexplained: int
    worst_ontime_alignment: float | None = None
    late_folded: int = 0
    final: int = 0  # closed windows the watermark made final

    @property
    def aligned(self) -> int:
        return self.closed - len(self.misaligned_ms)

    @property
    def share_aligned(self) -> float | None:
        return self.aligned / self.closed if self.closed else None

    @property
    def ok(self) -> bool:
        """The interval's verdict: every closed window at or above target and nothing
        unexplained. The one test the Airflow gate and ``reconcile --fail-below`` apply."""
        return not self.misaligned_ms and self.unexplained == 0

    def totals(self) -> dict[str, int]:
        return {
            "stream_events": self.stream_events,
            "batch_events": self.batch_events,
            "late_events": self.late_events,
            "late_folded": self.late_folded,
            "unexplained": self.unexplained,
        }


# The columns :func:`alignment_summary` needs at least; the others take their legacy value.
SUMMARY_COLUMNS = [
    "window_start_ms",
    "status",
    "alignment",
    "stream_events",
    "batch_events",
    "late_events",
    "unexplained",
]


def alignment_summary(windows: pd.DataFrame, target: float) -> AlignmentSummary:
    """Summarise reconciled windows (one row per window, at least :data:`SUMMARY_COLUMNS`;
    ``status`` is ``closed`` or ``open``), measured against ``target``."""
    frame = normalized(windows)
    closed = frame[frame["status"] == CLOSED]
    alignment = closed["alignment"].astype("float64")
    below = closed[alignment < target].sort_values("window_start_ms")
    ontime = closed["ontime_alignment"].astype("float64").fillna(alignment)
    return AlignmentSummary(
        target=target,
        closed=len(closed),
        open=len(frame) - len(closed),
        misaligned_ms=tuple(int(ms) for ms in below["window_start_ms"]),
        worst_alignment=float(alignment.min()) if alignment.notna().any() else None,
        stream_events=int(closed["stream_events"].sum()),
        batch_events=int(closed["batch_events"].sum()),
        late_events=int(closed["late_events"].sum()),
        unexplained=int(closed["unexplained"].abs().sum()),
        worst_ontime_alignment=float(ontime.min()) if ontime.notna().any() else None,
        late_folded=int(closed["late_folded"].sum()),
        final=int(closed["final"].astype(bool).sum()),
    )


def alignment_of(stream_n: int, batch_n: int, diff: int) -> float:
    """``1 - diff / batch``; an empty window aligns when the stream has nothing in it either."""
    return (1.0 if stream_n == 0 else 0.0) if batch_n == 0 else 1.0 - diff / batch_n
