"""`msdiag analyze` end to end: the JSON contract on real captures, and clear errors on bad input."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES

from msdiag.cli import main

SAMPLE = SAMPLE_TRACES / "train_small_cpu"
# analysed_json (tests/conftest.py): the JSON report object of a capture's shared analysis, as analyze prints it
AnalysedJson = Callable[[str], dict[str, Any]]


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def analyze_json(path: Path, *extra: str) -> dict:
    code, out, err = run("analyze", str(path), "--format", "json", "--jobs", "1", *extra)
    assert code == 0, err
    return json.loads(out)


def _step_trace(path: Path) -> dict[int, dict[str, float]]:
    with open(path, newline="") as f:
        return {int(r["Step"]): {k: float(v) for k, v in r.items() if k != "Step" and v} for r in csv.DictReader(f)}


@pytest.mark.parametrize("folder", ["torchnpu-2rank-level0", "torchnpu-2rank-level1"])
def test_steps_agree_with_step_trace_time(corpus: Path, analysed_json: AnalysedJson, folder: str) -> None:
    rep = analysed_json(f"ascend/{folder}")
    assert [r["rank"] for r in rep["ranks"]] == [0, 1]
    for rank in (0, 1):
        expected = _step_trace(corpus / "ascend" / folder / f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv")
        rows = [s for s in rep["steps"] if s["rank"] == rank]
        assert [s["step"] for s in rows] == sorted(expected)  # the profiler's own step ids (50)
        for s in rows:
            e = expected[s["step"]]
            # msdiag computes these from kernel_details.csv intervals; the profiler's file is the reference.
            # The span: Computing + Communication(Not Overlapped) + Free (= Stage when Bubble is 0).
            span = e["Computing"] + e["Communication(Not Overlapped)"] + e["Free"]
            assert s["source"].startswith("timeline")
            assert s["total_us"] == pytest.approx(span, rel=0.01)
            assert s["computing_us"] == pytest.approx(e["Computing"], rel=0.01)
            assert s["communication_us"] == pytest.approx(e["Communication"], rel=0.01)
            assert s["communication_exposed_us"] == pytest.approx(e["Communication(Not Overlapped)"], rel=0.01)
            assert s["free_us"] == pytest.approx(e["Free"], rel=0.01)
            assert s["preparing_us"] == pytest.approx(e["Preparing"], abs=1.0)
    assert rep["checks"] and all(c["ok"] for c in rep["checks"])


def test_kernel_counts_match_csv_rows(corpus: Path, analysed_json: AnalysedJson) -> None:
    rep = analysed_json("ascend/torchnpu-2rank-level1")
    for r in rep["ranks"]:
        with open(corpus / f"ascend/torchnpu-2rank-level1/rank{r['rank']}_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", newline="") as f:
            rows = sum(1 for _ in csv.DictReader(f))
        assert r["kernels"] == rows  # 191 data rows per rank
        assert r["kernels_from"] == "kernel_details.csv"


def test_communication_totals_match_communication_json(corpus: Path, analysed_json: AnalysedJson) -> None:
    rep = analysed_json("ascend/torchnpu-2rank-level1")
    for r in rep["ranks"]:
        data = json.loads((corpus / f"ascend/torchnpu-2rank-level1/rank{r['rank']}_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json").read_text())
        total_ms = sum(
            cat["Total Op Info"]["Communication Time Info"]["Elapse Time(ms)"]
            for step in data.values()
            for cat in step.values()
            if "Total Op Info" in cat
        )
        assert r["communication"]["source"] == "communication analysis"
        assert r["communication"]["elapse_us"] == pytest.approx(total_ms * 1000, rel=1e-6)


def test_json_contract_keys_and_types(corpus: Path) -> None:
    """End to end: the command's own JSON output (the tests above read the same object built in process)."""
    code, out, err = run("analyze", str(corpus / "ascend/torchnpu-2rank-level0"), "--format", "json", "--jobs", "1")
    assert code == 0, err
    rep = json.loads(out)
    # printed as json.dumps(indent=1, ensure_ascii=False) prints it, to the character (cli._indented)
    assert out == json.dumps(rep, indent=1, ensure_ascii=False) + "\n"
    for key in ("schema_version", "ranks", "steps", "metrics", "metric_details", "verdict", "findings", "sources"):
        assert key in rep
    assert all(isinstance(r["rank"], int) for r in rep["ranks"])
    assert all(isinstance(s["step"], int) for s in rep["steps"])
    # metrics maps each id straight to a number or null; the details sit apart
    assert all(v is None or isinstance(v, (int, float, str)) for v in rep["metrics"].values())
    assert set(rep["metrics"]) == set(rep["metric_details"])
    comm = [s for s in rep["sources"] if s["name"] == "communication.json"]
    assert comm and all(s["status"] == "absent" and "Level0" in s["reason"] for s in comm)


