"""Two-sample statistics for comparing captures: a bootstrap interval and a rank test (numpy only).

Used by ``msdiag.diff`` to tell a real change of step time from run-to-run noise. Both work on
the per-step samples of two captures (warm-up steps left out, all ranks pooled):

- ``bootstrap``: each side resampled with replacement, ``RESAMPLES`` times with a fixed seed
  (the same input gives the same interval), the statistic recomputed on each resample; the
  percentile interval of ``stat(candidate) / stat(baseline) - 1`` (and of the plain difference).
- ``mann_whitney``: the Mann-Whitney U rank test, two-sided: exact (the distribution of U
  counted by recursion) when both sides are small and no value is tied, else the normal
  approximation with the tie correction and a continuity correction.
- ``min_p``: the smallest two-sided p a rank test can give for n against m samples,
  2 / C(n + m, n): 3 against 3 steps can never reach p < 0.05 (0.10), 4 against 4 can (0.029).

scipy is not a dependency: these are a few lines each, checked in tests/test_diff.py against
hand-computed values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

RESAMPLES = 2000
SEED = 20240607  # fixed: the interval of the same input never changes
CONFIDENCE = 0.95
EXACT_MAX_N = 25  # exact U distribution up to this many samples per side (when nothing is tied)

Statistic = Callable[[np.ndarray], np.ndarray]  # (resamples, n) rows -> (resamples,) statistic


@dataclass(frozen=True)
class Interval:
    """Bootstrap percentile intervals of the relative change and of the difference."""

    rel_low: float | None  # None when the baseline's statistic is 0 in some resample
    rel_high: float | None
    diff_low: float
    diff_high: float
    level: float
    resamples: int


@dataclass(frozen=True)
class RankTest:
    u: float  # U of the candidate's samples (number of pairs candidate > baseline, ties half)
    p_value: float
    method: str  # "exact" or "normal approximation, tie-corrected"


def bootstrap(
    base: np.ndarray,
    cand: np.ndarray,
    stat: Statistic,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = CONFIDENCE,
) -> Interval:
    """Percentile bootstrap interval of stat(cand) / stat(base) - 1 and of stat(cand) - stat(base).

    ``base`` and ``cand`` are 2-D (samples x columns) so that a statistic can combine columns
    (a share is sum(part) / sum(total) over the resampled steps); 1-D arrays are taken as one column.
    """
    b = base.reshape(len(base), -1)
    c = cand.reshape(len(cand), -1)
    rng = np.random.default_rng(seed)
    sb = stat(b[rng.integers(0, len(b), size=(resamples, len(b)))])
    sc = stat(c[rng.integers(0, len(c), size=(resamples, len(c)))])
    lo_q, hi_q = 100 * (1 - level) / 2, 100 * (1 + level) / 2
    diff = sc - sb
    d_lo, d_hi = (float(x) for x in np.percentile(diff, [lo_q, hi_q]))
    if np.all(sb > 0):
        r_lo, r_hi = (float(x) for x in np.percentile(sc / sb - 1.0, [lo_q, hi_q]))
        return Interval(r_lo, r_hi, d_lo, d_hi, level, resamples)
    return Interval(None, None, d_lo, d_hi, level, resamples)


def _ranks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) of x, and the sizes of its groups of tied values."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    starts = np.r_[0, np.flatnonzero(np.diff(xs)) + 1]
    counts = np.diff(np.r_[starts, len(xs)])
    avg = starts + (counts + 1) / 2.0  # mean of the 1-based ranks starts+1 .. starts+count
    ranks = np.empty(len(x), dtype=float)
    ranks[order] = np.repeat(avg, counts)
    return ranks, counts


@lru_cache(maxsize=256)
def _u_counts(n1: int, n2: int) -> tuple[float, ...]:
    """Number of orderings of n1 + n2 distinct values giving each U = 0 .. n1 * n2.

    U counts the pairs (x from the n1 side, y from the n2 side) with x > y. Recursion on the
    largest value: it belongs to the n1 side (it beats all n2 values: U - n2 on n1 - 1, n2) or to
    the n2 side (U on n1, n2 - 1).
    """
    if n1 == 0 or n2 == 0:
        return (1.0,)
    out = np.zeros(n1 * n2 + 1)
    a = np.asarray(_u_counts(n1 - 1, n2))
    out[n2 : n2 + len(a)] += a
    b = np.asarray(_u_counts(n1, n2 - 1))
    out[: len(b)] += b
    return tuple(float(x) for x in out)


def mann_whitney(base: np.ndarray, cand: np.ndarray) -> RankTest:
    """Two-sided Mann-Whitney U test of cand against base."""
    n1, n2 = len(cand), len(base)
    x = np.concatenate([cand, base]).astype(float)
    ranks, ties = _ranks(x)
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    tied = bool(np.any(ties > 1))
    if not tied and max(n1, n2) <= EXACT_MAX_N:
        counts = np.asarray(_u_counts(n1, n2))
        total = counts.sum()
        k = int(round(u))
        p_low = counts[: k + 1].sum() / total
        p_high = counts[k:].sum() / total
        return RankTest(u, float(min(1.0, 2.0 * min(p_low, p_high))), "exact")
    n = n1 + n2
    mu = n1 * n2 / 2.0
    tie_term = float(np.sum(ties.astype(float) ** 3 - ties)) / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if var <= 0:
        return RankTest(u, 1.0, "normal approximation, tie-corrected")
    z = (abs(u - mu) - 0.5) / math.sqrt(var)
    p = math.erfc(max(z, 0.0) / math.sqrt(2.0))
    return RankTest(u, float(min(1.0, p)), "normal approximation, tie-corrected")


def min_p(n1: int, n2: int) -> float:
    """Smallest two-sided p-value a rank test can reach with n1 against n2 samples: 2 / C(n1 + n2, n1)."""
    if n1 == 0 or n2 == 0:
        return 1.0
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def min_steps_per_side(alpha: float) -> int:
    """Fewest steps per side (n against n) with which a rank test can reach p < alpha."""
    n = 1
    while min_p(n, n) >= alpha:
        n += 1
    return n


# ---- the statistics diff compares -----------------------------------------------------------


def median(rows: np.ndarray) -> np.ndarray:
    """Median of the first column of each resample."""
    return np.median(rows[..., 0], axis=-1)


def p90(rows: np.ndarray) -> np.ndarray:
    """90th percentile (linear interpolation, as numpy.percentile) of the first column."""
    return np.percentile(rows[..., 0], 90, axis=-1)


def ratio_of_sums(rows: np.ndarray) -> np.ndarray:
    """sum(column 0) / sum(column 1): a share of step time over the resampled steps."""
    den = rows[..., 1].sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, rows[..., 0].sum(axis=-1) / np.where(den > 0, den, 1.0), np.nan)
