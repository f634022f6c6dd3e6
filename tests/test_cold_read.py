"""The cold read's cheaper paths give the cells and dtypes of the general ones (real corpus files).

- ``model.Table.frame`` builds a frame from Series that all stand on 0..n-1 from their arrays; any
  other input is aligned by pandas first. Both must give the same frame.
- ``ascend_csv._strs`` masks NA texts (written with spaces around them, which the CSV parser's exact
  NA matching does not catch) only when a cell holds one.
- ``_csv.read_cells`` splits a plain file with the csv module, and gives pandas' cells (``read_csv``)
  for it; a file that is not plain goes to pandas, with its cells and errors.
- From ``_csv.ARROW_BYTES`` on, pyarrow's CSV reader splits it (``_arrow_rows``): the csv module's
  cells, and the same numbers and texts from its Arrow columns (``Cells.floats`` / ``texts`` /
  ``quoted_texts`` / ``ints``) as from the object arrays.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from msdiag import model
from msdiag.errors import ParseError
from msdiag.ingest import _csv
from msdiag.ingest import ascend_csv as ac
from msdiag.ingest._csv import NA_VALUES, read_cells, read_csv

KERNELS = [
    "ascend/torchnpu-2rank-level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv",
    "ascend/torchnpu-2rank-p2p-2024/test_rank_0/ASCEND_PROFILER_OUTPUT/kernel_details.csv",
    "ascend/single-files/kernel_details_arith_fops.csv",
]


@pytest.mark.parametrize("rel", KERNELS)
def test_frame_from_columns_equals_aligned_frame(corpus: Path, rel: str) -> None:
    k = ac.read_kernel_details(corpus / rel, 3)
    columns = model.KERNELS.frame({c: k[c] for c in k.columns})  # Series on 0..n-1: the arrays path
    # the same rows on another index: pandas aligns them, then the frame is renumbered 0..n-1
    aligned = model.KERNELS.frame(k.set_axis(pd.RangeIndex(7, 7 + len(k))))
    pd.testing.assert_frame_equal(columns, aligned)
    pd.testing.assert_frame_equal(columns, k)
    # a few columns: the others are nulls of the table's dtypes either way
    few = ["rank", "name", "dur_us"]
    pd.testing.assert_frame_equal(model.KERNELS.frame({c: k[c] for c in few}), model.KERNELS.frame(k[few]))
    assert list(model.KERNELS.frame({c: k[c] for c in few}).dtypes.astype(str)) == list(model.KERNELS.columns.values())


def test_frame_aligns_series_on_different_indexes() -> None:
    # step stands on rows 0, 1 and total_us on row 1 only: pandas aligns them (by hand: two rows, the
    # first without a total), as before the arrays path existed
    f = model.STEPS.frame({"step": pd.Series([1, 2]), "total_us": pd.Series([3.0], index=[1])})
    assert f["step"].tolist() == [1, 2]
    assert pd.isna(f["total_us"].iloc[0]) and f["total_us"].iloc[1] == 3.0
    assert str(f["step"].dtype) == model.INT


def _old_strs(s: pd.Series) -> pd.Series:
    """The formulation before the cheaper path: strip, then mask every NA text."""
    t = s.astype("string").str.strip()
    return t.mask(t.isin(NA_VALUES))


@pytest.mark.parametrize("rel", KERNELS)
def test_text_columns_as_before(corpus: Path, rel: str) -> None:
    df = read_csv(corpus / rel)
    cells = read_cells(corpus / rel)
    for c in df.columns:
        pd.testing.assert_series_equal(pd.Series(ac._strs(cells, (c,))), _old_strs(df[c]), check_names=False)


def test_text_na_with_spaces_is_null(corpus: Path, tmp_path: Path) -> None:
    src = corpus / KERNELS[0]
    with open(src, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    col = rows[0].index("Type")
    rows[1][col] = " N/A "  # the parser takes exact cells only: this one is NA once stripped
    out = tmp_path / "kernel_details.csv"
    with open(out, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    got = pd.Series(ac._strs(read_cells(out), ("Type",)))
    assert pd.isna(got.iloc[0])
    assert got.iloc[1:].tolist() == [r[col].strip() if r[col].strip() not in NA_VALUES else pd.NA for r in rows[2:]]
    pd.testing.assert_series_equal(got, _old_strs(read_csv(out)["Type"]), check_names=False)


@pytest.mark.parametrize("n", [0, 1, 1005])
def test_constant_columns_as_lists_give(n: int) -> None:
    # the rank and source columns from a numpy fill equal those built from a list of n values
    pd.testing.assert_series_equal(pd.Series(ac._rank(n, 5)), pd.Series([5] * n, dtype=model.INT))
    pd.testing.assert_series_equal(pd.Series(ac._const(n, "memory_record")), pd.Series(["memory_record"] * n, dtype=model.STR))


def _same_cells(got: _csv.Cells, df: pd.DataFrame) -> None:
    """The cells of read_cells are those of read_csv's frame: names, and each column's objects (NaN
    where null)."""
    assert got.columns == list(df.columns) and len(got) == len(df)
    for c in df.columns:
        want = df[c].to_numpy(dtype=object)
        assert [None if isinstance(v, float) else v for v in got[c]] == [None if isinstance(v, float) else v for v in want]


def test_plain_files_split_as_pandas_does(corpus: Path) -> None:
    # every corpus CSV the csv module splits (most of them: the plain ones) gives pandas' cells
    plain = 0
    for path in sorted(corpus.rglob("*.csv")):
        fast = _csv._plain_rows(path.read_bytes())
        if fast is not None:
            plain += 1
            _same_cells(fast[0], read_csv(path))
            assert fast[1] == next(csv.reader(path.open(newline="", encoding="utf-8")))  # the header's fields
    assert plain >= 40


def test_plain_file_cells_by_hand(tmp_path: Path) -> None:
    # CRLF lines, a trailing comma on every line (the header's empty last name drops that column), a
    # timestamp with its trailing TAB, a spreadsheet's 1.69512E+15, N/A and an empty cell (null, as
    # pandas' exact NA matching makes them), " N/A " (kept as written here: Cells.texts nulls it once
    # stripped), a quoted cell holding a comma and doubled quotes
    body = (
        'Name,Start Time(us),Shape,\r\n'
        'a,1736408883709305.078\t,"""32,3""",\r\n'
        'b,1.69512E+15, N/A ,\r\n'
        'N/A,,"x, ""y""",\r\n'
    )
    path = tmp_path / "k.csv"
    path.write_bytes(body.encode())
    fast = _csv._plain_rows(path.read_bytes())
    assert fast is not None  # the csv module splits it
    cells = read_cells(path)
    _same_cells(cells, read_csv(path))
    assert cells.columns == ["Name", "Start Time(us)", "Shape"] and len(cells) == 3
    # by hand from the three rows above
    assert list(cells["Name"][:2]) == ["a", "b"] and pd.isna(cells["Name"][2])
    assert _csv.floats_of(cells["Start Time(us)"], path, "Start Time(us)")[0] == 1736408883709305.078
    assert _csv.floats_of(cells["Start Time(us)"], path, "Start Time(us)")[1] == 1.69512e15
    assert pd.isna(cells["Start Time(us)"][2])
    assert list(cells["Shape"]) == ['"32,3"', " N/A ", 'x, "y"']
    assert list(cells.texts("Shape")) == ['"32,3"', pd.NA, 'x, "y"']
    assert list(cells.quoted_texts("Shape")) == ["32,3", "N/A", 'x, "y']


