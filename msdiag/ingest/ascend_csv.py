"""Readers of the CSV files in ``ASCEND_PROFILER_OUTPUT/`` (MindSpore 2.3+ ``*_ascend_ms``, torch_npu
``*_ascend_pt``; both write the same formats) and of the MindData pipeline files.

Each reader translates the raw headers to the canonical columns of :mod:`msdiag.model` here, at the
boundary, and builds its frame with the model table's ``frame`` so dtypes are right. The raw-header
-> canonical-column maps are data (the ``*_COLUMNS`` dicts below): each canonical column lists the raw
headers that carry it across versions, first present wins.

A file that is empty, cut off mid-row or lacks its key columns raises :class:`ParseError` naming the
file and what is wrong. A header-only file is valid and gives zero rows. Absent optional columns
become null, never 0.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from msdiag import model, units
from msdiag.errors import ParseError
from msdiag.ingest._csv import (
    NA_VALUES,
    Cells,
    either_text,
    read_cells,
    read_cells_many,
)

Alternatives = tuple[str, ...]

# --------------------------------------------------------------------------------------------
# Raw header -> canonical column maps (first raw header present wins)
# --------------------------------------------------------------------------------------------

STEP_TRACE_COLUMNS: dict[str, Alternatives] = {
    "computing_us": ("Computing",),
    "communication_exposed_us": ("Communication(Not Overlapped)",),
    "overlapped_us": ("Overlapped",),
    "communication_us": ("Communication",),
    "free_us": ("Free",),
    "stage_us": ("Stage",),
    "bubble_us": ("Bubble",),
    "preparing_us": ("Preparing",),  # absent from older files: null then, never 0
}
STEP_TRACE_REQUIRED = (
    "Step",
    "Computing",
    "Communication(Not Overlapped)",
    "Overlapped",
    "Communication",
    "Free",
    "Stage",
    "Bubble",
)

# kernel_details.csv (torch_npu "Step Id", MindSpore "Step ID") and msprof op_summary_*.csv
KERNEL_NAME: Alternatives = ("Name", "Op Name")
KERNEL_TYPE: Alternatives = ("Type", "OP Type")
KERNEL_CORE: Alternatives = ("Accelerator Core", "Task Type")
KERNEL_START: Alternatives = ("Start Time(us)", "Task Start Time(us)")
KERNEL_DUR: Alternatives = ("Duration(us)", "Task Duration(us)")
KERNEL_FLOAT_COLUMNS: dict[str, Alternatives] = {
    "start_us": KERNEL_START,
    "dur_us": KERNEL_DUR,
    "wait_us": ("Wait Time(us)", "Task Wait Time(us)"),
    "aicore_time_us": ("aicore_time(us)",),
    "aic_total_cycles": ("aic_total_cycles",),  # PMU cube cycles over all blocks: the clock (issue 15)
    "aic_mac_ratio": ("aic_mac_ratio",),
    "aiv_vec_ratio": ("aiv_vec_ratio",),
    "aic_mte2_ratio": ("aic_mte2_ratio",),
    # the rest of the PipeUtilization ratios (aic_metrics PipeUtilization, Level1's default): each op
    # type's bound unit (metrics/kernel_types.py)
    "aic_scalar_ratio": ("aic_scalar_ratio",),
    "aic_mte1_ratio": ("aic_mte1_ratio",),
    "aic_fixpipe_ratio": ("aic_fixpipe_ratio",),
    "aiv_time_us": ("aiv_time(us)",),
    "aiv_scalar_ratio": ("aiv_scalar_ratio",),
    "aiv_mte2_ratio": ("aiv_mte2_ratio",),
    "aiv_mte3_ratio": ("aiv_mte3_ratio",),
}
KERNEL_INT_COLUMNS: dict[str, Alternatives] = {
    "step": ("Step Id", "Step ID"),
    "stream": ("Stream ID", "Stream Id"),
    "block_dim": ("Block Dim", "Block Num"),  # older CANN: Block Dim; newer: Block Num
}
KERNEL_STR_COLUMNS: dict[str, Alternatives] = {
    "name": KERNEL_NAME,
    "type": KERNEL_TYPE,
    "core": KERNEL_CORE,
    "input_dtypes": ("Input Data Types",),
    "input_formats": ("Input Formats",),
    "output_dtypes": ("Output Data Types",),
}
KERNEL_SHAPE_COLUMNS: dict[str, Alternatives] = {
    "input_shapes": ("Input Shapes",),
    "output_shapes": ("Output Shapes",),
}
# ArithmeticUtilization: a kernel's FLOPs are split over its cube (aic_) and vector (aiv_) units;
# a vector kernel has its FLOPs in aiv_vector_fops only, so the kernel's total is the sum.
KERNEL_SUM_COLUMNS: dict[str, Alternatives] = {
    "cube_fops": ("aic_cube_fops", "aiv_cube_fops"),
    "vector_fops": ("aic_vector_fops", "aiv_vector_fops"),
}
COMMUNICATION_CORE = "HCCL"

OP_STAT_COLUMNS: dict[str, Alternatives] = {
    "total_us": ("Total Time(us)",),
    "min_us": ("Min Time(us)",),
    "avg_us": ("Avg Time(us)",),
    "max_us": ("Max Time(us)",),
}
OP_STAT_REQUIRED = ("OP Type", "Core Type", "Count", "Total Time(us)")

MEMORY_RECORD_REQUIRED = ("Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)")
NPU_MODULE_MEM_REQUIRED = ("Component", "Timestamp(us)", "Total Reserved(MB)")
OPERATOR_MEMORY_REQUIRED = ("Name", "Size(KB)", "Allocation Time(us)")
STATIC_OP_MEM_REQUIRED = ("Op Name", "Size(KB)")
STATIC_OP_MEM_TOTAL = "TOTAL"

DATASET_REQUIRED = ("Operation", "Stage", "Occurrences")
DATASET_AVG: Alternatives = ("Avg. time (us)", "Avg. time(us)")  # MindSpore 2.10 source / docs
DATASET_COLUMNS = ("rank", "operation", "stage", "occurrences", "avg_us", "custom_info")

MINDDATA_RAW_REQUIRED = ("op_id", "op_type")
MINDDATA_CONSUMER_OP_ID = -1
MINDDATA_CONSUMER_TYPE = "DeviceQueue/Iterator"


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


Column = Any  # a reader's column: a float64 ndarray, an Int64 or a "string" array


def _read(path: Path, required: Iterable[str] = (), any_of: Iterable[Iterable[str]] = ()) -> Cells:
    """The file's cells (read_cells: the shape, header and truncated-last-row checks)."""
    return read_cells(path, required=required, any_of=any_of)


