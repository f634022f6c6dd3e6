"""The views the report's charts draw, computed from the analysis: renderers only draw them.

One view per chart (``report/charts.py``, ``report/inference_charts.py``): the numbers a chart shows, already
aggregated (per-rank medians, kernel types with their FLOPs, link bandwidth matrices with the slow link as
structured data, memory series, phase steps, latency distributions), or the one-line reason the chart's data
is absent. The charts choose colours, scales, labels and captions; they compute nothing and import nothing
from ``metrics``, ``inference`` or ``ingest``.

``ChartViews`` is built by ``analysis.analyze()`` from the analysis context (the same ``Context`` the metrics
read, with its cache: memory rows and the phase classification are computed once) and stored as
``Analysis.views``. Each view is computed on first use: ``msdiag analyze`` never draws, so it never pays for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pandas as pd

from msdiag import intervals as iv
from msdiag.inference import latency as lat
from msdiag.metrics import kernel_types as ktypes
from msdiag.metrics import phases as ph
from msdiag.metrics.causes import host_syncs
from msdiag.metrics.collectives import collectives_table
from msdiag.metrics.communication import _slowest_link, link_bandwidth
from msdiag.metrics.device_memory import COMPOSITION_KEYS, DEVICE_SOURCE, device_peaks, device_series, peak_holders
from msdiag.metrics.memory import framework_rows
from msdiag.metrics.registry import Context, Value, nan_sum
from msdiag.options import Options
from msdiag.units import MIB_PER_GIB, US_PER_MS

if TYPE_CHECKING:  # imported where first used: an import here would reorder the metric registry
    from msdiag.metrics.training_views import TrainCurves, TrainStepTimes

# ---- limits that keep a large capture readable (they decide the shape of a view) ----------------
LANE_RANK_LIMIT = 16  # beyond this many ranks the step timeline is a heatmap, not lanes per rank
BAR_LIMIT = 48  # beyond this many rank-step bars the breakdown shows one bar per rank
TOP_KERNEL_TYPES = 15
TOP_COMM_OPS = 20
HEATMAP_GROUPS = 3  # communication groups shown in the bandwidth heatmap
TIMELINE_BINS = 400  # time bins of the many-rank step heatmap
LANE_PIXELS = 1400.0  # intervals closer than width / this (a pixel of a wide screen) are joined in a lane
PHASES = (ph.PREFILL, ph.DECODE)
LATENCY_COLUMNS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "end-to-end"))
CDF_PERCENTILES = ("p50", "p90", "p99")  # marked on the latency CDFs
PROMPT_GRID = 60  # prompt lengths at which the estimated prefill cost is drawn


# ---- the views ------------------------------------------------------------------------------------


@dataclass
class StepBars:
    """Stacked step-time bars: one per rank and step, or one per rank (medians) beyond BAR_LIMIT rows."""

    absent: str | None = None
    labels: list[str] = field(default_factory=list)
    per_rank: bool = False  # bars are per-rank medians
    steps: int = 0  # distinct steps behind the bars
    computing: np.ndarray = field(default_factory=lambda: np.zeros(0))
    exposed_other: np.ndarray = field(default_factory=lambda: np.zeros(0))  # exposed communication minus bubble
    bubble: np.ndarray = field(default_factory=lambda: np.zeros(0))
    free: np.ndarray = field(default_factory=lambda: np.zeros(0))
    total: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass
class StepCounts:
    """How many steps each rank has (fewest, most) and the profiler's step ids, for the page's identity block."""

    fewest: int = 0
    most: int = 0
    ids: list[int] = field(default_factory=list)


@dataclass
class Lane:
    """One rank's lanes of the median step: (starts, ends) of compute, communication and free, from the step's start."""

    rank: int
    compute: iv.Intervals
    communication: iv.Intervals
    free: iv.Intervals


@dataclass
class LateMark:
    """The last arriver of one collective of the median step: its rank, the op, when it arrived (us from that
    rank's start of the step) and how late (us after the first captured arrival)."""

    rank: int
    op: str
    at_us: float
    late_us: float


@dataclass
class Timeline:
    """The median step on the device, per rank: lanes (up to LANE_RANK_LIMIT ranks) or a binned mix."""

    absent: str | None = None
    step: int | None = None  # None: the whole capture (no step markers)
    median_us: float = 0.0  # median span over ranks
    width_us: float = 0.0  # the widest rank's span
    ranks: list[int] = field(default_factory=list)
    lanes: list[Lane] | None = None
    # many ranks: per rank and time bin, the shares of computing, exposed communication and free time
    mix: np.ndarray | None = None
    # lanes only: the late arriver of each collective of the step, and per rank its host-device
    # synchronisations of the step (starts, lengths from the rank's start of the step)
    late: list[LateMark] = field(default_factory=list)
    syncs: dict[int, iv.Intervals] = field(default_factory=dict)


@dataclass
class KernelTypes:
    """Compute kernels by op type, per rank, with FLOPs from shapes where the type has a formula."""

    absent: str | None = None
    ranks: int = 1
    launches: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)  # type, count, us, share, flops, tflops (per rank), bound
    more_types: int = 0  # types beyond the top
    more_us: float = 0.0  # their compute time, over all ranks
    total_us: float = 1.0  # compute time of every type, over all ranks
    bound_absent: str | None = None  # why no type has a bound unit (no PipeUtilization columns)
    saturated: float = ktypes.SATURATED  # a pipe ratio from which the unit is saturated


