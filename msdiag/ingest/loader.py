"""Load a capture: discover its ranks, read each rank with its format's declaration.

Every file a format can carry is listed once in its declaration (ingest/formats.py and the
format modules), read by one engine (ingest/engine.py). A core source that is present but
unreadable stops the analysis with a clear error; any other source that fails is recorded as
failed with its reason, and the rest is analyzed. Ranks are read in parallel by a process pool; a
single rank is read in-process.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import pandas as pd
from pandas.core.dtypes.missing import array_equals

from msdiag.errors import InputError
from msdiag.forking import release_freed
from msdiag.ingest.discover import MINDSPORE_CPU, MINDSPORE_LEGACY, Discovery, discover
from msdiag.ingest.engine import RankDir, read_rank, skips_when_shallow
from msdiag.ingest.engine import prefetch as engine_prefetch
from msdiag.ingest.formats import BY_NAME
from msdiag.ingest.paths import within_any
from msdiag.model import FAILED, SKIPPED, Capture, RankData, entry, hold, task_scope


@contextlib.contextmanager
def prefetch(dirs: list[RankDir]) -> Iterator[list[tuple[Any, list[Any]]]]:
    """Within the block, the ranks of ``dirs`` read one by one share their formats' bulk reads
    (``engine.prefetch``: the same file of every rank read at once); the block is given the frames those reads cut
    into files' frames (for ``model.concat_alike``)."""
    cuts: list[tuple[Any, list[Any]]] = []
    with contextlib.ExitStack() as stack:
        for name in dict.fromkeys(d.format for d in dirs):
            cuts.extend(stack.enter_context(engine_prefetch(BY_NAME[name], [d for d in dirs if d.format == name])))
        with task_scope(cuts):  # (the ranks' own reads and reductions may add to ``cuts``: model.TaskScope)
            yield cuts


def load_rank(rd_dir: RankDir) -> RankData:
    """Read one rank's folder with the format discovery found (raises ParseError on a broken core file)."""
    return read_rank(BY_NAME[rd_dir.format], rd_dir)


def load_rank_shallow(rd_dir: RankDir) -> RankData:
    """load_rank less the sources its format declares deep-only where their condition holds (trace_view.json
    beside a kernel_details.csv that carries steps and communication: ingest/formats.py); ``read_depth``
    "summary" when one was left unparsed."""
    return read_rank(BY_NAME[rd_dir.format], rd_dir, shallow=True)


