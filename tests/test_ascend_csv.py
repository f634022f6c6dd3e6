"""Readers of ASCEND_PROFILER_OUTPUT/*.csv and the MindData pipeline files.

Golden tests on the shared corpus: expected values are derived independently here, with the csv
module (row counts, sums) or quoted from the file (step_trace_time.csv). Bad inputs are written to
tmp_path.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest

from msdiag import model
from msdiag.errors import ParseError
from msdiag.ingest import ascend_csv as ac

OUT = "ASCEND_PROFILER_OUTPUT"
RANK_DIRS = [
    "ascend/torchnpu-2rank-level0/rank0_ascend_pt",
    "ascend/torchnpu-2rank-level0/rank1_ascend_pt",
    "ascend/torchnpu-2rank-level1/rank0_ascend_pt",
    "ascend/torchnpu-2rank-level1/rank1_ascend_pt",
    "ascend/torchnpu-2rank-p2p-2024/test_rank_0",
    "ascend/torchnpu-2rank-p2p-2024/test_rank_1",
]
KERNEL_FILES = [f"{d}/{OUT}/kernel_details.csv" for d in RANK_DIRS] + [
    "ascend/single-files/kernel_details_pipeutil_large.csv",
    "ascend/single-files/kernel_details_arith_fops.csv",
    "cann-msprof/op_summary_1.csv",
    "cann-msprof/vllm-ascend-prof/PROF_GROUP_20260823_165254/PROF_L2Cache/"
    "PROF_000001_20260823165523228_00627338KRCOPCPN/mindstudio_profiler_output/op_summary_20260823165532.csv",
]
OP_STAT_FILES = [
    f"ascend/torchnpu-2rank-level1/rank0_ascend_pt/{OUT}/op_statistic.csv",
    f"ascend/torchnpu-2rank-level1/rank1_ascend_pt/{OUT}/op_statistic.csv",
    "cann-msprof/vllm-ascend-prof/prof_unpack/PROF_GROUP_20260823_165254/PROF_Memory/"
    "PROF_000001_20260823165413436_00626258NIRJNPIC/mindstudio_profiler_output/op_statistic_20260823165421.csv",
]
MEMORY_RECORD_FILES = [f"{d}/{OUT}/memory_record.csv" for d in RANK_DIRS]
NPU_MODULE_FILES = [f"{d}/{OUT}/npu_module_mem.csv" for d in RANK_DIRS[:5]]
OPERATOR_MEMORY_FILES = [f"{d}/{OUT}/operator_memory.csv" for d in RANK_DIRS]
STATIC_OP_MEM = f"ascend/torchnpu-2rank-p2p-2024/test_rank_1/{OUT}/static_op_mem.csv"
MINDDATA_CPU = "mindspore-cpu/minddata_manual/md_parsed"


def rows(path: Path) -> list[dict[str, str]]:
    """The file's data rows, read with the csv module (independent of the reader under test)."""
    with open(path, newline="", encoding="utf-8") as f:
        return [{k.strip(): (v or "") for k, v in r.items() if k} for r in csv.DictReader(f)]


def num(cell: str) -> float:
    """A cell as a float, the way a person would read it: N/A or blank -> nan."""
    c = cell.strip()
    return math.nan if c in ("", "N/A") else float(c)


def first(r: dict[str, str], *names: str) -> str:
    for n in names:
        if n in r:
            return r[n]
    raise KeyError(names)


def check_dtypes(df: pd.DataFrame, table: model.Table) -> None:
    assert list(df.columns) == list(table.columns)
    for c, t in table.columns.items():
        assert str(df[c].dtype) == t, c


# ------------------------------------------------------------------------------------------
# step_trace_time.csv
# ------------------------------------------------------------------------------------------

# Values quoted from the files (one step each):
#   level0 rank0: 50,8827.472999999998,81515.607,4001.281999999992,85516.889,25908.102000000003,116251.25,0,81515.607,19358.0
#   level1 rank1: 50,8878.295000000006,96359.047,4016.2390000000014,100375.28600000001,26675.27399999998,131912.5,0,96359.047,20433.25
#   p2p rank0 (no Preparing column): 2,75174.57464453117,146614.02034375005,6987.303296874976,153601.32364062502,69909.50350390615,291698.0,0,146614.02034375005
STEP_QUOTES = {
    RANK_DIRS[0]: (50, 8827.472999999998, 81515.607, 4001.281999999992, 85516.889, 25908.102000000003, 116251.25, 0.0, 19358.0),
    RANK_DIRS[3]: (50, 8878.295000000006, 96359.047, 4016.2390000000014, 100375.28600000001, 26675.27399999998, 131912.5, 0.0, 20433.25),
    RANK_DIRS[4]: (2, 75174.57464453117, 146614.02034375005, 6987.303296874976, 153601.32364062502, 69909.50350390615, 291698.0, 0.0, None),
}


