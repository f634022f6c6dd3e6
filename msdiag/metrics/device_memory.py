"""Device memory, explained: the device's whole footprint, what it is made of, who holds it at the peak,
and what recomputation would free and cost.

The device footprint
--------------------
``npu_module_mem.csv`` (CANN's npu_module_mem data, copied by torch_npu / MindSpore) records, at each
sample time, the device memory held by every driver module (``Component``: APP, HCCL, RUNTIME, GE,
SLOG, ...). CANN writes ``Total Reserved(KB)``; torch_npu's bean divides it by 1024 into
``Total Reserved(MB)``, so the file's MB are MiB, like every Ascend memory file (units.py). -1 KB means
"only releases were collected" (msprof docs): the reader makes it null. The device footprint at a
sample time is the sum of the modules' figures at that time. Without npu_module_mem, the driver's
figure for the whole process (memory_record's ``APP`` rows, else the trace's NPU MEM ``APP/Memory``
counter in KB: the same numbers, 2160232 KB = 2109.6 MiB on torchnpu level1) stands for it, with no
breakdown.

The modules, grouped (``MODULE_GROUPS``): ``APP`` is the application's own device memory, i.e. the
framework's caching pool (torch_npu PTA / MindSpore pool: on torchnpu level1 rank 0 APP holds 1452 MiB,
the PTA pool's reserved figure in memory_record.csv exactly) and ``GE`` the Graph Engine's pool (76 MiB
beside GE's 74.75 MiB reserved there): together the framework pool, split into allocated (memory_record's
``*+GE`` allocated at that moment) and cached (the rest). ``HCCL`` / ``HCCP`` are the collective
library's buffers; ``RUNTIME``, ``TS``, ``DRV``, ``DEVMM``, ``KERNEL``, ``ASCENDCL`` the runtime, the
task scheduler and the driver; every other module is "other".

Who holds the memory at the peak
--------------------------------
At the moment the framework's allocated memory peaks (memory_record), the operator allocations of
operator_memory.csv alive then (allocated at or before, released after or never) are the holders.
Each is put in a class from when it was allocated and released, relative to the phases of its own step
(the step whose start precedes the allocation), which the allocating operators' names give: the step's
first allocation by a backward operator (``BACKWARD``: ``*_backward``, ``*Backprop*``, ``*Grad``,
MindSpore's ``Gradients/`` scope) starts its backward phase, the first optimizer allocation after it
(``OPTIMIZER``: ``_foreach_*``, ``Apply*``, Adam, SGD, ...) its optimizer phase:

- ``activations``: allocated in the forward phase and still held when the backward begins (they are
  freed in the backward, or kept past it);
- ``workspaces``: released within the phase that allocated them (temporaries, kernel workspaces);
- ``gradients``: allocated in the backward and held past it;
- ``parameters_optimizer``: what lives across steps (parameters, optimizer state): the operator
  allocations made before the first step's start, those of the optimizer phase never released in the
  capture, and the part of the peak allocated memory no recorded allocation explains (allocated before
  the capture began).

Recomputation
-------------
Full recomputation keeps only each recomputed layer's input and runs the layer's forward again: it
frees at most the activations held at the peak and costs one more forward pass per step (the
forward kernels' time and FLOPs). Selective recomputation of attention (Megatron / MindFormers
``select_recompute``) drops only the attention core's outputs (``ATTENTION_CORE``: softmax, attention
scores, flash attention, batched matmuls): it frees those activations and costs those kernels'
forward time. Forward kernels: in each step, the kernels that start before its first backward
kernel (same name patterns).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from msdiag.metrics.flops import kernel_flops
from msdiag.metrics.memory import (
    KB_PER_MB,
    MB_PER_GB,
    _capacity,
    column_max,
    framework_column,
    framework_rows,
    memory_codes,
    text_hits,
)
from msdiag.metrics.registry import Context, Reads, Value, kept_in_child, key_rows, metric, nan_sum, rank_rows, with_its_metrics
from msdiag.model import Rows, frame_of
from msdiag.units import FLOPS_PER_TFLOPS

DEVICE_SOURCE = "npu_module_mem"
APP_COMPONENT = "APP"  # memory_record: the driver's figure for the whole process
NPU_MEM_TRACK, NPU_MEM_APP = "NPU MEM", "APP/Memory"  # the same figure as a trace counter (KB: HBM + DDR)
# npu_module_mem modules, grouped (module doc)
MODULE_GROUPS: dict[str, tuple[str, ...]] = {
    "framework_pool": ("APP", "GE"),
    "hccl": ("HCCL", "HCCP"),
    "runtime": ("RUNTIME", "TS", "DRV", "DEVMM", "KERNEL", "ASCENDCL"),
}
COMPOSITION_KEYS = ("framework_pool_mb", "hccl_mb", "runtime_mb", "other_mb")

BACKWARD = re.compile(r"backward|Backprop|Grad(?:V\d+)?(?:\b|_|$)|^Gradients(?:/|$)", re.I)
OPTIMIZER = re.compile(r"_foreach_|optimizer|^(?:.*/)?Apply|Adam|Lamb|\bSGD\b|Momentum|Adagrad|RMSProp", re.I)
ATTENTION_CORE = re.compile(r"(?<!log)(?<!log_)softmax|flash|attention|\bbmm\b|baddbmm|BatchMatMul", re.I)
HOLDER_CLASSES = ("parameters_optimizer", "activations", "gradients", "workspaces")
TOP_HOLDERS = 10  # holders listed per rank, largest first

_NO_DEVICE = (
    "no device-level memory record (npu_module_mem.csv absent and no APP rows in memory_record.csv: "
    "profile_memory off, or a MindSpore CPU capture)"
)


# ---- the device footprint ---------------------------------------------------------------------


def device_series(ctx: Context) -> Mapping[int, pd.DataFrame]:
    """Per rank, the device footprint over time: ts_us, total_mb, the four groups (null without
    npu_module_mem), basis ("npu_module_mem" or "APP"); each rank's frame cut when read. Computed once per analysis (ctx.cache)."""
    return _series(ctx)[0]


