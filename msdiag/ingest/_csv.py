"""Reading the profiler's CSV files: the real-world dirt handled once, for every reader.

- timestamps written as strings with a trailing TAB (``1736412474730135.222\\t``);
- spreadsheet-mangled numbers (``1.69512E+15``): parsed, and flagged since precision is lost;
- ``N/A`` and empty cells: null, never 0;
- CRLF line endings and a trailing comma at the end of the header.

:func:`read_cells` splits a small plain file with the csv module (pandas' fixed cost per call is most
of a few hundred rows' read) and gives it to pandas otherwise: the same cells, errors and messages.

Before pandas (or the csv module) parses a file, :func:`check_shape` refuses, at the cost of one streaming pass, a file
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
from typing import BinaryIO, Collection, Iterable, Mapping, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from msdiag import units
from msdiag.errors import ParseError
from msdiag.model import string_array as _string_array

NA_VALUES = ["N/A", "NA", "n/a", "", "-", "None", "null", "NaN", "nan"]
_NA_SET = frozenset(NA_VALUES)
_NAN = float("nan")
_NA_NAN = dict.fromkeys(NA_VALUES, _NAN)  # (.get(text, text): NaN for an NA text, else the text)
_NA_ARROW = pa.array(NA_VALUES, type=pa.large_string())
T = TypeVar("T", pd.DataFrame, "Cells")

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
_CARRIAGE_RETURN = 0x0D
# Files up to this size are read once and, when plain, split by the csv module (read_cells)
FAST_BYTES = 8 << 20
# ... or, from this size on, by pyarrow's CSV reader: its fixed cost per call (~0.3 ms) is more than the
# csv module's whole split of a smaller file (step_trace_time.csv, op_statistic.csv: 0.02-0.05 ms), and it
# splits a 200 KB kernel_details.csv in half the csv module's time, its cells left as Arrow texts that
# the readers convert in Arrow (Cells.floats, Cells.texts) rather than one Python object per cell
ARROW_BYTES = 32 << 10
# The whitespace a number's cell may carry for Arrow's cast (the trailing TAB of timestamps): ASCII only,
# a subset of what Python's float() strips, so a cell Arrow reads is one float() reads alike
_ASCII_SPACE = " \t\r\n\x0b\x0c"
_BOM = b"\xef\xbb\xbf"


def read_csv(path: Path, required: Iterable[str] = (), any_of: Iterable[Iterable[str]] = ()) -> pd.DataFrame:
    """Read a profiler CSV as strings, check its header, and name the file in every error.

    ``required`` columns must all be present; for each group in ``any_of`` at least one column
    must be present (e.g. ``Block Dim`` or ``Block Num``).
    """
    try:
        if path.stat().st_size == 0:
            raise ParseError(path, "the file is empty (0 bytes)")
        check_shape(path)
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    return _checked_header(path, _pandas_frame(path), required, any_of)


def _pandas_frame(path: Path) -> pd.DataFrame:
    """The file parsed by pandas (every cell a string, the NA texts null), its unnamed columns dropped
    and its column names stripped."""
    try:
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
    return df


def _checked_header(path: Path, df: T, required: Iterable[str], any_of: Iterable[Iterable[str]]) -> T:
    """``df`` (a frame or :class:`Cells`) when it has the ``required`` and ``any_of`` columns, else the
    ParseError naming what is missing and what was found."""
    columns = list(df.columns)
    missing = [c for c in required if c not in columns]
    for group in any_of:
        group = list(group)
        if not any(c in columns for c in group):
            missing.append(" or ".join(group))
    if missing:
        found = ", ".join(columns[:12]) + (", ..." if len(columns) > 12 else "")
        raise ParseError(path, f"missing column(s) {', '.join(missing)}; found: {found}")
    return df


class Cells:
    """A CSV's cells by column: per (stripped) column name an object array of n strings, NaN where the
    file writes an NA text (exactly the cells of :func:`read_csv`'s frame, ``to_numpy(dtype=object)``),
    without a frame: the readers convert each column once and build their table from arrays. A column
    given as a tuple of the file's texts becomes its array when first asked for (a reader reads about
    half of kernel_details' columns); a column given as Arrow texts (null where an NA text; pyarrow's
    split, :func:`_arrow_rows`) is converted in Arrow by :meth:`floats`, :meth:`ints`, :meth:`texts` and
    :meth:`quoted_texts`, to the same values as from its object array, and becomes that array only where
    a reader indexes it. A column pyarrow read as numbers (float64, :func:`_arrow_cells`' ``numbers``) gives
    only :meth:`floats` and :meth:`ints`: it has no texts (the others raise TypeError)."""

    def __init__(self, columns: Mapping[str, np.ndarray | tuple[str, ...] | pa.Array], n: int) -> None:
        self.data = dict(columns)
        self.n = n

    @property
    def columns(self) -> list[str]:
        return list(self.data)

    def __len__(self) -> int:
        return self.n

    def __contains__(self, name: object) -> bool:
        return name in self.data

    def __getitem__(self, name: str) -> np.ndarray:
        v = self.data[name]
        if isinstance(v, tuple):
            v = self.data[name] = _cells_of(v)
        elif isinstance(v, pa.Array):
            v = self.data[name] = _cells_of_arrow(_texts_only(v, name))
        return v

    def arrow(self, name: str) -> pa.Array:
        """The column as Arrow texts (large_string, null where the file writes an NA text)."""
        v = self.data[name]
        return _texts_only(v, name) if isinstance(v, pa.Array) else _arrow_strings(self[name])

    def floats(self, name: str, path: Path | None = None) -> np.ndarray:
        """:func:`floats_of` of the column (a column pyarrow read as numbers, :func:`_arrow_cells`: its values)."""
        v = self.data[name]
        if isinstance(v, pa.Array):
            out = v.to_numpy(zero_copy_only=False) if pa.types.is_float64(v.type) else _arrow_floats(v)
            if out is not None:
                return out
        return floats_of(self[name], path, name)

    def ints(
        self, name: str, path: Path | None = None, notes: list[str] | None = None
    ) -> pd.api.extensions.ExtensionArray:
        """The column as Int64 (:func:`to_int`'s figures; a number beyond int64 null, with a note in ``notes``)."""
        return _ints_of_floats(self.floats(name, path), path, name, notes)

    def texts(self, name: str) -> pd.api.extensions.ExtensionArray:
        """The column's texts, stripped, an NA text null (:func:`_texts`)."""
        return _texts(self.arrow(name))

    def quoted_texts(self, name: str) -> pd.api.extensions.ExtensionArray:
        """The column's shapes without their quotes (:func:`_quoted_texts`)."""
        return _quoted_texts(self.arrow(name))

    def take(self, keep: np.ndarray) -> Cells:
        """The rows where ``keep`` (booleans) is True."""
        mask = pa.array(keep, type=pa.bool_())
        return Cells(
            {c: v.filter(mask) if isinstance(v, pa.Array) else self[c][keep] for c, v in self.data.items()},
            int(np.count_nonzero(keep)),
        )


def _texts_only(v: pa.Array, name: str) -> pa.Array:
    """``v``, a column read as texts; a TypeError for one pyarrow read as numbers (its texts are not kept: a reader
    that asks for them is given up by its bulk read, ascend_csv.read_many, and reads each file alone)."""
    if not pa.types.is_large_string(v.type):
        raise TypeError(f"column '{name}' was read as numbers, not texts")
    return v


def _cells_of(texts: tuple[str, ...]) -> np.ndarray:
    """An object array of a column's texts, NaN for the NA texts (pandas' exact matching)."""
    arr = np.empty(len(texts), dtype=object)
    arr[:] = texts if _NA_SET.isdisjoint(texts) else list(map(_NA_NAN.get, texts, texts))
    return arr


def _cells_of_arrow(texts: pa.Array) -> np.ndarray:
    """:func:`_cells_of` of Arrow texts whose NA texts are null."""
    arr = texts.to_numpy(zero_copy_only=False)
    if texts.null_count:
        arr[np.asarray(texts.is_null())] = _NAN
    return arr


def _arrow_floats(texts: pa.Array) -> np.ndarray | None:
    """Arrow texts (null where NA) as float64, NaN where null; None when a cell is not a number Arrow
    reads (the caller then reads it as :func:`floats_of` does) or reads as NaN: Arrow takes
    ``nan(123)``, Python's float() does not."""
    try:
        f = pc.cast(pc.utf8_trim(texts, characters=_ASCII_SPACE), pa.float64())
    except pa.ArrowException:
        return None
    out = f.to_numpy(zero_copy_only=False)
    if int(np.count_nonzero(np.isnan(out))) != f.null_count:
        return None
    return out


def read_cells(path: Path, required: Iterable[str] = (), any_of: Iterable[Iterable[str]] = ()) -> Cells:
    """:func:`read_csv`'s cells, checks and errors, then :func:`check_last_row`'s, as :class:`Cells`.

    A file of at most :data:`FAST_BYTES` is read once: its shape is checked on the bytes, and when it
    is plain (see :func:`_plain_rows`) the csv module splits it (pyarrow's reader from
    :data:`ARROW_BYTES` on, where it splits alike: :func:`_arrow_rows`), since for the few hundred rows of
    most profiler files pandas' fixed cost per call is most of the read. Anything else is parsed by pandas
    as :func:`read_csv` does: the same cells, errors and messages either way.
    """
    try:
        size = path.stat().st_size
        if size == 0:
            raise ParseError(path, "the file is empty (0 bytes)")
        data = None
        if size <= FAST_BYTES:
            with open(path, "rb") as f:
                data = read_bounded(f, FAST_BYTES, size)
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    if data is not None and len(data) <= FAST_BYTES:
        lines, size = _checked_lines(path, data)
        plain = _arrow_rows(data, lines) if len(data) >= ARROW_BYTES else None
        if plain is None:
            plain = _plain_rows(data)
        if plain is not None:  # (every row as wide as the header: the last one is not cut)
            cells, header = plain
            _judge_shape(path, header, [len(header)] * min(len(cells), _SHAPE_ROWS), lines, size)
            return _checked_header(path, cells, required, any_of)
        check_shape(path, io.BytesIO(data))
    else:
        check_shape(path)
    df = _checked_header(path, _pandas_frame(path), required, any_of)
    check_last_row(path)
    return Cells({c: df[c].to_numpy(dtype=object) for c in df.columns}, len(df))


def read_bounded(f: BinaryIO, limit: int, size: int) -> bytes:
    """``f.read(limit + 1)``'s bytes (at most ``limit`` + 1: more says the file is over the limit), read into a buffer
    of the ``size`` the file was found to have, not of the limit: ``read(n)`` allocates n bytes first, and 8 MiB
    mapped and unmapped for each 50-200 KB profiler file cost ~70 us a file (0.1 ms against 0.03 ms). A file grown
    since ``size`` was taken is read on, as far as the limit allows."""
    want = min(size, limit) + 1
    data = f.read(want)
    if len(data) == want and want <= limit:  # (grown since: the rest, up to limit + 1 bytes in all)
        data += f.read(limit + 1 - want)
    return data


def read_cells_many(
    paths: list[Path], required: Iterable[str] = (), any_of: Iterable[Iterable[str]] = (),
    columns: Collection[str] | None = None, numbers: Collection[str] = (),
) -> tuple[Cells, list[int]] | None:
    """The cells of several files of one header (each file's rows after the one before's, as one :class:`Cells`) and
    each file's rows, split by one call of pyarrow's reader; None where any file is not one :func:`read_cells` would
    read with no error or note and split alike by itself: each file is then read alone, with its own checks and
    errors. A file must pass read_cells' shape checks, hold exactly the first file's header line, and be one
    :func:`_arrow_rows` splits (:func:`_arrow_plain`); the rows pyarrow finds must be the files' lines less their
    headers, so that no row runs from one file into the next. ``columns``: the names the caller reads (None: all);
    only those of them the header holds are converted and given (every row is still split and its width checked:
    a wide file's other columns, half of kernel_details', cost nothing more). ``numbers``: names the caller reads only
    as numbers (:meth:`Cells.floats`, :meth:`Cells.ints`): pyarrow reads them as float64 (:func:`_arrow_cells`)."""
    header: bytes | None = None
    fields: tuple[list[str], int] | None = None  # the header's names and width (_arrow_header), judged once
    bodies: list[bytes | memoryview] = []
    counts: list[int] = []
    shapes: list[tuple[Path, int, int]] = []
    for path in paths:
        try:
            size = path.stat().st_size
            if size > FAST_BYTES:
                return None
            with open(path, "rb") as f:
                data = read_bounded(f, FAST_BYTES, size)
            if not data or len(data) > FAST_BYTES:
                return None
            lines, size = _checked_lines(path, data)
        except (OSError, ParseError):
            return None
        end = data.find(b"\n")
        first = data if end < 0 else data[:end]
        if header is None:
            fields = _arrow_header(first)
            if fields is None:
                return None
            header = first
        if first != header or not _arrow_plain(data):
            return None
        if end >= 0 and end + 1 < len(data):  # the rows after the header, not copied until joined, ending in a newline
            bodies.append(memoryview(data)[end + 1 :])
            if not data.endswith(b"\n"):
                bodies.append(b"\n")
        counts.append(lines - 1)
        shapes.append((path, lines, size))
    if header is None or fields is None:
        return None
    names, width = fields
    split = header.decode("utf-8").removesuffix("\r").split(",")
    try:
        for path, lines, size in shapes:  # read_cells' judgement of each file (its rows all as wide as the header)
            _judge_shape(path, split, [width] * min(lines - 1, _SHAPE_ROWS), lines, size)
        cells = _arrow_cells(b"".join([header, b"\n", *bodies]), names, width, columns, numbers)  # (one copy)
        if cells is None or cells.n != sum(counts):
            return None
        return _checked_header(paths[0], cells, required, any_of), counts
    except ParseError:
        return None


def _plain_rows(data: bytes) -> tuple[Cells, list[str]] | None:
    """The cells and the header's fields of a CSV the csv module splits as pandas does, or None when the file has anything
    on which the two could differ (pandas then reads it): a byte-order mark, a NUL, bytes that are
    not UTF-8, a carriage return not followed by a line feed, a field spanning lines, a quote left
    open or followed by more text, a blank line, a row not as wide as the header, a header narrower than two names or with a blank, duplicate or
    ``Unnamed:`` name (pandas renames those). An empty last header name (a trailing comma) drops that
    column, as :func:`read_csv` does."""
    if b"\x00" in data or data.startswith(b"\xef\xbb\xbf"):
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.count("\r") != text.count("\r\n"):
        return None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        rows = list(reader)
    except csv.Error:  # (a field over the csv module's size limit, an unclosed quote, text after a closing quote)
        return None
    if not rows or reader.line_num != len(rows):
        return None
    header = rows[0]
    names = _plain_names(header)
    body = rows[1:]
    if names is None or not set(map(len, body)) <= {len(header)}:
        return None
    n = len(body)
    return Cells({name.strip(): col for name, col in zip(names, zip(*body) if n else [() for _ in names])}, n), header


def _plain_names(header: list[str]) -> list[str] | None:
    """The column names of a plain file's header (its fields less an empty last one: a trailing comma), or
    None where pandas would name the columns otherwise: fewer than two fields, a duplicate (pandas renames it
    a.1), a blank or ``Unnamed:`` name."""
    if len(header) < 2 or len(set(header)) != len(header):
        return None
    names = header[:-1] if header[-1] == "" else header
    if any(not h.strip() or h.startswith("Unnamed:") for h in names):
        return None
    return names


def _arrow_rows(data: bytes, lines: int) -> tuple[Cells, list[str]] | None:
    """:func:`_plain_rows`' answer from pyarrow's CSV reader, the cells left as Arrow texts (null where
    an NA text), or None wherever the csv module's split could differ (the caller then splits it so).

    Besides _plain_rows' refusals (a byte-order mark, a NUL, bytes that are not UTF-8, a lone carriage
    return, a header :func:`_plain_names` refuses), the header must hold no quote (it is split on commas
    here) and at most :data:`MAX_COLUMNS` names, every row must be as wide as the header (pyarrow refuses
    others) and the rows pyarrow found must be the file's lines less the header: a blank line (which
    pyarrow skips) or a quoted field spanning lines (which it joins, to the end of the file when the
    quote is never closed) gives fewer; a quote left open on the last line is refused.
    Where the csv module refuses a row that pyarrow splits (text after a closing quote: ``"a"b``),
    pandas reads the file and splits it as pyarrow does (``ab``)."""
    if not _arrow_plain(data):
        return None
    end = data.find(b"\n")
    first = data if end < 0 else data[:end]
    fields = _arrow_header(first)
    if fields is None:
        return None
    names, width = fields
    cells = _arrow_cells(data, names, width)
    if cells is None or cells.n != lines - 1:
        return None
    return cells, first.decode("utf-8").removesuffix("\r").split(",")


def _arrow_plain(data: bytes) -> bool:
    """Whether a file's bytes are ones :func:`_arrow_rows` may split: no NUL, no byte-order mark, a carriage
    return only before a line feed, UTF-8, a header pyarrow splits as the csv module does (:func:`_arrow_header`),
    no quote left open on the last line (pyarrow ends such a field at the end of the file, pandas refuses it)."""
    if b"\x00" in data or data.startswith(_BOM) or lone_carriage_return(data):
        return False
    if not data.isascii():  # (ASCII is UTF-8: judged without a decoded copy of the file, ~17 us against ~68 us a rank)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
    end = data.find(b"\n")
    if _arrow_header(data if end < 0 else data[:end]) is None:
        return False
    try:
        next(csv.reader([_last_line(data).decode("utf-8")], strict=True), None)
    except csv.Error:
        return False
    return True


def _last_line(data: bytes) -> bytes:
    """``data.rstrip(b"\r\n").rpartition(b"\n")[2]``, the last line that is not empty, without copying the rest of
    the file twice (a 200 KB kernel_details.csv: two copies, ~50 us)."""
    end = len(data)
    while end and data[end - 1] in b"\r\n":
        end -= 1
    return data[data.rfind(b"\n", 0, end) + 1 : end]


def _arrow_header(first: bytes) -> tuple[list[str], int] | None:
    """(the column names, the fields) of a header line pyarrow may split: no quote in it (it is split on commas
    here), at most :data:`MAX_COLUMNS` fields (a header too wide is judged by the caller), names
    :func:`_plain_names` takes; else None."""
    if b'"' in first:
        return None
    try:
        header = first.decode("utf-8").removesuffix("\r").split(",")
    except UnicodeDecodeError:
        return None
    names = _plain_names(header) if len(header) <= MAX_COLUMNS else None
    return None if names is None else (names, len(header))


def _arrow_cells(data: bytes, names: list[str], width: int, columns: Collection[str] | None = None,
                 numbers: Collection[str] = ()) -> Cells | None:
    """pyarrow's split of a file's rows after its header line, every column as Arrow text (null where an NA text),
    the columns named ``names`` (stripped; with ``columns``, only those named there); None when pyarrow refuses it (a
    row of another width: each row is split whole whatever columns are converted).

    ``numbers``: columns read as float64 instead (null where an NA text), the values :func:`_arrow_floats` gives
    from their texts (pyarrow's parse of a number, spaces and tabs around it trimmed), without the texts made first:
    a kernel_details.csv's 18 numeric columns of 32 bench ranks, 22.8 -> 17.8 ms. Where one cell of them is no
    number pyarrow reads, or reads as NaN (``nan(1)``: Python's float() refuses it), every column is read as texts
    again, and :meth:`Cells.floats` judges them as before."""
    keys = [str(i) for i in range(width)]
    kept = [(i, name.strip()) for i, name in enumerate(names) if columns is None or name.strip() in columns]
    typed = {keys[i] for i, name in kept if name in numbers}

    def read(typed: set[str]) -> pa.Table:
        return pcsv.read_csv(
            pa.py_buffer(data),
            read_options=pcsv.ReadOptions(use_threads=False, skip_rows=1, column_names=keys),
            convert_options=pcsv.ConvertOptions(
                column_types={k: pa.float64() if k in typed else pa.large_string() for k in keys},
                null_values=NA_VALUES,
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
                include_columns=None if columns is None else [keys[i] for i, _ in kept],
            ),
        )

    table = None
    if typed:
        try:
            table = read(typed)
        except pa.ArrowException:  # (a cell that is no number: the texts, below)
            pass
        else:
            if any(pc.sum(pc.is_nan(table.column(k))).as_py() for k in typed):
                table = None  # (an NA text is null, not NaN: a NaN was read from another text)
    if table is None:
        try:
            table = read(set())
        except pa.ArrowException:  # anything pyarrow refuses: the csv module or pandas reads it, with their errors
            return None
    return Cells({name: table.column(k).combine_chunks() for k, (_, name) in enumerate(kept)}, table.num_rows)


def to_float(s: pd.Series, path: Path | None = None, column: str = "") -> pd.Series:
    """Numbers written as text (trailing tabs, blanks, N/A) -> float64, null where absent.

    A cell that is present but not a number is an error naming the file and column.
    """
    if s.dtype.kind in "fiu":
        return s.astype("float64")
    return pd.Series(floats_of(s.to_numpy(dtype=object), path, column), index=s.index, dtype="float64")


def floats_of(raw: np.ndarray, path: Path | None = None, column: str = "") -> np.ndarray:
    """:func:`to_float` of an object array of cells (str, NaN / None where null)."""
    try:
        # fast path, in C: every cell a number (float() takes the trailing TAB as it is)
        return raw.astype("float64")
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
    return out


def to_int(s: pd.Series, path: Path | None = None, column: str = "", notes: list[str] | None = None) -> pd.Series:
    """Integers written as text -> nullable Int64 (null where absent).

    A number that no int64 holds (``1e308``, ``inf``) is no id or count a profiler writes: it becomes
    null rather than stopping the read, and when ``notes`` is given a note says how many, where.
    """
    f = to_float(s, path, column)
    return pd.Series(_ints_of_floats(f.to_numpy(), path, column, notes), index=f.index, name=f.name)


def _ints_of_floats(
    f: np.ndarray, path: Path | None, column: str, notes: list[str] | None
) -> pd.api.extensions.ExtensionArray:
    """:func:`to_int` of a column's floats (:func:`floats_of`): an Int64 array."""
    beyond = ~np.isnan(f) & ~(np.abs(f) < _INT64_BOUND)
    if beyond.any():
        if notes is not None:
            notes.append(_beyond_note(float(f[beyond][0]), int(beyond.sum()), path, column))
        f = np.where(beyond, np.nan, f)
    return pd.array(np.round(f), dtype="Int64")


def _beyond_note(first: float, count: int, path: Path | None, column: str) -> str:
    shown = f"{first:.3g}" if np.isfinite(first) else "an infinite number"
    where = f"{path.name}: " if path is not None else ""
    return f"{where}{count} '{column}' value(s) beyond the int64 range (first: {shown}) read as null"


def _quoted_texts(t: pa.Array) -> pd.api.extensions.ExtensionArray:
    """Shapes are written as '"32,3,224,224"' (quoted twice in the CSV): the text inside, stripped, as a
    "string" array."""
    t = pc.utf8_trim_whitespace(t)
    return _string_array(pc.utf8_trim_whitespace(pc.utf8_trim(t, characters='"')))


def _texts(t: pa.Array) -> pd.api.extensions.ExtensionArray:
    """Cells as text, stripped; a cell that is an NA text once stripped (`` N/A ``: the parser's own NA
    matching takes exact cells only) is null. A "string" array; the NA mask is built only when one
    Arrow pass finds such a cell."""
    t = pc.utf8_trim_whitespace(t)
    na = pc.is_in(t, value_set=_NA_ARROW)
    if pc.any(na).as_py():
        t = pc.if_else(na, pa.scalar(None, pa.large_string()), t)
    return _string_array(t)


def either_text(mask: np.ndarray, yes: str, no: str) -> pd.api.extensions.ExtensionArray:
    """Per row ``yes`` where ``mask`` (booleans) else ``no``, as a "string" array (what ``pd.array(np.where(mask, yes,
    no).astype(object), dtype="string")`` gives), chosen by Arrow: a task's 18,000 kernels 2.4 -> 0.2 ms."""
    return _string_array(pc.if_else(pa.array(mask, type=pa.bool_()), pa.scalar(yes, pa.large_string()), pa.scalar(no, pa.large_string())))


def _arrow_strings(raw: np.ndarray) -> pa.Array:
    return pa.array(raw, type=pa.large_string(), from_pandas=True)


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


def check_shape(path: Path, content: io.BytesIO | None = None) -> None:
    """Raise ParseError when ``path`` has a line longer than MAX_LINE_BYTES, or a header wider than
    MAX_COLUMNS, than every one of its first rows, or than its bytes can fill (see the module's
    docstring): the cheap checks that bound what parsing the file can cost. One streaming pass, in
    bounded memory; ``content``: the file's bytes when they are already read."""
    try:
        with open(path, "rb") if content is None else content as f:
            lines, size = _check_line_lengths(path, f)
            f.seek(0)
            header, widths = _header_and_widths(path, f)
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    _judge_shape(path, header, widths, lines, size)


def _judge_shape(path: Path, header: list[str] | None, widths: list[int], lines: int, size: int) -> None:
    """check_shape's verdict on the header, the field counts of the rows after it, and the file's lines
    and bytes."""
    if header is None:
        return
    header = list(header)
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


def _header_and_widths(path: Path, f: io.BufferedReader | io.BytesIO) -> tuple[list[str] | None, list[int]]:
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


def _checked_lines(path: Path, data: bytes) -> tuple[int, int]:
    """:func:`_check_line_lengths` of a file read whole: where the whole file is no longer than MAX_LINE_BYTES no line
    can be, and its lines are its newlines, plus one for a last line without one (one count, no scan in blocks)."""
    if len(data) > MAX_LINE_BYTES:
        return _check_line_lengths(path, io.BytesIO(data))
    return newlines(data) + (1 if data and not data.endswith(b"\n") else 0), len(data)


def newlines(data: bytes) -> int:
    """``data.count(b"\n")``, counted by numpy (bytes.count of a byte that occurs on every line: ~33 us for an 80 KB
    memory_record.csv; this, ~9 us)."""
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE))


def lone_carriage_return(data: bytes) -> bool:
    """``data.count(b"\r") != data.count(b"\r\n")``: a carriage return not followed by a line feed (a CRLF file's two
    counts by bytes.count: ~0.12 ms for an 80 KB memory_record.csv; by numpy, ~0.025 ms)."""
    if b"\r" not in data:
        return False
    a = np.frombuffer(data, dtype=np.uint8)
    cr = a == _CARRIAGE_RETURN
    return int(np.count_nonzero(cr)) != int(np.count_nonzero(cr[:-1] & (a[1:] == _NEWLINE)))


def _check_line_lengths(path: Path, f: io.BufferedReader | io.BytesIO) -> tuple[int, int]:
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
