"""Training-stability metrics from a training log (``msdiag analyze TRAIN.log`` / ``--train-log``).

Each reads ``Context.train_log`` (:class:`msdiag.trainlog.reader.TrainLog`) and is null with the reason
without one, or when the log lacks the field (a MindSpore LossMonitor log has no learning rate). Loss
metrics read the reference rank: the lowest rank whose losses are not all zero (under pipeline
parallelism only the last stage's loss is real); the per-rank values are given beside. Spike thresholds
are the rule ``stability-loss-spike``'s parameters (window, mad_k, min_rise); the periodic slow steps
cut at ``stability-checkpoint-stall``'s (slow_factor, min_repeats). The arithmetic is in
:mod:`msdiag.metrics.stability`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from msdiag.metrics import stability as stab
from msdiag.metrics.registry import Context, Value, metric

NO_LOG = "no training log (msdiag analyze TRAIN.log, or msdiag analyze CAPTURE --train-log TRAIN.log)"
SOURCE = "training log"
SPIKE_PARAMS = ("stability-loss-spike.window", "stability-loss-spike.mad_k", "stability-loss-spike.min_rise")
STALL_PARAMS = ("stability-checkpoint-stall.slow_factor", "stability-checkpoint-stall.min_repeats")
MAX_LISTED = 10  # spike steps listed in loss_spike_steps


def reference(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    """The reference rank's steps (sorted by step), or (None, why)."""
    log = ctx.train_log
    if log is None:
        return None, NO_LOG
    st = log.steps
    for rank in sorted(st["rank"].dropna().unique().tolist()):
        g = st[st["rank"] == rank].sort_values("step")
        loss = g["loss"].to_numpy(dtype=float)
        if len(g) and not np.all(loss[np.isfinite(loss)] == 0):
            return g.reset_index(drop=True), None
    return None, "every logged loss is zero"


def _spike_params(ctx: Context) -> tuple[int, float, float]:
    p = ctx.options.param
    return int(p("stability-loss-spike.window")), float(p("stability-loss-spike.mad_k")), float(p("stability-loss-spike.min_rise"))


def loss_spikes(ctx: Context, g: pd.DataFrame) -> list[stab.Spike]:
    """The reference rank's loss spikes (cached for the analysis)."""
    key = "train_loss_spikes"
    if key not in ctx.cache:
        w, k, rise = _spike_params(ctx)
        ctx.cache[key] = stab.spikes(g["loss"].to_numpy(dtype=float), w, k, rise)
    out: list[stab.Spike] = ctx.cache[key]
    return out


