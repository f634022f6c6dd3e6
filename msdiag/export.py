"""The capture's timeline as a Chrome trace (`msdiag report ... --trace FILE.json`), with msdiag's annotations.

The Trace Event Format is a JSON object whose ``traceEvents`` list holds complete events (``"ph": "X"``:
``ts`` and ``dur`` in microseconds), instant events (``"ph": "i"``, scope ``"s"`` ``t`` / ``p`` / ``g``) and
metadata events (``"ph": "M"``: ``process_name``, ``thread_name``, ``process_sort_index``, ...); Perfetto UI,
chrome://tracing and MindStudio Insight open it. Times are the profiler's own (epoch microseconds), so an event
lies where the profiler put it and can be found in the capture's own ``trace_view.json``.

What is written:

- one process per rank (``pid`` = the rank id, named ``rank N``), one thread per track of the rank's timeline
  (device streams, communication groups, the step marker, host threads); a rank without a device timeline gets
  its kernel table (one thread per stream, or the host ops of a CPU capture);
- msdiag's tracks, processes named ``msdiag: ...`` sorted first: ``msdiag: steps`` (each analysed step of each
  rank, its breakdown in ``args``), ``msdiag: causes`` (host synchronisations, GC, checkpoints, compilation and
  data waits inside the steps, and each collective's late arrival: an interval from the first rank's arrival to
  the last arriver's, and an instant at its arrival), ``msdiag: findings`` (the verdict and each finding as an
  interval over the median step, the message, evidence and suggested actions in ``args``).

A request log alone gives process ``requests`` (each request from arrival to its last token, holding ``TTFT`` and
``decode``) and the findings over the log's window.

Only the steps analysed are written, and at most :data:`MAX_EVENTS` timeline events: whole steps, the median
step first. What was left out (events outside the steps, steps beyond the cap, host events the analysis did not
keep) is said in ``otherData.msdiag.left_out`` and in a global instant event ``msdiag: not in this trace``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from msdiag import __version__
from msdiag.errors import InputError
from msdiag.metrics.breakdown import DATA_WAIT_PATTERN
from msdiag.metrics.causes import rank_activity
from msdiag.metrics.collectives import collectives_table
from msdiag.units import US_PER_MS, US_PER_S

if TYPE_CHECKING:
    from msdiag.analysis import Analysis
    from msdiag.metrics.registry import Context
    from msdiag.model import RankData

__all__ = ["MAX_EVENTS", "chrome_trace", "write_trace"]

#: At most this many timeline events are written (about 150 bytes each): whole steps, the median step first.
MAX_EVENTS = 200_000
#: The timeline lanes written, in thread order (the ``overlap`` and ``scope`` lanes are the profiler's own
#: derived views: the analysis does not keep them).
LANES = ("step", "device", "kernels", "hccl", "host")
#: The step breakdown's parts shown in a step's args, in ms.
BREAKDOWN = (
    "total_us", "computing_us", "communication_us", "communication_exposed_us", "overlapped_us", "free_us",
    "bubble_us", "preparing_us", "data_wait_us",
)  # fmt: skip
HOST_NOTE = (
    "host events: only those the analysis keeps (dataset waits, host-device synchronisations, GC, checkpoints, "
    "compilation, Python frames; of the other host events one instance per name)"
)


@dataclass
class _Trace:
    """The events being written and what was left out."""

    events: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)

    def meta(self, pid: int, kind: str, tid: int | None = None, **args: Any) -> None:
        ev: dict[str, Any] = {"ph": "M", "pid": pid, "name": kind, "args": args}
        if tid is not None:
            ev["tid"] = tid
        self.events.append(ev)

    def span(self, pid: int, tid: int, name: str, ts: float, dur: float, cat: str, **args: Any) -> None:
        ev: dict[str, Any] = {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat, "ts": ts, "dur": max(dur, 0.0)}
        if args:
            ev["args"] = _clean(args)
        self.events.append(ev)

    def instant(self, pid: int, tid: int, name: str, ts: float, cat: str, scope: str = "t", **args: Any) -> None:
        self.events.append({"ph": "i", "s": scope, "pid": pid, "tid": tid, "name": name, "cat": cat, "ts": ts,
                            "args": _clean(args)})  # fmt: skip


def _clean(v: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN / NA to null (the format is strict JSON)."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_clean(x) for x in v]
    if isinstance(v, (np.integer, np.bool_)):
        return v.item()
    if isinstance(v, (float, np.floating)):
        return float(v) if np.isfinite(v) else None
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    return v


# ---- the ranks' timelines ----------------------------------------------------------------------


def _rank_rows(rd: RankData) -> pd.DataFrame:
    """The rank's events: lane, track, name, start_us, dur_us (the timeline; the kernel table without one)."""
    tl = rd.tables.get("timeline")
    rows = tl[tl["lane"].isin(LANES)] if tl is not None and len(tl) else pd.DataFrame()
    # the kernel table (Ascend kernel_details, a CPU capture's host ops) when the timeline has no device lane
    if not len(rows) or not rows["lane"].eq("device").any():
        k = rd.tables.get("kernels")
        if k is not None and len(k):
            stream = pd.to_numeric(k["stream"], errors="coerce")
            track = ["Stream " + str(int(s)) if pd.notna(s) else "ops" for s in stream]
            dev = pd.DataFrame({"lane": "kernels", "track": track, "name": k["name"].astype(str),
                                "start_us": k["start_us"], "dur_us": k["dur_us"]})  # fmt: skip
            rows = pd.concat([rows[dev.columns], dev], ignore_index=True) if len(rows) else dev
    if not len(rows):
        return pd.DataFrame(columns=["lane", "track", "name", "start_us", "dur_us"])
    rows = rows[["lane", "track", "name", "start_us", "dur_us"]]
    return rows[pd.to_numeric(rows["start_us"], errors="coerce").notna().to_numpy(bool)]


