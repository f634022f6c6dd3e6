"""The one engine that reads a rank of any format, from that format's declaration.

A format (:class:`Format`) declares how its capture folders are recognised, how their ranks are
listed, and its sources in reading order: each :class:`Src` names a file (or a glob of files, or a
table of a database), the reader that turns it into rows, the canonical table the rows go to,
whether it is core (present but broken stops the analysis) and why it may be absent. A
:class:`Database` item opens a database whose tables later sources read. A :class:`Then` item is a
step of the format between sources (e.g. the steps found so far go to the timeline).

:func:`read_rank` reads every source in order and records each as present (with its rows), absent
(with the reason) or failed (with the parse problem). Readers return what they read (a frame for
the source's table, or a :class:`Read` with rows for several tables, typed info, notes); only the
engine puts rows into the rank (:func:`put`). Every file a reader gets was resolved here
(:func:`resolve`) and admitted (ingest/paths.py: a regular file inside the capture, else the source
is failed with the reason and nothing is opened), and every database is opened here
(:func:`connect`): the one place where checks on what is opened belong.
"""

from __future__ import annotations

import dataclasses
import os
import re
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterator, Union

import pandas as pd

from msdiag.errors import ParseError
from msdiag.ingest import bounds
from msdiag.ingest._sqlite import Db, DbDamaged, open_db
from msdiag.ingest.paths import real_roots, refusal
from msdiag.model import (
    ABSENT,
    FAILED,
    PRESENT,
    SKIPPED,
    UNUSED,
    Frames,
    RankData,
    RankInfo,
    Rows,
    Source,
    Stacked,
    entry,
    frame_of,
    held_rows,
    hold,
    noting_cuts,
    slice_positions,
)


@dataclass
class RankDir:
    """One rank's capture folder as found on disk, and the format that reads it."""

    rank: int
    path: Path
    family: str
    rank_from: str  # how the rank id was found
    captured_ns: int | None  # capture time (folder name or profiler_info), for choosing the newest
    text_files: list[str] = field(default_factory=list)  # names under ASCEND_PROFILER_OUTPUT/
    format: str = ""  # the name of the Format that reads it
    root: Path | None = None  # the folder the user gave (set by discovery): files may resolve into it
    notes: list[str] = field(default_factory=list)  # what discovery noticed (a name that is no rank id)


class _Count(Enum):
    TABLE = "table"


#: Read.rows default: the rows the source added to its declared table
TABLE_ROWS = _Count.TABLE


@dataclass
class Read:
    """What a reader returns: nothing here is written into the rank but by the engine."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # rows added to each table
    replace: dict[str, pd.DataFrame] = field(default_factory=dict)  # tables set whole
    info: dict[str, Any] = field(default_factory=dict)  # RankInfo fields to set
    meta: dict[str, Any] = field(default_factory=dict)  # RankData.meta keys to set
    notes: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)  # the format's working state, for later readers
    rows: int | None | _Count = TABLE_ROWS  # what the source's `rows` says


@dataclass
class Ctx:
    """What a reader sees: the rank read so far (read-only), the format's placeholders and state."""

    rd: RankData
    folder: Path  # the rank folder
    vars: dict[str, Any]  # placeholders of source names: rank, and the format's own (dev, out, ...)
    state: dict[str, Any] = field(default_factory=dict)
    present: set[str] = field(default_factory=set)  # names of the declared sources read so far
    dbs: dict[str, Db] = field(default_factory=dict)  # databases opened by Database items
    roots: tuple[Path, ...] = ()  # the real folders files must resolve into (the rank's, the capture's)
    real_dirs: dict[str, str] = field(default_factory=dict)  # folder -> its real path (paths.refusal)
    listed: dict[str, Listed | None] = field(default_factory=dict)  # folder -> its entries (locate)

    @property
    def rank(self) -> int:
        return self.rd.rank

    @property
    def family(self) -> str:
        return self.rd.family

    @property
    def info(self) -> RankInfo:
        return self.rd.info

    def table(self, name: str) -> pd.DataFrame:
        return self.rd.table(name)

    def beside(self, path: Path, name: str) -> Path | None:
        """A companion file next to a source's file (resolved by the engine, like every file)."""
        return self.find(path.parent, name)

    def find(self, folder: Path, name: str) -> Path | None:
        """The file ``name`` in ``folder`` (None when there is none), admitted like every source's
        file: a file that must not be read (a FIFO, a device, a link out of the capture) raises
        ParseError with the reason."""
        p = locate(folder, name, self.listed)
        why = None if p is None else refusal(p, self.roots, self.real_dirs)
        if p is not None and why is not None:
            raise ParseError(p, why)
        return p


