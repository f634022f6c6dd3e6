"""The canonical model of a profiler capture.

Every table msdiag works on is defined here once: its columns, their dtypes and
their units (units live in the column name: ``_us`` microseconds, ``_bytes``,
``_mb`` megabytes as the profiler writes them (10^6 bytes in the communication files, which
match the traces' byte counts exactly; 2^20 bytes in memory files), ``_gbps`` GB/s = MB/ms). Readers in
``msdiag.ingest`` translate raw headers such as ``Duration(us)`` into these
columns at the boundary; nothing downstream sees a raw header.

This module imports nothing from msdiag.
"""

from __future__ import annotations

import dataclasses
import functools
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

SCHEMA_VERSION = "1.0"

#: What a fix can take out of a step, by name (a rule's ``projection.removes``; metrics/projection.py
#: measures each per step as intervals of the step's span): communication compute does not hide, its
#: pipeline receives, the device's idle time, the part of it the host waits on the dataset, the rest
#: of it, and the part of it the host spends in a synchronisation.
STEP_KINDS = ("exposed_communication", "bubble", "idle", "data_wait", "host_idle", "host_sync")
#: What a fix can take out of a request (inference, from the request log): the wait before its prefill, and
#: the slowdown of decoding in the largest batches (the decode batch capped).
REQUEST_KINDS = ("queueing", "decode_batch")
#: Estimate models a rule may name (``projection.estimate.model``) and the inputs each needs.
ESTIMATE_MODELS: dict[str, tuple[str, ...]] = {"measured": ("metric",)}

# dtypes used below
INT = "Int64"  # nullable integer
FLOAT = "float64"
STR = "string"
BOOL = "boolean"


@dataclass(frozen=True)
class Table:
    """One canonical table: name, ordered columns -> dtype, and a one-line doc per column."""

    name: str
    doc: str
    columns: Mapping[str, str]
    column_docs: Mapping[str, str] = field(default_factory=dict)

    def empty(self) -> pd.DataFrame:
        """An empty frame with this table's columns and dtypes (a fresh copy each call: the caller may change it).

        The frame is built once per table and copied: building it column by column costs milliseconds (about
        10 ms for the kernels' 30 columns), a copy a fraction of one, and metrics ask for the empty table of
        each format that lacks it many times per analysis."""
        return self._empty_template.copy()

    @functools.cached_property
    def _empty_template(self) -> pd.DataFrame:
        """The empty frame :meth:`empty` copies (never handed out itself)."""
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in self.columns.items()})

    def frame(self, data: Mapping[str, Any] | pd.DataFrame) -> pd.DataFrame:
        """Build a frame of this table from column data; missing columns become null.

        Extra columns are an error: a reader must not leak raw columns downstream.
        """
        cols = _aligned(data)
        positional = cols is not None
        if cols is None:  # anything but Series on one 0..n-1 index: pandas aligns them first
            df = data if isinstance(data, pd.DataFrame) else pd.DataFrame(dict(data))
            cols = {c: df[c] for c in df.columns}
            n = len(df)
            positional = _counts(df.index)
        else:
            n = len(next(iter(cols.values()))) if cols else 0
        extra = set(cols) - set(self.columns)
        if extra:
            raise ValueError(f"table {self.name}: unknown columns {sorted(extra)}")
        out = {}
        for col, dtype in self.columns.items():
            if col in cols:
                s = cols[col]
                if dtype_name(s.dtype) != dtype:
                    s = (s if isinstance(s, pd.Series) else pd.Series(s, index=pd.RangeIndex(n), copy=False)).astype(dtype)
                out[col] = s
            elif positional:  # the nulls as an array of the dtype (a Series of a broadcast null costs ~0.1-0.3 ms)
                out[col] = _nulls(dtype, n)
            else:  # one null broadcast (a list of n nulls costs seconds per column at a million rows)
                out[col] = pd.Series(float("nan") if dtype == FLOAT else pd.NA, index=pd.RangeIndex(n), dtype=dtype)
        # copy=False: the columns are not consolidated into one 2-D block per dtype (a copy, then a sorted copy
        # of every float column at once: three times the floats of a million-row kernels table at the peak)
        if positional:  # every column on 0..n-1: the arrays as they are (a third of the cost of aligning Series)
            arrays = {c: v.array if isinstance(v, pd.Series) else v for c, v in out.items()}
            return pd.DataFrame(arrays, index=pd.RangeIndex(n), copy=False)
        res = pd.DataFrame(out, copy=False)
        res.index = pd.RangeIndex(n)
        return res


def _nulls(dtype: str, n: int) -> Any:
    """n nulls of ``dtype``: the cells of a Series of one broadcast null, built as the array itself."""
    if dtype == FLOAT:
        return np.full(n, np.nan)
    if dtype == INT:
        return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
    if dtype == BOOL:
        return pd.arrays.BooleanArray(np.zeros(n, dtype=bool), np.ones(n, dtype=bool))
    if dtype == STR and pd.StringDtype().storage == "pyarrow":  # pandas' default string storage
        import pyarrow as pa

        return pd.arrays.ArrowStringArray(pa.chunked_array([pa.nulls(n, pa.large_string())]))
    return pd.Series(pd.NA, index=pd.RangeIndex(n), dtype=dtype).array


_DTYPE_NAMES: dict[Any, str] = {}


def dtype_name(dtype: Any) -> str:
    """``str(dtype)``, remembered per dtype (a numpy dtype's name costs ~6 us to build, asked for each column of each
    frame a table builds)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


def string_array(t: Any) -> Any:
    """Arrow texts (a ``pyarrow`` array) as a "string" array of pandas' default storage (STR), as ``astype("string")``
    and the readers give: Arrow under pandas 3, Python objects under pandas 2 unless its option says pyarrow."""
    out = pd.arrays.ArrowStringArray(t)
    return out if pd.StringDtype().storage == "pyarrow" else out.astype(pd.StringDtype())


def const_texts(n: int, value: str) -> Any:
    """``value`` on n rows as a "string" array (what ``pd.array(np.full(n, value, dtype=object), dtype="string")``
    gives), repeated by Arrow rather than converted from n Python objects: a task's 34,000 memory rows 4.8 -> 0.2 ms."""
    import pyarrow as pa

    return string_array(pa.repeat(pa.scalar(value, pa.large_string()), n))


def _aligned(data: Mapping[str, Any] | pd.DataFrame) -> dict[str, pd.Series] | None:
    """``data``'s columns when it is a mapping of Series that all stand on the same 0..n-1 index, or
    of 1-D arrays (numpy or pandas extension arrays: rows 0..n-1) of one length n (what every reader
    builds), else None. Such columns need no alignment, so Table.frame takes them as they are instead
    of building, and copying, an intermediate frame: the same cells, one copy less. An array whose
    dtype is not the table's is converted as its Series would be."""
    if isinstance(data, pd.DataFrame):
        return None
    n: int | None = None
    out: dict[str, pd.Series] = {}
    for c, v in data.items():
        if isinstance(v, pd.Series):
            if not _counts(v.index):
                return None
        elif not (isinstance(v, pd.api.extensions.ExtensionArray) or (isinstance(v, np.ndarray) and v.ndim == 1)):
            return None
        if n is not None and len(v) != n:
            return None
        n = len(v)
        out[c] = v
    return out


