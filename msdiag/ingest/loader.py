"""Load a capture: discover its ranks, read each rank's files into the canonical tables.

Every file a format can carry is listed once in a source spec (file, reader, why it may be
absent). A core source that is present but unreadable stops the analysis with a clear error;
any other source that fails is recorded as failed with its reason, and the rest is analyzed.
Ranks are read in parallel by a process pool; a single rank is read in-process.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from msdiag.errors import InputError, ParseError
from msdiag.ingest import (
    ascend_csv,
    cann_msprof,
    communication,
    legacy,
    metadata,
    mindspore_cpu,
    msdiag_markers,
    sqlite_export,
)
from msdiag.ingest.discover import (
    ASCEND_PT,
    CANN_MSPROF,
    MINDSPORE_CPU,
    MINDSPORE_LEGACY,
    Discovery,
    RankDir,
    discover,
)
from msdiag.ingest.trace_view import read_trace_view
from msdiag.model import ABSENT, FAILED, PRESENT, Capture, RankData, Source

Reader = Callable[[Path, RankData], None]


@dataclass(frozen=True)
class Spec:
    """One source a format can carry."""

    name: str  # file name pattern; {rank} is replaced by the rank id
    folder: str  # sub-folder of the rank folder
    read: Reader | None  # reads the file into the rank (None: rows_of does)
    core: bool  # a core source that is present must parse, or the analysis stops
    absent_reason: Callable[[RankData], str]
    table: str | None = None  # the table whose rows the source adds (for the rows count)
    rows_of: Callable[[Path, int], pd.DataFrame] | None = None  # a plain reader: its rows go to `table`


def _put(rd: RankData, table: str, df: pd.DataFrame) -> None:
    """Add rows to a rank's table (a table can be fed by several files)."""
    if table in rd.tables and len(rd.tables[table]):
        rd.tables[table] = pd.concat([rd.tables[table], df], ignore_index=True)
    else:
        rd.tables[table] = df


# ---- readers adapted to one signature -------------------------------------------------------


def _trace_view(p: Path, rd: RankData) -> None:
    tv = read_trace_view(p, rd.rank)
    _put(rd, "timeline", tv.timeline)
    _put(rd, "counters", tv.counters)
    if len(tv.host_ops):
        _put(rd, "kernels", tv.host_ops)
        rd.meta["kernels_from"] = "trace_view.json (CPU OP)"
    rd.meta["trace_processes"] = tv.processes
    rd.meta["step_source"] = tv.step_source


def _kernel_details(p: Path, rd: RankData) -> None:
    _put(rd, "kernels", ascend_csv.read_kernel_details(p, rd.rank))
    rd.meta["kernels_from"] = p.name


def _step_trace_time(p: Path, rd: RankData) -> None:
    rd.tables["profiler_steps"] = ascend_csv.read_step_trace_time(p, rd.rank)


def _communication(p: Path, rd: RankData) -> None:
    ops, transport = communication.read_communication(p, rd.rank)
    _put(rd, "comm_ops", ops)
    _put(rd, "comm_transport", transport)


def _memory_record(p: Path, rd: RankData) -> None:
    df, notes = ascend_csv.read_memory_record(p, rd.rank)
    _put(rd, "memory", df)
    rd.notes.extend(notes)


def _dataset_csv(p: Path, rd: RankData) -> None:
    rd.tables["dataset_stages"] = ascend_csv.read_dataset_csv(p, rd.rank)


def _minddata(p: Path, rd: RankData) -> None:
    summary = p.with_name(p.name.replace("minddata_pipeline_raw_", "minddata_pipeline_summary_").replace(".csv", ".json"))
    _put(rd, "data_pipeline", ascend_csv.read_minddata_pipeline(p, summary if summary.exists() else None, rd.rank))


def _profiler_info(p: Path, rd: RankData) -> None:
    rd.meta["profiler_info"] = metadata.read_profiler_info(p)


def _profiler_metadata(p: Path, rd: RankData) -> None:
    rd.meta["profiler_metadata"] = metadata.read_profiler_metadata(p)


