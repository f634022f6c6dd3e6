"""The parent's per-rank work on arrays (issue 17), each against the pandas computation it replaced: the same
figures to the bit on real corpus captures and on edge cases (ties, NaN, empty, signed zeros). The pandas
versions are kept here as the reference."""

from __future__ import annotations

import dataclasses
import math
import pickle
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from msdiag.analysis import Analysis
from msdiag.ingest.cache import RankCache
from msdiag.metrics import balance, collectives, device_memory, mfu, steps
from msdiag.metrics.memory import column_max, framework_column, framework_rows
from msdiag.metrics.registry import Context, nan_sum
from msdiag.model import Capture, Frames, ParallelGroup, RankData, Rows, entry, frame_of, rows_of
from msdiag.options import Options

REAL = ("level1", "level0", "ascend/torchnpu-2rank-level1-db")


def _same(a: Any, b: Any) -> bool:
    """Equal to the bit (NaN equals NaN, -0.0 is not 0.0), floats of either numpy or Python type."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return bool(a == b) and type(a) is type(b)


def _ctx(a: Analysis, steps_frame: pd.DataFrame | None = None) -> Context:
    return Context(capture=a.capture, steps=a.steps if steps_frame is None else steps_frame, options=a.options)


# ---- registry.nan_sum: np.nansum to the bit --------------------------------------------------------


@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.sampled_from([np.nan, -0.0, 0.0])),
                max_size=300))
def test_nan_sum_is_nansum_to_the_bit(values: list[float]) -> None:
    # the array summed as it is where its sum is not NaN (no NaN in it: nansum would replace none), else np.nansum;
    # lengths past numpy's pairwise blocks (8, 128) included, so the order of the additions is numpy's either way
    a = np.array(values, dtype=np.float64)
    want, got = np.nansum(a), nan_sum(a)
    assert type(got) is type(want) and _same(float(got), float(want))


# ---- memory: the framework rows' columns and pandas' max -----------------------------------------


@pytest.mark.parametrize(
    "values",
    [[], [np.nan], [np.nan, np.nan], [1.0, np.nan, 3.0], [3.0, 3.0, np.nan], [-0.0, 0.0], [0.0, -0.0, np.nan],
     [np.nan, -np.inf, -1.0], [-np.inf], [2.5, np.inf, np.nan]],
)
def test_column_max_is_pandas_max(values: list[float]) -> None:
    s = pd.Series(values, dtype="float64")
    want = s.max()
    got = column_max(s.to_numpy())
    if pd.isna(want):
        assert got is None
    else:
        assert got is not None and _same(got, float(want))


@pytest.mark.parametrize("name", REAL)
def test_framework_column_is_each_ranks_frame_column(analysed: Callable[[str], Analysis], name: str) -> None:
    ctx = _ctx(analysed(name))
    rows = framework_rows(ctx)
    for col in ("allocated_mb", "reserved_mb", "active_mb", "ts_us"):
        got = framework_column(ctx, col)
        assert list(got) == list(rows)
        for r, g in rows.items():
            np.testing.assert_array_equal(got[r], g[col].to_numpy(float, na_value=np.nan))
            want = g[col].max()
            assert (column_max(got[r]) is None) if pd.isna(want) else _same(column_max(got[r]), float(want))


@pytest.mark.parametrize("name", REAL)
def test_framework_rows_are_each_ranks_filtered_frame(analysed: Callable[[str], Analysis], name: str) -> None:
    # the module doc's rule in pandas, rank by rank: the memory_record rows, of the first kind of component present
    # ("*+GE", else PTA / MindSpore, else GE), in time order (a stable sort); framework_rows takes them by position
    # and cuts every rank's frame only when one is read
    from msdiag.metrics import memory

    ctx = _ctx(analysed(name))
    rows = framework_rows(ctx)
    m = ctx.capture.table("memory")
    m = m[m["source"].isin(memory.MEMORY_SOURCES).fillna(False)]
    want: dict[int, pd.DataFrame] = {}
    for r, g in m.groupby("rank"):
        comp = g["component"].fillna("")
        for hit in (comp.str.endswith(memory.COMBINED_SUFFIX), comp.isin(memory.FRAMEWORK_COMPONENTS), comp.eq(memory.GE_COMPONENT)):
            if hit.any():
                want[int(r)] = g[hit.to_numpy(bool)].sort_values("ts_us", kind="stable").reset_index(drop=True)
                break
    assert want and list(rows) == list(want) and len(rows) == len(want)
    for r, frame in want.items():
        pdt.assert_frame_equal(rows[r], frame, check_exact=True)


def _old_peaks(ctx: Context) -> dict[int, pd.Series]:
    """device_memory._device_peaks before it read arrays: each rank's series and framework rows as frames."""
    rows = framework_rows(ctx)
    out: dict[int, pd.Series] = {}
    for r, s in device_memory.device_series(ctx).items():
        total = s["total_mb"].to_numpy(float, na_value=np.nan)
        if np.isnan(total).all():
            continue
        top = np.flatnonzero(total == np.nanmax(total))
        g = rows.get(r)
        alloc = np.empty(0) if g is None else g["allocated_mb"].to_numpy(float, na_value=np.nan)
        ts = np.empty(0) if g is None else g["ts_us"].to_numpy(float, na_value=np.nan)
        ok = ~(np.isnan(alloc) | np.isnan(ts))
        if not ok.any():
            out[r] = s.iloc[top[0]]
            continue
        t = float(ts[ok][int(alloc[ok].argmax())])
        out[r] = s.iloc[top[int(np.abs(s["ts_us"].to_numpy(float)[top] - t).argmin())]]
    return out


