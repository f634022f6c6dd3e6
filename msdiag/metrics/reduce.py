"""What the analysis reads of a rank: the reduction applied to every rank before it is gathered.

A rank's tables are read where the rank is parsed (a pool worker, a Dask worker) and only what
the metrics and the report read is sent back, so that the memory of the process holding every rank
grows with the ops the analysis needs, not with the size of the traces.

What is kept follows from the declarations of what is read (``Reads``: ``@metric(..., reads=)``
and ``declare_reads`` in metrics/registry.py), gathered by :func:`plan`; no list here is kept in
step by hand. With today's declarations:

- timeline, lanes ``device``, ``hccl``, ``step``: read row by row (the step breakdown, the report's
  step timeline): kept whole.
- timeline, lane ``host``: the step breakdown reads the host events whose names are dataset waits
  (``breakdown.DATA_WAIT_PATTERN``), whole; the recompute metric reads the others only by name:
  one row per distinct name is kept. On a torch_npu trace with Python call stacks these are most
  of the timeline.
- timeline, lane ``scope``: read only by distinct name (recompute evidence): one row per name.
- timeline, lane ``overlap``: the profiler's own Overlap Analysis lanes; msdiag computes the overlap
  itself from the device lanes and nothing declares them: dropped.
- counters: only the tracks some declaration names (``hardware.AICORE_FREQ_TRACK``,
  ``device_memory.NPU_MEM_TRACK``); the sampled PMU, QoS, HBM and LLC tracks are about half the rows
  of an Ascend trace.
- every other table is kept whole.

tests/test_cluster.py compares the report of corpus captures of every format family with and
without this reduction. A metric or chart that starts reading more of these tables declares it
in the same change; :func:`reduce_id` (the cache key of reduced ranks) then changes by itself.

A rank read shallow (``--deep auto`` on a large job: ingest/loader.Tiered, metrics/depth.py) is reduced by
:func:`reduce_rank_shallow`, with :func:`shallow_plan`: the same less the rows declared read on deep ranks
only (``Reads.deep_rows``: the Python frames, which only call sites read), kept one per name.

The rank's step breakdown (``breakdown.step_breakdown``, the per-rank part of the analysis) is
computed here too, before anything is dropped, and kept as the rank's ``steps`` table: it is then
computed on the workers, in parallel, and read back from the cache with the rank. So are its step
windows' removable kinds (``projection.rank_kinds``, table ``step_kinds``), which the projection reads,
but on a rank read without its trace (``read_depth`` "summary"): the projection leaves its steps out
(registry.unread_host) while a rank read deep is there, and computes them itself where none is.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from msdiag.metrics.breakdown import step_rows
from msdiag.metrics.projection import rank_kinds
from msdiag.metrics.registry import Reads, all_reads
from msdiag.model import STEP_KINDS_TABLE, RankData, hold

#: Bumped whenever the way the reduction keeps rows changes (what it keeps follows from the
#: declarations, hashed by reduce_id): part of the cache key.
REDUCE_VERSION = 5  # 4: the step windows' removable kinds stored (table step_kinds); 5: not on summary ranks
#: Every lane the canonical timeline has (model.py: TIMELINE's ``lane`` column). Rows of any other
#: lane value are kept: the reduction drops only what it knows nothing reads.
TIMELINE_LANES = ("device", "hccl", "overlap", "host", "step", "scope")


@dataclass(frozen=True)
class Plan:
    """What the reduction keeps, gathered from every declaration of what is read."""

    whole_lanes: tuple[str, ...]  # timeline lanes kept row by row
    name_lanes: tuple[str, ...]  # timeline lanes kept one row per distinct name (+ the rows below)
    lane_rows: tuple[tuple[str, str], ...]  # (lane, regex): rows of a name-only lane kept whole
    dropped_lanes: tuple[str, ...]  # timeline lanes nothing reads
    tracks: tuple[str, ...]  # counter tracks kept
    deep_rows: tuple[tuple[str, str], ...] = ()  # (lane, regex) of lane_rows kept whole on ranks read deep only


def plan() -> Plan:
    """The reduction derived from the metrics' and readers' declarations (metrics/registry.py)."""
    return _planned("full", _plan)


def _plan(reads: dict[str, Reads]) -> Plan:
    decl = reads.values()
    whole = sorted({lane for r in decl for lane in r.lanes})
    rows = sorted({(lane, pat) for r in decl for lane, pat in r.lane_rows if lane not in whole})
    names = sorted({lane for r in decl for lane in r.lane_names} - set(whole))
    partial = set(names) | {lane for lane, _ in rows}
    # a lane read only through row patterns is a name-only lane with no name reader: its rows of interest only
    dropped = [lane for lane in TIMELINE_LANES if lane not in whole and lane not in partial]
    return Plan(
        whole_lanes=tuple(whole),
        name_lanes=tuple(names),
        lane_rows=tuple(rows),
        dropped_lanes=tuple(dropped),
        tracks=tuple(sorted({t for r in decl for t in r.tracks})),
        deep_rows=tuple(sorted({(lane, pat) for r in decl for lane, pat in r.deep_rows if (lane, pat) in rows})),
    )


def shallow_plan() -> Plan:
    """What a shallow read of a rank keeps: the plan less the rows read on deep ranks only.

    A row pattern some declaration reads on every rank stays, even when another reads it deep only."""
    return _planned("shallow", _shallow_plan)


def _shallow_plan(reads: dict[str, Reads]) -> Plan:
    p = _plan(reads)
    everywhere = {(lane, pat) for r in reads.values() for lane, pat in r.lane_rows if (lane, pat) not in r.deep_rows}
    deep_only = tuple(x for x in p.deep_rows if x not in everywhere)
    return replace(p, lane_rows=tuple(x for x in p.lane_rows if x not in deep_only), deep_rows=deep_only)


#: The plans made so far, by kind: (the declarations they were made from, as names and object ids; those objects, held
#: so that no id is reused while its plan is kept; the plan).
_PLANS: dict[str, tuple[tuple[tuple[str, ...], tuple[int, ...]], list[Reads], Plan]] = {}


def _planned(kind: str, make: Callable[[dict[str, Reads]], Plan]) -> Plan:
    """``make(all_reads())``, made once while the declarations are the same objects (a rank's reduction asks for its
    plan; a test may declare more)."""
    reads = all_reads()
    held = list(reads.values())
    key = (tuple(reads), tuple(map(id, held)))
    got = _PLANS.get(kind)
    if got is None or got[0] != key:
        got = _PLANS[kind] = (key, held, make(reads))
    return got[2]


def reduce_id() -> str:
    """A stable id of the reduction (its plan from the declarations + REDUCE_VERSION): the rank cache's key."""
    p = plan()
    doc = {
        "version": REDUCE_VERSION,
        "whole_lanes": p.whole_lanes,
        "name_lanes": p.name_lanes,
        "lane_rows": p.lane_rows,
        "dropped_lanes": p.dropped_lanes,
        "tracks": p.tracks,
        "deep_rows": p.deep_rows,
    }
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    return f"reduce-{REDUCE_VERSION}-{digest}"