@pytest.mark.parametrize("rank_dir", list(STEP_QUOTES))
def test_step_trace_time_values(corpus: Path, rank_dir: str) -> None:
    df = ac.read_step_trace_time(corpus / rank_dir / OUT / "step_trace_time.csv", rank=3)
    check_dtypes(df, model.STEPS)
    assert len(df) == 1
    r = df.iloc[0]
    step, comp, exposed, overl, comm, free, stage, bubble, prep = STEP_QUOTES[rank_dir]
    assert r["rank"] == 3 and r["step"] == step
    # pandas' number parser may differ from float() in the last bit: compare to 1e-12
    exact = pytest.approx
    assert r["computing_us"] == exact(comp, rel=1e-12)
    assert r["communication_exposed_us"] == exact(exposed, rel=1e-12)
    assert r["overlapped_us"] == exact(overl, rel=1e-12)
    assert r["communication_us"] == exact(comm, rel=1e-12)
    assert r["free_us"] == exact(free, rel=1e-12)
    assert r["stage_us"] == stage
    assert r["bubble_us"] == bubble
    assert r["total_us"] == pytest.approx(comp + exposed + free)
    if prep is None:
        assert pd.isna(r["preparing_us"])  # the column is absent: null, never 0
    else:
        assert r["preparing_us"] == exact(prep, rel=1e-12)
    assert pd.isna(r["start_us"]) and pd.isna(r["end_us"])
    assert r["source"] == "step_trace_time.csv"


@pytest.mark.parametrize("rank_dir", RANK_DIRS)
def test_step_total_is_the_span(corpus: Path, rank_dir: str) -> None:
    """Computing + Communication(Not Overlapped) + Free == Stage + Bubble (the step's span).

    Largest gap on the corpus: 0.116 us (level1 rank1: 131912.616 vs 131912.5), rounding in the profiler.
    Bubble is 0 in every corpus file, so this cannot tell Stage + Bubble from Stage alone.
    """
    path = corpus / rank_dir / OUT / "step_trace_time.csv"
    df = ac.read_step_trace_time(path, rank=0)
    expected = rows(path)
    assert len(df) == len(expected)
    for got, raw in zip(df.itertuples(), expected):
        assert got.total_us == pytest.approx(float(raw["Stage"]) + float(raw["Bubble"]), abs=0.2)
        assert got.overlapped_us == pytest.approx(got.communication_us - got.communication_exposed_us, abs=0.01)


def test_step_trace_time_skips_summary_rows_keeps_blank_step(tmp_path: Path) -> None:
    p = tmp_path / "step_trace_time.csv"
    p.write_text(
        "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
        "Communication(Not Overlapped and Exclude Receive)\n"
        "0,3,10,5,1,6,2,17,0,5\n"
        "0,,10,5,1,6,2,17,0,5\n"
        "0,Average,10,5,1,6,2,17,0,5\n"
    )
    df = ac.read_step_trace_time(p, rank=1)
    assert len(df) == 2
    assert df["step"].iloc[0] == 3 and pd.isna(df["step"].iloc[1])
    assert df["total_us"].tolist() == [17.0, 17.0]
    assert df["preparing_us"].isna().all()


# ------------------------------------------------------------------------------------------
# kernel_details.csv / op_summary_*.csv
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", KERNEL_FILES)
def test_kernel_details_counts_and_sums(corpus: Path, rel: str) -> None:
    path = corpus / rel
    df = ac.read_kernel_details(path, rank=2)
    raw = rows(path)
    check_dtypes(df, model.KERNELS)
    assert len(df) == len(raw)
    assert (df["rank"] == 2).all()
    dur = sum(num(first(r, "Duration(us)", "Task Duration(us)")) for r in raw)
    assert df["dur_us"].sum() == pytest.approx(dur, rel=1e-12)
    wait = sum(num(first(r, "Wait Time(us)", "Task Wait Time(us)")) for r in raw)
    assert df["wait_us"].sum() == pytest.approx(wait, rel=1e-12)
    starts = [num(first(r, "Start Time(us)", "Task Start Time(us)")) for r in raw]
    assert df["start_us"].notna().all()  # the trailing tab is no obstacle
    assert df["start_us"].tolist() == pytest.approx(starts, abs=0.5)
    hccl = sum(1 for r in raw if first(r, "Accelerator Core", "Task Type") == "HCCL")
    assert (df["kind"] == "communication").sum() == hccl
    assert set(df["kind"]) <= {"compute", "communication"}
    # block dim: "Block Dim" (older CANN) or "Block Num" (newer), as written
    block = [first(r, "Block Dim", "Block Num") for r in raw]
    assert df["block_dim"].astype("float64").tolist() == pytest.approx([num(b) for b in block], nan_ok=True)
    # shapes are never left quoted
    for c in ("input_shapes", "output_shapes"):
        assert not df[c].dropna().str.contains('"').any()


