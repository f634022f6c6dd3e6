"""What the host does while the device waits: host-device synchronisations with the user's call site, and the
other host activities the profiler records (dataset fetch, garbage collection, checkpoint saving, op compilation).

A synchronisation (``aten::item``, ``Tensor.asnumpy``, ``aclrtSynchronizeStream*``, MindSpore ``SyncStream``)
blocks the host until the device has finished everything queued before it: nothing new is launched meanwhile.
With ``with_stack`` the profiler records the Python frames (torch_npu ``python_function`` events, named
``file(line): function``) on the same thread; the innermost frame in the user's code (library frames such
as site-packages, torch/, mindspore/ skipped) is where the synchronisation comes from.

Per rank and step (the host ``ProfilerStep#N`` marker when present, else the step's span): the union of the
events of each cause inside the step; a cause's figure is the median over steps, the job's the largest
over ranks (the host that blocks longest). Data waits are the step breakdown's ``data_wait_us``.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from msdiag import intervals as iv
from msdiag.metrics.breakdown import DATA_WAIT_PATTERN
from msdiag.metrics.registry import Context, Reads, Value, declare_reads, key_rows, metric, rank_rows
from msdiag.model import RankData
from msdiag.units import US_PER_MS

#: Host events that block the host until the device catches up (torch_npu, CANN AscendCL, MindSpore).
SYNC_PATTERN = (
    r"aten::item$|aten::_local_scalar_dense|Tensor\.asnumpy|asnumpy$|StreamSynchronize|aclrtSynchronize(?:Stream|Device)"
    r"|SyncStream|SyncDevice"
)
#: Other host activities, by the names the profilers give their events.
ACTIVITY_PATTERNS: dict[str, str] = {
    "gc": r"(?i)^(?:gc|garbage ?collect|PyGC)",
    "checkpoint": r"(?i)save_checkpoint|torch\.save|_save_to_file",
    "compile": r"aclopCompile$|^(?:CompileGraph|compile_graph|GraphCompile)$",
}
#: A Python frame event: ``path/file.py(line): function``.
FRAME_PATTERN = r"\.py\(\d+\): "
#: Frames of libraries, not the user's code.
LIBRARY_FRAME = re.compile(
    r"site-packages|dist-packages|/lib/python|^<"
    r"|(^|/)(torch|torch_npu|mindspore|numpy|threading|multiprocessing|concurrent|asyncio|runpy|importlib)/"
)
#: Call sites quoted per cause, longest first; and user frames of a call site's stack.
TOP_SITES = 5
STACK_DEPTH = 3
#: Synchronisations resolved to a call site per rank, longest first (the rest count in the total, unnamed).
MAX_RESOLVED = 200

_READS = Reads(
    tables=("timeline",),
    lanes=("step",),
    lane_rows=(("host", SYNC_PATTERN), ("host", FRAME_PATTERN), *(("host", p) for p in ACTIVITY_PATTERNS.values())),
    deep_rows=(("host", FRAME_PATTERN),),  # call sites are resolved on the ranks read deep only
)
declare_reads("causes", _READS)
_SOURCE = "trace_view.json host events (python_function frames with with_stack, CANN AscendCL, torch ops)"


def _windows(ctx: Context, rank: int, tl: pd.DataFrame, step_rows: np.ndarray | None = None) -> _Windows:
    """The rank's steps (step, lo, hi): host ProfilerStep#N markers, else the step breakdown's spans.

    On arrays, no frame (it runs once per rank of the job); ``step_rows``: the positions of the timeline's step
    markers when already found (_lane_rows)."""
    marks = _lane_rows(tl)[1] if step_rows is None else step_rows  # positions, not a filtered frame
    if len(marks):
        names = tl["name"]
        fast = _step_objects(names.array.take(marks)) if isinstance(names.dtype, pd.StringDtype) else None
        step = _step_numbers(names.iloc[marks]) if fast is None else fast
        lo = tl["start_us"].to_numpy(float, na_value=np.nan)[marks]
        hi = lo + tl["dur_us"].to_numpy(float, na_value=np.nan)[marks]
    else:
        st = _rank_steps(ctx, rank)
        if not len(st):
            return _Windows(np.empty(0, dtype=object), np.empty(0), np.empty(0))
        step, lo = st["step"], st["start_us"].to_numpy(float, na_value=np.nan)
        hi = st["end_us"].to_numpy(float, na_value=np.nan)
    keep = np.flatnonzero(~(np.isnan(lo) | np.isnan(hi)))
    order = keep[np.argsort(lo[keep], kind="stable")]
    if isinstance(step, np.ndarray):
        return _Windows(step[order], lo[order], hi[order])
    # the values a column of step.array.take(order) gave as objects (Series.to_numpy(object): NA as pd.NA)
    return _Windows(step.array.take(order).to_numpy(dtype=object), lo[order], hi[order])


class _Windows(NamedTuple):
    """A rank's steps in start order: each one's step number (objects: int, or NA when the marker has none),
    start and end (us)."""

    step: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.lo)


def _lane_rows(tl: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the timeline's host rows and of its step markers, from one pass over its lanes."""
    codes, lanes = pd.factorize(tl["lane"])  # a missing lane: -1
    at = {str(x): j for j, x in enumerate(lanes)}
    return tuple(np.flatnonzero(codes == at[k]) if k in at else np.empty(0, dtype=np.int64) for k in ("host", "step"))  # type: ignore[return-value]


