"""One process's capture: the coordinator of the hooks, the step counter, the profiler driver,
MindData profiling, the watchdog, the SIGTERM guard and the sidecar.

Each part keeps to its job; this class owns the lock they share, the capture's life (a part that
fails gives the capture up, never the job: :meth:`Capture.guard`) and the process's state file.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import threading
from typing import Any, Callable, Dict, Optional

from . import sidecar
from .hooks import Hooks
from .journal import Journal
from .minddata import MindDataProfiling
from .profiler import ProfilerDriver
from .settings import Settings, now_us
from .signals import SigtermGuard
from .steps import StepCounter, Window
from .watchdog import Watchdog


class Capture:
    """The capture of one process of the job (the job's own process, or each msrun worker)."""

    def __init__(self, cfg: Dict[str, Any]):
        self.settings = s = Settings(cfg)
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.info: Dict[str, Any] = {}  # the job's identity, for the manifest (profiler.identify)
        self.journal = Journal(s.out, self.pid, self.info)
        self.window = Window(s.first, s.last)
        self.counter = StepCounter()
        self.minddata = MindDataProfiling(s, self.journal)
        self.sigterm = SigtermGuard(self.journal, self.at_exit)
        self.driver = ProfilerDriver(s, self.window, self.journal, self.minddata, self.sigterm, self.save_state, self._trace_ready)
        self.hooks = Hooks(self)
        self.folder: Optional[str] = None  # the rank folder MindSpore wrote (its name)
        self.ms_imported_us: Optional[float] = None
        self.stopped_by_msdiag = False
        self.exited = False

    # ---- life and state ------------------------------------------------------------------------

    def owns(self) -> bool:
        """Whether this process is the one that captures (a forked child of the job is not), still running."""
        return os.getpid() == self.pid and not self.exited

    def guard(self, what: str, fn: Callable[[], Any], fatal: bool = True) -> Any:
        """Run a piece of capture work; any error is logged and the job goes on.

        ``fatal``: the capture is given up (else only this part of it is missing).
        """
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            if not fatal:
                self.journal.problem(f"{what} failed (the capture goes on without it)", e)
                return None
            self.journal.problem(f"{what} failed; the capture is given up, the job goes on", e)
            self.window.state = "failed"
            self.driver.abandon()
            self.save_state()
            return None

    def save_state(self) -> None:
        self.journal.write_state(self._state)

    def _state(self) -> Dict[str, Any]:
        """This process's state for the manifest (runner.py reads it)."""
        w, c = self.window, self.counter
        return {
            "pid": self.pid,
            "host": socket.gethostname(),
            "argv": list(sys.argv),
            "role": os.environ.get("MS_ROLE"),
            "state": w.state,
            "window_mode": w.mode,
            "steps_from": c.mode,
            "steps_seen": c.step,
            "captured_steps": [s for s, *_ in c.kept(w)] if w.state == "captured" else [],
            "window": self.settings.window(),
            "recording_us": [w.rec_start, w.rec_end],
            "folder": self.folder,
            "minddata_sampling_ms": self.minddata.sampling_ms,
            "stopped_by_msdiag": self.stopped_by_msdiag,
            "exited": self.exited,
            "mindspore_imported": self.ms_imported_us is not None,
            "problems": list(self.journal.problems),
            "notes": list(self.journal.notes),
            **self.info,
        }

    # ---- what the hooks report -----------------------------------------------------------------

    def on_mindspore_imported(self, module: Any) -> None:
        def run() -> None:
            self.ms_imported_us = now_us()
            self.info["mindspore_version"] = getattr(module, "__version__", None)
            atexit.register(self.at_exit)
            self.save_state()
            Watchdog(self.settings, self).start()

        self.guard("setting up after `import mindspore`", run, fatal=False)

    def on_iterator_init(self) -> None:
        if self.minddata.wanted() and self.owns():
            self.guard("turning on MindData pipeline profiling", self.minddata.init, fatal=False)

    def on_fetch(self, t0: float, t1: float) -> None:
        """A dataset fetch returned a batch: a step starts at t0 and waited on data until t1."""
        self.on_step_begin("fetch", t0, wait_end=t1)

    def on_activity_end(self, t: float) -> None:
        self.counter.last_activity = t

    def on_cell_call(self, cell: Any, t: float) -> None:
        """A call of an outermost Cell: a step boundary when no stronger source marks steps."""
        if self.counter.mode in ("fetch", "callback"):
            return
        with self.lock:
            for start in self.counter.cell_starts(cell, t):
                self.on_step_begin("cell", start)

    def on_step_begin(self, source: str, t: float, wait_end: Optional[float] = None) -> None:
        """A step boundary from ``source`` at ``t``: count it, drive the profiler, stop if asked to."""
        with self.lock:
            if self.exited or self.window.state == "failed":
                return
            stop = self._count(source, t, wait_end)
        if stop:
            if threading.current_thread() is threading.main_thread():
                raise SystemExit(0)
            os.kill(os.getpid(), signal.SIGTERM)  # steps run in another thread: end the process

    def _count(self, source: str, t: float, wait_end: Optional[float]) -> bool:
        """Under the lock: the boundary counted; True when --stop-after ends the job here."""
        c, w = self.counter, self.window
        counts, note = c.accept(source, threading.get_ident())
        if note:
            self.journal.note(note)
        if not counts:
            return False
        c.advance(t, w)
        if w.state in ("waiting", "scheduled", "recording"):
            self.guard("driving the profiler schedule", lambda: self.driver.drive(c.step, t, c.mode))
        if wait_end is not None:
            c.wait(t, wait_end, w)
        if not self.driver.stop_requested:
            return False
        self.driver.stop_requested = False
        self.stopped_by_msdiag = True
        self.exited = True
        self.journal.log(f"--stop-after: stopping the job at the start of step {c.step}")
        self.save_state()
        return True

    # ---- the time-window fallback (the watchdog keeps the time) ---------------------------------

    def step_seen(self) -> bool:
        return bool(self.counter.step)

    def has_exited(self) -> bool:
        return self.exited

    def start_time_window(self) -> bool:
        """Open the time window unless a step came meanwhile; False: the watchdog has nothing more to do."""
        with self.lock:
            if self.counter.step or self.exited or self.window.state != "waiting":
                return False
            self.guard("starting the time-window profiler", self.driver.start_time_window)
        return True

    def end_time_window(self) -> bool:
        """Close the time window; True when --stop-after should now end the job."""
        with self.lock:
            w = self.window
            if w.state != "time" or self.exited:
                return False
            self.counter.close_open_step(w)
            w.rec_end = now_us()
            self.guard("stopping the time-window profiler", self.driver.stop)
            stop = self.settings.stop_after and w.state == "captured"
            if stop:
                self.stopped_by_msdiag = True
                self.exited = True
                self.journal.log("--stop-after: stopping the job (SIGTERM to itself) after the time window")
                self.save_state()
        return stop

    # ---- the window closes -----------------------------------------------------------------------

    def _trace_ready(self, handler: Callable[[Any], None], prof_inst: Any) -> None:
        """The window closed: MindSpore parses the trace, then MindData files and msdiag's markers."""
        w = self.window
        try:
            w.rec_end = w.rec_end or now_us()
            handler(prof_inst)  # MindSpore's online parse (trace_view.json, FRAMEWORK/, ...)
            from mindspore.profiler.common.profiler_context import ProfilerContext

            ctx = ProfilerContext()
            folder = ctx.ascend_ms_dir
            rank = int(ctx.rank_id)
            self.info["rank"] = rank
            self.folder = os.path.basename(folder)
            if self.minddata.active:
                try:
                    self.minddata.save(ctx, rank)
                except Exception as e:  # noqa: BLE001
                    self.journal.problem("MindData pipeline files could not be written", e)
            c = self.counter
            doc = sidecar.markers(rank, self.pid, c.mode, self.settings, w, c.kept(w), c.kept_waits(w), self.info.get("device_properties"))
            sidecar.write_markers(folder, doc)
            w.state = "captured"
            self.sigterm.release()
            self.journal.log(f"captured steps {[s for s, *_ in c.kept(w)]} into {self.folder}")
        except Exception as e:  # noqa: BLE001
            self.journal.problem("writing the capture failed", e)
            w.state = "failed"
        self.save_state()

    def at_exit(self) -> None:
        """The job is ending (normally, by an exception or sys.exit): close the window with what there is."""
        try:
            with self.lock:
                if self.owns() and self.window.state in ("scheduled", "recording", "time"):
                    self._close_at_exit()
                self.exited = True
                self.save_state()
        except Exception as e:  # noqa: BLE001
            self.journal.problem("closing the capture at exit failed", e)
            self.save_state()

    def _close_at_exit(self) -> None:
        w, c, s = self.window, self.counter, self.settings
        was = w.state
        c.close_open_step(w)
        if was != "scheduled":
            w.rec_end = now_us()
        self.driver.stop()
        if was == "recording" and w.state != "captured":
            self.journal.problem("the job ended while recording and no trace was written")
        elif was == "recording":
            self.journal.notes.append(f"the job ended at step {c.step}, during the window (steps {s.first}-{s.last})")
        elif was == "scheduled":
            self.journal.notes.append(f"the job ended at step {c.step}, before the window opened at step {s.first}: nothing recorded")