def _same_row(got: dict[str, Any], want: pd.Series) -> None:
    """A peak (column -> value) holds the row Series' labels in order and its values, each of the same type (NaN
    where it is NaN)."""
    assert list(got) == list(want.index)
    for c, v in want.items():
        assert type(got[c]) is type(v) and (got[c] == v or (pd.isna(v) and pd.isna(got[c]))), c


@pytest.mark.parametrize("name", REAL)
def test_device_peaks_and_series_arrays_as_the_frames(analysed: Callable[[str], Analysis], name: str) -> None:
    ctx = _ctx(analysed(name))
    series, arrays, where = device_memory._series(ctx)
    assert set(arrays) == set(series) == set(where)
    for r, s in series.items():
        assert isinstance(s.index, pd.RangeIndex) and s.index.start == 0
        np.testing.assert_array_equal(arrays[r][0], s["ts_us"].to_numpy(float))
        np.testing.assert_array_equal(arrays[r][1], s["total_mb"].to_numpy(float, na_value=np.nan))
    got, want = device_memory.device_peaks(ctx), _old_peaks(ctx)
    assert list(got) == list(want)
    for r in want:
        _same_row(got[r], want[r])
    per = device_memory.peak_per_rank(ctx)
    for r, g in framework_rows(ctx).items():
        if r not in want:
            v = g["reserved_mb"].max()
            assert per[r] is None if pd.isna(v) else _same(per[r], float(v))
    for r, h in device_memory.peak_holders(ctx).items():  # the peak sample: the frame's filter and argmax
        g = framework_rows(ctx)[r]
        g = g[g["allocated_mb"].notna() & g["ts_us"].notna()]
        if len(g):
            i = int(g["allocated_mb"].to_numpy(float).argmax())
            assert (h.ts_us, h.allocated_mb) == (float(g["ts_us"].iloc[i]), float(g["allocated_mb"].iloc[i]))


def _memory_capture(rows: list[tuple[int, str, str, float, float, float]]) -> Context:
    """A capture whose memory table holds ``rows`` (rank, component, source, ts_us, allocated_mb, reserved_mb)."""
    df = pd.DataFrame(rows, columns=["rank", "component", "source", "ts_us", "allocated_mb", "reserved_mb"])
    df = df.assign(rank=df["rank"].astype("Int64"), component=df["component"].astype("string"),
                   source=df["source"].astype("string"), active_mb=np.nan, device=pd.array([None] * len(df), dtype="string"))  # fmt: skip
    ranks = [RankData(rank=int(r), family="ascend_pt", path=f"/r{r}", tables={"memory": g.reset_index(drop=True)})
             for r, g in df.groupby("rank")]  # fmt: skip
    return Context(capture=Capture(path="/job", ranks=ranks), steps=pd.DataFrame(), options=Options())


def test_device_peaks_on_ties_nan_and_ranks_without_modules() -> None:
    nm, mr = "npu_module_mem", "memory_record"
    ctx = _memory_capture([
        # rank 0: the footprint peaks twice (ts 20 and 30, ties), the framework's allocated peak (NaN and a tie) nearer 30
        (0, "APP", nm, 10.0, np.nan, 5.0), (0, "HCCL", nm, 10.0, np.nan, 1.0), (0, "APP", nm, 20.0, np.nan, 7.0),
        (0, "APP", nm, 30.0, np.nan, 7.0), (0, "PTA+GE", mr, 29.0, 4.0, 6.0), (0, "PTA+GE", mr, 31.0, 4.0, np.nan),
        (0, "PTA+GE", mr, 25.0, np.nan, 6.5),
        # rank 1: no npu_module_mem: the driver's APP rows, two equal peaks; framework rows all NaN
        (1, "APP", mr, 5.0, np.nan, 9.0), (1, "APP", mr, 6.0, np.nan, 9.0), (1, "PTA", mr, np.nan, np.nan, np.nan),
        # rank 2: a module whose figure is null only: no series
        (2, "APP", nm, 1.0, np.nan, np.nan),
    ])  # fmt: skip
    got, want = device_memory.device_peaks(ctx), _old_peaks(ctx)
    assert list(got) == list(want) == [0, 1]
    for r in want:
        _same_row(got[r], want[r])
    assert float(got[0]["ts_us"]) == 30.0 and float(got[1]["ts_us"]) == 5.0
    assert device_memory.peak_per_rank(ctx) == {0: 7.0, 1: 9.0}  # 5 + 1 at ts 10, 7 at ts 20 and 30


# ---- the step lookup of the collectives, balance, host-bound share, FLOPs per step ----------------


