"""What a fix can take out of each step: the removable kinds of time (model.STEP_KINDS) as intervals.

A fix's most is the time it removes from the step's span; two fixes that remove the same instant must
not be counted twice, so every kind is kept per step as intervals, and the time a set of fixes removes
is the length of the union of their kinds' intervals (``removed_us``), never the sum of their savings.

From the timeline (the device and HCCL lanes, the host lane's dataset waits and synchronisations), per
step window [lo, hi] as the step breakdown cuts it (metrics/breakdown.py):

- ``exposed_communication``: communication not covered by compute;
- ``bubble``: pipeline receives not covered by compute (a part of the exposed communication);
- ``idle``: the span covered by neither compute nor communication (the breakdown's free time);
- ``data_wait``: idle time during which the host waits on the dataset;
- ``host_idle``: the rest of the idle time;
- ``host_sync``: idle time during which the host is in a synchronisation (causes.SYNC_PATTERN).

A step whose row is not the timeline's (the profiler's step_trace_time rows, a legacy capture) has no
intervals: its columns are laid end to end instead (idle = free_us holding data_wait_us then the rest;
the exposed communication holding the bubble), which keeps each kind inside the one that contains it,
so the union is still right; ``host_sync`` is not measured there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pandas as pd

from msdiag import intervals as iv
from msdiag.metrics.breakdown import _comm_from_timeline, _marker_steps, _windows, placed_ops
from msdiag.metrics.causes import _Host, _Names, _spans, host_spans
from msdiag.metrics.registry import Context, unread_host
from msdiag.model import STEP_KINDS, STEP_KINDS_TABLE, RankData

__all__ = ["TIMELINE_ONLY", "StepSets", "rank_kinds", "removed_us", "step_sets", "timed_steps"]

#: Kinds a step row's totals cannot give (they need the host lane of a timeline).
TIMELINE_ONLY = ("host_sync",)

_CACHE_KEY = "projection.step_sets"


@dataclass
class StepSets:
    """One timed step of one rank: its span and each removable kind as intervals of it."""

    rank: int
    step: int | None
    total_us: float
    kinds: dict[str, iv.Intervals]
    source: str  # "timeline" (measured intervals) or "columns" (the step row's totals laid end to end)


def timed_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The step rows the step-time metrics use: a measured duration, warm-up left out (metrics/steps.py)."""
    keep = steps["total_us"].notna() & (steps["total_us"] > 0)
    if "warmup" in steps.columns:
        keep &= ~steps["warmup"].fillna(False)
    return steps[keep.to_numpy(bool)]


def _window_kinds(comp: iv.Intervals, comm: iv.Intervals, recv: iv.Intervals, waits: iv.Intervals,
                  syncs: iv.Intervals, lo: float, hi: float) -> dict[str, iv.Intervals]:
    """Every kind of one step window, from its compute, communication, receive and host intervals."""
    comp_c = iv.merge(iv.clip(comp, lo, hi))
    comm_c = iv.merge(iv.clip(comm, lo, hi))
    busy = iv.merge((np.concatenate([comp_c[0], comm_c[0]]), np.concatenate([comp_c[1], comm_c[1]])))
    idle = iv.subtract((np.array([lo]), np.array([hi])), busy)
    data_wait = iv.intersect(idle, iv.clip(waits, lo, hi))
    return {
        "exposed_communication": iv.subtract(comm_c, comp_c),
        "bubble": iv.subtract(iv.clip(recv, lo, hi), comp_c),
        "idle": idle,
        "data_wait": data_wait,
        "host_idle": iv.subtract(idle, data_wait),
        "host_sync": iv.intersect(idle, iv.clip(syncs, lo, hi)),
    }


