"""Raw CANN msprof output: ``PROF_*`` folders.

A ``PROF_<n>_<timestamp>_<id>/`` folder holds, per device, ``device_N/`` (``info.json.N``: AI Core
count and frequency, the MFU peak; older CANN: per-iteration ``timeline/*.json`` slices) and, from
CANN 6/7 on, ``mindstudio_profiler_output/`` with the exported CSV and JSON files. One PROF folder
may cover several devices (the CSVs then carry a ``Device_id`` column). :func:`find_msprof_ranks`
lists (rank, PROF folder) pairs; :func:`load_msprof_rank` reads one into a RankData of family
``cann_msprof``.

What maps where:

- ``mindstudio_profiler_output/op_summary_*.csv`` -> ``kernels`` (ascend_csv.read_kernel_details,
  which accepts its headers); ``op_statistic_*.csv`` -> ``op_stats``; ``task_time_*.csv`` -> ``kernels``
  when there is no op_summary (name, type from the kernel name, core = kernel_type);
  ``communication_statistic_*.csv`` -> ``op_stats`` rows with core ``HCCL``; ``msprof*.json`` (the
  same Chrome trace as trace_view.json: Ascend Hardware, HCCL, Overlap Analysis, CANN) ->
  ``timeline`` and ``counters`` with trace_view.read_trace_view.
- ``device_N/timeline/`` (CANN 5/6, e.g. ``msprof_0_2_1.json``: device, model, iteration):
  ``step_trace_*.json`` -> ``profiler_steps`` (MindSpore's step definitions, see
  :func:`steptrace.steps_from_points`: a step runs from the previous iteration end to its own end,
  data wait = FP start - previous end, CANN's "Data_aug Bound"); ``task_time_*.json`` -> ``kernels``
  (HCCL task rows replaced by one row per HCCL op); ``hccl_*.json`` -> ``comm_ops``,
  ``comm_transport``, ``comm_links`` and the timeline's hccl lane; ``msprof_*.json`` -> ``timeline``.
  Times there are CANN's monotonic-raw clock in us (``start_info.N`` gives the offset to wall time,
  kept in ``meta["clock"]``).
- ``device_N/info.json.N`` -> ``meta["peak_tflops_from"]`` (its path), ``ai_core_num``,
  ``aic_frequency_mhz``, ``device_info``; the MFU peak is ai_core_num x aic_frequency x 16*16*16*2.

Kernels without a step get the step whose span holds their start, when step_trace is there.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from msdiag import model, units
from msdiag.errors import ParseError
from msdiag.fmt import finite_float
from msdiag.ingest import ascend_csv, metadata
from msdiag.ingest._csv import NA_VALUES, check_last_row, check_shape, read_csv, to_float
from msdiag.ingest.engine import Ctx, Format, Item, RankDir, Read, Src, Then, put, read_rank
from msdiag.ingest.paths import Seen, rank_number, read_head, real_roots, refusal
from msdiag.ingest.steptrace import StepPoints, assign_steps, op_type_from_full_name, steps_from_points, table_frame
from msdiag.ingest.trace_view import read_trace_view
from msdiag.model import RankData

FAMILY = "cann_msprof"
OUTPUT_DIR = "mindstudio_profiler_output"

_DEVICE_DIR = re.compile(r"^device_(\d+)$")
_INFO_JSON = re.compile(r"^info\.json\.(\d+)$")
_CSV_KINDS = ("op_summary", "op_statistic", "task_time", "communication_statistic")
_MAX_DEPTH = 5
_INVALID_RANK = 0xFFFFFFFF
_INFO_JSON_MAX_BYTES = 1 << 20  # device_N/info.json.N is a few KB: a larger one is not read whole

# HCCL task types (task_time) and HCCL timeline task names that move data
HCCL_TASK_TYPES = frozenset(
    {"NOTIFY_WAIT", "NOTIFY_RECORD", "REDUCE_ASYNC_V2", "REDUCE_ASYNC", "MEMCPY_ASYNC", "RDMA_SEND", "REDUCE_INLINE"}
)
COMPUTE_CORES = frozenset(
    {"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE", "AIV_SQE", "FFTS_PLUS", "DVPP"}
)
_TRANSFER_TASKS = frozenset({"memcpy", "reduce_inline", "reduce inline", "rdmasend", "rdma_send"})
_WAIT_TASKS = frozenset({"notify_wait", "notify wait"})
# HCCL link type -> transport as communication.json names it
_LINK_TRANSPORT = {"HCCS": "HCCS", "PCIE": "PCIE", "SIO": "SIO", "ROCE": "RDMA", "RDMA": "RDMA"}
# the HCCL op-level thread: "Communication Kernel" (CANN 5/6) or "Group <x> Communication"
_HCCL_OP_THREAD = re.compile(r"^(Communication Kernel|Group .+ Communication)$")
_PLANE = re.compile(r"^Plane (\d+)$")
_ITERATION = re.compile(r"^Iteration \d+$")
MAIN_PLANE = 0


# ---------------------------------------------------------------------------------------------
# discovery
# ---------------------------------------------------------------------------------------------


def is_prof_dir(d: Path) -> bool:
    """A ``PROF_*`` folder holding device_N/ or mindstudio_profiler_output/ (PROF_GROUP_* is not one)."""
    if not d.name.startswith("PROF_") or d.name.startswith("PROF_GROUP") or not d.is_dir():
        return False
    try:
        names = [p.name for p in d.iterdir() if p.is_dir()]
    except OSError:
        return False
    return OUTPUT_DIR in names or any(_DEVICE_DIR.match(n) for n in names)


def has_loose_output(d: Path) -> bool:
    """A folder holding msprof's exported CSVs directly (a copied mindstudio_profiler_output)."""
    return any(_output_files(d, k) for k in _CSV_KINDS)


