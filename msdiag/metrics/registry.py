"""Every metric msdiag computes, registered once: id, unit, a one-line doc and its source.

A metric is a pure function of the analysis context that returns a job-level value, the
per-rank values behind it, and, when it cannot be computed, the reason. A figure that needs
data the capture lacks is null with the reason, never 0.
"""

from __future__ import annotations

import contextlib
import pickle
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

import numpy as np
import pandas as pd

from msdiag.model import Capture
from msdiag.options import Options

if TYPE_CHECKING:
    from msdiag.inference.requests import RequestLog
    from msdiag.trainlog.reader import TrainLog

T = TypeVar("T")


class Pickled:
    """A helper's value as a forked child pickled it (:func:`compute_all`), unpickled where it is first read."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class Cache(dict):  # type: ignore[type-arg]  # str -> a helper's value
    """``Context.cache``: a dict whose :class:`Pickled` values are unpickled when first read (``[]``, ``get``,
    ``setdefault``, ``items``, ``values``): of the helpers a child brings back, the analysis reads a few (512 bench
    ranks: 2 of 14 for the JSON report), and unpickling them all cost the parent ~0.1 s."""

    def __getitem__(self, key: str) -> Any:
        v = dict.__getitem__(self, key)
        if isinstance(v, Pickled):
            v = pickle.loads(v.data)
            dict.__setitem__(self, key, v)
        return v

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def items(self) -> list[tuple[str, Any]]:  # type: ignore[override]
        return [(k, self[k]) for k in self]

    def values(self) -> list[Any]:  # type: ignore[override]
        return [self[k] for k in self]

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self and default:
            return default[0]
        v = self[key]
        dict.pop(self, key)
        return v


@dataclass
class Context:
    """What metrics read: the capture's tables, the computed step rows and, for inference, a request log."""

    capture: Capture
    steps: pd.DataFrame
    options: Options = field(default_factory=Options)  # typed, read by attribute (msdiag/options.py)
    cache: dict[str, Any] = field(default_factory=Cache)  # shared by the metrics of one analysis
    requests: RequestLog | None = None  # a request timing log (msdiag analyze LOG / --requests LOG)
    train_log: TrainLog | None = None  # a training log (msdiag analyze TRAIN.log / --train-log TRAIN.log)

    def once(self, key: str, make: Callable[[], T]) -> T:
        """``make()``, computed once per analysis and kept in :attr:`cache` under ``key``: a helper that
        several metrics (and the views) ask for is not recomputed for each. Callers must not modify the result."""
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]  # type: ignore[no-any-return]


def nan_sum(values: np.ndarray) -> Any:
    """``np.nansum(values)`` (NaN as 0; pandas' sum of a float column, the same pairwise order), the array summed as it
    is where no value is NaN (its sum is then not NaN: nothing to replace, the same sum to the bit) rather than copied
    to replace none: a metric sums thousands of small slices (512 ranks: ~25,000 calls, ~15 us each saved)."""
    total = values.sum()
    return total if total == total else np.nansum(values)


def key_rows(keys: np.ndarray) -> list[tuple[Any, np.ndarray]]:
    """Each distinct value of ``keys`` (no NaN) with the positions of its rows: keys ascending, each group's rows
    in their order (one stable sort, then the array cut where the key changes)."""
    order = np.argsort(keys, kind="stable")
    cuts = np.flatnonzero(np.diff(keys[order])) + 1
    return [(keys[g[0]], g) for g in np.split(order, cuts) if len(g)]


def unread_host(ctx: Context) -> set[int]:
    """The ranks whose host side was not read: read shallow without parsing their trace (``read_depth`` "summary":
    ingest/loader.Tiered). The host-side figures (data waits, host-bound time, the host causes, the projection of
    their fixes) rest on the other ranks, the same in --deep auto and all."""
    return {int(rd.rank) for rd in ctx.capture.ranks if rd.info.read_depth == "summary"}


def rank_rows(df: pd.DataFrame) -> list[tuple[int, np.ndarray]]:
    """The groups of ``df.groupby("rank")`` as row positions: ranks in order, missing ranks left out, each
    group's rows in their order in ``df``. One stable sort instead of a frame per rank: a metric over
    every rank sums ``column[rows]`` on arrays (np.nansum is pandas' float sum, the same order)."""
    rank = df["rank"].to_numpy(float, na_value=np.nan)
    pos = np.flatnonzero(~np.isnan(rank))
    return [(int(r), pos[g]) for r, g in key_rows(rank[pos])]