def _col(df: Cells, names: Sequence[str]) -> str | None:
    for n in names:
        if n in df:
            return n
    return None


def _floats(df: Cells, path: Path, names: Sequence[str]) -> np.ndarray | None:
    c = _col(df, names)
    return None if c is None else df.floats(c, path)


def _ints(df: Cells, path: Path, names: Sequence[str], notes: list[str] | None = None) -> Column | None:
    c = _col(df, names)
    return None if c is None else df.ints(c, path, notes)


def _strs(df: Cells, names: Sequence[str]) -> Column | None:
    """The first present of ``names`` as text, stripped, an NA text (written with spaces around it:
    the parser's own NA matching takes exact cells only) null (Cells.texts)."""
    c = _col(df, names)
    return None if c is None else df.texts(c)


def _rank(n: int, rank: int) -> Column:
    """``rank`` on n rows (from one numpy fill: a Python list of n ints costs seconds at a million rows)."""
    return pd.array(np.full(n, rank, dtype=np.int64), dtype=model.INT)


RankOf = Callable[[int], Column]  # a reader's rank column for its n rows
Build = Callable[[Cells, Path, RankOf, list[str]], pd.DataFrame]  # a reader's table from its file's cells


def _rank_of(rank: int) -> RankOf:
    return lambda n: _rank(n, rank)


class _Uneven(Exception):
    """A reader of several files kept other rows than it was given (their ranks no longer line up)."""


