"""Reading many ranks: the cache first, then a bounded process pool here, or an existing Dask cluster.

Each rank is read alone: parse the rank's files (``loader.load_rank``), apply the reduction the
analysis asks for (``metrics.reduce.reduce_rank``: only what the metrics and the report read is
kept) and send back that reduced RankData; a pool task reads several ranks so and sends them back
packed (``Packed``: a frame per table, not per rank and table). The process holding every rank therefore grows with
what the analysis needs, not with the traces' size.

- Cache: the parent fingerprints every rank (a ``stat`` of its files) and reads the entries that
  are current; only the others are parsed. Pool workers write their entries themselves; entries
  of ranks parsed on Dask workers are written by the parent, which owns the cache folder.
- Local pool (:class:`Workers`): ``jobs`` worker processes (default: the CPUs); at most two tasks per
  worker are in flight, so results do not pile up unread (a deep pass of a few tasks, while this process
  joins the first pass, is handed out whole). The pool is replaced when a worker's peak
  memory grew by more than ``WORKER_GROWTH_KB`` since it started, so a worker that parsed a huge trace
  does not keep its memory for the rest of the run; otherwise it reads every rank, and the caller may
  keep it for another call (a tiered load's deep pass). One rank, or ``jobs=1``: read in this process.
- Dask (``scheduler="tcp://HOST:PORT"``): the ranks are mapped on the cluster's workers in tasks of
  several ranks as the pool's; the workers must see the capture at the same path and have the same
  msdiag installed; results are gathered one by one as they complete. Dask is optional (``pip install 'msdiag[cluster]'``).
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing as mp
import os
import pickle
import shutil
import socket
import struct
import tempfile
import uuid
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from msdiag.errors import InputError, MsdiagError
from msdiag.fmt import rank_ranges
from msdiag.forking import frozen, release_freed
from msdiag.forking import peak_kb as _peak_kb  # (a module name here: the tests replace it)
from msdiag.ingest.cache import CacheStats, RankCache
from msdiag.ingest.discover import RankDir
from msdiag.model import SCHEMA_VERSION, Frames, RankData, concat_alike, entries, rows_of

LoadRank = Callable[[RankDir], RankData]
Reduce = Callable[[RankData], RankData]
#: Given the ranks a pool task is about to read one by one, a context within which those reads may share work
#: (the loader's: ``engine.prefetch``, each file kind of the ranks read at once); it gives the frames it cut into
#: files' frames, (whole, its slices), or None (``model.concat_alike``).
Prepare = Callable[[list[RankDir]], contextlib.AbstractContextManager[list[tuple[Any, list[Any]]] | None]]

#: A pool is replaced once one of its workers' peak memory grew by more than this since it started (KiB).
WORKER_GROWTH_KB = 256 * 1024
#: Where a worker's memory is not known: a pool is replaced after this many ranks per worker.
TASKS_PER_WORKER = 16
#: Tasks in flight per worker.
IN_FLIGHT = 2
#: A read of at most this many tasks per worker with ``meanwhile`` work pending is handed out whole (a tiered
#: load's second pass: a handful of ranks, a task each, while this process joins the first pass' ranks), so that
#: the workers read on instead of waiting for that work to end to get their next task (512 bench ranks: they
#: idled ~0.4 s of the deep pass with two tasks each in flight). Such a pool is not replaced for a worker's growth
#: before its last task (each worker's heap is reused from rank to rank; the pool ends with the read).
WHOLE_READ_TASKS = 2 * IN_FLIGHT
#: Ranks per pool task, at most: a task reads its ranks one by one and sends them back with each table's frames
#: concatenated (``Packed``), so the parent unpickles and joins a frame per task and table, not one per rank.
#: 512 bench ranks cold, three alternated runs: 8.15-9.67 s with 16, 7.79-9.10 s with 32 (each kind of file read
#: at once for twice the ranks, half the tasks to send back and store), the peak 714 -> 774 MB; five alternated runs,
#: 4.09-4.76 s with 32 (and 8 tasks per worker at least) against 4.03-4.29 s with 64 (and 4), the peak 640 / 627 MiB
#: (a task's fixed cost: each kind's bulk read, the cache file and its streams, the spool files, paid half as often).
TASK_RANKS = 64
#: Ranks per pool task, at least, where each worker has as many to read (a tiered load's deep pass: 7 bench ranks in
#: tasks of 2, 2, 2 and 1; each task's files of a kind read at once, ``prepare``: a deep rank 60 -> 50 ms).
TASK_RANKS_MIN = 2
#: A read is cut into at least this many tasks per worker where it can be (a task of fewer ranks on a small
#: job), so that the workers finish together (the last tasks smaller still: :func:`task_cuts`). 64 bench ranks cold,
#: four alternated runs: tasks of 4 ranks (8 per worker) 1.91-1.97 s, of 8 ranks (4 per worker) 1.77-1.82 s.
TASKS_PER_WORKER_MIN = 4
#: A read of at least this many full tasks per worker ends in smaller ones (:func:`task_cuts`).
TAIL_MIN_TASKS = 4
#: Seconds to wait for a Dask scheduler to answer.
DASK_TIMEOUT_S = 20
DASK_INSTALL = "pip install 'msdiag[cluster]'"


#: Work this process does while its pool workers read (``meanwhile``), each at most once.
_MEANWHILE: list[Callable[[], object]] = []


@contextlib.contextmanager
def meanwhile(fn: Callable[[], object]) -> Iterator[None]:
    """Within the block, ``fn`` runs once in this process while pool workers read ranks (after their first
    tasks are handed out), when a read uses a pool: work this process would otherwise do before or after the
    read, the workers' cores idle then (``msdiag report``: the HTML renderer's imports, matplotlib's ~0.7 s).
    It is a head start, not a promise: without a pool it is not run, and what it raises is dropped (the caller
    does the work again where it needs it, and meets the error there)."""
    _MEANWHILE.append(fn)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            _MEANWHILE.remove(fn)


def _run_meanwhile() -> None:
    while _MEANWHILE:
        fn = _MEANWHILE.pop(0)
        with contextlib.suppress(Exception):
            fn()


def where() -> str:
    """host:pid of this process (recorded per rank: which worker read it)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def read_one(
    d: RankDir, load_rank: LoadRank, reduce: Reduce | None, cache: RankCache | None, key: dict[str, Any] | None
) -> tuple[RankData, str, str | None]:
    """One task: (reduced RankData, host:pid that read it, why it was not stored in the cache or None). ``key``: None
    with a cache, made here (:func:`_key`)."""
    if cache is not None and key is None:
        key = _key(cache, d)
    rd = _read(d, load_rank, reduce)
    unstored = cache.put(key, rd) if cache is not None and key is not None else None
    return rd, where(), unstored


