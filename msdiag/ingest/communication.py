"""HCCL communication analysis: communication.json and communication_matrix.json.

Both files are split by step (``"step<N>"``, or ``"step"`` when the capture has no step markers) and
by category (``"p2p"`` | ``"collective"``). Times are written in ms and become us here.

Units, checked on the corpus: "MB" is 10^6 bytes (the Size Distribution packet sizes times 10^6 are
whole byte counts, and the Transit Size of each op equals the sum of the trace's ``size(Byte)`` HCCS
tasks / 10^6), and "GB/s" is Transit Size(MB) / Transit Time(ms), i.e. 10^9 bytes per second.

The ``SDMA`` transport of communication.json aggregates the on-node transports (in the corpus it
repeats HCCS exactly): summing size over transports counts the same bytes twice.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from msdiag import model, units
from msdiag.errors import ParseError
from msdiag.ingest.metadata import load_json

CATEGORIES = ("p2p", "collective")
TOTAL_KEY = "Total Op Info"

_STEP_RE = re.compile(r"step(\d*)")
# communication_matrix.json (torch_npu 2.1+/MindSpore 2.3+): "<optype>-<variant>@<group>"
_MATRIX_KEY_RE = re.compile(r"(?P<optype>[^@]+?)-(?P<variant>top\d+|middle|bottom\d+|total)@(?P<group>[^@]*)")
_LINK_RE = re.compile(r"\s*(\d+)\s*-\s*(\d+)\s*")

# "Communication Time Info" keys; Idle is misspelled "Idel" in MindSpore's docs.
_ELAPSE = "Elapse Time(ms)"
_TRANSIT = "Transit Time(ms)"
_WAIT = "Wait Time(ms)"
_SYNC = "Synchronization Time(ms)"
_IDLE = ("Idle Time(ms)", "Idel Time(ms)")
_START = "Start Timestamp(us)"
_SIZE = "Transit Size(MB)"
_BW = "Bandwidth(GB/s)"
_LPR = "Large Packet Ratio"
_DIST = "Size Distribution"


def _kind(x: Any) -> str:
    if isinstance(x, dict):
        return "an object"
    if isinstance(x, list):
        return "a list"
    if isinstance(x, str):
        return "a string"
    if x is None:
        return "null"
    return "a number"


def _num(path: Path, where: str, d: dict[str, Any], key: str) -> float:
    """A number from the file; NaN when the key is absent or null (never 0)."""
    v = d.get(key)
    if v is None:
        return math.nan
    if isinstance(v, bool):
        raise ParseError(path, f"{where}: '{key}' should be a number, found a boolean")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            pass
    raise ParseError(path, f"{where}: '{key}' should be a number, found {v!r}")


def _obj(path: Path, where: str, x: Any) -> dict[str, Any]:
    if not isinstance(x, dict):
        raise ParseError(path, f"{where} should be a JSON object, found {_kind(x)}")
    return x


def _steps(path: Path, doc: Any, what: str) -> Iterator[tuple[str, int | None, str, dict[str, Any]]]:
    """Yield (step, category, ops dict) after checking the step/category levels."""
    if not isinstance(doc, dict):
        raise ParseError(path, f"expected a JSON object keyed by step ('step<N>') for {what}, found {_kind(doc)}")
    for step_key, cats in doc.items():
        m = _STEP_RE.fullmatch(step_key)
        if not m:
            raise ParseError(path, f"unexpected top-level key '{step_key}': expected 'step' or 'step<N>'")
        step = int(m.group(1)) if m.group(1) else None
        cats = _obj(path, f"'{step_key}'", cats)
        for cat, ops in cats.items():
            if cat not in CATEGORIES:
                raise ParseError(path, f"'{step_key}' has an unexpected key '{cat}': expected 'p2p' or 'collective'")
            yield step_key, step, cat, _obj(path, f"'{step_key}'.'{cat}'", ops)


def split_op_key(key: str) -> tuple[str, str | None]:
    """'hcom_allReduce__586_0_1@1752...' -> ('hcom_allReduce__586_0_1', '1752...'); group None without '@'."""
    name, sep, group = key.rpartition("@")
    if not sep:
        return key, None
    return name, group


def op_type_of(op_name: str) -> str:
    """'hcom_allReduce__586_0_1' -> 'hcom_allReduce' (the name up to the first '__')."""
    return op_name.split("__", 1)[0]


def read_communication(path: Path, rank: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """communication.json -> (model.COMM_OPS, model.COMM_TRANSPORT) for one rank.

    One COMM_OPS row per step, category and op (the "Total Op Info" sums are skipped); times in us.
    idle_us is the file's Idle (or "Idel") Time, or elapse - transit - wait when the file lacks it.
    One COMM_TRANSPORT row per op and transport that moved something (non-zero size or time);
    bandwidth_gbps = size_mb / time_ms, packets = sum of the Size Distribution counts (null when the
    file gives no distribution, as for SDMA).
    """
    ops_rows, tr_rows = _communication_rows(path)
    return _frame(model.COMM_OPS, _OPS_COLS, ops_rows, rank), _frame(model.COMM_TRANSPORT, _TR_COLS, tr_rows, rank)


def read_communication_many(paths: list[Path], ranks: list[int]) -> list[tuple[pd.DataFrame, pd.DataFrame]] | None:
    """:func:`read_communication` of several files at once: each file's rows, then each table's frame built once
    over them all and cut back per file (:func:`_frames_many`); None where a file fails or a frame cannot be so."""
    try:
        rows = [_communication_rows(p) for p in paths]
    except ParseError:
        return None
    ops = _frames_many(model.COMM_OPS, _OPS_COLS, [r[0] for r in rows], ranks)
    tr = _frames_many(model.COMM_TRANSPORT, _TR_COLS, [r[1] for r in rows], ranks)
    return None if ops is None or tr is None else list(zip(ops, tr))


_OPS_COLS = ["step", "category", "op_name", "op_type", "group", "start_us", "elapse_us", "transit_us", "wait_us", "sync_us",
             "idle_us"]
_TR_COLS = ["step", "op_name", "group", "transport", "size_mb", "time_us", "bandwidth_gbps", "large_packet_ratio", "packets"]


def _communication_rows(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """communication.json's COMM_OPS and COMM_TRANSPORT rows (without the rank)."""
    doc = load_json(path)
    ops_rows: list[tuple[Any, ...]] = []
    tr_rows: list[tuple[Any, ...]] = []
    for step_key, step, cat, ops in _steps(path, doc, "communication ops"):
        for key, op in ops.items():
            if key == TOTAL_KEY:
                continue
            where = f"'{step_key}'.'{cat}'.'{key}'"
            op = _obj(path, where, op)
            if "Communication Time Info" not in op:
                raise ParseError(path, f"{where} has no 'Communication Time Info'")
            t = _obj(path, f"{where}.'Communication Time Info'", op["Communication Time Info"])
            name, group = split_op_key(key)
            elapse = _num(path, where, t, _ELAPSE)
            transit = _num(path, where, t, _TRANSIT)
            wait = _num(path, where, t, _WAIT)
            sync = _num(path, where, t, _SYNC)
            idle_key = next((k for k in _IDLE if t.get(k) is not None), None)
            idle = _num(path, where, t, idle_key) if idle_key else elapse - transit - wait
            ops_rows.append(
                (
                    step,
                    cat,
                    name,
                    op_type_of(name),
                    group,
                    _num(path, where, t, _START),
                    elapse * units.US_PER_MS,
                    transit * units.US_PER_MS,
                    wait * units.US_PER_MS,
                    sync * units.US_PER_MS,
                    idle * units.US_PER_MS,
                )
            )
            bw_info = op.get("Communication Bandwidth Info")
            if bw_info is None:
                continue
            bw_info = _obj(path, f"{where}.'Communication Bandwidth Info'", bw_info)
            for transport, b in bw_info.items():
                bwhere = f"{where}.'{transport}'"
                b = _obj(path, bwhere, b)
                size = _num(path, bwhere, b, _SIZE)
                time_ms = _num(path, bwhere, b, _TRANSIT)
                if not (size > 0 or time_ms > 0):  # nothing moved (NaN compares False too)
                    continue
                bw = size / time_ms if time_ms > 0 and not math.isnan(size) else math.nan
                tr_rows.append(
                    (
                        step,
                        name,
                        group,
                        transport,
                        size,
                        time_ms * units.US_PER_MS,
                        bw,
                        _num(path, bwhere, b, _LPR),
                        _packets(path, bwhere, b.get(_DIST)),
                    )
                )
    return ops_rows, tr_rows


