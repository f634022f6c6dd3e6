"""Issue 20: msdiag stays bounded on hostile input: no hang, no runaway memory, no traceback, nothing read
outside the capture, and no figure silently changed by a value outside physical bounds.

Each case copies a real corpus capture into its temp folder, damages the copy in one way
(tests/hostile/mutators.py), hashes every input, runs ``python -m msdiag.cli`` in a subprocess bounded in
wall time and address space (tests/hostile/runner.py: limits and the measured memory baseline), then
checks the issue's "Done when": no timeout, not killed for memory, no "Traceback", peak RSS within a small
multiple of the input, inputs unchanged; an input that stops the analysis exits 2 with exactly one line
``msdiag: error: ...``; a rank left out of a multi-rank job is a note (exit 0/1).

Every case passes since issue 20 was fixed; a regression fails the run. A new hostile case that
msdiag does not handle yet may carry ``xfail(strict=True)`` with what fails, until its fix removes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hostile import mutators as m
from hostile.runner import (
    AS_LIMIT_BYTES,
    BASELINE_RSS_BYTES,
    BYTES_PER_GIB,
    BYTES_PER_MIB,
    RSS_PER_INPUT_BYTE,
    TIMEOUT_S,
    Run,
    assert_analyzed,
    assert_bounded,
    assert_refused,
    assert_stopped,
    can_drop_dac,
    failed_source,
    input_bytes,
    new_notes,
    run_cli,
    snapshot,
)

pytestmark = [pytest.mark.hostile, pytest.mark.slow]

# the real captures the cases start from (../shared/corpus, read in place)
L0 = "ascend/torchnpu-2rank-level0/rank0_ascend_pt"  # one Ascend rank, one step (50): 116,251 us
L1_JOB = "ascend/torchnpu-2rank-level1"  # two Ascend ranks (0, 1) with communication
L1_R0 = f"{L1_JOB}/rank0_ascend_pt"
DB = "ascend/torchnpu-2rank-level1-db/rank0_ascend_pt"  # the SQLite export of one rank
DB_FILE = "ascend_pytorch_profiler_0.db"
CPU = "mindspore-cpu/msrun_dp2_pynative/vm_17649_20261129090141364_ascend_ms"  # MindSpore CPU rank 0
PROF = "cann-msprof/PROF_000001_20230818142704322_COJGGGCANRMICFBC"  # raw CANN output, device 0
APO = m.APO
REL_TOL = 0.01  # "median step unchanged vs the clean copy within 1%"


class Bench:
    """One case's temp folder: copies of corpus captures, bounded runs, inputs checked unchanged."""

    def __init__(self, tmp: Path, corpus: Path) -> None:
        self.tmp = tmp
        self.corpus = corpus

    def copy(self, rel: str, name: str = "cap") -> Path:
        return m.copy_capture(self.corpus / rel, self.tmp / name)

    def run(self, *args: str, inputs: Sequence[Path], cwd: Path | None = None, timeout: float = TIMEOUT_S,
            as_limit: int = AS_LIMIT_BYTES, rss_budget: int | None = None, drop_dac: bool = False) -> Run:
        """A bounded CLI run; every input is snapshotted before and must be byte-identical after."""
        before = {p: snapshot(p) for p in inputs}
        run = run_cli(args, cwd=cwd or self.tmp, cache_home=self.tmp / "xdg-cache", timeout=timeout, as_limit=as_limit,
                      drop_dac=drop_dac)
        for p in inputs:
            assert snapshot(p) == before[p], f"msdiag changed its input {p}"
        if rss_budget is None:
            rss_budget = BASELINE_RSS_BYTES + int(RSS_PER_INPUT_BYTE * sum(input_bytes(p) for p in inputs))
        assert_bounded(run, rss_budget)
        return run

    def analyze(self, cap: Path, *extra: str, inputs: Sequence[Path] = (), drop_dac: bool = False) -> Run:
        return self.run("analyze", "--format", "json", *extra, str(cap), inputs=[cap, *inputs], drop_dac=drop_dac)

    def report(self, cap: Path, *extra: str, inputs: Sequence[Path] = ()) -> tuple[Run, Path]:
        """``msdiag report -o`` into the case folder, outside the capture."""
        html = self.tmp / "report.html"
        return self.run("report", "-o", str(html), *extra, str(cap), inputs=[cap, *inputs]), html


