"""Capture.join_tables: each table concatenated once, the ranks' frames row slices of it, nothing else changed."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pandas.testing as pdt

from msdiag.model import Capture, Frames, RankData, Rows, entry, rows_of


def _kernels(rank: int, starts: list[float], names: list[str | None]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rank": pd.array([rank] * len(starts), dtype="Int64"),
            "name": pd.array(names, dtype="string"),
            "start_us": np.array(starts),
        }
    )


def _capture() -> tuple[Capture, list[pd.DataFrame]]:
    frames = [_kernels(0, [1.0, 2.5], ["a", None]), _kernels(1, [-0.0], ["b"]), _kernels(2, [np.nan, 4.0, 5.0], ["c", "d", "e"])]
    ranks = [RankData(rank=i, family="ascend_pt", path=f"/r{i}", tables={"kernels": f.copy()}) for i, f in enumerate(frames)]
    return Capture(path="/job", ranks=ranks), frames


def test_slices_are_the_ranks_frames_and_the_concatenation_is_kept() -> None:
    cap, frames = _capture()
    cap.join_tables()
    for r, f in zip(cap.ranks, frames):
        pdt.assert_frame_equal(r.tables["kernels"], f, check_exact=True)  # values, dtypes and the 0..n-1 index
        assert isinstance(r.tables["kernels"].index, pd.RangeIndex)
    whole = cap.table("kernels")
    # 2 + 1 + 3 rows, in rank order: what pd.concat of the ranks' frames gives
    pdt.assert_frame_equal(whole, pd.concat(frames, ignore_index=True), check_exact=True)
    assert len(whole) == 6 and whole["start_us"].tolist()[2] == 0.0 and np.signbit(whole["start_us"].to_numpy()[2])
    assert cap.table("kernels") is whole  # kept: not concatenated again
    # a rank's frame replaced (as a deep read replaces a shallow one): concatenated anew, with the new rows
    cap.ranks[1].tables["kernels"] = _kernels(1, [9.0], ["z"])
    assert cap.table("kernels")["start_us"].tolist()[2] == 9.0


def test_unlike_frames_are_left_as_they_are() -> None:
    cap, _ = _capture()
    odd = cap.ranks[1].tables["kernels"].astype({"start_us": "Float64"})  # another dtype: concat would change it
    cap.ranks[1].tables["kernels"] = odd
    cap.join_tables()
    assert cap.ranks[1].tables["kernels"] is odd
    assert str(cap.ranks[1].tables["kernels"]["start_us"].dtype) == "Float64"

    cap, _ = _capture()
    shifted = cap.ranks[2].tables["kernels"].set_axis(pd.RangeIndex(5, 8))  # not 0..n-1
    cap.ranks[2].tables["kernels"] = shifted
    cap.join_tables()
    assert cap.ranks[2].tables["kernels"] is shifted


def test_one_rank_is_not_joined() -> None:
    frame = _kernels(0, [1.0], ["a"])
    cap = Capture(path="/job", ranks=[RankData(rank=0, family="ascend_pt", path="/r0", tables={"kernels": frame})])
    cap.join_tables()
    assert cap.ranks[0].tables["kernels"] is frame


def _cut_of(frames: list[pd.DataFrame]) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """The frames as the rank cache hands them over: one frame, each rank's a row slice of it (index 0..n-1)."""
    whole = pd.concat(frames, ignore_index=True)
    parts, lo = [], 0
    for f in frames:
        part = whole.iloc[lo : lo + len(f)]
        part.index = pd.RangeIndex(len(f))
        parts.append(part)
        lo += len(f)
    return whole, parts


def test_slices_of_one_frame_are_joined_as_they_are() -> None:
    _, frames = _capture()
    whole, parts = _cut_of(frames)
    ranks = [RankData(rank=i, family="ascend_pt", path=f"/r{i}", tables={"kernels": p}) for i, p in enumerate(parts)]
    cap = Capture(path="/job", ranks=ranks)
    cap.join_tables([("kernels", whole, parts)])
    assert cap.table("kernels") is whole and all(r.tables["kernels"] is p for r, p in zip(cap.ranks, parts))
    pdt.assert_frame_equal(cap.table("kernels"), pd.concat(frames, ignore_index=True), check_exact=True)


