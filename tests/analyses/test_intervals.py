"""Interval arithmetic: table cases, and properties against a brute-force model on a grid."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdiag.analyses import intervals as iv


def a(*rows: tuple[int, int]) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


@pytest.mark.parametrize(
    "rows, expected",
    [
        ((), ()),
        (((0, 10),), ((0, 10),)),
        (((5, 5), (7, 6)), ()),  # empty and inverted rows vanish
        (((0, 10), (5, 20)), ((0, 20),)),  # overlap
        (((0, 10), (10, 20)), ((0, 20),)),  # touching
        (((30, 40), (0, 10), (2, 3)), ((0, 10), (30, 40))),  # unsorted, nested
        (((0, 100), (10, 20), (30, 40), (50, 150)), ((0, 150),)),  # a long one swallows later ones
    ],
)
def test_union(rows, expected):
    assert iv.union(a(*rows)).tolist() == [list(r) for r in expected]


def test_a_union_comes_back_as_a_new_array():
    given = a((0, 10), (11, 20), (30, 40))  # a union already
    merged = iv.union(given)
    merged[:, 1] += 5  # a caller may widen what it got
    assert given.tolist() == [[0, 10], [11, 20], [30, 40]]


def test_total_counts_overlap_once():
    # Two kernels on two streams, overlapping by 40: 60 + 60 - 40.
    assert iv.total(a((0, 60), (20, 80))) == 80


def test_intersect_and_subtract():
    x, y = a((0, 100)), a((20, 30), (60, 90))
    assert iv.intersect(x, y).tolist() == [[20, 30], [60, 90]]
    assert iv.intersection_length(x, y) == 40
    assert iv.subtract(x, y).tolist() == [[0, 20], [30, 60], [90, 100]]
    assert iv.subtract(y, x).size == 0
    assert iv.intersect(x, iv.EMPTY).size == 0
    assert iv.subtract(x, iv.EMPTY).tolist() == [[0, 100]]


def test_touching_sets_do_not_intersect():
    assert iv.intersection_length(a((0, 10)), a((10, 20))) == 0
    assert iv.subtract(a((10, 20)), a((0, 10))).tolist() == [[10, 20]]


def test_clip_and_gaps():
    busy = a((10, 20), (40, 50))
    assert iv.clip(busy, 15, 45).tolist() == [[15, 20], [40, 45]]
    assert iv.gaps(busy, 0, 60).tolist() == [[0, 10], [20, 40], [50, 60]]
    assert iv.gaps(busy, 0, 60, min_len=15).tolist() == [[20, 40]]
    assert iv.gaps(iv.EMPTY, 0, 5).tolist() == [[0, 5]]
    assert iv.gaps(busy, 5, 5).size == 0


def test_covered_in_windows():
    busy = a((10, 20), (40, 50))
    lo, hi = np.array([0, 15, 20, 45, 100]), np.array([60, 45, 40, 46, 200])
    assert iv.covered_in_windows(busy, lo, hi).tolist() == [20, 10, 0, 1, 0]
    assert iv.covered_in_windows(iv.EMPTY, lo, hi).tolist() == [0] * 5


def test_as_intervals_checks_lengths():
    with pytest.raises(ValueError, match="differ in length"):
        iv.as_intervals([1, 2], [3])


# --- properties against a model: a boolean array over a small integer grid ---
GRID = 64
rows_strategy = st.lists(st.tuples(st.integers(0, GRID), st.integers(0, GRID)), max_size=12)


def covered(rows) -> np.ndarray:
    mask = np.zeros(GRID, dtype=bool)
    for s, e in rows:
        mask[s:e] = True
    return mask


def as_mask(result: np.ndarray) -> np.ndarray:
    assert (result[:, 1] > result[:, 0]).all()
    assert (result[1:, 0] > result[:-1, 1]).all()  # sorted, disjoint, not touching
    return covered(result.tolist())


@settings(max_examples=150, deadline=None)
@given(rows_strategy, rows_strategy, st.integers(0, GRID), st.integers(0, GRID))
def test_operations_match_the_grid_model(xs, ys, lo, hi):
    x, y = a(*xs), a(*ys)
    mx, my = covered(xs), covered(ys)
    assert (as_mask(iv.union(x)) == mx).all()
    assert iv.total(x) == mx.sum()
    assert (as_mask(iv.intersect(x, y)) == (mx & my)).all()
    assert (as_mask(iv.subtract(x, y)) == (mx & ~my)).all()
    assert iv.overlaps(x, y) == bool((mx & my).any()) == bool(iv.intersect(x, y).size)
    window = np.zeros(GRID, dtype=bool)
    window[lo:hi] = True
    assert (as_mask(iv.clip(x, lo, hi)) == (mx & window)).all()
    assert (covered(iv.gaps(x, lo, hi).tolist()) == (~mx & window)).all()
    assert iv.covered_in_windows(x, np.array([lo]), np.array([hi]))[0] == (mx & window).sum()


def test_spans_inside_the_runs_change_no_subtraction() -> None:
    from jaxdiag.analyses.compile_spans import _not_within

    rng = np.random.default_rng(0)
    for _ in range(500):
        starts = rng.integers(0, 1000, rng.integers(0, 60))
        spans = np.stack([starts, starts + rng.integers(-5, 120, len(starts))], axis=1)
        begins = rng.integers(0, 1000, rng.integers(0, 8))
        runs = iv.union(np.stack([begins, begins + rng.integers(0, 200, len(begins))], axis=1))
        kept = _not_within(spans, runs)
        assert len(kept) <= len(spans)
        assert iv.subtract(kept, runs).tolist() == iv.subtract(spans, runs).tolist()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(-5, 40), st.integers(-5, 40)),  # group, start, end (may be empty)
        max_size=30,
    ),
    st.sampled_from([0, 1 << 61]),  # where the times lie: near zero, or near int64's end
)
def test_totals_are_each_groups_total(rows, base):
    groups = np.array([g for g, _, _ in rows], dtype=np.int64)
    spans = np.array([(base + s, base + e) for _, s, e in rows], dtype=np.int64).reshape(-1, 2)
    want = [iv.total(spans[groups == g]) for g in range(4)]
    assert iv.totals(spans, groups, 4).tolist() == want


def test_totals_of_groups_too_far_apart_to_line_up():
    spans = np.array([[0, 10], [5, 20], [0, 1 << 61], [1 << 61, (1 << 61) + 3]], dtype=np.int64)
    assert iv.totals(spans, np.array([0, 0, 1, 2]), 4).tolist() == [20, 1 << 61, 3, 0]
