"""The charts of the HTML report, drawn with matplotlib's object API and inlined as SVG.

Each chart function reads its view of the analysis (``Analysis.views``, computed by
``msdiag/metrics/views.py``: per-rank medians, top-N, FLOPs, link matrices, memory series) and
returns a :class:`Chart`: the SVG markup, or, when its data is absent, one line saying what is
absent and why (never an empty axis). Charts choose colours, scales, labels and captions; they
compute nothing and import nothing from ``metrics``, ``inference`` or ``ingest``.

Determinism: figures are built with ``matplotlib.figure.Figure`` (never pyplot), saved as SVG
with a fixed ``svg.hashsalt`` and no date, and every SVG id is prefixed with the chart's id so
ids stay unique across the page. Text is kept as SVG text (``svg.fonttype`` none): the page
stays small and its text searchable.

The charts are independent: with more than one CPU, ``all_charts`` draws them in this process and
forked children (``drawn``), each taking the next chart as it comes free: the same charts in the same
order, the same bytes.

matplotlib is imported here only (through :mod:`msdiag.report.mpl`): this module is off the analyze path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence, cast

import numpy as np

from msdiag import fmt
from msdiag.analysis import Analysis
from msdiag.forking import Forked, ForkFailed
from msdiag.forking import fork_cpus as _cpus  # (a module name here: the tests replace it)
from msdiag.report.mpl import (  # matplotlib, imported lean (see mpl)
    Figure,
    FuncFormatter,
    Line2D,
    MaxNLocator,
    MixedModeRenderer,
    Patch,
    PolyCollection,
    Rectangle,
    RendererBase,
    RendererSVG,
    colormaps,
    matplotlib,
    to_rgb,
)
from msdiag.units import MIB_PER_GIB, US_PER_MS, US_PER_S

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
# (the limits that decide a view's shape, top-N and lanes against heatmap, are in metrics/views.py)
ANNOTATED_BARS = 10  # up to this many bars carry their step time and computing share
MEMORY_LINE_LIMIT = 8  # beyond this many ranks memory shows every rank faint and the peak rank bold
MEMORY_POINTS = 600  # samples per rank series after down-sampling (maxima kept)
FAINT_POINTS = 120  # the same for each of the other ranks when there are many
FEW_SAMPLES = 30  # series this short are drawn with a marker per sample
SPLIT_RESERVED_RATIO = 10.0  # reserved this many times the allocated peak: separate panels
FIG_WIDTH_IN = 11.8
_QUEUED_MAX = 256  # charts handed out through the pipe, one byte per index

_RC: dict[str, Any] = {
    "svg.hashsalt": "msdiag",
    "svg.fonttype": "none",
    # every label is the capture's text (kernel types, op and group names), never TeX: "Mat$\foo$Mul"
    # is drawn as written instead of killing the report in matplotlib's mathtext parser
    "text.parse_math": False,
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


# ---- axes ----------------------------------------------------------------------------------


def _time_unit(max_us: float) -> tuple[float, str]:
    """Divisor and label for an axis of microseconds whose largest value is ``max_us``."""
    if max_us >= 5 * US_PER_S:
        return US_PER_S, "s"
    if max_us >= 2 * US_PER_MS:
        return US_PER_MS, "ms"
    return 1.0, "us"


# ---- SVG -----------------------------------------------------------------------------------

_PROLOG = re.compile(r"^.*?(?=<svg)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_ID = re.compile(r'\bid="([^"]+)"')
_XMLNS = re.compile(r'\s+xmlns(?::xlink)?="[^"]*"')
_SIZE = re.compile(r'(<svg[^>]*?)\s+width="([0-9.]+)pt"\s+height="[^"]*"')


PAD_IN = 0.08  # white space around a chart's drawn extent (inches)
_ROOT_SIZE = re.compile(r'(<svg[^>]*?)\s+width="[^"]*"\s+height="[^"]*"\s+viewBox="[^"]*"')


def to_svg(fig: Figure, chart_id: str) -> str:
    """The figure as inline SVG cut to what is drawn (``PAD_IN`` around it): no XML prolog or metadata, ids
    prefixed with ``chart_id``.

    The figure is drawn once, at its size, and the SVG's viewport is then set to the extent of what was drawn
    (the figure's tight box, measured with the renderer that drew it, whose text sizes it keeps). Saving with
    ``bbox_inches="tight"`` showed the same picture but drew the figure twice, a dry run to measure it first:
    a third of the report's chart time."""
    buf = io.StringIO()
    with matplotlib.rc_context(_RC):  # type: ignore[arg-type]
        width, height = fig.get_size_inches()
        # as FigureCanvasSVG.print_svg draws (the mixed renderer rasterizes what asks for it; it passes the rest on)
        mixed = MixedModeRenderer(fig, width, height, fig.dpi, RendererSVG(
            width * 72, height * 72, buf, image_dpi=fig.dpi, metadata={"Date": None, "Creator": None}))
        renderer = cast(RendererBase, mixed)
        fig.draw(renderer)
        mixed.finalize()
        box = fig.get_tightbbox(renderer).padded(PAD_IN)
    x0, y0, w, h = (_pt(v * 72) for v in (box.x0, height - box.y1, box.width, box.height))
    svg = _ROOT_SIZE.sub(lambda m: f'{m.group(1)} width="{w}pt" height="{h}pt" viewBox="{x0} {y0} {w} {h}"',
                         buf.getvalue(), count=1)
    svg = _METADATA.sub("", _PROLOG.sub("", svg, count=1), count=1)
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


def _pt(v: float) -> str:
    """A length in points as the SVG root states it: at most three decimals, no trailing zeros."""
    return f"{v:.3f}".rstrip("0").rstrip(".")


def _draw(chart: Chart, height_in: float, paint: Callable[[Figure], None], width_in: float = FIG_WIDTH_IN) -> Chart:
    """Create a figure under the report's style, let ``paint`` fill it, and store its SVG."""
    with matplotlib.rc_context(_RC):  # type: ignore[arg-type]
        fig = Figure(figsize=(width_in, max(1.2, height_in)), dpi=72)
        paint(fig)
        chart.svg = to_svg(fig, chart.id)
    return chart


def _bars(ax: Any, x: np.ndarray, heights: np.ndarray, width: float, colour: str, bottom: np.ndarray | None = None) -> None:
    """Vertical bars as one collection (``ax.bar`` makes an artist per bar, half a chart's drawing time at 64 ranks
    and more). The axes' limits are the caller's: the bars do not set them. NaN heights draw nothing."""
    b = np.zeros(len(x)) if bottom is None else np.asarray(bottom, float)
    h = np.asarray(heights, float)
    ok = np.isfinite(h) & np.isfinite(b)
    x0, x1, b, t = x[ok] - width / 2, x[ok] + width / 2, b[ok], b[ok] + h[ok]
    verts = np.stack([np.c_[x0, b], np.c_[x0, t], np.c_[x1, t], np.c_[x1, b]], axis=1)
    ax.add_collection(PolyCollection(verts, facecolors=colour, linewidths=0), autolim=False)


def _legend_top(ax: Any, handles: Sequence[Any]) -> None:
    ax.legend(handles=list(handles), loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(handles),
              handlelength=1.2, columnspacing=1.4, borderaxespad=0.2)


# ---- helpers -------------------------------------------------------------------------------


def views(a: Analysis) -> Any:
    """The analysis's chart views (``analysis.analyze`` builds them)."""
    if a.views is None:
        raise ValueError("this Analysis has no chart views: build it with msdiag.analysis.analyze()")
    return a.views


def _ticks_every(n: int, max_labels: int = 32) -> int:
    return max(1, math.ceil(n / max_labels))


def _absent(chart: Chart, reason: str) -> Chart:
    chart.absent = reason
    return chart


# ---- 1. step-time breakdown ----------------------------------------------------------------


def step_breakdown(a: Analysis) -> Chart:
    ch = Chart("c-steps", "Step time by rank and step",
               "Each bar is a step's span on the device: computing, communication not hidden by compute, "
               "and free time (device idle), stacked.")
    v = views(a).step_bars
    if v.absent:
        return _absent(ch, v.absent)
    if v.per_rank:
        ch.caption += " One bar per rank" + (f": the median of each part over its {v.steps} steps." if v.steps > 1 else ".")
    div, unit = _time_unit(float(np.nanmax(v.total)))
    n = len(v.labels)

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        x = np.arange(n)
        width = 0.72 if n > 1 else 0.4
        bottom = np.zeros(n)
        handles = []
        parts = [(v.computing, COMPUTE, "computing"), (v.exposed_other, COMM, "exposed communication")]
        if bool((v.bubble > 0).any()):
            parts.append((v.bubble, BUBBLE, "bubble (pipeline receive)"))
        parts.append((v.free, FREE, "free"))
        for vals, colour, name in parts:
            _bars(ax, x, vals / div, width, colour, bottom=bottom / div)
            bottom = bottom + vals
            handles.append(Patch(color=colour, label=name))
        ax.set_ylim(0, float(np.nanmax(np.r_[bottom, v.total])) / div * 1.05)  # (the bars' top and the usual 5% margin)
        ax.set_ylabel(f"step time ({unit})")
        ax.yaxis.grid(True)
        ax.set_axisbelow(True)
        every = _ticks_every(n)
        ax.set_xticks(x[::every])
        ax.set_xticklabels(v.labels[::every], rotation=0 if n <= 12 else 90, fontsize=8 if n > 12 else 9)
        ax.set_xlim(-0.6, n - 0.4)
        if v.per_rank:
            ax.set_xlabel("rank")
        if n <= ANNOTATED_BARS:
            for xi, t, c in zip(x, v.total, v.computing):
                if np.isfinite(t) and t > 0:
                    ax.annotate(f"{t / div:.1f} {unit}\n{100 * c / t:.0f}% computing", (xi, t / div),
                                xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=7.5, color=INK)
            ax.set_ylim(0, np.nanmax(v.total) / div * 1.22)
        _legend_top(ax, handles)

    return _draw(ch, 3.0 if n <= 24 else 3.4, paint)


# ---- 2. the timeline of the median step ----------------------------------------------------


def step_timeline(a: Analysis) -> Chart:
    ch = Chart("c-timeline", "Timeline of the median step")
    v = views(a).timeline
    if v.absent and not v.ranks:
        return _absent(ch, v.absent)
    div, unit = _time_unit(v.width_us)
    label = "the whole capture (no step markers)" if v.step is None else f"step {v.step}"
    ch.title = "Timeline of the median step" if v.step is not None else "Timeline of the capture"
    ch.caption = (
        f"{label[0].upper()}{label[1:]}, median step time {fmt.us(v.median_us)}. "
        "Time from each rank's own start of the step (ranks' clocks are not aligned). "
    )
    if v.absent:
        return _absent(ch, v.absent)
    if v.lanes is not None:
        ch.caption += "Per rank: compute, communication and free (neither) lanes."
        ch.caption += _marks_caption(v)
        n = 4 if v.syncs else 3
        height = 0.55 + 0.2 * n * len(v.lanes) + 0.15 * len(v.lanes) + (0.3 if v.late or v.syncs else 0.0)
        return _draw(ch, height, lambda fig: _paint_lanes(fig, v, div, unit))
    # many ranks: one row per rank, each time bin coloured by its mix of compute / exposed comm / free
    ch.caption += (
        f"{len(v.ranks)} ranks: one row per rank, each of {v.mix.shape[1]} time bins coloured by its mix of "
        "computing, exposed communication and free time."
    )
    return _draw(ch, min(7.0, 1.2 + 0.07 * len(v.ranks)), lambda fig: _paint_mix(fig, v, div, unit))


def _marks_caption(v: Any) -> str:
    """The caption's sentence on the marks: the latest arriver and the longest host synchronisation."""
    out = ""
    if v.late:
        worst = max(v.late, key=lambda m: m.late_us)
        out += (f" A triangle marks the last rank to reach each collective ({len(v.late)} in this step); the latest, "
                f"rank {worst.rank} at {worst.op}, arrived {fmt.us(worst.late_us)} after the first.")  # fmt: skip
    if v.syncs:
        longest = {r: float(d.max()) for r, (_, d) in v.syncs.items()}
        r = max(sorted(longest), key=lambda k: longest[k])
        out += (" The hatched host lane shows the host blocked in host-device synchronisations (nothing new is "
                f"launched meanwhile); the longest, on rank {r}, lasts {fmt.us(longest[r])}.")  # fmt: skip
    return out


def _paint_lanes(fig: Figure, v: Any, div: float, unit: str) -> None:
    """Per rank, lanes of the median step (compute, communication, free, and host when it synchronises), with
    the late arrivers marked on their communication lane and the host synchronisations hatched."""
    ax = fig.add_subplot(1, 1, 1)
    names = ["compute", "communication", "free"] + (["host"] if v.syncs else [])
    block = len(names) + 1  # a rank's lanes and the gap before the next rank
    yt, yl = [], []
    for i, lane in enumerate(v.lanes):
        rows: list[tuple[Any, str, str | None]] = [
            (lane.compute, COMPUTE, None), (lane.communication, COMM, None), (lane.free, FREE, None),
        ]  # fmt: skip
        if v.syncs:
            rows.append((v.syncs.get(lane.rank, (np.empty(0), np.empty(0))), "none", "////"))
        for j, ((starts, lengths), colour, hatch) in enumerate(rows):
            y = -(i * block + j)
            if len(starts):
                ax.broken_barh(list(zip(starts / div, lengths / div)), (y - 0.42, 0.84), facecolors=colour,
                               edgecolor=ALERT if hatch else "none", hatch=hatch, linewidth=0)  # fmt: skip
            yt.append(y)
            yl.append(f"rank {lane.rank}  {names[j]}" if j == 0 else names[j])
        if i < len(v.lanes) - 1:
            ax.axhline(-(i * block + block - 1), color="#EEEEEE", linewidth=0.8)
    _paint_late(ax, v, div, block)
    ax.set_yticks(yt)
    ax.set_yticklabels(yl, fontsize=8)
    ax.set_ylim(-(len(v.lanes) * block - 1) - 0.6, 0.6)
    ax.set_xlim(0, v.width_us / div)
    ax.set_xlabel(f"time from the start of the step ({unit})")
    ax.xaxis.grid(True)
    ax.set_axisbelow(True)
    ax.spines["left"].set_visible(False)
    ax.tick_params(axis="y", length=0)
    handles: list[Any] = [Patch(color=COMPUTE, label="compute"), Patch(color=COMM, label="communication"),
                          Patch(color=FREE, label="free")]  # fmt: skip
    if v.late:
        handles.append(Line2D([], [], color=ALERT, marker="v", linestyle="none", label="late arriver of a collective"))
    if v.syncs:
        handles.append(Patch(facecolor="none", edgecolor=ALERT, hatch="////", label="host-device synchronisation"))
    if v.late or v.syncs:
        _legend_top(ax, handles)


def _paint_late(ax: Any, v: Any, div: float, block: int) -> None:
    """A marker at each late arriver's arrival on its communication lane; the latest one labelled."""
    row = {lane.rank: i for i, lane in enumerate(v.lanes)}
    marks = [m for m in v.late if m.rank in row]
    for m in marks:
        ax.plot([m.at_us / div], [-(row[m.rank] * block + 1) + 0.5], marker="v", color=ALERT, markersize=7,
                linestyle="none")  # fmt: skip
    if marks:
        worst = max(marks, key=lambda m: m.late_us)
        ax.annotate(f"rank {worst.rank} {fmt.us(worst.late_us)} late", (worst.at_us / div, -(row[worst.rank] * block + 1) + 0.5),
                    xytext=(4, 2), textcoords="offset points", fontsize=7, color=ALERT)  # fmt: skip


def _paint_mix(fig: Figure, v: Any, div: float, unit: str) -> None:
    """One row per rank, each time bin's colour the mix of computing, exposed communication and free time."""
    rgb = np.array([to_rgb(COMPUTE), to_rgb(COMM), to_rgb(FREE)])
    img = np.ones((len(v.ranks), v.mix.shape[1], 3))
    for i, mix in enumerate(v.mix):
        outside = 1.0 - mix.sum(axis=1, keepdims=True)
        img[i] = mix @ rgb + np.clip(outside, 0, 1) * 1.0
    ax = fig.add_subplot(1, 1, 1)
    ax.imshow(img, aspect="auto", interpolation="nearest", extent=(0, v.width_us / div, len(v.ranks) - 0.5, -0.5))
    every = _ticks_every(len(v.ranks), 16)
    ax.set_yticks(np.arange(len(v.ranks))[::every])
    ax.set_yticklabels([str(r) for r in v.ranks][::every], fontsize=8)
    ax.set_ylabel("rank")
    ax.set_xlabel(f"time from the start of the step ({unit})")
    _legend_top(ax, [Patch(color=COMPUTE, label="computing"), Patch(color=COMM, label="exposed communication"),
                     Patch(color=FREE, label="free")])


# ---- 3. kernel types -----------------------------------------------------------------------


def kernel_types(a: Analysis) -> Chart:
    ch = Chart("c-kernels", "Top kernel types by time")
    v = views(a).kernel_types
    if v.absent:
        return _absent(ch, v.absent)
    ch.caption = (
        f"Compute kernels grouped by op type, time per rank over the capture ({v.ranks} rank(s), {v.launches:,} launches). "
        "Achieved TFLOP/s = FLOPs from the recorded shapes / kernel time, where the op type has a FLOPs formula."
    )
    if v.more_types:
        ch.caption += f" {v.more_types} more types ({100 * v.more_us / v.total_us:.0f}% of compute time) not shown."
    ch.table = [
        {
            "type": r["type"],
            "count": fmt.count(r["count"]),
            "time": fmt.us(r["us"]),
            "share": fmt.pct(r["share"]),
            "flops": "-" if r["flops"] is None else fmt.flop(r["flops"]),
            "tflops": "-" if r["tflops"] is None else f"{r['tflops']:.2f}",
            "bound": r["bound"] or "-",
        }
        for r in v.rows
    ]
    ch.table_columns = [("type", "op type"), ("count", "launches / rank"), ("time", "time / rank"), ("share", "share"),
                        ("flops", "FLOPs / rank"), ("tflops", "TFLOP/s"), ("bound", "bound by")]
    if v.bound_absent:
        ch.caption += f" Bound by: unknown, {v.bound_absent}."
    else:
        ch.caption += (" Bound by: the AI Core unit busiest over the type's kernels (PipeUtilization ratio, duration-weighted);"
                       f" below {v.saturated:.2f} no unit is saturated: the kernels wait on latency or their launch.")
    vals = np.array([r["us"] for r in v.rows])
    div, unit = _time_unit(float(vals.max()))

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        y = np.arange(len(v.rows))
        ax.barh(y, vals / div, color=COMPUTE, height=0.7, linewidth=0)
        ax.set_yticks(y)
        ax.set_yticklabels([fmt.shorten(r["type"], 34) for r in v.rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"time per rank ({unit})")
        ax.xaxis.grid(True)
        ax.set_axisbelow(True)
        for yi, r, row, x in zip(y, v.rows, ch.table, vals):
            txt = f"{row['share']}"
            if r["tflops"] is not None:
                txt += f" · {r['tflops']:.2f} TFLOP/s"
            ax.annotate(txt, (x / div, yi), xytext=(4, 0), textcoords="offset points", va="center", fontsize=7.5, color=INK)
        ax.set_xlim(0, vals.max() / div * 1.3)
        ax.tick_params(axis="y", length=0)

    return _draw(ch, 0.6 + 0.24 * len(v.rows), paint, width_in=8.0)


# ---- 4. communication ----------------------------------------------------------------------


def comm_ops(a: Analysis) -> Chart:
    ch = Chart("c-comm", "Communication ops: where the time goes")
    v = views(a).comm_ops
    if v.absent:
        return _absent(ch, v.absent)
    top = v.top
    ch.caption = (
        f"HCCL's analysis of each op (communication.json), mean over {v.ranks} rank(s) and {v.steps} step(s): transit moves data; "
        "synchronization waits for a late rank; other wait; idle is the rest of the op's elapse."
    )
    if v.ops > len(top):
        ch.caption += f" Top {len(top)} of {v.ops} ops by elapse time."
    div, unit = _time_unit(float(top["elapse_us"].max()))
    parts = [("transit_c", COMM, "transit"), ("sync_c", COMM_SYNC, "synchronization"), ("wait_c", COMM_WAIT, "other wait"),
             ("idle_c", COMM_IDLE, "idle")]

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        y = np.arange(len(top))
        left = np.zeros(len(top))
        for col, colour, _ in parts:
            x = top[col].to_numpy() / div
            ax.barh(y, x, left=left, color=colour, height=0.7, linewidth=0)
            left += x
        ax.set_yticks(y)
        ax.set_yticklabels([fmt.shorten(str(n), 40) for n in top.index], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"mean elapse per op ({unit})")
        ax.xaxis.grid(True)
        ax.set_axisbelow(True)
        ax.tick_params(axis="y", length=0)
        for yi, e in zip(y, top["elapse_us"].to_numpy()):
            ax.annotate(fmt.us(e), (e / div, yi), xytext=(4, 0), textcoords="offset points", va="center", fontsize=7.5)
        ax.set_xlim(0, float(top["elapse_us"].max()) / div * 1.15)
        _legend_top(ax, [Patch(color=c, label=n) for _, c, n in parts])

    return _draw(ch, 0.9 + 0.24 * len(top), paint)


def comm_links(a: Analysis) -> Chart:
    ch = Chart("c-links", "Link bandwidth, rank by rank")
    v = views(a).links
    if v.absent:
        return _absent(ch, v.absent)
    ch.caption = (
        "Bandwidth (GB/s) of each source -> destination link over the capture (communication_matrix.json; group-local "
        "rank numbers; on-chip LOCAL links left out). Blank: no traffic recorded."
    )
    slow = v.slow
    if slow is not None:
        ch.caption += f" Outlined in red: the slow link {slow.name}."
    else:
        ch.caption += f" No slow link: {v.slow_reason or 'none below the threshold'}."
    if v.groups > len(v.matrices):
        ch.caption += f" The {len(v.matrices)} groups with the most traffic of {v.groups}."
    big_r = max(len(m.rows) for m in v.matrices)
    big_c = max(len(m.cols) for m in v.matrices)
    cell = 0.42 if big_c <= 16 else max(0.08, 6.5 / big_c)
    w = min(FIG_WIDTH_IN, sum(cell * max(len(m.cols), 3) + 0.9 for m in v.matrices) + 1.0)
    h = 0.9 + cell * big_r * min(1.0, (FIG_WIDTH_IN - 1.0) / max(w - 1.0, 1e-9))
    return _draw(ch, h, lambda fig: _paint_links(fig, v, big_r, big_c), width_in=w)


def _paint_links(fig: Figure, v: Any, big_r: int, big_c: int) -> None:
    """One heatmap per group, sharing a colour scale; the slow link outlined."""

    cmap = colormaps["YlGnBu"].with_extremes(bad="#F4F4F4")
    vmax = max(float(np.nanmax(m.mat)) for m in v.matrices)
    annotate = big_r * big_c <= 100
    im = None
    gs = fig.add_gridspec(1, len(v.matrices), width_ratios=[max(len(m.cols), 3) for m in v.matrices])
    for i, m in enumerate(v.matrices):
        ax = fig.add_subplot(gs[0, i])
        im = ax.imshow(m.mat, cmap=cmap, vmin=0, vmax=vmax, interpolation="nearest", aspect="equal")
        ex, ey = _ticks_every(len(m.cols), 16), _ticks_every(len(m.rows), 16)
        ax.set_xticks(np.arange(len(m.cols))[::ex])
        ax.set_xticklabels([str(r) for r in m.cols][::ex], fontsize=8)
        ax.set_yticks(np.arange(len(m.rows))[::ey])
        ax.set_yticklabels([str(r) for r in m.rows][::ey], fontsize=8)
        ax.set_xlabel("destination rank")
        ax.set_ylabel("source rank")
        ax.set_title((f"group …{str(m.group)[-6:]}" if m.group else "no group recorded") + f" ({m.transports})", fontsize=9, loc="left")
        for sp in ax.spines.values():
            sp.set_visible(False)
        ax.tick_params(length=0)
        if annotate:
            for (yy, xx), x in np.ndenumerate(m.mat):
                if np.isfinite(x):
                    ax.text(xx, yy, f"{x:.1f}", ha="center", va="center", fontsize=7.5, color="white" if x > 0.6 * vmax else INK)
        s = v.slow
        if s is not None and s.group == m.group and s.src in m.rows and s.dst in m.cols:
            ax.add_patch(Rectangle((m.cols.index(s.dst) - 0.5, m.rows.index(s.src) - 0.5), 1, 1, fill=False, edgecolor=ALERT,
                                   linewidth=2.2))
    if im is not None:
        cb = fig.colorbar(im, ax=fig.axes, shrink=0.9 if big_r > 3 else 1.0, pad=0.02, aspect=12 if big_r <= 3 else 20)
        cb.set_label("GB/s")
        cb.outline.set_visible(False)


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
    ch = Chart("c-memory", "Device memory over time")
    v = views(a).memory
    if v.absent:
        return _absent(ch, v.absent)
    tdiv, tunit = _time_unit(v.span_us)
    many = len(v.rows) > MEMORY_LINE_LIMIT
    # a pool reserved far above what is allocated would flatten the allocated line: own panels then
    alloc_peak, res_peak = v.peaks["allocated_mb"], v.peaks["reserved_mb"]
    split = alloc_peak > 0 and res_peak > SPLIT_RESERVED_RATIO * alloc_peak
    ch.caption = _memory_caption(v, many, split)
    panels = [("allocated_mb", "reserved_mb")] if not split else [("allocated_mb",), ("reserved_mb",)]

    dev = v.device

    def paint(fig: Figure) -> None:
        handles: list[Any] = []
        rows = 2 if dev is not None else 1
        for pi, cols in enumerate(panels):
            ax = fig.add_subplot(rows, len(panels), pi + 1)
            _memory_panel(ax, v, cols, pi, split, many, (tdiv, tunit), handles)
        if handles:
            _legend_top(fig.axes[0], handles)
        if dev is not None:
            _device_panel(fig.add_subplot(rows, 1, 2), v, dev)
            fig.subplots_adjust(hspace=0.6)

    return _draw(ch, 3.0 if dev is None else 5.6, paint)


DEVICE_GROUPS = {  # component group -> (label, colour), stacked bottom-up
    "framework_pool_mb": ("framework pool (APP + GE)", MEMORY),
    "hccl_mb": ("HCCL buffers", COMM),
    "runtime_mb": ("runtime / driver", COMPUTE),
    "other_mb": ("other modules", FREE),
}
PEAK_HOLDERS_SHOWN = 3  # holders named beside the allocated peak


def _device_panel(ax: Any, v: Any, dev: Any) -> None:
    """The device footprint (npu_module_mem) of one rank stacked by component group, its peak and the capacity."""
    s = dev.series
    t0 = float(s["ts_us"].min())
    span = float(s["ts_us"].max()) - t0
    tdiv, tunit = _time_unit(span)
    t = (s["ts_us"].to_numpy(float) - t0) / tdiv
    top = max(dev.peak_mb, v.capacity_mb or 0.0)
    sc = MIB_PER_GIB if top >= MIB_PER_GIB else 1.0
    ys = [s[g].to_numpy(float) / sc for g in dev.groups]
    ax.stackplot(t, *ys, labels=[DEVICE_GROUPS[g][0] for g in dev.groups], colors=[DEVICE_GROUPS[g][1] for g in dev.groups],
                 step="post", linewidth=0)
    px = (dev.peak_ts_us - t0) / tdiv
    ax.plot([px], [dev.peak_mb / sc], marker="v", color=INK, markersize=7, linestyle="none", zorder=4)
    ha = "left" if px < 0.2 * (span / tdiv or 1.0) else "right" if px > 0.8 * (span / tdiv or 1.0) else "center"
    ax.annotate(f"device peak {fmt.mib(dev.peak_mb)} (rank {dev.rank})", (px, dev.peak_mb / sc), xytext=(0, 9),
                textcoords="offset points", fontsize=9, color=INK, ha=ha, va="bottom")
    if v.capacity_mb is not None:
        ax.axhline(v.capacity_mb / sc, color=ALERT, linestyle=":", linewidth=1.4, label="device capacity")
    ax.set_ylim(0, top / sc * 1.25)
    ax.set_ylabel(("GB" if sc > 1 else "MB") + " on the device")
    ax.set_xlabel(f"time ({tunit}) from the first module sample")
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=5, handlelength=1.2, borderaxespad=0.2, fontsize=8)
    ax.yaxis.grid(True)
    ax.set_axisbelow(True)


def _holders_text(v: Any) -> str:
    """The peak's largest holders, for the chart's peak label and caption."""
    return ", ".join(f"{n} {fmt.mib(mb)} ({c.replace('_', ' ')})" for n, c, mb in v.holders[:PEAK_HOLDERS_SHOWN])


def _memory_caption(v: Any, many: bool, split: bool) -> str:
    caption = (
        f"The framework allocator's memory ({', '.join(v.components)}) from the memory records, per rank: allocated (solid) "
        "and reserved (dashed). Time from each rank's first sample. "
    )
    if many:
        caption += f"{len(v.rows)} ranks: the rank with the peak in colour, every other rank's allocated memory faint. "
    caption += (
        f"Capacity line: {v.capacity_mb / MIB_PER_GIB:g} GB per device." if v.capacity_mb is not None
        else f"No capacity line: {v.capacity_reason or 'device memory unknown'}."
    )
    if split:
        caption = caption.replace("allocated (solid) and reserved (dashed)", "allocated (left) and reserved (right, own scale)")
    if v.holders:
        caption += f" At the allocated peak the largest holders are {_holders_text(v)}."
    if v.device is not None:
        caption += (
            f" Below: rank {v.device.rank}'s whole device footprint (npu_module_mem, every driver module's reserved memory) "
            "stacked by component, on the module samples' own time axis."
        )
    return caption


def _memory_panel(ax: Any, v: Any, cols: tuple[str, ...], pi: int, split: bool, many: bool,
                  time_axis: tuple[float, str], handles: list[Any]) -> None:
    """One panel of the memory chart: the series of ``cols`` per rank, the peak and the capacity line."""
    tdiv, tunit = time_axis
    top = max(v.peaks[c] for c in cols)
    with_cap = v.capacity_mb is not None and ("reserved_mb" in cols)
    if with_cap:
        top = max(top, v.capacity_mb or 0.0)
    gb = top >= MIB_PER_GIB
    sc = MIB_PER_GIB if gb else 1.0
    for i, (r, g) in enumerate(sorted(v.rows.items())):
        t = (g["ts_us"].to_numpy(float) - v.t0[r]) / tdiv
        for col in cols:
            _memory_line(ax, v, r, i, t, g[col].to_numpy(float), col, sc, split, many, pi, handles)
    if v.peak_rank is not None and "allocated_mb" in cols:
        px, py = (v.peak_ts_us - v.t0[v.peak_rank]) / tdiv, v.peak_mb / sc
        ax.plot([px], [py], marker="v", color=INK, markersize=7, linestyle="none", zorder=4)
        span = v.span_us / tdiv or 1.0
        ha = "left" if px < 0.2 * span else "right" if px > 0.8 * span else "center"
        held = f": {', '.join(n for n, _, _ in v.holders[:PEAK_HOLDERS_SHOWN])}" if v.holders else ""
        ax.annotate(f"peak allocated {fmt.mib(v.peak_mb)} (rank {v.peak_rank}){held}", (px, py), xytext=(0, 9),
                    textcoords="offset points", fontsize=9, color=INK, ha=ha, va="bottom")
    if with_cap and v.capacity_mb is not None:
        handles.append(ax.axhline(v.capacity_mb / sc, color=ALERT, linestyle=":", linewidth=1.4, label="device capacity"))
    ax.set_ylim(0, top / sc * 1.2)
    ax.set_ylabel(("GB" if gb else "MB") + (" allocated" if split and cols == ("allocated_mb",) else
                                            " reserved" if split else ""))
    ax.set_xlabel(f"time ({tunit})")
    ax.yaxis.grid(True)
    ax.set_axisbelow(True)


def _memory_line(ax: Any, v: Any, r: int, i: int, t: np.ndarray, y: np.ndarray, col: str, sc: float, split: bool,
                 many: bool, pi: int, handles: list[Any]) -> None:
    """One rank's series of one column: bold and labelled, or faint and coarse among many ranks."""

    if not np.isfinite(y).any():
        return
    style, lw = ("-", 1.4) if (col == "allocated_mb" or split) else ("--", 1.0)
    if many and r != v.peak_rank:
        if col == "allocated_mb" or split:  # the other ranks: faint and coarse
            tt, yy = _downsample(t, y, FAINT_POINTS)
            ax.plot(tt, yy / sc, "-", color="#999999", linewidth=0.6, alpha=0.35, drawstyle="steps-post")
        return
    tt, yy = _downsample(t, y, MEMORY_POINTS)
    colour: Any
    if many or len(v.rows) == 1:
        colour = MEMORY if col == "allocated_mb" else MEMORY_RESERVED
    else:
        colour = colormaps["viridis"](i / max(1, len(v.rows) - 1) * 0.85)
    ln = ax.plot(tt, yy / sc, style, color=colour, linewidth=lw, drawstyle="steps-post", zorder=3,
                 marker="o" if len(tt) <= FEW_SAMPLES else None, markersize=3.5)[0]
    if pi == 0 and col == "allocated_mb" and len(v.rows) > 1 and not many:
        handles.append(Patch(color=colour, label=f"rank {r}"))
    elif len(v.rows) == 1 or (many and r == v.peak_rank):
        what = "allocated" if col == "allocated_mb" else "reserved"
        ln.set_label(what + (f" (rank {r})" if many else ""))
        handles.append(ln)


# ---- 6. data pipeline ----------------------------------------------------------------------


def data_pipeline(a: Analysis) -> Chart:
    ch = Chart("c-data", "Data pipeline: queue usage per op")
    v = views(a).data_pipeline
    if v.absent:
        return _absent(ch, v.absent)
    g = v.ops
    ch.caption = (
        f"Average fill of each op's output queue (mean over {v.ranks} rank(s)), and the share of samples "
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
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:.0f}%"))
        ax.set_xlabel("share")
        ax.xaxis.grid(True)
        ax.set_axisbelow(True)
        ax.tick_params(axis="y", length=0)
        _legend_top(ax, [Patch(color=DATA, label="queue usage"), Patch(color=COMM_SYNC, label="queue empty (share of samples)")])

    return _draw(ch, 0.9 + 0.42 * len(g), paint, width_in=8.0)


# ---- 7. balance ----------------------------------------------------------------------------


def balance(a: Analysis) -> Chart:
    ch = Chart("c-balance", "Balance across ranks")
    v = views(a).balance
    if v.absent:
        return _absent(ch, v.absent)
    tot, comp = v.total_us, v.computing_us
    div, unit = _time_unit(float(np.nanmax(tot)))
    parts = [f"{what} {fmt.pct(x)}" for what, x in v.spreads]
    ch.caption = (
        "Per rank, the median over steps of its step time (grey) and of its computing time (blue). "
        + ("; ".join(parts).capitalize() + " (max - min over the mean). " if parts else "")
        + (f"Slowest rank by compute: {v.slowest}" + (" (arrow)." if v.flagged else ".") if v.slowest is not None else "")
    )
    n = len(v.ranks)

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        x = np.arange(n)
        _bars(ax, x, tot / div, 0.8, FREE)
        _bars(ax, x, comp / div, 0.5, COMPUTE)
        ax.set_ylabel(unit)
        every = _ticks_every(n)
        ax.set_xticks(x[::every])
        ax.set_xticklabels([str(r) for r in v.ranks][::every], fontsize=8)
        ax.set_xlabel("rank")
        ax.set_xlim(-0.6, n - 0.4)
        ax.yaxis.grid(True)
        ax.set_axisbelow(True)
        ax.yaxis.set_major_locator(MaxNLocator(6))
        if v.flagged and v.slowest is not None and v.slowest in v.ranks:
            i = v.ranks.index(v.slowest)
            ax.annotate("slowest", (i, comp[i] / div), xytext=(0, 14), textcoords="offset points", ha="center",
                        fontsize=8, color=ALERT, arrowprops={"arrowstyle": "->", "color": ALERT})
        ax.set_ylim(0, np.nanmax(tot) / div * 1.15)
        _legend_top(ax, [Patch(color=FREE, label="step time"), Patch(color=COMPUTE, label="computing")])

    return _draw(ch, 2.6, paint, width_in=min(FIG_WIDTH_IN, 3.0 + 0.16 * n))


# ---- the plan: a waterfall from today's step to the projected one (issue 16) ---------------------

PLAN_SAVING = "#54A24B"  # the time a fix of the plan takes out of the step


def plan_waterfall(a: Analysis) -> Chart:
    """Today's median step, each fix of the plan taking its share out (intervals removed once), the projected step."""
    ch = Chart("c-plan", "The plan: from today's step to the projected one",
               "The most each fix could win per median step, in the plan's order: the time its intervals take out of "
               "every step, an instant two fixes both remove counted once (a bound, not a promise).")
    plan = a.plan or {}
    items = [it for it in plan.get("items") or [] if it.get("step_time_us_after") is not None]
    step = plan.get("step_time_us")
    if not items or step is None:
        return _absent(ch, "no finding names step time a fix could win: no plan")
    div, unit = _time_unit(float(step))
    labels = ["today", *(it["rule_id"] for it in items), "projected"]
    tops = [float(step), *(float(it["step_time_us_after"]) + float(it["adds_us_per_step"] or 0.0) for it in items), float(items[-1]["step_time_us_after"])]
    bottoms = [0.0, *(float(it["step_time_us_after"]) for it in items), 0.0]
    n = len(labels)

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        x = np.arange(n)
        colours = [FREE, *([PLAN_SAVING] * (n - 2)), COMPUTE]
        ax.bar(x, (np.array(tops) - np.array(bottoms)) / div, 0.6, bottom=np.array(bottoms) / div, color=colours, linewidth=0)
        for xi, (t, b) in enumerate(zip(tops, bottoms)):
            text = fmt.us(t) if xi in (0, n - 1) else (f"-{fmt.us(t - b)}" if t - b > 0 else "nothing new")
            ax.annotate(text, (xi, t / div), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=7.5, color=INK)
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=0 if n <= 6 else 30, ha="center" if n <= 6 else "right", fontsize=8.5)
        ax.set_ylabel(f"step time ({unit})")
        ax.set_ylim(0, float(step) / div * 1.15)
        ax.yaxis.grid(True)
        ax.set_axisbelow(True)

    return _draw(ch, 2.8, paint, width_in=min(FIG_WIDTH_IN, 3.0 + 1.1 * n))