def _packets(path: Path, where: str, dist: Any) -> int | None:
    """Sum of packet counts in {"<size MB>": [count, time_ms]}; None when there is no distribution."""
    if dist is None:
        return None
    dist = _obj(path, f"{where}.'{_DIST}'", dist)
    if not dist:
        return None
    total = 0
    for size, v in dist.items():
        count = v[0] if isinstance(v, list) and v else v
        if isinstance(count, bool) or not isinstance(count, (int, float)):
            raise ParseError(path, f"{where}.'{_DIST}'.'{size}' should be [count, time], found {v!r}")
        total += int(count)
    return total


def _frame(table: model.Table, cols: list[str], rows: list[tuple[Any, ...]], rank: int) -> pd.DataFrame:
    if not rows:
        return table.empty()
    arrays = _arrays(table, cols, rows)
    if arrays is not None:
        return table.frame({"rank": pd.array(np.full(len(rows), rank, dtype=np.int64), dtype=model.INT), **arrays})
    df = pd.DataFrame.from_records(rows, columns=cols)
    # the rank beside the columns (not inserted into df: the frame takes the columns as they are)
    return table.frame({"rank": pd.Series(rank, index=df.index, dtype=model.INT), **{c: df[c] for c in df.columns}})


def _frames_many(table: model.Table, cols: list[str], rows: list[list[tuple[Any, ...]]], ranks: list[int]) -> list[pd.DataFrame] | None:
    """What :func:`_frame` gives for each file's ``rows`` (of the rank beside it), its columns built once over the
    files' rows laid end to end (``_arrays``) and cut back into a row slice per file (index 0..n-1, given as the
    ``model.Rows`` it is cut from when read: ``model.cut_rows``; a file of no rows the table's empty frame, as _frame gives); None when _arrays cannot build them (some file's frame is
    then DataFrame.from_records'), or no file has rows."""
    every = [r for part in rows for r in part]
    if not every:
        return None
    arrays = _arrays(table, cols, every)
    if arrays is None:
        return None
    counts = [len(part) for part in rows]
    whole = table.frame({"rank": model.rank_column(ranks, counts), **arrays})
    return [part if n else table.empty() for part, n in zip(model.cut_rows(whole, counts), counts)]