def test_json_is_indented_as_json_indents_it() -> None:
    # cli._indented: json's C encoder, then msgspec's indentation: the text of json.dumps(indent=1) on what a report
    # holds (empty and nested containers, non-ASCII and escaped text, floats of every form, null, booleans)
    from msdiag.cli import _indented

    doc = {"a": [], "b": {}, "c": [{"x": 1.5e-07, "y": -0.0, "z": 1e22, "w": 3.141592653589793}, [[]], [{}]],
           "t": "rank 0\u2028“quoted” \"q\" \\ \t\n é 中文 \x1b", "n": None, "f": False, "i": -12, "big": 2**60,
           "k": {"nested": {"deeper": [1, 2, {"e": []}]}}}
    assert _indented(doc) == json.dumps(doc, indent=1, ensure_ascii=False)


def test_json_indents_a_float_json_has_no_number_for_as_json_writes_it() -> None:
    # a report should hold none (analysis._agreement writes null for an infinite difference), but one that does is
    # printed as json.dumps(indent=1) prints it, not refused by msgspec (an internal error, exit 3)
    from msdiag.cli import _indented

    doc = {"x": [float("inf"), float("nan"), -float("inf")], "y": 1.5}
    assert _indented(doc) == json.dumps(doc, indent=1, ensure_ascii=False)


def _no_constant(name: str) -> None:
    raise AssertionError(f"the JSON holds {name}, which JSON has no number for")


def test_checks_hold_null_where_the_profilers_figure_is_zero(corpus: Path) -> None:
    """mindspore-legacy/run_2: step_trace_raw_1_detail_time.csv's step 1 has iteration_interval 0 (the profiler's
    free time of the step: free_us 0), while msdiag's kernel timeline leaves gaps in it (free_us > 0). That check's
    relative difference is infinite: null in the JSON, the check not ok, and the output strict JSON (analyze
    --format json of this capture exited 3 on msgspec's refusal of the Infinity json wrote)."""
    code, out, err = run("analyze", str(corpus / "mindspore-legacy" / "run_2"), "--format", "json", "--jobs", "1", "--no-cache")
    assert code == 0, err
    rep = json.loads(out, parse_constant=_no_constant)
    free = [c for c in rep["checks"] if (c["rank"], c["step"], c["column"]) == (1, 1, "free_us")]
    assert len(free) == 1 and free[0]["profiler"] == 0.0 and free[0]["msdiag"] > 0
    assert free[0]["relative_difference"] is None and free[0]["ok"] is False
    assert all(isinstance(c["relative_difference"], float) for c in rep["checks"] if c is not free[0])


