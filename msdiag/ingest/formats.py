"""Every format msdiag reads, declared once: the Ascend text output and MindSpore on CPU here, the
others in their own modules (sqlite_export, cann_msprof, legacy). :data:`FORMATS` is the list
discovery tries, in order; the engine (ingest/engine.py) reads a rank with its format.

To read a new file of a format, add one ``Src`` to its ``sources``; to read a new format, declare a
``Format`` (recognition, rank listing, sources) and add it to :data:`FORMATS`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from msdiag.errors import InputError
from msdiag.ingest import ascend_csv, ascend_stats, cann_msprof, communication, legacy, metadata, mindspore_cpu, sqlite_export
from msdiag.ingest.engine import Ctx, Format, Read, Result, Src, Why, why_no_memory
from msdiag.ingest.folders import ASCEND_PT, ascend_rank, is_cpu_rank, is_rank_folder
from msdiag.ingest.msdiag_markers import MARKERS_FILE, read_markers_source
from msdiag.ingest.trace_view import read_trace_view
from msdiag.model import RankData, column_array, entry, held_rows

OUT = "ASCEND_PROFILER_OUTPUT"
CORE_FILES = ("kernel_details.csv", "trace_view.json", "step_trace_time.csv")


# ---- readers that return more than one table's rows ------------------------------------------


def _trace_view(p: Path, ctx: Ctx) -> Read:
    tv = read_trace_view(p, ctx.rank)
    out = Read(tables={"timeline": tv.timeline, "counters": tv.counters}, meta={"trace_processes": tv.processes},
               info={"step_source": tv.step_source})
    if len(tv.host_ops):
        out.tables["kernels"] = tv.host_ops
        out.info["kernels_from"] = "trace_view.json (CPU OP)"
    return out


def _kernel_details(p: Path, ctx: Ctx) -> Read:
    notes: list[str] = []
    kernels = ascend_csv.read_kernel_details(p, ctx.rank, notes)
    return Read(tables={"kernels": kernels}, info={"kernels_from": p.name}, notes=notes)


def _kernel_details_bulk(paths: list[Path], ranks: list[int]) -> list[Result] | None:
    frames = ascend_csv.read_kernel_details_many(paths, ranks)
    return None if frames is None else [Read(tables={"kernels": f}, info={"kernels_from": p.name}, notes=[])
                                        for p, f in zip(paths, frames)]


def _step_trace_time_bulk(paths: list[Path], ranks: list[int]) -> list[Result] | None:
    frames = ascend_csv.read_step_trace_time_many(paths, ranks)
    return None if frames is None else [Read(replace={"profiler_steps": f}) for f in frames]


def _memory_record_bulk(paths: list[Path], ranks: list[int]) -> list[Result] | None:
    frames = ascend_csv.read_memory_record_many(paths, ranks)
    return None if frames is None else [Read(tables={"memory": f}, notes=[]) for f in frames]


def _communication_bulk(paths: list[Path], ranks: list[int]) -> list[Result] | None:
    frames = communication.read_communication_many(paths, ranks)
    return None if frames is None else [Read(tables={"comm_ops": ops, "comm_transport": tr}) for ops, tr in frames]


def _frames(read_many: Callable[[list[Path], list[int]], list[pd.DataFrame] | None]) -> Callable[[list[Path], list[int]], list[Result] | None]:
    """A bulk reader of a ``rows`` source: its frames as they are."""
    def bulk(paths: list[Path], ranks: list[int]) -> list[Result] | None:
        frames = read_many(paths, ranks)
        return None if frames is None else list(frames)

    return bulk


def _step_trace_time(p: Path, ctx: Ctx) -> Read:
    return Read(replace={"profiler_steps": ascend_csv.read_step_trace_time(p, ctx.rank)})


def _communication(p: Path, ctx: Ctx) -> Read:
    ops, transport = communication.read_communication(p, ctx.rank)
    return Read(tables={"comm_ops": ops, "comm_transport": transport})


def _memory_record(p: Path, ctx: Ctx) -> Read:
    df, notes = ascend_csv.read_memory_record(p, ctx.rank)
    return Read(tables={"memory": df}, notes=notes)


def _dataset_csv(p: Path, ctx: Ctx) -> Read:
    return Read(replace={"dataset_stages": ascend_csv.read_dataset_csv(p, ctx.rank)})


def _minddata(p: Path, ctx: Ctx) -> Read:
    summary = ctx.beside(p, p.name.replace("minddata_pipeline_raw_", "minddata_pipeline_summary_").replace(".csv", ".json"))
    return Read(tables={"data_pipeline": ascend_csv.read_minddata_pipeline(p, summary, ctx.rank)})


def _cpu_op_timestamps(p: Path, ctx: Ctx) -> Read:
    if len(ctx.table("kernels")):
        return Read()  # trace_view.json already gave the host ops; this file holds the same launches
    return Read(tables={"kernels": mindspore_cpu.read_cpu_op_timestamps(p, ctx.rank)}, info={"kernels_from": p.name})


def _kernels_carry_steps(rd: RankData) -> bool:
    """Whether kernel_details.csv gave the rank's device side whole: its steps (Step Id) and its communication
    (HCCL tasks; an older file without them leaves the communication to trace_view.json's HCCL lane). Then
    trace_view.json adds only the host side (Python, dataset waits, syncs, step markers), the HCCL and overlap
    lanes and the counters, and a rank read shallow need not parse it (ingest/loader.Tiered)."""
    if rd.info.kernels_from != "kernel_details.csv" or not held_rows(rd, "kernels"):
        return False
    # on the two columns as held (a bulk read's Rows are not cut into the rank's frame for this); the kinds' distinct
    # values, a handful: cheaper than comparing every row
    k = entry(rd.tables, "kernels")
    steps, kinds = column_array(k, "step"), column_array(k, "kind")
    return bool((~np.asarray(steps.isna(), dtype=bool)).any()) and "communication" in set(kinds.unique())


# ---- why a source may be absent -------------------------------------------------------------


def _why_comm(ctx: Ctx) -> str:
    if ctx.info.profiler_level == "Level0":
        return "profiler Level0 writes no communication analysis (use Level1 or higher)"
    return "not written by this capture (no HCCL communication recorded, or Level0 profiling)"


def _why_statistic(ctx: Ctx) -> str:
    if ctx.info.profiler_level == "Level0":
        return "profiler Level0 writes no op_statistic.csv"
    return "not written by this capture"


def _why_api(ctx: Ctx) -> str:
    if ctx.info.profiler_level == "Level0":
        return "profiler Level0 writes no api_statistic.csv (CANN AscendCL API data: Level1 or higher)"
    return "not written by this capture (the profiler writes it at Level1 and above, from CANN's AscendCL API data)"


#: Files of the Ascend text output msdiag does not read (Level1 / Level2, system sampling), each with
#: why: listed (status unused) when present, so a report never looks as if they were not there.
UNUSED_FILES: tuple[tuple[str, str], ...] = (
    ("operator_details.csv", "framework ops with their input shapes (torch_npu adds call stacks and self times): "
     "not read; msdiag takes shapes and times from the device kernels (kernel_details.csv) and host calls from "
     "trace_view.json"),
    ("data_preprocess.csv", "Level2 AI CPU data preprocessing tasks: not read (AI CPU kernels are read from "
     "kernel_details.csv)"),
    ("hbm.csv", "HBM bandwidth samples: not read (nor is trace_view.json's HBM counter)"),
    ("pcie.csv", "PCIe bandwidth samples: not read"),
    ("hccs.csv", "HCCS bandwidth samples: not read; link bandwidth comes from communication.json"),
    ("nic.csv", "NIC bandwidth samples: not read"),
    ("roce.csv", "RoCE bandwidth samples: not read"),
)


def _why_minddata(ctx: Ctx) -> str:
    if ctx.family == ASCEND_PT:
        return "torch_npu writes no MindData pipeline files"
    return "MindData pipeline profiling was off (data_process)"


def _why_dataset(ctx: Ctx) -> str:
    if ctx.family == ASCEND_PT:
        return "torch_npu writes no dataset.csv"
    return "no dataset ops were recorded (data_process off, or no mindspore.dataset pipeline)"


def _minddata_src(absent: Why) -> Src:
    return Src("minddata_pipeline_raw_{rank}.csv", "data_pipeline", read=_minddata, folder=OUT,
               fallback="minddata_pipeline_raw_*.csv", absent=absent)


def _require_core(rd: RankData, ctx: Ctx) -> None:
    """A rank folder with none of the core files (and no kernels otherwise) has nothing to analyze."""
    if not any(n in ctx.present for n in CORE_FILES) and not len(rd.table("kernels")):
        raise InputError(
            ctx.folder,
            "holds none of trace_view.json, kernel_details.csv, step_trace_time.csv: nothing to analyze "
            "(was the capture's offline analysis run? MindSpore writes ASCEND_PROFILER_OUTPUT/ when it finishes)",
        )


# ---- the MindSpore 2.3+ / torch_npu text output ---------------------------------------------

ASCEND_SOURCES: tuple[Src, ...] = (
    *metadata.JSON_SOURCES,
    Src("kernel_details.csv", "kernels", read=_kernel_details, core=True, folder=OUT,
        absent="no kernel_details.csv: kernels come from trace_view.json only", bulk=_kernel_details_bulk),
    Src("trace_view.json", "timeline", read=_trace_view, core=True, folder=OUT,
        absent="no trace_view.json: no timeline of host, HCCL and overlap lanes", deep_only=_kernels_carry_steps),
    Src("step_trace_time.csv", "profiler_steps", read=_step_trace_time, core=True, folder=OUT,
        absent="no step_trace_time.csv: the profiler's own step breakdown is not there to cross-check",
        bulk=_step_trace_time_bulk),
    Src("communication.json", "comm_ops", read=_communication, folder=OUT, absent=_why_comm, bulk=_communication_bulk),
    Src("communication_matrix.json", "comm_links", rows=communication.read_communication_matrix, folder=OUT,
        absent=_why_comm, bulk=_frames(communication.read_communication_matrix_many)),
    Src("op_statistic.csv", "op_stats", rows=ascend_csv.read_op_statistic, folder=OUT, absent=_why_statistic,
        bulk=_frames(ascend_csv.read_op_statistic_many)),
    Src("l2_cache.csv", "l2_cache", rows=ascend_stats.read_l2_cache, folder=OUT,
        absent="not written by this capture (the profiler writes it only with l2_cache=True)",
        bulk=_frames(ascend_stats.read_l2_cache_many)),
    Src("api_statistic.csv", "api_stats", rows=ascend_stats.read_api_statistic, folder=OUT, absent=_why_api,
        bulk=_frames(ascend_stats.read_api_statistic_many)),
    Src("memory_record.csv", "memory", read=_memory_record, folder=OUT, absent=why_no_memory, bulk=_memory_record_bulk),
    Src("operator_memory.csv", "memory_allocs", rows=ascend_csv.read_operator_memory, folder=OUT, absent=why_no_memory,
        bulk=_frames(ascend_csv.read_operator_memory_many)),
    Src("npu_module_mem.csv", "memory", rows=ascend_csv.read_npu_module_mem, folder=OUT, absent=why_no_memory,
        bulk=_frames(ascend_csv.read_npu_module_mem_many)),
    Src("static_op_mem.csv", "memory_allocs", rows=ascend_csv.read_static_op_mem, folder=OUT,
        absent="written only for static graphs compiled by GE (graph mode with memory profiling)"),
    Src("dataset.csv", "dataset_stages", read=_dataset_csv, folder=OUT, absent=_why_dataset),
    _minddata_src(_why_minddata),
    Src(MARKERS_FILE, "timeline", read=read_markers_source,
        absent="not captured by msdiag capture: no msdiag step markers"),
    *(Src(name, folder=OUT, unused=why) for name, why in UNUSED_FILES),
)

ASCEND_TEXT = Format(
    name="ascend_text",
    label="MindSpore 2.3+ / torch_npu Ascend profiler output",
    claims=lambda d, names: is_rank_folder(d, names) and not is_cpu_rank(d, names) and not sqlite_export.is_db_rank(d),
    ranks=lambda d, names: [ascend_rank(d, names, "ascend_text")],
    sources=ASCEND_SOURCES,
    finish=_require_core,
)


# ---- MindSpore on CPU -----------------------------------------------------------------------

CPU_SOURCES: tuple[Src, ...] = (
    dataclasses.replace(metadata.PROFILER_METADATA,
                        absent="no profiler_metadata.json (written only when the job calls add_metadata)"),
    Src("trace_view.json", "kernels", read=_trace_view, core=True, folder=OUT,  # its host ops
        absent="no trace_view.json: host ops come from FRAMEWORK/cpu_op_execute_timestamp"),
    Src("cpu_op_execute_timestamp_{rank}.txt", "kernels", read=_cpu_op_timestamps, folder="FRAMEWORK",
        absent="no cpu_op_execute_timestamp file"),
    Src("cpu_framework_{rank}.txt", "host_shapes", rows=mindspore_cpu.read_cpu_framework, folder="FRAMEWORK",
        absent="no cpu_framework file: op input shapes unknown (FLOPs from shapes unavailable)"),
    Src("cpu_op_type_info_{rank}.csv", "op_stats", rows=mindspore_cpu.read_cpu_op_type_info, folder="FRAMEWORK",
        absent="no cpu_op_type_info file"),
    Src("cpu_ms_memory_record_{rank}.txt", "memory", rows=mindspore_cpu.read_cpu_memory_record, folder="FRAMEWORK",
        absent="profile_memory was off in this capture"),
    _minddata_src(
        "no MindData pipeline profile: no mindspore.dataset pipeline ran, or MindData profiling was off "
        "(data_process has no effect on CPU; msdiag capture turns it on)"),
    Src(MARKERS_FILE, "timeline", read=read_markers_source,
        absent="not captured by msdiag capture: no step markers (MindSpore on CPU writes none)"),
)

MINDSPORE_CPU = Format(
    name="mindspore_cpu",
    label="MindSpore CPU profiler output",
    claims=lambda d, names: is_rank_folder(d, names) and is_cpu_rank(d, names),
    ranks=lambda d, names: [ascend_rank(d, names, "mindspore_cpu")],
    sources=CPU_SOURCES,
    finish=_require_core,
    # MindSpore on CPU never writes these: say so once instead of leaving the reader to wonder.
    never=(
        ("kernel_details.csv", "MindSpore on CPU runs no device kernels: ops are host ops"),
        ("step_trace_time.csv", "MindSpore on CPU writes no step breakdown"),
        ("communication.json", "MindSpore on CPU writes no HCCL communication analysis; collectives are host ops"),
        ("profiler_info_{rank}.json", "MindSpore on CPU writes no profiler_info.json"),
        ("dataset.csv", "data_process has no effect on CPU captures"),
    ),
)

#: Every format, in the order discovery tries them on a folder (a folder claimed by one is not
#: entered further) and lists their ranks.
FORMATS: tuple[Format, ...] = (MINDSPORE_CPU, sqlite_export.FORMAT, ASCEND_TEXT, legacy.FORMAT, cann_msprof.FORMAT)
BY_NAME: dict[str, Format] = {f.name: f for f in FORMATS}
