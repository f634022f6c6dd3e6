"""Collective instances matched across captured ranks (metrics/collectives.py): arrivals, release, the late
arriver, capture coverage and the wait for ranks outside the capture, on the real corpus.

Every expected figure is read by hand from the raw files named in each test's comment.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from msdiag.analysis import Analysis
from msdiag.contract import build

LEVEL0 = "ascend/torchnpu-2rank-level0"
LEVEL1 = "ascend/torchnpu-2rank-level1"
LEVEL1_DB = "ascend/torchnpu-2rank-level1-db"
P2P = "ascend/torchnpu-2rank-p2p-2024"
CPU_MSRUN = "mindspore-cpu/msrun_dp2_pynative"
LEGACY_HCCL = "mindspore-legacy/hccl-one-allreduce"


@pytest.fixture(scope="module")
def analyses(analysed: Callable[[str], Analysis]) -> dict[str, Analysis]:
    """The session's shared analyses of the captures (tests/conftest.py): read only."""
    return {c: analysed(c) for c in (LEVEL0, LEVEL1, LEVEL1_DB, P2P, CPU_MSRUN, LEGACY_HCCL)}


def _m(a: Analysis, mid: str) -> object:
    return a.metrics[mid].value


def test_level1_rank1_arrives_late_and_both_wait_for_ranks_outside(analyses: dict[str, Analysis]) -> None:
    # rank{0,1}_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json, step50 / collective /
    # hcom_allReduce__586_0_1@17522688603477080586, Communication Time Info:
    #   rank 0: Start 1736408883732241.5 us, Elapse 79.08952 ms, Transit 0.23918 ms
    #   rank 1: Start 1736408883737849.2 us, Elapse 73.47517 ms, Transit 0.24522 ms
    # arrival offset of rank 1 = 737849.2 - 732241.5 = 5607.7 us = 5.608 ms;
    # release (end less own transit): rank 0 732241.5 + 79089.52 - 239.18 = 811091.84,
    # rank 1 737849.2 + 73475.17 - 245.22 = 811079.14 -> min 811079.14, 0.013 ms apart (released together);
    # after the last captured arrival: 811079.14 - 737849.2 = 73229.9 us = 73.23 ms.
    doc = build(analyses[LEVEL1])
    first = doc["collectives"][0]
    assert first["op"] == "hcom_allReduce__586_0_1" and first["step"] == 50
    assert first["ranks"] == [0, 1] and first["last_arriver"] == 1
    assert first["arrival_offset_ms"] == pytest.approx([0.0, 5.608], abs=0.001)
    assert first["release_after_last_ms"] == pytest.approx(73.23, abs=0.01)
    assert first["release_spread_ms"] < 0.05
    assert first["wait_ms"] == pytest.approx([5.608 + 73.23, 73.23], abs=0.01)
    # the other three AllReduces of step 50: rank 0 starts 6-15 us after rank 1, so step 50's late
    # arrival is 5.608 + 0.006 + 0.008 + 0.015 = 5.637 ms and rank 1 is the one waited for most
    assert _m(analyses[LEVEL1], "late_rank") == 1
    assert _m(analyses[LEVEL1], "late_arrival_ms_per_step") == pytest.approx(5.637, abs=0.002)
    # slow_rank keeps its vote: one late instance out of four is not a slow rank
    assert _m(analyses[LEVEL1], "slow_rank") is None


def test_level1_coverage_from_the_matrix_links(analyses: dict[str, Analysis]) -> None:
    # communication_matrix.json of rank 0 lists links 0-0 .. 0-7, rank 1's 1-0 .. 1-7 (one group):
    # 8 known ranks, 2 captured -> coverage 0.25, ranks 2-7 not captured.
    a = analyses[LEVEL1]
    assert _m(a, "capture_rank_coverage") == 0.25
    assert _m(a, "ranks_not_captured") == "2-7"
    # per step (one: step 50) the four AllReduces' releases after the last captured arrival:
    # 73.23 + 0.972 + 0.235 + 22.05 (communication.json starts, elapses and transits as above) = 96.49 ms
    assert _m(a, "uncaptured_wait_ms_per_step") == pytest.approx(96.49, abs=0.02)
    fired = {f["rule_id"]: f for f in build(a)["findings"]}
    assert "capture-partial" in fired and "2-7" in fired["capture-partial"]["message"]
    assert "comm-wait-uncaptured" in fired and "96.5 ms per step" in fired["comm-wait-uncaptured"]["message"]