def test_kernel_details_level0_lacks_shapes(corpus: Path) -> None:
    df = ac.read_kernel_details(corpus / RANK_DIRS[0] / OUT / "kernel_details.csv", rank=0)
    assert df["input_shapes"].isna().all() and df["output_shapes"].isna().all()
    assert df["stream"].isna().all()  # no Stream ID column in Level0
    assert (df["step"] == 50).all()
    # Level0 writes N/A for Type and Accelerator Core of non-HCCL kernels: null, and kind compute
    assert df["core"].isna().sum() == 187 and (df["core"] == "HCCL").sum() == 4
    assert df.loc[0, "name"] == "trans_TransData_0" and df.loc[0, "dur_us"] == 50.621


def test_kernel_details_level1_shapes_and_pmu(corpus: Path) -> None:
    df = ac.read_kernel_details(corpus / RANK_DIRS[2] / OUT / "kernel_details.csv", rank=0)
    # raw: 50,4294967295,11051,2,trans_TransData_0,TransData,dynamic,AI_VECTOR_CORE,1736408883704643.212\t,53.741,0,32,0,NO,
    #      """32,3,224,224""",FLOAT,NCHW,"""32,1,224,224,8""",FLOAT,NC1HWC0,N/A,0.0,...
    r = df.iloc[0]
    assert r["input_shapes"] == "32,3,224,224" and r["output_shapes"] == "32,1,224,224,8"
    assert r["input_formats"] == "NCHW" and r["output_dtypes"] == "FLOAT"
    assert r["stream"] == 2 and r["block_dim"] == 32 and r["core"] == "AI_VECTOR_CORE"
    assert r["start_us"] == pytest.approx(1736408883704643.212, abs=0.25)
    assert r["aicore_time_us"] == 0.0 and r["aiv_vec_ratio"] == 0.186 and r["aic_mac_ratio"] == 0.0
    hccl = df[df["kind"] == "communication"]
    assert len(hccl) == 4 and hccl["aicore_time_us"].isna().all()  # N/A in PMU columns: null


def test_kernel_details_pipe_utilization_columns(corpus: Path) -> None:
    # despite its name this file has the PipeUtilization columns (aic_mac_ratio, aiv_vec_ratio, ...)
    df = ac.read_kernel_details(corpus / "ascend/single-files/kernel_details_arith_fops.csv", rank=0)
    r = df.iloc[0]  # MatMulV2: ...,183.87,5295467,151.425,0.824,...,177.314,0.964,...
    assert r["input_shapes"] == "81920,4096;8192,512" and r["output_shapes"] == "4096,512"
    assert r["aicore_time_us"] == 183.87 and r["aic_mac_ratio"] == 0.824 and r["aic_mte2_ratio"] == 0.964
    assert df["cube_fops"].isna().all() and df["vector_fops"].isna().all()


def test_kernel_details_arithmetic_utilization_columns(corpus: Path) -> None:
    # despite its name this file has the ArithmeticUtilization columns (aic/aiv cube and vector fops)
    path = corpus / "ascend/single-files/kernel_details_pipeutil_large.csv"
    df = ac.read_kernel_details(path, rank=0)
    raw = rows(path)
    mm = df.index[df["name"] == "MatMul91"][0]
    assert df.loc[mm, "cube_fops"] == 473250242560.0  # aic_cube_fops of MatMul91 (AI_CORE)
    assert df.loc[0, "vector_fops"] == 137176320.0  # ZerosLike46 (AI_VECTOR_CORE): in aiv_vector_fops
    total_vec = sum(num(r["aic_vector_fops"]) + num(r["aiv_vector_fops"]) for r in raw if r["aic_vector_fops"] != "N/A")
    assert df["vector_fops"].sum() == pytest.approx(total_vec)
    assert df["aic_mac_ratio"].isna().all()  # this older PMU set has aic_mac_fp16_ratio / int8 instead
    assert (df["kind"] == "communication").sum() == 19


