"""Several ranks' files of one kind read at once (ascend_csv.read_many, _csv.read_cells_many, engine.prefetch).

A pool task prefetches the Ascend CSV files of its ranks: each kind's files laid end to end after one header, split
by one pyarrow call, converted and framed once, then cut back into a frame per file. Each file's frame must be the
one its reader gives it alone (values, dtypes, index, columns), and any file that reader would not read plainly
(an error, a note, a header of its own, a row pyarrow would carry into the next file) sends the whole kind back to
the readers file by file: a rank read within a prefetch is the rank read alone, sources, notes and errors included.
"""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from msdiag.errors import ParseError
from msdiag.ingest import _csv, ascend_stats, communication, discover, engine, loader
from msdiag.ingest import ascend_csv as ac
from msdiag.model import Rows, frame_of

# (file name, the reader of one file, the reader of several)
READERS: list[tuple[str, Callable[[Path, int], pd.DataFrame], Callable[[list[Path], list[int]], list[pd.DataFrame] | None]]] = [
    ("kernel_details.csv", ac.read_kernel_details, ac.read_kernel_details_many),
    ("step_trace_time.csv", ac.read_step_trace_time, ac.read_step_trace_time_many),
    ("op_statistic.csv", ac.read_op_statistic, ac.read_op_statistic_many),
    ("memory_record.csv", lambda p, r: ac.read_memory_record(p, r)[0], ac.read_memory_record_many),
    ("npu_module_mem.csv", ac.read_npu_module_mem, ac.read_npu_module_mem_many),
    ("operator_memory.csv", ac.read_operator_memory, ac.read_operator_memory_many),
    ("l2_cache.csv", ascend_stats.read_l2_cache, ascend_stats.read_l2_cache_many),
    ("api_statistic.csv", ascend_stats.read_api_statistic, ascend_stats.read_api_statistic_many),
]


def _same(got: pd.DataFrame | Rows, want: pd.DataFrame) -> None:
    # (a bulk reader gives each file's frame as the Rows of its whole, cut when read: model.cut_rows)
    got = frame_of(got)
    pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=True, check_column_type=True)
    assert isinstance(got.index, pd.RangeIndex) and got.index.start == 0 and list(got.columns) == list(want.columns)


def _alone(read: Callable[[Path, int], pd.DataFrame], paths: list[Path], ranks: list[int]) -> list[pd.DataFrame] | None:
    """Each file read alone, or None when one of them fails."""
    try:
        return [read(p, r) for p, r in zip(paths, ranks)]
    except ParseError:
        return None


@pytest.mark.parametrize(("name", "read", "many"), READERS, ids=[r[0] for r in READERS])
def test_every_corpus_file_read_with_others_as_alone(corpus: Path, name: str, read: Callable[[Path, int], pd.DataFrame],
                                                     many: Callable[[list[Path], list[int]], list[pd.DataFrame] | None]) -> None:
    files = sorted(corpus.rglob(name))
    assert files, f"no {name} in the corpus"
    batched = 0
    for f in files:
        # the file three times over (each with its own rank): the rows of one file do not run into the next
        got, want = many([f, f, f], [3, 0, 7]), _alone(read, [f, f, f], [3, 0, 7])
        if got is not None:
            assert want is not None, f"{f}: read together, though alone it fails"
            batched += 1
            for g, w in zip(got, want):
                _same(g, w)
    # files of one header line from different captures, read together
    by_header: dict[bytes, list[Path]] = {}
    for f in files:
        by_header.setdefault(f.read_bytes().split(b"\n", 1)[0], []).append(f)
    for group in (g for g in by_header.values() if len(g) > 1):
        ranks = list(range(len(group)))
        got, want = many(group, ranks), _alone(read, group, ranks)
        if got is not None:
            assert want is not None
            for g, w in zip(got, want):
                _same(g, w)
    assert batched, f"no corpus {name} was read with others"


