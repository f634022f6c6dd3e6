"""Host causes while the device waits (metrics/causes.py), the verdict's cause (rules/causes.py) and the text
headline, on the real corpus. Expected figures are read by hand from the raw files named in the comments.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from msdiag.analysis import Analysis
from msdiag.contract import build
from msdiag.report.text import render

LEVEL0 = "ascend/torchnpu-2rank-level0"
LEVEL1 = "ascend/torchnpu-2rank-level1"
LEVEL1_DB = "ascend/torchnpu-2rank-level1-db"
P2P = "ascend/torchnpu-2rank-p2p-2024"
CPU_MSRUN = "mindspore-cpu/msrun_dp2_pynative"


@pytest.fixture(scope="module")
def reports(corpus: Path, analysed: Callable[[str], Analysis]) -> dict[str, dict[str, Any]]:
    return {c: build(analysed(c)) for c in (LEVEL0, LEVEL1, LEVEL1_DB, P2P, CPU_MSRUN)}


def test_level1_progress_print_syncs_the_host(reports: dict[str, dict[str, Any]]) -> None:
    # rank{0,1}_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json, thread = pid of the Python process:
    #   rank 0: "main.py(509): display" ts 749382.32 dur 93273.82, inside it (via main.py(511): <listcomp>,
    #   main.py(483): __str__) "aten::item" ts 749465.43 dur 91951.31 (holding aclrtSynchronizeStreamWithTimeout);
    #   rank 1: display dur 87461.27, aten::item dur 86111.70 (times: 1736408883xxxxxx us).
    # Both sit inside ProfilerStep#50. The innermost user frame is __str__ (line 483), called from display.
    r = reports[LEVEL1]
    m = r["metrics"]
    assert str(m["host_sync_site"]).startswith("main.py(483): __str__")
    assert "main.py(509): display" in str(m["host_sync_site"])
    # rank 0 alone blocks 91.95 ms at that site, plus smaller syncs elsewhere in the step
    assert m["host_sync_ms_per_step"] >= 91.95
    sync = next(c for c in r["causes"] if c["id"] == "host-sync")
    assert sync["ranks"] == [0, 1] and sync["category"] == "host"
    top = sync["call_sites"][0]
    # mean over the two ranks of their syncs under __str__: (91.95 + 86.11) / 2 = 89.03, plus a few
    # sub-ms aten::item calls under the same frame
    assert top["site"] == "main.py(483): __str__" and 89.0 <= top["ms_per_step"] <= 90.5
    # rank 0's aten::item (749465 .. 841417) overlaps hcom_allReduce__586_0_1 (732241.5 .. 811331,
    # communication.json start + elapse) for 61.9 ms and a later AllReduce: a symptom of the collective's wait
    assert m["host_sync_comm_share"] > 0.5
    fired = {f["rule_id"]: f for f in r["findings"]}
    assert "main.py(483): __str__" in fired["host-sync-in-step"]["message"]
    assert any("symptom" in s["action"] for s in fired["host-sync-in-step"]["suggestions"])


def test_the_same_call_site_from_the_sqlite_export(reports: dict[str, dict[str, Any]]) -> None:
    # ascend_pytorch_profiler_N.db holds the same job's python_function frames (a different run).
    m = reports[LEVEL1_DB]["metrics"]
    assert str(m["host_sync_site"]).startswith("main.py(483): __str__ < main.py(511): <listcomp> < main.py(509)")


@pytest.mark.parametrize(
    "capture,cause,words",
    [
        # 96.49 ms per step after the last captured arrival (tests/test_collectives.py), ranks 2-7 missing
        (LEVEL1, "ranks-not-captured", "96 ms per step waiting for ranks not in this capture (2 of 8 captured)"),
        (LEVEL1_DB, "ranks-not-captured", "(2 of 8 captured)"),
        # no rank list at Level0: rank 1's 16.9 ms late arrival (trace_view HCCL op starts) is the cause
        (LEVEL0, "late-rank", "17 ms per step the other ranks wait for rank 1"),
        # group 9350434047717501483 links ranks 0-7, the capture 0 and 1, 10 ranks named in all
        (P2P, "ranks-not-captured", "(2 of 10 captured)"),
    ],
)
def test_verdict_names_its_cause(reports: dict[str, dict[str, Any]], capture: str, cause: str, words: str) -> None:
    v = reports[capture]["verdict"]
    assert v["bottleneck"] == "communication"
    assert v["cause"]["id"] == cause and words in v["cause"]["sentence"]


def test_cpu_host_verdict_without_a_measured_cause(reports: dict[str, dict[str, Any]]) -> None:
    # MindSpore CPU writes no Python frames or synchronisation events on its host timeline: the host verdict
    # has no measured cause of its category (the late AllReduce arrivals are communication's)
    v = reports[CPU_MSRUN]["verdict"]
    assert v["bottleneck"] == "host" and v["cause"] is None
    assert reports[CPU_MSRUN]["metrics"]["late_rank"] == 1
    # ... and says what it cannot tell: the capture has no host-side events to attribute the idle time to
    assert v["cause_unknown"].startswith("no cause measured: the capture records no host-side events")
    assert "cause: no cause measured" in render(reports[CPU_MSRUN])
    assert "cause_unknown" not in reports[LEVEL1]["verdict"]  # a measured cause needs no excuse


def test_text_headline_reads_the_cause(reports: dict[str, dict[str, Any]]) -> None:
    text = render(reports[LEVEL1])
    assert "COMMUNICATION 74%: 96 ms per step waiting for ranks not in this capture (2 of 8 captured)" in text


def test_why_the_device_waits_section(reports: dict[str, dict[str, Any]]) -> None:
    # the text report lists the late arrival (5.6 ms, rank 1), the wait for ranks 2-7 and the host
    # synchronisation's call sites (see the tests above for the figures)
    text = render(reports[LEVEL1])
    why = text.split("Why the device waits:")[1].split("Findings")[0]
    assert "late arrival: 5.6 ms per step, mostly rank 1" in why
    assert "waiting for ranks not captured (2-7): 96.5 ms per step" in why
    assert "main.py(483): __str__ < main.py(511): <listcomp> < main.py(509): display" in why


def test_html_banner_carries_the_cause(rendered: Callable[[str], str]) -> None:
    # the HTML verdict banner leads with the same cause sentence as the text headline (the page of the session's
    # analysis: html.render of it and its report object, drawn once per session)
    page = rendered(LEVEL1)
    banner = page.split('<div class="verdict"')[1].split("</div>\n  <div class=\"tiles\">")[0]
    assert "96 ms per step waiting for ranks not in this capture (2 of 8 captured)" in banner



def test_host_arrays_choose_as_pandas_did() -> None:
    # causes._Host works on arrays where the per-rank code sorted and chose with pandas (the rule it replaced,
    # written out below): the outermost events must come in the order of pandas' sort on (thread, start,
    # longest first; stable, NaN last), and the events given a call site must be those
    # nlargest(MAX_RESOLVED, "dur_us") picks (the first of equal durations at the cut, never a NaN). A host
    # lane built for those edges: 2 * MAX_RESOLVED + 10 syncs on two threads, 10 us apart, durations
    # 1..7 us repeating (many ties at the cut; none inside another), two NaN durations, a NaN start, and one
    # event inside another (index 150 holds 151: it ends at 1500 + 20, 151 at 1510 + 5) that is not outermost.
    import numpy as np
    import pandas as pd

    from msdiag.metrics.causes import MAX_RESOLVED, SYNC_PATTERN, _Host, _Names

    n = 2 * MAX_RESOLVED + 10
    start = np.arange(n, dtype=float) * 10.0
    start[5] = np.nan
    dur = (np.arange(n) % 7 + 1).astype(float)
    dur[[3, 40]] = np.nan
    dur[50] = 20.0
    tl = pd.DataFrame({
        "lane": "host", "name": "aten::item", "start_us": start, "dur_us": dur, "track": "Python/Thread 7",
    }, index=pd.RangeIndex(100, 100 + n))  # fmt: skip
    tl.loc[tl.index[1::2], "track"] = "CANN/Thread 8"
    tl.loc[151, "track"] = "CANN/Thread 7"  # thread 7, inside 150
    host = _Host(tl, _Names())
    ev = pd.DataFrame({"start_us": start, "dur_us": dur, "thread": host.thread}, index=tl.index)

    # the rule replaced: sort with pandas, keep what no earlier event of the thread covers
    srt = ev.sort_values(["thread", "start_us", "dur_us"], ascending=[True, True, False], kind="stable")
    end, keep, reach, prev = (srt["start_us"] + srt["dur_us"]).to_numpy(), [], -np.inf, None
    for t, e in zip(srt["thread"], end):
        reach = -np.inf if t != prev else reach
        prev = t
        keep.append(e > reach)
        reach = max(reach, e)
    expected = srt[keep]
    assert 151 not in expected.index and 150 in expected.index

    kept = host.outermost(host.events(SYNC_PATTERN))
    assert list(host.index[kept]) == list(expected.index)
    chosen = set(host.index[kept[host.resolved(kept)]])
    assert chosen == set(expected.nlargest(MAX_RESOLVED, "dur_us").index)
    assert len(chosen) == MAX_RESOLVED