def _key(cache: RankCache, d: RankDir) -> dict[str, Any]:
    """Rank ``d``'s cache key (``RankCache.key``). Made before the rank is read (a file changed meanwhile makes the
    entry stale, never wrong): by read_ranks where the cache holds entries (it looks them up), else by whoever reads
    the rank (a pool worker: the stat walk of every rank's files, 0.08 s at 512 bench ranks, off the serial path)."""
    return cache.key(d.rank, d.family, d.path, d.rank_from, d.captured_ns)


def _read(d: RankDir, load_rank: LoadRank, reduce: Reduce | None) -> RankData:
    """Rank ``d`` read and reduced."""
    if not d.path.is_dir():
        raise InputError(
            d.path,
            f"is not visible on {socket.gethostname()}: every worker must see the capture at the same path",
        )
    rd = load_rank(d)
    return reduce(rd) if reduce is not None else rd


def read_ranks(
    dirs: list[RankDir],
    load_rank: LoadRank,
    *,
    jobs: int | None = None,
    cache: RankCache | None = None,
    scheduler: str | None = None,
    reduce: Reduce | None = None,
    workers: Workers | None = None,
    prepare: Prepare | None = None,
    arrived: Callable[[RankData], object] | None = None,
) -> tuple[list[RankData], dict[str, Any]]:
    """Every rank of ``dirs`` in order, and how they were read (``Capture.ingest``). ``workers``: the local
    pool to read on (kept by the caller across calls); None: one for this call. ``prepare``: what a pool task
    of several ranks reads them within (:data:`Prepare`). ``arrived``: called in this process with each rank read
    (not one taken from the cache) as it comes back, while the others are still being read."""
    stats = CacheStats()
    out: list[RankData | None] = [None] * len(dirs)
    keys: list[dict[str, Any] | None] = [None] * len(dirs)
    by: dict[int, str] = {}
    todo: list[int] = []
    if cache is not None and (scheduler or not cache.empty()):
        keys = [_key(cache, d) for d in dirs]
        for i, rd in enumerate(cache.get_many(keys, stats, [d.path for d in dirs])):  # type: ignore[arg-type]
            if rd is not None:
                stats.hits += 1
                out[i] = rd
                by[rd.rank] = "cache"
            else:
                stats.misses += 1
                todo.append(i)
    else:  # nothing cached (or no cache): every rank is read; an empty cache's keys are made where each rank is read
        todo = list(range(len(dirs)))
        if cache is not None:
            stats.misses += len(dirs)

    n = jobs if jobs is not None else (os.cpu_count() or 1)
    batch = Batch(dirs, todo, load_rank, reduce, cache, keys, stats, out, by, prepare, arrived)
    if scheduler:
        executor = "dask"
        _on_dask(scheduler, batch)
        if workers is not None:
            workers.keep_cut(batch.cut)
    elif len(todo) <= 1 or n <= 1:
        executor = "in-process"
        for i in todo:
            batch.done(i, *read_one(dirs[i], load_rank, reduce, cache, keys[i]))
    else:
        executor = "process-pool"
        if workers is not None:
            workers.read(min(n, len(todo)), batch)
        else:
            with Workers() as own:
                own.read(min(n, len(todo)), batch)
    info = {
        "executor": executor if todo else "cache",
        "jobs": n,
        "scheduler": scheduler,
        "cache": None if cache is None else {"folder": str(cache.root), **stats.as_dict()},
        "read_by": by,
    }
    return [r for r in out if r is not None], info