_STEP_NUMBER = re.compile(r"#(\d+)")
_MAX_DIGITS = 18  # a step number of at most 18 digits fits int64


def _step_numbers(names: pd.Series) -> pd.Series:
    r"""The step number in each marker name (``ProfilerStep#12`` -> 12, none: NA) as Int64: what
    ``str.extract(r"#(\d+)").astype("Int64")`` gives, by the same regex on a few Python strings; a number
    that is not plain ASCII digits or is too long for that is left to pandas (and its error)."""

    def by_pandas() -> pd.Series:
        return names.astype("string").str.extract(r"#(\d+)", expand=False).astype("Int64")

    if not isinstance(names.dtype, pd.StringDtype):
        return by_pandas()
    texts: list[Any] = []
    for n in names.tolist():
        m = _STEP_NUMBER.search(n) if isinstance(n, str) else None
        t = m.group(1) if m else None
        if t is not None and not (t.isascii() and len(t) <= _MAX_DIGITS):
            return by_pandas()
        texts.append(pd.NA if t is None else int(t))
    return pd.Series(pd.array(texts, dtype="Int64"), index=names.index)


def _step_objects(names: Any) -> np.ndarray | None:
    """_step_numbers of the marker names ``names`` (a pandas string array) as the objects its Int64 values give
    (int, or pd.NA where a name has no number), without a Series; None when one is left to pandas."""
    out = np.empty(len(names), dtype=object)
    for j, n in enumerate(names.tolist()):
        m = _STEP_NUMBER.search(n) if isinstance(n, str) else None
        t = m.group(1) if m else None
        if t is not None and not (t.isascii() and len(t) <= _MAX_DIGITS):
            return None
        out[j] = pd.NA if t is None else int(t)
    return out


def _rank_steps(ctx: Context, rank: int) -> pd.DataFrame:
    """The step breakdown's rows of one rank: ctx.steps grouped by rank once per analysis, not filtered per rank."""
    by_rank: dict[int, pd.DataFrame] = ctx.once(
        "causes.steps_by_rank",
        lambda: {int(r): g for r, g in ctx.steps.groupby("rank", sort=False)} if len(ctx.steps) else {},
    )
    return by_rank.get(rank, ctx.steps.iloc[:0])


def call_site(frames: pd.DataFrame, start: float, end: float) -> list[str]:
    """The user frames enclosing [start, end] on one thread, innermost first (at most STACK_DEPTH)."""
    name = frames["name"].to_numpy(object)
    return _Frames(frames["start_us"].to_numpy(float), frames["dur_us"].to_numpy(float), name, _Names()).site(start, end)