def _steps_frame() -> pd.DataFrame:
    """Step rows with ties, NaN starts and ends, a null step id, a null rank, ranks out of order."""
    rows = [
        (1, 2, 30.0, 40.0, 10.0, 5.0, 1.0), (0, 1, 0.0, 10.0, 10.0, 4.0, 2.0), (0, 2, 10.0, 20.0, 10.0, np.nan, 1.0),
        (1, 1, 20.0, 30.0, 10.0, 6.0, 0.5), (0, 3, 10.0, 15.0, 5.0, 3.0, np.nan), (2, None, np.nan, 5.0, 5.0, 1.0, 1.0),
        (2, 1, 1.0, np.nan, 3.0, 2.0, 1.0), (None, 1, 0.0, 1.0, 1.0, 1.0, 1.0), (0, 4, -0.0, 10.0, 10.0, 0.1, 0.2),
    ]  # fmt: skip
    df = pd.DataFrame(rows, columns=["rank", "step", "start_us", "end_us", "total_us", "computing_us", "free_us"])
    return df.assign(rank=df["rank"].astype("Int64"), step=df["step"].astype("Int64"), data_wait_us=0.25)


def _old_lookup(s: pd.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray, list[Any]]]:
    out = {}
    for rank, g in s.groupby("rank"):
        g = g.sort_values("start_us", kind="stable")
        out[int(rank)] = (g["start_us"].to_numpy(dtype=float, na_value=np.nan), g["end_us"].to_numpy(dtype=float, na_value=np.nan),
                          g["step"].tolist())  # fmt: skip
    return out


@pytest.mark.parametrize("name", REAL)
def test_step_lookup_as_the_grouped_sort(analysed: Callable[[str], Analysis], name: str) -> None:
    for s in (analysed(name).steps, _steps_frame(), _steps_frame().iloc[:0]):
        got, want = collectives._StepLookup(s)._by_rank, _old_lookup(s) if len(s) else {}
        assert list(got) == list(want)
        for r in want:
            np.testing.assert_array_equal(got[r][0], want[r][0])
            np.testing.assert_array_equal(got[r][1], want[r][1])
            assert [str(x) for x in got[r][2]] == [str(x) for x in want[r][2]]


def _old_computing(s: pd.DataFrame) -> dict[int, float]:
    s = s[s["total_us"].notna() & (s["total_us"] > 0)]
    s = s[s["computing_us"].notna()]
    if len(s) and not s["step"].isna().any():
        common = set.intersection(*[set(g["step"].astype(int)) for _, g in s.groupby("rank")])
        if common:
            s = s[s["step"].astype(int).isin(common).to_numpy()]
    return {int(r): float(g["computing_us"].sum()) for r, g in s.groupby("rank")}


def _old_host_bound(s: pd.DataFrame) -> dict[int, float]:
    idle = (s["free_us"].fillna(0.0) - s["data_wait_us"].fillna(0.0)).clip(lower=0.0)
    return {int(r): float(idle[g.index].sum() / g["total_us"].sum()) for r, g in s.groupby("rank")}


@pytest.mark.parametrize("name", [*REAL, "edge", "edge-steps"])
def test_balance_and_host_bound_as_the_groupby(analysed: Callable[[str], Analysis], name: str) -> None:
    a = analysed("level1")
    s = _steps_frame() if name == "edge" else _steps_frame().dropna(subset=["step"]) if name == "edge-steps" else analysed(name).steps
    ctx = _ctx(a, s)
    got, want = balance.per_rank_computing_us(ctx), _old_computing(s)
    assert list(got) == list(want) and all(_same(got[r], want[r]) for r in want)
    timed = steps._timed_steps(ctx)
    if len(timed):
        per, old = steps._host_bound(ctx).per_rank, _old_host_bound(timed)
        assert list(per) == list(old) and all(_same(per[r], old[r]) for r in old)


def _old_per_step_sum(steps_frame: pd.DataFrame, values: pd.Series, kernels: pd.DataFrame) -> dict[int, float]:
    out: dict[int, float] = {}
    at = kernels.groupby("rank").indices
    v_all, s_all = values.to_numpy(), kernels["start_us"].to_numpy()
    for rank, g in steps_frame.groupby("rank"):
        pos = at.get(rank)
        if pos is None:
            continue
        vr, start = v_all[pos], s_all[pos]
        sums = []
        for lo, hi in zip(g["start_us"], g["end_us"]):
            if pd.isna(lo) or pd.isna(hi):
                continue
            m = (start >= lo) & (start < hi)
            if m.any():
                sums.append(float(np.nansum(vr[m])))
        if not sums:
            sums = [float(np.nansum(vr)) / max(1, len(g))]
        out[int(rank)] = float(np.median(sums))
    return out


def test_per_step_sum_as_the_groupby(analysed: Callable[[str], Analysis]) -> None:
    a = analysed("level1")
    k = a.capture.table("kernels")
    values = k["dur_us"].astype("float64")
    for s in (a.steps, _steps_frame()):
        ks = k if s is a.steps else pd.DataFrame({"rank": pd.array([0, 0, 1, 2, 0], dtype="Int64"),
                                                   "start_us": [0.0, 12.0, 25.0, 2.0, np.nan]})  # fmt: skip
        v = values if s is a.steps else pd.Series([1.0, np.nan, 2.5, 4.0, 8.0])
        got, want = mfu._per_step_sum(_ctx(a, s), v, ks), _old_per_step_sum(s, v, ks)
        assert list(got) == list(want) and all(_same(got[r], want[r]) for r in want)


