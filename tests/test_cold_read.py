"""The cold read's cheaper paths give the cells and dtypes of the general ones (real corpus files).

- ``model.Table.frame`` builds a frame from Series that all stand on 0..n-1 from their arrays; any
  other input is aligned by pandas first. Both must give the same frame.
- ``ascend_csv._strs`` masks NA texts (written with spaces around them, which the CSV parser's exact
  NA matching does not catch) only when a cell holds one.
- ``_csv.read_cells`` splits a plain file with the csv module, and gives pandas' cells (``read_csv``)
  for it; a file that is not plain goes to pandas, with its cells and errors.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

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
    # pandas' exact NA matching makes them), " N/A " (kept as written here: texts_of nulls it once
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
    assert list(_csv.texts_of(cells["Shape"])) == ['"32,3"', pd.NA, 'x, "y"']
    assert list(_csv.quoted_texts_of(cells["Shape"])) == ["32,3", "N/A", 'x, "y']


@pytest.mark.parametrize(
    "body",
    [
        b'a,b\n1,"2',  # a quote left open at the end (pandas: EOF inside string)
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
def test_files_not_plain_read_as_pandas_does(tmp_path: Path, body: bytes) -> None:
    # each of these the csv module could split otherwise than pandas: pandas reads it (its cells or
    # its error, or check_last_row's), but for the header-only file, which the csv module splits as pandas does
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
