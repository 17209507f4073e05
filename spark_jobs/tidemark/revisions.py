"""Window revisions: late records folded into the windows they belong to (allowed lateness).

A window closes when the watermark passes its end and is **final** when the watermark passes its
end plus ``window.allowed_lateness`` (:meth:`tidemark.windows.TumblingWindows.is_final`). In
between, a late record (its window closed before its batch) revises the window: the stream writes
a new row of ``windows`` for that (window, key), the next ``revision``, carrying the accumulated
totals (Dataflow's *accumulating* panes, Streaming Systems ch. 2). A late record of a final window
stays in ``late_events`` only, as without revisions.

Rows of ``windows`` per (window, key), in order of ``revision`` (0, 1, 2, ...):

* revision 0 is written when the window closes: the on-time result (or, for a key whose every
  record came late, its first late result);
* each later revision is written by a batch that folded late records in; ``late_events`` says how
  many of the row's ``events`` came late (cumulative), so ``events - late_events`` is the on-time
  count on every revision;
* exactly one row has ``is_final`` true: the revision the watermark made final. It repeats the
  previous totals when no late record came after the window closed (a reader waits for
  ``is_final`` to know nothing will change). With ``allowed_lateness: 0`` revision 0 is final:
  one row per window and key, as before revisions existed.

A reader takes the latest revision per (window, key) (:func:`latest`, or the SQL in the README),
or folds the revisions as retractions and updates (:func:`changes`: accumulating and retracting).

Windows closed but not final are the stream's state between batches
(``_state/revisable_windows``, :data:`tidemark.schemas.REVISABLE_SCHEMA`); a batch computes its
revisions from that state and its own late records only (:func:`fold`), so a replayed batch
writes the same revisions, once (the batch's commit protocol, :mod:`tidemark.batch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tidemark import schemas as S
from tidemark.windows import TumblingWindows

if TYPE_CHECKING:
    from tidemark.config import PipelineConfig

KEY = ["window_start_ms", "key"]
# A (window, key) row the stream writes, as the batch computes it (epoch ms).
REVISION_COLUMNS = [*KEY, "events", "value_sum", "revision", "late_events", "is_final"]


def empty_revisable() -> pd.DataFrame:
    return S.REVISABLE_SCHEMA.empty_table().to_pandas()


@dataclass(frozen=True)
class Folded:
    """What one batch does to the windows: the rows to write and the state to keep."""

    rows: pd.DataFrame  # REVISION_COLUMNS: closed now (revision 0), revised, made final
    revisable: pd.DataFrame  # closed, not final: the next batch's state (REVISABLE_SCHEMA)
    folded_events: int  # late records folded into a revision in this batch
    revisions: int  # rows written with revision >= 1

    @property
    def changed(self) -> bool:
        return len(self.rows) > 0


def fold(
    revisable: pd.DataFrame,
    late: pd.DataFrame,
    closing: pd.DataFrame,
    windows: TumblingWindows,
    previous_wm: int | None,
    watermark: int | None,
) -> Folded:
    """One batch's window rows.

    ``revisable``: closed, not final windows before the batch (:data:`S.REVISABLE_SCHEMA`).
    ``late``: the batch's partial sums (window_start_ms, key, events, value_sum) of windows the
    previous watermark had closed. ``closing``: open windows the batch's watermark closes (their
    on-time sums). A late partial of a window not final by ``previous_wm`` is folded in; one of a
    final window is not (it stays in ``late_events``). Pure: the same inputs give the same rows.
    """
    foldable = late[~windows.is_final(late["window_start_ms"], previous_wm)] if len(late) else late
    folded_events = int(foldable["events"].sum()) if len(foldable) else 0

    state = _fold_late(revisable[[*KEY, "events", "value_sum", "revision", "late_events"]].copy(), foldable)
    closed_now = closing[[*KEY, "events", "value_sum"]].assign(revision=0, late_events=0, touched=True)
    frames = [f for f in (state, closed_now) if len(f)]
    both = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=[*KEY, "events", "value_sum", "revision", "late_events", "touched"])
    )
    both = both.astype(
        {
            "window_start_ms": "int64",
            "key": "object",
            "events": "int64",
            "value_sum": "float64",
            "revision": "int64",
            "late_events": "int64",
            "touched": "bool",
        }
    )
    final = np.asarray(
        windows.is_final(both["window_start_ms"].to_numpy(dtype="int64"), watermark), dtype=bool
    )
    touched = both["touched"].to_numpy(dtype=bool)
    # A window the watermark makes final without a late record in this batch: one more revision
    # with the same totals, flagged final.
    sealed = final & ~touched
    both.loc[sealed, "revision"] = both.loc[sealed, "revision"] + 1
    both["is_final"] = final
    rows = both[touched | final][REVISION_COLUMNS].sort_values(KEY).reset_index(drop=True)
    keep = both[~final][[*KEY, "events", "value_sum", "revision", "late_events"]]
    keep = keep.sort_values(KEY).reset_index(drop=True)
    return Folded(rows, keep, folded_events, int((rows["revision"] > 0).sum()))


def _fold_late(state: pd.DataFrame, foldable: pd.DataFrame) -> pd.DataFrame:
    """The revisable windows with the foldable late partials added (``touched`` marks a window a
    late record revised): a key seen late only starts at revision 0, a known one moves on one."""
    state["touched"] = False
    if not len(foldable):
        return state
    add = foldable.groupby(KEY, as_index=False)[["events", "value_sum"]].sum()
    merged = state.merge(add, on=KEY, how="outer", suffixes=("", "_late"), indicator=True)
    new = merged["_merge"] == "right_only"
    hit = merged["_merge"] != "left_only"
    late_n = merged["events_late"].fillna(0).astype("int64")
    merged["events"] = merged["events"].fillna(0).astype("int64") + late_n
    merged["value_sum"] = merged["value_sum"].fillna(0.0) + merged["value_sum_late"].fillna(0.0)
    merged["late_events"] = merged["late_events"].fillna(0).astype("int64") + late_n
    merged["revision"] = np.where(new, 0, merged["revision"].fillna(-1).astype("int64") + hit.astype("int64"))
    merged["touched"] = hit.to_numpy()
    return merged[[*KEY, "events", "value_sum", "revision", "late_events", "touched"]]


# -- readers ------------------------------------------------------------------------------------


def normalized(windows: pd.DataFrame) -> pd.DataFrame:
    """``windows`` rows with the revision columns of tables written before revisions existed
    filled in: such a row is revision 0, final, with no late records folded in."""
    out = windows.copy()
    for name, default in (("revision", 0), ("late_events", 0), ("is_final", True)):
        if name not in out.columns:
            out[name] = default
        else:
            out[name] = out[name].fillna(default)
    return out.astype({"revision": "int64", "late_events": "int64", "is_final": "bool"})


def latest(windows: pd.DataFrame, by: tuple[str, str] = ("window_start", "key")) -> pd.DataFrame:
    """The latest revision of each (window, key) of a ``windows`` frame (any columns; ``by`` names
    the window and key columns): what a reader wants as "the" result."""
    rows = normalized(windows)
    order = rows.sort_values([*by, "revision"])
    return order.drop_duplicates(list(by), keep="last").reset_index(drop=True)


def changes(windows: pd.DataFrame, by: tuple[str, str] = ("window_start", "key")) -> pd.DataFrame:
    """The revisions as a change stream, accumulating and retracting: each revision after the
    first retracts the previous one (``sign`` -1, the previous values) and adds itself (``sign``
    +1). Summing ``sign * events`` over any set of rows gives the latest totals, so a downstream
    aggregate folds revisions in without reading history. A final revision that changes nothing
    retracts and adds the same totals: it nets to zero and carries ``is_final``."""
    rows = normalized(windows).sort_values([*by, "revision"]).reset_index(drop=True)
    values = ["events", "value_sum", "late_events"]
    prev = rows.groupby(list(by), sort=False)[values].shift(1)
    has_prev = prev["events"].notna().to_numpy()
    retract = rows[has_prev].copy()
    for column in values:
        retract[column] = prev.loc[has_prev, column].astype(rows[column].dtype)
    both = pd.concat([retract.assign(sign=-1), rows.assign(sign=1)], ignore_index=True)
    return both.sort_values([*by, "revision", "sign"]).reset_index(drop=True)


def not_folded(late: pd.DataFrame) -> pd.DataFrame:
    """The rows of a ``late_events`` frame that no revision folded in (beyond the allowed
    lateness): every row of a table from before revisions, which has no ``folded`` column."""
    if "folded" not in late:
        return late
    return late[~late["folded"].fillna(False).astype(bool)]


def read_latest(config: PipelineConfig, columns: list[str] | None = None) -> pd.DataFrame | None:
    """The latest revision of every (window, key) of a pipeline's ``windows`` table, read with
    delta-rs (no JVM); None when the table does not exist yet."""
    from tidemark import tables as T

    rows = T.read_if_exists(config, S.WINDOWS, columns)
    return None if rows is None else latest(rows)