class _Names:
    """The names seen in one analysis, each given an id once, and per pattern whether each id matches it
    (re.search on the name): the ranks of a job mostly run the same code, so a name recurring on every rank
    is searched once per pattern, and a rank maps its distinct names to ids once for all patterns."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str] = []
        self.hits: dict[str, np.ndarray] = {}

    def ids_of(self, names: Any) -> np.ndarray:
        """The id of each of ``names`` (by str(name)): those seen before looked up at once, the others one by one."""
        ids = self.ids
        got = list(map(ids.get, names))  # a str is its own key
        if None in got:
            for j, i in enumerate(got):
                if i is None:
                    key = str(names[j])
                    i = ids.get(key)
                    if i is None:
                        i = ids[key] = len(self.names)
                        self.names.append(key)
                    got[j] = i
        return np.array(got, dtype=np.int64)

    def matches(self, pattern: str, ids: np.ndarray) -> np.ndarray:
        """Whether the name of each of ``ids`` matches ``pattern``."""
        done = self.hits.get(pattern, np.empty(0, dtype=bool))
        if len(done) < len(self.names):
            rx = re.compile(pattern)
            more = np.array([rx.search(n) is not None for n in self.names[len(done) :]], dtype=bool)
            done = self.hits[pattern] = np.concatenate([done, more])
        return done[ids]


class _Frames:
    """One thread's Python frames as arrays, for finding the frames that enclose an event quickly."""

    def __init__(self, start: np.ndarray, dur: np.ndarray, name: np.ndarray, memo: _Names) -> None:
        order = np.argsort(-start, kind="stable")  # latest start first (pandas' stable descending sort; NaN last)
        self.start = start[order]
        self.end = self.start + dur[order]
        codes, names = pd.factorize(name[order], use_na_sentinel=False)
        self.name = np.array([str(n) for n in names], dtype=object)[codes] if len(codes) else np.empty(0, object)
        user = ~memo.matches(LIBRARY_FRAME.pattern, memo.ids_of(names))  # once per distinct frame
        self.user = user[codes] if len(codes) else np.empty(0, bool)

    def site(self, start: float, end: float) -> list[str]:
        hit = self.user & (self.start <= start) & (self.end >= end)  # latest start first: innermost first
        return [str(n) for n in self.name[hit][:STACK_DEPTH]]


