"""Forking a process that holds a large heap, without its children copying it.

A forked child shares its parent's pages until one is written; the garbage collector writes to every
object it traces (its reference counts and links), so a collection in the child would copy each page of
the objects it inherited. ``frozen()`` moves the parent's objects out of the collector's sight while the
children are forked (``gc.freeze``: a child's collections leave them alone), and moves them back after,
unless a freeze was already held: an unfreeze releases every frozen object, the caller's too (the CLI
holds one during an analysis, cli._lean_gc). ``Forked`` runs a function in a child forked so and brings
its result back.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import pickle
import signal
import sys
import threading
from typing import Any, Callable, Iterator


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """``gc.freeze()`` for the time of the block; undone after it only when no freeze was held before."""
    held = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not held:
            gc.unfreeze()


def fork_cpus() -> int:
    """The CPUs this process may run on (its affinity); 1 where it cannot fork, or should not: a process with
    other threads (a Dask client's) could leave a lock held in the child."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this OS (macOS)
        return os.cpu_count() or 1


def peak_kb() -> int | None:
    """This process' peak resident memory so far in KiB (``ru_maxrss``), None where it is not known."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS, KiB elsewhere


def resident_kb() -> int | None:
    """This process' resident memory now in KiB (Linux: /proc/self/statm), else its peak so far, else None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        return peak_kb()


class ForkFailed(Exception):
    """The forked child gave no result: it raised, was killed, or what it returned does not pickle."""


class Forked:
    """``fn()`` run in a forked child while this process goes on; :meth:`result` is its return value,
    pickled back through a pipe. The child shares this process' heap as it was at the fork (frozen: see
    ``frozen``), so ``fn`` reads what the parent holds without it being sent; what ``fn`` changes stays in
    the child. The child ends with ``os._exit``: no exit handler of the parent, no flush of its buffers."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        read, write = os.pipe()
        with frozen():
            pid = os.fork()
        if pid == 0:  # the child
            os.close(read)
            status = 1
            try:
                data = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write, "wb") as out:
                    out.write(data)
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        self._pid: int | None = pid
        self._read = read

    def result(self) -> Any:
        """The child's return value (waits for it); ForkFailed when it gave none."""
        with os.fdopen(self._read, "rb") as f:
            self._read = -1
            data = f.read()
        status = self._reap()
        if status != 0 or not data:
            raise ForkFailed(f"the forked child ended with status {status}")
        try:
            return pickle.loads(data)
        except Exception as e:  # noqa: BLE001 - a result that does not come back is no result
            raise ForkFailed(f"the forked child's result does not unpickle: {e}") from None

    def cancel(self) -> None:
        """Stop the child and reap it (the parent gave up waiting, e.g. on an exception of its own); nothing once
        :meth:`result` has reaped it."""
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            self._reap()
        if self._read >= 0:
            os.close(self._read)
            self._read = -1

    def _reap(self) -> int:
        if self._pid is None:
            return -1
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        return os.waitstatus_to_exitcode(status)


def release_freed() -> None:
    """Give the C library's freed memory back to the system (glibc ``malloc_trim``; nothing elsewhere).

    The ranks' frames arrive as many small arrays (unpickled from the workers, or read from the cache
    by a few threads); once joined into one frame per table they are freed, but the allocator keeps
    those pages (holes in its heaps, one heap per thread) and they stay in the process' resident
    memory for the rest of the analysis (ingest/loader.py). A pool worker likewise keeps the pages of the
    tasks it read (ingest/parallel.py: released by its first tasks of a second read on the same pool)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


#: glibc malloc's thresholds in an msdiag command (:func:`keep_freed`): blocks below this come from its heaps, and this
#: much free memory at a heap's top is kept for the next blocks.
KEEP_FREED_BYTES = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)


def keep_freed() -> None:
    """Let glibc's malloc reuse the memory the command frees rather than give it back to the system at once and fault
    in new pages for the next blocks (a page first touched costs the kernel a fault and a zeroing: on a virtual
    machine whose host takes back the guest's free pages, ~2 ms per MB here against 0.2-0.4 ms per MB reused).
    By default glibc maps each block above a threshold (128 KiB, raised as blocks are freed, to 32 MiB at most) on
    its own and unmaps it when freed, and trims a heap's free top above twice that: the analysis' columns and frames
    (MBs each, tens of MBs for a table's block of floats) come and go all along. With both thresholds at
    KEEP_FREED_BYTES, a 512-rank bench analysis faulted ~239K pages instead of ~300K, its system time 1.11 -> 1.02 s
    (six alternated pairs). Setting only one of them fixes the other at its default: the trim threshold alone sent
    every block above 128 KiB to a mapping of its own (930K faults, 3.8 s against 3.4 s). :func:`release_freed`
    still gives the freed pages back where the loader says so. The command's own process only (the CLI calls it; an
    embedding program keeps its allocator as it is); nothing off glibc."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # musl and others
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt(_M_MMAP_THRESHOLD, KEEP_FREED_BYTES)
    mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES)


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, looked up once among the symbols this process has loaded (the C library is one of
    them); None off Linux or where the C library has none (musl). Not ``ctypes.util.find_library``, which runs
    ``ldconfig -p`` in a subprocess on every call (2.6 ms in a small process; a 512-rank run traced four of them)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl and others: no malloc_trim
        return None
    trim.argtypes = [ctypes.c_size_t]
    return trim
