"""tidemark.revisions: late records folded into window revisions (pure pandas, no Spark)."""

from __future__ import annotations

import random
from collections import Counter

import pandas as pd
import pytest

from tidemark.revisions import changes, empty_revisable, fold, latest
from tidemark.windows import TumblingWindows

MIN = 60_000


def partials(rows: list[tuple[int, str, int]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "window_start_ms": pd.Series([r[0] for r in rows], dtype="int64"),
            "key": pd.Series([r[1] for r in rows], dtype="object"),
            "events": pd.Series([r[2] for r in rows], dtype="int64"),
            "value_sum": pd.Series([float(r[2]) for r in rows], dtype="float64"),
        }
    )


def test_without_allowed_lateness_a_window_is_final_when_it_closes_and_late_records_are_not_folded():
    w = TumblingWindows(MIN, 0)
    out = fold(empty_revisable(), partials([(0, "a", 2)]), partials([(MIN, "a", 5)]), w, 2 * MIN, 2 * MIN + 1)
    assert out.rows[["window_start_ms", "revision", "is_final", "events"]].values.tolist() == [
        [MIN, 0, True, 5]
    ]
    assert out.revisable.empty and out.folded_events == 0 and out.revisions == 0


def test_a_late_record_within_allowed_lateness_revises_its_window_and_the_watermark_makes_it_final():
    w = TumblingWindows(MIN, 10 * MIN)
    # batch 1: window [0, 1m) closes with 5 on-time events, not final
    first = fold(empty_revisable(), partials([]), partials([(0, "a", 5)]), w, None, MIN)
    assert first.rows[["revision", "is_final", "events", "late_events"]].values.tolist() == [[0, False, 5, 0]]
    # batch 2: two late records fold in: revision 1 with the accumulated total
    second = fold(first.revisable, partials([(0, "a", 2)]), partials([]), w, MIN, 2 * MIN)
    assert second.rows[["revision", "is_final", "events", "late_events"]].values.tolist() == [
        [1, False, 7, 2]
    ]
    assert second.folded_events == 2 and second.revisions == 1
    # batch 3: nothing late; the watermark passes end + lateness: a final revision, same totals
    third = fold(second.revisable, partials([]), partials([]), w, 2 * MIN, 11 * MIN)
    assert third.rows[["revision", "is_final", "events", "late_events"]].values.tolist() == [[2, True, 7, 2]]
    assert third.revisable.empty
    # batch 4: a record for the final window is not folded (it stays in late_events only)
    fourth = fold(third.revisable, partials([(0, "a", 1)]), partials([]), w, 11 * MIN, 12 * MIN)
    assert fourth.rows.empty and fourth.folded_events == 0


def test_a_key_seen_only_late_starts_at_revision_zero():
    w = TumblingWindows(MIN, 10 * MIN)
    first = fold(empty_revisable(), partials([]), partials([(0, "a", 5)]), w, None, MIN)
    second = fold(first.revisable, partials([(0, "b", 1)]), partials([]), w, MIN, 2 * MIN)
    assert second.rows[["key", "revision", "events", "late_events"]].values.tolist() == [["b", 0, 1, 1]]
    assert sorted(second.revisable["key"]) == ["a", "b"]


def test_a_late_record_arriving_in_the_batch_that_makes_its_window_final_is_folded_into_the_final_row():
    w = TumblingWindows(MIN, 10 * MIN)
    first = fold(empty_revisable(), partials([]), partials([(0, "a", 5)]), w, None, MIN)
    last = fold(first.revisable, partials([(0, "a", 1)]), partials([]), w, MIN, 20 * MIN)
    assert last.rows[["revision", "is_final", "events", "late_events"]].values.tolist() == [[1, True, 6, 1]]


@pytest.mark.parametrize("seed", range(12))
def test_folded_revisions_match_a_brute_force_replay(seed):
    """Random batches of records and a watermark that never moves back: the latest revision of
    each window is every record that arrived before its window was final; ``events -
    late_events`` is the on-time count; revisions run 0, 1, 2, ... and exactly one row per
    (window, key) is final once the watermark passed end + lateness."""
    rng = random.Random(seed)
    lateness = rng.choice([0, MIN, 3 * MIN])
    w = TumblingWindows(MIN, lateness)
    revisable, open_sums = empty_revisable(), Counter()
    written: list[pd.DataFrame] = []
    ontime, counted, beyond, late_all = Counter(), Counter(), Counter(), Counter()
    wm: int | None = None
    for _ in range(25):
        prev = wm
        records = [(rng.randrange(0, 12) * MIN, rng.choice("ab")) for _ in range(rng.randrange(0, 8))]
        late = Counter()
        for start, key in records:
            if w.is_closed(start, prev):
                late[(start, key)] += 1
                late_all[(start, key)] += 1
                if w.is_final(start, prev):
                    beyond[(start, key)] += 1
                else:
                    counted[(start, key)] += 1
            else:
                open_sums[(start, key)] += 1
                ontime[(start, key)] += 1
                counted[(start, key)] += 1
        wm = max(wm or 0, rng.randrange(0, 16) * MIN)
        closing = sorted(k for k in open_sums if w.is_closed(k[0], wm))
        out = fold(
            revisable,
            partials([(s, k, n) for (s, k), n in sorted(late.items())]),
            partials([(s, k, open_sums[(s, k)]) for s, k in closing]),
            w,
            prev,
            wm,
        )
        for k in closing:
            del open_sums[k]
        revisable = out.revisable
        written.append(out.rows)
    rows = pd.concat(written, ignore_index=True).rename(columns={"window_start_ms": "window_start"})
    newest = latest(rows)
    got = {(r.window_start, r.key): r.events for r in newest.itertuples()}
    closed = {k: v for k, v in counted.items() if w.is_closed(k[0], wm)}
    assert got == closed
    assert {(r.window_start, r.key): r.events - r.late_events for r in newest.itertuples()} == {
        k: ontime[k] for k in closed
    }
    for key, group in rows.groupby(["window_start", "key"]):
        assert group["revision"].tolist() == list(range(len(group))), key
        assert group["is_final"].sum() == (1 if w.is_final(key[0], wm) else 0), key
        assert group["events"].is_monotonic_increasing
    # the change stream (retract the previous revision, add the new one) sums to the latest
    ch = changes(rows)
    net = (ch["sign"] * ch["events"]).groupby([ch["window_start"], ch["key"]]).sum()
    assert net.to_dict() == got
    arrived = sum(ontime.values()) + sum(late_all.values())
    assert arrived == sum(got.values()) + sum(open_sums.values()) + sum(beyond.values()) + sum(
        v for k, v in counted.items() if not w.is_closed(k[0], wm) and k not in open_sums
    )


def test_latest_reads_a_table_written_before_revisions_as_revision_zero_final():
    old = pd.DataFrame({"window_start": [0, 0], "key": ["a", "b"], "events": [3, 4]})
    out = latest(old)
    assert (
        out["revision"].tolist() == [0, 0] and out["is_final"].all() and out["late_events"].tolist() == [0, 0]
    )
