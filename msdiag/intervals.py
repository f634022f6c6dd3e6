"""Interval arithmetic on timelines: union, intersection, difference and clipping.

A set of intervals is a pair of float arrays (starts, ends) with start <= end. ``merge`` turns
any set into its canonical form: sorted, disjoint, non-touching. Everything is vectorised with
numpy so that a rank with millions of kernels stays fast.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

EMPTY: Intervals = (np.empty(0), np.empty(0))


def make(starts: "np.ndarray | list[float]", durs: "np.ndarray | list[float]") -> Intervals:
    """Intervals from starts and durations (negative or NaN durations are dropped)."""
    s = np.asarray(starts, dtype=float)
    d = np.asarray(durs, dtype=float)
    ok = np.isfinite(s) & np.isfinite(d) & (d >= 0)
    return s[ok], s[ok] + d[ok]


def merge(iv: Intervals) -> Intervals:
    """The union of possibly overlapping intervals, as sorted disjoint intervals."""
    s, e = iv
    if len(s) == 0:
        return EMPTY
    order = np.argsort(s, kind="stable")
    s = s[order]
    e = e[order]
    run_end = np.maximum.accumulate(e)
    # a new block starts where the start lies beyond every end seen so far
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    starts = s[idx]
    ends = np.append(run_end[idx[1:] - 1], run_end[-1])
    keep = ends > starts
    return starts[keep], ends[keep]


def total(iv: Intervals) -> float:
    """Total length covered (the union is taken first)."""
    return length(merge(iv))


def length(merged: Intervals) -> float:
    """Total length of intervals already merged (:func:`merge`'s output, which merging again gives back as it is):
    what :func:`total` gives for them, without the merge."""
    s, e = merged
    return float(np.sum(e - s))


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """The intersection of two interval sets."""
    a = merge(a)
    b = merge(b)
    if len(a[0]) == 0 or len(b[0]) == 0:
        return EMPTY
    # sweep over the sorted boundaries of both sets, counting how many cover each segment
    pts = np.concatenate([a[0], a[1], b[0], b[1]])
    delta = np.concatenate(
        [np.ones(len(a[0])), -np.ones(len(a[1])), np.ones(len(b[0])), -np.ones(len(b[1]))]
    )
    order = np.lexsort((delta, pts))  # ends before starts at equal points: touching is not overlap
    pts = pts[order]
    depth = np.cumsum(delta[order])
    both = depth[:-1] == 2
    s = pts[:-1][both]
    e = pts[1:][both]
    keep = e > s
    return merge((s[keep], e[keep]))


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The parts of ``a`` not covered by ``b``."""
    return subtract_merged(merge(a), merge(b))


def subtract_merged(a: Intervals, b: Intervals) -> Intervals:
    """:func:`subtract` of intervals already merged (merging them again gives them back as they are)."""
    if len(a[0]) == 0:
        return EMPTY
    if len(b[0]) == 0:
        return a
    pts = np.concatenate([a[0], a[1], b[0], b[1]])
    da = np.concatenate([np.ones(len(a[0])), -np.ones(len(a[1])), np.zeros(2 * len(b[0]))])
    db = np.concatenate([np.zeros(2 * len(a[0])), np.ones(len(b[0])), -np.ones(len(b[1]))])
    order = np.argsort(pts, kind="stable")
    pts = pts[order]
    ca = np.cumsum(da[order])
    cb = np.cumsum(db[order])
    only_a = (ca[:-1] > 0) & (cb[:-1] <= 0)
    s = pts[:-1][only_a]
    e = pts[1:][only_a]
    keep = e > s
    return merge((s[keep], e[keep]))


def clip(iv: Intervals, lo: float, hi: float) -> Intervals:
    """The parts of the intervals inside [lo, hi]."""
    s, e = iv
    s2 = np.maximum(s, lo)
    e2 = np.minimum(e, hi)
    keep = e2 > s2
    return s2[keep], e2[keep]


# Interval sets of many windows at once: each interval carries its window's number ``g`` (an int array beside starts
# and ends). Each function gives, window by window, exactly what its one-window counterpart gives for that window's
# intervals in their order: the same floats in the same order (tests/test_intervals.py), so that figures summed per
# window with :func:`group_lengths` are the one-window figures to the bit.
Grouped = tuple[np.ndarray, np.ndarray, np.ndarray]  # (starts, ends, window numbers)


def make_groups(starts: np.ndarray, durs: np.ndarray, groups: np.ndarray, rows: np.ndarray) -> Grouped:
    """:func:`make`'s intervals of the ``rows`` (a mask) of several windows' starts and durations, each with its window
    number from ``groups`` (a negative or NaN duration dropped, as make drops it)."""
    ok = rows & np.isfinite(starts) & np.isfinite(durs) & (durs >= 0)
    return starts[ok], starts[ok] + durs[ok], groups[ok]


def merge_groups(iv: Grouped) -> Grouped:
    """:func:`merge` within each window, the windows ascending: the intervals ordered by (window, start; stable, as
    merge sorts them), each window's running end taken by one cumulative maximum over (window, rank of the end)
    keys, exact where a maximum of the floats shifted by window would round."""
    s, e, g = iv
    n = len(s)
    if n == 0:
        return s[:0], e[:0], g[:0]
    order = np.lexsort((s, g))  # (stable: ties in a window keep their order, as merge's stable argsort)
    s, e, g = s[order], e[order], g[order]
    by_end = np.argsort(e, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[by_end] = np.arange(n)
    key = g.astype(np.int64) * n + rank
    run_end = e[by_end][np.maximum.accumulate(key) - g.astype(np.int64) * n]
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = (s[1:] > run_end[:-1]) | (g[1:] != g[:-1])
    idx = np.flatnonzero(new)
    starts = s[idx]
    ends = np.append(run_end[idx[1:] - 1], run_end[-1])
    keep = ends > starts
    return starts[keep], ends[keep], g[idx][keep]


def clip_groups(iv: Grouped, lo: np.ndarray, hi: np.ndarray) -> Grouped:
    """:func:`clip` of each window's intervals to its own [lo, hi] (``lo``, ``hi``: per window number)."""
    s, e, g = iv
    s2 = np.maximum(s, lo[g])
    e2 = np.minimum(e, hi[g])
    keep = e2 > s2
    return s2[keep], e2[keep], g[keep]


def subtract_merged_groups(a: Grouped, b: Grouped) -> Grouped:
    """:func:`subtract_merged` within each window (both sets merged per window, :func:`merge_groups`). One sweep over
    every window's boundaries ordered by (window, point; stable over a's starts, a's ends, b's starts, b's ends, as the
    one-window sweep lays them out): each window's counts return to zero at its end, so a running sum over all of them
    is each window's own."""
    if len(a[0]) == 0:
        return a
    pts = np.concatenate([a[0], a[1], b[0], b[1]])
    gs = np.concatenate([a[2], a[2], b[2], b[2]])
    na, nb = len(a[0]), len(b[0])
    da = np.concatenate([np.ones(na), -np.ones(na), np.zeros(2 * nb)])
    db = np.concatenate([np.zeros(2 * na), np.ones(nb), -np.ones(nb)])
    order = np.lexsort((pts, gs))
    pts, gs = pts[order], gs[order]
    ca = np.cumsum(da[order])
    cb = np.cumsum(db[order])
    only_a = (ca[:-1] > 0) & (cb[:-1] <= 0)
    s = pts[:-1][only_a]
    e = pts[1:][only_a]
    g = gs[:-1][only_a]
    keep = e > s
    return merge_groups((s[keep], e[keep], g[keep]))


def concat_groups(a: Grouped, b: Grouped) -> Grouped:
    """Two grouped sets as one (merged by :func:`merge_groups`, a window's intervals of ``a`` before those of ``b``,
    as the one-window concatenation puts them)."""
    return np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]), np.concatenate([a[2], b[2]])


def group_lengths(merged: Grouped, windows: int) -> np.ndarray:
    """:func:`length` of each window's merged intervals (windows 0..windows-1, in window order: :func:`merge_groups`'
    output), each summed by numpy over its own slice, as the one-window sum is."""
    s, e, g = merged
    cuts = np.searchsorted(g, np.arange(windows + 1))
    diff = e - s
    return np.array([float(np.sum(diff[cuts[i]:cuts[i + 1]])) for i in range(windows)], dtype=np.float64)