def _series(ctx: Context) -> tuple[Mapping[int, pd.DataFrame], dict[int, tuple[np.ndarray, np.ndarray]], dict[int, _Row]]:
    """(device_series, per rank its ts_us and total_mb as float arrays, per rank where its rows lie: :data:`_Row`):
    computed once per analysis."""
    kept = ctx.cache.get("device_memory.series")
    if kept is None:
        kept = ctx.cache["device_memory.series"] = _device_series(ctx)
    return kept  # type: ignore[no-any-return]


def _group_of(component: str) -> str:
    for group, modules in MODULE_GROUPS.items():
        if component.upper() in modules:
            return group
    return "other"


#: Where a rank's device series lies: the columns of the frame that holds it, as arrays, and its first row there.
_Row = tuple[dict[str, np.ndarray], int]


class _Series(Mapping[int, pd.DataFrame]):
    """:func:`device_series`: per rank its frame, held as :class:`model.Rows` of the ranks' one frame of module series
    (cut when read: the views read one rank's, the metrics the arrays) or as a frame of its own."""

    def __init__(self, held: dict[int, pd.DataFrame | Rows]) -> None:
        self._held = held

    def __getitem__(self, rank: int) -> pd.DataFrame:
        return frame_of(self._held[rank])

    def __iter__(self) -> Iterator[int]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, rank: object) -> bool:  # (Mapping's reads the frame: cuts it)
        return rank in self._held


