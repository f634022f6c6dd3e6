"""Reading trace_view.json (Chrome trace format) into the canonical timeline, counter and host-op tables.

Real trace_view.json files are hundreds of MB to GB per rank, so the reader decodes only what the model
needs, with typed msgspec decoding straight into compact columns:

1. the file is read a block at a time into one reused buffer of about 10 MB (never whole in memory)
   and cut into chunks of about 8 MB at event boundaries ("}, {" between two top-level events); each
   chunk is framed as a JSON array in place;
2. each chunk is decoded into small per-phase structs: 'X' (name, pid, tid, ts, dur), 'C' (name,
   pid, ts, args), 'M' (name, pid, tid, args.name); every other phase, and every other field (the
   large ``args`` of 'X' events, call stacks included), is skipped by the decoder, never built;
3. the chunk's events become columns (names, pids and (pid, tid) pairs interned to integer codes by
   one dict lookup per event at C speed, times as float64 arrays) and are dropped before the next
   chunk is decoded;
4. at the end, when every process and thread name is known, the (pid, tid) codes are classified into
   lanes and the tables are built from the columns.

A cut that falls inside an event (a string or a nested array holding "}, {") makes its chunk invalid
JSON; the reader then starts over with a careful split (the whole file read, then a full parse into
``msgspec.Raw`` slices), so the fast cut can cost time but never change a result. The careful split
also reports what is wrong with a broken file, and reads a file that is not a plain array (an object
with ``traceEvents``).

Real-world dirt handled here: ``ts``/``dur`` written as numbers or as strings (possibly with trailing
whitespace), a JSON array or an object with ``traceEvents``, process and thread names that come after
the events they name, a UTF-8 byte-order mark.

Lanes of the timeline table (only complete 'X' events are kept; 'B'/'E' pairs, instants, flows and
async events are not read):

- ``device``: process "Ascend Hardware"; track = thread name ("Stream 2").
- ``hccl``: process "HCCL", threads "Group <x> Communication" only (op-level rows such as
  hcom_allReduce__586_0_1); the per-plane task rows ("Plane N") are skipped.
- ``overlap``: process "Overlap Analysis"; track = Computing / Communication /
  Communication(Not Overlapped) / Free.
- ``step``: any event named ``ProfilerStep#<n>``, whatever its process; track = process name.
- ``host``: the other events of the host processes (Python, python, python3, MindSpore, CANN);
  track = "<process>/<thread name or tid>".
- ``scope``: process "Scope Layer" (MindSpore); track = thread name (the scope depth).

Events of the MindSpore CPU backend's "CPU OP" process are host ops: they go to ``host_ops`` (a
KERNELS table, core "CPU") and NOT to the host lane, so that no op is counted twice.

Rows: the timeline is ordered by lane, track and start, the counters by track, name and time. An 'X'
event without ``ts`` is dropped; one without ``dur`` is kept with a null duration. A counter's unit is
its first ``args`` key that is not "acc_id" (Acc PMU writes {"value": v, "acc_id": i}), its value that
key's number. Absolute times are float64 microseconds: about 0.25 us resolution at today's epoch.
"""

from __future__ import annotations

import codecs
import gc
import io
import mmap
import os
import re
import sys
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, is_
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Union

import msgspec
import numpy as np
import pandas as pd

from msdiag import model
from msdiag.errors import ParseError

# Processes whose 'X' events are host activity (lane "host"). "CPU OP" is handled apart (host_ops).
HOST_PROCESSES = frozenset({"Python", "python", "python3", "MindSpore", "CANN"})
CPU_OP_PROCESS = "CPU OP"
STEP_SOURCE = "ProfilerStep#N markers"
STEP_NAME_RE = re.compile(r"^ProfilerStep#\d+$")
HCCL_OP_THREAD_RE = re.compile(r"^Group .+ Communication$")

# Collective and point-to-point op types of MindSpore (host ops of type X are communication).
# The "Hcom"/"hcom_" prefixed forms are recognised by stripping the prefix (see _op_kind).
COMMUNICATION_OP_TYPES = frozenset(
    t.lower()
    for t in (
        "AllReduce",
        "AllGather",
        "AllGatherV",
        "ReduceScatter",
        "ReduceScatterV",
        "Broadcast",
        "AllToAll",
        "AlltoAll",
        "AlltoAllV",
        "AlltoAllVC",
        "NeighborExchange",
        "NeighborExchangeV2",
        "Send",
        "Receive",
        "Recv",
        "Barrier",
        "BatchISendIRecv",
        "CollectiveScatter",
        "CollectiveGather",
    )
)
_COMM_PREFIXES = ("hcom_", "hcom", "distcomm")
_OP_SUFFIX_RE = re.compile(r"-op\d+$")

