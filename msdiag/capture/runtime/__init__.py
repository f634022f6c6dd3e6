"""The capture runtime: runs inside the Python processes of the user's job.

``msdiag capture`` copies this package, as ``_msdiag_capture_runtime/``, next to a generated
``sitecustomize.py`` in a temporary folder that it prepends to the job's PYTHONPATH. Python loads
``sitecustomize`` at start-up, which calls :func:`install`. Nothing here imports msdiag (the job's
Python may not have it) and nothing imports MindSpore until the job does.

In a process that owns the capture (the job's process, or each msrun worker), one job per module:

- ``hooks.py``: import hooks that patch ``mindspore.dataset`` iterators, ``Model.train`` and
  ``Cell.__call__`` as the job imports them, and report fetches, step callbacks and Cell calls;
- ``steps.py``: which of those are step boundaries (the strongest source wins), the steps and data
  waits kept, the recording window's state;
- ``profiler.py``: ``mindspore.profiler.profile`` with a ``schedule`` (skip, warm-up, active, once)
  and ``prof.step()`` at every boundary, so MindSpore's step number is the job's;
- ``minddata.py``: MindData pipeline profiling (on before the pipeline launches, parsed by
  MindSpore's own parser with the trace);
- ``watchdog.py``: no step for ``wait_for_steps`` seconds -> a time window of ``seconds``;
- ``signals.py``: SIGTERM during the window closes the capture first (MindSpore turns Ctrl-C into
  SIGTERM);
- ``sidecar.py``: ``msdiag_steps.json`` (the window's steps and data waits) in the rank folder;
- ``journal.py``: the log ``<out>/msdiag_capture.log`` and the state ``<out>/.msdiag/pid_<pid>.json``;
- ``coordinator.py``: :class:`~.coordinator.Capture` composes them and owns their lock.

Every part catches its own errors (logged, the capture is given up, the job goes on); the job's
own exceptions pass through untouched.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from .coordinator import Capture
from .settings import (
    CONFIG_ENV,
    LOG_FILE,
    MARKERS_FILE,
    MARKERS_FORMAT,
    MARKERS_VERSION,
    OWNER_ENV,
    STATE_DIR,
    STEP_SOURCE_LABEL,
    WORKER_OWNER_ENV,
)

__all__ = [
    "CONFIG_ENV", "LOG_FILE", "MARKERS_FILE", "MARKERS_FORMAT", "MARKERS_VERSION", "OWNER_ENV", "STATE_DIR",
    "STEP_SOURCE_LABEL", "WORKER_OWNER_ENV", "Capture", "install",
]

_CAP: Optional[Capture] = None  # this process's capture, once installed


def install() -> None:
    """Called by the bootstrap's sitecustomize: set up the capture in this process if it owns one."""
    global _CAP
    raw = os.environ.get(CONFIG_ENV)
    if not raw or _CAP is not None:
        return
    try:
        cfg = json.loads(raw)
    except ValueError:
        return
    if not _claim():
        return
    _CAP = Capture(cfg)
    _CAP.hooks.install()
    _CAP.save_state()


def _claim() -> bool:
    """Whether this process owns a capture: the job's own process or an msrun worker, not their helpers.

    msrun's scheduler (MS_ROLE=MS_SCHED) never trains. A process started by an owner (MindData
    workers, the profiler's parser pool) finds the owner's pid in the environment and stays passive.
    """
    role = os.environ.get("MS_ROLE")
    if role == "MS_SCHED":
        return False
    key = WORKER_OWNER_ENV if role == "MS_WORKER" else OWNER_ENV
    if os.environ.get(key):
        return False
    os.environ[key] = str(os.getpid())
    return True