def _msdiag_markers(p: Path, rd: RankData) -> None:
    """msdiag capture's step markers and data waits; the profiler's own step markers win where present."""
    doc = msdiag_markers.read_markers_doc(p)
    rows = msdiag_markers.markers_timeline(doc, rd.rank)
    tl = rd.table("timeline")
    if len(tl) and (tl["lane"] == "step").any():
        rows = rows[rows["lane"] != "step"]
        rd.notes.append(f"{p.name}: the profiler's own ProfilerStep#N markers are used; msdiag's data waits are added")
    else:
        rd.meta["step_source"] = f"msdiag capture markers ({p.name}): {doc.get('steps_from') or 'source unknown'}"
    if (doc.get("window") or {}).get("mode") == "time":
        rd.notes.append(f"{p.name}: nothing marked steps when the job was captured: msdiag capture recorded a time window")
    _put(rd, "timeline", rows)


def _cpu_op_timestamps(p: Path, rd: RankData) -> None:
    if "kernels" in rd.tables and len(rd.tables["kernels"]):
        return  # trace_view.json already gave the host ops; this file holds the same launches
    _put(rd, "kernels", mindspore_cpu.read_cpu_op_timestamps(p, rd.rank))
    rd.meta["kernels_from"] = p.name


# ---- why a source may be absent -------------------------------------------------------------


def _level(rd: RankData) -> str | None:
    info = rd.meta.get("profiler_info") or {}
    return info.get("profiler_level")


def _flag(rd: RankData, key: str) -> bool | None:
    info = rd.meta.get("profiler_info") or {}
    v = info.get(key)
    return None if v is None else bool(v)


def _why_comm(rd: RankData) -> str:
    if _level(rd) == "Level0":
        return "profiler Level0 writes no communication analysis (use Level1 or higher)"
    return "not written by this capture (no HCCL communication recorded, or Level0 profiling)"


def _why_memory(rd: RankData) -> str:
    if _flag(rd, "profile_memory") is False:
        return "profile_memory was off in this capture"
    return "not written by this capture (profile_memory off?)"


def _why_statistic(rd: RankData) -> str:
    if _level(rd) == "Level0":
        return "profiler Level0 writes no op_statistic.csv"
    return "not written by this capture"


def _why_minddata(rd: RankData) -> str:
    if rd.family == ASCEND_PT:
        return "torch_npu writes no MindData pipeline files"
    return "MindData pipeline profiling was off (data_process)"


def _why_dataset(rd: RankData) -> str:
    if rd.family == ASCEND_PT:
        return "torch_npu writes no dataset.csv"
    return "no dataset ops were recorded (data_process off, or no mindspore.dataset pipeline)"


def _why(text: str) -> Callable[[RankData], str]:
    return lambda rd: text


ASCEND_SOURCES: list[Spec] = [
    Spec("profiler_info_{rank}.json", ".", _profiler_info, False, _why(
        "no profiler_info_N.json: framework, version and profiler settings unknown")),
    Spec("profiler_metadata.json", ".", _profiler_metadata, False, _why(
        "no profiler_metadata.json: parallel configuration unknown")),
    Spec("kernel_details.csv", "ASCEND_PROFILER_OUTPUT", _kernel_details, True, _why(
        "no kernel_details.csv: kernels come from trace_view.json only"), table="kernels"),
    Spec("trace_view.json", "ASCEND_PROFILER_OUTPUT", _trace_view, True, _why(
        "no trace_view.json: no timeline of host, HCCL and overlap lanes"), table="timeline"),
    Spec("step_trace_time.csv", "ASCEND_PROFILER_OUTPUT", _step_trace_time, True, _why(
        "no step_trace_time.csv: the profiler's own step breakdown is not there to cross-check"), table="profiler_steps"),
    Spec("communication.json", "ASCEND_PROFILER_OUTPUT", _communication, False, _why_comm, table="comm_ops"),
    Spec("communication_matrix.json", "ASCEND_PROFILER_OUTPUT", None, False, _why_comm, table="comm_links", rows_of=communication.read_communication_matrix),
    Spec("op_statistic.csv", "ASCEND_PROFILER_OUTPUT", None, False, _why_statistic, table="op_stats", rows_of=ascend_csv.read_op_statistic),
    Spec("memory_record.csv", "ASCEND_PROFILER_OUTPUT", _memory_record, False, _why_memory, table="memory"),
    Spec("operator_memory.csv", "ASCEND_PROFILER_OUTPUT", None, False, _why_memory, table="memory_allocs", rows_of=ascend_csv.read_operator_memory),
    Spec("npu_module_mem.csv", "ASCEND_PROFILER_OUTPUT", None, False, _why_memory, table="memory", rows_of=ascend_csv.read_npu_module_mem),
    Spec("static_op_mem.csv", "ASCEND_PROFILER_OUTPUT", None, False, _why(
        "written only for static graphs compiled by GE (graph mode with memory profiling)"), table="memory_allocs", rows_of=ascend_csv.read_static_op_mem),
    Spec("dataset.csv", "ASCEND_PROFILER_OUTPUT", _dataset_csv, False, _why_dataset, table="dataset_stages"),
    Spec("minddata_pipeline_raw_{rank}.csv", "ASCEND_PROFILER_OUTPUT", _minddata, False, _why_minddata, table="data_pipeline"),
    Spec(msdiag_markers.MARKERS_FILE, ".", _msdiag_markers, False, _why(
        "not captured by msdiag capture: no msdiag step markers"), table="timeline"),
]

