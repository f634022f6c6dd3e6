"""Load-balance metrics across ranks and pipeline stages.

Every imbalance is (max - min) / mean over ranks (or stages), the spread msprof-analyze's slow-rank
check uses on cluster_step_trace_time. Compute time is summed over the steps every rank has, so a
rank with an extra or a missing step does not look slower or faster for it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msdiag.metrics.registry import Context, Value, metric, nan_sum, rank_rows
from msdiag.model import RankInfo

_NO_STEPS = "no step with a measured duration in the capture"
_ONE_RANK = "one rank in the capture: nothing to compare"


def _timed(ctx: Context) -> pd.DataFrame:
    s = ctx.steps
    return s[s["total_us"].notna() & (s["total_us"] > 0)]


def _common_steps(s: pd.DataFrame) -> pd.DataFrame:
    """The rows of the steps every rank has (all rows when step ids are missing or nothing is shared)."""
    if not len(s) or s["step"].isna().any():
        return s
    step = s["step"].to_numpy(np.int64)  # no null here
    sets = [set(step[rows].tolist()) for _, rows in rank_rows(s)]  # the groups of groupby("rank"), on arrays
    common = set.intersection(*sets)
    if not common:
        return s
    return s[s["step"].astype(int).isin(common).to_numpy()]


def per_rank_computing_us(ctx: Context) -> dict[int, float]:
    """Per rank, computing_us summed over the steps every rank has."""
    s = _timed(ctx)
    s = _common_steps(s[s["computing_us"].notna()])
    # each rank's rows by position (rank_rows), summed on arrays (np.nansum: pandas' float sum, the same order)
    computing = s["computing_us"].to_numpy(float, na_value=np.nan)
    return {r: float(nan_sum(computing[rows])) for r, rows in rank_rows(s)}


def spread(values: list[float]) -> float | None:
    """(max - min) / mean; None for fewer than two values or a zero mean."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    if mean == 0:
        return None
    return (max(values) - min(values)) / mean


def _as_per_rank(d: dict[int, float]) -> dict[int, float | None]:
    return {k: v for k, v in d.items()}


@metric(
    "compute_imbalance",
    "ratio",
    "(max - min) / mean over ranks of the device computing time, summed over the steps all ranks have",
    "steps.computing_us",
    per_rank_unit="us",  # each rank's computing time
)
def _compute_imbalance(ctx: Context) -> Value:
    per = per_rank_computing_us(ctx)
    if not per:
        return Value(None, reason=_NO_STEPS)
    if len(per) < 2:
        return Value(None, _as_per_rank(per), _ONE_RANK)
    v = spread(list(per.values()))
    return Value(v, _as_per_rank(per), None if v is not None else "no rank computes at all")


@metric(
    "step_time_imbalance",
    "ratio",
    "(max - min) / mean over ranks of each rank's median step time",
    "steps.total_us",
    per_rank_unit="us",  # each rank's median step time
)
def _step_time_imbalance(ctx: Context) -> Value:
    s = _timed(ctx)
    if not len(s):
        return Value(None, reason=_NO_STEPS)
    total = s["total_us"].to_numpy(float, na_value=np.nan)
    per = {r: float(np.median(total[rows])) for r, rows in rank_rows(s)}  # Series.median per rank (no NaN here), on arrays
    if len(per) < 2:
        return Value(None, _as_per_rank(per), _ONE_RANK)
    return Value(spread(list(per.values())), _as_per_rank(per))


@metric(
    "slowest_rank_by_compute",
    "rank",
    "The rank with the most device computing time (summed over the steps all ranks have)",
    "steps.computing_us",
)
def _slowest_rank(ctx: Context) -> Value:
    per = per_rank_computing_us(ctx)
    if not per:
        return Value(None, reason=_NO_STEPS)
    if len(per) < 2:
        return Value(None, _as_per_rank(per), _ONE_RANK)
    top = max(per.values())
    return Value(min(r for r, v in per.items() if v == top), _as_per_rank(per))


# ---- pipeline stages ----------------------------------------------------------------------


def _stage_of(rank: int, info: RankInfo) -> tuple[int | None, int | None, str | None]:
    """(pp stage index, pp size, why unknown) of a rank from its profiler_metadata.json (RankInfo).

    distributed_args (Megatron layout, via ParallelLayout.coordinates) first; else the rank's
    position in its parallel group named "pp" (parallel_group_info lists a pp group's global ranks in
    stage order).
    """
    if info.groups is None:
        return None, None, "no profiler_metadata.json"
    layout = info.layout
    pp = layout.pp if layout is not None else None
    if pp == 1:
        return 0, 1, None
    if layout is not None and pp:
        try:
            return layout.coordinates(rank)["pp_index"], pp, None
        except ValueError as e:
            why = f"distributed_args do not place the rank ({e})"
    elif layout is None:
        why = "profiler_metadata.json has no distributed_args"
    else:
        why = "no pipeline_model_parallel_size in distributed_args"
    for g in info.groups:
        ranks = g.global_ranks or []
        if g.group_name == "pp" and rank in ranks:
            return ranks.index(rank), len(ranks), None
    return None, None, why


@metric(
    "stage_imbalance",
    "ratio",
    "Under pipeline parallelism: (max - min) / mean over stages of the stage's computing time (its slowest rank's)",
    "steps.computing_us; profiler_metadata.json distributed_args / parallel_group_info",
)
def _stage_imbalance(ctx: Context) -> Value:
    per_rank = per_rank_computing_us(ctx)
    if not per_rank:
        return Value(None, reason=_NO_STEPS)
    stages: dict[int, float] = {}
    pp_sizes: set[int] = set()
    why: list[str] = []
    for rd in ctx.capture.ranks:
        if rd.rank not in per_rank:
            continue
        stage, pp, reason = _stage_of(rd.rank, rd.info)
        if stage is None:
            why.append(f"rank {rd.rank}: {reason}")
            continue
        if pp is not None:
            pp_sizes.add(pp)
        stages[stage] = max(stages.get(stage, 0.0), per_rank[rd.rank])
    if why and not stages:
        return Value(None, reason="no pipeline-parallel layout recorded (" + "; ".join(why) + ")")
    if pp_sizes == {1}:
        return Value(None, reason="no pipeline parallelism (pipeline_model_parallel_size = 1)")
    if len(stages) < 2:
        return Value(None, reason=f"the capture holds ranks of {len(stages)} pipeline stage(s) only")
    if why:
        return Value(None, reason="some ranks cannot be placed on a stage (" + "; ".join(why) + ")")
    return Value(spread(list(stages.values())), _as_per_rank(per_rank))
