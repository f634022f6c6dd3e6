"""Cluster scale: the rank cache, the reduction of ranks before they are gathered, the process pool,
Dask, and the cluster views (rank table, link heatmap) on a synthetic job with one slow rank planted.

The synthetic job is built by bench/cluster.py from the corpus (torchnpu-2rank-level1, rank 1) into
tmp_path: 8 ranks x 3 steps; rank 5's compute kernels take 3x longer, so the others wait for it at
the first allreduce of every step (3 late arrivals: 3 votes), and link 2-3's transit time is 2.5x
(HCCS ~17 GB/s -> ~7 GB/s, under 0.8 x 18 GB/s: the slow link).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest
from click.testing import CliRunner
from hostile import mutators as m

from msdiag.analysis import Analysis, Options, analyze
from msdiag.cli import main
from msdiag.contract import build
from msdiag.errors import InputError
from msdiag.ingest import parallel
from msdiag.ingest.cache import CACHE_FORMAT
from msdiag.ingest.cachedir import default_dir
from msdiag.ingest.loader import load
from msdiag.metrics import reduce as reduce_mod
from msdiag.metrics.reduce import reduce_id, reduce_rank
from msdiag.model import Capture

LEVEL1 = ("ascend", "torchnpu-2rank-level1")
SLOW_RANK, SLOW_LINK = 5, "2-3 HCCS"


def _report(path: Path, **opts: Any) -> dict[str, Any]:
    return build(analyze(path, Options(jobs=1, **opts)))


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, copy_function=shutil.copyfile)  # writable copies of the read-only corpus
    for d, _, _ in os.walk(dst):
        os.chmod(d, 0o755)
    return dst


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob(f"msdiag-ranks-v{CACHE_FORMAT}/*/*") if not p.name.startswith("."))


# ---- the synthetic cluster ------------------------------------------------------------------------


# job8 (tests/conftest.py): 8 ranks x 3 steps built from the corpus by bench/cluster.py, rank 5 slow, link 2-3 slow


@pytest.fixture(scope="module")
def job8_report(job8: Path, analysed: Callable[[str], Analysis]) -> dict[str, Any]:
    """The report object of job8's shared analysis (Options(jobs=1)): the same as ``_report(job8)``."""
    return build(analysed(str(job8)))


def test_slow_rank_and_link_found(job8_report: dict[str, Any]) -> None:
    m = job8_report["metrics"]
    assert m["slow_rank"] == SLOW_RANK  # voted late arriver at the first allreduce of each of 3 steps
    assert m["slow_rank_votes"] == 3
    assert m["slowest_rank_by_compute"] == SLOW_RANK
    assert m["slow_link"] == SLOW_LINK
    # tp2 x pp2 x dp2: rank 5 sits in stage 1, whose slowest rank computes ~3x stage 0's
    assert m["stage_imbalance"] is not None and m["stage_imbalance"] > 0.5
    assert all(c["ok"] for c in job8_report["checks"])  # step_trace_time.csv rebuilt consistently


def test_rank_table(job8_report: dict[str, Any]) -> None:
    rows = job8_report["rank_table"]
    assert [r["rank"] for r in rows] == list(range(8))
    assert set(rows[0]) == {
        "rank", "node", "stage", "steps", "step_time_us", "computing_us", "communication_exposed_us", "free_us",
        "wait_ratio", "sync_ratio", "slow_rank_votes",
    }  # fmt: skip
    slow = rows[SLOW_RANK]
    others = [r for r in rows if r["rank"] != SLOW_RANK]
    assert slow["slow_rank_votes"] == 3 and all(r["slow_rank_votes"] == 0 for r in others)
    assert all(r["steps"] == 3 and r["node"] == 0 for r in rows)
    assert [r["stage"] for r in rows] == [0, 0, 0, 0, 1, 1, 1, 1]
    # the slow rank computes ~3x as long; the others wait for it (their sync ratio is high, its own is not)
    assert slow["computing_us"] > 2.5 * max(r["computing_us"] for r in others)
    assert slow["sync_ratio"] < 0.1 < min(r["sync_ratio"] for r in others)
    # everyone's step lasts as long: the collectives end together
    assert max(r["step_time_us"] for r in rows) == pytest.approx(min(r["step_time_us"] for r in rows), rel=1e-3)