def test_level0_trace_view_arrivals_without_communication_json(analyses: dict[str, Analysis]) -> None:
    # rank{0,1}_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json, "hcom_allReduce__868_0_1":
    #   rank 0 ts 1736405443909176.934 dur 72994.438; rank 1 ts 1736405443926096.250 dur 56083.721
    # rank 1 arrives 926096.250 - 909176.934 = 16919.3 us later (about 15% of the 108 ms step); the other
    # three AllReduces differ by 5-10 us: 16.919 + 0.008 + 0.005 + 0.010 = 16.942 ms in step 50.
    # No transit time (Level0 writes no communication.json): release = the earliest end,
    # 909176.934 + 72994.438 = 982171.372, 56075.1 us after rank 1 arrived.
    a = analyses[LEVEL0]
    first = build(a)["collectives"][0]
    assert first["arrival_offset_ms"] == pytest.approx([0.0, 16.919], abs=0.001)
    assert first["release_after_last_ms"] == pytest.approx(56.075, abs=0.002)
    assert first["source"] == "kernels"
    assert _m(a, "late_rank") == 1
    assert _m(a, "late_arrival_ms_per_step") == pytest.approx(16.942, abs=0.002)
    # Level0 records no rank list (no communication_matrix.json, profiler_metadata.json has only
    # ENV_VARIABLES): coverage unknown, so no wait is blamed on ranks outside
    for mid in ("capture_rank_coverage", "uncaptured_wait_ms_per_step"):
        assert _m(a, mid) is None and "no rank list" in str(a.metrics[mid].reason)


def test_level1_db_gives_the_same_answers_from_the_sqlite_tables(analyses: dict[str, Analysis]) -> None:
    # analysis.db CommAnalyzerTime, hcom_allReduce__210_0_1: rank 0 start 1.73641057643165e+15 (a REAL:
    # rounded to 10 us), elapse 88.75099 ms, transit 0.22856; rank 1 start 1736410576435143, elapse
    # 85.23384, transit 0.24955. Rank 1 arrives about 3.50 ms later (COMMUNICATION_OP's exact startNs give
    # 3.533: the REAL start costs up to 0.04 ms); release after it: 435143 + 85233.84 - 249.55 - 435143 =
    # 84984.3 us. CommAnalyzerMatrix names ranks 0-7: coverage 2 / 8.
    a = analyses[LEVEL1_DB]
    first = build(a)["collectives"][0]
    assert first["last_arriver"] == 1
    assert first["arrival_offset_ms"][1] == pytest.approx(3.533, abs=0.05)
    assert first["release_after_last_ms"] == pytest.approx(84.984, abs=0.05)
    assert _m(a, "late_rank") == 1
    assert _m(a, "capture_rank_coverage") == 0.25 and _m(a, "ranks_not_captured") == "2-7"


def test_p2p_2024_group_members_from_the_links(analyses: dict[str, Analysis]) -> None:
    # communication_matrix.json: rank 0's links reach ranks 0-8, rank 1's 0, 1 and 2-7, 9: 10 ranks known
    # (group 9350434047717501483 links 0-7; the two-rank groups 0-1 are fully captured).
    a = analyses[P2P]
    assert _m(a, "capture_rank_coverage") == 0.2
    assert _m(a, "ranks_not_captured") == "2-9"
    # hcom_broadcast__483_0: rank 1 arrives 3.693 ms before rank 0 (communication.json Start Timestamp)
    first = build(a)["collectives"][0]
    assert first["op"] == "hcom_broadcast__483_0" and first["last_arriver"] == 0
    assert first["arrival_offset_ms"] == pytest.approx([3.693, 0.0], abs=0.002)


def test_cpu_host_collectives_match_by_name_and_order(analyses: dict[str, Analysis]) -> None:
    # MindSpore CPU msrun (2 processes, one host clock): host AllReduce ops Default/AllReduce-opN, steps
    # from the repeating iterations. The first (op0) waits 2.6 s on rank 0 for rank 1's start-up; no rank
    # list is recorded (no HCCL analysis on CPU), so coverage is unknown.
    a = analyses[CPU_MSRUN]
    rows = build(a)["collectives"]
    assert rows and all(r["source"] == "kernels" and r["ranks"] == [0, 1] for r in rows)
    assert rows[0]["op"] == "Default/AllReduce-op0" and rows[0]["last_arriver"] == 1
    assert rows[0]["late_ms"] > 2000
    assert _m(a, "late_rank") == 1
    assert _m(a, "capture_rank_coverage") is None


def test_legacy_hccl_links_are_not_job_ranks(analyses: dict[str, Analysis]) -> None:
    # hccl_raw_6.csv (rank 6) lists links "1-0" and "0-0": ranks inside the group, not job ranks, so
    # they name no missing rank; one rank: no arrival to compare.
    a = analyses[LEGACY_HCCL]
    assert _m(a, "capture_rank_coverage") is None
    assert _m(a, "late_rank") is None and "single rank" in str(a.metrics["late_rank"].reason)
