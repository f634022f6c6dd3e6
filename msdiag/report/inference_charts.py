"""Inference charts of the HTML report: latency distributions, TTFT against prompt length, TPOT against batch
size, and the prefill / decode breakdown of a capture.

Same conventions as :mod:`msdiag.report.charts` (matplotlib Figure API, inline SVG, deterministic): each
function returns a :class:`~msdiag.report.charts.Chart` with its SVG, or the one-line reason its data is
absent. They draw the views ``msdiag/metrics/views.py`` computed (latency distributions and percentiles, the
estimated prefill cost line, the phase of each step): nothing here classifies or computes.
"""

from __future__ import annotations

from typing import Callable, Literal

import numpy as np

from msdiag.analysis import Analysis
from msdiag.report.charts import ALERT, COMM, COMPUTE, FREE, INK, MUTED, Chart, _absent, _draw, _legend_top, drawn, views
from msdiag.report.mpl import Figure, Line2D, MaxNLocator, Patch
from msdiag.units import US_PER_MS

PREFILL_COLOUR = COMM  # prefill steps / first tokens
DECODE_COLOUR = COMPUTE  # decode steps / token pacing
PCT_STYLE: dict[str, tuple[Literal["-", "--", ":"], float]] = {"p50": ("-", 1.0), "p90": ("--", 1.0), "p99": (":", 1.4)}
# The summary tiles of a report on a request log alone: (metric id, label, note).
TILES = (
    ("ttft_p50_ms", "TTFT (median)", "time to first token"),
    ("ttft_p99_ms", "TTFT (P99)", "the tail users feel"),
    ("tpot_p50_ms", "TPOT (median)", "time per output token"),
    ("e2e_p99_ms", "End-to-end (P99)", "arrival to last token"),
    ("throughput_rps", "Throughput", "completed requests per second"),
    ("queueing_share", "Queueing", "share of the median TTFT spent waiting"),
)


def latency_cdf(a: Analysis) -> Chart:
    ch = Chart("c-latency", "Request latency: TTFT, TPOT and end-to-end (CDF)")
    v = views(a).latency_cdf
    if v.absent:
        return _absent(ch, v.absent)
    ch.caption = (
        f"Share of the {v.requests} completed requests at or below each latency; vertical lines mark P50, P90 and P99"
        + (" and the SLO (red)" if v.any_slo else "")
        + ". A tail that leaves the bulk far behind is what users complain about."
    )

    def paint(fig: Figure) -> None:
        for i, c in enumerate(v.columns):
            ax = fig.add_subplot(1, len(v.columns), i + 1)
            if not len(c.values):
                ax.text(0.5, 0.5, f"no {c.name}", ha="center", va="center", transform=ax.transAxes, color=MUTED)
                ax.set_axis_off()
                continue
            y = np.arange(1, len(c.values) + 1) / len(c.values)
            ax.step(c.values, y, where="post", color=INK, linewidth=1.3)
            handles = []
            for key, x in c.percentiles:
                style, width = PCT_STYLE[key]
                ax.axvline(x, color=MUTED, linestyle=style, linewidth=width)
                handles.append(Line2D([], [], color=MUTED, linestyle=style, linewidth=width, label=f"{key.upper()} {x:.0f} ms"))
            if c.slo_ms is not None:
                ax.axvline(c.slo_ms, color=ALERT, linewidth=1.4)
                handles.append(Line2D([], [], color=ALERT, linewidth=1.4, label=f"SLO {c.slo_ms:g} ms"))
            ax.set_xlabel(f"{c.name} (ms)")
            ax.set_ylim(0, 1.02)
            ax.set_xlim(left=0)
            ax.xaxis.set_major_locator(MaxNLocator(5))
            ax.yaxis.grid(True)
            ax.set_axisbelow(True)
            if i == 0:
                ax.set_ylabel("share of requests")
            ax.legend(handles=handles, loc="lower right", fontsize=8, handlelength=1.6)

    return _draw(ch, 3.0, paint)


