"""Prefill and decode steps of an inference capture, each phase's figures, and the KV cache's memory.

In a capture of a generation loop or a serving process each forward call is a step (``msdiag capture``
counts each call of the top-level Cell as a step when there is no dataset). A prefill call runs the
whole prompt (sequence length > 1), a decode call one new token per sequence (sequence length 1).
Steps are told apart, in order of preference:

1. by input shapes: the first op of the step whose input is ``[batch, sequence, hidden]`` (3-D), or an
   embedding lookup (Gather / GatherV2 / Embedding) whose indices are ``[batch, sequence]``; sequence 1 =
   decode. Kernel shapes on Ascend, ``cpu_framework`` shapes on MindSpore CPU (PyNative ops launched
   through PyBoost carry none, but LayerNorm / BiasAdd / Gather do);
2. by step duration, when no step has a shape: the two clusters of log step time (Otsu's split), the
   slower one prefill, accepted when the slower cluster's median is at least ``DURATION_SPLIT`` times the
   faster one's and holds at most as many steps (a generation loop decodes more often than it prefills).

A capture with backward or optimizer ops (``*Grad``, ``Adam``, ...) is training: no phases. So is one
whose steps were not forward calls unless a request log comes with it.

KV cache memory, from the memory timeline: for each run of decode steps after a prefill, the highest
allocated memory at a decode step's start minus the allocated memory when the prefill started
(weights and other long-lived memory cancel out; what the run holds on to is the cache it grows).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from msdiag.metrics import flops
from msdiag.metrics.registry import Context
from msdiag.model import Capture
from msdiag.units import FLOPS_PER_TFLOPS, US_PER_MS

PREFILL = "prefill"
DECODE = "decode"
DURATION_SPLIT = 1.5
TOP_KERNELS = 5
_TRAINING = re.compile(r"Grad(?:V\d+)?$|Backprop|^Apply|Adam|Lamb|^SGD$|Momentum|Adagrad|RMSProp|Optimizer")
_EMBEDDING = frozenset({"Gather", "GatherV2", "Embedding", "EmbeddingLookup", "GatherD"})


@dataclass
class Phases:
    """Each step's phase, or the reason the capture's steps could not be told apart."""

    steps: pd.DataFrame  # rank, step, phase, batch, seq, total_us, computing_us, free_us, start_us, end_us, warmup
    classified_by: str | None
    reason: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.classified_by is not None

    def timed(self, phase: str) -> pd.DataFrame:
        s = self.steps
        keep = (s["phase"] == phase) & s["total_us"].notna() & ~s["warmup"].fillna(False).astype(bool)
        return s[keep.to_numpy(bool)]


def training_ops(cap: Capture) -> str | None:
    """The first backward / optimizer op type found, if any."""
    k = cap.table("kernels")
    if not len(k):
        return None
    typ = k["type"]
    # the type, else the name's last part: over distinct names (a host trace has a million rows, few names)
    names = pd.Series(k["name"][typ.isna().to_numpy(bool)].dropna().unique(), dtype="string")
    types = set(typ.dropna().astype(str).unique()) | set(names.str.rsplit("/", n=1).str[-1].dropna().astype(str))
    for t in sorted(types):
        base = re.sub(r"-op\d+$", "", t)
        if base != "StopGradient" and _TRAINING.search(base):
            return base
    return None


def _steps_from_cells(cap: Capture) -> bool:
    return any("Cell call" in str(rd.info.step_source or "") for rd in cap.ranks)


# ---- shapes ----------------------------------------------------------------------------------


def _first_shape(text: Any) -> tuple[int, ...] | None:
    if not isinstance(text, str) or not text.strip():
        return None
    first = text.split(";")[0].strip().strip('"')
    try:
        dims = tuple(int(d) for d in first.split(",") if d.strip())
    except ValueError:
        return None
    return dims if dims and all(d > 0 for d in dims) else None


def _nth_shape(text: Any, n: int) -> tuple[int, ...] | None:
    if not isinstance(text, str):
        return None
    parts = text.split(";")
    return _first_shape(parts[n]) if len(parts) > n else None


def _batch_seq(op_type: str, shapes: str) -> tuple[int, int] | None:
    """(batch, sequence) from one op's input shapes, when they say it."""
    if op_type in _EMBEDDING:
        idx = _nth_shape(shapes, 1)
        if idx is not None and len(idx) == 2:
            return idx[0], idx[1]
        return None
    s = _first_shape(shapes)
    if s is not None and len(s) == 3:
        return s[0], s[1]
    return None


