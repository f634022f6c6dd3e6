"""Benchmark of msdiag on large clusters built from a real capture, with one slow rank planted (not run by CI).

The job is built from a real torch_npu rank (ascend/torchnpu-2rank-level1, rank 1: the rank its peer
waited for, so the copies start in step with each other) under a temporary folder:

- every rank is a full copy of the rank's files, ``rank<N>_ascend_pt/`` with ``profiler_info_<N>.json``
  renumbered (rank_id) and ``profiler_metadata.json`` given a Megatron layout (distributed_args:
  tp x pp x dp) and its parallel groups (parallel_group_info), whose world group's hash is the one
  written after '@' in every communication op key;
- the capture's step is repeated ``--steps`` times (ProfilerStep#N, kernel_details' Step Id and the
  communication files' step keys renumbered), so that each rank holds several steps;
- every timestamp of a rank (trace_view.json, kernel_details.csv, communication.json) goes through
  one monotone time warp: the rank's compute kernels take ``g`` times their duration (``g`` = 1 +/- a
  small jitter, ``--slow-factor`` on the slow rank), each collective ends for everyone when the last
  rank gets there, so the others' collectives grow by the time they waited (communication.json:
  elapse, wait and synchronization grow by it; the late rank's do not) and the late rank's own
  compute inside a collective shows as idle; step_trace_time.csv is recomputed from the warped
  kernels; a per-rank clock offset of a few microseconds is added;
- communication_matrix.json: links renumbered to global ranks (8 ranks per node, the capture's own
  node-local peers), and one link planted slow (its transit time x ``--slow-link-factor``).

The answer is therefore known: ``slow_rank`` must be the planted rank, ``slow_link`` the planted link.
Why the slow factor is 3 by default: in this capture the first allreduce of a step lasts ~73 ms (it is
launched early and idles until backward is done) and the compute before it is ~2.5 ms, so a rank is
a late arriver by msdiag's rule (5% of the op's elapse, ~3.7 ms) only when its compute is ~2.5x slower.

Measured (peak memory: the proportional set size (PSS) summed over the process tree, sampled from
/proc every 50 ms, and never below the largest single process's ru_maxrss; the RSS sum, which counts
the pages forked workers share with their parent once per process, is recorded too):
  msdiag analyze --format json, cold (fresh cache: parse and store) and warm (cache read);
  msprof-analyze 26.2 ``cluster -m all`` and ``advisor all`` on the same folder, when installed in a
  separate venv (``--msprof-venv``; ``--install-msprof`` creates it with pip). Errors are recorded.

Usage:
  python bench/cluster.py --ranks 8 64                 # build, measure, delete
  python bench/cluster.py --ranks 512 --keep --out /tmp/msdiag-cluster
  python bench/cluster.py --ranks 64 --no-msprof --json results.json
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CORPUS = Path(os.environ.get("MSDIAG_CORPUS", REPO.parent / "shared" / "corpus"))
SOURCE = CORPUS / "ascend" / "torchnpu-2rank-level1" / "rank1_ascend_pt"
TEMPLATE_RANK = 1
RANKS_PER_NODE = 8
GAP_US = 1000.0  # idle time between two copies of the capture
TOL_US = 1.0  # an event end within this of a collective's end is that collective's end
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
OP_KEY = re.compile(r"^(.*)@(\d+)$")
WORLD_GROUP_ID = "10.0.0.1%enp189s0f1_60000_0_1738895486152654"  # its hash replaces the capture's
COPIED = ("api_statistic.csv", "l2_cache.csv", "memory_record.csv", "npu_module_mem.csv", "op_statistic.csv",
          "operator_details.csv", "operator_memory.csv")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# time helpers: timestamps are handled relative to an integer base, exactly as written (3 decimals)


def _rel(v: Any, base: int) -> float:
    """A timestamp written as a string ('1736408883732241.564') or a number, relative to ``base``."""
    if isinstance(v, str):
        s = v.strip()
        head, _, frac = s.partition(".")
        return (int(head) - base) + (float("0." + frac) if frac else 0.0)
    return float(v) - base


def _fmt(rel: np.ndarray, base: int) -> list[str]:
    """Relative times back to absolute strings with 3 decimals (ns), as the profiler writes them."""
    ms = np.round(np.asarray(rel, dtype=float) * 1000.0).astype(np.int64)
    ip, frac = np.divmod(ms, 1000)
    return [f"{base + int(i)}.{int(f):03d}" for i, f in zip(ip, frac)]


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not len(starts):
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    out_s, out_e = [s[0]], [e[0]]
    for a, b in zip(s[1:], e[1:]):
        if a <= out_e[-1]:
            out_e[-1] = max(out_e[-1], b)
        else:
            out_s.append(a)
            out_e.append(b)
    return np.array(out_s), np.array(out_e)


def _length(s: np.ndarray, e: np.ndarray) -> float:
    return float((e - s).sum()) if len(s) else 0.0


def _clip(s: np.ndarray, e: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    s2, e2 = np.maximum(s, lo), np.minimum(e, hi)
    k = e2 > s2
    return s2[k], e2[k]


def _intersect(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    tot = 0.0
    for s, e in zip(*a):
        cs, ce = _clip(b[0], b[1], s, e)
        tot += _length(cs, ce)
    return tot


# ---------------------------------------------------------------------------------------------
# the template: one real rank, its step repeated ``steps`` times


class Template:
    """The source rank's files, parsed once, with the step repeated; times relative to ``base``."""

    def __init__(self, src: Path, steps: int):
        apo = src / "ASCEND_PROFILER_OUTPUT"
        raw = msgspec.json.decode((apo / "trace_view.json").read_bytes())
        events: list[dict[str, Any]] = raw["traceEvents"] if isinstance(raw, dict) else raw
        self.meta_events = [e for e in events if e.get("ph") == "M"]
        body = [e for e in events if e.get("ph") != "M" and "ts" in e]
        self.base = int(min(float(e["ts"]) for e in body)) - 1
        ts = np.array([_rel(e["ts"], self.base) for e in body])
        dur = np.array([float(e["dur"]) if isinstance(e.get("dur"), (int, float)) else np.nan for e in body])
        span = float(np.nanmax(np.where(np.isnan(dur), ts, ts + dur)) - ts.min())
        self.period = math.ceil(span + GAP_US)

        # kernel_details.csv
        with open(apo / "kernel_details.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        self.k_head = rows[0]
        h = {c.strip(): i for i, c in enumerate(self.k_head)}
        self.k_start, self.k_dur, self.k_step = h["Start Time(us)"], h["Duration(us)"], h["Step Id"]
        self.k_core, self.k_type = h["Accelerator Core"], h["Type"]
        k_rows = rows[1:]
        k_ts = np.array([_rel(r[self.k_start], self.base) for r in k_rows])
        k_du = np.array([float(r[self.k_dur]) for r in k_rows])
        k_comm = np.array([r[self.k_core].strip() == "HCCL" or r[self.k_type].startswith("hcom") for r in k_rows])
        self.step0 = int(k_rows[0][self.k_step])

        comm = json.loads((apo / "communication.json").read_text())
        matrix = json.loads((apo / "communication_matrix.json").read_text())
        self.comm_step = next(iter(comm))
        self.matrix_step = next(iter(matrix))
        ops = dict(comm[self.comm_step]["collective"])
        self.total = ops.pop("Total Op Info", None)  # the sum over ops, rewritten per step
        self.ops = sorted(ops.items(), key=lambda kv: kv[1]["Communication Time Info"]["Start Timestamp(us)"])
        self.p2p = comm[self.comm_step].get("p2p", {})
        self.matrix = matrix[self.matrix_step]
        c0 = np.array([float(v["Communication Time Info"]["Start Timestamp(us)"]) - self.base for _, v in self.ops])
        e0 = c0 + np.array([float(v["Communication Time Info"]["Elapse Time(ms)"]) * 1000.0 for _, v in self.ops])

        # repeat everything ``steps`` times
        self.steps = steps
        shifts = np.arange(steps) * self.period
        self.body = body
        self.ts = np.concatenate([ts + s for s in shifts])
        self.dur = np.tile(dur, steps)
        self.k_rows = k_rows
        self.k_ts = np.concatenate([k_ts + s for s in shifts])
        self.k_du = np.tile(k_du, steps)
        self.k_comm = np.tile(k_comm, steps)
        self.c = np.concatenate([c0 + s for s in shifts])
        self.e = np.concatenate([e0 + s for s in shifts])
        # C(t): compute (union of compute kernels) before t, piecewise linear
        us, ue = _union(self.k_ts[~self.k_comm], (self.k_ts + self.k_du)[~self.k_comm])
        self.cx = np.ravel(np.column_stack([us, ue]))
        lens = ue - us
        before = np.concatenate([[0.0], np.cumsum(lens)[:-1]])
        self.cy = np.ravel(np.column_stack([before, before + lens]))
        self.other = {n: (apo / n).read_bytes() for n in COPIED if (apo / n).exists()}
        self.info = json.loads(next(src.glob("profiler_info_*.json")).read_text())
        self.metadata = json.loads((src / "profiler_metadata.json").read_text())

    def C(self, t: np.ndarray) -> np.ndarray:
        return np.interp(t, self.cx, self.cy)


def deltas(t: Template, g_max: float) -> np.ndarray:
    """Delta_i: how much later than in the capture collective i ends for everyone (the slowest rank's lateness)."""
    ce = t.C(t.e)
    prev = np.concatenate([[0.0], ce[:-1]])
    return np.cumsum((g_max - 1.0) * (ce - prev))


class Warp:
    """The time warp of one rank (module doc): compute stretched by ``g``, collectives end at e_i + Delta_i."""

    def __init__(self, t: Template, g: float, delta: np.ndarray, offset: float):
        self.t, self.g, self.delta, self.offset = t, g, delta, offset
        self.ce, self.cc = t.C(t.e), t.C(t.c)
        prev_ce = np.concatenate([[0.0], self.ce[:-1]])
        prev_d = np.concatenate([[0.0], delta[:-1]])
        self.arrive = prev_d + (g - 1.0) * (self.cc - prev_ce)  # a_i: how late this rank reaches collective i

    def __call__(self, x: np.ndarray) -> np.ndarray:
        t, g = self.t, self.g
        x = np.asarray(x, dtype=float)
        cx = t.C(x)
        n = len(t.e)
        i = np.searchsorted(t.e - TOL_US, x, side="right")  # collectives ended at or before x
        j = np.minimum(i, n - 1)
        inside = (i < n) & (x >= t.c[j] - TOL_US)
        prev_d = np.where(i > 0, self.delta[np.maximum(i - 1, 0)], 0.0)
        prev_ce = np.where(i > 0, self.ce[np.maximum(i - 1, 0)], 0.0)
        pre = x + prev_d + (g - 1.0) * (cx - prev_ce)
        ins = x + self.arrive[j] + (g - 1.0) * (cx - self.cc[j])
        return np.where(inside, ins, pre) + self.offset


# ---------------------------------------------------------------------------------------------
# one rank


def _layout(n: int) -> dict[str, int]:
    if n <= 8:
        tp, pp = 2, 2
    else:
        tp, pp = 8, 4
    return {"tp": tp, "pp": pp, "dp": max(n // (tp * pp), 1)}


def _groups(rank: int, n: int) -> dict[str, Any]:
    """parallel_group_info of ``rank``: the world group (the ops' group) and its tp / dp / pp groups."""
    lay = _layout(n)
    tp, pp, dp = lay["tp"], lay["pp"], lay["dp"]
    tp_i, dp_i, pp_i = rank % tp, (rank // tp) % dp, rank // (tp * dp)
    groups = {
        WORLD_GROUP_ID: {"group_name": "default_group", "group_rank": rank, "global_ranks": list(range(n))},
        f"10.0.0.1%enp189s0f1_60000_{rank}_tp{pp_i}_{dp_i}": {
            "group_name": "tp", "group_rank": tp_i, "global_ranks": [pp_i * tp * dp + dp_i * tp + k for k in range(tp)]},
        f"10.0.0.1%enp189s0f1_60000_{rank}_dp{pp_i}_{tp_i}": {
            "group_name": "dp", "group_rank": dp_i, "global_ranks": [pp_i * tp * dp + k * tp + tp_i for k in range(dp)]},
        f"10.0.0.1%enp189s0f1_60000_{rank}_pp{dp_i}_{tp_i}": {
            "group_name": "pp", "group_rank": pp_i, "global_ranks": [k * tp * dp + dp_i * tp + tp_i for k in range(pp)]},
    }  # fmt: skip
    return groups


def _peer(rank: int, k: int) -> int:
    """The capture's node-local peer k (of rank TEMPLATE_RANK) as seen from ``rank``: a global rank."""
    node, local = divmod(rank, RANKS_PER_NODE)
    if k == TEMPLATE_RANK:
        k = local
    elif k == local:
        k = TEMPLATE_RANK
    return node * RANKS_PER_NODE + k


def write_rank(t: Template, out: Path, rank: int, n: int, warp: Warp, world_hash: str,
               slow_link: tuple[int, int] | None, slow_link_factor: float) -> None:  # fmt: skip
    d = out / f"rank{rank}_ascend_pt"
    apo = d / "ASCEND_PROFILER_OUTPUT"
    apo.mkdir(parents=True, exist_ok=True)
    base = t.base
    steps = range(t.steps)
    nb = len(t.body)

    # trace_view.json
    ts = warp(t.ts)
    has_dur = ~np.isnan(t.dur)
    end = warp(np.where(has_dur, t.ts + np.nan_to_num(t.dur), t.ts))
    dur = np.where(has_dur, end - ts, np.nan)
    ts_s = _fmt(ts, base)
    events: list[dict[str, Any]] = list(t.meta_events)
    for j in steps:
        for k, e in enumerate(t.body):
            i = j * nb + k
            ne = dict(e)
            ne["ts"] = ts_s[i]
            if has_dur[i]:
                ne["dur"] = round(float(dur[i]), 3)
            if j and e.get("ph") == "X":
                m = STEP_RE.match(str(e.get("name", "")))
                if m:
                    ne["name"] = f"ProfilerStep#{int(m.group(1)) + j}"
            events.append(ne)
    (apo / "trace_view.json").write_bytes(msgspec.json.encode(events))

    # kernel_details.csv
    k_st = warp(t.k_ts)
    k_en = warp(t.k_ts + t.k_du)
    k_st_s = _fmt(k_st, base)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(t.k_head)
    nk = len(t.k_rows)
    for j in steps:
        for k, r in enumerate(t.k_rows):
            i = j * nk + k
            row = list(r)
            row[t.k_start] = k_st_s[i] + "\t"
            row[t.k_dur] = f"{k_en[i] - k_st[i]:.3f}"
            row[t.k_step] = str(t.step0 + j)
            w.writerow(row)
    (apo / "kernel_details.csv").write_text(buf.getvalue(), encoding="utf-8")

    # communication.json
    comm: dict[str, Any] = {}
    nops = len(t.ops)
    for j in steps:
        coll = {}
        for k, (key, v) in enumerate(t.ops):
            i = j * nops + k
            info = dict(v["Communication Time Info"])
            late_peer = float(warp.delta[i] - warp.arrive[i] - (warp.g - 1.0) * (warp.ce[i] - warp.cc[i]))
            own = float((warp.g - 1.0) * (warp.ce[i] - warp.cc[i]))
            start = float(warp(np.array([t.c[i]]))[0])
            info["Start Timestamp(us)"] = base + start
            info["Elapse Time(ms)"] = float(info["Elapse Time(ms)"]) + (late_peer + own) / 1000.0
            info["Wait Time(ms)"] = float(info["Wait Time(ms)"]) + late_peer / 1000.0
            info["Synchronization Time(ms)"] = float(info["Synchronization Time(ms)"]) + late_peer / 1000.0
            info["Idle Time(ms)"] = float(info["Idle Time(ms)"]) + own / 1000.0
            tr, wt, sy = info["Transit Time(ms)"], info["Wait Time(ms)"], info["Synchronization Time(ms)"]
            info["Wait Time Ratio"] = round(wt / (wt + tr), 4) if wt + tr > 0 else 0
            info["Synchronization Time Ratio"] = round(sy / (sy + tr), 4) if sy + tr > 0 else 0
            m = OP_KEY.match(key)
            coll[f"{m.group(1)}@{world_hash}" if m else key] = {**v, "Communication Time Info": info}
        if t.total is not None:
            tot = dict(t.total["Communication Time Info"])
            for c in ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)"):
                tot[c] = sum(float(v["Communication Time Info"][c]) for v in coll.values())
            tr, wt, sy = tot["Transit Time(ms)"], tot["Wait Time(ms)"], tot["Synchronization Time(ms)"]
            tot["Wait Time Ratio"] = round(wt / (wt + tr), 4) if wt + tr > 0 else 0
            tot["Synchronization Time Ratio"] = round(sy / (sy + tr), 4) if sy + tr > 0 else 0
            coll["Total Op Info"] = {**t.total, "Communication Time Info": tot}
        comm[f"step{t.step0 + j}"] = {"p2p": t.p2p, "collective": coll}
    (apo / "communication.json").write_text(json.dumps(comm), encoding="utf-8")

    # communication_matrix.json: global rank numbers, one link planted slow
    mat: dict[str, Any] = {}
    for j in steps:
        coll = {}
        for key, links in t.matrix.get("collective", {}).items():
            m = OP_KEY.match(key)
            nl = {}
            for lk, lv in links.items():
                a, _, b = lk.partition("-")
                src, dst = _peer(rank, int(a)), _peer(rank, int(b))
                lv = dict(lv)
                if slow_link == (src, dst) and lv.get("Transport Type") != "LOCAL":
                    lv["Transit Time(ms)"] = float(lv["Transit Time(ms)"]) * slow_link_factor
                    tt = lv["Transit Time(ms)"]
                    lv["Bandwidth(GB/s)"] = round(float(lv["Transit Size(MB)"]) / tt, 4) if tt > 0 else 0
                nl[f"{src}-{dst}"] = lv
            coll[f"{m.group(1)}@{world_hash}" if m else key] = nl
        mat[f"step{t.step0 + j}"] = {"p2p": t.matrix.get("p2p", {}), "collective": coll}
    (apo / "communication_matrix.json").write_text(json.dumps(mat), encoding="utf-8")

    # step_trace_time.csv, recomputed from the warped kernels
    marker = [float(x) for x, e in zip(ts, [e for _ in steps for e in t.body])
              if e.get("ph") == "X" and STEP_RE.match(str(e.get("name", "")))]  # fmt: skip
    lines = ["Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
             "Communication(Not Overlapped and Exclude Receive),Preparing"]  # fmt: skip
    for j in steps:
        sl = slice(j * nk, (j + 1) * nk)
        st, en, cm = k_st[sl], k_en[sl], t.k_comm[sl]
        lo, hi = float(st.min()), float(en.max())
        comp = _union(st[~cm], en[~cm])
        comu = _union(st[cm], en[cm])
        c_len, m_len = _length(*comp), _length(*comu)
        ov = _intersect(comp, comu)
        free = (hi - lo) - _length(*_union(st, en))
        prep = max(0.0, lo - marker[j]) if j < len(marker) else 0.0
        lines.append(f"{t.step0 + j},{c_len},{m_len - ov},{ov},{m_len},{free},{hi - lo},0,{m_len - ov},{prep}")
    (apo / "step_trace_time.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")

    for name, data in t.other.items():
        (apo / name).write_bytes(data)
    info = dict(t.info)
    info["rank_id"] = rank
    (d / f"profiler_info_{rank}.json").write_text(json.dumps(info, indent=4), encoding="utf-8")
    md = dict(t.metadata)
    lay = _layout(n)
    md["distributed_args"] = {
        "tensor_model_parallel_size": lay["tp"], "pipeline_model_parallel_size": lay["pp"],
        "data_parallel_size": lay["dp"], "context_parallel_size": 1, "expert_model_parallel_size": 1,
        "sequence_parallel": True, "rank": rank, "world_size": n,
    }  # fmt: skip
    md["parallel_group_info"] = _groups(rank, n)
    (d / "profiler_metadata.json").write_text(json.dumps(md, indent=4), encoding="utf-8")
    # as a profiler leaves them: not writable by group or others (msprof-analyze checks)
    for p in [d, apo]:
        os.chmod(p, 0o750)
    for p in apo.iterdir():
        os.chmod(p, 0o640)
    for p in d.glob("*.json"):
        os.chmod(p, 0o640)


_T: Template | None = None


def _init(steps: int) -> None:
    global _T
    _T = Template(SOURCE, steps)


def _one(args: tuple[Any, ...]) -> int:
    out, rank, n, g, g_max, offset, world_hash, slow_link, slf = args
    assert _T is not None
    delta = deltas(_T, g_max)
    write_rank(_T, out, rank, n, Warp(_T, g, delta, offset), world_hash, slow_link, slf)
    return rank


def plan(n: int, seed: int, jitter: float, slow_factor: float) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    slow = (n * 5) // 8 | 1  # an odd rank past the middle: 8 -> 5, 64 -> 41, 512 -> 321
    g = 1.0 + rng.uniform(-jitter, jitter, n)
    g[slow] = slow_factor
    offsets = rng.uniform(0.0, 5.0, n)
    node = 1 if n > RANKS_PER_NODE else 0
    link = (node * RANKS_PER_NODE + 2, node * RANKS_PER_NODE + 3)
    return {"ranks": n, "slow_rank": slow, "g": g, "offsets": offsets, "slow_link": link}


def build(out: Path, n: int, steps: int, seed: int, jitter: float, slow_factor: float, slow_link_factor: float,
          jobs: int) -> dict[str, Any]:  # fmt: skip
    """Lay out ``n`` rank folders under ``out``; return the plan (what was planted)."""
    from msdiag.ingest.metadata import group_hash

    p = plan(n, seed, jitter, slow_factor)
    world_hash = str(group_hash(WORLD_GROUP_ID))
    g_max = float(p["g"].max())
    tasks = [(out, r, n, float(p["g"][r]), g_max, float(p["offsets"][r]), world_hash, p["slow_link"], slow_link_factor)
             for r in range(n)]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    _init(steps)  # in this process: the workers are forked with it
    if jobs <= 1:
        for a in tasks:
            _one(a)
    else:
        with mp.get_context("fork").Pool(jobs) as pool:
            for _ in pool.imap_unordered(_one, tasks, chunksize=4):
                pass
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {"ranks": n, "steps": steps, "slow_rank": p["slow_rank"], "slow_factor": slow_factor,
            "slow_link": f"{p['slow_link'][0]}-{p['slow_link'][1]} HCCS", "bytes": size}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# measuring


WRAPPER = r"""
import json, os, resource, subprocess, sys, threading, time
sys.path.insert(0, sys.argv[1])
from ingest import _rss_kb, _tree
def _pss_kb(pid):
    # proportional set size: pages shared by forked workers counted once over the tree, not per process
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
    except (OSError, ValueError, IndexError):
        return _rss_kb(pid)
cmd = json.loads(sys.argv[2]); out = sys.argv[3]; cwd = sys.argv[4] or None; timeout = float(sys.argv[5])
t0 = time.perf_counter()
with open(out, "wb") as so, open(out + ".err", "wb") as se:
    p = subprocess.Popen(cmd, stdout=so, stderr=se, cwd=cwd)
    peak = [0]
    peak_rss = [0]
    done = threading.Event()
    def poll():
        tree, n = [p.pid], 0
        while not done.is_set():
            if n % 10 == 0:
                tree = _tree(p.pid)
            peak[0] = max(peak[0], sum(_pss_kb(q) for q in tree))
            peak_rss[0] = max(peak_rss[0], sum(_rss_kb(q) for q in tree))
            n += 1
            time.sleep(0.05)
    th = threading.Thread(target=poll, daemon=True); th.start()
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        for q in reversed(_tree(p.pid)):
            try:
                os.kill(q, 9)
            except OSError:
                pass
        rc = "timeout"
        p.wait()
wall = time.perf_counter() - t0
done.set(); th.join()
ru = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": rc, "wall_s": wall, "peak_kb": max(peak[0], ru), "peak_rss_sum_kb": peak_rss[0], "maxrss_kb": ru}))
"""


def measure(cmd: list[str], out: Path, env: dict[str, str], cwd: Path | None = None, timeout: float = 3600) -> dict[str, Any]:
    """Run ``cmd`` (stdout to ``out``, stderr to ``out.err``): rc, wall_s, peak_kb (process tree)."""
    res = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(Path(__file__).resolve().parent), json.dumps(cmd), str(out),
         str(cwd or ""), str(timeout)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        return {"rc": "wrapper failed", "wall_s": float("nan"), "peak_kb": 0, "error": res.stderr[-2000:]}
    r: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    if r["rc"] not in (0, 1):
        err = Path(str(out) + ".err").read_text(errors="replace")
        r["error"] = (err.strip().splitlines() or ["(no stderr)"])[-12:]
    return r


def msdiag_run(cap: Path, cache: Path, work: Path, env: dict[str, str], label: str, jobs: int | None) -> dict[str, Any]:
    out = work / f"msdiag-{label}.json"
    cmd = [sys.executable, "-m", "msdiag.cli", "analyze", str(cap), "--format", "json", "--cache", str(cache)]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    r = measure(cmd, out, env)
    if r["rc"] in (0, 1):
        rep = json.loads(out.read_text())
        m = rep["metrics"]
        r.update(slow_rank=m.get("slow_rank"), slow_rank_votes=m.get("slow_rank_votes"),
                 slowest_rank_by_compute=m.get("slowest_rank_by_compute"), slow_link=m.get("slow_link"),
                 stage_imbalance=m.get("stage_imbalance"), groups_spanning_nodes=m.get("groups_spanning_nodes"),
                 verdict=(rep.get("verdict") or {}).get("bottleneck"), json_bytes=out.stat().st_size)  # fmt: skip
        if m.get("slow_rank") is None:
            r["slow_rank_reason"] = rep["metric_details"]["slow_rank"]["reason"]
    out.unlink(missing_ok=True)
    return r


def msprof_runs(venv: Path, cap: Path, work: Path, timeout: float) -> dict[str, Any]:
    exe = venv / "bin" / "msprof-analyze"
    if not exe.exists():
        return {"cluster": {"error": f"{exe} not found (use --install-msprof)"}}
    env = dict(os.environ)
    res: dict[str, Any] = {}
    o1 = work / "msprof-cluster-out"
    shutil.rmtree(o1, ignore_errors=True)
    o1.mkdir()
    r = measure([str(exe), "cluster", "-d", str(cap), "-m", "all", "-o", str(o1)], work / "msprof-cluster.log", env, cwd=work,
                timeout=timeout)  # fmt: skip
    r["outputs"] = sorted(str(p.relative_to(o1)) for p in o1.rglob("*") if p.is_file())[:30]
    r["log_tail"] = (work / "msprof-cluster.log").read_text(errors="replace").strip().splitlines()[-8:]
    r["max_computing_rank"] = _max_computing_rank(o1 / "cluster_analysis_output" / "cluster_step_trace_time.csv")
    res["cluster"] = r
    o2 = work / "msprof-advisor-out"
    shutil.rmtree(o2, ignore_errors=True)
    o2.mkdir()
    r = measure([str(exe), "advisor", "all", "-d", str(cap), "-o", str(o2), "-l", "en"], work / "msprof-advisor.log", env,
                cwd=work, timeout=timeout)  # fmt: skip
    r["outputs"] = sorted(str(p.relative_to(o2)) for p in o2.rglob("*") if p.is_file())[:30]
    log = (work / "msprof-advisor.log").read_text(errors="replace")
    r["log_tail"] = log.strip().splitlines()[-8:]
    # the advisor names no slow rank in its table; it drills into one: "Kernel compare of Rank5 Step51 and Rank2 ..."
    m = re.search(r"Kernel compare of Rank(\d+) Step\d+ and Rank(\d+)", log)
    r["drilled_rank"] = int(m.group(1)) if m else None
    r["slow_rank_lines"] = [" ".join(ln.split("|")[2:4]).strip()[:160] for ln in log.splitlines()
                            if re.search(r"slow rank|slow link|has reached|bandwidth", ln, re.I)][:12]  # fmt: skip
    res["advisor"] = r
    return res


def _max_computing_rank(csv_path: Path) -> int | None:
    """The rank with the most Computing time (summed over steps) in msprof-analyze's cluster_step_trace_time.csv."""
    if not csv_path.exists():
        return None
    tot: dict[int, float] = {}
    with open(csv_path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("Type") == "rank":
                tot[int(row["Index"])] = tot.get(int(row["Index"]), 0.0) + float(row["Computing"] or 0)
    return max(tot, key=lambda k: tot[k]) if tot else None


def install_msprof(venv: Path) -> str | None:
    """Create ``venv`` and pip install msprof-analyze==26.2.0 into it; the error text, or None."""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "msprof-analyze==26.2.0"], check=True,
                       capture_output=True, text=True)  # fmt: skip
    except subprocess.CalledProcessError as e:
        return f"{' '.join(map(str, e.cmd))}: exit {e.returncode}: {(e.stderr or '')[-1500:]}"
    return None


def _mb(kb: Any) -> str:
    return f"{kb / 1024:.0f}" if isinstance(kb, (int, float)) and kb else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64], help="rank counts to build (default 8 64)")
    ap.add_argument("--steps", type=int, default=3, help="steps per rank (the capture's step repeated; default 3)")
    ap.add_argument("--slow-factor", type=float, default=3.0, help="compute stretch of the slow rank (default 3)")
    ap.add_argument("--slow-link-factor", type=float, default=2.5, help="transit time stretch of the slow link")
    ap.add_argument("--jitter", type=float, default=0.01, help="+/- compute stretch of the other ranks (default 0.01)")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--out", type=Path, help="build under this folder (kept) instead of a temp folder")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder")
    ap.add_argument("--reuse", action="store_true", help="with --out: measure what is there, do not rebuild")
    ap.add_argument("--build-jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--jobs", type=int, default=None, help="msdiag --jobs (default: msdiag's)")
    ap.add_argument("--no-msprof", action="store_true", help="do not run msprof-analyze")
    ap.add_argument("--msprof-venv", type=Path, default=Path(tempfile.gettempdir()) / "msprof-analyze-venv")
    ap.add_argument("--install-msprof", action="store_true", help="create --msprof-venv with msprof-analyze 26.2.0")
    ap.add_argument("--msprof-timeout", type=float, default=1800.0, help="seconds per msprof-analyze run")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)

    if not SOURCE.is_dir():
        sys.exit(f"corpus rank not found: {SOURCE}")
    msprof_error = None
    if not args.no_msprof and args.install_msprof and not (args.msprof_venv / "bin" / "msprof-analyze").exists():
        msprof_error = install_msprof(args.msprof_venv)
    tmp = args.out or Path(tempfile.mkdtemp(prefix="msdiag-cluster-"))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    results = []
    try:
        for n in args.ranks:
            cap = tmp / f"job{n}"
            work = tmp / f"work{n}"
            work.mkdir(parents=True, exist_ok=True)
            if args.reuse and cap.is_dir():
                meta = json.loads((tmp / f"job{n}.plan.json").read_text())
            else:
                shutil.rmtree(cap, ignore_errors=True)
                t0 = time.perf_counter()
                meta = build(cap, n, args.steps, args.seed, args.jitter, args.slow_factor, args.slow_link_factor,
                             args.build_jobs)  # fmt: skip
                meta["build_s"] = time.perf_counter() - t0
                (tmp / f"job{n}.plan.json").write_text(json.dumps(meta))
            print(f"job of {n} ranks: {meta['bytes'] / 1e9:.2f} GB, slow rank {meta['slow_rank']}, slow link "
                  f"{meta['slow_link']} ({cap})", file=sys.stderr)  # fmt: skip
            os.sync()
            cache = work / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            row: dict[str, Any] = {"plan": meta}
            row["msdiag_cold"] = msdiag_run(cap, cache, work, env, "cold", args.jobs)
            row["msdiag_warm"] = msdiag_run(cap, cache, work, env, "warm", args.jobs)
            if not args.no_msprof:
                row["msprof"] = {"install_error": msprof_error} if msprof_error else msprof_runs(
                    args.msprof_venv, cap, work, args.msprof_timeout)  # fmt: skip
            results.append(row)
            print(json.dumps(row, indent=1, default=str), file=sys.stderr)
    finally:
        if args.out is None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{'ranks':>5} {'GB':>6}  {'run':<26} {'wall s':>7} {'peak MB':>8}  result")
    for row in results:
        p = row["plan"]
        for label, key in (("msdiag analyze (cold)", "msdiag_cold"), ("msdiag analyze (warm)", "msdiag_warm")):
            r = row[key]
            found = r.get("slow_rank")
            ok = "FOUND" if found == p["slow_rank"] else f"NOT FOUND ({found}: {r.get('slow_rank_reason', '')[:60]})"
            res = (f"slow rank {ok} (planted {p['slow_rank']}), slow link {r.get('slow_link')} (planted {p['slow_link']})"
                   if r["rc"] in (0, 1) else f"exit {r['rc']}: {r.get('error')}")  # fmt: skip
            print(f"{p['ranks']:>5} {p['bytes'] / 1e9:6.2f}  {label:<26} {r['wall_s']:7.1f} {_mb(r['peak_kb']):>8}  {res}")
        for which in ("cluster", "advisor"):
            r = (row.get("msprof") or {}).get(which)
            if r is None:
                continue
            if "wall_s" not in r:
                print(f"{p['ranks']:>5} {'':>6}  {'msprof-analyze ' + which:<26} {'-':>7} {'-':>8}  {r.get('error')}")
                continue
            if r["rc"] == 0:
                rank = r.get("max_computing_rank") if which == "cluster" else r.get("drilled_rank")
                how = "most Computing in cluster_step_trace_time.csv" if which == "cluster" else "rank it drills into"
                res = f"ok; {how}: {rank} ({'the planted one' if rank == p['slow_rank'] else 'not the planted one'})"
            else:
                res = f"exit {r['rc']}: {' | '.join(r.get('error') or [])[-300:]}"
            print(f"{p['ranks']:>5} {'':>6}  {'msprof-analyze ' + which:<26} {r['wall_s']:7.1f} {_mb(r['peak_kb']):>8}  {res}")
        if (row.get("msprof") or {}).get("install_error"):
            print(f"{'':>14}msprof-analyze not installed: {row['msprof']['install_error']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
