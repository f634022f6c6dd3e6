"""Compute kernels by op type, over every rank: launches, time, FLOPs and, where the capture has the
PipeUtilization PMU columns (aic_metrics PipeUtilization: Level1's default), the AI Core unit that
bounds each op type. Also the L2 cache rates per op type (l2_cache.csv) and the host API time
(api_statistic.csv).

How a type's pipe ratios are formed: each ratio is the share of a core's busy time one pipe was
working (``aic_*`` of the cube core's time, ``aiv_*`` of the vector core's). A kernel contributes to
the ``aic_*`` ratios only when its cube core ran (``aicore_time_us`` > 0) and to the ``aiv_*`` ones
only when its vector core ran (``aiv_time_us`` > 0): the profiler writes 0, not N/A, for the side a
kernel did not use, and those zeros are no measurement. Over a type's kernels each ratio is averaged
weighted by the kernel's duration. A unit's ratio is the larger of its cube-side and vector-side
ratios (scalar and MTE2 exist on both cores). ``bound`` names the unit with the largest ratio, always;
below :data:`SATURATED` no pipe was busy most of the time and ``bound_note`` says so.
"""

from __future__ import annotations

from typing import Any, Callable, Union

import numpy as np
import pandas as pd

from msdiag.metrics import phases as ph
from msdiag.metrics.registry import Context, Reads, Value, metric, nan_sum, rank_rows
from msdiag.model import Capture, RankData
from msdiag.units import FLOPS_PER_TFLOPS

#: what :func:`type_table` reads: the whole capture, or one rank (both have ``table(name)``)
Tables = Union[Capture, RankData]

#: PipeUtilization column -> (unit, core side)
RATIO_COLUMNS: dict[str, tuple[str, str]] = {
    "aic_mac_ratio": ("cube", "aic"),
    "aic_scalar_ratio": ("scalar", "aic"),
    "aic_mte1_ratio": ("mte1", "aic"),
    "aic_mte2_ratio": ("mte2", "aic"),
    "aic_fixpipe_ratio": ("fixpipe", "aic"),
    "aiv_vec_ratio": ("vector", "aiv"),
    "aiv_scalar_ratio": ("scalar", "aiv"),
    "aiv_mte2_ratio": ("mte2", "aiv"),
    "aiv_mte3_ratio": ("mte3", "aiv"),
}
#: the units, in the order a tie is broken
UNITS: tuple[str, ...] = ("cube", "vector", "scalar", "mte1", "mte2", "mte3", "fixpipe")
#: busy time of each core side (PMU)
SIDE_TIME: dict[str, str] = {"aic": "aicore_time_us", "aiv": "aiv_time_us"}
#: a pipe busy at least this share of the core's time is saturated: the type is bound by it. Below,
#: no unit limits the kernel: it waits on latency (dependencies, synchronisation) or on its launch.
SATURATED = 0.8
WEAK_BOUND = "no unit saturated: latency or launch bound"
NO_PIPES = (
    "the kernels carry no PipeUtilization PMU columns (profile with aic_metrics=PipeUtilization at Level1 or "
    "higher: torch_npu's Level1 default; Level0 records none)"
)
HOST_OPS = "the ops are host ops on CPU: no AI Core pipelines"
_KEY = "kernel_types.table"


#: the kernel columns a type table reads besides the PMU ones (a CPU trace holds millions of kernel rows: copy no others)
_COLUMNS = ("rank", "name", "type", "dur_us")


def _compute(capture: Tables) -> tuple[pd.DataFrame, Weighted]:
    """The compute kernels, only the columns a type table reads besides the PMU ones, and their pipe weights
    (:func:`pipe_weights`) made from the PMU columns of the whole table at those rows, one column at a time: the PMU
    columns are not copied into the frame (512 bench ranks: a block of 250k kernels x 17 floats, 34 MB, every page of
    it new to the process, for the weights to be made from it once)."""
    k = capture.table("kernels")
    rows = np.flatnonzero((k["kind"] == "compute").to_numpy(dtype=bool, na_value=False))
    comp = k[[c for c in _COLUMNS if c in k.columns]].take(rows).reset_index(drop=True)

    def column(c: str) -> np.ndarray | None:
        return k[c].to_numpy(dtype=float, na_value=np.nan)[rows] if c in k.columns else None

    return comp, _weights(column, comp["dur_us"] if "dur_us" in comp.columns else pd.Series(np.nan, index=comp.index))


