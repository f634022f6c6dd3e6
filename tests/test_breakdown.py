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
    from msdiag.model import concat_alike

    batched = 0
    for job in (job8, corpus / "ascend/torchnpu-2rank-level1", corpus / "ascend/torchnpu-2rank-level0"):
        dirs = discover.discover(job).ranks
        with loader.prefetch(dirs) as cuts:
            rds = [loader.load_rank_shallow(d) for d in dirs]
            at_once = [breakdown.step_breakdown(r) for r in rds]
            hows = [r.info.steps_from for r in rds]
            batched += sum(breakdown._from_task(r) is not None for r in rds)
            for r, f in zip(rds, at_once):
                r.tables["steps"] = f
            whole = concat_alike(rds, cuts)["steps"]
        assert any(w is whole for w, _ in cuts)  # the task's frame itself, not a concatenation
        for r, f, how in zip(rds, at_once, hows):
            alone = breakdown.step_breakdown(r)  # outside the task: the rank by itself
            assert how == r.info.steps_from == "the kernels' Step Id"
            pd.testing.assert_frame_equal(f, alone, check_exact=True)
            assert [type(f[c].array) for c in f.columns] == [type(alone[c].array) for c in alone.columns]
            for c in f.columns[f.dtypes == "float64"]:
                assert np.array_equal(f[c].to_numpy().view(np.int64), alone[c].to_numpy().view(np.int64)), c
    assert batched == 8 + 2 + 2
