"""The step-time breakdown computed from the device (or, on CPU, host) timeline.

Per rank and step: the step's span on the device runs from its first task's start to its last
task's end (how the profiler defines its ``Stage``); inside it, computing is the union of compute
kernels, communication the union of communication ops, exposed communication the part of it not
covered by compute, and free the part of the span covered by neither. Bubble is the time in
pipeline receives (``hcom_receive``). Preparing is the host time from the step marker to the
first device task.

Identities (tested with hypothesis): computing + exposed + free == total; overlapped ==
communication - exposed; every part lies in [0, total].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from msdiag import intervals as iv
from msdiag.metrics.registry import Reads, declare_reads
from msdiag.model import FLOAT, INT, STEPS, STR, RankData, Rows, active_task, const_texts, entry, frame_of, rows_of

_RECEIVE = ("receive", "recv")


def _window_parts(comp: iv.Grouped, comm: iv.Grouped, bubble: iv.Grouped, lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
    """Each window's parts (window i: [lo[i], hi[i]]; the intervals' window numbers in msdiag/intervals.py's grouped
    form): computing, communication, exposed and overlapped communication, free and bubble time, each an array over the
    windows. Each set is clipped and merged once per window (a merged set merges to itself, so its length and
    difference need no second merge: iv.group_lengths, iv.subtract_merged_groups), each figure the one-window
    computation's to the bit (tests/test_intervals.py)."""
    n = len(lo)
    comp_c = iv.merge_groups(iv.clip_groups(comp, lo, hi))
    comm_c = iv.merge_groups(iv.clip_groups(comm, lo, hi))
    exposed = iv.subtract_merged_groups(comm_c, comp_c)
    busy = iv.merge_groups(iv.concat_groups(comp_c, comm_c))
    total = hi - lo
    communication = iv.group_lengths(comm_c, n)
    exposed_us = iv.group_lengths(exposed, n)
    free = total - iv.group_lengths(busy, n)
    return {
        "start_us": lo,
        "end_us": hi,
        "total_us": total,
        "computing_us": iv.group_lengths(comp_c, n),
        "communication_us": communication,
        "communication_exposed_us": exposed_us,
        "overlapped_us": communication - exposed_us,
        "free_us": np.where(free > 0.0, free, 0.0),  # (max(0.0, x))
        "bubble_us": iv.group_lengths(iv.merge_groups(iv.clip_groups(bubble, lo, hi)), n),
    }


def _device_ops(rd: RankData) -> tuple[pd.DataFrame, str]:
    """The device tasks of a rank with their kind and step: from kernels, else from the timeline."""
    k = rd.tables.get("kernels")
    if k is not None and len(k):
        return k, "kernels"  # (its columns step, name, kind, start_us and dur_us read by name: no copy of them)
    tl = rd.tables.get("timeline")
    dev = tl[tl["lane"].isin(["device", "hccl"])] if tl is not None else None
    if dev is not None and len(dev):
        out = pd.DataFrame(
            {
                "step": pd.array([pd.NA] * len(dev), dtype="Int64"),
                "name": dev["name"].to_numpy(),
                "kind": np.where(dev["lane"].to_numpy() == "hccl", "communication", "compute"),
                "start_us": dev["start_us"].to_numpy(),
                "dur_us": dev["dur_us"].to_numpy(),
            }
        )
        return out, "timeline"
    return pd.DataFrame(columns=["step", "name", "kind", "start_us", "dur_us"]), "none"


def _comm_from_timeline(rd: RankData) -> pd.DataFrame | None:
    tl = rd.tables.get("timeline")
    return tl[tl["lane"] == "hccl"] if tl is not None else None


# Host events that are a step waiting on its input pipeline (MindSpore, torch_npu, msdiag capture).
DATA_WAIT_PATTERN = r"GetNext|enumerate\(DataLoader\)|dataset_iterator|Dataset::|msdiag::data_wait"
# A repetition-found step structure is trusted when the op counts per step vary less than this.
REPETITION_TOLERANCE = 0.1