# ---- all of them ---------------------------------------------------------------------------

CHARTS: tuple[Callable[[Analysis], Chart], ...] = (
    step_breakdown, step_timeline, kernel_types, comm_ops, comm_links, memory, data_pipeline, balance,
)


#: The charts that take longest to draw on a job of many ranks, longest first: handed out before the others (_queued).
DRAWN_FIRST: tuple[Callable[[Analysis], Chart], ...] = (memory, step_timeline, comm_ops, plan_waterfall)


def chart_functions(a: Analysis) -> tuple[Callable[[Analysis], Chart], ...]:
    """The capture's charts' functions, in page order; none for an analysis without a capture (a request log)."""
    return CHARTS if views(a).has_capture else ()


def all_charts(a: Analysis) -> list[Chart]:
    """The capture's charts, in page order: drawn by forked processes when more than one CPU is ours."""
    return drawn(a, chart_functions(a))


def drawn(a: Analysis, fns: Sequence[Callable[[Analysis], Chart]]) -> list[Chart]:
    """``[fn(a) for fn in fns]``, the same charts and bytes, shared between this process and forked children.

    The charts are independent (each reads its own view; a figure's SVG depends only on it) and their cost
    differs tenfold (a memory chart of many ranks against a bar of four), so they are handed out as the
    workers come free: chart indices queued in a pipe before the children are forked, each process taking
    the next one (one byte, a pipe read is atomic) until the pipe is empty. A child returns its charts with
    their indices as JSON over a pipe of its own; a child that fails in any way (a chart raising, a chart
    JSON would not give back exactly) returns nothing and the charts it took are drawn here, so an error is
    raised here as the serial loop raises it."""
    workers = min(_cpus(), len(fns))
    if workers <= 1 or len(fns) > _QUEUED_MAX:  # one CPU, or one chart, or none
        return [fn(a) for fn in fns]
    queue_r, queue_w = os.pipe()
    children: list[Forked] = []
    try:
        os.write(queue_w, bytes(_queued(fns)))
        os.close(queue_w)
        os.set_blocking(queue_r, False)
        for _ in range(workers - 1):
            children.append(Forked(lambda: _drawn_in_child(a, fns, queue_r)))
        out = {i: fns[i](a) for i in _taken(queue_r)}
        for child in children:
            with contextlib.suppress(ForkFailed):
                out.update({i: _chart(d) for i, d in json.loads(child.result())})
        return [out[i] if i in out else fns[i](a) for i in range(len(fns))]
    finally:  # after an error here, the children not yet reaped are stopped and reaped (a no-op for the others)
        os.close(queue_r)
        for child in children:
            child.cancel()


