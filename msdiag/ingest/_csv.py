"""Reading the profiler's CSV files: the real-world dirt handled once, for every reader.

- timestamps written as strings with a trailing TAB (``1736412474730135.222\\t``);
- spreadsheet-mangled numbers (``1.69512E+15``): parsed, and flagged since precision is lost;
- ``N/A`` and empty cells: null, never 0;
- CRLF line endings and a trailing comma at the end of the header.

Before pandas parses a file, :func:`check_shape` refuses, at the cost of one streaming pass, a file
whose shape would make the parse explode (pandas keeps a pointer per field, and pads every short
row out to the header's width): a line longer than :data:`MAX_LINE_BYTES` (a line of commas is a
row of millions of fields), a header wider than :data:`MAX_COLUMNS`, or a header wider than every
one of the first rows or than the file's bytes can fill (100k names over 30-field rows would be 100k
columns of nulls per row).
"""

from __future__ import annotations

import csv
import io
from itertools import islice
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from msdiag import units
from msdiag.errors import ParseError

NA_VALUES = ["N/A", "NA", "n/a", "", "-", "None", "null", "NaN", "nan"]
_NA_SET = frozenset(NA_VALUES)

# The longest line of the corpus is 1.4 KB (a kernel row with its shapes); a row of 1 MiB would hold
# shapes of thousands of inputs. pandas tokenizes such a line into at most ~1M fields (tens of MB).
MAX_LINE_BYTES = int(units.BYTES_PER_MIB)
# The widest profiler CSV has under 100 columns (op_summary with PMU metrics).
MAX_COLUMNS = 4096
# Rows the header is compared with: a header wider than all of them (but for a trailing comma) names
# columns that no row fills.
_SHAPE_ROWS = 100
_SCAN_BYTES = 8 << 20
_INT64_BOUND = 2.0**63
_NEWLINE = 0x0A


def read_csv(path: Path, required: Iterable[str] = (), any_of: Iterable[Iterable[str]] = ()) -> pd.DataFrame:
    """Read a profiler CSV as strings, check its header, and name the file in every error.

    ``required`` columns must all be present; for each group in ``any_of`` at least one column
    must be present (e.g. ``Block Dim`` or ``Block Num``).
    """
    try:
        if path.stat().st_size == 0:
            raise ParseError(path, "the file is empty (0 bytes)")
        check_shape(path)
        df = pd.read_csv(
            path,
            dtype=str,
            keep_default_na=False,
            na_values=NA_VALUES,
            skipinitialspace=False,
            encoding="utf-8",
            encoding_errors="replace",
            quoting=csv.QUOTE_MINIMAL,
        )
    except ParseError:
        raise
    except pd.errors.EmptyDataError:
        raise ParseError(path, "the file is empty: no CSV header") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ParseError(path, f"not a readable CSV file ({first})") from None
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    # A trailing comma in the header gives an unnamed empty column (selected away only when there is
    # one: a selection copies every column)
    named = [c for c in df.columns if not str(c).startswith("Unnamed:")]
    if len(named) != len(df.columns):
        df = df[named]
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    for group in any_of:
        group = list(group)
        if not any(c in df.columns for c in group):
            missing.append(" or ".join(group))
    if missing:
        found = ", ".join(df.columns[:12]) + (", ..." if len(df.columns) > 12 else "")
        raise ParseError(path, f"missing column(s) {', '.join(missing)}; found: {found}")
    return df


def to_float(s: pd.Series, path: Path | None = None, column: str = "") -> pd.Series:
    """Numbers written as text (trailing tabs, blanks, N/A) -> float64, null where absent.

    A cell that is present but not a number is an error naming the file and column.
    """
    if s.dtype.kind in "fiu":
        return s.astype("float64")
    raw = s.to_numpy(dtype=object)
    try:
        # fast path, in C: every cell a number (float() takes the trailing TAB as it is)
        return pd.Series(raw.astype("float64"), index=s.index)
    except (TypeError, ValueError):
        pass
    out = np.full(len(raw), np.nan)
    bad_rows: list[int] = []
    for i, v in enumerate(raw):
        if v is None or v is pd.NA or (isinstance(v, float) and v != v):
            continue
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            if str(v).strip() not in _NA_SET:
                bad_rows.append(i)
    if bad_rows and path is not None:
        i = bad_rows[0]
        raise ParseError(path, f"column '{column}' holds a non-number ({str(raw[i]).strip()!r}) in row {i + 2}")
    return pd.Series(out, index=s.index, dtype="float64")


def to_int(s: pd.Series, path: Path | None = None, column: str = "", notes: list[str] | None = None) -> pd.Series:
    """Integers written as text -> nullable Int64 (null where absent).

    A number that no int64 holds (``1e308``, ``inf``) is no id or count a profiler writes: it becomes
    null rather than stopping the read, and when ``notes`` is given a note says how many, where.
    """
    f = to_float(s, path, column)
    beyond = f.notna() & ~(f.abs() < _INT64_BOUND)
    if beyond.any():
        if notes is not None:
            first = float(f[beyond].iloc[0])
            shown = f"{first:.3g}" if np.isfinite(first) else "an infinite number"
            where = f"{path.name}: " if path is not None else ""
            notes.append(
                f"{where}{int(beyond.sum())} '{column}' value(s) beyond the int64 range (first: {shown}) read as null"
            )
        f = f.mask(beyond)
    return f.round().astype("Int64")


