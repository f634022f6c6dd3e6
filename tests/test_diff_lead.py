"""A diff report leads with the comparison, draws baseline and candidate side by side and says share changes
in percentage points (issue 19, point 3, the diff part). Real pairs from the corpus; the step figures are
derived in tests/test_diff.py from msdiag's step rows (quoted below)."""

from __future__ import annotations

import json
import re
from typing import Any, Callable

import pytest

from msdiag import fmt
from msdiag.analysis import Analysis
from msdiag.contract import build
from msdiag.diff import compare, snapshot
from msdiag.report import diff_html, html
from msdiag.report.diff_text import headline, render, render_section

PYNATIVE = "mindspore-cpu/legacy_Profiler_pynative_mem"
GRAPH = "mindspore-cpu/legacy_Profiler_graph_mem"


@pytest.fixture(scope="module")
def graph_vs_pynative(analysed: Callable[[str], Analysis]) -> dict[str, Any]:
    return json.loads(json.dumps(compare(snapshot(analysed(PYNATIVE)), snapshot(analysed(GRAPH)), "pynative", "graph")))


def test_headline_leads_with_the_judged_step_time(graph_vs_pynative: dict[str, Any]) -> None:
    # tests/test_diff.py: medians 122281.0 -> 21174.5 us over 7 against 7 steps: -82.68%; every graph step is
    # faster than every PyNative step, exact rank test p = 2 / C(14, 7) = 0.00058 -> "0.0006" (one digit below 0.01)
    d = graph_vs_pynative
    lo, hi = d["step_time"]["ci_relative"]
    assert lo < hi < 0  # the bootstrap interval (fixed seed) excludes 0
    assert headline(d) == f"IMPROVED: step time -82.7% (95% CI {100 * lo:+.1f}..{100 * hi:+.1f}%, p = 0.0006)"
    text = render(d)
    assert text.splitlines()[0] == headline(d)  # the first line of `msdiag diff`
    assert render_section(d).splitlines()[1].endswith(headline(d))  # and of analyze --baseline's section


def test_too_few_samples_says_so_first(analysed: Callable[[str], Analysis]) -> None:
    # tests/test_diff.py: Level0 108426.75 us, Level1 134246.75 us, one step per rank: +23.81%, 2 against 2 steps
    d = compare(snapshot(analysed("level0")), snapshot(analysed("level1")), "level0", "level1")
    assert headline(d) == "TOO FEW SAMPLES: step time +23.8% (2 against 2 steps cannot be told from run-to-run noise)"


def test_share_changes_are_in_percentage_points(graph_vs_pynative: dict[str, Any]) -> None:
    d = graph_vs_pynative
    text = render(d)
    assert " pts" not in text
    for j in d["breakdown"]:
        line = next(x for x in text.splitlines() if x.strip().startswith(j["metric"] + " "))
        assert line.rstrip().endswith(f"({fmt.pts(j['candidate'] - j['baseline'])})  {j['judgement']}")
        assert fmt.pts(j["candidate"] - j["baseline"]).endswith(" pp")
    ctx = diff_html.context(d)
    assert ctx is not None
    shares = [r for r in ctx["rows"] if r["label"].endswith("_share")]
    assert shares and all(r["change"].endswith(" pp") and " pp .. " in r["ci"] for r in shares)


def test_breakdown_and_top_kernels_side_by_side(graph_vs_pynative: dict[str, Any]) -> None:
    d = graph_vs_pynative
    ctx = diff_html.context(d)
    assert ctx is not None
    by = {j["metric"]: j for j in d["breakdown"]}
    assert [b["side"] for b in ctx["bars"]] == ["baseline", "this capture"]
    for bar, side in zip(ctx["bars"], ("baseline", "candidate")):
        widths = {g["kind"]: float(g["width"]) for g in bar["segments"]}
        assert widths["compute"] == pytest.approx(100 * by["computing_share"][side], abs=0.01)
        # computing, exposed communication, bubble and free partition the step (metrics/breakdown.py)
        assert sum(widths.values()) == pytest.approx(100, abs=0.5)
    # MatMul leads both sides (tests/test_diff.py: 25.2 ms -> 2.4 ms per step)
    top = d["kernels"]["top"]
    assert top[0]["type"] == "MatMul"
    assert ctx["top_kernels"][0]["bw"] == "100.0"
    assert float(ctx["top_kernels"][0]["cw"]) == pytest.approx(100 * top[0]["candidate_us_per_step"] / top[0]["baseline_us_per_step"], abs=0.05)
    text = render(d)
    assert re.search(r"^  MatMul +25\.19 ms \| +2\.41 ms  \(-90\.4%\)$", text, re.M)


def test_html_page_leads_with_the_comparison(analysed: Callable[[str], Analysis], graph_vs_pynative: dict[str, Any]) -> None:
    a = analysed(GRAPH)
    report = build(a)
    report["baseline_diff"] = graph_vs_pynative
    page = html.render(a, report)
    lead = page.index('class="verdict diff-lead better"')
    assert lead < page.index('<div class="verdict" ')  # before the candidate's own verdict
    assert "IMPROVED</span>" in page[lead: lead + 200]
    assert page.count('class="diff-bar-row"') == 2
