"""Find every rank in a path and tell which profiler format wrote it.

A user gives a rank's folder (``*_ascend_ms``, ``*_ascend_pt``), a parent folder holding many
ranks, or a capture folder written by ``msdiag capture``. Ranks come from ``profiler_info_N.json``,
from file-name suffixes (``cpu_framework_N.txt``) or from folder names (``rank_N``); when a rank
appears twice the newest capture is kept and the choice is reported.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from msdiag.errors import InputError
from msdiag.ingest import cann_msprof, legacy

# Format families msdiag reads today.
ASCEND_MS = "ascend_ms"  # MindSpore 2.3+ Ascend text output
ASCEND_PT = "ascend_pt"  # torch_npu, same text formats
MINDSPORE_CPU = "mindspore_cpu"  # MindSpore on CPU (trace_view.json + FRAMEWORK/cpu_*)
MINDSPORE_LEGACY = legacy.FAMILY  # MindSpore 1.x-2.2 flat profiler/ folders (MindInsight era)
CANN_MSPROF = cann_msprof.FAMILY  # raw CANN msprof output (PROF_*)

FAMILY_LABEL = {
    ASCEND_MS: "MindSpore Ascend profiler output (2.3+)",
    ASCEND_PT: "torch_npu Ascend profiler output",
    MINDSPORE_CPU: "MindSpore CPU profiler output",
    MINDSPORE_LEGACY: "MindSpore 1.x-2.2 profiler files",
    CANN_MSPROF: "raw CANN msprof output",
}

_PROFILER_INFO = re.compile(r"^profiler_info_(\d+)\.json$")
_CPU_RANK_FILE = re.compile(r"^cpu_(?:framework|op_execute_timestamp|ms_memory_record|op_detail_info)_(\d+)\.(?:txt|csv)$")
_RANK_DIR = re.compile(r"(?:^|[_-])rank[_-]?(\d+)(?:$|[_-])", re.IGNORECASE)
_TS_DIR = re.compile(r"_(\d{13,17})_ascend_(?:ms|pt)$")
_MAX_DEPTH = 6

# Database files outside a rank folder are named in the error when nothing else is found.
_DB_RANK = re.compile(r"^ascend_(?:pytorch|mindspore)_profiler(?:_(\d+))?\.db$")
_DB_FILE = re.compile(r"^(ascend_pytorch_profiler(_\d+)?|ascend_mindspore_profiler(_\d+)?|msprof_\d+|analysis|communication_analyzer)\.db$")


@dataclass
class RankDir:
    """One rank's capture folder as found on disk."""

    rank: int
    path: Path
    family: str
    rank_from: str  # how the rank id was found
    captured_ns: int | None  # capture time (folder name or profiler_info), for choosing the newest
    text_files: list[str] = field(default_factory=list)  # names under ASCEND_PROFILER_OUTPUT/


@dataclass
class Discovery:
    root: Path
    ranks: list[RankDir]
    notes: list[str]
    family: str


def _is_rank_dir(d: Path, names: set[str]) -> bool:
    """A rank folder holds ASCEND_PROFILER_OUTPUT/ or MindSpore CPU FRAMEWORK/cpu_*_N files.

    profiler_info_N.json alone is not enough: MindSpore 1.x-2.2 flat folders carry it too.
    """
    if "ASCEND_PROFILER_OUTPUT" in names and (d / "ASCEND_PROFILER_OUTPUT").is_dir():
        return True
    if "FRAMEWORK" in names and (d / "FRAMEWORK").is_dir():
        try:
            return any(_CPU_RANK_FILE.match(n) for n in os.listdir(d / "FRAMEWORK"))
        except OSError:
            return False
    return False


def _listdir(d: Path) -> set[str]:
    try:
        return set(os.listdir(d))
    except OSError as e:
        raise InputError(d, f"cannot be listed ({e.strerror or e})") from None


