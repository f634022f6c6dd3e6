"""The local process pool of ingest/parallel.py: replaced when a worker's memory grew, not after a count.

- a worker whose peak memory grew beyond ``WORKER_GROWTH_KB`` (it parsed a huge trace) reads no rank
  given to the pool after that: the pool is drained and replaced, so that heap is not kept for the run;
- ranks that leave the workers small are all read by one pool, however many (no re-forking, no warm-up
  paid again), and a capture's shallow and deep passes share it;
- where a worker's memory is not known, the pool is replaced after ``TASKS_PER_WORKER`` ranks per worker.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from msdiag.analysis import analyze
from msdiag.ingest import parallel
from msdiag.ingest.discover import RankDir
from msdiag.model import RankData
from msdiag.options import Options

pytestmark = pytest.mark.skipif(parallel._pool_context() is None, reason="the pool's memory bound is measured on fork platforms")

#: What a "huge" rank allocates (and touches) in these tests, against a bound lowered to half of it.
BIG = 64 << 20


def _dirs(tmp_path: Path, n: int) -> list[RankDir]:
    out = []
    for r in range(n):
        p = tmp_path / f"rank{r}"
        p.mkdir()
        out.append(RankDir(rank=r, path=p, family="ascend_pt", rank_from="folder name", captured_ns=None))
    return out


def _small(d: RankDir) -> RankData:
    return RankData(rank=d.rank, family=d.family, path=str(d.path))


def _huge(d: RankDir) -> RankData:
    """A rank whose parse takes BIG bytes of heap (written, so resident), freed before it returns."""
    block = b"x" * BIG
    assert block[-1:] == b"x"
    del block
    return _small(d)


def _pid(where: str) -> int:
    return int(where.rsplit(":", 1)[1])


def test_a_worker_that_grew_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every rank grows its worker beyond the bound: the first result retires the pool, which takes no
    # further rank; the ranks in flight then (IN_FLIGHT x 2 workers) finish there, the rest go to a new pool
    monkeypatch.setattr(parallel, "WORKER_GROWTH_KB", BIG // 2048)
    monkeypatch.setattr(parallel, "TASK_RANKS_MIN", 1)  # a task a rank: IN_FLIGHT x 2 ranks in flight, not all of them
    dirs = _dirs(tmp_path, 2 * parallel.IN_FLIGHT * 2)
    with parallel.Workers() as w:
        ranks, info = parallel.read_ranks(dirs, _huge, jobs=2, workers=w)
        assert w.pools == 2
    assert [r.rank for r in ranks] == list(range(len(dirs)))
    by = {r: _pid(at) for r, at in info["read_by"].items()}
    first = {by[r] for r in range(parallel.IN_FLIGHT * 2)}
    later = {by[r] for r in range(parallel.IN_FLIGHT * 2, len(dirs))}
    assert not first & later and os.getpid() not in first | later


def test_workers_that_stay_small_read_every_rank(tmp_path: Path) -> None:
    # more ranks than the old fixed replacement (16 per worker) let one pool read: one pool, two workers
    dirs = _dirs(tmp_path, 2 * parallel.TASKS_PER_WORKER + 8)
    with parallel.Workers() as w:
        ranks, info = parallel.read_ranks(dirs, _small, jobs=2, workers=w)
        assert w.pools == 1
        # a second read on the same workers (the deep pass of a tiered load) starts no other pool
        again, more = parallel.read_ranks(dirs[:3], _small, jobs=2, workers=w)
        assert w.pools == 1
    assert [r.rank for r in ranks] == list(range(len(dirs)))
    pids = {_pid(at) for at in info["read_by"].values()}
    assert len(pids) <= 2 and {_pid(at) for at in more["read_by"].values()} <= pids


def test_without_a_memory_measure_pools_are_replaced_by_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "_peak_kb", lambda: None)
    monkeypatch.setattr(parallel, "TASKS_PER_WORKER", 2)
    dirs = _dirs(tmp_path, 10)
    with parallel.Workers() as w:
        ranks, info = parallel.read_ranks(dirs, _small, jobs=2, workers=w)
        assert w.pools == 3  # 4 + 4 + 2 ranks
    assert [r.rank for r in ranks] == list(range(10))


def test_a_tiered_load_reads_its_deep_ranks_on_the_shallow_pass_workers(job8: Path) -> None:
    # threshold 0: every rank read shallow, then the chosen ones deep, on the same two workers
    a = analyze(job8, Options(jobs=2, deep="auto", deep_all_up_to=0))
    ing = a.capture.ingest
    assert ing["executor"] == "process-pool" and ing["read_depth"]["deep"]
    assert len({_pid(at) for at in ing["read_by"].values()}) <= 2


def test_a_freeze_the_caller_holds_is_kept(tmp_path: Path) -> None:
    # the pool freezes what was read so far while it forks its workers; it undoes that only when it froze alone:
    # a freeze the caller holds (the CLI's during an analysis, cli._lean_gc) is not released by it
    import gc

    dirs = _dirs(tmp_path, 4)
    gc.unfreeze()  # (no freeze left by what ran before in this process)
    with parallel.Workers() as w:
        parallel.read_ranks(dirs, _small, jobs=2, workers=w)
    assert gc.get_freeze_count() == 0  # froze alone: undone
    gc.freeze()
    try:
        held = gc.get_freeze_count()
        with parallel.Workers() as w:
            parallel.read_ranks(dirs, _small, jobs=2, workers=w)
        assert gc.get_freeze_count() >= held > 0  # the caller's freeze still held
    finally:
        gc.unfreeze()


def test_meanwhile_runs_once_here_while_the_workers_read(tmp_path: Path) -> None:
    # parallel.meanwhile: the function runs once, in this process, after the workers were given their first ranks
    # (they have started: their pids are known when it runs), and is gone after the block; what it raises is dropped
    ran: list[tuple[int, int]] = []

    def note() -> None:
        ran.append((os.getpid(), len(parallel._MEANWHILE)))
        raise RuntimeError("dropped")

    dirs = _dirs(tmp_path, 6)
    with parallel.meanwhile(note), parallel.Workers() as w:
        ranks, info = parallel.read_ranks(dirs, _small, jobs=2, workers=w)
        parallel.read_ranks(dirs, _small, jobs=2, workers=w)  # a second read: not again
    assert ran == [(os.getpid(), 0)] and parallel._MEANWHILE == []
    assert [r.rank for r in ranks] == list(range(6)) and os.getpid() not in {_pid(at) for at in info["read_by"].values()}
    with parallel.meanwhile(note):  # no pool (one job): not run, and gone after the block
        parallel.read_ranks(dirs, _small, jobs=1)
    assert len(ran) == 1 and parallel._MEANWHILE == []


def _marked(d: RankDir) -> RankData:
    """A rank whose read leaves a mark beside its folder (that it was read, whoever waits)."""
    (d.path.parent / f"read{d.rank}").touch()
    return _small(d)


def test_a_few_tasks_are_handed_out_whole_while_this_process_works_meanwhile(tmp_path: Path) -> None:
    # a read of at most WHOLE_READ_TASKS tasks per worker with meanwhile work pending (a deep pass while the first
    # pass is joined): every task is given to the workers before that work begins, so they read on meanwhile. The
    # meanwhile function waits for every rank's mark: with only IN_FLIGHT tasks a worker given, the others would be
    # handed out after it returns and the wait would end with none of their marks
    n = parallel.WHOLE_READ_TASKS * 2
    assert n > parallel.IN_FLIGHT * 2
    dirs = _dirs(tmp_path, n)
    seen: list[int] = []

    def wait_for_marks() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(tmp_path.glob("read*"))) < n:
            time.sleep(0.01)
        seen.append(len(list(tmp_path.glob("read*"))))

    with parallel.meanwhile(wait_for_marks), parallel.Workers() as w:
        ranks, _ = parallel.read_ranks(dirs, _marked, jobs=2, workers=w)
    assert seen == [n] and [r.rank for r in ranks] == list(range(n))
    # without meanwhile work, at most IN_FLIGHT tasks a worker (a worker that grew is then not given more: above)


def _waits_for_rank0(d: RankDir) -> RankData:
    """Rank 5's read waits (up to a minute) for the mark the caller leaves when rank 0 came back; it notes whether it
    saw it."""
    if d.rank == 5:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (d.path.parent / "arrived0").exists():
            time.sleep(0.01)
        (d.path.parent / f"saw{int((d.path.parent / 'arrived0').exists())}").touch()
    return _small(d)


def test_each_rank_read_is_handed_to_the_caller_as_it_comes_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # read_ranks(arrived=): called here with each rank as its task comes back, while the others are still read (the
    # loader shares a deep rank's tables then: loader._read_tiered). Rank 5's read waits for the mark left when rank 0
    # arrived: it sees it only if rank 0 was handed over before the read ended
    monkeypatch.setattr(parallel, "TASK_RANKS_MIN", 1)  # a task a rank
    dirs = _dirs(tmp_path, 6)
    got: list[tuple[int, int]] = []

    def arrived(rd: RankData) -> None:
        got.append((rd.rank, os.getpid()))
        if rd.rank == 0:
            (tmp_path / "arrived0").touch()

    with parallel.Workers() as w:
        ranks, _ = parallel.read_ranks(dirs, _waits_for_rank0, jobs=2, workers=w, arrived=arrived)
    assert sorted(got) == [(r, os.getpid()) for r in range(6)]
    assert [r.rank for r in ranks] == list(range(6)) and (tmp_path / "saw1").exists()
