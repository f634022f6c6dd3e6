"""msdiag diff and named baselines: the statistics, real capture pairs from the corpus, the gate,
the baseline store round trip, and refusals of what cannot be compared."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import REPO

from msdiag import stats
from msdiag.analysis import Analysis, Options, analyze
from msdiag.cli import main
from msdiag.diff import (
    HIGHER_IS_BETTER,
    LOWER_IS_BETTER,
    NEUTRAL,
    IncomparableError,
    check_gate_metrics,
    compare,
    direction,
    snapshot,
)
from msdiag.errors import InputError

CPU = "mindspore-cpu"
PYNATIVE = f"{CPU}/legacy_Profiler_pynative_mem"
GRAPH = f"{CPU}/legacy_Profiler_graph_mem"
LEVEL0 = "ascend/torchnpu-2rank-level0"
LEVEL1 = "ascend/torchnpu-2rank-level1"


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def diff_json(a: Path | str, b: Path | str, *extra: str, code: int = 0) -> dict[str, Any]:
    rc, out, err = run("diff", str(a), str(b), "--format", "json", "--jobs", "1", *extra)
    assert rc == code, err
    return json.loads(out)


Snap = Callable[[str], dict[str, Any]]


def diff_of(snap: Snap, a: str, b: str, *, fail_on: float | None = None, metrics: tuple[str, ...] = (), code: int = 0) -> dict[str, Any]:
    """What ``msdiag diff A B --format json [--fail-on-regression PCT --metric ...]`` prints, computed on the session's
    shared analyses (the CLI's own path is tested by the tests that call ``run``); ``code``: the exit code it would have."""
    d = json.loads(json.dumps(compare(snap(a), snap(b), a, b, fail_on_regression=fail_on, gate_metrics=metrics)))
    assert (1 if d["gate"] and d["gate"]["failed"] else 0) == code, d["gate"]
    return d


@pytest.fixture(scope="module")
def snap(analysed: Callable[[str], Analysis]) -> Snap:
    """``snap(rel)``: the diff snapshot of a corpus capture's shared analysis, made once (a test that edits
    one edits a deep copy)."""
    done: dict[str, dict[str, Any]] = {}

    def get(rel: str) -> dict[str, Any]:
        if rel not in done:
            done[rel] = snapshot(analysed(rel))
        return done[rel]

    return get


# ---- the statistics, against values computed by hand -----------------------------------------


def test_rank_test_exact_and_its_floor() -> None:
    # 7 against 7, completely separated: U = 0, and only 2 of the C(14, 7) = 3432 orderings are as extreme
    t = stats.mann_whitney(np.arange(10.0, 17.0), np.arange(7.0))
    assert t.method == "exact" and t.u == 0 and t.p_value == pytest.approx(2 / 3432)
    # 2 against 2 separated: U = 4 of the 6 orderings' U = 0,1,2,2,3,4 -> P(U >= 4) = 1/6, two-sided 1/3
    assert stats.mann_whitney(np.array([1.0, 2.0]), np.array([3.0, 4.0])).p_value == pytest.approx(1 / 3)
    # the smallest p a rank test can give: 2 / C(n + m, n)
    assert stats.min_p(3, 3) == pytest.approx(0.1)  # 3 against 3 can never reach p < 0.05
    assert stats.min_p(4, 4) == pytest.approx(2 / 70)
    assert stats.min_steps_per_side(0.05) == 4
    # identical samples: nothing to tell apart
    assert stats.mann_whitney(np.ones(5), np.ones(5)).p_value == 1.0


def test_rank_test_normal_approximation_with_ties() -> None:
    # base 1,1,2 and candidate 2,3,3: average ranks 1.5,1.5 | 3.5,3.5 | 5.5,5.5; candidate's rank sum
    # 3.5 + 5.5 + 5.5 = 14.5, U = 14.5 - 3*4/2 = 8.5; mean 4.5; three tied pairs: sum(t^3 - t) = 18;
    # var = 3*3/12 * (7 - 18/30) = 4.8; z = (|8.5 - 4.5| - 0.5) / sqrt(4.8) = 1.5975; p = erfc(z / sqrt 2)
    t = stats.mann_whitney(np.array([1.0, 1.0, 2.0]), np.array([2.0, 3.0, 3.0]))
    assert t.method.startswith("normal") and t.u == 8.5
    assert t.p_value == pytest.approx(math.erfc(3.5 / math.sqrt(4.8) / math.sqrt(2)))
    assert t.p_value == pytest.approx(0.1101, abs=1e-4)


def test_bootstrap_is_deterministic_and_brackets_the_change() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(100, 5, 30), rng.normal(90, 5, 30)
    i1, i2 = stats.bootstrap(a, b, stats.median), stats.bootstrap(a, b, stats.median)
    assert i1 == i2  # fixed seed: the same input gives the same interval
    point = float(np.median(b) / np.median(a) - 1)
    assert i1.rel_low is not None and i1.rel_high is not None
    assert i1.rel_low < point < i1.rel_high < 0  # about -10%, clearly below 0
    # a share is the ratio of sums over the resampled steps
    rows = np.array([[1.0, 4.0], [3.0, 4.0]])
    assert stats.ratio_of_sums(rows[None])[0] == pytest.approx(0.5)


def test_direction_table_names_registered_metrics_only() -> None:
    from msdiag.metrics.registry import all_metrics

    reg = all_metrics()
    stale = sorted((HIGHER_IS_BETTER | LOWER_IS_BETTER | NEUTRAL) - set(reg))
    assert not stale, f"diff.py names metrics that are not registered: {stale}"
    assert direction("mfu") == "higher" and direction("step_time_us") == "lower" and direction("free_share") == "lower"
    assert direction("computing_share") == "higher" and direction("kernel_count") == "neutral"
    assert direction("no_such_metric") is None


# ---- a capture against itself --------------------------------------------------------------


def test_capture_against_itself_is_no_change_and_passes_the_gate(snap: Snap) -> None:
    d = diff_of(snap, GRAPH, GRAPH, fail_on=1)
    st = d["step_time"]
    assert st["relative_change"] == 0 and st["p_value"] == 1.0
    assert st["judgement"] == "no significant change"
    assert st["ci_relative"][0] <= 0 <= st["ci_relative"][1]
    assert all(j["judgement"] == "no significant change" for j in d["breakdown"])
    assert d["kernels"]["compared"] and not d["kernels"]["slower"] and not d["kernels"]["faster"]
    assert not d["kernels"]["new"] and not d["kernels"]["gone"]
    assert not d["findings"]["appeared"] and not d["findings"]["resolved"] and not d["verdict"]["changed"]
    assert d["gate"]["failed"] is False
    assert all(r["outcome"] in ("unchanged", "same") for r in d["metrics"] if r["baseline"] is not None)


# ---- two runs of the same Ascend job, one step per rank --------------------------------------


def test_level0_vs_level1_one_step_per_rank_is_too_few_samples(snap: Snap) -> None:
    # step_trace_time.csv, Stage (= the step's span; Bubble 0):
    #   Level0: rank 0 116251.25, rank 1 100602.25 -> median of the pooled 2 = 108426.75 us
    #   Level1: rank 0 136581.0,  rank 1 131912.5  -> median 134246.75 us
    #   relative change of the median: 134246.75 / 108426.75 - 1 = +23.81%
    # 2 against 2 steps: the smallest two-sided p of a rank test is 2 / C(4, 2) = 1/3: never significant.
    d = diff_of(snap, LEVEL0, LEVEL1, fail_on=5)
    st = d["step_time"]
    assert st["baseline"] == pytest.approx(108426.75, rel=1e-5)  # msdiag's own timeline span, within 0.25 us
    assert st["candidate"] == pytest.approx(134246.75, rel=1e-5)
    assert st["relative_change"] == pytest.approx(134246.75 / 108426.75 - 1, rel=1e-4)
    assert st["n_baseline"] == st["n_candidate"] == 2
    assert st["min_possible_p"] == pytest.approx(1 / 3) and st["p_value"] >= 1 / 3
    assert st["judgement"] == "too few samples" and "can never reach p < 0.05" in st["sentence"]
    # too few samples is not "beyond noise": the gate does not fail on it, and says why
    assert d["gate"]["failed"] is False and "never reach" in d["gate"]["metrics"][0]["sentence"]
    # Level0 wrote no communication.json: communication per group is not compared, and it says so
    assert not d["communication"]["compared"]
    assert any("communication" in x and "baseline" in x for x in d["not_compared"])
    assert any("profiler levels differ" in n for n in d["notes"])
    assert [r["rank"] for r in d["per_rank_step_time"]] == [0, 1]
    assert "profiler levels" in d["kernels"]["naming"]  # Level0 writes no Type: names differ (Conv2D1 vs Conv2D)


# ---- the same model in PyNative and in graph mode, 8 steps each --------------------------------


def test_graph_mode_is_judged_faster_than_pynative(snap: Snap) -> None:
    # msdiag's step rows (the repeating op sequence of the host timeline), total_us per step:
    #   PyNative: 772275.0 (step 1: warm-up, left out), 203453.25, 120785.75, 232825.75, 100326.25,
    #             122281.0, 130685.25, 115995.75 -> median of the 7 = 122281.0 us
    #   graph:    119627.5 (warm-up), 46306.0, 32616.25, 25225.5, 21174.5, 19183.75, 18907.0, 17948.0
    #             -> median 21174.5 us
    #   change: 21174.5 / 122281.0 - 1 = -82.68%; every graph step is faster than every PyNative step:
    #   exact rank test p = 2 / C(14, 7) = 2 / 3432 = 0.00058
    d = diff_of(snap, PYNATIVE, GRAPH, fail_on=5)
    st = d["step_time"]
    assert st["baseline"] == pytest.approx(122281.0) and st["candidate"] == pytest.approx(21174.5)
    assert st["relative_change"] == pytest.approx(21174.5 / 122281.0 - 1)
    assert st["n_baseline"] == st["n_candidate"] == 7
    assert d["baseline"]["warmup_steps_left_out"] == 1
    assert st["p_value"] == pytest.approx(2 / 3432) and st["test"] == "Mann-Whitney U (exact)"
    assert st["ci_relative"][1] < 0  # the interval excludes 0
    assert st["judgement"] == "improved" and st["confidence"] == "high"
    assert d["gate"]["failed"] is False
    by = {j["metric"]: j for j in d["breakdown"]}
    assert by["computing_share"]["judgement"] == "improved"  # 54% -> 79% of the step
    faster = {k["type"] for k in d["kernels"]["faster"]}
    assert "MatMul" in faster  # 25.2 ms -> 2.4 ms per step


def test_fail_on_regression_when_the_slower_capture_is_the_candidate(corpus: Path, snap: Snap) -> None:
    d = diff_of(snap, GRAPH, PYNATIVE, fail_on=10, code=1)
    assert d["step_time"]["judgement"] == "regressed"
    g = d["gate"]["metrics"][0]
    assert g["metric"] == "step_time_us" and g["failed"] and g["beyond_noise"] and g["noise_estimate"]
    assert g["worse_by"] == pytest.approx(122281.0 / 21174.5 - 1)  # +477%
    # above the regression, but under the threshold: passes
    diff_of(snap, GRAPH, PYNATIVE, fail_on=900, code=0)
    # the text output says FAILED (the command's exit 1 on a failed gate: test_request_logs_compare_...)
    from msdiag.report.diff_text import render

    assert "Gate (--fail-on-regression 10%): FAILED" in render(d)


def test_gate_on_a_metric_without_per_step_samples(snap: Snap) -> None:
    # memory_peak_allocated_mb: graph 5.5986 MB, PyNative 6.2822 MB -> +12.2%, lower is better
    d = diff_of(snap, GRAPH, PYNATIVE, fail_on=5, metrics=("memory_peak_allocated_mb",), code=1)
    g = d["gate"]["metrics"]
    assert [x["metric"] for x in g] == ["memory_peak_allocated_mb"]
    assert g[0]["noise_estimate"] is False and g[0]["failed"] and "no noise estimate" in g[0]["sentence"]
    assert g[0]["worse_by"] == pytest.approx(6.2822265625 / 5.5986328125 - 1)
    diff_of(snap, GRAPH, PYNATIVE, fail_on=20, metrics=("memory_peak_allocated_mb",), code=0)
    # a higher-is-better metric that improved (computing share 79% -> 54% is worse; the other way is better)
    d = diff_of(snap, PYNATIVE, GRAPH, fail_on=1, metrics=("computing_share", "step_time_us"))
    assert not d["gate"]["failed"] and [x["metric"] for x in d["gate"]["metrics"]] == ["computing_share", "step_time_us"]


@pytest.mark.parametrize(
    "metric, says",
    [
        ("no_such_metric", "unknown metric"),
        ("kernel_count", "cannot be gated"),  # neutral: neither direction is better
        ("slow_rank", "not a number"),
    ],
)
def test_gate_refuses_metrics_it_cannot_judge(corpus: Path, metric: str, says: str) -> None:
    """Refused before any capture is read (diff.check_gate_metrics): exit 2 with the reason."""
    rc, _, err = run("diff", str(corpus / GRAPH), str(corpus / PYNATIVE), "--fail-on-regression", "5", "--metric", metric, "--jobs", "1")
    assert rc == 2 and says in err


def test_gate_refuses_a_metric_without_a_value(snap: Snap) -> None:
    """Refused once both captures are read (the command exits 2 on this InputError, as on those above)."""
    check_gate_metrics(("mfu",))  # a registered number with a direction: only its values can refuse it
    with pytest.raises(InputError, match="has no value in either capture"):  # no peak FLOP/s known on CPU
        compare(snap(GRAPH), snap(PYNATIVE), GRAPH, PYNATIVE, fail_on_regression=5, gate_metrics=("mfu",))


def test_metric_needs_the_threshold(corpus: Path) -> None:
    rc, _, err = run("diff", str(corpus / GRAPH), str(corpus / PYNATIVE), "--metric", "step_time_us")
    assert rc == 2 and "--fail-on-regression" in err


# ---- what is shared and what is not ---------------------------------------------------------


def test_different_rank_counts_compare_on_what_they_share(snap: Snap) -> None:
    d = compare(snap(f"{CPU}/msrun_dp2_pynative"), snap(PYNATIVE), "dp2", "single")
    assert d["ranks"] == {"baseline": [0, 1], "candidate": [0], "common": [0]}
    assert [r["rank"] for r in d["per_rank_step_time"]] == [0]
    assert any("ranks only in the baseline" in x and "1" in x for x in d["not_compared"])
    assert d["step_time"]["n_baseline"] == 10 and d["step_time"]["n_candidate"] == 7  # all ranks pooled, warm-up out
    assert d["kernels"]["compared"] and d["kernels"]["rank_steps"] == {"baseline": 5, "candidate": 7}


def test_incomparable_captures_are_refused_with_the_reason(corpus: Path, snap: Snap) -> None:
    # parallel_strategy: a MindSpore 1.x folder with a strategy file and no step data (the command exits 2 on an
    # IncomparableError: the last check below, and test_request_logs_compare_...)
    with pytest.raises(IncomparableError, match="no step with a measured duration .* step times cannot be compared"):
        compare(snap("mindspore-legacy/parallel_strategy"), snap(GRAPH), "strategy", "graph")
    # one training capture, one of another workload (an inference request log says so in its identity)
    other = json.loads(json.dumps(snap(GRAPH)))
    other["report"]["capture"]["workload"] = "inference"
    train = json.loads(json.dumps(snap(PYNATIVE)))
    train["report"]["capture"]["workload"] = "training"
    with pytest.raises(IncomparableError, match="a is inference and b is training"):
        compare(other, train, "a", "b")
    # no metric with a value on both sides
    empty = json.loads(json.dumps(snap(GRAPH)))
    empty["report"]["metrics"] = {k: None for k in empty["report"]["metrics"]}
    with pytest.raises(IncomparableError, match="no metric has a value in both"):
        compare(snap(PYNATIVE), empty, "a", "b")
    # neither a path nor a saved baseline
    rc, _, err = run("diff", "no-such-capture-or-name", str(corpus / GRAPH))
    assert rc == 2 and "no such file or folder, and no saved baseline" in err


def _request_log(path: Path, scale: float) -> Path:
    """A msdiag JSONL request log of 20 requests: TTFT 80 ms x scale, 10 tokens 20 ms x scale apart."""
    lines = []
    for i in range(20):
        t = 0.1 * i
        ft = t + 0.08 * scale
        lines.append(json.dumps({"request_id": i, "arrival_s": t, "first_token_s": ft, "finish_s": ft + 9 * 0.02 * scale,
                                 "prompt_tokens": 50, "output_tokens": 10}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_request_logs_compare_on_their_metrics_and_refuse_a_training_capture(corpus: Path, tmp_path: Path) -> None:
    pytest.importorskip("msdiag.inference")
    a, b = _request_log(tmp_path / "a.jsonl", 1.0), _request_log(tmp_path / "b.jsonl", 1.5)
    # no steps on either side: step time is not judged, the metrics are; TTFT 80 ms -> 120 ms (+50%)
    d = diff_json(a, b, "--fail-on-regression", "5", "--metric", "ttft_p50_ms", code=1)
    assert d["step_time"] is None and any("neither side has step rows" in n for n in d["notes"])
    g = d["gate"]["metrics"][0]
    assert g["relative_change"] == pytest.approx(0.5) and g["noise_estimate"] is False and g["failed"]
    # the default gate (step time) has nothing to judge here: refused with the reason (the command exits 2 on
    # this InputError, as test_gate_refuses_metrics_it_cannot_judge shows)
    sa, sb = (snapshot(analyze(p, Options(jobs=1))) for p in (a, b))
    with pytest.raises(InputError, match="'step_time_us' has no value in either capture"):
        compare(sa, sb, "a", "b", fail_on_regression=5)
    # an inference request log against a training capture: the command exits 2 with the reason
    rc, _, err = run("diff", str(a), str(corpus / GRAPH), "--jobs", "1")
    assert rc == 2 and "is inference and" in err and "is training" in err


# ---- named baselines ------------------------------------------------------------------------


def test_baseline_save_list_analyze_diff_delete(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("MSDIAG_HOME", str(home))
    rc, _, err = run("baseline", "save", "pynative", str(corpus / PYNATIVE), "--jobs", "1")
    assert rc == 0, err
    f = home / "baselines" / "pynative.json"
    doc = json.loads(f.read_text())
    assert doc["msdiag_baseline"] == "1" and doc["name"] == "pynative"
    assert doc["source_path"] == str((corpus / PYNATIVE).resolve())
    assert doc["report"]["schema_version"] == "1.0" and len(doc["report"]["steps"]) == 8
    assert {"rank", "type", "kind", "calls", "total_us"} <= set(doc["kernel_types"][0])
    assert doc["kernel_windows"] == [{"rank": 0, "steps": 7, "by": "step spans"}]
    # the same name again is refused; --force replaces it
    rc, _, err = run("baseline", "save", "pynative", str(corpus / PYNATIVE))
    assert rc == 2 and "--force" in err
    assert run("baseline", "save", "pynative", str(corpus / PYNATIVE), "--force", "--jobs", "1")[0] == 0
    rc, _, err = run("baseline", "save", "../evil", str(corpus / PYNATIVE))
    assert rc == 2 and "not a valid baseline name" in err

    rc, out, _ = run("baseline", "list", "--format", "json")
    listed = json.loads(out)
    assert listed["store"] == str(home / "baselines")
    assert [(b["name"], b["step_time_us"], b["ranks"]) for b in listed["baselines"]] == [("pynative", 122281.0, 1)]
    rc, out, _ = run("baseline", "list")
    assert rc == 0 and out.startswith("pynative") and "122.28 ms" in out

    # analyze --baseline: JSON gets baseline_diff, text a short section
    rc, out, err = run("analyze", str(corpus / GRAPH), "--baseline", "pynative", "--format", "json", "--jobs", "1")
    assert rc == 0, err
    bd = json.loads(out)["baseline_diff"]
    assert bd["baseline"]["saved_baseline"] == "pynative" and bd["step_time"]["judgement"] == "improved"
    assert bd["step_time"]["relative_change"] == pytest.approx(21174.5 / 122281.0 - 1)
    rc, out, _ = run("analyze", str(corpus / GRAPH), "--baseline", "pynative", "--jobs", "1")
    assert rc == 0 and "Against baseline pynative" in out and "IMPROVED" in out
    rc, _, err = run("analyze", str(corpus / GRAPH), "--baseline", "nope")
    assert rc == 2 and "no saved baseline of that name" in err
    # report --baseline: the page gets the comparison section
    page = tmp_path / "r.html"
    rc, _, err = run("report", str(corpus / GRAPH), "-o", str(page), "--baseline", "pynative", "--jobs", "1")
    assert rc == 0, err
    assert 'id="baseline"' in page.read_text() and "Against baseline pynative" in page.read_text()

    # a name stands where a path stands, on either side; baseline:NAME is explicit
    d = diff_json("pynative", corpus / GRAPH)
    assert d["baseline"]["label"] == "baseline pynative" and d["step_time"]["judgement"] == "improved"
    d = diff_json(corpus / GRAPH, "baseline:pynative", "--fail-on-regression", "5", code=1)
    assert d["step_time"]["judgement"] == "regressed"

    # an unreadable or foreign store file is refused with the reason
    (home / "baselines" / "old.json").write_text(json.dumps({"msdiag_baseline": "0"}))
    rc, _, err = run("diff", "baseline:old", str(corpus / GRAPH))
    assert rc == 2 and "store schema '0'" in err

    assert run("baseline", "delete", "pynative")[0] == 0
    assert not f.exists()
    rc, _, err = run("baseline", "delete", "pynative")
    assert rc == 2 and "no saved baseline" in err


# ---- the HTML report carries the comparison ---------------------------------------------------


def test_diff_report_writes_the_candidates_page_with_the_comparison(corpus: Path, tmp_path: Path) -> None:
    pytest.importorskip("msdiag.report.html")
    out = tmp_path / "diff.html"
    rc, _, err = run("diff", str(corpus / PYNATIVE), str(corpus / GRAPH), "--report", str(out), "--jobs", "1")
    assert rc == 0, err
    page = out.read_text()
    assert 'id="baseline"' in page and "Against baseline" in page and "improved" in page
    # the report is of the candidate capture: a saved baseline cannot be the candidate
    rc, _, err = run("diff", str(corpus / GRAPH), "baseline:x", "--report", str(out))
    assert rc == 2 and "capture path" in err
    # never inside a capture folder
    rc, _, err = run("diff", str(corpus / PYNATIVE), str(corpus / GRAPH), "--report", str(corpus / GRAPH / "r.html"))
    assert rc == 2 and "inside the capture folder" in err


# ---- real before / after captures made by msdiag capture ---------------------------------------

HAS_MINDSPORE = importlib.util.find_spec("mindspore") is not None


@pytest.mark.slow
@pytest.mark.mindspore
@pytest.mark.skipif(not HAS_MINDSPORE, reason="MindSpore is not importable here: install msdiag[capture] to run the capture tests")
def test_data_bound_job_before_and_after_its_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MSDIAG_HOME", str(tmp_path / "home"))
    # --load-ms 10: 640 ms of (sleeping) loading per batch, which load does not stretch, against 30-300 ms of compute:
    # every step before the fix is slower than every step after it, on an idle machine or a loaded one
    job = [sys.executable, str(REPO / "examples" / "data_bound.py"), "--steps", "9", "--load-ms", "10"]
    for name, extra in (("before", []), ("after", ["--fixed"])):
        r = subprocess.run(
            # --wait-for-steps 600: the 5-step window, never the time-window fallback of a job a loaded machine slows
            [sys.executable, "-m", "msdiag.cli", "capture", "--out", str(tmp_path / name), "--jobs", "1", "--wait-for-steps", "600",
             "--", *job, *extra],
            cwd=tmp_path, capture_output=True, text=True, timeout=600,
        )
        assert r.returncode == 0, r.stderr
    rc, _, err = run("baseline", "save", "before-fix", str(tmp_path / "before"), "--jobs", "1")
    assert rc == 0, err
    # the default window records 5 steps: 5 against 5 can reach p = 2 / C(10, 5) = 0.0079
    d = diff_json("before-fix", tmp_path / "after", "--fail-on-regression", "5")
    assert d["step_time"]["judgement"] == "improved" and d["step_time"]["n_baseline"] == d["step_time"]["n_candidate"] == 5
    by = {j["metric"]: j for j in d["breakdown"]}
    assert by["data_wait_share"]["judgement"] == "improved"
    assert d["verdict"]["baseline"]["bottleneck"] == "data" and d["verdict"]["candidate"]["bottleneck"] != "data"
    assert "data-wait" in {f["rule_id"] for f in d["findings"]["resolved"]}
    # the other way round the gate fails
    diff_json(tmp_path / "after", "before-fix", "--fail-on-regression", "5", code=1)