def _columns(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each column of ``df`` as the array its row Series (``df.iloc[i]``) takes its values from."""
    return {c: df[c].to_numpy() for c in df.columns}


def _module_series(ctx: Context, m: pd.DataFrame) -> tuple[dict[int, Rows], dict[int, tuple[np.ndarray, np.ndarray]], dict[int, _Row]]:
    """Every rank's npu_module_mem rows -> per rank, one row per sample time: the groups and their sum.

    One pivot over (rank, sample time) for all ranks, not one per rank: each cell sums the same rows in
    the same order as the rank's own pivot would, and a group a rank lacks is 0 either way."""
    rows = (text_hits(ctx, "source", lambda t: t == DEVICE_SOURCE) & m["reserved_mb"].notna().to_numpy(bool)
            & m["ts_us"].notna().to_numpy(bool) & m["rank"].notna().to_numpy(bool))
    at = np.flatnonzero(rows)
    if not len(at):
        return {}, {}, {}
    # each distinct component classed once (the same group as _group_of on every row, a null as ""), the pivot's
    # columns the groups' numbers in the order of their names (as it orders the names), named after: no text taken
    # or hashed per row (512 bench ranks: 0.07-0.10 -> 0.05 s)
    codes, texts = memory_codes(ctx, "component")
    groups = [_group_of(t) for t in texts] + [_group_of("")]  # (code -1, a null: the last)
    named = sorted(set(groups))
    number = np.array([named.index(x) for x in groups], dtype=np.int64)[codes[at]]
    g = pd.DataFrame({"rank": m["rank"].to_numpy(np.int64, na_value=0)[at], "ts_us": m["ts_us"].to_numpy(float, na_value=np.nan)[at],
                      "group": number, "reserved_mb": m["reserved_mb"].to_numpy(float, na_value=np.nan)[at]})
    wide = g.pivot_table(index=["rank", "ts_us"], columns="group", values="reserved_mb", aggfunc="sum", fill_value=0.0)
    wide.columns = pd.Index([named[i] for i in wide.columns], name="group")
    out = pd.DataFrame({"rank": wide.index.get_level_values(0).to_numpy(), "ts_us": wide.index.get_level_values(1).to_numpy(float)})
    for key in COMPOSITION_KEYS:
        col = key.removesuffix("_mb")
        out[key] = wide[col].to_numpy(float) if col in wide.columns else 0.0
    out["total_mb"] = out[list(COMPOSITION_KEYS)].sum(axis=1)
    out["basis"] = DEVICE_SOURCE
    # each rank's rows are one run (the pivot's index is sorted by rank): its frame a row slice of the whole (a view,
    # index 0..n-1: model.Rows, cut when read), the frames groupby("rank") gave less the rank, without a grouping, a
    # drop or a frame built per rank
    rank = out.pop("rank").to_numpy()
    cuts = np.r_[0, np.flatnonzero(np.diff(rank)) + 1, len(rank)]
    ts, total = out["ts_us"].to_numpy(float), out["total_mb"].to_numpy(float)
    spans = [(int(rank[a]), a, b) for a, b in zip(cuts[:-1], cuts[1:])]
    cols = _columns(out)
    return ({r: Rows(out, a, b) for r, a, b in spans}, {r: (ts[a:b], total[a:b]) for r, a, b in spans},
            {r: (cols, a) for r, a, _ in spans})


def _app_series(g: pd.DataFrame) -> pd.DataFrame:
    """The driver's figure for the process (ts_us, reserved_mb) as a device series without a breakdown."""
    g = g[g["reserved_mb"].notna() & g["ts_us"].notna()].sort_values("ts_us", kind="stable")
    out = pd.DataFrame({"ts_us": g["ts_us"].to_numpy(float), "total_mb": g["reserved_mb"].to_numpy(float)})
    for key in COMPOSITION_KEYS:
        out[key] = np.nan
    out["basis"] = APP_COMPONENT
    return out


def _counter_series(c: pd.DataFrame) -> pd.DataFrame:
    """One rank's NPU MEM ``APP/Memory`` counter (KB) as a device series in MiB."""
    c = c[(c["name"] == NPU_MEM_APP).fillna(False).to_numpy(bool) & c["value"].notna().to_numpy(bool)]
    c = c.sort_values("ts_us", kind="stable")
    return _app_series(pd.DataFrame({"ts_us": c["ts_us"].to_numpy(float), "reserved_mb": c["value"].to_numpy(float) / KB_PER_MB}))


def _device_series(ctx: Context) -> tuple[Mapping[int, pd.DataFrame], dict[int, tuple[np.ndarray, np.ndarray]], dict[int, _Row]]:
    m = ctx.capture.table("memory")
    c = ctx.capture.table("counters")
    c = c[(c["track"] == NPU_MEM_TRACK).fillna(False).to_numpy(bool)]
    modules, arrays, where = _module_series(ctx, m)
    ranks = [int(r) for r in np.unique(np.r_[_ranks_of(m), _ranks_of(c)])]  # the ranks of either table, ascending
    out: dict[int, pd.DataFrame | Rows] = {}
    others = [r for r in ranks if r not in modules]
    if others:  # ranks without npu_module_mem: the driver's figure (memory_record APP), else the counter
        counters = dict(tuple(c.groupby("rank")))
        app_rows = m[((m["source"] == "memory_record") & (m["component"] == APP_COMPONENT)).fillna(False).to_numpy(bool)]
        apps = dict(tuple(app_rows.groupby("rank")))  # split once, not the whole table filtered per rank
    for rank in ranks:
        s = modules.get(rank)
        if s is not None and len(s):
            out[rank] = s  # its index is 0..n-1 already (as reset_index gives)
            continue
        s = _app_series(apps.get(rank, app_rows.iloc[:0]))
        if not len(s) and rank in counters:
            s = _counter_series(counters[rank])
        if len(s):
            out[rank] = s = s.reset_index(drop=True)
            arrays[rank] = (s["ts_us"].to_numpy(float, na_value=np.nan), s["total_mb"].to_numpy(float, na_value=np.nan))
            where[rank] = (_columns(s), 0)
    return _Series(out), arrays, where


def _ranks_of(df: pd.DataFrame) -> np.ndarray:
    """The table's distinct ranks (nulls left out), as floats."""
    rank = df["rank"].to_numpy(float, na_value=np.nan)
    return np.unique(rank[~np.isnan(rank)])


def device_peaks(ctx: Context) -> dict[int, dict[str, Any]]:
    """Per rank, the device footprint's peak sample: column -> its value (what the series' row Series holds).

    The footprint often stays at its peak for many samples: of those, the one nearest the framework's
    allocated peak (memory_record) is taken, so that the composition splits the pool at the tightest moment.
    """
    kept = ctx.cache.get("device_memory.peaks")
    if kept is None:
        kept = ctx.cache["device_memory.peaks"] = _device_peaks(ctx)
    return kept  # type: ignore[no-any-return]


def _device_peaks(ctx: Context) -> dict[int, dict[str, Any]]:
    series, arrays, where = _series(ctx)
    allocated, times = framework_column(ctx, "allocated_mb"), framework_column(ctx, "ts_us")
    out: dict[int, dict[str, Any]] = {}
    for r in series:  # on arrays: the row chosen is read from the columns, no frame cut nor row Series built
        ts_s, total = arrays[r]
        if np.isnan(total).all():
            continue
        top = np.flatnonzero(total == np.nanmax(total))
        alloc = allocated.get(r, np.empty(0))
        ts = times.get(r, np.empty(0))
        ok = ~(np.isnan(alloc) | np.isnan(ts))  # the framework's samples with a time and an allocated figure
        if not ok.any():
            i = int(top[0])
        else:
            t = float(ts[ok][int(alloc[ok].argmax())])
            i = int(top[int(np.abs(ts_s[top] - t).argmin())])
        cols, first = where[r]
        out[r] = {c: a[first + i] for c, a in cols.items()}
    return out


def _basis_text(basis: str) -> str:
    return (
        "device footprint (npu_module_mem: every module's reserved memory summed)"
        if basis == DEVICE_SOURCE
        else "the process's device memory as the driver sees it (memory_record APP rows; no per-module breakdown)"
    )


@metric(
    "memory_device_peak_mb",
    "MB",
    "Peak device memory: the sum of every module's reserved memory (npu_module_mem), else the driver's figure for "
    "the process (memory_record APP), max over ranks",
    "memory: npu_module_mem (summed per sample time), else memory_record component APP, else counters NPU MEM APP/Memory",
    reads=Reads(tables=("memory", "counters"), tracks=(NPU_MEM_TRACK,)),
)
def _memory_device_peak_mb(ctx: Context) -> Value:
    peaks = device_peaks(ctx)
    if not peaks:
        return Value(None, reason=_NO_DEVICE)
    per: dict[int, float | str | None] = {r: float(p["total_mb"]) for r, p in peaks.items()}
    return Value(max(float(v) for v in per.values() if v is not None), per)


@metric(
    "memory_peak_basis",
    "",
    "What memory_peak_share compares with the device's capacity: the device footprint where it is recorded, "
    "else the framework pool's peak reserved memory",
    "memory: npu_module_mem / memory_record",
)
def _memory_peak_basis(ctx: Context) -> Value:
    peaks = device_peaks(ctx)
    per: dict[int, float | str | None] = {}
    for r in framework_rows(ctx):
        per[r] = "the framework pool's reserved memory (memory_record; no device-level record)"
    for r, p in peaks.items():
        per[r] = _basis_text(str(p["basis"]))
    if not per:
        return Value(None, reason=_NO_DEVICE)
    texts = sorted({str(v) for v in per.values()})
    return Value("; ".join(texts), per)


# ---- composition at the peak ------------------------------------------------------------------


def _allocated_at(rows: tuple[np.ndarray, np.ndarray] | None, ts: float, period_us: float) -> tuple[float | None, str | None]:
    """The framework's allocated memory at ``ts``: its last sample at or before it (the allocator's state
    holds until its next event), or why not. A device sample up to one device sampling period after the
    allocator's last event still reads that event's state; further away, the files do not overlap."""
    no_samples = "no framework memory samples with an allocated figure (memory_record.csv)"
    if rows is None:
        return None, no_samples
    allocated, t = rows  # the rank's framework rows: allocated_mb and ts_us (framework_column)
    if np.isnan(allocated).all():
        return None, no_samples
    # on arrays (this runs for every rank): the samples with a time and an allocated figure, in order
    ok = ~(np.isnan(allocated) | np.isnan(t))
    allocated, t = allocated[ok], t[ok]
    lo, hi = (float(t.min()), float(t.max())) if len(t) else (float("nan"), float("nan"))
    if not lo <= ts <= hi + period_us:
        return None, (
            f"the framework memory samples ({lo:.0f}..{hi:.0f} us) do not reach the device peak's time ({ts:.0f} us, "
            f"sampled every {period_us / 1e3:.0f} ms): the two files do not share a clock or a time span"
        )
    return float(allocated[t <= ts][-1]), None


def _period_us(ts: np.ndarray) -> float:
    """The device series' median sampling interval (its ts_us; 0 with fewer than two samples)."""
    t = np.unique(ts)
    return float(np.median(np.diff(t))) if len(t) > 1 else 0.0


@with_its_metrics
def composition_rows(ctx: Context) -> list[dict[str, Any]]:
    """JSON ``memory_composition``: per rank, the device footprint at its peak, by component group (computed once,
    with this module's metrics where a forked child computes them: registry.WITH_METRICS).

    Ranks with framework memory samples only get a row with the pool's peak and a reason for the rest.
    """
    return ctx.once("device_memory.composition_rows", lambda: _composition_rows(ctx))


def _composition_rows(ctx: Context) -> list[dict[str, Any]]:
    rows = framework_rows(ctx)
    peaks = device_peaks(ctx)
    arrays = _series(ctx)[1]
    allocated, times = framework_column(ctx, "allocated_mb"), framework_column(ctx, "ts_us")
    out: list[dict[str, Any]] = []
    for rank in sorted(set(rows) | set(peaks)):
        period = _period_us(arrays[rank][0]) if rank in arrays else 0.0
        columns = (allocated[rank], times[rank]) if rank in rows else None
        peak = peaks.get(rank)
        # the rank's framework rows as a frame only where the row reads them (no device breakdown): a frame taken
        # reads every rank's (memory._RankFrames)
        pool = rows[rank] if rank in rows and (peak is None or str(peak["basis"]) != DEVICE_SOURCE) else None
        out.append(_composition_row(rank, peak, pool, period, columns))
    return out


def _composition_row(rank: int, peak: dict[str, Any] | None, rows: pd.DataFrame | None, period_us: float,
                     columns: tuple[np.ndarray, np.ndarray] | None) -> dict[str, Any]:
    """``columns``: the rank's framework rows' allocated_mb and ts_us as arrays (framework_column)."""
    row: dict[str, Any] = {"rank": rank, "basis": None, "ts_us": None, "device_mb": None}
    row.update({k: None for k in COMPOSITION_KEYS})
    row.update({"framework_allocated_mb": None, "framework_cached_mb": None, "reason": None})
    if peak is None or str(peak["basis"]) != DEVICE_SOURCE:
        # no module breakdown: the framework pool at its own peak
        if rows is not None and rows["reserved_mb"].notna().any():
            i = rows["reserved_mb"].idxmax()
            pool = float(rows.loc[i, "reserved_mb"])
            alloc = rows.loc[i, "allocated_mb"]
            row.update(basis="memory_record", ts_us=float(rows.loc[i, "ts_us"]), framework_pool_mb=pool)
            if pd.notna(alloc):
                row.update(framework_allocated_mb=float(alloc), framework_cached_mb=pool - float(alloc))
        if peak is not None:
            row["device_mb"] = float(peak["total_mb"])
        row["reason"] = "npu_module_mem.csv absent: HCCL, runtime and other device memory not recorded per module"
        return row
    ts = float(peak["ts_us"])
    row.update(basis=DEVICE_SOURCE, ts_us=ts, device_mb=float(peak["total_mb"]))
    row.update({k: float(peak[k]) for k in COMPOSITION_KEYS})
    alloc, why = _allocated_at(columns, ts, period_us)
    if alloc is not None:
        row["framework_allocated_mb"] = alloc
        row["framework_cached_mb"] = max(0.0, float(peak["framework_pool_mb"]) - alloc)
    row["reason"] = why
    return row


@metric(
    "memory_device_overhead_share",
    "ratio",
    "Device memory outside the framework pool (HCCL buffers, runtime, other modules) at the device peak, over "
    "the device peak, max over ranks",
    "memory: npu_module_mem modules grouped (HCCL, RUNTIME, ... vs APP + GE)",
)
def _memory_device_overhead_share(ctx: Context) -> Value:
    per: dict[int, float | str | None] = {}
    for r, p in device_peaks(ctx).items():
        if str(p["basis"]) == DEVICE_SOURCE and float(p["total_mb"]) > 0:
            per[r] = 1.0 - float(p["framework_pool_mb"]) / float(p["total_mb"])
    if not per:
        return Value(None, reason="no per-module device memory record (npu_module_mem.csv absent)")
    return Value(max(float(v) for v in per.values() if v is not None), per)


# ---- the peak's holders -----------------------------------------------------------------------


@dataclass
class Holders:
    """One rank's holders at its allocated peak: per class MB, the top names, or why not."""

    rank: int
    ts_us: float | None = None
    allocated_mb: float | None = None
    classes: dict[str, float] = field(default_factory=dict)
    top: list[dict[str, Any]] = field(default_factory=list)
    attention_mb: float = 0.0  # activations allocated by attention-core operators
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank, "ts_us": self.ts_us, "allocated_mb": self.allocated_mb,
            "classes_mb": dict(self.classes), "attention_activations_mb": self.attention_mb,
            "top": list(self.top), "reason": self.reason,
        }  # fmt: skip


