"""MindSpore 1.x-2.2 (MindInsight-era) profiler folders: the flat ``profiler/`` directory.

MindInsight, which read these folders, is sunset; this module is their reader. One folder may hold
several ranks' files, told apart by the rank id in each file name (``step_trace_raw_{r}_...``).
:func:`find_legacy_ranks` lists those ranks, :func:`load_legacy_rank` reads one of them into a
:class:`~msdiag.model.RankData` of family ``mindspore_legacy``.

What maps where (units are converted here, at the boundary):

- ``step_trace_raw_{r}_detail_time.csv`` -> table ``profiler_steps`` (STEPS columns, source
  ``step_trace_raw``). Times are 10 ns system-counter ticks (MindSpore's HcclParser: "The unit of
  time stamp is 10ns. To convert it to us, you need to divide it by 100"). One row per step of the
  file's own ``step_num``; the trailing ``-`` row is the average, not a step. The step runs from the
  previous iteration's end (``start_point``) to its own end: ``total_us = (end_point -
  start_point) / 100``. ``iteration_interval`` (previous end -> FP start: the host/data gap) is the
  step's ``data_wait_us``; the first step has none (MindSpore sets its start to its FP point), so it
  is null there, not 0. The device runs the graph from FP start to the iteration end (``fp_and_bp``
  + ``tail``). Communication is the union of the per-op ``<op>_start_point/_end_point`` pairs;
  the part inside FP..BP overlaps backward compute (``overlapped_us``), the rest is exposed.
  ``computing_us = fp_and_bp + tail - exposed communication after FP``: an upper bound, since the
  file records no idle time inside FP..BP or the tail. ``free_us`` is the remainder (the interval
  before FP minus any communication in it). ``bubble_us`` is the union of Receive ops.
- ``hccl_raw_{r}.csv`` -> ``comm_ops``, ``comm_transport`` (per op and transport) and
  ``comm_links`` (per op and src-dst link). Units differ by version (see :func:`hccl_units`).
- ``output_timeline_data_{r}.txt`` (1.x: op, stream, start ms, duration ms) -> ``kernels``, with
  op types, shapes, dtypes and formats joined from ``framework_raw_{r}.csv``, AI CPU ops from
  ``aicpu_intermediate_{r}.csv`` and the communication ops of the step trace; every kernel gets
  the step whose span holds its start. Without it ``kernels`` stays empty (aicore_intermediate
  has no start times) and ``framework_raw`` shapes go to ``host_shapes``.
- ``aicore_intermediate_{r}_type.csv`` (else ``_detail.csv`` grouped by type) -> ``op_stats``
  (ms -> us; MindSpore 1.x writes these per step: its source file says "compute_time(ms, per-step)").
- ``minddata_pipeline_raw_{r}.csv`` -> ``data_pipeline`` (via ascend_csv), plus one consumer row
  (op_id -1) from ``device_queue_profiling_{r}.txt`` (else ``dataset_iterator_profiling_{r}.txt``):
  queue capacity, mean size, usage, the share of empty-queue samples (MindInsight's
  device-queue-empty warning) and the mean batch time (ms -> us).
- ``minddata_aicpu_{r}.txt`` (GetNext dequeue waits on the device) -> ``meta["get_next"]``.
- ``flops_{r}.txt``, ``flops_summary_{r}.json`` -> ``meta["flops"]`` (per op FLOPs; both header
  generations); the cube/vector split also fills ``kernels.cube_fops/vector_fops`` by op name.
- ``ascend_cluster_analyse_{mode}_{stages}_{size}_{r}.csv`` -> ``meta["cluster_analyse"]``.
- ``profiler_info_{r}.json`` -> ``meta["profiler_info"]`` (ms_version, parallel_mode, stage_num,
  rank_size); ``parallel_strategy_{r}.json`` -> ``meta["parallel_strategy"]`` (its config block).
- ``PROF_*`` sub-folders (2.1/2.2 kept the raw CANN output beside the flat files): when one holds
  this rank's device, its kernels, op statistics and device info are read with
  :mod:`msdiag.ingest.cann_msprof` (then output_timeline_data is not needed).

Files recognised but not read are listed in the rank's notes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from msdiag import model
from msdiag import units as units_mod
from msdiag.errors import ParseError
from msdiag.fmt import finite_float
from msdiag.ingest import ascend_csv, cann_msprof, metadata
from msdiag.ingest._csv import NA_VALUES, check_last_row, read_csv, to_float
from msdiag.ingest.engine import Ctx, Format, RankDir, Read, Src, listing, put, read_rank
from msdiag.ingest.paths import rank_number
from msdiag.ingest.steptrace import StepPoints, assign_steps, op_type_from_full_name, steps_from_points, table_frame
from msdiag.model import RankData, Source

FAMILY = "mindspore_legacy"

TICKS_PER_US = 100.0  # step_trace_raw: 10 ns system-counter ticks (the format's clock, not a unit of units.py)

# The 2.1/2.2 HCCL writer (AscendHCCLGenerator) replaced 1.x's HcclParser.
HCCL_NEW_VERSION = (2, 1)
HCCL_1X = "1.x"
HCCL_2X = "2.1-2.2"
# cost / sum of link times: ~1 when both are ms (1.x), ~1000 when cost is us (2.x); the cut is far from both
COST_RATIO_2X = 30.0

# ---------------------------------------------------------------------------------------------
# rank discovery
# ---------------------------------------------------------------------------------------------

# Files only MindSpore 1.x-2.2 writes at the top of its profiler folder (one group: the rank id).
LEGACY_RANK_FILES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"^step_trace_raw_(\d+)_detail_time\.csv$",
        r"^hccl_raw_(\d+)\.csv$",
        r"^framework_raw_(\d+)\.csv$",
        r"^aicore_intermediate_(\d+)_(?:detail|type)\.csv$",
        r"^aicpu_intermediate_(\d+)\.csv$",
        r"^minddata_pipeline_raw_(\d+)\.csv$",
        r"^device_queue_profiling_(\d+)\.txt$",
        r"^dataset_iterator_profiling_(\d+)\.txt$",
        r"^minddata_aicpu_(\d+)\.txt$",
        r"^flops_(\d+)\.txt$",
        r"^flops_summary_(\d+)\.json$",
        r"^output_timeline_data_(\d+)\.txt$",
        r"^ascend_cluster_analyse_[a-z]+-parallel_\d+_\d+_(\d+)\.csv$",
        r"^parallel_strategy_(\d+)\.json$",
        r"^ascend_timeline_display_(\d+)\.json$",
    )
)
# Shared with MindSpore 2.3+ (which keeps it beside ASCEND_PROFILER_OUTPUT/): a rank id, not a sign.
_PROFILER_INFO = re.compile(r"^profiler_info_(\d+)\.json$")
_CLUSTER_FILE = re.compile(r"^ascend_cluster_analyse_([a-z]+-parallel)_(\d+)_(\d+)_(\d+)\.csv$")

# Recognised, not read (why, for the notes).
NOT_READ: dict[str, str] = {
    r"^ascend_timeline_display_\d+\.json$": "MindInsight's display timeline (times relative to the first op; "
    "output_timeline_data holds the same ops with absolute times)",
    r"^ascend_timeline_summary_\d+\.json$": "a summary of the display timeline",
    r"^gpu_timeline_(?:display|summary)_\d+\.json$": "GPU display timeline (relative times)",
    r"^pipeline_profiling_\d+\.json$": "raw MindData pipeline samples (minddata_pipeline_raw holds them per op)",
    r"^minddata_cpu_utilization_\d+\.json$": "MindData CPU utilisation samples",
    r"^flops_scope_\d+\.json$": "FLOPs per scope for MindInsight's Sankey chart",
    r"^dynamic_shape_info_\d+\.json$": "dynamic-shape op list",
    r"^output_(?:format_data_hwts|op_compute_time(?:_detail)?|data_preprocess_aicpu)_\d+\.txt$": "intermediate "
    "text of the 1.x parser (the CSV files hold the same figures)",
    r"^step_trace_point_info\.json$": "names of the FP-start and BP-end ops",
}


def find_legacy_ranks(folder: Path) -> list[tuple[int, Path]]:
    """Rank ids of the MindSpore 1.x-2.2 profiler files directly in ``folder``, with the folder.

    Ranks come from the file-name suffixes (``step_trace_raw_{r}_detail_time.csv``, ``hccl_raw_{r}.csv``,
    ...), and from ``profiler_info_{r}.json`` once the folder is a legacy one. A folder with an
    ``ASCEND_PROFILER_OUTPUT/`` sub-folder is MindSpore 2.3+, not legacy: [] then. Sorted by rank.
    """
    folder = Path(folder)
    if not is_legacy_folder(folder):
        return []
    ranks: set[int] = set()
    for n in listing(folder):
        for pat in LEGACY_RANK_FILES + (_PROFILER_INFO,):
            m = pat.match(n)
            if m:
                r = rank_number(m.group(1))  # None: a number no job has as a rank (ingest/paths.py)
                if r is not None:
                    ranks.add(r)
                break
    return [(r, folder) for r in sorted(ranks)]


def is_legacy_folder(folder: Path) -> bool:
    """True when ``folder`` holds MindSpore 1.x-2.2 flat profiler files and no 2.3+ output.

    MindSpore 2.3/2.4 write the flat files too, beside ``rank-*_ascend_ms/`` folders (with
    ASCEND_PROFILER_OUTPUT/) in the same ``profiler/`` folder: those are complete, so such a folder
    is not a legacy one (nor is a 2.3+ rank folder itself).
    """
    folder = Path(folder)
    names = listing(folder)
    if not any(p.match(n) for n in names for p in LEGACY_RANK_FILES):
        return False
    return not any((folder / n / "ASCEND_PROFILER_OUTPUT").is_dir() for n in names + ["."])


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------




def _read(path: Path, required: Iterable[str] = ()) -> pd.DataFrame:
    df = read_csv(path, required=required)
    check_last_row(path)
    return df.reset_index(drop=True)


_COMM_NAME = re.compile(r"^stream_(\d+)_(\d+)_(.+)$")
_COMM_PARALLEL = re.compile(r"^stream_(\d+)_parallel_(\d+)$")
_P2P = re.compile(r"send|receive|recv", re.IGNORECASE)


def comm_name_parts(base: str) -> tuple[int | None, str, str | None]:
    """A step-trace communication column base -> (stream, op name, op type).

    'stream_24_0_AllReduce-op3143' -> (24, 'AllReduce-op3143', 'AllReduce'); the older
    'stream_10_parallel_0' (an op MindSpore could not name) -> (10, 'stream_10_parallel_0', None).
    """
    m = _COMM_NAME.match(base)
    if m and not _COMM_PARALLEL.match(base):
        name = m.group(3)
        return int(m.group(1)), name, op_type_from_full_name(name)
    m = _COMM_PARALLEL.match(base)
    if m:
        return int(m.group(1)), base, None
    return None, base, op_type_from_full_name(base)


# ---------------------------------------------------------------------------------------------
# step_trace_raw_{r}_detail_time.csv
# ---------------------------------------------------------------------------------------------

STEP_TRACE_REQUIRED = ("step_num", "start_point", "end_point")


@dataclass
class StepTrace:
    steps: pd.DataFrame  # STEPS
    points: list[StepPoints]
    comm_ops: list[tuple[int, str, float, float]]  # (step, column base, start_us, dur_us)
    notes: list[str]


def read_step_trace_raw(path: Path, rank: int) -> StepTrace:
    """step_trace_raw_{r}_detail_time.csv -> steps (see the module doc), the step points and the
    per-step communication ops (by their column base name, e.g. stream_24_0_AllReduce-op3143)."""
    df = _read(path, required=STEP_TRACE_REQUIRED)
    cols = list(df.columns)
    bases = [c[: -len("_start_point")] for c in cols if c.endswith("_start_point") and c != "start_point"]
    bases = [b for b in bases if f"{b}_end_point" in cols]
    notes: list[str] = []
    num: dict[str, pd.Series] = {}
    for c in ("start_point", "end_point", "fp_point", "bp_point", "iteration_interval", "total"):
        if c in cols:
            num[c] = to_float(df[c], path, c)
    comm_num = {b: (to_float(df[f"{b}_start_point"], path, f"{b}_start_point"),
                    to_float(df[f"{b}_end_point"], path, f"{b}_end_point")) for b in bases}
    step_raw = df["step_num"].astype("string").str.strip()
    points: list[StepPoints] = []
    comm_ops: list[tuple[int, str, float, float]] = []
    seen: set[int] = set()
    skipped: list[str] = []
    for i in range(len(df)):
        raw = step_raw.iloc[i]
        if raw is pd.NA or raw in NA_VALUES:
            continue  # the trailing '-' row: the average over the steps
        if not re.fullmatch(r"\d+", str(raw)):
            skipped.append(f"row {i + 2} (step_num {raw!r}: not a step number)")
            continue
        step = int(raw)
        start = num["start_point"].iloc[i]
        end = num["end_point"].iloc[i]
        if not (np.isfinite(start) and np.isfinite(end)) or end <= start or step <= 0:
            skipped.append(f"row {i + 2} (step {step}: start_point {start:.0f}, end_point {end:.0f}: no span)")
            continue
        if step in seen:
            skipped.append(f"row {i + 2} (step {step} again)")
            continue
        seen.add(step)
        fp = num["fp_point"].iloc[i] if "fp_point" in num else float("nan")
        bp = num["bp_point"].iloc[i] if "bp_point" in num else float("nan")
        interval = num["iteration_interval"].iloc[i] if "iteration_interval" in num else float("nan")
        if "total" in num and np.isfinite(num["total"].iloc[i]) and abs(num["total"].iloc[i] - (end - start)) > 1:
            notes.append(
                f"{path.name}: step {step}: total {num['total'].iloc[i]:.0f} is not end_point - start_point "
                f"{end - start:.0f} (ticks); the span is used"
            )
        fp_us = fp / TICKS_PER_US if np.isfinite(fp) and fp > 0 else None
        # The first step starts at its FP point (no previous iteration end): its data wait is unknown.
        first = fp_us is not None and abs(fp - start) < 1 and (not np.isfinite(interval) or interval == 0)
        wait = None if first or not np.isfinite(interval) else interval / TICKS_PER_US
        comm = []
        for b in bases:
            s, e = comm_num[b][0].iloc[i], comm_num[b][1].iloc[i]
            if np.isfinite(s) and np.isfinite(e) and s > 0 and e > s:  # 0: the op did not run in this step
                comm.append((b, s, e))
                comm_ops.append((step, b, s / TICKS_PER_US, (e - s) / TICKS_PER_US))
        points.append(
            StepPoints(
                step=step,
                start=start,
                end=end,
                fp=fp if np.isfinite(fp) and fp > 0 else None,
                bp=bp if np.isfinite(bp) and bp > 0 else None,
                data_wait_us=wait,
                comm=comm,
                scale=TICKS_PER_US,
            )
        )
    if skipped:
        notes.append(f"{path.name}: rows that are not steps were left out: {'; '.join(skipped)}")
    if points and points[0].data_wait_us is None and len(points) > 0:
        notes.append(
            f"{path.name}: step {points[0].step} starts at its FP point (no previous iteration end): "
            "its data wait is unknown"
        )
    return StepTrace(steps_from_points(rank, points, "step_trace_raw"), points, comm_ops, notes)


# ---------------------------------------------------------------------------------------------
# hccl_raw_{r}.csv
# ---------------------------------------------------------------------------------------------

HCCL_REQUIRED = ("step_num", "communication_cost", "wait_cost", "link_info", "communication_operator_cost")


def _version_tuple(v: Any) -> tuple[int, int] | None:
    m = re.match(r"^\s*(\d+)\.(\d+)", str(v)) if v is not None else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def hccl_units(rows: list[dict[str, Any]], ms_version: str | None) -> tuple[str, str]:
    """Which writer made hccl_raw: (HCCL_1X | HCCL_2X, how it was decided).

    1.x's HcclParser writes costs and waits in ms and every link as [time ms, size KB, bandwidth
    KB/s(, wait ms)], so an SDMA link's bandwidth is size/time x 1e3. 2.1/2.2's AscendHCCLGenerator
    writes costs and waits as raw us sums, SDMA bandwidth as size/time x 1e-3 (GB/s) and RDMA as KB/s.
    Decided by, in order: ``ms_version`` from profiler_info (< 2.1 is 1.x); the SDMA bandwidth's ratio
    to size/time (1e3 or 1e-3, unit-free); the step cost against the sum of its link times (equal in
    1.x, both ms; about 1000x in 2.x, us against ms). Undecidable: 1.x, said so.
    """
    v = _version_tuple(ms_version)
    if v is not None:
        return (HCCL_2X if v >= HCCL_NEW_VERSION else HCCL_1X), f"profiler_info ms_version {ms_version}"
    ratios: list[float] = []
    cost_ratios: list[float] = []
    for r in rows:
        link_time = 0.0
        for transports in (r["link_info"] or {}).values():
            for kind, vals in (transports or {}).items():
                if not isinstance(vals, list) or len(vals) < 3:
                    continue
                t, size, bw = (finite_float(x) for x in vals[:3])
                if t:
                    link_time += t
                if kind == "SDMA" and t and size and bw and t > 0 and size > 0 and bw > 0:
                    ratios.append(bw / (size / t))
        cost = finite_float(r["communication_cost"])
        if cost and link_time > 0:
            cost_ratios.append(cost / link_time)
    if ratios:
        q = float(np.median(ratios))
        kind = HCCL_1X if q > 1.0 else HCCL_2X
        return kind, f"SDMA bandwidth / (size / time) = {q:.3g} ({'KB/s: 1.x' if kind == HCCL_1X else 'GB/s: 2.1/2.2'})"
    if cost_ratios:
        q = float(np.median(cost_ratios))
        kind = HCCL_2X if q > COST_RATIO_2X else HCCL_1X
        return kind, f"communication_cost / sum of link times = {q:.3g} ({'ms/ms: 1.x' if kind == HCCL_1X else 'us/ms: 2.1/2.2'})"
    return HCCL_1X, "no ms_version and no link figures to tell the versions apart: 1.x units assumed"


def _json_cell(path: Path, row: int, col: str, cell: Any) -> Any:
    if cell is None or cell is pd.NA or (isinstance(cell, float) and math.isnan(cell)):
        return {}
    try:
        v = json.loads(str(cell))
    except (ValueError, RecursionError):
        raise ParseError(path, f"row {row}: {col} is not valid JSON ({str(cell)[:40]!r})") from None
    if not isinstance(v, dict):
        raise ParseError(path, f"row {row}: {col} should be a JSON object, found {type(v).__name__}")
    return v


@dataclass
class Hccl:
    comm_ops: pd.DataFrame
    comm_transport: pd.DataFrame
    comm_links: pd.DataFrame
    units: str
    units_how: str
    notes: list[str]


def read_hccl_raw(
    path: Path,
    rank: int,
    ms_version: str | None = None,
    step_trace_ops: list[tuple[int, str, float, float]] | None = None,  # (step, op, start_us, dur_us)
) -> Hccl:
    """hccl_raw_{r}.csv -> comm_ops, comm_transport and comm_links (times in us, sizes in MB of 1e6 B).

    Per step and op (communication_operator_cost ``{op: [step, cost, wait, link_info]}``):
    transit = cost minus RDMA notify waits (1.x counts them in RDMA link time), wait = wait_cost plus
    those RDMA waits, sync null (not recorded). start and elapse come from the step trace's
    ``<op>_start_point/_end_point`` of the same op and step when present, and idle = elapse - transit
    - wait then (null when that is negative: link times of parallel links add up beyond the span).
    Bandwidths are recomputed from size and time (GB/s = MB/ms), never read, since their unit
    changed between versions.
    """
    rows = _hccl_rows(path)
    units, how = hccl_units(rows, ms_version)
    cost_to_us = units_mod.US_PER_MS if units == HCCL_1X else 1.0
    spans = {(s, b): (lo, dur) for s, b, lo, dur in (step_trace_ops or [])}
    ops: list[dict[str, Any]] = []
    transport: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    negative_idle = 0
    for r in rows:
        for op, val in r["ops"].items():
            if not isinstance(val, list) or len(val) < 3:
                raise ParseError(path, f"step {r['step']}: op {op} should be [step, cost, wait, link_info], found {val!r}"[:200])
            step = int(val[0]) if re.fullmatch(r"\d+", str(val[0])) else r["step"]
            cost, wait = finite_float(val[1]), finite_float(val[2])
            _, name, op_type = comm_name_parts(op)
            row = {"rank": rank, "step": step, "category": "p2p" if _P2P.search(name) else "collective"}
            rdma_wait_ms = _op_links(val[3] if len(val) > 3 and isinstance(val[3], dict) else {},
                                     {**row, "op_type": op_type, "variant": name}, name, links, transport)
            rdma_wait_us = rdma_wait_ms * units_mod.US_PER_MS if units == HCCL_1X else 0.0
            transit = None if cost is None else max(0.0, cost * cost_to_us - rdma_wait_us)
            wait_us = None if wait is None else wait * cost_to_us + rdma_wait_us
            span = spans.get((step, op))
            start, elapse, idle = (None, None, None)
            if span is not None:
                start, elapse = span
                if transit is not None and wait_us is not None:
                    idle = elapse - transit - wait_us
                    if idle < 0:
                        negative_idle += 1
                        idle = None
            ops.append({**row, "op_name": name, "op_type": op_type, "start_us": start, "elapse_us": elapse,
                        "transit_us": transit, "wait_us": wait_us, "idle_us": idle})
    notes = []
    if negative_idle:
        notes.append(
            f"{path.name}: {negative_idle} op(s) whose link times add up beyond the op's span in the step trace "
            "(parallel links): their idle time is left null"
        )
    return Hccl(
        table_frame(model.COMM_OPS, ops),
        table_frame(model.COMM_TRANSPORT, transport),
        table_frame(model.COMM_LINKS, links),
        units,
        how,
        notes,
    )


def _hccl_rows(path: Path) -> list[dict[str, Any]]:
    """hccl_raw's step rows: step, communication_cost, link_info and the per-op costs (JSON cells)."""
    df = _read(path, required=HCCL_REQUIRED)
    step_raw = df["step_num"].astype("string").str.strip()
    rows: list[dict[str, Any]] = []
    for i in range(len(df)):
        raw = step_raw.iloc[i]
        if raw is pd.NA or raw in NA_VALUES:
            continue  # '-': the average row
        if not re.fullmatch(r"\d+", str(raw)):
            raise ParseError(path, f"row {i + 2}: step_num {raw!r} is not a step number")
        rows.append(
            {
                "step": int(raw),
                "communication_cost": df["communication_cost"].iloc[i],
                "link_info": _json_cell(path, i + 2, "link_info", df["link_info"].iloc[i]),
                "ops": _json_cell(path, i + 2, "communication_operator_cost", df["communication_operator_cost"].iloc[i]),
            }
        )
    return rows