def load(
    path: str | Path,
    jobs: int | None = None,
    *,
    cache: str | Path | None = None,
    scheduler: str | None = None,
    reduce: Callable[[RankData], RankData] | None = None,
    reduce_id: str | None = None,
    tiered: Tiered | None = None,
) -> Capture:
    """Discover and read a capture.

    ``jobs``: worker processes for many ranks (default: CPUs). ``cache``: a cache folder (outside the
    capture) where each rank's tables are kept as Arrow and read back while its files are unchanged
    (``ingest/cache.py``). ``scheduler``: a Dask scheduler address: ranks are read on its workers.
    ``reduce``: applied to each rank where it is read, before it is gathered (a module-level function:
    it travels to the workers); ``reduce_id``: what the reduction keeps, as its caller declares it (part
    of the cache key). ``tiered``: read a large job's ranks shallow, then the chosen ones deep (:class:`Tiered`).
    How the ranks were read is in ``Capture.ingest``.
    """
    from msdiag.ingest import parallel

    disc: Discovery = discover(path)
    notes = list(disc.notes)
    if cache is not None:
        _outside(cache, disc)
    rcache = _open_cache(cache, reduce, reduce_id) if cache is not None else None
    # ranks read shallow are other content: their own cache entries (the reduction is part of the key)
    scache = _open_cache(cache, tiered.reduce, reduce_id) if cache is not None and tiered is not None else None
    if cache is not None:
        try:
            import pyarrow.ipc  # noqa: F401  (what the cache writes and reads: Arrow IPC streams)
        except ImportError as e:  # a broken install: analyze without the cache, and say so
            rcache = scache = None
            notes.append(f"the rank cache is not used: pyarrow cannot be imported ({e})")
    # one broken rank of many (a job killed mid-capture) must not hide the others: it is left out
    # with a note; a single rank, or every rank broken, is an error as before
    reader = _load_rank_or_mark if len(disc.ranks) > 1 else load_rank
    shallow_reader = _load_rank_shallow_or_mark if len(disc.ranks) > 1 else load_rank_shallow

    # one local pool for both passes of a tiered read: the deep pass reuses the shallow pass' workers
    workers = parallel.Workers()

    def read(dirs: list[RankDir], shallow: bool = False,
             arrived: Callable[[RankData], object] | None = None) -> tuple[list[RankData], dict[str, Any]]:
        if shallow and tiered is not None:
            return parallel.read_ranks(dirs, shallow_reader, jobs=jobs, cache=scache, scheduler=scheduler, reduce=tiered.reduce,
                                       workers=workers, prepare=prefetch, arrived=arrived)
        return parallel.read_ranks(dirs, reader, jobs=jobs, cache=rcache, scheduler=scheduler, reduce=reduce, workers=workers,
                                   prepare=prefetch, arrived=arrived)

    def take_cut() -> list[tuple[str, Any, list[Any]]]:
        # the tables the cache converted whole and the pool's tasks sent back concatenated: their ranks' frames are
        # slices of them (cache.RankCache.take_cut, parallel.Workers.take_cut)
        return [c for rc in (scache, rcache) if rc is not None for c in rc.take_cut()] + workers.take_cut()

    def join_early(ranks: list[RankData]) -> list[tuple[str, Any, list[Any]]]:
        early = Capture(path=str(disc.root), ranks=ranks)
        early.join_tables(take_cut())
        release_freed()  # (the first pass' frames, freed by the join, while the workers still hold theirs)
        return early.joined()

    joined: list[tuple[str, Any, list[Any]]] = []
    with workers:
        if tiered is None:
            ranks, info = read(disc.ranks)
        else:
            ranks, info = _read_tiered(disc.ranks, tiered, read, join_early if len(disc.ranks) > 1 else None, joined)
    broken = [r for r in ranks if UNREADABLE in r.meta]
    if broken and len(broken) == len(ranks):
        first = broken[0]
        raise InputError(first.meta[UNREADABLE][0], first.meta[UNREADABLE][1])
    for r in broken:
        where, problem = r.meta[UNREADABLE]
        notes.append(f"rank {r.rank} left out: {where}: {problem}")
        # structured for `--strict` (cli.py): every rank left out is listed here
        info.setdefault("left_out", []).append({"rank": r.rank, "path": str(where), "problem": problem})
    ranks = [r for r in ranks if UNREADABLE not in r.meta]
    for x in info.get("deep_failed", []):
        notes.append(f"rank {x['rank']} was chosen to be read deep, but {x['path']}: {x['problem']}: "
                     "analysed from its summary files, without its host side")
    if disc.runs_left_out:  # other runs under the folder (discover.pick_run): named in the report's header
        info["runs_left_out"] = list(disc.runs_left_out)
    cap = Capture(path=str(disc.root), ranks=ranks, notes=notes, ingest=info)
    cut = joined + take_cut()  # (the tables joined while a second pass read, and that pass')
    del joined
    if len(ranks) > 1:
        cap.join_tables(cut)  # each table held once (model.Capture.join_tables)
        del cut
        release_freed()
    return cap


UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Tiered:
    """How deep the ranks are read (``Options.deep``). A job of more than ``up_to`` ranks is read in two
    passes: every rank shallow (:func:`load_rank_shallow`: trace_view.json left unparsed where kernel_details.csv
    gives the device side whole, ``read_depth`` "summary"; then ``reduce``, the shallow reduction,
    metrics/reduce.reduce_rank_shallow, a module-level function like the load's own ``reduce``, which marks
    ``read_depth`` "shallow" when it left Python frames out), then the ranks ``select`` names (the analysis'
    choice from those ranks, {rank: [why]}) deep, in place of their shallow read. With "all" every rank is read
    deep first (each file parsed: a damaged one leaves its rank out, as a full read does) and chosen from alike;
    then the unchosen ranks whose shallow read would leave their trace unparsed are read so: the answer's host
    side rests on the chosen ranks in both modes, so both give the same answer."""

    mode: str  # "auto" | "all"
    up_to: int  # jobs of at most this many ranks are read deep whole, nothing selected
    reduce: Callable[[RankData], RankData]
    select: Callable[[list[RankData]], dict[int, list[str]]]


