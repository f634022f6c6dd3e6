"""Values outside physical bounds: found in what a reader returns, counted and left out.

A profiler file can carry values no capture can hold: a NaN or negative duration, a duration that
runs far past the capture's end, a timestamp long before its start (``-1e300``), a step id below 0,
or a clock that stands still (every event of a file at the same instant). Left in, one such value
moves a figure without a word (a 160 us "step" from one kernel with ``Step Id -1``; one op lasting
``1e308`` us doubles the computing share). The engine passes every frame a reader returns through
:func:`screen` before it goes into the rank: rows whose required time is missing or impossible are
left out, an impossible step id becomes null (the kernel stays, outside every step), and the
counts come back per problem (:class:`Repair`), for the source's ``repaired`` entry, a note of the
rank and the verdict's "stands on repaired data". A file whose clock stands still is not a
timeline at all: :class:`StoppedClock`, which the engine treats as the file's parse error.

What is judged, per table, is declared once in :data:`CHECKS`. The capture's window is judged per
frame (one file, one clock): its median start plus or minus the larger of ``WINDOW_MADS`` median
absolute deviations and ``MARGIN_US``; an end may run ``MARGIN_US`` past the last start kept. The
margin is generous on purpose: a real capture's events lie within seconds of each other (the
corpus: at most 6 s), an absurd value lies years away, and a clean capture must lose nothing.
Memory samples are not judged against a window: real exports mix clocks there (a torch_npu
memory_record.csv of 2023 holds samples a year apart).

This module imports only the model, errors and units.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from msdiag.units import US_PER_S

#: how far from the bulk of a file's timestamps a value may lie and still be the capture's (1 hour)
MARGIN_US = 3600 * US_PER_S
#: the window's half-width in median absolute deviations of the file's starts (long captures)
WINDOW_MADS = 20.0
#: a file with at least this many timed rows, every one starting at the same instant, has no clock
STOPPED_CLOCK_ROWS = 3


@dataclass(frozen=True)
class Check:
    """What is judged in one canonical table.

    ``start``: the timestamp column; ``durs``: duration columns; ``required``: every row must have a
    start and durations (a null start is a row that cannot be placed; a null duration is counted),
    else null is a figure the file lacks (kept, not counted);
    ``window``: starts judged against the file's window (and ends against its last start);
    ``step``: a negative step id is left out (the row kept, in no step).
    A row with an impossible start is left out; an impossible duration or step becomes null.
    """

    start: str | None = None
    durs: tuple[str, ...] = ()
    required: bool = False
    window: bool = False
    step: bool = False


CHECKS: dict[str, Check] = {
    "kernels": Check("start_us", ("dur_us",), required=True, window=True, step=True),
    "timeline": Check("start_us", ("dur_us",), required=True, window=True),
    # hccl_raw (MindSpore 1.x-2.2) records no op start: a null start there is a figure the file lacks
    "comm_ops": Check("start_us", ("elapse_us",), window=True, step=True),
    "counters": Check("ts_us", window=True),
    "memory": Check("ts_us"),
    "memory_allocs": Check("alloc_us", ("dur_us",)),
    "comm_transport": Check(None, ("time_us",), step=True),
    "comm_links": Check(None, ("time_us",), step=True),
    "op_stats": Check(None, ("total_us", "min_us", "avg_us", "max_us")),
}


class StoppedClock(Exception):
    """Every timed row of a file starts at the same instant: its timestamps are not a clock."""


@dataclass
class Repair:
    """What :func:`screen` left out: counts per ``"<table>.<column>: <problem>"``."""

    counts: Counter[str] = field(default_factory=Counter)

    def __bool__(self) -> bool:
        return bool(self.counts)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        """The counts as the JSON contract's ``sources[].repaired`` shows them (sorted keys)."""
        return {k: int(self.counts[k]) for k in sorted(self.counts)}

    def note(self, name: str) -> str:
        """One line for the rank's notes: which file, what was left out and why."""
        parts = ", ".join(f"{n} {what}" for what, n in sorted(self.counts.items()))
        return f"{name}: {self.total} value(s) outside physical bounds left out ({parts})"