def test_op_summary_headers(corpus: Path) -> None:
    path = corpus / KERNEL_FILES[-1]
    df = ac.read_kernel_details(path, rank=0)
    # Device_id,...,Op Name,OP Type,OP State,Task Type,Task Start Time(us),Task Duration(us),...,Block Num,...
    assert df["name"].tolist()[0] == "aclnnInplaceOne_OnesLikeAiCore_OnesLike"
    assert df["core"].tolist() == ["AI_VECTOR_CORE", "AI_VECTOR_CORE", "MIX_AIC"]
    assert df["block_dim"].tolist() == [int(r["Block Num"]) for r in rows(path)]
    assert df["step"].isna().all()  # no Step Id in op_summary
    # op_summary_1.csv: the same job as p2p-2024 test_rank_0's kernel_details.csv
    a = ac.read_kernel_details(corpus / "cann-msprof/op_summary_1.csv", rank=0)
    b = ac.read_kernel_details(corpus / RANK_DIRS[4] / OUT / "kernel_details.csv", rank=0)
    pd.testing.assert_frame_equal(a, b)


# ------------------------------------------------------------------------------------------
# op_statistic.csv
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", OP_STAT_FILES)
def test_op_statistic(corpus: Path, rel: str) -> None:
    path = corpus / rel
    df = ac.read_op_statistic(path, rank=1)
    raw = rows(path)
    check_dtypes(df, model.OP_STATS)
    assert len(df) == len(raw)
    assert df["total_us"].sum() == pytest.approx(sum(float(r["Total Time(us)"]) for r in raw))
    assert df["count"].sum() == sum(int(r["Count"]) for r in raw)
    assert df["ratio"].tolist() == pytest.approx([float(r["Ratio(%)"]) / 100 for r in raw])
    assert df["ratio"].between(0, 1).all()


# ------------------------------------------------------------------------------------------
# memory_record.csv / npu_module_mem.csv
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", MEMORY_RECORD_FILES)
def test_memory_record(corpus: Path, rel: str) -> None:
    path = corpus / rel
    df, notes = ac.read_memory_record(path, rank=0)
    raw = rows(path)
    check_dtypes(df, model.MEMORY)
    assert len(df) == len(raw)
    assert (df["source"] == "memory_record").all()
    assert df["reserved_mb"].sum() == pytest.approx(sum(num(r["Total Reserved(MB)"]) for r in raw))
    assert df["allocated_mb"].isna().sum() == sum(1 for r in raw if not r["Total Allocated(MB)"].strip())
    if "Total Active(MB)" not in raw[0]:
        assert df["active_mb"].isna().all()  # p2p-2024 rank 0: an older torch_npu without the column
    mangled = "test_rank_1" in rel
    assert bool(notes) == mangled
    if mangled:
        assert notes == [
            "memory_record.csv: timestamps were rounded by a spreadsheet (1.69512E+15, 30 of 30 rows): "
            "the memory timeline has no usable time axis"
        ]
        assert (df["ts_us"] == 1.69512e15).all()


@pytest.mark.parametrize("rel", NPU_MODULE_FILES)
def test_npu_module_mem(corpus: Path, rel: str) -> None:
    path = corpus / rel
    df = ac.read_npu_module_mem(path, rank=0)
    raw = rows(path)
    check_dtypes(df, model.MEMORY)
    assert len(df) == len(raw)
    assert (df["source"] == "npu_module_mem").all()
    assert df["reserved_mb"].sum() == pytest.approx(sum(float(r["Total Reserved(MB)"]) for r in raw))
    assert df["allocated_mb"].isna().all() and df["active_mb"].isna().all()
    assert df["device"].iloc[0] == raw[0]["Device"]


def test_npu_module_mem_minus_one_is_null(tmp_path: Path) -> None:
    p = tmp_path / "npu_module_mem.csv"
    p.write_text("Component,Timestamp(us),Total Reserved(MB),Device\nSLOG,100.5\t,-1,NPU:0\nHCCL,101.0\t,2.5,NPU:0\n")
    df = ac.read_npu_module_mem(p, rank=0)
    assert pd.isna(df["reserved_mb"].iloc[0]) and df["reserved_mb"].iloc[1] == 2.5
    assert df["ts_us"].tolist() == [100.5, 101.0]


