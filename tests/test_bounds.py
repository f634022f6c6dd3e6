"""Issue 20, values outside physical bounds (msdiag/ingest/bounds.py): counted, left out, said.

The CLI cases are in tests/test_hostile.py; these check the counts, the rows and the verdict on real
corpus files damaged in one place (tests/hostile/mutators.py), with the expected figures derived by
hand in the comments, and the window arithmetic on small frames.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hostile import mutators as m
from hypothesis import given, settings
from hypothesis import strategies as st

from msdiag.analysis import analyze
from msdiag.errors import ParseError
from msdiag.ingest import bounds
from msdiag.ingest.loader import load
from msdiag.model import KERNELS, RankData
from msdiag.options import Options

L0 = "ascend/torchnpu-2rank-level0/rank0_ascend_pt"  # one rank, 191 kernels of step 50 in kernel_details.csv
CPU = "mindspore-cpu/msrun_dp2_pynative/vm_17649_20261129090141364_ascend_ms"
KD = f"{m.APO}/kernel_details.csv"


def _source(rd: RankData, name: str) -> Any:
    return next(s for s in rd.sources if s.name == name)


def test_clean_capture_repairs_nothing(corpus: Path) -> None:
    rd = load(corpus / L0, jobs=1).ranks[0]
    assert all(s.repaired is None for s in rd.sources)
    assert "repaired" not in _source(rd, "kernel_details.csv").to_dict()  # the JSON contract keeps its keys
    assert not [n for n in rd.notes if "physical bounds" in n]


def test_kernel_details_values_left_out_and_counted(corpus: Path, tmp_path: Path) -> None:
    cap = m.copy_capture(corpus / L0, tmp_path / "cap")
    # data rows (0 = first after the header): 3 trans_TransData_2 dur NaN, 5 ..._TransDataSpecial_TransData
    # dur -40, 7 the second ..._TransDataSpecial_TransData step -1, 9 trans_TransData_4 start -1e300
    m.set_csv_cells(cap / KD, "Duration(us)", {3: "nan", 5: "-40"})
    m.set_csv_cells(cap / KD, "Step Id", {7: "-1"})
    m.set_csv_cells(cap / KD, "Start Time(us)", {9: "-1e300"})
    rd = load(cap, jobs=1).ranks[0]
    src = _source(rd, "kernel_details.csv")
    assert src.repaired == {
        "kernels.dur_us: missing": 1,
        "kernels.dur_us: negative": 1,
        "kernels.start_us: before the clock's zero": 1,
        "kernels.step: negative step id": 1,
    }
    assert src.to_dict()["repaired"] == src.repaired
    k = rd.table("kernels")
    assert src.rows == len(k) == 190  # 191 kernels, the one with no possible start left out
    assert "trans_TransData_4" not in set(k["name"])
    # the others stay, their impossible value null: a NaN and a -40 us duration, a -1 step id
    assert k.loc[k["name"] == "trans_TransData_2", "dur_us"].isna().all()
    assert int(k["dur_us"].isna().sum()) == 2
    assert int(k["step"].isna().sum()) == 1 and int((k["step"] == 50).sum()) == 189
    note = next(n for n in rd.notes if n.startswith("kernel_details.csv: "))
    assert "4 value(s) outside physical bounds left out" in note


def test_verdict_says_it_stands_on_repaired_data(corpus: Path, tmp_path: Path, analysed: Callable[[str], Any]) -> None:
    cap = m.copy_capture(corpus / L0, tmp_path / "cap")
    m.set_csv_cells(cap / KD, "Step Id", {3: "-1"})
    damaged = analyze(cap, Options(jobs=1)).verdict
    clean = analysed(L0).verdict  # the session's analysis of the undamaged rank
    assert "repaired" not in clean
    assert damaged["repaired"] is True
    assert damaged["bottleneck"] == clean["bottleneck"]  # one kernel's step id changes no conclusion
    assert damaged["sentence"] == clean["sentence"] + (
        " (stands on repaired data: 1 value(s) outside physical bounds were left out; see the notes)")


def test_a_stopped_clock_is_the_files_parse_error(corpus: Path, tmp_path: Path) -> None:
    cap = m.copy_capture(corpus / CPU, tmp_path / "cap")

    def all_zero(events: list[dict[str, Any]]) -> None:
        for e in events:
            if "ts" in e:
                e["ts"] = "0"

    m.edit_trace_events(cap / m.APO / "trace_view.json", all_zero)
    with pytest.raises(ParseError) as err:
        load(cap, jobs=1)
    # trace_view.json's 1140 host ops (the kernels table of a CPU rank), every one at 0 us
    assert err.value.path.endswith("trace_view.json")
    assert "every one of its 1140 kernels rows starts at the same instant (0 us)" in err.value.problem


def _kernels(starts: list[float], durs: list[float], steps: list[int | None] | None = None) -> Any:
    n = len(starts)
    return KERNELS.frame({"rank": [0] * n, "step": steps or [1] * n, "name": [f"k{i}" for i in range(n)],
                          "start_us": starts, "dur_us": durs})


def test_window_is_median_plus_minus_an_hour_for_a_short_capture() -> None:
    t0 = 1.7e15
    # starts t0, t0+10, t0+20: median t0+10, deviations 10, 0, 10 -> MAD 10; 20 MADs = 200 us < 1 h
    lo, hi = bounds.window(np.array([t0, t0 + 10, t0 + 20]))
    assert (lo, hi) == (t0 + 10 - 3.6e9, t0 + 10 + 3.6e9)


def test_screen_leaves_out_what_no_capture_holds() -> None:
    t0 = 1.7e15
    # a start in the year 33,000 (1e18 us) is 3e17 us from the others' median: far outside; a 1e308 us
    # duration ends long after the last start + 1 h; inf is not finite; a 5 us kernel is fine
    df = _kernels([t0, t0 + 10, t0 + 20, 1e18, t0 + 30], [5.0, 1e308, float("inf"), 1.0, 5.0], [1, 1, -2, 1, 1])
    repair = bounds.Repair()
    out = bounds.screen("kernels", df, repair)
    assert list(out["name"]) == ["k0", "k1", "k2", "k4"]
    assert out["dur_us"].isna().tolist() == [False, True, True, False]
    assert out["step"].isna().tolist() == [False, False, True, False]
    assert repair.as_dict() == {
        "kernels.dur_us: not finite": 1,
        "kernels.dur_us: runs past the capture's end": 1,
        "kernels.start_us: far outside the capture's window": 1,
        "kernels.step: negative step id": 1,
    }
    assert repair.total == 4


def test_stopped_clock_needs_three_rows_at_one_instant() -> None:
    # two kernels on two streams may start together; three or more rows of a file at one instant cannot
    assert len(bounds.screen("kernels", _kernels([5.0, 5.0], [1.0, 2.0]), bounds.Repair())) == 2
    with pytest.raises(bounds.StoppedClock):
        bounds.screen("kernels", _kernels([5.0, 5.0, 5.0], [1.0, 2.0, 3.0]), bounds.Repair())


def test_a_figure_the_file_lacks_is_not_a_repair() -> None:
    # memory_allocs: a null release (never released in the capture) is a missing figure, not an error
    from msdiag.model import MEMORY_ALLOCS

    df = MEMORY_ALLOCS.frame({"rank": [0, 0], "name": ["a", "b"], "alloc_us": [10.0, 20.0], "dur_us": [5.0, float("nan")]})
    repair = bounds.Repair()
    assert len(bounds.screen("memory_allocs", df, repair)) == 2 and not repair


def test_repaired_counts_survive_the_rank_cache(corpus: Path, tmp_path: Path) -> None:
    # a rank with a repaired source is cached like any other and reads back with its counts
    cap = m.copy_capture(corpus / L0, tmp_path / "cap")
    m.set_csv_cells(cap / KD, "Duration(us)", {5: "-40"})
    cache = str(tmp_path / "cache")
    cold = analyze(cap, Options(jobs=1, cache=cache))
    warm = analyze(cap, Options(jobs=1, cache=cache))
    assert warm.capture.ingest["cache"]["hits"] == 1 and not warm.capture.ingest["cache"]["ignored"]
    assert _source(warm.capture.ranks[0], "kernel_details.csv").repaired == {"kernels.dur_us: negative": 1}
    assert [s.to_dict() for s in warm.capture.sources] == [s.to_dict() for s in cold.capture.sources]
    assert warm.verdict == cold.verdict


# ---- several files' rows judged at once (a bulk read: bounds.clean_spans, engine._clean_tables) ----------------

_times = st.one_of(st.floats(1.7e15, 1.7e15 + 5e6), st.sampled_from([float("nan"), float("inf"), -5.0, 1e18, 0.0]))
_durs = st.one_of(st.floats(0, 5e3), st.sampled_from([float("nan"), float("inf"), -1.0, 1e308]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(_times, _durs, st.sampled_from([1, 2, -1, None])), max_size=6), min_size=1, max_size=5),
       st.sampled_from(["kernels", "comm_ops", "memory_allocs", "op_stats"]), st.booleans())
def test_a_span_judged_clean_is_one_screen_gives_back_as_it_is(files: list[list[tuple[float, float, int | None]]],
                                                                table: str, stopped: bool) -> None:
    # files of one table laid end to end; a span clean_spans calls clean is one screen() returns unchanged (the same
    # object), counting nothing and raising nothing; a clean file of ordinary rows is called clean
    from msdiag.model import TABLES

    if stopped:  # a clock that stands still: three rows at one instant
        files = [*files, [(1.7e15, 1.0, 1)] * 3]
    cols = {"kernels": ("start_us", "dur_us"), "comm_ops": ("start_us", "elapse_us"),
            "memory_allocs": ("alloc_us", "dur_us"), "op_stats": (None, "total_us")}[table]
    frames = []
    for rows in files:
        data: dict[str, Any] = {"rank": [0] * len(rows), "step": [s for _, _, s in rows]}
        if table == "op_stats":
            data.pop("step")
        if cols[0] is not None:
            data[cols[0]] = [t for t, _, _ in rows]
        data[cols[1]] = [d for _, d, _ in rows]
        if table == "memory_allocs":
            data.pop("step")
        frames.append(TABLES[table].frame(data))
    whole = pd.concat(frames, ignore_index=True)
    spans, lo = [], 0
    for f in frames:
        spans.append((lo, lo + len(f)))
        lo += len(f)
    parts = [whole.iloc[a:b].reset_index(drop=True) for a, b in spans]
    for part, clean in zip(parts, bounds.clean_spans(table, whole, spans)):
        if clean:
            repair = bounds.Repair()
            assert bounds.screen(table, part, repair) is part and not repair
    ordinary = TABLES[table].frame({"rank": [0, 0, 0], **{c: [1.0, 2.0, 3.0] for c in bounds.CHECKS[table].durs},
                                    **({cols[0]: [1.7e15, 1.7e15 + 10, 1.7e15 + 20]} if cols[0] else {})})
    assert bounds.clean_spans(table, ordinary, [(0, 3), (1, 3), (2, 2)]) == [True, True, True]


_starts = st.one_of(st.floats(1.7e15, 1.7e15 + 5e6), st.sampled_from([1.7e15, 1.7e15 + 2.5e9, 1.7e15 + 8e9, 0.0]))
_lengths = st.one_of(st.floats(0, 5e3), st.sampled_from([0.0, 3.6e9, 3.6e9 + 0.5, 4e9, 1e308]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(_starts, _lengths, st.sampled_from([1, 2, -1])), max_size=6), min_size=1, max_size=6),
       st.sampled_from(["kernels", "comm_ops", "memory_allocs", "op_stats", "memory"]), st.booleans())
def test_usual_spans_judged_at_once_as_one_by_one(files: list[list[tuple[float, float, int]]], table: str,
                                                  stopped: bool) -> None:
    # bounds._usual_spans (every span of a bulk read judged at once) gives what the per-span judgement gives
    # (bounds._unchanged, the reference) wherever it answers: spans far apart in time (2.5e9 us, MARGIN_US / 2 is
    # 1.8e9), stopped clocks (three rows at 1.7e15), ends at or past the last start + MARGIN_US (3.6e9, 3.6e9 + 0.5 us,
    # 4e9, 1e308) and
    # negative steps are drawn; it answers (not None) at least where nothing is impossible and the spans lie close
    check = bounds.CHECKS[table]
    if stopped:  # a clock that stands still: three rows at one instant, among the others
        files = [*files[:1], [(1.7e15, 1.0, 1)] * 3, *files[1:]]
    spans, lo = [], 0
    for rows in files:
        spans.append((lo, lo + len(rows)))
        lo += len(rows)
    rows = [r for f in files for r in f]
    start = np.array([t for t, _, _ in rows]) if check.start is not None else None
    durs = {c: np.array([d for _, d, _ in rows]) for c in check.durs}
    step = np.array([float(s) for _, _, s in rows]) if check.step else None
    want = [hi <= lo or bounds._unchanged(table, check, None if start is None else start[lo:hi],
                                          {c: d[lo:hi] for c, d in durs.items()}, None if step is None else step[lo:hi])
            for lo, hi in spans]  # fmt: skip
    got = bounds._usual_spans(check, start, durs, step, spans)
    if got is not None:
        assert got == want
    plain = step is None or not (step < 0).any()
    close = start is None or all(hi == lo or np.ptp(start[lo:hi]) < 1e9 for lo, hi in spans)
    if plain and close and all(np.isfinite(d).all() for d in durs.values()):
        assert got is not None


def test_bulk_read_files_with_impossible_values_are_screened_as_alone(job8: Path, tmp_path: Path) -> None:
    # four ranks of the bench job read within one prefetch: a negative kernel duration in one, a negative step id in
    # another; those files are screened (counted, noted) exactly as read alone, the clean files are taken as they
    # are (no screen() of their frames), and each rank equals its read alone
    import shutil

    from msdiag.ingest import discover, engine, loader

    copies = []
    for d in discover.discover(job8).ranks[:4]:
        dst = tmp_path / d.path.name
        shutil.copytree(d.path, dst, ignore=shutil.ignore_patterns("trace_view.json"))
        copies.append(dst)

    def damage(rank_dir: Path, column: str, value: str) -> None:
        kd = rank_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
        head, body = kd.read_bytes().split(b"\n", 1)
        first, rest = body.split(b"\n", 1)
        parts = first.decode().split(",")
        parts[head.decode().split(",").index(column)] = value
        kd.write_bytes(head + b"\n" + ",".join(parts).encode() + b"\n" + rest)

    damage(copies[1], "Duration(us)", "-3")
    damage(copies[2], "Step Id", "-1")
    ranks = discover.discover(tmp_path).ranks
    alone = [loader.load_rank_shallow(d) for d in ranks]
    screened: list[str] = []
    real = bounds.screen

    def spy(table: str, df: Any, repair: bounds.Repair) -> Any:
        screened.append(table)
        return real(table, df, repair)

    bounds.screen = spy  # type: ignore[assignment]
    try:
        with loader.prefetch(ranks):
            together = [loader.load_rank_shallow(d) for d in ranks]
    finally:
        bounds.screen = real  # type: ignore[assignment]
    assert screened.count("kernels") == 2  # the two damaged files; the two clean ones taken as they are
    for a, t in zip(alone, together):
        assert (a.sources, a.notes, a.info) == (t.sources, t.notes, t.info)
        for name, df in a.tables.items():
            pd.testing.assert_frame_equal(t.tables[name], df, check_exact=True)
    kd = [s for s in together[1].sources if s.name == "kernel_details.csv"][0]
    assert kd.repaired == {"kernels.dur_us: negative": 1}
    assert [s for s in together[2].sources if s.name == "kernel_details.csv"][0].repaired == {"kernels.step: negative step id": 1}
    assert engine._BULK == {}
