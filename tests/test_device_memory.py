"""Device memory, explained (metrics/device_memory.py): the device footprint from npu_module_mem.csv, its
composition at the peak, who holds the memory at the allocated peak, and the recompute advice sized from it.

Expected values are derived from the raw files with the csv module here (or by hand in a comment), never
from msdiag's own readers.
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest

from msdiag.analysis import Analysis, analyze
from msdiag.contract import build
from msdiag.metrics.registry import Context, Value, all_metrics
from msdiag.options import Options

LEVEL1 = "ascend/torchnpu-2rank-level1"
P2P = "ascend/torchnpu-2rank-p2p-2024"
OUT = "ASCEND_PROFILER_OUTPUT"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _module_sums(path: Path) -> dict[float, dict[str, float]]:
    """npu_module_mem.csv: per sample time, each module's Total Reserved(MB) (negative = not a size)."""
    out: dict[float, dict[str, float]] = defaultdict(dict)
    for r in _rows(path):
        mb = float(r["Total Reserved(MB)"])
        if mb >= 0:
            out[float(r["Timestamp(us)"])][r["Component"]] = mb
    return out


def _with(a: Analysis, mid: str, **options: Any) -> Value:
    """A metric of a real capture computed again with other options."""
    return all_metrics()[mid].fn(Context(capture=a.capture, steps=a.steps, options=Options(**options)))


def test_device_peak_is_every_module_summed(analysed: Callable[[str], Analysis], corpus: Path) -> None:
    a = analysed(LEVEL1)
    for rank in (0, 1):
        sums = _module_sums(corpus / LEVEL1 / f"rank{rank}_ascend_pt" / OUT / "npu_module_mem.csv")
        peak = max(sum(m.values()) for m in sums.values())
        # APP 1452 + GE 76 + HCCL 404.0625 + RUNTIME 92.234375 (every other module 0) = 2024.296875 MiB
        assert peak == pytest.approx(2024.296875)
        assert a.metrics["memory_device_peak_mb"].per_rank[rank] == pytest.approx(peak)
    # the framework pool's own peak stays where it was: PTA+GE reserved 1452 + 74.75
    assert a.metrics["memory_peak_reserved_mb"].value == pytest.approx(1526.75)
    # overhead outside the pool (APP + GE) at the peak: (404.0625 + 92.234375) / 2024.296875
    assert a.metrics["memory_device_overhead_share"].value == pytest.approx((404.0625 + 92.234375) / 2024.296875)


def test_peak_share_compares_the_device_footprint(analysed: Callable[[str], Analysis]) -> None:
    a = analysed(LEVEL1)
    # 2024.296875 MiB over 2.1 GiB = 2150.4 MiB; the basis is said
    assert _with(a, "memory_peak_share", device_memory_gb=2.1).value == pytest.approx(2024.296875 / 2150.4)
    assert "npu_module_mem" in str(a.metrics["memory_peak_basis"].value)
    # a share above 1 is reported as measured: 2024.296875 MiB over 1 GiB
    assert _with(a, "memory_peak_share", device_memory_gb=1).value == pytest.approx(2024.296875 / 1024)


def test_peak_share_falls_back_to_the_framework_pool(analysed: Callable[[str], Analysis]) -> None:
    # MindSpore CPU captures have neither npu_module_mem nor APP rows: the pool's reserved peak, as before
    a = analysed("mindspore-cpu/legacy_Profiler_graph_mem")
    reserved = a.metrics["memory_peak_reserved_mb"].value
    assert reserved is not None
    assert a.metrics["memory_device_peak_mb"].value is None
    assert _with(a, "memory_peak_share", device_memory_gb=32).value == pytest.approx(reserved / 32768)
    assert "framework pool" in str(a.metrics["memory_peak_basis"].value)


def test_composition_at_the_device_peak(analysed: Callable[[str], Analysis], corpus: Path) -> None:
    a = analysed(LEVEL1)
    rows = {r["rank"]: r for r in build(a)["memory_composition"]}
    c = rows[0]
    folder = corpus / LEVEL1 / "rank0_ascend_pt" / OUT
    assert c["basis"] == "npu_module_mem"
    assert (c["framework_pool_mb"], c["hccl_mb"], c["runtime_mb"], c["other_mb"]) == pytest.approx(
        (1452 + 76, 404.0625, 92.234375, 0.0)
    )
    # the device sample taken: of the samples at the peak sum, the nearest to the framework's allocated peak
    sums = _module_sums(folder / "npu_module_mem.csv")
    top = max(sum(m.values()) for m in sums.values())
    fw = [r for r in _rows(folder / "memory_record.csv") if r["Component"] == "PTA+GE"]
    t_alloc = float(max(fw, key=lambda r: float(r["Total Allocated(MB)"]))["Timestamp(us)"])
    ts = min((t for t, m in sums.items() if sum(m.values()) == top), key=lambda t: abs(t - t_alloc))
    assert c["ts_us"] == pytest.approx(ts)
    # allocated then: the allocator's last PTA+GE sample at or before it (within one 20 ms module sampling period)
    before = [r for r in fw if float(r["Timestamp(us)"]) <= ts]
    alloc = float(max(before, key=lambda r: float(r["Timestamp(us)"]))["Total Allocated(MB)"])
    assert c["framework_allocated_mb"] == pytest.approx(alloc)
    assert c["framework_cached_mb"] == pytest.approx(1528 - alloc)
    assert c["reason"] is None


