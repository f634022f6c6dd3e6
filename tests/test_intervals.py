"""Property tests of the interval arithmetic the step breakdown stands on."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from msdiag import intervals as iv
from msdiag.metrics.breakdown import _window_parts

spans = st.lists(
    st.tuples(st.floats(0, 1000, allow_nan=False), st.floats(0, 200, allow_nan=False)), max_size=40
)


def _iv(pairs: list[tuple[float, float]]) -> iv.Intervals:
    return iv.make([p[0] for p in pairs], [p[1] for p in pairs])


def _one(x: iv.Intervals) -> iv.Grouped:
    """One window's intervals in the grouped form (window 0)."""
    return x[0], x[1], np.zeros(len(x[0]), dtype=np.int64)


def _covered(x: iv.Intervals, grid: np.ndarray) -> np.ndarray:
    s, e = x
    return ((grid[:, None] >= s[None, :]) & (grid[:, None] < e[None, :])).any(axis=1) if len(s) else np.zeros(len(grid), bool)


@given(spans)
def test_merge_is_idempotent_and_disjoint(pairs: list[tuple[float, float]]) -> None:
    m = iv.merge(_iv(pairs))
    m2 = iv.merge(m)
    assert np.array_equal(m[0], m2[0]) and np.array_equal(m[1], m2[1])
    assert np.all(m[1] > m[0])
    assert np.all(m[0][1:] > m[1][:-1])  # sorted, disjoint, non-touching