def _rank_and_family(d: Path, names: set[str]) -> RankDir:
    out = d / "ASCEND_PROFILER_OUTPUT"
    text_files = sorted(os.listdir(out)) if out.is_dir() else []
    fw = d / "FRAMEWORK"
    fw_files = sorted(os.listdir(fw)) if fw.is_dir() else []

    rank: int | None = None
    rank_from = ""
    for n in sorted(names):
        m = _PROFILER_INFO.match(n)
        if m:
            rank, rank_from = int(m.group(1)), n
            break
    if rank is None:
        for n in fw_files:
            m = _CPU_RANK_FILE.match(n)
            if m:
                rank, rank_from = int(m.group(1)), f"FRAMEWORK/{n}"
                break
    if rank is None:
        for n in text_files:
            m = _DB_RANK.match(n)
            if m and m.group(1) is not None:
                rank, rank_from = int(m.group(1)), f"ASCEND_PROFILER_OUTPUT/{n}"
                break
    if rank is None:
        m = _RANK_DIR.search(d.name)
        if m:
            rank, rank_from = int(m.group(1)), f"folder name {d.name}"
    if rank is None:
        rank, rank_from = 0, "no rank id anywhere: taken as rank 0"

    is_cpu = any(_CPU_RANK_FILE.match(n) for n in fw_files) and not any(
        n.startswith("PROF_") for n in names
    ) and "kernel_details.csv" not in text_files
    if is_cpu:
        family = MINDSPORE_CPU
    elif d.name.endswith("_ascend_pt") or any(n.startswith("ascend_pytorch_profiler") for n in text_files):
        family = ASCEND_PT
    elif d.name.endswith("_ascend_ms"):
        family = ASCEND_MS
    else:
        family = _family_from_info(d, names)

    captured: int | None = None
    m = _TS_DIR.search(d.name)
    if m:
        digits = m.group(1)
        # the folder name carries a UTC timestamp in ms (13 digits) or us (16 digits)
        captured = int(digits) * 10 ** (19 - len(digits))
    return RankDir(rank, d, family, rank_from, captured, text_files)


def _family_from_info(d: Path, names: set[str]) -> str:
    """Tell torch_npu from MindSpore by profiler_info's keys when the folder name does not say."""
    for n in names:
        if _PROFILER_INFO.match(n):
            try:
                head = (d / n).read_text(encoding="utf-8", errors="replace")[:4096]
            except OSError:
                break
            if "ms_profiler_info" in head or "ms_version" in head:
                return ASCEND_MS
            return ASCEND_PT
    return ASCEND_MS


@dataclass
class _Found:
    rank_dirs: list[Path] = field(default_factory=list)  # MindSpore 2.3+ / torch_npu / CPU rank folders
    legacy: list[Path] = field(default_factory=list)  # MindSpore 1.x-2.2 flat profiler folders
    prof: list[Path] = field(default_factory=list)  # raw CANN PROF_* folders
    hints: list[str] = field(default_factory=list)  # files of kinds msdiag does not read


def _walk(root: Path) -> _Found:
    """Capture folders under root, by kind, and hints of files not read."""
    f = _Found()
    stack = [(root, 0)]
    while stack:
        d, depth = stack.pop()
        names = _listdir(d)
        if _is_rank_dir(d, names):
            f.rank_dirs.append(d)
            continue
        if cann_msprof.is_prof_dir(d):
            f.prof.append(d)
            continue
        if legacy.is_legacy_folder(d):
            f.legacy.append(d)  # its PROF_* folders, if any, are read with it
            continue
        for n in names:
            if _DB_FILE.match(n):
                f.hints.append(f"{d / n}: a SQLite profiler database outside a rank folder")
            elif _PROFILER_INFO.match(n):
                f.hints.append(
                    f"{d / n}: profiler_info without ASCEND_PROFILER_OUTPUT/ or MindSpore 1.x-2.2 profiler files "
                    "(a capture whose offline analysis has not run?)"
                )
        if depth < _MAX_DEPTH:
            for n in sorted(names):
                p = d / n
                if p.is_dir() and not n.startswith("."):
                    stack.append((p, depth + 1))
    f.rank_dirs.sort()
    f.legacy.sort()
    f.prof.sort()
    return f


_PROF_TS = re.compile(r"^PROF_\d+_(\d{17})_")