def _comm_alone(p: Path, r: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    return communication.read_communication(p, r)


@pytest.mark.parametrize("name", ["communication.json", "communication_matrix.json"])
def test_every_corpus_communication_file_read_with_others_as_alone(corpus: Path, tmp_path: Path, name: str) -> None:
    # the JSON files are parsed one by one; their tables are built once over all their rows and cut back per file
    files = sorted(corpus.rglob(name))
    assert files
    many = communication.read_communication_many if name == "communication.json" else communication.read_communication_matrix_many
    alone = _comm_alone if name == "communication.json" else communication.read_communication_matrix
    batched = 0
    for group in [[f, f, f] for f in files] + [files]:
        ranks = list(range(len(group)))
        got = many(group, ranks)
        try:
            want = [alone(p, r) for p, r in zip(group, ranks)]
        except ParseError:
            assert got is None
            continue
        if got is None:
            continue
        batched += 1
        for g, w in zip(got, want):
            for gf, wf in zip(g, w) if isinstance(w, tuple) else [(g, w)]:
                _same(gf, wf)  # type: ignore[arg-type]
    assert batched
    # a file that is not JSON, among good ones: each read alone
    (tmp_path / "bad").mkdir()
    bad = tmp_path / "bad" / name
    bad.write_text("{not json")
    assert many([files[0], bad], [0, 1]) is None


def _kernel_file(corpus: Path) -> Path:
    return corpus / "ascend/torchnpu-2rank-level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"


def _variant(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.mkdir()
    p = p / "kernel_details.csv"
    p.write_bytes(data)
    return p


def test_file_boundaries_by_hand(corpus: Path, tmp_path: Path) -> None:
    data = _kernel_file(corpus).read_bytes().replace(b"\r\n", b"\n")  # (the file is written with CRLF)
    head, body = data.split(b"\n", 1)
    lines = body.rstrip(b"\n").split(b"\n")
    files = [
        _variant(tmp_path, "no_newline_at_end", head + b"\n" + b"\n".join(lines[:5])),  # its last row ends the file
        _variant(tmp_path, "crlf", (head + b"\r\n" + b"\r\n".join(lines[5:9]) + b"\r\n")),
        _variant(tmp_path, "header_only", head + b"\n"),
        _variant(tmp_path, "plain", head + b"\n" + b"\n".join(lines[9:12]) + b"\n"),
    ]
    # the CRLF file's header line differs (its \r): it is read alone, so the others, without it
    assert ac.read_kernel_details_many(files, [0, 1, 2, 3]) is None
    lf = [files[0], files[2], files[3]]
    got = ac.read_kernel_details_many(lf, [0, 2, 3])
    assert got is not None
    # 5, 0 and 3 rows (by hand: the lines after each header), each as the file read alone
    assert [len(g) for g in got] == [5, 0, 3]
    for g, f, r in zip(got, lf, [0, 2, 3]):
        _same(g, ac.read_kernel_details(f, r))
    assert frame_of(got[2])["rank"].tolist() == [3, 3, 3]


def _mutants(corpus: Path) -> dict[str, bytes]:
    data = _kernel_file(corpus).read_bytes().replace(b"\r\n", b"\n")
    head, body = data.split(b"\n", 1)
    lines = body.rstrip(b"\n").split(b"\n")
    cols = head.decode().split(",")
    dur = cols.index("Duration(us)")
    step = cols.index("Step Id")

    def cell(line: bytes, i: int, value: str) -> bytes:
        parts = line.decode().split(",")
        parts[i] = value
        return ",".join(parts).encode()

    return {
        "not_a_number": head + b"\n" + cell(lines[0], dur, "abc") + b"\n" + b"\n".join(lines[1:4]) + b"\n",
        "blank_line": head + b"\n" + lines[0] + b"\n\n" + b"\n".join(lines[1:4]) + b"\n",
        "other_header": head + b",Extra\n" + b"\n".join(x + b",1" for x in lines[:4]) + b"\n",
        "step_beyond_int64": head + b"\n" + cell(lines[0], step, "1e300") + b"\n" + b"\n".join(lines[1:4]) + b"\n",
        "field_over_lines": head + b"\n" + cell(lines[0], dur, '"1\n2"') + b"\n" + b"\n".join(lines[1:4]) + b"\n",
        "open_quote_at_end": head + b"\n" + b"\n".join(lines[:3]) + b"\n" + cell(lines[3], dur, '"12'),
        "short_row": head + b"\n" + b"\n".join(lines[:3]) + b"\n" + b",".join(lines[3].split(b",")[:3]) + b"\n",
        # one field more, after the last column (one no reader reads: every row is still split and judged whole)
        "long_row": head + b"\n" + b"\n".join(lines[:3]) + b"\n" + lines[3] + b",1\n",
    }


@pytest.mark.parametrize("mutant", ["not_a_number", "blank_line", "other_header", "step_beyond_int64", "field_over_lines",
                                    "open_quote_at_end", "short_row", "long_row"])
def test_a_file_read_alone_otherwise_sends_all_back(corpus: Path, tmp_path: Path, mutant: str) -> None:
    plain = _variant(tmp_path, "plain", _kernel_file(corpus).read_bytes().replace(b"\r\n", b"\n"))
    assert ac.read_kernel_details_many([plain, plain], [0, 2]) is not None  # (the plain file is taken with others)
    odd = _variant(tmp_path, mutant, _mutants(corpus)[mutant])
    # read together with plain files, before or after them: never taken together
    assert ac.read_kernel_details_many([plain, odd, plain], [0, 1, 2]) is None
    assert ac.read_kernel_details_many([odd, plain], [1, 0]) is None


def test_a_wide_file_s_unread_columns_are_not_converted(corpus: Path) -> None:
    """kernel_details.csv read with others: only the columns its reader may read are converted (ascend_csv.KERNEL_READ),
    and the frames are those of the file read alone, which converts them all."""
    path = _kernel_file(corpus)
    header = path.read_bytes().split(b"\n", 1)[0].decode().rstrip("\r").split(",")
    got = _csv.read_cells_many([path, path], any_of=ac.KERNEL_ANY_OF, columns=ac.KERNEL_READ)
    assert got is not None
    cells, counts = got
    assert cells.columns == [c for c in header if c in ac.KERNEL_READ] and len(cells.columns) < len(header)
    assert counts == [len(cells) // 2] * 2
    frames = ac.read_kernel_details_many([path, path], [0, 1])
    assert frames is not None
    for r, g in enumerate(frames):
        _same(g, ac.read_kernel_details(path, r))


def test_notes_and_dropped_rows_send_all_back(corpus: Path, tmp_path: Path) -> None:
    # memory_record: a spreadsheet's timestamps (a note naming the file)
    mem = corpus / "ascend/torchnpu-2rank-level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/memory_record.csv"
    head, body = mem.read_bytes().split(b"\n", 1)
    first, rest = body.split(b"\n", 1)
    parts = first.decode().split(",")
    ts = head.decode().split(",").index("Timestamp(us)")
    parts[ts] = "1.69512E+15"
    (tmp_path / "m").mkdir()
    odd = tmp_path / "m" / "memory_record.csv"
    odd.write_bytes(head + b"\n" + ",".join(parts).encode() + b"\n" + rest)
    assert ac.read_memory_record(odd, 1)[1]  # alone: a note
    assert ac.read_memory_record_many([mem, mem], [0, 1]) is not None
    assert ac.read_memory_record_many([mem, odd], [0, 1]) is None
    # step_trace_time: a summary row (Step written as text) is dropped: the rows no longer line up
    st = corpus / "ascend/torchnpu-2rank-level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    head, body = st.read_bytes().split(b"\n", 1)
    row = body.split(b"\n", 1)[0].split(b",")
    (tmp_path / "s").mkdir()
    summary = tmp_path / "s" / "step_trace_time.csv"
    summary.write_bytes(head + b"\n" + body.rstrip(b"\n") + b"\n" + b",".join([b"Total", *row[1:]]) + b"\n")
    assert len(ac.read_step_trace_time(summary, 1)) == len(ac.read_step_trace_time(st, 0))  # alone: the row dropped
    assert ac.read_step_trace_time_many([st, st], [0, 1]) is not None
    assert ac.read_step_trace_time_many([st, summary], [0, 1]) is None


def test_large_files_are_read_alone(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _kernel_file(corpus)
    monkeypatch.setattr(_csv, "FAST_BYTES", plain.stat().st_size - 1)  # (read_cells gives such a file to pandas)
    assert _csv.read_cells_many([plain, plain]) is None


def _rank_state(rd: object) -> tuple[object, ...]:
    from msdiag.model import RankData

    assert isinstance(rd, RankData)
    return (rd.rank, rd.info, rd.meta, rd.sources, rd.notes, list(rd.tables))


def test_ranks_read_within_a_prefetch_are_the_ranks_read_alone(job8: Path, corpus: Path, tmp_path: Path) -> None:
    # four ranks of the bench job, one with a damaged kernel_details.csv (a non-number: the core file fails, the
    # rank is marked unreadable) and one with a memory_record.csv of spreadsheet timestamps (a note), read within
    # loader.prefetch and alone: the same ranks, sources, notes and tables
    dirs = discover.discover(job8).ranks[:4]
    copies = []
    for d in dirs:
        dst = tmp_path / d.path.name
        shutil.copytree(d.path, dst, ignore=shutil.ignore_patterns("trace_view.json"))
        copies.append(dst)
    out = "ASCEND_PROFILER_OUTPUT"
    kd = copies[1] / out / "kernel_details.csv"
    head, body = kd.read_bytes().split(b"\n", 1)
    dur = head.decode().split(",").index("Duration(us)")
    first, rest = body.split(b"\n", 1)
    parts = first.decode().split(",")
    parts[dur] = "abc"
    kd.write_bytes(head + b"\n" + ",".join(parts).encode() + b"\n" + rest)
    mem = copies[2] / out / "memory_record.csv"
    head, body = mem.read_bytes().split(b"\n", 1)
    first, rest = body.split(b"\n", 1)
    parts = first.decode().split(",")
    parts[head.decode().split(",").index("Timestamp(us)")] = "1.69512E+15"
    mem.write_bytes(head + b"\n" + ",".join(parts).encode() + b"\n" + rest)
    ranks = discover.discover(tmp_path).ranks
    assert len(ranks) == 4
    alone = [loader._load_rank_or_mark(d) for d in ranks]
    taken: list[int] = []
    real = engine._call

    def counting(spec: engine.Src, handle: object, ctx: engine.Ctx) -> engine.Read:
        taken.append(int((id(spec), str(handle)) in engine._BULK))
        return real(spec, handle, ctx)

    engine._call = counting  # type: ignore[assignment]
    try:
        with loader.prefetch(ranks):
            together = [loader._load_rank_or_mark(d) for d in ranks]
        assert not engine._BULK  # nothing left over after the block
    finally:
        engine._call = real  # type: ignore[assignment]
    assert sum(taken) >= 6 * 3  # six kinds read together for the three ranks whose files are plain, at least
    assert loader.UNREADABLE in alone[1].meta and loader.UNREADABLE in together[1].meta
    assert any("spreadsheet" in n for n in together[2].notes)
    for a, t in zip(alone, together):
        assert _rank_state(t) == _rank_state(a)
        for name, df in a.tables.items():
            _same(t.tables[name], df)


def test_refused_files_are_never_opened_by_a_prefetch(job8: Path, tmp_path: Path) -> None:
    # one rank's op_statistic.csv is a named pipe (opening it would block), another's a link to a file outside the
    # capture: the prefetch admits neither (paths.refusal, as the rank's own read does), the others' files are read
    # together, and every rank is the rank read alone (the refused files failed with their reason)
    import os

    cap = tmp_path / "cap"
    for d in discover.discover(job8).ranks[:3]:
        shutil.copytree(d.path, cap / d.path.name, ignore=shutil.ignore_patterns("trace_view.json"))
    ranks = discover.discover(cap).ranks
    out = "ASCEND_PROFILER_OUTPUT"
    pipe = ranks[0].path / out / "op_statistic.csv"
    pipe.unlink()
    os.mkfifo(pipe)
    secret = tmp_path / "secret.csv"
    secret.write_bytes((ranks[2].path / out / "op_statistic.csv").read_bytes())
    linked = ranks[1].path / out / "op_statistic.csv"
    linked.unlink()
    linked.symlink_to(secret)
    alone = [loader._load_rank_or_mark(d) for d in ranks]
    with loader.prefetch(ranks):
        assert not any("op_statistic" in p for _, p in engine._BULK)  # only ranks[2]'s was admitted: none read at once
        assert any("kernel_details" in p for _, p in engine._BULK)
        together = [loader._load_rank_or_mark(d) for d in ranks]
    for a, t in zip(alone, together):
        assert _rank_state(t) == _rank_state(a)
        for name, df in a.tables.items():
            _same(t.tables[name], df)
    failed = [(r.rank, s.name, s.reason) for r in together for s in r.sources if s.status == "failed"]
    assert [(rank, name) for rank, name, _ in failed] == [(ranks[0].rank, "op_statistic.csv"), (ranks[1].rank, "op_statistic.csv")]
    assert "named pipe" in str(failed[0][2]) and "outside the capture" in str(failed[1][2])


def test_a_task_s_tables_are_its_bulk_reads_frames_where_the_ranks_kept_their_slices(job8: Path) -> None:
    """model.concat_alike given the prefetch's cuts: a table whose ranks' frames are still the slices of one bulk read,
    all of it in order, is that read's frame (nothing concatenated); the others are concatenated; either way what
    pd.concat of the frames gives (values, dtypes, index, columns)."""
    from msdiag.metrics.reduce import reduce_rank_shallow
    from msdiag.model import Stacked, concat_alike, entry

    dirs = discover.discover(job8).ranks
    with loader.prefetch(dirs) as cuts:
        ranks = [reduce_rank_shallow(loader.load_rank_shallow(d)) for d in dirs]
        # the bulk reads' frames are held as Rows, the memory table's two files' as Stacked Rows, none cut by the read
        for r in ranks:
            assert isinstance(entry(r.tables, "kernels"), Rows) and isinstance(entry(r.tables, "comm_links"), Rows)
            memory = entry(r.tables, "memory")
            assert isinstance(memory, Stacked) and [len(p) for p in memory.parts] == [
                len(ac.read_memory_record(Path(r.path) / "ASCEND_PROFILER_OUTPUT/memory_record.csv", r.rank)[0]),
                len(ac.read_npu_module_mem(Path(r.path) / "ASCEND_PROFILER_OUTPUT/npu_module_mem.csv", r.rank))]
            assert all(x._frame is None for x in (entry(r.tables, "kernels"), memory, *memory.parts))
        taken = concat_alike(ranks, cuts)
        read = {id(whole) for whole, _ in cuts}
        # kernel_details.csv, communication.json and communication_matrix.json, read at once, stay as read, and so do
        # the step rows of these ranks read shallow (computed for the task's ranks at once: breakdown._task_steps adds
        # their frame to the cuts); memory (two files' rows per rank) does not: its two bulk frames laid end to end, the
        # rows taken rank by rank (model._stacked_whole), with no rank's frame cut
        as_read = {name for name, whole in taken.items() if id(whole) in read}
        assert {"kernels", "comm_ops", "comm_transport", "comm_links", "steps"} <= as_read and "memory" not in as_read
        assert all(x._frame is None for r in ranks for x in (entry(r.tables, "memory"), entry(r.tables, "kernels")))
        for name, whole in taken.items():
            _same(whole, pd.concat([r.tables[name] for r in ranks if name in r.tables], ignore_index=True))
            assert list(whole.dtypes) == list(concat_alike(ranks)[name].dtypes)
        # one rank's kernels replaced by a copy: not the bulk read's slices any more, concatenated
        ranks[3].tables["kernels"] = ranks[3].tables["kernels"].copy()
        again = concat_alike(ranks, cuts)
        assert id(again["kernels"]) not in read
        _same(again["kernels"], taken["kernels"])
        # the ranks in another order: concatenated in that order (memory too: its bulk frames' rows no longer in order)
        back = concat_alike(ranks[::-1], cuts)
        assert id(back["comm_ops"]) not in read
        for name in ("comm_ops", "memory"):
            _same(back[name], pd.concat([r.tables[name] for r in ranks[::-1]], ignore_index=True))
        # one rank's memory rows a frame of its own: the others' Stacked rows are concatenated with it, as read
        ranks[2].tables["memory"] = ranks[2].tables["memory"].copy()
        _same(concat_alike(ranks, cuts)["memory"], taken["memory"])


def test_writing_a_task_s_cache_file_cuts_no_rank_s_frame_of_a_whole_table(job8: Path, tmp_path: Path) -> None:
    """RankCache.put_many of a task's ranks (as a pool worker writes them) stores each table held whole as that whole
    and leaves the ranks' Rows of it uncut (a cut costs pandas ~0.1 ms a frame: it was ~1.2 ms a rank of the 512-rank
    bench job's cold run, every frame of every rank); read back, every rank's tables equal what was stored."""
    from msdiag.ingest.cache import CacheStats
    from msdiag.metrics.reduce import reduce_rank_shallow
    from msdiag.model import Stacked, concat_alike, entry

    dirs = discover.discover(job8).ranks
    cache = loader._open_cache(tmp_path / "cache", reduce_rank_shallow, None)
    keys = [cache.key(d.rank, d.family, d.path, d.rank_from, d.captured_ns) for d in dirs]
    with loader.prefetch(dirs) as cuts:
        ranks = [reduce_rank_shallow(loader.load_rank_shallow(d)) for d in dirs]
        wholes = concat_alike(ranks, cuts)
        assert cache.put_many(keys, ranks, wholes) == [None] * len(ranks)
    held = [entry(r.tables, name) for r in ranks for name in wholes if name in r.tables]
    assert sum(isinstance(x, (Rows, Stacked)) for x in held) >= 4 * len(ranks)  # kernels, comm_*, memory, steps, ...
    assert all(x._frame is None for x in held if isinstance(x, (Rows, Stacked)))
    back = cache.get_many(keys, CacheStats(), [d.path for d in dirs])
    for r, b in zip(ranks, back):
        assert b is not None and sorted(b.tables) == sorted(r.tables)
        for name in r.tables:
            _same(b.tables[name], r.tables[name])


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=300))
def test_a_bounded_read_gives_what_reading_limit_plus_one_bytes_gives(content: bytes, size: int, limit: int) -> None:
    # _csv.read_bounded reads into a buffer of the size a file was stat'ed at (``size``); a file grown or shrunk since
    # must still give exactly f.read(limit + 1): its first limit + 1 bytes at most (more than ``limit`` says too large)
    assert _csv.read_bounded(io.BytesIO(content), limit, size) == content[: limit + 1]


@given(st.lists(st.sampled_from([b"a", b",", b'"', b"\r", b"\n", b"\r\n", b"xy"]), max_size=30).map(b"".join))
def test_the_last_line_judged_is_the_file_s_last_line_that_is_not_empty(data: bytes) -> None:
    # _csv._last_line finds it without copying the file: the same bytes as stripping the line ends and splitting
    assert _csv._last_line(data) == data.rstrip(b"\r\n").rpartition(b"\n")[2]


# number cells as profilers and spreadsheets write them, NA texts, and texts pyarrow or Python's float() refuse
_NUMBER_TEXTS = st.one_of(
    st.floats(allow_nan=False).flatmap(lambda x: st.sampled_from([repr(x), f"{x:.3f}", f"{x:e}", f"{x:g}", f"{x:.17g}"])),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from([*_csv.NA_VALUES, "nan(1)", "NAN", "inf", "-inf", "Infinity", "+1.5", ".5", "5.", "1E+05", "0x10",
                     "1_000", "abc", " 1.5 ", "\t2\t", "1.5\t", '"3.25"', '"N/A"', '""', " ", "1.69512E+15", "-0.0"]),
)


@given(st.lists(st.lists(_NUMBER_TEXTS, min_size=1, max_size=4), min_size=2, max_size=3))
def test_numbers_read_by_pyarrow_are_the_numbers_of_their_texts(files: list[list[str]]) -> None:
    """_csv.read_cells_many(numbers=...): a column pyarrow reads as float64 gives exactly what its texts give
    (Cells.floats of the texts: pyarrow's parse, else Python's float() with its NA texts), or the texts are read."""
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory() as d:
        paths = []
        for k, cells in enumerate(files):
            p = Path(d) / f"f{k}.csv"
            p.write_text("A,B\n" + "".join(f"{c},x{i}\n" for i, c in enumerate(cells)), encoding="utf-8")
            paths.append(p)
        texts = _csv.read_cells_many(paths)
        typed = _csv.read_cells_many(paths, numbers={"A"})
        assert (texts is None) == (typed is None)
        if texts is None or typed is None:
            return
        assert typed[1] == texts[1] and list(typed[0]["B"]) == list(texts[0]["B"])
        try:
            want = texts[0].floats("A")
        except ParseError as e:
            with pytest.raises(ParseError, match=re.escape(str(e))):
                typed[0].floats("A")
            return
        got = typed[0].floats("A")
        assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got), np.signbit(want))