def _rank_windows(rd: RankData, spans: list[iv.Intervals]) -> list[tuple[int | None, float, float, dict[str, iv.Intervals]]]:
    """Each step window of a rank's timeline (cut as the breakdown cuts it): its step, lo, hi and kinds; ``spans``:
    the rank's host data waits and syncs (causes.host_spans)."""
    ops = placed_ops(rd)
    if not len(ops):
        return []
    windows, _ = _windows(ops, _marker_steps(rd))
    is_comm, is_comp, starts, durs = ops.is_comm, ops.is_comp, ops.starts, ops.durs
    recv = ops.receives()
    extra = _comm_from_timeline(rd) if ops.src == "kernels" and not is_comm.any() else None
    extra_iv = iv.make(extra["start_us"].to_numpy(float), extra["dur_us"].to_numpy(float)) if extra is not None else iv.EMPTY
    waits, syncs = spans
    out = []
    for w in windows:
        s, d = starts[w.rows], durs[w.rows]
        cm = is_comm[w.rows]
        comm = iv.make(s[cm], d[cm])
        comm = (np.concatenate([comm[0], extra_iv[0]]), np.concatenate([comm[1], extra_iv[1]]))
        rv = cm & recv[w.rows]
        kinds = _window_kinds(iv.make(s[is_comp[w.rows]], d[is_comp[w.rows]]), comm, iv.make(s[rv], d[rv]),
                              waits, syncs, w.lo, w.hi)
        out.append((w.step, w.lo, w.hi, kinds))
    return out


def _rank_sets(ctx: Context, rd: RankData, memo: _Names) -> dict[int | None, dict[str, iv.Intervals]]:
    """Each step window of a rank's timeline -> its kinds, computed here; ``memo``: the host names matched so
    far (causes._Names)."""
    # the host lane's data waits and syncs: kept by the causes where they took the rank's host rows, else taken here
    return {step: kinds for step, _, _, kinds in _rank_windows(rd, host_spans(ctx, rd, memo))}


#: The row of a rank's STEP_KINDS_TABLE that is the step window itself, [lo, hi] (a window whose kinds are all
#: empty is still a window: its step is measured, not laid end to end).
_WINDOW = "window"


def rank_kinds(rd: RankData) -> pd.DataFrame:
    """The rank's step windows and each window's kinds as rows of STEP_KINDS_TABLE (rank, step, kind, start_us,
    end_us): per window, its [lo, hi] row (kind "window"), then each kind's intervals in _window_kinds' order.

    Computed where the rank is reduced (metrics/reduce.py), once its rows are: the rows the analysis holds, so
    it is what the analysis would compute from them; step_sets then reads it instead (:func:`_from_table`).
    ``host_idle`` rows are written only where the window has a data wait: else they are the idle rows."""
    steps: list[int | None] = []
    kinds: list[str] = []
    counts: list[int] = []
    lo: list[np.ndarray] = []
    hi: list[np.ndarray] = []
    for step, w_lo, w_hi, per_kind in _rank_windows(rd, _spans(_Host(rd.table("timeline"), _Names()))):
        for kind, (a, b) in ((_WINDOW, (np.array([w_lo]), np.array([w_hi]))), *per_kind.items()):
            if len(a) and not (kind == "host_idle" and not len(per_kind["data_wait"][0])):  # then idle's rows
                steps.append(step)
                kinds.append(kind)
                counts.append(len(a))
                lo.append(a)
                hi.append(b)
    n = int(sum(counts))
    rep = np.repeat(np.arange(len(counts)), counts)
    step_col = pd.array(steps, dtype="Int64")
    return STEP_KINDS_TABLE.frame({
        "rank": np.full(n, rd.rank, dtype=np.int64),
        "step": step_col.take(rep) if n else pd.array([], dtype="Int64"),
        "kind": pd.array(np.array(kinds, dtype=object)[rep] if n else np.empty(0, dtype=object), dtype="string"),
        "start_us": np.concatenate(lo) if n else np.empty(0),
        "end_us": np.concatenate(hi) if n else np.empty(0),
    })  # fmt: skip


def _from_table(t: pd.DataFrame) -> dict[int | None, dict[str, iv.Intervals]]:
    """:func:`_rank_sets` of a rank from its rows of STEP_KINDS_TABLE (:func:`rank_kinds`): every window with
    every kind (an absent kind: no intervals), the same values in the same order."""
    if not len(t):
        return {}
    kind = t["kind"].to_numpy(object)
    start, end = t["start_us"].to_numpy(float), t["end_us"].to_numpy(float)
    step = t["step"].to_numpy(object, na_value=None)
    is_window = kind == _WINDOW
    # each window's row, then its kinds, each a run of rows: cut where the kind changes and at every window row
    cut = np.flatnonzero(np.r_[True, kind[1:] != kind[:-1]] | is_window)
    bounds = np.r_[cut, len(kind)]
    out: dict[int | None, dict[str, iv.Intervals]] = {}
    current: dict[str, iv.Intervals] = {}
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if is_window[a]:
            current = out[None if step[a] is None else int(step[a])] = dict.fromkeys(STEP_KINDS, iv.EMPTY)
        else:
            current[str(kind[a])] = (start[a:b], end[a:b])
    for kinds in out.values():
        if not len(kinds["data_wait"][0]):  # idle less no data wait: the idle intervals themselves (merged twice)
            kinds["host_idle"] = kinds["idle"]
    return out


