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

import numpy as np
import pandas as pd

from msdiag.metrics import intervals as iv
from msdiag.model import STEPS, RankData

_RECEIVE = ("receive", "recv")


def _parts(comp: iv.Intervals, comm: iv.Intervals, bubble: iv.Intervals, lo: float, hi: float) -> dict[str, float]:
    comp_c = iv.merge(iv.clip(comp, lo, hi))
    comm_c = iv.merge(iv.clip(comm, lo, hi))
    exposed = iv.subtract(comm_c, comp_c)
    busy = iv.merge((np.concatenate([comp_c[0], comm_c[0]]), np.concatenate([comp_c[1], comm_c[1]])))
    total = hi - lo
    computing = iv.total(comp_c)
    communication = iv.total(comm_c)
    exposed_us = iv.total(exposed)
    free = max(0.0, total - iv.total(busy))
    return {
        "start_us": lo,
        "end_us": hi,
        "total_us": total,
        "computing_us": computing,
        "communication_us": communication,
        "communication_exposed_us": exposed_us,
        "overlapped_us": communication - exposed_us,
        "free_us": free,
        "bubble_us": iv.total(iv.clip(bubble, lo, hi)),
    }


def _device_ops(rd: RankData) -> tuple[pd.DataFrame, str]:
    """The device tasks of a rank with their kind and step: from kernels, else from the timeline."""
    k = rd.table("kernels")
    if len(k):
        return k[["step", "name", "kind", "start_us", "dur_us"]], "kernels"
    tl = rd.table("timeline")
    dev = tl[tl["lane"].isin(["device", "hccl"])]
    if len(dev):
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


def _comm_from_timeline(rd: RankData) -> pd.DataFrame:
    tl = rd.table("timeline")
    return tl[tl["lane"] == "hccl"]


def step_breakdown(rd: RankData) -> pd.DataFrame:
    """One STEPS row per step of the rank, computed from its timeline."""
    ops, src = _device_ops(rd)
    if not len(ops):
        return STEPS.empty()
    ops = ops[ops["dur_us"].notna() & ops["start_us"].notna()]
    comm_mask = ops["kind"].to_numpy() == "communication"
    # Communication from the HCCL lane when the kernel table carries none (older kernel_details)
    extra_comm = _comm_from_timeline(rd) if src == "kernels" and not comm_mask.any() else None

    markers = rd.table("timeline")
    markers = markers[markers["lane"] == "step"]
    marker_start = {}
    for name, start in zip(markers["name"].to_numpy(), markers["start_us"].to_numpy()):
        try:
            marker_start[int(str(name).rsplit("#", 1)[1])] = float(start)
        except (IndexError, ValueError):
            continue

    rows = []
    steps = ops["step"]
    keys: list[object] = sorted(int(s) for s in steps.dropna().unique()) if steps.notna().any() else [None]
    for step in keys:
        # tasks without a step id (outside every step window) belong to no step row
        sel = ops[(steps == step).fillna(False).to_numpy(bool)] if step is not None else ops
        starts = sel["start_us"].to_numpy(dtype=float)
        durs = sel["dur_us"].to_numpy(dtype=float)
        kind = sel["kind"].to_numpy()
        is_comm = kind == "communication"
        is_comp = kind == "compute"
        comp = iv.make(starts[is_comp], durs[is_comp])
        comm = iv.make(starts[is_comm], durs[is_comm])
        lo = float(np.min(starts))
        hi = float(np.max(starts + durs))
        if extra_comm is not None and len(extra_comm):
            c = iv.clip(iv.make(extra_comm["start_us"].to_numpy(float), extra_comm["dur_us"].to_numpy(float)), lo, hi)
            comm = (np.concatenate([comm[0], c[0]]), np.concatenate([comm[1], c[1]]))
        names = sel["name"].astype("string").str.lower()
        recv = names.str.contains("|".join(_RECEIVE), regex=True, na=False).to_numpy() & is_comm
        bubble = iv.make(starts[recv], durs[recv])
        r = _parts(comp, comm, bubble, lo, hi)
        r["rank"] = rd.rank
        r["step"] = step
        r["stage_us"] = r["total_us"] - r["bubble_us"]
        if step is not None and step in marker_start:
            r["preparing_us"] = max(0.0, lo - marker_start[step])
        r["source"] = f"timeline ({src})"
        rows.append(r)
    return STEPS.frame(pd.DataFrame(rows))