# What the step breakdown reads of a rank (metrics/reduce.py keeps it): the device and HCCL lanes (also
# the report's step timeline), the step markers and, of the host lane, the data waits. The reduction runs
# the breakdown first; these reads let it run again on a reduced rank with the same result.
declare_reads(
    "breakdown.step_breakdown",
    Reads(tables=("timeline", "kernels"), lanes=("device", "hccl", "step"), lane_rows=(("host", DATA_WAIT_PATTERN),)),
)


@dataclass
class Window:
    step: int | None
    lo: float
    hi: float
    rows: np.ndarray  # the row positions of the step's ops, ascending (not a mask: k steps x n ops of masks
    # are gigabytes on a long host trace)


def _lane(tl: pd.DataFrame, lane: str) -> np.ndarray:
    """The rows of ``lane`` (a null lane is none): a mask, so that only the columns read are cut, not the timeline."""
    return (tl["lane"] == lane).fillna(False).to_numpy(bool)


def _marker_steps(rd: RankData) -> dict[int, tuple[float, float]]:
    tl = rd.tables.get("timeline")
    if tl is None or not len(tl):  # (a rank read without its trace)
        return {}
    at = _lane(tl, "step")
    out: dict[int, tuple[float, float]] = {}
    names, starts, durs = tl["name"][at].to_numpy(), tl["start_us"].to_numpy(float)[at], tl["dur_us"].to_numpy(float)[at]
    for name, start, dur in zip(names, starts, durs):
        try:
            out[int(str(name).rsplit("#", 1)[1])] = (start, start + dur)
        except (IndexError, ValueError):
            continue
    return out


def _repetition_windows(ops: pd.DataFrame, all_ends: np.ndarray) -> tuple[list[Window], str] | None:
    """Steps from the structure of a host timeline: the op sequence that repeats once per step.

    The step count k is the most common number of launches per op name. When the launches split
    into k equal runs whose op names repeat position by position, each run is a step (its start is
    the step's start). Otherwise the op launched exactly k times that starts first anchors the
    steps, and the split is kept only when every step holds about as many launches.
    """
    order = np.argsort(ops["start_us"].to_numpy(float), kind="stable")
    names = ops["name"].to_numpy()[order]
    starts = ops["start_us"].to_numpy(float)[order]
    ends = all_ends[order]
    counts = pd.Series(names).value_counts()
    if not len(counts):
        return None
    k = int(counts.value_counts().idxmax())
    if k < 2:
        return None
    n = len(names)
    period = n // k
    if n == k * period and np.mean(names[:-period] == names[period:]) >= 1 - REPETITION_TOLERANCE:
        lo = starts[::period][:k]
        how = f"repeating iterations: the same {period} ops repeat {k} times (steps numbered in capture order)"
    else:
        once = set(counts[counts == k].index)
        anchor = next(nm for nm in names if nm in once)
        lo = starts[names == anchor]
        how = f"repeating iterations: op {anchor} runs once per step ({k} steps, numbered in capture order)"
    bounds = np.append(lo, ends.max())
    idx = np.searchsorted(bounds, starts, side="right") - 1
    per_step = np.bincount(idx[idx >= 0], minlength=k)[:k]
    if per_step.min() <= 0 or (per_step.max() - per_step.min()) > REPETITION_TOLERANCE * per_step.mean():
        return None
    rows = _rows_by_step(idx[np.argsort(order, kind="stable")], k)  # idx in the caller's row order
    wins = [Window(i + 1, float(bounds[i]), float(bounds[i + 1]), rows[i]) for i in range(k)]
    return wins, how


def _ends(starts: np.ndarray, durs: np.ndarray) -> np.ndarray:
    """Where each op ends, for bounding steps: an op whose duration was left out as impossible
    (ingest/bounds.py) ends where it starts; it adds no interval to any part."""
    return starts + np.nan_to_num(durs, nan=0.0)


