"""Step-time metrics: step time, its spread, and the shares of the breakdown."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from msdiag.metrics.registry import Context, Value, metric, nan_sum, rank_rows, unread_host


def _timed_steps(ctx: Context) -> pd.DataFrame:
    """Steps with a measured duration, warm-up steps left out (they are reported, not averaged in); once per
    analysis (every step metric reads them; none changes them)."""
    return ctx.once("steps.timed", lambda: _measured(ctx.steps))


def _measured(s: pd.DataFrame) -> pd.DataFrame:
    keep = s["total_us"].notna() & (s["total_us"] > 0)
    if "warmup" in s.columns:
        keep &= ~s["warmup"].fillna(False)
    return s[keep.to_numpy(bool)]


def _host_steps(ctx: Context) -> pd.DataFrame:
    """The timed steps of the ranks whose host side was read (registry.unread_host): every rank's but those read
    without their trace, whose data waits are unknown, not zero."""
    s = _timed_steps(ctx)
    unread = unread_host(ctx)
    return s[~s["rank"].isin(unread).to_numpy(bool)] if unread else s


def _per_rank(df: pd.DataFrame, col: str, how: str = "median") -> dict[int, float | None]:
    if not len(df):
        return {}
    g = df.groupby("rank")[col]
    agg = g.median() if how == "median" else g.sum()
    return {int(k): (None if pd.isna(v) else float(v)) for k, v in agg.items()}


def _no_steps(ctx: Context) -> Value:
    return Value(None, reason="no step with a measured duration in the capture")


def _share(col: str, rows: Callable[[Context], pd.DataFrame] = _timed_steps) -> Callable[[Context], Value]:
    def fn(ctx: Context) -> Value:
        s = rows(ctx)
        if not len(s):
            return _no_steps(ctx)
        if s[col].isna().all():
            return Value(None, reason=f"{col} is not measured by this capture")
        part = s[col].fillna(0.0)
        # per rank on arrays (rank_rows: each rank's rows in order; np.nansum: pandas' sum)
        num, total = part.to_numpy(float), s["total_us"].to_numpy(float, na_value=np.nan)
        per_rank = {r: float(nan_sum(num[rows]) / nan_sum(total[rows])) for r, rows in rank_rows(s)}
        return Value(float(part.sum() / s["total_us"].sum()), per_rank)

    return fn


# ---- step time ----------------------------------------------------------------------------


@metric("step_time_us", "us", "Median step time over ranks and steps (wall-clock span of a step)", "steps.total_us")
def _step_time(ctx: Context) -> Value:
    s = _timed_steps(ctx)
    if not len(s):
        return _no_steps(ctx)
    return Value(float(np.median(s["total_us"])), _per_rank(s, "total_us"))


@metric("step_time_p90_us", "us", "90th percentile of step time over ranks and steps", "steps.total_us")
def _step_time_p90(ctx: Context) -> Value:
    s = _timed_steps(ctx)
    if not len(s):
        return _no_steps(ctx)
    total = s["total_us"].to_numpy(float, na_value=np.nan)
    per = {r: float(np.percentile(total[rows], 90)) for r, rows in rank_rows(s)}  # each rank's rows, on arrays
    return Value(float(np.percentile(s["total_us"], 90)), per)


@metric("step_count", "steps", "Number of step rows (rank x step) with a measured duration", "steps")
def _step_count(ctx: Context) -> Value:
    s = _timed_steps(ctx)
    return Value(int(len(s)), {r: float(len(rows)) for r, rows in rank_rows(s)})


for _col, _id, _doc in (
    ("computing_us", "computing_share", "Share of step time the device spends computing"),
    ("communication_exposed_us", "communication_exposed_share", "Share of step time in communication not overlapped by compute"),
    ("free_us", "free_share", "Share of step time the device is neither computing nor communicating"),
    ("bubble_us", "bubble_share", "Share of step time in pipeline receives (bubble)"),
):
    metric(_id, "ratio", _doc, f"steps.{_col} / steps.total_us")(_share(_col))


@metric("data_wait_share", "ratio", "Share of step time the step waits on the dataset", "host timeline: GetNext / dataset iterator waits (a large job: on the ranks read deep)")
def _data_wait_share(ctx: Context) -> Value:
    s = _host_steps(ctx)  # a rank read without its trace: its data waits unknown, left out (not counted as 0)
    if "data_wait_us" in s.columns and s["data_wait_us"].notna().any():
        return _share("data_wait_us", _host_steps)(ctx)
    unread = unread_host(ctx)
    where = f" of the ranks read deep ({len(unread)} read without their trace_view.json)" if unread else ""
    return Value(None, reason=f"data wait is not measured in this capture (no dataset iterator events on the host timeline{where})")


# ---- kernels -------------------------------------------------------------------------


@metric("kernel_count", "kernels", "Number of kernel (or host op) launches in the capture, summed over ranks", "kernels")
def _kernel_count(ctx: Context) -> Value:
    k = ctx.capture.table("kernels")
    if not len(k):
        return Value(None, reason="no kernel table (kernel_details.csv / trace_view.json absent)")
    return Value(int(len(k)), {int(r): float(n) for r, n in k.groupby("rank").size().items()})



@metric(
    "host_bound_share",
    "ratio",
    "Share of step time the device idles for reasons other than data wait (host launch, scheduling, Python overhead)",
    "free_share - data_wait_share (data wait counts as 0 where it is not measured; a large job: on the ranks read deep)",
)
def _host_bound(ctx: Context) -> Value:
    s = _host_steps(ctx)  # free time less data waits: only where the data waits were read
    if not len(s):
        return _no_steps(ctx)
    idle = (s["free_us"].fillna(0.0) - s["data_wait_us"].fillna(0.0)).clip(lower=0.0)
    # each rank's rows by position (rank_rows: groupby("rank")'s groups), summed on arrays (np.nansum: pandas' sum)
    idle_a, total = idle.to_numpy(float, na_value=np.nan), s["total_us"].to_numpy(float, na_value=np.nan)
    per = {r: float(nan_sum(idle_a[rows]) / nan_sum(total[rows])) for r, rows in rank_rows(s)}
    return Value(float(idle.sum() / s["total_us"].sum()), per)


@metric("step_time_jitter", "ratio", "How much slower the 90th-percentile step is than the median step (p90 / median - 1)", "steps.total_us")
def _jitter(ctx: Context) -> Value:
    s = _timed_steps(ctx)
    if len(s) < 3:
        return Value(None, reason="fewer than 3 steps: no spread to measure")
    med = float(np.median(s["total_us"]))
    return Value(float(np.percentile(s["total_us"], 90)) / med - 1.0 if med > 0 else None)