@given(spans, spans)
def test_merged_shortcuts_give_what_the_merging_functions_give(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> None:
    # the step breakdown merges each set once (_window_parts): length and subtract_merged of merged sets are total and subtract
    # to the bit (a merged set merges to itself, so the same numbers are summed in the same order)
    x, y = _iv(a), _iv(b)
    mx, my = iv.merge(x), iv.merge(y)
    assert iv.length(mx) == iv.total(x)
    d, d2 = iv.subtract_merged(mx, my), iv.subtract(x, y)
    assert np.array_equal(d[0], d2[0]) and np.array_equal(d[1], d2[1])


@given(spans)
def test_union_never_exceeds_sum_nor_falls_below_longest(pairs: list[tuple[float, float]]) -> None:
    x = _iv(pairs)
    t = iv.total(x)
    lengths = x[1] - x[0]
    assert t <= lengths.sum() + 1e-6
    assert t >= (lengths.max() if len(lengths) else 0.0) - 1e-6


@given(spans, spans)
def test_overlap_never_exceeds_either_part(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> None:
    A, B = _iv(a), _iv(b)
    inter = iv.total(iv.intersect(A, B))
    assert inter <= iv.total(A) + 1e-6
    assert inter <= iv.total(B) + 1e-6
    # inclusion-exclusion: |A u B| = |A| + |B| - |A n B|
    union = iv.total((np.concatenate([A[0], B[0]]), np.concatenate([A[1], B[1]])))
    assert abs(union - (iv.total(A) + iv.total(B) - inter)) < 1e-6
    # A minus B plus A and B is A
    assert abs(iv.total(iv.subtract(A, B)) + inter - iv.total(A)) < 1e-6


@settings(max_examples=60)
@given(spans, spans)
def test_set_operations_agree_with_a_grid(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> None:
    A, B = _iv(a), _iv(b)
    grid = np.linspace(0, 1200, 2401) + 0.123  # off the integer and half-integer points
    ca, cb = _covered(A, grid), _covered(B, grid)
    assert np.array_equal(_covered(iv.intersect(A, B), grid), ca & cb)
    assert np.array_equal(_covered(iv.subtract(A, B), grid), ca & ~cb)


@given(spans, spans, spans)
def test_breakdown_parts_sum_to_the_step(comp: list[tuple[float, float]], comm: list[tuple[float, float]], recv: list[tuple[float, float]]) -> None:
    C, M = _iv(comp), _iv(comm)
    allst = np.concatenate([C[0], M[0]])
    if not len(allst):
        return
    lo, hi = float(allst.min()), float(np.concatenate([C[1], M[1]]).max())
    p = {k: float(v[0]) for k, v in _window_parts(_one(C), _one(M), _one(_iv(recv)), np.array([lo]), np.array([hi])).items()}
    total = p["total_us"]
    # computing + exposed communication + free == the step's span
    assert abs(p["computing_us"] + p["communication_exposed_us"] + p["free_us"] - total) < 1e-6 * max(1.0, total)
    shares = [p[k] / total for k in ("computing_us", "communication_exposed_us", "free_us")] if total > 0 else [0, 0, 0]
    assert all(-1e-9 <= s <= 1 + 1e-9 for s in shares)
    assert 0 <= p["overlapped_us"] <= min(p["computing_us"], p["communication_us"]) + 1e-6
    assert p["bubble_us"] <= total + 1e-6


# windows of intervals: the floats drawn from a few values so that ties (equal starts, equal ends, touching) are common
_tie_floats = st.sampled_from([0.0, 0.5, 1.0, 2.0, 2.5, 7.25, 10.0, 1e15, 1e15 + 0.25, 1e15 + 0.5]) | st.floats(0, 1000, allow_nan=False)
windows = st.lists(st.lists(st.tuples(_tie_floats, _tie_floats), max_size=12), min_size=1, max_size=6)


def _grouped(ws: list[list[tuple[float, float]]]) -> iv.Grouped:
    s = np.array([a for w in ws for a, _ in w], dtype=float)
    e = s + np.array([d for w in ws for _, d in w], dtype=float)
    g = np.array([i for i, w in enumerate(ws) for _ in w], dtype=np.int64)
    return s, e, g


def _window(x: iv.Grouped, i: int) -> iv.Intervals:
    return x[0][x[2] == i], x[1][x[2] == i]


def _same(a: iv.Intervals, b: iv.Intervals) -> bool:
    # the same floats in the same order, to the bit
    return all(np.array_equal(np.asarray(p, dtype=float).view(np.int64), np.asarray(q, dtype=float).view(np.int64))
               for p, q in zip(a, b))


@settings(max_examples=300)
@given(windows, windows)
def test_grouped_functions_are_the_one_window_functions_window_by_window(wa: list[list[tuple[float, float]]],
                                                                          wb: list[list[tuple[float, float]]]) -> None:
    # merge_groups, clip_groups, subtract_merged_groups, concat_groups and group_lengths on several windows at once give,
    # for each window, what merge, clip, subtract_merged, the concatenation and length give for it alone, to the bit
    n = max(len(wa), len(wb))
    wa, wb = wa + [[]] * (n - len(wa)), wb + [[]] * (n - len(wb))
    a, b = _grouped(wa), _grouped(wb)
    lo = np.array([min([x for x, _ in w] or [0.0]) for w in wa]) + 0.5
    hi = lo + 5.0
    ca, cb = iv.clip_groups(a, lo, hi), iv.clip_groups(b, lo, hi)
    ma, mb = iv.merge_groups(ca), iv.merge_groups(cb)
    sub = iv.subtract_merged_groups(ma, mb)
    both = iv.merge_groups(iv.concat_groups(ma, mb))
    for i in range(n):
        one_a = iv.merge(iv.clip(_window(a, i), lo[i], hi[i]))
        one_b = iv.merge(iv.clip(_window(b, i), lo[i], hi[i]))
        assert _same(_window(ma, i), one_a) and _same(_window(mb, i), one_b)
        assert _same(_window(sub, i), iv.subtract_merged(one_a, one_b))
        assert _same(_window(both, i), iv.merge((np.concatenate([one_a[0], one_b[0]]), np.concatenate([one_a[1], one_b[1]]))))
        assert _same(_window(iv.merge_groups(a), i), iv.merge(_window(a, i)))
    for merged in (ma, mb, sub, both):
        lengths = iv.group_lengths(merged, n)
        assert [x.hex() for x in lengths] == [iv.length(_window(merged, i)).hex() for i in range(n)]


def test_make_groups_is_make_window_by_window() -> None:
    # intervals.make_groups: make's intervals of the masked rows, each with its window; by hand: window 0 keeps its
    # first op (the second has a NaN duration), window 1 keeps its first (the second's duration is negative, the third
    # is masked out)
    s = np.array([1.0, 2.0, 5.0, 6.0, 7.0])
    d = np.array([0.5, np.nan, 1.0, -1.0, 2.0])
    g = np.array([0, 0, 1, 1, 1])
    rows = np.array([True, True, True, True, False])
    got = iv.make_groups(s, d, g, rows)
    assert got[0].tolist() == [1.0, 5.0] and got[1].tolist() == [1.5, 6.0] and got[2].tolist() == [0, 1]
    for w in (0, 1):
        one = iv.make(s[rows & (g == w)], d[rows & (g == w)])
        assert _same(_window(got, w), one)