SCAN_PER_STEP = 400  # kernels looked at from a step's start for its first shaped op


def _shape_per_step(cap: Capture, steps: pd.DataFrame) -> tuple[list[Any], list[Any]]:
    """The first (batch, sequence) inside each step's span, from the first shaped op from its start."""
    batch: list[Any] = [pd.NA] * len(steps)
    seq: list[Any] = [pd.NA] * len(steps)
    k = cap.table("kernels")
    if not len(k):
        return batch, seq
    hs = cap.table("host_shapes")
    by_name: dict[tuple[int, str], tuple[str, str]] = {}
    if len(hs):
        counts = hs.groupby(["rank", "op_name"]).size()
        for r, name, t, sh in hs[["rank", "op_name", "op_type", "input_shapes"]].itertuples(index=False, name=None):
            if counts.get((r, name), 0) == 1 and isinstance(sh, str):  # a name with several shape rows is ambiguous
                by_name[(int(r), str(name))] = (str(t), sh)
    for rank, g in k.groupby("rank"):
        g = g.sort_values("start_us", kind="stable")
        st = g["start_us"].to_numpy(dtype=float)
        types = g["type"].astype("string").to_numpy(dtype=object)
        names = g["name"].astype("string").to_numpy(dtype=object)
        own = g["input_shapes"].astype("string").to_numpy(dtype=object)
        for i, (r, lo, hi) in enumerate(zip(steps["rank"], steps["start_us"], steps["end_us"])):
            if int(r) != int(rank) or pd.isna(lo) or pd.isna(hi):
                continue
            j = int(np.searchsorted(st, lo, side="left"))
            end = min(len(st), j + SCAN_PER_STEP)
            while j < end and st[j] < hi:
                t, sh = types[j], own[j]
                if isinstance(sh, str) and isinstance(t, str):
                    hit = _batch_seq(t, sh)
                else:
                    nm = names[j]
                    row = by_name.get((int(rank), str(nm).rsplit("/", 1)[-1])) if isinstance(nm, str) else None
                    hit = _batch_seq(row[0], row[1]) if row else None
                if hit is not None:
                    batch[i], seq[i] = hit
                    break
                j += 1
    return batch, seq


# ---- duration clusters -------------------------------------------------------------------------


def otsu_split(values: np.ndarray) -> float | None:
    """The threshold on ``values`` that maximises the between-class variance (None for < 3 values)."""
    v = np.sort(values)
    if len(v) < 3:
        return None
    best, cut = -1.0, None
    for i in range(1, len(v)):
        a, b = v[:i], v[i:]
        between = len(a) * len(b) * (a.mean() - b.mean()) ** 2
        if between > best:
            best, cut = between, (v[i - 1] + v[i]) / 2.0
    return cut


def _by_duration(total: np.ndarray) -> tuple[np.ndarray | None, str]:
    ok = np.isfinite(total) & (total > 0)
    if ok.sum() < 3:
        return None, "fewer than 3 timed steps"
    logs = np.log(total[ok])
    cut = otsu_split(logs)
    if cut is None:
        return None, "fewer than 3 timed steps"
    slow = logs > cut
    if not slow.any() or slow.all():
        return None, "step durations form a single cluster"
    ratio = float(np.exp(np.median(logs[slow]) - np.median(logs[~slow])))
    if ratio < DURATION_SPLIT or slow.sum() > (~slow).sum():
        return None, (
            f"step durations form no clear two clusters (slower cluster {ratio:.2f}x the faster, "
            f"{int(slow.sum())} vs {int((~slow).sum())} steps; needs >= {DURATION_SPLIT}x and fewer slow steps)"
        )
    phase = np.full(len(total), None, dtype=object)
    idx = np.flatnonzero(ok)
    phase[idx[slow]] = PREFILL
    phase[idx[~slow]] = DECODE
    return phase, f"step duration clusters (prefill {ratio:.1f}x slower than decode; no input shapes recorded)"


