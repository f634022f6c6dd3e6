"""The safe path to a capture's files: what may be opened, and walks that end.

Captures travel (tarred, copied half-way, edited by scripts) and may hold anything a file system
can: named pipes, links to devices, links to files outside the capture, links back to a parent
folder, folders nobody may list. msdiag reads only regular files that resolve inside the capture
(:func:`refusal` says why any other is not read, from ``stat`` alone: nothing is opened to find
out), walks each real folder once however many links lead to it (:class:`Seen`), and takes a
number in a file or folder name as a rank id only when it is one a job can have
(:func:`rank_number`). Every check is cheap and happens before anything is opened.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

#: The largest rank id msdiag accepts from a name (an int32: any real job is far smaller).
MAX_RANK = 2**31 - 1

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def rank_number(digits: str) -> int | None:
    """The rank id written as ``digits`` in a name, or None when no job has such a rank."""
    if not digits.isdigit() or len(digits) > len(str(MAX_RANK)):
        return None
    n = int(digits)
    return n if n <= MAX_RANK else None


def within(path: str | Path, folder: str | Path) -> bool:
    """``path`` is ``folder`` or lies under it, links and ``~`` resolved: msdiag never writes there when
    ``folder`` is a capture (its cache folders, its reports)."""
    return within_any(path, [folder]) is not None


def within_any(path: str | Path, folders: Iterable[str | Path]) -> str | Path | None:
    """The first of ``folders`` that :func:`within` says ``path`` lies in, or None; ``path`` resolved once (a cache
    folder checked against the capture and each of its rank folders)."""
    try:
        p = Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return None
    above = {p, *p.parents}
    for folder in folders:
        try:
            if Path(folder).expanduser().resolve() in above:
                return folder
        except (OSError, RuntimeError):
            continue
    return None


def real_roots(*folders: str | Path | None) -> tuple[Path, ...]:
    """The folders a capture's files must resolve into, links resolved (None entries skipped)."""
    return tuple(dict.fromkeys(Path(os.path.realpath(f)) for f in folders if f is not None))


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def refusal(path: Path, roots: Sequence[Path], real_dirs: dict[str, str] | None = None) -> str | None:
    """Why ``path`` must not be read, or None for a regular file inside one of ``roots``.

    Decided from the path and ``stat`` only: a FIFO or a device is never opened (opening one may
    block forever or never end), and a link out of the capture is never followed to its content.
    ``real_dirs``: folder -> its real path, kept by the caller for the files of one rank (a file that is not a link is
    its real folder's entry: one ``lstat`` instead of one per part of its path, then a ``stat``).
    """
    real, mode = _real(path, real_dirs)
    if roots and not any(_inside(real, r) for r in roots):
        return "a symlink to outside the capture: not read (msdiag reads only files inside the capture folder)"
    if mode is None:
        try:
            mode = os.stat(path).st_mode
        except OSError as e:
            return f"cannot be read ({e.strerror or e})"
    if not stat.S_ISREG(mode):
        return f"not a regular file ({_kind(mode)}): not read"
    return None


def _inside(real: str, root: Path) -> bool:
    """``Path(real).is_relative_to(root)`` for a real path and a real root (both absolute, links resolved, normalised:
    ``os.path.realpath``), on their texts: ``real`` is the root or below it (pathlib's comparison of parts, ~8 us a
    file, the most of a rank's admission of its dozen files)."""
    r, top = os.path.normcase(real), os.path.normcase(os.fspath(root))
    return r == top or r.startswith(top if top.endswith(os.sep) else top + os.sep)


def _real(path: Path, real_dirs: dict[str, str] | None) -> tuple[str, int | None]:
    """``path`` with every link resolved (``os.path.realpath``), and its mode where the ``lstat`` that found it no link
    gave it (else None). With ``real_dirs``, a file that is not a link is placed in its folder's real path (kept there)."""
    if real_dirs is not None:
        parent, name = os.path.split(os.fspath(path))
        if name not in ("", ".", ".."):
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                mode = None
            if mode is not None and not stat.S_ISLNK(mode):
                folder = real_dirs.get(parent)
                if folder is None:
                    folder = real_dirs[parent] = os.path.realpath(parent)
                return os.path.join(folder, name), mode
    return os.path.realpath(path), None


def read_head(path: Path, roots: Sequence[Path], limit: int) -> bytes | None:
    """At most ``limit`` bytes of a regular file inside ``roots``; None when it is refused or unreadable.

    For the few peeks discovery makes into a file (a family, a rank id): never the whole file.
    """
    if refusal(path, roots) is not None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


class Seen:
    """The real folders a walk has entered: each is entered once, however many links lead to it
    (``s1 .. s8 -> .`` would otherwise make N^depth paths)."""

    def __init__(self) -> None:
        self._ids: set[tuple[int, int]] = set()

    def first(self, folder: str | Path) -> bool:
        """True the first time the real folder behind ``folder`` is met (False after, or when it is
        not a folder that can be stat'ed)."""
        try:
            st = os.stat(folder)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            return False
        key = (st.st_dev, st.st_ino)
        if key in self._ids:
            return False
        self._ids.add(key)
        return True

    def __len__(self) -> int:
        return len(self._ids)

    def new(self, folders: Iterable[Path]) -> list[Path]:
        """The folders of ``folders`` met for the first time, in order."""
        return [f for f in folders if self.first(f)]


def capture_root(folder: Path) -> Path:
    """The folder discovery walks for ``folder``: a rank's ASCEND_PROFILER_OUTPUT/ or FRAMEWORK/ belongs to the
    rank folder above it (every file a run may read lies under it)."""
    return folder.parent if folder.name in ("ASCEND_PROFILER_OUTPUT", "FRAMEWORK") else folder