# Lane codes; the order is the order of the timeline table.
_LANES = ("device", "hccl", "overlap", "step", "host", "scope")
_DEVICE, _HCCL, _OVERLAP, _STEP, _HOST, _SCOPE = range(len(_LANES))
_SKIP = -1
_CPU_OP = -2

# Events decoded at once (bounds the transient per-event objects): by size in the fast split, by
# count in the careful one.
_CHUNK_BYTES = 8 << 20
_CHUNK_EVENTS = 32768


@dataclass
class TraceView:
    """The tables read from one rank's trace_view.json."""

    timeline: pd.DataFrame  # model.TIMELINE columns
    counters: pd.DataFrame  # model.COUNTERS columns
    host_ops: pd.DataFrame  # model.KERNELS columns; only for MindSpore CPU traces ("CPU OP"), else empty
    processes: list[str]  # process names seen, in the order they are named
    step_source: str | None  # STEP_SOURCE when ProfilerStep#N markers were found, else None


# --------------------------------------------------------------------------------------------------
# decoding types: one struct per event phase msdiag reads, an empty struct for every other phase


class _X(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete event; its args are skipped by the decoder."""

    name: str = ""
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Union[float, None] = None  # decoded with strict=False: "123.4" -> 123.4
    dur: Union[float, None] = None


class _C(msgspec.Struct, gc=False, tag_field="ph", tag="C"):
    """A counter sample: args hold {unit: value} (plus "acc_id" on Acc PMU)."""

    name: str = ""
    pid: Union[int, str, None] = None
    ts: Union[float, None] = None
    args: Union[dict[str, Any], None] = None


class _NameArgs(msgspec.Struct, gc=False):
    name: Any = None


class _M(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    """A metadata event (process_name, thread_name, ...)."""

    name: str = ""
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    args: Union[_NameArgs, None] = None


# Every other phase of the Chrome trace format: decoded to an empty struct (all fields skipped).
_OTHER_PHASES = "BEiIbneSTpFstfPONDRcVv()"
_OTHERS = tuple(
    msgspec.defstruct(f"_Other{i}", [], gc=False, tag_field="ph", tag=p) for i, p in enumerate(_OTHER_PHASES)
)
_EventType = Union[(_X, _C, _M) + _OTHERS]  # type: ignore[valid-type]


class _LooseEvent(msgspec.Struct, gc=False):
    """Fallback for a chunk the typed decoder rejects (ts "123.4\\t", an unknown phase, a numeric name)."""

    ph: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = msgspec.Raw()


class _Wrapped(msgspec.Struct):
    traceEvents: list[msgspec.Raw]


_NAME, _PID, _TID, _TS, _DUR, _ARGS = (attrgetter(a) for a in ("name", "pid", "tid", "ts", "dur", "args"))

_TOP = msgspec.json.Decoder(Union[list[msgspec.Raw], _Wrapped])
_EVENTS = msgspec.json.Decoder(list[_EventType], strict=False)  # type: ignore[valid-type]
_LOOSE_EVENTS = msgspec.json.Decoder(list[_LooseEvent])


# --------------------------------------------------------------------------------------------------
# public entry point


def read_trace_view(path: Path, rank: int) -> TraceView:
    """Read one rank's trace_view.json into timeline, counter and host-op tables.

    Raises ParseError (naming the file and what is wrong) for an empty, truncated or malformed file,
    or for JSON that is not a Chrome trace.
    """
    path = Path(path)
    with _gc_paused():
        acc = _fast_read(path)  # None: not a plain array, a cut fell inside an event, or the JSON is broken
        if acc is None:
            data = _read_bytes(path)
            try:
                acc = _accumulate(path, _raw_chunks(path, data))
            except _BadCut as e:  # the file is valid JSON syntax, yet an event cannot be decoded
                raise ParseError(path, _undecodable(data, e)) from None
            del data
    if acc.events and not acc.phased:
        raise ParseError(path, f"not a trace: none of its {acc.events} JSON objects has a 'ph' (event phase) field")
    return acc.finish(rank)


# --------------------------------------------------------------------------------------------------
# reading and splitting into chunks of events


class _BadCut(Exception):
    """A chunk is not valid JSON: a fast cut inside an event, or (in the careful split) a broken event.

    ``first`` is the index of the chunk's first event and ``msg`` the decoder's message, for the
    error the careful split then raises.
    """

    def __init__(self, first: int, msg: str) -> None:
        super().__init__(msg)
        self.first = first
        self.msg = msg


def _undecodable(data: bytearray | mmap.mmap, cut: _BadCut) -> str:
    """The problem of a trace whose JSON parses but whose events do not decode (what the error says)."""
    if "UTF-8" in cut.msg:
        at = _first_non_utf8(data)
        where = f"byte {at} of {len(data)}" if at is not None else f"an event from event {cut.first} on"
        return f"not UTF-8 text: {where} is not valid UTF-8 (a damaged or re-encoded file)"
    return f"malformed JSON in the events from event {cut.first} on ({cut.msg})"


def _first_non_utf8(data: bytearray | mmap.mmap) -> int | None:
    """The offset of the first byte that is not valid UTF-8 (None if all are), decoded a slice at a
    time so that no copy of the file is made."""
    dec = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    for start in range(0, len(data), _CHUNK_BYTES):
        pending = len(dec.getstate()[0])  # the bytes of a character cut by the previous slice
        try:
            dec.decode(view[start : start + _CHUNK_BYTES], final=start + _CHUNK_BYTES >= len(data))
        except UnicodeDecodeError as e:
            return start - pending + e.start
    return None


def _accumulate(path: Path, chunks: Iterator[Any]) -> "_Accumulator":
    acc = _Accumulator()
    try:
        for buf in chunks:
            acc.add(_decode_chunk(path, buf, acc.events))
            del buf
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return acc


def _read_bytes(path: Path) -> bytearray | mmap.mmap:
    """The file's bytes in one buffer (for the careful split).

    On Linux the buffer is an anonymous mapping filled in one go (MAP_POPULATE): reading into it is
    about twice as fast as into a bytearray, whose pages fault in one at a time.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data: bytearray | mmap.mmap = _buffer(size)
            got = f.readinto(data) if size else 0
            rest = f.read()
        if got != size or rest:  # the file changed size while being read: read it again, plainly
            data = bytearray(path.read_bytes())
    except IsADirectoryError:
        raise ParseError(path, "is a folder, not a trace_view.json file") from None
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    if not len(data):
        raise ParseError(path, "the file is empty (0 bytes)")
    lead = _LEAD_RE.match(data)
    if lead is not None and lead.end() == len(data):
        raise ParseError(path, "the file is empty (only whitespace)")
    return data


def _buffer(size: int) -> bytearray | mmap.mmap:
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if size and populate and hasattr(mmap, "MAP_ANONYMOUS"):
        try:
            return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
        except (OSError, ValueError):
            pass
    return bytearray(size)


_WS = b" \t\r\n"
_LEAD_RE = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\r\n]*")
_CUT_RE = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")