# ------------------------------------------------------------------------------------------
# operator_memory.csv / static_op_mem.csv
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", OPERATOR_MEMORY_FILES)
def test_operator_memory(corpus: Path, rel: str) -> None:
    path = corpus / rel
    df = ac.read_operator_memory(path, rank=0)
    raw = rows(path)
    check_dtypes(df, model.MEMORY_ALLOCS)
    assert len(df) == len(raw)
    assert (df["kind"] == "dynamic").all()
    assert df["size_kb"].sum() == pytest.approx(sum(float(r["Size(KB)"]) for r in raw))
    never_released = sum(1 for r in raw if not r["Release Time(us)"].strip())
    assert df["release_us"].isna().sum() == never_released
    assert df["dur_us"].sum() == pytest.approx(sum(num(r["Duration(us)"]) for r in raw if r["Duration(us)"].strip()))


def test_static_op_mem(corpus: Path) -> None:
    path = corpus / STATIC_OP_MEM
    df = ac.read_static_op_mem(path, rank=1)
    raw = rows(path)
    check_dtypes(df, model.MEMORY_ALLOCS)
    ops = [r for r in raw if r["Op Name"] != "TOTAL"]
    totals = [r for r in raw if r["Op Name"] == "TOTAL"]
    assert len(totals) == 2  # one TOTAL row per graph (Graph ID 0 and 1), each dropped
    assert len(df) == len(ops) == 54
    assert (df["kind"] == "static").all() and not (df["name"] == "TOTAL").any()
    assert df["size_kb"].sum() == pytest.approx(sum(float(r["Size(KB)"]) for r in ops))
    # The TOTAL row is NOT the sum of its graph's rows: both graphs' op rows sum to 19784.711914063 KB,
    # while the TOTAL rows say 17210.5 (graph 0) and 19910.5 (graph 1): the compiler reuses and aligns blocks.
    per_graph = {g: sum(float(r["Size(KB)"]) for r in ops if r["Graph ID"] == g) for g in ("0", "1")}
    assert per_graph["0"] == pytest.approx(19784.711914063) and per_graph["1"] == pytest.approx(19784.711914063)
    assert ac.read_static_op_mem_totals(path) == {0: 17210.5, 1: 19910.5}


# ------------------------------------------------------------------------------------------
# dataset.csv (no real sample exists: a file written here from MindSpore 2.10's MsDatasetViewer header)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("avg_header", ["Avg. time (us)", "Avg. time(us)"])
def test_dataset_csv(tmp_path: Path, avg_header: str) -> None:
    p = tmp_path / "dataset.csv"
    p.write_text(
        f"Operation,Stage,Occurrences,{avg_header},Custom Info\n"
        "Batch,Compute,16,120.5,\"{'batch': '16'}\"\n"
        "Map,GetNext,32,7.25,\n"
    )
    df = ac.read_dataset_csv(p, rank=4)
    assert list(df.columns) == ["rank", "operation", "stage", "occurrences", "avg_us", "custom_info"]
    assert df["operation"].tolist() == ["Batch", "Map"]
    assert df["occurrences"].tolist() == [16, 32] and df["avg_us"].tolist() == [120.5, 7.25]
    assert df["custom_info"].iloc[0] == "{'batch': '16'}" and pd.isna(df["custom_info"].iloc[1])
    assert (df["rank"] == 4).all()


# ------------------------------------------------------------------------------------------
# MindData pipeline
# ------------------------------------------------------------------------------------------


def test_minddata_raw_and_summary(corpus: Path) -> None:
    d = corpus / MINDDATA_CPU
    df = ac.read_minddata_pipeline(d / "minddata_pipeline_raw_0.csv", d / "minddata_pipeline_summary_0.json", rank=0)
    check_dtypes(df, model.DATA_PIPELINE)
    ops = df[df["op_id"] >= 0].reset_index(drop=True)
    assert ops["op_id"].tolist() == [0, 1, 2, 3, 4]
    assert ops["op_type"].tolist() == ["EpochCtrl", "Batch", "Map", "Map", "Generator"]  # 'Op' suffix dropped
    assert ops["num_workers"].tolist() == [1, 2, 1, 2, 2]
    # raw: 1,BatchOp,2,"[0, 16, 16]",10.666666666666666,16,0.6666666666666666,1000,0,[2]
    b = ops.iloc[1]
    assert b["queue_capacity"] == 16 and b["queue_avg_size"] == pytest.approx(32 / 3)
    assert b["queue_usage"] == pytest.approx(2 / 3) and b["queue_empty_share"] == pytest.approx(1 / 3)
    assert b["parent_id"] == 0 and pd.isna(ops["parent_id"].iloc[0])
    # EpochCtrl has no queue: the raw cells are empty and the summary says -1 -> null
    assert pd.isna(ops["queue_usage"].iloc[0]) and pd.isna(ops["queue_empty_share"].iloc[0])
    assert (ops["avg_cpu_pct"] == 0.0).all()  # from the summary only
    # per_batch_time 97.0 (ms) is pipeline-wide: one consumer row, op_id -1
    consumer = df[df["op_id"] == -1]
    assert len(consumer) == 1 and consumer["per_batch_us"].iloc[0] == 97000.0
    assert ops["per_batch_us"].isna().all()