@pytest.fixture
def bench(tmp_path: Path, corpus: Path) -> Bench:
    return Bench(tmp_path, corpus)


@pytest.fixture(scope="session")
def clean(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., dict[str, Any]]:
    """The JSON report of an undamaged corpus capture (``--no-cache``), computed once per session."""
    seen: dict[tuple[str, ...], dict[str, Any]] = {}

    def get(rel: str, *extra: str) -> dict[str, Any]:
        key = (rel, *extra)
        if key not in seen:
            d = tmp_path_factory.mktemp("clean")
            run = run_cli(["analyze", "--format", "json", "--no-cache", *extra, str(corpus / rel)], cwd=d, cache_home=d / "xdg")
            seen[key] = assert_analyzed(run)
        return seen[key]

    return get


def close(a: Any, b: Any, rel: float = REL_TOL) -> bool:
    return a is not None and b is not None and abs(float(a) - float(b)) <= rel * abs(float(b))


def assert_sane_notes(report: dict[str, Any]) -> None:
    """Notes print finite, plausible figures: no inf / nan, no 20-digit numbers."""
    notes = list(report.get("notes", [])) + [n for r in report.get("ranks", []) for n in r.get("notes", [])]
    for n in notes:
        assert not re.search(r"\b-?inf\b|\bnan\b|\d{20,}", n, re.IGNORECASE), f"note with an absurd figure: {n[:300]}"


def assert_repaired(run: Run, clean: dict[str, Any], metric: str) -> dict[str, Any]:
    """The outlier is left out: ``metric`` within 1% of the clean copy's, and a new note says so."""
    report = assert_analyzed(run)
    got, want = report["metrics"][metric], clean["metrics"][metric]
    assert close(got, want), f"{metric} silently changed by the damage: {got} (clean copy: {want})"
    assert new_notes(report, clean), "no note says values were left out"
    assert_sane_notes(report)
    return report


def assert_stopped_or_noted(run: Run, clean: dict[str, Any], name: str) -> None:
    """Either the analysis stops naming ``name`` (exit 2, one line) or it goes on and says what it dropped
    (a failed source ``name``, or a new note)."""
    if run.returncode == 2:
        assert_stopped(run, name)
        return
    report = assert_analyzed(run)
    assert failed_source(report, name) is not None or new_notes(report, clean), f"{name}: damage passed without a word"
    assert_sane_notes(report)


def assert_handled(run: Run, name: str) -> None:
    """Bounded either way: exit 2 naming ``name``, or a complete report."""
    if run.returncode == 2:
        assert_stopped(run, name)
    else:
        assert_analyzed(run)