@dataclass
class CommOps:
    """HCCL's per-op analysis, mean per op name: elapse split into transit, sync, other wait and idle."""

    absent: str | None = None
    top: pd.DataFrame = field(default_factory=pd.DataFrame)  # index op_name; elapse_us, transit_c, sync_c, wait_c, idle_c
    ops: int = 0
    ranks: int = 0
    steps: int = 0


@dataclass
class SlowLink:
    """The slow link named by the ``slow_link`` metric, as the heatmap marks it."""

    group: Any
    src: int
    dst: int
    transport: str
    name: str  # the metric's text, 'src-dst transport'


@dataclass
class LinkMatrix:
    group: Any  # "" when the capture names no group
    rows: list[int]  # source ranks (group-local)
    cols: list[int]  # destination ranks
    mat: np.ndarray  # GB/s, NaN: no traffic
    transports: str


@dataclass
class Links:
    """Bandwidth of each link, one matrix per group (the groups with the most traffic)."""

    absent: str | None = None
    matrices: list[LinkMatrix] = field(default_factory=list)
    groups: int = 0  # groups with traffic, drawn or not
    slow: SlowLink | None = None  # the slow link, when a drawn group has it
    slow_reason: str | None = None  # why no link is named slow


@dataclass
class Memory:
    """Framework allocator memory per rank (MiB), the device capacity and the peak."""

    absent: str | None = None
    rows: dict[int, pd.DataFrame] = field(default_factory=dict)  # rank -> ts_us, allocated_mb, reserved_mb, ...
    components: list[str] = field(default_factory=list)
    capacity_mb: float | None = None
    capacity_reason: str | None = None
    t0: dict[int, float] = field(default_factory=dict)  # each rank's first sample (clocks are not aligned)
    span_us: float = 0.0  # the longest rank's span from its first sample
    peaks: dict[str, float] = field(default_factory=dict)  # allocated_mb / reserved_mb: highest over ranks (0 if none)
    peak_rank: int | None = None  # where allocated memory peaks, its value and time
    peak_mb: float = -1.0
    peak_ts_us: float = 0.0
    holders: list[tuple[str, str, float]] = field(default_factory=list)  # the peak rank's top holders: name, class, MB
    device: DeviceMemory | None = None  # the device footprint by component (npu_module_mem), when recorded


@dataclass
class DeviceMemory:
    """The device footprint of the rank with the highest device peak, by component group, over time (MiB)."""

    rank: int
    series: pd.DataFrame  # ts_us, framework_pool_mb, hccl_mb, runtime_mb, other_mb, total_mb
    groups: tuple[str, ...]  # the component columns, stacked in this order
    peak_mb: float
    peak_ts_us: float


@dataclass
class DataPipeline:
    """Mean queue usage and emptiness of each MindData op's output queue."""

    absent: str | None = None
    ops: pd.DataFrame = field(default_factory=pd.DataFrame)  # op_id, label, queue_usage, queue_empty_share, ...
    ranks: int = 0


@dataclass
class Balance:
    """Per rank, the medians of step time and computing; the slowest rank and the spreads."""

    absent: str | None = None
    ranks: list[int] = field(default_factory=list)
    total_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    computing_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    slowest: int | None = None
    flagged: bool = False  # a finding rests on the imbalance
    spreads: list[tuple[str, float]] = field(default_factory=list)  # (what, max - min over the mean)


@dataclass
class LatencyColumn:
    column: str
    name: str
    values: np.ndarray  # sorted
    percentiles: list[tuple[str, float]]  # (p50 / p90 / p99, ms)
    slo_ms: float | None


@dataclass
class LatencyCdf:
    absent: str | None = None
    requests: int = 0
    columns: list[LatencyColumn] = field(default_factory=list)
    any_slo: bool = False


@dataclass
class Scatter:
    """Dots (x, y) and a line (line_x, line_y) through them."""

    absent: str | None = None
    x: np.ndarray = field(default_factory=lambda: np.zeros(0))
    y: np.ndarray = field(default_factory=lambda: np.zeros(0))
    line_x: Any = field(default_factory=lambda: np.zeros(0))
    line_y: Any = field(default_factory=lambda: np.zeros(0))
    how: str = ""  # ttft-prompt: 'median' (requests that arrived to an empty server) or 'min' (fastest)


