"""Memory, input-pipeline, balance and hardware metrics (metrics/memory.py, data.py, balance.py, hardware.py).

Expected values are derived here from the raw files with the csv / json modules, or by hand in a
comment; constructed Contexts cover what no corpus capture holds (said at each one).
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest

from msdiag.analysis import Analysis
from msdiag.ingest.ascend_csv import read_minddata_pipeline
from msdiag.ingest.metadata import info_of_metadata, read_profiler_metadata
from msdiag.metrics.memory import device_memory_gb
from msdiag.metrics.registry import Context, Value, all_metrics
from msdiag.model import COUNTERS, DATA_PIPELINE, KERNELS, STEPS, TIMELINE, Capture, RankData, RankInfo
from msdiag.options import Options

IDS = {
    "memory_peak_allocated_mb": "MB",
    "memory_peak_reserved_mb": "MB",
    "memory_peak_active_mb": "MB",
    "memory_capacity_gb": "GB",
    "memory_peak_share": "ratio",
    "memory_fragmentation_mb": "MB",
    "memory_fragmentation_share": "ratio",
    "memory_activation_share": "ratio",
    "recompute_on": "flag",
    "data_wait_ms_per_step": "ms",
    "data_queue_empty_share": "ratio",
    "data_slowest_op": "op",
    "data_per_batch_ms": "ms",
    "data_workers_total": "workers",
    "data_workers_vs_cores": "ratio",
    "compute_imbalance": "ratio",
    "step_time_imbalance": "ratio",
    "slowest_rank_by_compute": "rank",
    "stage_imbalance": "ratio",
    "aicore_freq_drop": "ratio",
}


@pytest.fixture(scope="module")
def run(analysed: Callable[[str], Analysis]) -> Callable[[str], Analysis]:
    """The session's shared analyses (tests/conftest.py): read only; other options go through ``_with``."""
    return analysed


def _m(a: Analysis, mid: str) -> Value:
    return a.metrics[mid]


def _with(a: Analysis, mid: str, **options: Any) -> Value:
    """A metric of a real capture computed again with other options."""
    return all_metrics()[mid].fn(Context(capture=a.capture, steps=a.steps, options=Options(**options)))


def _info(meta: dict[str, Any]) -> RankInfo:
    """The typed RankInfo a reader makes of a rank's profiler_metadata.json (metrics read only that)."""
    md = meta.get("profiler_metadata")
    return RankInfo() if md is None else RankInfo(**info_of_metadata(md))


def _ctx(tables_by_rank: dict[int, dict[str, pd.DataFrame]], steps: pd.DataFrame | None = None,
         meta: dict[int, dict[str, Any]] | None = None, **options: Any) -> Context:
    ranks = [
        RankData(rank=r, family="ascend_pt", path=f"constructed/rank{r}", tables=t, info=_info((meta or {}).get(r, {})))
        for r, t in sorted(tables_by_rank.items())
    ]
    return Context(capture=Capture(path="constructed", ranks=ranks), steps=STEPS.empty() if steps is None else steps,
                   options=Options(**options))


def _fn(mid: str) -> Callable[[Context], Value]:
    return all_metrics()[mid].fn


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _f(x: str | None) -> float | None:
    return None if x is None or not x.strip() else float(x)


def test_every_metric_registered_once_with_its_unit() -> None:
    reg = all_metrics()
    for mid, unit in IDS.items():
        assert reg[mid].unit == unit, mid
        assert reg[mid].doc and reg[mid].source


# ---- memory peaks -------------------------------------------------------------------------

ASCEND = {
    "ascend/torchnpu-2rank-level0": ("rank0_ascend_pt", "rank1_ascend_pt"),
    "ascend/torchnpu-2rank-level1": ("rank0_ascend_pt", "rank1_ascend_pt"),
    "ascend/torchnpu-2rank-p2p-2024": ("test_rank_0", "test_rank_1"),
}