CPU_SOURCES: list[Spec] = [
    Spec("profiler_metadata.json", ".", _profiler_metadata, False, _why(
        "no profiler_metadata.json (written only when the job calls add_metadata)")),
    Spec("trace_view.json", "ASCEND_PROFILER_OUTPUT", _trace_view, True, _why(
        "no trace_view.json: host ops come from FRAMEWORK/cpu_op_execute_timestamp"), table="kernels"),  # its host ops
    Spec("cpu_op_execute_timestamp_{rank}.txt", "FRAMEWORK", _cpu_op_timestamps, False, _why(
        "no cpu_op_execute_timestamp file"), table="kernels"),
    Spec("cpu_framework_{rank}.txt", "FRAMEWORK", None, False, _why(
        "no cpu_framework file: op input shapes unknown (FLOPs from shapes unavailable)"), table="host_shapes", rows_of=mindspore_cpu.read_cpu_framework),
    Spec("cpu_op_type_info_{rank}.csv", "FRAMEWORK", None, False, _why(
        "no cpu_op_type_info file"), table="op_stats", rows_of=mindspore_cpu.read_cpu_op_type_info),
    Spec("cpu_ms_memory_record_{rank}.txt", "FRAMEWORK", None, False, _why(
        "profile_memory was off in this capture"), table="memory", rows_of=mindspore_cpu.read_cpu_memory_record),
    Spec("minddata_pipeline_raw_{rank}.csv", "ASCEND_PROFILER_OUTPUT", _minddata, False, _why(
        "no MindData pipeline profile: no mindspore.dataset pipeline ran, or MindData profiling was off "
        "(data_process has no effect on CPU; msdiag capture turns it on)"),
        table="data_pipeline"),
    Spec(msdiag_markers.MARKERS_FILE, ".", _msdiag_markers, False, _why(
        "not captured by msdiag capture: no step markers (MindSpore on CPU writes none)"), table="timeline"),
]

# MindSpore on CPU never writes these: say so once instead of leaving the reader to wonder.
CPU_NEVER = {
    "kernel_details.csv": "MindSpore on CPU runs no device kernels: ops are host ops",
    "step_trace_time.csv": "MindSpore on CPU writes no step breakdown",
    "communication.json": "MindSpore on CPU writes no HCCL communication analysis; collectives are host ops",
    "profiler_info_{rank}.json": "MindSpore on CPU writes no profiler_info.json",
    "dataset.csv": "data_process has no effect on CPU captures",
}


def _prof_beside_legacy(folder: Path, rank: int) -> tuple[Path, RankData] | None:
    """The raw CANN output MindSpore 2.1/2.2 kept in PROF_* beside its flat files, for one rank."""
    for r, prof in cann_msprof.find_msprof_ranks(folder):
        if r == rank:
            return prof, cann_msprof.load_msprof_rank(prof, r)
    return None