def test_minddata_summary_only(corpus: Path) -> None:
    df = ac.read_minddata_pipeline(None, corpus / MINDDATA_CPU / "minddata_pipeline_summary_0.json", rank=5)
    ops = df[df["op_id"] >= 0]
    assert len(ops) == 5 and (df["rank"] == 5).all()
    # summary: queue_utilization_pct 66.69, queue_empty_freq_pct 33.33 -> 0..1
    assert ops["queue_usage"].iloc[1] == pytest.approx(0.6669)
    assert ops["queue_empty_share"].iloc[1] == pytest.approx(0.3333)
    assert ops["queue_capacity"].isna().all()  # the summary has no queue length


@pytest.mark.parametrize("rel", ["mindspore-legacy/run_2/minddata_pipeline_raw_1.csv",
                                 "mindspore-legacy/single-rank/minddata_pipeline_raw_0.csv"])
def test_minddata_legacy_raw(corpus: Path, rel: str) -> None:
    path = corpus / rel
    df = ac.read_minddata_pipeline(path, None, rank=0)
    raw = rows(path)
    assert len(df) == len(raw)
    assert df["op_id"].tolist() == [int(r["op_id"]) for r in raw]
    assert df["queue_capacity"].tolist() == pytest.approx([num(r["output_queue_length"]) for r in raw], nan_ok=True)
    for got, r in zip(df["queue_empty_share"], raw):
        sizes = [float(x) for x in r["output_queue_size"].strip("[]").split(",")] if r["output_queue_size"] else []
        want = sizes.count(0.0) / len(sizes) if sizes else math.nan
        assert got == pytest.approx(want, nan_ok=True)
    assert df["per_batch_us"].isna().all() and df["avg_cpu_pct"].isna().all()


def test_minddata_nothing(tmp_path: Path) -> None:
    df = ac.read_minddata_pipeline(None, None, rank=0)
    check_dtypes(df, model.DATA_PIPELINE)
    assert len(df) == 0


@pytest.mark.parametrize("text, words", [("", "empty"), ('{"op_ids": [0, 1', "not valid JSON"), ("[1, 2]", "JSON object"),
                                         ('{"op_names": ["Batch"]}', "op_ids")])
def test_minddata_bad_summary(tmp_path: Path, text: str, words: str) -> None:
    p = tmp_path / "minddata_pipeline_summary_0.json"
    p.write_text(text)
    with pytest.raises(ParseError) as e:
        ac.read_minddata_pipeline(None, p, rank=0)
    assert "minddata_pipeline_summary_0.json" in str(e.value) and words in str(e.value)


def test_minddata_bad_queue_list(tmp_path: Path) -> None:
    p = tmp_path / "minddata_pipeline_raw_0.csv"
    p.write_text("op_id,op_type,num_workers,output_queue_size\n0,BatchOp,2,\"[0, x]\"\n")
    with pytest.raises(ParseError, match="output_queue_size"):
        ac.read_minddata_pipeline(p, None, rank=0)


# ------------------------------------------------------------------------------------------
# Bad inputs, every reader: empty, header only, truncated mid-row, missing a key column
# ------------------------------------------------------------------------------------------


def _memory_record(path: Path, rank: int) -> pd.DataFrame:
    return ac.read_memory_record(path, rank)[0]


def _minddata_raw(path: Path, rank: int) -> pd.DataFrame:
    return ac.read_minddata_pipeline(path, None, rank)