def no_pipes_reason(capture: Capture) -> str:
    """Why the capture's kernels have no bound unit: host ops, the AI Core metrics group it recorded
    instead, or no PMU columns at all."""
    k = capture.table("kernels")
    core = k.loc[k["kind"] == "compute", "core"] if len(k) else pd.Series(dtype=object)
    if len(core) and core.eq("CPU").fillna(False).all():
        return HOST_OPS
    groups = sorted({rd.info.aic_metrics for rd in capture.ranks if rd.info.aic_metrics and rd.info.aic_metrics != "None"})
    if groups and "PipeUtilization" not in groups:
        return f"this capture recorded aic_metrics {', '.join(groups)}, not PipeUtilization: {NO_PIPES}"
    return NO_PIPES


def _side_ran(busy: np.ndarray | None, ratios: list[np.ndarray], n: int) -> np.ndarray:
    """Per kernel, whether its core side ran: its busy time (``busy``, the side's SIDE_TIME column) > 0, or (no
    busy time recorded) a ratio of that side (``ratios``, its RATIO_COLUMNS in their order) > 0."""
    t = busy if busy is not None else np.full(n, np.nan)
    total = np.zeros(n)
    for r in ratios:  # the side's ratios summed in column order (NaN as 0), as a row sum of their frame adds them
        total += np.where(np.isnan(r), 0.0, r)
    with np.errstate(invalid="ignore"):
        return (t > 0) | (np.isnan(t) & (total > 0))  # type: ignore[no-any-return]


def pipe_ratios(k: pd.DataFrame, by: pd.Series | list[pd.Series], weighted: list[Weighted] | None = None) -> pd.DataFrame:
    """Duration-weighted mean of each PipeUtilization column per group of ``by`` (a key, or several: NaN where
    no kernel of the group measured it), over the kernels whose core side ran. ``weighted``: where the caller
    groups the same kernels ``k`` more than one way, a list holding :func:`pipe_weights` of them once made (made
    here when empty); given made, ``k`` need not hold the PMU columns (the frame of :func:`_compute`)."""
    if weighted:
        block, labels, den_of = weighted[0]
    else:
        block, labels, den_of = made = pipe_weights(k)
        if weighted is not None:
            weighted.append(made)
    if not den_of:  # no PipeUtilization value at all (CPU ops, Level0, another metrics group): every ratio NaN
        keys = by if isinstance(by, list) else [by]
        index = pd.MultiIndex.from_frame(pd.concat(keys, axis=1).drop_duplicates()) if len(keys) > 1 else pd.Index(keys[0].unique(), name=keys[0].name)
        return pd.DataFrame({c: pd.Series(np.nan, index=index) for c in RATIO_COLUMNS}, index=index)
    sums = pd.DataFrame(block.T, index=k.index, columns=labels, copy=False).groupby(by, sort=False).sum()
    at = {name: i for i, name in enumerate(sums.columns)}
    table = sums.to_numpy(dtype=float)
    out = {}
    for c in RATIO_COLUMNS:  # a column no kernel filled: NaN
        if c not in den_of:
            out[c] = np.full(len(sums), np.nan)
            continue
        den = table[:, at[den_of[c]]]
        out[c] = table[:, at[f"num:{c}"]] / np.where(den > 0, den, np.nan)
    return pd.DataFrame(out, index=sums.index)


#: Per kernel, each PipeUtilization column's weighted value and the weights (rows of one float block), the rows'
#: labels, and the label of each column's weights' row.
Weighted = tuple[np.ndarray, list[str], dict[str, str]]


def pipe_weights(k: pd.DataFrame) -> Weighted:
    """The weighted values and weights :func:`pipe_ratios` sums per group, for every kernel of ``k`` (a frame of
    kernels with their PMU columns)."""

    def column(c: str) -> np.ndarray | None:
        return k[c].to_numpy(dtype=float, na_value=np.nan) if c in k.columns else None

    return _weights(column, k["dur_us"])


