"""Steps from MindSpore's step-trace points, shared by the MindSpore 1.x-2.2 reader (legacy.py) and
the raw CANN reader (cann_msprof.py): FP / BP / iteration-end points -> STEPS rows, a kernel's step
by its start, and a model table from row dicts.

A step runs from the previous iteration's end to its own end; the data wait is FP start minus the
previous end; communication is the union of the step's collectives, the part inside FP..BP
overlaps backward compute and the rest is exposed; computing = (end - FP) minus the exposed
communication after FP (an upper bound: the points record no idle time inside FP..BP or the tail).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from msdiag import intervals as iv
from msdiag import model

_RECEIVE = re.compile(r"receive|recv", re.IGNORECASE)


_OP_SUFFIX = re.compile(r"-op\d+$")


def op_type_from_full_name(name: str | None) -> str | None:
    """'Default/network/fc3-Dense/MatMul-op9' -> 'MatMul' (the op type MindSpore puts in its names)."""
    if name is None or (isinstance(name, float) and math.isnan(name)):
        return None
    last = str(name).rsplit("/", 1)[-1]
    last = _OP_SUFFIX.sub("", last)
    return last or None


def _comm_iv(comm: list[tuple[str, float, float]], keep: "re.Pattern[str] | None" = None) -> iv.Intervals:
    """The (start, end) pairs of step-trace communication ops (those whose name matches ``keep``)."""
    pairs = [(s, e) for n, s, e in comm if keep is None or keep.search(n)]
    return np.array([p[0] for p in pairs], dtype=float), np.array([p[1] for p in pairs], dtype=float)


@dataclass
class StepPoints:
    """One iteration as MindSpore's step trace describes it.

    Times are in the file's own unit (``scale`` of them per us: 100 for 10 ns ticks, 1 for us), so
    that the parts are computed from exact differences before one division.
    """

    step: int
    start: float  # previous iteration end (or this iteration's own start for the first)
    end: float  # iteration end
    fp: float | None  # FP start: the device starts running the graph
    bp: float | None  # BP end (None in inference mode: the window runs to the end)
    data_wait_us: float | None  # previous end -> FP start, us; None when there is no previous end
    comm: list[tuple[str, float, float]] = field(default_factory=list)  # (op, start, end)
    scale: float = 1.0


def steps_from_points(rank: int, points: list[StepPoints], source: str) -> pd.DataFrame:
    """STEPS rows from step-trace points (see the module doc for the definitions).

    Identities: computing + exposed + free == total; overlapped == communication - exposed; every
    part lies in [0, total].
    """
    rows = []
    for p in points:
        lo, hi, k = p.start, p.end, p.scale
        total = hi - lo
        fp = lo if p.fp is None else min(max(p.fp, lo), hi)
        bp = hi if p.bp is None else min(max(p.bp, fp), hi)
        comm = iv.merge(iv.clip(_comm_iv(p.comm), lo, hi))
        communication = iv.total(comm)
        overlapped = iv.total(iv.clip(comm, fp, bp))
        exposed = communication - overlapped
        exposed_after_fp = exposed - iv.total(iv.clip(comm, lo, fp))
        computing = max(0.0, (hi - fp) - exposed_after_fp)
        free = max(0.0, total - computing - exposed)
        bubble = iv.total(iv.clip(_comm_iv(p.comm, _RECEIVE), lo, hi))
        rows.append(
            {
                "rank": rank,
                "step": p.step,
                "start_us": lo / k,
                "end_us": hi / k,
                "total_us": total / k,
                "computing_us": computing / k,
                "communication_us": communication / k,
                "communication_exposed_us": exposed / k,
                "overlapped_us": overlapped / k,
                "free_us": free / k,
                "bubble_us": bubble / k,
                "data_wait_us": p.data_wait_us,
                "stage_us": (total - bubble) / k,
                "source": source,
            }
        )
    if not rows:
        return model.STEPS.empty()
    df = pd.DataFrame(rows)
    df["data_wait_us"] = pd.to_numeric(df["data_wait_us"], errors="coerce").astype("float64")
    return model.STEPS.frame(df)


def assign_steps(starts: np.ndarray, steps: pd.DataFrame) -> pd.Series:
    """The step whose [start_us, end_us) holds each start (null outside every step)."""
    out = pd.Series(pd.array([pd.NA] * len(starts), dtype=model.INT))
    if not len(steps) or not len(starts):
        return out
    st = steps.sort_values("start_us")
    los = st["start_us"].to_numpy(float)
    his = st["end_us"].to_numpy(float)
    ids = st["step"].to_numpy()
    idx = np.searchsorted(los, starts, side="right") - 1
    ok = (idx >= 0) & np.isfinite(starts)
    ok[ok] &= starts[ok] < his[idx[ok]]
    vals = [int(ids[i]) if k else pd.NA for i, k in zip(idx, ok)]
    return pd.Series(pd.array(vals, dtype=model.INT))


def table_frame(table: model.Table, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A model table from row dicts (None -> null; columns the table lacks are an error)."""
    if not rows:
        return table.empty()
    df = pd.DataFrame(rows)
    for c, t in table.columns.items():
        if c in df.columns and t == model.FLOAT:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
        elif c in df.columns and t == model.INT:
            df[c] = pd.array([pd.NA if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) for v in df[c]], dtype=model.INT)
        elif c in df.columns and t == model.STR:
            df[c] = pd.array([None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in df[c]], dtype=model.STR)
    return table.frame(df)