# (file name, reader, header, one good row, a key column to drop)
CASES: list[tuple[str, Callable[[Path, int], pd.DataFrame], str, str, str]] = [
    ("step_trace_time.csv", ac.read_step_trace_time,
     "Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
     "Communication(Not Overlapped and Exclude Receive),Preparing",
     "50,8827.47,81515.607,4001.28,85516.889,25908.1,116251.25,0,81515.607,19358.0", "Free"),
    ("kernel_details.csv", ac.read_kernel_details,
     "Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim",
     "50,trans_TransData_0,N/A,N/A,1736405443881410.320\t,50.621,0,0", "Duration(us)"),
    ("op_summary_0.csv", ac.read_kernel_details,
     "Device_id,Op Name,OP Type,Task Type,Task Start Time(us),Task Duration(us),Task Wait Time(us),Block Num",
     "0,OnesLike,OnesLike,AI_VECTOR_CORE,1787504124159178.249\t,4.880,0,8", "Op Name"),
    ("op_statistic.csv", ac.read_op_statistic,
     "OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)",
     "TransData,AI_VECTOR_CORE,57,1423.208,6.54,24.969,70.801,16.038", "Count"),
    ("memory_record.csv", _memory_record,
     "Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),Total Active(MB),Stream Ptr,Device Type",
     "PTA,1736405443927045.260\t,954.06787109375,1452.0,954.06787109375,1431569360,NPU:0", "Timestamp(us)"),
    ("npu_module_mem.csv", ac.read_npu_module_mem,
     "Component,Timestamp(us),Total Reserved(MB),Device", "SLOG,1736405443839379.660\t,0.0,NPU:0",
     "Total Reserved(MB)"),
    ("operator_memory.csv", ac.read_operator_memory,
     "Name,Size(KB),Allocation Time(us),Release Time(us),Duration(us),Device Type",
     "aten::_convolution,25009.5,1736405443879844.900\t,1736405443914587.140\t,34742.240\t,NPU:0", "Size(KB)"),
    ("static_op_mem.csv", ac.read_static_op_mem,
     "Device_id,Op Name,Model Name,Graph ID,Node Index Start,Node Index End,Size(KB)",
     "host,sqrt_01,0,0,31,32,2343.78125", "Size(KB)"),
    ("dataset.csv", ac.read_dataset_csv,
     "Operation,Stage,Occurrences,Avg. time (us),Custom Info", "Batch,Compute,16,120.5,x", "Occurrences"),
    ("minddata_pipeline_raw_0.csv", _minddata_raw,
     "op_id,op_type,num_workers,output_queue_size,output_queue_average_size,output_queue_length,"
     "output_queue_usage_rate,sample_interval,parent_id,children_id",
     '1,BatchOp,2,"[0, 16, 16]",10.67,16,0.67,1000,0,[2]', "op_id"),
]
IDS = [c[0] for c in CASES]


def _drop_column(header: str, row: str, column: str) -> tuple[str, str]:
    h = next(csv.reader([header]))
    r = next(csv.reader([row]))
    i = h.index(column)
    del h[i], r[i]

    def line(cells: list[Any]) -> str:
        return ",".join('"' + c.replace('"', '""') + '"' if ("," in c or '"' in c) else c for c in cells)

    return line(h), line(r)


@pytest.mark.parametrize("name, reader, header, row, key", CASES, ids=IDS)
def test_good_row_reads(tmp_path: Path, name: str, reader: Any, header: str, row: str, key: str) -> None:
    p = tmp_path / name
    p.write_text(f"{header}\n{row}\n")
    assert len(reader(p, 0)) == 1


@pytest.mark.parametrize("name, reader, header, row, key", CASES, ids=IDS)
def test_empty_file(tmp_path: Path, name: str, reader: Any, header: str, row: str, key: str) -> None:
    p = tmp_path / name
    p.write_text("")
    with pytest.raises(ParseError) as e:
        reader(p, 0)
    assert name in str(e.value) and "empty" in str(e.value)


@pytest.mark.parametrize("name, reader, header, row, key", CASES, ids=IDS)
def test_header_only_is_zero_rows(tmp_path: Path, name: str, reader: Any, header: str, row: str, key: str) -> None:
    p = tmp_path / name
    p.write_text(header + "\r\n")
    df = reader(p, 0)
    assert len(df) == 0
    assert "rank" in df.columns


