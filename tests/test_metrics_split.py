"""The metrics of a job of many ranks computed in two processes (registry.compute_all with a forked child for
SPLIT_MODULES; forking.Forked): the same values and report as one process, the child's share really
computed in the child, and a child that fails replaced by the parent computing its share."""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

import pytest

from msdiag import analysis, forking
from msdiag.analysis import analyze
from msdiag.contract import build
from msdiag.metrics import cluster, device_memory, kernels, registry
from msdiag.options import Options


def _report(job: Path) -> dict:
    a = analyze(job, Options(jobs=2))
    return build(a)


def _aside_ids() -> list[str]:
    return [m.id for m in registry.all_metrics().values() if m.module in registry.SPLIT_MODULES]


def test_forked_gives_the_childs_result_and_failures() -> None:
    parent = os.getpid()
    assert forking.Forked(lambda: ("from", os.getpid())).result()[1] != parent

    def boom() -> None:
        raise RuntimeError("bug")

    with pytest.raises(forking.ForkFailed):
        forking.Forked(boom).result()
    with pytest.raises(forking.ForkFailed):  # a result that does not pickle is no result
        forking.Forked(lambda: (lambda: 1)).result()
    slow = forking.Forked(lambda: time.sleep(600))
    pid = slow._pid
    assert pid is not None
    slow.cancel()  # killed and reaped (cancel returns: the 600 s sleep was not waited for)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_split_metrics_equal_one_process(job8: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """job8 (8 ranks, bench/cluster.py's builder) with the split lowered to 2 ranks: every metric and the
    whole report the same as computed in one process; the metrics of SPLIT_MODULES computed in the child
    (their functions, wrapped, record the process they ran in)."""
    monkeypatch.setattr(registry, "SPLIT_MIN_RANKS", 10**9)
    serial = _report(job8)
    monkeypatch.setattr(registry, "SPLIT_MIN_RANKS", 2)
    monkeypatch.setattr(registry, "SPLIT_MAX_RSS_MB", 1 << 20)  # whatever the test process holds
    monkeypatch.setattr(forking, "fork_cpus", lambda: 2)  # (xdist's worker runs threads of its own)
    seen: dict[str, int] = {}
    for mid in _aside_ids()[:3]:
        m = registry.METRICS[mid]

        def fn(ctx: registry.Context, _fn=m.fn, _id=mid) -> registry.Value:
            v = _fn(ctx)
            ctx.cache[f"test.pid.{_id}"] = os.getpid()  # a helper the child caches comes back
            return v

        monkeypatch.setitem(registry.METRICS, mid, registry.Metric(**{**m.__dict__, "fn": fn}))
    calls: list[int] = []
    real = registry._computed_aside

    def aside(ctx: registry.Context, ms: list[registry.Metric], had: set[str]):  # type: ignore[no-untyped-def]
        calls.append(len(ms))
        out = real(ctx, ms, had)
        seen.update({k: v for k, v in ctx.cache.items() if k.startswith("test.pid.")})
        return out

    monkeypatch.setattr(registry, "_computed_aside", aside)
    caches: list[dict] = []
    returned: list[bool] = []

    def compute_all(ctx: registry.Context, meanwhile=None) -> dict[str, registry.Value]:  # type: ignore[no-untyped-def]
        out = registry.compute_all(ctx, meanwhile)
        caches.append(dict(ctx.cache))
        returned.append(True)
        return out

    monkeypatch.setattr(analysis, "compute_all", compute_all)
    # the analysis' views of the capture alone (the link heatmap) are made here while the child computes; each rank's
    # top kernel types (kernels.top_types, registry.WITH_METRICS) in the child, after its kernels metrics
    early: list[tuple[int, bool]] = []
    real_heatmap = cluster.link_heatmap

    def heatmap(cap):  # type: ignore[no-untyped-def]
        early.append((os.getpid(), bool(returned)))
        return real_heatmap(cap)

    monkeypatch.setattr(cluster, "link_heatmap", heatmap)
    topped: list[int] = []  # (appended to in the process that computes them)
    real_top = kernels.top_types_per_rank

    def top(cap):  # type: ignore[no-untyped-def]
        topped.append(os.getpid())
        return real_top(cap)

    monkeypatch.setattr(kernels, "top_types_per_rank", top)

    composed: list[int] = []  # the memory composition view (registry.WITH_METRICS): computed once, in the child
    real_rows = device_memory._composition_rows

    def rows(ctx: registry.Context):  # type: ignore[no-untyped-def]
        composed.append(os.getpid())
        return real_rows(ctx)

    monkeypatch.setattr(device_memory, "_composition_rows", rows)
    assert build(analyze(job8, Options(jobs=2))) == serial
    assert calls == [] and seen == {}  # called in the child: this process' lists are untouched
    pids = {k: v for k, v in caches[0].items() if k.startswith("test.pid.")}
    assert len(pids) == 3 and all(pid != os.getpid() for pid in pids.values())
    assert composed == [] and "device_memory.composition_rows" in caches[0]  # came back: not computed here
    assert early == [(os.getpid(), False)]  # once, here, before the metrics were all back
    assert topped == [] and "kernels.top_types" in caches[0]  # in the child: came back, not computed here
    # the helpers only their module's metrics read (registry.KEPT_IN_CHILD: the kernels' and the memory table's column
    # codes, the memory metrics' framework rows and columns per rank, the forward kernels) stay in the child
    assert registry.KEPT_IN_CHILD == {"kernels.codes.", "memory.codes.", "memory.framework_column.", "memory.framework_rows",
                                      "device_memory.forward"}
    # (but the kernels' codes the parent made itself: names for MFU's recompute test, types and formats for the
    # throughput's embedding and image inputs)
    here = {"kernels.codes.name", "kernels.codes.type", "kernels.codes.input_formats"}
    assert {k for k in caches[0] if k.startswith(tuple(registry.KEPT_IN_CHILD))} <= here


def test_a_failed_child_is_replaced_by_the_parent(job8: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that dies (one of its metrics raises an error that is not data-shaped, in the child only) leaves
    its share to the parent: the same report."""
    monkeypatch.setattr(registry, "SPLIT_MIN_RANKS", 10**9)
    serial = _report(job8)
    monkeypatch.setattr(registry, "SPLIT_MIN_RANKS", 2)
    monkeypatch.setattr(registry, "SPLIT_MAX_RSS_MB", 1 << 20)
    monkeypatch.setattr(forking, "fork_cpus", lambda: 2)
    parent = os.getpid()
    mid = _aside_ids()[0]
    m = registry.METRICS[mid]

    def fn(ctx: registry.Context) -> registry.Value:
        if os.getpid() != parent:
            raise RuntimeError("killed in the child")
        return m.fn(ctx)

    monkeypatch.setitem(registry.METRICS, mid, registry.Metric(**{**m.__dict__, "fn": fn}))
    assert _report(job8) == serial