def is_msprof_folder(folder: Path) -> bool:
    """True when ``folder`` is, or holds, raw CANN msprof output (see :func:`find_msprof_ranks`)."""
    return bool(find_msprof_ranks(folder))


def find_msprof_ranks(folder: Path) -> list[tuple[int, Path]]:
    """(rank, PROF folder) pairs under ``folder`` (the folder itself when it is a PROF_ folder).

    Devices are the ``device_N`` sub-folders (else the ``Device_id`` values of the exported CSVs);
    the rank is ``rank_id`` of ``device_N/info.json.N`` when it holds one, else the device id. A
    folder that holds no PROF_ folder but msprof's exported CSVs directly (op_summary_*.csv, ...) is
    one capture of its own. MindSpore / torch_npu rank folders (with ASCEND_PROFILER_OUTPUT/) are not
    entered: their PROF_ folders belong to them. The same rank can appear in several PROF folders
    (several runs, or a PROF_GROUP of metric groups): every pair is returned, sorted by rank then
    path; the caller keeps one (the newest: the timestamp in PROF_<n>_<YYYYmmddHHMMSSfff>_...).
    """
    folder = Path(folder)
    profs: list[Path] = []
    seen = Seen()  # each real folder once: links back to a parent do not multiply the walk
    stack = [(folder, 0)] if seen.first(folder) else []
    while stack:
        d, depth = stack.pop()
        if is_prof_dir(d):
            profs.append(d)
            continue
        try:
            subs = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            continue
        if (d / "ASCEND_PROFILER_OUTPUT").is_dir():
            continue
        if depth < _MAX_DEPTH:
            stack.extend((s, depth + 1) for s in seen.new(subs))
    out: list[tuple[int, Path]] = []
    for p in profs:
        out.extend((r, p) for _, r in _devices(p))
    if not out and has_loose_output(folder):
        out.extend((r, folder) for _, r in _devices(folder))
    return sorted(set(out), key=lambda x: (x[0], str(x[1])))


def _devices(prof: Path) -> list[tuple[int, int]]:
    """(device id, rank) of the devices a PROF folder (or a loose output folder) covers."""
    devs: list[tuple[int, int]] = []
    try:
        subs = sorted(prof.iterdir())
    except OSError:
        subs = []
    for s in subs:
        m = _DEVICE_DIR.match(s.name)
        dev = rank_number(m.group(1)) if m else None  # a device id beyond any device is not one
        if dev is not None and s.is_dir():
            devs.append((dev, _rank_in_info(s / f"info.json.{dev}", dev)))
    if devs:
        return devs
    out_dir = prof / OUTPUT_DIR if (prof / OUTPUT_DIR).is_dir() else prof
    ids: set[int] = set()
    for kind in _CSV_KINDS:
        for f in _output_files(out_dir, kind):
            ids |= _device_ids(f)
        if ids:
            break
    return [(d, d) for d in sorted(ids)] or [(0, 0)]


def _rank_in_info(path: Path, default: int) -> int:
    head = read_head(path, real_roots(path.parent.parent), _INFO_JSON_MAX_BYTES)  # never a FIFO, a device
    try:
        raw = json.loads(head) if head is not None else None
    except (ValueError, RecursionError):
        return default
    r = raw.get("rank_id") if isinstance(raw, dict) else None
    return r if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < _INVALID_RANK else default


