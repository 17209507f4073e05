"""Batch recompute-and-diff: does the stream agree with a batch recompute, window by window?

The recompute (:mod:`tidemark.recompute`) reads the **raw source**, never the stream's tables;
the stream's side (:mod:`tidemark.stream_side`) is read at the **latest revision** of each
(window, key) (:mod:`tidemark.revisions`); one row per window
(:class:`tidemark.alignment.WindowResult`).
What each column means, and the verdict over an interval: :mod:`tidemark.alignment`.
This module is the orchestration: align the range to whole windows, recompute, read the stream's
side, diff per window and key, judge each window against the watermark, write the rows.

So a final alignment below 1.0 with nothing unexplained means records that came later than the
allowed lateness, and ``late_events`` counts them. With ``allowed_lateness: 0`` nothing is folded
and both alignments are the same.

Windows the stream has not closed yet (end after its watermark) are reported as ``open`` and
do not count towards alignment. Only the recompute is a Spark job: the stream's side is read with
delta-rs and the diff runs in pandas, one row per window and key. Results replace the range's rows
in the ``reconciliation`` table, so re-running a range never duplicates them.

A closed window with something unexplained gets the records behind it (:mod:`tidemark.unexplained`:
missing from the stream's ``events``, or extra in it, with a sample of each): one more Spark job,
run only when some window needs it, over at most ``max_windows`` windows (the largest differences
first; the report names the others).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import pandas as pd

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.alignment import (
    CLOSED,
    OPEN,
    AlignmentSummary,
    WindowResult,
    alignment_of,
    alignment_summary,
    frame_of,
    to_arrow,
)
from tidemark.config import PipelineConfig
from tidemark.recompute import recompute_windows
from tidemark.sources import RangeInput, parsed_range
from tidemark.stream_side import late_per_key, stream_per_key, stream_watermark
from tidemark.timeutil import check_range, format_instant_ms, now_ms
from tidemark.unexplained import DEFAULT_MAX_WINDOWS, DEFAULT_SAMPLE, differing_records, windows_to_examine
from tidemark.windows import TumblingWindows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class ReconcileReport:
    pipeline: str
    start_ms: int
    end_ms: int
    target: float
    stream_watermark_ms: int | None
    windows: list[WindowResult]
    input: str = ""  # what the recompute read (RangeInput.describe)
    input_files: dict[str, int] | None = None  # landing files listed, read, skipped (FileSelection.summary)
    sample: int = DEFAULT_SAMPLE  # records listed per window and kind behind an unexplained difference
    max_windows: int = DEFAULT_MAX_WINDOWS  # windows whose records are looked for, at most

    @property
    def examined(self) -> list[WindowResult]:
        """Closed windows whose unexplained difference was examined record by record."""
        return [w for w in self.windows if w.examined]

    @property
    def not_examined(self) -> list[WindowResult]:
        """Closed windows with something unexplained beyond the ``max_windows`` examined."""
        return [w for w in self.windows if w.records_not_examined]

    @property
    def closed(self) -> list[WindowResult]:
        return [w for w in self.windows if w.status == CLOSED]

    def summary(self, target: float | None = None) -> AlignmentSummary:
        """The windows measured against ``target`` (default: the run's)."""
        return alignment_summary(frame_of(self.windows), self.target if target is None else target)

    @property
    def misaligned(self) -> list[WindowResult]:
        below = set(self.summary().misaligned_ms)
        return [w for w in self.closed if w.window_start_ms in below]

    @property
    def share_aligned(self) -> float | None:
        return self.summary().share_aligned

    @property
    def worst_alignment(self) -> float | None:
        return self.summary().worst_alignment

    def totals(self) -> dict[str, int]:
        return self.summary().totals()

    def to_json(self) -> str:
        return json.dumps(
            {
                "pipeline": self.pipeline,
                "start": format_instant_ms(self.start_ms),
                "end": format_instant_ms(self.end_ms),
                "target": self.target,
                "stream_watermark": format_instant_ms(self.stream_watermark_ms),
                "windows_closed": len(self.closed),
                "windows_open": len(self.windows) - len(self.closed),
                "share_aligned": self.share_aligned,
                "worst_alignment": self.worst_alignment,
                "worst_ontime_alignment": self.summary().worst_ontime_alignment,
                "windows_final": self.summary().final,
                "totals": self.totals(),
                "input": {"description": self.input, "files": self.input_files},
                "unexplained_records": {
                    "sample_per_kind": self.sample,
                    "max_windows": self.max_windows,
                    "examined": [w.iso for w in self.examined],
                    "not_examined": [w.iso for w in self.not_examined],
                    "missing": sum(w.missing_records or 0 for w in self.examined),
                    "extra": sum(w.extra_records or 0 for w in self.examined),
                },
                "windows": [
                    {
                        **{k: v for k, v in asdict(w).items() if k not in ("late_by_host", "record_sample")},
                        "window_start": format_instant_ms(w.window_start_ms),
                        "window_end": format_instant_ms(w.window_end_ms),
                        "record_sample": [{**asdict(r), "event_time_iso": r.iso} for r in w.record_sample],
                    }
                    for w in self.windows
                ],
            },
            indent=2,
        )

    def records_text(self) -> list[str]:
        """The records behind each examined window's unexplained difference, for people: a line
        per window with the totals, one per listed record; then the windows not examined."""
        lines = []
        for w in self.examined:
            lines.append(f"unexplained in {w.iso} ({w.unexplained:+,}): {w.records_totals()}")
            for r in w.record_sample:
                copies = f" ×{r.copies}" if r.copies > 1 else ""
                batch = f" (batch {r.batch_id})" if r.batch_id is not None else ""
                lines.append(
                    f"  {r.kind:7} host {r.host} id {r.event_id!r}{copies} at {r.iso} key {r.key!r} "
                    f"in {r.source or '-'}{batch}"
                )
        if self.not_examined:
            lines.append(
                f"{len(self.not_examined)} more window(s) with an unexplained difference not examined "
                f"(at most {self.max_windows} per run): " + ", ".join(w.iso for w in self.not_examined)
            )
        return lines

    def table(self) -> str:
        head = (
            f"{'window_start':24} {'status':6} {'stream':>9} {'batch':>9} {'late':>6} "
            f"{'|diff|':>7} {'alignment':>10} {'ok':>3} {'unexpl.':>7} "
            f"{'on-time':>10} {'folded':>6} {'final':>5}"
        )
        rows = [head, "-" * len(head)]
        for w in self.windows:
            align = f"{w.alignment:.6f}" if w.alignment is not None else "-"
            ok = "-" if w.aligned is None else ("yes" if w.aligned else "NO")
            # An open window's stream count is still accumulating: no difference to report.
            diff, unexplained = (
                (f"{w.abs_diff:,}", f"{w.unexplained:,}") if w.status == CLOSED else ("-", "-")
            )
            ontime = f"{w.ontime_alignment:.6f}" if w.ontime_alignment is not None else "-"
            rows.append(
                f"{format_instant_ms(w.window_start_ms):24} {w.status:6} {w.stream_events:9,} "
                f"{w.batch_events:9,} {w.late_events:6,} {diff:>7} {align:>10} {ok:>3} "
                f"{unexplained:>7} {ontime:>10} {w.late_folded:6,} {'yes' if w.final else 'no':>5}"
            )
        t = self.totals()
        summary = self.summary()
        share = self.share_aligned
        rows.append("-" * len(head))
        rows.append(
            f"{len(self.closed)} closed windows ({summary.final} final), "
            + (f"{share:.2%} aligned at target {self.target}" if share is not None else "none")
            + f"; worst alignment {self.worst_alignment if self.worst_alignment is not None else '-'}"
            + " (on-time "
            + (f"{summary.worst_ontime_alignment}" if summary.worst_ontime_alignment is not None else "-")
            + f"); stream {t['stream_events']:,} (with {t['late_folded']:,} late folded in) + late "
            f"{t['late_events']:,} vs batch {t['batch_events']:,}; unexplained {t['unexplained']:,}"
        )
        if t["late_events"] and not t["unexplained"]:
            rows.append(
                f"the {t['late_events']:,} late records beyond the allowed lateness are what keeps a "
                "window's final alignment below 1.0 (kept in late_events)"
            )
        rows.extend(self.records_text())
        if self.input:
            rows.append(f"recompute input: {self.input}")
        return "\n".join(rows)


def default_range(spark: SparkSession, config: PipelineConfig) -> tuple[int, int] | None:
    """The committed windows' span, first start to last end (epoch ms): what ``tidemark
    reconcile`` checks when no range is given; None before the stream wrote a window."""
    from pyspark.sql import functions as F

    path = config.table_path(S.WINDOWS)
    if not T.table_exists(path):
        return None
    row = (
        T.read_table(spark, path)
        .agg(F.min(F.unix_millis("window_start")), F.max(F.unix_millis("window_end")))
        .collect()[0]
    )
    return int(row[0]), int(row[1])


def reconcile(
    spark: SparkSession,
    config: PipelineConfig,
    start_ms: int,
    end_ms: int,
    target: float | None = None,
    write: bool = True,
    *,
    sample: int = DEFAULT_SAMPLE,
    max_windows: int = DEFAULT_MAX_WINDOWS,
) -> ReconcileReport:
    """Recompute ``[start, end)`` (widened to whole windows), diff it with the stream's side and,
    unless ``write`` is false, replace the range's ``reconciliation`` rows. ``target``: default the
    config's ``reconcile.target``. A :class:`tidemark.errors.UsageError` when ``end <= start``.

    Closed windows with something unexplained (at most ``max_windows``, the largest first) get
    the records behind it, ``sample`` of each kind listed (:mod:`tidemark.unexplained`)."""
    check_range(start_ms, end_ms)
    tumbling = TumblingWindows(config.window, config.allowed_lateness)
    start_ms, end_ms = tumbling.covering(start_ms, end_ms)
    target = config.reconcile.target if target is None else target
    watermark = stream_watermark(config)

    # The landing index is a cache of the raw files: a dry run (write=False) does not add to it.
    source = parsed_range(spark, config, start_ms, end_ms, update_index=write)
    per_key = _per_key_counts(spark, config, source, start_ms, end_ms)
    per_window = _per_window(per_key)
    windows = [_window_result(ws, row, tumbling, watermark, target) for ws, row in per_window.iterrows()]
    windows = _with_records(spark, config, source, windows, per_key, sample, max_windows)
    report = ReconcileReport(
        config.pipeline,
        start_ms,
        end_ms,
        target,
        watermark,
        windows,
        input=source.describe(),
        input_files=source.files.summary() if source.files is not None else None,
        sample=sample,
        max_windows=max_windows,
    )
    if write:
        write_report(config, report)
    return report


_COUNTS = ["batch", "stream", "late", "folded", "revisions"]


def _per_key_counts(
    spark: SparkSession, config: PipelineConfig, source: RangeInput, start_ms: int, end_ms: int
) -> pd.DataFrame:
    """Per (window start, key): the stream's, the recompute's and the late events, ``abs_diff``
    (|stream - batch|) and ``ontime_diff``."""
    from pyspark.sql import functions as F

    recomputed = recompute_windows(spark, config, start_ms, end_ms, source)
    batch = T.to_pandas(recomputed.select("window_start_ms", "key", F.col("events").alias("batch"))).astype(
        {"window_start_ms": "int64", "batch": "int64"}
    )
    stream = stream_per_key(config, start_ms, end_ms)
    late = late_per_key(config, start_ms, end_ms)
    joined = batch.merge(stream, on=["window_start_ms", "key"], how="outer").merge(
        late, on=["window_start_ms", "key"], how="outer"
    )
    joined[_COUNTS] = joined[_COUNTS].fillna(0).astype("int64")
    joined["abs_diff"] = (joined["stream"] - joined["batch"]).abs()
    joined["ontime_diff"] = (joined["stream"] - joined["folded"] - joined["batch"]).abs()
    return joined


def _per_window(per_key: pd.DataFrame) -> pd.DataFrame:
    """Per window start (sorted): the sums over keys (``abs_diff``: of |stream - batch|)."""
    return per_key.groupby("window_start_ms")[[*_COUNTS, "abs_diff", "ontime_diff"]].sum().sort_index()


def _with_records(
    spark: SparkSession,
    config: PipelineConfig,
    source: RangeInput,
    windows: list[WindowResult],
    per_key: pd.DataFrame,
    sample: int,
    max_windows: int,
) -> list[WindowResult]:
    """``windows``, those closed with something unexplained (at most ``max_windows``) with the
    records behind it; the others as they are. Nothing runs when nothing is unexplained."""
    differing = {w.window_start_ms: w.unexplained for w in windows if w.status == CLOSED and w.unexplained}
    examine, _skipped = windows_to_examine(differing, max_windows)
    if not examine:
        return windows
    unexplained = per_key["batch"] - per_key["stream"] - per_key["late"]
    keys = per_key[per_key["window_start_ms"].isin(examine) & (unexplained != 0)]
    by_window: dict[int, set[str | None]] = {ws: set() for ws in examine}
    for ws, key in zip(keys["window_start_ms"], keys["key"], strict=True):
        by_window[int(ws)].add(None if pd.isna(key) else str(key))
    found = differing_records(spark, config, source, by_window, sample)
    return [
        replace(
            w,
            missing_records=found[w.window_start_ms].missing,
            extra_records=found[w.window_start_ms].extra,
            record_sample=found[w.window_start_ms].sample,
        )
        if w.window_start_ms in found
        else w
        for w in windows
    ]


def _window_result(
    start: int, row: pd.Series, windows: TumblingWindows, watermark: int | None, target: float
) -> WindowResult:
    """One window's verdict. Alignment is measured on closed windows only: 1 - abs_diff / batch
    (an empty window aligns when the stream has nothing in it either)."""
    stream_n, batch_n, late_n, diff = (int(row[c]) for c in ("stream", "batch", "late", "abs_diff"))
    folded = int(row["folded"])
    closed = bool(windows.is_closed(int(start), watermark))
    alignment: float | None = None
    ontime: float | None = None
    if closed:
        alignment = alignment_of(stream_n, batch_n, diff)
        ontime = alignment_of(stream_n - folded, batch_n, int(row["ontime_diff"]))
    return WindowResult(
        window_start_ms=int(start),
        window_end_ms=int(start) + windows.size_ms,
        status=CLOSED if closed else OPEN,
        stream_events=stream_n,
        batch_events=batch_n,
        late_events=late_n,
        abs_diff=diff,
        alignment=alignment,
        aligned=None if alignment is None else alignment >= target,
        unexplained=batch_n - stream_n - late_n,
        ontime_events=stream_n - folded,
        late_folded=folded,
        ontime_alignment=ontime,
        final=bool(windows.is_final(int(start), watermark)),
        revisions=int(row["revisions"]),
    )


def write_report(config: PipelineConfig, report: ReconcileReport) -> None:
    """Replace the range's rows in the reconciliation table (idempotent per range).

    A few rows per window, written from the driver by delta-rs: no Spark job (about a second
    less per reconciliation than a Spark write with ``replaceWhere``)."""
    data = to_arrow(
        report.windows,
        pipeline=config.pipeline,
        target=report.target,
        stream_watermark_ms=report.stream_watermark_ms,
        reconciled_at_ms=now_ms(),
    )
    path = config.table_path(S.RECONCILIATION)
    if not T.table_exists(path):
        T.write_rs(path, data, mode="append")
        return
    lo, hi = format_instant_ms(report.start_ms), format_instant_ms(report.end_ms)
    predicate = f"window_start >= '{lo}' AND window_start < '{hi}'"
    # schema_mode merge: a table from before window revisions gains their columns.
    T.write_rs(path, data, mode="overwrite", predicate=predicate, schema_mode="merge")
