"""The step breakdown from timelines: step detection on CPU captures, data wait, identities."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from msdiag.analysis import Analysis

Analysed = Callable[[str], Analysis]


def _steps(analysed: Analysed, name: str) -> tuple[Analysis, pd.DataFrame]:
    """The session's shared analysis of a capture (read only) and its steps sorted (a new frame)."""
    a = analysed(name)
    return a, a.steps.sort_values(["rank", "step"]).reset_index(drop=True)


@pytest.mark.parametrize(
    "folder,n_steps",
    [
        # CAPTURES.md: legacy_Profiler_* ran 8 steps under the profiler
        ("mindspore-cpu/legacy_Profiler_pynative_mem", 8),
        ("mindspore-cpu/legacy_Profiler_graph_mem", 8),
        # each rank's Default/AllReduce-op16 launches 6 times in cpu_op_execute_timestamp_N.txt
        ("mindspore-cpu/msrun_dp2_pynative", 6),
    ],
)
def test_cpu_steps_found_from_repeating_iterations(analysed: Analysed, folder: str, n_steps: int) -> None:
    a, s = _steps(analysed, folder)
    for rank, g in s.groupby("rank"):
        assert list(g["step"]) == list(range(1, n_steps + 1))
        assert "repeating iterations" in a.capture.ranks[0].info.steps_from
        # steps tile the capture: each starts where the previous ended
        assert np.allclose(g["start_us"].to_numpy()[1:], g["end_us"].to_numpy()[:-1])
        # and together span first op start to last op end
        k = a.capture.table("kernels")
        k = k[k["rank"] == rank]
        assert g["total_us"].sum() == pytest.approx(float((k["start_us"] + k["dur_us"]).max() - k["start_us"].min()), rel=1e-9)


def test_sample_has_its_five_active_steps(analysed: Analysed) -> None:
    # sample_traces/README.md: `msdiag capture` of train_small.py (20 steps) with the default window:
    # skip 2 steps, warm up 1 (step 3), record 5 -> steps 4-8, each marked by the dataset fetch that
    # starts it (msdiag_steps.json), numbered as the job counts its steps
    a, s = _steps(analysed, "sample")
    assert list(s["step"]) == [4, 5, 6, 7, 8]
    assert a.capture.ranks[0].info.steps_from == "ProfilerStep#N markers"


def test_breakdown_identities_on_every_row(analysed: Analysed) -> None:
    for folder in ("ascend/torchnpu-2rank-level1", "mindspore-cpu/msrun_dp2_pynative"):
        _, s = _steps(analysed, folder)
        parts = s["computing_us"] + s["communication_exposed_us"] + s["free_us"]
        assert np.allclose(parts, s["total_us"], rtol=1e-9)
        assert (s["overlapped_us"] >= -1e-6).all()
        assert np.allclose(s["overlapped_us"], s["communication_us"] - s["communication_exposed_us"])


def test_data_wait_from_torch_dataloader_events(analysed: Analysed) -> None:
    # rank0 level1 trace_view.json: the host event "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
    # (dur 3332.40 us) lies inside ProfilerStep#50; its __next__ frame (3481.13 us) contains it.
    # the session's analysis of the whole capture: each rank's steps are computed from that rank's own timeline
    a, s = _steps(analysed, "level1")
    assert (s.loc[0, "rank"], s.loc[0, "step"]) == (0, 50)
    # absolute times near 1.7e15 us resolve to 0.25 us in float64
    assert s.loc[0, "data_wait_us"] == pytest.approx(3332.40, abs=0.5)


@pytest.mark.parametrize("capture", ["ascend/torchnpu-2rank-level1", "ascend/torchnpu-2rank-level0", "ascend/torchnpu-2rank-p2p-2024",
                                     "mindspore-cpu/msrun_dp2_pynative", "mindspore-cpu/legacy_Profiler_graph_mem"])
