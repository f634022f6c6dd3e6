"""The charts of the HTML report, drawn with matplotlib's object API and inlined as SVG.

Each chart function reads the Analysis (its canonical tables and computed metrics) and the
report object, and returns a :class:`Chart`: the SVG markup, or, when its data is absent, one
line saying what is absent and why (never an empty axis). Charts aggregate for display (top-N,
per-rank medians, time bins); they compute no metric.

Determinism: figures are built with ``matplotlib.figure.Figure`` (never pyplot), saved as SVG
with a fixed ``svg.hashsalt`` and no date, and every SVG id is prefixed with the chart's id so
ids stay unique across the page. Text is kept as SVG text (``svg.fonttype`` none): the page
stays small and its text searchable.

matplotlib is imported here only: this module is off the analyze path.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure  # a Figure saved to SVG needs no pyplot and no GUI backend
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator

from msdiag import intervals as iv
from msdiag.analysis import Analysis

# ---- colours: one meaning, one colour, in every chart --------------------------------------
COMPUTE = "#4C78A8"  # computing
COMM = "#F58518"  # communication (exposed)
FREE = "#C9C3BB"  # device neither computing nor communicating
BUBBLE = "#B279A2"  # pipeline bubble (receives)
COMM_WAIT = "#FFBF79"  # waiting inside a communication op
COMM_SYNC = "#E45756"  # synchronization: waiting for a late rank
COMM_IDLE = "#E8E2DA"  # inside the op, neither moving data nor waiting
MEMORY = "#54A24B"  # memory allocated
MEMORY_RESERVED = "#9CCB86"  # memory reserved
DATA = "#72B7B2"  # data pipeline
ALERT = "#D62728"  # marks: slow link, capacity line, slowest rank
INK = "#333333"
MUTED = "#777777"

# ---- limits that keep a large capture readable ---------------------------------------------
LANE_RANK_LIMIT = 16  # beyond this many ranks the step timeline is a heatmap, not lanes per rank
BAR_LIMIT = 48
ANNOTATED_BARS = 10  # up to this many bars carry their step time and computing share  # beyond this many rank-step bars the breakdown shows one bar per rank
TOP_KERNEL_TYPES = 15
TOP_COMM_OPS = 20
HEATMAP_GROUPS = 3  # communication groups shown in the bandwidth heatmap
MEMORY_LINE_LIMIT = 8  # beyond this many ranks memory shows every rank faint and the peak rank bold
MEMORY_POINTS = 600  # samples per rank series after down-sampling (maxima kept)
FAINT_POINTS = 120  # the same for each of the other ranks when there are many
FEW_SAMPLES = 30  # series this short are drawn with a marker per sample
SPLIT_RESERVED_RATIO = 10.0  # reserved this many times the allocated peak: separate panels
TIMELINE_BINS = 400  # time bins of the many-rank step heatmap
FIG_WIDTH_IN = 11.8

_RC: dict[str, Any] = {
    "svg.hashsalt": "msdiag",
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 10.0,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10.0,
    "xtick.labelsize": 9.5,
    "ytick.labelsize": 9.5,
    "figure.subplot.left": 0.07,
    "figure.subplot.right": 0.98,
    "axes.edgecolor": "#BBBBBB",
    "axes.labelcolor": INK,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "grid.color": "#E6E6E6",
    "grid.linewidth": 0.6,
    "xtick.color": "#555555",
    "ytick.color": "#555555",
    "legend.frameon": False,
    "legend.fontsize": 9.5,
    "path.simplify": True,
}


@dataclass
class Chart:
    """One chart of the report: SVG markup, or the reason its data is absent."""

    id: str
    title: str
    caption: str = ""
    svg: str | None = None
    absent: str | None = None
    table: list[dict[str, Any]] = field(default_factory=list)  # rows shown beside the chart
    table_columns: list[tuple[str, str]] = field(default_factory=list)  # (key, header)


# ---- number formats ------------------------------------------------------------------------


def fmt_us(x: Any) -> str:
    """Microseconds as us / ms / s."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    x = float(x)
    if abs(x) >= 1e6:
        return f"{x / 1e6:.2f} s"
    if abs(x) >= 1e3:
        return f"{x / 1e3:.2f} ms"
    return f"{x:.1f} us"