Result = Union[pd.DataFrame, Read]
Why = Union[str, Callable[[Ctx], str]]


def why_no_memory(ctx: Ctx) -> str:
    """Why a memory source is absent, in any format: profile_memory off, as far as the capture says."""
    if ctx.info.profile_memory is False:
        return "profile_memory was off in this capture"
    return "not written by this capture (profile_memory off?)"


@dataclass(frozen=True)
class Src:
    """One source of a format: a file (or every file of a glob), or a table of an open database.

    Its reader is one of: ``rows``, a plain reader ``(path or Db, rank) -> frame`` whose rows go to
    ``table``; ``read``, ``(path or Db, ctx) -> frame or Read``; ``parse``, ``path -> value`` kept
    as the format's working state under ``keep`` (rows: its length) or in ``RankData.meta`` under
    ``meta`` (rows: none); or none at all: the source is only listed (present or absent).
    ``name`` is the file name (or the glob's name in ``sources`` when none matches, or the database
    table), with ``{rank}`` and the format's placeholders; ``folder`` the sub-folder of the rank
    folder it lies in.
    """

    name: str
    table: str | None = None
    rows: Callable[[Any, int], pd.DataFrame] | None = None
    read: Callable[[Any, Ctx], Result] | None = None
    parse: Callable[[Path], Any] | None = None
    keep: str | None = None
    meta: str | None = None
    core: bool | Callable[[Ctx], bool] = False
    absent: Why = ""
    folder: str = "."
    glob: str | None = None  # every file of this glob (whose name fullmatches `pattern`) is a source
    pattern: str | None = None
    fallback: str | None = None  # a glob whose first file is read when the named file is absent
    db: str | None = None  # the Database item whose table this is
    unused: str = ""  # a file msdiag does not read, with why: listed (status unused) only when present
    # a file a shallow read leaves unparsed when this holds of the rank read so far (listed, status skipped)
    deep_only: Callable[[RankData], bool] | None = None
    # the reader of several ranks' files at once: (paths, ranks) -> what ``rows`` or ``read`` gives for each
    # file, or None (each is read alone then); used by :func:`prefetch`
    bulk: Callable[[list[Path], list[int]], list[Result] | None] | None = None


@dataclass(frozen=True)
class Database:
    """A database file the following sources read tables of (opened once, read-only)."""

    key: str
    folder: str
    pick: Callable[[list[str], Ctx], str | None]  # the file among the folder's names
    absent: Why  # why it may be absent
    absent_name: Callable[[Ctx], str]  # its name in `sources` when absent
    required: bool = False  # absent: a ParseError naming the folder
    check: Callable[[Db], None] | None = None  # raises ParseError when it is not what the format reads


@dataclass(frozen=True)
class Then:
    """A step of the format between sources, recorded as no source."""

    run: Callable[[Ctx], Read]


Item = Union[Src, Database, Then]


@dataclass(frozen=True)
class Format:
    """One format msdiag reads: recognition, rank listing, sources, and what joins them."""

    name: str
    label: str
    claims: Callable[[Path, set[str]], bool]  # a capture folder of this format (the walk stops there)
    ranks: Callable[[Path, set[str]], list[RankDir]]  # the ranks of a claimed folder
    sources: tuple[Item, ...]
    vars: Callable[[RankDir], dict[str, Any]] = lambda rd: {}
    finish: Callable[[RankData, Ctx], None] | None = None  # joins across sources, checks
    loose: Callable[[Path], bool] | None = None  # a plain folder of its files, when nothing else is found
    never: tuple[tuple[str, str], ...] = ()  # files this format never writes, with why (listed as absent)


