"""Step counting: which boundaries are steps, the steps kept and the data waits inside the window.

Three sources mark step boundaries (``settings.PRIORITY``, weakest first): top-level Cell calls,
Model.train step callbacks, dataset iterator fetches. A stronger source seen once takes over; only
the thread that first showed the winning source counts. A step runs from its boundary to the next
one (or, for the last, to the last activity seen). Only steps inside the recording window are kept.
"""

from __future__ import annotations

from typing import Any, Tuple

from .settings import PRIORITY

# typing.Tuple: evaluated at import in the job's Python, which may be older than msdiag's
Step = Tuple[int, float, float, str]  # (step, start_us, end_us, what ended it)
Wait = Tuple[int, float, float]  # (step, start_us, end_us)

_MAX_CELLS = 64  # outermost Cells remembered while looking for the loop's Cell


class Window:
    """The recording window: the capture's state, its mode and where recording began and ended.

    state: waiting -> scheduled -> recording -> captured | failed; or waiting -> time -> captured.
    mode: ``steps`` (steps first..last are recorded) or ``time`` (the time-window fallback).
    """

    def __init__(self, first: int, last: int):
        self.first = first
        self.last = last
        self.state = "waiting"
        self.mode = "steps"
        self.rec_start: float | None = None
        self.rec_end: float | None = None

    def holds(self, step: int, t: float) -> bool:
        """Whether a step (or a wait) starting at ``t`` belongs to what is recorded."""
        if self.state not in ("scheduled", "recording", "time"):
            return False  # nothing is kept before the profiler exists or after the capture
        if self.mode == "steps":
            return self.first <= step <= self.last
        return self.rec_start is not None and t >= self.rec_start

    def kept(self, steps: list[Step]) -> list[Step]:
        """The steps of the recorded window (by number, or by time in the time-window mode)."""
        if self.mode == "steps":
            return [s for s in steps if self.first <= s[0] <= self.last]
        lo, hi = self.rec_start, self.rec_end
        if lo is None or hi is None:
            return []
        return [s for s in steps if s[1] >= lo and s[2] <= hi]


class StepCounter:
    """The job's step boundaries: the source in use, the current step, the steps and waits kept."""

    def __init__(self) -> None:
        self.mode: str | None = None  # the step source in use
        self.thread: int | None = None  # the thread whose boundaries count (the first to show one)
        self.cell: int | None = None  # id() of the Cell whose calls are steps (loops without data)
        self.cell_first: dict[int, float] = {}  # outermost Cells called once so far -> time of that call
        self.step = 0  # step boundaries seen (the job's current step)
        self.cur_start: float | None = None
        self.steps: list[Step] = []
        self.waits: list[Wait] = []
        self.last_activity: float | None = None

    def cell_starts(self, cell: Any, t: float) -> list[float]:
        """The step starts a call of an outermost Cell at ``t`` gives (none, one, or two the first time).

        The step Cell is the first one called a second time (a loop's forward, decoder or train
        cell), and only its calls are steps: a training step written as functions calls several
        Cells (network, loss, optimizer), a one-off call before the loop is not the loop. Once found,
        its first call began step 1.
        """
        key = id(cell)
        starts: list[float] = []
        if self.cell is None:
            first = self.cell_first.get(key)
            if first is None:
                if len(self.cell_first) < _MAX_CELLS:
                    self.cell_first[key] = t
                return starts
            self.cell = key
            self.cell_first = {}
            starts.append(first)
        if key == self.cell:
            starts.append(t)
        return starts

    def accept(self, source: str, thread: int) -> tuple[bool, str | None]:
        """Whether a boundary from ``source`` on ``thread`` counts, and a note when the source changes."""
        if self.mode is None or PRIORITY[source] > PRIORITY[self.mode]:
            note = None
            if self.mode is not None:
                note = f"from step {self.step + 1} on, steps are counted from {source} (before: {self.mode})"
            self.mode = source
            self.thread = thread
            return True, note
        return PRIORITY[source] == PRIORITY[self.mode] and thread == self.thread, None

    def advance(self, t: float, window: Window) -> None:
        """A boundary at ``t``: the current step ends there and the next one begins."""
        if self.step and self.cur_start is not None:
            self.keep(self.step, self.cur_start, t, "next step", window)
        self.step += 1
        self.cur_start = t

    def keep(self, step: int, start: float, end: float, end_from: str, window: Window) -> None:
        if window.holds(step, start):
            self.steps.append((step, start, end, end_from))

    def wait(self, t: float, wait_end: float, window: Window) -> None:
        """The current step began with a data wait from ``t`` to ``wait_end``."""
        if window.holds(self.step, t):
            self.waits.append((self.step, t, wait_end))

    def close_open_step(self, window: Window) -> None:
        """The step in progress when recording ends: it ends at the last activity seen, if any."""
        if self.step and self.cur_start is not None and self.last_activity and self.last_activity > self.cur_start:
            if not any(s == self.step for s, *_ in self.steps):
                self.keep(self.step, self.cur_start, self.last_activity, "last activity (the job ended or stopped)", window)

    def kept(self, window: Window) -> list[Step]:
        return window.kept(self.steps)

    def kept_waits(self, window: Window) -> list[Wait]:
        kept = {s for s, *_ in self.kept(window)}
        return [w for w in self.waits if w[0] in kept]