def read_many(paths: list[Path], ranks: list[int], build: Build, required: Iterable[str] = (),
              any_of: Iterable[Iterable[str]] = (), columns: Collection[str] | None = None, numbers: Collection[str] = (),
              ) -> list[pd.DataFrame] | list[model.Rows] | None:
    """What a reader (``build`` of one file's cells) gives for each of several files of one header, each of its
    rank, built once on their cells laid end to end (``_csv.read_cells_many``: one split; each conversion and the
    frame once), then cut back into a frame per file: a row slice of it with the index 0..n-1, the frame the file
    read alone gives (tests/test_bulk_read.py), each given as the :class:`model.Rows` it is cut from when read
    (``model.cut_rows``; ``model.frame_of`` gives the frame). None where that cannot be so: a file read_cells_many does not take,
    a reader that raises, writes a note (an error and a note name one file: the files are read one by one then) or
    keeps other rows than it was given. ``columns``: every name ``build`` may read, where it reads few of a wide
    file's (only those are converted: ``read_cells_many``); ``numbers``: the names it reads only as numbers (read as
    such by pyarrow; a reader asking for one's texts raises, and each file is read alone)."""
    got = read_cells_many(paths, required, any_of, columns, numbers)
    if got is None:
        return None
    cells, counts = got
    column = model.rank_column(ranks, counts)

    def rank_of(n: int) -> Column:
        if n != len(column):
            raise _Uneven
        return column

    notes: list[str] = []
    try:
        frame = build(cells, paths[0], rank_of, notes)
    except Exception:  # noqa: BLE001 - each file is read alone then, with its own error
        return None
    return None if notes or len(frame) != cells.n else model.cut_rows(frame, counts)  # (held uncut until read)


def _const(n: int, value: str) -> Column:
    """``value`` on n rows."""
    return model.const_texts(n, value)


def _present(cols: Mapping[str, Column | None]) -> dict[str, Column]:
    return {k: v for k, v in cols.items() if v is not None}


def _is(col: Column, value: str) -> np.ndarray:
    """Booleans: the text column equals ``value`` (null: False)."""
    return np.asarray(pc.fill_null(pc.equal(pa.array(col), value), False))


def _starts_lower(col: Column, prefix: str) -> np.ndarray:
    """Booleans: the text column, lower-cased, starts with ``prefix`` (null: False)."""
    return np.asarray(pc.fill_null(pc.starts_with(pc.utf8_lower(pa.array(col)), pattern=prefix), False))


# --------------------------------------------------------------------------------------------
# step_trace_time.csv -> STEPS
# --------------------------------------------------------------------------------------------


def read_step_trace_time(path: Path, rank: int) -> pd.DataFrame:
    """step_trace_time.csv -> model.STEPS, one row per step (times in us).

    The file has no total column. total_us = Computing + Communication(Not Overlapped) + Free: the
    three Overlap Analysis lanes partition the step's span (on every corpus file this equals
    Stage + Bubble, the span, within 0.12 us of rounding). Rows whose Step is text (summary rows) are
    skipped; a blank Step (a capture without step markers) gives a row with a null step.
    """
    return _step_trace_time(_read(path, required=STEP_TRACE_REQUIRED), path, _rank_of(rank), [])


def read_step_trace_time_many(paths: list[Path], ranks: list[int]) -> list[pd.DataFrame] | None:
    """:func:`read_step_trace_time` of several files at once (:func:`read_many`)."""
    return read_many(paths, ranks, _step_trace_time, required=STEP_TRACE_REQUIRED)


def _step_trace_time(df: Cells, path: Path, rank_of: RankOf, notes: list[str]) -> pd.DataFrame:
    if not all(isinstance(v, float) or (v.isascii() and v.isdigit()) for v in df["Step"]):
        # (every Step null or written in digits: every row is kept, nothing to judge)
        step_raw = pd.Series(df["Step"]).astype("string").str.strip()
        blank = step_raw.isna() | step_raw.isin(NA_VALUES)
        numeric = pd.to_numeric(step_raw, errors="coerce").notna()
        df = df.take((blank | numeric).to_numpy(bool))
    n = len(df)
    cols: dict[str, Column | None] = {
        "rank": rank_of(n),
        "step": df.ints("Step", path),
    }
    for canon, names in STEP_TRACE_COLUMNS.items():
        cols[canon] = _floats(df, path, names)
    cols["total_us"] = cols["computing_us"] + cols["communication_exposed_us"] + cols["free_us"]  # type: ignore[operator]
    cols["source"] = _const(n, "step_trace_time.csv")
    return model.STEPS.frame(_present(cols))


# --------------------------------------------------------------------------------------------
# kernel_details.csv / op_summary_*.csv -> KERNELS
# --------------------------------------------------------------------------------------------


def read_kernel_details(path: Path, rank: int, notes: list[str] | None = None) -> pd.DataFrame:
    """kernel_details.csv (or a CANN msprof op_summary_*.csv) -> model.KERNELS.

    Accepts both header flavours (Name/Type/Accelerator Core/Start Time(us)/Duration(us) and
    Op Name/OP Type/Task Type/Task Start Time(us)/Task Duration(us)), Block Dim or Block Num, with or
    without Step Id and the Level1 shape columns. Names are kept as written: MindSpore 2.10 writes
    ``<framework launch op>/<device kernel>`` there and keeps with_stack call stacks in the timeline,
    not in this file. kind is "communication" for HCCL tasks (Accelerator Core HCCL, or a type or
    name starting with hcom), else "compute". An id beyond int64 (Step Id 1e308) is read as null, with a
    note in ``notes`` when given.
    """
    return _kernel_details(_read(path, any_of=KERNEL_ANY_OF), path, _rank_of(rank), notes)