@dataclass
class Value:
    value: float | int | str | None
    per_rank: Mapping[int, float | str | None] = field(default_factory=dict)
    reason: str | None = None  # why the value is null
    # null as a negative result: the metric looked at the data and found nothing to name (no slow rank,
    # no slow link); a rule on it was checked and found nothing, it did not lack data (rules_checked)
    checked: bool = False


@dataclass(frozen=True)
class Reads:
    """What a metric (or another reader of the gathered ranks) reads of a rank's tables.

    The rank reduction (metrics/reduce.py) keeps exactly what these declarations name: a timeline
    lane no declaration reads is dropped, a lane read only by distinct name keeps one row per name
    (plus the rows a ``lane_rows`` pattern names), a counter track no declaration reads is dropped.
    ``tables`` says which canonical tables are read (tables are kept whole).
    """

    tables: tuple[str, ...] = ()  # canonical tables read
    lanes: tuple[str, ...] = ()  # timeline lanes read row by row
    lane_names: tuple[str, ...] = ()  # timeline lanes read only by distinct event name
    lane_rows: tuple[tuple[str, str], ...] = ()  # (lane, regex): rows of that lane whose name matches, read whole
    tracks: tuple[str, ...] = ()  # counter tracks read
    #: (lane, regex) of ``lane_rows`` read only on the ranks read deep (the Python frames of call sites): a
    #: shallow read keeps only the first row of each such name
    deep_rows: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.tables or self.lanes or self.lane_names or self.lane_rows or self.tracks)


@dataclass(frozen=True)
class Metric:
    id: str
    unit: str
    doc: str
    source: str
    fn: Callable[[Context], Value]
    reads: Reads = Reads()
    #: rule parameters ("rule-id.param") the metric cuts at: read from ctx.options.param, never a copy
    params: tuple[str, ...] = ()
    #: the unit of the per-rank values when it is not the metric's (an imbalance ratio over ranks' times in us)
    per_rank_unit: str | None = None
    #: the module that defines it (``fn`` may be the registry's wrapper of it: ``given=``)
    module: str = ""


METRICS: dict[str, Metric] = {}
#: Readers of the gathered ranks that are not metrics (the step breakdown, views): name -> what they read.
READERS: dict[str, Reads] = {}


#: What a metric is computed from, when it needs more than the context: (data, None), or (None, why not).
Given = Callable[[Context], "tuple[Any, str | None]"]


def metric(
    id: str,
    unit: str,
    doc: str,
    source: str,
    reads: Reads = Reads(),
    params: tuple[str, ...] = (),
    given: Given | None = None,
    per_rank_unit: str | None = None,
) -> Callable[[Callable[..., Value]], Callable[..., Value]]:
    """Register a metric function under ``id`` (ids are unique), with what it reads and the rule params it uses.

    ``given``: a helper several metrics share, returning ``(data, None)`` or ``(None, reason)``. The
    metric is then called as ``fn(ctx, data)``, and is null with the helper's reason when data is None.
    ``per_rank_unit``: the unit of the per-rank values when it differs from ``unit``.
    """

    def deco(fn: Callable[..., Value]) -> Callable[..., Value]:
        if id in METRICS:
            raise ValueError(f"metric {id} registered twice")
        METRICS[id] = Metric(id, unit, doc, source, fn if given is None else _with_given(fn, given), reads, tuple(params), per_rank_unit,
                             fn.__module__)
        return fn

    return deco


def _with_given(fn: Callable[[Context, Any], Value], given: Given) -> Callable[[Context], Value]:
    def run(ctx: Context) -> Value:
        data, why = given(ctx)
        return Value(None, reason=why) if data is None else fn(ctx, data)

    return run


def declare_reads(name: str, reads: Reads) -> None:
    """Declare what a reader that is not a metric (e.g. the step breakdown) reads of the ranks."""
    if READERS.get(name, reads) != reads:
        raise ValueError(f"reader {name} declared twice with different reads")
    READERS[name] = reads


_LOADED: list[bool] = []  # [True] once every module of msdiag.metrics is imported


