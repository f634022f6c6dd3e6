"""Kernel-mix metrics: what the compute time is spent on, and signs of launch-bound or
dynamic-shape execution. Sources: the kernels table (kernel_details.csv on Ascend, host ops on CPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from msdiag.metrics.registry import Context, Value, kept_in_child, metric, nan_sum, rank_rows, with_its_metrics
from msdiag.model import Capture, held_rows

# A kernel shorter than this mostly measures launch and scheduling, not work.
SHORT_KERNEL_US = 10.0
_MATMUL = r"^(?:Batch)?Mat[Mm]ul|^GroupedMatmul|^Dense$"
_FP32 = {"FLOAT", "DT_FLOAT", "FLOAT32", "float32", "Float32"}
#: the kernel types listed per rank (the JSON ranks' ``top_kernels``)
TOP_TYPES = 10


def _compute(ctx: Context, cols: tuple[str, ...]) -> pd.DataFrame:
    """The compute kernels with a duration, of the columns ``cols`` a metric reads. Not kept for the analysis:
    on a CPU trace of millions of host ops the copy would stay in memory under every later metric's own copies
    (the peak grew by a third); and a copy of every column of a 512-rank job's kernels added ~100 MB to the peak."""
    return _timed_compute(ctx.capture.table("kernels"), cols)


def _timed_compute(k: pd.DataFrame, cols: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The compute kernels with a duration (of the columns ``cols``, every column without); the table itself
    when every kernel is one (host ops on CPU): the analysis keeps this for its whole run, and a copy of a large
    table would stay in memory with it."""
    keep = ((k["kind"] == "compute") & k["dur_us"].notna()).to_numpy(dtype=bool, na_value=False)
    if keep.all():
        return k
    return k[keep] if cols is None else k.loc[keep, list(cols)]


def _compute_rows(k: pd.DataFrame) -> np.ndarray:
    """Which rows of the kernels table :func:`_timed_compute` keeps: compute kernels with a duration."""
    return ((k["kind"] == "compute") & k["dur_us"].notna()).to_numpy(dtype=bool, na_value=False)


#: The key prefix of a kernels column's codes (_text_mask): read by this module's metrics only.
_CODES = kept_in_child("kernels.codes.")


def column_codes(ctx: Context, col: str) -> tuple[np.ndarray, Any]:
    """``pd.factorize`` of the kernels table's column ``col`` (a null: code -1), once per analysis: the metrics that
    judge a kernel by its type or name judge each distinct text once."""
    return ctx.once(_CODES + col, lambda: pd.factorize(ctx.capture.table("kernels")[col]))  # type: ignore[no-any-return]


def _text_mask(ctx: Context, col: str, keep: np.ndarray, test: Any) -> np.ndarray:
    """``test`` (a pandas string operation on a Series of texts, giving booleans) of the kernels' column ``col`` at the
    rows ``keep``, judged once per distinct text: the column factorized once per analysis (``ctx``), ``test`` run on
    its distinct texts as ``astype("string")`` makes them, each row given its text's answer (a null: False, as na=False
    gives). Neither the column's texts of every compute row taken nor the operation run on each of them."""
    codes, names = column_codes(ctx, col)
    hit = np.asarray(test(pd.Series(names, dtype=object).astype("string")).to_numpy(bool, na_value=False), dtype=bool)
    at = codes[keep]
    return np.where(at >= 0, hit[np.maximum(at, 0)], False) if len(hit) else np.zeros(len(at), dtype=bool)


def _no_kernels() -> Value:
    return Value(None, reason="no compute kernels in the capture (kernel_details.csv / trace_view.json absent)")


def _per_rank_share(c: pd.DataFrame, mask: pd.Series) -> dict[int, float | None]:
    """Per rank, the masked kernels' share of its compute time; summed on arrays (np.nansum: pandas' sum,
    the same rows in the same order)."""
    if not mask.index.equals(c.index):
        mask = mask.loc[c.index]
    dur, hit = c["dur_us"].to_numpy(float, na_value=np.nan), mask.to_numpy(bool)
    out: dict[int, float | None] = {}
    for r, rows in rank_rows(c):
        tot = float(nan_sum(dur[rows]))
        out[r] = float(nan_sum(dur[rows][hit[rows]])) / tot if tot > 0 else None
    return out