@pytest.mark.parametrize("name, reader, header, row, key", CASES, ids=IDS)
def test_truncated_mid_row(tmp_path: Path, name: str, reader: Any, header: str, row: str, key: str) -> None:
    p = tmp_path / name
    cut = row[: row.index(",", len(row) // 3)]  # cut after a few fields, no newline at the end
    p.write_text(f"{header}\n{row}\n{cut}")
    with pytest.raises(ParseError) as e:
        reader(p, 0)
    assert name in str(e.value) and "truncated" in str(e.value)


@pytest.mark.parametrize("name, reader, header, row, key", CASES, ids=IDS)
def test_missing_key_column(tmp_path: Path, name: str, reader: Any, header: str, row: str, key: str) -> None:
    h, r = _drop_column(header, row, key)
    p = tmp_path / name
    p.write_text(f"{h}\n{r}\n")
    with pytest.raises(ParseError) as e:
        reader(p, 0)
    assert name in str(e.value) and "missing column" in str(e.value) and key in str(e.value)


def test_truncated_inside_quoted_shape(tmp_path: Path) -> None:
    p = tmp_path / "kernel_details.csv"
    p.write_text('Name,Type,Accelerator Core,Start Time(us),Duration(us),Input Shapes\nA,B,AI_CORE,1.0\t,2.0,"""32,3')
    with pytest.raises(ParseError, match="kernel_details.csv"):
        ac.read_kernel_details(p, 0)


def test_non_number_names_file_and_column(tmp_path: Path) -> None:
    p = tmp_path / "kernel_details.csv"
    p.write_text("Name,Type,Accelerator Core,Start Time(us),Duration(us)\nA,B,AI_CORE,1.0\t,fast\n")
    with pytest.raises(ParseError) as e:
        ac.read_kernel_details(p, 0)
    assert "kernel_details.csv" in str(e.value) and "Duration(us)" in str(e.value) and "'fast'" in str(e.value)


# ---- issue 20: a CSV whose shape would make the parse explode is refused before pandas -----------------

L0_KERNELS = f"ascend/torchnpu-2rank-level0/rank0_ascend_pt/{OUT}/kernel_details.csv"


def test_wide_header_is_refused(corpus: Path, tmp_path: Path) -> None:
    """5,000 names added to the header: more than MAX_COLUMNS (4,096); the header's own columns plus 5,000
    is the count the error gives (the clean header's width counted with the csv module)."""
    from msdiag.ingest._csv import MAX_COLUMNS

    src = corpus / L0_KERNELS
    head, rest = src.read_bytes().split(b"\n", 1)
    width = len(next(csv.reader([head.decode().rstrip("\r")])))
    p = tmp_path / "kernel_details.csv"
    p.write_bytes(head.rstrip(b"\r") + b"".join(b",x%d" % i for i in range(5000)) + b"\n" + rest)
    assert width + 5000 > MAX_COLUMNS
    with pytest.raises(ParseError, match=f"the header has {width + 5000:,} columns"):
        ac.read_kernel_details(p, 0)


def test_header_wider_than_its_rows_is_refused(corpus: Path, tmp_path: Path) -> None:
    """100 names added (under MAX_COLUMNS): the rows still have the clean header's width, so the header
    names columns no row fills."""
    src = corpus / L0_KERNELS
    head, rest = src.read_bytes().split(b"\n", 1)
    width = len(next(csv.reader([head.decode().rstrip("\r")])))
    p = tmp_path / "kernel_details.csv"
    p.write_bytes(head.rstrip(b"\r") + b"".join(b",x%d" % i for i in range(100)) + b"\n" + rest)
    with pytest.raises(ParseError, match=f"the header has {width + 100:,} columns but its first rows have at most {width:,}"):
        ac.read_kernel_details(p, 0)


def test_line_of_commas_is_refused(corpus: Path, tmp_path: Path) -> None:
    """A 2 MiB line of commas after the real rows: the error names its line (the file's lines + 1)."""
    src = corpus / L0_KERNELS
    data = src.read_bytes()
    if not data.endswith(b"\n"):
        data += b"\n"
    p = tmp_path / "kernel_details.csv"
    p.write_bytes(data + b"," * (2 << 20) + b"\n")
    line = data.count(b"\n") + 1
    with pytest.raises(ParseError, match=f"line {line:,} is longer than 1 MiB"):
        ac.read_kernel_details(p, 0)


def test_step_id_beyond_int64_is_null_with_a_note(corpus: Path, tmp_path: Path) -> None:
    """Step Id 1e308 on the 4th kernel: that kernel's step is null, the others keep theirs, one note."""
    src = corpus / L0_KERNELS
    table = rows(src)
    with open(src, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    table[3]["Step Id"] = "1e308"
    p = tmp_path / "kernel_details.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(table)
    notes: list[str] = []
    k = ac.read_kernel_details(p, 0, notes)
    assert k["step"].isna().tolist() == [i == 3 for i in range(len(table))]
    assert notes == ["kernel_details.csv: 1 'Step Id' value(s) beyond the int64 range (first: 1e+308) read as null"]


def test_rows_too_short_for_the_header_are_refused(tmp_path: Path) -> None:
    """A header of 400 names whose first rows are full (399 commas each) but whose 5,000 later rows hold
    one field: 5,101 lines x 399 commas a full row needs is far more than the file's ~50 KB."""
    p = tmp_path / "kernel_details.csv"
    p.write_text(",".join(f"c{i}" for i in range(400)) + "\n" + ("," * 399 + "\n") * 100 + "1\n" * 5000)
    with pytest.raises(ParseError, match="its 5,101 lines hold far fewer fields than the header's 400 columns"):
        ac.read_kernel_details(p, 0)