def _load_metric_modules() -> None:
    """Import every module of msdiag.metrics: each registers its metrics where they are defined (the
    package folder is listed once per process)."""
    if _LOADED:
        return
    import importlib
    import pkgutil

    import msdiag.metrics as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"msdiag.metrics.{mod.name}")
    _LOADED.append(True)


def all_metrics() -> dict[str, Metric]:
    """Every registered metric, by id."""
    _load_metric_modules()
    return METRICS


def all_reads() -> dict[str, Reads]:
    """Every declaration of what is read of a rank: each metric's (by id) and each other reader's (by name)."""
    out = {m.id: m.reads for m in all_metrics().values() if m.reads}
    out.update(READERS)
    return out


def declared_params() -> dict[str, tuple[str, ...]]:
    """Metric id -> the rule parameters ("rule-id.param") it reads through the options."""
    return {m.id: m.params for m in all_metrics().values() if m.params}


# A job of at least SPLIT_MIN_RANKS ranks computes the metrics defined in SPLIT_MODULES in a forked child while
# this process computes the others: the metrics are the longest serial stretch of a cluster analysis, and the
# second core idles through it. The two halves share no cached helper of weight (memory and the kernel mix in
# the child; kernel types, communication with the collectives that read its rows, steps, FLOPs, host causes here;
# balanced at 512 bench ranks: each ~1.2 s, compute_all 1.59-1.71 -> 1.34-1.40 s with the kernel mix moved to the
# child and communication to this process). Below SPLIT_MIN_RANKS the fork and the
# return cost more than they save. The child's memory grows with this process' heap: the pages of every Python
# object it touches are copied (reference counts are writes), besides its own work. So the split is made only
# while this process holds at most SPLIT_MAX_RSS_MB, the two then within ~1 GiB together (issue 17's bound at 512
# ranks); a larger job computes its metrics in one process, as lean as before. Measured: 64 ranks, ~170 MiB held,
# peak 255 MiB against 252 MiB in one process; 512 bench ranks, 388 MiB held since the ranks' frames are cut only
# when read (model.Rows; 542 MiB before, the peak then 1,006 MiB), four alternated cold runs: 6.70-7.52 s against
# 7.48-8.53 s in one process, the peak 779-831 MiB against 705-709 MiB; 1,024 ranks hold 665 MiB: one process.
# What the child cached (``ctx.cache``) comes back for the views that read it after, each
# helper of at most KEPT_MAX_BYTES pickled; a larger one is computed again where it is asked for.
SPLIT_MIN_RANKS = 16
SPLIT_MAX_RSS_MB = 512
SPLIT_MODULES = ("msdiag.metrics.device_memory", "msdiag.metrics.memory", "msdiag.metrics.balance", "msdiag.metrics.kernels")
KEPT_MAX_BYTES = 16 << 20


def compute_all(ctx: Context, meanwhile: Callable[[], object] | None = None) -> dict[str, Value]:
    """Compute every registered metric; a metric that fails is null with the reason. On a job of many ranks
    part of them are computed in a forked child (``_split``): the same values, in the registry's order, and
    the helpers the child cached (``ctx.cache``) brought back for the views that read them after.
    ``meanwhile``: the caller's work that reads no metric (its results kept by the caller), done here once this
    process has computed its part while the child computes on: at 512 bench ranks this process waited 0.06-0.84 s for
    the child. Without a child it is not called."""
    from msdiag import forking

    metrics = list(all_metrics().values())
    aside = [m for m in metrics if m.module in SPLIT_MODULES] if _split(ctx) else []
    apart = {m.id for m in aside}
    out: dict[str, Value] = {}
    child = None
    if aside:
        had = set(ctx.cache)
        child = forking.Forked(lambda: _computed_aside(ctx, aside, had))
    try:
        for m in metrics:
            if m.id not in apart:
                out[m.id] = _computed(ctx, m)
        if child is not None:
            if meanwhile is not None:
                meanwhile()
            try:
                values, kept = child.result()
            except forking.ForkFailed:  # computed here, as without the child (a bug then raises here)
                values, kept = {m.id: _computed(ctx, m) for m in aside}, {}
            out.update(values)
            if not isinstance(ctx.cache, Cache):
                ctx.cache = Cache(ctx.cache)
            for key, data in kept.items():
                if key not in ctx.cache:
                    ctx.cache[key] = Pickled(data)  # (unpickled where it is read: Cache)
    finally:  # after an error or an interrupt here the child is stopped and reaped (a no-op once collected)
        if child is not None:
            child.cancel()
    return {m.id: out[m.id] for m in metrics}


