"""Readers for the MindSpore CPU profiler's ``FRAMEWORK/`` files (MindSpore 2.3+ on a CPU device).

A CPU capture (``<host>_<pid>_<ts>_ascend_ms/``) has no step markers, no profiler_info.json and no
``ASCEND_PROFILER_OUTPUT`` CSVs; what it has is ``trace_view.json`` (read elsewhere) and these raw
files written by MindSpore's C++ CPU profiler into ``FRAMEWORK/``:

- ``cpu_framework_<rank>.txt``            op input shapes          -> :data:`model.HOST_SHAPES`
- ``cpu_ms_memory_record_<rank>.txt``     memory samples (bytes)   -> :data:`model.MEMORY`
- ``cpu_op_type_info_<rank>.csv``         per op type summary (ms) -> :data:`model.OP_STATS`
- ``cpu_op_execute_timestamp_<rank>.txt`` every op launch          -> :data:`model.KERNELS`

Formats were worked out from the real files in ``shared/corpus/mindspore-cpu`` and from the
MindSpore 2.10 wheel's Python side (``mindspore/profiler/common/profiler_op_analyse.py``,
``analysis/parser/timeline_creator/cpu_op_timeline_creator.py``,
``analysis/viewer/ascend_memory_viewer.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from msdiag import model, units
from msdiag.errors import ParseError
from msdiag.ingest._csv import read_csv, to_float, to_int

# Op types of MindSpore's collective and point-to-point primitives. On CPU they run through
# MindSpore's own CPU collectives and show up as ordinary host ops (``Default/AllReduce-op3``).
COMMUNICATION_OP_TYPES = frozenset(
    {
        "AllReduce",
        "AllGather",
        "ReduceScatter",
        "Broadcast",
        "AllToAll",
        "AlltoAll",
        "AlltoAllV",
        "Send",
        "Receive",
        "Reduce",
        "Barrier",
        "CollectiveScatter",
        "CollectiveGather",
        "NeighborExchange",
        "NeighborExchangeV2",
        "BatchISendIRecv",
    }
)
# mint.distributed ops launched through PyBoost are named e.g. DistCommAllReduce, InnerCommAllGather.
_COMM_PREFIX = re.compile(r"^(?:Dist|Inner)Comm[A-Z]")

_OP_SUFFIX = re.compile(r"-op\d+$")
_SHAPE_ITEM = re.compile(
    r"^(?P<key>[A-Za-z_]\w*):(?:\[(?P<dims>[-\d,\s]*)\]|(?P<none>NoShape)|(?P<seq>[A-Za-z]+Shape\(.*\)))$"
)
_INT = re.compile(r"^-?\d+$")

MEMORY_SOURCE = "cpu_ms_memory_record"


def op_type_of(name: str) -> str:
    """The op type of a host op name: its last path segment without the ``-opN`` suffix.

    ``Default/optimizer-Adam/Adam-op2`` -> ``Adam``; a PyNative PyBoost op is named by its type
    alone (``GeLU``) and is returned unchanged.
    """
    return _OP_SUFFIX.sub("", name.rsplit("/", 1)[-1])


def op_kind(op_type: str) -> str:
    """``communication`` for collective and point-to-point op types, ``compute`` otherwise."""
    if op_type in COMMUNICATION_OP_TYPES or _COMM_PREFIX.match(op_type):
        return "communication"
    return "compute"


def _read_lines(path: Path) -> list[str]:
    """The file's lines (line endings stripped); an error when it is missing or holds only blanks."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    lines = [ln.rstrip("\r\n") for ln in text.splitlines()]
    if not any(ln.strip() for ln in lines):
        raise ParseError(path, "the file is empty")
    return lines


def _shape_text(path: Path, lineno: int, item: str) -> str:
    """``input_1:[16, 32, 64]`` -> ``16,32,64``; ``NoShape``, a scalar ``[]`` and ``TupleShape(NoShape)`` -> ``''``."""
    m = _SHAPE_ITEM.match(item.strip())
    if not m:
        raise ParseError(path, f"line {lineno}: expected an input shape like 'input_1:[16, 32]', found {item!r}")
    if m.group("none") is not None:
        return ""
    if m.group("seq") is not None:
        # A tuple/list input (an axis tuple, StridedSlice begin/end/strides): 'TupleShape(NoShape)'.
        # Of no tensor shape -> ''. One holding tensor shapes (not seen in the corpus) is kept as
        # written without spaces, since 'a,b;c' cannot nest it.
        seq = m.group("seq")
        inner = seq[seq.index("(") + 1 : -1]
        if all(part.strip() in ("", "NoShape") for part in inner.split(",")):
            return ""
        return re.sub(r"\s+", "", seq)
    dims = [d.strip() for d in m.group("dims").split(",") if d.strip()]
    if not all(_INT.match(d) for d in dims):
        raise ParseError(path, f"line {lineno}: a shape holds a non-integer dimension: {item!r}")
    return ",".join(dims)