def test_parallel_group_dict_is_asdict() -> None:
    for g in (ParallelGroup("g", "tp", 0, [0, 1, None], "h1"), ParallelGroup("g2", None, None, None, "h2")):
        d = g.as_dict()
        assert d == dataclasses.asdict(g) and list(d) == list(dataclasses.asdict(g))
        assert g.global_ranks is None or d["global_ranks"] is not g.global_ranks


# ---- the rank cache's converted tables, joined as they are ----------------------------------------


def test_cache_slices_are_joined_without_a_copy(tmp_path: Path, corpus: Path) -> None:
    from msdiag.ingest import loader
    from msdiag.metrics.reduce import reduce_rank

    job = corpus / "ascend" / "torchnpu-2rank-level1"
    if not job.is_dir():
        pytest.skip("corpus absent")
    cold = loader.load(job, jobs=1, cache=tmp_path / "cache", reduce=reduce_rank)
    warm = loader.load(job, jobs=1, cache=tmp_path / "cache", reduce=reduce_rank)
    assert warm.ingest["cache"]["hits"] == 2
    for name in dict.fromkeys(n for r in cold.ranks for n in r.tables):
        for a, b in zip(cold.ranks, warm.ranks):
            pdt.assert_frame_equal(a.tables[name], b.tables[name], check_exact=True)
        pdt.assert_frame_equal(cold.table(name), warm.table(name), check_exact=True)
    # every table of both ranks came from one conversion: the converted frame is the table, its slices the ranks'
    kernels = warm.table("kernels")
    assert warm._tables["kernels"][1] is kernels and warm.ranks[0].tables["kernels"] is warm._tables["kernels"][2][0]
    cache = RankCache.open(tmp_path / "cache", "x")
    cache._cut.append(("kernels", kernels, []))
    assert pickle.loads(pickle.dumps(cache))._cut == [] and cache.take_cut() and cache._cut == []


# ---- this session's per-rank figures on arrays, each against the grouping it replaced ---------------------


@pytest.fixture(scope="module")
def job8_analysis(job8: Path) -> Analysis:
    from msdiag.analysis import analyze

    return analyze(job8, Options(jobs=1))


def _old_per_rank(a: Analysis) -> dict[str, dict[int, Any]]:
    """The per-rank figures as the metrics computed them before, a frame per rank (groupby)."""
    from msdiag.metrics import communication as comm
    from msdiag.metrics import kernels

    ctx = _ctx(a)
    out: dict[str, dict[int, Any]] = {}
    s = steps._timed_steps(ctx)
    out["step_time_p90_us"] = {int(r): float(np.percentile(g["total_us"], 90)) for r, g in s.groupby("rank")}
    out["step_count"] = {int(r): float(len(g)) for r, g in s.groupby("rank")}
    t = balance._timed(ctx)
    out["step_time_imbalance"] = {int(r): float(g["total_us"].median()) for r, g in t.groupby("rank")}
    c = kernels._compute(ctx, ("rank", "dur_us"))
    short = c["dur_us"] < kernels.SHORT_KERNEL_US
    out["short_kernel_share"] = {int(r): float(g.mean()) for r, g in short.groupby(c["rank"])}
    c = kernels._compute(ctx, ("rank", "start_us"))
    per: dict[int, Any] = {}
    for r, g in ctx.steps.groupby("rank"):
        kr = c.loc[c["rank"] == r, "start_us"].to_numpy(float)
        vals = [int(((kr >= lo) & (kr < hi)).sum()) for lo, hi in zip(g["start_us"], g["end_us"]) if not (pd.isna(lo) or pd.isna(hi))]
        if vals:
            per[int(r)] = float(pd.Series(vals).median())
    out["kernels_per_step"] = per
    api = ctx.capture.table("api_stats")
    api = api[api["total_us"].notna()]
    out["host_api_top"] = {}
    for r, g in api.groupby("rank"):
        top = g.loc[g["total_us"].idxmax()]
        out["host_api_top"][int(r)] = f"{top['api']} ({top['level']})"
    u, _ = comm._utilization_value(ctx)
    if u is not None:
        out["bandwidth_utilization_min"] = {int(r): float(g["utilization"].min()) for r, g in u.groupby("rank")}
    lb, _ = comm._slowest_link(ctx)
    if lb is not None:
        out["slow_link"] = {int(r): float(g["ratio"].min()) for r, g in lb.groupby("rank")}
        out["slow_link_bandwidth_gbps"] = {int(r): float(g["bandwidth_gbps"].iloc[0]) for r, g in lb.groupby("rank", sort=True)}
    linked, _ = comm._linked_groups(ctx)
    if linked is not None:
        out["groups_spanning_nodes"] = {int(r): float(g["spans"].sum()) for r, g in linked.groupby("rank")}
    tr, _ = comm._packet_rows(ctx)

    def _weighted_lpr(g: pd.DataFrame) -> float:  # (a group's large-packet ratio weighted by transit time, on its frame)
        t = g["time_us"].to_numpy(dtype=float, na_value=np.nan)
        return float((g["large_packet_ratio"].to_numpy(dtype=float, na_value=np.nan) * t).sum() / t.sum())

    if tr is not None:  # a rank's lowest weighted ratio over its transports (in their sorted order), its small share
        per_rt = {(int(r), str(t)): _weighted_lpr(g) for (r, t), g in tr.groupby(["rank", "transport"])}
        lowest: dict[int, Any] = {}
        for (r, _), v in per_rt.items():
            lowest[r] = v if lowest.get(r) is None else min(v, lowest[r])
        out["large_packet_ratio_min"] = lowest
        out["small_packet_share"] = {int(r): 1.0 - _weighted_lpr(g) for r, g in tr.groupby("rank", sort=True)}
    ops = ctx.capture.table("comm_ops")
    if len(ops) and ops["group"].notna().any():
        ops = ops[ops["group"].notna()]
        out["comm_groups"] = {int(r): float(g["group"].nunique()) for r, g in ops.groupby("rank", sort=True)}
    return out