def _prof_captured_ns(p: Path) -> int | None:
    """The capture time in a PROF_<n>_<YYYYmmddHHMMSSfff>_... folder name."""
    m = _PROF_TS.match(p.name)
    if not m:
        return None
    import datetime as _dt

    t = _dt.datetime.strptime(m.group(1)[:14], "%Y%m%d%H%M%S").replace(tzinfo=_dt.timezone.utc)
    return int(t.timestamp()) * 10**9 + int(m.group(1)[14:]) * 10**6


def _other_rank_dirs(root: Path, f: _Found) -> list[RankDir]:
    out: list[RankDir] = []
    for d in f.legacy:
        for rank, p in legacy.find_legacy_ranks(d):
            out.append(RankDir(rank, p, MINDSPORE_LEGACY, f"file-name suffixes in {p.name}/", None))
    profs = list(f.prof)
    if not f.rank_dirs and not f.legacy and not profs and cann_msprof.has_loose_output(root):
        profs = [root]  # msprof's exported files copied into a plain folder
    seen: set[tuple[int, Path]] = set()
    for d in profs:
        for rank, p in cann_msprof.find_msprof_ranks(d):
            if (rank, p) in seen:
                continue
            seen.add((rank, p))
            out.append(RankDir(rank, p, CANN_MSPROF, f"device / info.json of {p.name}", _prof_captured_ns(p)))
    return out


def discover(path: str | Path) -> Discovery:
    """Find the ranks of the capture at ``path``; raise InputError when there is none."""
    root = Path(path)
    if not root.exists():
        raise InputError(root, "no such file or folder")
    if root.is_file():
        raise InputError(
            root,
            "is a file; give the capture folder (a *_ascend_ms / *_ascend_pt rank folder or the folder holding the ranks), "
            "or a request timing log (msdiag JSONL/CSV with arrival_s, or vLLM benchmark_serving JSON)",
        )
    if root.name in ("ASCEND_PROFILER_OUTPUT", "FRAMEWORK"):
        root = root.parent
    found = _walk(root)
    hints = found.hints
    rank_dirs = [_rank_and_family(d, _listdir(d)) for d in found.rank_dirs] + _other_rank_dirs(root, found)
    if not rank_dirs:
        if hints:
            raise InputError(root, f"no profiler capture found, only {hints[0]}")
        raise InputError(
            root,
            "no profiler capture found: expected *_ascend_ms / *_ascend_pt folders with ASCEND_PROFILER_OUTPUT/, "
            "MindSpore CPU FRAMEWORK/cpu_*_N files, MindSpore 1.x-2.2 profiler files, or CANN PROF_* folders",
        )
    notes: list[str] = []
    for r in rank_dirs:
        if r.rank_from.startswith("no rank id"):
            notes.append(f"{r.path}: {r.rank_from}")

    families = {r.family for r in rank_dirs}
    # torch_npu and MindSpore Ascend text output are one format; any other mix is two captures
    kinds = {ASCEND_MS if f == ASCEND_PT else f for f in families}
    if len(kinds) > 1:
        firsts = {}
        for r in rank_dirs:
            firsts.setdefault(r.family, r)
        listing = "; ".join(f"{r.path.name}: {FAMILY_LABEL[r.family]}" for r in firsts.values())
        raise InputError(
            root,
            f"mixes captures of different kinds ({listing}); analyze each capture folder on its own",
        )
    family = ASCEND_PT if families == {ASCEND_PT} else next(iter(kinds))

    by_rank: dict[int, list[RankDir]] = {}
    for r in rank_dirs:
        by_rank.setdefault(r.rank, []).append(r)
    chosen: list[RankDir] = []
    for rank in sorted(by_rank):
        cands = by_rank[rank]
        if len(cands) == 1:
            chosen.append(cands[0])
            continue
        cands.sort(key=lambda r: (r.captured_ns or _mtime_ns(r.path), str(r.path)))
        keep = cands[-1]
        chosen.append(keep)
        dropped = ", ".join(c.path.name for c in cands[:-1])
        notes.append(
            f"rank {rank} appears {len(cands)} times: kept the newest capture {keep.path.name}, ignored {dropped}"
        )
    return Discovery(root, chosen, notes + [f"not read: {h}" for h in hints], family)


def _mtime_ns(p: Path) -> int:
    try:
        return p.stat().st_mtime_ns
    except OSError:
        return 0