_EXACT_INT = 2**53  # every int up to this is exact as a float: from_records' float64 column of ints and nulls


def _arrays(table: model.Table, cols: list[str], rows: list[tuple[Any, ...]]) -> dict[str, Any] | None:
    """The records' columns as arrays of the table's dtypes, each built once from its values (a frame
    of the records, then a Series per column, cost more than the reading); None when a value is not of
    its column's plain kind (floats; ints up to 2^53 or None; str or None), which only
    ``DataFrame.from_records`` then converts as it always did."""
    out: dict[str, Any] = {}
    for c, values in zip(cols, zip(*rows)):
        dtype = table.columns[c]
        kinds = set(map(type, values))
        if dtype == model.FLOAT and kinds == {float}:
            out[c] = np.array(values, dtype=np.float64)
        elif dtype == model.INT and kinds == {int}:
            ints = _plain_ints(values)
            if ints is None:
                return None
            out[c] = ints
        elif dtype == model.INT and kinds <= {int, type(None)} and all(
            v is None or -_EXACT_INT <= v <= _EXACT_INT for v in values
        ):
            out[c] = pd.array(values, dtype=model.INT)
        elif dtype == model.STR and kinds <= {str, type(None)}:
            # (Arrow takes the Python texts and Nones in one pass: what pd.array(np.array(values, dtype=object),
            # dtype=STR) gives, at half its cost)
            out[c] = model.string_array(pa.array(values, type=pa.large_string()))
        else:
            return None
    return out


def _plain_ints(values: tuple[int, ...]) -> Any:
    """Python ints as an Int64 array (what ``pd.array(values, dtype=INT)`` gives) built by numpy; None when one lies
    beyond 2^53 (``DataFrame.from_records`` then judges the column, as it always did)."""
    try:
        a = np.array(values, dtype=np.int64)
    except OverflowError:
        return None
    if len(a) and (int(a.min()) < -_EXACT_INT or int(a.max()) > _EXACT_INT):
        return None
    return pd.arrays.IntegerArray(a, np.zeros(len(a), dtype=bool))