def _fast_read(path: Path) -> _Accumulator | None:
    """The fast path: the file read a block at a time into one reused buffer (never whole in memory)
    and cut into chunks at event boundaries (:func:`_streamed`); None when it is not a plain JSON
    array, or a chunk does not decode (a cut inside an event, broken JSON): the caller then takes the
    careful path over the whole file, so a wrong cut can cost time but never change a result."""
    try:
        f = open(path, "rb")
    except IsADirectoryError:
        raise ParseError(path, "is a folder, not a trace_view.json file") from None
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    with f:
        try:
            return _accumulate(path, _streamed(path, f))
        except _BadCut:
            return None


def _streamed(path: Path, f: io.BufferedReader) -> Iterator[memoryview]:
    """Chunks of about _CHUNK_BYTES of a top-level JSON array, each framed as a JSON array in place.

    The buffer holds the events not yet decoded plus the next block of the file. A cut is searched
    for ("}, {" between two events) in the last part of what is buffered; the byte after the chunk's
    last "}" becomes its "]", and the rest moves to the front of the buffer behind a "[". An event
    longer than the buffer grows it. Raises _BadCut when the file is not a plain array (the careful
    path decides what it is).
    """
    tail = _CHUNK_BYTES // 4 + 1
    buf = bytearray(_CHUNK_BYTES + tail + 2)
    fill, eof = _fill(path, f, buf, 0)
    if not fill:
        raise ParseError(path, "the file is empty (0 bytes)")
    lead = _LEAD_RE.match(buf, 0, fill)
    start = lead.end() if lead else 0
    if start == fill and eof:
        raise ParseError(path, "the file is empty (only whitespace)")
    if start == fill or buf[start] != ord("["):
        raise _BadCut(0, "not a plain JSON array")
    while True:
        if eof:
            hi = fill - 1
            while hi > start and buf[hi] in _WS:
                hi -= 1
            if hi == start or buf[hi] != ord("]"):
                raise _BadCut(0, "the array does not end")
            yield memoryview(buf)[start : hi + 1]
            return
        cut = _cut(buf, max(start + 1, fill - tail), fill) or _cut(buf, start + 1, fill, last=True)
        if cut is None:  # no boundary in what is buffered: an event longer than the buffer
            grown = bytearray(2 * len(buf))
            grown[:fill] = buf[:fill]
            buf = grown
        else:
            comma, brace = cut
            buf[comma] = 0x5D  # "]"
            yield memoryview(buf)[start : comma + 1]
            rest = fill - brace
            buf[1 : 1 + rest] = buf[brace:fill]
            buf[0] = 0x5B  # "["
            start, fill = 0, 1 + rest
        fill, eof = _fill(path, f, buf, fill)