def _queued(fns: Sequence[Callable[[Analysis], Chart]]) -> list[int]:
    """The order the charts are handed out in: the costliest first (:data:`DRAWN_FIRST`), then the others in page order,
    so that no process starts a long chart when the others are nearly done (64 bench ranks: the memory chart ~0.6 s,
    the step timeline ~0.4 s, the others 0.2 s or less; the memory chart, seventh on the page, was taken last)."""
    first = {id(fn): k for k, fn in enumerate(DRAWN_FIRST)}
    return sorted(range(len(fns)), key=lambda i: (first.get(id(fns[i]), len(first)), i))


def _taken(queue: int) -> Iterator[int]:
    """The chart indices this process takes from the shared queue, one at a time, until it is empty."""
    while True:
        try:
            got = os.read(queue, 1)
        except BlockingIOError:  # empty: every chart is taken
            return
        if not got:
            return
        yield got[0]


def _drawn_in_child(a: Analysis, fns: Sequence[Callable[[Analysis], Chart]], queue: int) -> str:
    """In a child: the charts it takes from ``queue``, with their indices, as JSON; an error when JSON would not
    give one back exactly (the child then gives nothing, and the charts it took are drawn again in the parent)."""
    charts = [(i, fns[i](a)) for i in _taken(queue)]
    text = json.dumps([[i, dataclasses.asdict(c)] for i, c in charts])
    if [(i, _chart(d)) for i, d in json.loads(text)] != charts:
        raise ValueError("a chart that JSON does not give back exactly")
    return text


def _chart(d: dict[str, Any]) -> Chart:
    return Chart(**{**d, "table_columns": [tuple(c) for c in d["table_columns"]]})