def _count(stats: CacheStats, cache: RankCache | None, unstored: str | None) -> None:
    if cache is None:
        return
    if unstored is None:
        stats.written += 1
    else:
        stats.not_cached.append(unstored)


@dataclass
class Batch:
    """The ranks one :func:`read_ranks` call gives an executor (``todo``: indexes into ``dirs`` / ``keys``),
    and where their results go (``out``, ``by``, ``stats``)."""

    dirs: list[RankDir]
    todo: list[int]
    load_rank: LoadRank
    reduce: Reduce | None
    cache: RankCache | None
    keys: list[dict[str, Any] | None]
    stats: CacheStats
    out: list[RankData | None]
    by: dict[int, str]
    prepare: Prepare | None = None
    arrived: Callable[[RankData], object] | None = None  # read_ranks' ``arrived``
    # the tables Dask tasks sent back concatenated (unpack), for the caller's join (Workers.take_cut)
    cut: list[tuple[str, Any, list[Any]]] = field(default_factory=list)

    def done(self, i: int, rd: RankData, at: str, unstored: str | None) -> None:
        """Rank ``i`` read by ``at``; ``unstored``: why its cache entry was not written (None: written)."""
        self.out[i], self.by[rd.rank] = rd, at
        _count(self.stats, self.cache, unstored)
        if self.arrived is not None:
            self.arrived(rd)


# ---- local process pool -----------------------------------------------------------------------


def _pool_context() -> Any:
    """fork where the platform has it (no re-import of the caller's main module, cheap workers)."""
    return mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None


#: A pool worker's peak memory at its start (set in the worker by :func:`_worker_start`).
_start_kb: int | None = None


def _worker_start() -> None:
    """Run in each pool worker as it starts: its peak memory then (a forked worker's is the parent's size)."""
    global _start_kb
    _start_kb = _peak_kb()