def same_figures(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Metric ids whose job-level values differ between two reports (floats to 1e-9)."""
    diff = []
    for k in sorted(set(a["metrics"]) | set(b["metrics"])):
        x, y = a["metrics"].get(k), b["metrics"].get(k)
        if isinstance(x, float) and isinstance(y, float):
            if abs(x - y) > 1e-9 * max(abs(x), abs(y), 1e-300):
                diff.append(k)
        elif x != y:
            diff.append(k)
    return diff


# ======== hangs and runaway memory from small files ========================================================

def test_fifo_named_trace_view(bench: Bench) -> None:
    """A named pipe is not a regular file: refused with that reason, never opened."""
    cap = bench.copy(L0)
    m.replace_with_fifo(cap / APO / "trace_view.json")
    assert_refused(bench.analyze(cap), "trace_view.json", "regular file", "fifo", "pipe")


def test_trace_view_symlink_to_dev_zero(bench: Bench) -> None:
    cap = bench.copy(L0)
    m.replace_with_symlink(cap / APO / "trace_view.json", "/dev/zero")
    assert_refused(bench.analyze(cap), "trace_view.json", "regular file", "outside", "device")


def test_profiler_info_symlink_to_dev_urandom(bench: Bench) -> None:
    cap = bench.copy(L0)
    m.replace_with_symlink(cap / "profiler_info_0.json", "/dev/urandom")
    assert_refused(bench.analyze(cap), "profiler_info_0.json", "regular file", "outside", "device")


@pytest.mark.parametrize("columns", [
    pytest.param(100_000, id="100k"),
    pytest.param(1_000_000, id="1M"),
])
def test_kernel_details_wide_header(bench: Bench, columns: int) -> None:
    """A header of 100k / 1M columns (0.7 / 8 MB): bounded, then refused or read."""
    cap = bench.copy(L0)
    m.widen_csv_header(cap / APO / "kernel_details.csv", columns)
    assert_handled(bench.analyze(cap), "kernel_details.csv")


def test_kernel_details_line_of_commas(bench: Bench) -> None:
    """The issue's line is 200 MB (6 GB in 10 s); 50 MB shows the same blow-up (~30x) and keeps CI fast."""
    cap = bench.copy(L0)
    m.append_comma_line(cap / APO / "kernel_details.csv", 50 * BYTES_PER_MIB)
    assert_handled(bench.analyze(cap), "kernel_details.csv")


def test_self_links_in_profiler_output(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    """Links back into the folder are not followed: the same answer as the clean capture (cache on)."""
    cap = bench.copy(L0)
    m.add_self_links(cap / APO, 8)
    report = assert_analyzed(bench.analyze(cap))
    assert close(report["metrics"]["step_time_us"], clean(L0)["metrics"]["step_time_us"], 1e-9)


def test_self_links_at_job_level(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    job = bench.copy(L1_JOB, "job")
    m.add_self_links(job, 8)
    report = assert_analyzed(bench.analyze(job, "--jobs", "2"))
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert close(report["metrics"]["step_time_us"], clean(L1_JOB)["metrics"]["step_time_us"], 1e-9)


def _rules_case(bench: Bench, write: Callable[[Path], Path]) -> tuple[Run, Path]:
    cap = bench.copy(L0)
    rules = bench.tmp / "rules"
    rule = write(rules)
    return bench.analyze(cap, "--rules", str(rules), inputs=[rules]), rule


def test_rules_alias_bomb(bench: Bench) -> None:
    run, rule = _rules_case(bench, m.write_rule_alias_bomb)
    assert_stopped(run, rule.name)


def test_rules_self_referencing_alias(bench: Bench) -> None:
    run, rule = _rules_case(bench, m.write_rule_self_alias)
    assert_stopped(run, rule.name)


def test_rules_deep_nesting(bench: Bench) -> None:
    run, rule = _rules_case(bench, m.write_rule_deep_nesting)
    assert_stopped(run, rule.name)


def test_rules_non_utf8(bench: Bench, repo: Path) -> None:
    run, rule = _rules_case(bench, lambda d: m.write_rule_non_utf8(d, repo / "rules" / "comm-exposed.yaml"))
    assert_stopped(run, rule.name)


def test_sqlite_recursive_view(bench: Bench) -> None:
    """A view is not a profiler table: the database (or that table) is refused, in bounded time."""
    cap = bench.copy(DB)
    m.sqlite_recursive_view(cap / APO / DB_FILE, "TASK")
    run = bench.analyze(cap)
    if run.returncode == 2:
        assert_stopped(run, DB_FILE)
    else:
        report = assert_analyzed(run)
        assert any(DB_FILE in s["name"] and s["status"] == "failed" for s in report["sources"])


# ======== a large MindSpore CPU trace ======================================================================

@pytest.mark.slow
def test_large_cpu_trace_memory(bench: Bench) -> None:
    """The issue's trace is 524 MB (peak 2.34 GB = 4.5x); ~160 MB of the corpus CPU trace's events, repeated
    later in time, shows the ratio and keeps CI within minutes. Budget: 3.5x the file + the baseline (measured:
    899 MiB for 160 MiB with the collectives and causes analysis, i.e. ~3.1x + the baseline; the margin is
    for other pandas / numpy versions)."""
    cap = bench.copy(CPU)
    trace = cap / APO / "trace_view.json"
    size = m.grow_trace(bench.corpus / CPU / APO / "trace_view.json", trace, 160 * BYTES_PER_MIB)
    budget = int(3.5 * size) + BASELINE_RSS_BYTES
    run = bench.run("analyze", "--format", "json", "--no-cache", str(cap), inputs=[cap], timeout=max(TIMEOUT_S, 600),
                    as_limit=budget + 3 * BYTES_PER_GIB, rss_budget=budget)
    assert_analyzed(run)


# ======== nothing read outside the capture =================================================================

SECRET_LINKS = {"step_trace_time.csv": f"{APO}/step_trace_time.csv", "trace_view.json": f"{APO}/trace_view.json",
                "profiler_info_0.json": "profiler_info_0.json"}


@pytest.mark.parametrize("name", [
    "step_trace_time.csv",
    "trace_view.json",
    "profiler_info_0.json",
])
def test_symlink_to_secret_outside(bench: Bench, name: str) -> None:
    """A link to a file outside the capture is refused; no byte of it reaches stdout, stderr or the HTML."""
    marker = f"HOSTILE-SECRET-{os.getpid()}-{name}"
    outside = bench.tmp / "outside"
    secret = m.plant_secret(outside, marker)
    cap = bench.copy(L0)
    m.replace_with_symlink(cap / SECRET_LINKS[name], secret)
    run = bench.analyze(cap, inputs=[outside])
    assert marker not in run.stdout + run.stderr, "a secret outside the capture was printed"
    rep, html = bench.report(cap, inputs=[outside])
    assert marker not in rep.stdout + rep.stderr, "a secret outside the capture was printed by report"
    assert not html.exists() or marker not in html.read_text(errors="replace"), "a secret outside the capture is in the HTML"
    assert_refused(run, name, "outside", "symlink")


# ======== tracebacks: one line and exit 2, or a note ======================================================

def test_non_utf8_trace_view_one_rank(bench: Bench) -> None:
    cap = bench.copy(L0)
    m.inject_non_utf8(cap / APO / "trace_view.json")
    assert_stopped(bench.analyze(cap), "trace_view.json")


def test_non_utf8_trace_view_rank1_of_2(bench: Bench) -> None:
    """With --jobs 2, rank 1 is left out with a note naming it; rank 0 is analysed (exit 0/1)."""
    job = bench.copy(L1_JOB, "job")
    m.inject_non_utf8(job / "rank1_ascend_pt" / APO / "trace_view.json")
    report = assert_analyzed(bench.analyze(job, "--jobs", "2"))
    assert [r["rank"] for r in report["ranks"]] == [0]
    assert any("rank 1" in n or "rank1" in n for n in report["notes"]), report["notes"]


def test_json_nested_1000_deep(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    cap = bench.copy(L0)
    m.append_deep_event(cap / APO / "trace_view.json", 1000)
    assert_stopped_or_noted(bench.analyze(cap), clean(L0), "trace_view.json")


def test_step_id_1e308(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    """A step id that is not the capture's: the kernel is counted, left out and noted."""
    cap = bench.copy(L0)
    m.set_csv_cells(cap / APO / "kernel_details.csv", "Step Id", {3: "1e308"})
    assert_repaired(bench.analyze(cap), clean(L0), "step_time_us")


def test_rank_id_beyond_int64(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    cap = bench.copy(L0)
    (cap / "profiler_info_0.json").rename(cap / "profiler_info_99999999999999999999999.json")
    assert_stopped_or_noted(bench.analyze(cap), clean(L0), "profiler_info_99999999999999999999999.json")


def test_bad_date_in_prof_folder(bench: Bench) -> None:
    """Month 13, day 45: the folder's date only orders duplicates, so a bad one is not fatal (or one line)."""
    bad = PROF.split("/")[-1].replace("20230818", "20231345")
    job = bench.tmp / "job"
    m.copy_capture(bench.corpus / PROF, job / bad)
    assert_handled(bench.analyze(job), bad)


def _unreadable_ok() -> bool:
    """Whether chmod 000 makes a folder unreadable to the child: as any user, and as root when the child can
    be started without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (CI runs as root)."""
    if os.geteuid() != 0:
        return True
    if not can_drop_dac():
        pytest.skip("runs as root without CAP_SETPCAP: chmod 000 cannot make a folder unreadable to the child")
    return True


@pytest.mark.parametrize("where", [
    "job",
    pytest.param("rank1_ascend_pt/ASCEND_PROFILER_OUTPUT", id="inside_a_rank"),
])
def test_unreadable_unrelated_subfolder(bench: Bench, clean: Callable[..., dict[str, Any]], where: str) -> None:
    """A chmod 000 folder msdiag has no business in cannot stop the analysis: the same figures as the clean job."""
    _unreadable_ok()
    job = bench.copy(L1_JOB, "job")
    locked = (job if where == "job" else job / where) / "scratch"
    locked.mkdir()
    (locked / "notes.txt").write_text("x")
    locked.chmod(0)
    try:
        report = assert_analyzed(bench.analyze(job, "--jobs", "2", drop_dac=True))
    finally:
        locked.chmod(0o755)
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert same_figures(report, clean(L1_JOB)) == []


def test_unreadable_rank_folder(bench: Bench) -> None:
    """Rank 1 of two unreadable (passes today: one line, exit 2); leaving it out with a note is also right."""
    _unreadable_ok()
    job = bench.copy(L1_JOB, "job")
    locked = job / "rank1_ascend_pt"
    locked.chmod(0)
    try:
        run = bench.analyze(job, "--jobs", "2", drop_dac=True)
    finally:
        locked.chmod(0o755)
    if run.returncode == 2:
        assert_stopped(run, "rank1_ascend_pt")
    else:
        report = assert_analyzed(run)
        assert [r["rank"] for r in report["ranks"]] == [0]
        assert any("rank1_ascend_pt" in n or "rank 1" in n for n in report["notes"]), report["notes"]


def test_unreadable_core_file(bench: Bench) -> None:
    """kernel_details.csv unreadable in a single rank: one line naming it, exit 2 (passes today)."""
    _unreadable_ok()
    cap = bench.copy(L0)
    locked = cap / APO / "kernel_details.csv"
    locked.chmod(0)
    try:
        run = bench.analyze(cap, drop_dac=True)
    finally:
        locked.chmod(0o644)
    assert_stopped(run, "kernel_details.csv")


def test_mathtext_kernel_type_in_report(bench: Bench) -> None:
    """A type such as Mat$\\foo{x}$Mul is text, not TeX: the report is written and shows it."""
    cap = bench.copy(L1_R0)
    kind = "Mat$\\foo{x}$Mul"
    m.set_csv_cells(cap / APO / "kernel_details.csv", "Type", {i: kind for i in range(40)})
    run, html = bench.report(cap)
    assert run.returncode in (0, 1), run.describe()
    assert html.is_file() and html.stat().st_size > 0
    assert kind in html.read_text(encoding="utf-8")


# ======== wrong answers without a word =====================================================================

def test_step_id_minus_one(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    cap = bench.copy(L0)
    m.set_csv_cells(cap / APO / "kernel_details.csv", "Step Id", {3: "-1"})
    assert_repaired(bench.analyze(cap), clean(L0), "step_time_us")


def _first_op_lasts_1e308(events: list[dict[str, Any]]) -> None:
    next(m.complete_events(events))["dur"] = "1e308"


def _all_ts_zero(events: list[dict[str, Any]]) -> None:
    for e in events:
        if "ts" in e:
            e["ts"] = "0"


def test_cpu_op_dur_1e308(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    """A duration longer than the capture is left out: computing share and step time as the clean copy's."""
    cap = bench.copy(CPU)
    m.edit_trace_events(cap / APO / "trace_view.json", _first_op_lasts_1e308)
    report = assert_repaired(bench.analyze(cap), clean(CPU), "computing_share")
    assert close(report["metrics"]["step_time_us"], clean(CPU)["metrics"]["step_time_us"])


def test_all_ts_zero(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    """Every event at ts 0 (a CPU trace, the only timeline it has): refused, or analysed with a note."""
    cap = bench.copy(CPU)
    m.edit_trace_events(cap / APO / "trace_view.json", _all_ts_zero)
    assert_stopped_or_noted(bench.analyze(cap), clean(CPU), "trace_view.json")


def test_nan_and_negative_durations(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    cap = bench.copy(L0)
    m.set_csv_cells(cap / APO / "kernel_details.csv", "Duration(us)", {3: "nan", 5: "-40"})
    assert_repaired(bench.analyze(cap), clean(L0), "step_time_us")


def test_dropped_string_ids(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    cap = bench.copy(DB)
    m.sqlite_drop_table(cap / APO / DB_FILE, "STRING_IDS")
    run = bench.analyze(cap)
    if run.returncode == 2:
        assert_stopped(run, DB_FILE, "STRING_IDS")
        return
    report = assert_analyzed(run)
    said = [s["reason"] for s in report["sources"] if s["status"] == "failed"] + new_notes(report, clean(DB))
    assert any("STRING_IDS" in str(x) for x in said), "kernel names lost without a word"


def test_absurd_start_time(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    """A timestamp before the capture's start: the kernel is left out with a note of plausible figures."""
    cap = bench.copy(L0)
    m.set_csv_cells(cap / APO / "kernel_details.csv", "Start Time(us)", {3: "-1e300"})
    assert_repaired(bench.analyze(cap), clean(L0), "step_time_us")


# ======== the cache ========================================================================================

def _drop_meta(d: dict[str, Any]) -> None:
    del d["meta"]


def _unknown_key(d: dict[str, Any]) -> None:
    d["sources"][0]["surprise"] = 1


def _rank_abc(d: dict[str, Any]) -> None:
    d["rank"] = "abc"


def _memory_over_kernels(entry: Path) -> None:
    def swap(tables: dict[str, Any]) -> None:
        tables["kernels"] = tables["memory"]  # stored under the kernels' name: their columns tell

    m.edit_cache_tables(entry, swap)


TAMPER: dict[str, Callable[[Path], None]] = {
    "rank_json_without_meta": lambda e: m.edit_rank_json(e, _drop_meta),
    "unknown_key_in_a_source": lambda e: m.edit_rank_json(e, _unknown_key),
    "rank_abc": lambda e: m.edit_rank_json(e, _rank_abc),
    "memory_over_kernels": _memory_over_kernels,
}


@pytest.mark.parametrize("how", list(TAMPER))
def test_tampered_cache_entry_is_rebuilt(bench: Bench, clean: Callable[..., dict[str, Any]], how: str) -> None:
    """An entry that does not validate is rebuilt: the same figures as --no-cache, no traceback."""
    cap = bench.copy(L0)
    cache = bench.tmp / "cache"
    assert_analyzed(bench.analyze(cap, "--cache", str(cache)))
    entries = m.cache_entries(cache)
    assert entries, "the first run wrote no cache entry"
    for e in entries:
        TAMPER[how](e)
    # the same command would print the stored report (msdiag/result_cache.py): without it the ranks are read again
    for results in cache.glob("msdiag-results-v*"):
        shutil.rmtree(results)
    report = assert_analyzed(bench.analyze(cap, "--cache", str(cache)))
    assert same_figures(report, clean(L0)) == []


def test_cache_from_another_working_folder(bench: Bench) -> None:
    """An Ascend rank with its CANN PROF_*/device_0/info.json.0 (MFU 0.0041 without cache): analysed from
    its parent with a relative path, then from a sibling folder with a warm cache, MFU is the same."""
    work, elsewhere, cache = bench.tmp / "work", bench.tmp / "elsewhere", bench.tmp / "cache"
    cap = m.copy_capture(bench.corpus / L1_R0, work / "cap")
    info = Path(PROF) / "device_0" / "info.json.0"
    m.copy_capture(bench.corpus / info, cap / info.relative_to("cann-msprof"))
    elsewhere.mkdir()
    args = ("analyze", "--format", "json")
    cold = assert_analyzed(bench.run(*args, "--no-cache", "../work/cap", cwd=elsewhere, inputs=[cap]))
    assert cold["metrics"]["mfu"] is not None, "the set-up lost its MFU: " + str(cold["metric_details"]["mfu"]["reason"])
    assert_analyzed(bench.run(*args, "--cache", str(cache), "cap", cwd=work, inputs=[cap]))
    warm = assert_analyzed(bench.run(*args, "--cache", str(cache), "../work/cap", cwd=elsewhere, inputs=[cap]))
    assert warm["metrics"]["mfu"] == pytest.approx(cold["metrics"]["mfu"], rel=1e-9)


def _world_writable(cache: Path) -> None:
    cache.chmod(0o777)


def _other_owner(cache: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the cache folder to another user")
    os.chown(cache, 65534, 65534)


@pytest.mark.parametrize("make_untrusted", [
    pytest.param(_world_writable, id="writable_by_others"),
    pytest.param(_other_owner, id="owned_by_another_user"),
])
def test_untrusted_cache_folder_is_refused(bench: Bench, clean: Callable[..., dict[str, Any]],
                                           make_untrusted: Callable[[Path], None]) -> None:
    """A cache folder is trusted like code: refused with one line on stderr, and the run goes on uncached."""
    cap = bench.copy(L0)
    cache = bench.tmp / "cache"
    cache.mkdir()
    make_untrusted(cache)
    run = bench.analyze(cap, "--cache", str(cache))
    report = assert_analyzed(run)
    assert len(run.stderr_lines) == 1 and "cache" in run.stderr_lines[0].lower(), run.describe()
    assert m.cache_entries(cache) == [], "the untrusted cache folder was written"
    assert same_figures(report, clean(L0)) == []


def test_pyarrow_floor(repo: Path) -> None:
    """``pyarrow>=14.0.1`` at least, declared and installed."""
    import pyarrow

    deps = (repo / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'"pyarrow>=(14\.0\.[1-9]|1[5-9]|[2-9]\d)', deps), "pyproject.toml must require pyarrow>=14.0.1"
    version = tuple(int(x) for x in re.findall(r"\d+", pyarrow.__version__)[:3])
    assert version >= (14, 0, 1)


# ======== internal errors ==================================================================================

# No hostile input is left that reaches an unexpected exception once issue 20 is fixed, so an internal bug
# is injected: the child replaces msdiag.metrics.registry.compute_all (which the analysis calls after the
# rank is read) with one that raises, before the CLI imports the analysis.
_INJECT_BUG = (
    "import msdiag.metrics.registry as _r\n"
    "def _bug(*a, **k):\n"
    "    raise ZeroDivisionError('injected internal bug')\n"
    "_r.compute_all = _bug\n"
)


def test_internal_error_exit_3(bench: Bench) -> None:
    """An internal error is one line and exit 3, never 1 (which --fail-on uses for findings)."""
    cap = bench.copy(L0)
    before = snapshot(cap)
    run = run_cli(["analyze", "--format", "json", str(cap)], cwd=bench.tmp, cache_home=bench.tmp / "xdg",
                  prelude=_INJECT_BUG)
    assert snapshot(cap) == before
    assert not run.timed_out and "Traceback" not in run.stderr, run.describe()
    assert run.returncode == 3, run.describe()
    assert len(run.stderr_lines) == 1 and run.stderr_lines[0].startswith("msdiag:"), run.describe()


# ======== --strict: a left-out rank or a failed source stops the analysis ==================================

def test_strict_left_out_rank(bench: Bench) -> None:
    """Rank 1's kernel_details.csv emptied: by default rank 1 is left out with a note (exit 0/1); with
    --strict the same job stops, exit 2 with one line naming the file."""
    job = bench.copy(L1_JOB, "job")
    (job / "rank1_ascend_pt" / APO / "kernel_details.csv").write_bytes(b"")
    report = assert_analyzed(bench.analyze(job, "--jobs", "2"))
    assert [r["rank"] for r in report["ranks"]] == [0]
    assert any(n.startswith("rank 1 left out") for n in report["notes"]), report["notes"]
    assert_stopped(bench.analyze(job, "--jobs", "2", "--strict"), "kernel_details.csv")


def test_strict_failed_source(bench: Bench) -> None:
    """op_statistic.csv emptied: a failed optional source by default, exit 2 naming it with --strict."""
    cap = bench.copy(L0)
    (cap / APO / "op_statistic.csv").write_bytes(b"")
    assert failed_source(assert_analyzed(bench.analyze(cap)), "op_statistic.csv") is not None
    assert_stopped(bench.analyze(cap, "--strict"), "op_statistic.csv")


# ======== msdiag capture ===================================================================================

# issue 20's capture cases (one SIGINT reaches the job once, non-Python commands checked for MindSpore, a
# refusal creates nothing, the user's sitecustomize stays theirs, exit 137 said as such, a newline in a folder
# name escaped) run real capture jobs: they are in tests/test_capture.py.


def test_harness_sees_a_clean_run(bench: Bench, clean: Callable[..., dict[str, Any]]) -> None:
    """The harness itself: a clean copy passes every check and matches the corpus' own report."""
    cap = bench.copy(L0)
    report = assert_analyzed(bench.analyze(cap))
    assert same_figures(report, clean(L0)) == []
    assert json.dumps(report["notes"]) == json.dumps(clean(L0)["notes"])