def test_step_rows_built_from_arrays_as_from_a_frame_of_them(corpus: Path, capture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # breakdown._steps_frame builds the rank's step rows column by column: the frame STEPS.frame(pd.DataFrame(rows))
    # gave, on every rank of real captures (steps from markers, from repeating iterations, with bubbles and waits)
    from msdiag.ingest import discover, loader
    from msdiag.metrics import breakdown
    from msdiag.model import STEPS

    seen: list[int] = []
    fast = breakdown._steps_frame

    def both(rows: list[dict[str, object]]) -> pd.DataFrame:
        got = fast(rows)
        want = STEPS.frame(pd.DataFrame(rows))
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        # the same array classes too (an IntegerArray, a "string" array of the same storage), not only equal cells
        assert [type(got[c].array) for c in got.columns] == [type(want[c].array) for c in want.columns]
        seen.append(len(rows))
        return got

    monkeypatch.setattr(breakdown, "_steps_frame", both)
    for d in discover.discover(corpus / capture).ranks:
        breakdown.step_breakdown(loader.load_rank(d))
    assert seen and sum(seen) > 0
    # a value of another kind (a numpy int rank) is left to pandas: the same frame
    rows: list[dict[str, object]] = [{"rank": np.int64(1), "step": None, "total_us": 2.0, "source": "timeline"}]
    pd.testing.assert_frame_equal(fast(rows), STEPS.frame(pd.DataFrame(rows)), check_exact=True)
    assert fast([]).equals(STEPS.frame(pd.DataFrame([])))


@pytest.mark.parametrize("capture", ["ascend/torchnpu-2rank-level1", "ascend/torchnpu-2rank-p2p-2024",
                                     "mindspore-cpu/msrun_dp2_pynative", "mindspore-cpu/legacy_Profiler_graph_mem"])
def test_device_ops_read_once_as_the_columns_compared(corpus: Path, capture: str) -> None:
    # breakdown.placed_ops reads a rank's placed device ops once as arrays; each is what the column gave compared row by
    # row as before (kind == "communication" / "compute" on the object array, starts and durations as floats), on the
    # kernels of Ascend ranks and on the device ops a MindSpore CPU timeline gives
    from msdiag.ingest import discover, loader
    from msdiag.metrics import breakdown

    seen = 0
    for d in discover.discover(corpus / capture).ranks:
        ops = breakdown.placed_ops(loader.load_rank(d))
        f = ops.frame
        kind = f["kind"].to_numpy()
        assert ops.is_comm.dtype == bool and (ops.is_comm == (kind == "communication")).all()
        assert (ops.is_comp == (kind == "compute")).all()
        assert np.array_equal(ops.starts, f["start_us"].to_numpy(float), equal_nan=True)
        assert np.array_equal(ops.durs, f["dur_us"].to_numpy(float), equal_nan=True)
        assert not np.isnan(ops.starts).any()
        seen += len(ops)
    assert seen > 0


def test_a_pool_tasks_step_rows_computed_at_once_are_each_ranks_own(corpus: Path, job8: Path) -> None:
    # breakdown._task_steps computes the step rows of every rank of a pool task at once (ranks read shallow: no
    # timeline, kernels from the task's bulk read of kernel_details.csv); each rank's rows are step_breakdown's for the
    # rank alone, to the bit, with the same steps_from; the rows are slices of one frame, which concat_alike takes as it
    # is. On the 8-rank replicated job (3 steps a rank) and the corpus' 2-rank captures.
    from msdiag.ingest import discover, loader
    from msdiag.metrics import breakdown
    from msdiag.model import Rows, concat_alike, frame_of, hold

    batched = 0
    for job in (job8, corpus / "ascend/torchnpu-2rank-level1", corpus / "ascend/torchnpu-2rank-level0"):
        dirs = discover.discover(job).ranks
        with loader.prefetch(dirs) as cuts:
            rds = [loader.load_rank_shallow(d) for d in dirs]
            held = [breakdown.step_rows(r) for r in rds]  # (as metrics/reduce.py holds them)
            hows = [r.info.steps_from for r in rds]
            batched += sum(breakdown._from_task(r) is not None for r in rds)
            for r, x in zip(rds, held):
                hold(r, "steps", x)
            whole = concat_alike(rds, cuts)["steps"]
        assert any(w is whole for w, _ in cuts)  # the task's frame itself, not a concatenation
        # held as Rows of it, none cut by computing, holding or joining them
        assert all(isinstance(x, Rows) and x.whole is whole and x._frame is None for x in held)
        at_once = [frame_of(x) for x in held]
        for r, f, how in zip(rds, at_once, hows):
            alone = breakdown.step_breakdown(r)  # outside the task: the rank by itself
            assert how == r.info.steps_from == "the kernels' Step Id"
            pd.testing.assert_frame_equal(f, alone, check_exact=True)
            assert [type(f[c].array) for c in f.columns] == [type(alone[c].array) for c in alone.columns]
            for c in f.columns[f.dtypes == "float64"]:
                assert np.array_equal(f[c].to_numpy().view(np.int64), alone[c].to_numpy().view(np.int64)), c
    assert batched == 8 + 2 + 2


def _oracle_rows(ops: pd.DataFrame, hccl: pd.DataFrame, windows: list[tuple[int, float, float]]) -> list[dict[str, float]]:
    """The step parts of each window computed window by window with the one-window interval functions, as the
    module doc defines them: computing = union of compute kernels, communication = union of communication ops (and of
    the HCCL lane's ops, clipped to the window, when the kernels carry none), exposed = communication minus computing,
    free = the span minus both, bubble = union of the receives."""
    from msdiag import intervals as iv

    out = []
    for step, lo, hi in windows:
        w = ops[ops["step"] == step]
        kind, name = w["kind"].to_numpy(), w["name"].str.lower().to_numpy()
        s, d = w["start_us"].to_numpy(float), w["dur_us"].to_numpy(float)
        comp = iv.merge(iv.clip(iv.make(s[kind == "compute"], d[kind == "compute"]), lo, hi))
        cm = kind == "communication"
        comm_iv = iv.make(s[cm], d[cm])
        if not cm.any():
            extra = iv.clip(iv.make(hccl["start_us"].to_numpy(float), hccl["dur_us"].to_numpy(float)), lo, hi)
            comm_iv = (np.concatenate([comm_iv[0], extra[0]]), np.concatenate([comm_iv[1], extra[1]]))
        comm = iv.merge(iv.clip(comm_iv, lo, hi))
        recv = cm & np.array(["recv" in x or "receive" in x for x in name], dtype=bool)
        busy = iv.merge((np.concatenate([comp[0], comm[0]]), np.concatenate([comp[1], comm[1]])))
        exposed = iv.length(iv.subtract_merged(comm, comp))
        out.append({"start_us": lo, "end_us": hi, "total_us": hi - lo, "computing_us": iv.length(comp),
                    "communication_us": iv.length(comm), "communication_exposed_us": exposed,
                    "overlapped_us": iv.length(comm) - exposed, "free_us": max(0.0, (hi - lo) - iv.length(busy)),
                    "bubble_us": iv.total(iv.clip(iv.make(s[recv], d[recv]), lo, hi))})
    return out


@pytest.mark.parametrize("with_comm", [True, False])
def test_every_windows_parts_at_once_are_each_windows_own(with_comm: bool) -> None:
    # breakdown.step_breakdown computes every window of a rank at once (_window_parts on the windows' intervals laid end
    # to end); each row is the window-by-window computation to the bit: overlapping kernels, touching ones, a receive, a
    # duration left out (NaN) and a negative one (both bound their step, add no interval), and, where the kernels carry
    # no communication, the HCCL lane's ops clipped to each step (one of them spans two steps)
    from msdiag.metrics import breakdown
    from msdiag.model import KERNELS, TIMELINE, RankData

    rng = np.random.default_rng(17)
    rows = []
    for step, base in ((1, 1.7e15), (2, 1.7e15 + 5000.0), (3, 1.7e15 + 9000.25)):
        for i in range(40):
            start = base + float(rng.integers(0, 3000)) + (0.25 if i % 3 else 0.0)
            comm = with_comm and i % 4 == 0
            name = "hcom_receive__1_2" if comm and i % 8 == 0 else ("hcom_allReduce__3_4" if comm else f"MatMul{i % 5}")
            rows.append((step, name, "communication" if comm else "compute", start, float(rng.integers(1, 900))))
        rows.append((step, "Cast", "compute", base + 10.0, np.nan))
        rows.append((step, "Cast", "compute", base + 20.0, -3.0))
    ops = pd.DataFrame(rows, columns=["step", "name", "kind", "start_us", "dur_us"])
    k = KERNELS.frame({"rank": pd.array([3] * len(ops), dtype="Int64"), "step": pd.array(ops["step"].tolist(), dtype="Int64"),
                       "name": pd.array(ops["name"].tolist(), dtype="string"), "kind": pd.array(ops["kind"].tolist(), dtype="string"),
                       "core": pd.array(["AI_CORE"] * len(ops), dtype="string"),
                       "start_us": ops["start_us"].to_numpy(float), "dur_us": ops["dur_us"].to_numpy(float)})
    hccl = pd.DataFrame({"start_us": [1.7e15 + 100.0, 1.7e15 + 4900.0, 1.7e15 + 9500.0], "dur_us": [800.0, 400.0, 50.0]})
    tl = TIMELINE.frame({"rank": pd.array([3] * 3, dtype="Int64"), "lane": pd.array(["hccl"] * 3, dtype="string"),
                         "track": pd.array(["HCCL"] * 3, dtype="string"), "name": pd.array(["hcom_allReduce"] * 3, dtype="string"),
                         "start_us": hccl["start_us"].to_numpy(), "dur_us": hccl["dur_us"].to_numpy()})
    rd = RankData(rank=3, family="ascend_pt", path="/r3", tables={"kernels": k, "timeline": tl})
    got = breakdown.step_breakdown(rd)
    assert rd.info.steps_from == "the kernels' Step Id" and got["step"].tolist() == [1, 2, 3]
    ends = ops["start_us"] + ops["dur_us"].fillna(0.0)
    windows = [(st, float(ops.loc[ops["step"] == st, "start_us"].min()), float(ends[ops["step"] == st].max())) for st in (1, 2, 3)]
    for (_, row), want in zip(got.iterrows(), _oracle_rows(ops, hccl, windows)):
        for c, v in want.items():
            assert float(row[c]).hex() == float(v).hex(), c
    assert (got["bubble_us"] > 0).any() == with_comm and (got["communication_us"] > 0).all()