def read_communication_matrix(path: Path, rank: int) -> pd.DataFrame:
    """communication_matrix.json -> model.COMM_LINKS for one rank.

    Two key styles exist. Newer files key by "<optype>-<variant>@<group>" with variant top1 | middle |
    bottom1..3 | total (instances ranked by bandwidth; total is their sum). Older files (torch_npu
    2023/2024) key by "<op name>@<group>", one entry per op, plus a "Total Op Info" that sums links
    across all groups of the category: it is skipped; variant then holds the op name.
    op_type uses the communication.json spelling (hcom_allReduce): newer keys write it lower-cased
    without "hcom_" ("allreduce"), so it is mapped back through the "Op Name" values found in the file,
    and kept as written when the file has none. src and dst are group-local rank numbers; times in us;
    bandwidth_gbps = size_mb / time_ms (null when the time is 0).
    """
    return _frame(model.COMM_LINKS, _LINK_COLS, _matrix_rows(path), rank)


def read_communication_matrix_many(paths: list[Path], ranks: list[int]) -> list[pd.DataFrame] | None:
    """:func:`read_communication_matrix` of several files at once (:func:`_frames_many`); None where a file fails."""
    try:
        rows = [_matrix_rows(p) for p in paths]
    except ParseError:
        return None
    return _frames_many(model.COMM_LINKS, _LINK_COLS, rows, ranks)


_LINK_COLS = ["step", "category", "op_type", "variant", "group", "src", "dst", "transport", "size_mb", "time_us", "bandwidth_gbps"]


def _matrix_rows(path: Path) -> list[tuple[Any, ...]]:
    """communication_matrix.json's COMM_LINKS rows (without the rank)."""
    doc = load_json(path)
    spelled = _op_type_spellings(doc)
    rows: list[tuple[Any, ...]] = []
    ends: dict[str, tuple[int, int]] = {}  # link key -> (src, dst): a file names the same links in every op
    for step_key, step, cat, entries in _steps(path, doc, "communication links"):
        for key, links in entries.items():
            if key == TOTAL_KEY:
                continue
            where = f"'{step_key}'.'{cat}'.'{key}'"
            m = _MATRIX_KEY_RE.fullmatch(key)
            if m:
                raw_type = m.group("optype")
                op_type = spelled.get(raw_type.lower(), raw_type)
                variant, group = m.group("variant"), m.group("group")
            else:
                name, group = split_op_key(key)
                op_type, variant = op_type_of(name), name
            for link, d in _obj(path, where, links).items():
                src_dst = ends.get(link)
                if src_dst is None:
                    lm = _LINK_RE.fullmatch(link)
                    if not lm:
                        raise ParseError(path, f"{where}: link key '{link}' is not '<src>-<dst>'")
                    src_dst = ends[link] = (int(lm.group(1)), int(lm.group(2)))
                if type(d) is not dict:
                    d = _obj(path, f"{where}.'{link}'", d)
                # (a plain JSON number, float or int but not a boolean, taken as it is, without a call per value: what
                # _num gives for it; anything else judged by _num, which names the link where it fails)
                size, time_ms = d.get(_SIZE), d.get(_TRANSIT)
                if type(size) is not float:
                    size = float(size) if type(size) is int else _num(path, f"{where}.'{link}'", d, _SIZE)
                if type(time_ms) is not float:
                    time_ms = float(time_ms) if type(time_ms) is int else _num(path, f"{where}.'{link}'", d, _TRANSIT)
                bw = size / time_ms if time_ms > 0 and not math.isnan(size) else math.nan
                transport = d.get("Transport Type")
                rows.append(
                    (
                        step,
                        cat,
                        op_type,
                        variant,
                        group,
                        src_dst[0],
                        src_dst[1],
                        None if transport is None else str(transport),
                        size,
                        time_ms * units.US_PER_MS,
                        bw,
                    )
                )
    return rows


def _op_type_spellings(doc: Any) -> dict[str, str]:
    """'allreduce' -> 'hcom_allReduce', from every "Op Name" in a communication_matrix.json."""
    out: dict[str, str] = {}
    if not isinstance(doc, dict):
        return out
    seen: set[str] = set()  # (an op's links share its name: each name taken once)
    for cats in doc.values():
        if not isinstance(cats, dict):
            continue
        for entries in cats.values():
            if not isinstance(entries, dict):
                continue
            for links in entries.values():
                if not isinstance(links, dict):
                    continue
                for d in links.values():
                    name = d.get("Op Name") if isinstance(d, dict) else None
                    if isinstance(name, str) and name and name not in seen:
                        seen.add(name)
                        full = op_type_of(name)
                        out.setdefault(full.rsplit("_", 1)[-1].lower(), full)
    return out