def read_kernel_details_many(paths: list[Path], ranks: list[int]) -> list[pd.DataFrame] | None:
    """:func:`read_kernel_details` of several files at once (:func:`read_many`)."""
    return read_many(paths, ranks, _kernel_details, any_of=KERNEL_ANY_OF, columns=KERNEL_READ, numbers=KERNEL_NUMBERS)


KERNEL_ANY_OF = (KERNEL_NAME, KERNEL_TYPE, KERNEL_CORE, KERNEL_START, KERNEL_DUR)
#: Every column name :func:`_kernel_details` may read (23 of a Level1 kernel_details.csv's 46 columns).
KERNEL_READ = frozenset(
    name
    for table in (KERNEL_INT_COLUMNS, KERNEL_STR_COLUMNS, KERNEL_SHAPE_COLUMNS, KERNEL_FLOAT_COLUMNS, KERNEL_SUM_COLUMNS)
    for names in table.values()
    for name in names
) | {name for names in KERNEL_ANY_OF for name in names}


#: The names :func:`_kernel_details` reads only as numbers (ints, floats, sums; none of them also read as text).
KERNEL_NUMBERS = frozenset(
    name for table in (KERNEL_INT_COLUMNS, KERNEL_FLOAT_COLUMNS, KERNEL_SUM_COLUMNS) for names in table.values() for name in names
) - {name for table in (KERNEL_STR_COLUMNS, KERNEL_SHAPE_COLUMNS) for names in table.values() for name in names}


def _kernel_details(df: Cells, path: Path, rank_of: RankOf, notes: list[str] | None) -> pd.DataFrame:
    n = len(df)
    cols: dict[str, Column | None] = {"rank": rank_of(n)}
    for canon, names in KERNEL_INT_COLUMNS.items():
        cols[canon] = _ints(df, path, names, notes)
    for canon, names in KERNEL_STR_COLUMNS.items():
        cols[canon] = _strs(df, names)
    for canon, names in KERNEL_SHAPE_COLUMNS.items():
        c = _col(df, names)
        if c is not None:
            cols[canon] = df.quoted_texts(c)  # N/A -> null; '""' (no shape) -> ''
    for canon, names in KERNEL_FLOAT_COLUMNS.items():
        cols[canon] = _floats(df, path, names)
    for canon, names in KERNEL_SUM_COLUMNS.items():
        parts = [pd.Series(df.floats(c, path)) for c in names if c in df]
        if parts:
            cols[canon] = pd.concat(parts, axis=1).sum(axis=1, min_count=1).to_numpy()
    core = cols["core"]
    typ = cols["type"]
    name = cols["name"]
    assert core is not None and typ is not None and name is not None
    comm = _is(core, COMMUNICATION_CORE) | _starts_lower(typ, "hcom") | _starts_lower(name, "hcom")
    cols["kind"] = either_text(comm, "communication", "compute")
    if typ.isna().any():  # (the names are parsed only when a type is missing)
        cols["type"] = pd.Series(typ).fillna(type_from_kernel_name(pd.Series(name))).array
    return model.KERNELS.frame(_present(cols))


def type_from_kernel_name(names: pd.Series) -> pd.Series:
    """Op types for rows whose Type is N/A (profiler Level0 writes none), from the kernel name.

    aclnn kernels chain ``_``-separated parts and end with the op type
    (``aclnnMm_MatMulCommon_MatMulV2`` -> ``MatMulV2``); HCCL rows end in instance numbers
    (``hcom_allReduce__586_0_1`` -> ``hcom_allReduce``); other names are their own type.
    """
    n = names.astype("string")
    aclnn = n.str.startswith("aclnn", na=False)
    hcom = n.str.startswith("hcom_", na=False)
    out = n.copy()
    out[aclnn] = n[aclnn].str.rsplit("_", n=1).str[-1]
    out[hcom] = n[hcom].str.split("__", n=1).str[0]
    return out


# --------------------------------------------------------------------------------------------
# op_statistic.csv -> OP_STATS
# --------------------------------------------------------------------------------------------


