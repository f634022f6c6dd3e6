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
