"""Run the job and pass signals on so that the job receives each one once.

In the terminal's foreground (an interactive ``msdiag capture``), the job stays in msdiag's process
group: the terminal delivers Ctrl-C (SIGINT) and hang-up (SIGHUP) to the whole foreground group, the
job included, so msdiag does not forward those; it forwards SIGTERM (a ``kill`` of msdiag alone).
Anywhere else (a script, CI, a test harness, the background) the job runs in a process group of its
own: a signal sent to msdiag's group (``kill -INT -PGID``, ``timeout``) reaches msdiag only, and
msdiag forwards SIGINT, SIGTERM and SIGHUP to the job once. Without this, one SIGINT sent to the group
reached the job twice, and the second could cut the profiler's window closing short. On Linux the
job also gets SIGTERM if msdiag dies (a SIGKILL to msdiag's group no longer reaches it), which closes
its window and ends it. A signal msdiag ignores (``nohup``) is not forwarded.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_FORWARDED = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
# delivered by the terminal to its whole foreground process group
_TERMINAL = {signal.SIGINT} | ({signal.SIGHUP} if hasattr(signal, "SIGHUP") else set())


def foreground() -> bool:
    """Whether msdiag is in the terminal's foreground process group (then Ctrl-C reaches the job too)."""
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except (AttributeError, OSError, ValueError):
            continue
    return False


def _own_group() -> Callable[[], None]:
    """The child's set-up before exec: a process group of its own, and SIGTERM when msdiag dies."""
    parent = os.getpid()
    prctl = None
    if sys.platform.startswith("linux"):
        try:
            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            prctl = None

    def setup() -> None:  # runs in the child between fork and exec: no imports, no allocation to speak of
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() != parent:  # msdiag died before prctl took effect
                os.kill(os.getpid(), signal.SIGTERM)

    return setup


def run_job(command: list[str], env: dict[str, str]) -> int:
    """Run ``command`` to its end, passing signals on (see the module's docstring); its return code."""
    in_terminal = foreground()
    proc = subprocess.Popen(command, env=env, preexec_fn=None if in_terminal else _own_group())

    def forward(signum: int, _frame: Any) -> None:
        if in_terminal and signum in _TERMINAL:
            return  # the terminal sent it to the whole foreground group, the job included
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    old = {s: signal.signal(s, forward) for s in _FORWARDED if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        while True:
            try:
                return proc.wait()
            except InterruptedError:
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def describe_exit(returncode: int) -> tuple[str, int]:
    """(how the job ended, in words; the exit code that says the same, a shell's 128 + N for signal N)."""
    if returncode >= 0:
        return f"job exit code {returncode}", returncode
    num = -returncode
    try:
        name = signal.Signals(num).name
    except ValueError:
        name = f"signal {num}"
    code = 128 + num
    return f"job killed by signal {num} ({name}); exit code {code}", code