def _read_in_worker(
    dirs: list[RankDir], load_rank: LoadRank, reduce: Reduce | None, cache: RankCache | None,
    keys: list[dict[str, Any] | None], prepare: Prepare | None = None, spool: str | None = None, trim: bool = False,
) -> tuple[Packed | Spooled, str, list[str | None], int | None]:
    """Each rank of a task read and reduced in a pool worker (within ``prepare(dirs)``), their cache entries written
    together (``RankCache.put_many``: one file for the task): (the ranks packed, this worker, why each was not stored
    in the cache or None, how much the worker's peak memory has grown since it started: KiB, None: unknown).
    ``trim``: the pages the worker's earlier tasks freed are given back first (a pool kept for a second pass)."""
    if trim:
        release_freed()
    if cache is not None:  # (keys left to the reader: read_ranks found the cache empty)
        keys = [k if k is not None else _key(cache, d) for k, d in zip(keys, dirs)]
    with prepare(dirs) if prepare is not None and len(dirs) > 1 else contextlib.nullcontext() as cuts:
        ranks = [_read(d, load_rank, reduce) for d in dirs]
        # stored and sent back alike; a table whose frames are still the slices of one bulk read: that read's frame
        wholes = concat_alike(ranks, cuts or ())
    unstored: list[str | None] = cache.put_many(keys, ranks, wholes) if cache is not None else [None] * len(ranks)
    peak = _peak_kb()
    packed = pack(ranks, wholes)
    return (packed if spool is None else _spooled(packed, spool)), where(), unstored, (
        None if peak is None or _start_kb is None else peak - _start_kb)


@dataclass
class Spooled:
    """A task's :class:`Packed`, pickled into files of the pool's spool folder (:func:`_spool_folder`) instead of
    travelling through the result pipe: ``path`` the Packed less its concatenated tables, ``tables`` each of those as
    its pickle's file and its arrays' file (:func:`_write_spool`); :func:`unspooled` reads them back and removes the
    files."""

    path: str
    tables: dict[str, tuple[str, str]] = field(default_factory=dict)