def screen(table: str, df: pd.DataFrame, repair: Repair) -> pd.DataFrame:
    """``df`` (rows of canonical ``table``) without its impossible values; counts go to ``repair``.

    A row whose start is impossible cannot be placed: it is left out. An impossible duration or
    step id is left out of its row (null): the event happened at its start, its length or step is
    unknown, and the step breakdown still sees it (a dropped row would shift a repeating structure).
    Raises :class:`StoppedClock` when the file's timestamps stand still.
    """
    check = CHECKS.get(table)
    if check is None or not len(df):
        return df
    out = df
    start = None  # the starts of out's rows
    if check.start is not None and check.start in df.columns:
        start = _floats(df[check.start])
        keep = _judge_starts(table, check, start, repair)
        if not keep.all():
            out, start = df[keep].reset_index(drop=True), start[keep]
    durs = {col: _floats(out[col]) for col in check.durs if col in out.columns}
    nulls = {col: bad for col, bad in _judge_durs(table, check, durs, start, repair).items() if bad.any()}
    if check.step and "step" in out.columns:
        bad = _floats(out["step"]) < 0  # (null: False)
        _count(repair, table, "step", "negative step id", bad)
        if bad.any():
            nulls["step"] = bad
    if nulls:
        out = out.copy()
        for col, bad in nulls.items():
            out.loc[bad, col] = np.nan if str(out[col].dtype) == "float64" else pd.NA
    return out


def clean_spans(table: str, whole: pd.DataFrame, spans: list[tuple[int, int]]) -> list[bool]:
    """For each row span [lo, hi) of ``whole`` (several files' rows of canonical ``table`` end to end: a bulk read),
    whether :func:`screen` of that file's frame would give it back as it is, with nothing counted and no
    :class:`StoppedClock`: the same judges on the span's arrays, the whole's columns converted once (not a frame
    and its columns per file)."""
    check = CHECKS.get(table)
    if check is None:
        return [True] * len(spans)
    cols = whole.columns
    start = _floats(whole[check.start]) if check.start is not None and check.start in cols else None
    durs = {c: _floats(whole[c]) for c in check.durs if c in cols}
    step = _floats(whole["step"]) if check.step and "step" in cols else None
    fast = _usual_spans(check, start, durs, step, spans)
    if fast is not None:
        return fast
    return [hi <= lo or _unchanged(table, check, None if start is None else start[lo:hi],
                                   {c: d[lo:hi] for c, d in durs.items()}, None if step is None else step[lo:hi])
            for lo, hi in spans]  # fmt: skip


def _usual_spans(check: Check, start: np.ndarray | None, durs: dict[str, np.ndarray], step: np.ndarray | None,
                 spans: list[tuple[int, int]]) -> list[bool] | None:
    """:func:`clean_spans` of the usual bulk read at once, None where it is not one: every start, duration and step
    of the whole a plain time (finite, not negative), the spans one after the other from row 0 on, and each span's
    starts within MARGIN_US / 2 of each other, so that none can lie outside its window (median +- at least
    MARGIN_US). What is left to judge per span, on the whole's arrays by segment: a stopped clock (its starts all one
    instant) and a duration ending past the span's last start + MARGIN_US, with _judge_durs' arithmetic."""
    if start is not None and not (np.isfinite(start).all() and not (start < 0).any()):
        return None
    if any(not (np.isfinite(d).all() and not (d < 0).any()) for d in durs.values()):
        return None
    if step is not None and (step < 0).any():
        return None
    out = [True] * len(spans)
    if start is None or not check.window:
        return out
    live = [k for k, (lo, hi) in enumerate(spans) if hi > lo]
    if not live:
        return out
    los = np.array([spans[k][0] for k in live])
    his = np.array([spans[k][1] for k in live])
    if los[0] != 0 or his[-1] != len(start) or (los[1:] != his[:-1]).any():
        return None
    lows, highs = np.minimum.reduceat(start, los), np.maximum.reduceat(start, los)
    if ((highs - lows) >= MARGIN_US / 2).any():
        return None
    n = his - los
    bad = (n >= STOPPED_CLOCK_ROWS) & (lows == highs)
    if durs:
        limit = np.repeat(highs + MARGIN_US, n)
        for d in durs.values():
            with np.errstate(over="ignore"):
                bad |= np.logical_or.reduceat(start + d > limit, los)
    for k, b in zip(live, bad.tolist()):
        out[k] = not b
    return out


def _unchanged(table: str, check: Check, start: np.ndarray | None, durs: dict[str, np.ndarray],
               step: np.ndarray | None) -> bool:
    """Whether :func:`screen` judges one file's rows (its arrays) all fine: nothing left out, nulled or counted."""
    repair = Repair()
    try:
        if start is not None and not _judge_starts(table, check, start, repair).all():
            return False
    except StoppedClock:
        return False
    if any(bad.any() for bad in _judge_durs(table, check, durs, start, repair).values()):
        return False
    return not repair and not (step is not None and (step < 0).any())


