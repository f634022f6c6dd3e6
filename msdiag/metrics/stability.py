"""The arithmetic of training stability, on plain arrays: robust spikes, warm-up, periodic slow steps.

Pure numpy helpers shared by :mod:`msdiag.metrics.training` (the registered metrics) and the training-log
views; no metric is registered here.

Spikes are judged against the recent past, robustly: a value is a spike when it exceeds the median of
the ``window`` values before it by more than ``k`` scaled MADs (1.4826 x the median absolute deviation:
the standard deviation for normal noise) AND by more than ``min_rise`` of that median (a flat series has
no MAD). The first value has no past: spikes are counted from the second on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAD_SCALE = 1.4826  # MAD -> standard deviation for normal noise


@dataclass(frozen=True)
class Spike:
    """One spike: its position in the series, its value, and the median of the values before it."""

    index: int
    value: float
    baseline: float

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline > 0 else float("inf")


def spikes(values: np.ndarray, window: int, k: float, min_rise: float) -> list[Spike]:
    """The spikes of a series (finite values only; NaN / inf are not spikes but findings of their own)."""
    out = []
    for i in range(1, len(values)):
        v = values[i]
        past = values[max(0, i - window) : i]
        past = past[np.isfinite(past)]
        if not np.isfinite(v) or not len(past):
            continue
        med = float(np.median(past))
        mad = MAD_SCALE * float(np.median(np.abs(past - med)))
        if v > med + k * mad and v > med + min_rise * abs(med):
            out.append(Spike(i, float(v), med))
    return out


def unrecovered(values: np.ndarray, spike: Spike, window: int, min_rise: float) -> bool:
    """Whether the series stays above ``(1 + min_rise)`` x the spike's baseline for the whole ``window``
    values after it. A spike fewer than ``window`` values before the end is judged on what follows it,
    and one at the very end (nothing follows) is not called unrecovered: the log cannot tell."""
    after = values[spike.index + 1 : spike.index + 1 + window]
    after = after[np.isfinite(after)] if np.isfinite(after).all() else after
    if not len(after):
        return False
    return not bool((after <= spike.baseline * (1 + min_rise) + 1e-12).any())


def warmup_steps(steps: np.ndarray, lr: np.ndarray) -> int:
    """Steps of a learning-rate warm-up: from the first logged step to the first reaching 95% of the peak,
    when the first logged rate is below half the peak (a ramp); 0 when the schedule starts at its peak."""
    ok = np.isfinite(lr)
    s, v = steps[ok], lr[ok]
    peak = float(v.max())
    if peak <= 0 or v[0] >= 0.5 * peak:
        return 0
    first_high = int(np.argmax(v >= 0.95 * peak))
    return int(s[first_high] - s[0])


@dataclass(frozen=True)
class Period:
    """Steps slow every ``every`` steps (at ``step % every == phase``): which, and what they cost."""

    every: int
    phase: int
    steps: tuple[int, ...]
    extra_ms: float  # their time minus as many median steps
    median_ms: float


def periodic_slow(steps: np.ndarray, ms: np.ndarray, factor: float, min_repeats: int, min_coverage: float = 0.75) -> Period | None:
    """The period of the steps slower than ``factor`` x the median step (the first step, compilation, left
    out): the (period, phase) whose positions are slow at least ``min_coverage`` of the time and hold the
    most slow steps (at least ``min_repeats``); the smaller period on a tie. None when no period holds."""
    ok = np.isfinite(ms)
    s, t = steps[ok].astype(np.int64), ms[ok]
    if len(s) < 2 * min_repeats:
        return None
    rest_s, rest_t = s[1:], t[1:]
    med = float(np.median(rest_t))
    slow = set(rest_s[rest_t > factor * med].tolist())
    if len(slow) < min_repeats:
        return None
    best: tuple[int, int, int] | None = None  # (hits, -every, phase)
    for every in range(2, max(3, len(rest_s) // min_repeats + 1)):
        for phase in range(every):
            at = rest_s[rest_s % every == phase]
            hits = sum(1 for x in at.tolist() if x in slow)
            if hits >= min_repeats and len(at) and hits / len(at) >= min_coverage and (best is None or (hits, -every) > best[:2]):
                best = (hits, -every, phase)
    if best is None:
        return None
    every, phase = -best[1], best[2]
    picked = [(int(x), float(y)) for x, y in zip(rest_s, rest_t) if x % every == phase and int(x) in slow]
    return Period(every, phase, tuple(x for x, _ in picked), float(sum(y - med for _, y in picked)), med)


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None for fewer than 3 points or a constant series."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 3:
        return None
    rx, ry = _ranks(x), _ranks(y)
    sx, sy = float(np.std(rx)), float(np.std(ry))
    if sx == 0 or sy == 0:
        return None
    return float(np.mean((rx - rx.mean()) * (ry - ry.mean())) / (sx * sy))


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="mergesort")
    r = np.empty(len(v), dtype=float)
    r[order] = np.arange(len(v), dtype=float)
    for val in np.unique(v):  # ties share their mean rank
        idx = v == val
        if idx.sum() > 1:
            r[idx] = r[idx].mean()
    return r