# ---- the rank -------------------------------------------------------------------------------


#: Why a source declared ``deep_only`` is not parsed on a rank read shallow (status skipped).
SHALLOW_WHY = (
    "not parsed: this rank is read shallow (--deep auto reads the host side of trace_view.json only on the ranks "
    "chosen; --deep all parses every rank's)"
)


def read_rank(fmt: Format, rd_dir: RankDir, shallow: bool = False) -> RankData:
    """Read one rank's folder with ``fmt``; raises ParseError when a core source is broken. ``shallow``: the
    sources declared ``deep_only`` whose condition holds are listed as skipped, not parsed (``read_depth``
    "summary")."""
    # (a Frames: a bulk read's file frame is held as the Rows it gives, cut when read: model.cut_rows)
    rd = RankData(rank=rd_dir.rank, family=rd_dir.family, path=str(rd_dir.path), tables=Frames())
    rd.info.rank_from = rd_dir.rank_from
    if rd_dir.captured_ns:
        rd.info.captured_ns = rd_dir.captured_ns
    ctx = Ctx(rd, Path(rd_dir.path), {"rank": rd_dir.rank, **fmt.vars(rd_dir)},
              roots=real_roots(rd_dir.path, rd_dir.root), listed=_LISTED_BY_RANK.pop(str(rd_dir.path), {}))
    with ExitStack() as stack:
        for item in fmt.sources:
            if isinstance(item, Then):
                apply(ctx, item.run(ctx))
            elif isinstance(item, Database):
                _open(ctx, item, stack)
            elif item.db is not None:
                _db_source(ctx, item)
            else:
                _file_source(ctx, item, skip=shallow and item.deep_only is not None and item.deep_only(rd))
        if fmt.finish is not None:
            fmt.finish(rd, ctx)
    for name, why in fmt.never:
        rd.sources.append(Source(rd.rank, name.format(**ctx.vars), ABSENT, None, why))
    if not held_rows(rd, "kernels") and not held_rows(rd, "timeline"):
        rd.notes.append("no kernels and no timeline: the step breakdown comes from step_trace_time.csv only")
    return rd


def put(rd: RankData, table: str, df: pd.DataFrame | Rows) -> None:
    """Add rows to a rank's table (a table can be fed by several files); a bulk read's Rows are held uncut where
    they are the table's first rows."""
    if not held_rows(rd, table):
        hold(rd, table, df)
        return
    held = entry(rd.tables, table)
    if isinstance(df, Rows) and isinstance(held, (Rows, Stacked)):  # two bulk reads' rows: concatenated when read
        hold(rd, table, Stacked([*(held.parts if isinstance(held, Stacked) else [held]), df]))
    else:
        rd.tables[table] = pd.concat([frame_of(held), frame_of(df)], ignore_index=True)


_INFO_FIELDS = frozenset(f.name for f in dataclasses.fields(RankInfo))


def apply(ctx: Ctx, read: Read) -> None:
    """Put what a reader returned into the rank."""
    rd = ctx.rd
    for t, df in read.tables.items():
        put(rd, t, df)
    for t, df in read.replace.items():
        hold(rd, t, df)
    unknown = set(read.info) - _INFO_FIELDS
    if unknown:
        raise TypeError(f"RankInfo has no field(s) {sorted(unknown)}")
    for k, v in read.info.items():
        setattr(rd.info, k, v)
    rd.meta.update(read.meta)
    rd.notes.extend(read.notes)
    ctx.state.update(read.state)


# ---- one source -----------------------------------------------------------------------------


def _why(why: Why, ctx: Ctx) -> str:
    return why if isinstance(why, str) else why(ctx)


def _core(spec: Src, ctx: Ctx) -> bool:
    return spec.core if isinstance(spec.core, bool) else spec.core(ctx)


