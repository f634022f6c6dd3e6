"""The cause behind the verdict: of the causes the metrics measure in ms per step (a wait for ranks outside
the capture, a late captured rank, a host-device synchronisation at a call site, a data wait), the largest
one of the verdict's category; a fired rule of that category stands in when no measured cause exists
(comm-idle: "idle inside collectives" when nothing better explains it).

Rules see metrics only: every figure here is a metric value. Each cause says which categories it explains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from msdiag.units import US_PER_MS

Metrics = Mapping[str, Any]


@dataclass(frozen=True)
class Cause:
    """A cause: its id, the categories it explains, its cost in ms per step, its sentence and evidence."""

    id: str
    categories: tuple[str, ...]
    ms: Callable[[Metrics], float | None]
    sentence: Callable[[Metrics, float], str]
    evidence: tuple[str, ...]


def _num(m: Metrics, key: str) -> float | None:
    v = m.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _uncaptured_ms(m: Metrics) -> float | None:
    return _num(m, "uncaptured_wait_ms_per_step") if m.get("ranks_not_captured") is not None else None


def _uncaptured_sentence(m: Metrics, ms: float) -> str:
    known, cov = _num(m, "ranks_known"), _num(m, "capture_rank_coverage")
    of = f" ({round(cov * known)} of {int(known)} captured)" if known is not None and cov is not None else ""
    return f"{ms:.0f} ms per step waiting for ranks not in this capture{of}"


def _late_ms(m: Metrics) -> float | None:
    return _num(m, "late_arrival_ms_per_step") if m.get("late_rank") is not None else None


def _data_ms(m: Metrics) -> float | None:
    share, step = _num(m, "data_wait_share"), _num(m, "step_time_us")
    return share * step / US_PER_MS if share is not None and step is not None else None


CAUSES: tuple[Cause, ...] = (
    Cause(
        "ranks-not-captured", ("communication",), _uncaptured_ms, _uncaptured_sentence,
        ("uncaptured_wait_ms_per_step", "capture_rank_coverage", "ranks_not_captured", "ranks_known"),
    ),
    Cause(
        "late-rank", ("communication",), _late_ms,
        lambda m, ms: f"{ms:.0f} ms per step the other ranks wait for rank {m.get('late_rank')} to arrive at the collectives",
        ("late_arrival_ms_per_step", "late_rank", "slow_rank"),
    ),
    Cause(
        "host-sync", ("host",), lambda m: _num(m, "host_sync_ms_per_step") if m.get("host_sync_site") else None,
        lambda m, ms: f"{ms:.0f} ms per step the host blocks in a host-device synchronisation at {m.get('host_sync_site')}",
        ("host_sync_ms_per_step", "host_sync_share", "host_sync_site", "host_sync_comm_share"),
    ),
    Cause(
        "data-wait", ("data",), _data_ms,
        lambda m, ms: f"{ms:.0f} ms per step waiting for the next batch from the data pipeline",
        ("data_wait_share", "step_time_us"),
    ),
)  # fmt: skip

#: Fired rules that stand in as the cause when no measured cause of the category exists.
FALLBACK_RULES = ("comm-idle",)


def top_cause(category: str, metrics: Metrics, fired: Mapping[str, str]) -> dict[str, Any] | None:
    """The largest measured cause of ``category`` ({id, sentence, evidence, ms_per_step}), else a fired
    FALLBACK_RULES rule of that category ({id, sentence: its message}); ``fired``: rule id -> message."""
    ranked = []
    for c in CAUSES:
        ms = c.ms(metrics) if category in c.categories else None
        if ms is not None and ms > 0:
            ranked.append((ms, c))
    if ranked:
        ms, c = max(ranked, key=lambda x: x[0])
        return {"id": c.id, "sentence": c.sentence(metrics, ms), "evidence": {k: metrics.get(k) for k in c.evidence},
                "ms_per_step": round(ms, 3)}  # fmt: skip
    for rid in FALLBACK_RULES:
        if rid in fired:
            return {"id": rid, "sentence": fired[rid], "evidence": {}, "ms_per_step": None}
    return None