@dataclass
class PhaseBars:
    """Every step of an inference capture with its phase; total and computing time per phase."""

    absent: str | None = None
    classified_by: str | None = None
    phases: list[str] = field(default_factory=list)  # per step, capture order
    warmup: list[bool] = field(default_factory=list)
    step_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    total_us: dict[str, float] = field(default_factory=dict)
    computing_us: dict[str, float] = field(default_factory=dict)
    prefill_share: float = float("nan")


NO_LOG = "no request log: give msdiag report LOG, or --requests LOG with a capture"


# ---- shared helpers -------------------------------------------------------------------------------


def _reason(metrics: Mapping[str, Value], metric_id: str) -> str | None:
    v = metrics.get(metric_id)
    return None if v is None else v.reason


def _number(metrics: Mapping[str, Value], metric_id: str) -> float | None:
    v = metrics.get(metric_id)
    return float(v.value) if v is not None and isinstance(v.value, (int, float)) else None


def source_reason(capture: Any, name_prefix: str) -> str | None:
    """The reason a source is absent or failed, from every rank's source list (first one found)."""
    for s in capture.sources:
        if s.name.startswith(name_prefix) and s.status != "present" and s.reason:
            return f"{s.name} {s.status}: {s.reason}"
    return None


def _step_label(s: Any) -> str:
    return "-" if s is None or pd.isna(s) else str(int(s))


# ---- step bars ------------------------------------------------------------------------------------


def step_bars(capture: Any, steps: pd.DataFrame) -> StepBars:
    """The step-time breakdown's bars."""
    s = steps
    if not len(s) or s["total_us"].isna().all():
        return StepBars("no step rows: " + ("; ".join(capture.notes) or "no kernel timeline and no step_trace_time.csv"))
    s = s.sort_values(["rank", "step"], na_position="first", kind="stable")
    cols = ["computing_us", "communication_exposed_us", "free_us", "bubble_us", "total_us"]
    d = s[["rank", "step"] + cols].copy()
    for c in cols:
        d[c] = pd.to_numeric(d[c], errors="coerce").astype(float)
    nsteps = int(d["step"].nunique(dropna=False))
    per_rank = len(d) > BAR_LIMIT
    if per_rank:
        d = d.groupby("rank", sort=True)[cols].median().reset_index()
        labels = [str(int(r)) for r in d["rank"]]
    else:
        labels = _bar_labels(d, nsteps)
    comp = d["computing_us"].fillna(0).to_numpy()
    exposed = d["communication_exposed_us"].fillna(0).to_numpy()
    free = d["free_us"].fillna(0).to_numpy()
    bubble = np.minimum(d["bubble_us"].fillna(0).to_numpy(), exposed)
    total = d["total_us"].to_numpy()
    if np.isnan(comp + exposed + free).all() or not nan_sum(total):
        return StepBars("the step rows carry no computing / communication / free figures")
    return StepBars(None, labels, per_rank, nsteps, comp, exposed - bubble, bubble, free, total)


def _bar_labels(d: pd.DataFrame, nsteps: int) -> list[str]:
    multi_rank = d["rank"].nunique() > 1
    multi_step = nsteps > 1
    labels = []
    for r, st in zip(d["rank"], d["step"]):
        if multi_rank and multi_step:
            labels.append(f"r{int(r)}·s{_step_label(st)}")
        elif multi_rank:
            labels.append(f"rank {int(r)}")
        else:
            labels.append(f"step {_step_label(st)}")
    return labels


def step_counts(steps: pd.DataFrame) -> StepCounts | None:
    """Steps per rank and the step ids; None without step rows."""
    if not len(steps):
        return None
    per = steps.groupby("rank").size()
    return StepCounts(int(per.min()), int(per.max()), sorted({int(x) for x in steps["step"].dropna()}))


# ---- the timeline of the median step --------------------------------------------------------------