def _cut(buf: bytearray, lo: int, hi: int, last: bool = False) -> tuple[int, int] | None:
    """(the separator's comma, the next event's "{") of the first "}, {" in buf[lo:hi] (the last with ``last``)."""
    if last:
        found = deque(_CUT_RE.finditer(buf, lo, hi), maxlen=1)
        m = found[0] if found else None
    else:
        m = _CUT_RE.search(buf, lo, hi)
    if m is None:
        return None
    return m.start() + m.group().index(b","), m.end() - 1


def _fill(path: Path, f: io.BufferedReader, buf: bytearray, fill: int) -> tuple[int, bool]:
    """Read into buf[fill:] until it is full or the file ends: (bytes buffered, the file ended)."""
    view = memoryview(buf)
    try:
        while fill < len(buf):
            n = f.readinto(view[fill:])
            if not n:
                return fill, True
            fill += n
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    finally:
        view.release()
    return fill, False


_KIND = {
    "int": "a number",
    "float": "a number",
    "str": "a string",
    "bool": "true/false",
    "null": "null",
    "object": "an object",
    "array": "an array",
}


def _found(msg: str) -> str:
    m = re.search(r"got `(\w+)`", msg)
    return _KIND.get(m.group(1), m.group(1)) if m else "something else"


def _split_events(path: Path, data: bytearray | mmap.mmap) -> list[msgspec.Raw]:
    """The events as Raw slices of ``data``; ParseError when the file is not a complete JSON trace."""
    lead = _LEAD_RE.match(data)
    offset = lead.end() if lead else 0
    try:
        top = _TOP.decode(memoryview(data)[offset:])
    except msgspec.ValidationError as e:
        msg = str(e)
        if "traceEvents" in msg and "missing" in msg:
            problem = "not a trace: a JSON object without a 'traceEvents' array"
        elif "$.traceEvents" in msg:
            problem = f"not a trace: 'traceEvents' is {_found(msg)}, not an array of events"
        else:
            problem = (
                "not a trace: expected a JSON array of events or an object with 'traceEvents', "
                f"found {_found(msg)}"
            )
        raise ParseError(path, problem) from None
    except msgspec.DecodeError as e:
        raise ParseError(path, _decode_problem(str(e), data, offset)) from None
    except RecursionError:
        raise ParseError(path, _too_deep(None)) from None
    return top.traceEvents if isinstance(top, _Wrapped) else top


def _decode_problem(msg: str, data: bytearray | mmap.mmap, offset: int) -> str:
    size = len(data)
    if "truncated" in msg:
        return f"truncated JSON: the data ends at byte {size} before the trace is complete"
    m = re.search(r"^JSON is malformed: (.*?) \(byte (\d+)\)", msg)
    if m:
        at = int(m.group(2)) + offset
        near = bytes(data[max(0, at - 24) : at + 24]).decode("utf-8", errors="replace")
        return f"malformed JSON: {m.group(1)} at byte {at} of {size} (near {near!r})"
    return f"malformed JSON: {msg}"


def _address(buf: Any) -> int:
    return int(np.frombuffer(buf, dtype=np.uint8).ctypes.data)


