"""The safe path to a capture's files (ingest/paths.py and its users: the engine, discovery, the
cache fingerprint), on copies of a real corpus rank: what is refused is never opened, walks end."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from msdiag.errors import ParseError
from msdiag.ingest import cache, discover, paths
from msdiag.ingest.cann_msprof import prof_captured_ns
from msdiag.ingest.loader import load_rank
from msdiag.ingest.paths import MAX_RANK, Seen, rank_number, read_head, real_roots, refusal
from msdiag.model import FAILED

L0 = "ascend/torchnpu-2rank-level0/rank0_ascend_pt"
L1_JOB = "ascend/torchnpu-2rank-level1"
APO = "ASCEND_PROFILER_OUTPUT"


def _copy(corpus: Path, rel: str, dst: Path) -> Path:
    shutil.copytree(corpus / rel, dst, symlinks=True)
    for d, _, files in os.walk(dst):  # the corpus is read-only; its copy must be editable
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(Path(d) / f, 0o644)
    return dst


def test_rank_number_takes_only_what_a_job_can_have() -> None:
    assert rank_number("0") == 0
    assert rank_number("127") == 127
    assert rank_number(str(MAX_RANK)) == MAX_RANK
    assert rank_number(str(MAX_RANK + 1)) is None
    assert rank_number("9" * 23) is None  # the hostile profiler_info_99999999999999999999999.json
    assert rank_number("") is None


def test_refusal_from_stat_alone(tmp_path: Path) -> None:
    cap, outside = tmp_path / "cap", tmp_path / "outside"
    cap.mkdir()
    outside.mkdir()
    (cap / "a.json").write_text("{}")
    (outside / "secret").write_text("x")
    (cap / "in.json").symlink_to(cap / "a.json")  # a link inside the capture is read
    (cap / "out.json").symlink_to(outside / "secret")
    (cap / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(cap / "pipe.json")
    roots = real_roots(cap)
    assert refusal(cap / "a.json", roots) is None
    assert refusal(cap / "in.json", roots) is None
    assert "outside the capture" in str(refusal(cap / "out.json", roots))
    assert "outside the capture" in str(refusal(cap / "zero.json", roots))
    assert "named pipe" in str(refusal(cap / "pipe.json", roots))
    assert "a folder" in str(refusal(cap, real_roots(tmp_path)))
    # a FIFO is never opened (opening it would block): read_head declines it
    assert read_head(cap / "pipe.json", roots, 10) is None
    assert read_head(cap / "a.json", roots, 1) == b"{"


def test_refusal_with_real_folders_kept_says_what_it_says_without(tmp_path: Path) -> None:
    # the engine keeps each folder's real path for a rank's files (one lstat a file that is no link): every answer
    # the same as a fresh realpath's, the memo filled only with folders, and a link (of a file or of its folder)
    # still resolved whole
    cap, outside = tmp_path / "cap", tmp_path / "outside"
    (cap / "sub").mkdir(parents=True)
    outside.mkdir()
    (cap / "a.json").write_text("{}")
    (cap / "sub" / "b.csv").write_text("x")
    (outside / "secret").write_text("x")
    (cap / "in.json").symlink_to(cap / "a.json")
    (cap / "out.json").symlink_to(outside / "secret")
    (cap / "dangling.json").symlink_to(cap / "nothing")
    (cap / "zero.json").symlink_to("/dev/zero")
    (cap / "away").symlink_to(outside)  # a folder link out of the capture: its files are outside
    (cap / "here").symlink_to(cap / "sub")  # a folder link inside
    os.mkfifo(cap / "pipe.json")
    names = ["a.json", "sub/b.csv", "in.json", "out.json", "dangling.json", "zero.json", "away/secret", "here/b.csv",
             "here/../a.json", "pipe.json", "absent.json", "sub", "sub/.", "sub/.."]
    roots = real_roots(cap)
    memo: dict[str, str] = {}
    for _ in range(2):  # the second time from the memo
        for n in names:
            assert refusal(cap / n, roots, memo) == refusal(cap / n, roots), n
    assert refusal(cap / "a.json", roots, memo) is None and "outside" in str(refusal(cap / "away" / "secret", roots, memo))
    assert "cannot be read" in str(refusal(cap / "absent.json", roots, memo))
    assert set(memo) <= {str(cap / d) for d in ("", "sub", "here", "here/..", "away")}
    assert memo[str(cap / "here")] == str(cap / "sub") and memo[str(cap / "away")] == str(outside)


def test_seen_enters_each_real_folder_once(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "s1").symlink_to(".")
    seen = Seen()
    # tmp_path and s1 are one real folder; d is another; a file is no folder
    (tmp_path / "f").write_text("")
    assert seen.new([tmp_path, tmp_path / "s1", tmp_path / "d", tmp_path / "f"]) == [tmp_path, tmp_path / "d"]
    assert len(seen) == 2


def test_refused_core_file_stops_the_rank(tmp_path: Path, corpus: Path) -> None:
    cap = _copy(corpus, L0, tmp_path / "cap")
    tv = cap / APO / "trace_view.json"
    tv.unlink()
    os.mkfifo(tv)
    rd_dir = discover.discover(cap).ranks[0]
    with pytest.raises(ParseError, match="named pipe"):
        load_rank(rd_dir)


def test_refused_optional_file_is_failed_and_the_rest_read(tmp_path: Path, corpus: Path) -> None:
    cap = _copy(corpus, L0, tmp_path / "cap")
    info = cap / "profiler_info_0.json"
    info.unlink()
    info.symlink_to("/dev/urandom")
    rd = load_rank(discover.discover(cap).ranks[0])
    failed = [s for s in rd.sources if s.status == FAILED]
    assert [s.name for s in failed] == ["profiler_info_0.json"]
    assert "outside the capture" in str(failed[0].reason)
    # the rest of the rank is read: as many kernels as from the clean corpus rank
    assert len(rd.table("kernels")) == len(load_rank(discover.discover(corpus / L0).ranks[0]).table("kernels"))


def test_self_links_do_not_multiply_discovery_or_the_fingerprint(tmp_path: Path, corpus: Path) -> None:
    job = _copy(corpus, L1_JOB, tmp_path / "job")
    rank0 = job / "rank0_ascend_pt"
    before = cache.files_of(rank0)
    for i in range(1, 9):
        (job / f"s{i}").symlink_to(".")
        (rank0 / APO / f"s{i}").symlink_to(".")
    d = discover.discover(job)
    assert [r.rank for r in d.ranks] == [0, 1]
    assert {r.path.name for r in d.ranks} == {"rank0_ascend_pt", "rank1_ascend_pt"}
    # the fingerprint lists the same files: s1..s8 lead back into folders already walked
    assert cache.files_of(rank0) == before


def test_unreadable_folder_beside_the_ranks_is_a_note(tmp_path: Path, corpus: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root lists a chmod 000 folder (tests/test_hostile.py covers it without CAP_DAC_*)")
    job = _copy(corpus, L1_JOB, tmp_path / "job")
    locked = job / "scratch"
    locked.mkdir()
    locked.chmod(0)
    try:
        d = discover.discover(job)
    finally:
        locked.chmod(0o755)
    assert [r.rank for r in d.ranks] == [0, 1]
    assert any("scratch: cannot be listed" in n for n in d.notes)


def test_rank_id_beyond_any_job_falls_back_with_a_note(tmp_path: Path, corpus: Path) -> None:
    cap = _copy(corpus, L0, tmp_path / "rank0_ascend_pt")
    (cap / "profiler_info_0.json").rename(cap / f"profiler_info_{'9' * 23}.json")
    d = discover.discover(cap)
    # the folder name rank0_ascend_pt gives the rank instead; the note shows the number by its length
    assert [(r.rank, r.rank_from) for r in d.ranks] == [(0, "folder name rank0_ascend_pt")]
    assert any("<23 digits> is not a rank id" in n for n in d.notes)


def test_bad_date_in_prof_folder_name_orders_by_mtime() -> None:
    assert prof_captured_ns(Path("PROF_000001_20231345142704322_COJGGGCANRMICFBC")) is None
    # 2023-08-18 14:27:04.322 UTC
    assert prof_captured_ns(Path("PROF_000001_20230818142704322_COJGGGCANRMICFBC")) == 1692368824322 * 10**6


def test_a_rank_s_fingerprint_names_each_file_by_its_path_under_the_rank(tmp_path: Path) -> None:
    # a rank folder built by hand: files at the top, two folders down, and a link to a folder elsewhere (followed:
    # its files named under the link's name); each file's size is its text's length, its mtime set by hand
    rank = tmp_path / "rank0_ascend_pt"
    (rank / "ASCEND_PROFILER_OUTPUT" / "deeper").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    files = {"profiler_info_0.json": b"{}", "ASCEND_PROFILER_OUTPUT/kernel_details.csv": b"a,b\n1,2\n",
             "ASCEND_PROFILER_OUTPUT/deeper/x.json": b"[1]"}
    for i, (rel, data) in enumerate(files.items()):
        (rank / rel).write_bytes(data)
        os.utime(rank / rel, ns=(0, 1_000_000_000 * (i + 1)))
    (tmp_path / "elsewhere" / "y.csv").write_bytes(b"yy")
    os.utime(tmp_path / "elsewhere" / "y.csv", ns=(0, 7))
    (rank / "linked").symlink_to(tmp_path / "elsewhere")
    # sorted by path: "ASCEND..." < "linked/..." < "profiler..."
    assert cache.files_of(rank) == [
        ["ASCEND_PROFILER_OUTPUT/deeper/x.json", 3, 3_000_000_000],
        ["ASCEND_PROFILER_OUTPUT/kernel_details.csv", 8, 2_000_000_000],
        ["linked/y.csv", 2, 7],
        ["profiler_info_0.json", 2, 1_000_000_000],
    ]
    # a relative or unnormalised name of the folder gives the same names (as os.path.relpath of each file did)
    assert cache.files_of(Path(os.path.relpath(rank)) / ".." / rank.name) == cache.files_of(rank)


_PART = st.sampled_from(["a", "ab", "b", "a.b", "A", "x y", "..a", "a-1"])


@given(st.lists(_PART, max_size=5), st.lists(_PART, max_size=5))
def test_a_real_path_inside_a_root_judged_on_texts_as_pathlib_judges_parts(file: list[str], root: list[str]) -> None:
    # paths._inside (the admission's containment test, on the texts of real paths) against pathlib's is_relative_to on
    # absolute normalised paths: the root itself, below it, beside it with a common prefix (/a against /ab), "/" itself
    real, top = "/" + "/".join(file), Path("/" + "/".join(root))
    assert paths._inside(real, top) == Path(real).is_relative_to(top)


def test_a_file_found_from_its_folder_s_listing_is_the_file_stat_finds(tmp_path: Path) -> None:
    """engine.locate with a rank's listings (``listed``: each folder listed once) answers as ``exists`` does, name by
    name: a file, a folder, a link to a file, a link that leads nowhere, a name written in another case, a name that
    is absent, a name that is a path, a folder that does not exist; and lists each folder once."""
    from msdiag.ingest import engine

    d = tmp_path / "out"
    (d / "sub").mkdir(parents=True)
    (d / "kernel_details.csv").write_text("a,b\n")
    (d / "sub" / "x.json").write_text("{}")
    (d / "to_file").symlink_to(d / "kernel_details.csv")
    (d / "nowhere").symlink_to(tmp_path / "gone")
    names = ["kernel_details.csv", "sub", "to_file", "nowhere", "KERNEL_DETAILS.csv", "absent.csv", "sub/x.json",
             "sub/none.json", ".", "..", "é.csv"]
    listed: dict[str, engine.Listed | None] = {}
    for folder in (d, tmp_path / "missing"):
        for name in names:
            assert engine.locate(folder, name, listed) == engine.locate(folder, name), (folder, name)
    assert set(listed) == {str(d), str(tmp_path / "missing")} and listed[str(tmp_path / "missing")] is None
    entries = listed[str(d)]
    assert entries is not None and entries.links == {"kernel_details.csv": False, "sub": False, "to_file": True, "nowhere": True}
