"""`msdiag report ... --trace FILE.json`: the capture's timeline as a Chrome trace (msdiag/export.py).

Expected figures come from the raw files of the corpus, read by hand (python's json module on the profiler's own
trace_view.json), never from msdiag's output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES

from msdiag import export
from msdiag.cli import main

LEVEL1 = "ascend/torchnpu-2rank-level1"
SAMPLE = SAMPLE_TRACES / "train_small_cpu"
REQUEST_LOG = SAMPLE_TRACES / "serve_load" / "requests_rate50.jsonl"
#: float64 resolution of an epoch-microsecond timestamp (~1.7e15 us): the canonical tables hold start_us as float64
TS_RESOLUTION_US = 0.25


def names(trace: dict[str, Any], kind: str) -> dict[tuple[int, Any], str]:
    """(pid, tid) -> thread name (kind "thread_name"), or (pid, None) -> process name (kind "process_name")."""
    return {
        (e["pid"], e.get("tid") if kind == "thread_name" else None): e["args"]["name"]
        for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == kind
    }  # fmt: skip


@pytest.fixture(scope="module")
def level1_trace(analysed: Callable[[str], Any]) -> dict[str, Any]:
    """The level1 capture's trace, through strict JSON and back (what a viewer reads)."""
    return json.loads(json.dumps(export.chrome_trace(analysed(LEVEL1)), allow_nan=False))


def test_trace_is_the_event_format(level1_trace: dict[str, Any]) -> None:
    events = level1_trace["traceEvents"]
    assert {e["ph"] for e in events} == {"X", "i", "M"}
    for e in events:
        assert isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "X":
            assert isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["dur"] >= 0
            assert isinstance(e["tid"], int)
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g")
    assert level1_trace["displayTimeUnit"] == "ms"
    assert level1_trace["otherData"]["msdiag"]["ranks"] == [0, 1]


def test_a_kernel_is_where_the_profiler_put_it(level1_trace: dict[str, Any]) -> None:
    """rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json holds Conv2D1 once: {"pid": 3170820512 ("Ascend
    Hardware"), "tid": 2 ("Stream 2"), "ts": "1736408883704903.918", "dur": 313.88628125} (kernel_details.csv row 4:
    step 50, stream 2, start 1736408883704903.918, 313.886 us); and hcom_allReduce__586_0_1 once on HCCL's
    "Group 0 Communication" thread: ts "1736408883732241.564", dur 79089.52021875."""
    threads = names(level1_trace, "thread_name")
    procs = names(level1_trace, "process_name")
    want = {
        "Conv2D1": ("Stream 2", 1736408883704903.918, 313.88628125),
        "hcom_allReduce__586_0_1": ("Group 0 Communication", 1736408883732241.564, 79089.52021875),
    }
    for name, (thread, ts, dur) in want.items():
        found = [e for e in level1_trace["traceEvents"] if e["ph"] == "X" and e["name"] == name and e["pid"] == 0]
        assert len(found) == 1, name
        e = found[0]
        assert procs[(0, None)] == "rank 0" and threads[(0, e["tid"])] == thread
        assert abs(e["ts"] - ts) <= TS_RESOLUTION_US
        assert e["dur"] == pytest.approx(dur, rel=1e-9)


def test_msdiag_tracks_and_every_finding(level1_trace: dict[str, Any], analysed: Callable[[str], Any]) -> None:
    a = analysed(LEVEL1)
    procs = {name: pid for (pid, _), name in names(level1_trace, "process_name").items()}
    assert {"msdiag: steps", "msdiag: causes", "msdiag: findings", "rank 0", "rank 1"} <= set(procs)
    events = [e for e in level1_trace["traceEvents"] if e["ph"] == "X"]
    # the steps: step 50 on both ranks (kernel_details.csv's Step Id is 50 on every row of both ranks)
    steps = [e for e in events if e["pid"] == procs["msdiag: steps"]]
    assert sorted((e["tid"], e["name"]) for e in steps) == [(0, "step 50"), (1, "step 50")]
    assert all(e["args"]["total_ms"] > 0 for e in steps)
    # every finding is an interval, its message in args; the verdict heads the track
    marked = {e["args"]["rule_id"]: e for e in events if e["pid"] == procs["msdiag: findings"] and e["cat"] == "msdiag.finding"}
    assert set(marked) == {f["rule_id"] for f in a.findings} and len(marked) == len(a.findings) > 0
    for f in a.findings:
        assert marked[f["rule_id"]]["args"]["message"] == f["message"] and marked[f["rule_id"]]["dur"] > 0
    verdict = [e for e in events if e["cat"] == "msdiag.verdict"]
    assert len(verdict) == 1 and verdict[0]["name"].startswith("verdict: COMMUNICATION")
    # causes: the host syncs of the analysis (metrics/causes.py) and the collectives' late arrivals
    causes = [e for e in events if e["pid"] == procs["msdiag: causes"]]
    assert {e["name"] for e in causes} >= {"host-sync"}
    assert any(e["name"].startswith("late arrival: rank ") for e in causes)


