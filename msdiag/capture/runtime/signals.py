"""SIGTERM while the window is open: close the capture first, then end the job as it would have ended.

MindSpore turns Ctrl-C into SIGTERM (its own SIGINT handler), which skips Python's exit handlers:
without this the window in progress would be lost. The handler is installed only when the job has
no SIGTERM handler of its own, and only from the main thread (where Python runs signal handlers).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable

from .journal import Journal


class SigtermGuard:
    """Closes the capture on SIGTERM while installed, then lets SIGTERM end the process."""

    def __init__(self, journal: Journal, close: Callable[[], None]):
        self.journal = journal
        self.close = close
        self.caught = False

    def catch(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self.caught = True

    def release(self) -> None:
        if self.caught and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self.caught = False

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.journal.log("SIGTERM during the window (Ctrl-C in a MindSpore job, or kill): closing the capture, then the job ends")
        self.release()
        try:
            self.close()
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # the default disposition again: the job ends as it would have