def reduce_rank(rd: RankData) -> RankData:
    """Store the rank's step rows, then drop the rows nothing reads (module doc); returns ``rd``."""
    return _reduce(rd, plan())


def reduce_rank_shallow(rd: RankData) -> RankData:
    """reduce_rank less the rows read on deep ranks only (:func:`shallow_plan`: the Python frames beyond the
    first of each name): a rank read shallow (--deep auto, ingest/loader.Tiered). ``read_depth`` says
    "shallow" only when such rows were dropped; a rank without them is whole, as read deep."""
    p = shallow_plan()
    tl = rd.tables.get("timeline")
    names = None
    if tl is not None and len(tl):
        names = pd.factorize(tl["name"])  # null names: code -1; shared with _reduce_timeline
        if _repeats(tl, plan().deep_rows, names):
            rd.info.read_depth = "shallow"
    return _reduce(rd, p, names)


def _repeats(tl: pd.DataFrame, rows: tuple[tuple[str, str], ...], names: tuple[np.ndarray, pd.Index]) -> bool:
    """Whether a name some (lane, pattern) of ``rows`` matches occurs more than once in its lane (``names``:
    the timeline's names factorized; the distinct names are matched, the rows counted by code)."""
    name_c, distinct_names = names
    for which, pat in rows:
        codes = name_c[(tl["lane"] == which).fillna(False).to_numpy(bool)]
        counts = np.bincount(codes[codes >= 0], minlength=len(distinct_names))
        present = np.flatnonzero(counts)
        distinct = pd.Series(distinct_names.take(present)).astype("string")
        hits = present[distinct.str.contains(pat, regex=True, na=False).to_numpy(bool)]
        if len(hits) and int(counts[hits].sum()) > len(hits):
            return True
    return False