def _weights(column: Callable[[str], np.ndarray | None], duration: pd.Series) -> Weighted:
    """:func:`pipe_weights` of the kernels whose PMU column ``c`` is ``column(c)`` (None: not recorded) and whose
    durations are ``duration``. A PipeUtilization column with no value on any of them is left out (its ratio is NaN
    in every group, as a column of no weight gives).

    A column's weight is the kernel's duration where its core side ran and the column has a value (else 0): the
    columns of one side with values on the same kernels (a kernel has all of its side's PMU values or none) share one
    row of weights, summed once (512 bench ranks: 18 rows of 250k kernels -> 11, a fresh 36 MB block -> 22 MB)."""
    dur = duration.to_numpy(dtype=float, na_value=np.nan)
    dur = np.where(np.isnan(dur), 0.0, dur)  # fillna(0): infinities stay
    n = len(dur)
    # each column's weighted values and weights (numpy, the same products as on Series), summed per group in
    # one groupby (the same sums as one per column); written straight into the one float block pandas would stack
    # them into (rows of a columns x kernels array: no frame of separate columns copied into it)
    names: list[tuple[str, str]] = []
    values: dict[str, np.ndarray] = {}
    known: dict[str, np.ndarray] = {}
    for side in ("aic", "aiv"):
        for c, (_, s) in RATIO_COLUMNS.items():
            v = column(c) if s == side else None
            if v is not None and (has := ~np.isnan(v)).any():
                names.append((side, c))
                values[c], known[c] = v, has
    shared: list[tuple[str, str]] = []  # (side, the first column) of each distinct weights row
    row_of: dict[str, int] = {}
    for side, c in names:
        j = next((j for j, (s, first) in enumerate(shared) if s == side and np.array_equal(known[c], known[first])), None)
        if j is None:
            j = len(shared)
            shared.append((side, c))
        row_of[c] = j
    block = np.empty((len(names) + len(shared), n))
    ran_of: dict[str, np.ndarray] = {}
    for j, (side, c) in enumerate(shared):
        if side not in ran_of:
            ran_of[side] = _side_ran(column(SIDE_TIME[side]), [values[x] for s, x in names if s == side], n)
        np.copyto(block[len(names) + j], np.where(ran_of[side] & known[c], dur, 0.0))
    for i, (_, c) in enumerate(names):
        np.multiply(block[len(names) + row_of[c]], np.where(known[c], values[c], 0.0), out=block[i])
    labels = [f"num:{c}" for _, c in names] + [f"den:{c}" for _, c in shared]
    return block, labels, {c: f"den:{shared[row_of[c]][1]}" for _, c in names}


def unit_ratios(cols: pd.DataFrame) -> pd.DataFrame:
    """Each unit's ratio: the larger of its cube-side and vector-side column ratios (NaN where neither was measured)."""
    at = {c: i for i, c in enumerate(cols.columns)}
    table = cols.to_numpy(dtype=float, na_value=np.nan)
    out = {}
    for u in UNITS:
        mine = [at[c] for c, (unit, _) in RATIO_COLUMNS.items() if unit == u and c in at]
        # fmax skips NaN as max(axis=1, skipna=True) does, without a frame per unit
        out[u] = np.fmax.reduce(table[:, mine], axis=1) if mine else np.full(len(cols), np.nan)
    return pd.DataFrame(out, index=cols.index)


def bound_of(units: pd.DataFrame) -> pd.DataFrame:
    """Per row: ``bound`` (the unit with the largest ratio, first of :data:`UNITS` on a tie; null when
    no unit was measured), ``bound_ratio`` and ``bound_note`` (:data:`WEAK_BOUND` below saturation)."""
    vals = units[list(UNITS)].to_numpy(dtype=float)
    known = ~np.isnan(vals).all(axis=1)
    idx = np.argmax(np.where(np.isnan(vals), -np.inf, vals), axis=1)
    best = vals[np.arange(len(vals)), idx] if len(vals) else np.array([])
    bound = [UNITS[i] if ok else None for i, ok in zip(idx, known)]
    ratio = [float(b) if ok else None for b, ok in zip(best, known)]
    note = [WEAK_BOUND if r is not None and r < SATURATED else None for r in ratio]
    return pd.DataFrame({"bound": bound, "bound_ratio": ratio, "bound_note": note}, index=units.index)