def _op_links(link_info: dict[str, Any], link_row: dict[str, Any], name: str, links: list[dict[str, Any]],
              transport: list[dict[str, Any]]) -> float:
    """One op's links (``{"src-dst": {transport: [time ms, size KB, bandwidth, rdma wait ms]}}``) -> link
    rows and per-transport rows appended; returns its RDMA notify waits (ms)."""
    rdma_wait_ms = 0.0
    per_transport: dict[str, list[float]] = {}
    for link, tr in link_info.items():
        src, dst = _link_ends(link)
        for kind, vals in (tr or {}).items():
            if not isinstance(vals, list) or len(vals) < 2:
                continue
            t_ms, size_kb = finite_float(vals[0]), finite_float(vals[1])
            if kind == "RDMA" and len(vals) > 3 and finite_float(vals[3]):
                rdma_wait_ms += float(finite_float(vals[3]) or 0.0)
            # hccl_raw's KB are decimal (bytes / 1e3 in MindSpore's parsers): decimal MB
            size_mb = None if size_kb is None else size_kb * units_mod.MB_PER_KB_DECIMAL
            acc = per_transport.setdefault(kind, [0.0, 0.0])
            acc[0] += size_mb or 0.0
            acc[1] += t_ms or 0.0
            links.append({**link_row, "src": src, "dst": dst, "transport": kind, "size_mb": size_mb,
                          "time_us": None if t_ms is None else t_ms * units_mod.US_PER_MS,
                          "bandwidth_gbps": size_mb / t_ms if size_mb is not None and t_ms else None})
    for kind, (size_mb, t_ms) in per_transport.items():
        transport.append({"rank": link_row["rank"], "step": link_row["step"], "op_name": name, "transport": kind,
                          "size_mb": size_mb, "time_us": t_ms * units_mod.US_PER_MS,
                          "bandwidth_gbps": size_mb / t_ms if t_ms > 0 else None})
    return rdma_wait_ms