def _share_of_compute(ctx: Context, mask_fn, what: str) -> Value:  # type: ignore[no-untyped-def]
    k = ctx.capture.table("kernels")
    keep = _compute_rows(k)
    c = _timed_compute(k, ("rank", "dur_us"))  # (the masks read the core or the type by their distinct texts)
    if not len(c):
        return _no_kernels()
    got = mask_fn(ctx, keep)
    mask = None if got is None else pd.Series(got, index=c.index)
    if mask is None:
        return Value(None, reason=f"{what} cannot be told from this capture's kernels")
    total = float(c["dur_us"].sum())
    if total <= 0:
        return _no_kernels()
    return Value(float(c.loc[mask, "dur_us"].sum()) / total, _per_rank_share(c, mask))


@metric("short_kernel_share", "ratio", f"Share of compute kernel launches shorter than {SHORT_KERNEL_US:g} us (launch-bound sign)", "kernels.dur_us")
def _short(ctx: Context) -> Value:
    c = _compute(ctx, ("rank", "dur_us"))
    if not len(c):
        return _no_kernels()
    short = c["dur_us"] < SHORT_KERNEL_US
    flags = short.to_numpy(bool)  # each rank's mean of its booleans: its count of True / its rows, as Series.mean
    per = {r: float(flags[rows].sum(dtype=np.float64) / float(len(rows))) for r, rows in rank_rows(c)}
    return Value(float(short.mean()), per)


@metric("kernel_mean_us", "us", "Mean duration of a compute kernel launch", "kernels.dur_us")
def _mean(ctx: Context) -> Value:
    c = _compute(ctx, ("rank", "dur_us"))
    if not len(c):
        return _no_kernels()
    return Value(float(c["dur_us"].mean()), {int(r): float(v) for r, v in c.groupby("rank")["dur_us"].mean().items()})


def _core_mask(core: str):  # type: ignore[no-untyped-def]
    def fn(ctx: Context, keep: np.ndarray) -> np.ndarray | None:
        # (what cores.isna().all() or (cores == "CPU").all() says of the compute rows' cores: every one null, or every
        # one not null "CPU")
        known = _text_mask(ctx, "core", keep, lambda t: t.notna())
        if not known.any() or _text_mask(ctx, "core", keep, lambda t: t.eq("CPU"))[known].all():
            return None
        return _text_mask(ctx, "core", keep, lambda t: t.str.contains(core, regex=False, na=False))

    return fn


@metric("vector_time_share", "ratio", "Share of compute kernel time on the vector units (AI_VECTOR_CORE / MIX_AIV)", "kernels.core (Accelerator Core)")
def _vector(ctx: Context) -> Value:
    return _share_of_compute(ctx, _core_mask("VECTOR"), "the accelerator core")


@metric("aicpu_time_share", "ratio", "Share of compute kernel time on AI CPU (ops that fell back from AI Core)", "kernels.core (Accelerator Core)")
def _aicpu(ctx: Context) -> Value:
    return _share_of_compute(ctx, _core_mask("AI_CPU"), "the accelerator core")


@metric("matmul_time_share", "ratio", "Share of compute kernel time in matrix multiplications (MatMul, BatchMatMul, GroupedMatmul, Dense)", "kernels.type")
def _matmul(ctx: Context) -> Value:
    return _share_of_compute(ctx, lambda ctx, keep: _text_mask(ctx, "type", keep, _is_matmul), "the op type")


def _is_matmul(types: pd.Series) -> pd.Series:
    return types.str.contains(_MATMUL, regex=True, na=False)


@metric("fp32_matmul_share", "ratio", "Share of matmul kernel time computed in FP32 (mixed precision would use FP16/BF16)", "kernels.input_dtypes")
def _fp32(ctx: Context) -> Value:
    k = ctx.capture.table("kernels")
    keep = _compute_rows(k)
    if not keep.any():
        return _no_kernels()
    # the matmul kernels' columns only (their data types are texts: not taken for every compute kernel)
    mm = k[["rank", "dur_us", "input_dtypes"]].take(np.flatnonzero(keep)[_text_mask(ctx, "type", keep, _is_matmul)])
    if not len(mm):
        return Value(None, reason="no matmul kernels in the capture")
    dt = mm["input_dtypes"].astype("string")
    if dt.isna().all():
        return Value(None, reason="kernel input data types not recorded (record_shapes off, or profiler Level0)")
    first = dt.str.split(";").str[0].str.strip()
    fp32 = first.isin(_FP32)
    total = float(mm["dur_us"].sum())
    dur, hit = mm["dur_us"].to_numpy(float, na_value=np.nan), fp32.to_numpy(bool)  # per rank on arrays (pandas' sums)
    per = {r: float(nan_sum(dur[rows][hit[rows]]) / nan_sum(dur[rows])) for r, rows in rank_rows(mm)}
    return Value(float(mm.loc[fp32, "dur_us"].sum()) / total if total else None, per)