#: What prefetch read of a source's file for the rank reading it next, by (id of the source, path): each taken once
#: by _call, the rest forgotten at the end of the ranks prefetch was given.
_BULK: dict[tuple[int, str], tuple[Result, frozenset[str]]] = {}
#: The file prefetch found (:func:`resolve`) and admitted (:func:`refusal`) for a source of a rank folder, by (id of
#: the source, the folder), kept where its bulk read gave the rank's result: the rank's read takes both from here
#: instead of finding and admitting the file a second time (the result it reads is the one read after that admission).
_FOUND: dict[tuple[int, str], Path] = {}
#: The folders prefetch listed of a rank folder (:func:`locate`'s ``listed``), by the rank folder: taken once by the
#: rank's read, which finds its other sources from them.
_LISTED_BY_RANK: dict[str, dict[str, Listed | None]] = {}


@contextmanager
def prefetch(fmt: Format, dirs: list[RankDir]) -> Iterator[list[tuple[Any, list[Any]]]]:
    """Within the block, the file sources of ``fmt`` that declare ``bulk`` are read for all of ``dirs`` at once
    (the same file of each rank, as :func:`resolve` finds it and :func:`refusal` admits it), and each rank's read
    (:func:`read_rank`) takes its file's result from there instead of reading the file alone: the readers'
    fixed cost per call, per column and per frame paid once for several ranks. A source whose bulk reader gives
    None is read file by file as before; whatever the block's reads did not take is forgotten at its end. The block
    is given the frames the bulk reads cut into files' frames (``model.noting_cuts``: (whole, its slices)), for
    ``model.concat_alike`` to take a table whose ranks' frames are still those slices as it is."""
    try:
        with noting_cuts() as cuts:
            _prefetch(fmt, dirs, cuts)
        yield cuts
    finally:
        _BULK.clear()
        _FOUND.clear()
        _LISTED_BY_RANK.clear()


def _prefetch(fmt: Format, dirs: list[RankDir], cuts: list[tuple[pd.DataFrame, list[pd.DataFrame]]]) -> None:
    specs = [s for s in fmt.sources if isinstance(s, Src) and s.bulk is not None and s.glob is None and s.db is None]
    if len(dirs) < 2 or not specs:
        return
    ctxs: list[tuple[RankDir, Ctx]] = []
    for d in dirs:
        try:
            ctx = Ctx(RankData(rank=d.rank, family=d.family, path=str(d.path)), Path(d.path),
                      {"rank": d.rank, **fmt.vars(d)}, roots=real_roots(d.path, d.root))
            ctxs.append((d, ctx))
            _LISTED_BY_RANK[str(d.path)] = ctx.listed
        except Exception:  # noqa: BLE001 - that rank's own read meets it (and says what it is)
            continue
    for spec in specs:
        assert spec.bulk is not None
        paths, ranks, folders = [], [], []
        for d, ctx in ctxs:
            try:
                found = resolve(ctx, spec)
                if len(found) != 1 or refusal(found[0], ctx.roots, ctx.real_dirs) is not None:
                    continue
            except OSError:  # (a folder that cannot be listed: the rank's own read meets it)
                continue
            paths.append(found[0])
            ranks.append(d.rank)
            folders.append(str(ctx.folder))
        if len(paths) < 2:
            continue
        before = len(cuts)
        try:
            got = spec.bulk(paths, ranks)
        except Exception:  # noqa: BLE001 - a bulk reader gives up by returning None; read file by file then
            got = None
        if got is not None and len(got) == len(paths):
            clean = _clean_tables(spec, got, cuts[before:])
            for p, result, ok, folder in zip(paths, got, clean, folders):
                _BULK[(id(spec), str(p))] = (result, ok)
                _FOUND[(id(spec), folder)] = p


def _tables_of(spec: Src, result: Result) -> dict[str, pd.DataFrame]:
    if isinstance(result, Read):
        return {**result.tables, **result.replace}
    return {} if spec.table is None else {spec.table: result}