def _link_ends(link: str) -> tuple[int | None, int | None]:
    m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", str(link))
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


# ---------------------------------------------------------------------------------------------
# framework_raw_{r}.csv, output_timeline_data_{r}.txt, aicpu_intermediate_{r}.csv -> kernels
# ---------------------------------------------------------------------------------------------

FRAMEWORK_NAME = ("full_op_name", "full_kernel_name")
FRAMEWORK_TYPE = ("op_type", "kernel_type")


def read_framework_raw(path: Path) -> dict[str, dict[str, Any]]:
    """framework_raw_{r}.csv -> {full op name: {type, stream, block_dim, input_shapes, input_dtypes,
    input_formats, output_shapes, output_dtypes}}.

    Both header generations (full_kernel_name/kernel_type, full_op_name/op_type). op_info is JSON
    ``{"input_0": {"format", "data_type", "shape": "a,b"}, ..., "output_0": {...}}``; shapes join
    with ';' like kernel_details ('' for a scalar), dtypes lose MindSpore's ``NUMBER_TYPE_`` prefix.
    """
    df = _read(path, required=("op_info",))
    name_col = next((c for c in FRAMEWORK_NAME if c in df.columns), None)
    type_col = next((c for c in FRAMEWORK_TYPE if c in df.columns), None)
    if name_col is None:
        raise ParseError(path, f"missing column {' or '.join(FRAMEWORK_NAME)}; found: {', '.join(df.columns[:10])}")
    out: dict[str, dict[str, Any]] = {}
    stream = to_float(df["stream_id"], path, "stream_id") if "stream_id" in df.columns else None
    block = to_float(df["block_dim"], path, "block_dim") if "block_dim" in df.columns else None
    for i in range(len(df)):
        name = df[name_col].iloc[i]
        if name is None or name is pd.NA or (isinstance(name, float) and math.isnan(name)):
            continue
        info = _json_cell(path, i + 2, "op_info", df["op_info"].iloc[i])
        ins = _io(info, "input")
        outs = _io(info, "output")
        typ = df[type_col].iloc[i] if type_col else None
        out[str(name)] = {
            "type": None if typ is None or typ is pd.NA or (isinstance(typ, float) and math.isnan(typ)) else str(typ),
            "stream": None if stream is None or not np.isfinite(stream.iloc[i]) else int(stream.iloc[i]),
            "block_dim": None if block is None or not np.isfinite(block.iloc[i]) else int(block.iloc[i]),
            "input_shapes": ";".join(x[0] for x in ins) if ins else None,
            "input_dtypes": ";".join(x[1] for x in ins) if ins else None,
            "input_formats": ";".join(x[2] for x in ins) if ins else None,
            "output_shapes": ";".join(x[0] for x in outs) if outs else None,
            "output_dtypes": ";".join(x[1] for x in outs) if outs else None,
        }
    return out