def _floats(s: pd.Series) -> np.ndarray:
    """``s.to_numpy(float, na_value=np.nan)``: a float64 column's own array (its nulls are NaN already; read, never
    written here), any other converted."""
    if s.dtype == np.float64:
        return s.to_numpy()
    return s.to_numpy(float, na_value=np.nan)


def _count(repair: Repair, table: str, col: str, problem: str, mask: np.ndarray) -> None:
    n = int(mask.sum())
    if n:
        repair.counts[f"{table}.{col}: {problem}"] += n


def _judge_starts(table: str, check: Check, t: np.ndarray, repair: Repair) -> np.ndarray:
    """Which rows' starts are the capture's (a null start counts against required tables only)."""
    assert check.start is not None
    null = None  # the null starts, where a start is not a time at all
    if np.isfinite(t).all() and not (t < 0).any():  # (the usual file: every start a time, nothing to count)
        ok = np.ones(len(t), dtype=bool)
    else:
        null = np.isnan(t)
        bad_null = null if check.required else np.zeros(len(t), dtype=bool)
        _count(repair, table, check.start, "missing", bad_null)
        present = ~null
        infinite = present & ~np.isfinite(t)
        negative = present & np.isfinite(t) & (t < 0)
        _count(repair, table, check.start, "not finite", infinite)
        _count(repair, table, check.start, "before the clock's zero", negative)
        ok = present & ~infinite & ~negative
        null &= ~bad_null  # (kept: a figure the file lacks)
    if check.window and ok.any():
        timed = t if null is None else t[ok]
        _stopped(table, timed)
        lo, hi = window(timed)
        outside = ok & ((t < lo) | (t > hi))
        _count(repair, table, check.start, "far outside the capture's window", outside)
        ok &= ~outside
    return ok if null is None else ok | null


def window(starts: np.ndarray) -> tuple[float, float]:
    """The window a file's timestamps must lie in: median +- max(WINDOW_MADS x MAD, MARGIN_US)."""
    med = float(np.median(starts))
    mad = float(np.median(np.abs(starts - med)))
    half = max(WINDOW_MADS * mad, MARGIN_US)
    return med - half, med + half


def _stopped(table: str, starts: np.ndarray) -> None:
    if len(starts) >= STOPPED_CLOCK_ROWS and float(starts.min()) == float(starts.max()):
        raise StoppedClock(
            f"every one of its {len(starts)} {table} rows starts at the same instant ({fmt_us(float(starts[0]))}): "
            "its timestamps are not a clock, there is no timeline to analyse")


def _judge_durs(
    table: str, check: Check, durs: dict[str, np.ndarray], start: np.ndarray | None, repair: Repair
) -> dict[str, np.ndarray]:
    """Per duration column (``durs``: its values as floats, null NaN), the values that are impossible: not finite,
    negative, or ending more than MARGIN_US past the file's last start (``start``: the rows' starts, None without a
    start column; a null is counted where the table requires the value)."""
    end_limit = np.inf
    if check.window and start is not None and np.isfinite(start).any():
        end_limit = float(np.nanmax(start)) + MARGIN_US
    out: dict[str, np.ndarray] = {}
    for col, d in durs.items():
        if np.isfinite(d).all() and not (d < 0).any():  # (the usual file: only a late end can be wrong)
            bad = np.zeros(len(d), dtype=bool)
        else:
            null = np.isnan(d)
            if check.required:
                _count(repair, table, col, "missing", null)
            infinite = ~null & ~np.isfinite(d)
            negative = ~null & np.isfinite(d) & (d < 0)
            _count(repair, table, col, "not finite", infinite)
            _count(repair, table, col, "negative", negative)
            bad = infinite | negative
        if start is not None and np.isfinite(end_limit):
            with np.errstate(invalid="ignore", over="ignore"):
                late = np.isfinite(d) & (d >= 0) & (start + d > end_limit)
            _count(repair, table, col, "runs past the capture's end", late)
            bad = bad | late
        out[col] = bad
    return out


def fmt_us(x: float) -> str:
    """A timestamp for a message: plain when it is an ordinary number, else in e-notation (never 300 digits)."""
    return f"{x:.0f} us" if abs(x) < 1e18 else f"{x:.3g} us"