class _Host:
    """A rank's host events (the timeline's host lane) as arrays: each distinct name matched against a pattern
    once per analysis (_Names), and each event's thread: the id at the end of its track name
    ('Python/Thread 3096504' and 'CANN/Thread 3096504' are one thread)."""

    def __init__(self, tl: pd.DataFrame, memo: _Names, rows: np.ndarray | None = None) -> None:
        """``rows``: the positions of the host rows in ``tl`` when already found (_lane_rows)."""
        rows = _lane_rows(tl)[0] if rows is None else rows
        self.memo = memo
        self.index = tl.index[rows]
        self.start = tl["start_us"].to_numpy(float, na_value=np.nan)[rows]
        self.dur = tl["dur_us"].to_numpy(float, na_value=np.nan)[rows]
        taken = tl["name"].array.take(rows)
        if isinstance(taken, pd.arrays.NumpyExtensionArray):  # (an object column: pandas 2.2 warns on the wrapper)
            taken = taken.to_numpy()
        self.codes, names = pd.factorize(taken)  # a missing name: -1, never matches
        self._names = np.asarray(names, dtype=object)
        self.ids = memo.ids_of(self._names)  # the analysis' id of each distinct name
        self._tracks = tl["track"]
        self._rows = rows

    @cached_property
    def name(self) -> np.ndarray:
        """Each event's name (a missing one: NA; computed when first asked: the call sites read the frames' only)."""
        return np.append(self._names, pd.NA)[self.codes] if len(self.codes) else np.empty(0, dtype=object)

    @cached_property
    def thread(self) -> np.ndarray:
        """Each event's thread (computed when first asked: the projection reads the events only); the track
        names of the timeline factorized whole (its own storage's hashing), each distinct one parsed once."""
        tcodes, tracks = pd.factorize(self._tracks, use_na_sentinel=False)
        threads = np.array([str(t).rsplit(" ", 1)[-1] for t in tracks], dtype=object)
        return threads[tcodes[self._rows]] if len(self._rows) else np.empty(0, dtype=object)

    def __len__(self) -> int:
        return len(self.start)

    def events(self, pattern: str) -> np.ndarray:
        """The positions (in the host rows, in timeline order) of the events whose name matches ``pattern``
        (re.search, as pandas' str.contains)."""
        hit = np.append(self.memo.matches(pattern, self.ids), False)
        return np.flatnonzero(hit[self.codes])

    def outermost(self, pos: np.ndarray) -> np.ndarray:
        """Of the events at ``pos``, those not inside a longer event of the same thread (aten::item holds its
        aclrtSynchronizeStream), by thread, start and longest first (the order of pandas' sort on those keys:
        a stable lexicographic sort, NaN last)."""
        if not len(pos):
            return pos
        tcodes, threads = pd.factorize(self.thread[pos])
        rank = np.empty(len(threads), dtype=np.int64)
        rank[np.argsort(np.asarray(threads, dtype=object), kind="stable")] = np.arange(len(threads))
        start, dur = self.start[pos], self.dur[pos]
        order = np.lexsort((-dur, start, rank[tcodes]))
        pos, end, thread = pos[order], (start + dur)[order], self.thread[pos[order]]
        keep = np.ones(len(pos), dtype=bool)
        reach, prev = -np.inf, None
        for i in range(len(pos)):
            if thread[i] != prev:
                reach, prev = -np.inf, thread[i]
            keep[i] = end[i] > reach
            reach = max(reach, end[i])
        return pos[keep]

    def resolved(self, pos: np.ndarray) -> np.ndarray:
        """Whether each event at ``pos`` is among the MAX_RESOLVED longest: the events pandas'
        ``nlargest(MAX_RESOLVED, "dur_us")`` picks (the first of equal durations at the cut; a NaN duration
        only when there are no more events than that, and then it has no site anyway)."""
        if len(pos) <= MAX_RESOLVED:
            return np.ones(len(pos), dtype=bool)
        dur = self.dur[pos]
        ok = np.flatnonzero(~np.isnan(dur))
        top = ok[np.argsort(-dur[ok], kind="stable")[:MAX_RESOLVED]]
        labels = set(self.index[pos[top]])
        return np.array([x in labels for x in self.index[pos]], dtype=bool)

    def sites(self, pos: np.ndarray, by_thread: dict[str, _Frames]) -> list[str | None]:
        """The call site stack ('inner < outer') of each event at ``pos``; the MAX_RESOLVED longest only (the
        first of equal durations, NaN never: pandas' nlargest)."""
        out: list[str | None] = []
        for p, r in zip(pos, self.resolved(pos)):
            g = by_thread.get(str(self.thread[p]))
            s = float(self.start[p])
            stack = g.site(s, s + float(self.dur[p])) if g is not None and r else []
            out.append(" < ".join(stack) if stack else None)
        return out


def rank_activity(ctx: Context, rank: int) -> pd.DataFrame:
    """The rank's host activities inside its steps: cause, step, start_us, end_us, site (one row per outermost event).

    Events are clipped to their step; an event outside every step is left out.
    """
    rd = next(r for r in ctx.capture.ranks if r.rank == rank)
    tl = rd.tables.get("timeline")
    if tl is None or not len(tl):
        return _NO_ACTIVITY
    return _acts_in(tl, _windows(ctx, rank, tl), rd.info.read_depth == "shallow", _Names()).frame()


class _Part(NamedTuple):
    """The activities of one cause of a rank, in the order found: step (objects), start_us, end_us, site."""

    step: np.ndarray
    start: np.ndarray
    end: np.ndarray
    site: list[str | None]


class _Acts:
    """A rank's activities as arrays, one part per cause (CAUSE_CATEGORY's order, causes with events only): what
    the figures, the call sites and the comm overlap read, without a frame per rank; the frame
    (rank_activity's) is built when asked."""

    def __init__(self, parts: dict[str, _Part]) -> None:
        self.parts = parts

    def of(self, cause: str) -> _Part | None:
        """The rows of ``cause`` (None when it has none): ``groupby("cause")``'s group of the frame."""
        p = self.parts.get(cause)
        return p if p is not None and len(p.start) else None

    def frame(self) -> pd.DataFrame:
        """The activities as rank_activity's frame: a frame per cause with events, concatenated."""
        if not self.parts:
            return _NO_ACTIVITY
        return pd.concat([pd.DataFrame({
            "cause": cause, "step": p.step, "start_us": p.start, "end_us": p.end, "site": p.site,
        }) for cause, p in self.parts.items()], ignore_index=True)  # fmt: skip


