"""What a MindSpore 2.3+ / torch_npu / MindSpore CPU rank folder looks like, and its rank id.

Shared by the formats that read such folders (Ascend text output, its SQLite export, MindSpore on
CPU): a rank folder holds ``ASCEND_PROFILER_OUTPUT/`` or MindSpore CPU ``FRAMEWORK/cpu_*_N`` files.
Ranks come from ``profiler_info_N.json``, else ``FRAMEWORK/cpu_*_N`` suffixes, else a database's
``_N`` suffix, else ``rank_N`` in the folder name.
"""

from __future__ import annotations

import re
from pathlib import Path

from msdiag.ingest.engine import RankDir, listing
from msdiag.ingest.paths import MAX_RANK, rank_number, read_head, real_roots

# Format families of these folders.
ASCEND_MS = "ascend_ms"  # MindSpore 2.3+ Ascend text output
ASCEND_PT = "ascend_pt"  # torch_npu, same text formats
MINDSPORE_CPU = "mindspore_cpu"  # MindSpore on CPU (trace_view.json + FRAMEWORK/cpu_*)

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
PROFILER_INFO = re.compile(r"^profiler_info_(\d+)\.json$")
CPU_RANK_FILE = re.compile(r"^cpu_(?:framework|op_execute_timestamp|ms_memory_record|op_detail_info)_(\d+)\.(?:txt|csv)$")
_RANK_DIR = re.compile(r"(?:^|[_-])rank[_-]?(\d+)(?:$|[_-])", re.IGNORECASE)
_TS_DIR = re.compile(r"_(\d{13,17})_ascend_(?:ms|pt)$")
_DB_RANK = re.compile(r"^ascend_(?:pytorch|mindspore)_profiler(?:_(\d+))?\.db$")
_SHOWN_DIGITS = 20  # a longer number in a name is shown by its length
_INFO_HEAD_BYTES = 4096  # the family is told by profiler_info's first keys


def _names(d: Path) -> list[str]:
    return listing(d)


def is_rank_folder(d: Path, names: set[str]) -> bool:
    """A rank folder holds ASCEND_PROFILER_OUTPUT/ or MindSpore CPU FRAMEWORK/cpu_*_N files.

    profiler_info_N.json alone is not enough: MindSpore 1.x-2.2 flat folders carry it too.
    """
    if OUTPUT_DIR in names and (d / OUTPUT_DIR).is_dir():
        return True
    if "FRAMEWORK" in names and (d / "FRAMEWORK").is_dir():
        return any(CPU_RANK_FILE.match(n) for n in _names(d / "FRAMEWORK"))
    return False


def is_cpu_rank(d: Path, names: set[str]) -> bool:
    """MindSpore on CPU: FRAMEWORK/cpu_*_N files, no PROF_* folder, no kernel_details.csv."""
    return (
        any(CPU_RANK_FILE.match(n) for n in _names(d / "FRAMEWORK"))
        and not any(n.startswith("PROF_") for n in names)
        and "kernel_details.csv" not in _names(d / OUTPUT_DIR)
    )


def _rank_id(d: Path, names: set[str], fw_files: list[str], text_files: list[str],
             notes: list[str]) -> tuple[int, str]:
    """The rank id and where it was found; a name whose number no job has as a rank (beyond int32) is
    passed over with a note in ``notes``."""
    candidates = [
        *((PROFILER_INFO.match(n), n) for n in sorted(names)),
        *((CPU_RANK_FILE.match(n), f"FRAMEWORK/{n}") for n in fw_files),
        *((_DB_RANK.match(n), f"{OUTPUT_DIR}/{n}") for n in text_files),
        (_RANK_DIR.search(d.name), f"folder name {d.name}"),
    ]
    for m, where in candidates:
        if m is None or m.group(1) is None:
            continue
        rank = rank_number(m.group(1))
        if rank is not None:
            return rank, where
        digits = m.group(1)
        shown = digits if len(digits) < _SHOWN_DIGITS else f"<{len(digits)} digits>"  # no 300-digit note
        notes.append(f"{where.replace(digits, shown)}: {shown} is not a rank id (beyond {MAX_RANK}): ignored")
    return 0, "no rank id anywhere: taken as rank 0"


def _family(d: Path, names: set[str], text_files: list[str]) -> str:
    if is_cpu_rank(d, names):
        return MINDSPORE_CPU
    if d.name.endswith("_ascend_pt") or any(n.startswith("ascend_pytorch_profiler") for n in text_files):
        return ASCEND_PT
    if d.name.endswith("_ascend_ms"):
        return ASCEND_MS
    return _family_from_info(d, names)


def _family_from_info(d: Path, names: set[str]) -> str:
    """Tell torch_npu from MindSpore by profiler_info's keys when the folder name does not say."""
    for n in names:
        if PROFILER_INFO.match(n):
            raw = read_head(d / n, real_roots(d), _INFO_HEAD_BYTES)  # never a FIFO, a device, a link out
            if raw is None:
                break
            head = raw.decode("utf-8", errors="replace")
            if "ms_profiler_info" in head or "ms_version" in head:
                return ASCEND_MS
            return ASCEND_PT
    return ASCEND_MS


def ascend_rank(d: Path, names: set[str], fmt: str) -> RankDir:
    """The rank of an Ascend or MindSpore CPU rank folder: id, family, capture time."""
    text_files = _names(d / OUTPUT_DIR)
    notes: list[str] = []
    rank, rank_from = _rank_id(d, names, _names(d / "FRAMEWORK"), text_files, notes)
    captured: int | None = None
    m = _TS_DIR.search(d.name)
    if m:
        digits = m.group(1)
        # the folder name carries a UTC timestamp in ms (13 digits) or us (16 digits)
        captured = int(digits) * 10 ** (19 - len(digits))
    return RankDir(rank, d, _family(d, names, text_files), rank_from, captured, text_files, format=fmt, notes=notes)