def _counts(index: pd.Index) -> bool:
    """True when ``index`` is 0, 1, ..., n-1 (a RangeIndex from 0 by 1)."""
    return isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1


def _t(name: str, doc: str, cols: list[tuple[str, str, str]]) -> Table:
    return Table(name, doc, {c: t for c, t, _ in cols}, {c: d for c, _, d in cols})


RANKS = _t(
    "ranks",
    "One row per rank found in the capture.",
    [
        ("rank", INT, "global rank id"),
        ("device_id", INT, "device id on its host, where known"),
        ("host", STR, "host name, where known"),
        ("family", STR, "format family: ascend_ms, ascend_pt, mindspore_cpu"),
        ("path", STR, "the rank's capture folder"),
    ],
)

STEPS = _t(
    "steps",
    "One row per rank and step: the step-time breakdown.",
    [
        ("rank", INT, "global rank id"),
        ("step", INT, "the profiler's own step id; null for a capture without step markers"),
        ("start_us", FLOAT, "step start (absolute, us)"),
        ("end_us", FLOAT, "step end (absolute, us)"),
        ("total_us", FLOAT, "wall-clock span of the step"),
        ("computing_us", FLOAT, "device time computing"),
        ("communication_us", FLOAT, "device time communicating (union of collectives)"),
        ("communication_exposed_us", FLOAT, "communication not overlapped by compute"),
        ("overlapped_us", FLOAT, "communication overlapped by compute"),
        ("free_us", FLOAT, "device neither computing nor communicating"),
        ("bubble_us", FLOAT, "pipeline receive time (hcom_receive)"),
        ("preparing_us", FLOAT, "host time before the first device task of the step"),
        ("data_wait_us", FLOAT, "host time inside the step waiting on the dataset (GetNext, DataLoader)"),
        ("stage_us", FLOAT, "step span minus bubble"),
        ("source", STR, "where the row comes from (file name or 'timeline')"),
        ("warmup", BOOL, "the rank's first step, far slower than its others (compilation, warm-up): left out of shares"),
    ],
)

STEP_KINDS_TABLE = _t(
    "step_kinds",
    "One row per interval of a removable kind of a step window (metrics/projection.py), and one per window.",
    [
        ("rank", INT, "global rank id"),
        ("step", INT, "the window's step (the steps table's); null for a capture without steps"),
        ("kind", STR, "window (the step window itself) or a kind of STEP_KINDS"),
        ("start_us", FLOAT, "interval start (absolute, us)"),
        ("end_us", FLOAT, "interval end (absolute, us)"),
    ],
)

KERNELS = _t(
    "kernels",
    "Device kernels (Ascend) or host ops (MindSpore CPU), one row per launch.",
    [
        ("rank", INT, "global rank id"),
        ("step", INT, "step id, where known"),
        ("stream", INT, "device stream id (null for host ops)"),
        ("name", STR, "kernel or op name"),
        ("type", STR, "op type"),
        ("core", STR, "accelerator core: AI_CORE, AI_VECTOR_CORE, MIX_AIC, AI_CPU, HCCL, CPU, ..."),
        ("kind", STR, "compute | communication | other"),
        ("start_us", FLOAT, "start (absolute, us)"),
        ("dur_us", FLOAT, "duration"),
        ("wait_us", FLOAT, "wait before the task on its stream"),
        ("block_dim", INT, "block dim / block num"),
        ("input_shapes", STR, "input shapes as written: '\"a,b;c\"' -> 'a,b;c'"),
        ("input_dtypes", STR, "input data types"),
        ("input_formats", STR, "input formats (NCHW, NC1HWC0, FRACTAL_Z, ND, ...)"),
        ("output_shapes", STR, "output shapes"),
        ("output_dtypes", STR, "output data types"),
        ("aicore_time_us", FLOAT, "AI Core busy time (PMU)"),
        ("aic_total_cycles", FLOAT, "cube cycles over all its blocks (PMU): / aicore_time_us / block_dim = the clock"),
        ("aic_mac_ratio", FLOAT, "cube (MAC) pipe ratio (PMU, PipeUtilization)"),
        ("aiv_vec_ratio", FLOAT, "vector pipe ratio (PMU, PipeUtilization)"),
        ("aic_mte2_ratio", FLOAT, "MTE2 pipe ratio (PMU, PipeUtilization)"),
        ("aic_scalar_ratio", FLOAT, "AI Core scalar pipe ratio (PMU, PipeUtilization)"),
        ("aic_mte1_ratio", FLOAT, "AI Core MTE1 (L1 -> L0) pipe ratio (PMU, PipeUtilization)"),
        ("aic_fixpipe_ratio", FLOAT, "AI Core fixpipe (L0C -> out) pipe ratio (PMU, PipeUtilization)"),
        ("aiv_time_us", FLOAT, "AI Vector core busy time (PMU)"),
        ("aiv_scalar_ratio", FLOAT, "vector core scalar pipe ratio (PMU, PipeUtilization)"),
        ("aiv_mte2_ratio", FLOAT, "vector core MTE2 (global memory -> UB) pipe ratio (PMU, PipeUtilization)"),
        ("aiv_mte3_ratio", FLOAT, "vector core MTE3 (UB -> global memory) pipe ratio (PMU, PipeUtilization)"),
        ("cube_fops", FLOAT, "cube FLOPs of the kernel (PMU, ArithmeticUtilization)"),
        ("vector_fops", FLOAT, "vector FLOPs of the kernel (PMU, ArithmeticUtilization)"),
    ],
)

COMM_OPS = _t(
    "comm_ops",
    "Communication ops with HCCL's time analysis (communication.json), one row per rank, step and op.",
    [
        ("rank", INT, "global rank id"),
        ("step", INT, "step id, where known"),
        ("category", STR, "collective | p2p"),
        ("op_name", STR, "op name without the group suffix, e.g. hcom_allReduce__586_0_1"),
        ("op_type", STR, "op type, e.g. hcom_allReduce"),
        ("group", STR, "group hash from the '@<hash>' suffix"),
        ("start_us", FLOAT, "op start (absolute, us)"),
        ("elapse_us", FLOAT, "op elapse time"),
        ("transit_us", FLOAT, "time moving data"),
        ("wait_us", FLOAT, "time waiting (notify waits)"),
        ("sync_us", FLOAT, "synchronization time: waiting for a late rank"),
        ("idle_us", FLOAT, "elapse minus transit minus wait"),
    ],
)

