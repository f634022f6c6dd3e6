"""Hardware-state metrics read from the timeline's counter tracks."""

from __future__ import annotations

from msdiag.metrics.registry import Context, Reads, Value, metric

AICORE_FREQ_TRACK = "AI Core Freq"


@metric(
    "aicore_freq_drop",
    "ratio",
    "1 - min / max of the AI Core frequency samples (throttling), max over ranks",
    "counters: track 'AI Core Freq' (MHz)",
    reads=Reads(tables=("counters",), tracks=(AICORE_FREQ_TRACK,)),
)
def _aicore_freq_drop(ctx: Context) -> Value:
    """Non-positive samples are left out: 0 MHz is no frequency the cores ran at."""
    c = ctx.capture.table("counters")
    c = c[(c["track"] == AICORE_FREQ_TRACK).fillna(False).to_numpy() & (c["value"] > 0).to_numpy()]
    if not len(c):
        return Value(None, reason="no AI Core Freq counter in the timeline (trace_view.json absent, or not an Ascend capture)")
    per: dict[int, float | None] = {}
    for r, g in c.groupby("rank"):
        per[int(r)] = 1.0 - float(g["value"].min()) / float(g["value"].max())
    return Value(max(v for v in per.values() if v is not None), per)
