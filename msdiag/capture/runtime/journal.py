"""What a job process tells ``msdiag capture``: its log lines, problems, notes and state file.

The log is ``<out>/msdiag_capture.log`` (shared by every process of the job, one line per event);
problems and notes go into the process's state file ``<out>/.msdiag/pid_<pid>.json``, which the
runner reads to write the manifest. Nothing here may fail the job: write errors are swallowed (the
log) or logged (the state file).
"""

from __future__ import annotations

import json
import os
import time
import traceback
from typing import Any, Callable

from .settings import LOG_FILE, STATE_DIR


def write_json_atomic(path: str, doc: Any, indent: int = 1) -> None:
    """Write ``doc`` as JSON to ``path`` through a temporary file, so a reader never sees half of it."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=indent)
    os.replace(tmp, path)


class Journal:
    """One process's log, problems and notes; ``info`` is the job's identity (rank, device, ...)."""

    def __init__(self, out: str, pid: int, info: dict[str, Any]):
        self.out = out
        self.pid = pid
        self.info = info
        self.problems: list[str] = []
        self.notes: list[str] = []

    def log(self, msg: str) -> None:
        """One line of the capture log; never raises (logging must not fail the job)."""
        try:
            os.makedirs(self.out, exist_ok=True)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            rank = self.info.get("rank", os.environ.get("RANK_ID", "?"))
            with open(os.path.join(self.out, LOG_FILE), "a", encoding="utf-8") as f:
                f.write(f"{stamp}Z pid {self.pid} rank {rank}: {msg}\n")
        except Exception:  # noqa: BLE001 - logging must never fail the job
            pass

    def problem(self, msg: str, exc: BaseException | None = None) -> None:
        """A problem for the manifest, logged with the traceback of ``exc`` if there is one."""
        self.problems.append(msg if exc is None else f"{msg}: {type(exc).__name__}: {exc}")
        self.log(f"PROBLEM {msg}" + ("\n" + traceback.format_exc() if exc is not None else ""))

    def note(self, msg: str, log: bool = True) -> None:
        """A note for the manifest (and, by default, the log)."""
        self.notes.append(msg)
        if log:
            self.log(msg)

    def write_state(self, build: Callable[[], dict[str, Any]]) -> None:
        """This process's state for the manifest, ``build()``, as <out>/.msdiag/pid_<pid>.json (atomically)."""
        try:
            d = os.path.join(self.out, STATE_DIR)
            os.makedirs(d, exist_ok=True)
            write_json_atomic(os.path.join(d, f"pid_{self.pid}.json"), build())
        except Exception:  # noqa: BLE001
            self.log("could not write the state file:\n" + traceback.format_exc())
