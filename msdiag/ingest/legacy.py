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

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from msdiag import model
from msdiag.errors import ParseError
from msdiag.ingest import ascend_csv, metadata
from msdiag.ingest._csv import NA_VALUES, check_last_row, read_csv, to_float
from msdiag.model import ABSENT, FAILED, PRESENT, RankData, Source

# Reads the raw CANN PROF_* output kept beside the flat files: (folder, rank) -> (PROF folder, its
# RankData), or None. Passed in by the loader, so that this module does not import cann_msprof
# (which builds on this module's step-trace helpers).
ProfReader = Callable[[Path, int], "tuple[Path, RankData] | None"]

FAMILY = "mindspore_legacy"

TICKS_PER_US = 100.0  # step_trace_raw: 10 ns system-counter ticks
US_PER_MS = 1000.0
MB_PER_KB = 1e-3  # hccl_raw sizes are KB of 1000 bytes (bytes / 1e3 in MindSpore's parsers)
BYTES_PER_MB = 1e6

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
    for n in _names(folder):
        for pat in LEGACY_RANK_FILES + (_PROFILER_INFO,):
            m = pat.match(n)
            if m:
                ranks.add(int(m.group(1)))
                break
    return [(r, folder) for r in sorted(ranks)]


def is_legacy_folder(folder: Path) -> bool:
    """True when ``folder`` holds MindSpore 1.x-2.2 flat profiler files and no 2.3+ output.

    MindSpore 2.3/2.4 write the flat files too, beside ``rank-*_ascend_ms/`` folders (with
    ASCEND_PROFILER_OUTPUT/) in the same ``profiler/`` folder: those are complete, so such a folder
    is not a legacy one (nor is a 2.3+ rank folder itself).
    """
    folder = Path(folder)
    names = _names(folder)
    if not any(p.match(n) for n in names for p in LEGACY_RANK_FILES):
        return False
    return not any((folder / n / "ASCEND_PROFILER_OUTPUT").is_dir() for n in names + ["."])


def _names(folder: Path) -> list[str]:
    try:
        return sorted(p.name for p in folder.iterdir())
    except OSError:
        return []


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------


