"""Issue 19, points 4 and 5: no noise (what could not be checked apart from what was checked and found
nothing, null metrics one line per reason) and advice for the framework that ran.

Expectations are derived from the rule files and the raw captures, as each test's comment says.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest
from conftest import SAMPLE_TRACES

from msdiag.analysis import Analysis
from msdiag.contract import build
from msdiag.errors import RuleError
from msdiag.metrics.registry import all_metrics
from msdiag.report import groups
from msdiag.report.text import render
from msdiag.resources import resource_dir
from msdiag.rules.loader import load_rules, parse_rule

RULES = load_rules(())
RULE_DIR = Path(RULES["host-bound"].path).parent
SAMPLE_LOG = SAMPLE_TRACES / "serve_load" / "requests_rate50.jsonl"
# the inference rules whose every metric comes from a request log (rules/inference-*.yaml conditions)
REQUEST_LOG_RULES = {
    "inference-long-prompt-ttft", "inference-oversized-decode-batch", "inference-prefill-stalls-decode",
    "inference-queueing", "inference-static-batching",
}


@pytest.fixture(scope="module")
def level1(analysed: Callable[[str], Analysis]) -> dict[str, Any]:
    return build(analysed("level1"))


# ---- point 4: could not check / checked, nothing found -----------------------------------------


def test_every_rule_is_in_exactly_one_outcome(level1: dict[str, Any]) -> None:
    """A rule fired (findings), could not check (rules_skipped) or was checked and found nothing (rules_checked)."""
    fired = {f["rule_id"] for f in level1["findings"]}
    skipped = {s["rule_id"] for s in level1["rules_skipped"]}
    checked = {c["rule_id"] for c in level1["rules_checked"]}
    assert not (fired & skipped) and not (fired & checked) and not (skipped & checked)
    assert fired | skipped | checked == set(RULES)


def test_no_rank_standing_out_is_checked_not_skipped(level1: dict[str, Any]) -> None:
    """torchnpu-2rank-level1: communication.json of both ranks has 4 collective instances; rank 1 arrives last
    in one of them (1 vote, 2 needed), so slow_rank is null as a negative result: comm-slow-rank was checked."""
    checked = {c["rule_id"]: c["reason"] for c in level1["rules_checked"]}
    assert "comm-slow-rank" not in {s["rule_id"] for s in level1["rules_skipped"]}
    assert checked["comm-slow-rank"].startswith("no rank stands out: rank 1 arrived late in 1 of 4")
    # a rule whose metric is simply absent stays "could not check", naming the metric it needs
    tp = next(s for s in level1["rules_skipped"] if s["rule_id"] == "comm-tp-across-nodes")
    assert tp["metric"] == "tp_group_spans_nodes"


def test_skipped_rules_are_grouped_by_missing_input(level1: dict[str, Any]) -> None:
    """No request log was given: the five request-log rules share one line, whose reason is the metrics' own."""
    grouped = dict((tuple(ids), reason) for reason, ids in groups.skipped_rules(level1))
    line = next(ids for ids in grouped if set(ids) == REQUEST_LOG_RULES)
    assert grouped[line].startswith("no request log")