COMM_TRANSPORT = _t(
    "comm_transport",
    "Per communication op and transport: size and time moved (communication.json bandwidth info).",
    [
        ("rank", INT, "global rank id"),
        ("step", INT, "step id, where known"),
        ("op_name", STR, "op name (joins comm_ops)"),
        ("group", STR, "group hash"),
        ("transport", STR, "HCCS | RDMA | PCIE | SDMA | SIO"),
        ("size_mb", FLOAT, "transit size (MB as the profiler writes it)"),
        ("time_us", FLOAT, "transit time"),
        ("bandwidth_gbps", FLOAT, "bandwidth (GB/s) = size / time"),
        ("large_packet_ratio", FLOAT, "share of packets above the transport's large-packet size"),
        ("packets", INT, "number of packets (from Size Distribution)"),
    ],
)

COMM_LINKS = _t(
    "comm_links",
    "Point-to-point links (communication_matrix.json), group-local rank numbers.",
    [
        ("rank", INT, "global rank id of the capture that recorded it"),
        ("step", INT, "step id, where known"),
        ("category", STR, "collective | p2p"),
        ("op_type", STR, "op type, e.g. hcom_allReduce"),
        ("variant", STR, "top1 | middle | bottom1..3 | total | an op name"),
        ("group", STR, "group hash"),
        ("src", INT, "source rank (group-local)"),
        ("dst", INT, "destination rank (group-local)"),
        ("transport", STR, "HCCS | RDMA | PCIE | SDMA | SIO | LOCAL"),
        ("size_mb", FLOAT, "transit size"),
        ("time_us", FLOAT, "transit time"),
        ("bandwidth_gbps", FLOAT, "bandwidth (GB/s)"),
    ],
)

TIMELINE = _t(
    "timeline",
    "Intervals from the timeline: device tasks, HCCL ops, overlap lanes, host ops and step markers.",
    [
        ("rank", INT, "global rank id"),
        ("lane", STR, "device | hccl | overlap | host | step | scope"),
        ("track", STR, "stream, HCCL group, overlap lane name, host thread, scope depth"),
        ("name", STR, "event name"),
        ("start_us", FLOAT, "start (absolute, us)"),
        ("dur_us", FLOAT, "duration"),
    ],
)

COUNTERS = _t(
    "counters",
    "Counter samples from the timeline (AI Core Freq, HBM, NPU MEM, ...).",
    [
        ("rank", INT, "global rank id"),
        ("track", STR, "counter process, e.g. 'AI Core Freq'"),
        ("name", STR, "counter name, e.g. 'APP/HBM'"),
        ("unit", STR, "unit from the args key, e.g. MHz, KB"),
        ("ts_us", FLOAT, "sample time (absolute, us)"),
        ("value", FLOAT, "sample value"),
    ],
)

MEMORY = _t(
    "memory",
    "Memory samples over time (memory_record.csv, cpu_ms_memory_record, npu_module_mem.csv).",
    [
        ("rank", INT, "global rank id"),
        ("component", STR, "APP, PTA, MindSpore, GE, a module name, ..."),
        ("source", STR, "memory_record | npu_module_mem | cpu_ms_memory_record"),
        ("ts_us", FLOAT, "sample time (absolute, us)"),
        ("allocated_mb", FLOAT, "total allocated (MB)"),
        ("reserved_mb", FLOAT, "total reserved (MB)"),
        ("active_mb", FLOAT, "total active (MB)"),
        ("device", STR, "device label, e.g. NPU:0"),
    ],
)

MEMORY_ALLOCS = _t(
    "memory_allocs",
    "Operator allocations (operator_memory.csv) and static graph memory (static_op_mem.csv).",
    [
        ("rank", INT, "global rank id"),
        ("name", STR, "operator or tensor name"),
        ("kind", STR, "dynamic | static"),
        ("size_kb", FLOAT, "size (KB)"),
        ("alloc_us", FLOAT, "allocation time (absolute, us)"),
        ("release_us", FLOAT, "release time (absolute, us); null when never released in the capture"),
        ("dur_us", FLOAT, "lifetime"),
        ("device", STR, "device label"),
    ],
)

OP_STATS = _t(
    "op_stats",
    "Per op type statistics as the profiler summarised them (op_statistic.csv, cpu_op_type_info).",
    [
        ("rank", INT, "global rank id"),
        ("op_type", STR, "op type"),
        ("core", STR, "core type"),
        ("count", INT, "number of launches"),
        ("total_us", FLOAT, "total time"),
        ("min_us", FLOAT, "shortest"),
        ("avg_us", FLOAT, "mean"),
        ("max_us", FLOAT, "longest"),
        ("ratio", FLOAT, "share of total time, 0..1"),
    ],
)

L2_CACHE = _t(
    "l2_cache",
    "L2 cache hits per device task (l2_cache.csv, written with l2_cache=True).",
    [
        ("rank", INT, "global rank id"),
        ("stream", INT, "device stream id"),
        ("task_id", INT, "device task id"),
        ("name", STR, "op (kernel) name, as kernel_details.csv names it"),
        ("hit_rate", FLOAT, "memory requests that hit L2 over all requests (0..1; null where the file says N/A)"),
        ("victim_rate", FLOAT, "requests that missed and evicted a line over all requests (may exceed 1 on Atlas A2)"),
    ],
)

API_STATS = _t(
    "api_stats",
    "Host API time per CANN API (api_statistic.csv, profiler Level1 and above).",
    [
        ("rank", INT, "global rank id"),
        ("level", STR, "CANN layer of the API: acl, node, runtime, hccl, model, ..."),
        ("api", STR, "API name"),
        ("total_us", FLOAT, "host time in the API over the capture"),
        ("count", INT, "calls"),
        ("avg_us", FLOAT, "mean time per call"),
        ("max_us", FLOAT, "longest call"),
    ],
)

DATA_PIPELINE = _t(
    "data_pipeline",
    "MindData pipeline ops (minddata_pipeline_raw / summary) and dataset stages (dataset.csv).",
    [
        ("rank", INT, "global rank id"),
        ("op_id", INT, "pipeline op id (-1 for the device queue / iterator)"),
        ("op_type", STR, "op type: Batch, Map, Generator, DeviceQueue, ..."),
        ("num_workers", INT, "num_parallel_workers"),
        ("queue_capacity", FLOAT, "output queue capacity"),
        ("queue_avg_size", FLOAT, "average output queue size"),
        ("queue_usage", FLOAT, "average queue usage, 0..1"),
        ("queue_empty_share", FLOAT, "share of samples with an empty queue, 0..1"),
        ("per_batch_us", FLOAT, "time per batch"),
        ("avg_cpu_pct", FLOAT, "average CPU utilisation of the op (%)"),
        ("parent_id", INT, "parent op id"),
    ],
)

HOST_SHAPES = _t(
    "host_shapes",
    "Op input shapes recorded by the MindSpore CPU backend (cpu_framework_N.txt).",
    [
        ("rank", INT, "global rank id"),
        ("op_type", STR, "op type"),
        ("op_name", STR, "op name, e.g. MatMul-op3"),
        ("input_shapes", STR, "';'-separated shapes, each 'a,b,c' ('' for NoShape)"),
    ],
)

