"""The precise watermark engine: scripted truth tables, then properties against brute force."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.progress import merge_progress
from tidemark.watermark import MonotonicWatermark, precise_watermark, required_hosts, update_watermark
from tidemark.watermark_stages import PIPELINE_STAGES, StageMark, WatermarkServer
from tidemark.watermark_status import ADVANCING, STALLED, WAITING, evaluate_status


def brute_force(progress: list[int], q: Fraction, population: int) -> int | None:
    """The definition, literally: the latest time t reached by at least ceil(q*N) hosts."""
    need = math.ceil(q * population)
    candidates = [t for t in set(progress) if sum(1 for p in progress if p >= t) >= need]
    return max(candidates) if candidates and need > 0 else None


def test_required_hosts_uses_exact_arithmetic_not_binary_floats():
    # 0.999 * 10000 == 9990.000000000002 in floats; ceil would demand 9991 hosts.
    assert required_hosts(10_000, 0.999) == 9990
    assert required_hosts(10_000, "0.9999") == 9999
    assert required_hosts(1_000, 0.999) == 999
    assert required_hosts(1, 0.999) == 1


@pytest.mark.parametrize(
    ("progress", "precision", "population", "expected"),
    [
        ([10, 20, 30, 40], 1.0, None, 10),  # every host must have passed: the minimum
        ([10, 20, 30, 40], 0.75, None, 20),  # 3 of 4 hosts at or past 20
        ([10, 20, 30, 40], 0.5, None, 30),
        ([10, 20, 30, 40], 0.25, None, 40),
        ([10, 20, 30, 40], 0.75, 5, 10),  # one expected host silent: it is the one allowed laggard
        ([10, 20, 30, 40], 0.75, 6, None),  # two silent: fewer than ceil(4.5)=5 reporting
        ([], 0.999, None, None),
        ([7], 0.999, None, 7),
    ],
)
def test_precise_watermark_truth_table(progress, precision, population, expected):
    assert precise_watermark(progress, precision, population) == expected


def test_precise_watermark_rejects_population_below_reporting_hosts():
    with pytest.raises(ValueError, match="population 2 is smaller than the 3 reporting hosts"):
        precise_watermark([1, 2, 3], 0.9, population=2)


def test_required_hosts_rejects_precision_outside_unit_interval():
    with pytest.raises(ValueError, match=r"precision must be in \(0, 1\]"):
        required_hosts(10, 1.5)


def test_monotonic_watermark_refuses_regression_and_reports_change_only():
    wm = MonotonicWatermark()
    assert wm.offer(None) is False and wm.value is None
    assert wm.offer(100) is True and wm.value == 100
    assert wm.offer(100) is False
    assert wm.offer(90) is False and wm.value == 100
    assert wm.offer(150) is True and wm.value == 150


def test_ten_lagging_hosts_of_ten_thousand_do_not_hold_the_watermark():
    progress = {f"h{i}": 1_000 for i in range(9_990)} | {f"lag{i}": 10 for i in range(10)}
    update = update_watermark(progress, 0.999, previous=None)
    assert update.watermark == 1_000
    assert update.behind == 10


def test_eleven_lagging_hosts_hold_the_watermark_at_the_slowest_of_the_rest():
    progress = {f"h{i}": 1_000 for i in range(9_989)} | {f"lag{i}": 10 + i for i in range(11)}
    update = update_watermark(progress, 0.999, previous=None)
    assert update.watermark == 20  # the fastest of the 11 laggards is the 9990th host
    assert update.behind == 10


def test_update_never_goes_below_previous():
    update = update_watermark({"a": 5, "b": 5}, 1.0, previous=9)
    assert update.watermark == 9 and not update.advanced


progress_lists = st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=200)
precisions = st.sampled_from([Fraction(1), Fraction(999, 1000), Fraction(9, 10), Fraction(1, 2)])


@settings(max_examples=300, deadline=None)
@given(progress=progress_lists, q=precisions, silent=st.integers(min_value=0, max_value=5))
def test_equals_brute_force_definition(progress, q, silent):
    population = len(progress) + silent
    assert precise_watermark(progress, q, population) == brute_force(progress, q, population)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.dictionaries(st.sampled_from([f"h{i}" for i in range(20)]), st.integers(0, 1000)),
        min_size=1,
        max_size=15,
    ),
    q=precisions,
)
def test_never_decreases_across_any_sequence_of_batches(steps, q):
    progress: dict[str, int] = {}
    previous = None
    for batch in steps:
        progress = merge_progress(progress, batch)
        update = update_watermark(progress, q, previous)
        if previous is not None:
            assert update.watermark is not None and update.watermark >= previous
        previous = update.watermark


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(min_value=10, max_value=3000),
    q=st.sampled_from([Fraction(999, 1000), Fraction(99, 100), Fraction(9, 10)]),
    data=st.data(),
)
def test_up_to_floor_one_minus_q_laggards_do_not_hold_it_and_one_more_does(n, q, data):
    allowed = n - required_hosts(n, q)  # == floor((1-q) * n)
    assert allowed == math.floor((1 - q) * n)
    lag = data.draw(st.lists(st.integers(0, 99), min_size=allowed + 1, max_size=allowed + 1))
    ahead = [1_000] * (n - allowed - 1)
    # `allowed` laggards: the watermark advances with the rest.
    assert precise_watermark([*ahead, 1000, *lag[:allowed]], q) == 1_000
    # one more laggard: held by the slowest of the rest, i.e. the fastest laggard.
    assert precise_watermark(ahead + lag, q) == max(lag)


def test_watermark_server_truth_table():
    server = WatermarkServer(PIPELINE_STAGES)
    assert server.global_low_watermark is None
    # source watermark 100, window operator still holds an open window from 60
    assert server.update(100, {"window": 60}) is True
    assert server.marks["source"] == StageMark(100, 100)
    assert server.marks["window"] == StageMark(100, 60)
    assert server.marks["sink"] == StageMark(60, 60)
    assert server.global_low_watermark == 60
    # the window closes; nothing unfinished anywhere: everything catches up to the source
    assert server.update(180, {}) is True
    assert server.global_low_watermark == 180
    # a lower source watermark (e.g. after a bad restart) is refused everywhere
    assert server.update(150, {"window": 120}) is False
    assert server.marks["source"].input_lw == 180 and server.global_low_watermark == 180


def test_watermark_server_round_trips_and_rejects_bad_topology():
    server = WatermarkServer(PIPELINE_STAGES)
    server.update(100, {"window": 90})
    again = WatermarkServer.from_json(PIPELINE_STAGES, server.to_json())
    assert again.marks == server.marks and again.global_low_watermark == 90
    with pytest.raises(ValueError, match="stage 'b': upstream 'c' must be listed before it"):
        WatermarkServer({"a": (), "b": ("c",), "c": ()})


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.none() | st.integers(0, 1000), st.none() | st.integers(0, 1000)), min_size=1, max_size=20
    )
)
def test_watermark_server_global_is_min_and_never_decreases(steps):
    server = WatermarkServer(PIPELINE_STAGES)
    previous = None
    for source, oldest in steps:
        server.update(source, {"window": oldest})
        now = server.global_low_watermark
        if previous is not None:
            assert now is not None and now >= previous
        outputs = [m.output_lw for m in server.marks.values()]
        assert now == (None if None in outputs else min(outputs))
        previous = now


def _status(progress: dict[str, int], wm, advanced_at=0, now=10_000, expected=None, q=0.9):
    return evaluate_status(
        list(progress), list(progress.values()), q, wm, advanced_at, now, 1_000, 5_000, expected=expected
    )


def test_status_stalls_only_when_too_many_hosts_lag_for_long_enough():
    ahead = {f"h{i}": 10_000 for i in range(18)}
    # 2 of 20 lag: floor(0.1 * 20) = 2 allowed -> ADVANCING however long it has not moved
    assert _status(ahead | {"a": 100, "b": 200}, wm=200).state == ADVANCING
    # 3 of 20 lag and it has not moved for 10 s >= 5 s -> STALLED, worst first
    three = _status(ahead | {"a": 300, "b": 100, "c": 200}, wm=300)
    assert three.state == STALLED
    assert [(h.host, h.progress_ms, h.lag_ms) for h in three.lagging] == [
        ("b", 100, 9_900),
        ("c", 200, 9_800),
        ("a", 300, 9_700),
    ]
    # same hosts, but it advanced 1 s ago -> not yet a stall
    assert _status(ahead | {"a": 300, "b": 100, "c": 200}, wm=300, advanced_at=9_000).state == ADVANCING
    assert _status({}, wm=None).state == WAITING


def test_status_counts_silent_expected_hosts_as_lagging_and_ignores_unlisted_ones():
    progress = {f"h{i}": 10_000 for i in range(8)} | {"stranger": 5}
    status = _status(progress, wm=10_000, expected={f"h{i}" for i in range(8)} | {"ghost"})
    assert status.hosts_total == 9 and status.hosts_reporting == 8
    assert [h.host for h in status.lagging] == ["ghost"] and status.lagging[0].progress_ms is None