# ---- classification ----------------------------------------------------------------------------

_COLS = ["rank", "step", "phase", "batch", "seq", "total_us", "computing_us", "free_us", "start_us", "end_us", "warmup"]


def classify(cap: Capture, steps: pd.DataFrame, with_requests: bool = False) -> Phases:
    """Tell the capture's steps apart as prefill or decode, or say why not."""
    empty = pd.DataFrame(columns=_COLS)
    if not len(cap.ranks):
        return Phases(empty, None, "no capture (a request log alone)")
    t = training_ops(cap)
    if t is not None:
        return Phases(empty, None, f"a training capture (backward / optimizer op {t} found): no prefill or decode")
    s = steps[steps["step"].notna() & steps["total_us"].notna()].copy() if len(steps) else steps
    if not len(s):
        return Phases(empty, None, "no steps with a measured duration (inference needs a step per forward call)")
    s = s.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)
    if "warmup" not in s.columns:
        s["warmup"] = False
    batch, seq = _shape_per_step(cap, s)
    s["batch"] = pd.array(batch, dtype="Int64")
    s["seq"] = pd.array(seq, dtype="Int64")
    known = s["seq"].notna()
    notes: list[str] = []
    if known.any():
        phase = np.where(s["seq"].fillna(0).to_numpy() == 1, DECODE, PREFILL).astype(object)
        phase[~known.to_numpy()] = None
        if (~known).any():
            notes.append(f"{int((~known).sum())} of {len(s)} steps carry no input shape: left unclassified")
        if not (phase == DECODE).any():
            notes.append("no step has sequence length 1: no decode steps (a single forward pass per request?)")
        how = "input shapes ([batch, sequence, hidden]: sequence 1 = decode)"
    else:
        if not (with_requests or _steps_from_cells(cap)):
            return Phases(
                empty, None,
                "no input shapes, and the steps are not forward calls (no msdiag capture Cell-call steps, no request log)",
            )
        ph, how = _by_duration(s["total_us"].to_numpy(dtype=float))
        if ph is None:
            return Phases(empty, None, f"no input shapes and {how}")
        phase = ph
    s["phase"] = pd.array(list(phase), dtype="string")
    return Phases(s[_COLS], how, None, notes)


# ---- per-phase figures -------------------------------------------------------------------------