def _io(info: dict[str, Any], kind: str) -> list[tuple[str, str, str]]:
    items = []
    for k, v in info.items():
        m = re.fullmatch(rf"{kind}_(\d+)", str(k))
        if m and isinstance(v, dict):
            shape = str(v.get("shape", "")).strip().strip("[]()").replace(" ", "")
            dtype = str(v.get("data_type", "")).replace("NUMBER_TYPE_", "")
            items.append((int(m.group(1)), shape, dtype, str(v.get("format", ""))))
    return [(s, d, f) for _, s, d, f in sorted(items)]


TIMELINE_START = {"start_time(ms)": units_mod.US_PER_MS, "start_time(us)": 1.0}
TIMELINE_DUR = {"duration(ms)": units_mod.US_PER_MS, "duration(us)": 1.0}


def read_output_timeline_data(path: Path) -> pd.DataFrame:
    """output_timeline_data_{r}.txt (``op_name, stream_id, start_time(ms), duration(ms)``) -> a frame of
    name, stream, start_us, dur_us (absolute device clock). The unit is taken from the header
    (MindSpore 2.3/2.4's docs give start_time in us)."""
    df = _read(path, required=("op_name", "stream_id"))
    start = next((c for c in TIMELINE_START if c in df.columns), None)
    dur = next((c for c in TIMELINE_DUR if c in df.columns), None)
    if start is None or dur is None:
        raise ParseError(path, f"missing column start_time(ms|us) or duration(ms|us); found: {', '.join(df.columns)}")
    return pd.DataFrame(
        {
            "name": df["op_name"].astype("string").str.strip(),
            "stream": to_float(df["stream_id"], path, "stream_id"),
            "start_us": to_float(df[start], path, start) * TIMELINE_START[start],
            "dur_us": to_float(df[dur], path, dur) * TIMELINE_DUR[dur],
        }
    )