def _combined_rows(corpus: Path, folder: str, rank_dir: str) -> list[dict[str, str]]:
    # PTA+GE: the framework's two pools together (the module doc of metrics/memory.py)
    rows = _csv_rows(corpus / folder / rank_dir / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv")
    return [r for r in rows if r["Component"] == "PTA+GE"]


@pytest.mark.parametrize("folder", sorted(ASCEND))
def test_memory_peaks_from_the_combined_component(run: Callable[[str], Analysis], corpus: Path, folder: str) -> None:
    a = run(folder)
    for col, mid in (
        ("Total Allocated(MB)", "memory_peak_allocated_mb"),
        ("Total Reserved(MB)", "memory_peak_reserved_mb"),
        ("Total Active(MB)", "memory_peak_active_mb"),
    ):
        per = {}
        for rank, d in enumerate(ASCEND[folder]):
            vals = [v for r in _combined_rows(corpus, folder, d) if (v := _f(r.get(col))) is not None]
            per[rank] = max(vals) if vals else None
        got = _m(a, mid)
        assert got.per_rank == pytest.approx(per), (mid, got.per_rank, per)
        assert got.value == pytest.approx(max(v for v in per.values() if v is not None))


def test_memory_peaks_known_values(run: Callable[[str], Analysis]) -> None:
    # by hand from the files: level0 PTA+GE peaks 1188.1064453125 allocated, 1526.75 reserved (= PTA 1452 + GE 74.75);
    # p2p-2024 rank 0 writes no Total Active column: null for that rank, not 0
    a = run("ascend/torchnpu-2rank-level0")
    assert _m(a, "memory_peak_allocated_mb").value == 1188.1064453125
    assert _m(a, "memory_peak_reserved_mb").value == 1526.75
    p = _m(run("ascend/torchnpu-2rank-p2p-2024"), "memory_peak_active_mb")
    assert p.per_rank[0] is None and p.per_rank[1] == pytest.approx(4599.740723)


CPU_MEM = {
    "mindspore-cpu/legacy_Profiler_graph_mem": ["vm_17053_20261129090023616_ascend_ms/FRAMEWORK/cpu_ms_memory_record_0.txt"],
    "mindspore-cpu/msrun_dp2_pynative": [
        "vm_17649_20261129090141364_ascend_ms/FRAMEWORK/cpu_ms_memory_record_0.txt",
        "vm_17651_20261129090143876_ascend_ms/FRAMEWORK/cpu_ms_memory_record_1.txt",
    ],
}


def _cpu_peaks(files: list[Path]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {"allocated": {}, "reserved": {}, "active": {}}
    for rank, p in enumerate(files):
        rows = _csv_rows(p)
        for key, col in (("allocated", "Total Allocated(Byte)"), ("reserved", "Total Reserved(Byte)"),
                         ("active", "Total Active(Byte)")):
            out[key][rank] = max(int(r[col]) for r in rows) / 2**20  # bytes -> MiB
    return out


@pytest.mark.parametrize("folder", sorted(CPU_MEM))
def test_cpu_memory_peaks(run: Callable[[str], Analysis], corpus: Path, folder: str) -> None:
    a = run(folder)
    want = _cpu_peaks([corpus / folder / f for f in CPU_MEM[folder]])
    for key in ("allocated", "reserved", "active"):
        got = _m(a, f"memory_peak_{key}_mb")
        assert got.per_rank == pytest.approx(want[key])
        assert got.value == pytest.approx(max(want[key].values()))


def test_sample_trace_memory_peak(repo: Path, run: Callable[[str], Analysis]) -> None:
    [f] = sorted((repo / "sample_traces" / "train_small_cpu").glob("*/FRAMEWORK/cpu_ms_memory_record_0.txt"))
    want = _cpu_peaks([f])
    a = run("sample")
    assert _m(a, "memory_peak_allocated_mb").value == pytest.approx(want["allocated"][0])
    assert _m(a, "memory_peak_reserved_mb").value == pytest.approx(want["reserved"][0])


def test_no_memory_is_null_with_reason(run: Callable[[str], Analysis]) -> None:
    # profile_metadata_tiny was captured without profile_memory
    a = run("mindspore-cpu/profile_metadata_tiny")
    for mid in ("memory_peak_allocated_mb", "memory_fragmentation_mb", "memory_activation_share"):
        v = _m(a, mid)
        assert v.value is None and v.reason


# ---- fragmentation ------------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["ascend/torchnpu-2rank-level0", "ascend/torchnpu-2rank-p2p-2024"])
def test_fragmentation_at_the_peak_reserved_moment(run: Callable[[str], Analysis], corpus: Path, folder: str) -> None:
    a = run(folder)
    mb, share = {}, {}
    for rank, d in enumerate(ASCEND[folder]):
        rows = _combined_rows(corpus, folder, d)
        top = max(float(r["Total Reserved(MB)"]) for r in rows)
        alloc = max(float(r["Total Allocated(MB)"]) for r in rows if float(r["Total Reserved(MB)"]) == top)
        mb[rank], share[rank] = top - alloc, (top - alloc) / top
    assert _m(a, "memory_fragmentation_mb").per_rank == pytest.approx(mb)
    assert _m(a, "memory_fragmentation_share").per_rank == pytest.approx(share)
    assert _m(a, "memory_fragmentation_mb").value == pytest.approx(max(mb.values()))
    if folder.endswith("level0"):
        # by hand: 1526.75 reserved - 1188.1064453125 allocated = 338.6435546875 MB, 22.2 %
        assert _m(a, "memory_fragmentation_mb").value == pytest.approx(338.6435546875)


# ---- activation share ---------------------------------------------------------------------


def test_activation_share_from_operator_memory(run: Callable[[str], Analysis], corpus: Path) -> None:
    folder = "ascend/torchnpu-2rank-level0"
    a = run(folder)
    for rank, d in enumerate(ASCEND[folder]):
        rows = _combined_rows(corpus, folder, d)
        peak = max(float(r["Total Allocated(MB)"]) for r in rows)
        t = min(float(r["Timestamp(us)"]) for r in rows if float(r["Total Allocated(MB)"]) == peak)
        ops = _csv_rows(corpus / folder / d / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv")
        live_kb = sum(
            float(o["Size(KB)"])
            for o in ops
            if float(o["Allocation Time(us)"]) <= t and (not o["Release Time(us)"].strip() or float(o["Release Time(us)"]) > t)
        )
        assert _m(a, "memory_activation_share").per_rank[rank] == pytest.approx(live_kb / 1024 / peak, rel=1e-9)
    # 486.6 MB of operator blocks live at the 1188.1 MB peak
    assert _m(a, "memory_activation_share").value == pytest.approx(0.4095, abs=1e-4)


def test_activation_share_null_when_the_allocations_miss_the_peak(run: Callable[[str], Analysis]) -> None:
    # p2p-2024: rank 0's operator_memory starts after its memory_record peak (1695115378723902 > ...721880 us);
    # rank 1's operator_memory is from another run (1.7067e15 us) than its spreadsheet-rounded memory_record (1.69512E+15)
    v = _m(run("ascend/torchnpu-2rank-p2p-2024"), "memory_activation_share")
    assert v.value is None and v.per_rank == {0: None, 1: None}
    assert "do not cover" in (v.reason or "")


# ---- capacity and peak share --------------------------------------------------------------


@pytest.mark.parametrize(
    "device,gb",
    [
        ("910B2", 64.0), ("Ascend910B3", 64.0), ("ascend-910b1", 64.0), ("910B4", 32.0), ("Ascend910B4-1", 64.0),
        ("910A", 32.0), ("Ascend910", 32.0), ("910C", 64.0),
        ("A100-SXM4-80GB", 80.0), ("A100-PCIE-40GB", 40.0), ("H100", 80.0), ("H100 NVL", 94.0), ("H200", 141.0),
    ],
)
def test_device_memory_table(device: str, gb: float) -> None:
    assert device_memory_gb(device) == (gb, None)


@pytest.mark.parametrize("device", ["A100", "910B", "Gaudi2"])
def test_device_memory_unknown_or_ambiguous(device: str) -> None:
    gb, why = device_memory_gb(device)
    assert gb is None and why


def test_capacity_and_peak_share(run: Callable[[str], Analysis]) -> None:
    a = run("ascend/torchnpu-2rank-level0")
    v = _m(a, "memory_capacity_gb")
    assert v.value is None and "device" in (v.reason or "")
    assert _m(a, "memory_peak_share").value is None
    assert _with(a, "memory_capacity_gb", device="910B2").value == 64.0
    assert _with(a, "memory_capacity_gb", device="910B2", device_memory_gb="48").value == 48.0  # the option wins
    assert _with(a, "memory_capacity_gb", device="A100").value is None
    # level0 records npu_module_mem.csv: the device footprint is compared with capacity, not the framework pool's
    # 1526.75 MB reserved. Per sample time its modules sum at most to APP 1452 + GE 76 + HCCL 404.0625 + RUNTIME
    # 92.234375 = 2024.296875 MiB (both ranks; awk over the file), over 32 GiB = 32768 MiB
    assert _with(a, "memory_peak_share", device_memory_gb=32).value == pytest.approx(2024.296875 / 32768)
    # a malformed option never reaches a metric: the typed options refuse it when made
    with pytest.raises(ValueError, match="device_memory_gb"):
        _with(a, "memory_peak_share", device_memory_gb="lots")


# ---- recompute ----------------------------------------------------------------------------


def test_recompute_off_where_names_would_show_it(run: Callable[[str], Analysis]) -> None:
    # level1 is a torch with_stack capture (host frames 'main.py(375): train'), no checkpoint frame in it;
    # legacy_Profiler_graph_mem is graph mode with 'Gradients/...' op names, none starting with 'recompute'
    assert _m(run("ascend/torchnpu-2rank-level1"), "recompute_on").value == 0
    assert _m(run("mindspore-cpu/legacy_Profiler_graph_mem"), "recompute_on").value == 0


def test_recompute_unknown_without_scopes_or_stacks(run: Callable[[str], Analysis]) -> None:
    # p2p-2024 has bare kernel names only; a PyNative CPU capture has no graph scopes
    for folder in ("ascend/torchnpu-2rank-p2p-2024", "mindspore-cpu/legacy_Profiler_pynative_mem"):
        v = _m(run(folder), "recompute_on")
        assert v.value is None and "no way to tell" in (v.reason or "")


@pytest.mark.parametrize(
    "kernel,host",
    [
        # constructed: no corpus capture used recompute. MindSpore names a recomputed node "recompute_<scope>"
        ("recompute_Default/network/layers.0/attention/MatMul-op12", None),
        (None, "torch/utils/checkpoint.py(488): checkpoint"),
        (None, "autograd::engine::evaluate_function: CheckpointFunctionBackward"),
    ],
)
def test_recompute_on_from_names(kernel: str | None, host: str | None) -> None:
    tables: dict[str, pd.DataFrame] = {}
    if kernel:
        tables["kernels"] = KERNELS.frame({"rank": [0, 0], "name": ["Gradients/Default/MatMul-op3", kernel]})
    if host:
        tables["timeline"] = TIMELINE.frame({"rank": [0, 0], "lane": ["host", "host"], "name": ["main.py(10): train", host]})
    v = _fn("recompute_on")(_ctx({0: tables}))
    assert v.value == 1 and v.per_rank == {0: 1.0}


# ---- data wait ----------------------------------------------------------------------------


def test_data_wait_ms_per_step_from_trace_view(run: Callable[[str], Analysis], corpus: Path) -> None:
    folder = "ascend/torchnpu-2rank-level0"
    waits = []
    for d in ASCEND[folder]:
        ev = json.loads((corpus / folder / d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
        [step] = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
        lo, hi = float(step["ts"]), float(step["ts"]) + float(step["dur"])
        waits.append(sum(
            float(e["dur"]) for e in ev
            if "enumerate(DataLoader)" in str(e.get("name", "")) and lo <= float(e["ts"]) <= hi
        ))
    # 3618.32 and 4404.21 us: one step each, so the median of the two
    v = _m(run(folder), "data_wait_ms_per_step")
    assert v.value == pytest.approx(statistics.median(waits) / 1000, abs=1e-3)
    assert v.per_rank == pytest.approx({0: waits[0] / 1000, 1: waits[1] / 1000}, abs=1e-3)


def test_data_wait_null_when_not_measured(run: Callable[[str], Analysis]) -> None:
    v = _m(run("ascend/torchnpu-2rank-p2p-2024"), "data_wait_ms_per_step")  # no trace_view.json
    assert v.value is None and v.reason


# ---- MindData pipeline --------------------------------------------------------------------
# Pipeline files are not capture folders: read with the reader and put in a constructed Context.


def _pipeline_ctx(frames: dict[int, pd.DataFrame], **options: Any) -> Context:
    return _ctx({r: {"data_pipeline": f} for r, f in frames.items()}, **options)


@pytest.fixture(scope="module")
def manual(corpus: Path) -> pd.DataFrame:
    d = corpus / "mindspore-cpu/minddata_manual/md_parsed"
    return read_minddata_pipeline(d / "minddata_pipeline_raw_0.csv", d / "minddata_pipeline_summary_0.json", 0)


def test_minddata_manual_pipeline(corpus: Path, manual: pd.DataFrame) -> None:
    d = corpus / "mindspore-cpu/minddata_manual/md_parsed"
    raw = _csv_rows(d / "minddata_pipeline_raw_0.csv")
    summary = json.loads((d / "minddata_pipeline_summary_0.json").read_text())
    ctx = _pipeline_ctx({0: manual}, host_cores=2)
    # root EpochCtrl has no queue samples; its child Batch's output_queue_size is [0, 16, 16]: 1 of 3 empty
    batch = next(r for r in raw if r["op_type"] == "BatchOp")
    sizes = json.loads(batch["output_queue_size"])
    assert _fn("data_queue_empty_share")(ctx).value == pytest.approx(sizes.count(0) / len(sizes))
    # per_batch_time is in ms in the summary
    assert _fn("data_per_batch_ms")(ctx).value == pytest.approx(summary["per_batch_time"][0])
    workers = sum(int(r["num_workers"]) for r in raw)  # 1 + 2 + 1 + 2 + 2
    assert _fn("data_workers_total")(ctx).value == workers == 8
    assert _fn("data_workers_vs_cores")(ctx).value == pytest.approx(workers / 2)
    assert _fn("data_workers_vs_cores")(_pipeline_ctx({0: manual}, host_cores=16, ranks_per_node=4)).value == pytest.approx(
        workers * 4 / 16
    )
    # every queue is 2/3 full and the source (Generator) above 0.6: MindInsight names no op
    v = _fn("data_slowest_op")(ctx)
    assert v.value is None and "MindInsight" in (v.reason or "")


def test_workers_vs_cores_needs_host_cores(manual: pd.DataFrame) -> None:
    v = _fn("data_workers_vs_cores")(_pipeline_ctx({0: manual}))
    assert v.value is None and "host_cores" in (v.reason or "")


def test_legacy_pipelines(corpus: Path) -> None:
    run2 = read_minddata_pipeline(corpus / "mindspore-legacy/run_2/minddata_pipeline_raw_1.csv", None, 0)
    single = read_minddata_pipeline(corpus / "mindspore-legacy/single-rank/minddata_pipeline_raw_0.csv", None, 1)
    # run_2: Batch <- Map <- Map <- ImageFolder, every queue below the root empty (usage 0.0): the source
    # ImageFolder is under 0.6 and no child is fuller than its parent: ImageFolder(id=3).
    # single-rank: Batch <- Shuffle <- {TFReader 2, TFReader 3}, all at 0.3125: both readers under 0.6; id 2.
    a = _fn("data_slowest_op")(_pipeline_ctx({0: run2}))
    b = _fn("data_slowest_op")(_pipeline_ctx({1: single}))
    assert (a.value, b.value) == ("ImageFolder(id=3)", "TFReader(id=2)")
    both = _pipeline_ctx({0: run2, 1: single})
    v = _fn("data_slowest_op")(both)
    assert v.value == "ImageFolder(id=3)" and v.per_rank == {0: "ImageFolder(id=3)", 1: "TFReader(id=2)"}
    # queue the consumer reads: run_2's root Batch [0, 2] -> 0.5; single-rank's root Batch has no samples,
    # its child Shuffle [10, 20, 30] -> 0.0
    q = _fn("data_queue_empty_share")(both)
    assert q.per_rank == {0: 0.5, 1: 0.0} and q.value == 0.5
    assert _fn("data_workers_total")(both).per_rank == {0: 4 + 8 + 8 + 8, 1: 4 + 1 + 4 + 4}
    # the raw CSV has no per-batch time
    assert _fn("data_per_batch_ms")(both).value is None


def _pipe(usages: list[float], parents: list[int | None]) -> pd.DataFrame:
    n = len(usages)
    return DATA_PIPELINE.frame({
        "rank": [0] * n, "op_id": list(range(n)), "op_type": ["Batch", "Map", "Generator"][:n],
        "num_workers": [1] * n, "queue_usage": usages, "parent_id": parents,
    })


def test_slowest_op_child_rule_and_full_pipeline() -> None:
    # constructed (no corpus pipeline has a full child under an empty parent):
    # Map's child Generator is 0.9 full while Map's own queue is 0.05: gap 0.85 > 0.1 -> Map(id=1)
    v = _fn("data_slowest_op")(_pipeline_ctx({0: _pipe([0.1, 0.05, 0.9], [None, 0, 1])}))
    assert v.value == "Map(id=1)"
    # every non-root queue at least 0.8 full: the pipeline keeps up
    v = _fn("data_slowest_op")(_pipeline_ctx({0: _pipe([0.2, 0.85, 0.9], [None, 0, 1])}))
    assert v.value is None and "keeps up" in (v.reason or "")


def test_no_pipeline_is_null(run: Callable[[str], Analysis]) -> None:
    a = run("ascend/torchnpu-2rank-level0")  # torch_npu writes no MindData files
    for mid in ("data_queue_empty_share", "data_slowest_op", "data_per_batch_ms", "data_workers_total"):
        v = _m(a, mid)
        assert v.value is None and "MindData" in (v.reason or "")


# ---- balance ------------------------------------------------------------------------------


def _step_trace(corpus: Path, folder: str) -> list[dict[str, str]]:
    return [_csv_rows(corpus / folder / d / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")[0] for d in ASCEND[folder]]


def _spread(xs: list[float]) -> float:
    return (max(xs) - min(xs)) / (sum(xs) / len(xs))


def test_balance_on_p2p_from_step_trace_time(run: Callable[[str], Analysis], corpus: Path) -> None:
    # p2p-2024 has no trace_view.json: its step rows are step_trace_time.csv's (one step, 2)
    folder = "ascend/torchnpu-2rank-p2p-2024"
    rows = _step_trace(corpus, folder)
    comp = [float(r["Computing"]) for r in rows]  # 75174.57..., 75422.22
    total = [float(r["Computing"]) + float(r["Communication(Not Overlapped)"]) + float(r["Free"]) for r in rows]
    a = run(folder)
    assert _m(a, "compute_imbalance").value == pytest.approx(_spread(comp), rel=1e-9)
    assert _m(a, "step_time_imbalance").value == pytest.approx(_spread(total), rel=1e-9)
    assert _m(a, "slowest_rank_by_compute").value == 1


def test_step_time_imbalance_level0(run: Callable[[str], Analysis], corpus: Path) -> None:
    # msdiag's step span agrees with the profiler's Stage + Bubble (116251.25 / 100602.25 us) to 0.25 us
    rows = _step_trace(corpus, "ascend/torchnpu-2rank-level0")
    spans = [float(r["Stage"]) + float(r["Bubble"]) for r in rows]
    assert _m(run("ascend/torchnpu-2rank-level0"), "step_time_imbalance").value == pytest.approx(_spread(spans), abs=1e-5)
    # computing: msdiag's union of compute kernels vs the profiler's Computing differ by at most 1.5 us of 8.8 ms
    comp = [float(r["Computing"]) for r in rows]
    assert _m(run("ascend/torchnpu-2rank-level0"), "compute_imbalance").value == pytest.approx(_spread(comp), abs=5e-4)


def test_balance_null_for_one_rank(run: Callable[[str], Analysis]) -> None:
    a = run("mindspore-cpu/legacy_Profiler_graph_mem")
    for mid in ("compute_imbalance", "step_time_imbalance", "slowest_rank_by_compute"):
        v = _m(a, mid)
        assert v.value is None and "one rank" in (v.reason or "")


def _steps(rows: list[tuple[int, int, float]]) -> pd.DataFrame:
    return STEPS.frame({
        "rank": [r for r, _, _ in rows], "step": [s for _, s, _ in rows],
        "total_us": [1000.0] * len(rows), "computing_us": [c for _, _, c in rows],
    })


def test_compute_imbalance_over_common_steps() -> None:
    # constructed: rank 1 has an extra step 3; only steps 1-2 count: 200 vs 220 -> 20 / 210
    s = _steps([(0, 1, 100.0), (0, 2, 100.0), (1, 1, 110.0), (1, 2, 110.0), (1, 3, 500.0)])
    ctx = _ctx({0: {}, 1: {}}, steps=s)
    assert _fn("compute_imbalance")(ctx).value == pytest.approx(20 / 210)
    assert _fn("slowest_rank_by_compute")(ctx).value == 1


def test_stage_imbalance_with_real_metadata(corpus: Path) -> None:
    # constructed steps for 8 ranks, with the corpus's real profiler_metadata.json (TP2 PP2 DP2, world 8).
    # Megatron order tp-cp-dp-pp: ranks 0-3 are stage 0, 4-7 stage 1 (its "pp" group is [0, 4]).
    md = read_profiler_metadata(corpus / "ascend/metadata/profiler_metadata_tp2pp2dp2.json")
    assert next(g for g in md["parallel_groups"] if g["group_name"] == "pp")["global_ranks"] == [0, 4]
    s = _steps([(r, step, 100.0 + 10 * r) for r in range(8) for step in (1, 2)])
    meta = {r: {"profiler_metadata": md} for r in range(8)}
    ctx = _ctx({r: {} for r in range(8)}, steps=s, meta=meta)
    # stage 0's slowest rank 3: 2 x 130 = 260; stage 1's rank 7: 2 x 170 = 340; (340 - 260) / 300
    assert _fn("stage_imbalance")(ctx).value == pytest.approx(80 / 300)
    # the same from the pp group alone (no distributed_args): ranks 0 and 4 only
    groups_only = {"distributed_args": None, "parallel_groups": md["parallel_groups"]}
    ctx = _ctx({0: {}, 4: {}}, steps=s[s["rank"].isin([0, 4])], meta={0: {"profiler_metadata": groups_only},
                                                                      4: {"profiler_metadata": groups_only}})
    assert _fn("stage_imbalance")(ctx).value == pytest.approx((280 - 200) / 240)


def test_stage_imbalance_null_without_pp(run: Callable[[str], Analysis]) -> None:
    v = _m(run("ascend/torchnpu-2rank-level0"), "stage_imbalance")  # distributed_args is null there
    assert v.value is None and "pipeline" in (v.reason or "")
    md = {"distributed_args": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1,
                               "world_size": 2}, "parallel_groups": []}
    ctx = _ctx({0: {}, 1: {}}, steps=_steps([(0, 1, 1.0), (1, 1, 2.0)]),
               meta={0: {"profiler_metadata": md}, 1: {"profiler_metadata": md}})
    v = _fn("stage_imbalance")(ctx)
    assert v.value is None and "no pipeline parallelism" in (v.reason or "")


# ---- AI Core frequency --------------------------------------------------------------------


def test_aicore_freq_drop(run: Callable[[str], Analysis], corpus: Path) -> None:
    for d in ASCEND["ascend/torchnpu-2rank-level1"]:
        ev = json.loads((corpus / "ascend/torchnpu-2rank-level1" / d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
        assert {e["args"]["MHz"] for e in ev if e.get("name") == "AI Core Freq"} == {1800}  # never throttled
    assert _m(run("ascend/torchnpu-2rank-level1"), "aicore_freq_drop").value == 0.0
    assert _m(run("ascend/torchnpu-2rank-p2p-2024"), "aicore_freq_drop").value is None  # no trace_view.json
    # constructed: one rank drops to 1650 MHz (a 0 sample is no frequency and is left out)
    c = COUNTERS.frame({"rank": [0, 0, 0, 1], "track": ["AI Core Freq"] * 4, "name": ["AI Core Freq"] * 4,
                        "unit": ["MHz"] * 4, "ts_us": [1.0, 2.0, 3.0, 1.0], "value": [1800.0, 1650.0, 0.0, 1800.0]})
    v = _fn("aicore_freq_drop")(_ctx({0: {"counters": c[c["rank"] == 0]}, 1: {"counters": c[c["rank"] == 1]}}))
    assert v.value == pytest.approx(1 - 1650 / 1800) and v.per_rank[1] == 0.0