def load_rank(rd_dir: RankDir) -> RankData:
    """Read one rank's folder into a RankData (raises ParseError on a broken core file)."""
    if rd_dir.family in (MINDSPORE_LEGACY, CANN_MSPROF):
        if rd_dir.family == MINDSPORE_LEGACY:
            rd = legacy.load_legacy_rank(rd_dir.path, rd_dir.rank, prof_reader=_prof_beside_legacy)
        else:
            rd = cann_msprof.load_msprof_rank(rd_dir.path, rd_dir.rank)
        if rd_dir.captured_ns:
            rd.meta["captured_ns"] = rd_dir.captured_ns
        _check_span(rd)
        return rd
    if rd_dir.family != MINDSPORE_CPU and sqlite_export.is_db_rank(rd_dir.path):
        # the SQLite export (export_type db) without the text files: read straight with SQL
        rd = sqlite_export.load_db_rank(rd_dir.path, rd_dir.rank, rd_dir.family)
        rd.meta["rank_from"] = rd_dir.rank_from
        if rd_dir.captured_ns:
            rd.meta["captured_ns"] = rd_dir.captured_ns
        _check_span(rd)
        return rd
    rd = RankData(rank=rd_dir.rank, family=rd_dir.family, path=str(rd_dir.path))
    rd.meta["rank_from"] = rd_dir.rank_from
    if rd_dir.captured_ns:
        rd.meta["captured_ns"] = rd_dir.captured_ns
    specs = CPU_SOURCES if rd_dir.family == MINDSPORE_CPU else ASCEND_SOURCES
    present_core = 0
    for spec in specs:
        fname = spec.name.format(rank=rd.rank)
        p = rd_dir.path / spec.folder / fname if spec.folder != "." else rd_dir.path / fname
        if spec.name.startswith("minddata_pipeline_raw_") and not p.exists():
            alt = sorted((rd_dir.path / spec.folder).glob("minddata_pipeline_raw_*.csv"))
            p = alt[0] if alt else p
        if not p.exists():
            rd.sources.append(Source(rd.rank, fname, ABSENT, None, spec.absent_reason(rd)))
            continue
        before = _rows_of(spec, rd) or 0
        try:
            if spec.read is not None:
                spec.read(p, rd)
            else:
                assert spec.rows_of is not None and spec.table is not None
                _put(rd, spec.table, spec.rows_of(p, rd.rank))
        except ParseError as e:
            if spec.core:
                raise
            rd.sources.append(Source(rd.rank, fname, FAILED, str(p), e.problem))
            continue
        if spec.core:
            present_core += 1
        after = _rows_of(spec, rd)
        rows = None if after is None else after - before  # a table can be fed by several files
        rd.sources.append(Source(rd.rank, fname, PRESENT, str(p), None, rows))
    if rd_dir.family == MINDSPORE_CPU:
        for name, why in CPU_NEVER.items():
            rd.sources.append(Source(rd.rank, name.format(rank=rd.rank), ABSENT, None, why))
    if present_core == 0 and not len(rd.table("kernels")):
        raise InputError(
            rd_dir.path,
            "holds none of trace_view.json, kernel_details.csv, step_trace_time.csv: nothing to analyze "
            "(was the capture's offline analysis run? MindSpore writes ASCEND_PROFILER_OUTPUT/ when it finishes)",
        )
    _check_span(rd)
    return rd


def _rows_of(spec: Spec, rd: RankData) -> int | None:
    t = rd.tables.get(spec.table) if spec.table else None
    return None if t is None else len(t)


def _check_span(rd: RankData) -> None:
    """Record what could make the figures misleading (e.g. no kernels)."""
    if not len(rd.table("kernels")) and not len(rd.table("timeline")):
        rd.notes.append("no kernels and no timeline: the step breakdown comes from step_trace_time.csv only")