@pytest.mark.parametrize("name", ["job8", *REAL])
def test_per_rank_figures_as_the_groupby(analysed: Callable[[str], Analysis], job8_analysis: Analysis, name: str) -> None:
    a = job8_analysis if name == "job8" else analysed(name)
    old = _old_per_rank(a)
    if name == "job8":  # every figure has ranks to compare on the bench job
        assert {"host_api_top", "bandwidth_utilization_min", "slow_link", "groups_spanning_nodes", "large_packet_ratio_min",
                "small_packet_share", "comm_groups"} <= set(old)
        assert all(len(v) == 8 for k, v in old.items() if k != "groups_spanning_nodes")
    for mid, want in old.items():
        got = a.metrics[mid].per_rank
        assert list(got) == list(want), mid
        assert all(_same(got[r], want[r]) for r in want), (mid, {r: (got[r], want[r]) for r in want if not _same(got[r], want[r])})


def test_kernel_flops_of_the_compute_rows_as_of_their_copy(analysed: Callable[[str], Analysis], job8_analysis: Analysis) -> None:
    from msdiag.metrics import flops, phases

    for a in (job8_analysis, analysed("level1"), analysed("cpu-dp2")):
        k = a.capture.table("kernels")
        comp = k.loc[k["kind"] == "compute", [c for c in phases._FLOP_COLUMNS if c in k.columns]].reset_index(drop=True)
        if not len(comp):
            continue
        want = (flops.host_op_flops(comp, a.capture.table("host_shapes")) if (comp["core"] == "CPU").all()
                else flops.kernel_flops(comp)).reset_index(drop=True)
        got = phases.compute_kernel_flops(a.capture)
        assert got is not None
        pdt.assert_series_equal(got, want, check_exact=True)


def test_pattern_matches_as_the_mapped_texts() -> None:
    import re

    pat = re.compile(r"Grad|backward", re.IGNORECASE)
    a = pd.Series(["MatMulGrad", None, "Add", "add_backward", "MatMulGrad", ""], dtype="string")
    b = pd.Series([None, "x", "y", None, "z_grad", "w"], dtype=object)
    want = np.zeros(len(a), dtype=bool)
    for col in (a, b):  # the former: each distinct text matched once, mapped back onto the rows
        text = col.astype("string").fillna("")
        want |= text.map({t: bool(pat.search(t)) for t in text.unique()}).to_numpy(bool)

    class Kernels:  # a capture whose kernels table holds the two columns (device_memory._matches reads their codes)
        def table(self, name: str) -> pd.DataFrame:
            return pd.DataFrame({"type": a, "name": b})

    ctx = Context(capture=Kernels(), steps=pd.DataFrame())  # type: ignore[arg-type]
    every = np.arange(len(a))
    got = device_memory._matches(ctx, pat, every, "type", "name")
    assert got.tolist() == want.tolist() == [True, False, False, True, True, False]
    assert device_memory._matches(ctx, pat, np.array([4, 1, 0]), "type", "name").tolist() == [True, False, True]
    empty = re.compile(r"^$")  # a null is the empty text
    assert device_memory._matches(ctx, empty, every, "type").tolist() == [False, True, False, False, False, True]


