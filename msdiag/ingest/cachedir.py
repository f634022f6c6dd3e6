"""The cache folder: where it is, whether it is trusted, and the hash of msdiag's sources that keys its entries.

Kept apart from the rank cache (ingest/cache.py, which imports the model and pandas) because every CLI
run checks its cache folder and a result-cache hit (msdiag/result_cache.py) needs nothing more: this
module imports only the standard library and msdiag's version.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from msdiag import __version__


def default_dir() -> Path:
    """The user's cache folder: ``$MSDIAG_HOME/cache``, else ``$XDG_CACHE_HOME/msdiag``, else ``~/.cache/msdiag``."""
    home = os.environ.get("MSDIAG_HOME")
    if home:
        return Path(home).expanduser() / "cache"
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base and os.path.isabs(base) else Path.home() / ".cache") / "msdiag"


#: msdiag's sources that decide what a rank read holds: the readers and what they build on. The
#: reduction applied to the stored tables is identified by its caller (``reduce_id``).
_CODE = ("__init__.py", "errors.py", "model.py", "units.py", "intervals.py", "ingest")


def code_fingerprint(parts: tuple[str, ...] = _CODE) -> str:
    """A hash of msdiag's sources ``parts`` (files or folders under msdiag/): by default those that
    build a rank's tables, so that a changed reader never meets an old entry."""
    pkg = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(__version__.encode())
    files = [p for c in parts for p in ([pkg / c] if c.endswith(".py") else (pkg / c).rglob("*.py"))]
    for p in sorted(files):
        try:
            data = p.read_bytes()
        except OSError:
            continue
        h.update(str(p.relative_to(pkg)).encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:32]


# ---- trust: a cache folder is trusted like code ---------------------------------------------------

PRIVATE = 0o700  # folders the cache creates
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def owner_problem(st: os.stat_result) -> str | None:
    """Why a folder's owner or mode lets someone else change what is in it, or None."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"is owned by another user (uid {st.st_uid})"
    if st.st_mode & _OTHERS_WRITE:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def untrusted(folder: str | Path) -> str | None:
    """Why the cache folder ``folder`` cannot be trusted, or None when it can.

    Parquet and JSON read from a cache decide every figure of a report, so the folder is trusted as
    ssh trusts ~/.ssh: it (when it exists) must be owned by the user (or root) and writable by no one
    else; each folder above it must be owned by the user or root and, when others may write in it,
    sticky (like /tmp), so that no one else can rename the cache folder away and put another in its
    place. Nothing is read to decide: a few stat calls."""
    p = Path(folder).expanduser().resolve()
    try:
        if p.exists():
            st = os.stat(p)
            if not stat.S_ISDIR(st.st_mode):
                return "is not a folder"
            why = owner_problem(st)
            if why is not None:
                return why
        for up in p.parents:
            if not up.exists():
                continue
            st = os.stat(up)
            if st.st_uid not in (os.geteuid(), 0):
                return f"lies in {up}, owned by another user (uid {st.st_uid})"
            if st.st_mode & _OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
                return f"lies in {up}, writable by others without the sticky bit (mode {stat.S_IMODE(st.st_mode):04o})"
    except OSError as e:
        return f"cannot be checked ({e.strerror or e})"
    return None