def _rows_by_step(step_of: np.ndarray, k: int) -> list[np.ndarray]:
    """For each step 0..k-1, the ascending row positions whose ``step_of`` is it (one sort, not k scans)."""
    order = np.argsort(step_of, kind="stable")
    cuts = np.searchsorted(step_of[order], np.arange(k + 1))
    return [order[cuts[i] : cuts[i + 1]] for i in range(k)]


def _windows(d: DeviceOps, markers: dict[int, tuple[float, float]]) -> tuple[list[Window], str]:
    ops, starts = d.frame, d.starts
    ends = _ends(starts, d.durs)
    steps = ops["step"].array  # (the array: its methods without a Series' cost each)
    none = np.asarray(steps.isna(), dtype=bool)
    if not none.all():
        numbers = steps.to_numpy(np.int64, na_value=0)
        ids = np.unique(numbers[~none])  # the step ids, ascending
        pos = np.searchsorted(ids, numbers)
        pos[none] = len(ids)  # rows without a step belong to none
        wins = [
            Window(int(step), float(starts[rows].min()), float(ends[rows].max()), rows)
            for step, rows in zip(ids, _rows_by_step(pos, len(ids)))
        ]
        return wins, "the kernels' Step Id"
    if markers:
        wins = []
        for step, (lo, hi) in sorted(markers.items()):
            rows = np.flatnonzero((starts >= lo) & (starts < hi))
            if len(rows):
                wins.append(Window(step, lo, hi, rows))
        if wins:
            return wins, "ProfilerStep#N markers"
    if d.host_ops:
        found = _repetition_windows(ops, ends)
        if found:
            return found
    everything = np.arange(len(ops))
    return [Window(None, float(starts.min()), float(ends.max()), everything)], (
        "no step markers and no repeating structure: one row covers the capture"
    )


@dataclass
class DeviceOps:
    """A rank's device ops that have a start (an op without one cannot be placed; one without a duration still
    marks its step: bounds.py), read once as the arrays the breakdown and the projection cut by step."""

    frame: pd.DataFrame  # the placed ops (columns step, name, kind, start_us, dur_us)
    src: str  # where they come from (_device_ops): "kernels", "timeline" or "none"
    host_ops: bool  # every kernel on the CPU: steps may then be found from their repeating structure
    starts: np.ndarray
    durs: np.ndarray  # (NaN: no duration)
    is_comm: np.ndarray  # kind "communication"
    is_comp: np.ndarray  # kind "compute"

    def __len__(self) -> int:
        return len(self.starts)

    def receives(self) -> np.ndarray:
        """Which ops are pipeline receives (:func:`_receives` of their names)."""
        return _receives(self.frame["name"])


def placed_ops(rd: RankData) -> DeviceOps:
    """The rank's placed device ops (:class:`DeviceOps`)."""
    ops, src = _device_ops(rd)
    starts = ops["start_us"].to_numpy(float, na_value=np.nan)
    placed = ~np.isnan(starts)
    if not placed.all():
        ops = ops[placed].reset_index(drop=True)
        starts = starts[placed]
    k = rd.tables.get("kernels")
    host_ops = src == "kernels" and k is not None and len(k) > 0 and _all_cpu(k["core"])
    kind = ops["kind"]
    return DeviceOps(ops, src, host_ops, starts, ops["dur_us"].to_numpy(float, na_value=np.nan),
                     _text_is(kind, "communication"), _text_is(kind, "compute"))


def _text_is(col: pd.Series, value: str) -> np.ndarray:
    """Booleans: the column's text is ``value`` (null: False). In Arrow where the texts are Arrow's (one pass, no
    Python object per row), else ``col.to_numpy() == value`` as before."""
    arr = col.array
    if isinstance(arr, pd.arrays.ArrowStringArray):
        return np.asarray(pc.fill_null(pc.equal(pa.array(arr), value), False), dtype=bool)
    return np.asarray(col.to_numpy() == value, dtype=bool)


def _all_cpu(core: pd.Series) -> bool:
    """``(core == "CPU").all()`` (nulls skipped), False at once where the first core is another text."""
    first = core.iloc[0]
    if isinstance(first, str) and first != "CPU":
        return False
    return bool((core == "CPU").all())