#: Window of the steps that carry none (rows of step_trace_time.csv): the span of the rank's kernels of the step.
KERNEL_SPAN = (
    "the span of the rank's kernels of this step (the step's row comes from step_trace_time.csv, which records no times)"
)


def _rank_windows(steps: pd.DataFrame, rd: RankData) -> pd.DataFrame:
    """The rank's analysed step rows with a window, by start, with ``key`` (step id, -1 for the whole capture) and
    ``window`` (how the window was found): the step breakdown's window, else the span of the rank's kernels of
    that step id."""
    s = steps[(steps["rank"] == rd.rank).to_numpy(bool)].copy()
    s["key"] = pd.to_numeric(s["step"], errors="coerce").fillna(-1).astype(int).to_numpy()
    s["start_us"] = pd.to_numeric(s["start_us"], errors="coerce").astype(float)
    s["end_us"] = pd.to_numeric(s["end_us"], errors="coerce").astype(float)
    s["window"] = None
    missing = (s["start_us"].isna() | s["end_us"].isna()).to_numpy(bool)
    k = rd.tables.get("kernels")
    if missing.any() and k is not None and len(k):
        start = pd.to_numeric(k["start_us"], errors="coerce").astype(float)
        span = pd.DataFrame({
            "key": pd.to_numeric(k["step"], errors="coerce").fillna(-1).astype(int).to_numpy(),
            "lo": start.to_numpy(), "hi": (start + pd.to_numeric(k["dur_us"], errors="coerce").astype(float).fillna(0.0)).to_numpy(),
        }).groupby("key").agg(lo=("lo", "min"), hi=("hi", "max"))  # fmt: skip
        s.loc[missing, "start_us"] = s.loc[missing, "key"].map(span["lo"]).to_numpy(float)
        s.loc[missing, "end_us"] = s.loc[missing, "key"].map(span["hi"]).to_numpy(float)
        s.loc[missing, "window"] = KERNEL_SPAN
    s = s[s["start_us"].notna().to_numpy(bool) & s["end_us"].notna().to_numpy(bool)]
    return s.sort_values("start_us", kind="stable").reset_index(drop=True)