@pytest.mark.parametrize("arrow_from", [_csv.ARROW_BYTES, 0])
@pytest.mark.parametrize(
    "body",
    [
        b'a,b\n1,"2',  # a quote left open at the end (pandas: EOF inside string)
        b'a,b\n1,"2\n',  # ... and before the last line's end
        b'a,b\nx"y,"2\n',  # ... after a quote inside a field (a plain character there)
        b'a,b\n1,"2\n3,4\n',  # a quote left open on a line before the last
        b'a,"b\n1,2\n',  # a quote left open in the header, spanning the lines
        b'a,b\n1,"2"x\n3,4\n',  # text after a closing quote (pandas keeps it: 2x)
        b"a,b\n1,2\n\n3,4\n",  # a blank line (pandas skips it)
        b"a,b\n1,2\n   \n3,4\n",  # a line of spaces
        b"\xef\xbb\xbfa,b\n1,2\n",  # a byte-order mark
        b"a,b\n1,\xff2\n",  # not UTF-8 (pandas replaces the byte)
        b"a,b\n1,2\r3,4\n",  # a lone carriage return ends a line for pandas
        b'a,b\n1,"x\ny"\n',  # a field spanning lines
        b"a,b\n1,2,3\n",  # a row wider than the header
        b"a,b,c\n1,2\n",  # a row narrower than the header
        b"a,a\n1,2\n",  # a duplicate name (pandas renames it a.1)
        b"a,,c\n1,2,3\n",  # an empty name (Unnamed: 1, dropped)
        b"a\n1\n",  # one column
        b"a,b\n",  # the header only
    ],
)
def test_files_not_plain_read_as_pandas_does(
    tmp_path: Path, body: bytes, arrow_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each of these the csv module could split otherwise than pandas: pandas reads it (its cells or
    # its error, or check_last_row's), but for the header-only file, which the csv module splits as pandas does;
    # with arrow_from 0 pyarrow's reader is tried first on these small files: it gives pandas' cells or
    # leaves the file to the others (text after a closing quote it splits as pandas does: 2x)
    monkeypatch.setattr(_csv, "ARROW_BYTES", arrow_from)
    path = tmp_path / "f.csv"
    path.write_bytes(body)
    if body != b"a,b\n":
        assert _csv._plain_rows(body) is None
    try:
        want = read_csv(path)
        _csv.check_last_row(path)  # (read_cells checks the last row too)
    except ParseError as e:
        with pytest.raises(ParseError) as got:
            read_cells(path)
        assert str(got.value) == str(e)
        return
    _same_cells(read_cells(path), want)


def _cells_equal(a: _csv.Cells, b: _csv.Cells) -> None:
    """The same columns of the same cells (NaN where null), and the same conversions of each."""
    assert a.columns == b.columns and len(a) == len(b)
    for c in a.columns:
        assert [None if isinstance(v, float) else v for v in a[c]] == [None if isinstance(v, float) else v for v in b[c]]
        assert all(type(x) is type(y) for x, y in zip(a[c], b[c]))
        try:
            want = _csv.floats_of(b[c], None, c)
        except ParseError:
            want = None
        if want is None:  # a text column: Arrow's cast refuses a cell, the object path reads it
            assert _csv._arrow_floats(a.arrow(c)) is None
        else:
            assert a.floats(c).tobytes() == want.tobytes()  # the same bits, NaN where null
        pd.testing.assert_extension_array_equal(a.texts(c), b.texts(c))  # (b: object cells)
        pd.testing.assert_extension_array_equal(a.quoted_texts(c), b.quoted_texts(c))


def test_arrow_split_as_csv_module_does(corpus: Path) -> None:
    # every corpus CSV (up to FAST_BYTES): pyarrow's split gives the csv module's cells and the same
    # conversions, or neither splits it (both leave it to pandas)
    split = 0
    for path in sorted(corpus.rglob("*.csv")):
        data = path.read_bytes()
        if len(data) > _csv.FAST_BYTES:
            continue
        lines, _ = _csv._check_line_lengths(path, io.BytesIO(data))
        arrow, plain = _csv._arrow_rows(data, lines), _csv._plain_rows(data)
        assert (arrow is None) == (plain is None), path
        if arrow is not None and plain is not None:
            split += 1
            assert arrow[1] == plain[1]  # the header's fields
            assert all(isinstance(v, pa.Array) for v in arrow[0].data.values())
            _cells_equal(arrow[0], plain[0])
    assert split >= 40


def test_large_files_split_by_arrow(corpus: Path) -> None:
    # every plain corpus CSV from ARROW_BYTES on (kernel_details.csv, memory_record.csv, ...: 32 KB to 8 MB)
    # reaches the readers as Arrow texts, the cells and conversions of the csv module's split
    large = 0
    for path in sorted(corpus.rglob("*.csv")):
        size = path.stat().st_size
        plain = _csv._plain_rows(path.read_bytes()) if _csv.ARROW_BYTES <= size <= _csv.FAST_BYTES else None
        if plain is None:
            continue
        large += 1
        cells = read_cells(path)
        assert all(isinstance(v, pa.Array) for v in cells.data.values()), path
        _cells_equal(cells, plain[0])
    assert large >= 5


def test_arrow_cells_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # test_plain_file_cells_by_hand's file, split by pyarrow: the same cells and figures
    monkeypatch.setattr(_csv, "ARROW_BYTES", 0)
    body = (
        'Name,Start Time(us),Shape,Count,\r\n'
        'a,1736408883709305.078\t,"""32,3""",7,\r\n'
        'b,1.69512E+15, N/A ,1e300,\r\n'
        'N/A,,"x, ""y""",,\r\n'
    )
    path = tmp_path / "k.csv"
    path.write_bytes(body.encode())
    cells = read_cells(path)
    assert isinstance(cells.data["Name"], pa.Array)  # pyarrow split it
    _same_cells(cells, read_csv(path))
    assert cells.columns == ["Name", "Start Time(us)", "Shape", "Count"] and len(cells) == 4 - 1
    t = cells.floats("Start Time(us)", path)
    assert t[0] == 1736408883709305.078 and t[1] == 1.69512e15 and pd.isna(t[2])
    assert list(cells.texts("Shape")) == ['"32,3"', pd.NA, 'x, "y"']
    assert list(cells.quoted_texts("Shape")) == ["32,3", "N/A", 'x, "y']
    notes: list[str] = []
    assert list(cells.ints("Count", path, notes)) == [7, pd.NA, pd.NA]  # 1e300: beyond int64, a note
    assert notes == ["k.csv: 1 'Count' value(s) beyond the int64 range (first: 1e+300) read as null"]
    kept = cells.take(np.array([True, False, True]))
    assert list(kept.texts("Name")) == ["a", pd.NA] and len(kept) == 2


@pytest.mark.parametrize(
    "cell,want",
    [
        ("1_000", 1000.0),  # Python's float() reads it, Arrow's cast does not: read as float() does
        ("\u0661", 1.0),  # an Arabic-Indic digit: the same
        ("nan(123)", None),  # Arrow's cast reads NaN, float() refuses it: the non-number error
        ("12 monkeys", None),
    ],
)
def test_arrow_numbers_read_as_float_does(tmp_path: Path, cell: str, want: float | None) -> None:
    path = tmp_path / "k.csv"
    path.write_text(f"Name,Size\na,{cell}\nb,2\n", encoding="utf-8")
    lines, _ = _csv._check_line_lengths(path, io.BytesIO(path.read_bytes()))
    split = _csv._arrow_rows(path.read_bytes(), lines)
    assert split is not None
    cells = split[0]
    if want is None:
        with pytest.raises(ParseError, match=r"column 'Size' holds a non-number .* in row 2"):
            cells.floats("Size", path)
    else:
        assert cells.floats("Size", path).tolist() == [want, 2.0]


@pytest.mark.parametrize(
    "steps,want",
    [
        (["3", "4"], [3, 4]),  # every Step in digits: every row kept without judging the texts
        (["3", "", "Total"], [3, None]),  # a blank Step is a row (null step), a text one a summary row
        ([" 5 ", "N/A", "6"], [5, None, 6]),  # spaces and N/A: judged as before, every row kept
    ],
)
def test_step_rows_kept(tmp_path: Path, steps: list[str], want: list[int | None]) -> None:
    # by hand: one row per Step above, Computing 1, Communication(Not Overlapped) 2, Free 4 -> total 7
    header = "Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble\n"
    path = tmp_path / "step_trace_time.csv"
    path.write_text(header + "".join(f"{s},1,2,0,2,4,7,0\n" for s in steps))
    got = ac.read_step_trace_time(path, 0)
    assert [None if pd.isna(v) else int(v) for v in got["step"]] == want
    assert got["total_us"].tolist() == [7.0] * len(want)


@pytest.mark.parametrize("n", [0, 1, 34_000])
def test_a_constant_text_column_is_the_object_arrays(n: int) -> None:
    # model.const_texts repeats the text in Arrow; the readers' source and kind columns were built from n Python
    # objects: the same values, dtype and storage (Arrow under pandas 3, Python objects under pandas 2)
    want = pd.array(np.full(n, "memory_record", dtype=object), dtype=model.STR)
    got = model.const_texts(n, "memory_record")
    assert type(got) is type(want) and got.dtype == want.dtype and pa.array(got).type == pa.array(want).type
    pd.testing.assert_extension_array_equal(got, want)


@pytest.mark.parametrize("mask", [[], [True], [False], [True, False, False, True], [False] * 1000 + [True]])
def test_a_two_valued_text_column_is_the_object_arrays(mask: list[bool]) -> None:
    # _csv.either_text (a kernel's kind: communication or compute) chosen in Arrow, as np.where's object array gave it
    m = np.array(mask, dtype=bool)
    want = pd.array(np.where(m, "communication", "compute").astype(object), dtype=model.STR)
    got = _csv.either_text(m, "communication", "compute")
    assert type(got) is type(want) and got.dtype == want.dtype and pa.array(got).type == pa.array(want).type
    pd.testing.assert_extension_array_equal(got, want)


@given(st.lists(st.sampled_from([b"a", b",", b"\n", b"\r", b"xyz,1.5"]), max_size=40), st.integers(0, 12))
def test_lines_of_a_file_read_whole_as_the_block_scan_counts(parts: list[bytes], limit: int) -> None:
    # _checked_lines counts a whole file's newlines where it cannot hold a line longer than MAX_LINE_BYTES; the block
    # scan (_check_line_lengths, the reference) gives the same (lines, bytes) or raises at the same line. The limit is
    # lowered to a few bytes so that files both under and over it, and lines over it, are drawn.
    data = b"".join(parts)
    path = Path("f.csv")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_csv, "MAX_LINE_BYTES", limit)
        try:
            want: tuple[int, int] | str = _csv._check_line_lengths(path, io.BytesIO(data))
        except ParseError as e:
            want = str(e)
        try:
            got: tuple[int, int] | str = _csv._checked_lines(path, data)
        except ParseError as e:
            got = str(e)
    assert got == want


@given(st.lists(st.sampled_from([b"a", b",", b"\n", b"\r", b"\r\n", b"\n\r", b"\x00", b"\xc3\xa9", b"1.5"]), max_size=60))
def test_newlines_and_lone_carriage_returns_counted_as_bytes_counts_them(parts: list[bytes]) -> None:
    # _csv.newlines and lone_carriage_return (numpy over the bytes) against bytes.count, their definitions: a file's
    # lines, and whether a carriage return stands without its line feed (pyarrow and the csv module split it otherwise)
    data = b"".join(parts)
    assert _csv.newlines(data) == data.count(b"\n")
    assert _csv.lone_carriage_return(data) == (data.count(b"\r") != data.count(b"\r\n"))