def test_pipe_ratios_as_the_frame_of_columns(job8_analysis: Analysis) -> None:
    from msdiag.metrics import kernel_types as kt

    light, weighted = kt._compute(job8_analysis.capture)
    # the compute kernels with their PMU columns, as a frame (what _compute returned before it left them out)
    k = job8_analysis.capture.table("kernels")
    rows = (k["kind"] == "compute").to_numpy(dtype=bool, na_value=False)
    cols = [c for c in ("rank", "name", "type", "core", "dur_us", *kt.RATIO_COLUMNS, *kt.SIDE_TIME.values()) if c in k.columns]
    comp = k.loc[rows, cols].reset_index(drop=True)
    types = kt._types(comp)
    pdt.assert_series_equal(kt._types(light), types, check_exact=True)

    def old(k: pd.DataFrame, by: Any) -> pd.DataFrame:
        dur = k["dur_us"].to_numpy(dtype=float, na_value=np.nan)
        dur = np.where(np.isnan(dur), 0.0, dur)
        parts: dict[str, np.ndarray] = {}
        for side in ("aic", "aiv"):
            ran = kt._side_ran(k[kt.SIDE_TIME[side]].to_numpy(dtype=float, na_value=np.nan) if kt.SIDE_TIME[side] in k.columns else None,
                               [k[c].to_numpy(dtype=float, na_value=np.nan) for c, (_, s) in kt.RATIO_COLUMNS.items()
                                if s == side and c in k.columns], len(k))
            for c, (_, s) in kt.RATIO_COLUMNS.items():
                if s != side or c not in k.columns:
                    continue
                r = k[c].to_numpy(dtype=float, na_value=np.nan)
                known = ~np.isnan(r)
                w = np.where(ran & known, dur, 0.0)
                parts[f"num:{c}"], parts[f"den:{c}"] = w * np.where(known, r, 0.0), w
        sums = pd.DataFrame(parts, index=k.index).groupby(by, sort=False).sum()
        out = {}
        for c in kt.RATIO_COLUMNS:
            if f"den:{c}" not in sums.columns:
                out[c] = np.full(len(sums), np.nan)
                continue
            den = sums[f"den:{c}"].to_numpy(float)
            out[c] = sums[f"num:{c}"].to_numpy(float) / np.where(den > 0, den, np.nan)
        return pd.DataFrame(out, index=sums.index)

    assert comp[list(c for c in kt.RATIO_COLUMNS if c in comp.columns)].notna().any().any(), "the bench job has pipe ratios"
    shared: list[Any] = []  # the weights made once and summed by both groupings (kernel_types.cached_table)
    for by in (types, [comp["rank"].rename("rank"), types]):
        pdt.assert_frame_equal(kt.pipe_ratios(comp, by), old(comp, by), check_exact=True)
        pdt.assert_frame_equal(kt.pipe_ratios(comp, by, shared), old(comp, by), check_exact=True)
        assert len(shared) == 1
        # the frame without its PMU columns and the weights _compute made from the whole table at its rows
        pdt.assert_frame_equal(kt.pipe_ratios(light, by, [weighted]), old(comp, by), check_exact=True)


def test_steps_taken_from_the_joined_table_as_concatenated(job8_analysis: Analysis) -> None:
    """analysis._joined: every rank's frame of a table in order is the capture's table itself (no concatenation of
    hundreds of frames); any other list is concatenated; the step rows analysis marks warm-up on are a frame of
    their own, never the capture's table."""
    from msdiag.analysis import _joined, _steps_for

    cap = job8_analysis.capture
    held = [entry(rd.tables, "steps") for rd in cap.ranks]  # as the ranks hold them (Rows of the joined table)
    frames = [rd.tables["steps"] for rd in cap.ranks]
    whole = _joined(cap, "steps", held)
    assert whole is cap.table("steps")
    pdt.assert_frame_equal(whole, pd.concat(frames, ignore_index=True), check_exact=True)
    for other in (held[:5], held[::-1], frames, [f.copy() for f in frames]):  # (frames: cut from what is held)
        got = _joined(cap, "steps", other)
        assert got is not cap.table("steps")
        pdt.assert_frame_equal(got, pd.concat([frame_of(x) for x in other], ignore_index=True), check_exact=True)
    before = cap.table("steps").copy()
    steps, prof, _, _ = _steps_for(cap)
    assert steps is not cap.table("steps") and "warmup" in steps.columns
    pdt.assert_frame_equal(cap.table("steps"), before, check_exact=True)  # the capture's table unchanged
    pdt.assert_frame_equal(steps.drop(columns=["warmup"]), job8_analysis.steps.drop(columns=["warmup"]), check_exact=True)
    pdt.assert_frame_equal(prof, pd.concat([rd.tables["profiler_steps"] for rd in cap.ranks], ignore_index=True), check_exact=True)


def test_a_ranks_communication_sums_read_from_what_it_holds(job8_analysis: Analysis) -> None:
    """contract._comm_summary reads a rank's comm_ops as held (model.Rows of the joined table: the whole's column
    between its rows, no frame cut): each sum is pandas' sum of the rank's own frame, to the bit; the kernel counts
    (model.held_rows) are the frames' lengths."""
    from msdiag.contract import _comm_summary
    from msdiag.model import held_rows

    cap = job8_analysis.capture
    assert all(isinstance(entry(rd.tables, "comm_ops"), Rows) for rd in cap.ranks)  # joined: held as Rows
    memo: dict[tuple[int, str], np.ndarray] = {}  # (shared by the ranks, as contract.build shares it)
    for rd in cap.ranks:
        got = _comm_summary(rd)
        ops = rd.tables["comm_ops"]
        assert got is not None and got["ops"] == len(ops) > 0
        for c in ("elapse", "transit", "wait", "sync", "idle"):
            assert got[f"{c}_us"] == float(ops[f"{c}_us"].sum())
        assert _comm_summary(rd, memo) == got  # the whole's zeroed column made once: the same sums
        assert held_rows(rd, "kernels") == len(rd.tables["kernels"]) and held_rows(rd, "no such table") == 0
    assert len(memo) == 5  # one per column of the one joined table
    # NaN as 0, a signed zero, a float column pandas holds as Float64 (its own sum): held as Rows and as a frame
    ops = pd.DataFrame({f"{c}_us": [np.nan, -0.0, 1e16, 1.0, -1e16, 3.5] for c in ("elapse", "transit", "wait", "sync")})
    ops["idle_us"] = pd.array([1.5, None, 2.0, 0.25, None, 4.0], dtype="Float64")
    for held in (rows_of(ops, [2, 4])[1], ops.iloc[2:6].reset_index(drop=True)):
        rd = RankData(rank=1, family="ascend_pt", path="/r1", tables=Frames({"comm_ops": held}))
        got = _comm_summary(rd)
        mine = ops.iloc[2:6].reset_index(drop=True)
        assert got is not None and got["ops"] == 4
        for c in ("elapse", "transit", "wait", "sync", "idle"):
            assert got[f"{c}_us"] == float(mine[f"{c}_us"].sum())