def _laid_end_to_end(row: pd.Series) -> dict[str, iv.Intervals]:
    """A step row's totals as intervals on a line of its own: idle [0, free) holding the data wait first,
    then the exposed communication holding the (exposed part of the) bubble; no host_sync."""

    def num(col: str) -> float:
        v = row.get(col)
        return float(v) if v is not None and pd.notna(v) else 0.0

    free, exposed = num("free_us"), num("communication_exposed_us")
    wait = min(num("data_wait_us"), free)
    bubble = min(num("bubble_us"), exposed)

    def span(a: float, b: float) -> iv.Intervals:
        return (np.array([a]), np.array([b])) if b > a else iv.EMPTY

    return {
        "idle": span(0.0, free), "data_wait": span(0.0, wait), "host_idle": span(wait, free),
        "exposed_communication": span(free, free + exposed), "bubble": span(free, free + bubble), "host_sync": iv.EMPTY,
    }


def _measured(ctx: Context, rd: RankData, memo: _Names) -> dict[int | None, dict[str, iv.Intervals]]:
    """A rank's windows and their kinds: from its STEP_KINDS_TABLE rows where it was reduced (computed there, in
    parallel: rank_kinds), else computed here (a rank read without the reduction, e.g. report --trace)."""
    kept = rd.tables.get(STEP_KINDS_TABLE.name)
    return _from_table(kept) if kept is not None else _rank_sets(ctx, rd, memo)


def step_sets(ctx: Context) -> list[StepSets]:
    """Every timed step (warm-up left out) with its removable kinds; computed once per analysis. The steps of the
    ranks whose host side was not read (registry.unread_host) are left out while another rank's is there."""
    if _CACHE_KEY in ctx.cache:
        return list(ctx.cache[_CACHE_KEY])
    steps = timed_steps(ctx.steps)
    unread = unread_host(ctx)  # ranks read without their trace: no host intervals; the host fixes' savings rest on the others
    if unread and not steps["rank"].isin(unread).all():
        steps = steps[~steps["rank"].isin(unread).to_numpy(bool)]
    out: list[StepSets] = []
    ranks = {int(rd.rank): rd for rd in ctx.capture.ranks}
    memo = _Names()
    for rank, rows in steps.groupby("rank", sort=True):
        from_timeline = rows["source"].astype("string").str.startswith("timeline").fillna(False).to_numpy(bool)
        measured = _measured(ctx, ranks[int(rank)], memo) if from_timeline.any() and int(rank) in ranks else {}
        # the step and total of each row from arrays; a row as a Series only when its columns are laid end to end
        step_of, total_of = rows["step"].to_numpy(object), rows["total_us"].to_numpy(object)
        for j, timeline in enumerate(from_timeline):
            step = None if pd.isna(step_of[j]) else int(step_of[j])
            kinds = measured.get(step) if timeline else None
            src = "timeline" if kinds is not None else "columns"
            laid = kinds if kinds is not None else _laid_end_to_end(rows.iloc[j])
            out.append(StepSets(int(rank), step, float(total_of[j]), laid, src))
    ctx.cache[_CACHE_KEY] = out
    return list(out)


def removed_us(sets: list[StepSets], kinds: Iterable[str]) -> np.ndarray:
    """Per step, the time the union of ``kinds``' intervals covers (each instant counted once)."""
    names = [k for k in kinds if k in STEP_KINDS]
    out = np.zeros(len(sets))
    for i, s in enumerate(sets):
        parts = [s.kinds[k] for k in names if k in s.kinds]
        if parts:
            out[i] = iv.total((np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])))
    return out
