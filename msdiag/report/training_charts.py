"""Training-log charts of the HTML report (issue 18): the loss / learning-rate / gradient-norm / loss-scale curves
with the spikes and overflows marked, and the step times with the periodic slow steps marked.

Same conventions as :mod:`msdiag.report.charts` (matplotlib Figure API, inline SVG, deterministic). They draw
the views :mod:`msdiag.metrics.training_views` computed: nothing here finds a spike or a period.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from msdiag import fmt
from msdiag.analysis import Analysis
from msdiag.report.charts import ALERT, COMM, COMPUTE, INK, MUTED, Chart, _absent, _draw, _legend_top, drawn, views
from msdiag.report.mpl import Figure, Line2D

# The summary tiles of a report on a training log alone: (metric id, label, note).
TILES = (
    ("train_log_steps", "Steps logged", "reference rank"),
    ("loss_spike_count", "Loss spikes", "against the steps before"),
    ("loss_end_over_start", "Loss end / start", "last tenth over step 1"),
    ("overflow_share", "Overflowed steps", "dynamic loss scaling"),
    ("train_step_time_ms", "Step time (median)", "as the log gives it"),
    ("checkpoint_stall_share", "Periodic stalls", "share of the logged time"),
)


def _marks(ax: Any, c: Any, at: list[int], colour: str, marker: str) -> bool:
    """Mark the curve's points at the given steps; whether any was drawn."""
    sel = np.isin(c.steps, np.asarray(at, dtype=float))
    if sel.any():
        ax.scatter(c.steps[sel], c.values[sel], s=22, color=colour, marker=marker, zorder=3)
    return bool(sel.any())


def train_curves(a: Analysis) -> Chart:
    ch = Chart("c-train-curves", "Training: loss, learning rate, gradient norm and loss scale")
    v = views(a).train_curves
    if v.absent:
        return _absent(ch, v.absent)
    ch.caption = (
        f"Rank {v.rank}'s logged curves over the steps; red dots mark the {len(v.spike_steps)} loss spike(s), orange "
        f"triangles the {len(v.overflow_steps)} overflowed step(s)"
        + (f", black crosses the {len(v.nonfinite_steps)} NaN / inf loss(es)" if v.nonfinite_steps else "")
        + (". The loss axis is logarithmic (it spans more than two decades)." if v.log_scale else ".")
    )

    def paint(fig: Figure) -> None:
        axes = fig.subplots(len(v.curves), 1, sharex=True, squeeze=False)[:, 0]
        for ax, c in zip(axes, v.curves):
            ax.plot(c.steps, c.values, color=INK if c.name == "loss" else COMPUTE, linewidth=1.1)
            ax.set_ylabel(c.label, fontsize=9)
            if c.name == "loss" and v.log_scale:
                ax.set_yscale("log")
            handles = []
            if c.name == "loss" and _marks(ax, c, v.spike_steps, ALERT, "o"):
                handles.append(Line2D([], [], color=ALERT, marker="o", linestyle="", label="loss spike"))
            if _marks(ax, c, v.overflow_steps, COMM, "^"):
                handles.append(Line2D([], [], color=COMM, marker="^", linestyle="", label="overflow"))
            for s in v.nonfinite_steps:
                ax.axvline(s, color=INK, linestyle=":", linewidth=1.0)
            if handles:
                _legend_top(ax, handles)
        axes[-1].set_xlabel("step")

    return _draw(ch, 1.0 + 1.5 * len(v.curves), paint)


def train_step_time(a: Analysis) -> Chart:
    ch = Chart("c-train-steps", "Training: step time over the run")
    v = views(a).train_step_times
    if v.absent:
        return _absent(ch, v.absent)
    stall = (
        f"; every {v.period} steps a step is slow (red, {fmt.pct(v.stall_share)} of the logged time over the median)"
        if v.period else "; no steps are slow at a regular period"
    )
    named = (
        f"; grey lines: the {len(v.named_steps)} checkpoint save(s) / evaluation(s) the log names" if v.named_steps
        else "; the log names no checkpoint saves or evaluations"
    )
    ch.caption = f"Each logged step's time ({v.how}), the dashed line the median{stall}{named}."

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        ax.plot(v.steps, v.ms, color=INK, linewidth=1.0, marker=".", markersize=3)
        sel = np.isin(v.steps, np.asarray(v.stall_steps, dtype=float))
        handles = [Line2D([], [], color=INK, label="step time")]
        if sel.any():
            ax.scatter(v.steps[sel], v.ms[sel], s=26, color=ALERT, zorder=3)
            handles.append(Line2D([], [], color=ALERT, marker="o", linestyle="", label=f"slow every {v.period} steps"))
        if v.median_ms is not None:
            ax.axhline(v.median_ms, color=MUTED, linestyle="--", linewidth=1.0)
        for s in v.named_steps:
            ax.axvline(s, color=MUTED, linewidth=0.8, alpha=0.6)
        ax.set_xlabel("step")
        ax.set_ylabel("step time (ms)")
        _legend_top(ax, handles)

    return _draw(ch, 2.6, paint)


CHARTS: tuple[Callable[[Analysis], Chart], ...] = (train_curves, train_step_time)


def chart_functions(a: Analysis) -> tuple[Callable[[Analysis], Chart], ...]:
    """The training-log charts' functions, in page order; none without a training log."""
    return CHARTS if views(a).has_training else ()


def all_charts(a: Analysis) -> list[Chart]:
    """The training-log charts, in page order."""
    return drawn(a, chart_functions(a))