def _data_waits(tl: pd.DataFrame | None) -> tuple[int, iv.Intervals]:
    """The count of the host lane's data waits (DATA_WAIT_PATTERN) and their intervals (``tl``: the timeline, None
    where the rank has none)."""
    is_host = _lane(tl, "host") if tl is not None and len(tl) else None
    if tl is None or is_host is None or not is_host.any():  # (a rank read without its trace: none)
        return 0, iv.make(np.zeros(0), np.zeros(0))
    host_names = tl["name"][is_host]
    names = pd.Series(host_names.dropna().unique()).astype("string")  # distinct names: cheap on big traces
    wait_names = set(names[names.str.contains(DATA_WAIT_PATTERN, regex=True, na=False)])
    is_wait = is_host.copy()
    is_wait[is_host] = host_names.isin(wait_names).fillna(False).to_numpy(bool)
    return int(is_wait.sum()), iv.make(tl["start_us"].to_numpy(float)[is_wait], tl["dur_us"].to_numpy(float)[is_wait])


def _receives(names: pd.Series) -> np.ndarray:
    """Booleans: the op's name, lower-cased, holds one of _RECEIVE (null: False). In Arrow where the names
    are Arrow texts (what pandas' string methods do there, without their per-call cost)."""
    pattern = "|".join(_RECEIVE)
    arr = names.array
    if isinstance(arr, pd.arrays.ArrowStringArray):
        hit = pc.match_substring_regex(pc.utf8_lower(pa.array(arr)), pattern)
        return np.asarray(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), dtype=bool)
    return names.astype("string").str.lower().str.contains(pattern, regex=True, na=False).to_numpy(bool)


def step_breakdown(rd: RankData) -> pd.DataFrame:
    """One STEPS row per step of the rank, computed from its timeline.

    How the steps were found is recorded in ``rd.info.steps_from``.
    """
    return frame_of(step_rows(rd))


def step_rows(rd: RankData) -> pd.DataFrame | Rows:
    """:func:`step_breakdown`, held as the :class:`model.Rows` of its pool task's step frame where it was computed for
    the task's ranks at once (:func:`_from_task`: cut only if read; a task's ranks are stored and sent back as that
    frame, model.concat_alike), else the rank's frame."""
    got = _from_task(rd)
    if got is not None:
        return got
    return _step_breakdown(rd)


def _step_breakdown(rd: RankData) -> pd.DataFrame:
    ops = placed_ops(rd)
    if not len(ops):
        return STEPS.empty()
    src, host_ops, is_comm, is_comp = ops.src, ops.host_ops, ops.is_comm, ops.is_comp
    # Communication from the HCCL lane when the kernel table carries none (older kernel_details)
    extra_comm = _comm_from_timeline(rd) if src == "kernels" and not is_comm.any() else None
    markers = _marker_steps(rd)
    windows, how = _windows(ops, markers)
    rd.info.steps_from = how

    n_waits, wait_iv = _data_waits(rd.tables.get("timeline"))
    # every window's ops laid end to end, each with its window's number (a row in two windows is there twice)
    at = np.concatenate([w.rows for w in windows])
    g = np.repeat(np.arange(len(windows)), [len(w.rows) for w in windows])
    s, d = ops.starts[at], ops.durs[at]
    lo = np.array([w.lo for w in windows], dtype=float)
    hi = np.array([w.hi for w in windows], dtype=float)
    comm = iv.make_groups(s, d, g, is_comm[at])
    if extra_comm is not None and len(extra_comm):  # the HCCL lane's ops, clipped to each window, after its own
        es, ee = iv.make(extra_comm["start_us"].to_numpy(float), extra_comm["dur_us"].to_numpy(float))
        each = (np.tile(es, len(windows)), np.tile(ee, len(windows)), np.repeat(np.arange(len(windows)), len(es)))
        comm = iv.concat_groups(comm, iv.clip_groups(each, lo, hi))
    parts = _window_parts(iv.make_groups(s, d, g, is_comp[at]), comm, iv.make_groups(s, d, g, is_comm[at] & ops.receives()[at]), lo, hi)
    rows = []
    for i, w in enumerate(windows):
        r: dict[str, object] = {k: float(v[i]) for k, v in parts.items()}
        r["rank"] = rd.rank
        r["step"] = w.step
        r["stage_us"] = float(r["total_us"]) - float(r["bubble_us"])  # type: ignore[arg-type]
        if w.step is not None and w.step in markers and not host_ops:
            r["preparing_us"] = max(0.0, w.lo - markers[w.step][0])
        host_lo, host_hi = markers.get(w.step, (w.lo, w.hi)) if w.step is not None else (w.lo, w.hi)
        if n_waits:
            r["data_wait_us"] = iv.total(iv.clip(wait_iv, host_lo, host_hi))
        r["source"] = f"timeline ({src})"
        rows.append(r)
    return _steps_frame(rows)