def peak_holders(ctx: Context) -> dict[int, Holders]:
    """Per rank, who holds the memory at the framework's allocated peak (module doc). Cached per analysis."""
    kept = ctx.cache.get("device_memory.holders")
    if kept is None:
        kept = ctx.cache["device_memory.holders"] = _peak_holders(ctx)
    return kept  # type: ignore[no-any-return]


def _peak_holders(ctx: Context) -> dict[int, Holders]:
    """Every rank's holders in one pass: the dynamic allocations of the whole table put in (rank, alloc_us)
    order once (a stable sort: each rank's rows in the order its own stable sort gave), each distinct
    operator name matched against the phase patterns once, every allocation classed at once (:func:`_classes`),
    and the top holders of every rank from one grouping over (rank, name, class): each group sums the same rows
    in the same order as the per-rank grouping did, so every figure is unchanged to the bit."""
    allocs = ctx.capture.table("memory_allocs")
    keep = (allocs["kind"] == "dynamic").fillna(False).to_numpy(bool) & allocs["alloc_us"].notna().to_numpy(bool)
    keep &= allocs["rank"].notna().to_numpy(bool)
    dyn = allocs[keep]
    ranks = dyn["rank"].to_numpy(np.int64)
    order = np.lexsort((dyn["alloc_us"].to_numpy(float), ranks))
    ranks = ranks[order]
    codes, uniques = pd.factorize(dyn["name"].astype("string").fillna(""))  # (on the column: no object array of names)
    codes = codes[order]
    rows = _AllocRows(
        dyn["alloc_us"].to_numpy(float)[order], dyn["release_us"].to_numpy(float)[order],
        dyn["size_kb"].to_numpy(float)[order] / KB_PER_MB, codes, np.asarray(uniques, dtype=object),
        *(np.array([rx.search(str(n)) is not None for n in uniques], dtype=bool)[codes] for rx in (BACKWARD, OPTIMIZER, ATTENTION_CORE)),
    )  # fmt: skip
    cls, backward_seen = _classes(rows, ranks, _step_starts(ctx))
    out: dict[int, Holders] = {}
    held: list[tuple[int, np.ndarray, np.ndarray]] = []  # per rank: its live rows (indices into rows), their classes
    unexplained: dict[int, float] = {}
    allocated_of, ts_of = framework_column(ctx, "allocated_mb"), framework_column(ctx, "ts_us")
    for rank in framework_rows(ctx):
        h = Holders(rank)
        out[rank] = h
        ok = ~(np.isnan(allocated_of[rank]) | np.isnan(ts_of[rank]))  # the samples with both (on arrays)
        allocated, ts = allocated_of[rank][ok], ts_of[rank][ok]
        lo, hi = np.searchsorted(ranks, rank, side="left"), np.searchsorted(ranks, rank, side="right")
        if not len(allocated):
            h.reason = "no framework memory samples with an allocated figure"
            continue
        i = int(allocated.argmax())
        h.ts_us, h.allocated_mb = float(ts[i]), float(allocated[i])
        if hi == lo:
            h.reason = "no operator allocations with times (operator_memory.csv absent: profile_memory off?)"
            continue
        found = _fill_holders(h, rows, cls, int(lo), int(hi), int(rank) in backward_seen)
        if found is not None:
            held.append((rank, *found))
            unexplained[rank] = float(h.allocated_mb or 0.0) - float(nan_sum(rows.mb[found[0]]))
    _top_holders(out, rows, held)
    for rank, extra in unexplained.items():
        h = out[rank]
        if extra > 0:  # allocated before the capture's first recorded allocation: parameters, optimizer state
            h.top.append({"name": "(allocated before the capture)", "class": "parameters_optimizer", "mb": extra, "blocks": None})
            h.top.sort(key=lambda d: -float(d["mb"]))
            h.top = h.top[:TOP_HOLDERS]
    return out