def _median_key(wins: dict[int, pd.DataFrame]) -> int | None:
    """The representative step (as views.median_step): the one whose median step time over the ranks is the
    median; None without steps."""
    rows = pd.concat(list(wins.values()), ignore_index=True) if wins else pd.DataFrame()
    if not len(rows):
        return None
    by = rows.groupby("key")["total_us"].median().sort_values(kind="stable")
    return int(by.index[(len(by) - 1) // 2])


def _in_steps(rows: pd.DataFrame, win: pd.DataFrame) -> np.ndarray:
    """The step key of each row: the last step window the row overlaps (the host's step marker and the host work
    before the step's first device task included), -2 outside every window."""
    start = rows["start_us"].to_numpy(float)
    if not len(win):
        return np.full(len(rows), -2)
    end = start + pd.to_numeric(rows["dur_us"], errors="coerce").fillna(0.0).to_numpy(float)
    lo, hi = win["start_us"].to_numpy(float), win["end_us"].to_numpy(float)
    i = np.searchsorted(lo, end, side="right") - 1  # the last window that begins before the row ends
    ok = i >= 0
    i = np.clip(i, 0, None)
    inside = ok & (start <= hi[i]) & (end >= lo[i])
    return np.where(inside, win["key"].to_numpy()[i], -2)


def _step_order(keys: pd.Series, median: int | None) -> list[int]:
    """The step keys in the order they are written until the cap: the median step first, then by step."""
    order = sorted(int(k) for k in keys.unique() if k != -2)
    return ([median] if median in order else []) + [k for k in order if k != median]


def _capture_events(t: _Trace, a: Analysis, wins: dict[int, pd.DataFrame]) -> set[int]:
    """Every rank's timeline events of the steps written (at most MAX_EVENTS); returns the step keys written."""
    median = _median_key(wins)
    parts = []
    for rd in a.capture.ranks:
        rows = _rank_rows(rd).assign(rank=int(rd.rank))
        rows["key"] = _in_steps(rows, wins[int(rd.rank)])
        parts.append(rows)
    if not parts:
        return set()
    rows = pd.concat(parts, ignore_index=True)
    outside = int((rows["key"] == -2).sum())
    if outside:
        t.left_out.append(f"{outside} timeline event(s) outside the steps analysed")
    counts = rows["key"].value_counts()
    written: list[int] = []
    total = 0
    for k in _step_order(rows["key"], median):
        if total + int(counts[k]) > MAX_EVENTS and written:
            break
        written.append(k)
        total += int(counts[k])
    rest = [k for k in _step_order(rows["key"], median) if k not in written]
    if rest:
        n = int(counts[rest].sum())
        t.left_out.append(f"{len(rest)} step(s) ({n} events) beyond the cap of {MAX_EVENTS} events")
    keep = rows[rows["key"].isin(written)]
    if len(keep) > MAX_EVENTS:  # the median step alone is larger than the cap: its first events
        t.left_out.append(f"{len(keep) - MAX_EVENTS} event(s) of the median step beyond the cap of {MAX_EVENTS}")
        keep = keep.sort_values("start_us", kind="stable").iloc[:MAX_EVENTS]
    if (keep["lane"] == "host").any() and not a.options.whole_timeline:
        t.left_out.append(HOST_NOTE)
    _emit_ranks(t, keep, a)
    return set(written)


def _nested_lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per event such that the events of a lane are nested or disjoint, as a viewer draws a thread: an event
    that partly overlaps the one it starts in (the profiler's own tasks do, by a fraction of a microsecond, and
    float64 keeps epoch microseconds to 0.25 us) goes to the next lane, never moved or cut."""
    lane = np.zeros(len(start), dtype=int)
    stacks: list[list[float]] = []
    for i in np.lexsort((-end, start)):
        s, e = start[i], end[i]
        for k, stack in enumerate(stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                lane[i] = k
                break
        else:
            stacks.append([e])
            lane[i] = len(stacks) - 1
    return lane


def _emit_ranks(t: _Trace, rows: pd.DataFrame, a: Analysis) -> None:
    """One process per rank, one thread per track (lanes in LANES order; a track whose events partly overlap gets
    more threads, ``<track> (overlapping N)``), one X event per row."""
    for rd in a.capture.ranks:
        r = int(rd.rank)
        label = f"rank {r}" + (f" (device {rd.info.device_id})" if rd.info.device_id is not None else "")
        t.meta(r, "process_name", name=label)
        t.meta(r, "process_sort_index", sort_index=r)
        mine = rows[rows["rank"] == r]
        start = mine["start_us"].to_numpy(float)
        dur = np.maximum(pd.to_numeric(mine["dur_us"], errors="coerce").fillna(0.0).to_numpy(float), 0.0)
        track = mine["track"].astype(str).to_numpy()
        sub = np.zeros(len(mine), dtype=int)
        for name in np.unique(track):
            at = np.flatnonzero(track == name)
            sub[at] = _nested_lanes(start[at], start[at] + dur[at])
        order = sorted({(LANES.index(str(lane)), str(tr), int(k)) for lane, tr, k in zip(mine["lane"], track, sub)})
        tid_of = {(tr, k): i for i, (_, tr, k) in enumerate(order)}
        for (tr, k), tid in tid_of.items():
            t.meta(r, "thread_name", tid, name=tr + (f" (overlapping {k + 1})" if k else ""))
            t.meta(r, "thread_sort_index", tid, sort_index=tid)
        for lane, tr, k, name, ts, d in zip(mine["lane"], track, sub, mine["name"], start, dur):
            t.events.append({"ph": "X", "pid": r, "tid": tid_of[(str(tr), int(k))], "name": str(name), "cat": str(lane),
                             "ts": float(ts), "dur": float(d)})  # fmt: skip


# ---- msdiag's tracks ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pids:
    """msdiag's processes, numbered after the highest rank."""

    steps: int
    causes: int
    findings: int


def _pids(a: Analysis) -> _Pids:
    base = max((int(rd.rank) for rd in a.capture.ranks), default=-1) + 1
    return _Pids(steps=base, causes=base + 1, findings=base + 2)


def _step_track(t: _Trace, wins: dict[int, pd.DataFrame], pid: int, written: set[int]) -> None:
    """``msdiag: steps``: per rank, each step written, its breakdown (ms) in args."""
    t.meta(pid, "process_name", name="msdiag: steps")
    t.meta(pid, "process_sort_index", sort_index=-3)
    for r, rows in sorted(wins.items()):
        t.meta(pid, "thread_name", r, name=f"rank {r}")
        for row in rows[rows["key"].isin(written).to_numpy(bool)].to_dict("records"):
            warm = row.get("warmup")
            warm = warm is not None and not pd.isna(warm) and bool(warm)
            name = ("the capture" if row["key"] == -1 else f"step {row['key']}") + (" (warm-up)" if warm else "")
            args = {c.replace("_us", "_ms"): (None if pd.isna(row[c]) else float(row[c]) / US_PER_MS) for c in BREAKDOWN}
            args["source"] = row.get("source")
            if row["window"]:
                args["window"] = row["window"]
            t.span(pid, r, name, row["start_us"], row["end_us"] - row["start_us"], "msdiag.step", **args)


@dataclass(frozen=True)
class _Mark:
    """One interval of msdiag's causes track: the rank it is on, its kind (the thread), name, window and args."""

    rank: int
    kind: str
    name: str
    ts: float
    dur: float
    args: dict[str, Any]


def _host_causes(a: Analysis, ctx: Context, wins: dict[int, pd.DataFrame], written: set[int]) -> list[_Mark]:
    """Per rank, the host causes inside the steps written (metrics/causes.py) and the dataset waits (the step
    breakdown's pattern)."""
    out = []
    for rd in a.capture.ranks:
        r = int(rd.rank)
        act = rank_activity(ctx, r)
        for cause, step, s, e, site in zip(act["cause"], act["step"], act["start_us"], act["end_us"], act["site"]):
            if (-1 if pd.isna(step) else int(step)) in written:
                out.append(_Mark(r, str(cause), str(cause), float(s), float(e) - float(s), {"step": step, "call_site": site}))
        tl = rd.tables.get("timeline")
        if tl is None or not len(tl):
            continue
        host = tl[(tl["lane"] == "host").to_numpy(bool)]
        waits = host[host["name"].astype(str).str.contains(DATA_WAIT_PATTERN, regex=True).to_numpy(bool)]
        keys = _in_steps(waits, wins[r])
        for name, s, d, k in zip(waits["name"], waits["start_us"], waits["dur_us"], keys):
            if int(k) in written:
                out.append(_Mark(r, "data-wait", "data-wait", float(s), 0.0 if pd.isna(d) else float(d), {"event": str(name)}))
    return out


def _late_arrivals(ctx: Context, written: set[int]) -> list[_Mark]:
    """Each collective with a last arriver: the wait from the first rank's arrival to the last arriver's, on the
    last arriver's track (the collectives of metrics/collectives.py)."""
    table = collectives_table(ctx)
    if not len(table):
        return []
    rows = table[table["last_arriver"].notna().to_numpy(bool)]
    out = []
    for step, op, ranks, offsets, last, late, first in zip(
        rows["step"],
        rows["op"],
        rows["ranks"],
        rows["arrival_offset_ms"],
        rows["last_arriver"],
        rows["late_ms"],
        rows["first_us"],
    ):
        ranks = list(ranks)
        if (-1 if pd.isna(step) else int(step)) not in written or int(last) not in ranks:
            continue
        r = int(last)
        arrival = float(first) + float(offsets[ranks.index(r)]) * US_PER_MS
        args = {"op": op, "step": step, "late_ms": late, "ranks": ranks, "arrival_offset_ms": list(offsets)}
        out.append(_Mark(r, "late arrival", f"late arrival: rank {r} at {op}", float(first), arrival - float(first), args))
    return out


def _lanes(marks: list[_Mark]) -> list[int]:
    """A lane per mark such that the marks of one lane do not overlap (greedy, by start): a thread of the trace
    holds only nested or disjoint complete events."""
    order = sorted(range(len(marks)), key=lambda i: (marks[i].ts, -marks[i].dur))
    ends: list[float] = []
    lane = [0] * len(marks)
    for i in order:
        m = marks[i]
        free = next((k for k, e in enumerate(ends) if e <= m.ts), None)
        if free is None:
            ends.append(m.ts + m.dur)
            free = len(ends) - 1
        else:
            ends[free] = m.ts + m.dur
        lane[i] = free
    return lane


def _cause_track(t: _Trace, a: Analysis, wins: dict[int, pd.DataFrame], pid: int, written: set[int]) -> None:
    """``msdiag: causes``: a thread per rank and kind of cause (more where its intervals overlap)."""
    t.meta(pid, "process_name", name="msdiag: causes")
    t.meta(pid, "process_sort_index", sort_index=-2)
    assert a.views is not None  # checked by chrome_trace
    ctx = a.views.context
    marks = _host_causes(a, ctx, wins, written) + _late_arrivals(ctx, written)
    groups: dict[tuple[int, str], list[_Mark]] = {}
    for m in marks:
        groups.setdefault((m.rank, m.kind), []).append(m)
    tid = 0
    for (rank, kind), group in sorted(groups.items()):
        lanes = _lanes(group)
        for lane in range(max(lanes) + 1):
            t.meta(pid, "thread_name", tid + lane, name=f"rank {rank} {kind}" + (f" ({lane + 1})" if lane else ""))
            t.meta(pid, "thread_sort_index", tid + lane, sort_index=tid + lane)
        for m, lane in zip(group, lanes):
            cat = "msdiag.late" if kind == "late arrival" else "msdiag.cause"
            t.span(pid, tid + lane, m.name, m.ts, m.dur, cat, **m.args)
            if kind == "late arrival":
                t.instant(pid, tid + lane, m.name, m.ts + m.dur, cat, **m.args)
        tid += max(lanes) + 1


def _median_window(wins: dict[int, pd.DataFrame]) -> tuple[float, float] | None:
    """The median step's window over the ranks (earliest start, latest end); None without steps."""
    key = _median_key(wins)
    rows = [w[w["key"] == key] for w in wins.values()]
    rows = [r for r in rows if len(r)]
    if key is None or not rows:
        return None
    return min(float(r["start_us"].min()) for r in rows), max(float(r["end_us"].max()) for r in rows)


def _finding_track(t: _Trace, a: Analysis, win: tuple[float, float] | None, pid: int) -> None:
    """``msdiag: findings``: the verdict (thread 0) and each finding (a thread each) over ``win`` (the median
    step; a request log's whole window)."""
    if win is None:
        if a.findings:
            t.left_out.append("findings: no step window to place them on")
        return
    lo, hi = win
    t.meta(pid, "process_name", name="msdiag: findings")
    t.meta(pid, "process_sort_index", sort_index=-1)
    v = a.verdict or {}
    t.meta(pid, "thread_name", 0, name="verdict")
    share = v.get("share")
    head = str(v.get("bottleneck", "no verdict")).upper() + (f" {100 * share:.1f}%" if share is not None else "")
    cause = v.get("cause") or {}
    t.span(pid, 0, f"verdict: {head}", lo, hi - lo, "msdiag.verdict", sentence=v.get("sentence"),
           rule_id=v.get("rule_id"), cause=cause.get("sentence"), evidence=v.get("evidence"))  # fmt: skip
    for i, f in enumerate(a.findings, start=1):
        t.meta(pid, "thread_name", i, name=f"{f.get('severity')}: {f.get('rule_id')}")
        t.meta(pid, "thread_sort_index", i, sort_index=i)
        actions = [s.get("action") for s in f.get("suggestions") or []]
        t.span(
            pid,
            i,
            f"{f.get('severity')}: {f.get('name') or f.get('rule_id')}",
            lo,
            hi - lo,
            "msdiag.finding",
            rule_id=f.get("rule_id"),
            message=f.get("message"),
            evidence=f.get("evidence"),
            suggestions=actions,
        )
        t.instant(pid, i, str(f.get("rule_id")), lo, "msdiag.finding", message=f.get("message"))


# ---- the whole trace ---------------------------------------------------------------------------


def _request_track(t: _Trace, log: Any, pid: int) -> tuple[float, float]:
    """A request log alone: process ``requests``, each request an interval from arrival to its last token holding
    ``TTFT`` (arrival to first token: queueing and prefill) and ``decode``; requests that overlap in time go to
    separate threads. At most MAX_EVENTS / 3 requests, by arrival. Returns the log's window (us)."""
    r = log.requests.sort_values("arrival_s", kind="stable")
    keep = r.iloc[: MAX_EVENTS // 3]
    if len(keep) < len(r):
        t.left_out.append(f"{len(r) - len(keep)} request(s) beyond the cap of {MAX_EVENTS // 3} requests")
    marks = [
        _Mark(0, "request", f"request {rid}", float(a0) * US_PER_S, (float(f) - float(a0)) * US_PER_S,
              {"first_us": float(ft) * US_PER_S, "prompt_tokens": pt, "output_tokens": ot, "ttft_ms": ttft,
               "tpot_ms": tpot, "e2e_ms": e2e, "batch_size": bs})
        for rid, a0, ft, f, pt, ot, ttft, tpot, e2e, bs in zip(
            keep["request_id"], keep["arrival_s"], keep["first_token_s"], keep["finish_s"], keep["prompt_tokens"],
            keep["output_tokens"], keep["ttft_ms"], keep["tpot_ms"], keep["e2e_ms"], keep["batch_size"])
    ]  # fmt: skip
    modelled = log.arrivals == "modelled"  # benchmark results without start_times (inference/requests.py)
    t.meta(pid, "process_name", name="requests (arrivals modelled from the request rate)" if modelled else "requests")
    lanes = _lanes(marks)
    for lane in range(max(lanes, default=-1) + 1):
        t.meta(pid, "thread_name", lane, name=f"requests ({lane + 1})")
    for m, lane in zip(marks, lanes):
        first = m.args["first_us"]
        t.span(pid, lane, m.name, m.ts, m.dur, "request", **m.args)
        t.span(pid, lane, "TTFT", m.ts, first - m.ts, "request.ttft")
        t.span(pid, lane, "decode", first, m.ts + m.dur - first, "request.decode")
    return float(r["arrival_s"].min()) * US_PER_S, float(r["finish_s"].max()) * US_PER_S


def _log_trace(a: Analysis) -> dict[str, Any]:
    """The trace of a request log alone: its requests on a timeline (the log's own clock) and the findings."""
    log = a.requests
    if log is None or not log.has_arrivals or not log.requests[["first_token_s", "finish_s"]].notna().all().all():
        why = "it records no arrival times" if log is not None and len(log.requests) else "it holds no request"
        raise InputError(a.capture.path, f"has no timeline to export: a request log alone, and {why}")
    t = _Trace()
    win = _request_track(t, log, 0)
    _finding_track(t, a, win, 1)
    if t.left_out:
        t.instant(0, 0, "msdiag: not in this trace", win[0], "msdiag.note", scope="g", left_out=t.left_out)
    other = {"msdiag": {"version": __version__, "path": str(a.capture.path), "ranks": [], "steps_written": [],
                        "requests_written": min(len(log.requests), MAX_EVENTS // 3), "left_out": t.left_out}}  # fmt: skip
    return {"traceEvents": t.events, "displayTimeUnit": "ms", "otherData": _clean(other)}


def chrome_trace(a: Analysis) -> dict[str, Any]:
    """The analysis' capture as a Chrome trace object: the ranks' timelines of the steps analysed, msdiag's tracks
    (a request log alone: its requests and the findings)."""
    if not a.capture.ranks:
        return _log_trace(a)
    if a.views is None:
        raise InputError(a.capture.path, "the analysis has no context to export")
    wins = {int(rd.rank): _rank_windows(a.steps, rd) for rd in a.capture.ranks}
    t = _Trace()
    written = _capture_events(t, a, wins)
    pids = _pids(a)
    _step_track(t, wins, pids.steps, written)
    _cause_track(t, a, wins, pids.causes, written)
    _finding_track(t, a, _median_window(wins), pids.findings)
    firsts = [e["ts"] for e in t.events if "ts" in e]
    if t.left_out and firsts:
        t.instant(pids.steps, 0, "msdiag: not in this trace", min(firsts), "msdiag.note", scope="g",
                  left_out=t.left_out)  # fmt: skip
    other = {"msdiag": {"version": __version__, "path": str(a.capture.path), "ranks": [int(rd.rank) for rd in a.capture.ranks],
                        "steps_written": sorted(k for k in written if k >= 0), "left_out": t.left_out}}  # fmt: skip
    return {"traceEvents": t.events, "displayTimeUnit": "ms", "otherData": _clean(other)}


def write_trace(trace: dict[str, Any], out: Path) -> int:
    """Write a trace (chrome_trace's) as compact JSON (strict: no NaN); returns the number of events written."""
    text = json.dumps(trace, separators=(",", ":"), allow_nan=False, default=str)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as e:
        raise InputError(str(out), f"cannot write the trace: {e.strerror or e}") from None
    return len(trace["traceEvents"])