def median_step(steps: pd.DataFrame) -> tuple[Any, pd.DataFrame]:
    """The representative step: the one whose median (over ranks) step time is the median.

    Returns (step id or None, that step's rows with a known window).
    """
    s = steps[steps["start_us"].notna() & steps["end_us"].notna()]
    if not len(s):
        return None, s
    if s["step"].isna().all():
        return None, s
    by = s.groupby("step")["total_us"].median().sort_values(kind="stable")
    step = by.index[(len(by) - 1) // 2]
    return step, s[s["step"] == step]


def device_intervals(capture: Any, rank: int, lo: float, hi: float) -> tuple[iv.Intervals, iv.Intervals]:
    """(compute, communication) intervals of a rank clipped to [lo, hi], as the breakdown sees them."""
    rd = next(r for r in capture.ranks if r.rank == rank)
    k = rd.table("kernels")
    if len(k):
        st, du, kind = k["start_us"].to_numpy(float), k["dur_us"].to_numpy(float), k["kind"].astype(object).to_numpy()
    else:
        tl = rd.table("timeline")
        tl = tl[tl["lane"].isin(["device", "hccl"])]
        st, du = tl["start_us"].to_numpy(float), tl["dur_us"].to_numpy(float)
        kind = np.where(tl["lane"].to_numpy() == "hccl", "communication", "compute")
    inside = (st < hi) & (st + du > lo)
    comp = iv.merge(iv.clip(iv.make(st[inside & (kind == "compute")], du[inside & (kind == "compute")]), lo, hi))
    comm_iv = iv.make(st[inside & (kind == "communication")], du[inside & (kind == "communication")])
    if len(k) and not (kind == "communication").any():
        tl = rd.table("timeline")
        h = tl[tl["lane"] == "hccl"]
        comm_iv = iv.make(h["start_us"].to_numpy(float), h["dur_us"].to_numpy(float))
    comm = iv.merge(iv.clip(comm_iv, lo, hi))
    return comp, comm


def _coarsen(x: iv.Intervals, gap: float) -> iv.Intervals:
    """Join intervals separated by less than ``gap`` (below a pixel): bounds the SVG's size."""
    s, e = x
    if len(s) < 2:
        return x
    ms, me = iv.merge((s, e + gap))
    return ms, me - gap


def _coverage(x: iv.Intervals, edges: np.ndarray) -> np.ndarray:
    """Length of ``x`` (merged) inside each bin between consecutive ``edges``."""
    s, e = x
    if not len(s):
        return np.zeros(len(edges) - 1)
    cum = np.concatenate([[0.0], np.cumsum(e - s)])
    i = np.searchsorted(s, edges, side="right") - 1
    below = np.where(i >= 0, cum[np.maximum(i, 0)] + np.clip(edges - s[np.maximum(i, 0)], 0, (e - s)[np.maximum(i, 0)]), 0.0)
    return np.diff(below)


def _timeline_absent(steps: pd.DataFrame) -> str:
    src = sorted({str(x) for x in steps["source"].dropna()}) if len(steps) else []
    return "no step window on the device timeline: " + (
        f"step rows come from {', '.join(src)} (no kernel timeline with start times)" if src else "no step rows"
    )


def timeline(ctx: Context) -> Timeline:
    """The median step's device activity per rank, with its late arrivers and host synchronisations."""
    view = device_timeline(ctx.capture, ctx.steps)
    if view.lanes is not None and view.step is not None:
        _, rows = median_step(ctx.steps)
        starts = {int(r): float(lo) for r, lo in zip(rows["rank"], rows["start_us"])}
        view.late = late_marks(collectives_table(ctx), view.step, starts)
        view.syncs = sync_marks(ctx, view.step, {int(r): (float(lo), float(hi)) for r, lo, hi in
                                                 zip(rows["rank"], rows["start_us"], rows["end_us"])})  # fmt: skip
    return view


def late_marks(table: pd.DataFrame, step: int, starts: Mapping[int, float]) -> list[LateMark]:
    """The last arriver of each collective of ``step`` (collectives rows), placed on its rank's step start."""
    out = []
    if not len(table):
        return []
    rows = table[table["step"].eq(step).fillna(False).to_numpy(bool) & table["last_arriver"].notna().to_numpy(bool)]
    for op, ranks, offsets, last, late, first in zip(
        rows["op"], rows["ranks"], rows["arrival_offset_ms"], rows["last_arriver"], rows["late_ms"], rows["first_us"]
    ):
        r = int(last)
        if r not in starts:
            continue
        arrival = float(first) + float(offsets[list(ranks).index(r)]) * US_PER_MS
        out.append(LateMark(r, str(op), arrival - starts[r], float(late) * US_PER_MS))
    return out


def sync_marks(ctx: Context, step: int, windows: Mapping[int, tuple[float, float]]) -> dict[int, iv.Intervals]:
    """Per rank, its host-device synchronisations of ``step`` (host ProfilerStep#N), merged and clipped to the
    rank's device window of the step (the lanes' x axis), from the rank's step start."""
    out = {}
    for r, (lo, hi) in windows.items():
        ev = host_syncs(ctx, r)
        ev = ev[(pd.to_numeric(ev["step"], errors="coerce") == step).to_numpy(bool)]
        s, e = iv.clip(iv.merge((ev["start_us"].to_numpy(float), ev["end_us"].to_numpy(float))), lo, hi)
        if len(s):
            out[r] = (s - lo, e - s)
    return out


def device_timeline(capture: Any, steps: pd.DataFrame) -> Timeline:
    """The median step's device activity per rank."""
    step, rows = median_step(steps)
    if not len(rows):
        return Timeline(_timeline_absent(steps))
    rows = rows.sort_values("rank", kind="stable")
    ranks = [int(r) for r in rows["rank"]]
    spans = (rows["end_us"] - rows["start_us"]).to_numpy(float)
    view = Timeline(None, None if step is None else int(step), float(np.median(spans)), float(np.nanmax(spans)), ranks)
    data = []
    for r, lo, hi in zip(ranks, rows["start_us"].to_numpy(float), rows["end_us"].to_numpy(float)):
        comp, comm = device_intervals(capture, r, lo, hi)
        data.append((r, lo, hi, comp, comm))
    if all(len(c[0]) == 0 and len(m[0]) == 0 for _, _, _, c, m in data):
        view.absent = "no device task falls inside the step window"
    elif len(ranks) <= LANE_RANK_LIMIT:
        view.lanes = [_lane(r, lo, hi, comp, comm, view.width_us / LANE_PIXELS) for r, lo, hi, comp, comm in data]
    else:
        view.mix = np.stack([_mix(lo, hi, comp, comm, view.width_us) for _, lo, hi, comp, comm in data])
    return view


def _lane(r: int, lo: float, hi: float, comp: iv.Intervals, comm: iv.Intervals, px: float) -> Lane:
    busy = iv.merge((np.concatenate([comp[0], comm[0]]), np.concatenate([comp[1], comm[1]])))
    free = iv.subtract((np.array([lo]), np.array([hi])), busy)
    out = []
    for ivs in (comp, comm, free):
        cs, ce = _coarsen(ivs, px)
        out.append((cs - lo, ce - cs))
    return Lane(r, out[0], out[1], out[2])


def _mix(lo: float, hi: float, comp: iv.Intervals, comm: iv.Intervals, width_us: float) -> np.ndarray:
    """Per time bin of the step: shares of computing, exposed communication and free time (rows sum to <= 1)."""
    e = np.linspace(0.0, width_us, TIMELINE_BINS + 1) + lo
    binw = np.diff(e)
    c = _coverage(comp, e)
    x = _coverage(iv.subtract(comm, comp), e)
    inside = np.clip((hi - e[:-1]) / binw, 0.0, 1.0)  # a rank's step can be shorter than the widest
    f = np.clip(inside - (c + x) / binw, 0.0, 1.0)
    return np.stack([c / binw, x / binw, f], axis=1)


# ---- kernel types ---------------------------------------------------------------------------------


def kernel_bound(t: pd.DataFrame) -> dict[str, str]:
    """Per op type of a type table (metrics/kernel_types.py), the AI Core unit bounding it with its ratio
    ("mte2 0.97"; "vector 0.45, none saturated" below saturation); empty without PipeUtilization columns."""
    if not len(t) or t["bound"].isna().all():
        return {}
    out = {}
    for typ, r in t[t["bound"].notna()].iterrows():
        out[str(typ)] = f"{r['bound']} {r['bound_ratio']:.2f}" + (", none saturated" if isinstance(r["bound_note"], str) else "")
    return out


def kernel_types(capture: Any, types: pd.DataFrame | None = None) -> KernelTypes:
    """The top kernel types by time, per rank, with achieved TFLOP/s where FLOPs are known: read off the
    analysis' type table (``types``: ktypes.cached_table, else computed here), which holds each type's
    launches, time, FLOPs and bound unit over every rank."""
    k = capture.table("kernels")
    t = ktypes.type_table(capture) if types is None else types
    if not len(t):
        why = source_reason(capture, "kernel_details") or ("no kernels in the capture" if not len(k) else "no compute kernels")
        return KernelTypes(f"no compute kernels: {why}")
    nranks = max(1, k.loc[k["kind"] == "compute", "rank"].nunique())
    grand = float(t["time_us"].sum()) or 1.0
    rest = t.iloc[TOP_KERNEL_TYPES:]
    bound = kernel_bound(t)
    rows = [
        {
            "type": str(typ),
            "count": int(r["launches"]) / nranks,
            "us": float(r["time_us"]) / nranks,
            "share": r["time_us"] / grand,
            "flops": r["flops"] / nranks if pd.notna(r["flops"]) else None,
            "tflops": float(r["tflops"]) if pd.notna(r["tflops"]) else None,
            "bound": bound.get(str(typ)),
        }
        for typ, r in t.head(TOP_KERNEL_TYPES).iterrows()
    ]
    return KernelTypes(None, nranks, int(t["launches"].sum()), rows, len(rest), float(rest["time_us"].sum()), grand,
                       None if bound else ktypes.no_pipes_reason(capture))


# ---- communication --------------------------------------------------------------------------------


def comm_ops(capture: Any, metrics: Mapping[str, Value]) -> CommOps:
    """Per op name, the mean elapse and its parts (transit, synchronization, other wait, idle)."""
    ops = capture.table("comm_ops")
    if not len(ops):
        return CommOps("no per-op communication analysis: " + (
            _reason(metrics, "comm_wait_ratio") or source_reason(capture, "communication.json") or "communication.json absent"
        ))
    d = ops.copy()
    for c in ("elapse_us", "transit_us", "wait_us", "sync_us", "idle_us"):
        d[c] = pd.to_numeric(d[c], errors="coerce").astype(float)
    d["sync_c"] = np.minimum(d["sync_us"].fillna(0), d["wait_us"].fillna(0))
    d["wait_c"] = (d["wait_us"].fillna(0) - d["sync_c"]).clip(lower=0)
    d["transit_c"] = d["transit_us"].fillna(0)
    d["idle_c"] = (d["elapse_us"].fillna(0) - d["transit_c"] - d["wait_us"].fillna(0)).clip(lower=0)
    g = d.groupby("op_name", sort=False)[["elapse_us", "transit_c", "wait_c", "sync_c", "idle_c"]].mean()
    g = g.sort_values("elapse_us", ascending=False, kind="stable")
    return CommOps(None, g.head(TOP_COMM_OPS), len(g), int(d["rank"].nunique()), int(d["step"].nunique(dropna=False)))


def links(ctx: Context, metrics: Mapping[str, Value]) -> Links:
    """Each group's link bandwidth matrix (the groups with the most traffic) and the slow link to mark."""
    capture = ctx.capture
    if not len(capture.table("comm_links")):
        return Links("no link matrix: " + (
            _reason(metrics, "slow_link") or source_reason(capture, "communication_matrix.json") or "communication_matrix.json absent"
        ))
    lb = link_bandwidth(capture)
    if not len(lb):
        return Links(_reason(metrics, "slow_link") or "no link on a transport with a standard bandwidth")
    lb = lb.assign(group=lb["group"].fillna(""))  # raw msprof output names no group: its links are one matrix
    per = lb.groupby(["group", "src", "dst", "transport"], as_index=False, dropna=False)[["size_mb", "time_us"]].sum()
    per["bw"] = per["size_mb"] / (per["time_us"] / US_PER_MS)
    sizes = per.groupby("group", dropna=False)["size_mb"].sum().sort_values(ascending=False, kind="stable")
    view = Links(None, [_link_matrix(per[per["group"] == grp], grp) for grp in sizes.index[:HEATMAP_GROUPS]], len(sizes))
    view.slow = slow_link(ctx, metrics)
    if view.slow is None:
        view.slow_reason = _reason(metrics, "slow_link")
    return view


def _link_matrix(p: pd.DataFrame, grp: Any) -> LinkMatrix:
    rows = sorted({int(x) for x in p["src"]})
    cols = sorted({int(x) for x in p["dst"]})
    ri = {r: i for i, r in enumerate(rows)}
    ci = {r: i for i, r in enumerate(cols)}
    mat = np.full((len(rows), len(cols)), np.nan)
    for s_, d_, bw in zip(p["src"], p["dst"], p["bw"]):
        mat[ri[int(s_)], ci[int(d_)]] = bw
    return LinkMatrix(grp, rows, cols, mat, "/".join(sorted({str(t) for t in p["transport"]})))


def slow_link(ctx: Context, metrics: Mapping[str, Value]) -> SlowLink | None:
    """The link the ``slow_link`` metric names, as data: the slowest link against its standard, when named."""
    v = metrics.get("slow_link")
    if v is None or not isinstance(v.value, str):
        return None
    lb, _ = _slowest_link(ctx)
    if lb is None or not len(lb):
        return None
    w = lb.iloc[0]
    return SlowLink("" if pd.isna(w["group"]) else w["group"], int(w["src"]), int(w["dst"]), str(w["transport"]), v.value)


# ---- memory ---------------------------------------------------------------------------------------


def memory(ctx: Context, metrics: Mapping[str, Value]) -> Memory:
    """Per rank, the framework allocator's memory over time; the capacity and the allocated peak."""
    rows = framework_rows(ctx)
    rows = {r: g for r, g in rows.items() if g["allocated_mb"].notna().any() or g["reserved_mb"].notna().any()}
    if not rows:
        return Memory("no memory samples: " + (_reason(metrics, "memory_peak_allocated_mb") or "memory_record.csv absent"))
    cap = _number(metrics, "memory_capacity_gb")
    t0 = {r: float(g["ts_us"].min()) for r, g in rows.items()}
    view = Memory(
        None, rows, sorted({str(c) for g in rows.values() for c in g["component"].dropna().unique()}),
        None if cap is None else cap * MIB_PER_GIB,
        None if cap is not None else _reason(metrics, "memory_capacity_gb"),
        t0, max(float(g["ts_us"].max()) - t0[r] for r, g in rows.items()),
    )  # fmt: skip
    for col in ("allocated_mb", "reserved_mb"):
        vals = [float(np.nanmax(g[col].to_numpy(float))) for g in rows.values() if g[col].notna().any()]
        view.peaks[col] = max(vals) if vals else 0.0
    for r, g in rows.items():
        v = g["allocated_mb"].to_numpy(float)
        if np.isfinite(v).any() and np.nanmax(v) > view.peak_mb:
            i = int(np.nanargmax(v))
            view.peak_rank, view.peak_mb, view.peak_ts_us = r, float(v[i]), float(g["ts_us"].to_numpy(float)[i])
    held = peak_holders(ctx).get(view.peak_rank) if view.peak_rank is not None else None
    if held is not None:
        view.holders = [(str(h["name"]), str(h["class"]), float(h["mb"])) for h in held.top]
    view.device = device_view(ctx)
    return view


def device_view(ctx: Context) -> DeviceMemory | None:
    """The per-module device footprint of the rank whose device peak is highest (None without npu_module_mem)."""
    peaks = {r: p for r, p in device_peaks(ctx).items() if str(p["basis"]) == DEVICE_SOURCE}
    if not peaks:
        return None
    rank = max(peaks, key=lambda r: (float(peaks[r]["total_mb"]), -r))
    s = device_series(ctx)[rank]
    cols = ("ts_us", *COMPOSITION_KEYS, "total_mb")
    return DeviceMemory(rank, s[list(cols)].copy(), COMPOSITION_KEYS, float(peaks[rank]["total_mb"]), float(peaks[rank]["ts_us"]))


# ---- data pipeline and balance --------------------------------------------------------------------


def data_pipeline(capture: Any, metrics: Mapping[str, Value]) -> DataPipeline:
    """Mean queue figures of each MindData op over ranks."""
    dp = capture.table("data_pipeline")
    if not len(dp) or (dp["queue_usage"].isna().all() and dp["queue_empty_share"].isna().all()):
        src = source_reason(capture, "minddata_pipeline")
        return DataPipeline((f"no MindData pipeline profile: {src}" if src else None) or _reason(metrics, "data_queue_empty_share") or (
            "no MindData pipeline profile (minddata_pipeline_raw absent)"))
    d = dp.copy()
    d["label"] = [f"{'Op' if pd.isna(t) else t} (id {int(i)})" for t, i in zip(d["op_type"], d["op_id"])]
    g = d.groupby(["op_id", "label"], sort=True)[["queue_usage", "queue_empty_share", "queue_capacity", "num_workers"]].mean()
    return DataPipeline(None, g.reset_index().sort_values("op_id", kind="stable"), int(d["rank"].nunique()))


def balance(steps: pd.DataFrame, metrics: Mapping[str, Value], findings: list[dict[str, Any]]) -> Balance:
    """Per-rank medians of step time and computing, and whether a finding points at the slowest rank."""
    s = steps
    if not len(s):
        return Balance("no step rows")
    ranks = sorted(int(r) for r in s["rank"].dropna().unique())
    if len(ranks) < 2:
        return Balance(f"one rank in the capture (rank {ranks[0]}): balance across ranks needs two or more" if ranks else "no ranks")
    g = s.groupby("rank", sort=True)[["total_us", "computing_us"]].median()
    slow = _number(metrics, "slowest_rank_by_compute")
    spreads = []
    for mid, what in (("compute_imbalance", "computing spread"), ("step_time_imbalance", "step-time spread")):
        x = _number(metrics, mid)
        if x is not None:
            spreads.append((what, x))
    return Balance(
        None, [int(r) for r in g.index], g["total_us"].to_numpy(float), g["computing_us"].to_numpy(float),
        None if slow is None else int(slow),
        any({"slowest_rank_by_compute", "compute_imbalance"} & set(f.get("evidence") or {}) for f in findings),
        spreads,
    )  # fmt: skip


# ---- inference ------------------------------------------------------------------------------------


def latency_cdf(log: Any, options: Options) -> LatencyCdf:
    """Sorted TTFT / TPOT / end-to-end latencies with their P50 / P90 / P99 and the SLOs given."""
    if log is None:
        return LatencyCdf(NO_LOG)
    slo = {"ttft_ms": options.slo_ttft_ms, "tpot_ms": options.slo_tpot_ms, "e2e_ms": None}
    cols = []
    for col, name in LATENCY_COLUMNS:
        v = np.sort(log.requests[col].dropna().to_numpy(dtype=float))
        pcts = [(key, float(np.percentile(v, lat.PERCENTILES[key]))) for key in CDF_PERCENTILES] if len(v) else []
        goal = slo.get(col)
        cols.append(LatencyColumn(col, name, v, pcts, None if goal is None else float(goal)))
    return LatencyCdf(None, len(log.requests), cols, any(v is not None for v in slo.values()))


def ttft_prompt(log: Any) -> Scatter:
    """TTFT against prompt length, with what a prefill of each length costs."""
    if log is None:
        return Scatter(NO_LOG)
    r = log.requests[log.requests["prompt_tokens"].notna() & (log.requests["prompt_tokens"].fillna(0) > 0)]
    if len(r) < lat.MIN_REQUESTS:
        return Scatter("fewer than 5 requests with a prompt length (vLLM results need input_lens)")
    p = r["prompt_tokens"].to_numpy(dtype=float)
    t = r["ttft_ms"].to_numpy(dtype=float)
    grid = np.linspace(float(p.min()), float(p.max()), PROMPT_GRID) if np.ptp(p) > 0 else np.array([float(p[0])])
    rp, rt, how = lat.prefill_reference(log)
    return Scatter(None, p, t, grid, lat.prefill_bound_ms(rp, rt, grid, how), how)


def tpot_batch(log: Any) -> Scatter:
    """TPOT against decode batch size, with the median per batch size."""
    if log is None:
        return Scatter(NO_LOG)
    r = log.requests[log.requests["batch_size"].notna() & log.requests["tpot_ms"].notna()]
    if not len(r):
        return Scatter("the request log records no batch_size (or no request has more than one token)")
    b = r["batch_size"].to_numpy(dtype=float)
    t = r["tpot_ms"].to_numpy(dtype=float)
    sizes = sorted(set(b.tolist()))
    return Scatter(None, b, t, sizes, [float(np.median(t[b == s])) for s in sizes])


def phase_bars(ctx: Context) -> PhaseBars:
    """The steps of an inference capture as prefill / decode (the classification the metrics used)."""
    if not len(ctx.capture.ranks):
        return PhaseBars("no capture: a request log alone has no steps (give a capture with --requests)")
    phases = ph.phases_for(ctx)
    if not phases.ok:
        return PhaseBars(f"steps not told apart as prefill / decode: {phases.reason}")
    s = phases.steps[phases.steps["phase"].notna()].reset_index(drop=True)
    timed = s[~s["warmup"].fillna(False).astype(bool)]
    tot = {p: float(timed.loc[timed["phase"] == p, "total_us"].sum()) for p in PHASES}
    comp = {p: float(timed.loc[timed["phase"] == p, "computing_us"].fillna(0).sum()) for p in PHASES}
    share = tot[ph.PREFILL] / (tot[ph.PREFILL] + tot[ph.DECODE]) if sum(tot.values()) > 0 else float("nan")
    return PhaseBars(
        None, phases.classified_by, [str(p) for p in s["phase"]], [bool(w) for w in s["warmup"].fillna(False).astype(bool)],
        s["total_us"].to_numpy(dtype=float) / US_PER_MS, tot, comp, share,
    )  # fmt: skip


# ---- every view of an analysis --------------------------------------------------------------------


class ChartViews:
    """The views of one analysis, each computed on first use from the analysis context."""

    def __init__(self, ctx: Context, metrics: Mapping[str, Value], findings: list[dict[str, Any]], workload: str | None) -> None:
        self._ctx = ctx
        self._metrics = metrics
        self._findings = findings
        self.has_capture = bool(ctx.capture.ranks)
        # the inference charts apply to a request log or to steps told apart as prefill / decode
        self.has_inference = ctx.requests is not None or workload == "inference"
        self.has_training = ctx.train_log is not None  # a training log: its curves and step times (issue 18)

    @property
    def context(self) -> Context:
        """The analysis context the views are built from (read by the timeline export, msdiag/export.py)."""
        return self._ctx

    @cached_property
    def step_counts(self) -> StepCounts | None:
        return step_counts(self._ctx.steps)

    @cached_property
    def step_bars(self) -> StepBars:
        return step_bars(self._ctx.capture, self._ctx.steps)

    @cached_property
    def timeline(self) -> Timeline:
        return timeline(self._ctx)

    @cached_property
    def kernel_types(self) -> KernelTypes:
        return kernel_types(self._ctx.capture, ktypes.cached_table(self._ctx))

    @cached_property
    def comm_ops(self) -> CommOps:
        return comm_ops(self._ctx.capture, self._metrics)

    @cached_property
    def links(self) -> Links:
        return links(self._ctx, self._metrics)

    @cached_property
    def memory(self) -> Memory:
        return memory(self._ctx, self._metrics)

    @cached_property
    def data_pipeline(self) -> DataPipeline:
        return data_pipeline(self._ctx.capture, self._metrics)

    @cached_property
    def balance(self) -> Balance:
        return balance(self._ctx.steps, self._metrics, self._findings)

    @cached_property
    def latency_cdf(self) -> LatencyCdf:
        return latency_cdf(self._ctx.requests, self._ctx.options)

    @cached_property
    def ttft_prompt(self) -> Scatter:
        return ttft_prompt(self._ctx.requests)

    @cached_property
    def tpot_batch(self) -> Scatter:
        return tpot_batch(self._ctx.requests)

    @cached_property
    def phase_bars(self) -> PhaseBars:
        return phase_bars(self._ctx)

    @cached_property
    def train_curves(self) -> TrainCurves:
        from msdiag.metrics.training_views import train_curves

        return train_curves(self._ctx)

    @cached_property
    def train_step_times(self) -> TrainStepTimes:
        from msdiag.metrics.training_views import train_step_times

        return train_step_times(self._ctx, dict(self._metrics))