def test_a_reader_asking_for_the_texts_of_numbers_reads_each_file_alone(corpus: Path) -> None:
    """A column read as numbers has no texts: Cells says so (TypeError), and ascend_csv.read_many gives the files back
    to be read one by one rather than building a frame from anything else."""
    path = _kernel_file(corpus)
    got = _csv.read_cells_many([path, path], any_of=ac.KERNEL_ANY_OF, columns=ac.KERNEL_READ, numbers=ac.KERNEL_NUMBERS)
    assert got is not None
    cells = got[0]
    typed = [c for c in cells.columns if c in ac.KERNEL_NUMBERS]
    assert typed and "Duration(us)" in typed
    for c in typed:
        with pytest.raises(TypeError, match="read as numbers"):
            cells.arrow(c)
        with pytest.raises(TypeError, match="read as numbers"):
            cells[c]

    def durations_as_texts(df: _csv.Cells, p: Path, rank_of: Callable[[int], object], notes: list[str]) -> pd.DataFrame:
        return pd.DataFrame({"dur": ac._strs(df, ("Duration(us)",))})

    assert ac.read_many([path, path], [0, 1], durations_as_texts, numbers={"Duration(us)"}) is None
    assert ac.read_many([path, path], [0, 1], durations_as_texts) is not None  # (read as texts: taken)
    frames = ac.read_kernel_details_many([path, path], [0, 1])
    assert frames is not None  # (its declared numbers are numbers only: the bulk read is taken)