def _computed(ctx: Context, m: Metric) -> Value:
    try:
        return m.fn(ctx)
    except (KeyError, ValueError, ZeroDivisionError) as e:  # data-shaped failures only
        return Value(None, reason=f"could not be computed: {e}")


def _split(ctx: Context) -> bool:
    """Whether to fork: more than one CPU is ours (and no other thread runs here, forking.fork_cpus), --jobs is
    not 1, the job has SPLIT_MIN_RANKS ranks and this process holds at most SPLIT_MAX_RSS_MB."""
    from msdiag.forking import fork_cpus, resident_kb

    if fork_cpus() <= 1 or ctx.options.jobs == 1 or len(ctx.capture.ranks) < SPLIT_MIN_RANKS:
        return False
    held = resident_kb()
    return held is not None and held <= SPLIT_MAX_RSS_MB * 1024


#: Helpers of the views (their results small, each kept in ``ctx.cache`` by its own ``once``) that a forked child
#: computing their module's metrics computes after them (``_computed_aside``): what they read is there, already
#: computed (512 ranks: the memory composition read the framework rows, 74 MB, too large to come back, and
#: computed them again here). Registered with :func:`with_its_metrics`.
WITH_METRICS: list[Callable[[Context], Any]] = []


def with_its_metrics(fn: Callable[[Context], T]) -> Callable[[Context], T]:
    """Register ``fn`` (a view's helper, caching its result in ``ctx.cache``) in :data:`WITH_METRICS`."""
    WITH_METRICS.append(fn)
    return fn


#: Key prefixes of helpers only their module's metrics read (a column's codes, a column per rank): a forked child
#: computing those metrics does not bring them back (512 bench ranks: 12.8 of the 14.6 MB it sent, ~0.05 s of pickling
#: on the metrics' longest path, never read here). Asked for after all the same, such a helper is computed again.
#: Registered with :func:`kept_in_child`.
KEPT_IN_CHILD: set[str] = set()


def kept_in_child(prefix: str) -> str:
    """Register the key prefix ``prefix`` in :data:`KEPT_IN_CHILD`; gives it back (the module's key prefix)."""
    KEPT_IN_CHILD.add(prefix)
    return prefix


def _computed_aside(ctx: Context, aside: list[Metric], had: set[str]) -> tuple[dict[str, Value], dict[str, bytes]]:
    """In the child: the metrics set aside, then the helpers of their modules registered WITH_METRICS (an error there
    is left to the view that asks for it again), and each helper they cached that pickles to at most KEPT_MAX_BYTES
    and is not one of KEPT_IN_CHILD (another is computed again by whoever asks for it)."""
    values = {m.id: _computed(ctx, m) for m in aside}
    modules = {m.module for m in aside}
    for fn in WITH_METRICS:
        if fn.__module__ in modules:
            with contextlib.suppress(Exception):
                fn(ctx)
    kept = {}
    local = tuple(KEPT_IN_CHILD)
    for key in list(ctx.cache):
        if key not in had and not key.startswith(local):
            value = ctx.cache[key]
            with contextlib.suppress(Exception):  # (_Full among them: too large to come back)
                kept[key] = pickled_within(value, KEPT_MAX_BYTES)
    return values, kept


class _Full(Exception):
    """A pickle went beyond its bound (:func:`pickled_within`)."""


class _Bounded:
    """A file for ``pickle.Pickler`` that keeps what is written and raises :class:`_Full` once it holds more than
    ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size, self.parts = limit, 0, []  # type: tuple[int, int, list[bytes]]

    def write(self, data: Any) -> int:
        view = memoryview(data)  # (bytes, or the PickleBuffer of an array's values)
        self.size += view.nbytes
        if self.size > self.limit:
            raise _Full
        self.parts.append(bytes(view))
        return view.nbytes


def pickled_within(value: Any, limit: int) -> bytes:
    """``pickle.dumps(value)`` (the highest protocol), or :class:`_Full` once it would take more than ``limit`` bytes:
    a helper too large to come back from the child is not pickled whole to be dropped (512 bench ranks: the framework
    memory rows, 74 MB, 0.18 s of the child's pickling)."""
    sink = _Bounded(limit)
    pickle.Pickler(sink, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return b"".join(sink.parts)