def fmt_mb(x: Any) -> str:
    """MB (2^20 B, as the memory tables write them) as MB or GB."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    x = float(x)
    return f"{x / 1024:.2f} GB" if abs(x) >= 1024 else f"{x:.1f} MB"


def fmt_pct(x: Any, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{100.0 * float(x):.{digits}f}%"


def fmt_flop(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    x = float(x)
    for div, unit in ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP")):
        if abs(x) >= div:
            return f"{x / div:.2f} {unit}"
    return f"{x:.0f} FLOP"


def _time_unit(max_us: float) -> tuple[float, str]:
    """Divisor and label for an axis of microseconds whose largest value is ``max_us``."""
    if max_us >= 5e6:
        return 1e6, "s"
    if max_us >= 2e3:
        return 1e3, "ms"
    return 1.0, "us"


# ---- SVG -----------------------------------------------------------------------------------

_PROLOG = re.compile(r"^.*?(?=<svg)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_ID = re.compile(r'\bid="([^"]+)"')
_XMLNS = re.compile(r'\s+xmlns(?::xlink)?="[^"]*"')
_SIZE = re.compile(r'(<svg[^>]*?)\s+width="([0-9.]+)pt"\s+height="[^"]*"')


def to_svg(fig: Figure, chart_id: str) -> str:
    """The figure as inline SVG: no XML prolog or metadata, ids prefixed with ``chart_id``."""
    buf = io.StringIO()
    with matplotlib.rc_context(_RC):  # type: ignore[arg-type]
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight", pad_inches=0.08)
    svg = _METADATA.sub("", _PROLOG.sub("", buf.getvalue(), count=1), count=1)
    ids = set(_ID.findall(svg))
    if ids:
        pat = re.compile(r'(\bid="|url\(#|href="#)(' + "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)) + r')(?=["\)])')
        svg = pat.sub(lambda m: f"{m.group(1)}{chart_id}-{m.group(2)}", svg)
    # responsive: at most its drawn size (fonts keep the same size in every chart), narrower on a
    # narrow screen; the viewBox keeps the aspect ratio
    # inline SVG in HTML needs no namespace declarations (the HTML parser knows svg and xlink:href)
    head, sep, body = svg.partition(">")
    svg = _XMLNS.sub("", head) + sep + body
    svg = _SIZE.sub(lambda m: f'{m.group(1)} style="max-width: {float(m.group(2)):.0f}pt"', svg, count=1)
    return svg.strip()


def _draw(chart: Chart, height_in: float, paint: Callable[[Figure], None], width_in: float = FIG_WIDTH_IN) -> Chart:
    """Create a figure under the report's style, let ``paint`` fill it, and store its SVG."""
    with matplotlib.rc_context(_RC):  # type: ignore[arg-type]
        fig = Figure(figsize=(width_in, max(1.2, height_in)), dpi=72)
        paint(fig)
        chart.svg = to_svg(fig, chart.id)
    return chart


def _legend_top(ax: Any, handles: Sequence[Any]) -> None:
    ax.legend(handles=list(handles), loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(handles),
              handlelength=1.2, columnspacing=1.4, borderaxespad=0.2)


# ---- helpers over the analysis -------------------------------------------------------------


def _reason(a: Analysis, metric_id: str) -> str | None:
    v = a.metrics.get(metric_id)
    return None if v is None else v.reason


def _source_reason(a: Analysis, name_prefix: str) -> str | None:
    """The reason a source is absent or failed, from every rank's source list (first one found)."""
    for s in a.capture.sources:
        if s.name.startswith(name_prefix) and s.status != "present" and s.reason:
            return f"{s.name} {s.status}: {s.reason}"
    return None


def _rank_label(r: Any) -> str:
    return f"rank {int(r)}"


def _step_label(s: Any) -> str:
    return "-" if s is None or pd.isna(s) else str(int(s))


def _ticks_every(n: int, max_labels: int = 32) -> int:
    return max(1, math.ceil(n / max_labels))


# ---- 1. step-time breakdown ----------------------------------------------------------------


def step_breakdown(a: Analysis) -> Chart:
    ch = Chart("c-steps", "Step time by rank and step",
               "Each bar is a step's span on the device: computing, communication not hidden by compute, "
               "and free time (device idle), stacked.")
    s = a.steps
    if not len(s) or s["total_us"].isna().all():
        ch.absent = "no step rows: " + ("; ".join(a.capture.notes) or "no kernel timeline and no step_trace_time.csv")
        return ch
    s = s.sort_values(["rank", "step"], na_position="first", kind="stable")
    cols = ["computing_us", "communication_exposed_us", "free_us", "bubble_us", "total_us"]
    d = s[["rank", "step"] + cols].copy()
    for c in cols:
        d[c] = pd.to_numeric(d[c], errors="coerce").astype(float)
    nsteps = d["step"].nunique(dropna=False)
    per_rank = len(d) > BAR_LIMIT
    if per_rank:
        d = d.groupby("rank", sort=True)[cols].median().reset_index()
        labels = [str(int(r)) for r in d["rank"]]
        xlabel = "rank"
        ch.caption += " One bar per rank" + (f": the median of each part over its {nsteps} steps." if nsteps > 1 else ".")
    else:
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
        xlabel = ""
    comp = d["computing_us"].fillna(0).to_numpy()
    exposed = d["communication_exposed_us"].fillna(0).to_numpy()
    free = d["free_us"].fillna(0).to_numpy()
    bubble = np.minimum(d["bubble_us"].fillna(0).to_numpy(), exposed)
    has_bubble = bool((bubble > 0).any())
    exposed_other = exposed - bubble
    total = d["total_us"].to_numpy()
    if np.isnan(comp + exposed + free).all() or not np.nansum(total):
        ch.absent = "the step rows carry no computing / communication / free figures"
        return ch
    div, unit = _time_unit(float(np.nanmax(total)))
    n = len(d)

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        x = np.arange(n)
        width = 0.72 if n > 1 else 0.4
        bottom = np.zeros(n)
        handles = []
        parts = [(comp, COMPUTE, "computing"), (exposed_other, COMM, "exposed communication")]
        if has_bubble:
            parts.append((bubble, BUBBLE, "bubble (pipeline receive)"))
        parts.append((free, FREE, "free"))
        for vals, colour, name in parts:
            ax.bar(x, vals / div, width, bottom=bottom / div, color=colour, linewidth=0)
            bottom = bottom + vals
            handles.append(Patch(color=colour, label=name))
        ax.set_ylabel(f"step time ({unit})")
        ax.yaxis.grid(True)
        ax.set_axisbelow(True)
        every = _ticks_every(n)
        ax.set_xticks(x[::every])
        ax.set_xticklabels(labels[::every], rotation=0 if n <= 12 else 90, fontsize=8 if n > 12 else 9)
        ax.set_xlim(-0.6, n - 0.4)
        if xlabel:
            ax.set_xlabel(xlabel)
        if n <= ANNOTATED_BARS:
            for xi, t, c in zip(x, total, comp):
                if np.isfinite(t) and t > 0:
                    ax.annotate(f"{t / div:.1f} {unit}\n{100 * c / t:.0f}% computing", (xi, t / div),
                                xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=7.5, color=INK)
            ax.set_ylim(0, np.nanmax(total) / div * 1.22)
        _legend_top(ax, handles)

    return _draw(ch, 3.0 if n <= 24 else 3.4, paint)