@pytest.mark.parametrize("x", [1.5, 0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e308, np.float64(2.5), np.float64("nan"),
                               np.float32(0.1), np.int64(3), 7, True, np.bool_(False), None, pd.NA, "x"])
def test_finite_or_none_is_its_old_self(x: object) -> None:
    # analysis.finite_or_none takes a Python float first (math.isfinite); every value gives what the numpy checks gave
    from msdiag.analysis import finite_or_none

    def old(v: object) -> object:
        if v is None or v is pd.NA:
            return None
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, np.integer):
            return int(v)
        if isinstance(v, (float, np.floating)):
            return float(v) if np.isfinite(v) else None
        return v

    got, want = finite_or_none(x), old(x)
    assert type(got) is type(want) and (got == want or got is want)
    if isinstance(want, float):
        assert np.copysign(1.0, got) == np.copysign(1.0, want)  # the sign of a zero kept


def test_asking_for_a_rank_cuts_no_frame(analysed: Callable[[str], Analysis]) -> None:
    # framework_rows and device_series hold every rank's frame uncut until one is read: `rank in` them reads none
    # (Mapping's own __contains__ reads the frame, and the first frame read takes every rank's framework rows), and
    # the composition rows read a rank's framework rows only where its peak has no device breakdown
    from msdiag.metrics import memory

    device_only = 0
    for name in REAL:
        ctx = _ctx(analysed(name))  # (a new Context: nothing cached)
        rows, series = framework_rows(ctx), device_memory.device_series(ctx)
        assert isinstance(rows, memory._RankFrames) and isinstance(series, device_memory._Series)
        assert all(r in rows for r in list(rows)) and -1 not in rows and all(r in series for r in list(series))
        assert rows._frames is None
        peaks = device_memory.device_peaks(ctx)
        device_memory.composition_rows(ctx)
        if rows and all(r in peaks and peaks[r]["basis"] == device_memory.DEVICE_SOURCE for r in rows):
            device_only += 1
            assert rows._frames is None
    assert device_only >= 1


# ---- kernels._text_mask: a text column's test judged once per distinct text ------------------------------------


_TESTS = {
    "vector": lambda t: t.str.contains("VECTOR", regex=False, na=False),
    "aicpu": lambda t: t.str.contains("AI_CPU", regex=False, na=False),
    "cpu": lambda t: t.eq("CPU"),
    "known": lambda t: t.notna(),
}


def _row_by_row(col: pd.Series, keep: np.ndarray, test: Any) -> np.ndarray:
    """The test as the metrics ran it before: on the compute rows' texts (``astype("string")``), a null False."""
    return np.asarray(test(col[keep].astype("string")).to_numpy(bool, na_value=False), dtype=bool)


@given(st.lists(st.one_of(st.none(), st.sampled_from(["AI_CORE", "AI_VECTOR_CORE", "MIX_AIV", "AI_CPU", "CPU", "",
                                                      "MatMulV2", "BatchMatMul", "Dense", "Dense\n", "GroupedMatmul",
                                                      "matmul", "Add"])), max_size=30),
       st.lists(st.booleans(), min_size=30, max_size=30))
def test_a_text_mask_is_the_test_of_each_row(values: list[str | None], flags: list[bool]) -> None:
    from msdiag.metrics import kernels

    col = pd.Series(values, dtype="string")
    ctx = Context(capture=Capture(path="/job", ranks=[RankData(rank=0, family="ascend_pt", path="/r0",
                                                               tables={"kernels": pd.DataFrame({"core": col, "type": col})})]),
                  steps=pd.DataFrame(), options=Options())  # fmt: skip
    keep = np.array(flags[: len(values)], dtype=bool)
    for test in (*_TESTS.values(), kernels._is_matmul):
        for name in ("core", "type"):
            np.testing.assert_array_equal(kernels._text_mask(ctx, name, keep, test), _row_by_row(col, keep, test))


@pytest.mark.parametrize("name", REAL)
def test_text_masks_of_real_kernels(analysed: Callable[[str], Analysis], name: str) -> None:
    from msdiag.metrics import kernels

    ctx = _ctx(analysed(name))
    k = ctx.capture.table("kernels")
    keep = kernels._compute_rows(k)
    assert keep.any()
    for test in _TESTS.values():
        np.testing.assert_array_equal(kernels._text_mask(ctx, "core", keep, test), _row_by_row(k["core"], keep, test))
    np.testing.assert_array_equal(kernels._text_mask(ctx, "type", keep, kernels._is_matmul),
                                  _row_by_row(k["type"], keep, kernels._is_matmul))


