"""The cold read's cheaper paths give the cells and dtypes of the general ones (real corpus files).

- ``model.Table.frame`` builds a frame from Series that all stand on 0..n-1 from their arrays; any
  other input is aligned by pandas first. Both must give the same frame.
- ``ascend_csv._strs`` masks NA texts (written with spaces around them, which the CSV parser's exact
  NA matching does not catch) only when a cell holds one.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from msdiag import model
from msdiag.ingest import ascend_csv as ac
from msdiag.ingest._csv import NA_VALUES, read_csv

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
    for c in df.columns:
        pd.testing.assert_series_equal(ac._strs(df, (c,)), _old_strs(df[c]))


def test_text_na_with_spaces_is_null(corpus: Path, tmp_path: Path) -> None:
    src = corpus / KERNELS[0]
    with open(src, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    col = rows[0].index("Type")
    rows[1][col] = " N/A "  # the parser takes exact cells only: this one is NA once stripped
    out = tmp_path / "kernel_details.csv"
    with open(out, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    got = ac._strs(read_csv(out), ("Type",))
    assert pd.isna(got.iloc[0])
    assert got.iloc[1:].tolist() == [r[col].strip() if r[col].strip() not in NA_VALUES else pd.NA for r in rows[2:]]
    pd.testing.assert_series_equal(got, _old_strs(read_csv(out)["Type"]))


@pytest.mark.parametrize("n", [0, 1, 1005])
def test_constant_columns_as_lists_give(n: int) -> None:
    # the rank and source columns from a numpy fill equal those built from a list of n values
    pd.testing.assert_series_equal(ac._rank(n, 5), pd.Series([5] * n, dtype=model.INT))
    pd.testing.assert_series_equal(ac._const(n, "memory_record"), pd.Series(["memory_record"] * n, dtype=model.STR))