@metric(
    "dynamic_shape_ops",
    "ops",
    "Ops whose input shapes change from step to step (dynamic shapes), max over ranks",
    "kernels.input_shapes per step",
)
def _dynamic(ctx: Context) -> Value:
    k = ctx.capture.table("kernels")
    shapes, _ = column_codes(ctx, "input_shapes")  # (a null shape: -1)
    keep = (shapes >= 0) & k["step"].notna().to_numpy(bool)
    if keep.any() and len(pd.unique(k["step"].to_numpy(np.int64, na_value=0)[keep])) >= 2:
        # an op is dynamic when its set of shapes differs between steps. The sets are the same in every
        # step exactly when each of the op's shapes is seen in each of its steps: distinct (step, shape)
        # pairs = steps x shapes (counted, not compared set by set: a Python call per rank, op and step)
        per = _varying_per_rank(ctx, k, shapes, keep)
        return Value(int(max(per.values())), per)
    if len(ctx.capture.table("host_shapes")):
        # PyNative reuses op names (BiasAddGrad-op0) across different small graphs, so a name
        # with several shapes is not evidence of dynamic shapes; CPU shapes carry no step
        return Value(None, reason="MindSpore CPU records op shapes without their step: shapes cannot be compared across steps")
    if keep.any():
        return Value(None, reason="one step only: shapes cannot be compared across steps")
    return Value(None, reason="input shapes not recorded (record_shapes off, or profiler Level0)")


