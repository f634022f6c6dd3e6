"""Honest headlines (issue 19, points 1-3): what was left out is said first, runs are never mixed, a vLLM result
without start_times keeps its diagnosis (modelled arrivals, corroborating rule conditions), and a request log gets
its own verdict without the training-only parts of the report."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES, page_of

from msdiag.analysis import Analysis, analyze
from msdiag.cli import main
from msdiag.contract import build
from msdiag.errors import RuleError
from msdiag.inference.requests import read_request_log
from msdiag.inference.summary import tail_note
from msdiag.ingest.discover import discover
from msdiag.metrics.registry import all_metrics
from msdiag.options import Options
from msdiag.report import html
from msdiag.report.text import render
from msdiag.rules.engine import evaluate_rule
from msdiag.rules.loader import load_rules, parse_rule

RATE50 = SAMPLE_TRACES / "serve_load" / "requests_rate50.jsonl"


def _truncated_level0(corpus: Path, tmp_path: Path) -> Path:
    """torchnpu-2rank-level0 copied to tmp_path with rank 0's trace_view.json cut at 900,000 of its 1,805,798 bytes
    (a job killed while the profiler wrote it). The corpus is never modified."""
    cap = tmp_path / "cap"
    shutil.copytree(corpus / "ascend" / "torchnpu-2rank-level0", cap)
    for p in cap.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    tv = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    with tv.open("r+b") as f:
        f.truncate(900_000)
    return cap


# ---- point 1: a rank left out is said first --------------------------------------------------------------


def test_a_rank_left_out_is_said_in_the_header_the_banner_and_the_json(corpus: Path, tmp_path: Path) -> None:
    cap = _truncated_level0(corpus, tmp_path)
    cache = str(tmp_path / "cache")  # rank 1 parsed once, read back by the two CLI runs; rank 0 fails each time
    a = analyze(cap, Options(jobs=1, cache=cache))
    rep = build(a)
    assert [r["rank"] for r in rep["ranks"]] == [1]
    left = rep["ranks_left_out"]
    assert len(left) == 1 and left[0]["rank"] == 0
    assert left[0]["file"] == str(cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    assert "truncated" in left[0]["reason"] and "900000" in left[0]["reason"]
    # the third line of the text (right under the identity), not the last
    lines = render(rep).splitlines()
    assert lines[2].startswith(
        "  PARTIAL: 1 of 2 ranks analysed (rank 0 left out: rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json: truncated"
    )
    ctx = html.context(a, rep)
    assert ctx["partial"][0].startswith("1 of 2 ranks analysed (rank 0 left out: ")
    page = page_of(ctx)  # html.render(a, rep), its charts drawn once
    assert page.index('class="partial"') < page.index('class="verdict"')  # the banner comes before the verdict
    # exit code: 0 (no --fail-on), 2 with --strict naming the file
    assert CliRunner().invoke(main, ["analyze", str(cap), "--cache", cache]).exit_code == 0
    strict = CliRunner().invoke(main, ["analyze", str(cap), "--cache", cache, "--strict"])
    assert strict.exit_code == 2 and "trace_view.json" in strict.output and "(--strict)" in strict.output


def test_a_rank_analysed_without_a_failed_file_names_it(corpus: Path, tmp_path: Path) -> None:
    # torchnpu-2rank-p2p-2024 copied, rank 1's communication.json (an optional source) cut to its first 100 bytes:
    # rank 1 is still analysed from its other files, and the header names the file it went without
    cap = tmp_path / "p2p"
    shutil.copytree(corpus / "ascend" / "torchnpu-2rank-p2p-2024", cap)
    for p in cap.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    comm = cap / "test_rank_1" / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    comm.write_bytes(comm.read_bytes()[:100])
    cache = str(tmp_path / "cache")  # the CLI run reads both ranks back from the analysis' cache
    a = analyze(cap, Options(jobs=1, cache=cache))
    rep = build(a)
    assert sorted(r["rank"] for r in rep["ranks"]) == [0, 1] and rep["ranks_left_out"] == []
    head = render(rep).splitlines()[:6]
    said = [ln for ln in head if ln.startswith("  PARTIAL: rank 1 analysed without test_rank_1/ASCEND_PROFILER_OUTPUT/communication.json: ")]
    assert said, head
    assert CliRunner().invoke(main, ["analyze", str(cap), "--cache", cache, "--strict"]).exit_code == 2


def test_runs_under_one_folder_are_told_apart(corpus: Path, analysed: Callable[[str], Analysis]) -> None:
    # cann-msprof/ holds the 2-device AlexNet run of 2023 (PROF_000001_20230818142704322_..., device_0, and
    # PROF_000001_20230818142704567_..., device_1: 245 ms apart) and, under vllm-ascend-prof/, two rank-0
    # captures of 2026-08-23 16:54:13 and 16:55:23: three years apart, two runs. The run with more ranks is
    # analysed; the other is named with its folder, never mixed into one "job".
    d = discover(corpus / "cann-msprof")
    assert sorted((r.rank, r.path.name[:31]) for r in d.ranks) == [
        (0, "PROF_000001_20230818142704322_C"), (1, "PROF_000001_20230818142704567_G")]
    assert len(d.runs_left_out) == 1
    other = d.runs_left_out[0]
    assert other["ranks"] == [0] and other["folder"] == str(corpus / "cann-msprof" / "vllm-ascend-prof")
    assert other["captured"] == "2026-08-23 16:54 to 16:55"
    rep = build(analysed("cann-msprof"))
    assert rep["runs_left_out"] == [other]
    assert any(n.startswith("this folder holds 2 runs") for n in rep["notes"])
    assert render(rep).splitlines()[2].startswith("  PARTIAL: another run under this folder was not analysed: raw CANN msprof")
    # each run on its own is one run
    assert discover(corpus / "cann-msprof" / "vllm-ascend-prof").runs_left_out == []


# ---- point 2: vLLM results without start_times -----------------------------------------------------------


def _rate50_as_vllm(tmp_path: Path, **over: Any) -> tuple[Path, list[dict[str, Any]]]:
    """The real request log sample_traces/serve_load/requests_rate50.jsonl (12 requests, Poisson at 50 req/s,
    static batches of up to 4) written in benchmark_serving's --save-detailed layout WITHOUT start_times:
    ttfts = first token - arrival, itls = the gaps between token times, input_lens / output_lens, request_rate 50,
    num_prompts 12, duration = last token - first arrival."""
    recs = [json.loads(line) for line in RATE50.read_text().splitlines()[1:]]
    t0 = min(r["arrival_s"] for r in recs)
    doc: dict[str, Any] = {
        "backend": "vllm", "model_id": "tiny", "num_prompts": len(recs), "request_rate": 50.0, "burstiness": 1.0,
        "max_concurrency": None, "duration": max(r["finish_s"] for r in recs) - t0, "completed": len(recs),
        "input_lens": [r["prompt_tokens"] for r in recs], "output_lens": [r["output_tokens"] for r in recs],
        "ttfts": [r["first_token_s"] - r["arrival_s"] for r in recs],
        "itls": [list(np.diff(r["token_times_s"])) for r in recs], "errors": [""] * len(recs),
    }
    doc.update(over)
    p = tmp_path / "vllm-50qps-tiny.json"
    p.write_text(json.dumps(doc))
    return p, recs


def test_vllm_without_start_times_models_the_arrivals(tmp_path: Path) -> None:
    p, recs = _rate50_as_vllm(tmp_path)
    log = read_request_log(p)
    assert log.arrivals == "modelled"
    # request i sent at i / 50 s (the mean of the benchmark's Poisson gaps); each finished within the duration
    assert log.requests["arrival_s"].tolist() == pytest.approx([i / 50 for i in range(12)])
    inf = read_request_log(_rate50_as_vllm(tmp_path, request_rate="inf")[0])
    assert inf.arrivals == "modelled" and inf.requests["arrival_s"].tolist() == [0.0] * 12  # all sent at t = 0
    gated = read_request_log(_rate50_as_vllm(tmp_path, max_concurrency=4)[0])
    assert gated.arrivals == "absent" and not gated.has_arrivals  # sends wait for a slot: the rate says nothing


def test_overloaded_vllm_result_without_start_times_gets_a_queueing_finding(tmp_path: Path) -> None:
    p, recs = _rate50_as_vllm(tmp_path)
    a = analyze(p, Options(jobs=1))
    rep = build(a)
    ttft = sorted((r["first_token_s"] - r["arrival_s"]) * 1000 for r in recs)
    assert rep["metrics"]["ttft_p50_ms"] == pytest.approx((ttft[5] + ttft[6]) / 2)  # median of 12: 5457.1 ms
    assert rep["requests"]["arrivals"] == "modelled"
    f = {x["rule_id"]: x for x in rep["findings"]}
    assert f["inference-queueing"]["severity"] == "critical"  # queueing 85% of the median TTFT (> 80%)
    assert "modelled" in f["inference-queueing"]["message"]
    v = rep["verdict"]
    assert v["bottleneck"] == "queueing" and v["share_of"] == "ttft" and v["arrivals"] == "modelled"
    assert v["share"] == pytest.approx(rep["metrics"]["queueing_share"]) and v["confidence"] == "medium"
    # the join test needs recorded instants: static batching is skipped, saying why
    why = {s["rule_id"]: s["reason"] for s in rep["rules_skipped"]}
    assert "recorded arrival times" in why["inference-static-batching"]
    text = render(rep)
    assert "Verdict: QUEUEING (85% of TTFT)" in text and "arrival times modelled" in text


def test_a_missing_corroborating_metric_lowers_confidence_instead_of_skipping(tmp_path: Path) -> None:
    # max_concurrency set: no arrivals at all, so ttft_load_slope (corroborating in inference-queueing) is null;
    # queueing (TTFT minus the fastest request's prefill bound) still stands: the rule fires at low confidence
    p, _ = _rate50_as_vllm(tmp_path, max_concurrency=4)
    rep = build(analyze(p, Options(jobs=1)))
    f = {x["rule_id"]: x for x in rep["findings"]}["inference-queueing"]
    assert f["confidence"] == "low"
    assert f["not_available"][0]["metric"] == "ttft_load_slope" and "arrival" in f["not_available"][0]["reason"]
    assert "Lower confidence: ttft_load_slope not available" in f["message"]
    assert rep["verdict"]["bottleneck"] == "queueing" and rep["verdict"]["confidence"] == "low"


def test_corroborating_is_checked_by_the_loader(tmp_path: Path) -> None:
    src = Path(load_rules()["inference-queueing"].path).read_text()
    metrics = set(all_metrics())
    bad = tmp_path / "inference-queueing.yaml"
    bad.write_text(src.replace("corroborating: true}", "corroborating: 1}"))
    with pytest.raises(RuleError, match="corroborating must be true or false"):
        parse_rule(bad, metrics)
    bad.write_text(src.replace("corroborating: true}", "corroborating: true, optional: true}"))
    with pytest.raises(RuleError, match="optional or corroborating"):
        parse_rule(bad, metrics)
    bad.write_text(src.replace("    - {metric: queueing_share, op: \">\", param: critical}",
                               "    - {metric: queueing_share, op: \">\", param: critical, corroborating: true}"))
    with pytest.raises(RuleError, match="only in the firing condition"):
        parse_rule(bad, metrics)
    # evaluated: a null corroborating metric holds, a null required one skips
    rule = load_rules()["inference-queueing"]
    params = {k: p.default for k, p in rule.params.items()}
    base = {"queueing_share": 0.6, "queueing_ms_p50": 300.0, "ttft_p50_ms": 500.0}
    o = evaluate_rule(rule, base, params)
    assert o.status == "fired" and o.unavailable == ["ttft_load_slope"]
    assert evaluate_rule(rule, {**base, "ttft_load_slope": -1.0}, params).status == "quiet"
    assert evaluate_rule(rule, {**base, "queueing_ms_p50": None}, params).status == "skipped"


# ---- point 3: a request log's own verdict and report -----------------------------------------------------


def test_a_request_log_gets_its_own_verdict_and_no_training_boxes(
    analysed: Callable[[str], Analysis], page_context: Callable[[str], dict[str, Any]], rendered: Callable[[str], str]
) -> None:
    rep = build(analysed(str(RATE50)))
    v = rep["verdict"]
    # static batches: 11 of 12 requests arrived while another was in flight and none got its first token while
    # another decoded (join 0%); queueing is 85% of the median TTFT: batching is why they queue
    assert v["bottleneck"] == "batching" and v["share_of"] == "ttft" and v["rule_id"] == "inference-static-batching"
    assert v["share"] == pytest.approx(rep["metrics"]["queueing_share"]) and v["causes"] == ["inference-queueing"]
    text = render(rep)
    lines = text.splitlines()
    assert lines[1] == "  request log (msdiag request log (JSONL)), 12 request(s)"
    assert "rank(s)" not in text and "Step time" not in text
    assert "Verdict: BATCHING (85% of TTFT)" in text
    # 12 requests: P99 lies at rank 0.99 x 11 = 10.89, between the two slowest; P90 at 9.9 does not
    assert "(P99 and P99.9 of 12 requests: set by the two slowest requests (interpolated between them), not a measured tail)" in text
    ctx = page_context(str(RATE50))  # html.context of the shared analysis and its report object
    assert ctx["log_alone"] and ctx["verdict"]["share"] == "85% of TTFT"
    assert [k for k, _ in ctx["identity"]] == ["request log", "format", "requests"]
    page = rendered(str(RATE50))  # html.render of it
    assert 'class="legend-key"' not in page and "Static batching" in page and "<h3>Request log</h3>" in page


def test_tail_note_by_request_count() -> None:
    # linear interpolation: percentile q of n values lies between the two largest when q/100 x (n-1) > n-2
    assert tail_note(12) == "P99 and P99.9 of 12 requests: set by the two slowest requests (interpolated between them), not a measured tail"
    assert tail_note(5).startswith("P90, P99 and P99.9 of 5 requests")  # 0.9 x 4 = 3.6 > 3
    assert tail_note(101) == "P99.9 of 101 requests: set by the two slowest requests (interpolated between them), not a measured tail"
    assert tail_note(1001) is None