def _l2_rates(capture: Tables, comp: pd.DataFrame, types: pd.Series) -> pd.DataFrame:
    """Mean L2 hit and victim rate per op type: l2_cache.csv rows joined to kernels by rank and op name."""
    l2 = capture.table("l2_cache")
    if not len(l2):
        return pd.DataFrame(columns=["l2_hit_rate", "l2_victim_rate"], dtype=float)
    names = pd.DataFrame({"rank": comp["rank"], "name": comp["name"], "type": types}).drop_duplicates(["rank", "name"])
    j = l2.merge(names, on=["rank", "name"], how="inner")
    g = j.groupby("type", sort=False)[["hit_rate", "victim_rate"]].mean()
    return g.rename(columns={"hit_rate": "l2_hit_rate", "victim_rate": "l2_victim_rate"}).astype(float)


def type_table(capture: Tables, with_flops: bool = True, kernel_flops: pd.Series | None = None,
               compute: Compute | None = None) -> pd.DataFrame:
    """One row per compute op type over every rank, largest time first: launches, time_us, share,
    flops (null when no kernel of the type has FLOPs, or ``with_flops`` is off), tflops, the pipe
    ratios per column and per unit, bound, bound_ratio, bound_note, l2_hit_rate, l2_victim_rate.
    ``kernel_flops``: phases.compute_kernel_flops of ``capture`` when the caller has it; ``compute``: (its
    compute kernels, their types, their pipe weights) when the caller has them (:func:`_compute_and_types`)."""
    comp, types, weighted = compute if compute is not None else _compute_and_types(capture)
    if not len(comp):
        return pd.DataFrame()
    f = None if not with_flops else kernel_flops if kernel_flops is not None else ph.compute_kernel_flops(capture)  # type: ignore[arg-type]  # reads table() only
    flops = pd.Series(np.nan, index=comp.index) if f is None else pd.Series(f.to_numpy(dtype=float), index=comp.index)
    dur = comp["dur_us"].astype(float)
    g = pd.DataFrame({"type": types, "dur_us": dur, "flops": flops, "known_us": dur.where(flops.notna(), 0.0)})
    agg = g.groupby("type", sort=False).agg(
        launches=("dur_us", "size"), time_us=("dur_us", "sum"), flops=("flops", lambda s: s.sum(min_count=1)),
        known_us=("known_us", "sum"),
    )  # fmt: skip
    total = float(agg["time_us"].sum())
    agg["share"] = agg["time_us"] / total if total > 0 else np.nan
    agg["tflops"] = (agg["flops"] / (agg["known_us"].where(agg["known_us"] > 0) * 1e-6) / FLOPS_PER_TFLOPS).astype(float)
    out = _none_for_nan(agg.join(_bounds(comp, types, [weighted])).join(_l2_rates(capture, comp, types)))
    return out.sort_values("time_us", ascending=False, kind="stable").drop(columns=["known_us"])


#: The compute kernels of a capture (:func:`_compute`: not their PMU columns), their op types and their pipe weights.
Compute = tuple[pd.DataFrame, pd.Series, Weighted]


def _compute_and_types(capture: Tables) -> Compute:
    """The compute kernels and their pipe weights (:func:`_compute`), and each kernel's op type (:func:`_types`)."""
    comp, weighted = _compute(capture)
    return comp, _types(comp) if len(comp) else pd.Series(dtype=object), weighted


def _types(comp: pd.DataFrame) -> pd.Series:
    """Each compute kernel's op type (its name where it has no type)."""
    return comp["type"].fillna(comp["name"]).fillna("").astype(str).rename("type")


def _none_for_nan(out: pd.DataFrame) -> pd.DataFrame:
    """``bound`` and ``bound_note`` as objects with None where a type has none (a join leaves NaN), as bound_of gives."""
    for c in ("bound", "bound_note"):
        out[c] = out[c].astype(object).where(out[c].notna(), None)
    return out