def _reduce(rd: RankData, p: Plan, names: tuple[np.ndarray, pd.Index] | None = None) -> RankData:
    """The step rows stored, then the timeline and counters cut to what ``p`` keeps (``names``: the
    timeline's names factorized, when the caller has them)."""
    hold(rd, "steps", step_rows(rd))  # (Rows of its task's step frame where computed for the task at once)
    tl = rd.tables.get("timeline")
    if tl is not None and len(tl):
        rd.tables["timeline"] = _reduce_timeline(tl, p, names)
    c = rd.tables.get("counters")
    if c is not None and len(c):
        keep = c["track"].isin(p.tracks).fillna(False).to_numpy(bool)
        if not keep.all():
            rd.tables["counters"] = c[keep].reset_index(drop=True)
    # the projection's windows and kinds, from the rows the analysis will hold (the reduced rank: fewer host
    # rows to take than the whole one, and the very rows the analysis would compute them from); a rank read
    # without its trace has none stored: its steps are left out of the projection (projection.step_sets) but
    # where no rank was read deep (every chosen rank's trace damaged), and then computed there from its rows
    if rd.info.read_depth != "summary":
        rd.tables[STEP_KINDS_TABLE.name] = rank_kinds(rd)
    return rd


def _reduce_timeline(tl: pd.DataFrame, p: Plan, names_c: tuple[np.ndarray, pd.Index] | None = None) -> pd.DataFrame:
    """Whole lanes kept, name-only lanes one row per name plus the rows a pattern names, unread lanes dropped.

    Lanes and names are factorized once (a few distinct values, hashed in pandas / Arrow): every
    test below runs on integer codes or on the distinct values, never on the rows' strings."""
    lane_c, lanes = pd.factorize(tl["lane"], use_na_sentinel=False)
    lane_v = [("" if v is None or v is pd.NA else str(v)) for v in lanes.tolist()]
    partial = tuple(dict.fromkeys(p.name_lanes + tuple(lane for lane, _ in p.lane_rows)))
    keep = ~np.isin(np.array(lane_v, dtype=object), p.dropped_lanes + partial)[lane_c]
    if not any(v in partial for v in lane_v):
        return tl if keep.all() else tl[keep].reset_index(drop=True)
    name_c, names = names_c if names_c is not None else pd.factorize(tl["name"])  # null names: code -1
    for which in partial:
        if which not in lane_v:
            continue
        idx = np.flatnonzero(lane_c == lane_v.index(which))
        codes = name_c[idx]
        first = np.zeros(len(idx), dtype=bool)
        if which in p.name_lanes:  # the first row of each name (and of the null name)
            first[np.unique(codes, return_index=True)[1]] = True
        patterns = [pat for lane_, pat in p.lane_rows if lane_ == which]
        if patterns:
            # the distinct names are few: match them, not every event
            present = np.unique(codes[codes >= 0])
            distinct = pd.Series(names.take(present)).astype("string")
            hits = distinct.str.contains(_either(patterns), regex=True, na=False)
            first |= np.isin(codes, present[hits.to_numpy(bool)])
        keep[idx[first]] = True
    if keep.all():
        return tl
    return tl[keep].reset_index(drop=True)


_GLOBAL_FLAGS = re.compile(r"\(\?([imsx]+)\)")


def _either(patterns: list[str]) -> str:
    """One regular expression that matches where any of ``patterns`` does: each a group of its own, a pattern's
    leading global flags (``(?i)``) made its group's (``(?i:...)``). Python's re, which pandas 2's string methods
    use, refuses global flags anywhere but at the start; RE2 (pandas 3's Arrow strings) reads both alike."""
    out = []
    for pat in patterns:
        m = _GLOBAL_FLAGS.match(pat)
        out.append(f"(?{m.group(1)}:{pat[m.end():]})" if m else f"(?:{pat})")
    return "|".join(out)