def test_text_lists_the_first_groups_then_points_at_verbose(level1: dict[str, Any]) -> None:
    skipped = groups.skipped_rules(level1)
    assert len(skipped) > groups.TEXT_GROUPS  # level1 lacks more inputs than the text shows by default
    hidden = sum(len(ids) for _, ids in skipped[groups.TEXT_GROUPS:])
    text = render(level1)
    block = text.split("Could not check", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert len(block) == groups.TEXT_GROUPS + 1
    assert block[-1] == f"  and {hidden} more: --verbose"
    assert "Checked, nothing found" in text and "skipped for missing data" not in text
    verbose = render(level1, verbose=True)
    for s in level1["rules_skipped"]:
        assert s["rule_id"] in verbose.split("Checked, nothing found", 1)[0].split("Could not check", 1)[1]


def test_null_metrics_one_line_per_reason(level1: dict[str, Any]) -> None:
    """Every null metric is in exactly one reason group; the request-log group is the largest (the request-log
    metrics of metrics/inference.py all say "no request log" without one)."""
    absent = groups.absent_metrics(level1)
    ids = [m for _, ms in absent for m in ms]
    assert sorted(ids) == sorted(m for m, v in level1["metrics"].items() if v is None)
    assert absent[0][0].startswith("no request log")
    text = render(level1)
    n = len(ids)
    assert f"Not measured ({n} of {len(level1['metrics'])} metrics, by reason):" in text
    assert text.count("no request log (msdiag analyze LOG") == 2  # once for the rules, once for the metrics


def test_html_collapses_null_metrics(
    page_context: Callable[[str], dict[str, Any]], rendered: Callable[[str], str], level1: dict[str, Any]
) -> None:
    ctx = page_context("level1")  # html.context(analysed("level1"), build of it), made once per session
    assert all(level1["metrics"][m["id"]] is not None for m in ctx["metrics"])
    assert sum(len(g["ids"]) for g in ctx["metrics_absent"]) == sum(v is None for v in level1["metrics"].values())
    assert {r for g in ctx["skipped"] for r in g["rules"]} == {s["rule_id"] for s in level1["rules_skipped"]}
    page = rendered("level1")  # rendered from that context
    assert page.count('<details class="absent-metrics">') == len(ctx["metrics_absent"])
    assert "Checked, nothing found" in page


# ---- point 5: advice for the framework that ran --------------------------------------------------


def test_every_shipped_suggestion_names_its_framework() -> None:
    """The YAML says it, not the loader's default: count `framework:` items against the suggestions loaded."""
    for r in RULES.values():
        text = Path(r.path).read_text(encoding="utf-8")
        block = text.split("\nsuggestions:\n", 1)[1].split("\ndocs:", 1)[0]
        assert len(re.findall(r"^  - framework: (mindspore|torch_npu|any)$", block, re.M)) == len(r.suggestions), r.id


def test_unknown_framework_is_a_load_error(tmp_path: Path) -> None:
    src = Path(RULES["host-bound"].path).read_text(encoding="utf-8")
    p = tmp_path / "host-bound.yaml"
    p.write_text(src.replace("  - framework: torch_npu", "  - framework: tensorflow", 1), encoding="utf-8")
    line = p.read_text(encoding="utf-8").splitlines().index("  - framework: tensorflow") + 1
    with pytest.raises(RuleError, match=r"framework must be one of mindspore, torch_npu, any") as e:
        parse_rule(p, set(all_metrics()))
    assert f"{p}:{line}" in str(e.value)


def test_torch_npu_capture_gets_torch_npu_advice(level1: dict[str, Any]) -> None:
    """torchnpu-2rank-level1 is a torch_npu capture (the *_ascend_pt folders): host-bound has torch_npu
    suggestions, so none of its MindSpore ones is shown."""
    assert level1["capture"]["framework"] == "torch_npu"
    hb = next(f for f in level1["findings"] if f["rule_id"] == "host-bound")
    assert {s["framework"] for s in hb["suggestions"]} <= {"torch_npu", "any"}
    assert any("TASK_QUEUE_ENABLE" in (s.get("api") or "") for s in hb["suggestions"])
    for f in level1["findings"]:  # every rule firing here ships torch_npu advice: no MindSpore-only API is shown
        for s in f["suggestions"]:
            assert s["framework"] != "mindspore", f["rule_id"]
            if "mindspore" in (s.get("api") or "").lower():  # a neutral suggestion names both frameworks
                assert re.search(r"torch|\.item\(|CPU_AFFINITY_CONF", s["api"]), (f["rule_id"], s["api"])
    assert "fix (MindSpore)" not in render(level1)


def test_mindspore_capture_gets_no_torch_npu_advice(analysed: Callable[[str], Analysis]) -> None:
    """legacy_Profiler_graph_mem is MindSpore on CPU: host-bound fires there (golden), with MindSpore advice only."""
    rep = build(analysed("cpu-graph"))
    hb = next(f for f in rep["findings"] if f["rule_id"] == "host-bound")
    assert {s["framework"] for s in hb["suggestions"]} <= {"mindspore", "any"}
    assert "mindspore.jit" in " ".join(s.get("api") or "" for s in hb["suggestions"])
    assert "(torch_npu)" not in render(rep)


def test_unknown_framework_keeps_advice_labelled(analysed: Callable[[str], Analysis]) -> None:
    """A request log names no framework: every suggestion is kept, the framework-specific ones labelled.
    requests_rate50.jsonl fires inference-queueing (tests/test_inference.py), whose serving advice is MindSpore's."""
    rep = build(analysed(str(SAMPLE_LOG)))
    q = next(f for f in rep["findings"] if f["rule_id"] == "inference-queueing")
    shipped = [s for s in RULES["inference-queueing"].suggestions]
    assert {s["framework"] for s in q["suggestions"]} <= {s["framework"] for s in shipped}
    assert "fix (MindSpore): " in render(rep)


def test_user_facing_text_cites_no_test_data() -> None:
    """Rule text (messages, suggestions, docs) and templates never point at msdiag's own test data."""
    for p in [*RULE_DIR.glob("*.yaml"), *resource_dir("templates").glob("*")]:
        text = p.read_text(encoding="utf-8").lower()
        for phrase in ("corpus", "msdiag's own", "sample_traces"):
            assert phrase not in text, (p.name, phrase)


def test_request_log_alone_says_no_capture_once(analysed: Callable[[str], Analysis]) -> None:
    """A request log alone has no profiler capture: every capture rule and metric lacks that one thing, said
    once; the log's own null metrics keep their reason (no SLO was given, so goodput is null: "no SLO given")."""
    rep = build(analysed(str(SAMPLE_LOG)))
    assert groups.skipped_rules(rep) == [(groups.NO_CAPTURE, [s["rule_id"] for s in rep["rules_skipped"]])]
    absent = dict(groups.absent_metrics(rep))
    details = rep["metric_details"]
    for reason, ids in absent.items():
        from_log = [m for m in ids if details[m]["source"].startswith("request log")]
        assert (reason == groups.NO_CAPTURE) == (not from_log), reason
    assert absent[groups.NO_CAPTURE] == [m for m, v in rep["metrics"].items() if v is None and not details[m]["source"].startswith("request log")]
    text = render(rep)
    assert text.count(groups.NO_CAPTURE) == 2  # once for the rules, once for the metrics


def test_analyze_verbose_names_every_group() -> None:
    """`msdiag analyze --verbose` prints every reason group with its ids; without it the lists stop at the first
    few with "and N more: --verbose" (the bundled sample lacks more inputs than the text shows by default)."""
    from click.testing import CliRunner

    from msdiag.cli import main

    args = ["analyze", str(SAMPLE_TRACES / "train_small_cpu"), "--jobs", "1", "--no-cache", "--no-config"]
    short = CliRunner().invoke(main, args)
    full = CliRunner().invoke(main, [*args, "--verbose"])
    assert short.exit_code == full.exit_code == 0, short.output
    assert "more: --verbose" in short.output and "more: --verbose" not in full.output
    rep = json.loads(CliRunner().invoke(main, [*args, "--format", "json"]).output)
    body = full.output.split("Could not check", 1)[1]
    assert all(s["rule_id"] in body for s in rep["rules_skipped"])
    assert all(m in body for m, v in rep["metrics"].items() if v is None)