def ttft_vs_prompt(a: Analysis) -> Chart:
    ch = Chart("c-ttft-prompt", "TTFT against prompt length")
    v = views(a).ttft_prompt
    if v.absent:
        return _absent(ch, v.absent)
    ch.caption = (
        "Each dot is a request. The line is what a prefill of that length costs, from "
        + ("the requests that arrived to an empty server" if v.how == "median" else "the fastest requests")
        + ": dots far above it waited before their prefill (queueing); dots along a rising line are slow because "
        "their prompts are long."
    )

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        ax.scatter(v.x, v.y, s=16, color=PREFILL_COLOUR, alpha=0.8, linewidths=0, label="request")
        ax.plot(v.line_x, v.line_y, color=INK, linewidth=1.2, label="estimated prefill cost")
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel("TTFT (ms)")
        ax.set_ylim(bottom=0)
        ax.yaxis.grid(True)
        ax.set_axisbelow(True)
        _legend_top(ax, [Line2D([], [], marker="o", linestyle="", color=PREFILL_COLOUR, label="request"),
                         Line2D([], [], color=INK, label="estimated prefill cost")])

    return _draw(ch, 3.0, paint, width_in=7.0)


def tpot_vs_batch(a: Analysis) -> Chart:
    ch = Chart("c-tpot-batch", "TPOT against decode batch size")
    v = views(a).tpot_batch
    if v.absent:
        return _absent(ch, v.absent)
    ch.caption = (
        "Each dot is a request's mean inter-token latency at the decode batch it ran in; the line joins the "
        "medians. A line that climbs steeply means each extra sequence slows every stream."
    )

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        ax.scatter(v.x, v.y, s=16, color=DECODE_COLOUR, alpha=0.7, linewidths=0)
        ax.plot(v.line_x, v.line_y, color=INK, linewidth=1.2, marker="o", markersize=4)
        ax.set_xlabel("decode batch size")
        ax.set_ylabel("TPOT (ms)")
        ax.set_ylim(bottom=0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.grid(True)
        ax.set_axisbelow(True)
        _legend_top(ax, [Line2D([], [], marker="o", linestyle="", color=DECODE_COLOUR, label="request"),
                         Line2D([], [], color=INK, marker="o", markersize=4, label="median")])

    return _draw(ch, 3.0, paint, width_in=7.0)


def phase_breakdown(a: Analysis) -> Chart:
    ch = Chart("c-phases", "Prefill and decode steps")
    v = views(a).phase_bars
    if v.absent:
        return _absent(ch, v.absent)
    ch.caption = (
        f"Left: every step in order, coloured by phase (told apart by {v.classified_by}); warm-up steps hatched. "
        f"Right: total time of each phase, computing (dark) and the rest. Prefill takes {100 * v.prefill_share:.0f}% of forward time."
    )
    names = list(v.total_us)  # prefill, decode
    colour = {names[0]: PREFILL_COLOUR, names[1]: DECODE_COLOUR}

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 2, 1)
        bars = ax.bar(np.arange(len(v.phases)), v.step_ms, 0.85, color=[colour[p] for p in v.phases], linewidth=0)
        for bar, w in zip(bars, v.warmup):
            if w:
                bar.set_hatch("///")
                bar.set_alpha(0.5)
        ax.set_xlabel("step (capture order)")
        ax.set_ylabel("step time (ms)")
        ax.yaxis.grid(True)
        ax.set_axisbelow(True)
        _legend_top(ax, [Patch(color=PREFILL_COLOUR, label="prefill"), Patch(color=DECODE_COLOUR, label="decode")])
        ax2 = fig.add_subplot(1, 2, 2)
        y = np.arange(2)
        ax2.barh(y, [v.total_us[n] / US_PER_MS for n in names], 0.6, color=FREE, linewidth=0)
        ax2.barh(y, [v.computing_us[n] / US_PER_MS for n in names], 0.6, color=[PREFILL_COLOUR, DECODE_COLOUR], linewidth=0)
        ax2.set_yticks(y)
        ax2.set_yticklabels(names)
        ax2.invert_yaxis()
        ax2.set_xlabel("total time (ms)")
        ax2.xaxis.grid(True)
        ax2.set_axisbelow(True)

    return _draw(ch, 3.0, paint)


CHARTS: tuple[Callable[[Analysis], Chart], ...] = (latency_cdf, ttft_vs_prompt, tpot_vs_batch, phase_breakdown)


def chart_functions(a: Analysis) -> tuple[Callable[[Analysis], Chart], ...]:
    """The inference charts' functions, in page order; none for an analysis with neither a request log nor
    inference steps."""
    return CHARTS if views(a).has_inference else ()


def all_charts(a: Analysis) -> list[Chart]:
    """The inference charts, in page order."""
    return drawn(a, chart_functions(a))
