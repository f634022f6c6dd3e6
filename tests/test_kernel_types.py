"""Op types and the AI Core unit bounding each (metrics/kernel_types.py), l2_cache.csv and
api_statistic.csv (ingest/ascend_stats.py), the files listed as unused, and the JSON ``kernel_types``.

Expected values are derived by hand from the raw files; each comment says how.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msdiag.contract import build
from msdiag.ingest import ascend_csv, ascend_stats
from msdiag.metrics import kernel_types as kt
from msdiag.model import RankData

PIPE_FILE = "ascend/single-files/kernel_details_arith_fops.csv"  # despite its name: PipeUtilization columns
LEVEL1_OUT = "ascend/torchnpu-2rank-level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


def _types_of(path: Path) -> pd.DataFrame:
    """type_table of one kernel_details.csv, read as rank 0."""
    rd = RankData(rank=0, family="ascend_pt", path=str(path.parent))
    rd.tables["kernels"] = ascend_csv.read_kernel_details(path, 0, [])
    return kt.type_table(rd)


@pytest.fixture(scope="module")
def pipe_types(corpus: Path) -> pd.DataFrame:
    return _types_of(corpus / PIPE_FILE)


def test_reader_keeps_every_pipeutilization_ratio(corpus: Path) -> None:
    # row 13 of the file (FlashAttentionScore, MIX_AIC, first of its kind): aic_fixpipe_ratio 0.590,
    # aiv_time(us) 365.782, aiv_mte3_ratio 0.195, aiv_scalar_ratio 0.377, aic_mte1_ratio 0.296
    k = ascend_csv.read_kernel_details(corpus / PIPE_FILE, 0, [])
    fa = k[k["type"] == "FlashAttentionScore"].iloc[0]
    assert fa["aic_fixpipe_ratio"] == pytest.approx(0.590)
    assert fa["aiv_time_us"] == pytest.approx(365.782)
    assert fa["aiv_mte3_ratio"] == pytest.approx(0.195)
    assert fa["aiv_scalar_ratio"] == pytest.approx(0.377)
    assert fa["aic_mte1_ratio"] == pytest.approx(0.296)


def test_vector_kernels_bound_by_mte2_weighted_by_duration(pipe_types: pd.DataFrame) -> None:
    # Add: 8 AI_VECTOR_CORE kernels (aicore_time 0: their aic_* zeros are no measurement and are left out).
    # Durations 26.780 31.201 27.021 25.080 1.380 1.460 1.500 1.580 (sum 116.002); aiv_mte2_ratio
    # .842 .874 .840 .837 .204 .229 .230 .181 -> sum(d x r) = 22.54876 + 27.269674 + 22.69764 + 20.99196
    # + .28152 + .33434 + .345 + .28598 = 94.754874; / 116.002 = 0.81684 >= 0.8: saturated MTE2
    add = pipe_types.loc["Add"]
    assert add["launches"] == 8
    assert add["time_us"] == pytest.approx(116.002)
    assert add["mte2"] == pytest.approx(94.754874 / 116.002, abs=1e-6)
    assert add["bound"] == "mte2" and pd.isna(add["bound_note"])  # saturated: no note
    assert pd.isna(add["cube"])  # no cube core ran: no cube ratio, not 0


def test_weak_maximum_is_flagged_not_hidden(pipe_types: pd.DataFrame) -> None:
    # FlashAttentionScoreGrad (MIX_AIC, 4 kernels): durations 762.215 763.215 757.095 755.915 (sum 3038.44);
    # aic_scalar_ratio .784 .786 .782 .772 -> (597.57656 + 599.88699 + 592.04829 + 583.56638) / 3038.44
    # = 0.78101, the largest unit ratio (aic_mte2 ~0.52, aiv_vec ~0.42): bound "scalar", below 0.8: flagged
    fag = pipe_types.loc["FlashAttentionScoreGrad"]
    assert fag["bound"] == "scalar"
    assert fag["bound_ratio"] == pytest.approx(2373.07822 / 3038.44, abs=1e-6)
    assert fag["bound_note"] == kt.WEAK_BOUND


def test_unit_ratio_is_the_larger_side(pipe_types: pd.DataFrame) -> None:
    # FlashAttentionScore (5 MIX_AIC kernels): aic_mte2_ratio .872 .869 .864 .865 .465 and aiv_mte2_ratio
    # .324 .303 .300 .300 .300: the MTE2 unit's ratio is the cube side's, duration-weighted:
    # durations 410.188 406.128 407.008 405.228 405.228 (sum 2033.78) -> (357.683936 + 352.925232 +
    # 351.654912 + 350.52222 + 188.43102) / 2033.78 = 0.787311
    fa = pipe_types.loc["FlashAttentionScore"]
    assert fa["mte2"] == pytest.approx(1601.21732 / 2033.78, abs=1e-6)
    assert fa["bound"] == "scalar"  # aic_scalar_ratio ~0.962 beats it


def test_no_pipe_columns_gives_null_bound_with_reason(analysed: Callable[[str], Any]) -> None:
    # torchnpu-2rank-level0: aic_metrics ACL_AICORE_NONE, kernel_details.csv has no PMU column at all
    a = analysed("level0")
    rep = build(a)
    assert rep["kernel_types"] and all(r["bound"] is None for r in rep["kernel_types"])
    assert rep["kernel_types_absent"]["bound"] == kt.NO_PIPES
    assert a.metrics["mte2_bound_share"].value is None
    assert a.metrics["mte2_bound_share"].reason == kt.NO_PIPES


def test_reason_names_the_metrics_group_recorded_instead(analysed: Callable[[str], Any]) -> None:
    # torchnpu-2rank-p2p-2024: profiler_info's _aic_metrics is MemoryL0 (kernel_details.csv has aic_l0a_read_bw
    # and the like, no *_ratio column); MindSpore on CPU: host ops, no AI Core at all
    why = analysed("p2p").metrics["mte2_bound_share"].reason or ""
    assert why.startswith("this capture recorded aic_metrics MemoryL0, not PipeUtilization")
    assert analysed("cpu-graph").metrics["mte2_bound_share"].reason == kt.HOST_OPS


def test_level1_kernel_types_over_both_ranks(analysed: Callable[[str], Any]) -> None:
    # ForeachAddList, 3 kernels per rank (AI_VECTOR_CORE): durations 628.313 706.614 624.152 (rank 0),
    # 629.913 697.394 626.832 (rank 1): 3913.218 us; aiv_mte2_ratio .966 .987 .985 / .968 .984 .985 ->
    # 3832.589096 / 3913.218 = 0.979396. Compute time of both ranks (every non-HCCL row's Duration(us),
    # 374 rows) = 17752.012 us: share 3913.218 / 17752.012 = 0.22044
    rep = build(analysed("level1"))
    rows = {r["type"]: r for r in rep["kernel_types"]}
    fal = rows["ForeachAddList"]
    assert rep["kernel_types"][0]["type"] == "ForeachAddList"  # the largest time first
    assert fal["launches"] == 6
    assert fal["time_us"] == pytest.approx(3913.218)
    assert fal["share"] == pytest.approx(3913.218 / 17752.012, abs=1e-6)
    assert fal["bound"] == "mte2" and fal["bound_note"] is None
    assert fal["ratios"]["mte2"] == pytest.approx(3832.589096 / 3913.218, abs=1e-6)
    assert fal["ratios"]["cube"] is None
    # the vector core's MTE2 column is the unit's ratio; its cube-core column was never measured (aicore_time 0)
    assert fal["ratio_columns"]["aiv_mte2_ratio"] == fal["ratios"]["mte2"]
    assert fal["ratio_columns"]["aic_mte2_ratio"] is None
    # l2_cache.csv writes Hit Rate N/A on every row (Atlas A2): null, with the reason once
    assert fal["l2_hit_rate"] is None and "N/A" in rep["kernel_types_absent"]["l2_hit_rate"]
    assert sum(r["launches"] for r in rep["kernel_types"]) == 374


def test_mte2_bound_share_on_level1(analysed: Callable[[str], Any]) -> None:
    # op types bound by a saturated MTE2 with cube ratio < 0.5 (max_cube): ForeachAddList (mte2 0.979, no
    # cube), MatMulV2 (mte2 0.888, cube 0.189), ForeachMulScalar (mte2 0.914, no cube) -> the sum of their
    # shares of compute time; Conv2D is MTE2-bound too but its cube ratio (0.69) is not low.
    a = analysed("level1")
    rows = {r["type"]: r for r in build(a)["kernel_types"]}
    expect = sum(rows[t]["time_us"] for t in ("ForeachAddList", "MatMulV2", "ForeachMulScalar")) / 17752.012
    assert rows["Conv2D"]["bound"] == "mte2" and rows["Conv2D"]["ratios"]["cube"] > 0.5
    assert a.metrics["mte2_bound_share"].value == pytest.approx(expect, abs=1e-6)
    assert a.metrics["mte2_bound_types"].value.startswith("ForeachAddList 22% (MTE2 0.98, vector core only)")
    # compute is 6.6% of the step there: the rule stays quiet
    assert not any(f["rule_id"] == "kernel-memory-bound" for f in a.findings)


@pytest.mark.parametrize("name", ["level1", "p2p"])
def test_per_rank_bound_shares_in_one_pass_are_each_ranks_own(analysed: Callable[[str], Any], name: str) -> None:
    """mte2_bound_share's per-rank values read every rank's bound shares from one grouping of the capture's kernels
    by rank and type (bound_shares_by_rank): each rank's frame is, to the bit, what its own type table gives
    (time, share, ratios, bound), largest time first. level1 has PipeUtilization ratios; p2p's kernels have none
    (every ratio and bound null)."""
    cap = analysed(name).capture
    by_rank = kt.bound_shares_by_rank(cap)
    assert sorted(by_rank) == [0, 1]
    for rd in cap.ranks:
        own = kt.type_table(rd, with_flops=False)
        pd.testing.assert_frame_equal(by_rank[rd.rank], own[list(by_rank[rd.rank].columns)], check_exact=True)
        pd.testing.assert_frame_equal(by_rank[rd.rank], kt.bound_shares(rd), check_exact=True)
    # rank 1's MTE2-bound share of its own compute time is the metric's per-rank value
    a = analysed(name)
    per = a.metrics["mte2_bound_share"].per_rank
    if name == "level1":
        rt = by_rank[1]
        max_cube = a.options.param("kernel-memory-bound.max_cube")
        assert per[1] == float(rt.loc[kt._mte2_bound(rt, max_cube), "share"].sum())
        assert 0 < per[1] < 1


def test_l2_cache_and_api_statistic_readers(corpus: Path) -> None:
    # l2_cache.csv of level1 rank 0: 180 lines = header + 179 rows; first row "2,11052,N/A,0.23264,trans_TransData_1"
    l2 = ascend_stats.read_l2_cache(corpus / LEVEL1_OUT / "l2_cache.csv", 0)
    assert len(l2) == 179
    first = l2.iloc[0]
    assert (first["stream"], first["task_id"], first["name"]) == (2, 11052, "trans_TransData_1")
    assert pd.isna(first["hit_rate"]) and first["victim_rate"] == pytest.approx(0.23264)
    # api_statistic.csv: 57 rows; the largest Time(us) is aclrtSynchronizeStreamWithTimeout (acl) 97887.24 us, 7 calls
    api = ascend_stats.read_api_statistic(corpus / LEVEL1_OUT / "api_statistic.csv", 0)
    assert len(api) == 57
    top = api.loc[api["total_us"].idxmax()]
    assert (top["api"], top["level"], top["count"]) == ("aclrtSynchronizeStreamWithTimeout", "acl", 7)
    assert top["total_us"] == pytest.approx(97887.24)


def test_host_api_top_and_sources(analysed: Callable[[str], Any]) -> None:
    # rank 0's aclrtSynchronizeStreamWithTimeout: 97887.24 us over 7 calls, the largest of both ranks' files
    a = analysed("level1")
    assert a.metrics["host_api_top"].value == "aclrtSynchronizeStreamWithTimeout (acl): 97.9 ms, 7 calls (rank 0)"
    src = {(s.rank, s.name): s for s in a.capture.sources}
    assert src[(0, "l2_cache.csv")].status == "present" and src[(0, "l2_cache.csv")].rows == 179
    assert src[(0, "api_statistic.csv")].status == "present"
    # operator_details.csv is in the folder and not read: listed as unused with the reason
    od = src[(0, "operator_details.csv")]
    assert od.status == "unused" and od.path and "kernel_details.csv" in (od.reason or "")


def test_level0_api_statistic_absent_with_level_reason(analysed: Callable[[str], Any]) -> None:
    # torchnpu-2rank-level0 holds no api_statistic.csv; profiler_info says _profiler_level Level0
    src = {(s.rank, s.name): s for s in analysed("level0").capture.sources}
    s = src[(0, "api_statistic.csv")]
    assert s.status == "absent" and "Level0" in (s.reason or "")
    assert analysed("level0").metrics["host_api_top"].value is None


def test_html_kernel_table_has_bound_column(analysed: Callable[[str], Any]) -> None:
    from msdiag.report import charts

    ch = charts.kernel_types(analysed("level1"))
    assert ("bound", "bound by") in ch.table_columns
    rows = {r["type"]: r for r in ch.table}
    # ForeachAddList: mte2 0.979 (see test_level1_kernel_types_over_both_ranks); TransData: mte2 0.345, weak
    assert rows["ForeachAddList"]["bound"] == "mte2 0.98"
    assert rows["TransData"]["bound"] == "mte2 0.34, none saturated"


def test_sqlite_export_carries_the_same_ratios(analysed: Callable[[str], Any]) -> None:
    # torchnpu-2rank-level1-db: TASK_PMU_INFO 'aiv_mte2_ratio' of the ForeachAddList tasks (COMPUTE_TASK_INFO
    # opType), with TASK (endNs - startNs) / 1000 as the duration:
    # rank 0: 628.032 us 0.96965384, 695.074 us 0.98559060, 624.512 us 0.98542650
    # rank 1: 630.772 us 0.96612841, 698.074 us 0.98564185, 623.392 us 0.98354626
    d = [628.032, 695.074, 624.512, 630.772, 698.074, 623.392]
    r = [0.96965384, 0.98559060, 0.98542650, 0.96612841, 0.98564185, 0.98354626]
    rows = {x["type"]: x for x in build(analysed("level1-db"))["kernel_types"]}
    fal = rows["ForeachAddList"]
    assert fal["time_us"] == pytest.approx(sum(d))
    assert fal["ratios"]["mte2"] == pytest.approx(sum(a * b for a, b in zip(d, r)) / sum(d), abs=1e-6)
    assert fal["bound"] == "mte2"


def test_side_ran_is_busy_time_or_a_positive_ratio_sum_even_on_impossible_values() -> None:
    """The module doc's rule, checked on values no profiler writes but a damaged file can hold (negative,
    infinite, huge and missing ratios and busy times): a side ran when its busy time is > 0, or, without a busy
    time, when the row sum of that side's ratios (missing as 0) is > 0; infinities stay infinite."""
    import numpy as np

    rng = np.random.default_rng(20261201)
    n = 4000
    k = pd.DataFrame({c: rng.choice([np.nan, -0.6, 0.0, 0.3, 0.5, 1e308, np.inf, -np.inf], n) for c in kt.RATIO_COLUMNS})
    k["aicore_time_us"] = rng.choice([np.nan, 0.0, 1.0, -1.0], n)
    k["aiv_time_us"] = rng.choice([np.nan, 0.0, 2.0, np.inf], n)
    for side, busy in kt.SIDE_TIME.items():
        cols = [c for c, (_, s) in kt.RATIO_COLUMNS.items() if s == side]
        with np.errstate(over="ignore", invalid="ignore"):
            want = (k[busy] > 0) | (k[busy].isna() & (k[cols].fillna(0.0).sum(axis=1) > 0))
            got = kt._side_ran(k[busy].to_numpy(dtype=float), [k[c].to_numpy(dtype=float) for c in cols], n)
        assert got.tolist() == want.tolist(), side