# ---- 2. the timeline of the median step ----------------------------------------------------


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


def _device_intervals(a: Analysis, rank: int, lo: float, hi: float) -> tuple[iv.Intervals, iv.Intervals]:
    """(compute, communication) intervals of a rank clipped to [lo, hi], as the breakdown sees them."""
    rd = next(r for r in a.capture.ranks if r.rank == rank)
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


def step_timeline(a: Analysis) -> Chart:
    ch = Chart("c-timeline", "Timeline of the median step")
    step, rows = median_step(a.steps)
    if not len(rows):
        src = sorted({str(x) for x in a.steps["source"].dropna()}) if len(a.steps) else []
        ch.absent = (
            "no step window on the device timeline: "
            + (f"step rows come from {', '.join(src)} (no kernel timeline with start times)" if src else "no step rows")
        )
        return ch
    rows = rows.sort_values("rank", kind="stable")
    ranks = [int(r) for r in rows["rank"]]
    spans = (rows["end_us"] - rows["start_us"]).to_numpy(float)
    width_us = float(np.nanmax(spans))
    div, unit = _time_unit(width_us)
    label = "the whole capture (no step markers)" if step is None else f"step {int(step)}"
    ch.title = "Timeline of the median step" if step is not None else "Timeline of the capture"
    ch.caption = (
        f"{label[0].upper()}{label[1:]}, median step time {fmt_us(float(np.median(spans)))}. "
        "Time from each rank's own start of the step (ranks' clocks are not aligned). "
    )
    data = []
    for r, lo, hi in zip(ranks, rows["start_us"].to_numpy(float), rows["end_us"].to_numpy(float)):
        comp, comm = _device_intervals(a, r, lo, hi)
        data.append((r, lo, hi, comp, comm))
    if all(len(c[0]) == 0 and len(m[0]) == 0 for _, _, _, c, m in data):
        ch.absent = "no device task falls inside the step window"
        return ch

    if len(ranks) <= LANE_RANK_LIMIT:
        ch.caption += "Per rank: compute, communication and free (neither) lanes."
        px = width_us / 1400.0  # a pixel of a wide screen

        def paint(fig: Figure) -> None:
            ax = fig.add_subplot(1, 1, 1)
            yt, yl = [], []
            lanes = [("compute", COMPUTE), ("communication", COMM), ("free", FREE)]
            for i, (r, lo, hi, comp, comm) in enumerate(data):
                busy = iv.merge((np.concatenate([comp[0], comm[0]]), np.concatenate([comp[1], comm[1]])))
                free = iv.subtract((np.array([lo]), np.array([hi])), busy)
                for j, (ivs, (name, colour)) in enumerate(zip((comp, comm, free), lanes)):
                    y = -(i * 4 + j)
                    cs, ce = _coarsen(ivs, px)
                    if len(cs):
                        ax.broken_barh(list(zip((cs - lo) / div, (ce - cs) / div)), (y - 0.42, 0.84),
                                       facecolors=colour, linewidth=0)
                    yt.append(y)
                    yl.append(f"rank {r}  {name}" if j == 0 else name)
                if i < len(data) - 1:
                    ax.axhline(-(i * 4 + 3), color="#EEEEEE", linewidth=0.8)
            ax.set_yticks(yt)
            ax.set_yticklabels(yl, fontsize=8)
            ax.set_ylim(-(len(data) * 4 - 1) - 0.6, 0.6)
            ax.set_xlim(0, width_us / div)
            ax.set_xlabel(f"time from the start of the step ({unit})")
            ax.xaxis.grid(True)
            ax.set_axisbelow(True)
            ax.spines["left"].set_visible(False)
            ax.tick_params(axis="y", length=0)

        return _draw(ch, 0.55 + 0.2 * 3 * len(data) + 0.15 * len(data), paint)

    # many ranks: one row per rank, each time bin coloured by its mix of compute / exposed comm / free
    ch.caption += (
        f"{len(ranks)} ranks: one row per rank, each of {TIMELINE_BINS} time bins coloured by its mix of "
        "computing, exposed communication and free time."
    )
    edges = np.linspace(0.0, width_us, TIMELINE_BINS + 1)
    img = np.ones((len(data), TIMELINE_BINS, 3))
    rgb = np.array([to_rgb(COMPUTE), to_rgb(COMM), to_rgb(FREE)])
    for i, (r, lo, hi, comp, comm) in enumerate(data):
        e = edges + lo
        binw = np.diff(e)
        c = _coverage(comp, e)
        x = _coverage(iv.subtract(comm, comp), e)
        inside = np.clip((hi - e[:-1]) / binw, 0.0, 1.0)  # a rank's step can be shorter than the widest
        f = np.clip(inside - (c + x) / binw, 0.0, 1.0)
        mix = np.stack([c / binw, x / binw, f], axis=1)
        outside = 1.0 - mix.sum(axis=1, keepdims=True)
        img[i] = mix @ rgb + np.clip(outside, 0, 1) * 1.0

    def paint_many(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        ax.imshow(img, aspect="auto", interpolation="nearest", extent=(0, width_us / div, len(data) - 0.5, -0.5))
        every = _ticks_every(len(ranks), 16)
        ax.set_yticks(np.arange(len(ranks))[::every])
        ax.set_yticklabels([str(r) for r in ranks][::every], fontsize=8)
        ax.set_ylabel("rank")
        ax.set_xlabel(f"time from the start of the step ({unit})")
        _legend_top(ax, [Patch(color=COMPUTE, label="computing"), Patch(color=COMM, label="exposed communication"),
                         Patch(color=FREE, label="free")])

    return _draw(ch, min(7.0, 1.2 + 0.07 * len(ranks)), paint_many)


# ---- 3. kernel types -----------------------------------------------------------------------


def _kernel_flops(a: Analysis, comp: pd.DataFrame) -> pd.Series:
    from msdiag.metrics import flops

    if not len(comp):
        return pd.Series(dtype=float)
    if (comp["core"] == "CPU").all():
        return flops.host_op_flops(comp, a.capture.table("host_shapes"))
    return flops.kernel_flops(comp)


def kernel_types(a: Analysis) -> Chart:
    ch = Chart("c-kernels", "Top kernel types by time")
    k = a.capture.table("kernels")
    comp = k[k["kind"] == "compute"].reset_index(drop=True)
    if not len(comp):
        why = _source_reason(a, "kernel_details") or ("no kernels in the capture" if not len(k) else "no compute kernels")
        ch.absent = f"no compute kernels: {why}"
        return ch
    nranks = max(1, comp["rank"].nunique())
    f = _kernel_flops(a, comp)
    g = pd.DataFrame(
        {
            "type": comp["type"].astype(object).where(comp["type"].notna(), comp["name"].astype(object)).astype(str),
            "dur_us": comp["dur_us"].astype(float),
            "flops": f.to_numpy() if len(f) else np.nan,
        }
    )
    g["known"] = g["flops"].notna().astype(int)
    g["known_us"] = g["dur_us"].where(g["flops"].notna(), 0.0)
    agg = g.groupby("type", sort=False).agg(
        count=("dur_us", "size"), total_us=("dur_us", "sum"), flops=("flops", "sum"),
        known=("known", "sum"), known_us=("known_us", "sum"),
    )
    agg = agg.sort_values(["total_us"], ascending=False, kind="stable")
    grand = float(agg["total_us"].sum()) or 1.0
    top = agg.head(TOP_KERNEL_TYPES)
    rest = agg.iloc[TOP_KERNEL_TYPES:]
    ch.caption = (
        f"Compute kernels grouped by op type, time per rank over the capture ({nranks} rank(s), {len(comp):,} launches). "
        "Achieved TFLOP/s = FLOPs from the recorded shapes / kernel time, where the op type has a FLOPs formula."
    )
    if len(rest):
        ch.caption += f" {len(rest)} more types ({100 * rest['total_us'].sum() / grand:.0f}% of compute time) not shown."
    rows = []
    for t, r in top.iterrows():
        tflops = r["flops"] / (r["known_us"] * 1e-6) / 1e12 if r["known"] and r["known_us"] > 0 else None
        rows.append(
            {
                "type": str(t),
                "count": _count(int(r["count"]) / nranks),
                "time": fmt_us(r["total_us"] / nranks),
                "share": fmt_pct(r["total_us"] / grand),
                "flops": fmt_flop(r["flops"] / nranks) if r["known"] else "-",
                "tflops": "-" if tflops is None else f"{tflops:.2f}",
                "_tflops": tflops,
                "_us": float(r["total_us"]) / nranks,
            }
        )
    ch.table = rows
    ch.table_columns = [("type", "op type"), ("count", "launches / rank"), ("time", "time / rank"), ("share", "share"),
                        ("flops", "FLOPs / rank"), ("tflops", "TFLOP/s")]
    vals = np.array([r["_us"] for r in rows])
    div, unit = _time_unit(float(vals.max()))

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        y = np.arange(len(rows))
        ax.barh(y, vals / div, color=COMPUTE, height=0.7, linewidth=0)
        ax.set_yticks(y)
        ax.set_yticklabels([_short(r["type"], 34) for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"time per rank ({unit})")
        ax.xaxis.grid(True)
        ax.set_axisbelow(True)
        for yi, r, v in zip(y, rows, vals):
            txt = f"{r['share']}"
            if r["_tflops"] is not None:
                txt += f" · {r['_tflops']:.2f} TFLOP/s"
            ax.annotate(txt, (v / div, yi), xytext=(4, 0), textcoords="offset points", va="center", fontsize=7.5, color=INK)
        ax.set_xlim(0, vals.max() / div * 1.3)
        ax.tick_params(axis="y", length=0)

    return _draw(ch, 0.6 + 0.24 * len(rows), paint, width_in=8.0)


def _count(x: float) -> str:
    return f"{x:,.0f}" if x.is_integer() or x >= 100 else f"{x:.1f}"


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


# ---- 4. communication ----------------------------------------------------------------------


def comm_ops(a: Analysis) -> Chart:
    ch = Chart("c-comm", "Communication ops: where the time goes")
    ops = a.capture.table("comm_ops")
    if not len(ops):
        ch.absent = "no per-op communication analysis: " + (
            _reason(a, "comm_wait_ratio") or _source_reason(a, "communication.json") or "communication.json absent"
        )
        return ch
    d = ops.copy()
    for c in ("elapse_us", "transit_us", "wait_us", "sync_us", "idle_us"):
        d[c] = pd.to_numeric(d[c], errors="coerce").astype(float)
    d["sync_c"] = np.minimum(d["sync_us"].fillna(0), d["wait_us"].fillna(0))
    d["wait_c"] = (d["wait_us"].fillna(0) - d["sync_c"]).clip(lower=0)
    d["transit_c"] = d["transit_us"].fillna(0)
    d["idle_c"] = (d["elapse_us"].fillna(0) - d["transit_c"] - d["wait_us"].fillna(0)).clip(lower=0)
    g = d.groupby("op_name", sort=False)[["elapse_us", "transit_c", "wait_c", "sync_c", "idle_c"]].mean()
    g = g.sort_values("elapse_us", ascending=False, kind="stable")
    nops = len(g)
    top = g.head(TOP_COMM_OPS)
    nr = d["rank"].nunique()
    ns = d["step"].nunique(dropna=False)
    ch.caption = (
        f"HCCL's analysis of each op (communication.json), mean over {nr} rank(s) and {ns} step(s): transit moves data; "
        "synchronization waits for a late rank; other wait; idle is the rest of the op's elapse."
    )
    if nops > TOP_COMM_OPS:
        ch.caption += f" Top {TOP_COMM_OPS} of {nops} ops by elapse time."
    div, unit = _time_unit(float(top["elapse_us"].max()))
    parts = [("transit_c", COMM, "transit"), ("sync_c", COMM_SYNC, "synchronization"), ("wait_c", COMM_WAIT, "other wait"),
             ("idle_c", COMM_IDLE, "idle")]

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        y = np.arange(len(top))
        left = np.zeros(len(top))
        for col, colour, _ in parts:
            v = top[col].to_numpy() / div
            ax.barh(y, v, left=left, color=colour, height=0.7, linewidth=0)
            left += v
        ax.set_yticks(y)
        ax.set_yticklabels([_short(str(n), 40) for n in top.index], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"mean elapse per op ({unit})")
        ax.xaxis.grid(True)
        ax.set_axisbelow(True)
        ax.tick_params(axis="y", length=0)
        for yi, e in zip(y, top["elapse_us"].to_numpy()):
            ax.annotate(fmt_us(e), (e / div, yi), xytext=(4, 0), textcoords="offset points", va="center", fontsize=7.5)
        ax.set_xlim(0, float(top["elapse_us"].max()) / div * 1.15)
        _legend_top(ax, [Patch(color=c, label=n) for _, c, n in parts])

    return _draw(ch, 0.9 + 0.24 * len(top), paint)


_LINK = re.compile(r"^\s*(\d+)-(\d+)\s+(\S+)\s*$")


def comm_links(a: Analysis) -> Chart:
    from msdiag.metrics.communication import link_bandwidth

    ch = Chart("c-links", "Link bandwidth, rank by rank")
    links = a.capture.table("comm_links")
    if not len(links):
        ch.absent = "no link matrix: " + (
            _reason(a, "slow_link") or _source_reason(a, "communication_matrix.json") or "communication_matrix.json absent"
        )
        return ch
    lb = link_bandwidth(a.capture)
    if not len(lb):
        ch.absent = _reason(a, "slow_link") or "no link on a transport with a standard bandwidth"
        return ch
    per = lb.groupby(["group", "src", "dst", "transport"], as_index=False, dropna=False)[["size_mb", "time_us"]].sum()
    per["bw"] = per["size_mb"] / (per["time_us"] / 1e3)
    sizes = per.groupby("group", dropna=False)["size_mb"].sum().sort_values(ascending=False, kind="stable")
    groups = list(sizes.index[:HEATMAP_GROUPS])
    slow = a.metrics.get("slow_link")
    mark: tuple[Any, int, int] | None = None
    if slow is not None and isinstance(slow.value, str) and (m := _LINK.match(slow.value)):
        src, dst, tr = int(m.group(1)), int(m.group(2)), m.group(3)
        cand = lb[(lb["src"] == src) & (lb["dst"] == dst) & (lb["transport"] == tr)]
        if len(cand):
            mark = (cand.iloc[0]["group"], src, dst)
    ch.caption = (
        "Bandwidth (GB/s) of each source -> destination link over the capture (communication_matrix.json; group-local "
        "rank numbers; on-chip LOCAL links left out). Blank: no traffic recorded."
    )
    if mark:
        ch.caption += f" Outlined in red: the slow link {slow.value if slow else ''}."
    else:
        ch.caption += f" No slow link: {_reason(a, 'slow_link') or 'none below the threshold'}."
    if len(sizes) > HEATMAP_GROUPS:
        ch.caption += f" The {HEATMAP_GROUPS} groups with the most traffic of {len(sizes)}."
    mats = []
    for grp in groups:
        p = per[per["group"] == grp]
        rows_ = sorted({int(x) for x in p["src"]})
        cols_ = sorted({int(x) for x in p["dst"]})
        ri = {r: i for i, r in enumerate(rows_)}
        ci = {r: i for i, r in enumerate(cols_)}
        mat = np.full((len(rows_), len(cols_)), np.nan)
        for s_, d_, bw in zip(p["src"], p["dst"], p["bw"]):
            mat[ri[int(s_)], ci[int(d_)]] = bw
        trs = "/".join(sorted({str(t) for t in p["transport"]}))
        mats.append((grp, rows_, cols_, ri, ci, mat, trs))
    vmax = max(float(np.nanmax(m[5])) for m in mats)
    ncols = len(mats)
    big_r = max(len(m[1]) for m in mats)
    big_c = max(len(m[2]) for m in mats)
    annotate = big_r * big_c <= 100

    def paint(fig: Figure) -> None:
        from matplotlib import colormaps

        cmap = colormaps["YlGnBu"].with_extremes(bad="#F4F4F4")
        im = None
        gs = fig.add_gridspec(1, ncols, width_ratios=[max(len(m[2]), 3) for m in mats])
        for i, (grp, rows_, cols_, ri, ci, mat, trs) in enumerate(mats):
            ax = fig.add_subplot(gs[0, i])
            im = ax.imshow(mat, cmap=cmap, vmin=0, vmax=vmax, interpolation="nearest", aspect="equal")
            ex, ey = _ticks_every(len(cols_), 16), _ticks_every(len(rows_), 16)
            ax.set_xticks(np.arange(len(cols_))[::ex])
            ax.set_xticklabels([str(r) for r in cols_][::ex], fontsize=8)
            ax.set_yticks(np.arange(len(rows_))[::ey])
            ax.set_yticklabels([str(r) for r in rows_][::ey], fontsize=8)
            ax.set_xlabel("destination rank")
            ax.set_ylabel("source rank")
            ax.set_title(f"group …{str(grp)[-6:]} ({trs})", fontsize=9, loc="left")
            for sp in ax.spines.values():
                sp.set_visible(False)
            ax.tick_params(length=0)
            if annotate:
                for (yy, xx), v in np.ndenumerate(mat):
                    if np.isfinite(v):
                        ax.text(xx, yy, f"{v:.1f}", ha="center", va="center", fontsize=7.5,
                                color="white" if v > 0.6 * vmax else INK)
            if mark and mark[0] == grp and mark[1] in ri and mark[2] in ci:
                ax.add_patch(Rectangle((ci[mark[2]] - 0.5, ri[mark[1]] - 0.5), 1, 1, fill=False, edgecolor=ALERT,
                                       linewidth=2.2))
        if im is not None:
            cb = fig.colorbar(im, ax=fig.axes, shrink=0.9 if big_r > 3 else 1.0, pad=0.02, aspect=12 if big_r <= 3 else 20)
            cb.set_label("GB/s")
            cb.outline.set_visible(False)

    cell = 0.42 if big_c <= 16 else max(0.08, 6.5 / big_c)
    w = min(FIG_WIDTH_IN, sum(cell * max(len(m[2]), 3) + 0.9 for m in mats) + 1.0)
    h = 0.9 + cell * big_r * min(1.0, (FIG_WIDTH_IN - 1.0) / max(w - 1.0, 1e-9))
    return _draw(ch, h, paint, width_in=w)


# ---- 5. memory -----------------------------------------------------------------------------


def _downsample(t: np.ndarray, v: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ~2n points: per bin of time, its first and its largest sample (peaks survive)."""
    if len(t) <= 2 * n:
        return t, v
    edges = np.linspace(t[0], t[-1], n + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
    keep = np.zeros(len(t), dtype=bool)
    first = np.r_[True, b[1:] != b[:-1]]
    keep |= first
    vv = np.where(np.isnan(v), -np.inf, v)
    order = np.lexsort((-vv, b))
    best = order[np.r_[True, b[order][1:] != b[order][:-1]]]
    keep[best] = True
    keep[-1] = True
    return t[keep], v[keep]


def memory(a: Analysis) -> Chart:
    from msdiag.metrics.memory import MB_PER_GB, framework_rows
    from msdiag.metrics.registry import Context

    ch = Chart("c-memory", "Device memory over time")
    rows = framework_rows(Context(capture=a.capture, steps=a.steps, options=a.options))
    rows = {r: g for r, g in rows.items() if g["allocated_mb"].notna().any() or g["reserved_mb"].notna().any()}
    if not rows:
        ch.absent = "no memory samples: " + (_reason(a, "memory_peak_allocated_mb") or "memory_record.csv absent")
        return ch
    cap = a.metrics.get("memory_capacity_gb")
    cap_mb = float(cap.value) * MB_PER_GB if cap is not None and isinstance(cap.value, (int, float)) else None
    # each rank from its own first sample: ranks' clocks are not aligned (nor are their captures' starts)
    t0s = {r: float(g["ts_us"].min()) for r, g in rows.items()}
    tdiv, tunit = _time_unit(max(float(g["ts_us"].max()) - t0s[r] for r, g in rows.items()))
    peak_rank, peak_val, peak_t = None, -1.0, 0.0
    for r, g in rows.items():
        v = g["allocated_mb"].to_numpy(float)
        if np.isfinite(v).any() and np.nanmax(v) > peak_val:
            i = int(np.nanargmax(v))
            peak_rank, peak_val, peak_t = r, float(v[i]), float(g["ts_us"].to_numpy(float)[i])
    comps = sorted({str(c) for g in rows.values() for c in g["component"].dropna().unique()})
    many = len(rows) > MEMORY_LINE_LIMIT
    ch.caption = (
        f"The framework allocator's memory ({', '.join(comps)}) from the memory records, per rank: allocated (solid) "
        "and reserved (dashed). Time from each rank's first sample. "
    )
    if many:
        ch.caption += f"{len(rows)} ranks: the rank with the peak in colour, every other rank's allocated memory faint. "
    ch.caption += (
        f"Capacity line: {cap_mb / MB_PER_GB:g} GB per device." if cap_mb is not None
        else f"No capacity line: {_reason(a, 'memory_capacity_gb') or 'device memory unknown'}."
    )
    def peak(col: str) -> float:
        vals = [float(np.nanmax(g[col].to_numpy(float))) for g in rows.values() if g[col].notna().any()]
        return max(vals) if vals else 0.0

    alloc_peak, res_peak = peak("allocated_mb"), peak("reserved_mb")
    # a pool reserved far above what is allocated would flatten the allocated line: own panels then
    split = alloc_peak > 0 and res_peak > SPLIT_RESERVED_RATIO * alloc_peak
    if split:
        ch.caption = ch.caption.replace("allocated (solid) and reserved (dashed)", "allocated (left) and reserved (right, own scale)")
    panels = [("allocated_mb", "reserved_mb")] if not split else [("allocated_mb",), ("reserved_mb",)]

    def paint(fig: Figure) -> None:
        from matplotlib import colormaps

        cmap = colormaps["viridis"]
        handles: list[Any] = []
        for pi, cols in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), pi + 1)
            top = max(peak(c) for c in cols)
            with_cap = cap_mb is not None and ("reserved_mb" in cols)
            if with_cap:
                top = max(top, cap_mb or 0.0)
            gb = top >= 1024
            sc = 1024.0 if gb else 1.0
            for i, (r, g) in enumerate(sorted(rows.items())):
                t = (g["ts_us"].to_numpy(float) - t0s[r]) / tdiv
                for col in cols:
                    v = g[col].to_numpy(float)
                    if not np.isfinite(v).any():
                        continue
                    style, lw = ("-", 1.4) if (col == "allocated_mb" or split) else ("--", 1.0)
                    if many and r != peak_rank:
                        if col == "allocated_mb" or split:  # the other ranks: faint and coarse
                            tt, vv = _downsample(t, v, FAINT_POINTS)
                            ax.plot(tt, vv / sc, "-", color="#999999", linewidth=0.6, alpha=0.35, drawstyle="steps-post")
                        continue
                    tt, vv = _downsample(t, v, MEMORY_POINTS)
                    colour: Any
                    if many or len(rows) == 1:
                        colour = MEMORY if col == "allocated_mb" else MEMORY_RESERVED
                    else:
                        colour = cmap(i / max(1, len(rows) - 1) * 0.85)
                    ln = ax.plot(tt, vv / sc, style, color=colour, linewidth=lw, drawstyle="steps-post", zorder=3,
                                 marker="o" if len(tt) <= FEW_SAMPLES else None, markersize=3.5)[0]
                    if pi == 0 and col == "allocated_mb" and len(rows) > 1 and not many:
                        handles.append(Patch(color=colour, label=f"rank {r}"))
                    elif len(rows) == 1 or (many and r == peak_rank):
                        what = "allocated" if col == "allocated_mb" else "reserved"
                        ln.set_label(what + (f" (rank {r})" if many else ""))
                        handles.append(ln)
            if peak_rank is not None and "allocated_mb" in cols:
                px, py = (peak_t - t0s[peak_rank]) / tdiv, peak_val / sc
                ax.plot([px], [py], marker="v", color=INK, markersize=7, linestyle="none", zorder=4)
                span = max(float(g["ts_us"].max()) - t0s[r] for r, g in rows.items()) / tdiv or 1.0
                ha = "left" if px < 0.2 * span else "right" if px > 0.8 * span else "center"
                ax.annotate(f"peak allocated {fmt_mb(peak_val)} (rank {peak_rank})", (px, py), xytext=(0, 9),
                            textcoords="offset points", fontsize=9, color=INK, ha=ha, va="bottom")
            if with_cap and cap_mb is not None:
                handles.append(ax.axhline(cap_mb / sc, color=ALERT, linestyle=":", linewidth=1.4, label="device capacity"))
            ax.set_ylim(0, top / sc * 1.2)
            ax.set_ylabel(("GB" if gb else "MB") + (" allocated" if split and cols == ("allocated_mb",) else
                                                    " reserved" if split else ""))
            ax.set_xlabel(f"time ({tunit})")
            ax.yaxis.grid(True)
            ax.set_axisbelow(True)
        if handles:
            _legend_top(fig.axes[0], handles)

    return _draw(ch, 3.0, paint)


# ---- 6. data pipeline ----------------------------------------------------------------------


def data_pipeline(a: Analysis) -> Chart:
    ch = Chart("c-data", "Data pipeline: queue usage per op")
    dp = a.capture.table("data_pipeline")
    if not len(dp) or (dp["queue_usage"].isna().all() and dp["queue_empty_share"].isna().all()):
        src = _source_reason(a, "minddata_pipeline")
        ch.absent = (f"no MindData pipeline profile: {src}" if src else None) or _reason(a, "data_queue_empty_share") or (
            "no MindData pipeline profile (minddata_pipeline_raw absent)")
        return ch
    d = dp.copy()
    d["label"] = [f"{'Op' if pd.isna(t) else t} (id {int(i)})" for t, i in zip(d["op_type"], d["op_id"])]
    g = d.groupby(["op_id", "label"], sort=True)[["queue_usage", "queue_empty_share", "queue_capacity", "num_workers"]].mean()
    g = g.reset_index().sort_values("op_id", kind="stable")
    ch.caption = (
        f"Average fill of each op's output queue (mean over {d['rank'].nunique()} rank(s)), and the share of samples "
        "where it was empty. An empty queue downstream of an op means that op cannot keep up."
    )

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        y = np.arange(len(g))
        u = g["queue_usage"].to_numpy(float)
        e = g["queue_empty_share"].to_numpy(float)
        ax.barh(y - 0.19, np.nan_to_num(u) * 100, height=0.36, color=DATA, label="queue usage", linewidth=0)
        ax.barh(y + 0.19, np.nan_to_num(e) * 100, height=0.36, color=COMM_SYNC, label="queue empty (share of samples)",
                linewidth=0)
        for yi, uu, ee in zip(y, u, e):
            if np.isnan(uu) and np.isnan(ee):
                ax.annotate("no output queue recorded", (0, yi), xytext=(3, 0), textcoords="offset points", va="center",
                            fontsize=8, color=MUTED)
                continue
            for val, off in ((uu, -0.19), (ee, 0.19)):
                ax.annotate("n/a" if np.isnan(val) else f"{100 * val:.0f}%", (0 if np.isnan(val) else 100 * val, yi + off),
                            xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
        ax.set_yticks(y)
        ax.set_yticklabels(list(g["label"]), fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, 110)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}%"))
        ax.set_xlabel("share")
        ax.xaxis.grid(True)
        ax.set_axisbelow(True)
        ax.tick_params(axis="y", length=0)
        _legend_top(ax, [Patch(color=DATA, label="queue usage"), Patch(color=COMM_SYNC, label="queue empty (share of samples)")])

    return _draw(ch, 0.9 + 0.42 * len(g), paint, width_in=8.0)


# ---- 7. balance ----------------------------------------------------------------------------


def balance(a: Analysis) -> Chart:
    ch = Chart("c-balance", "Balance across ranks")
    s = a.steps
    if not len(s):
        ch.absent = "no step rows"
        return ch
    ranks = sorted(int(r) for r in s["rank"].dropna().unique())
    if len(ranks) < 2:
        ch.absent = f"one rank in the capture (rank {ranks[0]}): balance across ranks needs two or more" if ranks else "no ranks"
        return ch
    g = s.groupby("rank", sort=True)[["total_us", "computing_us"]].median()
    tot = g["total_us"].to_numpy(float)
    comp = g["computing_us"].to_numpy(float)
    div, unit = _time_unit(float(np.nanmax(tot)))
    slow = a.metrics.get("slowest_rank_by_compute")
    slow_rank = int(slow.value) if slow is not None and isinstance(slow.value, (int, float)) else None
    # the slowest rank is pointed at only when a finding rests on the imbalance
    flagged = any({"slowest_rank_by_compute", "compute_imbalance"} & set(f.get("evidence") or {}) for f in a.findings)
    parts = []
    for mid, what in (("compute_imbalance", "computing spread"), ("step_time_imbalance", "step-time spread")):
        v = a.metrics.get(mid)
        if v is not None and isinstance(v.value, (int, float)):
            parts.append(f"{what} {fmt_pct(v.value)}")
    ch.caption = (
        "Per rank, the median over steps of its step time (grey) and of its computing time (blue). "
        + ("; ".join(parts).capitalize() + " (max - min over the mean). " if parts else "")
        + (f"Slowest rank by compute: {slow_rank}" + (" (arrow)." if flagged else ".") if slow_rank is not None else "")
    )
    n = len(g)

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        x = np.arange(n)
        ax.bar(x, tot / div, 0.8, color=FREE, label="step time", linewidth=0)
        ax.bar(x, comp / div, 0.5, color=COMPUTE, label="computing", linewidth=0)
        ax.set_ylabel(unit)
        every = _ticks_every(n)
        ax.set_xticks(x[::every])
        ax.set_xticklabels([str(r) for r in g.index][::every], fontsize=8)
        ax.set_xlabel("rank")
        ax.set_xlim(-0.6, n - 0.4)
        ax.yaxis.grid(True)
        ax.set_axisbelow(True)
        ax.yaxis.set_major_locator(MaxNLocator(6))
        if flagged and slow_rank is not None and slow_rank in list(g.index):
            i = list(g.index).index(slow_rank)
            ax.annotate("slowest", (i, comp[i] / div), xytext=(0, 14), textcoords="offset points", ha="center",
                        fontsize=8, color=ALERT, arrowprops={"arrowstyle": "->", "color": ALERT})
        ax.set_ylim(0, np.nanmax(tot) / div * 1.15)
        _legend_top(ax, [Patch(color=FREE, label="step time"), Patch(color=COMPUTE, label="computing")])

    return _draw(ch, 2.6, paint, width_in=min(FIG_WIDTH_IN, 3.0 + 0.16 * n))


# ---- all of them ---------------------------------------------------------------------------

CHARTS: tuple[Callable[[Analysis], Chart], ...] = (
    step_breakdown, step_timeline, kernel_types, comm_ops, comm_links, memory, data_pipeline, balance,
)


def all_charts(a: Analysis) -> list[Chart]:
    """Every chart of the report, in page order."""
    return [fn(a) for fn in CHARTS]
