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
from datetime import datetime, timezone
from pathlib import Path

from msdiag.errors import InputError
from msdiag.ingest import cann_msprof, legacy
from msdiag.ingest.engine import RankDir, listings_kept
from msdiag.ingest.folders import ASCEND_MS, ASCEND_PT, MINDSPORE_CPU, PROFILER_INFO
from msdiag.ingest.formats import FORMATS
from msdiag.ingest.paths import Seen, capture_root

__all__ = ["ASCEND_MS", "ASCEND_PT", "CANN_MSPROF", "MINDSPORE_CPU", "MINDSPORE_LEGACY", "Discovery", "RankDir",
           "discover"]

MINDSPORE_LEGACY = legacy.FAMILY  # MindSpore 1.x-2.2 flat profiler/ folders (MindInsight era)
CANN_MSPROF = cann_msprof.FAMILY  # raw CANN msprof output (PROF_*)

FAMILY_LABEL = {
    ASCEND_MS: "MindSpore Ascend profiler output (2.3+)",
    ASCEND_PT: "torch_npu Ascend profiler output",
    MINDSPORE_CPU: "MindSpore CPU profiler output",
    MINDSPORE_LEGACY: "MindSpore 1.x-2.2 profiler files",
    CANN_MSPROF: "raw CANN msprof output",
}

_MAX_DEPTH = 6
# a capture folder holds one folder per rank and a few inside each: a walk past this many is a wrong path
_MAX_FOLDERS = 100_000
# Database files outside a rank folder are named in the error when nothing else is found.
_DB_FILE = re.compile(r"^(ascend_pytorch_profiler(_\d+)?|ascend_mindspore_profiler(_\d+)?|msprof_\d+|analysis|communication_analyzer)\.db$")


# Ranks of one job start their profilers within minutes of each other; captures started more than this far
# apart, with no capture in between, are different runs (another day, another job) and are never mixed.
RUN_GAP_S = 3600


@dataclass
class Discovery:
    root: Path
    ranks: list[RankDir]
    notes: list[str]
    family: str
    # other runs found under the folder, not analysed: {what, ranks, folder, captured}
    runs_left_out: list[dict[str, object]] = field(default_factory=list)


def split_runs(rank_dirs: list[RankDir]) -> list[list[RankDir]]:
    """The rank folders grouped into runs by capture time: a gap of more than RUN_GAP_S between consecutive
    captures starts a new run. One group when any folder has no capture time (the runs cannot be told apart)."""
    if len(rank_dirs) < 2 or any(r.captured_ns is None for r in rank_dirs):
        return [rank_dirs]
    ordered = sorted(rank_dirs, key=lambda r: (r.captured_ns or 0, str(r.path)))
    runs: list[list[RankDir]] = [[ordered[0]]]
    for prev, r in zip(ordered, ordered[1:]):
        if (r.captured_ns or 0) - (prev.captured_ns or 0) > RUN_GAP_S * 1_000_000_000:
            runs.append([])
        runs[-1].append(r)
    return runs


def _when(run: list[RankDir]) -> str:
    """A run's capture times as its folders record them (minute precision)."""
    times = sorted(datetime.fromtimestamp((r.captured_ns or 0) / 1e9, tz=timezone.utc) for r in run)
    first, last = times[0].strftime("%Y-%m-%d %H:%M"), times[-1].strftime("%Y-%m-%d %H:%M")
    return first if first == last else f"{first} to {last[11:] if last[:10] == first[:10] else last}"


def pick_run(rank_dirs: list[RankDir]) -> tuple[list[RankDir], list[dict[str, object]], list[str]]:
    """(the run analysed, the runs left out, notes): the run with the most distinct ranks, then the newest."""
    runs = split_runs(rank_dirs)
    if len(runs) == 1:
        return rank_dirs, [], []
    runs.sort(key=lambda run: (len({r.rank for r in run}), max(r.captured_ns or 0 for r in run)), reverse=True)
    kept, others = runs[0], runs[1:]
    left: list[dict[str, object]] = [
        {
            "what": f"{FAMILY_LABEL.get(run[0].family, run[0].family)} captured {_when(run)}",
            "ranks": sorted({r.rank for r in run}),
            "folder": os.path.commonpath([str(r.path) for r in run]),
            "captured": _when(run),
        }
        for run in others
    ]
    note = (
        f"this folder holds {len(runs)} runs (captures more than {RUN_GAP_S // 3600} hour apart): analysed the one "
        f"captured {_when(kept)} ({len({r.rank for r in kept})} rank(s)); left out "
        + "; ".join(f"{x['what']} in {x['folder']}" for x in left)
    )
    return kept, left, [note]


def _listdir(d: Path) -> set[str]:
    try:
        return set(os.listdir(d))
    except OSError as e:
        raise InputError(d, f"cannot be listed ({e.strerror or e})") from None


def _listdir_or_none(d: Path) -> set[str] | None:
    try:
        return set(os.listdir(d))
    except OSError:
        return None


