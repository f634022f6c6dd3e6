"""Before the job runs: can it run, does its Python have MindSpore, and the capture folder.

Every refusal happens here, before anything runs or is created: a command not found, MindSpore not
importable by the Python the job will run (for a shell script or any other non-Python command: the
``python3`` / ``python`` first on the job's PATH, which is what a script calls), an ``--out`` that is
a file or already holds a capture. The folder is created only once every check has passed, and
removed again by :func:`remove_out` if msdiag created it and it holds nothing the user needs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from msdiag.capture import runtime
from msdiag.errors import InputError

INSTALL_HINT = "pip install 'msdiag[capture]'"
MANIFEST = "manifest.json"
_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$")

_PROBE = (
    "import importlib.util, sys\n"
    "spec = importlib.util.find_spec('mindspore')\n"
    "if spec is None: sys.exit(3)\n"
    "try:\n"
    "    from importlib.metadata import version; print(version('mindspore'))\n"
    "except Exception: print('unknown')\n"
)


def job_python(command: list[str]) -> str | None:
    """The Python interpreter the job runs: the command itself, or the shebang of a script (msrun)."""
    exe = shutil.which(command[0])
    if exe is None:
        return None
    if _PYTHON_RE.match(os.path.basename(command[0])):
        return exe
    try:
        with open(exe, "rb") as f:
            head = f.readline(512)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    parts = head[2:].decode("utf-8", "replace").split()
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env" and len(parts) > 1:
        return shutil.which(parts[1])
    return parts[0] if _PYTHON_RE.match(os.path.basename(parts[0])) else None


def path_python(env: dict[str, str]) -> str | None:
    """The Python a non-Python command (a shell script, ``bash -c``) would start: first on its PATH."""
    for name in ("python3", "python"):
        exe = shutil.which(name, path=env.get("PATH", os.defpath))
        if exe:
            return exe
    return None


def check_mindspore(command: list[str], env: dict[str, str]) -> tuple[str, str | None]:
    """(python, MindSpore version) of the job's Python; InputError when MindSpore is not importable there.

    A command that is not Python (a shell script, ``bash -c ...``, ``false``) is checked against the
    Python first on its PATH: the job can only be captured in a Python that imports MindSpore.
    """
    if shutil.which(command[0]) is None:
        hint = f": it comes with MindSpore ({INSTALL_HINT})" if command[0] == "msrun" else ""
        raise InputError(command[0], f"command not found{hint}")
    py = job_python(command)
    which = "the job's Python"
    if py is None:
        py = path_python(env)
        which = "the Python first on the job's PATH (the command is not Python)"
        if py is None:
            raise InputError(
                command[0],
                f"is not Python and no python3 is on the job's PATH: msdiag capture profiles Python jobs with MindSpore ({INSTALL_HINT})",
            )
    probe_env = {k: v for k, v in env.items() if k != runtime.CONFIG_ENV}
    try:
        r = subprocess.run([py, "-c", _PROBE], env=probe_env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError(py, f"cannot run the job's Python to check for MindSpore ({e})") from None
    if r.returncode == 3:
        raise InputError(
            py,
            f"MindSpore is not importable by {which}; install it there with {INSTALL_HINT} "
            "(MindSpore 2.10 with numpy<2), or run the job with the Python that has it",
        )
    if r.returncode != 0:
        return py, None
    return py, (r.stdout.strip() or None)


def check_out(out: Path) -> None:
    """Refuse an ``--out`` that cannot take a new capture (creates nothing)."""
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a folder (--out)")
    if out.is_dir() and (any(out.glob("*_ascend_ms")) or (out / MANIFEST).exists()):
        raise InputError(out, "already holds a capture: choose another --out or remove it")


def make_out(out: Path) -> Path | None:
    """Create ``out`` (and its missing parents); the topmost folder msdiag created, or None if it existed."""
    top = None
    for p in [out, *out.parents]:
        if p.exists():
            break
        top = p
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(out, f"cannot create the capture folder: {e.strerror or e}") from None
    return top


def remove_out(out: Path, created: Path | None) -> bool:
    """Undo :func:`make_out`: remove what msdiag wrote into ``out`` (its state, the manifest) and the
    folders it created, each only if nothing else is left in it. A folder the user gave that existed
    before is left as it is. True when ``out`` is gone."""
    if created is None:
        return False
    shutil.rmtree(out / runtime.STATE_DIR, ignore_errors=True)
    (out / MANIFEST).unlink(missing_ok=True)
    for p in [out, *out.parents]:
        try:
            p.rmdir()  # only an empty folder goes
        except OSError:
            break
        if p == created:
            break
    return not out.exists()