def test_composition_says_when_the_files_do_not_overlap(analysed: Callable[[str], Analysis]) -> None:
    rows = {r["rank"]: r for r in build(analysed(P2P))["memory_composition"]}
    # rank 0: 25750 APP + 816.12109375 HCCL + 84.24609375 RUNTIME + LP 82.35546875 + ROS 10.7890625 at
    # 1724670453425855.84; its memory_record samples are from 1695115378...: another clock, no split of the pool
    r0 = rows[0]
    assert r0["device_mb"] == pytest.approx(25750 + 816.12109375 + 84.24609375 + 82.35546875 + 10.7890625)
    assert r0["other_mb"] == pytest.approx(82.35546875 + 10.7890625)
    assert r0["framework_allocated_mb"] is None and "clock" in r0["reason"]
    # rank 1 has no npu_module_mem.csv: the pool from memory_record, the driver's APP figure (10750.375) as device
    r1 = rows[1]
    assert r1["basis"] == "memory_record" and r1["device_mb"] == pytest.approx(10750.375)
    assert r1["hccl_mb"] is None and "npu_module_mem.csv absent" in r1["reason"]


def _live_at(path: Path, t: float) -> list[dict[str, str]]:
    out = []
    for r in _rows(path):
        alloc = float(r["Allocation Time(us)"])
        rel = r["Release Time(us)"].strip()
        if alloc <= t and (not rel or float(rel) > t):
            out.append(r)
    return out


def test_peak_holders(analysed: Callable[[str], Analysis], corpus: Path) -> None:
    a = analysed(LEVEL1)
    h = next(r for r in build(a)["memory_peak_holders"] if r["rank"] == 0)
    folder = corpus / LEVEL1 / "rank0_ascend_pt" / OUT
    fw = [r for r in _rows(folder / "memory_record.csv") if r["Component"] == "PTA+GE"]
    peak = max(fw, key=lambda r: float(r["Total Allocated(MB)"]))
    assert h["allocated_mb"] == pytest.approx(1261.04296875) == pytest.approx(float(peak["Total Allocated(MB)"]))
    live = _live_at(folder / "operator_memory.csv", float(peak["Timestamp(us)"]))
    live_mb = sum(float(r["Size(KB)"]) for r in live) / 1024
    # the classes account for the whole peak: live operator blocks + what was allocated before the capture
    assert sum(h["classes_mb"].values()) == pytest.approx(1261.04296875)
    before = next(t for t in h["top"] if t["name"] == "(allocated before the capture)")
    assert before["mb"] == pytest.approx(1261.04296875 - live_mb)
    # aten::mm: three weight-gradient blocks (16000.5 + 65536.5 + 147456.5 KB) allocated in the backward, never
    # released in the capture: gradients
    mm = next(t for t in h["top"] if t["name"] == "aten::mm")
    assert (mm["class"], mm["blocks"], mm["mb"]) == ("gradients", 3, pytest.approx((16000.5 + 65536.5 + 147456.5) / 1024))
    # SGD's _foreach_add temporaries, allocated in the optimizer phase and released in it: workspaces
    fa = next(t for t in h["top"] if t["name"] == "aten::_foreach_add")
    fa_mb = sum(float(r["Size(KB)"]) for r in live if r["Name"] == "aten::_foreach_add") / 1024
    assert (fa["class"], fa["mb"]) == ("workspaces", pytest.approx(fa_mb))
    # the peak falls in the optimizer step: the forward blocks still held (allocated after the step began, before
    # the first backward allocation aten::nll_loss_backward) are the logits aten::addmm 125.5 KB, nll_loss_forward,
    # two aten::sum and two aten::div of 0.5 KB each: 128 KB. (The two aten::empty_strided blocks came before
    # the step: alive the whole step, with the parameters.)
    assert h["classes_mb"]["activations"] == pytest.approx(128 / 1024)
    assert a.metrics["memory_activation_mb"].per_rank[0] == pytest.approx(h["classes_mb"]["activations"])


def test_forward_pass_cost(analysed: Callable[[str], Analysis], corpus: Path) -> None:
    a = analysed(LEVEL1)
    rows = [r for r in _rows(corpus / LEVEL1 / "rank0_ascend_pt" / OUT / "kernel_details.csv") if r["Step Id"].strip()]
    rows.sort(key=lambda r: float(r["Start Time(us)"]))
    back = re.compile(r"backward|Backprop|Grad", re.I)
    # the step's first backward kernel is aclnnNLLLossBackward_CastAiCore_Cast: 69 kernels run before it
    first = next(r for r in rows if back.search(r["Name"]) or back.search(r["Type"]))
    assert first["Name"] == "aclnnNLLLossBackward_CastAiCore_Cast"
    fwd = [r for r in rows if float(r["Start Time(us)"]) < float(first["Start Time(us)"])]
    assert len(fwd) == 69
    cost = a.metrics["recompute_full_cost_ms"].per_rank[0]
    assert cost == pytest.approx(sum(float(r["Duration(us)"]) for r in fwd) / 1000)  # 2.43 ms, one step
    # no attention in this CNN (LogSoftmax is the loss, not attention's softmax)
    assert a.metrics["recompute_selective_cost_ms"].per_rank[0] == 0.0
    assert a.metrics["recompute_selective_free_mb"].per_rank[0] == 0.0
    assert (a.metrics["recompute_full_cost_tflop"].value or 0) > 0


