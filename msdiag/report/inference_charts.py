"""Inference charts of the HTML report: latency distributions, TTFT against prompt length, TPOT against batch
size, and the prefill / decode breakdown of a capture.

Same conventions as :mod:`msdiag.report.charts` (matplotlib Figure API, inline SVG, deterministic): each
function returns a :class:`~msdiag.report.charts.Chart` with its SVG, or the one-line reason its data is
absent. They draw what the analysis computed (the request table, the phase classification); the estimated
prefill cost line reuses :func:`msdiag.inference.latency.prefill_reference` / ``prefill_bound_ms``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from msdiag.analysis import Analysis
from msdiag.inference import latency as lat
from msdiag.metrics import phases as ph
from msdiag.report.charts import ALERT, COMM, COMPUTE, FREE, INK, MUTED, Chart, _draw, _legend_top

PREFILL_COLOUR = COMM  # prefill steps / first tokens
DECODE_COLOUR = COMPUTE  # decode steps / token pacing
PCT_STYLE = {"p50": ("-", 1.0), "p90": ("--", 1.0), "p99": (":", 1.4)}
NO_LOG = "no request log: give msdiag report LOG, or --requests LOG with a capture"
# The summary tiles of a report on a request log alone: (metric id, label, note).
TILES = (
    ("ttft_p50_ms", "TTFT (median)", "time to first token"),
    ("ttft_p99_ms", "TTFT (P99)", "the tail users feel"),
    ("tpot_p50_ms", "TPOT (median)", "time per output token"),
    ("e2e_p99_ms", "End-to-end (P99)", "arrival to last token"),
    ("throughput_rps", "Throughput", "completed requests per second"),
    ("queueing_share", "Queueing", "share of the median TTFT spent waiting"),
)


def _log(a: Analysis) -> Any:
    return getattr(a, "requests", None)


def _options(a: Analysis) -> dict[str, Any]:
    return a.options.as_dict()


def latency_cdf(a: Analysis) -> Chart:
    ch = Chart("c-latency", "Request latency: TTFT, TPOT and end-to-end (CDF)")
    log = _log(a)
    if log is None:
        ch.absent = NO_LOG
        return ch
    o = _options(a)
    slo = {"ttft_ms": o.get("slo_ttft_ms"), "tpot_ms": o.get("slo_tpot_ms"), "e2e_ms": None}
    cols = [("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "end-to-end")]
    r = log.requests
    ch.caption = (
        f"Share of the {len(r)} completed requests at or below each latency; vertical lines mark P50, P90 and P99"
        + (" and the SLO (red)" if any(v is not None for v in slo.values()) else "")
        + ". A tail that leaves the bulk far behind is what users complain about."
    )

    def paint(fig: Figure) -> None:
        for i, (col, name) in enumerate(cols):
            ax = fig.add_subplot(1, 3, i + 1)
            v = np.sort(r[col].dropna().to_numpy(dtype=float))
            if not len(v):
                ax.text(0.5, 0.5, f"no {name}", ha="center", va="center", transform=ax.transAxes, color=MUTED)
                ax.set_axis_off()
                continue
            y = np.arange(1, len(v) + 1) / len(v)
            ax.step(v, y, where="post", color=INK, linewidth=1.3)
            handles = []
            for key, (style, width) in PCT_STYLE.items():
                x = float(np.percentile(v, lat.PERCENTILES[key]))
                ax.axvline(x, color=MUTED, linestyle=style, linewidth=width)
                handles.append(Line2D([], [], color=MUTED, linestyle=style, linewidth=width, label=f"{key.upper()} {x:.0f} ms"))
            goal = slo.get(col)
            if goal is not None:
                ax.axvline(float(goal), color=ALERT, linewidth=1.4)
                handles.append(Line2D([], [], color=ALERT, linewidth=1.4, label=f"SLO {float(goal):g} ms"))
            ax.set_xlabel(f"{name} (ms)")
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
    log = _log(a)
    if log is None:
        ch.absent = NO_LOG
        return ch
    r = log.requests[log.requests["prompt_tokens"].notna() & (log.requests["prompt_tokens"].fillna(0) > 0)]
    if len(r) < lat.MIN_REQUESTS:
        ch.absent = "fewer than 5 requests with a prompt length (vLLM results need input_lens)"
        return ch
    p = r["prompt_tokens"].to_numpy(dtype=float)
    t = r["ttft_ms"].to_numpy(dtype=float)
    grid = np.linspace(float(p.min()), float(p.max()), 60) if np.ptp(p) > 0 else np.array([float(p[0])])
    rp, rt, how = lat.prefill_reference(log)
    est = lat.prefill_bound_ms(rp, rt, grid, how)
    ch.caption = (
        "Each dot is a request. The line is what a prefill of that length costs, from "
        + ("the requests that arrived to an empty server" if how == "median" else "the fastest requests")
        + ": dots far above it waited before their prefill (queueing); dots along a rising line are slow because "
        "their prompts are long."
    )

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        ax.scatter(p, t, s=16, color=PREFILL_COLOUR, alpha=0.8, linewidths=0, label="request")
        ax.plot(grid, est, color=INK, linewidth=1.2, label="estimated prefill cost")
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
    log = _log(a)
    if log is None:
        ch.absent = NO_LOG
        return ch
    r = log.requests[log.requests["batch_size"].notna() & log.requests["tpot_ms"].notna()]
    if not len(r):
        ch.absent = "the request log records no batch_size (or no request has more than one token)"
        return ch
    b = r["batch_size"].to_numpy(dtype=float)
    t = r["tpot_ms"].to_numpy(dtype=float)
    sizes = sorted(set(b.tolist()))
    med = [float(np.median(t[b == s])) for s in sizes]
    ch.caption = (
        "Each dot is a request's mean inter-token latency at the decode batch it ran in; the line joins the "
        "medians. A line that climbs steeply means each extra sequence slows every stream."
    )

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        ax.scatter(b, t, s=16, color=DECODE_COLOUR, alpha=0.7, linewidths=0)
        ax.plot(sizes, med, color=INK, linewidth=1.2, marker="o", markersize=4)
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
    if not len(a.capture.ranks):
        ch.absent = "no capture: a request log alone has no steps (give a capture with --requests)"
        return ch
    phases = ph.classify(a.capture, a.steps, with_requests=_log(a) is not None)
    if not phases.ok:
        ch.absent = f"steps not told apart as prefill / decode: {phases.reason}"
        return ch
    s = phases.steps[phases.steps["phase"].notna()].reset_index(drop=True)
    timed = s[~s["warmup"].fillna(False).astype(bool)]
    tot = {p: float(timed.loc[timed["phase"] == p, "total_us"].sum()) for p in (ph.PREFILL, ph.DECODE)}
    comp = {p: float(timed.loc[timed["phase"] == p, "computing_us"].fillna(0).sum()) for p in (ph.PREFILL, ph.DECODE)}
    share = tot[ph.PREFILL] / (tot[ph.PREFILL] + tot[ph.DECODE]) if sum(tot.values()) > 0 else float("nan")
    ch.caption = (
        f"Left: every step in order, coloured by phase (told apart by {phases.classified_by}); warm-up steps hatched. "
        f"Right: total time of each phase, computing (dark) and the rest. Prefill takes {100 * share:.0f}% of forward time."
    )
    ms = s["total_us"].to_numpy(dtype=float) / 1000.0

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 2, 1)
        x = np.arange(len(s))
        colours = [PREFILL_COLOUR if p == ph.PREFILL else DECODE_COLOUR for p in s["phase"]]
        bars = ax.bar(x, ms, 0.85, color=colours, linewidth=0)
        for bar, w in zip(bars, s["warmup"].fillna(False).astype(bool)):
            if w:
                bar.set_hatch("///")
                bar.set_alpha(0.5)
        ax.set_xlabel("step (capture order)")
        ax.set_ylabel("step time (ms)")
        ax.yaxis.grid(True)
        ax.set_axisbelow(True)
        _legend_top(ax, [Patch(color=PREFILL_COLOUR, label="prefill"), Patch(color=DECODE_COLOUR, label="decode")])
        ax2 = fig.add_subplot(1, 2, 2)
        names = [ph.PREFILL, ph.DECODE]
        y = np.arange(2)
        ax2.barh(y, [tot[n] / 1000.0 for n in names], 0.6, color=FREE, linewidth=0)
        ax2.barh(y, [comp[n] / 1000.0 for n in names], 0.6, color=[PREFILL_COLOUR, DECODE_COLOUR], linewidth=0)
        ax2.set_yticks(y)
        ax2.set_yticklabels(names)
        ax2.invert_yaxis()
        ax2.set_xlabel("total time (ms)")
        ax2.xaxis.grid(True)
        ax2.set_axisbelow(True)

    return _draw(ch, 3.0, paint)


CHARTS: tuple[Callable[[Analysis], Chart], ...] = (latency_cdf, ttft_vs_prompt, tpot_vs_batch, phase_breakdown)


def all_charts(a: Analysis) -> list[Chart]:
    """The inference charts, in page order; none for an analysis with neither a request log nor inference steps."""
    if _log(a) is None and (a.identity or {}).get("workload") != "inference":
        return []
    return [fn(a) for fn in CHARTS]