def test_gc_is_lean_during_an_analysis_and_restored_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """cli._lean_gc: during the analysis the imports' objects are frozen and young collections rarer
    (GC_THRESHOLDS); after it, in a process running many analyses as this one does, both as they were."""
    import gc

    import msdiag.analysis
    from msdiag import cli

    seen = []
    real = msdiag.analysis.analyze

    def spy(*a: Any, **k: Any) -> Any:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        return real(*a, **k)

    monkeypatch.setattr(msdiag.analysis, "analyze", spy)
    before = (gc.get_threshold(), gc.get_freeze_count())
    r = CliRunner().invoke(main, ["analyze", str(SAMPLE), "--no-cache", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert seen and seen[0][0] == cli.GC_THRESHOLDS and seen[0][1] > 0
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


def test_cpu_capture_counts_host_collectives_as_communication(corpus: Path, analysed_json: AnalysedJson) -> None:
    rep = analysed_json("mindspore-cpu/msrun_dp2_pynative")
    assert sorted({s["rank"] for s in rep["steps"]}) == [0, 1]
    for rank in (0, 1):
        tv = next((corpus / "mindspore-cpu/msrun_dp2_pynative").glob(f"*/FRAMEWORK/cpu_framework_{rank}.txt")).parents[1]
        events = json.loads((tv / "ASCEND_PROFILER_OUTPUT/trace_view.json").read_text())
        ar = [float(e["dur"]) for e in events if e.get("ph") == "X" and "AllReduce" in e["name"]]
        assert ar
        # host ops run one at a time on the op thread: the union of AllReduce spans is their sum,
        # and the steps tile the capture, so the steps' communication adds up to it
        comm = sum(s["communication_us"] for s in rep["steps"] if s["rank"] == rank)
        assert comm == pytest.approx(sum(ar), rel=1e-3)


def test_sample_trace_analyzes(analysed_json: AnalysedJson) -> None:
    rep = analysed_json("sample")
    assert rep["capture"]["family"] == "mindspore_cpu"
    assert rep["ranks"][0]["kernels"] > 100
    assert rep["metrics"]["step_time_us"] > 0


def test_text_output_names_what_is_absent(corpus: Path) -> None:
    code, out, _ = run("analyze", str(corpus / "ascend/torchnpu-2rank-level0"), "--jobs", "1")
    assert code == 0
    assert "communication.json" in out and "Level0" in out
    assert "Step time" in out


# ---- bad input --------------------------------------------------------------------------------


def _copy_rank(corpus: Path, tmp: Path) -> Path:
    src = corpus / "ascend/torchnpu-2rank-level1/rank0_ascend_pt"
    dst = tmp / "rank0_ascend_pt"
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return dst


def _error(path: Path) -> str:
    code, out, err = run("analyze", str(path), "--jobs", "1")
    assert code == 2, (out, err)
    assert "Traceback" not in err and out == ""
    assert len(err.strip().splitlines()) <= 2
    return err


def test_missing_path(tmp_path: Path) -> None:
    assert "no such file or folder" in _error(tmp_path / "does-not-exist")


def test_wrong_folder(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    assert "no profiler capture found" in _error(tmp_path)


@pytest.mark.parametrize(
    "name,damage,expect",
    [
        ("trace_view.json", lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "trace_view.json"),
        ("trace_view.json", lambda p: p.write_bytes(b""), "empty"),
        ("trace_view.json", lambda p: p.write_text("this is not json"), "trace_view.json"),
        ("kernel_details.csv", lambda p: p.write_bytes(b""), "empty"),
        ("kernel_details.csv", lambda p: p.write_text("a,b,c\n1,2,3\n"), "missing column"),
        ("step_trace_time.csv", lambda p: p.write_text("Step,Computing\n50,abc\n"), "step_trace_time.csv"),
    ],
)
def test_broken_core_file_is_a_clear_error(corpus: Path, tmp_path: Path, name: str, damage, expect: str) -> None:
    rank = _copy_rank(corpus, tmp_path)
    damage(rank / "ASCEND_PROFILER_OUTPUT" / name)
    err = _error(rank)
    assert name in err and expect in err


def test_broken_optional_file_is_reported_and_the_rest_analyzed(corpus: Path, tmp_path: Path) -> None:
    rank = _copy_rank(corpus, tmp_path)
    (rank / "ASCEND_PROFILER_OUTPUT" / "communication.json").write_text('{"step50": {"collective": ')
    rep = analyze_json(rank)
    src = [s for s in rep["sources"] if s["name"] == "communication.json"][0]
    assert src["status"] == "failed" and src["reason"]
    assert rep["steps"] and rep["steps"][0]["step"] == 50


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def test_capture_folder_is_never_modified(corpus: Path, tmp_path: Path) -> None:
    rank = _copy_rank(corpus, tmp_path)
    before = _digest(tmp_path)
    listing = sorted(str(p) for p in tmp_path.rglob("*"))
    analyze_json(rank)
    run("analyze", str(rank), "--jobs", "1")
    assert _digest(tmp_path) == before
    assert sorted(str(p) for p in tmp_path.rglob("*")) == listing


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["analyze", str(tmp_path / "nope"), "--debug"])
    assert r.exit_code != 0 and r.exception is not None


@pytest.mark.slow
def test_installed_command_runs(corpus: Path) -> None:
    """The module entry point works as a separate process (what the console script calls)."""
    p = subprocess.run(
        [sys.executable, "-m", "msdiag.cli", "analyze", str(corpus / "ascend/torchnpu-2rank-level0"), "--format", "json"],
        capture_output=True, text=True, timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["ranks"]) == 2


@pytest.mark.slow
def test_parallel_read_equals_serial(corpus: Path) -> None:
    """Ranks read by the process pool give exactly what an in-process read gives."""
    serial = analyze_json(corpus / "ascend/torchnpu-2rank-level1")
    code, out, err = run("analyze", str(corpus / "ascend/torchnpu-2rank-level1"), "--format", "json", "--jobs", "2")
    assert code == 0, err
    parallel = json.loads(out)
    parallel["options"]["jobs"] = serial["options"]["jobs"]
    assert parallel == serial


def test_one_broken_rank_of_two_is_left_out_with_a_note(corpus: Path, tmp_path: Path) -> None:
    """A job killed mid-capture leaves one rank broken: the other ranks are still analyzed."""
    for r in (0, 1):
        src = corpus / f"ascend/torchnpu-2rank-level1/rank{r}_ascend_pt"
        shutil.copytree(src, tmp_path / src.name)
    for p in tmp_path.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    tv = tmp_path / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
    tv.write_bytes(tv.read_bytes()[:5000])
    rep = analyze_json(tmp_path)
    assert [r["rank"] for r in rep["ranks"]] == [0]
    assert any(n.startswith("rank 1 left out") and "trace_view.json" in n for n in rep["notes"])
    # every rank broken: an error, exit 2
    tv0 = tmp_path / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
    tv0.write_bytes(b"")
    assert "trace_view.json" in _error(tmp_path)
