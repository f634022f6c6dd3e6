"""Training-log step time, throughput and rank agreement: checkpoint stalls, drift, ranks' losses.

Step times are the log's (``per_step_time`` / ``step time`` / TimeMonitor's mean per step of an epoch).
A log that names its checkpoint saves or evaluations (MindFormers ``Saving ckpt``, mindyolo / mindcv
``Saving model to``, an msdiag CSV / JSONL ``event``) lets the periodic slow steps be matched with them;
otherwise they are measured all the same and the report says the log does not name what they are.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msdiag.metrics import stability as stab
from msdiag.metrics.registry import Context, Value, metric
from msdiag.metrics.training import NO_LOG, SOURCE, STALL_PARAMS, reference

MIN_DRIFT_STEPS = 8  # steps with a time needed to compare the first and last quarters


def step_times(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    """The reference rank's steps that carry a time, or (None, why)."""
    g, why = reference(ctx)
    if g is None:
        return None, why
    t = g[g["step_time_ms"].notna()]
    if not len(t):
        return None, "the training log has no step times"
    return t.reset_index(drop=True), None


def slow_period(ctx: Context) -> tuple[stab.Period | None, str | None]:
    """The periodic slow steps of the reference rank (cached), or (None, why)."""
    if "train_period" not in ctx.cache:
        t, why = step_times(ctx)
        if t is None:
            ctx.cache["train_period"] = (None, why)
        else:
            p = ctx.options.param
            per = stab.periodic_slow(
                t["step"].to_numpy(dtype=float), t["step_time_ms"].to_numpy(dtype=float),
                float(p("stability-checkpoint-stall.slow_factor")), int(p("stability-checkpoint-stall.min_repeats")),
            )  # fmt: skip
            ctx.cache["train_period"] = (per, None if per is not None else "no steps are slow at a regular period")
    out: tuple[stab.Period | None, str | None] = ctx.cache["train_period"]
    return out


@metric("train_step_time_ms", "ms", "Median logged step time (the first step, compilation, left out)", f"{SOURCE}: step times")
def _median(ctx: Context) -> Value:
    t, why = step_times(ctx)
    if t is None:
        return Value(None, reason=why)
    ms = t["step_time_ms"].to_numpy(dtype=float)
    return Value(float(np.median(ms[1:] if len(ms) > 1 else ms)))


@metric("slow_step_period", "steps", "Steps are slow every N steps (slower than `slow_factor` x the median at one phase of a period, "
        "at least `min_repeats` times): N", f"{SOURCE}: step times", params=STALL_PARAMS)
def _period(ctx: Context) -> Value:
    per, why = slow_period(ctx)
    return Value(per.every) if per else Value(None, reason=why)


@metric("checkpoint_stall_steps", "steps", "The periodic slow steps (see slow_step_period)", f"{SOURCE}: step times", params=STALL_PARAMS)
def _stall_steps(ctx: Context) -> Value:
    per, why = slow_period(ctx)
    return Value(len(per.steps)) if per else Value(None, reason=why)


@metric("checkpoint_stall_share", "ratio", "Time the periodic slow steps cost: their time minus as many median steps, over the run's "
        "logged wall time (the sum of the step times); measured whether or not the log names the saves", f"{SOURCE}: step times",
        params=STALL_PARAMS)
def _stall_share(ctx: Context) -> Value:
    per, why = slow_period(ctx)
    if per is None:
        return Value(None, reason=why)
    t, _ = step_times(ctx)
    wall = float(t["step_time_ms"].sum()) if t is not None else 0.0
    return Value(per.extra_ms / wall if wall > 0 else None, reason=None if wall > 0 else "no logged wall time")


@metric("checkpoint_stall_ms", "ms", "Time the periodic slow steps cost over median steps, in total", f"{SOURCE}: step times", params=STALL_PARAMS)
def _stall_ms(ctx: Context) -> Value:
    per, why = slow_period(ctx)
    return Value(per.extra_ms) if per else Value(None, reason=why)


@metric("checkpoint_stall_named", "ratio", "Share of the periodic slow steps the log names as a checkpoint save or an evaluation "
        "(at that step or the one before)", f"{SOURCE}: events", params=STALL_PARAMS)
def _named(ctx: Context) -> Value:
    per, why = slow_period(ctx)
    if per is None:
        return Value(None, reason=why)
    ev = ctx.train_log.events if ctx.train_log is not None else None
    ev = ev[ev["kind"].isin(["checkpoint", "eval"])] if ev is not None else None
    if ev is None or not len(ev):
        return Value(None, reason="the log names no checkpoint saves or evaluations: what the slow steps do is not in the log")
    at = {int(s) for s in ev["step"].dropna().tolist()}
    return Value(sum(1 for s in per.steps if s in at or s - 1 in at) / len(per.steps))


@metric("throughput_drift", "ratio", "Throughput drift over the run: the median throughput of the last quarter of the logged steps over "
        "the first quarter's (step 1 left out), minus 1 (negative: the job slows down)", f"{SOURCE}: throughput or step times")
def _drift(ctx: Context) -> Value:
    g, why = reference(ctx)
    if g is None:
        return Value(None, reason=why)
    g = g.iloc[1:]
    if g["throughput"].notna().sum() >= MIN_DRIFT_STEPS:
        rate = g["throughput"].dropna().to_numpy(dtype=float)
    elif g["step_time_ms"].notna().sum() >= MIN_DRIFT_STEPS:
        ms = g["step_time_ms"].dropna().to_numpy(dtype=float)
        rate = 1000.0 / ms[ms > 0]
    else:
        return Value(None, reason=f"fewer than {MIN_DRIFT_STEPS} logged steps with a time or throughput")
    q = max(1, len(rate) // 4)
    first, last = float(np.median(rate[:q])), float(np.median(rate[-q:]))
    return Value(last / first - 1.0 if first > 0 else None)


@metric("rank_loss_spread", "ratio", "How far the ranks' losses disagree over the run: each rank's median loss over the steps every "
        "rank logs, (max - min) / |median| of those medians (per-batch noise of data-parallel ranks cancels out)",
        f"{SOURCE}: several ranks' loss")
def _spread(ctx: Context) -> Value:
    log = ctx.train_log
    if log is None:
        return Value(None, reason=NO_LOG)
    if len(log.ranks) < 2:
        return Value(None, reason="one rank's log: nothing to compare")
    st = log.steps[np.isfinite(log.steps["loss"].to_numpy(dtype=float))]
    n_ranks = st["rank"].nunique()
    common = st.groupby("step")["rank"].nunique()
    common = common[common == n_ranks].index
    if n_ranks < 2 or not len(common):
        return Value(None, reason="no step is logged by every rank")
    med = st[st["step"].isin(common)].groupby("rank")["loss"].median()
    per_rank = {int(r): float(v) for r, v in med.items()}
    centre = abs(float(np.median(med.to_numpy(dtype=float))))
    if centre == 0:
        return Value(None, per_rank, reason="the ranks' median loss is zero")
    return Value(float((med.max() - med.min()) / centre), per_rank)


@metric("throughput_drift_drop", "ratio", "How much slower the last quarter of the logged steps runs than the first: "
        "-throughput_drift", f"{SOURCE}: throughput or step times")
def _drop(ctx: Context) -> Value:
    v = _drift(ctx)
    return Value(-float(v.value), reason=v.reason) if isinstance(v.value, (int, float)) else v