AICPU_REQUIRED = ("kernel_type", "run_start", "run_end")
# AI CPU ops that wait for or mark the input data rather than compute
DATA_OPS = frozenset({"GetNext", "InitData", "EndOfSequence", "InitDataSetQueue"})


def read_aicpu_intermediate(path: Path) -> pd.DataFrame:
    """aicpu_intermediate_{r}.csv -> name, start_us, dur_us of AI CPU ops (run_start/run_end are us on
    the device clock: GetNext's run_end - run_start equals its duration in the display timeline)."""
    df = _read(path, required=AICPU_REQUIRED)
    s = to_float(df["run_start"], path, "run_start")
    e = to_float(df["run_end"], path, "run_end")
    return pd.DataFrame({"name": df["kernel_type"].astype("string").str.strip(), "start_us": s, "dur_us": e - s})


def build_kernels(
    rank: int,
    timeline: pd.DataFrame | None,
    framework: dict[str, dict[str, Any]],
    aicpu: pd.DataFrame | None,
    step_trace: StepTrace | None,
) -> pd.DataFrame:
    """KERNELS rows: AI Core ops (output_timeline_data + framework_raw), AI CPU ops, and the step
    trace's communication ops; each with the step whose span holds its start."""
    parts: list[pd.DataFrame] = []
    if timeline is not None and len(timeline):
        names = timeline["name"].astype(object)
        info = [framework.get(str(n), {}) for n in names]
        d: dict[str, Any] = {
            "name": names.map(lambda n: str(n).rsplit("/", 1)[-1] if n is not None else None),
            "type": [i.get("type") or op_type_from_full_name(n) for i, n in zip(info, names)],
            "stream": timeline["stream"],
            "core": "AI_CORE",
            "kind": "compute",
            "start_us": timeline["start_us"],
            "dur_us": timeline["dur_us"],
        }
        for c in ("block_dim", "input_shapes", "input_dtypes", "input_formats", "output_shapes", "output_dtypes"):
            d[c] = [i.get(c) for i in info]
        parts.append(pd.DataFrame(d))
    if aicpu is not None and len(aicpu) and parts:
        typ = aicpu["name"].astype(object)
        parts.append(
            pd.DataFrame(
                {
                    "name": typ,
                    "type": typ,
                    "core": "AI_CPU",
                    "kind": ["other" if t in DATA_OPS else "compute" for t in typ],
                    "start_us": aicpu["start_us"],
                    "dur_us": aicpu["dur_us"],
                }
            )
        )
    if step_trace is not None and step_trace.comm_ops and parts:
        rows = []
        for _step, base, s, dur in step_trace.comm_ops:
            stream, name, op_type = comm_name_parts(base)
            rows.append({"name": name, "type": op_type, "stream": stream, "core": "HCCL", "kind": "communication",
                         "start_us": s, "dur_us": dur})
        parts.append(pd.DataFrame(rows))
    if not parts:
        return model.KERNELS.empty()
    df = pd.concat(parts, ignore_index=True).sort_values("start_us", kind="stable").reset_index(drop=True)
    steps = step_trace.steps if step_trace is not None else model.STEPS.empty()
    df["step"] = assign_steps(df["start_us"].to_numpy(float), steps)
    df["rank"] = rank
    return table_frame(model.KERNELS, df.to_dict("records"))


def host_shapes_from_framework(rank: int, framework: dict[str, dict[str, Any]]) -> pd.DataFrame:
    rows = [
        {"rank": rank, "op_type": v.get("type") or op_type_from_full_name(k), "op_name": k,
         "input_shapes": v.get("input_shapes") or ""}
        for k, v in framework.items()
    ]
    return table_frame(model.HOST_SHAPES, rows)


# ---------------------------------------------------------------------------------------------
# aicore_intermediate_{r}_type / _detail -> op_stats
# ---------------------------------------------------------------------------------------------

AICORE_TYPE = ("kernel_type", "op_type")
AICORE_TIME = ("total_time", "execution_time", "task_time")  # ms (task_time: MindSpore 2.3/2.4's spelling)
AICORE_DETAIL_TIME = ("execution_time", "task_duration")


def read_aicore_type(path: Path, rank: int) -> pd.DataFrame:
    """aicore_intermediate_{r}_type.csv (``kernel_type,total_time,execution_frequency,percent``,
    ``op_type,execution_time,execution_frequency,percent`` or 2.3/2.4's ``kernel_type,task_time,...``;
    ms) -> OP_STATS, core AI_CORE."""
    df = _read(path, required=("execution_frequency",))
    tcol = next((c for c in AICORE_TYPE if c in df.columns), None)
    vcol = next((c for c in AICORE_TIME if c in df.columns), None)
    if tcol is None or vcol is None:
        raise ParseError(path, f"missing column {' or '.join(AICORE_TYPE)} / {' or '.join(AICORE_TIME)}; "
                               f"found: {', '.join(df.columns)}")
    total = to_float(df[vcol], path, vcol) * units_mod.US_PER_MS
    count = to_float(df["execution_frequency"], path, "execution_frequency")
    pct = to_float(df["percent"], path, "percent") if "percent" in df.columns else None
    return model.OP_STATS.frame(
        {
            "rank": pd.Series([rank] * len(df), dtype=model.INT),
            "op_type": df[tcol].astype("string").str.strip(),
            "core": pd.Series(["AI_CORE"] * len(df), dtype=model.STR),
            "count": count.round().astype(model.INT),
            "total_us": total,
            "avg_us": total / count.where(count > 0),
            "ratio": None if pct is None else pct / 100.0,
        }
    )


def read_aicore_detail(path: Path, rank: int) -> pd.DataFrame:
    """aicore_intermediate_{r}_detail.csv (``full_kernel_time|full_op_name|full_kernel_name,
    execution_time|task_duration[,execution_frequency]``, ms) grouped by op type -> OP_STATS (used when
    the _type file is absent)."""
    df = _read(path)
    ncol = next((c for c in ("full_op_name", "full_kernel_time", "full_kernel_name") if c in df.columns), None)
    tcol = next((c for c in AICORE_DETAIL_TIME if c in df.columns), None)
    if ncol is None or tcol is None:
        raise ParseError(path, f"missing column full_op_name / full_kernel_name or execution_time / task_duration; "
                               f"found: {', '.join(df.columns)}")
    t = to_float(df[tcol], path, tcol) * units_mod.US_PER_MS
    f = to_float(df["execution_frequency"], path, "execution_frequency") if "execution_frequency" in df.columns else pd.Series([1.0] * len(df))
    g = pd.DataFrame({"op_type": [op_type_from_full_name(n) for n in df[ncol]], "t": t, "f": f}).groupby("op_type", sort=True)
    agg = g.agg(total=("t", "sum"), count=("f", "sum"), tmin=("t", "min"), tmax=("t", "max")).reset_index()
    tot = float(agg["total"].sum())
    return model.OP_STATS.frame(
        {
            "rank": pd.Series([rank] * len(agg), dtype=model.INT),
            "op_type": agg["op_type"].astype("string"),
            "core": pd.Series(["AI_CORE"] * len(agg), dtype=model.STR),
            "count": agg["count"].round().astype(model.INT),
            "total_us": agg["total"],
            "avg_us": agg["total"] / agg["count"].where(agg["count"] > 0),
            "ratio": agg["total"] / tot if tot > 0 else None,
        }
    )