def _read_tiered(
    dirs: list[RankDir], tiered: Tiered, read: Callable[..., tuple[list[RankData], dict[str, Any]]],
    join_early: Callable[[list[RankData]], list[tuple[str, Any, list[Any]]]] | None = None,
    joined: list[tuple[str, Any, list[Any]]] | None = None,
) -> tuple[list[RankData], dict[str, Any]]:
    """The ranks read as ``tiered`` says, and how (``info["read_depth"]``: mode, deep, why, shallow, selected).

    ``join_early``: while pool workers read the second pass, the first pass' ranks are joined in this process
    (``parallel.meanwhile``; the tables it joined go to ``joined``, as ``Capture.join_tables`` takes them again), and
    each rank read again takes the joined frame of every table it reads alike (:func:`_share_alike`): the load's join
    then keeps those tables as they are and concatenates again only the others (a rank's steps, its timeline)."""
    large = len(dirs) > tiered.up_to
    auto = tiered.mode == "auto"
    ranks, info = read(dirs, shallow=large and auto)
    why: dict[int, list[str]] = {}
    if large:
        why = tiered.select([r for r in ranks if UNREADABLE not in r.meta])
        by_rank = {r.rank: r for r in ranks}
        if auto:  # the chosen ranks read shallow, read again deep
            again = [d for d in dirs if d.rank in why and by_rank[d.rank].info.read_depth in SHALLOW_DEPTHS]
        else:  # --deep all: every rank was read deep (each file parsed); the unchosen ranks whose shallow read leaves
            # the trace unparsed are read so, as --deep auto reads them: the answer's host side is the chosen ranks'
            again = [d for d in dirs if d.rank not in why and UNREADABLE not in by_rank[d.rank].meta
                     and skips_when_shallow(BY_NAME[d.format], by_rank[d.rank])]
        if again:
            early: list[tuple[str, Any, list[Any]]] = []
            shared: set[int] = set()  # (id of) the ranks read again whose tables were shared as they came back

            def join_first() -> None:
                assert join_early is not None
                early.extend(join_early([r for r in ranks if UNREADABLE not in r.meta]))

            def arrived(r: RankData) -> None:  # (the pool's results: this process waits for the next one meanwhile)
                if early and UNREADABLE not in r.meta:
                    _share_alike(r, by_rank[r.rank])
                    shared.add(id(r))

            from msdiag.ingest import parallel

            with parallel.meanwhile(join_first) if join_early is not None else contextlib.nullcontext():
                other, more = read(again, shallow=not auto, arrived=arrived)
            for r in other:
                # a chosen rank whose trace turns out damaged keeps its summary read, the trace marked failed
                if not (auto and UNREADABLE in r.meta and _trace_failed(by_rank[r.rank], r.meta[UNREADABLE], info)):
                    if early and id(r) not in shared:
                        _share_alike(r, by_rank[r.rank])
                    by_rank[r.rank] = r
            if joined is not None:
                joined.extend(early)
            ranks = [by_rank[r.rank] for r in ranks]
            _merge_info(info, more)
    fine = [r for r in ranks if UNREADABLE not in r.meta]
    info["read_depth"] = {
        "mode": tiered.mode,
        "deep": sorted(r.rank for r in fine if r.info.read_depth not in SHALLOW_DEPTHS),
        "why": {r: why[r] for r in sorted(why)},
        "shallow": sum(r.info.read_depth in SHALLOW_DEPTHS for r in fine),
        "summary": sum(r.info.read_depth == "summary" for r in fine),  # of those, the ranks whose trace was not parsed
        "selected": sorted(why) if large else None,  # the ranks the answer's host side rests on (None: every rank)
    }
    return ranks, info


def _share_alike(again: RankData, first: RankData) -> None:
    """Each table of ``again`` (a rank read a second time) that ``first`` (its first read) holds alike, the same
    columns, dtypes and values, becomes ``first``'s frame (a row slice of a table joined early: no second copy of
    it, no second join)."""
    for name, df in again.tables.items():
        had = first.tables.get(name)
        if had is not None and had is not df and _alike(df, had):
            hold(again, name, entry(first.tables, name))  # as first holds it (model.Rows of the joined table)