def test_link_heatmap(job8_report: dict[str, Any]) -> None:
    hm = job8_report["link_heatmap"]
    assert hm["columns"] == ["src", "dst", "transport", "size_mb", "bandwidth_gbps"]
    (grp,) = hm["groups"]
    assert grp["group_name"] == "default_group" and grp["global_ranks"] == list(range(8))
    bw = {(s, d): b for s, d, t, _, b in grp["rows"]}
    assert len(bw) == 8 * 7  # every rank's links to its 7 peers (on-chip LOCAL left out)
    slow = bw.pop((2, 3))
    assert slow < 0.8 * 18 and min(bw.values()) > 0.8 * 18


@pytest.mark.slow
def test_pool_equals_in_process(job8: Path, job8_report: dict[str, Any]) -> None:
    a = analyze(job8, Options(jobs=2))
    assert a.capture.ingest["executor"] == "process-pool"
    assert os.getpid() not in {int(w.rsplit(":", 1)[1]) for w in a.capture.ingest["read_by"].values()}
    rep = build(a)
    rep["options"]["jobs"] = 1
    assert rep == job8_report


# ---- the reduction -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where",
    # reduce_rank works on the canonical tables whatever reader filled them: the quick loop checks level1 (host
    # events, overlap lanes and counters, all of what it drops) and a MindSpore CPU job; the other readers'
    # captures are the same check, run with the slow tests
    [
        ("ascend", "torchnpu-2rank-level1"),
        pytest.param(("ascend", "torchnpu-2rank-level0"), marks=pytest.mark.slow),
        pytest.param(("ascend", "torchnpu-2rank-p2p-2024"), marks=pytest.mark.slow),
        pytest.param(("ascend", "torchnpu-2rank-level1-db"), marks=pytest.mark.slow),
        ("mindspore-cpu", "msrun_dp2_pynative"),
        pytest.param(("mindspore-legacy", "hccl-one-allreduce"), marks=pytest.mark.slow),
    ],
)
def test_reduction_changes_no_result(
    corpus: Path, analysed: Callable[[str], Analysis], where: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the workers drop (host events but one per name, overlap lanes, unread counters) changes nothing."""
    path = corpus.joinpath(*where)
    reduced = build(analysed(str(path)))  # the session's analysis reads reduced ranks, as every analysis does
    monkeypatch.setattr(reduce_mod, "reduce_rank", lambda rd: rd)
    assert _report(path) == reduced


def test_reduction_drops_rows(corpus: Path) -> None:
    full = load(corpus.joinpath(*LEVEL1), jobs=1)
    red = load(corpus.joinpath(*LEVEL1), jobs=1, reduce=reduce_rank)
    for f, r in zip(full.ranks, red.ranks):
        tl_f, tl_r = f.tables["timeline"], r.tables["timeline"]
        assert len(tl_r) < 0.5 * len(tl_f)
        assert set(tl_r["lane"]) == set(tl_f["lane"]) - {"overlap"}
        host_f, host_r = tl_f[tl_f["lane"] == "host"], tl_r[tl_r["lane"] == "host"]
        assert set(host_r["name"]) == set(host_f["name"])  # every distinct host name kept
        assert set(r.tables["counters"]["track"]) == {"AI Core Freq", "NPU MEM"}  # NPU MEM: the device memory fallback
        assert len(r.tables["steps"]) == 1  # the rank's step rows, computed where it was read


# ---- the cache -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cold_cache(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Analysis]:
    """A rank cache of level1 written once for the module by a cold analysis, and that analysis. A test that
    damages the cache works on its own copy (``_cache_copy``)."""
    cache = tmp_path_factory.mktemp("cold") / "cache"
    return cache, analyze(corpus.joinpath(*LEVEL1), Options(jobs=1, cache=str(cache)))


def _cache_copy(cold_cache: tuple[Path, Analysis], dst: Path) -> Path:
    """A copy of the module's cold cache (its entries keyed by the corpus files, which do not move)."""
    shutil.copytree(cold_cache[0], dst)
    return dst


def _assert_same_ranks(a: Capture, b: Capture) -> None:
    """``b`` holds ``a``'s ranks: each one's identity, info, tables (rows and dtypes), meta, sources and notes (what
    the metrics read of a rank: its info and tables), and the capture's notes."""
    assert a.notes == b.notes
    for x, y in zip(a.ranks, b.ranks, strict=True):
        assert (x.rank, x.family, x.path, x.info) == (y.rank, y.family, y.path, y.info)
        assert x.tables.keys() == y.tables.keys() and x.meta == y.meta and x.sources == y.sources and x.notes == y.notes
        for name in x.tables:
            pd.testing.assert_frame_equal(x.tables[name], y.tables[name], check_exact=True)


def test_cache_hit_is_identical(corpus: Path, analysed: Callable[[str], Analysis], cold_cache: tuple[Path, Analysis], tmp_path: Path) -> None:
    path = corpus.joinpath(*LEVEL1)
    cache = _cache_copy(cold_cache, tmp_path / "cache")
    plain = analysed(str(path))  # the session's analysis: Options(jobs=1), no cache
    cold = cold_cache[1]
    assert cold.capture.ingest["cache"]["misses"] == 2 and cold.capture.ingest["cache"]["written"] == 2
    assert len(_entries(cache)) == 2
    warm = analyze(path, Options(jobs=1, cache=str(cache)))
    assert warm.capture.ingest["cache"]["hits"] == 2 and warm.capture.ingest["executor"] == "cache"
    assert set(warm.capture.ingest["read_by"].values()) == {"cache"}
    assert build(warm) == build(cold) == build(plain)
    _assert_same_ranks(cold.capture, warm.capture)  # every table comes back with its rows and dtypes


def test_cache_invalidated_by_size_or_mtime(corpus: Path, tmp_path: Path) -> None:
    cap = _copy(corpus.joinpath(*LEVEL1), tmp_path / "cap")
    cache = tmp_path / "cache"
    first = analyze(cap, Options(jobs=1, cache=str(cache)))
    assert first.capture.ingest["cache"]["written"] == 2

    f = cap / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv"
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # touched: same bytes, newer mtime
    again = load(cap, jobs=1, cache=cache, reduce=reduce_rank, reduce_id=reduce_id()).ingest["cache"]
    assert (again["hits"], again["misses"], again["written"]) == (1, 1, 1)

    meta = cap / "rank0_ascend_pt" / "profiler_metadata.json"
    st = meta.stat()
    meta.write_text(meta.read_text() + "\n")  # one byte more, mtime put back: the size tells
    os.utime(meta, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = load(cap, jobs=1, cache=cache, reduce=reduce_rank, reduce_id=reduce_id()).ingest["cache"]
    assert (again["hits"], again["misses"]) == (1, 1)
    assert len(_entries(cache)) == 2  # one entry per rank folder: rewritten, not piled up
    assert load(cap, jobs=1, cache=cache, reduce=reduce_rank, reduce_id=reduce_id()).ingest["cache"]["hits"] == 2


@pytest.mark.parametrize("damage", ["truncated", "header", "not utf-8", "missing table", "stream after the tables",
                                    "rows miscounted", "a rank's head"])
def test_corrupt_entry_is_rebuilt(corpus: Path, cold_cache: tuple[Path, Analysis], tmp_path: Path, damage: str) -> None:
    path = corpus.joinpath(*LEVEL1)
    cache = _cache_copy(cold_cache, tmp_path / "cache")
    entry = _entries(cache)[0]
    data = entry.read_bytes()
    line = data.index(b"\n")
    if damage == "truncated":
        entry.write_bytes(data[: line + 100])  # the header whole, the first stream cut
    elif damage == "header":
        entry.write_bytes(b"{not json" + data[line:])
    elif damage == "not utf-8":
        entry.write_bytes(b"\x00\xff garbage\n" + data[line + 1 :])
    elif damage == "missing table":
        m.edit_cache_tables(entry, lambda tables: tables.pop("comm_ops"))
    elif damage == "stream after the tables":  # every stream stored twice: the file holds more than its header says
        entry.write_bytes(data + data[line + 1 :])
    elif damage == "rows miscounted":
        header = json.loads(data[:line])
        header["streams"][0]["rows"][0] += 1
        entry.write_bytes(json.dumps(header).encode() + data[line:])
    else:
        m.edit_rank_json(entry, lambda head: head.update(rank=head["rank"] + 1))
    # the ranks as an analysis reads them (analyze reads them so: the reduction, its id, the cache): the
    # damaged entry's rank parsed again, the other read back, both the cold analysis' ranks
    cap = load(path, jobs=1, cache=cache, reduce=reduce_rank, reduce_id=reduce_id())
    st = cap.ingest["cache"]
    assert st["hits"] == 1 and st["misses"] == 1 and st["written"] == 1
    assert len(st["ignored"]) == 1
    _assert_same_ranks(cold_cache[1].capture, cap)
    assert load(path, jobs=1, cache=cache, reduce=reduce_rank, reduce_id=reduce_id()).ingest["cache"]["hits"] == 2


def test_cli_cache_default_and_no_cache(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("MSDIAG_HOME", raising=False)
    assert default_dir() == tmp_path / "xdg" / "msdiag"
    # where the CLI caches does not depend on the format: a 2-rank MindSpore CPU job parses in half level1's time
    path = str(corpus / "mindspore-cpu" / "msrun_dp2_pynative")
    r = CliRunner().invoke(main, ["analyze", path, "--format", "json", "--jobs", "1", "--no-cache"])
    assert r.exit_code == 0, r.stderr
    assert not (tmp_path / "xdg").exists()  # --no-cache: nothing written
    r2 = CliRunner().invoke(main, ["analyze", path, "--format", "json", "--jobs", "1"])
    assert r2.exit_code == 0, r2.stderr
    assert len(_entries(tmp_path / "xdg" / "msdiag")) == 2  # the default: the user's cache folder
    assert json.loads(r2.stdout) == json.loads(r.stdout)
    r3 = CliRunner().invoke(main, ["analyze", path, "--cache", str(tmp_path / "c"), "--no-cache"])
    assert r3.exit_code == 2 and "exclude each other" in r3.output
    monkeypatch.setenv("MSDIAG_HOME", str(tmp_path / "home"))
    assert default_dir() == tmp_path / "home" / "cache"


def test_cache_never_inside_the_capture(corpus: Path, tmp_path: Path) -> None:
    cap = _copy(corpus.joinpath(*LEVEL1), tmp_path / "cap")
    before = sorted(str(p) for p in cap.rglob("*"))
    for inside in (cap / "cache", cap / "rank0_ascend_pt" / "c"):
        r = CliRunner().invoke(main, ["analyze", str(cap), "--cache", str(inside)])
        assert r.exit_code == 2
        assert "msdiag never writes into a capture" in r.stderr
    assert sorted(str(p) for p in cap.rglob("*")) == before
    with pytest.raises(InputError):
        load(cap / "rank0_ascend_pt", cache=cap / "rank0_ascend_pt" / "x")


# ---- Dask ------------------------------------------------------------------------------------------


def test_scheduler_without_dask_says_how_to_install(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    r = CliRunner().invoke(main, ["analyze", str(corpus.joinpath(*LEVEL1)), "--no-cache", "--scheduler", "tcp://127.0.0.1:8786"])
    assert r.exit_code == 2
    assert "pip install 'msdiag[cluster]'" in r.stderr


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A scheduler and two single-threaded workers in processes of their own (`dask scheduler` and
    `dask worker`), as users run a cluster: this process holds no default Dask client, so msdiag must
    reach the cluster with the client it makes. Yields (scheduler address, a non-default client)."""
    distributed = pytest.importorskip("distributed", reason="Dask is not installed: pip install 'msdiag[cluster]'")
    folder = tmp_path_factory.mktemp("dask")
    sched_file = folder / "scheduler.json"
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    procs = [subprocess.Popen([*dask, "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(sched_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(600):  # the scheduler writes its address once it listens
            if sched_file.is_file() and sched_file.stat().st_size:
                break
            time.sleep(0.1)
        worker = [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(sched_file),
                  "--nworkers", "2", "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"]
        procs.append(subprocess.Popen(worker, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder))
        with distributed.Client(scheduler_file=str(sched_file), set_as_default=False) as client:
            client.wait_for_workers(2, timeout=120)
            yield client.scheduler.address, client
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.mark.slow
@pytest.mark.dask
def test_dask_equals_local_and_runs_on_workers(job8: Path, job8_report: dict[str, Any], dask_cluster: Any, tmp_path: Path) -> None:
    address, client = dask_cluster
    workers = set(client.run(os.getpid).values())
    assert len(workers) == 2 and os.getpid() not in workers
    cache = tmp_path / "cache"
    a = analyze(job8, Options(jobs=1, scheduler=address, cache=str(cache)))
    ing = a.capture.ingest
    assert ing["executor"] == "dask"
    pids = {int(w.rsplit(":", 1)[1]) for w in ing["read_by"].values()}
    assert pids <= workers and len(ing["read_by"]) == 8  # every rank read on a Dask worker
    assert ing["cache"]["written"] == 8  # entries written here, from what the workers sent back
    rep = build(a)
    assert rep["options"]["scheduler"] == address
    rep["options"]["scheduler"] = None
    assert rep == job8_report
    warm = analyze(job8, Options(jobs=1, scheduler=address, cache=str(cache)))
    assert warm.capture.ingest["cache"]["hits"] == 8
    # the command line, as users run it against a cluster started elsewhere
    r = CliRunner().invoke(main, ["analyze", str(job8), "--scheduler", address, "--no-cache", "--format", "json"])
    assert r.exit_code in (0, 1), r.stderr
    got = json.loads(r.stdout)
    assert got["verdict"] == job8_report["verdict"] and got["findings"] == job8_report["findings"]
    # a tiered read on the cluster (threshold 0): the shallow pass, trace_view.json skipped, and the deep pass of the
    # chosen ranks run on its workers, and give the local tiered read's report
    far = build(analyze(job8, Options(jobs=1, scheduler=address, deep_all_up_to=0)))
    near = build(analyze(job8, Options(jobs=2, deep_all_up_to=0)))
    assert far["read_depth"]["summary"] >= 1 and far["read_depth"] == near["read_depth"]
    assert {k: v for k, v in far.items() if k != "options"} == {k: v for k, v in near.items() if k != "options"}


@pytest.mark.slow
@pytest.mark.dask
def test_dask_tasks_of_several_ranks(job8: Path, job8_report: dict[str, Any], dask_cluster: Any, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # tasks of four ranks on the cluster's two workers (as the local pool's, packed): the same report, every rank's
    # cache entry written here, and the frames the tasks sent back concatenated handed to the join
    address, client = dask_cluster
    monkeypatch.setattr(parallel, "TASKS_PER_WORKER_MIN", 1)
    tasks: list[int] = []
    real = parallel.unpack

    def counting(p: parallel.Packed) -> Any:
        tasks.append(len(p.ranks))
        return real(p)

    monkeypatch.setattr(parallel, "unpack", counting)
    a = analyze(job8, Options(jobs=1, scheduler=address, cache=str(tmp_path / "cache")))
    assert tasks == [4, 4] and a.capture.ingest["executor"] == "dask" and a.capture.ingest["cache"]["written"] == 8
    rep = build(a)
    rep["options"]["scheduler"] = None
    assert rep == job8_report
    # the entries of a Dask task: one file here, linked under its four ranks' names; read back whole
    files = [os.stat(p).st_ino for p in _entries(tmp_path / "cache")]
    assert len(files) == 8 and sorted(files.count(i) for i in set(files)) == [4, 4]
    warm = analyze(job8, Options(jobs=1, scheduler=address, cache=str(tmp_path / "cache")))
    assert warm.capture.ingest["cache"]["hits"] == 8


@pytest.mark.slow
@pytest.mark.dask
def test_dask_unreachable_scheduler(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed", reason="Dask is not installed: pip install 'msdiag[cluster]'")
    monkeypatch.setattr(parallel, "DASK_TIMEOUT_S", 2)
    with pytest.raises(InputError, match="no Dask scheduler answers"):
        analyze(corpus.joinpath(*LEVEL1), Options(jobs=1, scheduler="tcp://127.0.0.1:9"))


def test_dynamic_shape_ops_counts_the_op_whose_shapes_change(job8: Path, tmp_path: Path) -> None:
    """dynamic_shape_ops on job8 with rank 3's kernel_details.csv edited: the first kernel name found in every step gets
    another input shape on one of its rows of the second step only (its set of shapes then differs from step to
    step: dynamic), and the second such name another shape on all of its rows in every step (the same set in each
    step: not dynamic). Expected by the metric's definition, from the edit alone: rank 3 has 1 dynamic op, every
    other rank 0 (the job's copies repeat one step, so no op of the unedited job is dynamic: checked first)."""
    assert _report(job8)["metrics"]["dynamic_shape_ops"] == 0
    job = _copy(job8, tmp_path / "job")
    path = next(job.glob("rank3_*")) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    header = next(csv.reader([lines[0]]))
    at_step, at_name, at_shape = header.index("Step Id"), header.index("Name"), header.index("Input Shapes")
    rows = [next(csv.reader([line])) for line in lines[1:]]
    steps = sorted({r[at_step] for r in rows}, key=int)
    assert len(steps) == 3
    names = [n for n in dict.fromkeys(r[at_name] for r in rows) if {r[at_step] for r in rows if r[at_name] == n} == set(steps)]
    dynamic, steady = names[0], names[1]
    edited = []
    for r in rows:
        if r[at_name] == steady or (r[at_name] == dynamic and r[at_step] == steps[1] and dynamic not in edited):
            r[at_shape] = '"7,7,7"'  # a shape no row of the file has (written quoted, as the profiler writes shapes)
            edited.append(r[at_name])
    assert edited.count(dynamic) == 1 and edited.count(steady) >= 3
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, *rows])
    path.write_text(out.getvalue(), encoding="utf-8")
    report = _report(job)
    assert report["metrics"]["dynamic_shape_ops"] == 1
    assert report["metric_details"]["dynamic_shape_ops"]["per_rank"] == {str(r): (1.0 if r == 3 else 0.0) for r in range(8)}