def strip_quotes(s: pd.Series) -> pd.Series:
    """Shapes are written as '"32,3,224,224"' (quoted twice in the CSV): keep the text inside."""
    t = s.astype("string").str.strip()
    return t.str.strip('"').str.strip()


def mangled_timestamps(ts: pd.Series) -> bool:
    """True when timestamps lost their precision (spreadsheet round-trip, e.g. 1.69512E+15)."""
    t = ts.astype("string").str.strip()
    return bool(t.str.contains(r"[eE]\+", regex=True, na=False).any())


def finite(x: pd.Series) -> pd.Series:
    return x.where(np.isfinite(x))


def check_last_row(path: Path) -> None:
    """Raise when the file's last row has fewer fields than its header (a file cut off mid-row).

    pandas pads a short last row with nulls without a word, so a truncated file would read as
    valid data with missing values. Profiler CSVs are rectangular (empty cells keep their commas),
    so a short last row means the file was cut. Only the tail of the file is read.
    """
    try:
        with open(path, "rb") as f:
            head = f.readline()
            f.seek(0, 2)
            size = f.tell()
            n = min(size, 1 << 16)
            f.seek(size - n)
            tail = f.read(n)
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    header = _fields(path, head.decode("utf-8", "replace").rstrip("\r\n"))
    while header and not header[-1].strip():
        header.pop()  # a trailing comma at the end of the header
    lines = tail.decode("utf-8", "replace").rstrip("\r\n").split("\n")
    if len(lines) < 2 and size > len(head):
        return  # the tail holds one very long line: nothing reliable to compare
    last = lines[-1].rstrip("\r")
    if not last.strip() or last.encode("utf-8", "replace") == head.rstrip(b"\r\n"):
        return  # header only
    fields = _fields(path, last)
    if len(fields) < len(header):
        shown = last if len(last) <= 60 else last[:57] + "..."
        raise ParseError(
            path,
            f"the file is truncated: its last row has {len(fields)} of the header's {len(header)} fields ({shown!r})",
        )


def _fields(path: Path, line: str) -> list[str]:
    """The fields of one line of ``path`` (a stray carriage return inside it is a ParseError)."""
    try:
        return next(csv.reader([line]), [])
    except csv.Error as e:
        raise ParseError(path, f"not a readable CSV file ({e})") from None


def check_shape(path: Path) -> None:
    """Raise ParseError when ``path`` has a line longer than MAX_LINE_BYTES, or a header wider than
    MAX_COLUMNS, than every one of its first rows, or than its bytes can fill (see the module's
    docstring): the cheap checks that bound what parsing the file can cost. One streaming pass, in
    bounded memory."""
    try:
        with open(path, "rb") as f:
            lines, size = _check_line_lengths(path, f)
            f.seek(0)
            header, widths = _header_and_widths(path, f)
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    if header is None:
        return
    while header and not header[-1].strip():
        header.pop()  # a trailing comma at the end of the header
    cols = len(header)
    if cols > MAX_COLUMNS:
        raise ParseError(path, f"the header has {cols:,} columns (more than {MAX_COLUMNS:,}): not a profiler CSV")
    widest = max(widths, default=cols)
    if cols > widest + 1:
        raise ParseError(path, f"the header has {cols:,} columns but its first rows have at most {widest:,} fields")
    # every field but a row's last ends in a comma: a file whose rows hold the header's fields has at
    # least (columns - 1) bytes per line; far fewer means short rows that pandas would pad with nulls
    if lines * (cols - 1) > 2 * size + cols:
        raise ParseError(path, f"its {lines:,} lines hold far fewer fields than the header's {cols:,} columns")


def _header_and_widths(path: Path, f: io.BufferedReader) -> tuple[list[str] | None, list[int]]:
    """The header's fields and the field counts of up to _SHAPE_ROWS rows after it (a row the csv
    module cannot read ends the count: pandas judges it; a header it cannot read is a ParseError)."""
    reader = csv.reader(io.TextIOWrapper(f, "utf-8", errors="replace", newline=""))
    try:
        header = next(reader, None)
    except csv.Error as e:  # a header name longer than the csv module's limit (an unclosed quote)
        raise ParseError(path, f"not a readable CSV file ({e})") from None
    widths: list[int] = []
    try:
        for row in islice(reader, _SHAPE_ROWS):
            widths.append(len(row))  # (a row is dropped once counted)
    except csv.Error:
        pass
    return header, widths


def _check_line_lengths(path: Path, f: io.BufferedReader) -> tuple[int, int]:
    """Raise ParseError at the first line longer than MAX_LINE_BYTES (read in blocks, never whole);
    else (lines, bytes) of the file."""
    line = 1  # the number of the line being scanned
    run = 0  # its bytes seen so far
    size = 0
    while True:
        block = f.read(_SCAN_BYTES)
        if not block:
            return line - (run == 0), size
        size += len(block)
        ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == _NEWLINE)
        if len(ends):
            lengths = np.diff(ends, prepend=-1) - 1  # each line's bytes within this block
            lengths[0] += run
            over = np.flatnonzero(lengths > MAX_LINE_BYTES)
            if len(over):
                _too_long(path, line + int(over[0]))
            line += len(ends)
            run = len(block) - int(ends[-1]) - 1
        else:
            run += len(block)
        if run > MAX_LINE_BYTES:
            _too_long(path, line)


def _too_long(path: Path, line: int) -> None:
    raise ParseError(path, f"line {line:,} is longer than {MAX_LINE_BYTES // int(units.BYTES_PER_MIB)} MiB: not a profiler CSV")