def _raw_chunks(path: Path, data: bytearray | mmap.mmap) -> Iterator[bytes]:
    """The careful split: JSON arrays of up to _CHUNK_EVENTS events, from a full parse of the file.

    The events' Raw slices point into ``data``: their offsets give each chunk's byte range, so a
    chunk is one contiguous copy, and the Raw objects are dropped before any event is decoded.
    """
    raws = _split_events(path, data)
    n = len(raws)
    base = _address(data)
    bounds: list[tuple[int, int]] = []
    for i in range(0, n, _CHUNK_EVENTS):
        last = raws[min(i + _CHUNK_EVENTS, n) - 1]
        start = _address(raws[i]) - base
        end = _address(last) - base + len(last)
        if not (0 <= start < end <= len(data)) or (bounds and start < bounds[-1][1]):
            bounds = []  # not slices of data after all: join the events instead
            break
        bounds.append((start, end))
    if n and not bounds:
        for i in range(0, n, _CHUNK_EVENTS):
            yield b"".join((b"[", b",".join(raws[i : i + _CHUNK_EVENTS]), b"]"))
        return
    del raws
    view = memoryview(data)
    for start, end in bounds:
        yield b"".join((b"[", view[start:end], b"]"))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic GC passes while millions of short-lived acyclic objects are made (restored after)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _decode_chunk(path: Path, buf: Any, first: int) -> list[Any]:
    """The events of one chunk (``first`` is the index of its first event, for messages)."""
    try:
        return _EVENTS.decode(buf)  # type: ignore[no-any-return]
    except msgspec.ValidationError:  # (a subclass of DecodeError) a value the typed decoder refuses
        pass
    except msgspec.DecodeError as e:  # not JSON: a fast cut inside an event, or a broken file
        raise _BadCut(first, str(e)) from None
    except RecursionError:  # nesting deeper than the decoder's limit: no cut makes that, the file does
        raise ParseError(path, _too_deep(first)) from None
    try:
        loose = _LOOSE_EVENTS.decode(buf)
    except msgspec.ValidationError as e:  # (a subclass of DecodeError)
        m = re.search(r"\$\[(\d+)\]", str(e))
        which = f"event {first + int(m.group(1))}" if m else f"an event from event {first} on"
        raise ParseError(path, f"not a trace: {which} is {_found(str(e))}, not a JSON object") from None
    except msgspec.DecodeError as e:
        raise _BadCut(first, str(e)) from None
    return [_clean(e) for e in loose]


def _too_deep(first: int | None) -> str:
    where = "" if first is None else f" in the events from event {first} on"
    return f"JSON nested deeper than the decoder's limit ({sys.getrecursionlimit()} levels){where}: not a profiler trace"


def _clean(e: _LooseEvent) -> Any:
    """The typed event for a loosely decoded one (None for an event without a phase)."""
    ph = e.ph if isinstance(e.ph, str) else ""
    name = e.name if isinstance(e.name, str) else ("" if e.name is None else str(e.name))
    if ph == "X":
        return _X(name, _key_part(e.pid), _key_part(e.tid), _loose_float(e.ts), _loose_float(e.dur))
    if ph == "C":
        args = _loose_json(e.args)
        return _C(name, _key_part(e.pid), _loose_float(e.ts), args if isinstance(args, dict) else None)
    if ph == "M":
        args = _loose_json(e.args)
        name_args = _NameArgs(args.get("name")) if isinstance(args, dict) else None
        return _M(name, _key_part(e.pid), _key_part(e.tid), name_args)
    return _OTHERS[0]() if ph else None


def _loose_json(raw: msgspec.Raw) -> Any:
    if not len(raw):
        return None
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None


def _key_part(v: Any) -> int | str | None:
    if v is None or isinstance(v, (int, str)):
        return v  # type: ignore[no-any-return]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return str(v)


