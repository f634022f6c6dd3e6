"""Every metric msdiag computes, registered once: id, unit, a one-line doc and its source.

A metric is a pure function of the analysis context that returns a job-level value, the
per-rank values behind it, and, when it cannot be computed, the reason. A figure that needs
data the capture lacks is null with the reason, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pandas as pd

from msdiag.model import Capture

if TYPE_CHECKING:
    from msdiag.inference.requests import RequestLog


@dataclass
class Context:
    """What metrics read: the capture's tables, the computed step rows and, for inference, a request log."""

    capture: Capture
    steps: pd.DataFrame
    options: dict[str, Any] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)  # shared by the metrics of one analysis
    requests: RequestLog | None = None  # a request timing log (msdiag analyze LOG / --requests LOG)


@dataclass
class Value:
    value: float | int | str | None
    per_rank: Mapping[int, float | str | None] = field(default_factory=dict)
    reason: str | None = None  # why the value is null


@dataclass(frozen=True)
class Metric:
    id: str
    unit: str
    doc: str
    source: str
    fn: Callable[[Context], Value]


METRICS: dict[str, Metric] = {}


def metric(id: str, unit: str, doc: str, source: str) -> Callable[[Callable[[Context], Value]], Callable[[Context], Value]]:
    """Register a metric function under ``id`` (ids are unique)."""

    def deco(fn: Callable[[Context], Value]) -> Callable[[Context], Value]:
        if id in METRICS:
            raise ValueError(f"metric {id} registered twice")
        METRICS[id] = Metric(id, unit, doc, source, fn)
        return fn

    return deco


def _load_metric_modules() -> None:
    """Import every module of msdiag.metrics: each registers its metrics where they are defined."""
    import importlib
    import pkgutil

    import msdiag.metrics as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"msdiag.metrics.{mod.name}")


def all_metrics() -> dict[str, Metric]:
    """Every registered metric, by id."""
    _load_metric_modules()
    return METRICS


def compute_all(ctx: Context) -> dict[str, Value]:
    """Compute every registered metric; a metric that fails is null with the reason."""
    out: dict[str, Value] = {}
    for m in all_metrics().values():
        try:
            out[m.id] = m.fn(ctx)
        except (KeyError, ValueError, ZeroDivisionError) as e:  # data-shaped failures only
            out[m.id] = Value(None, reason=f"could not be computed: {e}")
    return out