# ---------------------------------------------------------------------------------------------
# device_queue / dataset_iterator profiling, minddata_aicpu -> data_pipeline, meta
# ---------------------------------------------------------------------------------------------

# MindSpore's ProfilingType (TIME, CONNECTOR_DEPTH) and ProfilingTimeSubType (PIPELINE_TIME,
# TDT_PUSH_TIME, BATCH_TIME); times come from ProfilingTime::GetCurMilliSecond: ms.
QUEUE_TIME, QUEUE_DEPTH = 0, 1
TIME_PIPELINE, TIME_PUSH, TIME_BATCH = 0, 1, 2
DEVICE_QUEUE_TYPE = "DeviceQueue"
ITERATOR_TYPE = "DatasetIterator"


def read_queue_profiling(path: Path, rank: int, op_type: str) -> pd.DataFrame:
    """device_queue_profiling_{r}.txt / dataset_iterator_profiling_{r}.txt -> one DATA_PIPELINE row (op_id -1).

    Lines ``type sub step value [end_time_ms]``: type 1 (connector depth) has sub = queue capacity
    and value = its size at that batch; type 0 (time) has sub 0 pipeline, 1 push, 2 batch time, in
    ms. queue_empty_share = share of depth samples with size 0 (MindInsight's device-queue-empty
    figure), queue_usage = mean size / capacity, per_batch_us = mean batch time.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    if not text.strip():
        raise ParseError(path, "the file is empty")
    sizes: list[float] = []
    caps: list[float] = []
    batch: list[float] = []
    for ln, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 4:
            raise ParseError(path, f"line {ln} has {len(parts)} of the 4 fields 'type sub step value' (truncated?): {line!r}")
        try:
            kind, sub, _step, value = int(parts[0]), float(parts[1]), int(parts[2]), float(parts[3])
        except ValueError:
            raise ParseError(path, f"line {ln} is not 'type sub step value' numbers: {line[:60]!r}") from None
        if kind == QUEUE_DEPTH:
            caps.append(sub)
            sizes.append(value)
        elif kind == QUEUE_TIME and int(sub) == TIME_BATCH:
            batch.append(value)
    row: dict[str, Any] = {"rank": rank, "op_id": ascend_csv.MINDDATA_CONSUMER_OP_ID, "op_type": op_type}
    if sizes:
        cap = float(np.median(caps))
        row["queue_capacity"] = cap
        row["queue_avg_size"] = float(np.mean(sizes))
        row["queue_usage"] = float(np.mean([s / c for s, c in zip(sizes, caps) if c > 0])) if any(c > 0 for c in caps) else None
        row["queue_empty_share"] = sum(1 for s in sizes if s == 0) / len(sizes)
    if batch:
        row["per_batch_us"] = float(np.mean(batch)) * units_mod.US_PER_MS
    return table_frame(model.DATA_PIPELINE, [row])


def read_minddata_aicpu(path: Path) -> dict[str, Any]:
    """minddata_aicpu_{r}.txt (``GetNext_dequeue_wait start end queue_size``, us) -> GetNext stats:
    count, empty_count and empty_share (queue size 0 when the device dequeued), mean and total wait us."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    if not text.strip():
        raise ParseError(path, "the file is empty")
    waits: list[float] = []
    sizes: list[int] = []
    for ln, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or not parts[0].startswith("GetNext"):
            continue
        if len(parts) < 4:
            raise ParseError(path, f"line {ln} has {len(parts)} of the 4 fields 'name start end queue_size' (truncated?)")
        try:
            waits.append(float(parts[2]) - float(parts[1]))
            sizes.append(int(parts[3]))
        except ValueError:
            raise ParseError(path, f"line {ln} is not 'name start end queue_size' numbers: {line[:60]!r}") from None
    n = len(sizes)
    empty = sum(1 for s in sizes if s == 0)
    return {
        "count": n,
        "empty_count": empty,
        "empty_share": empty / n if n else None,
        "wait_us_mean": float(np.mean(waits)) if waits else None,
        "wait_us_total": float(np.sum(waits)) if waits else None,
        "source": path.name,
    }


# ---------------------------------------------------------------------------------------------
# flops, cluster analyse, parallel strategy
# ---------------------------------------------------------------------------------------------


def read_flops(path: Path) -> dict[str, Any]:
    """flops_{r}.txt -> {"header", "per_op": {full name: FLOPs}, "cube_per_op", "vector_per_op", "total_flops"}.

    Headers: 1.x ``op_full_name, MFLOPs(10^6), GFLOPS(10^9), FLOPS utilization(%)`` and its older
    spelling ``full_kernel_name, FLOPs, FLOPS, FLOPS utilization`` (the same FlopsParser: MFLOPs per
    op, counted once per op from the AI Core PMU); 2.1/2.2 ``op_full_name, MFLOPs(10^6 cube),
    GFLOPS(10^9 cube), MFLOPs(10^6 vector), GFLOPS(10^9 vector)`` (one row per launch, from
    op_summary cube_fops / vector_fops); and a cube/vector variant with utilisation columns. FLOPs
    are returned in FLOPs (MFLOPs x 1e6); an op listed several times keeps its first figure.
    """
    df = _read(path)
    cols = list(df.columns)
    if not cols:
        raise ParseError(path, "no header")
    name_col = cols[0]
    cube = next((c for c in cols if c.startswith("MFLOPs") and "cube" in c), None)
    vec = next((c for c in cols if c.startswith("MFLOPs") and "vector" in c), None)
    total = next((c for c in cols if c in ("MFLOPs(10^6)", "FLOPs")), None)
    if cube is None and total is None:
        raise ParseError(path, f"no FLOPs column (MFLOPs(10^6), FLOPs or MFLOPs(10^6 cube)); found: {', '.join(cols)}")
    names = df[name_col].astype("string").str.strip()
    out: dict[str, Any] = {"source": path.name, "unit": "FLOPs (file: MFLOPs)"}
    if cube is not None:
        c = to_float(df[cube], path, cube) * 1e6
        v = to_float(df[vec], path, vec) * 1e6 if vec else pd.Series([0.0] * len(df))
        out["header"] = "cube/vector (2.1/2.2 generation)"
        out["cube_per_op"] = _first(names, c)
        out["vector_per_op"] = _first(names, v)
        out["per_op"] = {k: out["cube_per_op"][k] + (out["vector_per_op"].get(k) or 0.0) for k in out["cube_per_op"]}
    else:
        assert total is not None
        t = to_float(df[total], path, total) * 1e6
        out["header"] = "total (1.x generation)"
        out["per_op"] = _first(names, t)
    out["total_flops"] = float(sum(v for v in out["per_op"].values() if v is not None))
    return out


def _first(names: pd.Series, vals: pd.Series) -> dict[str, float]:
    d: dict[str, float] = {}
    for n, v in zip(names, vals):
        if n is pd.NA or n is None or n in d or not np.isfinite(v):
            continue
        d[str(n)] = float(v)
    return d