def _spooled(packed: Packed, folder: str) -> Packed | Spooled:
    """``packed`` written to files of ``folder``: the Packed less its concatenated tables pickled, then each of those
    in files of its own (:func:`_write_spool`); where they cannot be (a full /dev/shm: a container's is 64 MB by
    default), ``packed`` itself, to travel through the pipe."""
    paths: list[str] = []
    try:
        tables = {name: (_new_file(folder, paths), _new_file(folder, paths)) for name in packed.wholes}
        for name, whole in packed.wholes.items():
            _write_spool(whole, *tables[name])
        main = _new_file(folder, paths)
        with open(main, "wb") as f:
            pickle.dump(replace(packed, wholes={}), f, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        for path in paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return packed
    return Spooled(main, tables)


def _new_file(folder: str, paths: list[str]) -> str:
    """A new empty file of ``folder``, its path added to ``paths``."""
    fd, path = tempfile.mkstemp(dir=folder, suffix=".task")
    paths.append(path)
    os.close(fd)
    return path


_ALIGN = 64  # each array's bytes start at a multiple of this (Arrow's alignment; numpy's is 8)
_PLACE = struct.Struct("<QQ")


def _write_spool(value: Any, head: str, arrays: str) -> None:
    """``value`` as pickle protocol 5 into the file ``head``, its numpy arrays' bytes out of band into the file
    ``arrays``, each at an aligned offset, their (offset, length) after the pickle in ``head``, then their count.
    :func:`_read_spool` reads the pickle (copied, the file then gone) and maps ``arrays``, whose arrays are then views
    of its pages, not copies of them: at 512 bench ranks the parent's CPU while the workers read on both cores
    0.49-0.50 -> 0.40-0.41 s; at 1,024 ranks the cold peak 1,005 -> 930-943 MiB. Each table in files of its own: a
    mapping lives while one of its arrays does, and the join frees each table's frames as it joins them (one file a
    task, the pickle in it, had kept the texts twice and every table mapped until the last was joined). Arrow's
    buffers (the texts) stay in the pickle, copied as before: the join keeps an Arrow column's chunks, and a chunk in a
    mapped file would keep the file for the analysis' life, where the join copies the numpy arrays. The pickle is
    written as it is made (a head made whole first held a copy of the texts in the worker), each array's bytes as it
    comes."""
    places: list[tuple[int, int]] = []
    with open(arrays, "wb") as out:

        def aside(buffer: pickle.PickleBuffer) -> bool:  # (False: out of band, its bytes written now)
            try:
                raw = buffer.raw()
            except BufferError:  # not contiguous (none is in a task's frames): in the pickle
                return True
            if not isinstance(raw.obj, np.ndarray):
                return True
            at = _aligned(out.tell())
            out.seek(at)
            out.write(raw)
            places.append((at, raw.nbytes))
            return False

        with open(head, "wb") as f:
            pickle.Pickler(f, protocol=5, buffer_callback=aside).dump(value)
            f.write(b"".join(_PLACE.pack(*p) for p in places) + struct.pack("<Q", len(places)))


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def unspooled(got: Packed | Spooled) -> Packed:
    """The task's Packed, read back from its spool files (removed) where it was spooled."""
    if not isinstance(got, Spooled):
        return got
    try:
        with open(got.path, "rb") as f:
            packed: Packed = pickle.load(f)
        packed.wholes.update((name, _read_spool(*paths)) for name, paths in got.tables.items())
    finally:
        for path in (got.path, *(p for pair in got.tables.values() for p in pair)):
            with contextlib.suppress(OSError):
                os.unlink(path)
    return packed


def _read_spool(head: str, arrays: str) -> Any:
    """What :func:`_write_spool` wrote: the pickle read from ``head``, its arrays views of ``arrays`` mapped
    copy-on-write (writable; the mapping lives while one of them does, the file's pages are freed with the last)."""
    with open(head, "rb") as f:
        f.seek(-8, os.SEEK_END)
        (count,) = struct.unpack("<Q", f.read(8))
        f.seek(-8 - _PLACE.size * count, os.SEEK_END)
        table = f.read(_PLACE.size * count)
        places = [_PLACE.unpack_from(table, _PLACE.size * i) for i in range(count)]
        view: memoryview | None = None
        if places:
            with open(arrays, "rb") as a:
                view = memoryview(mmap.mmap(a.fileno(), 0, access=mmap.ACCESS_COPY))
        f.seek(0)
        return pickle.load(f, buffers=[view[at : at + n] for at, n in places] if view is not None else [])


#: Memory-backed file systems where a pool's spool folder may be made, the first usable one taken.
SPOOL_ROOTS = ("/dev/shm",)


_SPOOL_PREFIX = "msdiag-tasks-"


def _spool_folder() -> str | None:
    """A private folder (0700) for the pool's task results on a memory-backed file system, or None (results then
    travel through the pool's pipe). Its name holds this process' id: the folders a killed msdiag left there (its
    process gone, the folder this user's) are removed first, or they would hold memory until the machine restarts."""
    for root in SPOOL_ROOTS:
        if os.path.isdir(root) and os.access(root, os.W_OK | os.X_OK):
            _sweep(root)
            with contextlib.suppress(OSError):
                return tempfile.mkdtemp(prefix=f"{_SPOOL_PREFIX}{os.getpid()}-", dir=root)
    return None


def _sweep(root: str) -> None:
    """Remove the spool folders under ``root`` that this user's msdiag processes, now gone, left behind."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            pid = entry.name[len(_SPOOL_PREFIX):].split("-", 1)[0]
            if not entry.name.startswith(_SPOOL_PREFIX) or not pid.isdigit():
                continue
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid() \
                        and not _alive(int(pid)):
                    shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's process: alive)
        return True
    return True


@dataclass
class Packed:
    """The ranks of one pool task as they travel back (pickled once): each table whose frames are alike
    (``model.joinable``) concatenated in rank order, and every rank without those frames, holding their
    row counts instead. :func:`unpack` gives the ranks back, each such frame a row slice of the concatenation."""

    ranks: list[RankData]  # the ranks less their frames in ``wholes``
    wholes: dict[str, pd.DataFrame]  # table -> the frames of the ranks that hold it, concatenated in order
    rows: list[dict[str, int]]  # per rank: table of ``wholes`` -> its rows there
    order: list[list[str]]  # per rank: its tables' names in their order


def pack(ranks: list[RankData], wholes: dict[str, pd.DataFrame] | None = None) -> Packed:
    """``ranks`` as one :class:`Packed` (the ranks are not changed); ``wholes``: ``model.concat_alike(ranks)`` where
    already made."""
    if wholes is None:
        wholes = concat_alike(ranks)
    held = [entries(r.tables) for r in ranks]  # (a table in ``wholes`` is not cut per rank: its rows are counted)
    return Packed(
        ranks=[replace(r, tables=Frames((n, x) for n, x in h if n not in wholes)) for r, h in zip(ranks, held)],
        wholes=wholes,
        rows=[{n: len(x) for n, x in h if n in wholes} for h in held],
        order=[list(r.tables) for r in ranks],
    )


def unpack(p: Packed) -> tuple[list[RankData], list[tuple[str, Any, list[Any]]]]:
    """The ranks of ``p``, each frame of a concatenated table a row slice of it (a view, the index 0..n-1; held as
    ``model.Rows``, cut when read), and those tables as ``Capture.join_tables`` takes them: (name, the
    concatenation, each rank's Rows in order)."""
    sliced: list[dict[str, Any]] = [{} for _ in p.ranks]
    cut: list[tuple[str, Any, list[Any]]] = []
    for name, whole in p.wholes.items():
        holders = [k for k, rows in enumerate(p.rows) if name in rows]
        parts = rows_of(whole, [p.rows[k][name] for k in holders])  # cut when read (model.Frames)
        for k, part in zip(holders, parts):
            sliced[k][name] = part
        cut.append((name, whole, parts))
    for r, own, order in zip(p.ranks, sliced, p.order):
        own.update(r.tables)
        r.tables = Frames((n, own[n]) for n in order)
    return p.ranks, cut


def task_size(todo: int, workers: int) -> int:
    """Ranks per pool task for ``todo`` ranks on ``workers`` workers: at least TASKS_PER_WORKER_MIN tasks per worker
    where the ranks allow, at most TASK_RANKS ranks per task."""
    size = todo // (workers * TASKS_PER_WORKER_MIN)
    if size < TASK_RANKS_MIN and todo >= TASK_RANKS_MIN * workers:
        size = TASK_RANKS_MIN
    return max(1, min(TASK_RANKS, size))


def task_cuts(todo: list[int], workers: int) -> list[list[int]]:
    """``todo`` cut into pool tasks, in order: tasks of :func:`task_size` ranks, and where the read holds at least
    TAIL_MIN_TASKS such tasks per worker, its last ranks in tasks of half and then a quarter of that (one of each
    per worker), so that the workers run out of work together rather than one idling while the other reads a
    whole last task."""
    size = task_size(len(todo), workers)
    tail: list[int] = []
    if size >= 4 and len(todo) >= TAIL_MIN_TASKS * workers * size:
        tail = [size // 2] * workers + [size // 4] * workers
    head = len(todo) - sum(tail)
    cuts = [todo[k : min(k + size, head)] for k in range(0, head, size)]
    k = head
    for n in tail:
        cuts.append(todo[k : k + n])
        k += n
    return cuts


class Workers:
    """A local process pool kept across :func:`read_ranks` calls (the shallow and the deep pass of one
    load), created at its first task and replaced only when one of its workers grew by more than
    ``WORKER_GROWTH_KB`` since it started (``ru_maxrss``: a worker that parsed a huge trace does not keep
    that heap for the rest of the run), or after ``TASKS_PER_WORKER`` ranks per worker where the
    platform does not say. Use it as a context manager: the workers end with it."""

    def __init__(self) -> None:
        self.pools = 0  # pools started so far
        self._pool: ProcessPoolExecutor | None = None
        self._workers = 0
        self._tasks = 0  # ranks given to the current pool
        self._spool: str | None = None  # where the current pool's tasks leave their results (Spooled)
        # the tables the tasks sent back concatenated, until the loader takes them (take_cut)
        self._cut: list[tuple[str, Any, list[Any]]] = []

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def keep_cut(self, cut: list[tuple[str, Any, list[Any]]]) -> None:
        """Keep ``cut`` (tables tasks elsewhere sent back concatenated: Dask's) for :meth:`take_cut`."""
        self._cut.extend(cut)

    def take_cut(self) -> list[tuple[str, Any, list[Any]]]:
        """The tables the tasks read so far sent back concatenated, for ``Capture.join_tables``: (table, the
        concatenation, each rank's frame of it, a row slice, in order); forgotten here once taken."""
        out, self._cut = self._cut, []
        return out

    def close(self) -> None:
        """End the current pool's workers (after their tasks)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        spool, self._spool = self._spool, None
        if spool is not None:
            shutil.rmtree(spool, ignore_errors=True)

    def _get(self, workers: int) -> ProcessPoolExecutor:
        if self._pool is None or self._workers < workers:
            self.close()
            self._pool = ProcessPoolExecutor(workers, mp_context=_pool_context(), initializer=_worker_start)
            self._workers, self._tasks = workers, 0
            self._spool = _spool_folder()
            self.pools += 1
        return self._pool

    def read(self, workers: int, b: Batch) -> None:
        """Read the ranks of ``b`` on at most ``workers`` workers."""
        queue = deque(task_cuts(b.todo, workers))
        whole = bool(_MEANWHILE) and len(queue) <= WHOLE_READ_TASKS * workers
        # a pool kept from an earlier read: its workers' first tasks here give back the pages the earlier ones freed
        # (the parent joins that read's ranks meanwhile: loader._read_tiered)
        trims = IN_FLIGHT * workers if self._pool is not None and self._tasks else 0
        pending: dict[Future[tuple[Packed | Spooled, str, list[str | None], int | None]], list[int]] = {}
        retire = False  # the current pool takes no more tasks: it is replaced once its tasks are done
        by_count = _peak_kb() is None  # no measure of a worker's memory: a pool reads a fixed number of ranks
        try:
            while queue or pending:
                if retire and not pending:
                    self.close()
                    retire = False
                if not retire:
                    pool = self._get(workers)
                    fresh = self._tasks == 0
                    # the workers are forked at a fresh pool's first submit: the ranks read so far are frozen
                    # out of the garbage collector then, or a collection in a worker would touch, and so copy,
                    # every page of them (forking.frozen)
                    with frozen() if fresh else contextlib.nullcontext():
                        while queue and (whole or len(pending) < IN_FLIGHT * self._workers) and not retire:
                            task = queue.popleft()
                            pending[pool.submit(_read_in_worker, [b.dirs[i] for i in task], b.load_rank, b.reduce, b.cache,
                                                [b.keys[i] for i in task], b.prepare, self._spool, trims > 0)] = task
                            trims -= 1
                            self._tasks += len(task)
                            retire = by_count and self._tasks >= self._workers * TASKS_PER_WORKER
                _run_meanwhile()  # the workers have their first tasks
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    task = pending.pop(f)
                    try:
                        got, at, unstored, grown_kb = f.result()
                        packed = unspooled(got)
                    except BrokenProcessPool:
                        self.close()
                        # the pool cannot tell which worker died, nor at which rank: every rank in flight is named,
                        # the earliest first (the same message whichever broken task is met first)
                        flight = sorted({i for t in (task, *pending.values()) for i in t})
                        others = "" if len(flight) == 1 else (
                            f" (or ranks {rank_ranges([b.dirs[i].rank for i in flight[1:]])}, read at the same time)")
                        raise InputError(
                            b.dirs[flight[0]].path,
                            f"the worker process reading this rank{others} died (out of memory?): retry with fewer --jobs",
                        ) from None
                    ranks, cut = unpack(packed)
                    self._cut.extend(cut)
                    for i, rd, why in zip(task, ranks, unstored):
                        b.done(i, rd, at, why)
                    if grown_kb is not None and grown_kb > WORKER_GROWTH_KB:
                        retire = True
            if retire:  # not kept for a later call either
                self.close()
        except BaseException:
            for f in pending:
                f.cancel()
            self.close()
            raise


# ---- Dask ---------------------------------------------------------------------------------------


def worker_identity() -> dict[str, Any]:
    """Run on each Dask worker: what msdiag it has, and where it runs."""
    from msdiag import __version__

    return {"msdiag": __version__, "schema": SCHEMA_VERSION, "where": where()}


def dask_client(scheduler: str) -> Any:
    """A client of the Dask scheduler at ``scheduler``, or an InputError saying what is wrong."""
    try:
        from distributed import Client
    except ImportError:
        raise InputError("--scheduler", f"needs Dask, which is not installed: {DASK_INSTALL}") from None
    try:
        return Client(scheduler, timeout=DASK_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        raise InputError(scheduler, f"no Dask scheduler answers there ({e})") from None


def _on_dask(scheduler: str, b: Batch) -> None:
    dirs, todo, cache, keys = b.dirs, b.todo, b.cache, b.keys
    client = dask_client(scheduler)
    try:
        from distributed import as_completed

        try:
            ids = client.run(worker_identity)
        except Exception as e:  # noqa: BLE001 - e.g. the workers cannot import msdiag
            raise InputError(
                scheduler, f"the Dask workers cannot run msdiag ({type(e).__name__}: {e}): install the same msdiag on every worker"
            ) from None
        if not ids:
            raise InputError(scheduler, "the Dask cluster has no workers")
        from msdiag import __version__

        other = sorted({f"{v['msdiag']} (schema {v['schema']})" for v in ids.values()} - {f"{__version__} (schema {SCHEMA_VERSION})"})
        if other:
            raise InputError(
                scheduler, f"the Dask workers run msdiag {', '.join(other)}, this is {__version__}: install the same on every worker"
            )
        if not todo:
            return
        run = uuid.uuid4().hex[:8]
        # tasks of several ranks, as the local pool's (task_cuts over the cluster's workers), sent back packed
        tasks = task_cuts(todo, len(ids))
        futures = [
            client.submit(_read_in_worker, [dirs[i] for i in task], b.load_rank, b.reduce, None, [None] * len(task), b.prepare,
                          key=f"msdiag-ranks-{dirs[task[0]].rank}-{run}", pure=False)
            for task in tasks
        ]
        index = {f.key: task for f, task in zip(futures, tasks)}
        task = tasks[0]
        try:
            # the client's own loop: this process has no default client when the cluster runs elsewhere
            for f in as_completed(futures, loop=client.loop):
                task = index[f.key]
                packed, at, _, _ = f.result()
                f.release()
                ranks, cut = unpack(packed)
                b.cut.extend(cut)
                # entries of ranks read on Dask are written here (the parent owns the cache folder), a file per task
                unstored: list[str | None] = (cache.put_many([keys[i] for i in task], ranks, {name: whole for name, whole, _ in cut})
                                              if cache is not None else [None] * len(task))
                for i, rd, why in zip(task, ranks, unstored):
                    b.done(i, rd, at, why)
        except MsdiagError:
            client.cancel(futures)
            raise
        except Exception as e:  # a worker lost, a task killed: name the rank, keep the cause (--debug)
            client.cancel(futures)
            others = "" if len(task) == 1 else f" (or ranks {', '.join(str(dirs[i].rank) for i in task[1:])}, read by the same task)"
            raise InputError(dirs[task[0]].path,
                             f"reading this rank{others} on the Dask cluster failed ({type(e).__name__}: {e})") from e
    finally:
        client.close()