@dataclass
class _AllocRows:
    """The dynamic allocations of every rank in (rank, alloc_us) order, as arrays: times, MB, each name's code in
    ``names`` (the distinct names) and whether each name matches BACKWARD / OPTIMIZER / ATTENTION_CORE."""

    alloc: np.ndarray
    release: np.ndarray
    mb: np.ndarray
    name: np.ndarray
    names: np.ndarray
    backward: np.ndarray
    optimizer: np.ndarray
    attention: np.ndarray


#: The classes as the holders' arrays hold them: each one's position in HOLDER_CLASSES.
_PARAMETERS, _ACTIVATIONS, _GRADIENTS, _WORKSPACES = (HOLDER_CLASSES.index(c) for c in (
    "parameters_optimizer", "activations", "gradients", "workspaces"))


def _step_starts(ctx: Context) -> dict[int, np.ndarray]:
    """Per rank, its step start times in order (a rank without steps: absent)."""
    s = ctx.steps
    if not len(s):
        return {}
    start = s["start_us"].to_numpy(float, na_value=np.nan)
    ok = ~np.isnan(start)
    rank, start = s["rank"].to_numpy(np.int64)[ok], start[ok]
    return {int(r): np.sort(start[rows]) for r, rows in key_rows(rank)}


def _classes(rows: _AllocRows, ranks: np.ndarray, starts: dict[int, np.ndarray]) -> tuple[np.ndarray, set[int]]:
    """Each allocation's class (its position in HOLDER_CLASSES), the phases found within its own step (by start
    time; a rank without steps: all its allocations one step), allocations before a rank's first step parameters /
    optimizer state; and the ranks where a step showed a backward allocation.

    A step's backward start is its first allocation by a BACKWARD name, its optimizer start the first by an
    OPTIMIZER name at or after that (inf when none); then an allocation released within its phase is a workspace,
    else one made before the backward an activation, else a gradient, and one made at or after the optimizer
    start and never released parameters / optimizer state. Each rank's allocations are in time order and its
    steps' starts sorted, so each step's allocations are one run of rows: the starts are each run's minimum."""
    n = len(ranks)
    if not n:
        return np.empty(0, dtype=np.int8), set()
    step = np.zeros(n, dtype=np.int64)  # (a rank without steps: every allocation in its one step, 0)
    cuts = np.flatnonzero(ranks[1:] != ranks[:-1]) + 1
    for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, n].tolist()):
        s = starts.get(int(ranks[lo]))
        if s is not None and len(s):
            step[lo:hi] = np.searchsorted(s, rows.alloc[lo:hi], side="right") - 1
    first = np.ones(n, dtype=bool)
    first[1:] = (ranks[1:] != ranks[:-1]) | (step[1:] != step[:-1])
    run_at = np.flatnonzero(first)
    run = np.cumsum(first) - 1
    alloc = rows.alloc
    bwd_run = np.minimum.reduceat(np.where(rows.backward, alloc, np.inf), run_at)
    bwd = bwd_run[run]
    opt = np.minimum.reduceat(np.where(rows.optimizer & (alloc >= bwd), alloc, np.inf), run_at)[run]
    rel = np.where(np.isnan(rows.release), np.inf, rows.release)
    phase_end = np.where(alloc < bwd, bwd, np.where(alloc < opt, opt, np.inf))
    cls = np.where(rel < phase_end, _WORKSPACES, np.where(alloc < bwd, _ACTIVATIONS, _GRADIENTS))
    cls = np.where(((alloc >= opt) & (rel == np.inf)) | (step < 0), _PARAMETERS, cls).astype(np.int8)
    seen = (bwd_run != np.inf) & (step[run_at] >= 0)
    return cls, {int(r) for r in np.unique(ranks[run_at][seen])}