def read_flops_summary(path: Path) -> dict[str, Any]:
    """flops_summary_{r}.json: {FLOPs, FLOPS, FLOPS_Utilization} (1.x: MFLOPs, GFLOPS, %) or
    {cube_FLOPs, cube_FLOPS, vec_FLOPs, vec_FLOPS} (2.1/2.2: MFLOPs, GFLOPS). Returned as written
    plus total_flops in FLOPs."""
    raw = metadata.load_json(path)
    if not isinstance(raw, dict):
        raise ParseError(path, f"expected a JSON object, found {type(raw).__name__}")
    out: dict[str, Any] = {"raw": raw}
    if "FLOPs" in raw and finite_float(raw["FLOPs"]) is not None:
        out["total_flops"] = float(raw["FLOPs"]) * 1e6
    elif "cube_FLOPs" in raw:
        out["total_flops"] = (float(finite_float(raw.get("cube_FLOPs")) or 0.0) + float(finite_float(raw.get("vec_FLOPs")) or 0.0)) * 1e6
    return out


def read_cluster_analyse(path: Path) -> dict[str, Any]:
    """ascend_cluster_analyse_{mode}_{stages}_{ranksize}_{r}.csv -> {mode, stage_num, rank_size, unit,
    columns, rows}.

    MindSpore 1.x-2.2 writes ``computation_time, communication_alone_time[, stage_time,
    receive_alone_time, collective_communication_alone_time]`` (pipeline) in ms, one row per step then
    the average; older files (MindInsight samples) hold ``iteration_interval, fp_and_bp, tail`` in
    10 ns ticks. Values as written; ``unit`` says which.
    """
    m = _CLUSTER_FILE.match(path.name)
    df = _read(path)
    cols = list(df.columns)
    rows = [{c: finite_float(to_float(df[c], path, c).iloc[i]) for c in cols} for i in range(len(df))]
    unit = "10 ns ticks" if "fp_and_bp" in cols else "ms"
    return {
        "file": path.name,
        "mode": m.group(1) if m else None,
        "stage_num": int(m.group(2)) if m else None,
        "rank_size": int(m.group(3)) if m else None,
        "unit": unit,
        "columns": cols,
        "rows": rows,
    }


def read_parallel_strategy(path: Path) -> dict[str, Any]:
    """parallel_strategy_{r}.json (MindInsight's parallel view) -> its ``config`` block (rankId,
    stageId, parallelType, stageDevices); the graph is not kept."""
    raw = metadata.load_json(path)
    if not isinstance(raw, dict):
        raise ParseError(path, f"expected a JSON object, found {type(raw).__name__}")
    cfg = raw.get("config")
    if not isinstance(cfg, dict):
        raise ParseError(path, "no 'config' object (rankId, stageId, parallelType)")
    return cfg


# ---------------------------------------------------------------------------------------------
# load one rank
# ---------------------------------------------------------------------------------------------


RANK_FROM = "file-name suffixes of the MindSpore 1.x-2.2 profiler files"


def _step_trace(ctx: Ctx) -> StepTrace | None:
    found: StepTrace | None = ctx.state.get("step_trace")
    return found


def _r_step_trace(p: Path, ctx: Ctx) -> Read:
    st = read_step_trace_raw(p, ctx.rank)
    return Read(replace={"profiler_steps": st.steps}, notes=st.notes, state={"step_trace": st}, rows=len(st.steps))


def _r_hccl(p: Path, ctx: Ctx) -> Read:
    st = _step_trace(ctx)
    h = read_hccl_raw(p, ctx.rank, ctx.info.framework_version, st.comm_ops if st else None)
    return Read(tables={"comm_ops": h.comm_ops, "comm_transport": h.comm_transport, "comm_links": h.comm_links},
                meta={"hccl_units": {"writer": h.units, "how": h.units_how}}, notes=h.notes, rows=len(h.comm_ops))


def _r_aicore_detail(p: Path, ctx: Ctx) -> Read:
    if len(ctx.table("op_stats")):
        return Read(rows=None)  # the _type file already gave the per-type figures
    return Read(tables={"op_stats": read_aicore_detail(p, ctx.rank)})


def _r_minddata(p: Path, ctx: Ctx) -> Read:
    return Read(tables={"data_pipeline": ascend_csv.read_minddata_pipeline(p, None, ctx.rank)})


def _r_device_queue(p: Path, ctx: Ctx) -> Read:
    return Read(state={"queue_row": read_queue_profiling(p, ctx.rank, DEVICE_QUEUE_TYPE)}, rows=1)


def _r_iterator(p: Path, ctx: Ctx) -> Read:
    row = read_queue_profiling(p, ctx.rank, ITERATOR_TYPE)
    if ctx.state.get("queue_row") is None:  # MindInsight reads device_queue_profiling first
        return Read(state={"queue_row": row}, rows=1)
    return Read(notes=[f"{p.name}: not used: device_queue_profiling holds the queue the device reads (MindInsight's choice)"],
                rows=1)


def _r_minddata_aicpu(p: Path, ctx: Ctx) -> Read:
    g = read_minddata_aicpu(p)
    return Read(meta={"get_next": g}, rows=int(g["count"]))


def _r_flops(p: Path, ctx: Ctx) -> Read:
    f = read_flops(p)
    return Read(state={"flops": f}, meta={"flops": {**ctx.rd.meta.get("flops", {}), **f}}, rows=len(f["per_op"]))


def _r_flops_summary(p: Path, ctx: Ctx) -> Read:
    return Read(meta={"flops": {**ctx.rd.meta.get("flops", {}), "summary": read_flops_summary(p)}}, rows=None)


def _r_cluster(p: Path, ctx: Ctx) -> Read:
    ca = read_cluster_analyse(p)
    return Read(meta={"cluster_analyse": [*ctx.rd.meta.get("cluster_analyse", []), ca]}, rows=len(ca["rows"]))


LEGACY_SOURCES: tuple[Src, ...] = (
    dataclasses.replace(metadata.PROFILER_INFO,
                        absent="no profiler_info (MindSpore 1.x writes none): version and parallel settings unknown"),
    Src("step_trace_raw_{rank}_detail_time.csv", read=_r_step_trace, core=True,
        absent="no step_trace_raw: no step rows (the step trace is written in graph mode on Ascend/GPU)"),
    Src("framework_raw_{rank}.csv", parse=read_framework_raw, keep="framework",
        absent="no framework_raw: op types and shapes unknown"),
    Src("output_timeline_data_{rank}.txt", parse=read_output_timeline_data, keep="timeline",
        absent="no output_timeline_data (1.x intermediate file): no kernel launches with start times"),
    Src("aicpu_intermediate_{rank}.csv", parse=read_aicpu_intermediate, keep="aicpu", absent="no AI CPU ops recorded"),
    Src("hccl_raw_{rank}.csv", read=_r_hccl, absent="no hccl_raw: a single-device job, or HCCL profiling off"),
    Src("aicore_intermediate_{rank}_type.csv", "op_stats", rows=read_aicore_type, absent="no AI Core op statistics"),
    Src("aicore_intermediate_{rank}_detail.csv", "op_stats", read=_r_aicore_detail, absent="no AI Core per-op times"),
    Src("minddata_pipeline_raw_{rank}.csv", "data_pipeline", read=_r_minddata,
        absent="MindData pipeline profiling was off, or no mindspore.dataset pipeline"),
    Src("device_queue_profiling_{rank}.txt", read=_r_device_queue,
        absent="no device queue profile (dataset not sunk to the device, or MindData profiling off)"),
    Src("dataset_iterator_profiling_{rank}.txt", read=_r_iterator,
        absent="no dataset iterator profile (data sunk to the device, or MindData profiling off)"),
    Src("minddata_aicpu_{rank}.txt", read=_r_minddata_aicpu, absent="no GetNext records on the device"),
    Src("flops_{rank}.txt", read=_r_flops, absent="no FLOPs file (AI Core PMU FLOPs were not collected)"),
    Src("flops_summary_{rank}.json", read=_r_flops_summary, absent="no FLOPs summary"),
    Src("parallel_strategy_{rank}.json", parse=read_parallel_strategy, meta="parallel_strategy",
        absent="no parallel strategy view"),
    # the file name carries the parallel mode, the stage count and the rank size
    Src("ascend_cluster_analyse_*_{rank}.csv", read=_r_cluster, glob="ascend_cluster_analyse_*_{rank}.csv",
        pattern=r"ascend_cluster_analyse_[a-z]+-parallel_\d+_\d+_{rank}\.csv",
        absent="no cluster step analysis (written for Ascend graph-mode jobs with HCCL)"),
)


