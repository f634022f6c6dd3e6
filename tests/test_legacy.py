"""MindSpore 1.x-2.2 (MindInsight-era) profiler folders on the corpus, expectations derived independently
(csv / json modules, or by hand in a comment)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from msdiag.errors import ParseError
from msdiag.ingest import legacy
from msdiag.metrics.breakdown import step_breakdown
from msdiag.model import STEPS

TICKS_PER_US = 100  # step_trace_raw: 10 ns ticks


@pytest.fixture(scope="module")
def legacy_dir(corpus: Path) -> Path:
    d = corpus / "mindspore-legacy"
    if not d.is_dir():
        pytest.skip(f"{d} is absent")
    return d


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k.strip(): (v or "").strip() for k, v in r.items()} for r in csv.DictReader(f)]


def _real_steps(path: Path) -> list[dict[str, str]]:
    """Rows that are steps: a positive step number and a span (the '-' row is the average)."""
    return [
        r for r in _rows(path)
        if r["step_num"].isdigit() and int(r["step_num"]) > 0 and int(r["end_point"]) > int(r["start_point"])
    ]


def _check_identities(steps: pd.DataFrame) -> None:
    tol = 1e-6 * steps["total_us"].max()
    for _, s in steps.iterrows():
        assert s["computing_us"] + s["communication_exposed_us"] + s["free_us"] == pytest.approx(s["total_us"], abs=tol)
        assert s["overlapped_us"] == pytest.approx(s["communication_us"] - s["communication_exposed_us"], abs=tol)
        for c in ("computing_us", "communication_us", "communication_exposed_us", "overlapped_us", "free_us", "bubble_us"):
            assert -tol <= s[c] <= s["total_us"] + tol, c


# ---- discovery ----------------------------------------------------------------------------------


def test_find_ranks(legacy_dir: Path) -> None:
    # rank ids are the file-name suffixes: hccl_raw_6 / step_trace_raw_6; run_2 holds *_1 files only;
    # single-rank mixes MindInsight test files of ranks 0, 1 and 10; parallel_strategy_{0,1}.json
    assert [r for r, _ in legacy.find_legacy_ranks(legacy_dir / "hccl-one-allreduce")] == [6]
    assert [r for r, _ in legacy.find_legacy_ranks(legacy_dir / "run_2")] == [1]
    assert [r for r, _ in legacy.find_legacy_ranks(legacy_dir / "single-rank")] == [0, 1, 10]
    assert [r for r, _ in legacy.find_legacy_ranks(legacy_dir / "parallel_strategy")] == [0, 1]
    assert all(p == legacy_dir / "run_2" for _, p in legacy.find_legacy_ranks(legacy_dir / "run_2"))


def test_not_legacy_when_ascend_ms_output_is_there(tmp_path: Path, legacy_dir: Path) -> None:
    # MindSpore 2.3/2.4 write the flat files beside rank-*_ascend_ms/: that folder is not a legacy one
    shutil.copyfile(legacy_dir / "hccl-one-allreduce" / "hccl_raw_6.csv", tmp_path / "hccl_raw_6.csv")
    assert legacy.is_legacy_folder(tmp_path)
    (tmp_path / "rank-0_1_ascend_ms" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    assert not legacy.is_legacy_folder(tmp_path)
    assert legacy.find_legacy_ranks(tmp_path) == []
    assert legacy.find_legacy_ranks(tmp_path / "rank-0_1_ascend_ms") == []


# ---- step_trace_raw -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "folder,rank",
    [("hccl-one-allreduce", 6), ("run_2", 1), ("single-rank", 0), ("single-rank", 10)],
)
def test_step_rows_match_the_file(legacy_dir: Path, folder: str, rank: int) -> None:
    path = legacy_dir / folder / f"step_trace_raw_{rank}_detail_time.csv"
    expected = _real_steps(path)
    rd = legacy.load_legacy_rank(legacy_dir / folder, rank)
    steps = rd.tables["profiler_steps"]
    assert rd.family == "mindspore_legacy"
    assert list(steps["step"]) == [int(r["step_num"]) for r in expected]
    assert set(steps["source"]) == {"step_trace_raw"}
    for r, (_, s) in zip(expected, steps.iterrows()):
        assert s["total_us"] == pytest.approx((int(r["end_point"]) - int(r["start_point"])) / TICKS_PER_US)
        assert s["start_us"] == pytest.approx(int(r["start_point"]) / TICKS_PER_US)
    _check_identities(steps)
    src = {s.name: s for s in rd.sources}[path.name]
    assert src.status == "present" and src.rows == len(expected)


def test_step_total_by_hand(legacy_dir: Path) -> None:
    rd = legacy.load_legacy_rank(legacy_dir / "hccl-one-allreduce", 6)
    s = rd.tables["profiler_steps"].set_index("step")
    # step 1: end_point 61688109551051 - start_point 61688106196804 = 3354247 ticks = 33542.47 us
    assert s.loc[1, "total_us"] == pytest.approx(33542.47, abs=1e-6)
    # the file's 3 lines after the header: steps 1, 2 and the '-' average: 2 steps
    assert len(s) == 2
    # AllReduce 61688109006157..61688109460237 (4540.8 us) starts after bp_point 61688109001447: exposed
    assert s.loc[1, "communication_us"] == pytest.approx(4540.8, abs=1e-6)
    assert s.loc[1, "communication_exposed_us"] == pytest.approx(4540.8, abs=1e-6)
    assert s.loc[1, "overlapped_us"] == pytest.approx(0.0, abs=1e-6)
    # computing = fp_and_bp + tail - exposed = (2804643 + 549604) / 100 - 4540.8 = 29001.67
    assert s.loc[1, "computing_us"] == pytest.approx(29001.67, abs=1e-6)
    # step 2: iteration_interval 5068 ticks = 50.68 us of data wait; step 1 has none (starts at FP)
    assert s.loc[2, "data_wait_us"] == pytest.approx(50.68, abs=1e-6)
    assert pd.isna(s.loc[1, "data_wait_us"])
    assert s.loc[2, "free_us"] == pytest.approx(50.68, abs=1e-6)


def test_overlapped_communication_inside_fp_bp(legacy_dir: Path) -> None:
    # the older column order <op>_start_point,<op>_end_point,<op>; union of the ops computed here
    path = legacy_dir / "single-rank" / "step_trace_raw_0_detail_time.csv"
    row = _real_steps(path)[0]
    bases = [c[: -len("_start_point")] for c in row if c.endswith("_start_point") and c != "start_point"]
    ivs = sorted((int(row[f"{b}_start_point"]), int(row[f"{b}_end_point"])) for b in bases)
    merged: list[list[int]] = []
    for a, b in ivs:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    fp, bp = int(row["fp_point"]), int(row["bp_point"])
    union = sum(b - a for a, b in merged)
    inside = sum(max(0, min(b, bp) - max(a, fp)) for a, b in merged)
    s = legacy.load_legacy_rank(legacy_dir / "single-rank", 0).tables["profiler_steps"].iloc[0]
    assert s["communication_us"] == pytest.approx(union / TICKS_PER_US)
    assert s["overlapped_us"] == pytest.approx(inside / TICKS_PER_US)
    assert 0 < s["overlapped_us"] < s["communication_us"]


def test_odd_rows_are_not_steps(legacy_dir: Path) -> None:
    # run_2's file has step 1 and a row '0,0,0,...,1243211,0,0' (a hand-made MindInsight sample):
    # step 0 with no span is not a step, and a note says so
    rd = legacy.load_legacy_rank(legacy_dir / "run_2", 1)
    assert list(rd.tables["profiler_steps"]["step"]) == [1]
    assert any("not steps" in n and "step 0" in n for n in rd.notes)


# ---- hccl_raw -----------------------------------------------------------------------------------


def test_hccl_1x_units(legacy_dir: Path) -> None:
    path = legacy_dir / "hccl-one-allreduce" / "hccl_raw_6.csv"
    rows = [r for r in _rows(path) if r["step_num"].isdigit()]
    rd = legacy.load_legacy_rank(legacy_dir / "hccl-one-allreduce", 6)
    # 1.x: SDMA [time ms, size KB, bandwidth KB/s]: 94356.992 KB / 4.36566 ms * 1e3 = 21613454 KB/s (as written)
    assert rd.meta["hccl_units"]["writer"] == legacy.HCCL_1X
    ops = rd.tables["comm_ops"].set_index("step")
    for r in rows:
        step = int(r["step_num"])
        op_cost = json.loads(r["communication_operator_cost"])["stream_24_0_AllReduce-op3143"]
        assert ops.loc[step, "transit_us"] == pytest.approx(float(op_cost[1]) * 1000)  # ms -> us
        assert ops.loc[step, "wait_us"] == pytest.approx(float(op_cost[2]) * 1000)
        assert ops.loc[step, "op_type"] == "AllReduce"
    # elapse and start from the step trace's AllReduce span (step 1: 454080 ticks)
    assert ops.loc[1, "elapse_us"] == pytest.approx(4540.8)
    assert ops.loc[1, "idle_us"] == pytest.approx(4540.8 - 4516.37 - 0.04)
    links = rd.tables["comm_links"]
    l10 = links[(links["step"] == 1) & (links["src"] == 1) & (links["dst"] == 0)].iloc[0]
    # 94356.992 KB = 94.356992 MB over 4.36566 ms = 21.6135 GB/s; the file's 21613454 KB/s is the same
    assert l10["size_mb"] == pytest.approx(94.356992)
    assert l10["time_us"] == pytest.approx(4365.66)
    assert l10["bandwidth_gbps"] == pytest.approx(21613454.09399724 / 1e6)
    tr = rd.tables["comm_transport"]
    assert set(tr["transport"]) == {"SDMA"}
    assert tr[tr["step"] == 1]["size_mb"].iloc[0] == pytest.approx((94356.992 + 47178.496) / 1000)


def _hccl_2x(tmp_path: Path, version: str | None) -> Path:
    # 2.1/2.2's AscendHCCLGenerator: costs are raw us sums; SDMA [ms, KB, GB/s]: 94356.992 KB over
    # 4.36566 ms -> 94356.992 / 4.36566 * 1e-3 = 21.6 (GB/s), as it computes it (size / time * 1e-3)
    link = {"1-0": {"SDMA": [4.36566, 94356.992, 94356.992 / 4.36566 * 1e-3]}}
    ops = {"AllReduce-op3143_0": ["1", 4516.37, 0.04, link]}
    with open(tmp_path / "hccl_raw_0.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step_num", "communication_cost", "wait_cost", "link_info", "communication_operator_cost"])
        w.writerow([1, 4516.37, 0.04, json.dumps(link), json.dumps(ops)])
        w.writerow(["-", 4516.37, 0.04, json.dumps(link), json.dumps({"AllReduce-op3143_0": ["-", 4516.37, 0.04, link]})])
    if version:
        (tmp_path / "profiler_info_0.json").write_text(json.dumps({"ms_version": version, "rank_id": 0}))
    return tmp_path


def test_hccl_2x_units_from_magnitudes(tmp_path: Path) -> None:
    rd = legacy.load_legacy_rank(_hccl_2x(tmp_path, None), 0)
    assert rd.meta["hccl_units"]["writer"] == legacy.HCCL_2X
    assert "SDMA" in rd.meta["hccl_units"]["how"]
    op = rd.tables["comm_ops"].iloc[0]
    assert op["transit_us"] == pytest.approx(4516.37)  # already us
    assert op["wait_us"] == pytest.approx(0.04)
    assert rd.tables["comm_links"].iloc[0]["bandwidth_gbps"] == pytest.approx(94.356992 / 4.36566)


@pytest.mark.parametrize("version,writer", [("2.2.0", legacy.HCCL_2X), ("2.1.1", legacy.HCCL_2X), ("1.8.1", legacy.HCCL_1X)])
def test_hccl_units_from_ms_version(tmp_path: Path, version: str, writer: str) -> None:
    rd = legacy.load_legacy_rank(_hccl_2x(tmp_path, version), 0)
    assert rd.meta["hccl_units"] == {"writer": writer, "how": f"profiler_info ms_version {version}"}


def test_hccl_units_from_cost_ratio() -> None:
    # RDMA only (KB/s in both versions): the step cost against its link times tells them apart
    rdma = {"0-8": {"RDMA": [2.0, 1000.0, 500000.0, 0.5]}}
    assert legacy.hccl_units([{"communication_cost": 2.0, "link_info": rdma}], None)[0] == legacy.HCCL_1X
    assert legacy.hccl_units([{"communication_cost": 2000.0, "link_info": rdma}], None)[0] == legacy.HCCL_2X


# ---- MindData -----------------------------------------------------------------------------------


def test_minddata_queue_empty_share(legacy_dir: Path) -> None:
    rd = legacy.load_legacy_rank(legacy_dir / "run_2", 1)
    dp = rd.tables["data_pipeline"].set_index("op_id")
    # minddata_pipeline_raw_1.csv: BatchOp output_queue_size "[0, 2]": 1 of 2 samples empty
    raw = {int(r["op_id"]): r for r in _rows(legacy_dir / "run_2" / "minddata_pipeline_raw_1.csv")}
    sizes = json.loads(raw[0]["output_queue_size"])
    assert dp.loc[0, "queue_empty_share"] == pytest.approx(sum(1 for x in sizes if x == 0) / len(sizes)) == 0.5
    assert dp.loc[0, "op_type"] == "Batch"
    # device_queue_profiling_1.txt: lines 'type sub step value ts'; type 1 = connector depth (capacity 64,
    # size 0 at batch 1): 1 of 1 samples empty; type 0 sub 2 = batch time 4 ms
    lines = [ln.split() for ln in (legacy_dir / "run_2" / "device_queue_profiling_1.txt").read_text().splitlines() if ln.strip()]
    depth = [float(x[3]) for x in lines if x[0] == "1"]
    batch = [float(x[3]) for x in lines if x[0] == "0" and x[1] == "2"]
    cons = dp.loc[-1]
    assert cons["op_type"] == "DeviceQueue"
    assert cons["queue_empty_share"] == pytest.approx(sum(1 for d in depth if d == 0) / len(depth)) == 1.0
    assert cons["queue_capacity"] == 64
    assert cons["per_batch_us"] == pytest.approx(np.mean(batch) * 1000) == 4000
    assert any("dataset_iterator_profiling_1.txt: not used" in n for n in rd.notes)


def test_dataset_iterator_alone(tmp_path: Path, legacy_dir: Path) -> None:
    # dataset_iterator_profiling_1.txt: '1 64 1 3': capacity 64, 3 batches queued: not empty
    shutil.copyfile(legacy_dir / "run_2" / "dataset_iterator_profiling_1.txt", tmp_path / "dataset_iterator_profiling_1.txt")
    rd = legacy.load_legacy_rank(tmp_path, 1)
    cons = rd.tables["data_pipeline"].iloc[0]
    assert cons["op_id"] == -1 and cons["op_type"] == "DatasetIterator"
    assert cons["queue_empty_share"] == 0.0
    assert cons["queue_usage"] == pytest.approx(3 / 64)


def test_get_next_on_device(legacy_dir: Path) -> None:
    # minddata_aicpu_1.txt: 3 GetNext_dequeue_wait lines, queue sizes 3, 2, 1; waits 1, 0, 1 us
    g = legacy.load_legacy_rank(legacy_dir / "run_2", 1).meta["get_next"]
    assert g["count"] == 3 and g["empty_count"] == 0 and g["empty_share"] == 0.0
    assert g["wait_us_total"] == pytest.approx(2.0)


# ---- kernels, op statistics, shapes, FLOPs --------------------------------------------------------


def test_run2_kernels_and_breakdown(legacy_dir: Path) -> None:
    d = legacy_dir / "run_2"
    rd = legacy.load_legacy_rank(d, 1)
    k = rd.tables["kernels"]
    timeline = [ln for ln in (d / "output_timeline_data_1.txt").read_text().splitlines()[1:] if ln.strip()]
    aicpu = _rows(d / "aicpu_intermediate_1.csv")
    assert len(k) == len(timeline) + len(aicpu)  # 107 AI Core + 5 AI CPU launches, no communication
    assert (k["core"] == "AI_CORE").sum() == len(timeline)
    # start times: ms in the file -> us; first AI Core op Default/AssignAdd-op142 at 154907895.95956 ms
    first = k[k["core"] == "AI_CORE"].iloc[0]
    assert first["start_us"] == pytest.approx(154907895.95956 * 1000)
    assert first["dur_us"] == pytest.approx(0.0031 * 1000)
    # types and shapes joined from framework_raw_1.csv by full op name
    fw = {r["full_op_name"]: r for r in _rows(d / "framework_raw_1.csv")}
    info = json.loads(fw["Default/TransData-op118"]["op_info"])
    tr = k[k["name"] == "TransData-op118"].iloc[0]
    assert tr["type"] == "TransData"
    assert tr["input_shapes"] == info["input_0"]["shape"] == "2,3,227,227"
    assert tr["output_shapes"] == info["output_0"]["shape"]
    assert tr["block_dim"] == int(fw["Default/TransData-op118"]["block_dim"])
    # every kernel with a step starts inside that step's span
    steps = rd.tables["profiler_steps"].set_index("step")
    with_step = k[k["step"].notna()]
    assert len(with_step) > 0
    for _, r in with_step.iterrows():
        assert steps.loc[int(r["step"]), "start_us"] <= r["start_us"] < steps.loc[int(r["step"]), "end_us"]
    # GetNext waits for data on the AI CPU: not compute
    assert set(k[k["name"] == "GetNext"]["kind"]) == {"other"}
    b = step_breakdown(rd)
    assert list(b["step"]) == [1]
    _check_identities(b)
    prof_total = steps.loc[1, "total_us"]
    assert 0.95 * prof_total <= b.iloc[0]["total_us"] <= prof_total


def test_op_stats_from_aicore_type(legacy_dir: Path) -> None:
    d = legacy_dir / "run_2"
    rows = _rows(d / "aicore_intermediate_1_type.csv")  # op_type,execution_time (ms),execution_frequency,percent
    st = legacy.load_legacy_rank(d, 1).tables["op_stats"].set_index("op_type")
    assert len(st) == len(rows)
    mm = next(r for r in rows if r["op_type"] == "MatMul")
    assert st.loc["MatMul", "total_us"] == pytest.approx(float(mm["execution_time"]) * 1000)  # 20.65774 ms
    assert st.loc["MatMul", "count"] == int(mm["execution_frequency"]) == 9
    assert st.loc["MatMul", "ratio"] == pytest.approx(float(mm["percent"]) / 100)


def test_op_stats_from_detail_agree_with_type(tmp_path: Path, legacy_dir: Path) -> None:
    # without the _type file, the _detail rows grouped by type give the same totals (run_2: 9 MatMul ops, 20.6577 ms)
    shutil.copyfile(legacy_dir / "run_2" / "aicore_intermediate_1_detail.csv", tmp_path / "aicore_intermediate_1_detail.csv")
    st = legacy.load_legacy_rank(tmp_path, 1).tables["op_stats"].set_index("op_type")
    ref = {r["op_type"]: r for r in _rows(legacy_dir / "run_2" / "aicore_intermediate_1_type.csv")}
    for t in ("MatMul", "Cast", "Conv2D"):
        assert st.loc[t, "total_us"] == pytest.approx(float(ref[t]["execution_time"]) * 1000, rel=1e-4)
        assert st.loc[t, "count"] == int(ref[t]["execution_frequency"])


def test_framework_shapes_without_kernels(legacy_dir: Path) -> None:
    rd = legacy.load_legacy_rank(legacy_dir / "single-rank", 0)
    hs = rd.tables["host_shapes"].set_index("op_name")
    fw = _rows(legacy_dir / "single-rank" / "framework_raw_0.csv")
    assert len(hs) == len(fw)
    shape = json.loads(fw[0]["op_info"])["input_0"]["shape"]  # "32,3,224,224"
    assert hs.loc[fw[0]["full_kernel_name"], "input_shapes"] == shape
    assert hs.loc[fw[0]["full_kernel_name"], "op_type"] == fw[0]["kernel_type"]
    assert not len(rd.table("kernels"))


def test_flops_both_headers(legacy_dir: Path) -> None:
    d = legacy_dir / "single-rank"
    # flops_0.txt: 'full_kernel_name, FLOPs, FLOPS, FLOPS utilization' (1.x: MFLOPs per op): 4 ops of 333
    f0 = legacy.load_legacy_rank(d, 0).meta["flops"]
    assert f0["header"].startswith("total")
    assert len(f0["per_op"]) == 4
    assert f0["per_op"]["Default/Cast-op6"] == pytest.approx(333e6)
    # flops_summary_0.json {"FLOPs": 8167.743, ...}: MFLOPs
    assert f0["summary"]["total_flops"] == pytest.approx(8167.743e6)
    # flops_1.txt: cube and vector MFLOPs columns: 333 + 333 per op, 10 ops
    f1 = legacy.load_legacy_rank(d, 1).meta["flops"]
    assert f1["header"].startswith("cube/vector")
    assert f1["cube_per_op"]["Default/network-WithLossCell/_backbone-LeNet5/fc3-Dense/MatMul-op9"] == pytest.approx(333e6)
    assert f1["total_flops"] == pytest.approx(10 * 666e6)


def test_flops_2x_header(tmp_path: Path) -> None:
    # 2.1/2.2 AscendFlopsGenerator header (one row per launch, from op_summary cube_fops / vector_fops)
    (tmp_path / "flops_3.txt").write_text(
        "op_full_name,MFLOPs(10^6 cube),GFLOPS(10^9 cube),MFLOPs(10^6 vector),GFLOPS(10^9 vector)\n"
        "Default/MatMul-op1,2.5,1.0,0.5,0.1\nDefault/MatMul-op1,2.5,1.0,0.5,0.1\n"
    )
    f = legacy.read_flops(tmp_path / "flops_3.txt")
    assert f["cube_per_op"] == {"Default/MatMul-op1": 2.5e6}
    assert f["vector_per_op"] == {"Default/MatMul-op1": 0.5e6}


# ---- metadata -----------------------------------------------------------------------------------


def test_parallel_meta(legacy_dir: Path) -> None:
    d = legacy_dir / "parallel_strategy"
    info = json.loads((d / "profiler_info_0.json").read_text())
    rd = legacy.load_legacy_rank(d, 0)
    assert {k: getattr(rd.info, k) for k in ("parallel_mode", "stage_num", "rank_size")} == {
        k: info[k] for k in ("parallel_mode", "stage_num", "rank_size")}
    assert rd.info.info_format == "mindspore_legacy"
    strategy = json.loads((d / "parallel_strategy_0.json").read_text())["config"]
    assert rd.meta["parallel_strategy"]["parallelType"] == strategy["parallelType"] == "auto_parallel"
    assert any("no step rows" in n for n in rd.notes)


def test_cluster_analyse_meta(legacy_dir: Path) -> None:
    rd = legacy.load_legacy_rank(legacy_dir / "run_2", 1)
    (ca,) = rd.meta["cluster_analyse"]
    # ascend_cluster_analyse_data-parallel_1_1_1.csv: 'iteration_interval, fp_and_bp, tail' / '0, 2366808, 4097'
    assert ca["mode"] == "data-parallel" and ca["stage_num"] == 1 and ca["rank_size"] == 1
    assert ca["rows"] == [{"iteration_interval": 0.0, "fp_and_bp": 2366808.0, "tail": 4097.0}]
    assert ca["unit"] == "10 ns ticks"


def test_every_source_listed(legacy_dir: Path) -> None:
    rd = legacy.load_legacy_rank(legacy_dir / "hccl-one-allreduce", 6)
    names = {s.name: s for s in rd.sources}
    for spec in legacy.LEGACY_SOURCES:
        assert spec.name.format(rank=6) in names
    assert names["framework_raw_6.csv"].status == "absent" and names["framework_raw_6.csv"].reason


# ---- bad input ----------------------------------------------------------------------------------


def test_truncated_step_trace_is_a_parse_error(tmp_path: Path, legacy_dir: Path) -> None:
    text = (legacy_dir / "hccl-one-allreduce" / "step_trace_raw_6_detail_time.csv").read_text()
    (tmp_path / "step_trace_raw_6_detail_time.csv").write_text(text[: text.index("\n-,") - 20])
    with pytest.raises(ParseError, match="step_trace_raw_6_detail_time.csv.*truncated"):
        legacy.load_legacy_rank(tmp_path, 6)


def test_empty_step_trace_is_a_parse_error(tmp_path: Path) -> None:
    (tmp_path / "step_trace_raw_2_detail_time.csv").write_text("")
    with pytest.raises(ParseError, match="step_trace_raw_2_detail_time.csv.*empty"):
        legacy.load_legacy_rank(tmp_path, 2)


def test_broken_optional_files_are_failed_sources(tmp_path: Path, legacy_dir: Path) -> None:
    src = legacy_dir / "hccl-one-allreduce"
    shutil.copyfile(src / "step_trace_raw_6_detail_time.csv", tmp_path / "step_trace_raw_6_detail_time.csv")
    text = (src / "hccl_raw_6.csv").read_text()
    (tmp_path / "hccl_raw_6.csv").write_text(text[: len(text) // 2])  # cut inside a JSON cell
    (tmp_path / "device_queue_profiling_6.txt").write_text("")
    (tmp_path / "framework_raw_6.csv").write_text('task_id,stream_id,block_dim,full_op_name,op_name,op_type,subgraph,op_info\n'
                                                 '1,2,3,Default/A-op1,A-op1,A,Default,"{not json"\n')
    rd = legacy.load_legacy_rank(tmp_path, 6)
    by = {s.name: s for s in rd.sources}
    assert by["hccl_raw_6.csv"].status == "failed" and by["hccl_raw_6.csv"].reason
    assert by["device_queue_profiling_6.txt"].status == "failed" and "empty" in str(by["device_queue_profiling_6.txt"].reason)
    assert by["framework_raw_6.csv"].status == "failed" and "op_info" in str(by["framework_raw_6.csv"].reason)
    assert len(rd.tables["profiler_steps"]) == 2  # the rest is read


def test_truncated_queue_line(tmp_path: Path) -> None:
    (tmp_path / "device_queue_profiling_0.txt").write_text("0 1 1 4 10\n1 64")
    with pytest.raises(ParseError, match="device_queue_profiling_0.txt.*line 2"):
        legacy.read_queue_profiling(tmp_path / "device_queue_profiling_0.txt", 0, "DeviceQueue")


def test_steps_from_points_identities() -> None:
    # a hand-made step: 0..100, FP at 10, BP at 70; comm 50..80 (20 inside FP..BP, 10 after) and a
    # Receive 0..5 before FP
    p = legacy.StepPoints(1, 0.0, 100.0, 10.0, 70.0, 10.0, [("AllReduce", 50.0, 80.0), ("Receive-op1", 0.0, 5.0)])
    s = legacy.steps_from_points(0, [p], "test").iloc[0]
    assert s["communication_us"] == 35
    assert s["overlapped_us"] == 20
    assert s["communication_exposed_us"] == 15
    assert s["computing_us"] == 90 - 10  # FP..end minus the exposed communication after FP
    assert s["free_us"] == 100 - 80 - 15
    assert s["bubble_us"] == 5 and s["stage_us"] == 95
    assert list(legacy.steps_from_points(0, [], "x").columns) == list(STEPS.columns)


def test_flops_join_kernels(tmp_path: Path, legacy_dir: Path) -> None:
    # a cube/vector flops file beside run_2's timeline: each launch of the op gets the op's FLOPs
    for n in ("step_trace_raw_1_detail_time.csv", "output_timeline_data_1.txt", "framework_raw_1.csv"):
        shutil.copy(legacy_dir / "run_2" / n, tmp_path)
    (tmp_path / "flops_1.txt").write_text(
        "op_full_name,MFLOPs(10^6 cube),GFLOPS(10^9 cube),MFLOPs(10^6 vector),GFLOPS(10^9 vector)\n"
        "Default/TransData-op118,0.0,0.0,1.5,1.0\n"
    )
    k = legacy.load_legacy_rank(tmp_path, 1).tables["kernels"]
    td = k[k["name"] == "TransData-op118"]
    n_launch = sum(1 for ln in (tmp_path / "output_timeline_data_1.txt").read_text().splitlines() if ln.startswith("Default/TransData-op118,"))
    assert len(td) == n_launch == 2  # lines 3 and 108 of the file
    assert (td["vector_fops"] == 1.5e6).all() and (td["cube_fops"] == 0.0).all()
    assert k.loc[k["name"] != "TransData-op118", "vector_fops"].isna().all()
