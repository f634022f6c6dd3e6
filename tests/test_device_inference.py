"""The chip from the capture and the training throughput (issue 15 points 1 and 2), on real captures.

Every expected number is derived by hand from the raw files, as each test's comment says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from msdiag.analysis import Analysis
from msdiag.metrics import devices
from msdiag.metrics.flops import embedding_batch, image_batch
from msdiag.metrics.registry import Context, Value, all_metrics
from msdiag.options import Options
from msdiag.report.text import efficiency_lines

Run = Callable[[str], Analysis]


def _m(a: Analysis, mid: str) -> Value:
    return a.metrics[mid]


def _with(a: Analysis, mid: str, **options: Any) -> Value:
    """A metric of a real capture computed again with other options (a fresh context: no cached inference)."""
    return all_metrics()[mid].fn(Context(capture=a.capture, steps=a.steps, options=Options(**options)))


def _peak(cores: int, mhz: float) -> float:
    return cores * mhz * 1e6 * 16 * 16 * 16 * 2 / 1e12


def test_level1_is_a_910b2_from_block_dim_and_freq_counter(analysed: Run) -> None:
    # kernel_details.csv (both ranks): the 23 AI_CORE kernels (all with aic_total_cycles > 0, all Conv2D / MatMul
    # types) have Block Dim 16 (9x), 21, 22 (2x), 24 (11x): the largest carried by >= 10% of them is 24
    # (AI_VECTOR_CORE reaches 256 blocks, not cores); trace_view.json's 'AI Core Freq' counter: args.MHz 1800.
    # Peak = 24 x 1800e6 x 8192 / 1e12 = 353.8944 TFLOP/s; the 910B2 table entry (354) is 0.03% away.
    a = analysed("level1")
    assert _m(a, "ai_cores").value == 24
    assert _m(a, "aicore_clock_mhz").value == 1800.0
    peak = _m(a, "peak_tflops").value
    assert peak == pytest.approx(_peak(24, 1800)) == pytest.approx(353.8944)
    assert abs(peak / devices.PEAKS["910B2"].tflops - 1) < 0.02
    src = _m(a, "peak_source").value
    assert src.startswith("inferred: 24 AI Cores (largest cube Block Dim) x 1800 MHz (AI Core Freq)")
    assert "dense FP16/BF16" in src and "whatever the kernels' dtypes" in src
    assert _m(a, "device_name").value == "910B2"  # 24 cube cores at 1800 MHz: only 910B2 in the table
    assert _m(a, "vector_cores").value == 48
    assert _m(a, "memory_capacity_gb").value == 64.0  # 910B2: 64 GiB (memory table)
    # MFU with no flags: the model FLOPs per step over (median step x the inferred peak)
    mfu = _m(a, "mfu").value
    flops, step_us = _m(a, "flops_per_step").value, _m(a, "step_time_us").value
    assert mfu is not None and mfu == pytest.approx(flops / (step_us * 1e-6 * peak * 1e12), rel=0.05)


def test_p2p_clock_from_pmu_cycles_and_damaged_rows_left_out(analysed: Run) -> None:
    # No trace_view.json and no info.json: the clock is the PMU's. Rank 0's FlashAttentionScore (MIX_AIC, Block Dim
    # 24): aic_total_cycles 242151900 / aicore_time 5453.87 us / 24 = 1850.0 MHz (two more such rows: 1850.0).
    # Left out of the core count: ZerosLike / Cast (AI_CORE, Block Dim 48 / 33) count 0 cube cycles (vector work),
    # and a shifted row (MIX_AIC, Block Dim 48, 19.2 "cycles" over 2.4e8 us) whose PMU clock is ~0 MHz.
    # Rank 1 has no kernel with cube cycles (its AI_CORE Tril launches 1639 blocks on the vector cores).
    # Peak = 24 x 1850e6 x 8192 / 1e12 = 363.7248: 24 cores at 1850 MHz fit 910B1 and 910C (one die), whose
    # table peak is 363.7 (within 2%); both hold 64 GiB.
    a = analysed("p2p")
    assert _m(a, "ai_cores").value == 24
    assert _m(a, "aicore_clock_mhz").value == 1850
    assert _m(a, "peak_tflops").value == pytest.approx(_peak(24, 1850)) == pytest.approx(363.7248)
    assert _m(a, "device_name").value == "910B1 or 910C"
    for chip in ("910B1", "910C"):
        assert abs(_m(a, "peak_tflops").value / devices.PEAKS[chip].tflops - 1) < 0.02
    assert "(PMU: aic_total_cycles / aicore_time / Block Dim" in _m(a, "peak_source").value
    assert _m(a, "memory_capacity_gb").value == 64.0
    assert _m(a, "mfu").value is not None


def test_db_export_freq_table_and_npu_name(analysed: Run) -> None:
    # ascend_pytorch_profiler_0.db: AICORE_FREQ freq 1800 (3 samples), TASK blockDim of AI_CORE tasks up to 24,
    # NPU_INFO name 'Ascend910B' (a family: narrows the fit to 910B chips) -> 910B2, 353.8944 TFLOP/s.
    a = analysed("level1-db")
    assert {rd.info.device_name for rd in a.capture.ranks} == {"Ascend910B"}
    assert _m(a, "peak_tflops").value == pytest.approx(353.8944)
    assert _m(a, "device_name").value == "910B2"


def test_cann_info_json_gives_cores_and_clock(analysed: Run) -> None:
    # PROF_.../device_0/info.json.0: DeviceInfo ai_core_num 32, aic_frequency "1000", aiv_num 0 -> 910A,
    # 32 x 1000e6 x 8192 / 1e12 = 262.144 TFLOP/s.
    a = analysed("cann-msprof/PROF_000001_20230818142704322_COJGGGCANRMICFBC")
    assert _m(a, "peak_tflops").value == pytest.approx(262.144)
    assert "ai_core_num of CANN info.json" in _m(a, "peak_source").value
    assert _m(a, "device_name").value == "910A" and _m(a, "vector_cores").value == 0


def test_level0_has_the_clock_but_no_core_count(analysed: Run) -> None:
    # Level0's kernel_details.csv has Block Dim 0 on every row (no cube kernel identified) and trace_view.json the
    # AI Core Freq counter at 1800 MHz: no peak, and the chips at 1800 MHz (or of unpublished clock) differ in
    # memory (910B4: 32 GiB), so the capacity stays unknown too.
    a = analysed("level0")
    assert _m(a, "peak_tflops").value is None and "cube core count" in (_m(a, "peak_tflops").reason or "")
    assert _m(a, "aicore_clock_mhz").value == 1800.0
    assert _m(a, "device_name").value == "910B2 or 910B3 or 910B4"
    assert _m(a, "memory_capacity_gb").value is None


def test_910a_vector_work_in_waves_is_no_core_count(analysed: Run) -> None:
    # MindSpore 1.x run_2 (framework_raw / aicore_intermediate): 107 AI_CORE launches, Block Dim 32 on 52 of them,
    # 60 / 48 / 38 on 2 / 5 / 1 (vector ops on 910A's AI Cores launch more blocks than cores, in waves): 32 cores,
    # which only 910A has; no clock recorded, so no peak.
    a = analysed("mindspore-legacy/run_2")
    assert _m(a, "ai_cores").value == 32 and _m(a, "device_name").value == "910A"
    assert _m(a, "peak_tflops").value is None and "clock" in (_m(a, "peak_tflops").reason or "")


def test_cpu_capture_has_no_accelerator_peak(analysed: Run) -> None:
    a = analysed("cpu-graph")
    v = _m(a, "peak_tflops")
    assert v.value is None and "CPU capture" in (v.reason or "")


def test_device_and_peak_options_override_the_inference(analysed: Run) -> None:
    a = analysed("p2p")
    assert _with(a, "peak_tflops", device="910B2").value == 354.0
    assert _with(a, "peak_source", device="910B2").value.startswith("910B2:")
    assert _with(a, "device_name", device="ascend910b2").value == "910B2"
    assert _with(a, "peak_tflops", peak_tflops=300.0, device="910B2").value == 300.0
    assert _with(a, "memory_capacity_gb", device_memory_gb=32).value == 32.0


def test_chips_fitting() -> None:
    assert [c.name for c in devices.chips_fitting(24, 1800.0)] == ["910B2"]
    assert [c.name for c in devices.chips_fitting(24, 1851.0)] == ["910B1", "910C"]  # within 1% of 1850
    assert [c.name for c in devices.chips_fitting(24, 1850.0, "Ascend910B")] == ["910B1"]  # the recorded family narrows
    assert [c.name for c in devices.chips_fitting(20, 1800.0)] == ["910B3", "910B4"]  # 910B4's clock is unpublished
    assert devices.chips_fitting(24, 1500.0) == []
    assert devices.cube_peak_tflops(24, 1800.0) == pytest.approx(353.8944)


# ---- the batch in the inputs ---------------------------------------------------------------------


def test_embedding_and_image_batches_from_real_rows() -> None:
    # p2p rank 1 GatherV2: Input Shapes "6400,5120;2,8192;1", dtypes DT_BF16;INT32;INT64 -> batch 2 x seq 8192
    assert embedding_batch("GatherV2", '"6400,5120;2,8192;1"', "DT_BF16;INT32;INT64") == (2, 8192)
    # single-files kernel_details_pipeutil_large.csv: GatherV2 "6400,12288;4,1024;1" FLOAT16;INT32;INT64
    assert embedding_batch("GatherV2", "6400,12288;4,1024;1", "FLOAT16;INT32;INT64") == (4, 1024)
    # a Gather whose indices are floats, or a 1-D index, is no embedding lookup
    assert embedding_batch("GatherV2", "6400,5120;2,8192;1", "DT_BF16;FLOAT;INT64") is None
    assert embedding_batch("GatherV2", "6400,5120;16384;1", "DT_BF16;INT32;INT64") is None
    assert embedding_batch("Cast", '"2,8193"', "INT64") is None
    # level1's first kernel: TransData "32,3,224,224" FLOAT NCHW -> 32 images; a 64-channel map is no input
    assert image_batch('"32,3,224,224"', "FLOAT", "NCHW") == 32
    assert image_batch('"32,64,55,55"', "FLOAT", "NCHW") is None
    assert image_batch('"32,224,224,3"', "FLOAT16", "NHWC") == 32


def test_throughput_from_the_embedding_indices(analysed: Run) -> None:
    # p2p rank 1 (step 2): first embedding lookup GatherV2 indices [2, 8192] -> 2 samples, 16384 tokens per step on
    # this device; no parallel layout recorded, so the job's figures are unknown and per device is the device's batch.
    a = analysed("p2p")
    step_s = _m(a, "step_time_us").value * 1e-6
    assert _m(a, "samples_per_s_device").value == pytest.approx(2 / step_s)
    assert _m(a, "tokens_per_s_device").value == pytest.approx(2 * 8192 / step_s)
    assert "batch 2 x sequence 8192" in _m(a, "throughput_source").value
    job = _m(a, "tokens_per_s")
    assert job.value is None and "not recorded" in (job.reason or "")


def test_throughput_from_the_image_input(analysed: Run) -> None:
    # level1 step 50 on both ranks: the first kernel trans_TransData_0 reads "32,3,224,224" FLOAT NCHW -> 32 samples
    a = analysed("level1")
    step_s = _m(a, "step_time_us").value * 1e-6
    assert _m(a, "samples_per_s_device").value == pytest.approx(32 / step_s)
    v = _m(a, "tokens_per_s_device")
    assert v.value is None and "no tokens" in (v.reason or "")


def test_tokens_per_step_option(analysed: Run) -> None:
    # 65536 tokens per step for the job over the capture's 2 ranks (no job size recorded)
    a = analysed("p2p")
    step_s = _m(a, "step_time_us").value * 1e-6
    assert _with(a, "tokens_per_s", tokens_per_step=65536).value == pytest.approx(65536 / step_s)
    assert _with(a, "tokens_per_s_device", tokens_per_step=65536).value == pytest.approx(65536 / 2 / step_s)
    v = _with(a, "samples_per_s", tokens_per_step=65536)
    assert v.value is None and "not samples" in (v.reason or "")
    with pytest.raises(ValueError, match="tokens_per_step"):
        Options(tokens_per_step=0)


def test_headline_shows_mfu_and_throughput(analysed: Run) -> None:
    from msdiag.contract import build

    # achieved 0.879 TFLOP/s (flops_per_step 257.7 GFLOP / 293.14 ms) / 363.72 peak = 0.24%; 2 / 0.29314 s = 6.82
    lines = efficiency_lines(build(analysed("p2p")))
    assert lines[0].strip().startswith("MFU 0.2%, HFU 0.2%; 0.88 TFLOP/s per device of 363.72 TFLOP/s peak (910B1 or 910C)")
    assert lines[1].startswith("Throughput per device: 6.82 samples/s, 55,891 tokens/s; for the job: unknown")
    cpu = efficiency_lines(build(analysed("cpu-graph")))
    assert cpu[0].strip().startswith("MFU, HFU unknown (no accelerator peak for a CPU capture)")


def test_manifest_device_info() -> None:
    from msdiag.capture.manifest import device_info
    from msdiag.capture.runtime.profiler import device_properties

    cpu = device_properties("CPU")  # MindSpore is not asked on CPU (it has no properties there)
    assert cpu["name"] is None and "no device properties on CPU" in cpu["from"]
    assert device_info([{"device_properties": cpu}])["peak_source"] == "no device name recorded"
    # what mindspore.hal.get_device_properties gives on Ascend: a name and total_memory in bytes
    ascend = {"name": "Ascend910B2", "total_memory_bytes": 64 * 2**30, "from": "mindspore.hal.get_device_properties"}
    info = device_info([{"device_properties": ascend}])
    assert info["name"] == "Ascend910B2" and info["memory_gb"] == 64.0
    assert info["peak_tflops"] == 354.0 and info["peak_source"].startswith("910B2 in msdiag's device table")
    assert device_info([])["from"].startswith("not recorded")


def test_capture_sidecar_device_reaches_the_chip(tmp_path: Path) -> None:
    # msdiag capture's own sample (MindSpore CPU) with the sidecar's `device` as the runtime writes it on Ascend
    # (mindspore.hal.get_device_properties: name, total_memory): the recorded name narrows the chips and the
    # recorded memory is the capacity: 65536 MiB = 64 GiB.
    import json
    import shutil

    from conftest import SAMPLE_TRACES

    from msdiag.analysis import analyze

    dst = tmp_path / "cap"
    shutil.copytree(SAMPLE_TRACES / "train_small_cpu", dst)
    side = next(dst.rglob("msdiag_steps.json"))
    doc = json.loads(side.read_text())
    doc["device"] = {"name": "Ascend910B2", "total_memory_bytes": 65536 * 2**20, "from": "mindspore.hal.get_device_properties"}
    side.write_text(json.dumps(doc))
    a = analyze(dst, Options(jobs=1))
    assert [rd.info.device_name for rd in a.capture.ranks] == ["Ascend910B2"]
    assert _m(a, "memory_capacity_gb").value == 64.0
    assert _m(a, "device_name").value == "910B2"  # the name alone fits one chip (no cores or clock on CPU)
