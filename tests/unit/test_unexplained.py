"""Which windows the record search examines (tidemark.unexplained): the bound, without Spark."""

from __future__ import annotations

from tidemark.unexplained import windows_to_examine


def test_the_largest_differences_are_examined_first_and_the_rest_named():
    differing = {0: 1, 60: -8, 120: 3, 180: 0, 240: 8, 300: -1}
    examined, skipped = windows_to_examine(differing, max_windows=3)
    # |8| twice (earliest first), then 3; ties at |1| beyond the bound; a 0 is never a candidate
    assert examined == [60, 120, 240] and skipped == [0, 300]
    assert windows_to_examine(differing, max_windows=0) == ([], [0, 60, 120, 240, 300])
    assert windows_to_examine({0: 0}, max_windows=10) == ([], [])