def _acts_in(tl: pd.DataFrame, win: _Windows, shallow: bool, memo: _Names, host: _Host | None = None) -> _Acts:
    """The activities of a rank's timeline ``tl`` and its steps ``win`` (_windows); ``shallow``: the rank was
    read shallow (its call sites are unknown); ``memo``: the name matches of the analysis (_Names); ``host``:
    the host rows of ``tl`` already taken (_Host), else taken here.

    On arrays (positions in the host rows), not frames per pattern: it runs for every rank of the job."""
    events = host if host is not None else _Host(tl, memo)
    if not len(events) or not len(win):
        return _NO_ACTS
    # a rank read shallow holds only the first frame of each name: its call sites are unknown, never guessed
    frames = events.events(FRAME_PATTERN) if not shallow else np.empty(0, dtype=np.int64)
    by_thread: dict[str, _Frames] = {}
    if len(frames):
        tcodes, threads = pd.factorize(events.thread[frames])
        for j, t in enumerate(threads):
            f = frames[tcodes == j]
            by_thread[str(t)] = _Frames(events.start[f], events.dur[f], events.name[f], memo)
    lo, hi, steps = win.lo, win.hi, win.step
    parts = {}
    for cause, pattern in (("host-sync", SYNC_PATTERN), *ACTIVITY_PATTERNS.items()):
        ev = events.outermost(events.events(pattern))
        if not len(ev):
            continue
        s = events.start[ev]
        e = s + events.dur[ev]
        i = np.searchsorted(lo, s, side="right") - 1  # the step that began last before the event
        ok = (i >= 0) & (s < hi[np.clip(i, 0, None)])
        sites = events.sites(ev, by_thread)
        parts[cause] = _Part(steps[i[ok]], s[ok], np.minimum(e[ok], hi[i[ok]]), [x for x, k in zip(sites, ok) if k])
    return _Acts(parts) if parts else _NO_ACTS


_NO_ACTIVITY = pd.DataFrame(columns=["cause", "step", "start_us", "end_us", "site"])
_NO_ACTS = _Acts({})


# ---- causes ------------------------------------------------------------------------------------

#: The category each host cause belongs to (data waits are the step breakdown's).
CAUSE_CATEGORY = {"host-sync": "host", "data-wait": "data", "gc": "host", "checkpoint": "host", "compile": "host"}


#: ctx.cache keys of what is computed per rank: the activities (rank -> (activities by cause as arrays, _Acts;
#: number of steps)) and the ms per step each cause costs the rank (rank -> cause -> ms).
ACTIVITY_CACHE = "causes.activity"
FIGURES_CACHE = "causes.figures"
#: and, taken from the same host rows, the events the projection reads as intervals (host_spans)
SPANS_CACHE = "causes.host_spans"

#: The host events the projection (metrics/projection.py) reads as intervals: data waits, synchronisations.
SPAN_PATTERNS = (DATA_WAIT_PATTERN, SYNC_PATTERN)


def _spans(host: _Host) -> list[iv.Intervals]:
    """Per pattern of SPAN_PATTERNS, the host events whose name matches it (re.search, as pandas'
    str.contains), as intervals."""
    if not len(host):
        return [iv.EMPTY for _ in SPAN_PATTERNS]
    return [iv.make(host.start[hit], host.dur[hit]) for hit in (host.events(p) for p in SPAN_PATTERNS)]


def host_spans(ctx: Context, rd: RankData, memo: _Names) -> list[iv.Intervals]:
    """The events of each of SPAN_PATTERNS on the rank's host lane as intervals: those kept when the rank's
    activities were computed from the same rows (SPANS_CACHE: the ranks of this capture), else taken from its
    timeline here (``memo``: the name matches of the analysis, _Names)."""
    kept: list[iv.Intervals] | None = ctx.cache.get(SPANS_CACHE, {}).get(rd.rank)
    return kept if kept is not None else _spans(_Host(rd.table("timeline"), memo))