def _bounds(comp: pd.DataFrame, types: pd.Series | list[pd.Series], weighted: list[Weighted] | None = None) -> pd.DataFrame:
    """Per op type: the pipe ratios per column and per unit, bound, bound_ratio, bound_note."""
    cols = pipe_ratios(comp, types, weighted)
    units = unit_ratios(cols)
    return cols.join(units).join(bound_of(units))


def bound_shares(capture: Tables) -> pd.DataFrame:
    """Per compute op type, largest time first: time_us, share (of the compute time), the pipe and unit ratios
    and the bound, as :func:`type_table` gives them, without what a rank's bound shares do not need (launches,
    FLOPs, L2 rates)."""
    comp, weighted = _compute(capture)
    if not len(comp):
        return pd.DataFrame()
    types = _types(comp)
    time_us = comp["dur_us"].astype(float).groupby(types, sort=False).sum()
    total = float(time_us.sum())
    share = time_us / total if total > 0 else pd.Series(np.nan, index=time_us.index)
    out = _none_for_nan(pd.DataFrame({"time_us": time_us, "share": share}).join(_bounds(comp, types, [weighted])))
    return out.sort_values("time_us", ascending=False, kind="stable")  # type_table's order: sums over rows match it


def bound_shares_by_rank(capture: Capture) -> dict[int, pd.DataFrame]:
    """:func:`bound_shares` of every rank of the capture, from one grouping of the capture's kernels by rank and
    type (one pass, not one per rank: a rank's groups hold its kernels in the same order, so every sum is the
    same); a rank without compute kernels gets an empty frame."""
    out = {rd.rank: pd.DataFrame() for rd in capture.ranks}
    grouped = _by_rank_and_type(capture)
    if grouped is None:
        return out
    whole, rows_of = grouped
    for r, rows in rows_of.items():
        out[r] = whole.iloc[rows].droplevel(0).sort_values("time_us", ascending=False, kind="stable")
    return out


def _by_rank_and_type(capture: Capture, compute: Compute | None = None) -> tuple[pd.DataFrame, dict[int, np.ndarray]] | None:
    """The frame of bound_shares_by_rank over (rank, type) and each rank's rows in it (in its groups' order);
    None without compute kernels. ``compute``: as :func:`type_table` takes it."""
    comp, types, weighted = compute if compute is not None else _compute_and_types(capture)
    if not len(comp):
        return None
    keys = [comp["rank"].rename("rank"), types]
    time_us = comp["dur_us"].astype(float).groupby(keys, sort=False).sum()
    bounds = _bounds(comp, keys, [weighted])  # the same groups in the same order as time_us
    ranks_of = time_us.index.get_level_values(0)
    codes, uniq = pd.factorize(ranks_of, sort=False)
    times = time_us.to_numpy(dtype=float)
    share = np.full(len(times), np.nan)
    rows_of = [np.flatnonzero(codes == i) for i in range(len(uniq))]
    for rows in rows_of:  # each rank's share of its own compute time (its total summed as a Series of its rows is)
        total = float(times[rows].sum())
        if total > 0:
            share[rows] = times[rows] / total
    whole = _none_for_nan(pd.DataFrame({"time_us": times, "share": share}, index=time_us.index).join(bounds))
    return whole, {int(r): rows for r, rows in zip(uniq, rows_of)}


def cached_table(ctx: Context) -> pd.DataFrame:
    """:func:`type_table` of the analysis, computed once (metrics, the chart views and the JSON rows share it). Where
    its op types have a bound, the same grouping per rank and type (mte2_bound_share's) is made then from the same
    compute kernels, not from a second copy of them, nor their pipe ratios weighted a second time."""
    if _KEY not in ctx.cache:
        compute = _compute_and_types(ctx.capture)  # (with the kernels' pipe weights, made once: both groupings sum them)
        t = ctx.cache[_KEY] = type_table(ctx.capture, kernel_flops=ph.kernel_flops_for(ctx), compute=compute)
        if len(t) and t["bound"].notna().any():
            ctx.once(_KEY + ".by_rank", lambda: _by_rank_and_type(ctx.capture, compute))
    return ctx.cache[_KEY]  # type: ignore[no-any-return]


