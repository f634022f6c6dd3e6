"""Reading many ranks: the cache first, then a bounded process pool here, or an existing Dask cluster.

Each rank is one task: parse the rank's files (``loader.load_rank``), apply the reduction the
analysis asks for (``metrics.reduce.reduce_rank``: only what the metrics and the report read is
kept) and send back that reduced RankData. The process holding every rank therefore grows with
what the analysis needs, not with the traces' size.

- Cache: the parent fingerprints every rank (a ``stat`` of its files) and reads the entries that
  are current; only the others are parsed. Pool workers write their entries themselves; entries
  of ranks parsed on Dask workers are written by the parent, which owns the cache folder.
- Local pool: ``jobs`` worker processes (default: the CPUs); at most two tasks per worker are in
  flight, so results do not pile up unread, and the pool is replaced after ``TASKS_PER_WORKER``
  ranks per worker, so a worker that parsed a huge trace does not keep its memory for the rest of
  the run. One rank, or ``jobs=1``: read in this process.
- Dask (``scheduler="tcp://HOST:PORT"``): the ranks are mapped on the cluster's workers, which must
  see the capture at the same path and have the same msdiag installed; results are gathered one
  by one as they complete. Dask is optional (``pip install 'msdiag[cluster]'``).
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import socket
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable

from msdiag.errors import InputError, MsdiagError
from msdiag.ingest.cache import CacheStats, RankCache
from msdiag.ingest.discover import RankDir
from msdiag.model import SCHEMA_VERSION, RankData

LoadRank = Callable[[RankDir], RankData]
Reduce = Callable[[RankData], RankData]

#: A pool worker is replaced after this many ranks (bounds what a worker's heap keeps).
TASKS_PER_WORKER = 16
#: Tasks in flight per worker.
IN_FLIGHT = 2
#: Seconds to wait for a Dask scheduler to answer.
DASK_TIMEOUT_S = 20
DASK_INSTALL = "pip install 'msdiag[cluster]'"


def where() -> str:
    """host:pid of this process (recorded per rank: which worker read it)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def read_one(
    d: RankDir, load_rank: LoadRank, reduce: Reduce | None, cache: RankCache | None, key: dict[str, Any] | None
) -> tuple[RankData, str, str | None]:
    """One task: (reduced RankData, host:pid that read it, why it was not stored in the cache or None)."""
    if not d.path.is_dir():
        raise InputError(
            d.path,
            f"is not visible on {socket.gethostname()}: every worker must see the capture at the same path",
        )
    rd = load_rank(d)
    if reduce is not None:
        rd = reduce(rd)
    unstored = cache.put(key, rd) if cache is not None and key is not None else None
    return rd, where(), unstored


def read_ranks(
    dirs: list[RankDir],
    load_rank: LoadRank,
    *,
    jobs: int | None = None,
    cache: RankCache | None = None,
    scheduler: str | None = None,
    reduce: Reduce | None = None,
) -> tuple[list[RankData], dict[str, Any]]:
    """Every rank of ``dirs`` in order, and how they were read (``Capture.ingest``)."""
    stats = CacheStats()
    out: list[RankData | None] = [None] * len(dirs)
    keys: list[dict[str, Any] | None] = [None] * len(dirs)
    by: dict[int, str] = {}
    todo: list[int] = []
    if cache is not None:
        keys = [cache.key(d.rank, d.family, d.path, d.rank_from, d.captured_ns) for d in dirs]
        for i, rd in enumerate(cache.get_many(keys, stats, [d.path for d in dirs])):  # type: ignore[arg-type]
            if rd is not None:
                stats.hits += 1
                out[i] = rd
                by[rd.rank] = "cache"
            else:
                stats.misses += 1
                todo.append(i)
    else:
        todo = list(range(len(dirs)))

    n = jobs if jobs is not None else (os.cpu_count() or 1)
    if scheduler:
        executor = "dask"
        _on_dask(scheduler, dirs, todo, load_rank, reduce, cache, keys, stats, out, by)
    elif len(todo) <= 1 or n <= 1:
        executor = "in-process"
        for i in todo:
            rd, at, unstored = read_one(dirs[i], load_rank, reduce, cache, keys[i])
            out[i], by[rd.rank] = rd, at
            _count(stats, cache, unstored)
    else:
        executor = "process-pool"
        _on_pool(min(n, len(todo)), dirs, todo, load_rank, reduce, cache, keys, stats, out, by)
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


