"""The capture's settings as the job sees them, and the names both sides of the capture share.

Everything in ``msdiag/capture/runtime/`` runs inside the user's job, whose Python may not have
msdiag: these modules import only the standard library (and MindSpore, once the job has imported
it). ``msdiag capture`` copies the package next to its ``sitecustomize.py`` as
``_msdiag_capture_runtime``; the parent side (``runner.py``) reads the same constants from here.
"""

from __future__ import annotations

import time
from typing import Any

CONFIG_ENV = "MSDIAG_CAPTURE"
# pid of the process owning the capture in this process tree (subprocesses started by it stay passive)
OWNER_ENV = "MSDIAG_CAPTURE_OWNER"
WORKER_OWNER_ENV = "MSDIAG_CAPTURE_WORKER_OWNER"  # the same, below an msrun worker (MS_ROLE=MS_WORKER)

STATE_DIR = ".msdiag"
LOG_FILE = "msdiag_capture.log"

# The sidecar written into each rank folder. Times are unix-epoch microseconds (time.time_ns() / 1000),
# the clock of trace_view.json "ts" on MindSpore CPU captures. ingest/msdiag_markers.py reads it (it
# carries its own copy of these three; tests/test_capture.py checks they agree).
MARKERS_FILE = "msdiag_steps.json"
MARKERS_FORMAT = "msdiag-markers"
MARKERS_VERSION = 1

# Step sources, weakest first: a stronger source seen once takes over step counting.
PRIORITY = {"cell": 1, "callback": 2, "fetch": 3}
STEP_SOURCE_LABEL = {
    "fetch": "dataset iterator fetches (each next() on a mindspore.dataset iterator starts a step)",
    "callback": "Model.train step callbacks",
    "cell": "top-level Cell calls (each call of the loop's outermost Cell is a step)",
}


def now_us() -> float:
    """Unix-epoch microseconds: the clock of the markers (and of trace_view.json on MindSpore CPU)."""
    return time.time_ns() / 1000.0


class Settings:
    """What to capture, from the JSON that ``msdiag capture`` puts in ``MSDIAG_CAPTURE``."""

    def __init__(self, cfg: dict[str, Any]):
        self.out = str(cfg["out"])
        self.skip = int(cfg.get("skip", 2))
        self.warmup = int(cfg.get("warmup", 1))
        self.active = max(1, int(cfg.get("steps", 5)))
        self.stop_after = bool(cfg.get("stop_after", False))
        self.seconds = float(cfg.get("seconds", 10.0))
        self.wait_for_steps = float(cfg.get("wait_for_steps", 30.0))
        self.profile_memory = bool(cfg.get("profile_memory", True))
        self.minddata = bool(cfg.get("minddata", True))
        # MindData samples its queues every N ms; None keeps MindSpore's setting (1000 ms by default).
        # Sampling is not free: every 10 ms it slowed a fetch-heavy loop by about half, every 100 ms by
        # about a third, every 1000 ms not measurably (README, msdiag capture).
        self.md_interval_ms: int | None = cfg.get("minddata_interval_ms")
        self.first = self.skip + self.warmup + 1  # first recorded step (job steps count from 1)
        self.last = self.first + self.active - 1

    def window(self) -> dict[str, int]:
        """The step window as the state file and the markers describe it."""
        return {"skip": self.skip, "warmup": self.warmup, "steps": self.active, "first": self.first, "last": self.last}
