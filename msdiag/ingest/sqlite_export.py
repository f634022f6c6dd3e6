"""The SQLite export of the Ascend profilers (``export_type`` db), read straight with SQL.

A rank folder written with ``export_type=db`` holds, in ``ASCEND_PROFILER_OUTPUT/``, a profiler
database and an analysis database and often no text file at all:

======================  ===================================  ==============================
writer                  profiler database                    analysis database
======================  ===================================  ==============================
torch_npu               ``ascend_pytorch_profiler_N.db``     ``analysis.db``
MindSpore 2.5+          ``ascend_mindspore_profiler[_N].db`` ``communication_analyzer.db``
======================  ===================================  ==============================

The MindSpore database is CANN's msprof export moved and renamed, with the same tables; no real
MindSpore DB sample exists in the corpus, so that path is read with the torch_npu schema and is
untested on real files. Everything lands in the same canonical tables as the text formats
(:mod:`msdiag.ingest.ascend_csv`, :mod:`msdiag.ingest.trace_view`, :mod:`msdiag.ingest.communication`).

Units: the profiler database stores times in ns (epoch), sizes in bytes, bandwidths in B/s;
names are integer ids into ``STRING_IDS``. ns become us with integer arithmetic (durations are
``end - start`` in int64, then / 1000; absolute times split into whole us + remainder before the
one float rounding), since epoch ns (~1.7e18) exceed float64's 2^53. The analysis database
stores step ids as text (``'50'`` in StepTraceTime, ``'step50'`` in CommAnalyzer*), step times in
us and, like communication.json, communication times in **ms** (checked: CommAnalyzerTime's
elapse_time 88.751 for an op whose COMMUNICATION_OP span is 88 750 993 ns).

Tables and columns read (only these are selected):

profiler database
- ``TASK``: startNs, endNs, globalTaskId, streamId, connectionId (device tasks)
- ``COMPUTE_TASK_INFO``: globalTaskId, name, opType, taskType (the accelerator core: AI_CORE,
  AI_VECTOR_CORE, MIX_AIV, ...), blockDim (``block_dim`` in older msprof), inputShapes,
  inputDataTypes, inputFormats, outputShapes, outputDataTypes, waitNs -> kernels (kind compute)
- ``COMMUNICATION_OP``: opName, opType, groupName, startNs, endNs, connectionId, waitNs -> kernels
  (core HCCL, kind communication) and the timeline's ``hccl`` lane
- ``TASK_PMU_INFO``: globalTaskId, name, value: aic_total_time (ns) -> aicore_time_us,
  aiv_total_time (ns) -> aiv_time_us, the PipeUtilization ratios (aic_mac / scalar / mte1 / mte2 /
  fixpipe, aiv_vec / scalar / mte2 / mte3), aic/aiv_cube_fops -> cube_fops,
  aic/aiv_vector_fops -> vector_fops
- ``STEP_TIME``: id, startNs, endNs -> timeline ``step`` lane (ProfilerStep#id), and each kernel's
  step: the step whose range holds the kernel's host launch (``CANN_API.startNs`` with the task's
  connectionId), else its device start
- ``OVERLAP_ANALYSIS``: startNs, endNs, type (0 Computing, 1 Communication, 2 Communication(Not
  Overlapped), 3 Free: the counts match trace_view.json's Overlap Analysis threads) -> ``overlap`` lane
- ``PYTORCH_API`` (startNs/endNs stored as TEXT), ``MSTX_EVENTS`` (ranges): startNs, endNs,
  globalTid, name/message -> ``host`` lane "Python/Thread <tid>" / "MSTX/Thread <tid>"
  (ProfilerStep#N names go to the step lane when STEP_TIME is absent)
- ``CANN_API``: startNs, endNs, type, globalTid, name, connectionId -> ``host`` lane
  "CANN/Thread <tid>", named "<level>@<api>" as in trace_view.json (AscendCL@, Node@, Hccl@)
- ``ENUM_API_TYPE``: id, name (CANN_API levels); ``ENUM_MODULE``: id, name (NPU_MODULE_MEM)
- ``MEMORY_RECORD``: component, timestamp, totalAllocated, totalReserved, totalActive, deviceId ->
  memory (source memory_record, MB = 2^20 bytes)
- ``NPU_MEM``: type (app/device), ddr, hbm, timestampNs, deviceId -> memory component APP (as
  torch_npu's memory_record.csv) and counters "NPU MEM" (KB)
- ``NPU_MODULE_MEM``: moduleId, timestampNs, totalReserved, deviceId -> memory (npu_module_mem)
- ``OP_MEMORY``: name, size, allocationTime, releaseTime, duration, deviceId -> memory_allocs
- ``AICORE_FREQ`` (freq MHz), ``HBM`` (bandwidth B/s, hbmId, type read/write), ``LLC`` (llcId,
  hitRate %, throughput B/s, mode): -> counters named as trace_view.json names them
- ``STRING_IDS``: id, value; ``RANK_DEVICE_MAP``: rankId, deviceId; ``META_DATA``: name, value;
  ``HOST_INFO``: hostName; ``NPU_INFO``: name; ``SESSION_TIME_INFO``: startTimeNs, endTimeNs -> meta

analysis database
- ``StepTraceTime``: step, computing, communication_not_overlapped, overlapped, communication,
  free, stage, bubble, preparing -> ``profiler_steps``
- ``CommAnalyzerTime``: hccl_op_name, group_name, start_timestamp (us), elapse/transit/wait/
  synchronization/idle_time (ms), step, type -> comm_ops
- ``CommAnalyzerBandwidth``: hccl_op_name, group_name, transport_type, transit_size (MB),
  transit_time (ms), large_packet_ratio, count (one row per packet size), step -> comm_transport
- ``CommAnalyzerMatrix``: hccl_op_name (``<optype>-<variant>``), op_name, group_name, src_rank,
  dst_rank, transport_type, transit_size, transit_time (ms), step, type -> comm_links

Not read: NPU_OP_MEM, ACC_PMU, SOC_BANDWIDTH_LEVEL, COMMUNICATION_TASK_INFO, CONNECTION_IDS,
PYTORCH_CALLCHAINS, and every TASK row that is neither a compute task nor a communication op
(kernel_details.csv leaves them out too). op_stats (op_statistic.csv) has no DB counterpart.

Files are never modified: a database is opened read-only and immutable (``mode=ro&immutable=1``),
which creates no -wal / -shm / -journal file (plain ``mode=ro`` does create them beside a WAL
database). When the profiler left a non-empty -wal or -journal beside it, the database and that
file are copied to a temporary folder and opened there, so their content is read without
touching the user's folder. A truncated or corrupt database raises :class:`ParseError`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from msdiag import model, units
from msdiag.errors import ParseError
from msdiag.ingest import metadata
from msdiag.ingest._csv import NA_VALUES
from msdiag.ingest._sqlite import Db, clean_strings
from msdiag.ingest.ascend_csv import COMMUNICATION_CORE, type_from_kernel_name
from msdiag.ingest.communication import op_type_of
from msdiag.ingest.engine import Ctx, Database, Format, Item, RankDir, Read, Src, Then, listing, read_rank, why_no_memory
from msdiag.ingest.folders import ascend_rank, is_cpu_rank, is_rank_folder
from msdiag.model import RankData

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
PROFILER_DB_RE = re.compile(r"^ascend_(?:pytorch|mindspore)_profiler(?:_(\d+))?\.db$")
ANALYSIS_DB_NAMES = ("analysis.db", "communication_analyzer.db")  # torch_npu, MindSpore
# A rank folder holding any of these is read from its text files (the loader's core sources).
TEXT_CORE_FILES = ("kernel_details.csv", "trace_view.json", "step_trace_time.csv")

STEP_MARKER = "ProfilerStep#"
STEP_SOURCE = "ProfilerStep#N markers"  # = trace_view.STEP_SOURCE, what the text path records

# OVERLAP_ANALYSIS.type -> the Overlap Analysis lane names of trace_view.json
OVERLAP_TYPES = {0: "Computing", 1: "Communication", 2: "Communication(Not Overlapped)", 3: "Free"}
# ENUM_API_TYPE names -> the level prefix trace_view.json gives CANN API events
CANN_LEVELS = {
    "acl": "AscendCL",
    "node": "Node",
    "hccl": "Hccl",
    "communication": "Hccl",
    "runtime": "Runtime",
    "model": "Model",
}
_TID_MASK = 0xFFFFFFFF  # globalTid = pid << 32 | tid

# TASK_PMU_INFO metric name -> (kernels column, scale); *_time values are ns
PMU_COLUMNS: dict[str, tuple[str, float]] = {
    "aic_total_time": ("aicore_time_us", 1.0 / units.NS_PER_US),
    "aic_mac_ratio": ("aic_mac_ratio", 1.0),
    "aiv_vec_ratio": ("aiv_vec_ratio", 1.0),
    "aic_mte2_ratio": ("aic_mte2_ratio", 1.0),
    "aic_scalar_ratio": ("aic_scalar_ratio", 1.0),
    "aic_mte1_ratio": ("aic_mte1_ratio", 1.0),
    "aic_fixpipe_ratio": ("aic_fixpipe_ratio", 1.0),
    "aiv_total_time": ("aiv_time_us", 1.0 / units.NS_PER_US),
    "aiv_scalar_ratio": ("aiv_scalar_ratio", 1.0),
    "aiv_mte2_ratio": ("aiv_mte2_ratio", 1.0),
    "aiv_mte3_ratio": ("aiv_mte3_ratio", 1.0),
    "aic_cube_fops": ("cube_fops", 1.0),
    "aiv_cube_fops": ("cube_fops", 1.0),
    "aic_vector_fops": ("vector_fops", 1.0),
    "aiv_vector_fops": ("vector_fops", 1.0),
}

STEP_TRACE_COLUMNS: dict[str, str] = {
    "computing_us": "computing",
    "communication_exposed_us": "communication_not_overlapped",
    "overlapped_us": "overlapped",
    "communication_us": "communication",
    "free_us": "free",
    "stage_us": "stage",
    "bubble_us": "bubble",
    "preparing_us": "preparing",
}
_STEP_TEXT = re.compile(r"\s*(?:step)?\s*(\d+)\s*", re.IGNORECASE)
_MATRIX_KEY = re.compile(r"(?P<optype>.+?)-(?P<variant>top\d+|middle|bottom\d+|total)")
TOTAL_OP = "Total Op Info"


# --------------------------------------------------------------------------------------------
# finding the databases
# --------------------------------------------------------------------------------------------


def is_db_rank(rank_dir: Path) -> bool:
    """True when the rank folder is to be read from its SQLite export: it holds a profiler
    database in ASCEND_PROFILER_OUTPUT/ and none of the text core files (kernel_details.csv,
    trace_view.json, step_trace_time.csv). A folder exported as both text and db is read from text.
    """
    out = Path(rank_dir) / OUTPUT_DIR
    names = set(listing(out))
    if not names or any(n in names for n in TEXT_CORE_FILES):
        return False
    return any(PROFILER_DB_RE.match(n) for n in names)


# --------------------------------------------------------------------------------------------
# value helpers
# --------------------------------------------------------------------------------------------


def _int_array(values: Sequence[Any] | pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, null mask), exact for epoch ns; integers stored as TEXT are parsed too."""
    s = pd.Series(list(values), dtype=object)
    mask = s.isna().to_numpy(bool)
    filled = s.where(~mask, 0).tolist()
    try:
        out = np.array(filled, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        out = np.array([int(str(v).strip()) for v in filled], dtype=np.int64)
    return out, mask


def ns_to_us(values: Sequence[Any] | pd.Series) -> pd.Series:
    """Epoch ns -> us (float64): whole us and the ns remainder are split in int64 before one rounding."""
    v, mask = _int_array(values)
    us = (v // units.NS_PER_US).astype(np.float64) + (v % units.NS_PER_US).astype(np.float64) / units.NS_PER_US
    us[mask] = np.nan
    return pd.Series(us, dtype=model.FLOAT)


def span_us(start: Sequence[Any] | pd.Series, end: Sequence[Any] | pd.Series) -> pd.Series:
    """end - start in int64 ns, then us."""
    s, ms = _int_array(start)
    e, me = _int_array(end)
    d = (e - s).astype(np.float64) / units.NS_PER_US
    d[ms | me] = np.nan
    return pd.Series(d, dtype=model.FLOAT)


def _floats(values: Sequence[Any] | pd.Series, scale: float = 1.0) -> pd.Series:
    return pd.Series(pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce"), dtype=model.FLOAT) * scale


def _nullable_ints(values: Sequence[Any] | pd.Series) -> pd.Series:
    v, mask = _int_array(values)
    return pd.Series(pd.arrays.IntegerArray(v, mask), dtype=model.INT)


def _shapes(s: pd.Series) -> pd.Series:
    """'"32,3,224,224"' -> '32,3,224,224' (the DB stores shapes quoted, as the CSV does)."""
    return s.str.strip('"').str.strip()


def _columns(rows: list[tuple[Any, ...]], n: int) -> list[tuple[Any, ...]]:
    """Query rows -> n column tuples (n empty tuples when there is no row)."""
    return list(zip(*rows)) if rows else [() for _ in range(n)]


def _const(n: int, value: Any, dtype: str = model.STR) -> pd.Series:
    return pd.Series([value] * n, dtype=dtype)


def _step_of_text(values: Sequence[Any]) -> tuple[list[int | None], list[bool]]:
    """'step50' / '50' -> 50; blank -> None (kept); other text (summary rows) -> dropped."""
    steps: list[int | None] = []
    keep: list[bool] = []
    for v in values:
        if v is None or (isinstance(v, str) and v.strip() in NA_VALUES):
            steps.append(None)
            keep.append(True)
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            steps.append(int(v))
            keep.append(True)
            continue
        m = _STEP_TEXT.fullmatch(str(v))
        steps.append(int(m.group(1)) if m else None)
        keep.append(bool(m) or str(v).strip().lower() == "step")
    return steps, keep


def _device(values: Sequence[Any]) -> pd.Series:
    return pd.Series([None if v is None else f"NPU:{int(v)}" for v in values], dtype=model.STR)


def _tid(values: Sequence[Any]) -> list[int | None]:
    return [None if v is None else int(v) & _TID_MASK for v in values]


# --------------------------------------------------------------------------------------------
# readers: one per canonical table (each returns the rows it added)
# --------------------------------------------------------------------------------------------


@dataclass
class Steps:
    """Step ranges in ns (STEP_TIME, or ProfilerStep#N host ranges)."""

    ids: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def of(self, t: np.ndarray, missing: np.ndarray) -> pd.Series:
        """Step id of each time (ns); null outside every step or where the time is missing."""
        out = np.zeros(len(t), dtype=np.int64)
        mask = np.ones(len(t), dtype=bool)
        if len(self.ids):
            order = np.argsort(self.start, kind="stable")
            st, en, ids = self.start[order], self.end[order], self.ids[order]
            idx = np.searchsorted(st, t, side="right") - 1
            ok = (idx >= 0) & ~missing
            idx_c = np.clip(idx, 0, len(st) - 1)
            ok &= t <= en[idx_c]
            out[ok] = ids[idx_c[ok]]
            mask = ~ok
        return pd.Series(pd.arrays.IntegerArray(out, mask), dtype=model.INT)


def read_step_time(db: Db) -> Steps:
    db.require("STEP_TIME", "id", "startNs", "endNs")
    rows = db.query("SELECT id, startNs, endNs FROM STEP_TIME WHERE id IS NOT NULL AND startNs IS NOT NULL AND endNs IS NOT NULL")
    return Steps(
        np.array([int(r[0]) for r in rows], dtype=np.int64),
        np.array([int(r[1]) for r in rows], dtype=np.int64),
        np.array([int(r[2]) for r in rows], dtype=np.int64),
    )


def _launch_times(db: Db) -> dict[int, int]:
    """connectionId -> host launch time (ns) from CANN_API."""
    if not db.has("CANN_API", "connectionId", "startNs"):
        return {}
    rows = db.query(
        "SELECT connectionId, MIN(startNs) FROM CANN_API WHERE connectionId IS NOT NULL GROUP BY connectionId"
    )
    return {int(c): int(t) for c, t in rows if t is not None}


def _steps_for(start_ns: Sequence[Any], conn: Sequence[Any], launch: dict[int, int], steps: Steps) -> pd.Series:
    """A task's step: the step holding its host launch (by connectionId), else its device start."""
    t, miss = _int_array(start_ns)
    for i, c in enumerate(conn):
        if c is not None:
            lt = launch.get(int(c))
            if lt is not None:
                t[i] = lt
    return steps.of(t, miss)


def read_compute_tasks(db: Db, rank: int, steps: Steps, launch: dict[int, int]) -> pd.DataFrame:
    """COMPUTE_TASK_INFO joined with TASK -> model.KERNELS rows (kind compute, or communication for hcom types)."""
    db.require("TASK", "startNs", "endNs", "globalTaskId")
    db.require("COMPUTE_TASK_INFO", "globalTaskId", "name")
    c = "COMPUTE_TASK_INFO"

    def pick(*alts: str) -> str:
        col = db.col(c, *alts)
        return f"c.{col}" if col else "NULL"

    stream = "t.streamId" if db.has("TASK", "streamId") else "NULL"
    conn = "t.connectionId" if db.has("TASK", "connectionId") else "NULL"
    sql = (
        f"SELECT t.startNs, t.endNs, {stream}, {conn}, c.name, {pick('opType')}, {pick('taskType')}, "
        f"{pick('blockDim', 'block_dim', 'blockNum')}, {pick('inputShapes')}, {pick('inputDataTypes')}, "
        f"{pick('inputFormats')}, {pick('outputShapes')}, {pick('outputDataTypes')}, {pick('waitNs')}, c.globalTaskId "
        "FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId ORDER BY t.startNs, c.globalTaskId"
    )
    rows = db.query(sql)
    cols = _columns(rows, 15)
    n = len(rows)
    name = db.names(cols[4])
    typ = db.names(cols[5])
    frame: dict[str, pd.Series] = {
        "rank": _const(n, rank, model.INT),
        "step": _steps_for(cols[0], cols[3], launch, steps),
        "stream": _nullable_ints(cols[2]),
        "name": name,
        "type": typ.fillna(type_from_kernel_name(name)),
        "core": db.names(cols[6]),
        "start_us": ns_to_us(cols[0]),
        "dur_us": span_us(cols[0], cols[1]),
        "wait_us": _floats(cols[13], 1.0 / units.NS_PER_US),
        "block_dim": _nullable_ints(cols[7]),
        "input_shapes": _shapes(db.names(cols[8])),
        "input_dtypes": db.names(cols[9]),
        "input_formats": db.names(cols[10]),
        "output_shapes": _shapes(db.names(cols[11])),
        "output_dtypes": db.names(cols[12]),
    }
    pmu = _read_pmu(db, list(cols[14]))
    frame.update(pmu)
    comm = (
        frame["core"].fillna("").eq(COMMUNICATION_CORE)
        | frame["type"].fillna("").str.lower().str.startswith("hcom")
        | name.fillna("").str.lower().str.startswith("hcom")
    )
    frame["kind"] = pd.Series("compute", index=range(n), dtype=model.STR).mask(comm.to_numpy(bool), "communication")
    return model.KERNELS.frame(frame)


def _read_pmu(db: Db, task_ids: list[Any]) -> dict[str, pd.Series]:
    """TASK_PMU_INFO metrics of the given tasks, as kernels columns (absent metrics are left out)."""
    if not task_ids or not db.has("TASK_PMU_INFO", "globalTaskId", "name", "value"):
        return {}
    ids = db.ids_of(list(PMU_COLUMNS))
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    rows = db.query(f"SELECT globalTaskId, name, value FROM TASK_PMU_INFO WHERE name IN ({marks})", list(ids))
    if not rows:
        return {}
    df = pd.DataFrame.from_records(rows, columns=["task", "metric", "value"])
    df["metric"] = df["metric"].map(ids)
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    wide = df.pivot_table(index="task", columns="metric", values="value", aggfunc="first")
    wide = wide.reindex(pd.Index(task_ids, dtype=object))
    out: dict[str, pd.Series] = {}
    for metric, (canon, scale) in PMU_COLUMNS.items():
        if metric not in wide.columns:
            continue
        s = pd.Series(wide[metric].to_numpy(dtype=float) * scale, dtype=model.FLOAT)
        if canon in out:  # aic_ + aiv_ parts of one kernel's FLOPs add up
            out[canon] = pd.concat([out[canon], s], axis=1).sum(axis=1, min_count=1)
        else:
            out[canon] = s
    return out


def read_communication_ops(db: Db, rank: int, steps: Steps, launch: dict[int, int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """COMMUNICATION_OP -> (KERNELS rows with core HCCL and kind communication, TIMELINE hccl lane rows)."""
    t = "COMMUNICATION_OP"
    db.require(t, "opName", "startNs", "endNs")

    def pick(*alts: str) -> str:
        return db.col(t, *alts) or "NULL"

    rows = db.query(
        f"SELECT opName, startNs, endNs, {pick('connectionId')}, {pick('groupName')}, {pick('opType')}, "
        f"{pick('waitNs')} FROM COMMUNICATION_OP ORDER BY startNs"
    )
    cols = _columns(rows, 7)
    n = len(rows)
    name = db.names(cols[0])
    typ = db.names(cols[5])
    start = ns_to_us(cols[1])
    dur = span_us(cols[1], cols[2])
    kernels = model.KERNELS.frame(
        {
            "rank": _const(n, rank, model.INT),
            "step": _steps_for(cols[1], cols[3], launch, steps),
            "name": name,
            "type": typ.fillna(type_from_kernel_name(name)),
            "core": _const(n, COMMUNICATION_CORE),
            "kind": _const(n, "communication"),
            "start_us": start,
            "dur_us": dur,
            "wait_us": _floats(cols[6], 1.0 / units.NS_PER_US),
        }
    )
    groups = db.names(cols[4])
    hccl = model.TIMELINE.frame(
        {
            "rank": _const(n, rank, model.INT),
            "lane": _const(n, "hccl"),
            "track": pd.Series([f"Group {g} Communication" if isinstance(g, str) else "Group Communication" for g in groups], dtype=model.STR),
            "name": name,
            "start_us": start,
            "dur_us": dur,
        }
    )
    return kernels, hccl


def _timeline(rank: int, lane: str, track: Sequence[Any], name: Sequence[Any], start: Sequence[Any], end: Sequence[Any]) -> pd.DataFrame:
    n = len(name)
    return model.TIMELINE.frame(
        {
            "rank": _const(n, rank, model.INT),
            "lane": _const(n, lane),
            "track": pd.Series(list(track), dtype=model.STR),
            "name": pd.Series(list(name), dtype=model.STR),
            "start_us": ns_to_us(start),
            "dur_us": span_us(start, end),
        }
    )


def step_timeline(rank: int, steps: Steps, track: str) -> pd.DataFrame:
    order = np.argsort(steps.start, kind="stable")
    return _timeline(
        rank,
        "step",
        [track] * len(order),
        [f"{STEP_MARKER}{int(i)}" for i in steps.ids[order]],
        [int(x) for x in steps.start[order]],
        [int(x) for x in steps.end[order]],
    )


def read_overlap(db: Db, rank: int) -> pd.DataFrame:
    db.require("OVERLAP_ANALYSIS", "startNs", "endNs", "type")
    rows = db.query("SELECT type, startNs, endNs FROM OVERLAP_ANALYSIS ORDER BY type, startNs")
    rows = [r for r in rows if r[0] is not None and int(r[0]) in OVERLAP_TYPES]
    names = [OVERLAP_TYPES[int(r[0])] for r in rows]
    return _timeline(rank, "overlap", names, names, [r[1] for r in rows], [r[2] for r in rows])


def read_host_ranges(db: Db, rank: int, table: str) -> tuple[pd.DataFrame, Steps]:
    """PYTORCH_API or MSTX_EVENTS -> host lane rows, and the ProfilerStep#N ranges among them."""
    if table == "PYTORCH_API":
        db.require(table, "startNs", "endNs", "globalTid", "name")
        name_col, label = "name", "Python"
    else:
        db.require(table, "startNs", "endNs", "globalTid", "message")
        name_col, label = "message", "MSTX"
    rows = db.query(
        f"SELECT CAST(startNs AS INTEGER), CAST(endNs AS INTEGER), globalTid, {name_col} FROM {table} "
        "WHERE startNs IS NOT NULL AND endNs IS NOT NULL ORDER BY CAST(startNs AS INTEGER)"
    )
    names = db.names([r[3] for r in rows]).astype(object)
    tids = _tid([r[2] for r in rows])
    is_step = np.array([isinstance(x, str) and x.startswith(STEP_MARKER) for x in names], dtype=bool)
    ids, st, en = [], [], []
    for i in np.flatnonzero(is_step):
        try:
            ids.append(int(str(names[i])[len(STEP_MARKER):]))
        except ValueError:
            continue
        st.append(int(rows[i][0]))
        en.append(int(rows[i][1]))
    keep = ~is_step
    host = _timeline(
        rank,
        "host",
        [f"{label}/Thread {t}" for t, k in zip(tids, keep) if k],
        [x if isinstance(x, str) else None for x, k in zip(names, keep) if k],
        [r[0] for r, k in zip(rows, keep) if k],
        [r[1] for r, k in zip(rows, keep) if k],
    )
    return host, Steps(np.array(ids, dtype=np.int64), np.array(st, dtype=np.int64), np.array(en, dtype=np.int64))


def read_cann_api(db: Db, rank: int) -> pd.DataFrame:
    db.require("CANN_API", "startNs", "endNs", "globalTid", "name")
    levels: dict[int, str] = {}
    if db.has("ENUM_API_TYPE", "id", "name"):
        for i, nm in db.query("SELECT id, name FROM ENUM_API_TYPE"):
            levels[int(i)] = CANN_LEVELS.get(str(nm).lower(), str(nm).capitalize())
    typ = db.col("CANN_API", "type") or "NULL"
    rows = db.query(f"SELECT startNs, endNs, globalTid, name, {typ} FROM CANN_API ORDER BY startNs")
    api = db.names([r[3] for r in rows]).astype(object)
    names = []
    for r, a in zip(rows, api):
        lvl = levels.get(int(r[4])) if r[4] is not None else None
        names.append(f"{lvl}@{a}" if lvl and isinstance(a, str) else (a if isinstance(a, str) else None))
    tracks = [f"CANN/Thread {t}" for t in _tid([r[2] for r in rows])]
    return _timeline(rank, "host", tracks, names, [r[0] for r in rows], [r[1] for r in rows])


def read_memory_record(db: Db, rank: int) -> pd.DataFrame:
    t = "MEMORY_RECORD"
    db.require(t, "component", "timestamp", "totalAllocated", "totalReserved")
    active = db.col(t, "totalActive") or "NULL"
    dev = db.col(t, "deviceId") or "NULL"
    rows = db.query(f"SELECT component, timestamp, totalAllocated, totalReserved, {active}, {dev} FROM {t} ORDER BY timestamp")
    cols = _columns(rows, 6)
    n = len(rows)
    return model.MEMORY.frame(
        {
            "rank": _const(n, rank, model.INT),
            "component": db.names(cols[0]),
            "source": _const(n, "memory_record"),
            "ts_us": ns_to_us(cols[1]),
            # the Ascend memory files' "MB" is MiB: the same figures as memory_record.csv
            "allocated_mb": _floats(cols[2], 1 / units.BYTES_PER_MIB),
            "reserved_mb": _floats(cols[3], 1 / units.BYTES_PER_MIB),
            "active_mb": _floats(cols[4], 1 / units.BYTES_PER_MIB),
            "device": _device(cols[5]),
        }
    )


def read_npu_mem(db: Db, rank: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """NPU_MEM -> (memory rows of component APP, as torch_npu's memory_record.csv; counters 'NPU MEM' in KB)."""
    t = "NPU_MEM"
    db.require(t, "type", "ddr", "hbm", "timestampNs")
    dev = db.col(t, "deviceId") or "NULL"
    rows = db.query(f"SELECT type, ddr, hbm, timestampNs, {dev} FROM {t} ORDER BY timestampNs")
    kinds = db.names([r[0] for r in rows]).astype(object)
    ddr = _floats([r[1] for r in rows])
    hbm = _floats([r[2] for r in rows])
    total = ddr + hbm
    ts = ns_to_us([r[3] for r in rows])
    app = np.array([isinstance(k, str) and k.lower() == "app" for k in kinds], dtype=bool)
    m = int(app.sum())
    memory = model.MEMORY.frame(
        {
            "rank": _const(m, rank, model.INT),
            "component": _const(m, "APP"),
            "source": _const(m, "memory_record"),
            "ts_us": ts[app].reset_index(drop=True),
            "reserved_mb": (total[app] / units.BYTES_PER_MIB).reset_index(drop=True),
            "device": _device([r[4] for r, a in zip(rows, app) if a]),
        }
    )
    recs: list[tuple[str, float, float]] = []
    for k, d, h, tot, when in zip(kinds, ddr, hbm, total, ts):
        label = "APP" if isinstance(k, str) and k.lower() == "app" else ("Device" if isinstance(k, str) else "?")
        recs += [(f"{label}/DDR", when, d), (f"{label}/HBM", when, h), (f"{label}/Memory", when, tot)]
    counters = _counters(rank, "NPU MEM", [r[0] for r in recs], ["KB"] * len(recs), [r[1] for r in recs], [r[2] / units.BYTES_PER_KIB for r in recs])
    return memory, counters


def read_npu_module_mem(db: Db, rank: int) -> pd.DataFrame:
    t = "NPU_MODULE_MEM"
    db.require(t, "moduleId", "timestampNs", "totalReserved")
    dev = db.col(t, "deviceId") or "NULL"
    rows = db.query(f"SELECT moduleId, timestampNs, totalReserved, {dev} FROM {t} ORDER BY moduleId, timestampNs")
    modules: dict[int, str] = {}
    if db.has("ENUM_MODULE", "id", "name"):
        modules = {int(i): str(nm) for i, nm in db.query("SELECT id, name FROM ENUM_MODULE")}
    n = len(rows)
    reserved = _floats([r[2] for r in rows])
    return model.MEMORY.frame(
        {
            "rank": _const(n, rank, model.INT),
            "component": pd.Series([modules.get(int(r[0]), str(r[0])) if r[0] is not None else None for r in rows], dtype=model.STR),
            "source": _const(n, "npu_module_mem"),
            "ts_us": ns_to_us([r[1] for r in rows]),
            "reserved_mb": (reserved.mask(reserved == -1)) / units.BYTES_PER_MIB,  # -1: only releases collected
            "device": _device([r[3] for r in rows]),
        }
    )


def read_op_memory(db: Db, rank: int) -> pd.DataFrame:
    t = "OP_MEMORY"
    db.require(t, "name", "size", "allocationTime")
    rel = db.col(t, "releaseTime") or "NULL"
    dur = db.col(t, "duration") or "NULL"
    dev = db.col(t, "deviceId") or "NULL"
    rows = db.query(f"SELECT name, size, allocationTime, {rel}, {dur}, {dev} FROM {t} ORDER BY allocationTime")
    cols = _columns(rows, 6)
    n = len(rows)
    return model.MEMORY_ALLOCS.frame(
        {
            "rank": _const(n, rank, model.INT),
            "name": db.names(cols[0]),
            "kind": _const(n, "dynamic"),
            "size_kb": _floats(cols[1], 1 / units.BYTES_PER_KIB),
            "alloc_us": ns_to_us(cols[2]),
            "release_us": ns_to_us(cols[3]),
            "dur_us": _floats(cols[4], 1.0 / units.NS_PER_US),
            "device": _device(cols[5]),
        }
    )


def _counters(rank: int, track: str, names: Sequence[str], unit_labels: Sequence[str], ts_us: Sequence[float], values: Sequence[float]) -> pd.DataFrame:
    n = len(names)
    df = pd.DataFrame(
        {
            "rank": _const(n, rank, model.INT),
            "track": _const(n, track),
            "name": pd.Series(list(names), dtype=model.STR),
            "unit": pd.Series(list(unit_labels), dtype=model.STR),
            "ts_us": pd.Series(list(ts_us), dtype=model.FLOAT),
            "value": pd.Series(list(values), dtype=model.FLOAT),
        }
    )
    df = df.sort_values(["name", "ts_us"], kind="stable")
    return model.COUNTERS.frame(df.reset_index(drop=True))


def read_aicore_freq(db: Db, rank: int) -> pd.DataFrame:
    db.require("AICORE_FREQ", "timestampNs", "freq")
    rows = db.query("SELECT timestampNs, freq FROM AICORE_FREQ ORDER BY timestampNs")
    n = len(rows)
    return _counters(rank, "AI Core Freq", ["AI Core Freq"] * n, ["MHz"] * n, ns_to_us([r[0] for r in rows]), _floats([r[1] for r in rows]))


def read_hbm(db: Db, rank: int) -> pd.DataFrame:
    db.require("HBM", "timestampNs", "bandwidth", "hbmId", "type")
    rows = db.query("SELECT timestampNs, bandwidth, hbmId, type FROM HBM ORDER BY timestampNs")
    kinds = [str(k).capitalize() if isinstance(k, str) else "?" for k in db.names([r[3] for r in rows]).astype(object)]
    return _counters(
        rank,
        "HBM",
        [f"HBM {r[2]}/{k}" for r, k in zip(rows, kinds)],
        [f"{k}(MB/s)" for k in kinds],
        ns_to_us([r[0] for r in rows]),
        _floats([r[1] for r in rows], 1 / units.BYTES_PER_MIB),
    )


def read_llc(db: Db, rank: int) -> pd.DataFrame:
    """LLC -> counters as trace_view.json writes them: hit rate as a fraction (the file's 'Hit Rate(%)'
    track holds 0.78 for 78 %), throughput in MB/s."""
    db.require("LLC", "timestampNs", "llcId", "hitRate", "throughput")
    mode = db.col("LLC", "mode") or "NULL"
    rows = db.query(f"SELECT timestampNs, llcId, hitRate, throughput, {mode} FROM LLC ORDER BY timestampNs")
    modes = [str(k).capitalize() if isinstance(k, str) else "Read" for k in db.names([r[4] for r in rows]).astype(object)]
    ts = ns_to_us([r[0] for r in rows])
    hit = _floats([r[2] for r in rows], 0.01)
    thr = _floats([r[3] for r in rows], 1 / units.BYTES_PER_MIB)
    names = [f"LLC {r[1]} {m}/Hit Rate" for r, m in zip(rows, modes)] + [f"LLC {r[1]} {m}/Throughput" for r, m in zip(rows, modes)]
    labels = ["Hit Rate(%)"] * len(rows) + ["Throughput(MB/s)"] * len(rows)
    return _counters(rank, "LLC", names, labels, list(ts) * 2, list(hit) + list(thr))


# ---- analysis database ------------------------------------------------------------------------


def read_step_trace_time(db: Db, rank: int) -> pd.DataFrame:
    """StepTraceTime -> model.STEPS (the profiler's own breakdown), as ascend_csv.read_step_trace_time.

    total_us = computing + communication_not_overlapped + free (the file has no total column).
    """
    t = "StepTraceTime"
    db.require(t, "step", "computing", "communication_not_overlapped", "overlapped", "communication", "free", "stage", "bubble")
    present = {canon: raw for canon, raw in STEP_TRACE_COLUMNS.items() if db.has(t, raw)}
    rows = db.query(f"SELECT step, {', '.join(present.values())} FROM {t}")
    steps, keep = _step_of_text([r[0] for r in rows])
    rows = [r for r, k in zip(rows, keep) if k]
    steps = [s for s, k in zip(steps, keep) if k]
    n = len(rows)
    frame: dict[str, pd.Series] = {"rank": _const(n, rank, model.INT), "step": pd.Series(steps, dtype=model.INT)}
    for i, canon in enumerate(present, start=1):
        frame[canon] = _floats([r[i] for r in rows])
    frame["total_us"] = frame["computing_us"] + frame["communication_exposed_us"] + frame["free_us"]
    frame["source"] = _const(n, f"{db.path.name}:{t}")
    return model.STEPS.frame(frame)


def read_comm_time(db: Db, rank: int) -> pd.DataFrame:
    t = "CommAnalyzerTime"
    db.require(t, "hccl_op_name", "elapse_time", "transit_time", "wait_time")

    def pick(c: str) -> str:
        return db.col(t, c) or "NULL"

    rows = db.query(
        f"SELECT hccl_op_name, {pick('group_name')}, {pick('start_timestamp')}, elapse_time, transit_time, wait_time, "
        f"{pick('synchronization_time')}, {pick('idle_time')}, {pick('step')}, {pick('type')} FROM {t}"
    )
    rows = [r for r in rows if r[0] != TOTAL_OP]
    steps, keep = _step_of_text([r[8] for r in rows])
    rows = [r for r, k in zip(rows, keep) if k]
    steps = [s for s, k in zip(steps, keep) if k]
    n = len(rows)
    cols = _columns(rows, 10)
    elapse = _floats(cols[3], units.US_PER_MS)
    transit = _floats(cols[4], units.US_PER_MS)
    wait = _floats(cols[5], units.US_PER_MS)
    idle = _floats(cols[7], units.US_PER_MS)
    names = [str(x) for x in cols[0]]
    return model.COMM_OPS.frame(
        {
            "rank": _const(n, rank, model.INT),
            "step": pd.Series(steps, dtype=model.INT),
            "category": clean_strings(pd.Series(cols[9], dtype=object)),
            "op_name": pd.Series(names, dtype=model.STR),
            "op_type": pd.Series([op_type_of(x) for x in names], dtype=model.STR),
            "group": clean_strings(pd.Series([None if g is None else str(g) for g in cols[1]], dtype=object)),
            "start_us": _floats(cols[2]),
            "elapse_us": elapse,
            "transit_us": transit,
            "wait_us": wait,
            "sync_us": _floats(cols[6], units.US_PER_MS),
            "idle_us": idle.fillna(elapse - transit - wait),
        }
    )


def read_comm_bandwidth(db: Db, rank: int) -> pd.DataFrame:
    """CommAnalyzerBandwidth -> model.COMM_TRANSPORT: one row per op and transport that moved something.

    The table repeats an op's transport totals on one row per packet size (package_size, count);
    packets is the sum of count, null when there is no size distribution (SDMA).
    """
    t = "CommAnalyzerBandwidth"
    db.require(t, "hccl_op_name", "transport_type", "transit_size", "transit_time")

    def pick(c: str) -> str:
        return db.col(t, c) or "NULL"

    rows = db.query(
        f"SELECT {pick('step')}, hccl_op_name, {pick('group_name')}, transport_type, transit_size, transit_time, "
        f"{pick('large_packet_ratio')}, {pick('count')} FROM {t}"
    )
    out: dict[tuple[Any, ...], list[Any]] = {}
    for r in rows:
        if r[1] == TOTAL_OP:
            continue
        key = (r[0], r[1], None if r[2] is None else str(r[2]), r[3])
        cnt = pd.to_numeric(r[7], errors="coerce")
        if key not in out:
            out[key] = [r[4], r[5], r[6], 0, False]
        if cnt is not None and not pd.isna(cnt) and cnt > 0:
            out[key][3] += int(cnt)
            out[key][4] = True
    recs = []
    steps, keep = _step_of_text([k[0] for k in out])
    for (key, v), step, k in zip(out.items(), steps, keep):
        size = float(pd.to_numeric(v[0], errors="coerce"))
        time_ms = float(pd.to_numeric(v[1], errors="coerce"))
        if not k or not (size > 0 or time_ms > 0):
            continue
        bw = size / time_ms if time_ms > 0 and not math.isnan(size) else math.nan
        lpr = pd.to_numeric(v[2], errors="coerce")
        recs.append((step, key[1], key[2], key[3], size, time_ms * units.US_PER_MS, bw, float(lpr) if lpr is not None else math.nan, v[3] if v[4] else None))
    cols = ["step", "op_name", "group", "transport", "size_mb", "time_us", "bandwidth_gbps", "large_packet_ratio", "packets"]
    if not recs:
        return model.COMM_TRANSPORT.empty()
    df = pd.DataFrame.from_records(recs, columns=cols)
    df.insert(0, "rank", rank)
    df["step"] = df["step"].astype(model.INT)
    df["packets"] = pd.array([None if p is None or (isinstance(p, float) and math.isnan(p)) else int(p) for p in df["packets"]], dtype=model.INT)
    return model.COMM_TRANSPORT.frame(df)


def read_comm_matrix(db: Db, rank: int) -> pd.DataFrame:
    """CommAnalyzerMatrix -> model.COMM_LINKS (as communication.read_communication_matrix)."""
    t = "CommAnalyzerMatrix"
    db.require(t, "hccl_op_name", "src_rank", "dst_rank", "transit_size", "transit_time")

    def pick(c: str) -> str:
        return db.col(t, c) or "NULL"

    rows = db.query(
        f"SELECT {pick('step')}, {pick('type')}, hccl_op_name, {pick('op_name')}, {pick('group_name')}, src_rank, dst_rank, "
        f"{pick('transport_type')}, transit_size, transit_time FROM {t}"
    )
    spelled: dict[str, str] = {}
    for r in rows:
        if isinstance(r[3], str) and r[3].strip():
            full = op_type_of(r[3].strip())
            spelled.setdefault(full.rsplit("_", 1)[-1].lower(), full)
    recs = []
    steps, keep = _step_of_text([r[0] for r in rows])
    for r, step, k in zip(rows, steps, keep):
        if not k or r[2] == TOTAL_OP:
            continue
        m = _MATRIX_KEY.fullmatch(str(r[2]))
        if m:
            raw = m.group("optype")
            op_type, variant = spelled.get(raw.lower(), raw), m.group("variant")
        else:
            op_type, variant = op_type_of(str(r[2])), str(r[2])
        try:
            src, dst = int(r[5]), int(r[6])
        except (TypeError, ValueError):
            raise ParseError(db.path, f"{t}: src_rank/dst_rank {r[5]!r}/{r[6]!r} are not rank numbers") from None
        size = float(pd.to_numeric(r[8], errors="coerce"))
        time_ms = float(pd.to_numeric(r[9], errors="coerce"))
        bw = size / time_ms if time_ms > 0 and not math.isnan(size) else math.nan
        recs.append((step, r[1], op_type, variant, None if r[4] is None else str(r[4]), src, dst, r[7], size, time_ms * units.US_PER_MS, bw))
    if not recs:
        return model.COMM_LINKS.empty()
    cols = ["step", "category", "op_type", "variant", "group", "src", "dst", "transport", "size_mb", "time_us", "bandwidth_gbps"]
    df = pd.DataFrame.from_records(recs, columns=cols)
    df.insert(0, "rank", rank)
    df["step"] = df["step"].astype(model.INT)
    return model.COMM_LINKS.frame(df)


# ---- metadata ---------------------------------------------------------------------------------


def read_db_meta(db: Db) -> dict[str, Any]:
    """RANK_DEVICE_MAP, META_DATA, HOST_INFO, NPU_INFO, SESSION_TIME_INFO -> a plain dict."""
    out: dict[str, Any] = {"profiler_db": str(db.path)}
    if db.has("RANK_DEVICE_MAP", "rankId", "deviceId"):
        rows = db.query("SELECT rankId, deviceId FROM RANK_DEVICE_MAP")
        out["rank_device"] = [{"rank": r[0], "device_id": r[1]} for r in rows]
        if len(rows) == 1:
            out["rank_id"], out["device_id"] = rows[0]
    if db.has("META_DATA", "name", "value"):
        md: dict[str, Any] = {}
        for name, value in db.query("SELECT name, value FROM META_DATA"):
            if isinstance(value, str) and value[:1] in "{[":
                try:
                    value = json.loads(value)
                except ValueError:
                    pass
            md[str(name)] = value
        out["metadata"] = md
        if "SCHEMA_VERSION" in md:
            out["schema_version"] = md["SCHEMA_VERSION"]
    if db.has("HOST_INFO", "hostName"):
        rows = db.query("SELECT hostName FROM HOST_INFO")
        if rows:
            out["host"] = rows[0][0]
    if db.has("NPU_INFO", "name"):
        out["npu"] = sorted({r[0] for r in db.query("SELECT name FROM NPU_INFO") if r[0]})
    if db.has("SESSION_TIME_INFO", "startTimeNs", "endTimeNs"):
        rows = db.query("SELECT startTimeNs, endTimeNs FROM SESSION_TIME_INFO")
        if rows:
            out["session_start_ns"], out["session_end_ns"] = rows[0]
    return out


# --------------------------------------------------------------------------------------------
# the rank
# --------------------------------------------------------------------------------------------


def _why_comm(ctx: Ctx) -> str:
    if ctx.info.profiler_level == "Level0":
        return "profiler Level0 writes no communication analysis (use Level1 or higher)"
    return "not written by this capture (no HCCL communication recorded: a single device?)"


def _steps(ctx: Ctx) -> Steps:
    found: Steps | None = ctx.state.get("steps")
    return found if found is not None else Steps(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))


def _r_meta(db: Db, ctx: Ctx) -> Read:
    # names are ids into STRING_IDS: without it every kernel, op and API name is null (issue 20)
    lost = [] if "STRING_IDS" in db.tables else [f"{db.path.name} holds no STRING_IDS table: kernel, op and API names are unknown (null)"]
    meta = read_db_meta(db)
    npu = meta.get("npu") or []
    info = {"device_name": " / ".join(npu)} if npu else {}
    return Read(meta={"db": meta}, info=info, state={"launch": _launch_times(db)}, notes=lost)


def _r_step_time(db: Db, ctx: Ctx) -> Read:
    steps = read_step_time(db)
    return Read(state={"steps": steps}, rows=len(steps.ids))


def _r_host(table: str) -> Callable[[Db, Ctx], Read]:
    def read(db: Db, ctx: Ctx) -> Read:
        host, marker_steps = read_host_ranges(db, ctx.rank, table)
        state = {} if len(_steps(ctx).ids) or not len(marker_steps.ids) else {"steps": marker_steps}
        return Read(tables={"timeline": host}, state=state, rows=len(host) + len(marker_steps.ids))

    return read


def _step_lane(ctx: Ctx) -> Read:
    """The steps found so far (STEP_TIME, else the host's ProfilerStep#N ranges) go to the timeline."""
    steps = _steps(ctx)
    if not len(steps.ids):
        return Read(info={"step_source": None})
    track = "MindSpore" if ctx.family == "ascend_ms" else "Python"
    return Read(tables={"timeline": step_timeline(ctx.rank, steps, track)}, info={"step_source": STEP_SOURCE})


def _r_compute(db: Db, ctx: Ctx) -> Read:
    df = read_compute_tasks(db, ctx.rank, _steps(ctx), ctx.state.get("launch", {}))
    return Read(tables={"kernels": df}, rows=len(df))


def _r_comm_op(db: Db, ctx: Ctx) -> Read:
    k, tl = read_communication_ops(db, ctx.rank, _steps(ctx), ctx.state.get("launch", {}))
    return Read(tables={"kernels": k, "timeline": tl}, rows=len(k))


def _r_npu_mem(db: Db, ctx: Ctx) -> Read:
    mem, counters = read_npu_mem(db, ctx.rank)
    return Read(tables={"memory": mem, "counters": counters}, rows=len(counters) // 3)


def _r_step_trace(db: Db, ctx: Ctx) -> Read:
    df = read_step_trace_time(db, ctx.rank)
    return Read(replace={"profiler_steps": df}, rows=len(df))


def _kernels_from(ctx: Ctx) -> Read:
    prof = ctx.dbs["profiler"].path.name
    return Read(info={"kernels_from": f"{prof} (TASK + COMPUTE_TASK_INFO + COMMUNICATION_OP)"})


def _check_profiler_db(db: Db) -> None:
    if "TASK" not in db.tables and "COMPUTE_TASK_INFO" not in db.tables:
        raise ParseError(db.path, "holds no TASK / COMPUTE_TASK_INFO table: not an Ascend profiler export")


def _pick_profiler_db(names: list[str], ctx: Ctx) -> str | None:
    """The rank's profiler database (the one suffixed with its rank first)."""
    cands = [(n, m) for n, m in ((n, PROFILER_DB_RE.match(n)) for n in names) if m]
    for n, m in cands:
        if m.group(1) is not None and int(m.group(1)) == ctx.rank:
            return n
    return cands[0][0] if cands else None


def _pick_analysis_db(names: list[str], ctx: Ctx) -> str | None:
    return next((n for n in ANALYSIS_DB_NAMES if n in names), None)


Pick = Callable[[list[str], Ctx], "str | None"]


def _db_items(folder: str, pick_profiler: Pick, pick_analysis: Pick | None) -> tuple[Item, ...]:
    """The databases of a SQLite export and their tables, in reading order (host ranges before
    kernels: without STEP_TIME their ProfilerStep#N ranges give the kernels' steps). Without
    ``pick_analysis``, no analysis database is looked for."""
    p, a = "profiler", "analysis"
    profiler: tuple[Item, ...] = (
        Database(p, folder, pick_profiler, "holds no ascend_pytorch_profiler_N.db / ascend_mindspore_profiler_N.db",
                 lambda ctx: "profiler database", required=True, check=_check_profiler_db),
        Then(lambda ctx: _on_db(ctx, p, _r_meta)),
        Src("STEP_TIME", db=p, read=_r_step_time, core=True,
            absent="no STEP_TIME: no step markers (no profiler schedule / step() calls)"),
        Src("PYTORCH_API", db=p, read=_r_host("PYTORCH_API"), absent=lambda ctx: (
            "MindSpore writes no PYTORCH_API" if ctx.family == "ascend_ms" else "host (CPU) activity was not recorded")),
        Src("MSTX_EVENTS", db=p, read=_r_host("MSTX_EVENTS"), absent="no mstx ranges were recorded (msprof_tx / mstx off)"),
        Src("CANN_API", "timeline", db=p, rows=read_cann_api, absent="no CANN API calls recorded (profiler Level0 records none)"),
        Then(_step_lane),
        Src("COMPUTE_TASK_INFO", db=p, read=_r_compute, core=True, absent="no compute kernels were recorded"),
        Src("COMMUNICATION_OP", db=p, read=_r_comm_op, core=True, absent=_why_comm),
        Src("OVERLAP_ANALYSIS", "timeline", db=p, rows=read_overlap,
            absent="no overlap analysis: no Computing / Communication / Free lanes"),
        Src("MEMORY_RECORD", "memory", db=p, rows=read_memory_record, absent=why_no_memory),
        Src("NPU_MEM", db=p, read=_r_npu_mem, absent=why_no_memory),
        Src("NPU_MODULE_MEM", "memory", db=p, rows=read_npu_module_mem, absent=why_no_memory),
        Src("OP_MEMORY", "memory_allocs", db=p, rows=read_op_memory, absent=why_no_memory),
        Src("AICORE_FREQ", "counters", db=p, rows=read_aicore_freq, absent="AI Core frequency was not sampled in this capture"),
        Src("HBM", "counters", db=p, rows=read_hbm, absent="HBM bandwidth was not sampled (sys_hardware_mem off)"),
        Src("LLC", "counters", db=p, rows=read_llc, absent="LLC was not sampled (sys_hardware_mem off)"),
        Src("TASK_PMU_INFO", db=p,  # read with the compute tasks; listed so that its absence is explained
            absent="no TASK_PMU_INFO: AI Core metrics were off (aic_metrics None, or profiler Level0)"),
        Then(_kernels_from),
    )
    if pick_analysis is None:
        return profiler
    return profiler + (
        Database(a, folder, pick_analysis, "no analysis database: no StepTraceTime to cross-check, no communication analysis",
                 lambda ctx: ANALYSIS_DB_NAMES[1] if ctx.family == "ascend_ms" else ANALYSIS_DB_NAMES[0]),
        Src("StepTraceTime", db=a, read=_r_step_trace,
            absent="no StepTraceTime: the profiler's own step breakdown is not there to cross-check"),
        Src("CommAnalyzerTime", "comm_ops", db=a, rows=read_comm_time, absent=_why_comm),
        Src("CommAnalyzerBandwidth", "comm_transport", db=a, rows=read_comm_bandwidth, absent=_why_comm),
        Src("CommAnalyzerMatrix", "comm_links", db=a, rows=read_comm_matrix, absent=_why_comm),
    )


def _on_db(ctx: Ctx, key: str, read: Callable[[Db, Ctx], Read]) -> Read:
    """A step that reads an open database beyond any one table (its metadata, launch times)."""
    return read(ctx.dbs[key], ctx)


def _finish(rd: RankData, ctx: Ctx) -> None:
    db_rank = rd.meta.get("db", {}).get("rank_id")
    if db_rank is not None and db_rank >= 0 and db_rank != rd.rank:
        rd.notes.append(f"RANK_DEVICE_MAP says rank {db_rank}, the folder was taken as rank {rd.rank}")
    tl = rd.tables.get("timeline")
    if tl is not None and len(tl):
        rd.tables["timeline"] = tl.sort_values(["lane", "track", "start_us"], kind="stable").reset_index(drop=True)
    if not len(rd.table("kernels")):
        prof = ctx.dbs["profiler"].path.name
        rd.notes.append(f"{prof}: no kernels (COMPUTE_TASK_INFO and COMMUNICATION_OP are empty or absent)")


def _claims(d: Path, names: set[str]) -> bool:
    return is_rank_folder(d, names) and not is_cpu_rank(d, names) and is_db_rank(d)


#: The SQLite export of either Ascend family (a rank folder with a profiler database and no text core file).
FORMAT = Format(
    name="ascend_db",
    label="Ascend profiler SQLite export",
    claims=_claims,
    ranks=lambda d, names: [ascend_rank(d, names, "ascend_db")],
    sources=(*metadata.JSON_SOURCES, *_db_items(OUTPUT_DIR, _pick_profiler_db, _pick_analysis_db)),
    finish=_finish,
)


def load_db_rank(rank_dir: Path, rank: int, family: str) -> RankData:
    """Read one rank's SQLite export into a RankData with the text path's tables, info and sources.

    The databases are ``ASCEND_PROFILER_OUTPUT/ascend_{pytorch,mindspore}_profiler[_N].db`` and
    ``analysis.db`` / ``communication_analyzer.db``; profiler_info_N.json and profiler_metadata.json
    beside them are read as the text path reads them. Raises ParseError when a database is
    truncated or corrupt, or when a core table (COMPUTE_TASK_INFO, COMMUNICATION_OP, STEP_TIME)
    lacks the columns msdiag reads; an optional table that fails is recorded as failed.
    """
    return read_rank(FORMAT, RankDir(rank, Path(rank_dir), family, "", None, format=FORMAT.name))


def read_db_files(rd: RankData, prof: Path, ana: Path | None = None) -> RankData:
    """A rank read from a profiler database and, when given, its analysis database (same folder).

    Also reads a CANN ``msprof_*.db`` (same TASK / COMPUTE_TASK_INFO / STRING_IDS schema, no
    STEP_TIME and no analysis tables): kernels then carry no step id.
    """
    prof = Path(prof)
    fmt = dataclasses.replace(FORMAT, sources=_db_items(
        ".", lambda names, ctx: prof.name if prof.name in names else None,
        None if ana is None else (lambda names, ctx: ana.name if ana.name in names else None)))
    out = read_rank(fmt, RankDir(rd.rank, prof.parent, rd.family, "", None, format=FORMAT.name))
    out.path = rd.path
    return out
