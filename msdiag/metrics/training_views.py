"""What the training-log charts draw (issue 18): the loss, learning-rate, gradient-norm and loss-scale curves
with the spikes and overflows marked, and the step times with the periodic slow steps (checkpoint stalls)
marked. Computed here from the analysis context and the metrics; ``report/training_charts.py`` only draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from msdiag.metrics.registry import Context, Value
from msdiag.metrics.training import loss_spikes, reference
from msdiag.metrics.training_time import slow_period, step_times

#: The curves drawn, in panel order: (column, label); a panel is drawn when the log has the column.
CURVES = (("loss", "loss"), ("lr", "learning rate"), ("grad_norm", "global gradient norm"), ("loss_scale", "loss scale"))


@dataclass
class Curve:
    name: str
    label: str
    steps: np.ndarray
    values: np.ndarray


@dataclass
class TrainCurves:
    """The reference rank's curves and where its spikes, overflows and NaN / inf losses fall."""

    rank: int | None = None
    curves: list[Curve] = field(default_factory=list)
    spike_steps: list[int] = field(default_factory=list)
    overflow_steps: list[int] = field(default_factory=list)
    nonfinite_steps: list[int] = field(default_factory=list)
    log_scale: bool = False  # the loss spans more than two decades: drawn on a log axis
    absent: str | None = None


@dataclass
class TrainStepTimes:
    """The reference rank's step times, the median, the periodic slow steps and the saves the log names."""

    steps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    median_ms: float | None = None
    period: int | None = None
    stall_steps: list[int] = field(default_factory=list)
    named_steps: list[int] = field(default_factory=list)  # checkpoint saves / evaluations the log names
    stall_share: float | None = None
    how: str | None = None  # how the log gives step times
    absent: str | None = None


def train_curves(ctx: Context) -> TrainCurves:
    g, why = reference(ctx)
    if g is None:
        return TrainCurves(absent=why)
    steps = g["step"].to_numpy(dtype=float)
    curves = []
    for col, label in CURVES:
        v = g[col].to_numpy(dtype=float)
        ok = np.isfinite(v)
        if ok.any():
            curves.append(Curve(col, label, steps[ok], v[ok]))
    loss = g["loss"].to_numpy(dtype=float)
    fin = loss[np.isfinite(loss)]
    over = g["overflow"].fillna(False).to_numpy(dtype=bool)
    return TrainCurves(
        rank=int(g["rank"].iloc[0]),
        curves=curves,
        spike_steps=[int(steps[s.index]) for s in loss_spikes(ctx, g)],
        overflow_steps=[int(s) for s in steps[over]],
        nonfinite_steps=[int(s) for s in steps[~np.isfinite(loss)]],
        log_scale=bool(len(fin) and fin.min() > 0 and fin.max() / fin.min() > 100),
        absent=None if curves else "the training log has no loss values",
    )


def train_step_times(ctx: Context, metrics: dict[str, Value]) -> TrainStepTimes:
    t, why = step_times(ctx)
    if t is None:
        return TrainStepTimes(absent=why)
    per, _ = slow_period(ctx)
    log = ctx.train_log
    ev = log.events if log is not None else None
    named = [] if ev is None or not len(ev) else [int(s) for s in ev[ev["kind"].isin(["checkpoint", "eval"])]["step"].dropna()]
    share = metrics.get("checkpoint_stall_share")
    med = metrics.get("train_step_time_ms")
    return TrainStepTimes(
        steps=t["step"].to_numpy(dtype=float),
        ms=t["step_time_ms"].to_numpy(dtype=float),
        median_ms=float(med.value) if med is not None and isinstance(med.value, (int, float)) else None,
        period=per.every if per else None,
        stall_steps=list(per.steps) if per else [],
        named_steps=sorted(set(named)),
        stall_share=float(share.value) if share is not None and isinstance(share.value, (int, float)) else None,
        how=log.step_time_from if log is not None else None,
    )