def test_every_thread_holds_nested_or_disjoint_events(level1_trace: dict[str, Any]) -> None:
    """A viewer nests the complete events of a thread: two that overlap without one holding the other break it.
    The profiler's own Stream 4 of rank 0 has tasks that partly overlap: they go to ``Stream 4 (overlapping N)``."""
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in level1_trace["traceEvents"]:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        open_ends: list[float] = []
        for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
            while open_ends and open_ends[-1] <= s:
                open_ends.pop()
            assert not open_ends or e <= open_ends[-1], (s, e, open_ends[-1])
            open_ends.append(e)
    assert "Stream 4 (overlapping 2)" in names(level1_trace, "thread_name").values()


def test_nested_lanes_by_hand() -> None:
    """[0, 10] holds [1, 3] and [3, 5]; [4, 12] starts inside [0, 10] and ends after it: the next lane; [12, 13]
    starts when everything has ended: lane 0."""
    import numpy as np

    start = np.array([0.0, 1.0, 3.0, 4.0, 12.0])
    end = np.array([10.0, 3.0, 5.0, 12.0, 13.0])
    assert export._nested_lanes(start, end).tolist() == [0, 0, 0, 1, 0]


def test_only_the_steps_analysed_and_the_cap(analysed: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """mindspore-cpu/msrun_dp2_pynative: 2 ranks, several steps (the repeating host-op iterations: a CPU capture
    has no step markers). Every step the analysis found is written; with a cap below one step's events only the
    median step is, and the trace says what was left out."""
    a = analysed("cpu-dp2")
    full = export.chrome_trace(a)
    found = sorted({int(s) for s in a.steps["step"].dropna()})
    assert len(found) > 1 and full["otherData"]["msdiag"]["steps_written"] == found
    monkeypatch.setattr(export, "MAX_EVENTS", 50)
    capped = export.chrome_trace(a)
    meta = capped["otherData"]["msdiag"]
    assert len(meta["steps_written"]) == 1
    timeline = [e for e in capped["traceEvents"] if e["ph"] == "X" and not e["cat"].startswith("msdiag")]
    assert len(timeline) == 50
    assert any("beyond the cap of 50 events" in x for x in meta["left_out"])
    note = [e for e in capped["traceEvents"] if e["name"] == "msdiag: not in this trace"]
    assert len(note) == 1 and note[0]["s"] == "g" and note[0]["args"]["left_out"] == meta["left_out"]


def test_a_request_log_alone_is_its_requests(analysed: Callable[[str], Any]) -> None:
    """sample_traces/serve_load/requests_rate50.jsonl, 12 requests; its first record: r0, arrival_s 0.0,
    first_token_s 0.459491, finish_s 2.241934 (seconds on the log's clock) -> an interval of 2,241,934 us at 0
    holding TTFT (459,491 us) and decode (1,782,443 us)."""
    a = analysed(str(REQUEST_LOG))
    trace = json.loads(json.dumps(export.chrome_trace(a), allow_nan=False))
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sum(e["cat"] == "request" for e in events) == 12
    r0 = next(e for e in events if e["name"] == "request r0")
    assert (r0["ts"], r0["dur"]) == (0.0, pytest.approx(2241934.0))
    inner = {e["cat"]: e for e in events if e["pid"] == r0["pid"] and e["tid"] == r0["tid"] and e["ts"] < r0["dur"]}
    assert inner["request.ttft"]["ts"] == 0.0 and inner["request.ttft"]["dur"] == pytest.approx(459491.0)
    assert inner["request.decode"]["ts"] == pytest.approx(459491.0)
    assert inner["request.decode"]["dur"] == pytest.approx(2241934.0 - 459491.0)
    marked = {e["args"]["rule_id"] for e in events if e["cat"] == "msdiag.finding"}
    assert marked == {f["rule_id"] for f in a.findings} and marked
    assert "msdiag: findings" in names(trace, "process_name").values()


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stderr


def test_cli_trace_alone_and_refusals(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    code, err = run("report", str(SAMPLE), "--trace", str(out), "--jobs", "1", "--no-cache")
    assert code == 0, err
    assert err.strip() == f"msdiag: wrote {out.resolve()}"
    trace = json.loads(out.read_text(encoding="utf-8"))
    assert "msdiag: findings" in names(trace, "process_name").values()
    # the command keeps the ranks whole for the trace: no host event was dropped by the analysis' reduction
    assert not any(x.startswith("host events: only") for x in trace["otherData"]["msdiag"]["left_out"])
    assert any(e["ph"] == "X" and e["cat"] == "host" for e in trace["traceEvents"])
    # nothing asked for, a path inside the capture, the same file twice, an input file: exit 2, one line, no work
    code, err = run("report", str(SAMPLE))
    assert code == 2 and "nothing to write" in err
    code, err = run("report", str(corpus / LEVEL1), "--trace", str(corpus / LEVEL1 / "t.json"))
    assert code == 2 and "inside the capture folder" in err
    code, err = run("report", str(SAMPLE), "-o", str(out), "--trace", str(out))
    assert code == 2 and "both the HTML report" in err
    log = tmp_path / "requests.jsonl"
    log.write_bytes(REQUEST_LOG.read_bytes())
    code, err = run("report", str(log), "--trace", str(log))
    assert code == 2 and "never overwrites an input" in err and len(err.strip().splitlines()) == 1
    assert log.read_bytes() == REQUEST_LOG.read_bytes()