def _device_ids(path: Path) -> set[int]:
    if refusal(path, real_roots(path.parent)) is not None:
        return set()
    try:
        check_shape(path)
        df = pd.read_csv(path, usecols=["Device_id"], dtype=str, keep_default_na=False)
    except (ParseError, ValueError, OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return set()
    return {int(v) for v in df["Device_id"].str.strip() if re.fullmatch(r"\d+", v or "")}


def _output_files(d: Path, kind: str) -> list[Path]:
    """msprof's exported files of one kind: op_summary_<ts>.csv, op_summary_<dev>_<model>_<iter>.csv,
    op_summary_slice_<n>_<ts>.csv (op_statistic_ is not op_summary_, and so on)."""
    try:
        return sorted(p for p in d.glob(f"{kind}_*.csv") if re.fullmatch(rf"{kind}_(slice_)?[\d_]+\.csv", p.name))
    except OSError:
        return []


def _device_of(prof: Path, rank: int) -> int:
    for dev, r in _devices(prof):
        if r == rank:
            return dev
    return rank


# ---------------------------------------------------------------------------------------------
# readers
# ---------------------------------------------------------------------------------------------


def read_info_json(path: Path) -> dict[str, Any]:
    """device_N/info.json.N -> {ai_core_num, aic_frequency_mhz, aiv_num, hwts_frequency_mhz, rank_id,
    hostname, device_info}. ParseError when it is unreadable or lacks the core count and clock."""
    raw = metadata.load_json(path)
    dev = raw.get("DeviceInfo") if isinstance(raw, dict) else None
    if not isinstance(dev, list) or not dev or not isinstance(dev[0], dict):
        raise ParseError(path, "no DeviceInfo list (expected a CANN info.json)")
    d = dev[0]
    try:
        cores = int(d["ai_core_num"])
        mhz = float(d["aic_frequency"])
    except KeyError as e:
        raise ParseError(path, f"DeviceInfo lacks {e.args[0]}") from None
    except (TypeError, ValueError):
        raise ParseError(path, f"ai_core_num / aic_frequency are not numbers ({d.get('ai_core_num')!r}, "
                               f"{d.get('aic_frequency')!r})") from None
    if cores <= 0 or mhz <= 0:
        raise ParseError(path, f"ai_core_num {cores} and aic_frequency {mhz} MHz must be positive")
    return {
        "ai_core_num": cores,
        "aic_frequency_mhz": mhz,
        "aiv_num": _int_or_none(d.get("aiv_num")),
        "hwts_frequency_mhz": finite_float(d.get("hwts_frequency")),
        "rank_id": raw.get("rank_id"),
        "hostname": raw.get("hostname"),
        "device_info": d,
    }


def _int_or_none(x: Any) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def _device_mask(path: Path, n: int, device: int) -> np.ndarray | None:
    """Rows of a CSV that belong to ``device`` when the file covers several devices (else None)."""
    try:
        ids = pd.read_csv(path, usecols=["Device_id"], dtype=str, keep_default_na=False)["Device_id"].str.strip()
    except (ValueError, OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    if len(ids) != n or ids.nunique() <= 1:
        return None
    return (ids == str(device)).to_numpy()


def _filter_device(df: pd.DataFrame, path: Path, device: int) -> pd.DataFrame:
    m = _device_mask(path, len(df), device)
    return df if m is None else df[m].reset_index(drop=True)


def read_task_time_csv(path: Path, rank: int) -> pd.DataFrame:
    """task_time_*.csv (``Device_id,kernel_name,kernel_type,stream_id,task_id,task_time(us),task_start(us),
    task_stop(us)``) -> KERNELS. kernel_type is the core (AI_CORE, AI_VECTOR_CORE, MIX_AIC, ...); the
    op type is the kernel name's first '_' part (GroupedMatmul_0d2d..._102439707 -> GroupedMatmul);
    tasks without a kernel (PROFILING_ENABLE, TASK_TIMEOUT_SET, ...) are kind "other"."""
    df = read_csv(path, required=("kernel_name", "kernel_type", "task_start(us)", "task_time(us)"))
    check_last_row(path)
    n = len(df)
    name = df["kernel_name"].astype("string").str.strip()
    name = name.mask(name.isin(NA_VALUES))
    core = df["kernel_type"].astype("string").str.strip()
    typ = name.str.split("_", n=1).str[0].fillna(core)
    kind = pd.Series("other", index=df.index, dtype=model.STR)
    kind[core.isin(list(COMPUTE_CORES)).fillna(False).to_numpy()] = "compute"
    comm = (core.isin(list(HCCL_TASK_TYPES)) | core.eq("HCCL") | name.str.lower().str.startswith("hcom")).fillna(False)
    kind[comm.to_numpy()] = "communication"
    cols: dict[str, Any] = {
        "rank": pd.Series([rank] * n, dtype=model.INT),
        "name": name,
        "type": typ,
        "core": core,
        "kind": kind,
        "start_us": to_float(df["task_start(us)"], path, "task_start(us)"),
        "dur_us": to_float(df["task_time(us)"], path, "task_time(us)"),
    }
    if "stream_id" in df.columns:
        cols["stream"] = to_float(df["stream_id"], path, "stream_id").round().astype(model.INT)
    return model.KERNELS.frame(cols)


COMM_STAT_REQUIRED = ("OP Type", "Count", "Total Time(us)")


def read_communication_statistic(path: Path, rank: int) -> pd.DataFrame:
    """communication_statistic_*.csv (``Device_id,OP Type,Count,Total Time(us),Min/Avg/Max Time(us),Ratio(%)``)
    -> OP_STATS rows with core HCCL (ratio 0..1)."""
    df = read_csv(path, required=COMM_STAT_REQUIRED)
    check_last_row(path)
    n = len(df)
    cols: dict[str, Any] = {
        "rank": pd.Series([rank] * n, dtype=model.INT),
        "op_type": df["OP Type"].astype("string").str.strip(),
        "core": pd.Series(["HCCL"] * n, dtype=model.STR),
        "count": to_float(df["Count"], path, "Count").round().astype(model.INT),
        "total_us": to_float(df["Total Time(us)"], path, "Total Time(us)"),
    }
    for canon, raw in (("min_us", "Min Time(us)"), ("avg_us", "Avg Time(us)"), ("max_us", "Max Time(us)")):
        if raw in df.columns:
            cols[canon] = to_float(df[raw], path, raw)
    if "Ratio(%)" in df.columns:
        cols["ratio"] = to_float(df["Ratio(%)"], path, "Ratio(%)") / 100.0
    return model.OP_STATS.frame(cols)


def _load_events(path: Path) -> list[dict[str, Any]]:
    raw = metadata.load_json(path)
    if isinstance(raw, dict) and isinstance(raw.get("traceEvents"), list):
        raw = raw["traceEvents"]
    if not isinstance(raw, list):
        raise ParseError(path, f"expected a JSON list of trace events, found {type(raw).__name__}")
    return [e for e in raw if isinstance(e, dict)]


def _f(x: Any) -> float | None:
    try:
        v = float(str(x).strip()) if isinstance(x, str) else float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def read_step_trace_json(path: Path) -> list[StepPoints]:
    """device_N/timeline/step_trace_*.json -> step points (us, CANN monotonic clock).

    Per iteration: 'Iteration N' (cat Iteration Time) with args FP Start, BP End, Iteration End;
    'Reduce_N_k' (cat Reduce) with Reduce Start k / Reduce End k: the iteration's collectives.
    """
    events = _load_events(path)
    iters: dict[int, dict[str, Any]] = {}
    reduces: dict[int, list[tuple[str, float, float]]] = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        it = args.get("Iteration ID")
        if not isinstance(it, int):
            continue
        cat = e.get("cat")
        name = str(e.get("name", ""))
        if cat == "Iteration Time" or (cat is None and _ITERATION.match(name)):
            ts, dur = _f(e.get("ts")), _f(e.get("dur"))
            end = _f(args.get("Iteration End"))
            if ts is None or (end is None and dur is None):
                raise ParseError(path, f"iteration {it} has no ts / Iteration End")
            iters[it] = {"ts": ts, "end": end if end is not None else ts + (dur or 0.0),
                         "fp": _f(args.get("FP Start")), "bp": _f(args.get("BP End"))}
        elif cat == "Reduce" or (cat is None and name.startswith("Reduce_")):
            ts, dur = _f(e.get("ts")), _f(e.get("dur"))
            if ts is not None and dur is not None and dur > 0:
                reduces.setdefault(it, []).append((str(e.get("name")), ts, ts + dur))
    if not iters and events:
        raise ParseError(path, "no 'Iteration N' events (expected a CANN step_trace timeline)")
    points: list[StepPoints] = []
    for it in sorted(iters):
        cur = iters[it]
        prev = iters.get(it - 1)
        start = prev["end"] if prev is not None and prev["end"] <= cur["ts"] else cur["ts"]
        wait = cur["fp"] - prev["end"] if prev is not None and cur["fp"] is not None and cur["fp"] >= prev["end"] else None
        points.append(StepPoints(it, start, cur["end"], cur["fp"], cur["bp"], wait, reduces.get(it, [])))
    return points


def _thread_names(events: list[dict[str, Any]]) -> dict[tuple[Any, Any], str]:
    out = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            out[(e.get("pid"), e.get("tid"))] = str((e.get("args") or {}).get("name", ""))
    return out


_HCCL_SUFFIX = re.compile(r"-op\d+(?:_\d+)*$")


def hccl_op_type(name: str) -> str:
    """'Default/AllReduce-op534_0' -> 'AllReduce'; 'hcom_allReduce__586_0_1' -> 'hcom_allReduce'."""
    last = str(name).rsplit("/", 1)[-1]
    if last.startswith("hcom_"):
        return last.split("__", 1)[0]
    return _HCCL_SUFFIX.sub("", last)


def read_hccl_json(path: Path, rank: int) -> dict[str, pd.DataFrame]:
    """device_N/timeline/hccl_*.json -> {"ops": op rows (name, start_us, dur_us, track), "comm_ops",
    "comm_transport", "comm_links"} (steps null: the caller assigns them).

    Op rows are the events of the op-level thread ("Communication Kernel"); task rows ("Plane N",
    args task type, transport type, link type, size(Byte), src/dst rank) fall in an op by time.
    transit = the op's data tasks (Memcpy, Reduce_Inline, RDMASend) on the main plane (Plane 0),
    wait = its Notify_Wait tasks there, idle = elapse - transit - wait; sync is not recorded (null).
    Transport = link type (HCCS, PCIE, SIO; ROCE -> RDMA), else the transport type (SDMA, RDMA, LOCAL).
    Size in MB of 1e6 bytes, bandwidth = size / time (GB/s).
    """
    ops, tasks = _hccl_events(path)
    comm_ops: list[dict[str, Any]] = []
    transport: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    starts = np.array([t["start"] for t in tasks]) if tasks else np.empty(0)
    for op in sorted(ops, key=lambda o: o["start_us"]):
        lo, hi = op["start_us"], op["start_us"] + op["dur_us"]
        sel = [tasks[i] for i in np.flatnonzero((starts >= lo) & (starts < hi))] if len(starts) else []
        main = [t for t in sel if t["plane"] == MAIN_PLANE]
        transit = sum(t["dur"] for t in main if t["type"] in _TRANSFER_TASKS)
        wait = sum(t["dur"] for t in main if t["type"] in _WAIT_TASKS)
        idle = op["dur_us"] - transit - wait
        name = op["name"]
        op_type = hccl_op_type(name)
        category = "p2p" if re.search(r"send|receive|recv", op_type, re.IGNORECASE) else "collective"
        comm_ops.append({
            "rank": rank, "category": category, "op_name": name, "op_type": op_type, "start_us": lo,
            "elapse_us": op["dur_us"], "transit_us": transit if main else None, "wait_us": wait if main else None,
            "idle_us": idle if main and idle >= 0 else None,
        })
        _op_transfers(sel, {"rank": rank, "category": category, "op_type": op_type, "variant": name}, transport, links)
    op_frame = pd.DataFrame(ops, columns=["name", "start_us", "dur_us", "track"])
    return {
        "ops": op_frame,
        "comm_ops": table_frame(model.COMM_OPS, comm_ops),
        "comm_transport": table_frame(model.COMM_TRANSPORT, transport),
        "comm_links": table_frame(model.COMM_LINKS, links),
    }


def _hccl_events(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An hccl slice's op rows (the op-level thread) and task rows (planes), times in us."""
    events = _load_events(path)
    threads = _thread_names(events)
    ops: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for e in events:
        if e.get("ph") != "X":
            continue
        ts, dur = _f(e.get("ts")), _f(e.get("dur"))
        if ts is None or dur is None:
            continue
        tname = threads.get((e.get("pid"), e.get("tid")), "")
        args = e.get("args") or {}
        if _HCCL_OP_THREAD.match(tname) or (not args and not _PLANE.match(tname)):
            ops.append({"name": str(e.get("name")), "start_us": ts, "dur_us": dur, "track": tname or "HCCL"})
            continue
        m = _PLANE.match(tname)
        plane = int(m.group(1)) if m else _int_or_none(e.get("tid"))
        size = args.get("size(Byte)", args.get("size"))
        if isinstance(size, str):
            try:
                size = int(size, 16) if size.lower().startswith("0x") else float(size)
            except ValueError:
                size = None
        tasks.append({
            "plane": plane, "start": ts, "end": ts + dur, "dur": dur,
            "type": str(args.get("task type", e.get("name", ""))).lower(),
            "transport": _transport(args),
            "size": _f(size) if size is not None else None,
            "src": _rank_id(args.get("src rank")), "dst": _rank_id(args.get("dst rank")),
        })
    return ops, tasks


def _op_transfers(sel: list[dict[str, Any]], link_row: dict[str, Any], transport: list[dict[str, Any]],
                  links: list[dict[str, Any]]) -> None:
    """One op's data tasks summed per transport and per link: rows appended to transport and links."""
    per_tr: dict[str, list[float]] = {}
    per_link: dict[tuple[Any, Any, str], list[float]] = {}
    for t in sel:
        if t["type"] not in _TRANSFER_TASKS or not t["size"]:
            continue
        # HCCL task sizes are bytes; communication sizes are decimal MB (as legacy hccl_raw and
        # communication.json, whose byte counts they match)
        mb = t["size"] / units.BYTES_PER_MB_DECIMAL
        acc = per_tr.setdefault(t["transport"], [0.0, 0.0])
        acc[0] += mb
        acc[1] += t["dur"]
        src, dst = t["src"], t["dst"]
        src = dst if src is None else src
        dst = src if dst is None else dst
        acc2 = per_link.setdefault((src, dst, t["transport"]), [0.0, 0.0])
        acc2[0] += mb
        acc2[1] += t["dur"]
    for tr, (mb, us) in per_tr.items():
        transport.append({"rank": link_row["rank"], "op_name": link_row["variant"], "transport": tr, "size_mb": mb,
                          "time_us": us, "bandwidth_gbps": mb / (us / units.US_PER_MS) if us > 0 else None})
    for (src, dst, tr), (mb, us) in per_link.items():
        links.append({**link_row, "src": src, "dst": dst, "transport": tr, "size_mb": mb, "time_us": us,
                      "bandwidth_gbps": mb / (us / units.US_PER_MS) if us > 0 else None})


def _transport(args: dict[str, Any]) -> str:
    link = str(args.get("link type", "")).upper()
    if link in _LINK_TRANSPORT:
        return _LINK_TRANSPORT[link]
    tr = str(args.get("transport type", "")).upper()
    return tr or "UNKNOWN"


def _rank_id(x: Any) -> int | None:
    v = _int_or_none(x)
    return None if v is None or v < 0 or v >= _INVALID_RANK else v


def read_task_time_json(path: Path, rank: int) -> pd.DataFrame:
    """device_N/timeline/task_time_*.json -> KERNELS (names as written: MindSpore full op names; type
    from the name; core = Task Type; HCCL task types are kind "communication", other non-kernel
    tasks (EVENT_RECORD, ...) "other")."""
    events = _load_events(path)
    rows = []
    for e in events:
        if e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        ts, dur = _f(e.get("ts")), _f(e.get("dur"))
        if ts is None:
            continue
        core = str(args.get("Task Type", "")) or None
        name = str(e.get("name", ""))
        if core in COMPUTE_CORES:
            kind, typ = "compute", op_type_from_full_name(name)
        elif core in HCCL_TASK_TYPES:
            kind, typ = "communication", core
        else:
            kind, typ = "other", core
        rows.append({"rank": rank, "stream": _int_or_none(args.get("Stream Id")), "name": name, "type": typ,
                     "core": core, "kind": kind, "start_us": ts, "dur_us": dur})
    if not rows and events:
        raise ParseError(path, "no task ('X') events (expected a CANN task_time timeline)")
    return table_frame(model.KERNELS, rows)


def _fix_timeline(tl: pd.DataFrame) -> pd.DataFrame:
    """CANN 5/6 msprof json puts its step trace on the Ascend Hardware process ("Step Trace(Model ID:N)"):
    keep its 'Iteration N' rows as lane "step", drop the FP_BP / Refresh / Reduce rows (the step
    trace gives them), so they are never taken for device kernels."""
    if not len(tl):
        return tl
    st = (tl["lane"] == "device") & tl["track"].astype("string").str.startswith("Step Trace").fillna(False)
    if not st.any():
        return tl
    tl = tl.copy()
    it = st & tl["name"].astype("string").str.match(r"^Iteration \d+$").fillna(False)
    tl.loc[it, "lane"] = "step"
    return tl[~(st & ~it)].reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# the format: its sources
# ---------------------------------------------------------------------------------------------


def _r_info(p: Path, ctx: Ctx) -> Read:
    """The device description: the MFU peak."""
    info = read_info_json(p)
    out = Read(info={"info_json": str(p), "ai_core_num": info["ai_core_num"],
                     "aic_frequency_mhz": info["aic_frequency_mhz"]}, meta={"device_info": info["device_info"]})
    if info.get("hostname"):
        out.info["host"] = info["hostname"]
    return out


def _clock(ctx: Ctx) -> Read:
    """start_info.N: wall-clock us and monotonic-raw ns at the same instant (the slices' clock is
    monotonic-raw us): offset to add to get epoch us."""
    dev = ctx.vars["dev"]
    try:
        p = ctx.find(ctx.folder / f"device_{dev}", f"start_info.{dev}")
        raw = json.loads(p.read_text(encoding="utf-8")) if p is not None else {}
        wall_us = float(raw["collectionTimeBegin"])
        mono_ns = float(raw["clockMonotonicRaw"])
    except (OSError, ValueError, KeyError, TypeError, ParseError, RecursionError):
        return Read()
    return Read(meta={"clock": {"timeline_slices": "monotonic-raw us",
                                "to_epoch_us": wall_us - mono_ns / units.NS_PER_US, "from": f"start_info.{dev}"}})


def _r_op_summary(p: Path, ctx: Ctx) -> Read:
    notes: list[str] = []
    k = _filter_device(ascend_csv.read_kernel_details(p, ctx.rank, notes), p, ctx.vars["dev"])
    return Read(tables={"kernels": k}, info={"kernels_from": p.name}, rows=len(k), notes=notes)


def _per_device(read: Callable[[Path, int], pd.DataFrame], table: str) -> Callable[[Path, Ctx], Read]:
    """A reader of an exported CSV that may cover several devices: this rank's device's rows."""
    def rows(p: Path, ctx: Ctx) -> Read:
        df = _filter_device(read(p, ctx.rank), p, ctx.vars["dev"])
        return Read(tables={table: df}, rows=len(df))

    return rows


def _r_task_time_csv(p: Path, ctx: Ctx) -> Read:
    k = _filter_device(read_task_time_csv(p, ctx.rank), p, ctx.vars["dev"])
    if len(ctx.table("kernels")) and str(ctx.info.kernels_from or "").startswith("op_summary"):
        return Read(rows=len(k))  # op_summary holds the same launches with more columns
    return Read(tables={"kernels": k}, info={"kernels_from": p.name}, rows=len(k))


def _r_trace(p: Path, ctx: Ctx) -> Read:
    tv = read_trace_view(p, ctx.rank)
    tl = _fix_timeline(tv.timeline)
    return Read(tables={"timeline": tl, "counters": tv.counters}, rows=len(tl))


def _r_step_trace_json(p: Path, ctx: Ctx) -> Read:
    steps = steps_from_points(ctx.rank, read_step_trace_json(p), "step_trace json (CANN)")
    old = ctx.rd.tables.get("profiler_steps")
    if old is not None and len(old):
        steps = pd.concat([old, steps], ignore_index=True).drop_duplicates("step", keep="first")
    steps = steps.sort_values("step").reset_index(drop=True)
    return Read(replace={"profiler_steps": steps}, rows=len(steps))


def _r_task_time_json(p: Path, ctx: Ctx) -> Read:
    k = read_task_time_json(p, ctx.rank)
    if str(ctx.info.kernels_from or "").endswith(".csv"):
        return Read(rows=len(k))  # the exported op_summary / task_time CSV holds the same launches
    return Read(tables={"kernels": k}, info={"kernels_from": TASK_TIME_JSON}, rows=len(k))


def _r_hccl_json(p: Path, ctx: Ctx) -> Read:
    h = read_hccl_json(p, ctx.rank)
    steps = ctx.rd.tables.get("profiler_steps")
    if steps is not None and len(steps) and len(h["comm_ops"]):
        h = _with_steps(h, steps)
    return Read(tables={t: h[t] for t in ("comm_ops", "comm_transport", "comm_links")},
                state={"hccl_ops": [*ctx.state.get("hccl_ops", []), h["ops"]]}, rows=len(h["comm_ops"]))


def _r_msprof_slice(p: Path, ctx: Ctx) -> Read:
    if "msprof_*.json" in ctx.present:
        return Read(rows=None)
    return _r_trace(p, ctx)


TASK_TIME_JSON = "device timeline task_time json"
_EXPORT = r"{kind}_(slice_)?[\d_]+\.csv"  # op_summary_<ts>.csv, op_summary_<dev>_<model>_<iter>.csv, ..._slice_<n>_<ts>.csv


def _export(kind: str, **kw: Any) -> Src:
    """msprof's exported CSVs of one kind (op_statistic_ is not op_summary_, and so on)."""
    return Src(f"{kind}_*.csv", folder="{out}", glob=f"{kind}_*.csv", pattern=_EXPORT.format(kind=kind), **kw)


def _slice(kind: str, **kw: Any) -> Src:
    """CANN 5/6 per-iteration timeline slices of one kind in device_N/timeline/."""
    return Src(f"timeline/{kind}_*.json", folder="device_{dev}/timeline", glob=f"{kind}_*.json", **kw)


MSPROF_SOURCES: tuple[Item, ...] = (
    Then(lambda ctx: Read(info={"device_id": ctx.vars["dev"]})),
    Src("device_{dev}/info.json.{dev}", read=_r_info,
        absent="no device_N/info.json.N: the device's AI Core count and clock (MFU peak) unknown"),
    Then(_clock),
    _export("op_summary", read=_r_op_summary, core=True,
            absent="no op_summary: kernels come from task_time (no shapes, no PMU columns)"),
    _export("op_statistic", read=_per_device(ascend_csv.read_op_statistic, "op_stats"), absent="no op_statistic export"),
    _export("task_time", read=_r_task_time_csv, core=lambda ctx: "op_summary_*.csv" not in ctx.present,
            absent="no task_time export"),
    _export("communication_statistic", read=_per_device(read_communication_statistic, "op_stats"),
            absent="no communication_statistic (no HCCL ops, or a single-device job)"),
    Src("msprof_*.json", read=_r_trace, core=True, folder="{out}", glob="msprof*.json", pattern=r"msprof(_slice)?[_\d]*\.json",
        absent="no msprof timeline export"),
    _slice("step_trace", read=_r_step_trace_json, core=True,
           absent="no step_trace timeline slice (newer CANN exports its timeline to mindstudio_profiler_output)"),
    _slice("task_time", read=_r_task_time_json, core=True,
           absent="no task_time timeline slice (newer CANN exports op_summary instead)"),
    _slice("hccl", read=_r_hccl_json, absent="no hccl timeline slice (no HCCL ops, or newer CANN)"),
    _slice("msprof", read=_r_msprof_slice,
           absent="no msprof timeline slice (newer CANN exports it to mindstudio_profiler_output)"),
)


def _vars(rd_dir: RankDir) -> dict[str, Any]:
    prof = Path(rd_dir.path)
    return {"dev": _device_of(prof, rd_dir.rank), "out": OUTPUT_DIR if (prof / OUTPUT_DIR).is_dir() else "."}


def _rank_from(prof: Path, dev: int) -> str:
    return f"device_{dev}/info.json.{dev} rank_id" if (prof / f"device_{dev}" / f"info.json.{dev}").exists() \
        else f"device id {dev}"


def _ranks(prof: Path, names: set[str] | None = None) -> list[RankDir]:
    """The ranks of a PROF folder (or of a folder holding msprof's exported files directly)."""
    first: dict[int, int] = {}
    for dev, r in _devices(prof):
        first.setdefault(r, dev)
    return [RankDir(r, prof, FAMILY, _rank_from(prof, dev), prof_captured_ns(prof), format=FAMILY)
            for r, dev in sorted(first.items())]


_PROF_TS = re.compile(r"^PROF_\d+_(\d{17})_")


def prof_captured_ns(p: Path) -> int | None:
    """The capture time in a PROF_<n>_<YYYYmmddHHMMSSfff>_... folder name."""
    m = _PROF_TS.match(p.name)
    if not m:
        return None
    import datetime as _dt

    try:  # a bad date (month 13) only loses the ordering of duplicates: the folder's mtime then
        t = _dt.datetime.strptime(m.group(1)[:14], "%Y%m%d%H%M%S").replace(tzinfo=_dt.timezone.utc)
    except ValueError:
        return None
    return int(t.timestamp()) * 10**9 + int(m.group(1)[14:]) * 10**6


#: Raw CANN msprof output: PROF_* folders (or msprof's exported files copied into a plain folder).
FORMAT = Format(
    name=FAMILY,
    label="raw CANN msprof output",
    claims=lambda d, names: is_prof_dir(d),
    ranks=_ranks,
    sources=MSPROF_SOURCES,
    vars=_vars,
    finish=lambda rd, ctx: _finish(rd, ctx.state.get("hccl_ops", [])),
    loose=has_loose_output,
)


def load_msprof_rank(prof_dir: Path, rank: int) -> RankData:
    """Read rank ``rank`` of the PROF folder ``prof_dir`` (or of a folder holding msprof's exported
    files directly) into a RankData of family ``cann_msprof``.

    Core sources (op_summary, msprof json, the task_time and step_trace timeline slices) that are
    present must parse, or ParseError names the file; other broken files are failed sources. Every
    source is listed (present / absent with why / failed).
    """
    prof = Path(prof_dir)
    rd_dir = next((r for r in _ranks(prof) if r.rank == rank), None)
    if rd_dir is None:
        rd_dir = RankDir(rank, prof, FAMILY, _rank_from(prof, rank), None, format=FAMILY)
    rd_dir.captured_ns = None
    return read_rank(FORMAT, rd_dir)


def _with_steps(h: dict[str, pd.DataFrame], steps: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Steps of one hccl slice's ops (by start time), carried to their transport and link rows."""
    co = h["comm_ops"].copy()
    co["step"] = assign_steps(co["start_us"].to_numpy(float), steps)
    step_of = dict(zip(co["op_name"], co["step"]))
    out = dict(h, comm_ops=co)
    for table, col in (("comm_transport", "op_name"), ("comm_links", "variant")):
        t = h[table].copy()
        t["step"] = pd.array([step_of.get(n, pd.NA) for n in t[col]], dtype=model.INT)
        out[table] = t
    return out


def _finish(rd: RankData, hccl_ops: list[pd.DataFrame]) -> None:
    ops = pd.concat(hccl_ops, ignore_index=True) if hccl_ops else pd.DataFrame(columns=["name", "start_us", "dur_us", "track"])
    steps = rd.tables.get("profiler_steps", model.STEPS.empty())
    k = rd.table("kernels")
    if len(ops):
        # HCCL: one kernel row per op (as kernel_details has it) instead of its notify / copy tasks
        if len(k) and rd.info.kernels_from == TASK_TIME_JSON:
            k = k[~k["core"].isin(list(HCCL_TASK_TYPES)).fillna(False).to_numpy()]
            op_k = table_frame(model.KERNELS, [
                {"rank": rd.rank, "name": n, "type": hccl_op_type(n), "core": "HCCL", "kind": "communication",
                 "start_us": s, "dur_us": d}
                for n, s, d in zip(ops["name"], ops["start_us"], ops["dur_us"])
            ])
            k = pd.concat([k, op_k], ignore_index=True).sort_values("start_us", kind="stable").reset_index(drop=True)
            rd.tables["kernels"] = k
        tl = rd.table("timeline")
        if not (tl["lane"] == "hccl").any():
            add = model.TIMELINE.frame({
                "rank": pd.Series([rd.rank] * len(ops), dtype=model.INT),
                "lane": pd.Series(["hccl"] * len(ops), dtype=model.STR),
                "track": ops["track"].astype("string"),
                "name": ops["name"].astype("string"),
                "start_us": ops["start_us"].astype("float64"),
                "dur_us": ops["dur_us"].astype("float64"),
            })
            put(rd, "timeline", add)
    if len(steps):
        t = rd.table("kernels")
        if len(t) and t["step"].isna().all():
            t = t.copy()
            t["step"] = assign_steps(t["start_us"].to_numpy(float), steps)
            rd.tables["kernels"] = t
        k = rd.table("kernels")
        if len(k):
            covered = k["step"].dropna().nunique()
            if covered < len(steps):
                rd.notes.append(
                    f"the kernel timeline covers {covered} of the {len(steps)} steps of the step trace "
                    "(CANN exported the task timeline of the first iteration only): the other steps are the step trace's"
                )
    if not len(rd.table("kernels")) and not len(rd.table("timeline")) and not len(steps):
        rd.notes.append("no kernels, no timeline and no step trace: only statistics were read")