def _finish(rd: RankData, ctx: Ctx) -> None:
    """Join what the sources gave: the MindData consumer row, the PROF_* beside, the kernels."""
    queue_row = ctx.state.get("queue_row")
    if queue_row is not None:  # MindData: the pipeline ops plus the consumer row from the queue profile
        dp = rd.table("data_pipeline")
        dp = dp[(dp["op_id"] != ascend_csv.MINDDATA_CONSUMER_OP_ID).fillna(True).to_numpy()]
        rd.tables["data_pipeline"] = pd.concat([dp, queue_row], ignore_index=True) if len(dp) else queue_row
    _merge_prof(rd, ctx)  # 2.1/2.2: raw CANN output kept in PROF_* beside the flat files
    _kernels(rd, ctx)
    framework = ctx.state.get("framework")
    if framework and not len(rd.table("kernels")):
        rd.tables["host_shapes"] = host_shapes_from_framework(rd.rank, framework)
        rd.notes.append(
            f"framework_raw_{rd.rank}.csv: op shapes are kept as host_shapes: no kernel launches to attach them to "
            "(output_timeline_data absent)"
        )
    if not len(rd.tables.get("profiler_steps", model.STEPS.empty())) and not len(rd.table("kernels")):
        rd.notes.append("no step_trace_raw and no kernel timeline: no step rows for this rank")
    not_read = sorted(
        n for n in listing(ctx.folder)
        if any(re.match(p, n) for p in NOT_READ) and _rank_of(n) in (None, rd.rank)
    )
    if not_read:
        rd.notes.append("recognised, not read: " + "; ".join(f"{n} ({_why_not_read(n)})" for n in not_read))


def _kernels(rd: RankData, ctx: Ctx) -> None:
    """Kernels from the 1.x timeline text when no PROF_ output gave them; FLOPs per op joined."""
    if not len(rd.table("kernels")):
        k = build_kernels(rd.rank, ctx.state.get("timeline"), ctx.state.get("framework", {}), ctx.state.get("aicpu"),
                          _step_trace(ctx))
        if len(k):
            rd.tables["kernels"] = k
            rd.info.kernels_from = f"output_timeline_data_{rd.rank}.txt + framework_raw + aicpu_intermediate + step trace"
    k = rd.table("kernels")
    flops = ctx.state.get("flops")
    if len(k) and flops and "cube_per_op" in flops and k["cube_fops"].isna().all():
        full = _full_names(k, ctx.state.get("timeline"))
        k = k.copy()
        k["cube_fops"] = pd.Series([flops["cube_per_op"].get(n) for n in full], dtype="float64")
        k["vector_fops"] = pd.Series([flops["vector_per_op"].get(n) for n in full], dtype="float64")
        k.loc[k["kind"] != "compute", ["cube_fops", "vector_fops"]] = np.nan
        rd.tables["kernels"] = k


def _full_names(k: pd.DataFrame, timeline: pd.DataFrame | None) -> list[str | None]:
    """Full op names of kernel rows (the timeline keeps full names; kernels keep the last part)."""
    if timeline is None:
        return [None if pd.isna(n) else str(n) for n in k["name"]]
    by_last: dict[str, str] = {}
    for n in timeline["name"]:
        if n is not pd.NA and n is not None:
            by_last.setdefault(str(n).rsplit("/", 1)[-1], str(n))
    return [None if pd.isna(n) else by_last.get(str(n), str(n)) for n in k["name"]]


def _rank_of(name: str) -> int | None:
    m = re.search(r"_(\d+)\.\w+$", name)
    return int(m.group(1)) if m else None


def _why_not_read(name: str) -> str:
    return next((why for p, why in NOT_READ.items() if re.match(p, name)), "")


def _merge_prof(rd: RankData, ctx: Ctx) -> None:
    """Kernels, op statistics and the device description from a PROF_* folder beside the flat files
    (MindSpore 2.1/2.2 kept the raw CANN output there), read with the raw CANN format."""
    found = [(r, prof) for r, prof in cann_msprof.find_msprof_ranks(ctx.folder) if r == rd.rank]
    if not found:
        return
    prof = found[0][1]
    sub = cann_msprof.load_msprof_rank(prof, rd.rank)
    for name in ("kernels", "op_stats", "timeline", "counters"):
        t = sub.tables.get(name)
        if t is not None and len(t) and not (name == "op_stats" and len(rd.table("op_stats"))):
            put(rd, name, t)
    for key in ("info_json", "ai_core_num", "aic_frequency_mhz", "kernels_from"):
        if getattr(rd.info, key) is None:
            setattr(rd.info, key, getattr(sub.info, key))
    if "device_info" in sub.meta:
        rd.meta.setdefault("device_info", sub.meta["device_info"])
    for s in sub.sources:
        rd.sources.append(Source(s.rank, f"{prof.name}/{s.name}", s.status, s.path, s.reason, s.rows, s.repaired))
    rd.notes.extend(f"{prof.name}: {n}" for n in sub.notes)
    k = rd.table("kernels")
    st = _step_trace(ctx)
    if len(k) and st is not None and k["step"].isna().all():
        k = k.copy()
        k["step"] = assign_steps(k["start_us"].to_numpy(float), st.steps)
        rd.tables["kernels"] = k


def _legacy_ranks(folder: Path, names: set[str]) -> list[RankDir]:
    return [RankDir(r, p, FAMILY, RANK_FROM, None, format=FAMILY) for r, p in find_legacy_ranks(folder)]


#: MindSpore 1.x-2.2 flat profiler folders (several ranks' files in one folder).
FORMAT = Format(
    name=FAMILY,
    label="MindSpore 1.x-2.2 profiler files",
    claims=lambda d, names: is_legacy_folder(d),
    ranks=_legacy_ranks,
    sources=LEGACY_SOURCES,
    finish=_finish,
)


def load_legacy_rank(folder: Path, rank: int) -> RankData:
    """Read rank ``rank`` of the MindSpore 1.x-2.2 profiler folder ``folder`` into a RankData.

    Every source of :data:`LEGACY_SOURCES` is listed in ``sources`` (present / absent with why /
    failed with the parse problem). A step_trace_raw that is present but broken raises ParseError
    (it is the only source of the step rows); any other broken file is a failed source.
    """
    return read_rank(FORMAT, RankDir(rank, Path(folder), FAMILY, RANK_FROM, None, format=FAMILY))
