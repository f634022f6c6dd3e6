"""FLOPs per step, MFU and HFU, per device.

FLOPs come from, in order of preference: the model description (``--model-config``: Megatron-LM
convention, causal attention counted half), the kernels' recorded shapes (MatMul, Conv, FlashAttention:
``flops.kernel_flops``; on CPU the ops' shapes in cpu_framework), or the PMU counters
(``aic_cube_fops`` + vector fops of the ArithmeticUtilization metrics). MFU divides model FLOPs by
step time x peak; HFU divides hardware FLOPs (recompute and padding included: the PMU counters or
all kernels' shapes) by the same. The peak: ``--peak-tflops``, ``--device``, else the chip the capture
records (metrics/chip.py: cube cores x clock x 8192, dense FP16/BF16 whatever the kernels' dtypes).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pandas as pd

from msdiag.metrics import chip, devices, model_config, phases
from msdiag.metrics.registry import Context, Value, metric, nan_sum, rank_rows

_RECOMPUTE = re.compile(r"recompute", re.IGNORECASE)
#: What the FLOPs resolution reads of the compute kernels (only these are copied)
_FLOPS_COLUMNS = ("rank", "start_us", "dur_us", "cube_fops", "vector_fops")


def _peak(ctx: Context) -> tuple[float | None, str]:
    """The peak per device: --peak-tflops, else --device's table entry, else what the capture records
    (CANN info.json, or the cube cores and clock read from the kernels and counters: metrics/chip.py)."""
    o = ctx.options
    try:
        if o.peak_tflops is not None or o.device:
            return devices.resolve_peak(o.peak_tflops, o.device, None)
    except ValueError as e:
        return None, str(e)
    return chip.inferred_peak(ctx)


def _world_size(ctx: Context) -> tuple[int, str]:
    for rd in ctx.capture.ranks:
        ws = rd.info.world_size()
        if ws is not None:
            return ws
    return len(ctx.capture.ranks), "the number of ranks in the capture"


def _per_step_sum(ctx: Context, values: pd.Series, kernels: pd.DataFrame, at: dict[Any, np.ndarray] | None = None) -> dict[int, float]:
    """Median over steps of the per-step sum of ``values`` (aligned with ``kernels``), per rank.

    Float values with float starts are cut and summed on arrays (np.nansum is pandas' float sum: missing
    values as 0, the same pairwise order), not with a pandas mask per step of every rank. ``at``:
    ``kernels.groupby("rank").indices`` where the caller has it (one grouping for its several sums)."""
    out: dict[int, float] = {}
    steps = ctx.steps
    if at is None:
        at = kernels.groupby("rank").indices  # rank -> positions: no pass over every rank's kernels per rank
    arrays = values.dtype == np.float64 and kernels["start_us"].dtype == np.float64
    v_all, s_all = (values.to_numpy(), kernels["start_us"].to_numpy()) if arrays else (None, None)
    total: Callable[[Any], Any] = nan_sum if arrays else (lambda x: x.sum())
    # each rank's steps by position (rank_rows: groupby("rank")'s groups, in order), their bounds as arrays
    step_lo = steps["start_us"].to_numpy(float, na_value=np.nan)
    step_hi = steps["end_us"].to_numpy(float, na_value=np.nan)
    for rank, rows in rank_rows(steps):
        pos = at.get(rank)
        if pos is None:
            continue
        vr, start = (
            (v_all[pos], s_all[pos])
            if v_all is not None and s_all is not None
            else (values.iloc[pos], kernels["start_us"].iloc[pos])
        )
        sums = []
        for lo, hi in zip(step_lo[rows].tolist(), step_hi[rows].tolist()):
            if np.isnan(lo) or np.isnan(hi):
                continue
            m = (start >= lo) & (start < hi)
            if m.any():
                sums.append(float(total(vr[m])))
        if not sums:
            sums = [float(total(vr)) / max(1, len(rows))]
        out[int(rank)] = float(np.median(sums))
    return out


def _flops(ctx: Context) -> dict[str, Any]:
    """Model and hardware FLOPs per device and step, per rank, with their source."""
    cache = ctx.cache.setdefault("flops", {})
    if cache:
        return cache
    out: dict[str, Any] = {"model": {}, "hardware": {}, "source": None, "reason": None, "convention": None}
    cfg_path = ctx.options.model_config
    # the compute kernels' shape FLOPs (host ops on CPU), positional with comp: computed once per analysis,
    # before comp exists (a CPU trace holds millions of kernel rows: two copies at once would double the peak)
    kf = phases.kernel_flops_for(ctx)
    k = ctx.capture.table("kernels")
    rows = np.flatnonzero((k["kind"] == "compute").to_numpy(bool, na_value=False))
    comp = k[list(_FLOPS_COLUMNS)].take(rows).reset_index(drop=True)
    at = comp.groupby("rank").indices  # (each rank's compute kernels, for every per-step sum below)
    shape_f = pd.Series(dtype=float) if kf is None else kf
    if cfg_path:
        cfg = model_config.load_model_config(str(cfg_path))
        ws, ws_from = _world_size(ctx)
        f = model_config.flops_per_step(cfg, ws)
        ranks = sorted({int(r) for r in ctx.steps["rank"]}) or ctx.capture.rank_ids()
        out["model"] = {r: float(f["model_flops_per_device"]) for r in ranks}
        out["hardware"] = {r: float(f["hardware_flops_per_device"]) for r in ranks}
        out["source"] = "model config"
        out["convention"] = f"{f['convention']} (world size {ws} from {ws_from})"
    elif len(shape_f) and shape_f.notna().any():
        # each distinct name searched once, on the name column's codes (kernels._text_mask, as the throughput's tests)
        from msdiag.metrics.kernels import _text_mask  # (here: a module's import registers its metrics, the JSON's order)

        recomputed = _text_mask(ctx, "name", rows, lambda t: t.str.contains(_RECOMPUTE, na=False))
        model_vals = shape_f.fillna(0.0).where(~recomputed, 0.0)
        out["model"] = _per_step_sum(ctx, model_vals, comp, at)
        out["hardware"] = _per_step_sum(ctx, shape_f.fillna(0.0), comp, at)
        out["source"] = "kernel shapes"
        covered = float(comp.loc[shape_f.notna(), "dur_us"].sum() / max(comp["dur_us"].sum(), 1e-9))
        out["convention"] = (
            "FLOPs of MatMul/BatchMatMul/GroupedMatmul/Conv/FlashAttention kernels from their recorded shapes "
            f"(kernels with a formula cover {100 * covered:.0f}% of compute time; recomputed kernels excluded "
            "from model FLOPs where their names say so; causal FlashAttention counted half)"
        )
    pmu = None
    if len(comp) and comp["cube_fops"].notna().any():
        pmu = comp["cube_fops"].fillna(0.0) + comp["vector_fops"].fillna(0.0)
        hw = _per_step_sum(ctx, pmu, comp, at)
        if out["source"] is None:
            out["model"] = hw
            out["source"] = "PMU"
            out["convention"] = "hardware FLOPs counted by the AI Core PMU (aic_cube_fops + vector fops): includes padding and recompute"
        out["hardware"] = hw
    if out["source"] is None:
        if not len(comp):
            out["reason"] = "no compute kernels in the capture"
        else:
            out["reason"] = (
                "no FLOPs: no kernel with recorded shapes has a FLOPs formula (record_shapes off, Level0, or PyNative "
                "on CPU, which records no shapes for MatMul), no PMU FLOPs columns, and no --model-config"
            )
    cache.update(out)
    return cache


@metric("flops_per_step", "FLOP", "Model FLOPs one device does in one step (median over ranks)", "model config, kernel shapes or PMU (see flops_source)")
def _flops_per_step(ctx: Context) -> Value:
    f = _flops(ctx)
    if not f["model"]:
        return Value(None, reason=f["reason"])
    return Value(float(np.median(list(f["model"].values()))), dict(f["model"]))


@metric("flops_source", "text", "Where the FLOPs come from: model config, kernel shapes or PMU, and the convention", "FLOPs resolution")
def _flops_source(ctx: Context) -> Value:
    f = _flops(ctx)
    if f["source"] is None:
        return Value(None, reason=f["reason"])
    return Value(f"{f['source']}: {f['convention']}")


@metric("peak_tflops", "TFLOP/s", "Peak dense FP16/BF16 TFLOP/s per device used for MFU", "--peak-tflops, --device table, else the capture's cube cores x clock (CANN info.json, Block Dim, AI Core Freq, PMU)", reads=chip.READS)
def _peak_tflops(ctx: Context) -> Value:
    peak, src = _peak(ctx)
    if peak is None:
        return Value(None, reason=src)
    return Value(peak)


@metric("peak_source", "text", "Where the peak TFLOP/s comes from", "--peak-tflops, --device table, else the capture's cube cores x clock", reads=chip.READS)
def _peak_source(ctx: Context) -> Value:
    peak, src = _peak(ctx)
    return Value(src if peak is not None else None, reason=None if peak is not None else src)


def _utilization(ctx: Context, which: str) -> Value:
    f = _flops(ctx)
    per_flops = f[which]
    if not per_flops:
        return Value(None, reason=f["reason"])
    peak, src = _peak(ctx)
    if peak is None:
        return Value(None, reason=src)
    st = ctx.steps[ctx.steps["total_us"] > 0].groupby("rank")["total_us"].median()
    per: dict[int, float | str | None] = {}
    for r, fl in per_flops.items():
        if r in st.index and st[r] > 0:
            per[r] = fl / (st[r] * 1e-6 * peak * 1e12)
    if not per:
        return Value(None, reason="no step time to divide by")
    # the job's MFU: median FLOPs over median step time (a rank that waits lowers it, as it should)
    all_st = float(np.median(ctx.steps.loc[ctx.steps["total_us"] > 0, "total_us"]))
    job = float(np.median(list(per_flops.values()))) / (all_st * 1e-6 * peak * 1e12)
    return Value(job, per)


@metric("mfu", "ratio", "Model FLOPs utilization: flops_per_step / (step_time x peak per device)", "flops_per_step, step_time_us, peak_tflops")
def _mfu(ctx: Context) -> Value:
    return _utilization(ctx, "model")


@metric("hfu", "ratio", "Hardware FLOPs utilization: recompute and padding included", "PMU or kernel shapes, step_time_us, peak_tflops")
def _hfu(ctx: Context) -> Value:
    return _utilization(ctx, "hardware")


@metric("achieved_tflops", "TFLOP/s", "Model TFLOP/s one device achieves over a step (median)", "flops_per_step / step_time_us")
def _achieved(ctx: Context) -> Value:
    f = _flops(ctx)
    if not f["model"]:
        return Value(None, reason=f["reason"])
    st = float(np.median(ctx.steps.loc[ctx.steps["total_us"] > 0, "total_us"])) if len(ctx.steps) else 0.0
    if st <= 0:
        return Value(None, reason="no step time")
    return Value(float(np.median(list(f["model"].values()))) / (st * 1e-6) / 1e12)
