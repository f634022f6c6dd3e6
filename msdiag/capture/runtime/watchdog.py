"""The time-window fallback: no step boundary for ``wait_for_steps`` seconds after ``import mindspore``
-> record ``seconds`` seconds of whatever the job does instead.

A daemon thread started when the job imports MindSpore. It only keeps time; the capture decides,
under its lock, whether the window can still open (no step seen, nothing started) and closes it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Callable, Protocol

from .settings import Settings

# msrun's own process imports MindSpore but never trains: it records no time window
LAUNCHER_MODULES = ("mindspore.parallel.cluster.run",)


class TimeWindow(Protocol):
    """What the watchdog asks of the capture."""

    def step_seen(self) -> bool: ...

    def has_exited(self) -> bool: ...

    def start_time_window(self) -> bool: ...

    def end_time_window(self) -> bool: ...


def is_launcher() -> bool:
    """Whether this process is msrun's launcher (not a rank)."""
    return any(m in sys.modules for m in LAUNCHER_MODULES)


def _wait(seconds: float, tick: float, stop: Callable[[], bool]) -> bool:
    """Sleep ``seconds`` in ticks; False as soon as ``stop()`` is true."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(tick)
        if stop():
            return False
    return True


class Watchdog:
    """Starts, then ends the time window of a job where nothing marks steps."""

    def __init__(self, settings: Settings, capture: TimeWindow):
        self.wait_for_steps = settings.wait_for_steps
        self.seconds = settings.seconds
        self.capture = capture

    def start(self) -> None:
        threading.Thread(target=self.run, name="msdiag-capture-watchdog", daemon=True).start()

    def run(self) -> None:
        cap = self.capture
        if not _wait(self.wait_for_steps, 0.2, lambda: cap.step_seen() or cap.has_exited()):
            return
        if is_launcher() or not cap.start_time_window():
            return
        if not _wait(self.seconds, 0.1, cap.has_exited):
            return
        if cap.end_time_window():  # --stop-after: end the job as a kill would
            os.kill(os.getpid(), signal.SIGTERM)