def _in_steps(k: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Which kernels start inside one of the steps' spans (per rank; spans do not overlap)."""
    mask = np.zeros(len(k), dtype=bool)
    if not len(k) or not len(steps):
        return mask
    rk = k["rank"].to_numpy()
    st = k["start_us"].to_numpy(dtype=float)
    for rank, g in steps.dropna(subset=["start_us", "end_us"]).groupby("rank"):
        g = g.sort_values("start_us", kind="stable")
        lo = g["start_us"].to_numpy(dtype=float)
        hi = g["end_us"].to_numpy(dtype=float)
        sel = np.flatnonzero(rk == int(rank))
        j = np.searchsorted(lo, st[sel], side="right") - 1  # the last step starting at or before the kernel
        ok = (j >= 0) & (st[sel] < hi[np.clip(j, 0, None)])
        mask[sel[ok]] = True
    return mask


def phase_summary(cap: Capture, ph: Phases, kernel_flops: pd.Series | None) -> dict[str, Any]:
    """Per phase: steps, median and total time, share, computing / free shares, top kernels, TFLOP/s."""
    out: dict[str, Any] = {}
    total_all = sum(float(ph.timed(p)["total_us"].sum()) for p in (PREFILL, DECODE))
    k = cap.table("kernels")
    comp = k[k["kind"] == "compute"] if len(k) else k
    for p in (PREFILL, DECODE):
        s = ph.timed(p)
        if not len(s):
            out[p] = None
            continue
        tot = float(s["total_us"].sum())
        d: dict[str, Any] = {
            "steps": int(len(s)),
            "step_ms_p50": float(np.median(s["total_us"])) / US_PER_MS,
            "total_ms": tot / US_PER_MS,
            "share": tot / total_all if total_all > 0 else None,
            "computing_share": float(s["computing_us"].fillna(0).sum()) / tot if tot > 0 and s["computing_us"].notna().any() else None,
            "free_share": float(s["free_us"].fillna(0).sum()) / tot if tot > 0 and s["free_us"].notna().any() else None,
            "batch_p50": float(np.median(s["batch"].dropna().astype(float))) if s["batch"].notna().any() else None,
            "seq_p50": float(np.median(s["seq"].dropna().astype(float))) if s["seq"].notna().any() else None,
            "top_kernels": [],
            "tflops": None,
        }
        m = _in_steps(comp, s)
        if m.any():
            c = comp[m]
            g = c.groupby(c["type"].fillna(c["name"]), dropna=False)["dur_us"].agg(["count", "sum"]).sort_values("sum", ascending=False)
            ksum = float(g["sum"].sum()) or 1.0
            d["top_kernels"] = [
                {"type": str(t), "count": int(r["count"]), "total_us": float(r["sum"]), "share": float(r["sum"]) / ksum}
                for t, r in g.head(TOP_KERNELS).iterrows()
            ]
            if kernel_flops is not None and len(kernel_flops) == len(comp):
                f = kernel_flops[m]
                if f.notna().any() and tot > 0:
                    d["tflops"] = float(f.fillna(0).sum()) / (tot * 1e-6) / FLOPS_PER_TFLOPS
        out[p] = d
    return out


def _allocated_at(ts: np.ndarray, al: np.ndarray, t: float, until: float | None = None) -> float | None:
    """Allocated memory at time t: the last sample before it, else the first sample before ``until``."""
    j = int(np.searchsorted(ts, t, side="right")) - 1
    if j >= 0:
        return float(al[j])
    return float(al[0]) if until is not None and ts[0] < until else None


def kv_cache_from_memory(cap: Capture, ph: Phases) -> tuple[float | None, str]:
    """(MB the decode runs hold beyond what was allocated when their prefill began, how / why not)."""
    mem = cap.table("memory")
    if not len(mem) or mem["allocated_mb"].isna().all():
        return None, "no memory timeline in the capture (profile memory: msdiag capture does unless --no-memory)"
    if not ph.ok:
        return None, f"steps not told apart as prefill / decode ({ph.reason})"
    best: float | None = None
    for rank, s in ph.steps.groupby("rank"):
        m = mem[(mem["rank"] == rank) & mem["allocated_mb"].notna()].sort_values("ts_us", kind="stable")
        if not len(m):
            continue
        ts = m["ts_us"].to_numpy(dtype=float)
        al = m["allocated_mb"].to_numpy(dtype=float)

        s = s.sort_values("step", kind="stable")
        base: float | None = None
        highest: float | None = None
        run = 0
        for phase, lo, hi in zip(s["phase"], s["start_us"], s["end_us"]):
            if phase == PREFILL:
                if base is not None and highest is not None and run >= 2:
                    best = max(best or 0.0, highest - base)
                base, highest, run = _allocated_at(ts, al, float(lo), float(hi)), None, 0
            elif phase == DECODE and base is not None:
                v = _allocated_at(ts, al, float(lo))
                if v is not None:
                    highest = v if highest is None else max(highest, v)
                    run += 1
        if base is not None and highest is not None and run >= 2:
            best = max(best or 0.0, highest - base)
    if best is None:
        return None, "no run of at least 2 decode steps after a prefill with memory samples"
    return max(best, 0.0), "memory timeline: allocated growth over decode runs"


def kv_cache_from_model(cfg: Any) -> tuple[float | None, str]:
    """(MB of K and V for global_batch sequences of seq_len tokens in 16 bits, how / why not)."""
    if cfg.layers is None or cfg.hidden is None or cfg.heads is None:
        return None, "the model description gives no layers / hidden / heads"
    kv_heads = cfg.kv_heads or cfg.heads
    head_dim = cfg.hidden / cfg.heads
    b = 2 * cfg.layers * kv_heads * head_dim * cfg.seq_len * cfg.global_batch * 2
    if not math.isfinite(b) or b <= 0:
        return None, "the model description gives no KV cache size"
    return b / 2**20, (
        f"model description: 2 x {cfg.layers} layers x {kv_heads} KV heads x {head_dim:g} x {cfg.seq_len} tokens x "
        f"{cfg.global_batch} sequences x 2 bytes"
    )


# ---- shared by the metrics, the analysis and the report ---------------------------------------------------------


def phases_for(ctx: Context) -> Phases:
    """The analysis context's phases, classified once per analysis (kept in ``ctx.cache``)."""
    hit = ctx.cache.get("inference.phases")
    if hit is None:
        hit = classify(ctx.capture, ctx.steps, with_requests=ctx.requests is not None)
        ctx.cache["inference.phases"] = hit
    return hit


#: the kernel columns the FLOP formulas read (flops.kernel_flops, flops.host_op_flops)
_FLOP_COLUMNS = ("rank", "name", "type", "core", "start_us", "input_shapes", "input_dtypes", "input_formats", "output_shapes",
                 "output_dtypes")


def compute_kernel_flops(cap: Capture) -> pd.Series | None:
    """Shape FLOPs of each compute kernel (positional, aligned with the compute rows of the kernel table)."""
    k = cap.table("kernels")
    if not len(k):
        return None
    rows = (k["kind"] == "compute").to_numpy(bool, na_value=False)
    if not rows.any():
        return None
    if (k["core"][rows] == "CPU").all():
        # only what the FLOP formulas read: a CPU trace holds millions of kernel rows, a whole copy costs hundreds of MB
        comp = k.loc[rows, [c for c in _FLOP_COLUMNS if c in k.columns]].reset_index(drop=True)
        return flops.host_op_flops(comp, cap.table("host_shapes")).reset_index(drop=True)
    # a kernel's FLOPs depend on its own row alone: computed on the whole table (no copy of the compute rows' columns),
    # the compute rows' taken
    return pd.Series(flops.kernel_flops(k).to_numpy()[rows], dtype="float64", name="flops")


def kernel_flops_for(ctx: Context) -> pd.Series | None:
    """:func:`compute_kernel_flops` of the analysis' capture, once (the type table, MFU and the phase summary read it)."""
    return ctx.once("phases.kernel_flops", lambda: compute_kernel_flops(ctx.capture))


def summary_for(ctx: Context) -> dict[str, Any]:
    """Per-phase figures of the context's capture (cached)."""
    hit = ctx.cache.get("inference.phase_summary")
    if hit is None:
        ph = phases_for(ctx)
        hit = phase_summary(ctx.capture, ph, kernel_flops_for(ctx)) if ph.ok else {}
        ctx.cache["inference.phase_summary"] = hit
    return hit


def phases_summary(ctx: Context) -> dict[str, Any] | None:
    """The ``phases`` object of the JSON contract: null without a capture, else how steps were told apart."""
    if not len(ctx.capture.ranks):
        return None
    phases = phases_for(ctx)
    if not phases.ok:
        return {"classified_by": None, "reason": phases.reason, "prefill": None, "decode": None, "notes": list(phases.notes)}
    s = summary_for(ctx)
    kv_mb, kv_from = kv_cache_from_memory(ctx.capture, phases)
    return {
        "classified_by": phases.classified_by,
        "reason": None,
        "prefill": s.get(PREFILL),
        "decode": s.get(DECODE),
        "kv_cache_mb": kv_mb,
        "kv_cache_from": kv_from,
        "notes": list(phases.notes),
    }


def workload(ctx: Context) -> str | None:
    """'inference' (request log, or steps told apart as prefill / decode), 'training' (backward ops), else None."""
    if ctx.requests is not None:
        return "inference"
    if not len(ctx.capture.ranks):
        return None
    if training_ops(ctx.capture) is not None:
        return "training"
    return "inference" if phases_for(ctx).ok else None