def _activity(ctx: Context) -> dict[int, tuple[_Acts, int]]:
    """Per rank, in the capture's order: its activities (rank_activity's rows as arrays by cause, _Acts) and its
    number of steps; computed once per analysis (a rank already in the cache is not computed again)."""
    if "causes" not in ctx.cache:
        known: dict[int, tuple[_Acts, int]] = ctx.cache.get(ACTIVITY_CACHE, {})
        known_spans: dict[int, list[iv.Intervals]] = ctx.cache.get(SPANS_CACHE, {})
        out, spans = {}, {}
        memo = _Names()
        for rd in ctx.capture.ranks:
            if rd.rank in known:
                out[rd.rank] = known[rd.rank]
                if rd.rank in known_spans:
                    spans[rd.rank] = known_spans[rd.rank]
                continue
            tl = rd.tables.get("timeline")
            if tl is None or not len(tl):
                out[rd.rank] = (_NO_ACTS, 0)
                continue
            host_rows, step_rows = _lane_rows(tl)  # one pass over the lanes for both
            win = _windows(ctx, rd.rank, tl, step_rows)  # once per rank: its steps and its activities in them
            host = _Host(tl, memo, host_rows)  # its host rows, taken once for the activities and the projection's spans
            spans[rd.rank] = _spans(host)
            out[rd.rank] = (_acts_in(tl, win, rd.info.read_depth == "shallow", memo, host), len(win))
        ctx.cache["causes"] = ctx.cache[ACTIVITY_CACHE] = out
        ctx.cache[SPANS_CACHE] = spans
    cached: dict[int, tuple[_Acts, int]] = ctx.cache["causes"]
    return cached


def host_syncs(ctx: Context, rank: int) -> pd.DataFrame:
    """The rank's host-device synchronisations inside its steps (rank_activity rows), from the analysis' cache."""
    act = _activity(ctx).get(rank, (_NO_ACTS, 0))[0].frame()
    return act[act["cause"] == "host-sync"]


def _per_step_ms(act: _Part, n_steps: int) -> float:
    """Median over the rank's steps of the union (ms) of the activity's events in each step (0 where none)."""
    # the groups of groupby("step", dropna=False), each with its rows in order, on arrays (the median does not
    # depend on the order of the groups)
    codes, _ = pd.factorize(act.step)  # a missing step: -1, one group as groupby's NaN group
    start, end = act.start, act.end
    per = [iv.total((start[g], end[g])) for _, g in key_rows(codes)]
    per += [0.0] * (n_steps - len(per))
    return float(np.median(per)) / US_PER_MS if per else 0.0


def _step_ms(ctx: Context, rank: int) -> float | None:
    """The rank's median step time (ms; None without a timed step)."""
    med = _step_medians(ctx, "total_us").get(rank)
    return None if med is None else med / US_PER_MS


def _call_sites(start: np.ndarray, end: np.ndarray, site: np.ndarray, n_steps: int) -> list[dict[str, Any]]:
    """Top call sites of a cause: site (innermost user frame), stack, ms per step (mean over ranks); from its
    rows of the ranks whose sites count, laid end to end."""
    named = np.flatnonzero(pd.notna(site))
    if not len(named) or not n_steps:
        return []
    dur = pd.Series(end[named] - start[named])
    ms = dur.groupby(pd.Series(site[named], dtype=object)).sum() / US_PER_MS / n_steps  # pandas' sum (as before)
    top = ms.sort_values(ascending=False, kind="stable").head(TOP_SITES)
    return [{"site": str(k).split(" < ")[0], "stack": str(k), "ms_per_step": round(float(v), 3)} for k, v in top.items()]


def cause_rows(ctx: Context) -> list[dict[str, Any]]:
    """The JSON contract's ``causes``: one row per host cause seen (id, category, ms_per_step, share_of_step,
    ranks, call_sites), largest first. ms_per_step: the rank that loses most (median over its steps).
    Computed once per analysis (the cause metrics and the contract ask for it)."""
    hit = ctx.cache.get("causes.rows")
    if hit is None:
        hit = ctx.cache["causes.rows"] = _cause_rows(ctx)
    return hit  # type: ignore[no-any-return]