def _clean_tables(spec: Src, got: list[Result], cuts: list[tuple[pd.DataFrame, list[pd.DataFrame]]]) -> list[frozenset[str]]:
    """Per result of a bulk read, the tables whose frames :func:`_screened` may take as they are (``bounds.clean_spans``:
    screening would give them back unchanged): judged on the whole each frame is a row slice of (``cuts``: the
    bulk read's own), every file's rows at once; a frame not found there is screened as usual."""
    where = slice_positions(list(enumerate(parts for _, parts in cuts)))
    spans: dict[tuple[str, int], list[tuple[int, int, int]]] = {}  # (table, whole) -> (result, lo, hi)
    for i, result in enumerate(got):
        for table, df in _tables_of(spec, result).items():
            at = where.get(id(df))
            if at is not None:
                spans.setdefault((table, at[0]), []).append((i, at[1], at[2]))
    clean: list[set[str]] = [set() for _ in got]
    for (table, k), rows in spans.items():
        for (i, _, _), ok in zip(rows, bounds.clean_spans(table, cuts[k][0], [(lo, hi) for _, lo, hi in rows])):
            if ok:
                clean[i].add(table)
    return [frozenset(c) for c in clean]


def _call(spec: Src, handle: Any, ctx: Ctx) -> tuple[Read, frozenset[str]]:
    """What the source's reader gives for ``handle`` (a bulk read's result where prefetch made one), and the tables
    of it that need no screening (:func:`_clean_tables`)."""
    got = _BULK.pop((id(spec), str(handle)), None) if _BULK and spec.bulk is not None else None
    if got is not None:
        out, clean = got
        if isinstance(out, Read):
            return out, clean
        assert spec.table is not None, f"source {spec.name} returns rows but declares no table"
        return Read(tables={spec.table: out}), clean
    return _read_file(spec, handle, ctx), frozenset()


def _read_file(spec: Src, handle: Any, ctx: Ctx) -> Read:
    if spec.parse is not None:
        value = spec.parse(handle)
        if spec.keep is not None:
            return Read(state={spec.keep: value}, rows=len(value))
        assert spec.meta is not None, f"source {spec.name}: parse needs keep= or meta="
        return Read(meta={spec.meta: value}, rows=None)
    if spec.rows is not None:
        out = spec.rows(handle, ctx.rank)
    elif spec.read is not None:
        out = spec.read(handle, ctx)
    else:
        return Read(rows=None)  # listed only: its content is read with another source
    if isinstance(out, Read):
        return out
    assert spec.table is not None, f"source {spec.name} returns rows but declares no table"
    return Read(tables={spec.table: out})


def _screened(spec: Src, handle: Any, ctx: Ctx, where: str, repair: bounds.Repair) -> Read:
    """The reader's rows without values outside physical bounds (ingest/bounds.py); a file whose
    clock stands still is a ParseError of that file."""
    read, clean = _call(spec, handle, ctx)
    try:
        for frames in (read.tables, read.replace):
            for t, df in frames.items():
                if t not in clean:
                    frames[t] = bounds.screen(t, frame_of(df), repair)
    except bounds.StoppedClock as e:
        raise ParseError(where, str(e)) from None
    return read


def _read_one(ctx: Ctx, spec: Src, handle: Any, name: str, where: str) -> bool:
    """Read one file or table and record it; False when it failed (a core failure raises)."""
    rd = ctx.rd
    repair = bounds.Repair()
    try:
        read = _screened(spec, handle, ctx, where, repair)
    except DbDamaged:
        raise
    except ParseError as e:
        if _core(spec, ctx):
            raise
        rd.sources.append(Source(rd.rank, name, FAILED, where, e.problem))
        return False
    before = held_rows(rd, spec.table) if spec.table is not None else 0
    apply(ctx, read)
    rows: int | None
    if read.rows is TABLE_ROWS:
        rows = None if spec.table is None or spec.table not in rd.tables else held_rows(rd, spec.table) - before
    else:
        rows = read.rows  # type: ignore[assignment]
    rd.sources.append(Source(rd.rank, name, PRESENT, where, None, rows, repair.as_dict() if repair else None))
    if repair:
        rd.notes.append(repair.note(name))
    ctx.present.add(spec.name)
    return True