def _loose_float(v: Any) -> float | None:
    """A number written as a number or a string (trailing tab/space allowed); None when absent or bad."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


# --------------------------------------------------------------------------------------------------
# events -> compact columns


class _Interner(dict):  # type: ignore[type-arg]
    """Maps hashable values to dense integer codes (first-seen order).

    A dict whose missing keys get the next code: ``codes_of`` looks every value up at C speed (one
    ``map`` over the values, no intermediate list or object array), and only the few distinct values
    run Python code, once each.
    """

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self)
        return code

    def codes_of(self, values: Iterable[Any], n: int) -> np.ndarray:
        """int32 codes of the ``n`` values."""
        return np.fromiter(map(self.__getitem__, values), dtype=np.int32, count=n)

    def pair_codes(self, a: list[Any], b: list[Any]) -> np.ndarray:
        """int32 codes of the pairs (a[i], b[i])."""
        aa, ba = _array(a), _array(b)
        if aa.dtype.kind == ba.dtype.kind == "i" and len(aa) and min(aa.min(), ba.min()) >= 0 and ba.max() < 2**32:
            if aa.max() < 2**32:  # the usual case: (pid, tid) as one uint64, factorized once
                local, uniques = pd.factorize((aa.astype(np.uint64) << np.uint64(32)) | ba.astype(np.uint64))
                glob = np.fromiter(
                    (self[(u >> 32, u & 0xFFFFFFFF)] for u in uniques.tolist()), dtype=np.int32, count=len(uniques)
                )
                return glob[local]
        ac, au = pd.factorize(aa, use_na_sentinel=False)
        bc, bu = pd.factorize(ba, use_na_sentinel=False)
        nb = max(len(bu), 1)
        local, uniques = pd.factorize(ac.astype(np.int64) * nb + bc)
        aul, bul = [_none_if_nan(u) for u in au.tolist()], [_none_if_nan(u) for u in bu.tolist()]
        glob = np.fromiter((self[(aul[u // nb], bul[u % nb])] for u in uniques.tolist()), dtype=np.int32, count=len(uniques))
        return glob[local]

    def in_order(self) -> list[Any]:
        """The values in code order."""
        return list(self)


def _array(values: list[Any]) -> np.ndarray:
    """An array for factorizing: int64 when every value is an int, else object."""
    if values and type(values[0]) is int:
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except (TypeError, ValueError, OverflowError):  # a null, a string or a huge number among them
            pass
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _floats(events: list[Any], field: Callable[[Any], Any]) -> np.ndarray:
    """float64 column of one field of the events (None -> NaN)."""
    try:
        return np.fromiter(map(field, events), dtype=np.float64, count=len(events))
    except TypeError:  # a missing value among them: np.array turns None into NaN
        return np.array(list(map(field, events)), dtype=np.float64)


def _none_if_nan(v: Any) -> Any:
    return None if isinstance(v, float) and v != v else v


class _Accumulator:
    """Columns of the events read so far; classification waits for the end (names may come last)."""

    def __init__(self) -> None:
        self.names = _Interner()  # event names
        self.keys = _Interner()  # (pid, tid) of X events
        self.pids = _Interner()  # pid of C events
        self.units = _Interner()
        self.x_name: list[np.ndarray] = []
        self.x_key: list[np.ndarray] = []
        self.x_ts: list[np.ndarray] = []
        self.x_dur: list[np.ndarray] = []
        self.c_name: list[np.ndarray] = []
        self.c_pid: list[np.ndarray] = []
        self.c_unit: list[np.ndarray] = []
        self.c_ts: list[np.ndarray] = []
        self.c_val: list[np.ndarray] = []
        self.process_of: dict[Any, str] = {}
        self.thread_of: dict[tuple[Any, Any], str] = {}
        self.processes: list[str] = []
        self.events = 0
        self.phased = 0
        self.found_steps = False

    def add(self, events: list[Any]) -> None:
        types = list(map(type, events))
        xs: list[_X] = list(compress(events, map(is_, types, repeat(_X))))
        cs: list[_C] = list(compress(events, map(is_, types, repeat(_C))))
        ms: list[_M] = list(compress(events, map(is_, types, repeat(_M)))) if _M in types else []
        self.events += len(events)
        self.phased += len(events) - types.count(type(None))
        del events, types
        if xs:
            self.x_name.append(self.names.codes_of(map(_NAME, xs), len(xs)))
            self.x_key.append(self.keys.pair_codes(list(map(_PID, xs)), list(map(_TID, xs))))
            self.x_ts.append(_floats(xs, _TS))
            self.x_dur.append(_floats(xs, _DUR))
        if cs:
            self.c_name.append(self.names.codes_of(map(_NAME, cs), len(cs)))
            self.c_pid.append(self.pids.codes_of(map(_PID, cs), len(cs)))
            self.c_ts.append(_floats(cs, _TS))
            units, values = _counter_values(list(map(_ARGS, cs)))
            self.c_unit.append(self.units.codes_of(units, len(units)))
            self.c_val.append(values)
        for e in ms:
            self._meta(e)

    def _meta(self, e: _M) -> None:
        if e.name not in ("process_name", "thread_name") or e.args is None or e.args.name is None:
            return
        name = str(e.args.name)
        if e.name == "process_name":
            self.process_of[e.pid] = name
            if name not in self.processes:
                self.processes.append(name)
        else:
            self.thread_of[(e.pid, e.tid)] = name

    # ---------------------------------------------------------------------------------------------

    def finish(self, rank: int) -> TraceView:
        names = np.array(self.names.in_order() or [""], dtype=object)
        timeline, host_ops = self._timeline(rank, names)
        counters = self._counters(rank, names)
        return TraceView(
            timeline=timeline,
            counters=counters,
            host_ops=host_ops,
            processes=list(self.processes),
            step_source=STEP_SOURCE if self.found_steps else None,
        )

    def _classify_keys(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """Per (pid, tid) code: lane code, track code, process-track code (for step markers); tracks."""
        tracks: dict[str, int] = {}
        keys = self.keys.in_order()
        lane = np.full(len(keys), _SKIP, dtype=np.int8)
        track = np.zeros(len(keys), dtype=np.int32)
        proc_track = np.zeros(len(keys), dtype=np.int32)
        for i, (pid, tid) in enumerate(keys):
            proc = self.process_of.get(pid)
            thread = self.thread_of.get((pid, tid))
            label = thread if thread is not None else ("" if tid is None else str(tid))
            proc_label = proc if proc is not None else ("" if pid is None else str(pid))
            proc_track[i] = tracks.setdefault(proc_label, len(tracks))
            if proc == "Ascend Hardware":
                lane[i], t = _DEVICE, label
            elif proc == "HCCL":
                if thread is None or not HCCL_OP_THREAD_RE.match(thread):
                    continue
                lane[i], t = _HCCL, thread
            elif proc == "Overlap Analysis":
                lane[i], t = _OVERLAP, label
            elif proc == "Scope Layer":
                lane[i], t = _SCOPE, label
            elif proc == CPU_OP_PROCESS:
                lane[i], t = _CPU_OP, label
            elif proc in HOST_PROCESSES:
                lane[i], t = _HOST, f"{proc}/{label}"
            else:
                continue
            track[i] = tracks.setdefault(t, len(tracks))
        return lane, track, proc_track, list(tracks)

    def _timeline(self, rank: int, names: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
        if not self.x_name:
            return model.TIMELINE.empty(), model.KERNELS.empty()
        name_c = np.concatenate(self.x_name)
        key_c = np.concatenate(self.x_key)
        ts = np.concatenate(self.x_ts)
        dur = np.concatenate(self.x_dur)
        self.x_name, self.x_key, self.x_ts, self.x_dur = [], [], [], []
        key_lane, key_track, key_proc, tracks = self._classify_keys()
        lane = key_lane[key_c]
        track = key_track[key_c]
        is_step_name = np.fromiter((bool(STEP_NAME_RE.match(n)) for n in names), dtype=bool, count=len(names))
        step = is_step_name[name_c]
        if step.any():
            lane[step] = _STEP
            track[step] = key_proc[key_c[step]]
        has_ts = ~np.isnan(ts)

        host = (lane == _CPU_OP) & has_ts
        host_ops = _host_ops(rank, names, name_c[host], ts[host], dur[host])

        keep = (lane >= 0) & has_ts
        self.found_steps = bool((step & has_ts).any())
        lane, track, name_c, ts, dur = lane[keep], track[keep], name_c[keep], ts[keep], dur[keep]
        track_values = np.array(tracks or [""], dtype=object)
        order = np.lexsort((ts, _ranks(track_values)[track], lane))  # (not by codes: they depend on chunking)
        lane, track, name_c, ts, dur = lane[order], track[order], name_c[order], ts[order], dur[order]
        n = len(ts)
        timeline = model.TIMELINE.frame(
            {
                "rank": _const_int(rank, n),
                "lane": _strings(np.array(_LANES, dtype=object), lane),
                "track": _strings(track_values, track),
                "name": _strings(names, name_c),
                "start_us": ts,
                "dur_us": dur,
            }
        )
        return timeline, host_ops

    def _counters(self, rank: int, names: np.ndarray) -> pd.DataFrame:
        if not self.c_name:
            return model.COUNTERS.empty()
        name_c = np.concatenate(self.c_name)
        pid_c = np.concatenate(self.c_pid)
        unit_c = np.concatenate(self.c_unit)
        ts = np.concatenate(self.c_ts)
        val = np.concatenate(self.c_val)
        pid_track = np.array(
            [self.process_of.get(p, "" if p is None else str(p)) for p in self.pids.in_order()], dtype=object
        )
        units = np.array(self.units.in_order(), dtype=object)
        keep = ~np.isnan(ts)
        name_c, pid_c, unit_c, ts, val = name_c[keep], pid_c[keep], unit_c[keep], ts[keep], val[keep]
        order = np.lexsort((ts, _ranks(names)[name_c], _ranks(pid_track)[pid_c]))
        name_c, pid_c, unit_c, ts, val = name_c[order], pid_c[order], unit_c[order], ts[order], val[order]
        n = len(ts)
        return model.COUNTERS.frame(
            {
                "rank": _const_int(rank, n),
                "track": _strings(pid_track, pid_c),
                "name": _strings(names, name_c),
                "unit": _strings(units, unit_c),
                "ts_us": ts,
                "value": val,
            }
        )


def _counter_values(args: list[dict[str, Any] | None]) -> tuple[list[Any], np.ndarray]:
    """(unit, value) of each counter sample: the first args key that is not "acc_id", and its number."""
    try:  # the common case, at C speed: every args is a non-empty dict whose first key is the unit
        units: list[Any] = list(map(next, map(iter, args)))  # type: ignore[arg-type]
        ok = len(units) == len(args) and "acc_id" not in units  # an empty dict stops map() early
    except TypeError:  # args null
        ok = False
    if ok:
        values: list[Any] = list(map(dict.__getitem__, args, units))  # type: ignore[arg-type]
    else:
        units = [next((k for k in d if k != "acc_id"), None) if d else None for d in args]
        values = [d[u] if d and u is not None else None for d, u in zip(args, units)]
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        arr = np.array([_loose_float(v) for v in values], dtype=np.float64)
    return units, arr


def _ranks(values: np.ndarray) -> np.ndarray:
    """The position of each value in sorted order (to sort rows by a coded column's text)."""
    out = np.empty(len(values), dtype=np.int64)
    out[np.argsort(values, kind="stable")] = np.arange(len(values))
    return out


def _strings(values: np.ndarray, codes: np.ndarray) -> pd.api.extensions.ExtensionArray:
    """A "string" column from interned values and their codes (None values become <NA>).

    The few distinct values are converted once, then taken by code: no per-row conversion, with
    Python or Arrow string storage alike.
    """
    return pd.array(values, dtype=model.STR).take(np.asarray(codes, dtype=np.intp))


def _const_int(value: int, n: int) -> pd.api.extensions.ExtensionArray:
    return pd.array(np.full(n, value, dtype=np.int64), dtype=model.INT)


def _op_type(name: str) -> str:
    """Op type from a MindSpore op's full name: "Default/net/MatMul-op3" -> "MatMul"."""
    return _OP_SUFFIX_RE.sub("", name.rsplit("/", 1)[-1])


def _op_kind(op_type: str) -> str:
    t = op_type.lower()
    for p in _COMM_PREFIXES:
        if t.startswith(p) and t[len(p) :] in COMMUNICATION_OP_TYPES:
            return "communication"
    return "communication" if t in COMMUNICATION_OP_TYPES else "compute"


def _host_ops(rank: int, names: np.ndarray, name_c: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> pd.DataFrame:
    """KERNELS rows for the MindSpore CPU backend's host ops ("CPU OP" process)."""
    n = len(ts)
    if not n:
        return model.KERNELS.empty()
    used, inverse = np.unique(name_c, return_inverse=True)
    types = np.array([_op_type(str(names[c])) for c in used], dtype=object)
    kinds = np.array([_op_kind(t) for t in types], dtype=object)
    order = np.argsort(ts, kind="stable")
    inverse = inverse.reshape(-1)[order]
    return model.KERNELS.frame(
        {
            "rank": _const_int(rank, n),  # (step, stream: null, filled by the table)
            "name": _strings(names, name_c[order]),
            "type": _strings(types, inverse),
            "core": _strings(np.array(["CPU"], dtype=object), np.zeros(n, dtype=np.intp)),
            "kind": _strings(kinds, inverse),
            "start_us": ts[order],
            "dur_us": dur[order],
        }
    )
