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

Kept jobs: ``--out '/tmp/cluster{n}'`` builds the job of n ranks in /tmp/cluster<n>/job and writes
/tmp/cluster<n>/manifest.json last (the parameters, the source rank's file sizes, a digest of the builder's
code, the job's file count and bytes); a later run with the same parameters reuses the job (``--reuse``:
only reuse, never build; ``--rebuild``: build again; ``--build-only``: build and measure nothing). The
builder is importable (``build(out, n, steps, seed, jitter, slow_factor, slow_link_factor, jobs)``).

msdiag's bytecode is compiled in the checkout first (``compile_bytecode``), as ``pip install`` compiles an installed
package and compiled msprof-analyze's: a process that finds no bytecode (PYTHONDONTWRITEBYTECODE set, as on this
project's machines) compiles every module it imports from source, the parent and each fresh pool worker alike.

Measured, per job, each run a fresh process started by a small wrapper (stdout and stderr to files, so a
verbose tool never blocks on a full pipe); every file of the job is read once first, so that both tools
find it in the page cache (none drops it):
  1. ``msdiag analyze JOB --format json --cache C --no-config``, cold (C empty: parse, and write the
     cache), then warm (the same C); the answer is checked: the planted slow rank and link named?
  2. ``msdiag report JOB -o x.html --cache C2 --no-config``, cold (C2 empty), up to ``--report-max-ranks``
     ranks (64);
  3. msprof-analyze ``cluster -m all -d JOB -o OUT`` (OUT outside the job; the job is checked unchanged
     after it), installed in its own venv (``--msprof-venv``; ``--install-msprof`` creates it with pip:
     msprof-analyze 26.2.0 and its dependencies, torch is not needed); ok when it exits 0 and writes
     cluster_step_trace_time.csv, else its exit, stderr and [ERROR] log lines are recorded; the rank
     with the most Computing in that table is shown. ``--advisor`` also times ``advisor all``.
  Time: wall seconds (``wall_s``, what the targets judge) and the CPU seconds of the process tree
  (``cpu_s``, user + system, the figure to compare on a loaded machine). Peak memory: the proportional
  set size (PSS) summed over the process tree (msdiag and its workers), sampled from /proc every 50 ms,
  never below the largest single process's ru_maxrss (the RSS sum, which counts the pages forked workers
  share with their parent once per process, is recorded too), in a memory run of its own: before the timed
  runs, one more cold msdiag analyze and one more msprof-analyze run each sample PSS (``memory_run`` in the
  JSON: its time, not judged; so no tool's first run after the job is read, which was msdiag's slowest, is
  timed). The timed runs sample RSS only: reading smaps_rollup costs ~10 ms of kernel time a poll at 512
  ranks (4 processes), a fifth of a core, which slowed the run it sampled (512 ranks: msdiag by 0.2-0.45 s,
  msprof-analyze by 0.35-0.5 s). ``--repeat K`` keeps the median of K runs, run
  in K rounds of each tool's runs one after the other (a drift of the machine's speed weighs on both alike).
  Targets (issue 17, ``TARGETS``): 64 ranks cold no slower than msprof-analyze, warm under 2 s, HTML report
  cold under 5 s; 512 ranks cold at least 2x faster than msprof-analyze, cold peak under 1 GB (10^9 bytes),
  warm at least 10x faster than cold; 1,024 ranks cold under 2 min. Each is met, not met, or cannot be
  told (a run failed or msprof-analyze was not measured). Output: a line per run (stderr), then a markdown
  table for the README and a line per target (stdout); ``--json`` the whole record, written after each job.
  Bounded: each msdiag run is killed after ``--timeout`` (900 s), each msprof-analyze run after
  ``--msprof-timeout`` (1,200 s); the JSON and the table say so.