def _file_source(ctx: Ctx, spec: Src, skip: bool = False) -> None:
    """Read a file source (each file of a glob); ``skip``: a deep-only source on a rank read shallow, listed (skipped
    when present, absent as usual) but never opened, the rank marked ``read_depth`` "summary"."""
    found = _FOUND.pop((id(spec), str(ctx.folder)), None) if _FOUND and not skip and not spec.unused else None
    if found is not None and (id(spec), str(found)) in _BULK:  # found and admitted by prefetch, its result waiting
        name = spec.name.format(**ctx.vars)
        _read_one(ctx, spec, found, name, str(found))
        return
    paths = resolve(ctx, spec)
    if spec.unused:
        for p in paths:  # never opened: only said to be there and why it is not read
            ctx.rd.sources.append(Source(ctx.rank, _relative(p, ctx.folder) if spec.glob else spec.name.format(**ctx.vars),
                                         UNUSED, str(p), spec.unused))
        return
    if not paths:
        ctx.rd.sources.append(Source(ctx.rank, spec.name.format(**ctx.vars), ABSENT, None, _why(spec.absent, ctx)))
        return
    for p in paths:
        name = spec.name.format(**ctx.vars) if spec.glob is None else _relative(p, ctx.folder)
        if skip:
            ctx.rd.sources.append(Source(ctx.rank, name, SKIPPED, str(p), SHALLOW_WHY))
            ctx.rd.info.read_depth = "summary"
        elif _admitted(ctx, spec, p, name):
            _read_one(ctx, spec, p, name, str(p))


def skips_when_shallow(fmt: Format, rd: RankData) -> bool:
    """Whether a shallow read of this rank (read in full as ``rd``) would leave a source unparsed: a deep-only
    source of ``fmt`` the full read parsed and whose condition holds of the rank's tables (the condition reads only tables other
    sources give, so the full read answers as the shallow one did)."""
    read = {s.name for s in rd.sources if s.status == PRESENT}
    return any(isinstance(item, Src) and item.deep_only is not None and item.name in read and item.deep_only(rd)
               for item in fmt.sources)


def _admitted(ctx: Ctx, spec: Src, p: Path, name: str) -> bool:
    """Whether ``p`` may be opened (ingest/paths.py); a refused file is failed with the reason
    (a core one stops the rank, as a broken core file does)."""
    why = refusal(p, ctx.roots, ctx.real_dirs)
    if why is None:
        return True
    if _core(spec, ctx):
        raise ParseError(p, why)
    ctx.rd.sources.append(Source(ctx.rank, name, FAILED, str(p), why))
    return False


def _db_source(ctx: Ctx, spec: Src) -> None:
    db = ctx.dbs.get(spec.db or "")
    if db is None:
        return  # its database is absent (recorded once, as the database)
    name = f"{db.path.name}:{spec.name}"
    if spec.name not in db.tables:
        ctx.rd.sources.append(Source(ctx.rank, name, ABSENT, None, _why(spec.absent, ctx)))
        return
    _read_one(ctx, spec, db, name, str(db.path))


def _relative(p: Path, folder: Path) -> str:
    return str(p.relative_to(folder)) if p.is_relative_to(folder) else p.name


# ---- the one place files are found and databases opened -------------------------------------


def resolve(ctx: Ctx, spec: Src) -> list[Path]:
    """The files a declared source names in this rank folder ([] when absent)."""
    d = ctx.folder / spec.folder.format(**ctx.vars)
    if spec.glob is not None:
        pat = None if spec.pattern is None else re.compile(spec.pattern.format(**ctx.vars))
        return sorted(p for p in _glob(d, spec.glob.format(**ctx.vars)) if pat is None or pat.fullmatch(p.name))
    p = locate(d, spec.name.format(**ctx.vars), ctx.listed)
    if p is not None:
        return [p]
    if spec.fallback is not None:
        return _glob(d, spec.fallback.format(**ctx.vars))[:1]
    return []


