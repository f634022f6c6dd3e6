"""Which ranks of a large job are read deep: those whose host side changes the answer.

A job of more than ``Options.deep_all_up_to`` ranks is read in two passes (ingest/loader.py): every
rank shallow first (ingest/loader.load_rank_shallow: the summary files, trace_view.json left unparsed where
kernel_details.csv gives the device side whole; metrics/reduce.reduce_rank_shallow: the Python frames beyond
the first of each name left out where the trace is parsed), then the ranks chosen here deep. The choice reads
only what a shallow rank holds as a deep one does (the device side from kernel_details.csv, the collectives
from communication.json, the layout), so it is the same whichever depth the ranks were read at (``--deep all``
makes the same one):

- the slowest and the fastest rank (median step time, warm-up steps left out);
- per pipeline stage (profiler_metadata.json), the rank of median step time;
- the late arriver (``late_rank``: the last captured arriver the others wait for most) and the voted
  slow rank (``slow_rank``);
- the rank whose device idles most (median free time per step: neither computing nor communicating),
  where the host holds the device back most (launch, syncs, data waits, GC: what the host does there is
  what its trace, read deep, tells), and the rank with the longest Preparing (step_trace_time.csv: the
  host's time before a step's first device task, where a data wait at the step's start shows); each only
  when it stands out, more than ``STANDS_OUT`` above the ranks' median.

The host side of the answer (data waits, preparing, host syncs and the other causes, their call sites,
the projection of host fixes) rests on these ranks in both modes (metrics/causes.py, metrics/steps.py,
metrics/projection.py). At most a handful of ranks: two, one per stage, two, two.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msdiag.metrics.balance import _stage_of
from msdiag.metrics.registry import Context, all_metrics
from msdiag.metrics.steps import _timed_steps
from msdiag.model import Rows, entry, frame_of


def select_deep(ctx: Context) -> dict[int, list[str]]:
    """The ranks to read deep, each with why (in the order found); computed from the steps, the
    collectives and the host causes of ranks read at any depth."""
    why: dict[int, list[str]] = {}

    def add(rank: int | None, reason: str) -> None:
        if rank is not None:
            why.setdefault(int(rank), []).append(reason)

    med = _median_of(ctx, "total_us")
    if len(med):
        add(int(med.idxmax()), "slowest rank (median step time)")
        add(int(med.idxmin()), "fastest rank (median step time)")
        for stage, rank in _stage_medians(ctx, med).items():
            add(rank, f"median rank of pipeline stage {stage}")
    for mid, reason in (("late_rank", "late arriver (collectives)"), ("slow_rank", "slow rank (late-arrival votes)")):
        v = all_metrics()[mid].fn(ctx).value
        add(None if v is None else int(v), reason)
    add(_standing_out(_median_of(ctx, "free_us")), "most device idle (median free time per step)")
    add(_standing_out(_median_preparing(ctx)), "longest preparing before the first device task (step_trace_time.csv)")
    return why


#: A host signal names a rank only when that rank's figure exceeds the ranks' median by this share: ranks alike
#: but for rounding or jitter have no rank whose host side tells more than another's.
STANDS_OUT = 0.05


def _standing_out(per_rank: pd.Series) -> int | None:
    """The rank of the largest figure (the lowest rank on ties) when it exceeds the median of the ranks' figures by
    more than STANDS_OUT of it, else None."""
    if not len(per_rank):
        return None
    per_rank = per_rank.sort_index()
    top = float(per_rank.max())
    return int(per_rank.idxmax()) if top > 0 and top > (1 + STANDS_OUT) * float(per_rank.median()) else None


def _median_of(ctx: Context, col: str) -> pd.Series:
    """Median per rank of a step column (us) over its timed steps (warm-up left out), by rank; ranks without a
    value left out."""
    s = _timed_steps(ctx)
    if not len(s):
        return pd.Series(dtype=float)
    return s.groupby("rank")[col].median().astype(float).dropna().sort_index()


def _median_preparing(ctx: Context) -> pd.Series:
    """Median of the profiler's own Preparing per step (step_trace_time.csv: the host's time from the step's start to
    its first device task, where data waits and Python before the first launch show), by rank; warm-up steps left
    out (ties: the lowest rank). Read from the summary file, so the same at either depth."""
    s = ctx.steps
    warm: dict[int, list[int]] = {}  # per rank, its warm-up steps (a null step is none)
    if "warmup" in s.columns:
        w = s[s["warmup"].fillna(False).to_numpy(bool)]
        for r, st in zip(w["rank"].astype(int), w["step"].astype("Int64")):
            if not pd.isna(st):
                warm.setdefault(int(r), []).append(int(st))
    out: dict[int, float] = {}
    floats: dict[tuple[int, str], np.ndarray] = {}  # a joined table's column as floats, converted once for its ranks

    def column(x: pd.DataFrame | Rows, col: str) -> np.ndarray:
        if not isinstance(x, Rows):
            return frame_of(x)[col].to_numpy(float, na_value=np.nan)
        key = (id(x.whole), col)
        if key not in floats:
            floats[key] = x.whole[col].to_numpy(float, na_value=np.nan)
        return floats[key][x.lo : x.hi]

    for rd in ctx.capture.ranks:  # on arrays: a rank's rows of the joined table, not its frame cut (~0.2 ms a rank)
        p = entry(rd.tables, "profiler_steps") if "profiler_steps" in rd.tables else None
        if p is None or not len(p):
            continue
        prep = column(p, "preparing_us")
        keep = ~np.isnan(prep)
        if not keep.any():
            continue
        if int(rd.rank) in warm:
            step = column(p, "step")
            keep &= ~np.isin(step, warm[int(rd.rank)])  # (a null step is no warm-up step)
        if keep.any():
            out[int(rd.rank)] = float(np.median(prep[keep]))
    return pd.Series(out, dtype=float).sort_index()


def _stage_medians(ctx: Context, med: pd.Series) -> dict[int, int]:
    """Per pipeline stage (when recorded), the rank of median step time (the lower middle; ties by rank)."""
    stages: dict[int, list[tuple[float, int]]] = {}
    for rd in ctx.capture.ranks:
        if rd.rank not in med.index:
            continue
        stage, _, _ = _stage_of(rd.rank, rd.info)
        if stage is not None:
            stages.setdefault(int(stage), []).append((float(med[rd.rank]), int(rd.rank)))
    return {st: sorted(v)[(len(v) - 1) // 2][1] for st, v in sorted(stages.items())}