REQUESTS = _t(
    "requests",
    "One row per completed request of a request log.",
    [
        ("request_id", STR, "the log's request id (or its position)"),
        ("arrival_s", FLOAT, "arrival time (s, the log's clock; null when the log has none)"),
        ("first_token_s", FLOAT, "first output token (s, the log's clock)"),
        ("finish_s", FLOAT, "last output token (s, the log's clock)"),
        ("prompt_tokens", INT, "prompt length in tokens"),
        ("output_tokens", INT, "tokens generated"),
        ("batch_size", INT, "decode batch the request ran in, where recorded"),
        ("ttft_ms", FLOAT, "time to first token"),
        ("tpot_ms", FLOAT, "time per output token after the first: mean inter-token latency (null for 1 token)"),
        ("e2e_ms", FLOAT, "end-to-end latency: arrival to last token"),
    ],
)

TOKEN_GAPS = _t(
    "token_gaps",
    "One row per inter-token gap of a completed request (logs with per-token times).",
    [
        ("req", INT, "row of the request in REQUESTS"),
        ("start_s", FLOAT, "the earlier token's time (null when arrival times are unknown)"),
        ("end_s", FLOAT, "the later token's time"),
        ("itl_ms", FLOAT, "inter-token latency"),
    ],
)


TRAIN_STEPS = _t(
    "train_steps",
    "One row per logged training step of a training log (msdiag/trainlog/), per rank.",
    [
        ("rank", INT, "rank of the log (msrun worker_N.log: N; a single log: 0)"),
        ("step", INT, "global step, from 1 ((epoch - 1) x steps per epoch + step in epoch when the log counts per epoch)"),
        ("epoch", INT, "epoch as the log prints it, where it does"),
        ("loss", FLOAT, "the step's loss as logged (NaN / inf kept: they are findings)"),
        ("lr", FLOAT, "learning rate, where logged"),
        ("grad_norm", FLOAT, "global gradient norm, where logged"),
        ("loss_scale", FLOAT, "loss scale, where logged"),
        ("overflow", BOOL, "the step overflowed (dynamic loss scaling), where logged"),
        ("step_time_ms", FLOAT, "the step's wall time, where logged (an epoch's mean per step when only that is logged)"),
        ("tokens", FLOAT, "tokens of the step, where logged"),
        ("samples", FLOAT, "samples of the step, where logged"),
        ("throughput", FLOAT, "throughput as the log prints it (samples/s per device, or tokens/s), where logged"),
        ("time_s", FLOAT, "the line's timestamp in seconds after the log's first stamped line, where lines carry one"),
        ("line", INT, "line of the log the step was read from (1-based)"),
    ],
)

TRAIN_EVENTS = _t(
    "train_events",
    "One row per checkpoint save / evaluation / overflow the training log names, per rank.",
    [
        ("rank", INT, "rank of the log"),
        ("step", INT, "global step the event follows (the last step logged before it)"),
        ("kind", STR, "checkpoint / eval / overflow / nonfinite"),
        ("text", STR, "the log line, trimmed to 200 characters"),
        ("line", INT, "line of the log (1-based)"),
    ],
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        RANKS,
        STEPS,
        STEP_KINDS_TABLE,
        KERNELS,
        COMM_OPS,
        COMM_TRANSPORT,
        COMM_LINKS,
        TIMELINE,
        COUNTERS,
        MEMORY,
        MEMORY_ALLOCS,
        OP_STATS,
        L2_CACHE,
        API_STATS,
        DATA_PIPELINE,
        HOST_SHAPES,
        REQUESTS,
        TOKEN_GAPS,
        TRAIN_STEPS,
        TRAIN_EVENTS,
    )
}

# Source status values
PRESENT = "present"
ABSENT = "absent"
FAILED = "failed"
UNUSED = "unused"  # present, deliberately not read (the reason says why)
SKIPPED = "skipped"  # present, not parsed on a rank read shallow (--deep auto: ingest/loader.Tiered; the reason says why)


@dataclass
class Source:
    """One input file or table, present or absent, with the reason."""

    rank: int | None
    name: str  # canonical source name, e.g. "kernel_details.csv"
    status: str  # present | absent | failed | unused | skipped
    path: str | None = None
    reason: str | None = None
    rows: int | None = None
    # values outside physical bounds left out of its rows (ingest/bounds.py): {"<table>.<column>:
    # <problem>": count}; None when nothing was left out
    repaired: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract's ``sources`` entry; ``repaired`` only when values were left out."""
        out: dict[str, Any] = {
            "rank": self.rank,
            "name": self.name,
            "status": self.status,
            "path": self.path,
            "reason": self.reason,
            "rows": self.rows,
        }
        if self.repaired:
            out["repaired"] = dict(self.repaired)
        return out