_TASK_KEY = "breakdown.steps"
_BY_STEP_ID = "the kernels' Step Id"


def _from_task(rd: RankData) -> Rows | None:
    """The rank's step rows as computed for every rank of its pool task at once (:func:`_task_steps`), where the rank
    is read without a timeline and its kernels are still the slice of the task's bulk read of kernel_details.csv
    (``model.active_task``); None otherwise (computed for the rank alone)."""
    scope = active_task()
    if scope is None or "kernels" not in rd.tables:
        return None
    tl = entry(rd.tables, "timeline") if "timeline" in rd.tables else None
    if tl is not None and len(tl):
        return None
    k = entry(rd.tables, "kernels")
    found = scope.whole_of(k)  # (the bulk read's Rows of the rank, as held: model.cut_rows)
    if found is None:
        return None
    memo: dict[int, dict[int, tuple[Any, int]]] = scope.memo.setdefault(_TASK_KEY, {})
    done = memo.get(id(found[0]))
    if done is None:
        done = memo[id(found[0])] = _task_steps(*found)
        if done:  # the ranks' step rows are slices of one frame: stored and sent back as it is (model.concat_alike)
            scope.cuts.append((done[_WHOLE][0], [f for key, (f, _) in done.items() if key != _WHOLE]))
    hit = done.get(id(k))
    if hit is None or hit[1] != rd.rank:
        return None
    rd.info.steps_from = _BY_STEP_ID
    return hit[0]  # type: ignore[no-any-return]


_WHOLE = -1  # (the key of _task_steps' whole frame)