def read_cpu_framework(path: Path, rank: int) -> pd.DataFrame:
    """Op input shapes from ``cpu_framework_<rank>.txt`` -> :data:`model.HOST_SHAPES`.

    Each line is ``<op_type>;<op_name>;<graph_id>;input_1:[a, b];input_2:NoShape;...;`` and is
    written once per launch of a kernel-graph op. One row is kept per op name and distinct set of
    input shapes: the same name with other shapes (dynamic shapes, or graph mode reusing a short
    name such as ``MatMul-op0`` in several scopes) gives one row per shape set, in order of first
    appearance.

    Lines ``;;<graph_id>;`` (no type, no name, no shapes) are launches of PyNative ops that run
    through PyBoost and have no kernel node to describe: in every corpus capture their number equals
    the launches of the ops whose name has no ``-opN`` suffix in cpu_op_detail_info (MatMul, GeLU,
    Softmax, ...), and graph-mode captures have none. They carry no shape and are skipped, so PyNative
    shapes cover only the kernel-graph ops (Adam, BiasAdd, LayerNorm, ...).
    """
    rows: list[tuple[str, str, str]] = []
    seen: set[tuple[str, str]] = set()
    for lineno, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.strip().split(";")
        if len(fields) < 3:
            raise ParseError(
                path, f"line {lineno}: expected '<op_type>;<op_name>;<graph_id>;<shapes>', found {line[:80]!r}"
            )
        if not _INT.match(fields[2].strip()):
            raise ParseError(path, f"line {lineno}: the third field (graph id) is not an integer: {line[:80]!r}")
        op_type, op_name = fields[0].strip(), fields[1].strip()
        if not op_type and not op_name:
            continue  # a PyBoost launch: no kernel node, nothing to record
        if not op_type or not op_name:
            raise ParseError(path, f"line {lineno}: an op type without an op name (or the reverse): {line[:80]!r}")
        shapes = ";".join(_shape_text(path, lineno, item) for item in fields[3:] if item.strip())
        key = (op_name, shapes)
        if key not in seen:
            seen.add(key)
            rows.append((op_type, op_name, shapes))
    return model.HOST_SHAPES.frame(
        {
            "rank": pd.Series([rank] * len(rows), dtype=model.INT),
            "op_type": [r[0] for r in rows],
            "op_name": [r[1] for r in rows],
            "input_shapes": [r[2] for r in rows],
        }
    )


def _ns_to_us(path: Path, column: str, values: pd.Series) -> list[float]:
    """Integer nanosecond timestamps -> float us, divided exactly (the ns values exceed 2**53)."""
    out: list[float] = []
    for i, v in enumerate(values.astype("string").str.strip()):
        if v is pd.NA or not _INT.match(str(v)):
            raise ParseError(path, f"column '{column}' holds a non-integer timestamp ({v!r}) in row {i + 2}")
        out.append(int(str(v)) / units.NS_PER_US)
    return out


def read_cpu_memory_record(path: Path, rank: int) -> pd.DataFrame:
    """Memory samples from ``cpu_ms_memory_record_<rank>.txt`` -> :data:`model.MEMORY`.

    The file is a CSV ``Timestamp(ns),Total Allocated(Byte),Total Reserved(Byte),Total Active(Byte)``
    written by MindSpore's CPU memory pool, one line per allocation or release. Sizes become MB with
    MB = MiB = 2**20 bytes, the unit ``model`` gives ``_mb`` columns.

    Beware: MindSpore 2.10's own ``memory_record.csv`` does not use MiB for these rows. Its
    ``AscendMemoryViewer`` turns the bytes into ``bytes / 1024`` ("KB") and then divides by 1000
    (``MemoryRecordBean.KB_TO_MB = 1000``), so a "MindSpore" row of memory_record.csv is 1000/1024 of
    the MiB value read here (2.4 % smaller).
    """
    required = ["Timestamp(ns)", "Total Allocated(Byte)", "Total Reserved(Byte)", "Total Active(Byte)"]
    df = read_csv(path, required=required)
    n = len(df)
    data = {
        "rank": pd.Series([rank] * n, dtype=model.INT),
        "component": ["MindSpore"] * n,
        "source": [MEMORY_SOURCE] * n,
        "ts_us": _ns_to_us(path, "Timestamp(ns)", df["Timestamp(ns)"]),
        "allocated_mb": to_float(df["Total Allocated(Byte)"], path, "Total Allocated(Byte)") / units.BYTES_PER_MIB,
        "reserved_mb": to_float(df["Total Reserved(Byte)"], path, "Total Reserved(Byte)") / units.BYTES_PER_MIB,
        "active_mb": to_float(df["Total Active(Byte)"], path, "Total Active(Byte)") / units.BYTES_PER_MIB,
        "device": [f"CPU:{rank}"] * n,
    }
    return model.MEMORY.frame(data)