def load(
    path: str | Path,
    jobs: int | None = None,
    *,
    cache: str | Path | None = None,
    scheduler: str | None = None,
    reduce: Callable[[RankData], RankData] | None = None,
) -> Capture:
    """Discover and read a capture.

    ``jobs``: worker processes for many ranks (default: CPUs). ``cache``: a cache folder (outside the
    capture) where each rank's tables are kept as Parquet and read back while its files are unchanged
    (``ingest/cache.py``). ``scheduler``: a Dask scheduler address: ranks are read on its workers.
    ``reduce``: applied to each rank where it is read, before it is gathered (a module-level function:
    it travels to the workers). How the ranks were read is in ``Capture.ingest``.
    """
    from msdiag.ingest import parallel

    disc: Discovery = discover(path)
    notes = list(disc.notes)
    rcache = _open_cache(cache, disc, reduce) if cache is not None else None
    if cache is not None:
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError as e:  # a broken install: analyze without the cache, and say so
            rcache = None
            notes.append(f"the rank cache is not used: pyarrow cannot be imported ({e})")
    # one broken rank of many (a job killed mid-capture) must not hide the others: it is left out
    # with a note; a single rank, or every rank broken, is an error as before
    reader = _load_rank_or_mark if len(disc.ranks) > 1 else load_rank
    ranks, info = parallel.read_ranks(disc.ranks, reader, jobs=jobs, cache=rcache, scheduler=scheduler, reduce=reduce)
    broken = [r for r in ranks if UNREADABLE in r.meta]
    if broken and len(broken) == len(ranks):
        first = broken[0]
        raise InputError(first.meta[UNREADABLE][0], first.meta[UNREADABLE][1])
    for r in broken:
        where, problem = r.meta[UNREADABLE]
        notes.append(f"rank {r.rank} left out: {where}: {problem}")
    ranks = [r for r in ranks if UNREADABLE not in r.meta]
    return Capture(path=str(disc.root), ranks=ranks, notes=notes, ingest=info)


UNREADABLE = "unreadable"


def _load_rank_or_mark(rd_dir: RankDir) -> RankData:
    """load_rank, but a rank whose files are broken comes back marked instead of raising."""
    try:
        return load_rank(rd_dir)
    except InputError as e:
        rd = RankData(rank=rd_dir.rank, family=rd_dir.family, path=str(rd_dir.path))
        rd.meta[UNREADABLE] = (e.path, e.problem)
        return rd


def _open_cache(folder: str | Path, disc: Discovery, reduce: Callable[[RankData], RankData] | None) -> Any:
    """The rank cache at ``folder``, refused inside the capture (msdiag never writes into one)."""
    from msdiag.ingest.cache import RankCache

    where = Path(folder).expanduser().resolve()
    for p in [disc.root, *(r.path for r in disc.ranks)]:
        try:
            where.relative_to(Path(p).resolve())
        except ValueError:
            continue
        raise InputError(folder, f"is inside the capture folder {p}; msdiag never writes into a capture: choose a cache folder outside it")
    rid = "none" if reduce is None else f"{reduce.__module__}.{reduce.__qualname__}:{getattr(sys.modules.get(reduce.__module__), 'REDUCE_VERSION', 0)}"
    return RankCache.open(where, rid)


def family_of(cap: Capture) -> str:
    fams = {r.family for r in cap.ranks}
    return fams.pop() if len(fams) == 1 else "mixed"


def describe(cap: Capture) -> dict[str, Any]:
    """The capture's identity: framework and versions, device, ranks, parallel configuration."""
    info: dict[str, Any] = {}
    for r in cap.ranks:
        pi = r.meta.get("profiler_info") or {}
        for k in ("framework", "framework_version", "cann_version", "profiler_level", "aic_metrics"):
            if pi.get(k) is not None and k not in info:
                info[k] = pi[k]
        pm = r.meta.get("profiler_metadata") or {}
        if pm.get("distributed_args") and "parallel" not in info:
            info["parallel"] = metadata.parallel_config(pm["distributed_args"])
    fam = family_of(cap)
    info.setdefault(
        "framework",
        {"ascend_pt": "torch_npu", "ascend_ms": "mindspore", "mindspore_cpu": "mindspore", MINDSPORE_LEGACY: "mindspore"}.get(fam),
    )
    info["family"] = fam
    info["device"] = "CPU" if fam == MINDSPORE_CPU else "Ascend NPU"
    info["ranks"] = len(cap.ranks)
    return info