def _warmup_by_rank(rank: np.ndarray, step: np.ndarray, total: np.ndarray) -> list[tuple[int, int, float]]:
    """The reference: per rank of at least analysis.WARMUP_MIN_STEPS steps, its first step's row (its rows sorted by
    step with pandas) and np.nanmedian of its other steps' totals (NaN when all are NaN)."""
    from msdiag.analysis import WARMUP_MIN_STEPS

    out = []
    frame = pd.DataFrame({"rank": rank, "step": step, "total": total, "row": np.arange(len(rank))})
    for r, g in frame.groupby("rank", sort=True):
        if len(g) < WARMUP_MIN_STEPS:
            continue
        g = g.sort_values("step", kind="stable")
        others = g["total"].to_numpy()[1:]
        med = float(np.nanmedian(others)) if not np.isnan(others).all() else float("nan")
        out.append((int(r), int(g["row"].iloc[0]), med))
    return out


_TOTALS = st.sampled_from([math.nan, 0.0, -0.0, -1.0, 1.0, 5.0, 2.5, 1e300, math.inf, 7e-9, 123456.789])


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 9), _TOTALS), max_size=40, unique_by=lambda x: (x[0], x[1])))
def test_each_rank_s_first_step_and_median_of_the_others_on_arrays(rows: list[tuple[int, int, float]]) -> None:
    """analysis._first_and_median (every rank at once, on sorted arrays) against pandas' sort and np.nanmedian per rank
    (the warm-up judgement's figures, twice a run: the deep choice's steps and the analysis'), to the bit."""
    from msdiag.analysis import _first_and_median

    rank = np.array([r for r, _, _ in rows], dtype=np.int64)
    step = np.array([s for _, s, _ in rows], dtype=np.int64)
    total = np.array([t for _, _, t in rows], dtype=float)
    got = _first_and_median(rank, step, total)
    want = _warmup_by_rank(rank, step, total)
    assert got is not None and len(got) == len(want)
    for (gr, gi, gm), (wr, wi, wm) in zip(got, want):
        assert (gr, gi) == (wr, wi) and _same(gm, wm)


def test_a_rank_with_a_step_twice_is_judged_rank_by_rank(job8_analysis: Analysis) -> None:
    """A rank holding a step twice: the arrays give no answer (None) and the warm-up is judged rank by rank, as before;
    the deep choice's steps (no cross-checks listed) are the analysis' steps, with the same notes."""
    from msdiag.analysis import _first_and_median, _steps_for

    assert _first_and_median(np.array([0, 0, 0]), np.array([1, 1, 2]), np.array([1.0, 2.0, 3.0])) is None
    cap = job8_analysis.capture
    full = _steps_for(cap)
    bare = _steps_for(cap, checks_wanted=False)
    pdt.assert_frame_equal(full[0], bare[0], check_exact=True)
    pdt.assert_frame_equal(full[1], bare[1], check_exact=True)
    assert full[2] and bare[2] == [] and full[3] == bare[3]


def _alike_by_definition(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """The reference: the same length, index, columns and dtypes, and DataFrame.equals."""
    return (len(a) == len(b) and a.index.equals(b.index) and list(a.columns) == list(b.columns)
            and list(a.dtypes) == list(b.dtypes) and a.equals(b))


def test_a_rank_read_again_shares_a_table_only_where_it_is_alike(job8_analysis: Analysis) -> None:
    """loader._alike (each column's values compared as DataFrame.equals compares blocks) says what the frames' own
    comparison says: on every table of a rank against the same rows laid out in other blocks (a row slice of the joined
    table against a frame of the rank's own), and against each of them changed by one value, one NaN, one dtype, the
    columns in another order, another index."""
    from msdiag.ingest.loader import _alike

    rd = job8_analysis.capture.ranks[3]
    cases = 0
    for name in rd.tables:
        held = rd.tables[name]  # (a row slice of the joined table where the rank holds Rows of it)
        own = pd.DataFrame({c: held[c].copy() for c in held.columns})  # the same rows, blocks of its own
        others = [own, held.copy()]
        if len(held) and held.shape[1]:
            changed = own.copy()
            col = next((c for c in held.columns if own[c].dtype.kind == "f"), None)
            if col is not None:
                changed.loc[0, col] = changed.loc[0, col] + 1.0 if pd.notna(changed.loc[0, col]) else 1.0
                nan = own.copy()
                nan.loc[len(nan) - 1, col] = np.nan
                others += [changed, nan]
            others.append(own[list(reversed(held.columns))])
            others.append(own.set_axis(np.arange(1, len(own) + 1)))
            ints = next((c for c in held.columns if str(own[c].dtype) == "Int64"), None)
            if ints is not None:
                others.append(own.assign(**{ints: own[ints].astype("float64")}))
        for other in others:
            assert _alike(held, other) == _alike_by_definition(held, other), (name, other.dtypes)
            assert _alike(other, held) == _alike_by_definition(other, held)
            cases += 1
    assert cases > 40 and _alike(rd.tables["kernels"], rd.tables["kernels"].copy())