def read_op_statistic(path: Path, rank: int) -> pd.DataFrame:
    """op_statistic.csv (ASCEND_PROFILER_OUTPUT or msprof op_statistic_*.csv) -> model.OP_STATS.

    Ratio(%) becomes ratio in 0..1.
    """
    return _op_statistic(_read(path, required=OP_STAT_REQUIRED), path, _rank_of(rank), [])


def read_op_statistic_many(paths: list[Path], ranks: list[int]) -> list[pd.DataFrame] | None:
    """:func:`read_op_statistic` of several files at once (:func:`read_many`)."""
    return read_many(paths, ranks, _op_statistic, required=OP_STAT_REQUIRED)


def _op_statistic(df: Cells, path: Path, rank_of: RankOf, notes: list[str]) -> pd.DataFrame:
    n = len(df)
    cols: dict[str, Column | None] = {
        "rank": rank_of(n),
        "op_type": _strs(df, ("OP Type",)),
        "core": _strs(df, ("Core Type",)),
        "count": _ints(df, path, ("Count",)),
    }
    for canon, names in OP_STAT_COLUMNS.items():
        cols[canon] = _floats(df, path, names)
    pct = _floats(df, path, ("Ratio(%)",))
    cols["ratio"] = None if pct is None else pct / 100.0
    return model.OP_STATS.frame(_present(cols))


# --------------------------------------------------------------------------------------------
# memory_record.csv, npu_module_mem.csv -> MEMORY
# --------------------------------------------------------------------------------------------


def read_memory_record(path: Path, rank: int) -> tuple[pd.DataFrame, list[str]]:
    """memory_record.csv -> (model.MEMORY rows with source "memory_record", notes).

    Timestamps written in scientific notation (a spreadsheet round-trip, e.g. 1.69512E+15) are
    parsed but have lost their precision (to ~10 s at that magnitude): a note says so, for the
    caller to record. Total Active(MB) is absent from some torch_npu versions: null then.
    """
    notes: list[str] = []
    return _memory_record(_read(path, required=MEMORY_RECORD_REQUIRED), path, _rank_of(rank), notes), notes


def read_memory_record_many(paths: list[Path], ranks: list[int]) -> list[pd.DataFrame] | None:
    """The frames of :func:`read_memory_record` of several files at once (:func:`read_many`: none with a note)."""
    return read_many(paths, ranks, _memory_record, required=MEMORY_RECORD_REQUIRED,
                     numbers=("Total Allocated(MB)", "Total Reserved(MB)", "Total Active(MB)"))  # (Timestamp: its texts too)


def _memory_record(df: Cells, path: Path, rank_of: RankOf, notes: list[str]) -> pd.DataFrame:
    n = len(df)
    t = pc.utf8_trim_whitespace(df.arrow("Timestamp(us)"))
    mangled = pc.fill_null(pc.match_substring_regex(t, r"[eE]\+"), False)
    if pc.any(mangled).as_py():
        bad = pc.filter(t, mangled)
        notes.append(
            f"{path.name}: timestamps were rounded by a spreadsheet ({bad[0].as_py()}, {len(bad)} of {n} rows): "
            "the memory timeline has no usable time axis"
        )
    cols: dict[str, Column | None] = {
        "rank": rank_of(n),
        "component": _strs(df, ("Component",)),
        "source": _const(n, "memory_record"),
        "ts_us": df.floats("Timestamp(us)", path),
        # "MB" of the Ascend memory files is MiB (2^20 bytes): kept as written in the _mb columns
        "allocated_mb": _floats(df, path, ("Total Allocated(MB)",)),
        "reserved_mb": _floats(df, path, ("Total Reserved(MB)",)),
        "active_mb": _floats(df, path, ("Total Active(MB)",)),
        "device": _strs(df, ("Device Type", "Device")),
    }
    return model.MEMORY.frame(_present(cols))


def read_npu_module_mem(path: Path, rank: int) -> pd.DataFrame:
    """npu_module_mem.csv -> model.MEMORY rows with source "npu_module_mem" (reserved_mb only).

    -1 (KB) means only releases were collected for the module (msprof docs): null, not a size. torch_npu
    divides CANN's KB by 1024 into this file's MB (MiB), so that -1 is written as -0.0009765625: any
    negative figure is null.
    """
    return _npu_module_mem(_read(path, required=NPU_MODULE_MEM_REQUIRED), path, _rank_of(rank), [])