def _task_steps(whole: pd.DataFrame, parts: list[pd.DataFrame]) -> dict[int, tuple[Any, int]]:
    """Step rows of every part of ``whole`` (the kernels of a pool task's ranks, each part a rank's, in order) whose
    placed kernels carry a Step Id: id(part) -> (its STEPS frame, its rank), the frames row slices of one frame (at
    :data:`_WHOLE`: (that frame, -1)). Each part's rows are what :func:`step_breakdown` computes for the rank alone
    (no timeline: no markers, data waits or HCCL lane; windows from the Step Id), to the bit: the windows of all the
    parts are cut at once and their interval sets merged, clipped and subtracted window by window by the grouped
    functions of msdiag/intervals.py, each figure summed over its window's own slice (tests/test_breakdown.py)."""
    if not len(whole) or not {"rank", "step", "kind", "start_us", "dur_us", "name"} <= set(whole.columns):
        return {}
    starts = whole["start_us"].to_numpy(float, na_value=np.nan)
    durs = whole["dur_us"].to_numpy(float, na_value=np.nan)
    steps = whole["step"].array
    none = np.asarray(steps.isna(), dtype=bool)
    numbers = steps.to_numpy(np.int64, na_value=0)
    ranks = whole["rank"].array
    if np.asarray(ranks.isna(), dtype=bool).any():
        return {}
    rank_of = ranks.to_numpy(np.int64)
    kind = whole["kind"]
    is_comm, is_comp = _text_is(kind, "communication"), _text_is(kind, "compute")
    recv = _receives(whole["name"])
    placed = ~np.isnan(starts)
    # the parts taken: each with a placed kernel that carries a Step Id (else the rank's own read finds its steps)
    bounds, lo = [], 0
    for p in parts:
        hi = lo + len(p)
        if hi > lo and (placed[lo:hi] & ~none[lo:hi]).any() and (rank_of[lo:hi] == rank_of[lo]).all():
            bounds.append((p, lo, hi))
        lo = hi
    if not bounds:
        return {}
    part_of = np.full(len(whole), -1, dtype=np.int64)
    for i, (_, a, b) in enumerate(bounds):
        part_of[a:b] = i
    rows = np.flatnonzero((part_of >= 0) & placed & ~none)  # a row of no step belongs to no window
    # windows: (part, step id) ascending; within one, the rows in their order (the rank's _rows_by_step)
    order = np.lexsort((numbers[rows], part_of[rows]))
    rows = rows[order]
    key_part, key_step = part_of[rows], numbers[rows]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = (key_part[1:] != key_part[:-1]) | (key_step[1:] != key_step[:-1])
    at = np.flatnonzero(first)
    n_win = len(at)
    win = np.cumsum(first) - 1  # each row's window
    s, d = starts[rows], durs[rows]
    ends = _ends(s, d)
    w_lo = np.minimum.reduceat(s, at)
    w_hi = np.maximum.reduceat(ends, at)
    cm = is_comm[rows]
    figures = _window_parts(iv.make_groups(s, d, win, is_comp[rows]), iv.make_groups(s, d, win, cm),
                            iv.make_groups(s, d, win, cm & recv[rows]), w_lo, w_hi)
    win_part = key_part[at]
    cols: dict[str, object] = {
        **figures,
        "rank": pd.arrays.IntegerArray(rank_of[rows][at], np.zeros(n_win, dtype=bool)),
        "step": pd.arrays.IntegerArray(key_step[at], np.zeros(n_win, dtype=bool)),
        "stage_us": figures["total_us"] - figures["bubble_us"],
        "source": const_texts(n_win, "timeline (kernels)"),
    }
    steps_whole = STEPS.frame(cols)
    counts = np.bincount(win_part, minlength=len(bounds))
    out: dict[int, tuple[Any, int]] = {_WHOLE: (steps_whole, -1)}
    for (p, a, _), held in zip(bounds, rows_of(steps_whole, counts.tolist())):  # (Rows: cut only if read)
        out[id(p)] = (held, int(rank_of[a]))
    return out


def _steps_frame(rows: list[dict[str, object]]) -> pd.DataFrame:
    """``STEPS.frame(pd.DataFrame(rows))``, each column built from the rows' values as an array of its dtype (a
    frame of the dicts, then each column converted, cost a rank's breakdown more than its intervals); a value of
    another kind than its column's (floats; ints or None; str) leaves it to pandas as before."""
    if not rows:
        return STEPS.frame(pd.DataFrame(rows))
    names = dict.fromkeys(k for r in rows for k in r)
    cols: dict[str, object] = {}
    for c in names:
        dtype = STEPS.columns.get(c)
        values = [r.get(c) for r in rows]
        kinds = set(map(type, values))
        if dtype == FLOAT and kinds <= {float, np.float64, type(None)}:
            cols[c] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        elif dtype == INT and kinds == {int}:  # (what pd.array(values, dtype=INT) gives, without its inference)
            cols[c] = pd.arrays.IntegerArray(np.array(values, dtype=np.int64), np.zeros(len(values), dtype=bool))
        elif dtype == INT and kinds <= {int, type(None)}:
            cols[c] = pd.array(values, dtype=INT)
        elif dtype == STR and kinds == {str}:
            one = values[0]
            same = all(v == one for v in values)
            cols[c] = const_texts(len(values), str(one)) if same else pd.array(np.array(values, dtype=object), dtype=STR)
        else:
            return STEPS.frame(pd.DataFrame(rows))
    return STEPS.frame(cols)