def test_one_rank_or_one_job_computes_in_one_process(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No fork below SPLIT_MIN_RANKS ranks, nor with --jobs 1, nor with one CPU (or another thread running:
    forking.fork_cpus), nor while this process holds more than SPLIT_MAX_RSS_MB (the child would copy too much of it)."""
    made: list[int] = []

    class Counted(forking.Forked):
        def __init__(self, fn) -> None:  # type: ignore[no-untyped-def]
            made.append(1)
            super().__init__(fn)

    monkeypatch.setattr(forking, "Forked", Counted)
    analyze(corpus / "ascend/torchnpu-2rank-level1", Options(jobs=2))
    assert made == []
    monkeypatch.setattr(registry, "SPLIT_MIN_RANKS", 2)
    monkeypatch.setattr(registry, "SPLIT_MAX_RSS_MB", 1 << 20)
    monkeypatch.setattr(forking, "fork_cpus", lambda: 1)
    analyze(corpus / "ascend/torchnpu-2rank-level1", Options(jobs=2))
    assert made == []
    monkeypatch.setattr(forking, "fork_cpus", lambda: 2)
    analyze(corpus / "ascend/torchnpu-2rank-level1", Options(jobs=1))
    assert made == []
    analyze(corpus / "ascend/torchnpu-2rank-level1", Options(jobs=2))
    assert made == [1]
    held = forking.resident_kb()
    assert held is not None and 10 << 10 < held < 1 << 30  # this process' memory, in KiB
    monkeypatch.setattr(registry, "SPLIT_MAX_RSS_MB", held / 2048)
    analyze(corpus / "ascend/torchnpu-2rank-level1", Options(jobs=2))
    assert made == [1]


def test_no_fork_while_another_thread_runs() -> None:
    """forking.fork_cpus (the metrics' split and the chart drawers): 1 while another thread runs here, whose lock
    a forked child could inherit held."""
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert forking.fork_cpus() == 1
    finally:
        stop.set()
        t.join()


def test_the_callers_work_meanwhile_only_beside_a_child(job8: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compute_all's ``meanwhile`` (work that reads no metric) is done while a forked child computes, in this process;
    in one process nothing waits, and it is not called (the caller does the work when it needs it)."""
    from msdiag.ingest.loader import load
    from msdiag.metrics.reduce import reduce_rank

    cap = load(job8, jobs=1, reduce=reduce_rank)
    ctx = registry.Context(capture=cap, steps=analysis._steps_for(cap)[0], options=Options(jobs=2))
    monkeypatch.setattr(forking, "fork_cpus", lambda: 2)
    monkeypatch.setattr(registry, "SPLIT_MAX_RSS_MB", 1 << 20)
    for split, want in ((10**9, []), (2, [os.getpid()])):
        monkeypatch.setattr(registry, "SPLIT_MIN_RANKS", split)
        ran: list[int] = []
        ctx.cache.clear()
        registry.compute_all(ctx, functools.partial(_append_pid, ran))
        assert ran == want


def _append_pid(to: list[int]) -> None:
    to.append(os.getpid())


@pytest.mark.parametrize("size", [0, 100, 5_000, 70_000])
def test_a_helper_pickled_within_its_bound_is_pickle_s_bytes_else_none(size: int) -> None:
    # the child brings a helper back only when its pickle fits KEPT_MAX_BYTES; pickled_within stops writing once past
    # the bound: the bytes pickle.dumps gives where they fit, to the byte, _Full where they do not (bound one less)
    import pickle

    import numpy as np
    import pandas as pd

    value = {"frame": pd.DataFrame({"x": np.arange(size, dtype=np.float64), "s": ["t"] * size}), "n": [1, 2.5, None]}
    whole = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    assert registry.pickled_within(value, len(whole)) == whole
    with pytest.raises(registry._Full):
        registry.pickled_within(value, len(whole) - 1)


def test_the_cache_unpickles_a_kept_helper_where_it_is_read() -> None:
    import pickle

    cache = registry.Cache(a=1)
    cache["b"] = registry.Pickled(pickle.dumps([1, 2]))
    assert "b" in cache and isinstance(dict.__getitem__(cache, "b"), registry.Pickled)  # not read yet: still bytes
    first = cache["b"]
    assert first == [1, 2] and cache.get("b") is first  # unpickled once, then kept
    cache["c"] = registry.Pickled(pickle.dumps({"k": 3}))
    assert dict(cache.items()) == {"a": 1, "b": [1, 2], "c": {"k": 3}} and cache.values() == [1, [1, 2], {"k": 3}]
    assert cache.setdefault("d", 4) == 4 and cache.get("missing", 5) == 5 and cache.pop("a") == 1 and "a" not in cache


def test_early_parts_made_while_the_child_computes_are_the_reports_text(job8: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """analyze(early=contract.early_parts) on job8 with the split lowered: the report's sources and cross-checks are the
    values made while the child computed (the same objects), and the CLI's JSON of the report spliced from their texts
    is json's own text of the whole report, to the character; a report whose value is not the one made (an equal copy)
    is written by json, the same text."""
    from msdiag.cli import _compact, _early, _early_exact

    monkeypatch.setattr(registry, "SPLIT_MIN_RANKS", 2)
    monkeypatch.setattr(registry, "SPLIT_MAX_RSS_MB", 1 << 20)
    monkeypatch.setattr(forking, "fork_cpus", lambda: 2)
    calls: list[int] = []

    def early(cap, checks):  # type: ignore[no-untyped-def]
        calls.append(os.getpid())
        return _early(cap, checks)

    a = analyze(job8, Options(jobs=2), early)
    assert calls == [os.getpid()]  # once, here, while the child computed
    report = build(a)
    assert report["sources"] is a.early["sources"][0] and report["checks"] is a.early["checks"][0]
    assert len(report["sources"]) > 8 and len(report["checks"]) > 8
    whole = json.dumps(report, ensure_ascii=False, allow_nan=False)
    assert _compact(report, a.early) == whole
    copied = {**report, "sources": [dict(s) for s in report["sources"]]}
    assert _compact(copied, a.early) == whole
    # which parts need no second walk for the result cache: those still the values found to come back as they are
    assert _early_exact(report, a.early) == {"sources", "checks"} and _early_exact(copied, a.early) == {"checks"}
    # without a child, nothing is made early: the report as before
    monkeypatch.setattr(registry, "SPLIT_MIN_RANKS", 10**9)
    b = analyze(job8, Options(jobs=2), early)
    assert calls == [os.getpid()] and b.early == {}
    assert json.dumps(build(b), ensure_ascii=False, allow_nan=False) == whole