def read_npu_module_mem_many(paths: list[Path], ranks: list[int]) -> list[pd.DataFrame] | None:
    """:func:`read_npu_module_mem` of several files at once (:func:`read_many`)."""
    return read_many(paths, ranks, _npu_module_mem, required=NPU_MODULE_MEM_REQUIRED,
                     numbers=("Total Reserved(MB)", "Timestamp(us)"))


def _npu_module_mem(df: Cells, path: Path, rank_of: RankOf, notes: list[str]) -> pd.DataFrame:
    n = len(df)
    reserved = df.floats("Total Reserved(MB)", path)
    cols: dict[str, Column | None] = {
        "rank": rank_of(n),
        "component": _strs(df, ("Component",)),
        "source": _const(n, "npu_module_mem"),
        "ts_us": df.floats("Timestamp(us)", path),
        "reserved_mb": np.where(reserved < 0, np.nan, reserved),
        "device": _strs(df, ("Device", "Device Type")),
    }
    return model.MEMORY.frame(_present(cols))


# --------------------------------------------------------------------------------------------
# operator_memory.csv, static_op_mem.csv -> MEMORY_ALLOCS
# --------------------------------------------------------------------------------------------


def read_operator_memory(path: Path, rank: int) -> pd.DataFrame:
    """operator_memory.csv -> model.MEMORY_ALLOCS rows of kind "dynamic".

    An empty Release Time means the block was not released within the capture: release_us and
    dur_us are null then.
    """
    return _operator_memory(_read(path, required=OPERATOR_MEMORY_REQUIRED), path, _rank_of(rank), [])


def read_operator_memory_many(paths: list[Path], ranks: list[int]) -> list[pd.DataFrame] | None:
    """:func:`read_operator_memory` of several files at once (:func:`read_many`)."""
    return read_many(paths, ranks, _operator_memory, required=OPERATOR_MEMORY_REQUIRED,
                     numbers=("Size(KB)", "Allocation Time(us)", "Release Time(us)", "Duration(us)"))


def _operator_memory(df: Cells, path: Path, rank_of: RankOf, notes: list[str]) -> pd.DataFrame:
    n = len(df)
    cols: dict[str, Column | None] = {
        "rank": rank_of(n),
        "name": _strs(df, ("Name",)),
        "kind": _const(n, "dynamic"),
        "size_kb": _floats(df, path, ("Size(KB)",)),
        "alloc_us": _floats(df, path, ("Allocation Time(us)",)),
        "release_us": _floats(df, path, ("Release Time(us)",)),
        "dur_us": _floats(df, path, ("Duration(us)",)),
        "device": _strs(df, ("Device Type", "Device")),
    }
    return model.MEMORY_ALLOCS.frame(_present(cols))


def _static_frame(path: Path) -> Cells:
    return _read(path, required=STATIC_OP_MEM_REQUIRED)


def read_static_op_mem(path: Path, rank: int) -> pd.DataFrame:
    """static_op_mem.csv -> model.MEMORY_ALLOCS rows of kind "static" (graph-mode static memory).

    The TOTAL rows (one per graph) are not ops and are dropped; see read_static_op_mem_totals.
    device is the file's Device_id as written ("host" in the corpus).
    """
    df = _static_frame(path)
    name = _strs(df, ("Op Name",))
    assert name is not None
    df = df.take(~_is(name, STATIC_OP_MEM_TOTAL))
    n = len(df)
    cols: dict[str, Column | None] = {
        "rank": _rank(n, rank),
        "name": _strs(df, ("Op Name",)),
        "kind": _const(n, "static"),
        "size_kb": _floats(df, path, ("Size(KB)",)),
        "device": _strs(df, ("Device_id", "Device")),
    }
    return model.MEMORY_ALLOCS.frame(_present(cols))


def read_static_op_mem_totals(path: Path) -> dict[int | None, float]:
    """The TOTAL row of each graph in static_op_mem.csv: graph id -> size (KB).

    This is the graph's static memory as the compiler laid it out. It is NOT the sum of the op rows
    (blocks are reused and aligned): on the corpus graph 0 sums to 19784.7 KB but its TOTAL is 17210.5.
    """
    df = _static_frame(path)
    name = pc.utf8_trim_whitespace(df.arrow("Op Name"))
    tot = df.take(_is(name, STATIC_OP_MEM_TOTAL))
    sizes = tot.floats("Size(KB)", path)
    graphs = tot.ints("Graph ID", path) if "Graph ID" in tot else [pd.NA] * len(tot)
    return {(None if pd.isna(g) else int(g)): float(s) for g, s in zip(graphs, sizes)}