Usage:
  python bench/cluster.py --ranks 8 64                 # build in a temp folder, measure, delete
  python bench/cluster.py --ranks 64 512 1024 --out '/tmp/cluster{n}' --json cluster.json   # keep, reuse
  python bench/cluster.py --ranks 512 1024 --out '/tmp/cluster{n}' --build-only             # build once
  python bench/cluster.py --ranks 64 --no-msprof --msdiag-args '--deep all'
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import inspect
import io
import json
import math
import multiprocessing as mp
import os
import re
import resource
import shlex
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
    """A Megatron layout whose tp x pp x dp is ``n``: tp 2 x pp 2 up to 8 ranks, else tp 8 (a node) x pp 4,
    each halved down to what divides ``n`` (16 ranks: tp 8 x pp 2 x dp 1; 8, 64, 512, 1,024 as before)."""
    tp, pp = (2, 2) if n <= 8 else (8, 4)
    while tp > 1 and n % tp:
        tp //= 2
    while pp > 1 and (n // tp) % pp:
        pp //= 2
    return {"tp": tp, "pp": pp, "dp": n // (tp * pp)}


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


def _init(steps: int, source: Path = SOURCE) -> None:
    """The template, parsed once in this process (the build's workers are forked with it)."""
    global _T
    _T = Template(source, steps)


def _one(args: tuple[Any, ...]) -> int:
    out, rank, n, g, g_max, offset, world_hash, slow_link, slf = args
    assert _T is not None
    delta = deltas(_T, g_max)
    write_rank(_T, out, rank, n, Warp(_T, g, delta, offset), world_hash, slow_link, slf)
    return rank


def plan(n: int, seed: int, jitter: float, slow_factor: float) -> dict[str, Any]:
    """What is planted in a job of ``n`` ranks: the slow rank, every rank's compute stretch and clock offset, the slow link."""
    rng = np.random.default_rng(seed)
    slow = (n * 5) // 8 | 1  # an odd rank past the middle: 8 -> 5, 64 -> 41, 512 -> 321
    g = 1.0 + rng.uniform(-jitter, jitter, n)
    g[slow] = slow_factor
    offsets = rng.uniform(0.0, 5.0, n)
    node = 1 if n > RANKS_PER_NODE else 0
    link = (node * RANKS_PER_NODE + 2, node * RANKS_PER_NODE + 3)
    return {"ranks": n, "slow_rank": slow, "g": g, "offsets": offsets, "slow_link": link}


def build(out: Path, n: int, steps: int = 3, seed: int = 20261129, jitter: float = 0.01, slow_factor: float = 3.0,
          slow_link_factor: float = 2.5, jobs: int = 1, source: Path = SOURCE) -> dict[str, Any]:  # fmt: skip
    """Lay out ``n`` rank folders under ``out``; return the plan (what was planted).

    Importable (tests build their jobs with it): ``build(out, 8, 3, 20261129, 0.01, 3.0, 2.5, 1)`` is the
    8-rank job of tests/conftest.py; ``jobs`` > 1 forks that many writer processes."""
    from msdiag.ingest.metadata import group_hash

    p = plan(n, seed, jitter, slow_factor)
    world_hash = str(group_hash(WORLD_GROUP_ID))
    g_max = float(p["g"].max())
    tasks = [(out, r, n, float(p["g"][r]), g_max, float(p["offsets"][r]), world_hash, p["slow_link"], slow_link_factor)
             for r in range(n)]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    _init(steps, source)  # in this process: the workers are forked with it
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
# built jobs kept for reuse: ROOT/job/ holds the ranks, ROOT/manifest.json what built them


MANIFEST = "manifest.json"
_BUILDER = (_rel, _fmt, _union, _length, _clip, _intersect, Template, deltas, Warp, _layout, _groups, _peer, write_rank,
            _init, _one, plan, build)  # fmt: skip


def builder_hash() -> str:
    """A digest of the builder's code and constants: a built job is reused only by the builder that wrote it."""
    h = hashlib.sha256()
    for obj in _BUILDER:
        h.update(inspect.getsource(obj).encode())
    from msdiag.ingest.metadata import group_hash

    h.update(repr((TEMPLATE_RANK, RANKS_PER_NODE, GAP_US, TOL_US, WORLD_GROUP_ID, COPIED, group_hash(WORLD_GROUP_ID))).encode())
    return h.hexdigest()[:16]


def job_params(n: int, steps: int, seed: int, jitter: float, slow_factor: float, slow_link_factor: float,
               source: Path = SOURCE) -> dict[str, Any]:  # fmt: skip
    """Everything a built job depends on: the arguments, the source rank's files (name and size), the builder."""
    files = sorted([str(f.relative_to(source)), f.stat().st_size] for f in source.rglob("*") if f.is_file())
    return {"ranks": n, "steps": steps, "seed": seed, "jitter": jitter, "slow_factor": slow_factor,
            "slow_link_factor": slow_link_factor, "source": str(source), "source_files": files,
            "builder": builder_hash()}  # fmt: skip


def tree_stat(d: Path) -> dict[str, int]:
    """Number of files and their bytes under ``d``: a built job's cheap integrity check."""
    files = size = 0
    for dirpath, _, names in os.walk(d):
        for name in names:
            files += 1
            size += os.stat(os.path.join(dirpath, name)).st_size
    return {"files": files, "bytes": size}


def reusable(root: Path, params: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The plan of the job built under ``root`` when its manifest matches ``params`` and its files are all
    there; else None and why not."""
    mf = root / MANIFEST
    if not mf.is_file():
        return None, f"no {MANIFEST} in {root}"
    try:
        man = json.loads(mf.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return None, f"{mf}: unreadable ({e})"
    diff = sorted(k for k in set(params) | set(man.get("params", {})) if man.get("params", {}).get(k) != params.get(k))
    if diff:
        return None, f"{mf}: built with other parameters ({', '.join(diff)})"
    if tree_stat(root / "job") != man.get("tree"):
        return None, f"{root / 'job'}: files differ from {mf} (a partial build or changed files)"
    return dict(man["plan"]), "reused"


def ensure_job(root: Path, params: dict[str, Any], build_jobs: int, must_reuse: bool, rebuild: bool) -> dict[str, Any]:
    """The job of ``params`` under ``root``/job: reused when the manifest matches, else built (and the
    manifest written last, so an interrupted build is never reused). Never deletes a folder it did not build."""
    meta, why = (None, "--rebuild") if rebuild else reusable(root, params)
    if meta is not None:
        meta["reused"] = True
        return meta
    if must_reuse:
        sys.exit(f"--reuse: cannot reuse {root}: {why}")
    if root.exists() and any(root.iterdir()) and not (root / MANIFEST).is_file():
        sys.exit(f"{root} exists and was not built by bench/cluster.py (no {MANIFEST}): refusing to overwrite it")
    (root / MANIFEST).unlink(missing_ok=True)
    shutil.rmtree(root / "job", ignore_errors=True)
    print(f"building {params['ranks']} ranks under {root / 'job'} ({why})", file=sys.stderr)
    t0 = time.perf_counter()
    c0 = _cpu_self()
    meta = build(root / "job", params["ranks"], params["steps"], params["seed"], params["jitter"], params["slow_factor"],
                 params["slow_link_factor"], build_jobs, Path(params["source"]))  # fmt: skip
    meta.update(build_s=round(time.perf_counter() - t0, 1), build_cpu_s=round(_cpu_self() - c0, 1), build_jobs=build_jobs)
    os.sync()
    man = {"params": params, "plan": meta, "tree": tree_stat(root / "job")}
    (root / MANIFEST).write_text(json.dumps(man, indent=1), encoding="utf-8")
    meta["reused"] = False
    return meta


def _cpu_self() -> float:
    """CPU seconds (user + system) of this process and its reaped children."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


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
TICK = os.sysconf("SC_CLK_TCK")
def _cpu_ticks(pid):
    # utime + stime of this process alone (fields 14 and 15 of /proc/<pid>/stat)
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])
    except (OSError, ValueError, IndexError):
        return None
cmd = json.loads(sys.argv[2]); out = sys.argv[3]; cwd = sys.argv[4] or None; timeout = float(sys.argv[5])
pss = sys.argv[6] == "pss"  # a memory run: PSS sampled (smaps_rollup, ~10 ms of kernel time a poll); else RSS only
t0 = time.perf_counter()
# the child's stdout and stderr go to files, never to a pipe: a verbose tool cannot block on a full pipe
with open(out, "wb") as so, open(out + ".err", "wb") as se:
    p = subprocess.Popen(cmd, stdout=so, stderr=se, stdin=subprocess.DEVNULL, cwd=cwd)
    peak = [0]
    peak_rss = [0]
    ticks = {}  # pid -> its last CPU ticks seen: counts descendants that nobody waits for (rusage misses them)
    done = threading.Event()
    def poll():
        tree, n = [p.pid], 0
        while not done.is_set():
            if n % 10 == 0:
                tree = _tree(p.pid)
            if pss:
                peak[0] = max(peak[0], sum(_pss_kb(q) for q in tree))
            peak_rss[0] = max(peak_rss[0], sum(_rss_kb(q) for q in tree))
            for q in tree:
                t = _cpu_ticks(q)
                if t is not None:
                    ticks[q] = t
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
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
# CPU: the child's rusage (itself and the descendants it waited for), or the sum over the tree sampled from /proc
# (which also counts descendants nobody waited for), whichever is larger: both can only miss time
print(json.dumps({"rc": rc, "wall_s": wall, "cpu_s": max(ru.ru_utime + ru.ru_stime, sum(ticks.values()) / TICK),
                  "peak_kb": max(peak[0], ru.ru_maxrss) if pss else None,
                  "peak_rss_sum_kb": peak_rss[0], "maxrss_kb": ru.ru_maxrss}))
"""


def measure(
    cmd: list[str], out: Path, env: dict[str, str], cwd: Path | None = None, timeout: float = 3600, pss: bool = False
) -> dict[str, Any]:
    """Run ``cmd`` (stdout to ``out``, stderr to ``out.err``): rc, wall_s, cpu_s (user + system of the process
    tree), peak_rss_sum_kb and maxrss_kb; with ``pss`` (a memory run) also peak_kb (PSS summed over the process
    tree), else peak_kb None; the stderr's last lines when it failed."""
    res = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(Path(__file__).resolve().parent), json.dumps(cmd), str(out),
         str(cwd or ""), str(timeout), "pss" if pss else "rss"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        return {"rc": "wrapper failed", "wall_s": float("nan"), "peak_kb": 0, "error": res.stderr[-2000:]}
    r: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    err_lines = Path(str(out) + ".err").read_text(errors="replace").splitlines()
    r["warnings"] = [ln[:300] for ln in err_lines if "warning" in ln.lower()][:5]  # e.g. msdiag's cache refused
    if r["rc"] not in (0, 1):
        tail = [ln for ln in err_lines if ln.strip()][-12:] or ["(no stderr)"]
        r["error"] = ([f"killed after {timeout:g} s"] if r["rc"] == "timeout" else []) + tail
    return r


def _ok(r: dict[str, Any] | None) -> bool:
    """A run that finished with an answer (msdiag: exit 0, or 1 for --fail-on findings; the peer: its ``ok``)."""
    if not r or not r.get("ok", r.get("rc") in (0, 1)):
        return False
    wall = r.get("wall_s")
    return isinstance(wall, float) and not math.isnan(wall)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median wall time among the successful ones (all runs' times kept); the first failure if none succeeded."""
    good = sorted((r for r in runs if _ok(r)), key=lambda r: r["wall_s"])
    pick = dict(good[(len(good) - 1) // 2] if good else runs[0])
    if len(runs) > 1:
        pick["runs_wall_s"] = [round(r.get("wall_s", float("nan")), 2) for r in runs]
        pick["runs_cpu_s"] = [round(r.get("cpu_s", float("nan")), 2) for r in runs]
    return pick


def with_peak(timed: dict[str, Any], memory: dict[str, Any] | None) -> dict[str, Any]:
    """The timed run's record with the memory run's peak (``peak_kb``: PSS over the process tree; None when that run
    failed) and that run's own record under ``memory_run``."""
    out = dict(timed)
    if memory is not None:
        out["peak_kb"] = memory.get("peak_kb") if _ok(memory) else None
        out["memory_run"] = {k: memory.get(k) for k in ("rc", "wall_s", "cpu_s", "peak_kb", "peak_rss_sum_kb", "maxrss_kb")}
    return out


class Msdiag:
    """msdiag's runs on one job: analyze cold and warm, report cold, each a fresh process of this checkout."""

    def __init__(self, cap: Path, work: Path, env: dict[str, str], jobs: int | None, extra: list[str], timeout: float):
        self.cap, self.work, self.env, self.timeout = cap, work, env, timeout
        self.opts = ["--no-config"] + (["--jobs", str(jobs)] if jobs else []) + extra

    def analyze(self, cache: Path, label: str, pss: bool = False) -> dict[str, Any]:
        """``msdiag analyze JOB --format json --cache CACHE``, and what its answer says of the planted rank and link
        (``pss``: a memory run, :func:`measure`)."""
        out = self.work / f"msdiag-{label}.json"
        cmd = [sys.executable, "-m", "msdiag.cli", "analyze", str(self.cap), "--format", "json", "--cache", str(cache)]
        r = measure(cmd + self.opts, out, self.env, timeout=self.timeout, pss=pss)
        if r["rc"] in (0, 1):
            try:
                r.update(_answer(json.loads(out.read_text())), json_bytes=out.stat().st_size)
            except (OSError, ValueError, KeyError) as e:
                r.update(rc=f"unreadable JSON ({e})")
        out.unlink(missing_ok=True)
        return r

    def report(self, cache: Path) -> dict[str, Any]:
        """``msdiag report JOB -o x.html --cache CACHE``: the HTML report's time and size."""
        html = self.work / "report.html"
        cmd = [sys.executable, "-m", "msdiag.cli", "report", str(self.cap), "-o", str(html), "--cache", str(cache)]
        r = measure(cmd + self.opts, self.work / "msdiag-report.log", self.env, timeout=self.timeout)
        if r["rc"] in (0, 1):
            if html.is_file() and html.stat().st_size:
                r["html_bytes"] = html.stat().st_size
            else:
                r.update(rc=f"exit {r['rc']} but no {html.name} written")
        html.unlink(missing_ok=True)
        return r


ANSWER_KEYS = ("slow_rank", "slow_rank_votes", "slowest_rank_by_compute", "slow_link", "stage_imbalance",
               "groups_spanning_nodes", "verdict")  # fmt: skip


def _answer(rep: dict[str, Any]) -> dict[str, Any]:
    """What msdiag's JSON says about the planted rank and link (and why, when it names no slow rank)."""
    m = rep["metrics"]
    a = {k: m.get(k) for k in ANSWER_KEYS if k != "verdict"}
    a["verdict"] = (rep.get("verdict") or {}).get("bottleneck")
    if m.get("slow_rank") is None:
        a["slow_rank_reason"] = ((rep.get("metric_details") or {}).get("slow_rank") or {}).get("reason")
    deep = (rep.get("read_depth") or {}).get("deep")  # the ranks read in full (the JSON's read_depth)
    if deep is not None:
        a["ranks_read_deep"] = deep
    return a


def _snapshot(d: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``d``: (size, mtime_ns), to tell whether a tool wrote into its input."""
    snap = {}
    for dirpath, _, names in os.walk(d):
        for name in names:
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            snap[os.path.relpath(p, d)] = (st.st_size, st.st_mtime_ns)
    return snap


def _input_changes(before: dict[str, tuple[int, int]], cap: Path) -> list[str]:
    """Files of ``cap`` added, removed or rewritten since ``before`` (at most 10 named)."""
    after = _snapshot(cap)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return changed[:10] + ([f"... {len(changed) - 10} more"] if len(changed) > 10 else [])


class Msprof:
    """msprof-analyze (installed in its own venv) on one job, its output written under ``work``, never into the job."""

    def __init__(self, venv: Path, cap: Path, work: Path, timeout: float):
        self.exe, self.cap, self.work, self.timeout = venv / "bin" / "msprof-analyze", cap, work, timeout

    def _run(self, name: str, args: list[str], pss: bool = False) -> tuple[dict[str, Any], Path, str]:
        o = self.work / f"msprof-{name}-out"
        shutil.rmtree(o, ignore_errors=True)
        o.mkdir()
        log = self.work / f"msprof-{name}.log"
        before = _snapshot(self.cap)
        r = measure([str(self.exe), *args, "-d", str(self.cap), "-o", str(o)], log, dict(os.environ), cwd=self.work,
                    timeout=self.timeout, pss=pss)  # fmt: skip
        text = log.read_text(errors="replace") + Path(str(log) + ".err").read_text(errors="replace")
        r["outputs"] = sorted(str(p.relative_to(o)) for p in o.rglob("*") if p.is_file())[:30]
        r["log_tail"] = text.strip().splitlines()[-8:]
        r["log_errors"] = [ln[:300] for ln in text.splitlines() if "[ERROR]" in ln][:8]
        r["input_changed"] = _input_changes(before, self.cap)
        return r, o, text

    def cluster(self, pss: bool = False) -> dict[str, Any]:
        """``msprof-analyze cluster -m all``: ok when it exits 0 and writes its step trace table (``pss``: a memory
        run, :func:`measure`)."""
        if not self.exe.exists():
            return {"ok": False, "error": f"{self.exe} not found (use --install-msprof)"}
        r, o, _ = self._run("cluster", ["cluster", "-m", "all"], pss=pss)
        table = o / "cluster_analysis_output" / "cluster_step_trace_time.csv"
        r["ok"] = r["rc"] == 0 and table.is_file()
        if r["rc"] == 0 and not table.is_file():
            r["error"] = [f"exit 0 but no {table.relative_to(o)}"] + r["log_errors"]
        r["max_computing_rank"] = _max_computing_rank(table)
        return r

    def advisor(self) -> dict[str, Any]:
        """``msprof-analyze advisor all`` (opt-in: slower), and the rank it drills into."""
        if not self.exe.exists():
            return {"ok": False, "error": f"{self.exe} not found (use --install-msprof)"}
        r, _, log = self._run("advisor", ["advisor", "all", "-l", "en"])
        r["ok"] = r["rc"] == 0
        # the advisor names no slow rank in its table; it drills into one: "Kernel compare of Rank5 Step51 and Rank2 ..."
        m = re.search(r"Kernel compare of Rank(\d+) Step\d+ and Rank(\d+)", log)
        r["drilled_rank"] = int(m.group(1)) if m else None
        r["slow_rank_lines"] = [" ".join(ln.split("|")[2:4]).strip()[:160] for ln in log.splitlines()
                                if re.search(r"slow rank|slow link|has reached|bandwidth", ln, re.I)][:12]  # fmt: skip
        return r


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
    """Create ``venv`` and pip install msprof-analyze==26.2.0 into it (torch is not needed by ``cluster``); the error text, or None."""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "msprof-analyze==26.2.0"], check=True,
                       capture_output=True, text=True)  # fmt: skip
    except subprocess.CalledProcessError as e:
        return f"{' '.join(map(str, e.cmd))}: exit {e.returncode}: {(e.stderr or '')[-1500:]}"
    return None


def msprof_version(venv: Path) -> str | None:
    """``msprof-analyze -V`` of the venv, or None when it is not installed."""
    exe = venv / "bin" / "msprof-analyze"
    if not exe.exists():
        return None
    r = subprocess.run([str(exe), "-V"], capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    m = re.search(
        r"^msprof-analyze \S+", r.stdout + r.stderr, re.M
    )  # (on stderr) its banner's version line (not the build info under it)
    return m.group(0) if m else f"-V: exit {r.returncode}, no version line"


def prime(cap: Path) -> dict[str, float]:
    """Read every file of the job once, so that both tools start with it in the page cache (none drops it)."""
    t0, n = time.perf_counter(), 0
    for dirpath, _, names in os.walk(cap):
        for name in names:
            with open(os.path.join(dirpath, name), "rb", buffering=0) as f:
                while chunk := f.read(1 << 22):
                    n += len(chunk)
    return {"bytes": n, "s": round(time.perf_counter() - t0, 2)}


# ---------------------------------------------------------------------------------------------
# targets (issue 17, point 3): per rank count, what is compared and the limit; "cold" is a first run into an
# empty --cache folder (writing the cache included), times are wall seconds, peak memory PSS over the process tree

GB = 1e9


def _wall(row: dict[str, Any], key: str) -> float | None:
    r = row.get(key)
    return float(r["wall_s"]) if r is not None and _ok(r) else None


def _killed_after(row: dict[str, Any], key: str) -> float | None:
    """The wall time of a run killed by its timeout: a lower bound of its time (a target under it is not met)."""
    r = row.get(key)
    return float(r["wall_s"]) if r is not None and r.get("rc") == "timeout" else None


def _peer_wall(row: dict[str, Any]) -> float | None:
    return _wall(row.get("msprof") or {}, "cluster")


def _peak_bytes(row: dict[str, Any]) -> float | None:
    r = row.get("msdiag_cold")
    return float(r["peak_kb"]) * 1024 if r is not None and _ok(r) and r.get("peak_kb") else None


def _target(text: str, value: float | None, limit: float | None, met: bool | None, shown: str) -> dict[str, Any]:
    why = None if met is not None else ("not measured or failed" if value is None else "msprof-analyze not measured or failed")
    return {"target": text, "value": value, "limit": limit, "met": met, "shown": shown if met is not None else why}


def _cold_vs_peer(row: dict[str, Any], factor: float) -> dict[str, Any]:
    cold, peer = _wall(row, "msdiag_cold"), _peer_wall(row)
    text = "cold no slower than msprof-analyze" if factor == 1 else f"cold at least {factor:g}x faster than msprof-analyze"
    met = None if cold is None or peer is None else cold * factor <= peer
    shown = f"{cold:.1f} s vs {peer:.1f} s ({peer / cold:.2g}x)" if cold and peer is not None else ""
    killed = _killed_after(row, "msdiag_cold")
    if killed is not None and peer is not None and killed * factor > peer:
        met, shown = False, f"killed after {killed:.0f} s vs {peer:.1f} s"
    return _target(text, cold, None if peer is None else peer / factor, met, shown)


def _under(row: dict[str, Any], key: str, limit: float, text: str) -> dict[str, Any]:
    v, killed = _wall(row, key), _killed_after(row, key)
    if killed is not None and killed >= limit:
        return _target(text, killed, limit, False, f"killed after {killed:.0f} s")
    return _target(text, v, limit, None if v is None else v < limit, f"{v:.1f} s" if v is not None else "")


def _warm_ratio(row: dict[str, Any], factor: float) -> dict[str, Any]:
    cold, warm = _wall(row, "msdiag_cold"), _wall(row, "msdiag_warm")
    ratio = cold / warm if cold and warm else None
    shown = f"{cold:.1f} s / {warm:.2f} s = {ratio:.1f}x" if ratio is not None else ""
    return _target(
        f"warm at least {factor:g}x faster than cold", ratio, factor, None if ratio is None else ratio >= factor, shown
    )


def _peak_under(row: dict[str, Any], limit: float) -> dict[str, Any]:
    v = _peak_bytes(row)
    shown = f"{v / 1e6:.0f} MB" if v is not None else ""
    return _target(f"cold peak memory under {limit / GB:g} GB", v, limit, None if v is None else v < limit, shown)


TARGETS: dict[int, list[Any]] = {
    64: [lambda r: _cold_vs_peer(r, 1.0), lambda r: _under(r, "msdiag_warm", 2.0, "warm under 2 s"),
         lambda r: _under(r, "report_cold", 5.0, "HTML report cold under 5 s")],
    512: [lambda r: _cold_vs_peer(r, 2.0), lambda r: _peak_under(r, 1 * GB), lambda r: _warm_ratio(r, 10.0)],
    1024: [lambda r: _under(r, "msdiag_cold", 120.0, "cold under 2 min")],
}  # fmt: skip


def targets(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of this row's rank count, each with the measured value, the limit and whether it is met
    (None: cannot tell, with why)."""
    return [t(row) for t in TARGETS.get(row["plan"]["ranks"], [])]


# ---------------------------------------------------------------------------------------------
# output


def _s(r: dict[str, Any] | None, digits: int = 1) -> str:
    if r is None:
        return "-"
    if not _ok(r):
        return f"failed ({r.get('rc')})" if "rc" in r else "failed"
    return f"{r['wall_s']:.{digits}f}"


def _mb(r: dict[str, Any] | None) -> str:
    kb = (r or {}).get("peak_kb")
    return f"{kb / 1024:.0f}" if r is not None and _ok(r) and kb else "-"


def _found(row: dict[str, Any]) -> str:
    p, c = row["plan"], row.get("msdiag_cold") or {}
    if not _ok(c):
        c = row.get("msdiag_warm") or {}  # the cold run failed: the warm run's answer
        if not _ok(c):
            return "-"
    rank = "yes" if c.get("slow_rank") == p["slow_rank"] else f"no ({c.get('slow_rank')})"
    link = "yes" if str(c.get("slow_link") or "").split(" ")[0] == p["slow_link"].split(" ")[0] else f"no ({c.get('slow_link')})"
    out = f"rank {rank}, link {link}"
    peer = (row.get("msprof") or {}).get("cluster")
    if peer is not None and peer.get("ok"):
        out += f"; msprof-analyze's most Computing: rank {peer.get('max_computing_rank')}"
    return out


def markdown(results: list[dict[str, Any]]) -> str:
    """The README table: one row per job, then every target with its measure and whether it is met."""
    lines = ["| ranks | size (GB) | msdiag cold (s) | msdiag warm (s) | msdiag peak (MiB) | HTML report cold (s) "
             "| msprof-analyze cluster -m all (s) | msprof-analyze peak (MiB) | planted slow rank / link found | targets met |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]  # fmt: skip
    for row in results:
        p, ts = row["plan"], row.get("targets") or []
        peer = (row.get("msprof") or {}).get("cluster")
        met = "-" if not ts else f"{sum(t['met'] is True for t in ts)} of {len(ts)}"
        warm = _s(row.get("msdiag_warm"), 2)
        if _ok(row.get("msdiag_warm")) and not _ok(row.get("msdiag_cold")):
            warm += " (after a failed cold run: its cache partly written)"
        lines.append(f"| {p['ranks']:,} | {p['bytes'] / GB:.2f} | {_s(row.get('msdiag_cold'))} | {warm} "
                     f"| {_mb(row.get('msdiag_cold'))} | {_s(row.get('report_cold'))} | {_s(peer)} | {_mb(peer)} "
                     f"| {_found(row)} | {met} |")  # fmt: skip
    lines.append("")
    for row in results:
        for t in row.get("targets") or []:
            word = {True: "met", False: "NOT met", None: "cannot tell"}[t["met"]]
            lines.append(f"- {row['plan']['ranks']:,} ranks, {t['target']}: {word} ({t['shown']})")
    return "\n".join(lines)


def environment(args: argparse.Namespace) -> dict[str, Any]:
    """Where and with what the bench ran (the table is only as good as the machine was idle)."""
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "cpus": os.cpu_count(),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()], "python": sys.version.split()[0],
            "msdiag_rev": rev.stdout.strip() or None, "msprof_analyze": None if args.no_msprof else msprof_version(args.msprof_venv),
            "argv": sys.argv[1:], "speed_probe_s_at_start": speed_probe()}  # fmt: skip


#: Iterations of the speed probe's loop (one CPU, pure Python: ~1.6 s on an idle machine of the 2-core kind).
PROBE_LOOPS = 20_000_000


def speed_probe() -> float:
    """Seconds a fresh Python takes for a fixed pure-Python loop: the machine's speed when the bench ran (a shared
    machine slowed by its neighbours shows it here, and every time of the table with it)."""
    code = f"s = 0\nfor i in range({PROBE_LOOPS}):\n    s += i\n"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return round(time.perf_counter() - t, 2)


def compile_bytecode() -> dict[str, Any]:
    """Compile msdiag's bytecode in the checkout, as ``pip install`` does for an installed package (and did for
    msprof-analyze's venv): with PYTHONDONTWRITEBYTECODE set, or a read-only checkout, every msdiag process would
    otherwise compile its modules from source, the parent and each pool worker alike, which a user's install never
    does. Returns what was done (recorded in the JSON's environment)."""
    import compileall

    ok = compileall.compile_dir(str(REPO / "msdiag"), quiet=1)
    missing = [str(p.relative_to(REPO)) for p in (REPO / "msdiag").rglob("*.py")
               if not Path(importlib.util.cache_from_source(str(p))).exists()]  # fmt: skip
    return {"compiled": bool(ok) and not missing, "without_bytecode": missing[:5]}


def print_details(results: list[dict[str, Any]]) -> None:
    """One line per run (stderr): times, CPU time, peak memory and what it found or why it failed."""
    runs = (("msdiag analyze cold", "msdiag_cold"), ("msdiag analyze warm", "msdiag_warm"), ("msdiag report cold", "report_cold"))
    for row in results:
        p = row["plan"]
        named = [(label, row.get(key)) for label, key in runs]
        named += [(f"msprof-analyze {w}", (row.get("msprof") or {}).get(w)) for w in ("cluster", "advisor")]
        for label, r in named:
            if r is None:
                continue
            what = ("ok" if _ok(r) else f"FAILED: rc {r.get('rc')} {r.get('error') or ''}")[:300]
            if label == "msdiag analyze cold" and _ok(r):
                what += f"; slow rank {r.get('slow_rank')} (planted {p['slow_rank']}), slow link {r.get('slow_link')} (planted {p['slow_link']})"
            if label == "msdiag analyze warm" and _ok(r) and _ok(row.get("msdiag_cold")):
                same = all(r.get(k) == row["msdiag_cold"].get(k) for k in ANSWER_KEYS)
                what += "; the same answer as cold" if same else "; ANSWER DIFFERS FROM COLD"
            if r.get("warnings") and label.startswith("msdiag"):
                what += f"; warnings: {r['warnings']}"
            if r.get("input_changed"):
                what += f"; WROTE INTO THE JOB: {r['input_changed']}"
            wall, cpu = r.get("wall_s", float("nan")), r.get("cpu_s", float("nan"))
            print(f"{p['ranks']:>5} {label:<24} {wall:8.1f} s wall {cpu:8.1f} s CPU {_mb(r):>6} MB  {what}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64], help="rank counts to build (default 8 64)")
    ap.add_argument("--steps", type=int, default=3, help="steps per rank (the capture's step repeated; default 3)")
    ap.add_argument("--slow-factor", type=float, default=3.0, help="compute stretch of the slow rank (default 3)")
    ap.add_argument("--slow-link-factor", type=float, default=2.5, help="transit time stretch of the slow link")
    ap.add_argument("--jitter", type=float, default=0.01, help="+/- compute stretch of the other ranks (default 0.01)")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--out", help="build each job under this folder and keep it: '/tmp/cluster{n}' (one folder per rank "
                    "count), or DIR (DIR/job<n>); a job built before with the same parameters is reused")  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="without --out: keep the temp folder of the built jobs")
    ap.add_argument("--reuse", action="store_true", help="only reuse jobs built before under --out; never build")
    ap.add_argument("--rebuild", action="store_true", help="build again even when a matching job is there")
    ap.add_argument("--build-only", action="store_true", help="build (or check) the jobs, measure nothing")
    ap.add_argument("--build-jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()),
                    help="where each job's caches, logs and msprof-analyze output go (deleted after each job)")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=None, help="msdiag --jobs (default: msdiag's)")
    ap.add_argument("--msdiag-args", default="", help="more msdiag options for every msdiag run, e.g. '--deep auto'")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each measure; the median is kept (default 1)")
    ap.add_argument("--report-max-ranks", type=int, default=64, help="measure the HTML report up to this many ranks (64)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per msdiag run (default 900)")
    ap.add_argument("--no-msprof", action="store_true", help="do not run msprof-analyze")
    ap.add_argument("--advisor", action="store_true", help="also time msprof-analyze advisor all (slower)")
    ap.add_argument("--msprof-venv", type=Path, default=Path(tempfile.gettempdir()) / "msprof-analyze-venv")
    ap.add_argument("--install-msprof", action="store_true", help="create --msprof-venv with msprof-analyze 26.2.0")
    ap.add_argument("--msprof-timeout", type=float, default=1200.0, help="seconds per msprof-analyze run (default 1200)")
    ap.add_argument("--json", type=Path, help="write the results here")
    return ap.parse_args(argv)


def job_root(args: argparse.Namespace, tmp: Path, n: int) -> Path:
    """Where the job of ``n`` ranks is built: --out with {n} filled in, or DIR/job<n>, or the temp folder."""
    if args.out is None:
        return tmp / f"job{n}"
    return Path(args.out.format(n=n)) if "{n}" in args.out else Path(args.out) / f"job{n}"


def _built(meta: dict[str, Any]) -> str:
    if meta.get("reused"):
        return "reused"
    return f"built in {meta.get('build_s')} s ({meta.get('build_cpu_s')} s CPU, {meta.get('build_jobs')} processes)"


def run_case(n: int, root: Path, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """Build or reuse the job of ``n`` ranks and measure everything on it; the row of results."""
    params = job_params(n, args.steps, args.seed, args.jitter, args.slow_factor, args.slow_link_factor)
    meta = ensure_job(root, params, args.build_jobs, args.reuse, args.rebuild)
    cap = root / "job"
    print(f"job of {n} ranks: {meta['bytes'] / GB:.2f} GB, slow rank {meta['slow_rank']}, slow link {meta['slow_link']} "
          f"({cap}, {_built(meta)})", file=sys.stderr)  # fmt: skip
    row: dict[str, Any] = {"plan": meta}
    if args.build_only:
        return row
    args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"msdiag-bench{n}-", dir=args.work))
    t0 = time.perf_counter()
    try:
        row["prime"] = prime(cap)
        ms = Msdiag(cap, work, env, args.jobs, shlex.split(args.msdiag_args), args.timeout)
        peer = None if args.no_msprof else Msprof(args.msprof_venv, cap, work, args.msprof_timeout)
        cold, warm, rep, cluster, advisor = [], [], [], [], []
        # first a memory run of each cold case, not timed: PSS sampled over the process tree (~10 ms of kernel time a
        # poll, every 50 ms: it took time from the run it sampled, so the timed runs below sample RSS only); and each
        # tool's first run after prime is not a timed one (msdiag's first 512-rank cold run was the slowest of the
        # three in each of three benches: 5.72, 5.2, 4.95 s against 4.2-5.56 s)
        cache = work / "cache-memory"
        cold_mem = ms.analyze(cache, "cold", pss=True)
        shutil.rmtree(cache, ignore_errors=True)
        peer_mem = peer.cluster(pss=True) if peer is not None else None
        # round by round, each tool's runs beside the other's: a shared machine whose speed drifts over minutes
        # (another tenant's load) weighs on both alike, not on whichever ran last
        for i in range(args.repeat):
            cache = work / f"cache{i}"  # empty: a first run writes it
            cold.append(ms.analyze(cache, "cold"))
            warm.append(ms.analyze(cache, "warm"))
            if n <= args.report_max_ranks:
                rep.append(ms.report(work / f"report-cache{i}"))
            shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(work / f"report-cache{i}", ignore_errors=True)
            if peer is not None:
                cluster.append(peer.cluster())
                if args.advisor:
                    advisor.append(peer.advisor())
        row["msdiag_cold"], row["msdiag_warm"] = with_peak(median_run(cold), cold_mem), median_run(warm)
        if rep:
            row["report_cold"] = median_run(rep)
        if peer is not None:
            row["msprof"] = {"cluster": with_peak(median_run(cluster), peer_mem)}
            if advisor:
                row["msprof"]["advisor"] = median_run(advisor)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row["bench_s"] = round(time.perf_counter() - t0, 1)
    row["targets"] = targets(row)
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not SOURCE.is_dir():
        sys.exit(f"corpus rank not found: {SOURCE} (set MSDIAG_CORPUS)")
    t_start = time.perf_counter()
    if not args.no_msprof and not args.build_only and not (args.msprof_venv / "bin" / "msprof-analyze").exists():
        err = install_msprof(args.msprof_venv) if args.install_msprof else "not installed (use --install-msprof)"
        if err:
            print(f"msprof-analyze in {args.msprof_venv}: {err}", file=sys.stderr)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    info = environment(args)
    info["bytecode"] = compile_bytecode()
    tmp = Path(tempfile.mkdtemp(prefix="msdiag-cluster-")) if args.out is None else Path(".")
    results = []
    try:
        for n in args.ranks:
            results.append(run_case(n, job_root(args, tmp, n), args, env))
            if args.json:  # after every job: a long run interrupted still leaves what it measured
                args.json.write_text(json.dumps({"environment": info, "results": results}, indent=1, default=str))
    finally:
        if args.out is None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    info["total_s"] = round(time.perf_counter() - t_start, 1)
    info["speed_probe_s_at_end"] = speed_probe()
    if args.json:
        args.json.write_text(json.dumps({"environment": info, "results": results}, indent=1, default=str))
    if args.build_only:
        for row in results:
            p = row["plan"]
            print(f"{p['ranks']} ranks: {p['bytes'] / GB:.2f} GB, {_built(p)}")
        return 0
    print_details(results)
    print(f"\nmsprof-analyze: {info['msprof_analyze']}; {info['cpus']} CPUs, load average at start {info['loadavg_at_start']}; "
          f"msdiag {info['msdiag_rev']} (bytecode compiled: {info['bytecode']['compiled']}); "
          f"the bench took {info['total_s'] / 60:.1f} min; speed probe ({PROBE_LOOPS:,} Python loop iterations) "
          f"{info['speed_probe_s_at_start']} s at the start, {info['speed_probe_s_at_end']} s at the end\n")  # fmt: skip
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