def _varying_per_rank(ctx: Context, k: pd.DataFrame, shapes: np.ndarray, keep: np.ndarray) -> dict[int, float]:
    """Per rank (ascending), how many of its ops (a rank and a name: a null name is no op) have fewer distinct
    (step, shape) pairs than steps x shapes, over the rows ``keep`` (a shape and a step), counted on integer codes
    (the texts' codes, :func:`column_codes`; each count a hash pass): what a ``drop_duplicates`` of (rank, name,
    step, input_shapes) and a ``groupby(["rank", "name"])`` of its size against the product of the ``nunique`` of
    step and of input_shapes give (512 bench ranks: 0.08 -> 0.02 s). Those frames where a code made of two or three
    would not fit in 63 bits."""
    names, _ = column_codes(ctx, "name")
    rows = np.flatnonzero(keep & (names >= 0) & k["rank"].notna().to_numpy(bool))
    rank_codes, ranks = pd.factorize(k["rank"].to_numpy(np.int64, na_value=0)[rows])
    step_codes, steps = pd.factorize(k["step"].to_numpy(np.int64, na_value=0)[rows])
    shape_codes = shapes[rows].astype(np.int64)
    n_names = int(names.max()) + 1 if len(names) else 1
    n_steps, n_shapes = max(len(steps), 1), int(shape_codes.max()) + 1 if len(rows) else 1
    if len(ranks) * n_names >= 2**62 or len(rows) * n_steps * n_shapes >= 2**62:
        u = k.loc[keep, ["rank", "name", "step", "input_shapes"]].drop_duplicates()
        by = u.groupby(["rank", "name"])
        varying = by.size() < by["step"].nunique() * by["input_shapes"].nunique()
        return {int(r): float(n) for r, n in varying.groupby(level=0).sum().items()}  # booleans counted per rank
    group, op = pd.factorize(rank_codes.astype(np.int64) * n_names + names[rows])  # each (rank, name): 0..G-1
    g = len(op)
    pairs = np.bincount(pd.unique((group * n_steps + step_codes) * n_shapes + shape_codes) // (n_steps * n_shapes),
                        minlength=g)
    in_steps = np.bincount(pd.unique(group * n_steps + step_codes) // n_steps, minlength=g)
    in_shapes = np.bincount(pd.unique(group * n_shapes + shape_codes) // n_shapes, minlength=g)
    rank_of = ranks[op // n_names]  # each op's rank
    order = np.unique(rank_of)
    counts = np.bincount(np.searchsorted(order, rank_of), weights=pairs < in_steps * in_shapes, minlength=len(order))
    return {int(r): float(c) for r, c in zip(order, counts)}


@metric("kernels_per_step", "kernels", "Median number of kernel launches per step and rank", "kernels.step / steps")
def _per_step(ctx: Context) -> Value:
    c = _compute(ctx, ("rank", "start_us"))
    s = ctx.steps
    if not len(c) or not len(s):
        return _no_kernels()
    counts = []
    per: dict[int, float | None] = {}
    start = c["start_us"].to_numpy(float, na_value=np.nan)
    by_rank = {r: start[rows] for r, rows in rank_rows(c)}  # one pass, not a filter over every rank's kernels per rank
    empty = start[:0]
    lows, highs = s["start_us"].to_numpy(float, na_value=np.nan), s["end_us"].to_numpy(float, na_value=np.nan)
    for r, rows in rank_rows(s):  # each rank's steps in their order (groupby("rank")), on arrays
        kr = by_rank.get(r, empty)
        vals = [int(((kr >= lo) & (kr < hi)).sum()) for lo, hi in zip(lows[rows], highs[rows]) if not (np.isnan(lo) or np.isnan(hi))]
        if vals:
            per[r] = float(np.median(np.asarray(vals, dtype=np.float64)))  # Series.median of the counts
            counts.extend(vals)
    if not counts:
        return Value(None, reason="steps carry no start/end times")
    return Value(float(pd.Series(counts).median()), per)


# ---- each rank's top kernel types (the JSON ranks' top_kernels) ---------------------------------------


def _descending(v: np.ndarray) -> np.ndarray:
    """The positions of ``v`` (floats) by descending value, ties and NaN placed as pandas' ``sort_values(ascending=False)``
    places them: its own steps (pandas.core.sorting.nargsort: the values not NaN reversed, sorted by numpy's quicksort,
    the order reversed back, the NaN after them), without a Series per rank (512 ranks: ~0.3 s;
    tests/test_kernel_types.py checks it against sort_values)."""
    nan = np.isnan(v)
    keep = np.flatnonzero(~nan)[::-1]
    return np.concatenate([keep[v[keep].argsort(kind="quicksort")][::-1], np.flatnonzero(nan)])


@with_its_metrics
def top_types(ctx: Context) -> list[list[dict[str, Any]]]:
    """:func:`top_types_per_rank` of the analysis' capture, once (``ctx.cache``): where a forked child computes this
    module's metrics it computes this after them and it comes back (small: a few types per rank), the two processes'
    shares of the metrics then even (512 bench ranks: ~0.05 s moved off the parent, the longer one)."""
    return ctx.once("kernels.top_types", lambda: top_types_per_rank(ctx.capture))


def top_types_per_rank(capture: Capture, n: int = TOP_TYPES) -> list[list[dict[str, Any]]]:
    """Each rank's compute kernel types by total time (in the capture's order of ranks; the first ``n``), with
    count, mean and share of the rank's compute time, from one grouping of the capture's kernels over (rank,
    type): each group counts, sums and averages the same rows in the same order as a grouping of the rank's own
    kernels would."""
    out: list[list[dict[str, Any]]] = [[] for _ in capture.ranks]
    lengths = [(i, m) for i, rd in enumerate(capture.ranks) if (m := held_rows(rd, "kernels"))]
    if not lengths:
        return out
    k = capture.table("kernels")  # those ranks' kernels, one after the other (kept by the capture)
    part = np.repeat(np.array([i for i, _ in lengths]), [m for _, m in lengths])
    comp = (k["kind"] == "compute").to_numpy(bool, na_value=False)
    c = k.loc[comp, ["type", "name", "dur_us"]]
    g = c.groupby([part[comp], c["type"].fillna(c["name"])], dropna=False)["dur_us"].agg(["count", "sum", "mean"])
    at = g.index.get_level_values(0).to_numpy()
    types = g.index.get_level_values(1)
    count, total_us, mean = g["count"].to_numpy(), g["sum"].to_numpy(float), g["mean"].to_numpy(float)
    for i, _ in lengths:
        lo, hi = int(np.searchsorted(at, i, side="left")), int(np.searchsorted(at, i, side="right"))
        if lo == hi:
            continue
        order = lo + _descending(total_us[lo:hi])
        total = float(nan_sum(total_us[order])) or 1.0  # pandas' sum of the sorted column
        out[i] = [
            {"type": str(types[j]), "count": int(count[j]), "total_us": float(total_us[j]), "mean_us": float(mean[j]),
             "share": float(total_us[j]) / total}
            for j in order[:n]
        ]  # fmt: skip
    return out