# --------------------------------------------------------------------------------------------
# dataset.csv (MindSpore) -> plain frame
# --------------------------------------------------------------------------------------------


def read_dataset_csv(path: Path, rank: int) -> pd.DataFrame:
    """dataset.csv (MindSpore: per dataset event and stage, occurrences and average time) -> a plain
    frame with columns rank, operation, stage, occurrences, avg_us, custom_info.

    No model table fits it yet. Written from MindSpore 2.10's MsDatasetViewer (header
    ``Avg. time (us)``) and the docs (``Avg. time(us)``); both spellings are accepted.
    """
    df = _read(path, required=DATASET_REQUIRED, any_of=(DATASET_AVG,))
    n = len(df)
    cols = {
        "rank": _rank(n, rank),
        "operation": _strs(df, ("Operation",)),
        "stage": _strs(df, ("Stage",)),
        "occurrences": _ints(df, path, ("Occurrences",)),
        "avg_us": _floats(df, path, DATASET_AVG),
        "custom_info": _strs(df, ("Custom Info",)),
    }
    out = pd.DataFrame({k: None if v is None else pd.Series(v) for k, v in cols.items()})
    return out[list(DATASET_COLUMNS)]


# --------------------------------------------------------------------------------------------
# minddata_pipeline_raw_<id>.csv + minddata_pipeline_summary_<id>.json -> DATA_PIPELINE
# --------------------------------------------------------------------------------------------


def _op_type(raw: Any) -> Any:
    """'BatchOp' -> 'Batch' (the summary's and the model's spelling); 'Batch' stays."""
    if raw is None or (isinstance(raw, float) and math.isnan(raw)) or raw is pd.NA:
        return None
    s = str(raw).strip()
    return s[:-2] if s.endswith("Op") and len(s) > 2 else s


def _queue_list(cell: Any, path: Path, op_id: Any) -> list[float] | None:
    if cell is None or cell is pd.NA or (isinstance(cell, float) and math.isnan(cell)):
        return None
    text = str(cell).strip()
    if not text:
        return None
    try:
        v = json.loads(text)
    except (ValueError, RecursionError):
        raise ParseError(path, f"op {op_id}: output_queue_size is not a list of numbers ({text[:40]!r})") from None
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) for x in v):
        raise ParseError(path, f"op {op_id}: output_queue_size is not a list of numbers ({text[:40]!r})")
    return [float(x) for x in v]


def _read_minddata_raw(path: Path) -> dict[int, dict[str, Any]]:
    df = _read(path, required=MINDDATA_RAW_REQUIRED)
    op_id = pd.Series(df.ints("op_id", path))
    if op_id.isna().any():
        raise ParseError(path, f"row {int(op_id.isna().to_numpy().argmax()) + 2} has no op_id")
    num = {
        k: None if v is None else pd.Series(v)
        for k, v in {
            "num_workers": _ints(df, path, ("num_workers",)),
            "queue_capacity": _floats(df, path, ("output_queue_length",)),
            "queue_avg_size": _floats(df, path, ("output_queue_average_size",)),
            "queue_usage": _floats(df, path, ("output_queue_usage_rate",)),
            "parent_id": _ints(df, path, ("parent_id",)),
        }.items()
    }
    sizes = pd.Series(df["output_queue_size"] if "output_queue_size" in df else [None] * len(df))
    op_types = pd.Series(df["op_type"])
    rows: dict[int, dict[str, Any]] = {}
    for i in range(len(df)):
        oid = int(op_id.iloc[i])
        row: dict[str, Any] = {"op_id": oid, "op_type": _op_type(op_types.iloc[i])}
        for k, s in num.items():
            if s is not None and not pd.isna(s.iloc[i]):
                row[k] = s.iloc[i]
        q = _queue_list(sizes.iloc[i], path, oid)
        if q:
            row["queue_empty_share"] = sum(1 for x in q if x == 0) / len(q)
        rows[oid] = row
    return rows


def _summary_value(v: Any) -> Any:
    """-1 marks 'no data' in the summary; None / NaN too."""
    if v is None or isinstance(v, (list, dict, str)):
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    return None if v == -1 else v


