"""Run msdiag's CLI in a subprocess, bounded in wall time and address space, and judge the outcome.

Why a subprocess: a hang, a runaway allocation or a kernel OOM kill must end one case, not the test
session. The child runs in its own session (so a process pool it forks is killed with it), under
``RLIMIT_AS`` (a runaway allocation becomes a MemoryError or an abort instead of the machine's OOM
killer), with its own ``XDG_CACHE_HOME`` unless the case passes its own ``--cache``. Its peak RSS is
taken from ``os.wait4`` of that child (the largest of it and the descendants it waited for).

Memory baseline measured on the corpus (2-core VM, msdiag at commit b17a49c): one Ascend rank analysed
with ``--format json`` peaks at ~140 MB RSS and ~1.4 GB of address space (numpy, pandas, pyarrow and
msgspec mapped, pyarrow's thread pools reserved); ``--jobs 2`` on two ranks ~1.55 GB, ``report``
(matplotlib) ~180 MB RSS / 1.5 GB, a run with the cache on ~1.6 GB. Hence a 3 GiB address-space limit
for the small-file cases and an RSS budget of 400 MB plus a small multiple of the input.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msdiag

BYTES_PER_MIB = 1024 * 1024
BYTES_PER_GIB = 1024 * BYTES_PER_MIB
# a clean run takes 1-2 s on an idle 2-core machine, up to ~8 s with four other test sessions on it:
# 60 s tells a hang (minutes, or forever) from a slow machine, even a CI machine under load, so that a
# slow clean run never reads as a hang; a slower CI raises it with MSDIAG_HOSTILE_TIMEOUT
TIMEOUT_S = float(os.environ.get("MSDIAG_HOSTILE_TIMEOUT", "60"))
AS_LIMIT_BYTES = 3 * BYTES_PER_GIB
# the interpreter with numpy / pandas / pyarrow / matplotlib loaded peaks at ~180 MB RSS: 400 MB leaves room
BASELINE_RSS_BYTES = 400 * BYTES_PER_MIB
# peak RSS allowed per byte of input on top of the baseline ("a small multiple of the input's real content")
RSS_PER_INPUT_BYTE = 4.0
# an error line quotes at most a short excerpt of an input
MAX_ERROR_LINE_CHARS = 600
# what ends a child that ran out of address space, other than a clean MemoryError
_MEMORY_SIGNALS = {signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS}
_OUTPUT_CAP = 8 * BYTES_PER_MIB
_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2  # <linux/prctl.h>, <linux/capability.h>
_MSDIAG_ROOT = Path(msdiag.__file__).resolve().parents[1]


@dataclass
class Run:
    """One finished (or killed) CLI run."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    maxrss_bytes: int
    wall_s: float

    @property
    def killed_for_memory(self) -> bool:
        """The child ran out of its address space: a MemoryError, a C++ bad_alloc, or a fatal signal."""
        if self.timed_out:
            return False
        if -self.returncode in _MEMORY_SIGNALS:
            return True
        return "MemoryError" in self.stderr or "bad_alloc" in self.stderr or "Cannot allocate memory" in self.stderr

    @property
    def stderr_lines(self) -> list[str]:
        return [ln for ln in self.stderr.splitlines() if ln.strip()]

    def json(self) -> dict[str, Any]:
        """The JSON report on stdout (``analyze --format json``)."""
        data: dict[str, Any] = json.loads(self.stdout)
        return data

    def describe(self) -> str:
        """A short account of the run for assertion messages."""
        tail = "\n".join(self.stderr_lines[-6:])
        return (f"rc={self.returncode} timed_out={self.timed_out} memory={self.killed_for_memory} "
                f"rss={self.maxrss_bytes / BYTES_PER_MIB:.0f} MiB wall={self.wall_s:.1f}s\nstderr tail:\n{tail}")


