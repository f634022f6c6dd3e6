"""Read training logs into the canonical ``train_steps`` / ``train_events`` tables, by content, not by name.

Formats (the text line formats and where their format strings come from: :mod:`msdiag.trainlog.lines`):

- ``mindspore``: MindSpore ``LossMonitor`` / ``TimeMonitor`` lines (``epoch: 1 step: 1, loss is 2.29``,
  ``Train epoch time: 745.948 ms, per step time: 745.948 ms``);
- ``mindformers``: MindFormers ``MFLossMonitor`` lines (``{ Epoch:[  1/  2], step:[    1/   19], loss: 10.649,
  per_step_time: 103328ms, lr: 0.0, overflow cond: False, loss_scale: 1.0, global_norm: [1.31], ...``);
- ``mindyolo``: ``Epoch 1/200, Step 100/3995, imgsize (640, 640), loss: 11.6707, ..., cur_lr: 0.0992``,
  ``overflow, still update, loss scale adjust to 1024.0``;
- ``mindcv``: ``Epoch: [1/10], batch: [100/1000], loss: 2.302585, lr: 0.100000, time: 12.345678s``;
- ``msdiag-jsonl`` / ``msdiag-csv``: per-step records a team writes itself: ``step`` and ``loss`` (required),
  ``lr``, ``grad_norm``, ``loss_scale``, ``overflow``, ``step_time_ms``, ``tokens``, ``samples``,
  ``throughput``, ``epoch``, ``rank``, ``event`` (``checkpoint`` / ``eval``), any other numeric field (kept
  as an extra scalar); an optional JSONL first line ``{"format": "msdiag-train", "version": 1, ...}`` may give
  ``max_grad_norm`` (the clipping threshold). A JSONL with ``step`` and ``loss`` and no ``arrival_s`` is a
  training log, not a request log.

msrun writes one ``worker_N.log`` per rank: a folder of them is read together, rank N from the name.
A log none of whose lines is a training step, or a line of a known format that does not parse, is a
``ParseError`` naming the file and the line.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msdiag.errors import ParseError
from msdiag.model import TRAIN_EVENTS, TRAIN_STEPS
from msdiag.trainlog.lines import BadLine, Rec, read_line, stamp_s, to_float

FORMAT_LABEL = {
    "mindspore": "MindSpore LossMonitor / TimeMonitor",
    "mindformers": "MindFormers MFLossMonitor",
    "mindyolo": "mindyolo trainer",
    "mindcv": "mindcv StateMonitor",
    "msdiag-jsonl": "msdiag training JSONL",
    "msdiag-csv": "msdiag training CSV",
}
HEADER_FORMAT = "msdiag-train"
WORKER_LOG = re.compile(r"^worker_(\d+)\.log$")
TEXT_SUFFIXES = (".log", ".txt", ".out")
_SNIFF_BYTES = 1 << 20
_MAX_LINE_CHARS = 1 << 16
#: Columns of the msdiag CSV / JSONL layout that map onto train_steps (everything else numeric is extra).
RECORD_FIELDS = ("step", "epoch", "loss", "lr", "grad_norm", "loss_scale", "overflow", "step_time_ms", "tokens", "samples", "throughput")


@dataclass
class TrainLog:
    """A training log (one file or several ranks' files) as canonical tables."""

    path: str
    steps: pd.DataFrame  # TRAIN_STEPS
    events: pd.DataFrame  # TRAIN_EVENTS
    extra: pd.DataFrame  # rank, step + one column per extra scalar the log carries
    files: list[dict[str, Any]] = field(default_factory=list)  # {rank, path, format, steps}
    notes: list[str] = field(default_factory=list)
    step_time_from: str | None = None  # how step times were logged (per step / epoch mean / interval mean)
    max_grad_norm: float | None = None  # the clipping threshold, where the log states it
    steps_per_epoch: int | None = None  # where the log counts steps per epoch

    @property
    def formats(self) -> list[str]:
        return sorted({f["format"] for f in self.files})

    @property
    def ranks(self) -> list[int]:
        return sorted({int(f["rank"]) for f in self.files})


# ---- detection -----------------------------------------------------------------------------


def _head(path: Path, n: int = _SNIFF_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            raw = f.read(n)
    except OSError:
        return ""
    return raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8", errors="replace")


def _record_keys(head: str) -> set[str] | None:
    """The keys of the first record of a JSONL / the columns of a CSV header; None for other text."""
    lines = [ln for ln in head.splitlines() if ln.strip()]
    if not lines:
        return None
    first = lines[0].strip()
    if first.startswith("{"):
        try:
            d = json.loads(first)
        except ValueError:
            return None
        if isinstance(d, dict) and d.get("format") == HEADER_FORMAT and len(lines) > 1:
            try:
                d = json.loads(lines[1])
            except ValueError:
                return None
        return set(map(str, d)) if isinstance(d, dict) else None
    if "," in first and not first.startswith("["):
        return {c.strip().strip('"') for c in first.split(",")}
    return None


def looks_like_train_log(path: str | Path) -> bool:
    """True when a file's first MiB is a training log msdiag reads (records with step and loss and no
    arrival_s, or a line of a known training-log format)."""
    p = Path(path)
    if not p.is_file():
        return False
    head = _head(p)
    keys = _record_keys(head)
    if keys is not None and {"step", "loss"} <= keys and "arrival_s" not in keys:
        return True
    for line in head.splitlines():
        try:
            if read_line(line[:_MAX_LINE_CHARS]) is not None:
                return True
        except BadLine:
            return True
    return False


def worker_logs(folder: Path) -> list[tuple[int, Path]]:
    """msrun's ``worker_N.log`` files directly in ``folder`` (rank, path), by rank."""
    try:
        names = [(int(m.group(1)), folder / e.name) for e in folder.iterdir() if e.is_file() and (m := WORKER_LOG.match(e.name))]
    except OSError:
        return []
    return sorted(names)


def is_train_log_path(path: str | Path) -> bool:
    """A training log, or a folder of msrun worker logs holding one and no sub-folders (not a capture)."""
    p = Path(path)
    if p.is_file():
        return looks_like_train_log(p) or (p.suffix.lower() in TEXT_SUFFIXES and not _record_keys(_head(p, 4096)))
    if p.is_dir():
        try:
            if any(e.is_dir() for e in p.iterdir()):
                return False
        except OSError:
            return False
        logs = worker_logs(p)
        return bool(logs) and any(looks_like_train_log(f) for _, f in logs)
    return False


# ---- reading -------------------------------------------------------------------------------


def read_train_log(path: str | Path) -> TrainLog:
    """Read a training log file, or a folder of msrun ``worker_N.log`` files (one rank each)."""
    p = Path(path)
    if not p.exists():
        raise ParseError(p, "no such file or folder")
    if p.is_dir():
        logs = worker_logs(p)
        if not logs:
            raise ParseError(p, "a folder without msrun worker logs (worker_N.log): expected a training log")
        parts = [_read_file(f, rank) for rank, f in logs]
    else:
        parts = [_read_file(p, 0)]
    return _combine(str(p), parts)


@dataclass
class _Part:
    rank: int
    path: Path
    fmt: str
    steps: pd.DataFrame
    events: pd.DataFrame
    extra: pd.DataFrame
    notes: list[str]
    step_time_from: str | None
    max_grad_norm: float | None = None
    steps_per_epoch: int | None = None


def _text(p: Path) -> str:
    if not p.is_file():  # a FIFO or a device would block or never end: only regular files are read
        raise ParseError(p, "not a regular file: expected a training log")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ParseError(p, f"cannot be read ({e.strerror or e})") from None
    text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", errors="replace")
    if not text.strip():
        raise ParseError(p, "the file is empty: expected a training log")
    return text


def _read_file(p: Path, rank: int) -> _Part:
    text = _text(p)
    keys = _record_keys(text[:_SNIFF_BYTES])
    if keys is not None and {"step", "loss"} <= keys and "arrival_s" not in keys:
        return _read_records(p, text, rank)
    return _read_text_log(p, text, rank)


def _first_line(text: str) -> tuple[int, str]:
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            return i, line.strip()
    return 1, ""


def _quote(line: str) -> str:
    line = line.strip()
    return repr(line if len(line) <= 120 else line[:117] + "...")


@dataclass
class _TextState:
    """What the line-by-line reading of one text log holds between lines."""

    rank: int
    fmt: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    pending_overflow: float | None = None  # a mindyolo overflow warning waiting for its step line
    pending_nan: bool = False
    epoch_open: list[int] = field(default_factory=list)  # rows of the epoch a TimeMonitor line will close
    step_time_from: str | None = None
    t0: float | None = None


def _read_text_log(p: Path, text: str, rank: int) -> _Part:
    st = _TextState(rank)
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw[:_MAX_LINE_CHARS]
        try:
            got = read_line(line)
        except BadLine as e:
            raise ParseError(p, f"line {no}: {e}: {_quote(line)}") from None
        if got is None:
            continue
        fmt, rec = got
        if rec.kind == "step" and st.fmt is None:
            st.fmt = fmt
        _apply(st, rec, no, line)
    if not st.rows:
        no, first = _first_line(text)
        raise ParseError(
            p,
            f"no training step recognised (MindSpore LossMonitor, MindFormers, mindyolo, mindcv, msdiag CSV / JSONL); "
            f"line {no} does not parse: {_quote(first)}",
        )
    steps, extra, notes, per_epoch = _global_steps(st)
    return _Part(rank, p, st.fmt or "mindspore", steps, _events_frame(st.events, steps), extra, notes, st.step_time_from, None, per_epoch)


def _apply(st: _TextState, rec: Rec, no: int, line: str) -> None:
    """Fold one line's record into the state: a step row, a time for steps read, or an event."""
    t = stamp_s(line)
    if t is not None and st.t0 is None:
        st.t0 = t
    if rec.kind == "step":
        row: dict[str, Any] = {"rank": st.rank, "epoch": rec.epoch, "sie": rec.step_in_epoch, "spe": rec.steps_per_epoch, "line": no}
        row.update(rec.values)
        if "step_time_ms" in rec.values and st.step_time_from is None:
            st.step_time_from = "per step"
        if st.pending_overflow is not None:
            row["overflow"], row["loss_scale"] = True, st.pending_overflow
        elif st.fmt == "mindyolo":
            row["overflow"] = False
        if st.pending_nan:
            st.pending_nan = False
        row["time_s"] = (t - st.t0) if (t is not None and st.t0 is not None) else None
        interval = rec.extra.pop("_interval_s", None)
        if interval is not None:
            row["_interval_s"] = interval
        st.pending_overflow = None
        row.update({f"x:{k}": v for k, v in rec.extra.items()})
        st.rows.append(row)
        st.epoch_open.append(len(st.rows) - 1)
    elif rec.kind == "epoch_time":
        for i in st.epoch_open:  # TimeMonitor: the epoch's mean per step, for each step of the epoch
            st.rows[i]["step_time_ms"] = rec.values.get("step_time_ms")
        st.epoch_open = []
        st.step_time_from = st.step_time_from or "epoch mean (TimeMonitor)"
    elif rec.kind == "interval_time":
        if st.rows:
            st.rows[-1]["step_time_ms"] = rec.values.get("step_time_ms")
            st.step_time_from = st.step_time_from or "mean over the log interval"
    elif rec.kind == "throughput":
        if st.rows:
            st.rows[-1]["throughput"] = rec.values.get("throughput")
    elif rec.kind == "overflow":
        st.pending_overflow = rec.values.get("loss_scale") if rec.values.get("loss_scale") is not None else math.nan
        st.events.append({"rank": st.rank, "kind": "overflow", "text": line.strip()[:200], "line": no, "_after": len(st.rows)})
    else:  # checkpoint / eval / nonfinite
        if rec.kind == "nonfinite" and rec.epoch is not None:
            st.rows.append({"rank": st.rank, "epoch": rec.epoch, "sie": rec.step_in_epoch, "spe": None, "line": no, "loss": math.nan})
        st.events.append({"rank": st.rank, "kind": rec.kind, "text": line.strip()[:200], "line": no, "_after": len(st.rows)})


def _global_steps(st: _TextState) -> tuple[pd.DataFrame, pd.DataFrame, list[str], int]:
    """Number the steps globally from their epoch and step in epoch: (steps, extra scalars, notes) of one text log."""
    df = pd.DataFrame(st.rows)
    notes: list[str] = []
    spe = df["spe"].dropna()
    if len(spe):
        per_epoch = int(spe.max())
    else:  # LossMonitor prints no steps per epoch: the most steps any epoch reached
        per_epoch = int(df.groupby("epoch")["sie"].max().max())
        if df["epoch"].nunique() > 1:
            notes.append(f"steps per epoch taken as {per_epoch}, the most any epoch of the log reached")
    df["step"] = (df["epoch"].astype("int64") - 1) * per_epoch + df["sie"].astype("int64")
    if "_interval_s" in df.columns:  # mindcv: time accumulated since the last logged step
        gap = df["step"].diff().fillna(df["step"]).clip(lower=1)
        df["step_time_ms"] = df["_interval_s"].astype(float) * 1000.0 / gap
        st.step_time_from = "mean over the log interval"
    if df["step"].duplicated().any():
        notes.append(f"{int(df['step'].duplicated().sum())} step(s) logged twice (a resumed run?): the last line kept")
        df = df.drop_duplicates("step", keep="last")
    df = df.sort_values("step").reset_index(drop=True)
    keep = [c for c in TRAIN_STEPS.columns if c in df.columns]
    extra = df[[c for c in df.columns if c.startswith("x:")]].astype(float)
    extra.columns = [c[2:] for c in extra.columns]
    return TRAIN_STEPS.frame(df[keep]), extra, notes, per_epoch


def _events_frame(events: list[dict[str, Any]], steps: pd.DataFrame) -> pd.DataFrame:
    """Events with the global step they follow (the last step line read before them)."""
    if not events:
        return TRAIN_EVENTS.empty()
    lines = steps["line"].astype("int64").to_numpy()
    step_ids = steps["step"].astype("int64").to_numpy()
    order = np.argsort(lines)
    out = []
    for e in events:
        if e["kind"] == "overflow":  # warned before the step's own line
            i = int(np.searchsorted(lines[order], e["line"], side="left"))
            i = i if i < len(lines) else -1
        else:
            i = int(np.searchsorted(lines[order], e["line"], side="right")) - 1
        out.append({k: v for k, v in e.items() if not k.startswith("_")} | {"step": int(step_ids[order][i]) if i >= 0 else None})
    return TRAIN_EVENTS.frame(pd.DataFrame(out))


def _extra_frame(extra: list[dict[str, Any]]) -> pd.DataFrame:
    cols = sorted({k for e in extra for k in e if not k.startswith("_")})
    return pd.DataFrame([{k: e.get(k) for k in cols} for e in extra], columns=cols, dtype=float)


# ---- msdiag CSV / JSONL ------------------------------------------------------------------------------


def _records(p: Path, text: str) -> tuple[str, list[tuple[int, dict[str, Any]]], dict[str, Any]]:
    """(format, [(line, record)], header) of an msdiag JSONL or CSV training log."""
    if text.lstrip().startswith("{"):
        out: list[tuple[int, dict[str, Any]]] = []
        header: dict[str, Any] = {}
        for no, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except ValueError:
                raise ParseError(p, f"line {no}: not a JSON object: {_quote(line)}") from None
            if not isinstance(d, dict):
                raise ParseError(p, f"line {no}: not a JSON object: {_quote(line)}")
            if not out and not header and d.get("format") == HEADER_FORMAT:
                header = d
                continue
            out.append((no, d))
        return "msdiag-jsonl", out, header
    reader = csv.DictReader(io.StringIO(text))
    rows = [(i + 2, {k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in r.items() if k}) for i, r in enumerate(reader)]
    return "msdiag-csv", rows, {}


def _field(p: Path, no: int, d: dict[str, Any], key: str) -> float | bool | None:
    v = d.get(key)
    if v is None or v == "":
        return None
    if key == "overflow":
        if isinstance(v, bool):
            return v
        t = str(v).strip().lower()
        if t in ("true", "1", "yes"):
            return True
        if t in ("false", "0", "no"):
            return False
        raise ParseError(p, f"line {no}: overflow is not true / false: {v!r}")
    x = v if isinstance(v, (int, float)) and not isinstance(v, bool) else to_float(str(v))
    if x is None:
        raise ParseError(p, f"line {no}: {key} is not a number: {str(v)[:40]!r}")
    return float(x)


def _read_records(p: Path, text: str, rank: int) -> _Part:
    fmt, records, header = _records(p, text)
    rows, extra, events = [], [], []
    for no, d in records:
        row: dict[str, Any] = {"rank": int(d["rank"]) if str(d.get("rank", "")).strip().lstrip("-").isdigit() else rank, "line": no}
        for key in RECORD_FIELDS:
            row[key] = _field(p, no, d, key)
        if row["step"] is None or row["loss"] is None:
            raise ParseError(p, f"line {no}: a record without step or loss")
        if float(row["step"]) != int(row["step"]):
            raise ParseError(p, f"line {no}: step is not a whole number: {d.get('step')!r}")
        rows.append(row)
        extra.append({k: to_float(str(v)) for k, v in d.items() if k not in RECORD_FIELDS and k not in ("rank", "event") and to_float(str(v)) is not None})
        if d.get("event"):
            events.append({"rank": row["rank"], "step": int(row["step"]), "kind": str(d["event"]), "text": str(d["event"])[:200], "line": no})
    if not rows:
        raise ParseError(p, "no step records: expected lines with step and loss")
    df = pd.DataFrame(rows)
    st = TRAIN_STEPS.frame(df.sort_values(["rank", "step"]).reset_index(drop=True))
    ev = TRAIN_EVENTS.frame(pd.DataFrame(events)) if events else TRAIN_EVENTS.empty()
    per_step = "per step" if st["step_time_ms"].notna().any() else None
    clip = to_float(str(header.get("max_grad_norm"))) if header.get("max_grad_norm") is not None else None
    return _Part(rank, p, fmt, st, ev, _extra_frame(extra), [], per_step, clip)


# ---- several files ---------------------------------------------------------------------------


def _combine(path: str, parts: list[_Part]) -> TrainLog:
    steps = pd.concat([pt.steps for pt in parts], ignore_index=True)
    events = pd.concat([pt.events for pt in parts], ignore_index=True) if any(len(pt.events) for pt in parts) else TRAIN_EVENTS.empty()
    extras = []
    for pt in parts:
        if len(pt.extra.columns) and len(pt.extra) == len(pt.steps):
            extras.append(pd.concat([pt.steps[["rank", "step"]].reset_index(drop=True), pt.extra.reset_index(drop=True)], axis=1))
    extra = pd.concat(extras, ignore_index=True) if extras else pd.DataFrame(columns=["rank", "step"])
    notes = [f"{pt.path.name}: {n}" if len(parts) > 1 else n for pt in parts for n in pt.notes]
    files = [{"rank": pt.rank, "path": str(pt.path), "format": pt.fmt, "steps": int(len(pt.steps))} for pt in parts]
    how = next((pt.step_time_from for pt in parts if pt.step_time_from), None)
    clip = next((pt.max_grad_norm for pt in parts if pt.max_grad_norm is not None), None)
    per_epoch = next((pt.steps_per_epoch for pt in parts if pt.steps_per_epoch), None)
    return TrainLog(path, steps, events, extra, files, notes, how, clip, per_epoch)