def _fill_holders(h: Holders, rows: _AllocRows, classes: np.ndarray, lo: int, hi: int,
                  backward: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """The rank's classes and attention MB at its peak (rows lo:hi are its allocations, in time order; ``classes``:
    each allocation's, :func:`_classes`; ``backward``: whether a step of the rank showed a backward allocation);
    returns its live rows (indices into ``rows``) and their classes, for _top_holders, or None when the allocations
    do not cover the peak."""
    t = float(h.ts_us or 0.0)
    alloc, release = rows.alloc[lo:hi], rows.release[lo:hi]
    first = alloc.min()
    last = np.fmax.reduce(release, initial=alloc.max())  # (np.nanmax of both: the times are never NaN)
    if not first <= t <= last:
        h.reason = (
            f"the operator allocations ({first:.0f}..{last:.0f} us) do not cover the moment of the peak "
            f"({t:.0f} us): a different run, a partial record or spreadsheet-rounded times"
        )
        return None
    live = (alloc <= t) & (np.isnan(release) | (release > t))
    held_mb, held_cls = rows.mb[lo:hi][live], classes[lo:hi][live]  # per class on arrays (np.nansum: pandas' sum, missing sizes as 0)
    h.classes = {c: float(nan_sum(held_mb[held_cls == i])) for i, c in enumerate(HOLDER_CLASSES)}
    # allocated before the capture's first recorded allocation: parameters, optimizer state
    h.classes["parameters_optimizer"] += max(0.0, float(h.allocated_mb or 0.0) - float(nan_sum(held_mb)))
    att = (held_cls == _ACTIVATIONS) & rows.attention[lo:hi][live]
    h.attention_mb = float(nan_sum(held_mb[att]))
    if not backward:
        h.reason = "no backward operator among the allocations: activations and workspaces told apart by release only"
    return lo + np.flatnonzero(live), held_cls


def _top_holders(out: dict[int, Holders], rows: _AllocRows, held: list[tuple[int, np.ndarray, np.ndarray]]) -> None:
    """Each rank's TOP_HOLDERS largest (name, class) by MB held: one grouping over (rank, name, class) for
    every rank (groups in order of first appearance within each rank, as the per-rank grouping's; grouped on the
    names' codes and the classes' positions, each one text), then sorted by rank, MB (descending) and name, stably."""
    if not held:
        return
    idx = np.concatenate([i for _, i, _ in held])
    frame = pd.DataFrame({
        "rank": np.repeat(np.array([r for r, _, _ in held], dtype=np.int64), [len(i) for _, i, _ in held]),
        "name": rows.name[idx], "class": np.concatenate([c for _, _, c in held]), "mb": rows.mb[idx],
    })  # fmt: skip
    top = frame.groupby(["rank", "name", "class"], sort=False)["mb"].agg(["sum", "count"]).reset_index()
    top["name"] = rows.names[top["name"].to_numpy(np.int64)]
    top = top.sort_values(["rank", "sum", "name"], ascending=[True, False, True], kind="stable")
    top = top.groupby("rank", sort=False).head(TOP_HOLDERS)
    columns = (top[c].tolist() for c in ("rank", "name", "class", "sum", "count"))  # (Python values: no row tuples)
    for r, n, c, s, k in zip(*columns):
        out[int(r)].top.append({"name": str(n), "class": HOLDER_CLASSES[c], "mb": float(s), "blocks": int(k)})


def holder_rows(ctx: Context) -> list[dict[str, Any]]:
    """JSON ``memory_peak_holders``: one row per rank with framework memory samples."""
    return [h.as_dict() for _, h in sorted(peak_holders(ctx).items())]


def _holders_metric(ctx: Context, pick: str) -> Value:
    hs = peak_holders(ctx)
    if not hs:
        return Value(None, reason="no framework memory samples (memory_record.csv absent: profile_memory off?)")
    per: dict[int, float | str | None] = {}
    for r, h in hs.items():
        per[r] = None if not h.classes else (h.attention_mb if pick == "attention" else h.classes[pick])
    vals = [float(v) for v in per.values() if v is not None]
    if not vals:
        return Value(None, per, "; ".join(f"rank {r}: {h.reason}" for r, h in sorted(hs.items()) if h.reason) or "not computable")
    return Value(max(vals), per)


@metric(
    "memory_activation_mb",
    "MB",
    "Activations held at the allocated peak: operator allocations made in the forward and still held when the "
    "backward begins, max over ranks",
    "memory_allocs (operator_memory.csv) live at the peak of memory_record, by phase",
)
def _memory_activation_mb(ctx: Context) -> Value:
    return _holders_metric(ctx, "activations")


@metric(
    "recompute_selective_free_mb",
    "MB",
    "What selective recomputation of attention would free at the peak: activations allocated by attention-core "
    "operators (softmax, attention scores, flash attention, batched matmul), max over ranks",
    "memory_allocs live at the peak, allocating operator's name",
)
def _recompute_selective_free_mb(ctx: Context) -> Value:
    return _holders_metric(ctx, "attention")


# ---- recompute cost: the forward kernels ------------------------------------------------------


#: The key of the forward kernels (read by this module's metrics only: not brought back from a forked child).
_FORWARD = kept_in_child("device_memory.forward")


def forward_kernels(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    """Kernels of each step that start before its first backward kernel (rank, step, dur_us, their FLOPs and whether
    they are attention-core ops), or why none."""
    kept = ctx.cache.get(_FORWARD)
    if kept is None:
        kept = ctx.cache[_FORWARD] = _forward_kernels(ctx)
    return kept  # type: ignore[no-any-return]


def _matches(ctx: Context, pat: re.Pattern[str], rows: np.ndarray, *cols: str) -> np.ndarray:
    """The kernels at ``rows`` (positions in the kernels table) where any of the columns ``cols`` matches ``pat``, each
    distinct text matched once (a trace repeats few names), on the column's codes (kernels.column_codes: factorized
    once per analysis)."""
    # (imported here: a module's import registers its metrics, and the registry's order is the JSON's)
    from msdiag.metrics.kernels import column_codes

    hit = np.zeros(len(rows), dtype=bool)
    for col in cols:
        codes, uniq = column_codes(ctx, col)  # a null: code -1, matched as the empty text (the last)
        found = np.array([bool(pat.search(str(t))) for t in uniq] + [bool(pat.search(""))], dtype=bool)
        hit |= found[codes[rows]]
    return hit


def _forward_kernels(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    k = ctx.capture.table("kernels")
    timed = k["step"].notna().to_numpy(bool) & k["start_us"].notna().to_numpy(bool) & k["dur_us"].notna().to_numpy(bool)
    if not timed.any():
        return None, "no device kernels with a step and a duration"
    bwd = timed & _matches(ctx, BACKWARD, np.arange(len(k)), "type", "name")
    if not bwd.any():
        return None, "no backward kernel (Grad / Backprop / backward names): not a training step, nothing to recompute"
    # each timed kernel before the first backward kernel of its rank's step (none in the step: not forward), the
    # kernels table's rows taken once, the columns the metrics and kernel_flops read only (512 bench ranks: 8 of 30,
    # 0.04 -> 0.015 s)
    keys = k.loc[timed, ["rank", "step", "start_us"]]
    first = keys[bwd[timed]].groupby(["rank", "step"])["start_us"].min().rename("_bwd_start")
    before = (keys["start_us"] < keys.join(first, on=["rank", "step"])["_bwd_start"]).fillna(False).to_numpy(bool)
    rows = np.flatnonzero(timed)[before]
    fwd = k[[c for c in _FORWARD_COLUMNS if c in k.columns]].take(rows)
    flops = kernel_flops(fwd).to_numpy(float)
    fwd = fwd[["rank", "step", "dur_us"]].assign(flops=flops, attention=_matches(ctx, ATTENTION_CORE, rows, "type", "name"))
    return fwd, None


#: What the forward kernels are taken with: the metrics' columns (rank, step, dur_us) and what kernel_flops reads.
_FORWARD_COLUMNS = ("rank", "step", "dur_us", "type", "name", "input_shapes", "input_formats", "output_shapes")


_SCALE = {"dur_us": 1e3, "flops": FLOPS_PER_TFLOPS}  # us -> ms, FLOP -> TFLOP


def _per_step(ctx: Context, col: str, attention_only: bool) -> Value:
    fwd, why = forward_kernels(ctx)
    if fwd is None:
        return Value(None, reason=why)
    f = fwd[fwd["attention"].to_numpy(bool)] if attention_only else fwd
    steps = fwd.groupby("rank")["step"].nunique()
    values = f[col].to_numpy(float, na_value=np.nan)
    by_rank = dict(rank_rows(f))  # each rank's rows by position, in order: split once, not filtered per rank
    per: dict[int, float | str | None] = {}
    for r, n in steps.items():
        g = values[by_rank.get(int(r), np.empty(0, dtype=np.int64))]
        if col == "flops" and len(g) and np.isnan(g).all():
            per[int(r)] = None
            continue
        per[int(r)] = float(nan_sum(g)) / max(1, int(n)) / _SCALE[col]
    vals = [float(v) for v in per.values() if v is not None]
    if not vals:
        return Value(None, per, "no forward kernel with a FLOPs formula and shapes (Level0 capture, or unknown op types)")
    return Value(max(vals), per)


@metric(
    "recompute_full_cost_ms",
    "ms",
    "What full recomputation costs per step: one more forward pass, the forward kernels' time per step (kernels "
    "before the step's first backward kernel), max over ranks",
    "kernels: start, duration, names (Grad / Backprop / backward)",
    reads=Reads(tables=("kernels",)),
)
def _recompute_full_cost_ms(ctx: Context) -> Value:
    return _per_step(ctx, "dur_us", attention_only=False)


@metric(
    "recompute_full_cost_tflop",
    "TFLOP",
    "The forward FLOPs per step (in TFLOP) that full recomputation runs again (kernel shapes, metrics/flops.py), max over ranks",
    "kernels: shapes of the forward kernels",
    reads=Reads(tables=("kernels",)),
)
def _recompute_full_cost_tflop(ctx: Context) -> Value:
    return _per_step(ctx, "flops", attention_only=False)


@metric(
    "recompute_selective_cost_ms",
    "ms",
    "What selective recomputation of attention costs per step: the attention-core forward kernels' time, max over ranks",
    "kernels: forward kernels whose name or type is attention's core (softmax, flash attention, batched matmul)",
    reads=Reads(tables=("kernels",)),
)
def _recompute_selective_cost_ms(ctx: Context) -> Value:
    return _per_step(ctx, "dur_us", attention_only=True)


# ---- the peak against the device's capacity ---------------------------------------------------


def peak_per_rank(ctx: Context) -> dict[int, float | None]:
    """Per rank, the peak compared with capacity: the device footprint's where recorded, else the
    framework pool's reserved peak."""
    out: dict[int, float | None] = {}
    for r, v in framework_column(ctx, "reserved_mb").items():  # pandas' max on the rank's array
        out[r] = column_max(v)
    for r, p in device_peaks(ctx).items():
        out[r] = float(p["total_mb"])
    return out


@metric(
    "memory_peak_mb",
    "MB",
    "The peak memory_peak_share compares with capacity: the device footprint's peak where recorded "
    "(memory_device_peak_mb), else the framework pool's peak reserved memory; max over ranks",
    "memory: npu_module_mem / memory_record APP, else memory_record (*+GE, else PTA/MindSpore)",
)
def _memory_peak_mb(ctx: Context) -> Value:
    per: dict[int, float | str | None] = dict(peak_per_rank(ctx))
    vals = [float(v) for v in per.values() if v is not None]
    if not vals:
        return Value(None, per, _NO_DEVICE)
    return Value(max(vals), per)


@metric(
    "memory_peak_share",
    "ratio",
    "Peak memory over device memory, max over ranks: the device footprint (npu_module_mem, else memory_record "
    "APP) where recorded, else the framework pool's peak reserved memory (memory_peak_basis says which); "
    "above 1 as measured",
    "memory_peak_mb / memory_capacity_gb",
    given=_capacity,
)
def _memory_peak_share(ctx: Context, gb: float) -> Value:
    per: dict[int, float | str | None] = {r: (None if v is None else v / (gb * MB_PER_GB)) for r, v in peak_per_rank(ctx).items()}
    vals = [float(v) for v in per.values() if v is not None]
    if not vals:
        return Value(None, per, _NO_DEVICE)
    return Value(max(vals), per)
