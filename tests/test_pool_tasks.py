"""A pool task reads several ranks and sends them back packed (ingest/parallel.py: ``Packed``, ``pack``, ``unpack``).

- each table whose frames are alike travels as one frame, the ranks' frames coming back as row slices of it with
  the values, dtypes, columns, index and table order they had; a table whose frames differ travels as it was;
- the loader hands those frames to ``Capture.join_tables`` (``Workers.take_cut``), and an analysis read by tasks
  of several ranks gives the report of one read rank by rank in this process;
- a worker that dies names the rank it was reading and the others of its task.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from msdiag.analysis import Analysis, analyze
from msdiag.contract import build
from msdiag.errors import InputError
from msdiag.ingest import discover, loader, parallel
from msdiag.ingest.discover import RankDir
from msdiag.model import Capture, RankData, Rows, entry
from msdiag.options import Options

pytestmark = pytest.mark.skipif(parallel._pool_context() is None, reason="pool tasks are measured on fork platforms")


def _ranks(path: Path) -> list[RankData]:
    return [loader.load_rank(d) for d in discover.discover(path).ranks]


def _same_rank(got: RankData, want: RankData) -> None:
    assert (got.rank, got.family, got.path, got.info, got.meta, got.sources, got.notes) == (
        want.rank, want.family, want.path, want.info, want.meta, want.sources, want.notes)  # fmt: skip
    assert list(got.tables) == list(want.tables)  # the same tables in the same order
    for name, df in want.tables.items():
        pd.testing.assert_frame_equal(got.tables[name], df, check_exact=True, check_index_type=True, check_column_type=True)
        assert isinstance(got.tables[name].index, pd.RangeIndex) and got.tables[name].index.start == 0


@pytest.mark.parametrize("capture", ["ascend/torchnpu-2rank-level1", "mindspore-cpu/msrun_dp2_pynative"])
def test_packed_ranks_come_back_as_they_were(corpus: Path, capture: str) -> None:
    want = _ranks(corpus / capture)
    got, cut = parallel.unpack(parallel.pack(_ranks(corpus / capture)))
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        _same_rank(g, w)
    assert cut  # the two ranks' tables are alike: they travelled as one frame each
    for name, whole, parts in cut:
        # the concatenation of the ranks' frames in order, and each rank's frame a view of it
        holders = [r for r in want if name in r.tables]
        pd.testing.assert_frame_equal(whole, pd.concat([r.tables[name] for r in holders], ignore_index=True), check_exact=True)
        # each rank holds its part as model.Rows of the whole, cut into a frame (a view of it) when read
        assert [id(p) for p in parts] == [id(entry(r.tables, name)) for r in got if name in r.tables]
        assert all(isinstance(p, Rows) and p.whole is whole for p in parts)
        numeric = [c for c in whole.columns if whole[c].dtype == np.float64]
        if numeric and len(parts[-1]):
            assert np.shares_memory(parts[-1].frame()[numeric[0]].to_numpy(), whole[numeric[0]].to_numpy())


def test_a_table_whose_frames_differ_travels_as_it_was(corpus: Path) -> None:
    ranks = _ranks(corpus / "ascend/torchnpu-2rank-level1")
    name = next(n for n in ranks[0].tables if len(ranks[0].tables[n].columns) > 1 and n in ranks[1].tables)
    ranks[1].tables[name] = ranks[1].tables[name].astype({ranks[1].tables[name].columns[-1]: object})  # another dtype
    want = [RankData(r.rank, r.family, r.path, dict(r.tables), r.info, r.meta, r.sources, r.notes) for r in ranks]
    packed = parallel.pack(ranks)
    assert name not in packed.wholes and name in packed.ranks[1].tables
    got, cut = parallel.unpack(packed)
    assert name not in {n for n, _, _ in cut}
    for g, w in zip(got, want):
        _same_rank(g, w)
    assert got[1].tables[name] is want[1].tables[name]  # sent as it was, not cut from anything


def test_task_size() -> None:
    # at least TASKS_PER_WORKER_MIN (4) tasks per worker where the ranks allow, at most TASK_RANKS (64) ranks a task:
    # n // (2 workers x 4), at most 64; at least TASK_RANKS_MIN (2) where each worker has 2 ranks to read (n >= 4),
    # else 1
    assert [parallel.task_size(n, 2) for n in (1, 3, 4, 7, 8, 16, 31, 32, 64, 256, 512, 1024)] == [
        1, 1, 2, 2, 2, 2, 3, 4, 8, 32, 64, 64]
    assert parallel.task_size(64, 1) == 16 and parallel.task_size(1, 1) == 1 and parallel.task_size(3, 1) == 2


def test_an_analysis_read_by_tasks_of_several_ranks_is_the_one_read_rank_by_rank(
    job8: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def text(a: Analysis) -> str:  # the report's JSON text but the --jobs it echoes
        return json.dumps({**build(a), "options": {**build(a)["options"], "jobs": None}}, ensure_ascii=False)

    want = text(analyze(job8, Options(jobs=1, deep="all")))
    monkeypatch.setattr(parallel, "TASKS_PER_WORKER_MIN", 1)  # 8 ranks on 2 workers: tasks of 4 ranks
    seen: list[int] = []
    real = parallel.unpack

    def counting(p: parallel.Packed) -> tuple[list[RankData], list[tuple[str, object, list[object]]]]:
        seen.append(len(p.ranks))
        return real(p)

    monkeypatch.setattr(parallel, "unpack", counting)
    joined: list[int] = []
    real_join = Capture.join_tables

    def join(self: Capture, cut: list[tuple[str, object, list[object]]] | None = None) -> None:
        joined.append(len(cut or ()))
        real_join(self, cut)

    monkeypatch.setattr(Capture, "join_tables", join)
    a = analyze(job8, Options(jobs=2, deep="all"))
    assert seen == [4, 4] and a.capture.ingest["executor"] == "process-pool"
    assert joined and joined[0] > 0  # the tasks' frames were handed to the join
    assert text(a) == want


def _dies_on_rank_2(d: RankDir) -> RankData:
    if d.rank == 2:
        os._exit(1)
    return RankData(rank=d.rank, family=d.family, path=str(d.path))


def test_a_worker_that_dies_names_its_task_s_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "TASKS_PER_WORKER_MIN", 1)  # 8 ranks on 2 workers: tasks of 4 ranks
    dirs = []
    for r in range(8):
        (tmp_path / f"rank{r}").mkdir()
        dirs.append(RankDir(rank=r, path=tmp_path / f"rank{r}", family="ascend_pt", rank_from="folder name", captured_ns=None))
    with pytest.raises(InputError) as e, parallel.Workers() as w:
        parallel.read_ranks(dirs, _dies_on_rank_2, jobs=2, workers=w)
    # the pool cannot tell which worker died, nor at which rank: every rank in flight is named, the earliest first (the
    # other task's, ranks 4-7, in flight too unless it was done before rank 2's worker died)
    msg = str(e.value)
    assert msg.startswith(str(tmp_path / "rank0") + ":") and "died (out of memory?)" in msg
    assert re.search(r"\(or ranks 1-(3|7), read at the same time\)", msg), msg


def test_task_results_travel_through_the_spool_folder_and_leave_nothing(
    job8: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a pool task pickles its Packed into a file of the pool's private spool folder (on /dev/shm where there is
    # one) and the parent reads it back and removes it: the ranks come back as read in this process
    root = tmp_path / "shm"
    root.mkdir()
    monkeypatch.setattr(parallel, "SPOOL_ROOTS", (str(tmp_path / "absent"), str(root)))  # the first usable root
    monkeypatch.setattr(parallel, "TASKS_PER_WORKER_MIN", 1)  # 8 ranks on 2 workers: tasks of 4 ranks
    dirs = discover.discover(job8).ranks
    want = [loader.load_rank(d) for d in dirs]
    read: list[str] = []
    real = parallel.unspooled

    def reading(got: parallel.Packed | parallel.Spooled) -> parallel.Packed:
        assert isinstance(got, parallel.Spooled)  # not the Packed itself through the pipe
        folder = Path(got.path).parent
        assert folder.parent == root and (folder.stat().st_mode & 0o777) == 0o700 and Path(got.path).is_file()
        read.append(got.path)
        return real(got)

    monkeypatch.setattr(parallel, "unspooled", reading)
    with parallel.Workers() as w:
        got, info = parallel.read_ranks(dirs, loader.load_rank, jobs=2, workers=w)
        assert len(read) == 2 and not any(Path(p).exists() for p in read)  # each file removed once read
    assert info["executor"] == "process-pool"
    for g, x in zip(got, want):
        _same_rank(g, x)
    assert list(root.iterdir()) == []  # the spool folder went with the pool


def test_a_spool_file_maps_back_to_the_ranks_its_arrays_views_of_the_file(job8: Path, tmp_path: Path) -> None:
    # each concatenated table of a task in a spool file of its own, its pickle with the numpy arrays' bytes out of band,
    # each at an offset aligned to 64 bytes; read back, the ranks are the ones written, the numpy arrays of their
    # frames views of the files' mappings (not copies; the files themselves removed)
    import mmap

    dirs = discover.discover(job8).ranks
    with loader.prefetch(dirs) as cuts:
        ranks = [loader.load_rank_shallow(d) for d in dirs]
        packed = parallel.pack(ranks, parallel.concat_alike(ranks, cuts))
    got = parallel._spooled(packed, str(tmp_path))
    assert isinstance(got, parallel.Spooled) and sorted(got.tables) == sorted(packed.wholes)  # files per table
    head, arrays = (Path(p) for p in got.tables["kernels"])
    data = head.read_bytes()
    count = int.from_bytes(data[-8:], "little")
    table = data[-8 - 16 * count : -8]
    places = [(int.from_bytes(table[16 * i : 16 * i + 8], "little"), int.from_bytes(table[16 * i + 8 : 16 * i + 16], "little"))
              for i in range(count)]  # fmt: skip
    size = arrays.stat().st_size
    assert count > 5 and all(o % 64 == 0 for o, _ in places) and places[-1][0] + places[-1][1] == size
    assert sum(n for _, n in places) > size // 2  # the arrays' bytes, not the pickle's
    back, _ = parallel.unpack(parallel.unspooled(got))
    assert not any(Path(p).exists() for p in (got.path, *(q for pair in got.tables.values() for q in pair)))
    assert not list(tmp_path.iterdir())
    for g, want in zip(back, [loader.load_rank_shallow(d) for d in dirs]):
        _same_rank(g, want)
    whole = parallel.unpack(parallel.unspooled(parallel._spooled(packed, str(tmp_path))))[1]
    kernels = next(w for name, w, _ in whole if name == "kernels")
    for block, written in zip(kernels._mgr.blocks, packed.wholes["kernels"]._mgr.blocks):
        if block.values.dtype != np.float64:
            continue
        base = block.values
        while getattr(base, "base", None) is not None and not isinstance(base, memoryview):
            base = base.base
        assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)  # a view of the mapping, not a copy
        # as writable as the array written (an array read from Arrow is read-only: pickle keeps that, out of band)
        assert block.values.flags.writeable == written.values.flags.writeable
        np.testing.assert_array_equal(block.values, written.values)


def test_no_task_file_stays_mapped_after_the_load(job8: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the pool's task files are mapped while their frames live; the load's join copies the numpy arrays (the texts were
    # copied from the pickle: a joined Arrow column keeps its chunks), so no mapping outlives the load
    import gc
    import mmap

    monkeypatch.setattr(parallel, "TASKS_PER_WORKER_MIN", 1)  # 8 ranks on 2 workers: tasks of 4 ranks
    spooled: list[str] = []
    real = parallel.unspooled

    def reading(got: parallel.Packed | parallel.Spooled) -> parallel.Packed:
        if isinstance(got, parallel.Spooled):
            spooled.append(got.path)
        return real(got)

    monkeypatch.setattr(parallel, "unspooled", reading)
    cap = loader.load(job8, jobs=2)
    assert len(spooled) == 2 and len(cap.ranks) == 8
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, mmap.mmap)]
    assert len(cap.table("kernels")) > 0


def test_a_spool_file_without_the_magic_is_a_plain_pickle(job8: Path, tmp_path: Path) -> None:
    import pickle

    dirs = discover.discover(job8).ranks[:2]
    ranks = [loader.load_rank_shallow(d) for d in dirs]
    path = tmp_path / "plain.task"
    path.write_bytes(pickle.dumps(parallel.pack(ranks), protocol=pickle.HIGHEST_PROTOCOL))
    back, _ = parallel.unpack(parallel.unspooled(parallel.Spooled(str(path))))
    assert not path.exists()
    for g, want in zip(back, [loader.load_rank_shallow(d) for d in dirs]):
        _same_rank(g, want)


def _read_through_the_pipe(job8: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """job8 read in two pool tasks: both results came as the Packed itself (through the pipe), the ranks as read alone."""
    monkeypatch.setattr(parallel, "TASKS_PER_WORKER_MIN", 1)
    kinds: list[type] = []
    real = parallel.unspooled

    def reading(got: parallel.Packed | parallel.Spooled) -> parallel.Packed:
        kinds.append(type(got))
        return real(got)

    monkeypatch.setattr(parallel, "unspooled", reading)
    dirs = discover.discover(job8).ranks
    got, _ = parallel.read_ranks(dirs, loader.load_rank, jobs=2)
    assert kinds == [parallel.Packed, parallel.Packed]
    for g, x in zip(got, [loader.load_rank(d) for d in dirs]):
        _same_rank(g, x)


def test_without_a_spool_folder_task_results_travel_through_the_pipe(job8: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "SPOOL_ROOTS", ("/nonexistent-msdiag-spool",))
    _read_through_the_pipe(job8, monkeypatch)


def test_task_cuts_end_in_smaller_tasks() -> None:
    # every rank once, in order; a read of at least TAIL_MIN_TASKS (4) full tasks per worker ends in tasks of half and a
    # quarter of the size, one of each per worker: 512 ranks on 2 workers (tasks of 64) = 416 in tasks of 64 (the last
    # one 32), then 32, 32, 16, 16 (416 + 96 = 512); 64 ranks (tasks of 8) = 52 in tasks of 8 (the last 4), then 4, 4, 2, 2
    for n, workers in ((1, 2), (8, 2), (31, 2), (64, 2), (100, 3), (512, 2), (1024, 2), (2048, 8)):
        cuts = parallel.task_cuts(list(range(n)), workers)
        assert [i for c in cuts for i in c] == list(range(n)) and all(cuts)
    assert [len(c) for c in parallel.task_cuts(list(range(512)), 2)] == [64] * 6 + [32, 32, 32, 16, 16]
    assert [len(c) for c in parallel.task_cuts(list(range(64)), 2)] == [8] * 6 + [4, 4, 4, 2, 2]
    # tasks of fewer than 4 ranks are not cut finer (8 ranks on 2 workers: tasks of 2; a deep pass' 7: 2, 2, 2, 1)
    assert [len(c) for c in parallel.task_cuts(list(range(8)), 2)] == [2] * 4
    assert [len(c) for c in parallel.task_cuts(list(range(7)), 2)] == [2, 2, 2, 1]


def test_a_read_of_few_tasks_per_worker_is_not_cut_finer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "TASKS_PER_WORKER_MIN", 1)  # 8 ranks on 2 workers: tasks of 4, one per worker
    assert [len(c) for c in parallel.task_cuts(list(range(8)), 2)] == [4, 4]


def test_a_kept_pool_gives_back_its_freed_pages_as_a_second_read_begins(
    job8: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a tiered load reads twice on one pool; its workers' first tasks of the second read release the pages the first
    # read's tasks freed (forking.release_freed: glibc malloc_trim), while the parent joins the first read's ranks
    marks = tmp_path / "marks"
    marks.mkdir()

    def mark() -> None:  # runs in the forked workers: a file per call
        (marks / f"{os.getpid()}-{len(list(marks.iterdir()))}-{os.urandom(4).hex()}").touch()

    monkeypatch.setattr(parallel, "release_freed", mark)
    dirs = discover.discover(job8).ranks
    with parallel.Workers() as w:
        parallel.read_ranks(dirs[:6], loader.load_rank, jobs=2, workers=w)
        assert list(marks.iterdir()) == []  # a first read: nothing to give back
        parallel.read_ranks(dirs[6:], loader.load_rank, jobs=2, workers=w)
    assert len(list(marks.iterdir())) == 2  # the second read's two tasks (a rank each): both among its first 2 x 2 tasks


def test_a_spool_write_that_fails_sends_the_result_through_the_pipe(job8: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # a full /dev/shm (a container's is 64 MB by default): the worker's write fails, its task's result travels
    # through the pipe as without a spool folder, and the ranks are read all the same
    monkeypatch.setattr(parallel, "SPOOL_ROOTS", (str(tmp_path),))

    def full(*args: object, **kwargs: object) -> tuple[int, str]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(parallel.tempfile, "mkstemp", full)  # (the forked workers inherit it)
    _read_through_the_pipe(job8, monkeypatch)
    assert list(tmp_path.iterdir()) == []


def test_spool_folders_a_killed_run_left_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    dead = int(gone.stdout)  # a process that has ended
    (tmp_path / f"msdiag-tasks-{dead}-abc").mkdir()
    (tmp_path / f"msdiag-tasks-{dead}-abc" / "1.task").write_bytes(b"x")
    (tmp_path / f"msdiag-tasks-{os.getpid()}-def").mkdir()  # a run still going (this process)
    (tmp_path / "msdiag-tasks-notapid").mkdir()
    (tmp_path / "other").mkdir()
    monkeypatch.setattr(parallel, "SPOOL_ROOTS", (str(tmp_path),))
    made = parallel._spool_folder()
    assert made is not None and Path(made).name.startswith(f"msdiag-tasks-{os.getpid()}-")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [Path(made).name, f"msdiag-tasks-{os.getpid()}-def", "msdiag-tasks-notapid", "other"])
