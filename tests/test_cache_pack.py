"""The rank cache keeps the ranks of a pool task in one file (ingest/cache.py, CACHE_FORMAT 5): ``put_many`` writes
the file once and links it under each rank's entry name; a warm read reads each file once and gives every rank back
as it was read; a stale rank is rewritten alone; without hard links each rank gets a copy; a rank that cannot be
stored leaves the others stored. On bench/cluster.py's 8-rank job built from the corpus (conftest ``job8``)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("pyarrow")

from msdiag.ingest import cache as C  # noqa: E402
from msdiag.ingest import parallel  # noqa: E402
from msdiag.ingest.cache import CacheStats, RankCache  # noqa: E402
from msdiag.ingest.discover import RankDir, discover  # noqa: E402
from msdiag.ingest.loader import load, load_rank  # noqa: E402
from msdiag.metrics.reduce import reduce_id, reduce_rank  # noqa: E402
from msdiag.model import RankData  # noqa: E402


def _read(job: Path) -> tuple[list[RankDir], list[RankData]]:
    dirs = discover(job).ranks
    return dirs, [reduce_rank(load_rank(d)) for d in dirs]


def _keys(cache: RankCache, dirs: list[RankDir]) -> list[dict[str, Any]]:
    return [cache.key(d.rank, d.family, d.path, d.rank_from, d.captured_ns) for d in dirs]


def _same_rank(got: RankData | None, want: RankData) -> None:
    assert got is not None
    assert (got.rank, got.family, got.path, got.info, got.meta, got.sources, got.notes) == (
        want.rank, want.family, want.path, want.info, want.meta, want.sources, want.notes)  # fmt: skip
    assert list(got.tables) == list(want.tables)
    for name, df in want.tables.items():
        pd.testing.assert_frame_equal(got.tables[name], df, check_exact=True, check_index_type=True, check_column_type=True)


def _files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file())


def test_a_task_s_ranks_share_one_file_and_each_comes_back_as_read(job8: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    dirs, ranks = _read(job8)
    cache = RankCache.open(tmp_path / "c", "test")
    keys = _keys(cache, dirs)
    assert cache.put_many(keys, ranks) == [None] * len(ranks)
    entries = [cache.entry(k) for k in keys]
    assert len({os.stat(e).st_ino for e in entries}) == 1 and os.stat(entries[0]).st_nlink == len(ranks)
    assert _files(tmp_path / "c") == sorted(entries)  # no temporary file left behind
    # the header by hand: every rank's key in order; the kernels, alike in every rank, one stream of all their rows
    header, tables = C.read_entry_file(entries[0].read_bytes())
    assert [r["key"] for r in header["ranks"]] == keys
    kernels = [m for m in header["streams"] if m["table"] == "kernels"]
    assert kernels == [{"table": "kernels", "ranks": list(range(len(ranks))), "rows": [len(r.tables["kernels"]) for r in ranks]}]
    assert len(tables) == len(header["streams"])
    stats = CacheStats()
    read: list[Path] = []
    real = C._pack_file

    def counted(p: Path) -> Any:
        read.append(p)
        return real(p)

    monkeypatch.setattr(C, "_pack_file", counted)
    got = cache.get_many(keys, stats, [d.path for d in dirs])
    assert stats.ignored == [] and len(read) == 1  # the file read once for its eight names
    for g, want in zip(got, ranks):
        _same_rank(g, want)
    _same_rank(cache.get(keys[3], path=dirs[3].path), ranks[3])  # one rank asked alone


def test_a_stale_rank_is_rewritten_alone(job8: Path, tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(job8, job)
    dirs, ranks = _read(job)
    cache = RankCache.open(tmp_path / "c", "test")
    assert cache.put_many(_keys(cache, dirs), ranks) == [None] * len(ranks)
    info = next(dirs[2].path.glob("profiler_info_*.json"))
    st = info.stat()
    info.write_text(info.read_text() + "\n")  # one byte more, mtime put back: the size tells
    os.utime(info, ns=(st.st_atime_ns, st.st_mtime_ns))
    keys = _keys(cache, dirs)
    stats = CacheStats()
    got = cache.get_many(keys, stats, [d.path for d in dirs])
    assert [g is None for g in got] == [k == 2 for k in range(len(dirs))] and stats.ignored == []  # a miss, no doubt
    fresh = reduce_rank(load_rank(dirs[2]))
    assert cache.put(keys[2], fresh) is None
    old = os.stat(cache.entry(keys[0]))
    assert os.stat(cache.entry(keys[2])).st_ino != old.st_ino and old.st_nlink == len(dirs) - 1
    got = cache.get_many(keys, stats, [d.path for d in dirs])
    for k, (g, want) in enumerate(zip(got, ranks)):
        _same_rank(g, fresh if k == 2 else want)


def test_without_hard_links_each_rank_gets_a_copy(job8: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dirs, ranks = _read(job8)
    cache = RankCache.open(tmp_path / "c", "test")
    keys = _keys(cache, dirs)

    def no_link(src: Any, dst: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    assert cache.put_many(keys, ranks) == [None] * len(ranks)
    stat = [os.stat(cache.entry(k)) for k in keys]
    assert len({s.st_ino for s in stat}) == len(ranks) and {s.st_nlink for s in stat} == {1}
    assert _files(tmp_path / "c") == sorted(cache.entry(k) for k in keys)
    for g, want in zip(cache.get_many(keys, None, [d.path for d in dirs]), ranks):
        _same_rank(g, want)


def test_a_rank_that_cannot_be_stored_leaves_the_others_stored(job8: Path, tmp_path: Path) -> None:
    dirs, ranks = _read(job8)
    ranks[1].meta["where"] = ("a", "tuple")  # JSON gives a list back: not the same metadata
    cache = RankCache.open(tmp_path / "c", "test")
    keys = _keys(cache, dirs)
    why = cache.put_many(keys, ranks)
    assert why[1] == f"rank {ranks[1].rank}: its metadata does not survive JSON unchanged"
    assert why[:1] + why[2:] == [None] * (len(ranks) - 1)
    assert not cache.entry(keys[1]).exists()
    header, _ = C.read_entry_file(cache.entry(keys[0]).read_bytes())
    assert header["ranks"][1] == {"key": None, "head": None}
    stats = CacheStats()
    got = cache.get_many(keys, stats, [d.path for d in dirs])
    assert got[1] is None and stats.ignored == []
    for k in (0, 2, 7):
        _same_rank(got[k], ranks[k])


@pytest.mark.skipif(parallel._pool_context() is None, reason="pool tasks are measured on fork platforms")
def test_the_pool_writes_a_file_per_task(job8: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "TASKS_PER_WORKER_MIN", 1)  # 8 ranks on 2 workers: 2 tasks of 4
    assert parallel.task_size(8, 2) == 4
    cold = load(job8, jobs=2, cache=tmp_path / "c", reduce=reduce_rank, reduce_id=reduce_id())
    assert cold.ingest["executor"] == "process-pool" and cold.ingest["cache"]["written"] == 8
    entries = [p for p in _files(tmp_path / "c") if "msdiag-ranks-" in str(p)]
    by_file: dict[int, int] = {}
    for p in entries:
        by_file[os.stat(p).st_ino] = by_file.get(os.stat(p).st_ino, 0) + 1
    assert len(entries) == 8 and sorted(by_file.values()) == [4, 4]
    warm = load(job8, jobs=2, cache=tmp_path / "c", reduce=reduce_rank, reduce_id=reduce_id())
    assert warm.ingest["cache"]["hits"] == 8
    for g, want in zip(warm.ranks, cold.ranks):
        _same_rank(g, want)



@pytest.mark.parametrize("jobs", [1, 2])
def test_an_empty_cache_s_keys_are_made_where_each_rank_is_read(job8: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 jobs: int) -> None:
    """An empty cache folder holds nothing to look up: the keys are made by whoever reads each rank (a pool worker, or
    this process reading alone), not all first here; the entries they wrote are found by the next run, whose keys are
    made here to look them up (8 ranks, all hits)."""
    made_here: list[int] = []
    key = RankCache.key
    me = os.getpid()

    def counted(self: RankCache, rank: int, *a: Any) -> dict[str, Any]:
        if os.getpid() == me:  # (a forked worker's calls land in its own copy of the list: not counted here)
            made_here.append(rank)
        return key(self, rank, *a)

    monkeypatch.setattr(RankCache, "key", counted)
    cache = tmp_path / "c"
    assert RankCache.open(cache).empty()
    cold = load(job8, jobs=jobs, cache=cache, reduce=reduce_rank, reduce_id=reduce_id())
    assert cold.ingest["cache"]["misses"] == cold.ingest["cache"]["written"] == 8
    assert sorted(made_here) == ([] if jobs == 2 else list(range(8)))  # in-process: each made as its rank is read
    assert not RankCache.open(cache).empty()
    made_here.clear()
    warm = load(job8, jobs=jobs, cache=cache, reduce=reduce_rank, reduce_id=reduce_id())
    assert warm.ingest["cache"]["hits"] == 8 and sorted(made_here) == list(range(8))
    for g, want in zip(warm.ranks, cold.ranks):
        _same_rank(g, want)

def _conforms_by_definition(value: Any, hint: Any) -> bool:
    """What a stored value must be to fit a type hint of the model, written out as cache._conforms defines it."""
    import dataclasses
    import types
    import typing

    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)  # type: ignore[arg-type]
        return isinstance(value, dict) and set(value) == set(hints) and all(_conforms_by_definition(value[k], h) for k, h in hints.items())
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms_by_definition(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(_conforms_by_definition(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_conforms_by_definition(k, args[0]) and _conforms_by_definition(v, args[1])
                                               for k, v in value.items())
    if hint is type(None):
        return value is None
    if hint is float:
        return type(value) in (float, int)
    return hint in (str, int, bool) and type(value) is hint


def test_a_head_is_checked_as_the_model_s_types_say(job8: Path, tmp_path: Path) -> None:
    """cache._conforms (a checker made once per type hint) says of every stored head, and of heads changed field by
    field, what the definition says."""
    import copy

    from msdiag.model import RankInfo, Source

    dirs, ranks = _read(job8)
    cache = RankCache.open(tmp_path / "c", "test")
    keys = _keys(cache, dirs)
    cache.put_many(keys, ranks)
    header, _ = C.read_entry_file(cache.entry(keys[0]).read_bytes())
    heads = [r["head"] for r in header["ranks"]]
    cases: list[tuple[Any, Any]] = []
    for head in heads[:2]:
        cases += [(head["info"], RankInfo), *((s, Source) for s in head["sources"]), (head["notes"], list[str]),
                  (head["tables"]["kernels"], list[list[str]])]  # fmt: skip
    info = heads[0]["info"]
    assert info["groups"], "the bench job's ranks have parallel groups"
    for field, bad in (("rank_size", True), ("rank_size", 8.0), ("device_name", 3), ("groups", [{"x": 1}]), ("groups", None)):
        changed = copy.deepcopy(info)
        changed[field] = bad
        cases.append((changed, RankInfo))
    group = copy.deepcopy(info)
    group["groups"][0]["global_ranks"] = [0, "1"]
    cases += [(group, RankInfo), ({**info, "extra": 1}, RankInfo), ({k: v for k, v in info.items() if k != "host"}, RankInfo)]
    cases += [({"a": 1}, dict[str, int]), ({1: 1}, dict[str, int]), ([1, True], list[int]), ([1.5, 2], list[float]),
              (None, int | None), (3, float), (True, float), ("x", Any)]  # fmt: skip
    said = [C._conforms(v, h) for v, h in cases]
    assert said == [_conforms_by_definition(v, h) for v, h in cases]
    stored = 2 * (len(heads[0]["sources"]) + 3)
    assert all(said[:stored]) and said[stored:].count(False) >= 10


def _same_through_json(a: Any, b: Any) -> bool:
    """The comparison a head stored must pass, by its definition: the same values of the same JSON types after a round
    trip (NaN equals NaN; a tuple is not a list; 1 is not True)."""
    import math

    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_through_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_through_json(x, y) for x, y in zip(a, b))
    return bool(a == b)


def test_a_head_is_stored_only_when_it_comes_back_from_json_unchanged(job8: Path) -> None:
    """cache._rank_json (one walk of the head, its tables' dtypes named once per file) says what the JSON round trip
    it replaced says, and writes the same text."""
    import enum
    import json

    import numpy as np

    from msdiag.model import concat_alike

    class Level(enum.IntEnum):
        HIGH = 2

    _, ranks = _read(job8)
    joined = concat_alike(ranks)
    named = {n: C._dtypes(w) for n, w in joined.items()}
    metas: list[Any] = [{}, {"a": [1, 2.5, None, True, "x"]}, {"nan": float("nan"), "inf": float("inf")}, {"t": (1, 2)},
                        {"f": np.float64(0.5)}, {"k": Level.HIGH}, {"d": {1: "int key"}}, {"deep": [{"x": [(1,)]}]}]  # fmt: skip
    for k, meta in enumerate(metas):
        rd = ranks[k % len(ranks)]
        rd.meta = meta
        text = C._rank_json(rd, named)
        assert text == C._rank_json(rd)  # the dtypes named once per file: the same head
        head = json.loads(json.dumps({"meta": meta}, ensure_ascii=False))
        assert (text is not None) == _same_through_json(head, {"meta": meta}), meta
    # the eight ranks hold the eight metas in turn: stored where JSON gives them back alike (none, lists and texts, NaN
    # and infinities), not with a tuple, numpy's float, an enum, an int key, a tuple deep inside
    assert [C._rank_json(r, named) is not None for r in ranks] == [True, True, True, False, False, False, False, False]