def test_a_replaced_rank_among_slices_is_concatenated_anew() -> None:
    _, frames = _capture()
    whole, parts = _cut_of(frames)
    deep = _kernels(1, [7.0, np.nan], [None, "y"])  # a rank read again (deep), another frame
    ranks = [RankData(rank=i, family="ascend_pt", path=f"/r{i}", tables={"kernels": p}) for i, p in enumerate(parts)]
    ranks[1].tables["kernels"] = deep
    extra = RankData(rank=3, family="ascend_pt", path="/r3", tables={"kernels": _kernels(3, [], [])})  # empty: not joined
    cap = Capture(path="/job", ranks=[*ranks, extra])
    cap.join_tables([("kernels", whole, parts), ("other", whole, parts)])
    want = [frames[0], deep, frames[2]]
    for r, f in zip(cap.ranks, want):
        pdt.assert_frame_equal(r.tables["kernels"], f, check_exact=True)
    pdt.assert_frame_equal(cap.table("kernels"), pd.concat(want, ignore_index=True), check_exact=True)
    assert cap.table("kernels") is not whole and cap.ranks[0].tables["kernels"] is not parts[0]
    # unlike frames among the slices: left as they are
    odd = deep.astype({"start_us": "Float64"})
    ranks = [RankData(rank=i, family="ascend_pt", path=f"/r{i}", tables={"kernels": p}) for i, p in enumerate(parts)]
    ranks[1].tables["kernels"] = odd
    cap = Capture(path="/job", ranks=ranks)
    cap.join_tables([("kernels", whole, parts)])
    assert cap.ranks[1].tables["kernels"] is odd and cap.ranks[0].tables["kernels"] is parts[0]


def test_joined_ranks_hold_rows_cut_only_when_read() -> None:
    # model.Rows / Frames: the join gives each rank its rows of the whole without cutting a frame; the capture's table
    # is the whole, and a rank's frame is cut once, when read, equal to its frame before the join
    cap, frames = _capture()
    cap.join_tables()
    held = [entry(r.tables, "kernels") for r in cap.ranks]
    assert all(isinstance(x, Rows) and x._frame is None for x in held)
    assert [len(x) for x in held] == [2, 1, 3]  # the row counts without a cut
    whole = cap.table("kernels")
    assert all(x.whole is whole and x._frame is None for x in held)  # Capture.table cuts nothing
    got = cap.ranks[2].tables["kernels"]
    pdt.assert_frame_equal(got, frames[2], check_exact=True)
    assert cap.ranks[2].tables["kernels"] is got and held[2]._frame is got  # cut once
    assert np.shares_memory(got["start_us"].to_numpy(), whole["start_us"].to_numpy())  # a view of the whole
    assert cap.table("kernels") is whole  # reading a rank's frame does not make the capture concatenate again


def test_frames_read_as_a_dict_of_frames() -> None:
    # every way of reading a Frames gives the frames, never the Rows they are held as
    whole = pd.concat([_kernels(0, [1.0, 2.0], ["a", "b"]), _kernels(1, [3.0], ["c"])], ignore_index=True)
    own = _kernels(7, [5.0], ["x"])

    def fresh() -> Frames:
        a, b = rows_of(whole, [2, 1])
        return Frames([("kernels", b), ("other", own), ("first", a)])

    want = {"kernels": whole.iloc[2:3].reset_index(drop=True), "other": own, "first": whole.iloc[0:2].reset_index(drop=True)}

    def same(got: object) -> None:
        assert isinstance(got, dict) and list(got) == list(want)
        for n, df in want.items():
            pdt.assert_frame_equal(got[n], df, check_exact=True)

    f = fresh()
    same(f)
    same(dict(f))
    same({**f})
    same(dict(f.items()))
    same(dict(zip(f, f.values())))
    same(f.copy())
    same(pickle.loads(pickle.dumps(f)))
    assert f.get("other") is own and f.get("none") is None and f.get("none", 3) == 3
    assert f.setdefault("other") is own
    f = fresh()
    pdt.assert_frame_equal(f.pop("first"), want["first"], check_exact=True)
    assert list(f) == ["kernels", "other"] and f.pop("first", None) is None
    f = fresh()
    f["kernels"] = own  # a frame set as usual replaces the Rows
    assert entry(f, "kernels") is own and f["kernels"] is own