def cause_per_rank(ctx: Context) -> dict[str, dict[int, float]]:
    """Per host cause, the ms per step each rank loses to it (ranks losing nothing left out).

    Exact on ranks read shallow too (their pattern rows are whole): the choice of the ranks read deep
    (metrics/depth.py) reads it."""
    per_cause: dict[str, dict[int, float]] = {cause: {} for cause in CAUSE_CATEGORY}
    for r, figures in _figures(ctx).items():  # ranks in the capture's order, causes in CAUSE_CATEGORY's
        for cause, ms in figures.items():
            per_cause[cause][r] = ms
    return {cause: {r: v for r, v in per_rank.items() if v > 0} for cause, per_rank in per_cause.items()}


def _figures(ctx: Context) -> dict[int, dict[str, float]]:
    """Per rank (the capture's order), the ms per step each cause it has a figure for costs it (0 included);
    computed once per analysis (a rank already in the cache, FIGURES_CACHE, is not computed again)."""
    if "causes.figures_done" not in ctx.cache:
        known: dict[int, dict[str, float]] = ctx.cache.get(FIGURES_CACHE, {})
        waits = _step_medians(ctx, "data_wait_us")
        out = {r: known[r] if r in known else _rank_figures(waits.get(r), a, n) for r, (a, n) in _activity(ctx).items()}
        ctx.cache["causes.figures_done"] = ctx.cache[FIGURES_CACHE] = out
    done: dict[int, dict[str, float]] = ctx.cache["causes.figures_done"]
    return done


def _step_medians(ctx: Context, column: str) -> dict[int, float]:
    """Per rank with a value of ``column`` in a step row, the median of its values (pandas' median of the rank's
    rows, NaN left out: np.median of the others); from one grouping of the step rows per analysis, not a
    frame per rank."""

    def medians() -> dict[int, float]:
        st = ctx.steps
        if not len(st):
            return {}
        values = st[column].to_numpy(float, na_value=np.nan)
        out = {}
        for r, rows in rank_rows(st):
            v = values[rows]
            v = v[~np.isnan(v)]
            if len(v):
                out[r] = float(np.median(v))
        return out

    got: dict[int, float] = ctx.once(f"causes.step_medians.{column}", medians)
    return got


def _rank_figures(wait_us: float | None, acts: _Acts, n: int) -> dict[str, float]:
    """One rank's figure per cause (CAUSE_CATEGORY's order): data waits from its step rows (``wait_us``, None:
    none recorded; us), the others from its activities (_per_step_ms); a cause without a figure is left out."""
    out: dict[str, float] = {}
    for cause in CAUSE_CATEGORY:
        if cause == "data-wait":
            if wait_us is not None:
                out[cause] = wait_us / US_PER_MS
            continue
        a = acts.of(cause)
        if a is not None:
            out[cause] = _per_step_ms(a, n)
    return out


def _site_ranks(ctx: Context) -> set[int] | None:
    """The ranks whose call sites count (None: every rank): those the answer rests on when the job is
    large enough to be read tiered (Capture.ingest read_depth "selected", the same in --deep auto and all)."""
    sel = ctx.capture.ingest.get("read_depth", {}).get("selected")
    return None if sel is None else {int(r) for r in sel}


def _cause_rows(ctx: Context) -> list[dict[str, Any]]:
    acts = _activity(ctx)
    sites_from = _site_ranks(ctx)
    site_acts = [v for r, v in acts.items() if sites_from is None or r in sites_from]
    n_all = sum(n for _, n in site_acts)
    rows = []
    for cause, per_rank in cause_per_rank(ctx).items():
        category = CAUSE_CATEGORY[cause]
        if not per_rank:
            continue
        worst = max(per_rank, key=lambda r: per_rank[r])
        step_ms = _step_ms(ctx, worst)
        parts = [p for p in (a.of(cause) for a, _ in site_acts) if p is not None]  # the rows, ranks end to end
        start = np.concatenate([p.start for p in parts]) if parts else np.empty(0)
        end = np.concatenate([p.end for p in parts]) if parts else np.empty(0)
        site = np.array([x for p in parts for x in p.site], dtype=object)
        rows.append({
            "id": cause, "category": category, "ms_per_step": round(per_rank[worst], 3),
            "share_of_step": round(per_rank[worst] / step_ms, 4) if step_ms else None,
            "ranks": sorted(per_rank), "call_sites": _call_sites(start, end, site, n_all),
        })  # fmt: skip
    return sorted(rows, key=lambda x: -x["ms_per_step"])