def child_env(cache_home: Path | None) -> dict[str, str]:
    """The child's environment: this checkout's msdiag first on PYTHONPATH, an isolated user cache."""
    env = dict(os.environ)
    env.pop("MSDIAG_HOME", None)
    paths = [str(_MSDIAG_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    if cache_home is not None:
        env["XDG_CACHE_HOME"] = str(cache_home)
    env.pop("PYTHONWARNINGS", None)
    return env


def _limits(as_limit: int, drop_dac: bool) -> None:
    """preexec_fn: cap the child's address space (inherited by the workers it forks); with ``drop_dac``,
    take CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH out of its bounding set, so that a child of root
    meets file permissions as any user does (a chmod 000 folder is unreadable to it)."""
    resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))
    if drop_dac:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
            if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def can_drop_dac() -> bool:
    """Whether a child can be started without the permission-bypassing capabilities (root with CAP_SETPCAP)."""
    try:
        subprocess.run(["true"], preexec_fn=lambda: _limits(AS_LIMIT_BYTES, True), check=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def _read(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(_OUTPUT_CAP).decode("utf-8", errors="replace")


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, int, bool]:
    """Reap the child within ``timeout`` (else kill its whole session): (status, maxrss bytes, timed out)."""
    deadline = time.monotonic() + timeout
    timed_out = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            timed_out = True
            _kill_session(proc.pid)
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    _kill_session(proc.pid)  # pool workers left behind by a killed parent
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss * 1024, timed_out


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_cli(args: Sequence[str], *, cwd: Path, cache_home: Path | None, timeout: float = TIMEOUT_S,
            as_limit: int = AS_LIMIT_BYTES, prelude: str | None = None, drop_dac: bool = False) -> Run:
    """Run ``python -m msdiag.cli ARGS`` (or ``prelude`` then the CLI's main) bounded in time and memory;
    ``drop_dac``: without root's power to read any file (see ``_limits``)."""
    if prelude is None:
        argv = [sys.executable, "-m", "msdiag.cli", *args]
    else:
        code = f"{prelude}\nimport sys\nfrom msdiag.cli import main\nsys.argv = ['msdiag', *sys.argv[1:]]\nmain()\n"
        argv = [sys.executable, "-c", code, *args]
    out, err = cwd / ".hostile-stdout", cwd / ".hostile-stderr"
    start = time.monotonic()
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(argv, cwd=cwd, env=child_env(cache_home), stdin=subprocess.DEVNULL, stdout=fo,
                                stderr=fe, start_new_session=True, preexec_fn=lambda: _limits(as_limit, drop_dac))
        rc, rss, timed_out = _wait(proc, timeout)
    run = Run(list(args), rc, _read(out), _read(err), timed_out, rss, time.monotonic() - start)
    out.unlink()
    err.unlink()
    return run


# ---- the inputs, before and after ------------------------------------------------------------------------

Entry = tuple[Any, ...]


def snapshot(root: Path) -> dict[str, Entry]:
    """Every entry under ``root`` without following links or opening anything but regular files.

    A regular file is its SHA-256, size and mode; a link its target text; a folder its mode; a FIFO
    or device its type (reading one is exactly what a case may be about, so the harness never does).
    """
    found: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            found[str(p.relative_to(root))] = _entry(p)
    return found


def _entry(p: Path) -> Entry:
    st = os.lstat(p)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(p))
    if stat.S_ISDIR(st.st_mode):
        return ("dir", stat.S_IMODE(st.st_mode))
    if stat.S_ISREG(st.st_mode):
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(BYTES_PER_MIB), b""):
                h.update(chunk)
        return ("file", h.hexdigest(), st.st_size, stat.S_IMODE(st.st_mode))
    return ("other", stat.S_IFMT(st.st_mode))


def input_bytes(root: Path) -> int:
    """The real content of an input: the sizes of the regular files under it (links not followed)."""
    total = 0
    for dirpath, _, filenames in os.walk(root, followlinks=False):
        for name in filenames:
            st = os.lstat(Path(dirpath) / name)
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


# ---- judging a run ------------------------------------------------------------------------------------------

def assert_bounded(run: Run, rss_budget: int) -> None:
    """No hang, not killed for memory, no traceback, peak RSS within the budget, never exit 1 for an error."""
    assert not run.timed_out, f"hang: killed after {TIMEOUT_S:.0f} s\n{run.describe()}"
    assert not run.killed_for_memory, f"ran out of memory\n{run.describe()}"
    assert "Traceback" not in run.stderr, f"traceback on stderr\n{run.describe()}"
    assert run.maxrss_bytes <= rss_budget, (
        f"peak RSS {run.maxrss_bytes / BYTES_PER_MIB:.0f} MiB > budget {rss_budget / BYTES_PER_MIB:.0f} MiB\n{run.describe()}")
    assert run.returncode in (0, 1, 2), f"unexpected exit code\n{run.describe()}"


def assert_stopped(run: Run, *names: str) -> None:
    """Exit 2 with exactly one stderr line, ``msdiag: error: ...``, naming one of ``names`` (a file)."""
    assert run.returncode == 2, f"expected exit 2\n{run.describe()}"
    lines = run.stderr_lines
    assert len(lines) == 1 and lines[0].startswith("msdiag: error:"), f"expected one error line\n{run.describe()}"
    assert len(lines[0]) <= MAX_ERROR_LINE_CHARS, f"error line quotes too much of the input:\n{lines[0][:1000]}"
    if names:
        assert any(n in lines[0] for n in names), f"the error names none of {names}: {lines[0]}"


def assert_analyzed(run: Run) -> dict[str, Any]:
    """Exit 0/1 (findings), a JSON report on stdout, nothing but warnings on stderr; the report."""
    assert run.returncode in (0, 1), f"expected the analysis to go on (exit 0/1)\n{run.describe()}"
    assert not any(ln.startswith("msdiag: error:") for ln in run.stderr_lines), run.describe()
    return run.json()


def failed_source(report: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The first source entry named ``name`` whose status is failed (None if there is none)."""
    for s in report.get("sources", []):
        if s.get("name") == name and s.get("status") == "failed":
            return dict(s)
    return None


def assert_refused(run: Run, name: str, *reason_words: str) -> None:
    """The file ``name`` is not read: either the analysis stops (exit 2, one line naming it) or it goes on
    with the source ``failed`` and a reason containing one of ``reason_words`` (case-insensitive)."""
    if run.returncode == 2:
        assert_stopped(run, name)
        line = run.stderr_lines[0].lower()
    else:
        report = assert_analyzed(run)
        src = failed_source(report, name)
        assert src is not None, f"{name} is not a failed source: {[s for s in report['sources'] if s['name'] == name]}"
        line = str(src.get("reason")).lower()
    if reason_words:
        said = re.sub(r"/\S+", "<path>", line)  # a word in a path (the case's temp folder) does not count
        assert any(w.lower() in said for w in reason_words), f"the reason says none of {reason_words}: {line}"


def new_notes(report: dict[str, Any], clean: dict[str, Any]) -> list[str]:
    """Capture and rank notes of ``report`` that the clean copy's report does not have."""
    def notes(r: dict[str, Any]) -> set[str]:
        found = set(r.get("notes", []))
        for rank in r.get("ranks", []):
            found.update(rank.get("notes", []))
        return found
    return sorted(notes(report) - notes(clean))
