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


def _frame_rules(ctx: Any) -> tuple[dict[int, dict[str, Any]], dict[int, float], list[dict[str, Any]]]:
    # the pandas rules the arrays replaced (written out): each rank's activity frame split by
    # groupby("cause", sort=False), its data-wait figure as the median of its step rows (pandas' median, NaN
    # left out) and the call sites of host-sync from the frames of every rank, concatenated and grouped by site
    import pandas as pd

    from msdiag.metrics.causes import TOP_SITES, US_PER_MS, _activity

    split = {r: {str(k): g for k, g in a.frame().groupby("cause", sort=False)} for r, (a, _) in _activity(ctx).items()}
    waits = {}
    for r, g in ctx.steps.groupby("rank", sort=False):
        if g["data_wait_us"].notna().any():
            waits[int(r)] = float(g["data_wait_us"].median())
    acts = _activity(ctx)
    empty = next(iter(acts.values()))[0].frame().iloc[:0]
    all_act = pd.concat([split[r].get("host-sync", empty) for r in acts], ignore_index=True)
    n_all = sum(n for _, n in acts.values())
    named = all_act[all_act["site"].notna()]
    sites: list[dict[str, Any]] = []
    if len(named) and n_all:
        ms = (named["end_us"] - named["start_us"]).groupby(named["site"]).sum() / US_PER_MS / n_all
        top = ms.sort_values(ascending=False, kind="stable").head(TOP_SITES)
        sites = [{"site": str(k).split(" < ")[0], "stack": str(k), "ms_per_step": round(float(v), 3)} for k, v in top.items()]
    return split, waits, sites


@pytest.mark.parametrize("name", [LEVEL1, LEVEL0, CPU_MSRUN])
def test_activity_arrays_as_the_frames_gave(corpus: Path, analysed: Callable[[str], Analysis], name: str) -> None:
    # causes keeps each rank's activities as arrays by cause (_Acts), the data-wait medians from one grouping of
    # the step rows and the call sites from the rows laid end to end: the same rows, figures and sites as the
    # frames' rules (_frame_rules), on real ranks
    import numpy as np
    import pandas as pd

    from msdiag.metrics.causes import _activity, _call_sites, _step_medians
    from msdiag.metrics.registry import Context

    a = analysed(name)
    ctx = Context(capture=a.capture, steps=a.steps, options=a.options)
    split, waits, sites = _frame_rules(ctx)
    for r, (acts, _) in _activity(ctx).items():
        assert set(split[r]) == {c for c in acts.parts if acts.of(c) is not None}
        for cause, g in split[r].items():
            p = acts.of(cause)
            assert p is not None
            # (the frames' concatenation turns a part's missing sites into NaN: missing either way)
            assert list(g["step"]) == list(p.step) and [None if pd.isna(x) else x for x in g["site"]] == p.site
            assert np.array_equal(g["start_us"].to_numpy(), p.start) and np.array_equal(g["end_us"].to_numpy(), p.end)
    assert _step_medians(ctx, "data_wait_us") == waits
    parts = [p for p in (acts.of("host-sync") for acts, _ in _activity(ctx).values()) if p is not None]
    n_all = sum(n for _, n in _activity(ctx).values())
    start = np.concatenate([p.start for p in parts]) if parts else np.empty(0)
    end = np.concatenate([p.end for p in parts]) if parts else np.empty(0)
    assert _call_sites(start, end, np.array([x for p in parts for x in p.site], dtype=object), n_all) == sites
    assert name != LEVEL1 or sites  # level1 has sites (test_level1_progress_print_syncs_the_host)


def test_step_medians_on_ties_and_nan() -> None:
    # _step_medians against groupby("rank")'s median on ties, NaN, a rank with NaN only (no figure), an
    # even count (the mean of the middle two), a missing rank (left out) and ranks out of order
    import numpy as np
    import pandas as pd

    from msdiag.metrics.causes import _step_medians
    from msdiag.metrics.registry import Context
    from msdiag.model import Capture

    steps = pd.DataFrame({
        "rank": pd.array([3, 1, 3, 1, 2, 2, None, 1, 3, 4], dtype="Int64"),
        "data_wait_us": [0.1, 0.3, np.nan, 0.3, np.nan, np.nan, 5.0, 0.7, 0.2 + 0.1, 1e300],
        "total_us": [1.0, 2.0, 2.0, 2.0, 3.0, 1.0, 9.0, 0.1, np.nan, 7.0],
    })  # fmt: skip
    ctx = Context(capture=Capture(path="x", ranks=[]), steps=steps)
    for column in ("data_wait_us", "total_us"):
        expected = {int(r): float(g[column].median()) for r, g in steps.groupby("rank") if g[column].notna().any()}
        got = _step_medians(ctx, column)
        assert got == expected and all(np.float64(got[r]).tobytes() == np.float64(v).tobytes() for r, v in expected.items())
    assert 2 not in _step_medians(ctx, "data_wait_us")