def _union(ivs: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted((s, e) for s, e in ivs if e > s):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _length(ivs: Iterable[tuple[float, float]]) -> float:
    return float(sum(e - s for s, e in ivs))


def _clip(ivs: Iterable[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(s, lo), min(e, hi)) for s, e in ivs if min(e, hi) > max(s, lo)]


def _num(x: Any) -> float | None:
    if x is None or x is pd.NA:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _read(path: Path, required: Iterable[str] = ()) -> pd.DataFrame:
    df = read_csv(path, required=required)
    check_last_row(path)
    return df.reset_index(drop=True)


_OP_SUFFIX = re.compile(r"-op\d+$")


def op_type_from_full_name(name: str | None) -> str | None:
    """'Default/network/fc3-Dense/MatMul-op9' -> 'MatMul' (the op type MindSpore puts in its names)."""
    if name is None or (isinstance(name, float) and math.isnan(name)):
        return None
    last = str(name).rsplit("/", 1)[-1]
    last = _OP_SUFFIX.sub("", last)
    return last or None


_COMM_NAME = re.compile(r"^stream_(\d+)_(\d+)_(.+)$")
_COMM_PARALLEL = re.compile(r"^stream_(\d+)_parallel_(\d+)$")
_RECEIVE = re.compile(r"receive|recv", re.IGNORECASE)
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
# steps from FP / BP / iteration-end points (shared with cann_msprof's step_trace slices)
# ---------------------------------------------------------------------------------------------


@dataclass
class StepPoints:
    """One iteration as MindSpore's step trace describes it.

    Times are in the file's own unit (``scale`` of them per us: 100 for 10 ns ticks, 1 for us), so
    that the parts are computed from exact differences before one division.
    """

    step: int
    start: float  # previous iteration end (or this iteration's own start for the first)
    end: float  # iteration end
    fp: float | None  # FP start: the device starts running the graph
    bp: float | None  # BP end (None in inference mode: the window runs to the end)
    data_wait_us: float | None  # previous end -> FP start, us; None when there is no previous end
    comm: list[tuple[str, float, float]] = field(default_factory=list)  # (op, start, end)
    scale: float = 1.0


def steps_from_points(rank: int, points: list[StepPoints], source: str) -> pd.DataFrame:
    """STEPS rows from step-trace points (see the module doc for the definitions).

    Identities: computing + exposed + free == total; overlapped == communication - exposed; every
    part lies in [0, total].
    """
    rows = []
    for p in points:
        lo, hi, k = p.start, p.end, p.scale
        total = hi - lo
        fp = lo if p.fp is None else min(max(p.fp, lo), hi)
        bp = hi if p.bp is None else min(max(p.bp, fp), hi)
        comm = _union(_clip([(s, e) for _, s, e in p.comm], lo, hi))
        communication = _length(comm)
        overlapped = _length(_clip(comm, fp, bp))
        exposed = communication - overlapped
        exposed_after_fp = exposed - _length(_clip(comm, lo, fp))
        computing = max(0.0, (hi - fp) - exposed_after_fp)
        free = max(0.0, total - computing - exposed)
        bubble = _length(_union(_clip([(s, e) for n, s, e in p.comm if _RECEIVE.search(n)], lo, hi)))
        rows.append(
            {
                "rank": rank,
                "step": p.step,
                "start_us": lo / k,
                "end_us": hi / k,
                "total_us": total / k,
                "computing_us": computing / k,
                "communication_us": communication / k,
                "communication_exposed_us": exposed / k,
                "overlapped_us": overlapped / k,
                "free_us": free / k,
                "bubble_us": bubble / k,
                "data_wait_us": p.data_wait_us,
                "stage_us": (total - bubble) / k,
                "source": source,
            }
        )
    if not rows:
        return model.STEPS.empty()
    df = pd.DataFrame(rows)
    df["data_wait_us"] = pd.to_numeric(df["data_wait_us"], errors="coerce").astype("float64")
    return model.STEPS.frame(df)


def assign_steps(starts: np.ndarray, steps: pd.DataFrame) -> pd.Series:
    """The step whose [start_us, end_us) holds each start (null outside every step)."""
    out = pd.Series(pd.array([pd.NA] * len(starts), dtype=model.INT))
    if not len(steps) or not len(starts):
        return out
    st = steps.sort_values("start_us")
    los = st["start_us"].to_numpy(float)
    his = st["end_us"].to_numpy(float)
    ids = st["step"].to_numpy()
    idx = np.searchsorted(los, starts, side="right") - 1
    ok = (idx >= 0) & np.isfinite(starts)
    ok[ok] &= starts[ok] < his[idx[ok]]
    vals = [int(ids[i]) if k else pd.NA for i, k in zip(idx, ok)]
    return pd.Series(pd.array(vals, dtype=model.INT))


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
                t, size, bw = (_num(x) for x in vals[:3])
                if t:
                    link_time += t
                if kind == "SDMA" and t and size and bw and t > 0 and size > 0 and bw > 0:
                    ratios.append(bw / (size / t))
        cost = _num(r["communication_cost"])
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
    except ValueError:
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
    units, how = hccl_units(rows, ms_version)
    cost_to_us = US_PER_MS if units == HCCL_1X else 1.0
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
            cost = _num(val[1])
            wait = _num(val[2])
            link_info = val[3] if len(val) > 3 and isinstance(val[3], dict) else {}
            _, name, op_type = comm_name_parts(op)
            category = "p2p" if _P2P.search(name) else "collective"
            rdma_wait_ms = 0.0
            per_transport: dict[str, list[float]] = {}
            for link, tr in link_info.items():
                src, dst = _link_ends(link)
                for kind, vals in (tr or {}).items():
                    if not isinstance(vals, list) or len(vals) < 2:
                        continue
                    t_ms, size_kb = _num(vals[0]), _num(vals[1])
                    if kind == "RDMA" and len(vals) > 3 and _num(vals[3]):
                        rdma_wait_ms += float(_num(vals[3]) or 0.0)
                    size_mb = None if size_kb is None else size_kb * MB_PER_KB
                    acc = per_transport.setdefault(kind, [0.0, 0.0])
                    acc[0] += size_mb or 0.0
                    acc[1] += t_ms or 0.0
                    links.append(
                        {
                            "rank": rank,
                            "step": step,
                            "category": category,
                            "op_type": op_type,
                            "variant": name,
                            "src": src,
                            "dst": dst,
                            "transport": kind,
                            "size_mb": size_mb,
                            "time_us": None if t_ms is None else t_ms * US_PER_MS,
                            "bandwidth_gbps": size_mb / t_ms if size_mb is not None and t_ms else None,
                        }
                    )
            for kind, (size_mb, t_ms) in per_transport.items():
                transport.append(
                    {
                        "rank": rank,
                        "step": step,
                        "op_name": name,
                        "transport": kind,
                        "size_mb": size_mb,
                        "time_us": t_ms * US_PER_MS,
                        "bandwidth_gbps": size_mb / t_ms if t_ms > 0 else None,
                    }
                )
            rdma_wait_us = rdma_wait_ms * US_PER_MS
            transit = None if cost is None else max(0.0, cost * cost_to_us - (rdma_wait_us if units == HCCL_1X else 0.0))
            wait_us = None if wait is None else wait * cost_to_us + (rdma_wait_us if units == HCCL_1X else 0.0)
            span = spans.get((step, op))
            start, elapse, idle = (None, None, None)
            if span is not None:
                start, elapse = span
                if transit is not None and wait_us is not None:
                    idle = elapse - transit - wait_us
                    if idle < 0:
                        negative_idle += 1
                        idle = None
            ops.append(
                {
                    "rank": rank,
                    "step": step,
                    "category": category,
                    "op_name": name,
                    "op_type": op_type,
                    "start_us": start,
                    "elapse_us": elapse,
                    "transit_us": transit,
                    "wait_us": wait_us,
                    "idle_us": idle,
                }
            )
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


def _link_ends(link: str) -> tuple[int | None, int | None]:
    m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", str(link))
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def table_frame(table: model.Table, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A model table from row dicts (None -> null; columns the table lacks are an error)."""
    if not rows:
        return table.empty()
    df = pd.DataFrame(rows)
    for c, t in table.columns.items():
        if c in df.columns and t == model.FLOAT:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
        elif c in df.columns and t == model.INT:
            df[c] = pd.array([pd.NA if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) for v in df[c]], dtype=model.INT)
        elif c in df.columns and t == model.STR:
            df[c] = pd.array([None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in df[c]], dtype=model.STR)
    return table.frame(df)


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


TIMELINE_START = {"start_time(ms)": US_PER_MS, "start_time(us)": 1.0}
TIMELINE_DUR = {"duration(ms)": US_PER_MS, "duration(us)": 1.0}


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
    total = to_float(df[vcol], path, vcol) * US_PER_MS
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
    t = to_float(df[tcol], path, tcol) * US_PER_MS
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
        row["per_batch_us"] = float(np.mean(batch)) * US_PER_MS
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
    if "FLOPs" in raw and _num(raw["FLOPs"]) is not None:
        out["total_flops"] = float(raw["FLOPs"]) * 1e6
    elif "cube_FLOPs" in raw:
        out["total_flops"] = (float(_num(raw.get("cube_FLOPs")) or 0.0) + float(_num(raw.get("vec_FLOPs")) or 0.0)) * 1e6
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
    rows = [{c: _num(to_float(df[c], path, c).iloc[i]) for c in cols} for i in range(len(df))]
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


@dataclass
class _Ctx:
    folder: Path
    rd: RankData
    step_trace: StepTrace | None = None
    framework: dict[str, dict[str, Any]] = field(default_factory=dict)
    timeline: pd.DataFrame | None = None
    aicpu: pd.DataFrame | None = None
    flops: dict[str, Any] | None = None
    queue_row: pd.DataFrame | None = None
    prof_reader: ProfReader | None = None


@dataclass(frozen=True)
class LegacySpec:
    name: str  # file name; {rank} is the rank id
    read: Callable[[Path, _Ctx], int | None]  # returns the rows read, where it means something
    core: bool
    absent_reason: str


def _ms_version(ctx: _Ctx) -> str | None:
    pi = ctx.rd.meta.get("profiler_info") or {}
    return pi.get("framework_version")


def _r_profiler_info(p: Path, ctx: _Ctx) -> int | None:
    info = metadata.read_profiler_info(p)
    ctx.rd.meta["profiler_info"] = info
    par = {k: info.get(k) for k in ("parallel_mode", "stage_num", "rank_size") if info.get(k) is not None}
    if par:
        ctx.rd.meta["parallel"] = par
    if info.get("framework_version"):
        ctx.rd.meta["ms_version"] = info["framework_version"]
    return None


def _r_step_trace(p: Path, ctx: _Ctx) -> int | None:
    st = read_step_trace_raw(p, ctx.rd.rank)
    ctx.step_trace = st
    ctx.rd.tables["profiler_steps"] = st.steps
    ctx.rd.notes.extend(st.notes)
    return len(st.steps)


def _r_framework(p: Path, ctx: _Ctx) -> int | None:
    ctx.framework = read_framework_raw(p)
    return len(ctx.framework)


def _r_timeline(p: Path, ctx: _Ctx) -> int | None:
    ctx.timeline = read_output_timeline_data(p)
    return len(ctx.timeline)


def _r_aicpu(p: Path, ctx: _Ctx) -> int | None:
    ctx.aicpu = read_aicpu_intermediate(p)
    return len(ctx.aicpu)


def _r_hccl(p: Path, ctx: _Ctx) -> int | None:
    h = read_hccl_raw(p, ctx.rd.rank, _ms_version(ctx), ctx.step_trace.comm_ops if ctx.step_trace else None)
    _put(ctx.rd, "comm_ops", h.comm_ops)
    _put(ctx.rd, "comm_transport", h.comm_transport)
    _put(ctx.rd, "comm_links", h.comm_links)
    ctx.rd.meta["hccl_units"] = {"writer": h.units, "how": h.units_how}
    ctx.rd.notes.extend(h.notes)
    return len(h.comm_ops)


def _r_aicore_type(p: Path, ctx: _Ctx) -> int | None:
    df = read_aicore_type(p, ctx.rd.rank)
    _put(ctx.rd, "op_stats", df)
    return len(df)


def _r_aicore_detail(p: Path, ctx: _Ctx) -> int | None:
    if len(ctx.rd.table("op_stats")):
        return None  # the _type file already gave the per-type figures
    df = read_aicore_detail(p, ctx.rd.rank)
    _put(ctx.rd, "op_stats", df)
    return len(df)


def _r_minddata(p: Path, ctx: _Ctx) -> int | None:
    df = ascend_csv.read_minddata_pipeline(p, None, ctx.rd.rank)
    _put(ctx.rd, "data_pipeline", df)
    return len(df)


def _r_device_queue(p: Path, ctx: _Ctx) -> int | None:
    ctx.queue_row = read_queue_profiling(p, ctx.rd.rank, DEVICE_QUEUE_TYPE)
    return 1


def _r_iterator(p: Path, ctx: _Ctx) -> int | None:
    row = read_queue_profiling(p, ctx.rd.rank, ITERATOR_TYPE)
    if ctx.queue_row is None:  # MindInsight reads device_queue_profiling first
        ctx.queue_row = row
    else:
        ctx.rd.notes.append(f"{p.name}: not used: device_queue_profiling holds the queue the device reads (MindInsight's choice)")
    return 1


def _r_minddata_aicpu(p: Path, ctx: _Ctx) -> int | None:
    ctx.rd.meta["get_next"] = read_minddata_aicpu(p)
    return int(ctx.rd.meta["get_next"]["count"])


def _r_flops(p: Path, ctx: _Ctx) -> int | None:
    ctx.flops = read_flops(p)
    fl = ctx.rd.meta.setdefault("flops", {})
    fl.update(ctx.flops)
    return len(ctx.flops["per_op"])


def _r_flops_summary(p: Path, ctx: _Ctx) -> int | None:
    ctx.rd.meta.setdefault("flops", {})["summary"] = read_flops_summary(p)
    return None


def _r_parallel_strategy(p: Path, ctx: _Ctx) -> int | None:
    ctx.rd.meta["parallel_strategy"] = read_parallel_strategy(p)
    return None


def _put(rd: RankData, table: str, df: pd.DataFrame) -> None:
    if table in rd.tables and len(rd.tables[table]):
        rd.tables[table] = pd.concat([rd.tables[table], df], ignore_index=True)
    else:
        rd.tables[table] = df


LEGACY_SOURCES: list[LegacySpec] = [
    LegacySpec("profiler_info_{rank}.json", _r_profiler_info, False,
               "no profiler_info (MindSpore 1.x writes none): version and parallel settings unknown"),
    LegacySpec("step_trace_raw_{rank}_detail_time.csv", _r_step_trace, True,
               "no step_trace_raw: no step rows (the step trace is written in graph mode on Ascend/GPU)"),
    LegacySpec("framework_raw_{rank}.csv", _r_framework, False, "no framework_raw: op types and shapes unknown"),
    LegacySpec("output_timeline_data_{rank}.txt", _r_timeline, False,
               "no output_timeline_data (1.x intermediate file): no kernel launches with start times"),
    LegacySpec("aicpu_intermediate_{rank}.csv", _r_aicpu, False, "no AI CPU ops recorded"),
    LegacySpec("hccl_raw_{rank}.csv", _r_hccl, False,
               "no hccl_raw: a single-device job, or HCCL profiling off"),
    LegacySpec("aicore_intermediate_{rank}_type.csv", _r_aicore_type, False, "no AI Core op statistics"),
    LegacySpec("aicore_intermediate_{rank}_detail.csv", _r_aicore_detail, False, "no AI Core per-op times"),
    LegacySpec("minddata_pipeline_raw_{rank}.csv", _r_minddata, False,
               "MindData pipeline profiling was off, or no mindspore.dataset pipeline"),
    LegacySpec("device_queue_profiling_{rank}.txt", _r_device_queue, False,
               "no device queue profile (dataset not sunk to the device, or MindData profiling off)"),
    LegacySpec("dataset_iterator_profiling_{rank}.txt", _r_iterator, False,
               "no dataset iterator profile (data sunk to the device, or MindData profiling off)"),
    LegacySpec("minddata_aicpu_{rank}.txt", _r_minddata_aicpu, False, "no GetNext records on the device"),
    LegacySpec("flops_{rank}.txt", _r_flops, False, "no FLOPs file (AI Core PMU FLOPs were not collected)"),
    LegacySpec("flops_summary_{rank}.json", _r_flops_summary, False, "no FLOPs summary"),
    LegacySpec("parallel_strategy_{rank}.json", _r_parallel_strategy, False, "no parallel strategy view"),
]


def load_legacy_rank(folder: Path, rank: int, prof_reader: ProfReader | None = None) -> RankData:
    """Read rank ``rank`` of the MindSpore 1.x-2.2 profiler folder ``folder`` into a RankData.

    Every source of :data:`LEGACY_SOURCES` is listed in ``sources`` (present / absent with why /
    failed with the parse problem). A step_trace_raw that is present but broken raises ParseError
    (it is the only source of the step rows); any other broken file is a failed source.
    """
    folder = Path(folder)
    rd = RankData(rank=rank, family=FAMILY, path=str(folder))
    rd.meta["rank_from"] = "file-name suffixes of the MindSpore 1.x-2.2 profiler files"
    ctx = _Ctx(folder, rd, prof_reader=prof_reader)
    for spec in LEGACY_SOURCES:
        name = spec.name.format(rank=rank)
        _read_source(ctx, spec.read, folder / name, name, spec.core, spec.absent_reason)
    # ascend_cluster_analyse_{mode}_{stages}_{size}_{rank}.csv: the name carries the parallel mode
    clusters = [p for p in sorted(folder.glob(f"ascend_cluster_analyse_*_{rank}.csv")) if _CLUSTER_FILE.match(p.name)
                and int(_CLUSTER_FILE.match(p.name).group(4)) == rank]  # type: ignore[union-attr]
    if clusters:
        for p in clusters:
            _read_source(ctx, _r_cluster, p, p.name, False, "")
    else:
        rd.sources.append(Source(rank, f"ascend_cluster_analyse_*_{rank}.csv", ABSENT, None,
                                 "no cluster step analysis (written for Ascend graph-mode jobs with HCCL)"))
    _finish(ctx)
    return rd


def _r_cluster(p: Path, ctx: _Ctx) -> int | None:
    ca = read_cluster_analyse(p)
    ctx.rd.meta.setdefault("cluster_analyse", []).append(ca)
    par = ctx.rd.meta.setdefault("parallel", {})
    for k in ("mode", "stage_num", "rank_size"):
        if ca.get(k) is not None:
            par.setdefault("cluster_" + k if k == "mode" else k, ca[k])
    return len(ca["rows"])


def _read_source(ctx: _Ctx, read: Callable[[Path, _Ctx], int | None], p: Path, name: str, core: bool, why: str) -> None:
    rd = ctx.rd
    if not p.exists():
        rd.sources.append(Source(rd.rank, name, ABSENT, None, why))
        return
    try:
        rows = read(p, ctx)
    except ParseError as e:
        if core:
            raise
        rd.sources.append(Source(rd.rank, name, FAILED, str(p), e.problem))
        return
    rd.sources.append(Source(rd.rank, name, PRESENT, str(p), None, rows))


def _finish(ctx: _Ctx) -> None:
    rd = ctx.rd
    # MindData: the pipeline ops plus the consumer row from the queue profile
    if ctx.queue_row is not None:
        dp = rd.table("data_pipeline")
        dp = dp[(dp["op_id"] != ascend_csv.MINDDATA_CONSUMER_OP_ID).fillna(True).to_numpy()]
        rd.tables["data_pipeline"] = pd.concat([dp, ctx.queue_row], ignore_index=True) if len(dp) else ctx.queue_row
    # 2.1/2.2: raw CANN output kept in PROF_* beside the flat files
    _merge_prof(ctx)
    # kernels from the 1.x timeline text, when no PROF_ output gave them
    if not len(rd.table("kernels")):
        k = build_kernels(rd.rank, ctx.timeline, ctx.framework, ctx.aicpu, ctx.step_trace)
        if len(k):
            rd.tables["kernels"] = k
            rd.meta["kernels_from"] = f"output_timeline_data_{rd.rank}.txt + framework_raw + aicpu_intermediate + step trace"
    k = rd.table("kernels")
    if len(k) and ctx.flops and "cube_per_op" in ctx.flops and k["cube_fops"].isna().all():
        full = _full_names(k, ctx)
        k = k.copy()
        k["cube_fops"] = pd.Series([ctx.flops["cube_per_op"].get(n) for n in full], dtype="float64")
        k["vector_fops"] = pd.Series([ctx.flops["vector_per_op"].get(n) for n in full], dtype="float64")
        k.loc[k["kind"] != "compute", ["cube_fops", "vector_fops"]] = np.nan
        rd.tables["kernels"] = k
    if ctx.framework and not len(rd.table("kernels")):
        rd.tables["host_shapes"] = host_shapes_from_framework(rd.rank, ctx.framework)
        rd.notes.append(
            f"framework_raw_{rd.rank}.csv: op shapes are kept as host_shapes: no kernel launches to attach them to "
            "(output_timeline_data absent)"
        )
    if not len(rd.tables.get("profiler_steps", model.STEPS.empty())) and not len(rd.table("kernels")):
        rd.notes.append("no step_trace_raw and no kernel timeline: no step rows for this rank")
    not_read = sorted(
        n for n in _names(ctx.folder)
        if any(re.match(p, n) for p in NOT_READ) and _rank_of(n) in (None, rd.rank)
    )
    if not_read:
        rd.notes.append("recognised, not read: " + "; ".join(f"{n} ({_why_not_read(n)})" for n in not_read))


def _full_names(k: pd.DataFrame, ctx: _Ctx) -> list[str | None]:
    """Full op names of kernel rows (the timeline keeps full names; kernels keep the last part)."""
    if ctx.timeline is None:
        return [None if pd.isna(n) else str(n) for n in k["name"]]
    by_last: dict[str, str] = {}
    for n in ctx.timeline["name"]:
        if n is not pd.NA and n is not None:
            by_last.setdefault(str(n).rsplit("/", 1)[-1], str(n))
    return [None if pd.isna(n) else by_last.get(str(n), str(n)) for n in k["name"]]


def _rank_of(name: str) -> int | None:
    m = re.search(r"_(\d+)\.\w+$", name)
    return int(m.group(1)) if m else None


def _why_not_read(name: str) -> str:
    return next((why for p, why in NOT_READ.items() if re.match(p, name)), "")


def _merge_prof(ctx: _Ctx) -> None:
    """Kernels, op statistics and the device description from PROF_* folders beside the flat files
    (MindSpore 2.1/2.2 kept the raw CANN output there), read by the caller's ``prof_reader``."""
    rd = ctx.rd
    found = ctx.prof_reader(ctx.folder, rd.rank) if ctx.prof_reader else None
    if found is not None:
        prof, sub = found
        for name in ("kernels", "op_stats", "timeline", "counters"):
            t = sub.tables.get(name)
            if t is not None and len(t) and not (name == "op_stats" and len(rd.table("op_stats"))):
                _put(rd, name, t)
        for key in ("peak_tflops_from", "ai_core_num", "aic_frequency_mhz", "device_info", "kernels_from"):
            if key in sub.meta:
                rd.meta.setdefault(key, sub.meta[key])
        for s in sub.sources:
            rd.sources.append(Source(s.rank, f"{prof.name}/{s.name}", s.status, s.path, s.reason, s.rows))
        rd.notes.extend(f"{prof.name}: {n}" for n in sub.notes)
        k = rd.table("kernels")
        if len(k) and ctx.step_trace is not None and k["step"].isna().all():
            k = k.copy()
            k["step"] = assign_steps(k["start_us"].to_numpy(float), ctx.step_trace.steps)
            rd.tables["kernels"] = k