@dataclass(frozen=True)
class ParallelLayout:
    """A job's parallel sizes (Megatron-style ``distributed_args``); a size not recorded is None."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    cp: int | None = None
    ep: int | None = None
    world_size: int | None = None
    rank: int | None = None  # the rank that wrote the args

    def as_dict(self) -> dict[str, int | None]:
        """The sizes as the JSON contract's ``capture.parallel`` shows them."""
        return dataclasses.asdict(self)

    def coordinates(self, rank: int) -> dict[str, int]:
        """Where a global rank sits in the grid: tp_index, cp_index, dp_index, pp_index, ep_index.

        Megatron-LM's default order ``tp-cp-ep-dp-pp``: tp varies fastest and pp slowest (ep is laid
        out inside dp x cp for the expert layers), i.e. rank = tp_i + tp*(cp_i + cp*(dp_i + dp*pp_i)).
        msprof-analyze's ParallelStrategyCalculator gives the same DP/PP/TP indices when cp = 1.
        Raises ValueError when tp, pp or dp is unknown, the sizes do not multiply to world_size, or
        the rank is outside the world.
        """
        tp, pp, dp = self.tp, self.pp, self.dp
        cp = self.cp or 1
        ep = self.ep or 1
        if not tp or not pp or not dp or tp < 1 or pp < 1 or dp < 1:
            raise ValueError(f"parallel sizes unknown or invalid (tp={tp}, pp={pp}, dp={dp}): cannot place ranks")
        world = tp * cp * dp * pp
        if self.world_size is not None and self.world_size != world:
            raise ValueError(f"tp*cp*dp*pp = {tp}*{cp}*{dp}*{pp} = {world} but world_size is {self.world_size}")
        if (dp * cp) % ep != 0:
            raise ValueError(f"dp*cp = {dp * cp} is not divisible by ep = {ep}")
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is outside the world of {world} ranks")
        dp_cp = (rank // tp) % (cp * dp)
        return {
            "tp_index": rank % tp,
            "cp_index": dp_cp % cp,
            "dp_index": dp_cp // cp,
            "pp_index": rank // (tp * cp * dp),
            "ep_index": dp_cp % ep,
        }


@dataclass(frozen=True)
class ParallelGroup:
    """One communication group of profiler_metadata.json's parallel_group_info."""

    group_id: str
    group_name: str | None
    group_rank: int | None
    global_ranks: list[int | None] | None
    hash: str  # group_hash(group_id): the text after '@' in communication op keys

    def as_dict(self) -> dict[str, Any]:
        """``dataclasses.asdict``'s dict (global_ranks a new list), built directly: a job of a thousand ranks
        lists thousands of groups (tests/test_join_tables.py checks both alike)."""
        ranks = None if self.global_ranks is None else list(self.global_ranks)
        return {"group_id": self.group_id, "group_name": self.group_name, "group_rank": self.group_rank,
                "global_ranks": ranks, "hash": self.hash}  # fmt: skip


@dataclass
class RankInfo:
    """What is known about a rank besides its tables: typed, filled by the readers (and the step
    breakdown's ``steps_from``). Metrics and the report read this, never the profiler's raw JSON.
    A value no file recorded is None."""

    # how the rank was found and read
    rank_from: str | None = None  # where the rank id came from
    captured_ns: int | None = None  # capture time (folder name), for choosing the newest duplicate
    kernels_from: str | None = None  # the source of the kernels table
    step_source: str | None = None  # where the timeline's step markers came from
    steps_from: str | None = None  # how the step breakdown found the steps (set by metrics/breakdown.py)
    # "summary": read shallow without its trace (a source declared deep_only, trace_view.json, not parsed: ingest/engine.py);
    # "shallow": reduced without its Python frames but one per name (metrics/reduce.py); None: whole
    read_depth: str | None = None
    # the device (CANN info.json, the SQLite export's HOST_INFO / RANK_DEVICE_MAP)
    device_id: int | None = None
    host: str | None = None
    ai_core_num: int | None = None
    aic_frequency_mhz: float | None = None
    device_name: str | None = None  # the chip as the profiler names it (SQLite export NPU_INFO, e.g. Ascend910B)
    device_memory_gb: float | None = None  # the device's memory (GiB) as MindSpore reported it to msdiag capture
    info_json: str | None = None  # path of the CANN device_N/info.json.N read (the MFU peak)
    # framework and profiler settings (profiler_info_N.json)
    framework: str | None = None  # torch_npu | mindspore
    info_format: str | None = None  # which profiler_info shape: torch_npu | mindspore | mindspore_legacy
    framework_version: str | None = None
    cann_version: str | None = None
    profiler_level: str | None = None  # Level0, Level1, ...
    aic_metrics: str | None = None  # MindSpore spelling: PipeUtilization, ..., "None" when off
    export_type: list[str] | None = None  # ["text"], ["db"], ...
    profile_memory: bool | None = None
    context_mode: str | None = None  # graph | pynative
    jit_level: str | None = None
    # the parallel job
    parallel_mode: str | None = None  # MindSpore 1.x-2.2: data_parallel, semi_auto_parallel, ...
    cluster_mode: str | None = None  # the mode in an ascend_cluster_analyse file name
    rank_size: int | None = None  # MindSpore 1.x-2.2 profiler_info / cluster file: ranks in the job
    stage_num: int | None = None  # MindSpore 1.x-2.2: pipeline stages
    layout: ParallelLayout | None = None  # profiler_metadata.json distributed_args (None: none recorded)
    groups: list[ParallelGroup] | None = None  # parallel_group_info (None: no profiler_metadata.json)

    def world_size(self) -> tuple[int, str] | None:
        """The job's number of ranks as the profiler recorded it, with where it came from."""
        ws = self.layout.world_size if self.layout is not None else None
        if ws is not None and ws > 0:
            return ws, "profiler_metadata.json distributed_args.world_size"
        if self.rank_size is not None and self.rank_size > 0:
            return self.rank_size, "profiler_info rank_size"
        return None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (see :meth:`from_json`, which restores it exactly): ``dataclasses.asdict``'s, built
        field by field (the groups by ``ParallelGroup.as_dict``: asdict's walk of a thousand ranks' groups cost
        a rank's cache entry more than its tables); a field holding anything else than its type goes to asdict."""
        out: dict[str, Any] = {}
        for name in _RANK_INFO_FIELDS:
            v = getattr(self, name)
            if v is None or type(v) in (str, int, float, bool):
                out[name] = v
            elif name == "export_type" and type(v) is list and all(type(x) is str for x in v):
                out[name] = list(v)
            elif name == "layout" and type(v) is ParallelLayout:
                out[name] = v.as_dict()
            elif name == "groups" and type(v) is list and all(type(g) is ParallelGroup for g in v):
                out[name] = [g.as_dict() for g in v]
            else:
                return dataclasses.asdict(self)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RankInfo:
        """The RankInfo of :meth:`to_json`'s dict; an unknown or missing key is a TypeError."""
        d = dict(d)
        if d.get("layout") is not None:
            d["layout"] = ParallelLayout(**d["layout"])
        if d.get("groups") is not None:
            d["groups"] = [ParallelGroup(**g) for g in d["groups"]]
        if {f.name for f in dataclasses.fields(cls)} != set(d):
            raise TypeError(f"RankInfo keys differ: {sorted(d)}")
        return cls(**d)


#: RankInfo's field names, in order (RankInfo.to_json).
_RANK_INFO_FIELDS = tuple(f.name for f in dataclasses.fields(RankInfo))


class Rows:
    """Rows ``lo`` to ``hi`` of ``whole``: a rank's frame of a table held as one frame of several ranks' rows (a pool
    task's, a joined table), cut when it is first read (:class:`Frames`). Cutting a row slice costs pandas ~50-100 us a
    table; at 512 ranks of ~20 tables each, twice over (a task's tables unpacked, then joined), a second of the parent's
    time, while the analysis reads few ranks' frames one by one (it reads the joined tables)."""

    __slots__ = ("whole", "lo", "hi", "_frame")

    def __init__(self, whole: pd.DataFrame, lo: int, hi: int) -> None:
        self.whole, self.lo, self.hi = whole, lo, hi
        self._frame: pd.DataFrame | None = None

    def __len__(self) -> int:
        return self.hi - self.lo

    def frame(self) -> pd.DataFrame:
        """The rows as a frame of their own (a view of ``whole``, the index 0..n-1), cut once."""
        if self._frame is None:
            part = self.whole.iloc[self.lo : self.hi]
            part.index = pd.RangeIndex(self.hi - self.lo)
            self._frame = part
        return self._frame


class Stacked:
    """A rank's rows of a table fed by several files (ingest/engine.put: the Ascend memory table, memory_record.csv's
    rows then npu_module_mem.csv's), held as the files' :class:`Rows` one after the other and concatenated when first
    read (:class:`Frames`): a pool task's ranks mostly leave theirs unread, and :func:`concat_alike` builds the task's
    table from the files' bulk frames at once (``_stacked_whole``) rather than a frame per rank concatenated again."""

    __slots__ = ("parts", "_frame")

    def __init__(self, parts: list[Rows]) -> None:
        self.parts = parts
        self._frame: pd.DataFrame | None = None

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def frame(self) -> pd.DataFrame:
        """``pd.concat`` of the parts' frames (index 0..n-1), once."""
        if self._frame is None:
            self._frame = pd.concat([p.frame() for p in self.parts], ignore_index=True)
        return self._frame


def rows_of(whole: pd.DataFrame, counts: Iterable[int]) -> list[Rows]:
    """:func:`row_slices`' cut of ``whole``, each part a :class:`Rows` cut only when read."""
    out, lo = [], 0
    for n in counts:
        out.append(Rows(whole, lo, lo + n))
        lo += n
    return out


def cut_rows(whole: pd.DataFrame, counts: Iterable[int]) -> list[Rows]:
    """:func:`rows_of`, noted as :func:`row_slices` notes its cut (within :func:`noting_cuts`: (whole, the Rows)). How a
    bulk read gives each file its frame (ingest/engine.prefetch): held as Rows by the rank that reads it
    (:class:`Frames`), cut only where something reads that rank's frame; a table all of whose ranks still hold their
    Rows travels and is stored as the whole (:func:`concat_alike`). Cutting a row slice costs pandas ~10 us a column
    of a nullable or text dtype (a kernels frame ~0.2-0.35 ms), and a pool task's ranks mostly leave theirs uncut."""
    out = rows_of(whole, counts)
    if _NOTED:
        _NOTED[-1].append((whole, out))  # type: ignore[arg-type]
    return out


class Frames(dict):  # type: ignore[type-arg]  # str -> pd.DataFrame, as read
    """A rank's tables (``RankData.tables``): name -> frame, where a frame may be held as :class:`Rows` of a larger
    frame until it is read. Reading an entry (``[]``, ``get``, ``items``, ``values``, ``pop``, iteration's
    look-ups, ``dict(frames)``) gives the frame; :func:`entry` gives what is held (how the join and
    ``Capture.table`` know a rank's frame is a slice of a table already whole, without cutting it)."""

    def __getitem__(self, name: str) -> pd.DataFrame:
        v = dict.__getitem__(self, name)
        return v.frame() if isinstance(v, (Rows, Stacked)) else v

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    def __iter__(self) -> Iterator[str]:  # defined: dict(frames) and {**frames} then read through __getitem__
        return dict.__iter__(self)

    def items(self) -> list[tuple[str, pd.DataFrame]]:  # type: ignore[override]
        return [(n, self[n]) for n in self]

    def values(self) -> list[pd.DataFrame]:  # type: ignore[override]
        return [self[n] for n in self]

    def pop(self, name: str, *default: Any) -> Any:
        if name not in self and default:
            return default[0]
        v = self[name]
        dict.pop(self, name)
        return v

    def setdefault(self, name: str, default: Any = None) -> Any:
        if name not in self:
            self[name] = default
        return self[name]

    def copy(self) -> Frames:
        return Frames((n, dict.__getitem__(self, n)) for n in self)

    def __reduce__(self) -> tuple[Any, ...]:  # pickled as the frames
        return (Frames, (dict(self.items()),))


def entry(tables: dict[str, pd.DataFrame], name: str) -> pd.DataFrame | Rows:
    """What ``tables`` holds for ``name``: the frame, or the :class:`Rows` it is cut from when read (Frames; within a
    pool task also a :class:`Stacked`, read as its frame by :func:`frame_of`)."""
    return dict.__getitem__(tables, name)  # type: ignore[no-any-return]


def entries(tables: dict[str, pd.DataFrame]) -> list[tuple[str, pd.DataFrame | Rows]]:
    """Every (name, :func:`entry`) of ``tables``, in order: nothing cut."""
    return [(n, dict.__getitem__(tables, n)) for n in tables]


def held_rows(rd: RankData, name: str) -> int:
    """The rank's rows of table ``name`` (0 without it), counted on what it holds: a joined table's Rows are not cut
    to be counted."""
    return len(entry(rd.tables, name)) if name in rd.tables else 0


def column_array(x: pd.DataFrame | Rows, col: str) -> Any:
    """Column ``col`` of an :func:`entry` as its pandas array (the rows' part of the whole's column, without cutting the
    frame)."""
    if isinstance(x, Rows):
        return x.whole[col].array[x.lo : x.hi]
    return frame_of(x)[col].array


def frame_of(x: pd.DataFrame | Rows) -> pd.DataFrame:
    """The frame of an :func:`entry`."""
    return x.frame() if isinstance(x, (Rows, Stacked)) else x


def hold(rd: RankData, name: str, x: pd.DataFrame | Rows) -> None:
    """``x`` (a frame, or Rows of one) held as ``rd``'s table ``name``, its tables made a :class:`Frames` first."""
    if not isinstance(rd.tables, Frames):
        rd.tables = Frames(rd.tables)
    dict.__setitem__(rd.tables, name, x)


@dataclass
class RankData:
    """Everything read from one rank's capture folder."""

    rank: int
    family: str
    path: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    info: RankInfo = field(default_factory=RankInfo)
    # what a format's readers keep as the files hold it (hccl units, FLOPs files, cluster_analyse,
    # the SQLite export's META_DATA, ...): provenance and tests; metrics read ``info`` and the tables
    meta: dict[str, Any] = field(default_factory=dict)
    sources: list[Source] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def table(self, name: str) -> pd.DataFrame:
        t = self.tables.get(name)
        return TABLES[name].empty() if t is None else t


def _dtypes(df: pd.DataFrame) -> list[Any]:
    """A frame's column dtypes (from its blocks where pandas has them: no Series of them built)."""
    get = getattr(getattr(df, "_mgr", None), "get_dtypes", None)
    return list(get()) if get is not None else list(df.dtypes)


def rank_column(ranks: Iterable[int], counts: Iterable[int]) -> Any:
    """The rank column (Int64) of several ranks' rows laid end to end: each rank repeated on its count of rows."""
    return pd.array(np.repeat(np.asarray(list(ranks), dtype=np.int64), list(counts)), dtype=INT)


def row_slices(whole: pd.DataFrame, counts: Iterable[int]) -> list[pd.DataFrame]:
    """``whole`` cut into consecutive row slices of ``counts`` rows: each a view of it with the index 0..n-1 (as
    ``reset_index(drop=True)`` gives, without its copy of the blocks). How a frame of several ranks' rows (a joined
    table, a cache hit converted whole, a pool task's tables, a bulk read) gives each rank its frame. Within
    :func:`noting_cuts`, each cut is noted there: (whole, its slices)."""
    out = [part.frame() for part in rows_of(whole, counts)]
    if _NOTED:
        _NOTED[-1].append((whole, out))
    return out


#: The lists :func:`noting_cuts` gives, innermost last.
_NOTED: list[list[tuple[pd.DataFrame, list[pd.DataFrame]]]] = []


@contextmanager
def noting_cuts() -> Iterator[list[tuple[pd.DataFrame, list[pd.DataFrame]]]]:
    """Within the block, every :func:`row_slices` cut is noted in the list given: (the whole, its slices in order),
    each slice held (so that its ``id`` stays its own while the list lives). How a pool task learns which of its
    ranks' frames are still the slices of one bulk read (:func:`concat_alike`)."""
    got: list[tuple[pd.DataFrame, list[pd.DataFrame]]] = []
    _NOTED.append(got)
    try:
        yield got
    finally:
        _NOTED.remove(got)


@dataclass
class TaskScope:
    """The ranks of one pool task being read (:func:`task_scope`): the frames its bulk reads cut into files' frames
    (``cuts``: (whole, its slices in order), what :func:`concat_alike` is given) and what per-rank work computed for
    all of the task's ranks at once keeps for the others (``memo``), both gone with the task."""

    cuts: list[tuple[pd.DataFrame, list[pd.DataFrame]]]
    memo: dict[str, Any] = field(default_factory=dict)

    def whole_of(self, frame: pd.DataFrame | Rows) -> tuple[pd.DataFrame, list[pd.DataFrame]] | None:
        """The (whole, its slices) of ``cuts`` ``frame`` (as held: a frame or its Rows) is one of the slices of (the
        very object), or None."""
        for whole, parts in self.cuts:
            if any(p is frame for p in parts):
                return whole, parts
        return None


_TASKS: list[TaskScope] = []


@contextmanager
def task_scope(cuts: list[tuple[pd.DataFrame, list[pd.DataFrame]]]) -> Iterator[TaskScope]:
    """Within the block, :func:`active_task` is a :class:`TaskScope` of ``cuts`` (a pool task's ranks read one by one
    after their bulk reads: ingest/loader.prefetch)."""
    scope = TaskScope(cuts)
    _TASKS.append(scope)
    try:
        yield scope
    finally:
        _TASKS.remove(scope)


def active_task() -> TaskScope | None:
    """The innermost :func:`task_scope` in effect, or None."""
    return _TASKS[-1] if _TASKS else None


def joinable(frames: list[pd.DataFrame]) -> bool:
    """Whether the frames are alike enough to be row slices of their concatenation (Capture.join_tables)."""
    first = frames[0]
    columns, dtypes = first.columns, _dtypes(first)
    for df in frames:
        index = df.index
        if df.attrs or not (isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1):
            return False
        if df is not first and not (df.columns.equals(columns) and df.columns.dtype == columns.dtype and _dtypes(df) == dtypes):
            return False
    return True


def concat_alike(ranks: list[RankData], cuts: Iterable[tuple[pd.DataFrame, list[pd.DataFrame]]] = ()) -> dict[str, pd.DataFrame]:
    """Each table whose frames in ``ranks`` are alike (:func:`joinable`, held by more than one rank) concatenated in
    rank order (index 0..n-1): how the ranks of a pool task travel and are stored together (``parallel.Packed``,
    ``RankCache.put_many``). The ranks are not changed. ``cuts``: frames whose row slices some of the ranks' frames
    may be (:func:`noting_cuts`: a bulk read of their files): where a table's frames are all the slices of one of
    them, in order, that frame is their concatenation as it is (the same rows, columns and dtypes; nothing copied)."""
    noted = list(cuts)
    wholes = [whole for whole, _ in noted]
    where = slice_positions((k, parts) for k, (_, parts) in enumerate(noted))
    out: dict[str, pd.DataFrame] = {}
    for name in dict.fromkeys(n for r in ranks for n in r.tables):
        held = [entry(r.tables, name) for r in ranks if name in r.tables]  # (a bulk read's Rows left uncut)
        if len(held) < 2:
            continue
        whole = _cut_whole(held, wholes, where) if where else None
        if whole is None:
            whole = _stacked_whole(held)
        if whole is not None:
            out[name] = whole
            continue
        frames = [frame_of(x) for x in held]
        if joinable(frames):
            out[name] = pd.concat(frames, ignore_index=True)
    return out


def slice_positions(cuts: Iterable[tuple[int, list[pd.DataFrame] | list[Rows]]]) -> dict[int, tuple[int, int, int]]:
    """id(slice) -> (the entry it was cut from, its first row, its end row), for each (entry, its slices in order) of
    ``cuts``: how a frame is known to be a row slice of another (concat_alike, Capture.join_tables)."""
    where: dict[int, tuple[int, int, int]] = {}
    for k, parts in cuts:
        lo = 0
        for part in parts:
            where[id(part)] = (k, lo, lo + len(part))
            lo += len(part)
    return where


def _cut_whole(frames: list[pd.DataFrame | Rows], wholes: list[pd.DataFrame], where: dict[int, tuple[int, int, int]]) -> pd.DataFrame | None:
    """The frame of ``wholes`` whose row slices ``frames`` (as held) are, all of it in order, when it is one with the index
    0..n-1 and no ``attrs`` (as pd.concat(frames, ignore_index=True) would give it); else None."""
    got = where.get(id(frames[0]))
    if got is None or got[1] != 0:
        return None
    k, end = got[0], 0
    for f in frames:
        at = where.get(id(f))
        if at is None or at[0] != k or at[1] != end:
            return None
        end = at[2]
    whole = wholes[k]
    if end != len(whole) or not _plain(whole):
        return None
    return whole


def _stacked_whole(held: list[Any]) -> pd.DataFrame | None:
    """The concatenation of ``held`` (the ranks' :class:`Stacked` entries of one table, in order) where each is the
    Rows of the same frames in the same order (a bulk read per file kind) and each of those frames is all cut among
    them, in order (the rows of every one of its files): those frames laid end to end once, then their rows taken in
    the ranks' order, rank by rank and file by file. The same rows, values and dtypes as the ranks' frames concatenated
    (each rank's the concatenation of its parts) when the frames are alike (:func:`joinable`); None otherwise."""
    if not all(isinstance(x, Stacked) for x in held):
        return None
    first = held[0].parts
    wholes = [p.whole for p in first]
    ends = [0] * len(wholes)
    take: list[np.ndarray] = []
    for x in held:
        if len(x.parts) != len(wholes):
            return None
        for k, p in enumerate(x.parts):
            if p.whole is not wholes[k] or p.lo != ends[k]:
                return None
            ends[k] = p.hi
    if any(end != len(w) for end, w in zip(ends, wholes)) or len({id(w) for w in wholes}) != len(wholes):
        return None
    if not all(_plain(w) for w in wholes) or not joinable(wholes):
        return None
    offsets = np.cumsum([0] + [len(w) for w in wholes])
    for x in held:
        take.extend(np.arange(offsets[k] + p.lo, offsets[k] + p.hi) for k, p in enumerate(x.parts))
    stacked = pd.concat(wholes, ignore_index=True)
    out = stacked.take(np.concatenate(take)) if take else stacked
    out.index = pd.RangeIndex(len(out))
    return out


def pieces(parts: list[pd.DataFrame | Rows]) -> list[pd.DataFrame]:
    """``parts`` (entries) as frames to concatenate: each run of Rows of one frame, one after the other, as one row
    slice of it (the frame itself where the run is all of it), not a frame cut per rank; any other part its frame."""
    out: list[pd.DataFrame] = []
    run: list[Any] | None = None  # [whole, first row, end row]

    def flush() -> None:
        if run is not None:
            whole, lo, hi = run
            out.append(whole if lo == 0 and hi == len(whole) else whole.iloc[lo:hi])

    for p in parts:
        if isinstance(p, Rows) and run is not None and run[0] is p.whole and run[2] == p.lo:
            run[2] = p.hi
            continue
        flush()
        run = [p.whole, p.lo, p.hi] if isinstance(p, Rows) else None
        if run is None:
            out.append(p)
    flush()
    return out


def _plain(df: pd.DataFrame) -> bool:
    """Whether ``df`` is as ``pd.concat([df], ignore_index=True)`` would give it: the index 0..n-1, no attrs."""
    index = df.index
    return not df.attrs and isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1


def _runs(name: str, frames: list[pd.DataFrame | Rows], cut: list[tuple[str, Any, list[Any]]],
          where: dict[int, tuple[int, int, int]]) -> tuple[Any, list[tuple[pd.DataFrame | Rows, pd.DataFrame | Rows]]]:
    """``frames`` (the ranks' frames of table ``name``, as held: :func:`entry`) as pieces to concatenate (Capture.join_tables):
    each run of consecutive slices of one frame of ``cut`` (``where``: id of a slice -> (entry, first
    row, end row); ``cut`` holds the slices, so an id there is that slice's) becomes one row slice of
    that frame, any other frame stays itself. Returns (the frame of ``cut`` when ``frames`` are all its
    slices in order, else None; [(piece, the first rank's frame in it), ...])."""
    pieces: list[tuple[pd.DataFrame | Rows, pd.DataFrame | Rows]] = []
    run: list[Any] | None = None  # [entry, first row, end row, first frame]
    for f in frames:
        got = where.get(id(f))
        if got is not None and cut[got[0]][0] == name:
            k, lo, hi = got
            if run is not None and run[0] == k and run[2] == lo:
                run[2] = hi
                continue
            if run is not None:
                pieces.append((cut[run[0]][1].iloc[run[1] : run[2]], run[3]))
            run = [k, lo, hi, f]
            continue
        if run is not None:
            pieces.append((cut[run[0]][1].iloc[run[1] : run[2]], run[3]))
            run = None
        pieces.append((f, f))
    if run is not None:
        whole = cut[run[0]][1]
        if not pieces and run[1] == 0 and run[2] == len(whole):
            return whole, []
        pieces.append((whole.iloc[run[1] : run[2]], run[3]))
    return None, pieces


@dataclass
class Capture:
    """A whole capture: every rank's tables concatenated, plus metadata and provenance."""

    path: str
    ranks: list[RankData]
    notes: list[str] = field(default_factory=list)
    # how the ranks were read (executor, cache hits, which worker read each rank): provenance for
    # tests and benchmarks, not part of the report
    ingest: dict[str, Any] = field(default_factory=dict)
    _tables: dict[str, tuple[Any, ...]] = field(default_factory=dict, repr=False, compare=False)

    def table(self, name: str) -> pd.DataFrame:
        """The named canonical table over all ranks (empty with the right columns if none).

        The concatenation is kept while the ranks' frames are the same objects (metrics and charts ask
        for the same table many times; with a thousand ranks, concatenating each time dominates).
        Callers must not modify the frame returned (it may be a rank's own table).
        """
        parts = [x for r in self.ranks if name in r.tables and len(x := entry(r.tables, name))]
        if not parts:
            return TABLES[name].empty()
        if len(parts) == 1:
            return frame_of(parts[0])
        ident = tuple(id(p) for p in parts)
        kept = self._tables.get(name)
        if kept is not None and kept[0] == ident:
            return kept[1]
        got = pieces(parts)
        whole = got[0] if len(got) == 1 and _plain(got[0]) else pd.concat(got, ignore_index=True)
        self._tables[name] = (ident, whole, parts)  # parts held: their ids stay theirs
        return whole

    def join_tables(self, cut: list[tuple[str, Any, list[Any]]] | None = None) -> None:
        """Concatenate each table of the ranks now, as :meth:`table` would, and make every rank's frame a
        row slice of that concatenation: the rows are then held once, not once per rank and once more
        concatenated (a job of hundreds of ranks: a third of the analysis' memory).

        A table is joined only when every rank's frame has the same columns and dtypes, no ``attrs``
        and the row index 0..n-1, so that each slice is its rank's frame as it was (same values, dtypes
        and index) and the concatenation the one :meth:`table` gives. The slices are views of the
        concatenation (with pandas' copy-on-write, pandas 3, a write to one copies it first): like the
        frames :meth:`table` returns, they are read, never modified in place.

        ``cut``: tables already held as one frame whose row slices are ranks' frames (the rank cache's
        ``take_cut``: (name, whole, slices in order), each slice with the index 0..n-1 and the whole's
        columns and dtypes). When the ranks' frames of a table are exactly those slices in order, the
        whole is the concatenation as it is (nothing copied or cut again); a run of consecutive slices
        among other frames (ranks read again deep, or parsed) is concatenated as one piece."""
        where = slice_positions((k, parts) for k, (_, whole, parts) in enumerate(cut or ()) if not whole.attrs)
        for name in dict.fromkeys(n for r in self.ranks for n in r.tables):
            holders = [r for r in self.ranks if name in r.tables and len(entry(r.tables, name))]
            if len(holders) < 2:
                continue
            frames = [entry(r.tables, name) for r in holders]
            whole, pieces = _runs(name, frames, cut or [], where)
            if whole is not None:  # the ranks' frames are the slices of one frame, all of it in order
                self._tables[name] = (tuple(id(p) for p in frames), whole, frames)
                continue
            # a run's frames: its frame's columns and dtypes (Rows: its whole's, index and attrs as the cut's)
            if not joinable([f.whole if isinstance(f, Rows) else frame_of(f) for _, f in pieces]):
                continue
            whole = pd.concat([frame_of(f) for f, _ in pieces], ignore_index=True)
            parts = rows_of(whole, [len(f) for f in frames])
            for r, part in zip(holders, parts):
                hold(r, name, part)  # the rank's own frame is freed
            self._tables[name] = (tuple(id(p) for p in parts), whole, parts)

    def joined(self) -> list[tuple[str, Any, list[Any]]]:
        """The tables :meth:`join_tables` (or :meth:`table`) holds as one frame, as ``join_tables`` takes them again:
        (name, the concatenation, each rank's frame of it in order)."""
        return [(name, whole, parts) for name, (_, whole, parts) in self._tables.items()]

    @property
    def sources(self) -> list[Source]:
        return [s for r in self.ranks for s in r.sources]

    def rank_ids(self) -> list[int]:
        return [r.rank for r in self.ranks]
