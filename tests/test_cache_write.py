"""The rank cache's writer: what it stores is what pyarrow's ``Table.from_pandas`` would, to the byte.

``cache._write_streams`` converts a frame's columns itself and reuses the schema from_pandas gave the first
frame of the same columns, dtypes and Arrow types (``cache._arrow_table``); the file must not depend on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from msdiag.ingest import cache as C  # noqa: E402


def _reference(path: Path, tables: dict[str, Any]) -> None:
    """The writer as it was: one from_pandas per table."""
    options = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)
    with pa.OSFile(str(path), "wb") as sink:
        for name, df in tables.items():
            t = pa.Table.from_pandas(df, preserve_index=False, nthreads=1)
            t = t.replace_schema_metadata({**(t.schema.metadata or {}), C._TABLE_KEY: name.encode()})
            with pa.ipc.new_stream(sink, t.schema, options=options) as w:
                w.write_table(t)


def _frames() -> dict[str, pd.DataFrame]:
    """Every kind of column a canonical table holds (nulls in each), and columns the fast path leaves to from_pandas."""
    typed = pd.DataFrame(
        {
            "rank": pd.array([0, None, 2], dtype="Int64"),
            "name": pd.array(["a", None, "Cast<float>"], dtype="string"),
            "start_us": np.array([1.5, np.nan, -0.0]),
            "ok": pd.array([True, None, False], dtype="boolean"),
            "n": np.array([1, 2, 3], dtype=np.int64),
            "flag": np.array([True, False, True]),
        }
    )
    return {
        "typed": typed,
        "typed_again": typed.iloc[1:].reset_index(drop=True),  # the same columns: the schema reused
        "empty": typed.iloc[:0],
        "object": pd.DataFrame({"x": pd.Series(["a", None, "b"], dtype=object)}),  # inferred from the values: from_pandas
        "attrs": typed.copy().assign(),
        "indexed": typed.set_index(pd.Index([5, 6, 7])),  # the index is not stored either way
        "str": pd.DataFrame({"s": pd.Series(["a", None], dtype="str")}),  # pandas 3 default strings (NaN for missing)
    }


def test_tables_file_is_from_pandas_byte_for_byte(tmp_path: Path) -> None:
    frames = _frames()
    frames["attrs"].attrs["why"] = "kept in the pandas metadata"
    for round_ in range(2):  # the second time every schema comes from what the first one kept
        ours, ref = tmp_path / f"ours{round_}.arrow", tmp_path / f"ref{round_}.arrow"
        sink = pa.BufferOutputStream()
        C._write_streams(sink, list(frames.items()))
        ours.write_bytes(sink.getvalue().to_pybytes())
        _reference(ref, frames)
        assert ours.read_bytes() == ref.read_bytes()


def test_fast_path_takes_typed_frames_only() -> None:
    frames = _frames()
    assert C._column_arrays(frames["typed"]) is not None
    assert C._column_arrays(frames["object"]) is None  # an object column's Arrow type depends on its values
    frames["attrs"].attrs["why"] = "x"
    assert C._column_arrays(frames["attrs"]) is None  # attrs are part of the pandas metadata
    dup = pd.DataFrame([[1.0, 2.0]], columns=["a", "a"])
    assert C._column_arrays(dup) is None


def test_dtypes_as_stored() -> None:
    typed = _frames()["typed"]
    assert C._dtypes(typed) == [["rank", "Int64"], ["name", "string"], ["start_us", "float64"], ["ok", "boolean"],
                                ["n", "int64"], ["flag", "bool"]]  # fmt: skip


def test_rank_info_json_is_asdict(job8: Path, corpus: Path) -> None:
    # RankInfo.to_json builds asdict's dict field by field (the groups by ParallelGroup.as_dict): the same dict,
    # the same JSON text, on ranks with parallel groups and a layout (the bench job) and ranks without
    import dataclasses
    import json

    from msdiag.ingest import discover, loader
    from msdiag.model import ParallelGroup, RankInfo

    infos = [loader.load_rank_shallow(d).info for d in discover.discover(job8).ranks[:2]]
    infos += [loader.load_rank(d).info for d in discover.discover(corpus / "mindspore-cpu/msrun_dp2_pynative").ranks]
    assert any(i.groups for i in infos) and any(i.layout is not None for i in infos) and any(i.export_type for i in infos)
    for info in infos:
        got, want = info.to_json(), dataclasses.asdict(info)
        assert got == want and json.dumps(got) == json.dumps(want)
        assert got["groups"] is None or all(g is not h for g, h in zip(got["groups"], want["groups"]))
    # a field holding another type than its own (a tuple of export types, a group given as a dict) goes to asdict
    odd = [RankInfo(export_type=("text",)), RankInfo(groups=[{"group_id": "1"}]),  # type: ignore[arg-type, list-item]
           RankInfo(groups=[ParallelGroup(group_id="1", group_name=None, group_rank=0, global_ranks=[0, 1], hash="1")])]
    for info in odd:
        assert info.to_json() == dataclasses.asdict(info) and json.dumps(info.to_json()) == json.dumps(dataclasses.asdict(info))


class _F(float):
    pass


class _I(int):
    pass


def _same(a: Any, b: Any) -> bool:
    """``a`` is ``b`` as JSON gives it back: the same types all through, equal values (NaN as NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and np.isnan(a):
        return bool(np.isnan(b))
    return bool(a == b)


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
    st.integers().map(_I), st.floats(allow_nan=False).map(_F),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), inner, max_size=4),
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_values)
def test_json_exact_says_what_the_round_trip_says(value: Any) -> None:
    # cache._json_exact (a rank's head is stored only when it comes back from JSON as it is): its one walk, with
    # its pass over a list's types at once, answers as json.dumps then json.loads and a comparison of types and values
    assert C._json_exact(value) == _same(json.loads(json.dumps(value)), value)