def test_per_rank_mte2_share_on_arrays_orders_ties_as_the_rank_frame() -> None:
    """mte2_bound_share's per-rank values are summed on arrays of the (rank, type) frame, each rank's rows in the
    order of its own frame (time, largest first; ties in their order), as the frame's share column sums them.
    Rank 0: AI_VECTOR_CORE kernels, aiv time = duration: types A (10 us, MTE2 0.9) and B (10 us, MTE2 0.95) tie,
    C (10 us, MTE2 0.85), D (30 us, vector 0.9, MTE2 0.1): 60 us, so A, B, C are 1/6 each, all bound by a saturated
    MTE2 (no cube ratio: below max_cube), D by the vector unit; the share is 1/6 + 1/6 + 1/6 summed in that order
    = 0.5 (0.16666666666666666 + 0.16666666666666666 = 0.3333333333333333, + 0.16666666666666666 = 0.5).
    Rank 1's kernels carry no ratio (no bound: no value); rank 2 has no compute kernel (no value)."""
    from msdiag.analysis import resolve_rules
    from msdiag.metrics.registry import Context
    from msdiag.model import KERNELS, STEPS, Capture
    from msdiag.options import Options

    def kernels(rank: int, rows: list[tuple[str, str, float, float, float]]) -> pd.DataFrame:
        return KERNELS.frame({
            "rank": [rank] * len(rows), "kind": [r[0] for r in rows], "type": [r[1] for r in rows],
            "name": [r[1] for r in rows], "core": ["AI_VECTOR_CORE"] * len(rows), "start_us": [float(i) for i in range(len(rows))],
            "dur_us": [r[2] for r in rows], "aiv_time_us": [r[2] for r in rows], "aicore_time_us": [0.0] * len(rows),
            "aiv_mte2_ratio": [r[3] for r in rows], "aiv_vec_ratio": [r[4] for r in rows],
        })  # fmt: skip

    nan = float("nan")
    ranks = []
    for r, rows in enumerate([
        [("compute", "D", 30.0, 0.1, 0.9), ("compute", "A", 10.0, 0.9, 0.1), ("compute", "B", 10.0, 0.95, 0.1),
         ("compute", "C", 10.0, 0.85, 0.1)],
        [("compute", "A", 5.0, nan, nan)],
        [("communication", "hcom_allReduce_", 5.0, nan, nan)],
    ]):  # fmt: skip
        rd = RankData(rank=r, family="ascend_pt", path=f"/constructed/rank{r}")
        rd.tables["kernels"] = kernels(r, rows)
        ranks.append(rd)
    cap = Capture(path="/constructed", ranks=ranks)
    _, opts = resolve_rules(Options())
    ctx = Context(capture=cap, steps=STEPS.empty(), options=opts)
    v = kt._mte2_share(ctx, kt.cached_table(ctx))
    assert list(v.per_rank.items()) == [(0, 0.5)]
    rt = kt.bound_shares_by_rank(cap)[0]  # the rank's own frame gives the same figure, to the bit
    assert list(rt.index) == ["D", "A", "B", "C"]
    assert v.per_rank[0] == float(rt.loc[kt._mte2_bound(rt, opts.param("kernel-memory-bound.max_cube")), "share"].sum())


_few = st.sampled_from([0.0, 1.0, 2.5, 2.5, 7.0, 1e6, float("nan"), float("inf"), -1.0])


@settings(max_examples=400)
@given(st.lists(_few | st.floats(allow_nan=True), max_size=60))
def test_descending_positions_are_sort_values(values: list[float]) -> None:
    # kernels._descending orders a rank's type totals as pd.Series(v).sort_values(ascending=False) does (the JSON's
    # top_kernels order): ties, NaN and infinities included, values drawn from a few so that ties are common
    from msdiag.metrics import kernels

    v = np.array(values, dtype=float)
    want = pd.Series(v).sort_values(ascending=False).index.to_numpy()
    assert kernels._descending(v).tolist() == want.tolist()