def _column(g: pd.DataFrame, col: str, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the steps where ``col`` is logged; Unavailable-style ValueError when never."""
    ok = g[col].notna().to_numpy()
    if not ok.any():
        raise LookupError(f"the training log has no {what}")
    return g["step"].to_numpy(dtype=float)[ok], g[col].to_numpy(dtype=float)[ok]


def _ref(fn: Callable[[Context, pd.DataFrame], Any]) -> Callable[[Context], Value]:
    """A metric of the reference rank: null with the reason when there is no log or the field is absent."""

    def run(ctx: Context) -> Value:
        g, why = reference(ctx)
        if g is None:
            return Value(None, reason=why)
        try:
            out = fn(ctx, g)
        except LookupError as e:
            return Value(None, reason=str(e).strip("'\""))
        return out if isinstance(out, Value) else Value(out)

    return run


# ---- loss ---------------------------------------------------------------------------------------

metric("train_log_steps", "steps", "Training steps the log records (the reference rank's)", SOURCE)(
    _ref(lambda ctx, g: int(len(g)))
)


@metric("loss_spike_count", "steps", "Loss spikes: steps whose loss exceeds the median of the previous `window` steps by more than "
        "`mad_k` scaled MADs and by `min_rise` of that median (counted from the second step)", f"{SOURCE}: loss", params=SPIKE_PARAMS)
def _spike_count(ctx: Context) -> Value:
    return _ref(lambda c, g: len(loss_spikes(c, g)))(ctx)


@metric("loss_spike_max_ratio", "x", "The largest loss spike over the median loss of the steps before it", f"{SOURCE}: loss", params=SPIKE_PARAMS)
def _spike_max(ctx: Context) -> Value:
    def f(c: Context, g: pd.DataFrame) -> Value:
        sp = loss_spikes(c, g)
        return Value(max(s.ratio for s in sp)) if sp else Value(None, reason="no loss spike")

    return _ref(f)(ctx)


@metric("loss_spike_steps", "text", f"The steps of the loss spikes (the first {MAX_LISTED})", f"{SOURCE}: loss", params=SPIKE_PARAMS)
def _spike_steps(ctx: Context) -> Value:
    def f(c: Context, g: pd.DataFrame) -> Value:
        sp = loss_spikes(c, g)
        steps = g["step"].to_numpy()
        return Value(", ".join(str(int(steps[s.index])) for s in sp[:MAX_LISTED])) if sp else Value(None, reason="no loss spike")

    return _ref(f)(ctx)


@metric("loss_spike_first_step", "steps", "The step of the first loss spike", f"{SOURCE}: loss", params=SPIKE_PARAMS)
def _spike_first(ctx: Context) -> Value:
    def f(c: Context, g: pd.DataFrame) -> Value:
        sp = loss_spikes(c, g)
        return Value(int(g["step"].iloc[sp[0].index])) if sp else Value(None, reason="no loss spike")

    return _ref(f)(ctx)


@metric("loss_spike_unrecovered", "steps", "Loss spikes the loss does not recover from: within `window` steps after the spike it never "
        "comes back within `min_rise` of the median before it", f"{SOURCE}: loss", params=SPIKE_PARAMS)
def _unrecovered(ctx: Context) -> Value:
    def f(c: Context, g: pd.DataFrame) -> int:
        w, _, rise = _spike_params(c)
        loss = g["loss"].to_numpy(dtype=float)
        return sum(1 for s in loss_spikes(c, g) if stab.unrecovered(loss, s, w, rise))

    return _ref(f)(ctx)


@metric("loss_spike_same_batch", "steps", "Loss spikes at a step of the epoch where another epoch also spiked (the same batch, "
        "when the data is not reshuffled)", f"{SOURCE}: loss, epochs", params=SPIKE_PARAMS)
def _same_batch(ctx: Context) -> Value:
    def f(c: Context, g: pd.DataFrame) -> int:
        spe = c.train_log.steps_per_epoch if c.train_log is not None else None
        if not spe or g["epoch"].nunique() < 2:
            raise LookupError("the log has one epoch (or no epochs): a recurring batch cannot be told")
        steps = g["step"].to_numpy()
        at = [(int(steps[s.index]) - 1) % spe for s in loss_spikes(c, g)]
        return sum(1 for x in at if at.count(x) > 1)

    return _ref(f)(ctx)


@metric("loss_nonfinite_steps", "steps", "Steps whose loss is NaN or infinite (or where the job stopped on such a loss)", f"{SOURCE}: loss")
def _nonfinite(ctx: Context) -> Value:
    return _ref(lambda c, g: int((~np.isfinite(g["loss"].to_numpy(dtype=float))).sum()))(ctx)


def _end_over_start(g: pd.DataFrame) -> float:
    loss = g["loss"].to_numpy(dtype=float)
    loss = loss[np.isfinite(loss)]
    if len(loss) < 4 or loss[0] <= 0:
        raise LookupError("fewer than 4 finite losses (or a first loss <= 0): no trend")
    tail = loss[-max(3, min(50, len(loss) // 10)) :]
    return float(np.median(tail) / loss[0])


metric("loss_end_over_start", "x", "Where the loss ends against where it started: the median of the last tenth of the steps "
       "(3 to 50) over the first step's loss (1 or more: it never fell)", f"{SOURCE}: loss")(_ref(lambda ctx, g: _end_over_start(g)))


@metric("loss_trend_corr", "ratio", "Whether the loss rises over the second half of the run: Spearman correlation of loss with step "
        "there (+1: rising throughout)", f"{SOURCE}: loss")
def _trend(ctx: Context) -> Value:
    def f(c: Context, g: pd.DataFrame) -> Value:
        half = g.iloc[len(g) // 2 :]
        r = stab.spearman(half["step"].to_numpy(dtype=float), half["loss"].to_numpy(dtype=float))
        return Value(r) if r is not None else Value(None, reason="fewer than 3 finite losses in the second half")

    return _ref(f)(ctx)


# ---- learning rate, gradient norm, loss scale -----------------------------------------------------------


metric("lr_peak", "", "The peak learning rate the log shows", f"{SOURCE}: lr")(
    _ref(lambda ctx, g: float(np.nanmax(_column(g, "lr", "learning rate")[1])))
)
metric("lr_warmup_steps", "steps", "Learning-rate warm-up: steps from the first logged step to 95% of the peak when the schedule "
       "starts below half the peak; 0 when it starts at its peak (no warm-up)", f"{SOURCE}: lr")(
    _ref(lambda ctx, g: stab.warmup_steps(*_column(g, "lr", "learning rate")))
)


@metric("grad_norm_spike_count", "steps", "Gradient-norm spikes (the loss-spike test applied to the global gradient norm)",
        f"{SOURCE}: grad_norm", params=SPIKE_PARAMS)
def _gn_spikes(ctx: Context) -> Value:
    def f(c: Context, g: pd.DataFrame) -> int:
        w, k, rise = _spike_params(c)
        return len(stab.spikes(_column(g, "grad_norm", "gradient norm")[1], w, k, rise))

    return _ref(f)(ctx)


@metric("grad_clip_share", "ratio", "Share of steps whose gradient norm reached the clipping threshold (max_grad_norm)", f"{SOURCE}: grad_norm")
def _clip_share(ctx: Context) -> Value:
    def f(c: Context, g: pd.DataFrame) -> float:
        norms = _column(g, "grad_norm", "gradient norm")[1]
        clip = c.train_log.max_grad_norm if c.train_log is not None else None
        if clip is None:
            raise LookupError("the log does not state the clipping threshold (max_grad_norm)")
        return float((norms >= clip).mean())

    return _ref(f)(ctx)


metric("overflow_share", "ratio", "Share of the logged steps that overflowed (dynamic loss scaling skipped or rescaled them)",
       f"{SOURCE}: overflow")(_ref(lambda ctx, g: float(np.mean(_column_bool(g)))))


def _column_bool(g: pd.DataFrame) -> list[bool]:
    v = g["overflow"].dropna()
    if not len(v):
        raise LookupError("the training log does not say which steps overflowed")
    return [bool(x) for x in v]


@metric("loss_scale_drops", "steps", "Times the loss scale fell from one logged step to the next", f"{SOURCE}: loss_scale")
def _scale_drops(ctx: Context) -> Value:
    return _ref(lambda c, g: int((np.diff(_column(g, "loss_scale", "loss scale")[1]) < 0).sum()))(ctx)


metric("loss_scale_min", "", "The smallest loss scale logged", f"{SOURCE}: loss_scale")(
    _ref(lambda ctx, g: float(np.nanmin(_column(g, "loss_scale", "loss scale")[1])))
)


UNSTABLE_PARAMS = SPIKE_PARAMS + ("stability-loss-unstable.recurring", "stability-loss-unstable.no_progress")


@metric("loss_unstable", "flag", "The loss is unstable: a NaN / inf loss, or spikes that recur (at least `recurring`), are not "
        "recovered from, or come with a loss ending above `no_progress` x its first value (1), else 0", f"{SOURCE}: loss",
        params=UNSTABLE_PARAMS)
def _unstable(ctx: Context) -> Value:
    def f(c: Context, g: pd.DataFrame) -> int:
        loss = g["loss"].to_numpy(dtype=float)
        if (~np.isfinite(loss)).any():
            return 1
        sp = loss_spikes(c, g)
        if not sp:
            return 0
        w, _, rise = _spike_params(c)
        p = c.options.param
        ratio = _end_over_start(g) if len(loss) >= 4 and loss[0] > 0 else 0.0
        unrecovered = any(stab.unrecovered(loss, s, w, rise) for s in sp)
        return int(len(sp) >= int(p("stability-loss-unstable.recurring")) or unrecovered or ratio > float(p("stability-loss-unstable.no_progress")))

    return _ref(f)(ctx)