def _sync(ctx: Context) -> tuple[dict[str, Any] | None, str | None]:
    """The host-sync cause row, or why there is none."""
    tl = [rd.tables.get("timeline") for rd in ctx.capture.ranks]
    if not any(t is not None and len(t) and (t["lane"] == "host").any() for t in tl):
        return None, (
            "the capture records no host-side events (Python frames, synchronisations: trace_view.json's host "
            "lane, written by the Ascend profiler with with_stack / at Level1)"
        )
    row = next((r for r in cause_rows(ctx) if r["id"] == "host-sync"), None)
    if row is None:
        return {"ms_per_step": 0.0, "share_of_step": 0.0, "call_sites": [], "ranks": []}, None
    return row, None


@metric(
    "host_sync_ms_per_step",
    "ms",
    "Host blocked in host-device synchronisations (aten::item, asnumpy, aclrtSynchronizeStream, SyncStream) "
    "inside the step: per rank the median over steps of their union; the largest over ranks",
    _SOURCE,
    reads=_READS,
    given=_sync,
)
def _host_sync_ms(ctx: Context, row: dict[str, Any]) -> Value:
    return Value(row["ms_per_step"])


@metric(
    "host_sync_share",
    "ratio",
    "host_sync_ms_per_step over the median step time of that rank",
    _SOURCE,
    reads=_READS,
    given=_sync,
)
def _host_sync_share(ctx: Context, row: dict[str, Any]) -> Value:
    return Value(row["share_of_step"])


@metric(
    "host_sync_site",
    "call site",
    "The user call site of the longest host-device synchronisations ('file(line): function < caller < ...', "
    "python_function frames recorded with with_stack); null without Python frames",
    _SOURCE,
    reads=_READS,
    given=_sync,
)
def _host_sync_site(ctx: Context, row: dict[str, Any]) -> Value:
    if not row["call_sites"]:
        return Value(None, reason="no synchronisation inside a Python frame of the user's code (with_stack off?)")
    return Value(row["call_sites"][0]["stack"])


def _comm_overlap(ctx: Context) -> tuple[float | None, str | None]:
    """Share of the synchronisation time during which the same rank's device is inside a collective."""
    acts = _activity(ctx)
    k = ctx.capture.table("kernels")
    comm = k[(k["kind"] == "communication").to_numpy(bool, na_value=False)] if len(k) else k
    # each rank's communication kernels as arrays cut by position (rank_rows: groupby("rank")'s groups, in order)
    by_rank = dict(rank_rows(comm)) if len(comm) else {}
    c_start = comm["start_us"].to_numpy(float, na_value=np.nan)
    c_dur = comm["dur_us"].to_numpy(float, na_value=np.nan)
    sync_us = over_us = 0.0
    for r, (acts_r, _) in acts.items():
        a = acts_r.of("host-sync")  # each rank's host-sync rows, in order
        if a is None:
            continue
        s = (a.start, a.end)
        at = by_rank.get(r, np.empty(0, dtype=np.int64))
        sync_us += iv.total(s)
        over_us += iv.total(iv.intersect(s, iv.make(c_start[at], c_dur[at])))
    if not sync_us:
        return None, "no host-device synchronisation inside a step"
    return over_us / sync_us, None


@metric(
    "host_sync_comm_share",
    "ratio",
    "Share of the host-sync time during which the same rank's device runs a collective: near 1, the "
    "synchronisation only waits for that collective (a symptom of the collective's own wait)",
    _SOURCE + "; communication kernels",
    reads=Reads(tables=("kernels", "timeline"), lanes=("step",), lane_rows=_READS.lane_rows, deep_rows=_READS.deep_rows),
)
def _host_sync_comm(ctx: Context) -> Value:
    share, why = _comm_overlap(ctx)
    return Value(None if share is None else round(share, 4), reason=why)
