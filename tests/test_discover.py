"""Discovery: ranks, format family, duplicates and refusals, on the real corpus folders."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from msdiag.errors import InputError
from msdiag.ingest.discover import ASCEND_PT, MINDSPORE_CPU, discover


def test_torch_npu_two_ranks_from_profiler_info(corpus: Path) -> None:
    d = discover(corpus / "ascend/torchnpu-2rank-level1")
    # the folder holds rank0_ascend_pt/profiler_info_0.json and rank1_ascend_pt/profiler_info_1.json
    assert [r.rank for r in d.ranks] == [0, 1]
    assert d.family == ASCEND_PT
    assert all(r.rank_from.startswith("profiler_info_") for r in d.ranks)


def test_one_rank_folder_and_its_output_folder(corpus: Path) -> None:
    rank1 = corpus / "ascend/torchnpu-2rank-level0/rank1_ascend_pt"
    assert [r.rank for r in discover(rank1).ranks] == [1]
    assert [r.rank for r in discover(rank1 / "ASCEND_PROFILER_OUTPUT").ranks] == [1]


def test_mindspore_cpu_ranks_from_file_suffixes(corpus: Path) -> None:
    d = discover(corpus / "mindspore-cpu/msrun_dp2_pynative")
    # vm_17649_... holds FRAMEWORK/cpu_framework_0.txt, vm_17651_... cpu_framework_1.txt
    assert [r.rank for r in d.ranks] == [0, 1]
    assert d.family == MINDSPORE_CPU
    assert d.ranks[0].path.name.startswith("vm_17649")


def test_duplicate_rank_keeps_newest_and_says_so(corpus: Path) -> None:
    d = discover(corpus / "mindspore-cpu/profile_schedule_pynative")
    # two rank-0 captures: ..._20261129090110880_ascend_ms and ..._20261129090112514_ascend_ms (newer)
    assert len(d.ranks) == 1
    assert d.ranks[0].path.name == "vm_17437_20261129090112514_ascend_ms"
    assert any("rank 0 appears 2 times" in n and "vm_17437_20261129090110880_ascend_ms" in n for n in d.notes)


def test_missing_path_and_file_are_refused(tmp_path: Path, corpus: Path) -> None:
    with pytest.raises(InputError, match="no such file or folder"):
        discover(tmp_path / "nope")
    f = corpus / "ascend/single-files/trace_view_tiny.json"
    with pytest.raises(InputError, match="is a file"):
        discover(f)


def test_empty_or_unrelated_folder(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "train.log").write_text("epoch 1\n")
    with pytest.raises(InputError, match="no profiler capture found"):
        discover(tmp_path)


def test_legacy_and_cann_folders_are_found(corpus: Path) -> None:
    # single-rank/ holds step_trace_raw_0_... and step_trace_raw_10_... (ranks 0 and 10, among others)
    d = discover(corpus / "mindspore-legacy/single-rank")
    assert d.family == "mindspore_legacy" and {0, 10} <= {r.rank for r in d.ranks}
    # two PROF_ folders, device_0 and device_1 (info.json.0 / info.json.1)
    d = discover(corpus / "cann-msprof")
    assert d.family == "cann_msprof" and {0, 1} <= {r.rank for r in d.ranks}


def test_profiler_info_alone_is_not_a_capture(tmp_path: Path) -> None:
    (tmp_path / "profiler_info_0.json").write_text("{}")
    with pytest.raises(InputError, match="profiler_info without ASCEND_PROFILER_OUTPUT"):
        discover(tmp_path)


def test_mixed_cpu_and_ascend_ranks_are_refused(tmp_path: Path, corpus: Path) -> None:
    # links only: the corpus is read in place, never copied into the repository
    (tmp_path / "a_ascend_pt").symlink_to(corpus / "ascend/torchnpu-2rank-level0/rank0_ascend_pt")
    cpu = next((corpus / "mindspore-cpu/msrun_dp2_pynative").glob("vm_17651*"))
    (tmp_path / "b_ascend_ms").symlink_to(cpu)
    with pytest.raises(InputError, match="mixes captures of different kinds"):
        discover(tmp_path)


def test_discovery_lists_each_folder_once_and_finds_what_it_found_before(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each format asks whether it claims a folder, and each lists the same sub-folders: within discovery a folder is
    listed once (engine.listings_kept), and the ranks found are those found listing it every time."""
    from msdiag.ingest import discover as discover_module
    from msdiag.ingest import engine

    capture = corpus / "ascend/torchnpu-2rank-level1"
    listed: list[str] = []
    real = engine.Listed.of

    def counted(folder: str) -> engine.Listed | None:
        listed.append(folder)
        return real(folder)

    monkeypatch.setattr(engine.Listed, "of", staticmethod(counted))
    with_memo = discover(capture)
    output = [p for p in listed if p.endswith("ASCEND_PROFILER_OUTPUT")]
    assert len(output) == 2 and len(set(output)) == 2  # each rank's ASCEND_PROFILER_OUTPUT/ listed once

    listed.clear()
    monkeypatch.setattr(discover_module, "listings_kept", contextlib.nullcontext)
    without = discover(capture)
    assert len([p for p in listed if p.endswith("ASCEND_PROFILER_OUTPUT")]) > 2  # (several claims list it)
    assert [(r.rank, r.path, r.family, r.rank_from, r.format) for r in with_memo.ranks] == [
        (r.rank, r.path, r.family, r.rank_from, r.format) for r in without.ranks]
    assert engine._LISTED is None  # nothing kept once discovery is done
    names = engine.listing(capture / "rank0_ascend_pt")
    names.append("x")  # a listing is the caller's own copy
    assert "x" not in engine.listing(capture / "rank0_ascend_pt")