def locate(folder: Path, name: str, listed: dict[str, Listed | None] | None = None) -> Path | None:
    """The file ``name`` in ``folder``, or None when there is none (``exists``: a link that leads nowhere is none).
    ``listed``: the folders of one rank listed so far, each once (:class:`Listed`), which answer without a ``stat``
    of each name (two dozen a rank): a name listed that is no link is there; an ASCII name that no listed name
    equals even ignoring case is not (a file system that ignores case would find none either); any other name (a
    link, a name listed in another case, a folder that cannot be listed, a name that is a path) is asked for as before."""
    p = folder / name
    if listed is not None and name not in ("", ".", "..") and "/" not in name and os.sep not in name:
        key = os.fspath(folder)
        if key not in listed:
            listed[key] = Listed.of(key)
        entries = listed[key]
        if entries is not None:
            link = entries.links.get(name)
            if link is False:
                return p
            if link is None and name.isascii() and name.casefold() not in entries.folded:
                return None
    return p if p.exists() else None


@dataclass(frozen=True)
class Listed:
    """A folder's entries as listed once: each name and whether it is a link (the listing's file types: no ``stat``
    per entry where the file system gives them), and the names case-folded."""

    links: dict[str, bool]
    folded: frozenset[str]

    @staticmethod
    def of(folder: str) -> Listed | None:
        """``folder`` listed, or None when it cannot be."""
        try:
            with os.scandir(folder) as found:
                links = {e.name: e.is_symlink() for e in found}
        except OSError:
            return None
        return Listed(links, frozenset(n.casefold() for n in links))


def _glob(d: Path, pattern: str) -> list[Path]:
    try:
        return sorted(d.glob(pattern)) if d.is_dir() else []
    except OSError:
        return []


def listing(folder: Path) -> list[str]:
    """The names in a folder, sorted ([] when it is no folder or cannot be listed); within :func:`listings_kept`, as
    first listed there (:class:`Listed`)."""
    key = os.fspath(folder)
    kept = _LISTED
    if kept is None:
        got = Listed.of(key)
    elif key in kept:
        got = kept[key]
    else:
        got = kept[key] = Listed.of(key)
    return [] if got is None else sorted(got.links)


#: Folder listings kept while discovery judges a capture's folders (:func:`listings_kept`); None otherwise.
_LISTED: dict[str, Listed | None] | None = None


@contextmanager
def listings_kept() -> Iterator[None]:
    """Within the block, :func:`listing` lists each folder once: discovery asks each format whether it claims a folder,
    and each asks for the same sub-folders (an Ascend rank folder's ASCEND_PROFILER_OUTPUT/ was listed five times, its
    FRAMEWORK/ four: 0.12 -> 0.08 s at 512 bench ranks). A folder changed meanwhile is seen as first listed."""
    global _LISTED
    outer = _LISTED
    if outer is None:
        _LISTED = {}
    try:
        yield
    finally:
        _LISTED = outer


def connect(path: Path) -> AbstractContextManager[Db]:
    """Open a database read-only, writing nothing beside it (see ingest/_sqlite.py)."""
    return open_db(path)


def _open(ctx: Ctx, item: Database, stack: ExitStack) -> None:
    folder = ctx.folder / item.folder.format(**ctx.vars)
    name = item.pick(listing(folder), ctx)
    if name is None:
        if item.required:
            raise ParseError(folder, _why(item.absent, ctx))
        ctx.rd.sources.append(Source(ctx.rank, item.absent_name(ctx), ABSENT, None, _why(item.absent, ctx)))
        return
    path = folder / name
    why = refusal(path, ctx.roots, ctx.real_dirs)
    if why is not None:
        if item.required:
            raise ParseError(path, why)
        ctx.rd.sources.append(Source(ctx.rank, path.name, FAILED, str(path), why))
        return
    db = stack.enter_context(connect(path))
    ctx.rd.sources.append(Source(ctx.rank, path.name, PRESENT, str(path)))
    if item.check is not None:
        item.check(db)
    ctx.dbs[item.key] = db