def _hints(d: Path, names: set[str]) -> list[str]:
    """Files of kinds msdiag does not read where they lie (for the error when nothing is found)."""
    out = []
    for n in names:
        if _DB_FILE.match(n):
            out.append(f"{d / n}: a SQLite profiler database outside a rank folder")
        elif PROFILER_INFO.match(n):
            out.append(
                f"{d / n}: profiler_info without ASCEND_PROFILER_OUTPUT/ or MindSpore 1.x-2.2 profiler files "
                "(a capture whose offline analysis has not run?)"
            )
    return out


def _walk(root: Path) -> tuple[list[RankDir], list[str], list[str]]:
    """The ranks of every capture folder under root (each folder claimed by the first format that
    recognises it, and not entered further), hints of files not read, and the folders left out.

    Each real folder is entered once, however many links lead to it (``s1 .. s8 -> .`` would make
    N^depth paths), and at most ``_MAX_FOLDERS`` of them. A sub-folder that cannot be listed (chmod
    000 scratch space beside the ranks) is left out with a note; only the root must be listable.
    """
    claimed: dict[str, list[tuple[Path, set[str]]]] = {f.name: [] for f in FORMATS}
    hints: list[str] = []
    skipped: list[str] = []
    seen = Seen()
    seen.first(root)
    stack = [(root, 0)]
    while stack:
        d, depth = stack.pop()
        names = _listdir(d) if d == root else _listdir_or_none(d)
        if names is None:
            skipped.append(f"{d}: cannot be listed (permission denied or gone): left out")
            continue
        fmt = next((f for f in FORMATS if f.claims(d, names)), None)
        if fmt is not None:
            claimed[fmt.name].append((d, names))
            continue
        hints.extend(_hints(d, names))
        if depth < _MAX_DEPTH:
            subs = [d / n for n in sorted(names) if not n.startswith(".") and (d / n).is_dir()]
            stack.extend((p, depth + 1) for p in seen.new(subs))
        if len(seen) > _MAX_FOLDERS:
            raise InputError(root, f"holds more than {_MAX_FOLDERS} folders: give the capture folder itself")
    if not any(claimed.values()):
        loose = next((f for f in FORMATS if f.loose is not None and f.loose(root)), None)
        if loose is not None:  # e.g. msprof's exported files copied into a plain folder
            claimed[loose.name].append((root, _listdir(root)))
    return _ranks_of(claimed), hints, skipped


def _ranks_of(claimed: dict[str, list[tuple[Path, set[str]]]]) -> list[RankDir]:
    out: list[RankDir] = []
    seen: set[tuple[str, int, Path]] = set()
    for fmt in FORMATS:
        for d, names in sorted(claimed[fmt.name], key=lambda x: x[0]):
            for r in fmt.ranks(d, names):
                if (fmt.name, r.rank, r.path) not in seen:
                    seen.add((fmt.name, r.rank, r.path))
                    out.append(r)
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
    root = capture_root(root)
    with listings_kept():  # (each format's claims list the same sub-folders of a rank folder)
        rank_dirs, hints, skipped = _walk(root)
    for r in rank_dirs:
        r.root = root  # files may resolve anywhere in the folder the user gave (ingest/paths.py)
    if not rank_dirs:
        if skipped:
            raise InputError(root, f"no profiler capture found; {skipped[0]}")
        if hints:
            raise InputError(root, f"no profiler capture found, only {hints[0]}")
        raise InputError(
            root,
            "no profiler capture found: expected *_ascend_ms / *_ascend_pt folders with ASCEND_PROFILER_OUTPUT/, "
            "MindSpore CPU FRAMEWORK/cpu_*_N files, MindSpore 1.x-2.2 profiler files, or CANN PROF_* folders",
        )
    notes: list[str] = []
    for r in rank_dirs:
        notes.extend(f"{r.path}: {n}" for n in r.notes)
        if r.rank_from.startswith("no rank id"):
            notes.append(f"{r.path}: {r.rank_from}")

    families = {r.family for r in rank_dirs}
    # torch_npu and MindSpore Ascend text output are one format; any other mix is two captures
    kinds = {ASCEND_MS if f == ASCEND_PT else f for f in families}
    if len(kinds) > 1:
        firsts: dict[str, RankDir] = {}
        for r in rank_dirs:
            firsts.setdefault(r.family, r)
        listing = "; ".join(f"{r.path.name}: {FAMILY_LABEL[r.family]}" for r in firsts.values())
        raise InputError(
            root,
            f"mixes captures of different kinds ({listing}); analyze each capture folder on its own",
        )
    family = ASCEND_PT if families == {ASCEND_PT} else next(iter(kinds))
    # runs told apart by capture time are never analysed as one job: the run with most ranks is, the others named
    rank_dirs, runs_left, run_notes = pick_run(rank_dirs)
    notes.extend(run_notes)

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
    return Discovery(root, chosen, notes + [f"not read: {h}" for h in hints + skipped], family, runs_left)


def _mtime_ns(p: Path) -> int:
    try:
        return p.stat().st_mtime_ns
    except OSError:
        return 0