# ---- local process pool -----------------------------------------------------------------------


def _pool_context() -> Any:
    """fork where the platform has it (no re-import of the caller's main module, cheap workers)."""
    return mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None


def _on_pool(
    workers: int,
    dirs: list[RankDir],
    todo: list[int],
    load_rank: LoadRank,
    reduce: Reduce | None,
    cache: RankCache | None,
    keys: list[dict[str, Any] | None],
    stats: CacheStats,
    out: list[RankData | None],
    by: dict[int, str],
) -> None:
    # A pool reads at most workers x TASKS_PER_WORKER ranks, then is replaced by a fresh one
    # (max_tasks_per_child is refused with fork, and other start methods re-import the caller's
    # main module).
    ctx = _pool_context()
    per_pool = workers * TASKS_PER_WORKER
    for lo in range(0, len(todo), per_pool):
        queue = list(todo[lo : lo + per_pool])
        pending: dict[Future[tuple[RankData, str, str | None]], int] = {}
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            try:
                first = True
                while queue or pending:
                    # the workers are forked at the first submit: the ranks read so far are frozen out
                    # of the garbage collector then, or a collection in a worker would touch, and so
                    # copy, every page of them
                    if first:
                        gc.freeze()
                    try:
                        while queue and len(pending) < IN_FLIGHT * workers:
                            i = queue.pop(0)
                            pending[pool.submit(read_one, dirs[i], load_rank, reduce, cache, keys[i])] = i
                    finally:
                        if first:
                            gc.unfreeze()
                            first = False
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        i = pending.pop(f)
                        try:
                            rd, at, unstored = f.result()
                        except BrokenProcessPool:
                            raise InputError(
                                dirs[i].path,
                                "the worker process reading this rank died (out of memory?): retry with fewer --jobs",
                            ) from None
                        out[i], by[rd.rank] = rd, at
                        _count(stats, cache, unstored)
            except BaseException:
                for f in pending:
                    f.cancel()
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


def _on_dask(
    scheduler: str,
    dirs: list[RankDir],
    todo: list[int],
    load_rank: LoadRank,
    reduce: Reduce | None,
    cache: RankCache | None,
    keys: list[dict[str, Any] | None],
    stats: CacheStats,
    out: list[RankData | None],
    by: dict[int, str],
) -> None:
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
        futures = [
            client.submit(read_one, dirs[i], load_rank, reduce, None, None, key=f"msdiag-rank-{dirs[i].rank}-{run}", pure=False)
            for i in todo
        ]
        index = {f.key: i for f, i in zip(futures, todo)}
        i = todo[0]
        try:
            # the client's own loop: this process has no default client when the cluster runs elsewhere
            for f in as_completed(futures, loop=client.loop):
                i = index[f.key]
                rd, at, _ = f.result()
                f.release()
                out[i], by[rd.rank] = rd, at
                if cache is not None and keys[i] is not None:
                    _count(stats, cache, cache.put(keys[i], rd))  # type: ignore[arg-type]
        except MsdiagError:
            client.cancel(futures)
            raise
        except Exception as e:  # a worker lost, a task killed: name the rank, keep the cause (--debug)
            client.cancel(futures)
            raise InputError(dirs[i].path, f"reading this rank on the Dask cluster failed ({type(e).__name__}: {e})") from e
    finally:
        client.close()