def _read_minddata_summary(path: Path) -> tuple[dict[int, dict[str, Any]], float | None]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    if not text.strip():
        raise ParseError(path, "the file is empty")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ParseError(path, f"not valid JSON (truncated?): {e}") from None
    if not isinstance(data, dict):
        raise ParseError(path, "expected a JSON object of per-op lists, found " + type(data).__name__)
    op_ids = data.get("op_ids")
    if not isinstance(op_ids, list) or not all(isinstance(x, int) for x in op_ids):
        raise ParseError(path, "missing key 'op_ids' (a list of op ids)")
    n = len(op_ids)

    def per_op(key: str) -> list[Any] | None:
        v = data.get(key)
        # a list of another length does not line up with op_ids (MindSpore warns and keeps it): skip
        return v if isinstance(v, list) and len(v) == n else None

    rows: dict[int, dict[str, Any]] = {oid: {"op_id": oid} for oid in op_ids}
    names = per_op("op_names")
    workers = per_op("num_workers")
    avg = per_op("queue_average_size")
    util = per_op("queue_utilization_pct")
    empty = per_op("queue_empty_freq_pct")
    cpu = per_op("avg_cpu_pct")
    parent = per_op("parent_id")
    for i, oid in enumerate(op_ids):
        r = rows[oid]
        if names is not None and isinstance(names[i], str):
            r["op_type"] = _op_type(names[i])
        for key, vals, scale in (
            ("num_workers", workers, None),
            ("queue_avg_size", avg, None),
            ("queue_usage", util, 100.0),
            ("queue_empty_share", empty, 100.0),
            ("avg_cpu_pct", cpu, None),
            ("parent_id", parent, None),
        ):
            if vals is None:
                continue
            v = _summary_value(vals[i])
            if v is not None:
                r[key] = v / scale if scale else v
    per_batch = data.get("per_batch_time")
    pb = _summary_value(per_batch[0]) if isinstance(per_batch, list) and per_batch else None
    return rows, (float(pb) * units.US_PER_MS if pb is not None else None)


def read_minddata_pipeline(raw_csv: Path | None, summary_json: Path | None, rank: int) -> pd.DataFrame:
    """minddata_pipeline_raw_<id>.csv and/or minddata_pipeline_summary_<id>.json -> model.DATA_PIPELINE.

    Rows are the pipeline ops, by op_id; the raw CSV's values win and the summary fills what the CSV
    lacks (avg_cpu_pct only exists there). The summary's -1 means "no data": null. op types lose
    their "Op" suffix (BatchOp -> Batch). queue_empty_share is the share of zero samples in
    output_queue_size (raw) or queue_empty_freq_pct / 100 (summary).

    per_batch_time in the summary is in milliseconds (MindSpore's MindData viewer documents it so,
    and the iterator timestamps it is computed from are ms); it is pipeline-wide, so it goes on one
    extra row with op_id -1 (the consumer: device queue or dataset iterator) as per_batch_us.
    """
    rows: dict[int, dict[str, Any]] = {}
    per_batch_us: float | None = None
    if raw_csv is not None:
        rows = _read_minddata_raw(raw_csv)
    if summary_json is not None:
        srows, per_batch_us = _read_minddata_summary(summary_json)
        for oid, srow in srows.items():
            target = rows.setdefault(oid, {"op_id": oid})
            for k, v in srow.items():
                if target.get(k) is None:
                    target[k] = v
    ordered = [rows[k] for k in sorted(rows)]
    if per_batch_us is not None:
        consumer = rows.get(MINDDATA_CONSUMER_OP_ID)
        if consumer is None:
            consumer = {"op_id": MINDDATA_CONSUMER_OP_ID, "op_type": MINDDATA_CONSUMER_TYPE}
            ordered.append(consumer)
        consumer["per_batch_us"] = per_batch_us
    if not ordered:
        return model.DATA_PIPELINE.empty()
    columns = [c for c in model.DATA_PIPELINE.columns if c != "rank"]
    data: dict[str, Any] = {
        c: [r.get(c) for r in ordered] for c in columns if any(r.get(c) is not None for r in ordered)
    }
    frame: dict[str, Column] = {"rank": _rank(len(ordered), rank)}
    for c, vals in data.items():
        dtype = model.DATA_PIPELINE.columns[c]
        clean = [pd.NA if v is None else v for v in vals]
        if dtype == model.FLOAT:
            frame[c] = pd.Series([float("nan") if v is pd.NA else float(v) for v in clean], dtype=model.FLOAT)
        elif dtype == model.INT:
            frame[c] = pd.Series([v if v is pd.NA else int(v) for v in clean], dtype=model.INT)
        else:
            frame[c] = pd.Series(clean, dtype=dtype)
    return model.DATA_PIPELINE.frame(frame)