def read_cpu_op_type_info(path: Path, rank: int) -> pd.DataFrame:
    """Per op type summary from ``cpu_op_type_info_<rank>.csv`` -> :data:`model.OP_STATS`.

    Header ``op_type,type_occurrences,execution_frequency(per-step),total_compute_time,avg_time(ms),percent``.
    Units, checked on every corpus capture:

    - ``total_compute_time`` is in ms: it equals the sum over the type of ``op_total_time(ms)`` in
      cpu_op_detail_info and the sum of the ``dur_ms`` fields in cpu_op_execute_timestamp (to the
      6 significant digits written), and ``avg_time(ms)`` = total_compute_time / type_occurrences.
    - ``percent`` is a share 0..1, not %: total_compute_time / the file's summed total_compute_time,
      and the column sums to 1.0.
    - ``type_occurrences`` is the number of launches in the capture (all steps together).

    The file has no min or max; ``execution_frequency(per-step)`` is not a per-step count that can be
    trusted (in PyNative it is 1 for MatMul with 27 launches per step) and is not kept.
    """
    cols = ["op_type", "type_occurrences", "total_compute_time", "avg_time(ms)", "percent"]
    df = read_csv(path, required=cols)
    n = len(df)
    op_type = df["op_type"].astype("string").str.strip()
    if op_type.isna().any():
        raise ParseError(path, f"column 'op_type' is empty in row {int(op_type.isna().idxmax()) + 2}")
    data = {
        "rank": pd.Series([rank] * n, dtype=model.INT),
        "op_type": op_type,
        "core": ["CPU"] * n,
        "count": to_int(df["type_occurrences"], path, "type_occurrences"),
        "total_us": to_float(df["total_compute_time"], path, "total_compute_time") * units.US_PER_MS,
        "avg_us": to_float(df["avg_time(ms)"], path, "avg_time(ms)") * units.US_PER_MS,
        "ratio": to_float(df["percent"], path, "percent"),
    }
    return model.OP_STATS.frame(data)


def read_cpu_op_timestamps(path: Path, rank: int) -> pd.DataFrame:
    """Every host op launch from ``cpu_op_execute_timestamp_<rank>.txt`` -> :data:`model.KERNELS`.

    One line per op name: ``<full name>;HostCpuOps;<start_ns>,<dur_ms>,<tid> <start_ns>,<dur_ms>,<tid> ...``
    (the third number is the host thread id; MindSpore turns it into the trace's ``tid``). It is the
    source of trace_view.json's "CPU OP" process, so this reader is the fallback when trace_view.json
    is absent: start_us = start_ns / 1000 and dur_us = dur_ms * 1000, as MindSpore converts them.
    Rows are sorted by start time. Host ops have no stream and, on CPU, no step id.

    The trace's ts is not exactly start_ns / 1000: MindSpore multiplies by ``Decimal(0.001)`` built
    from a float (0.001000000000000000020817...), which makes every trace ts about 0.037 us late for
    present-day epoch timestamps. This reader divides exactly, so the two differ by those 37 ns
    (below float64's 0.25 us resolution at 1.8e15 us anyway); durations agree to the 0.001 us written.
    """
    names: list[str] = []
    starts: list[float] = []
    durs: list[float] = []
    for lineno, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.strip().split(";")
        if len(fields) < 3 or not fields[0].strip():
            raise ParseError(
                path, f"line {lineno}: expected '<op name>;HostCpuOps;<start_ns>,<dur_ms>,<tid> ...', found {line[:80]!r}"
            )
        name = fields[0].strip()
        for item in fields[-1].split():
            parts = item.split(",")
            if len(parts) != 3 or not _INT.match(parts[0]):
                raise ParseError(path, f"line {lineno}: expected '<start_ns>,<dur_ms>,<tid>', found {item!r}")
            try:
                dur_ms = float(parts[1])
            except ValueError:
                raise ParseError(path, f"line {lineno}: the duration {parts[1]!r} is not a number") from None
            names.append(name)
            starts.append(int(parts[0]) / units.NS_PER_US)
            durs.append(dur_ms * units.US_PER_MS)
    if not names:
        raise ParseError(path, "no op launch found (expected '<start_ns>,<dur_ms>,<tid>' entries)")
    types = [op_type_of(n) for n in names]
    df = pd.DataFrame(
        {
            "rank": pd.Series([rank] * len(names), dtype=model.INT),
            "name": names,
            "type": types,
            "core": ["CPU"] * len(names),
            "kind": [op_kind(t) for t in types],
            "start_us": starts,
            "dur_us": durs,
        }
    )
    df = df.sort_values(["start_us", "name"], kind="stable", ignore_index=True)
    return model.KERNELS.frame(df)
