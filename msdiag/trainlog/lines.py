"""The text training-log line formats msdiag reads, one declaration per kind of line.

Each format is matched line by line; every pattern below transcribes a format string of the library that
prints it (the library's file is named, its code is not copied):

- MindSpore ``LossMonitor`` (mindspore/python/mindspore/train/callback/_loss_monitor.py):
  ``"epoch: %s step: %s, loss is %s"`` per step (step counted within the epoch), and when the loss is
  NaN / inf it raises ``"In epoch: {} step: {}, loss is NAN or INF, training process cannot continue,
  terminating training."``; in ``Model.fit`` it also prints ``"Eval result: epoch %d, metrics: %s"``.
- MindSpore ``TimeMonitor`` (.../callback/_time_monitor.py): ``"{} epoch time: {:5.3f} ms, per step time:
  {:5.3f} ms"`` once per epoch (the mode title-cased: ``Train``), optionally ``" (data time: {:5.3f} ms)"``.
- MindFormers ``MFLossMonitor.print_output_info`` (mindformers/core/callback/callback.py):
  ``"{ Epoch:[%3d/%3d], step:[%5d/%5d], loss: %5.3f, per_step_time: %dms, lr: %s, overflow cond: %s,
  loss_scale: %s, global_norm: %s%s"`` (``loss:[%5.3f/%5.3f]`` outside sink mode; ``lr`` absent when
  unknown; the tail ``", train_throughput_per_npu: %.3fT"``), then ``"  %4.1f%% %s %.5f samples/s/p  %s }"``;
  older releases print ``"Epoch:[%3d/%3d], step:[%5d/%5d], loss:[%5.3f/%5.3f], time:%5.3f ms, lr:%s,
  overflow cond: %s, loss_scale: %s"``. ``CheckpointMonitor`` logs ``'......Saving ckpt......'``.
- mindyolo ``Trainer`` (mindyolo/utils/trainer_factory.py): ``f"Epoch {e}/{E}, Step {s}/{S}, imgsize {shape},
  {name}: {v:.4f}, ..., cur_lr: {lr}"`` (the first loss item is ``loss``), ``f"Epoch {e}/{E}, Step {s}/{S},
  step time: {ms:.2f} ms"`` (the mean over the log interval), ``f"overflow, drop step, loss scale adjust to
  {scale}"`` / ``"overflow, still update, ..."`` before the step's line, ``f"Saving model to {path}"``.
- mindcv ``StateMonitor`` (mindcv/utils/callbacks.py): ``f"Epoch: [{e}/{E}], batch: [{b}/{B}], loss:
  {loss:.6f}, lr: {lr:.6f}, time: {t:.6f}s"`` (time accumulated since the last logged step),
  ``f"Saving model to {path}"``.

The logging prefixes before these messages (``2025-04-07 15:34:27,308 - [file:line] - INFO - ``,
``[INFO] 2023-07-11 10:48:37,162 [...] print_output_info: ``, mindyolo's ``%(asctime)s [%(levelname)s]``)
are skipped: a pattern is searched anywhere in the line; a leading timestamp is read as the line's time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

#: A number as the libraries print it: a float, an int, nan / inf (any case), in optional brackets.
_NUM = r"\[?\s*(?P<{0}>[-+]?(?:nan|inf|infinity|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))\s*\]?"
_FLOAT_RE = re.compile(r"[-+]?(?:nan|inf(?:inity)?|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)", re.I)
_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[ T-](\d{2}:\d{2}:\d{2})[,.](\d{3})")


def num(name: str) -> str:
    """A named group matching one logged number (``nan``, ``inf``, ``[1.5]``)."""
    return _NUM.format(name)


def to_float(text: str | None) -> float | None:
    """The number a logged value holds (``'[44.313248]'`` -> 44.313248, ``'nan'`` -> nan), else None."""
    if text is None:
        return None
    t = text.strip().strip("[]() ").strip()
    if not t or " " in t:  # '[1 31049]': not one number
        return None
    m = _FLOAT_RE.fullmatch(t)
    return float(m.group(0)) if m else None


def stamp_s(line: str) -> float | None:
    """The timestamp a log line starts with (within its first 40 characters), as POSIX seconds (naive, UTC)."""
    m = _STAMP.search(line, 0, 40)
    if not m:
        return None
    try:
        t = datetime.strptime(f"{m.group(1)} {m.group(2)}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return (t - datetime(1970, 1, 1)).total_seconds() + int(m.group(3)) / 1000.0


@dataclass
class Rec:
    """What one line says: a step (``kind == "step"``), a time for steps already read, or an event."""

    kind: str  # step / epoch_time / interval_time / throughput / overflow / checkpoint / eval / nonfinite
    epoch: int | None = None
    step_in_epoch: int | None = None
    steps_per_epoch: int | None = None
    values: dict[str, float | bool | None] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)


class BadLine(ValueError):
    """A line of a known format whose values do not parse (the reader names the file and line)."""


# ---- MindSpore LossMonitor / TimeMonitor ------------------------------------------------------------

_MS_STEP = re.compile(r"epoch: (?P<e>\d+) step: (?P<s>\d+), loss is (?P<loss>.*)$")
_MS_NAN = re.compile(r"In epoch: (?P<e>\d+) step: (?P<s>\d+), loss is NAN or INF")
_MS_TIME = re.compile(r"(?:^|\s|\])(?P<mode>Train |Eval |)epoch time: " + num("ep") + r" ms, per step time: " + num("st") + " ms")
_MS_EVAL = re.compile(r"Eval result: epoch (?P<e>\d+), metrics: ")


# The loss as LossMonitor prints it: a number, a one-element array ``[2.29]``, or a Tensor's repr
# ``Tensor(shape=[], dtype=Float32, value= 2.29)`` (older releases printed the network output itself).
_MS_LOSS = re.compile(r"(?:Tensor\(shape=\[[^\]]*\], dtype=\w+, value=\s*)?\[*\s*(?P<v>" + _FLOAT_RE.pattern + r")\s*\]*\)?", re.I)


def _ms_step(m: re.Match[str]) -> Rec:
    raw = m.group("loss").strip()
    lm = _MS_LOSS.fullmatch(raw)
    if lm is None:
        raise BadLine(f"LossMonitor line whose loss is not a number ({raw[:40]!r})")
    return Rec("step", int(m.group("e")), int(m.group("s")), values={"loss": float(lm.group("v"))})


def _ms_time(m: re.Match[str]) -> Rec | None:
    if m.group("mode").strip() == "Eval":
        return Rec("eval", values={})
    return Rec("epoch_time", values={"step_time_ms": to_float(m.group("st"))})


# ---- MindFormers MFLossMonitor -------------------------------------------------------------------

_MF_STEP = re.compile(
    r"Epoch:\[\s*(?P<e>\d+)/\s*(?P<E>\d+)\], step:\[\s*(?P<s>\d+)/\s*(?P<S>\d+)\], loss:\s*(?P<loss>\[[^\]]*\]|[^,]+),(?P<rest>.*)$"
)
_MF_KEYS = {
    "step_time_ms": re.compile(r"(?:per_step_time: (?P<v>\d+(?:\.\d+)?)\s*ms|time:\s*(?P<w>[\d.]+) ms)"),
    "lr": re.compile(r"\blr:\s*(?P<v>\[[^\]]*\]|[^,\s]+)"),
    "overflow": re.compile(r"overflow cond: (?P<v>\[?\s*\w+\s*\]?)"),
    "loss_scale": re.compile(r"loss_scale: (?P<v>\[[^\]]*\]|[^,\s]+)"),
    "grad_norm": re.compile(r"global_norm:?\s*(?P<v>\[[^\]]*\]|[^,\s]+)"),
}
_MF_TFLOPS = re.compile(r"train_throughput_per_npu: (?P<v>[\d.]+)T")
_MF_PROGRESS = re.compile(r"%\s*\|.*\|\s*(?P<v>[\d.]+) samples/s/p")
_MF_SAVE = re.compile(r"\.{3,}\s*Saving ckpt\s*\.{3,}")


def _flag(text: str) -> bool | None:
    t = text.strip("[] ").lower()
    return True if t == "true" else False if t == "false" else None


def _mf_step(m: re.Match[str]) -> Rec:
    loss_text = m.group("loss").strip()
    loss = to_float(loss_text.strip("[]").split("/")[0])
    if loss is None:
        raise BadLine(f"MFLossMonitor line whose loss is not a number ({loss_text[:40]!r})")
    rest = m.group("rest")
    values: dict[str, float | bool | None] = {"loss": loss}
    for key, rx in _MF_KEYS.items():
        km = rx.search(rest)
        if not km:
            continue
        if key == "overflow":
            values[key] = _flag(km.group("v"))
        elif key == "step_time_ms":
            values[key] = float(km.group("v") or km.group("w"))
        else:
            values[key] = to_float(km.group("v"))  # 'unavailable' loss scale -> None
    extra = {}
    tm = _MF_TFLOPS.search(rest)
    if tm:
        extra["train_tflops_per_npu"] = float(tm.group("v"))
    return Rec("step", int(m.group("e")), int(m.group("s")), int(m.group("S")), values=values, extra=extra)


# ---- mindyolo / mindcv ------------------------------------------------------------------------------

_YOLO_STEP = re.compile(r"Epoch (?P<e>\d+)/(?P<E>\d+), Step (?P<s>\d+)/(?P<S>\d+), (?:imgsize \([^)]*\), )?(?P<rest>loss: .*)$")
_YOLO_TIME = re.compile(r"Epoch (?P<e>\d+)/(?P<E>\d+), Step (?P<s>\d+)/(?P<S>\d+), step time: " + num("v") + " ms")
_YOLO_OVERFLOW = re.compile(r"overflow, (?:drop step|still update), loss scale adjust to " + num("v"))
_YOLO_ACC_OVERFLOW = re.compile(r"this step grad overflow, drop\. Loss scale adjust to " + num("v"))
_SAVING_MODEL = re.compile(r"Saving model to \S+")
_PAIR = re.compile(r"(?P<k>[A-Za-z_][\w]*): (?P<v>[^,]+)")
_CV_STEP = re.compile(
    r"Epoch: \[(?P<e>\d+)/(?P<E>\d+)\], batch: \[(?P<s>\d+)/(?P<S>\d+)\], loss: (?P<loss>[^,]+), lr: (?P<lr>[^,]+), time: " + num("t") + "s"
)


def _yolo_step(m: re.Match[str]) -> Rec:
    values: dict[str, float | bool | None] = {}
    extra: dict[str, float] = {}
    for pm in _PAIR.finditer(m.group("rest")):
        v = to_float(pm.group("v"))
        k = pm.group("k")
        if k == "loss":
            values["loss"] = v
        elif k == "cur_lr":
            values["lr"] = v
        elif v is not None:
            extra[k] = v
    if values.get("loss") is None:
        raise BadLine("mindyolo step line whose loss is not a number")
    return Rec("step", int(m.group("e")), int(m.group("s")), int(m.group("S")), values=values, extra=extra)


def _cv_step(m: re.Match[str]) -> Rec:
    loss = to_float(m.group("loss"))
    if loss is None:
        raise BadLine(f"mindcv line whose loss is not a number ({m.group('loss')[:40]!r})")
    values: dict[str, float | bool | None] = {"loss": loss, "lr": to_float(m.group("lr"))}
    t = to_float(m.group("t"))
    rec = Rec("step", int(m.group("e")), int(m.group("s")), int(m.group("S")), values=values)
    rec.extra["_interval_s"] = t if t is not None else math.nan  # spread over the steps since the last logged one
    return rec


# ---- the table of line kinds ---------------------------------------------------------------------

Handler = Callable[[re.Match[str]], "Rec | None"]


@dataclass(frozen=True)
class LineKind:
    """One kind of line: the format it belongs to, a cheap substring test, its pattern and its reading."""

    fmt: str
    needle: str
    pattern: re.Pattern[str]
    read: Handler


LINE_KINDS: tuple[LineKind, ...] = (
    LineKind("mindspore", "loss is NAN or INF", _MS_NAN, lambda m: Rec("nonfinite", int(m.group("e")), int(m.group("s")))),
    LineKind("mindspore", "loss is ", _MS_STEP, _ms_step),
    LineKind("mindspore", "epoch time: ", _MS_TIME, _ms_time),
    LineKind("mindspore", "Eval result: ", _MS_EVAL, lambda m: Rec("eval")),
    LineKind("mindformers", "Epoch:[", _MF_STEP, _mf_step),
    LineKind("mindformers", "samples/s/p", _MF_PROGRESS, lambda m: Rec("throughput", values={"throughput": float(m.group("v"))})),
    LineKind("mindformers", "Saving ckpt", _MF_SAVE, lambda m: Rec("checkpoint")),
    LineKind("mindyolo", "step time: ", _YOLO_TIME, lambda m: Rec("interval_time", values={"step_time_ms": to_float(m.group("v"))})),
    LineKind("mindyolo", ", Step ", _YOLO_STEP, _yolo_step),
    LineKind("mindyolo", "loss scale adjust to", _YOLO_OVERFLOW, lambda m: Rec("overflow", values={"loss_scale": to_float(m.group("v"))})),
    LineKind("mindyolo", "Loss scale adjust to", _YOLO_ACC_OVERFLOW, lambda m: Rec("overflow", values={"loss_scale": to_float(m.group("v"))})),
    LineKind("mindcv", "], batch: [", _CV_STEP, _cv_step),
    LineKind("any", "Saving model to", _SAVING_MODEL, lambda m: Rec("checkpoint")),
)

#: Anchors that mark a line as meant to be a step line of a format: such a line that does not parse is an error
#: (LossMonitor's own source line, ``raise ValueError("In epoch: {} step: {}, loss is NAN ...``, quoted in a
#: traceback, is not one: it has no numbers).
STEP_ANCHORS = (
    (re.compile(r"epoch: \d+ step: \d+, loss is"), "mindspore"),
    (re.compile(r"Epoch:\[\s*\d+/\s*\d+\], step:\["), "mindformers"),
    (re.compile(r"Epoch: \[\d+/\d+\], batch: \["), "mindcv"),
)


def read_line(line: str) -> tuple[str, Rec] | None:
    """(format, what the line says) for a line of a known kind, else None; BadLine for a broken one."""
    for kind in LINE_KINDS:
        if kind.needle not in line:
            continue
        m = kind.pattern.search(line)
        if m is None:
            continue
        rec = kind.read(m)
        if rec is not None:
            return kind.fmt, rec
    for anchor, fmt in STEP_ANCHORS:
        if anchor.search(line):
            raise BadLine(f"looks like a {fmt} step line but does not parse")
    return None