def _alike(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether ``a`` and ``b`` hold the same rows: the same index, columns, dtypes and values (NaN where NaN):
    ``a.equals(b)`` with the dtypes checked, judged column by column (DataFrame.equals judges by blocks, and frames
    laid out in other blocks, a joined table's row slice against a rank's own frame, are first taken into alike
    blocks: 512 bench ranks' 77 tables of their 7 ranks read deep, 0.08-0.1 -> ~0.02 s)."""
    if len(a) != len(b) or a.shape[1] != b.shape[1] or list(a.columns) != list(b.columns) or not a.index.equals(b.index):
        return False
    # each column's values as the frame holds them (no Series built per column), compared as DataFrame.equals
    # compares its blocks' (pandas' array_equals: the dtype, then the values, NaN where NaN)
    x, y = getattr(getattr(a, "_mgr", None), "iget_values", None), getattr(getattr(b, "_mgr", None), "iget_values", None)
    if x is None or y is None or not a.columns.is_unique:  # (another pandas: the frames' own comparison)
        return list(a.dtypes) == list(b.dtypes) and a.equals(b)
    return all(array_equals(x(i), y(i)) for i in range(a.shape[1]))


def _trace_failed(short: RankData, failure: tuple[Any, str], info: dict[str, Any]) -> bool:
    """A rank chosen to be read deep whose full read failed on a file its shallow read skipped (a damaged
    trace_view.json): that source of the shallow read becomes failed with the problem, recorded in
    ``info["deep_failed"]``, and True (the rank is analysed from its summary files); else False."""
    where, problem = failure
    for i, src in enumerate(short.sources):
        if src.status == SKIPPED and src.path is not None and Path(src.path) == Path(where):
            short.sources[i] = replace(src, status=FAILED, reason=problem)
            info.setdefault("deep_failed", []).append({"rank": short.rank, "path": str(where), "problem": problem})
            return True
    return False


#: RankInfo.read_depth of a rank read shallow: trace_view.json not parsed ("summary"), Python frames left out ("shallow").
SHALLOW_DEPTHS = ("summary", "shallow")


def _merge_info(info: dict[str, Any], more: dict[str, Any]) -> None:
    """Add a second pass's reading record to the first's."""
    info["read_by"].update(more["read_by"])
    if more["executor"] != "cache":
        info["executor"] = more["executor"]
    if info.get("cache") and more.get("cache"):
        for k, v in more["cache"].items():
            if k != "folder":
                info["cache"][k] = info["cache"][k] + v


def _load_rank_or_mark(rd_dir: RankDir, shallow: bool = False) -> RankData:
    """load_rank, but a rank whose files are broken comes back marked instead of raising."""
    try:
        return load_rank_shallow(rd_dir) if shallow else load_rank(rd_dir)
    except InputError as e:
        rd = RankData(rank=rd_dir.rank, family=rd_dir.family, path=str(rd_dir.path))
        rd.meta[UNREADABLE] = (e.path, e.problem)
        return rd


def _load_rank_shallow_or_mark(rd_dir: RankDir) -> RankData:
    """load_rank_shallow, but a rank whose files are broken comes back marked instead of raising."""
    return _load_rank_or_mark(rd_dir, shallow=True)


def _open_cache(folder: str | Path, reduce: Callable[[RankData], RankData] | None, declared: str | None) -> Any:
    """The rank cache at ``folder`` (:func:`_outside` the capture)."""
    from msdiag.ingest.cache import RankCache

    return RankCache.open(Path(folder).expanduser().resolve(), _reduce_id(reduce, declared))


def _outside(folder: str | Path, disc: Discovery) -> None:
    """An InputError when the cache ``folder`` lies inside the capture or one of its rank folders: msdiag never writes
    into a capture."""
    p = within_any(folder, [disc.root, *(r.path for r in disc.ranks)])
    if p is not None:
        raise InputError(folder, f"is inside the capture folder {p}; msdiag never writes into a capture: choose a cache folder outside it")


def _reduce_id(reduce: Callable[[RankData], RankData] | None, declared: str | None) -> str:
    """The reduction's identity for the cache key: the id its caller declares (what the metrics
    read), its name and a hash of its package's sources (the step rows it stores are computed there)."""
    if reduce is None:
        return "none"
    from msdiag.ingest.cachedir import code_fingerprint

    mod = sys.modules.get(reduce.__module__)
    parts = reduce.__module__.split(".")
    package = "/".join(parts[1:-1]) if len(parts) > 2 else parts[-1] + ".py"
    if declared is None:  # the reduction's module may say what it keeps: reduce_id()
        own = getattr(mod, "reduce_id", None)
        declared = str(own()) if callable(own) else str(getattr(mod, "REDUCE_VERSION", 0))
    return f"{declared}:{reduce.__module__}.{reduce.__qualname__}:{code_fingerprint((package,))}"


def family_of(cap: Capture) -> str:
    fams = {r.family for r in cap.ranks}
    return fams.pop() if len(fams) == 1 else "mixed"


def describe(cap: Capture) -> dict[str, Any]:
    """The capture's identity: framework and versions, device, ranks, parallel configuration."""
    info: dict[str, Any] = {}
    for r in cap.ranks:
        ri = r.info
        for k in ("framework", "framework_version", "cann_version", "profiler_level", "aic_metrics"):
            v = getattr(ri, k)
            if v is not None and k not in info:
                info[k] = v
        if ri.layout is not None and "parallel" not in info and any(v is not None for v in ri.layout.as_dict().values()):
            info["parallel"] = ri.layout.as_dict()
    fam = family_of(cap)
    info.setdefault(
        "framework",
        {"ascend_pt": "torch_npu", "ascend_ms": "mindspore", "mindspore_cpu": "mindspore", MINDSPORE_LEGACY: "mindspore"}.get(fam),
    )
    info["family"] = fam
    info["device"] = "CPU" if fam == MINDSPORE_CPU else "Ascend NPU"
    info["ranks"] = len(cap.ranks)
    return info