def _num(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def _text(v: Any) -> str | None:
    return None if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)


def rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The JSON ``kernel_types`` rows of a :func:`type_table`."""
    out = []
    for t, r in table.iterrows():
        out.append({
            "type": str(t),
            "launches": int(r["launches"]),
            "time_us": float(r["time_us"]),
            "share": _num(r["share"]),
            "flops": _num(r["flops"]),
            "tflops": _num(r["tflops"]),
            "bound": _text(r["bound"]),
            "bound_ratio": _num(r["bound_ratio"]),
            "bound_note": _text(r["bound_note"]),
            "ratios": {u: _num(r[u]) for u in UNITS},
            "ratio_columns": {c: _num(r.get(c)) for c in RATIO_COLUMNS},  # each side's own (aic_* cube, aiv_* vector)
            "l2_hit_rate": _num(r.get("l2_hit_rate")),
            "l2_victim_rate": _num(r.get("l2_victim_rate")),
        })  # fmt: skip
    return out


def absent_reasons(capture: Capture, table: pd.DataFrame) -> dict[str, str]:
    """Why a figure of ``kernel_types`` is null on every row (said once, not per row)."""
    out: dict[str, str] = {}
    if not len(table):
        return {"kernel_types": "no compute kernels in the capture"}
    if table["bound"].isna().all():
        out["bound"] = no_pipes_reason(capture)
    l2 = capture.table("l2_cache")
    if not len(l2):
        out["l2"] = _source_reason(capture, "l2_cache.csv") or "no l2_cache.csv in the capture"
    elif "l2_hit_rate" not in table or table["l2_hit_rate"].isna().all():
        out["l2_hit_rate"] = (
            "l2_cache.csv records no hit rate (N/A; on Atlas A2 / A3 CANN collects it with aic_metrics=L2Cache instead)"
            if l2["hit_rate"].isna().all() else "no l2_cache.csv row matches a compute kernel's name"
        )
    if table["flops"].isna().all():
        out["flops"] = "no op type has FLOPs (no shapes with a FLOPs formula, no ArithmeticUtilization columns)"
    return out


def _source_reason(capture: Capture, name: str) -> str | None:
    for s in capture.sources:
        if s.name == name and s.status != "present" and s.reason:
            return f"{name} {s.status}: {s.reason}"
    return None


# ---- metrics ---------------------------------------------------------------------------------------


def _mte2_bound(table: pd.DataFrame, max_cube: float) -> pd.Series:
    """Op types bound by a saturated MTE2 (data moved in from global memory) whose cube ratio is below max_cube."""
    cube = table["cube"].fillna(0.0)
    return (table["bound"] == "mte2") & table["bound_note"].isna() & (cube < max_cube)


def _per_rank_tables(ctx: Context) -> dict[int, pd.DataFrame]:
    key = _KEY + ".per_rank"
    if key not in ctx.cache:
        ctx.cache[key] = bound_shares_by_rank(ctx.capture)
    return ctx.cache[key]  # type: ignore[no-any-return]


def _given_pipes(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    t = cached_table(ctx)
    if not len(t):
        return None, "no compute kernels in the capture"
    if t["bound"].isna().all():
        return None, no_pipes_reason(ctx.capture)
    return t, None


@metric(
    "mte2_bound_share",
    "ratio",
    f"Share of compute kernel time in op types bound by MTE2 (data moved in from HBM, ratio >= {SATURATED:g}) with a cube ratio below "
    "kernel-memory-bound.max_cube: memory-bound kernels (PipeUtilization ratios, duration-weighted per op type)",
    "kernels PipeUtilization ratios (kernel_details.csv aic_*/aiv_*_ratio)",
    reads=Reads(tables=("kernels",)),
    params=("kernel-memory-bound.max_cube",),
    given=_given_pipes,
)
def _mte2_share(ctx: Context, t: pd.DataFrame) -> Value:
    max_cube = ctx.options.param("kernel-memory-bound.max_cube")
    grouped = ctx.once(_KEY + ".by_rank", lambda: _by_rank_and_type(ctx.capture))
    job = float(t.loc[_mte2_bound(t, max_cube), "share"].sum())
    if grouped is None:
        return Value(job, {})
    whole, rows_of = grouped
    if not all(whole[c].dtype == np.float64 for c in ("time_us", "share", "cube")):  # not the arrays below: by frames
        per = {}
        for r, rt in _per_rank_tables(ctx).items():
            if len(rt) and rt["bound"].notna().any():
                per[int(r)] = float(rt.loc[_mte2_bound(rt, max_cube), "share"].sum())
        return Value(job, per)
    # each rank's bound_shares frame on arrays: its rows of the (rank, type) frame in its frame's order (sort_values
    # by time, descending, stable: ties in their order), _mte2_bound's test on the whole frame, the share summed as
    # pandas sums a float column (NaN as 0, numpy's order: np.nansum)
    time, share = whole["time_us"].to_numpy(float), whole["share"].to_numpy(float)
    bound, cube = whole["bound"].to_numpy(object), whole["cube"].to_numpy(float)
    has = ~pd.isna(bound)
    hit = (bound == "mte2") & pd.isna(whole["bound_note"].to_numpy(object)) & (np.where(np.isnan(cube), 0.0, cube) < max_cube)
    per_rank: dict[int, float | str | None] = {}
    for r in dict.fromkeys([*(rd.rank for rd in ctx.capture.ranks), *rows_of]):  # bound_shares_by_rank's order
        rows = rows_of.get(int(r))
        if rows is None or not len(rows):
            continue
        rows = rows[np.argsort(-time[rows], kind="stable")]
        if has[rows].any():
            per_rank[int(r)] = float(nan_sum(share[rows][hit[rows]]))
    return Value(job, per_rank)


@metric(
    "mte2_bound_types",
    "op types",
    "The op types bound by MTE2 with a low cube ratio, largest compute time first (at most 3): share of compute "
    "time, MTE2 and cube ratios",
    "kernels PipeUtilization ratios (kernel_details.csv aic_*/aiv_*_ratio)",
    reads=Reads(tables=("kernels",)),
    params=("kernel-memory-bound.max_cube",),
    given=_given_pipes,
)
def _mte2_types(ctx: Context, t: pd.DataFrame) -> Value:
    sel = t[_mte2_bound(t, ctx.options.param("kernel-memory-bound.max_cube"))].head(3)
    if not len(sel):
        return Value(None, reason="no op type is bound by MTE2 with a low cube ratio")
    parts = [f"{typ} {100 * r['share']:.0f}% (MTE2 {r['mte2']:.2f}, "
             + ("vector core only)" if pd.isna(r["cube"]) else f"cube {r['cube']:.2f})") for typ, r in sel.iterrows()]
    return Value(", ".join(parts))


@metric(
    "host_api_top",
    "API",
    "The CANN API with the most host time over the capture (api_statistic.csv), with its time and calls, on the "
    "rank where it took longest",
    "api_statistic.csv",
    reads=Reads(tables=("api_stats",)),
)
def _api_top(ctx: Context) -> Value:
    a = ctx.capture.table("api_stats")
    a = a[a["total_us"].notna()] if len(a) else a
    if not len(a):
        why = _source_reason(ctx.capture, "api_statistic.csv") or "no api_statistic.csv in the capture"
        return Value(None, reason=why)
    per: dict[int, float | str | None] = {}
    total, api, level = a["total_us"].to_numpy(float), a["api"], a["level"]
    for r, rows in rank_rows(a):  # each rank's row of its largest time (idxmax: the first such), on arrays
        at = int(rows[int(np.argmax(total[rows]))])
        per[r] = f"{api.iloc[at]} ({level.iloc[at]})"
    top = a.loc[a["total_us"].idxmax()]
    calls = "" if pd.isna(top["count"]) else f", {int(top['count'])} calls"
    return Value(f"{top['api']} ({top['level']}): {top['total_us'] / 1e3:.1f} ms{calls} (rank {int(top['rank'])})", per)