def test_no_backward_no_recompute_cost(analysed: Callable[[str], Analysis]) -> None:
    v = analysed(P2P).metrics["recompute_full_cost_ms"]
    assert v.value is None and "no backward kernel" in (v.reason or "")


@pytest.mark.slow
def test_near_capacity_advice_is_sized(corpus: Path) -> None:
    # a real capture with a stated device of 2.1 GiB: the device footprint 2024.296875 MiB is 94.1% of it, the
    # framework pool's 1526.75 MiB only 71% (the rule would have stayed quiet on the pool alone)
    a = analyze(str(corpus / LEVEL1), Options(jobs=1, device_memory_gb=2.1))
    f = next(x for x in a.findings if x["rule_id"] == "memory-near-capacity")
    assert "94.1% of the device (2024.3 MB of 2.1 GB" in f["message"]
    sized = next(s for s in f["suggestions"] if s["action"].startswith("Sized from this capture"))
    # activations 0.125 MB at the allocated peak; rank 1's forward pass is the longer: 2.45 ms
    assert "activations hold 0.1 MB" in sized["action"]
    assert f"{a.metrics['recompute_full_cost_ms'].value:.2f} ms" in sized["action"]
    assert a.metrics["memory_peak_reserved_mb"].value / (2.1 * 1024) < 0.9


def test_memory_view_has_device_and_holders(analysed: Callable[[str], Analysis]) -> None:
    v = analysed(LEVEL1).views.memory
    assert v.device is not None and v.device.peak_mb == pytest.approx(2024.296875)
    assert v.device.groups == ("framework_pool_mb", "hccl_mb", "runtime_mb", "other_mb")
    name, cls, mb = v.holders[0]
    assert (name, cls) == ("(allocated before the capture)", "parameters_optimizer") and mb > 700


def test_memory_chart_draws_the_device_and_names_the_holders(analysed: Callable[[str], Analysis]) -> None:
    from msdiag.report import charts

    ch = charts.memory(analysed(LEVEL1))
    assert "Below: rank 0's whole device footprint" in ch.caption
    # the three largest holders at the allocated peak (test_peak_holders): before the capture, _foreach_add, mm
    assert "(allocated before the capture) 701.5 MB" in ch.caption and "aten::mm 223.6 MB (gradients)" in ch.caption
    assert "HCCL buffers" in ch.svg and "device peak 1.98 GB (rank 0)" in ch.svg


def test_released_only_module_is_no_size(tmp_path: Path) -> None:
    # constructed (no corpus file has one): CANN writes -1 KB for a module whose allocations were not collected;
    # torch_npu divides by 1024 into this file's MB, so it arrives as -0.0009765625
    from msdiag.ingest.ascend_csv import read_npu_module_mem

    f = tmp_path / "npu_module_mem.csv"
    f.write_text(
        "Component,Timestamp(us),Total Reserved(MB),Device\n"
        "APP,1736408883657086.220\t,1452.0,NPU:0\n"
        "HCCL,1736408883657086.220\t,-0.0009765625,NPU:0\n"
    )
    df = read_npu_module_mem(f, 0)
    assert df["reserved_mb"].iloc[0] == 1452.0 and pd.isna(df["reserved_mb"].iloc[1])


def test_npu_mem_counter_stands_in_without_memory_records(analysed: Callable[[str], Analysis]) -> None:
    # level1 with its memory table taken away (as if memory_record.csv and npu_module_mem.csv were absent): the
    # trace's NPU MEM counter APP/Memory gives the device figure. trace_view.json samples (grep): rank 0 2160232 /
    # 2164456 / 2164460 KB, rank 1 2160236 / 2164460 / 2164464 KB: the peak is rank 1's 2164464 KB / 1024 MiB
    # (memory_record's APP rows of rank 1 say the same, 2113.734375)
    from dataclasses import replace

    a = analysed(LEVEL1)
    ranks = [replace(rd, tables={**rd.tables, "memory": rd.tables["memory"].iloc[:0]}) for rd in a.capture.ranks]
    cap = replace(a.capture, ranks=ranks)
    ctx = Context(capture=cap, steps=a.steps, options=Options(device_memory_gb=64))
    v = all_metrics()["memory_device_peak_mb"].fn(ctx)
    assert v.value == pytest.approx(2164464 / 1024)
    assert v.per_rank[0] == pytest.approx(2164460 / 1024)
    assert all_metrics()["memory_peak_share"].fn(ctx).value == pytest.approx(2164464 / 1024 / 65536)
