"""The SQLite export (export_type db) read into the canonical model, on the corpus's real databases.

Expectations come from SQL run here on the same files (counts, sums), from the profiler's own
StepTraceTime, and from the text run of the same job (torchnpu-2rank-level1: a DIFFERENT run, so
only its structure and orders of magnitude are compared, never its numbers).
"""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from msdiag.errors import ParseError
from msdiag.ingest import sqlite_export as se
from msdiag.ingest.engine import connect
from msdiag.ingest.loader import load
from msdiag.metrics.breakdown import step_breakdown
from msdiag.model import ABSENT, PRESENT, RankData

DB_RUN = "ascend/torchnpu-2rank-level1-db"
TEXT_RUN = "ascend/torchnpu-2rank-level1"
RANKS = (0, 1)


def _rank_dir(corpus: Path, rank: int) -> Path:
    return corpus / DB_RUN / f"rank{rank}_ascend_pt"


def _dbs(corpus: Path, rank: int) -> tuple[Path, Path]:
    out = _rank_dir(corpus, rank) / "ASCEND_PROFILER_OUTPUT"
    return out / f"ascend_pytorch_profiler_{rank}.db", out / "analysis.db"


def _sql(path: Path, q: str) -> list[tuple]:
    # immutable: the corpus databases are WAL-mode; plain mode=ro would create -wal/-shm beside them
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


def _writable_copy(src: Path, dst: Path) -> Path:
    """Copy a folder with default (writable) permissions: the corpus is read-only, and a read-only
    copy would hide any -wal/-shm file a reader tried to create."""
    for root, _dirs, files in os.walk(src):
        target = dst / Path(root).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copyfile(Path(root) / f, target / f)
    return dst


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture(scope="module")
def db_ranks(corpus: Path) -> dict[int, RankData]:
    return {r: se.load_db_rank(_rank_dir(corpus, r), r, "ascend_pt") for r in RANKS}


# ---- detection ----------------------------------------------------------------------------------


def test_is_db_rank(corpus: Path, tmp_path: Path) -> None:
    for r in RANKS:
        assert se.is_db_rank(_rank_dir(corpus, r))
        assert not se.is_db_rank(corpus / TEXT_RUN / f"rank{r}_ascend_pt")
    # exported as both text and db: the text files are read
    both = _writable_copy(_rank_dir(corpus, 0), tmp_path / "both_ascend_pt")
    (both / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").write_text("Name\n")
    assert not se.is_db_rank(both)
    assert not se.is_db_rank(tmp_path / "nothing")


# ---- kernels ------------------------------------------------------------------------------------


@pytest.mark.parametrize("rank", RANKS)
def test_kernel_count_equals_sql(corpus: Path, db_ranks: dict[int, RankData], rank: int) -> None:
    prof, _ = _dbs(corpus, rank)
    compute = _sql(prof, "SELECT COUNT(*) FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId")[0][0]
    comm = _sql(prof, "SELECT COUNT(*) FROM COMMUNICATION_OP")[0][0]
    k = db_ranks[rank].tables["kernels"]
    assert (compute, comm) == (187, 4)  # as the text run's kernel_details.csv: 187 compute + 4 HCCL rows
    assert len(k) == compute + comm
    assert int((k["kind"] == "communication").sum()) == comm
    assert set(k.loc[k["kind"] == "communication", "core"]) == {"HCCL"}
    assert set(k["core"]) == {"AI_CORE", "AI_VECTOR_CORE", "MIX_AIV", "DSA_SQE", "HCCL"}
    assert k["name"].notna().all() and k["type"].notna().all()
    assert set(k["step"].dropna()) == {50} and k["step"].notna().all()
    # durations: int64 ns arithmetic, exact to the ns
    total_ns = _sql(prof, "SELECT SUM(t.endNs - t.startNs) FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId")[0][0]
    assert k.loc[k["kind"] == "compute", "dur_us"].sum() == pytest.approx(total_ns / 1000, abs=1e-6)
    # PMU columns from TASK_PMU_INFO (ns -> us; ratios as they are)
    conv = k[k["name"] == "Conv2D1"].iloc[0]
    (aic_ns,) = _sql(
        prof,
        "SELECT p.value FROM TASK_PMU_INFO p JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = p.globalTaskId "
        "JOIN STRING_IDS n ON n.id = c.name JOIN STRING_IDS m ON m.id = p.name "
        "WHERE n.value = 'Conv2D1' AND m.value = 'aic_total_time'",
    )[0]
    assert conv["aicore_time_us"] == pytest.approx(aic_ns / 1000) and 0.9 < conv["aicore_time_us"] / conv["dur_us"] <= 1
    assert 0 < conv["aic_mac_ratio"] < 1
    assert conv["input_shapes"] == "32,1,224,224,8;121,4,16,8;64"  # quotes stripped as in the CSV


def test_ns_to_us_is_integer_safe() -> None:
    ns = 1736410576404465403
    exact = float(Decimal(ns) / 1000)  # the float nearest the exact us value
    assert se.ns_to_us([ns])[0] == exact
    # durations: subtract in int64 first (float(ns) has a 256 ns grid at this magnitude)
    assert se.span_us([ns], [ns + 1])[0] == 0.001
    assert (float(ns + 1) - float(ns)) / 1000 == 0.0
    assert math.isnan(se.ns_to_us([None])[0]) and math.isnan(se.span_us([ns], [None])[0])
    assert se.ns_to_us(["1736410576386409710"])[0] == float(Decimal(1736410576386409710) / 1000)  # TEXT ns


# ---- step breakdown vs the profiler's StepTraceTime ---------------------------------------------


@pytest.mark.parametrize("rank", RANKS)
def test_breakdown_agrees_with_step_trace_time(corpus: Path, db_ranks: dict[int, RankData], rank: int) -> None:
    rd = db_ranks[rank]
    ours = step_breakdown(rd)
    _, ana = _dbs(corpus, rank)
    (row,) = _sql(ana, "SELECT step, computing, communication, communication_not_overlapped, free, stage FROM StepTraceTime")
    assert row[0] == "50"  # step ids are stored as text
    assert list(ours["step"]) == [50]
    got = ours.iloc[0]
    for col, want in zip(("computing_us", "communication_us", "communication_exposed_us", "free_us", "total_us"), row[1:]):
        assert abs(got[col] - want) <= 0.01 * want, (col, got[col], want)
    # the profiler's rows are loaded as profiler_steps, times in us
    prof = rd.tables["profiler_steps"].iloc[0]
    assert prof["step"] == 50 and prof["computing_us"] == pytest.approx(row[1])
    assert prof["total_us"] == pytest.approx(prof["computing_us"] + prof["communication_exposed_us"] + prof["free_us"])


# ---- communication ------------------------------------------------------------------------------


@pytest.mark.parametrize("rank", RANKS)
def test_comm_ops_sum_to_comm_analyzer_time(corpus: Path, db_ranks: dict[int, RankData], rank: int) -> None:
    _, ana = _dbs(corpus, rank)
    (sums,) = _sql(
        ana,
        "SELECT COUNT(*), SUM(elapse_time), SUM(transit_time), SUM(wait_time), SUM(synchronization_time), "
        "SUM(idle_time) FROM CommAnalyzerTime",
    )
    ops = db_ranks[rank].tables["comm_ops"]
    assert len(ops) == sums[0] == 4
    for col, ms in zip(("elapse_us", "transit_us", "wait_us", "sync_us", "idle_us"), sums[1:]):
        assert ops[col].sum() == pytest.approx(ms * 1000, rel=1e-9)  # the table's times are ms
    assert set(ops["step"]) == {50} and set(ops["op_type"]) == {"hcom_allReduce"}
    # ms, not us: each op's elapse equals its COMMUNICATION_OP span
    k = db_ranks[rank].tables["kernels"]
    spans = k[k["kind"] == "communication"].set_index("name")["dur_us"]
    for _, op in ops.iterrows():
        assert op["elapse_us"] == pytest.approx(spans[op["op_name"]], rel=1e-6)


@pytest.mark.parametrize("rank", RANKS)
def test_comm_transport_and_links(corpus: Path, db_ranks: dict[int, RankData], rank: int) -> None:
    _, ana = _dbs(corpus, rank)
    tr = db_ranks[rank].tables["comm_transport"]
    pairs = _sql(ana, "SELECT COUNT(*) FROM (SELECT DISTINCT hccl_op_name, transport_type FROM CommAnalyzerBandwidth WHERE transit_size > 0)")[0][0]
    assert len(tr) == pairs
    hccs_packets = _sql(ana, "SELECT SUM(count) FROM CommAnalyzerBandwidth WHERE transport_type = 'HCCS'")[0][0]
    assert tr.loc[tr["transport"] == "HCCS", "packets"].sum() == hccs_packets
    assert tr.loc[tr["transport"] == "SDMA", "packets"].isna().all()  # no size distribution
    links = db_ranks[rank].tables["comm_links"]
    assert len(links) == _sql(ana, "SELECT COUNT(*) FROM CommAnalyzerMatrix")[0][0]
    assert set(links["variant"]) == {"top1", "middle", "bottom1", "bottom2", "bottom3", "total"}
    assert set(links["op_type"]) == {"hcom_allReduce"}


# ---- the rest of the model ----------------------------------------------------------------------


def test_timeline_memory_counters_meta(corpus: Path, db_ranks: dict[int, RankData]) -> None:
    rd = db_ranks[0]
    prof, _ = _dbs(corpus, 0)
    tl = rd.tables["timeline"]
    step = tl[tl["lane"] == "step"]
    assert list(step["name"]) == ["ProfilerStep#50"]
    (s, e), = _sql(prof, "SELECT startNs, endNs FROM STEP_TIME")
    assert step["dur_us"].iloc[0] == (e - s) / 1000
    overlap = tl[tl["lane"] == "overlap"].groupby("track").size().to_dict()
    assert overlap == {"Computing": 187, "Communication": 4, "Communication(Not Overlapped)": 101, "Free": 90}
    host = tl[tl["lane"] == "host"]
    n_api = _sql(prof, "SELECT COUNT(*) FROM PYTORCH_API")[0][0] + _sql(prof, "SELECT COUNT(*) FROM CANN_API")[0][0]
    assert len(host) == n_api - 1  # ProfilerStep#50 is on the step lane
    assert host["track"].str.match(r"^(Python|CANN)/Thread \d+$").all()
    assert "Node@launch" in set(host["name"])  # CANN API named as trace_view.json names it
    assert len(tl[tl["lane"] == "hccl"]) == 4

    mem = rd.tables["memory"]
    assert set(mem["source"]) == {"memory_record", "npu_module_mem"}
    assert {"PTA", "GE", "PTA+GE", "APP"} <= set(mem["component"])
    hbm = _sql(prof, "SELECT MAX(n.hbm) FROM NPU_MEM n JOIN STRING_IDS s ON s.id = n.type WHERE s.value = 'app'")[0][0]
    assert mem.loc[mem["component"] == "APP", "reserved_mb"].max() == pytest.approx(hbm / 2**20)
    allocs = rd.tables["memory_allocs"]
    assert len(allocs) == _sql(prof, "SELECT COUNT(*) FROM OP_MEMORY")[0][0]
    assert allocs["release_us"].isna().any() and allocs["size_kb"].iloc[0] == 18816.5

    c = rd.tables["counters"]
    freq = c[c["track"] == "AI Core Freq"]
    assert set(freq["value"]) == {1800.0} and set(freq["unit"]) == {"MHz"}
    assert {"HBM", "LLC", "NPU MEM"} <= set(c["track"])

    assert rd.meta["db"]["rank_id"] == 0 and rd.meta["db"]["device_id"] == 0
    assert rd.meta["db"]["schema_version"] == "1.0.0"
    assert rd.info.export_type == ["db"]
    assert rd.info.step_source == "ProfilerStep#N markers"
    names = {s.name: s for s in rd.sources}
    assert names["ascend_pytorch_profiler_0.db:COMPUTE_TASK_INFO"].status == PRESENT
    assert names["ascend_pytorch_profiler_0.db:COMPUTE_TASK_INFO"].rows == 187
    assert names["analysis.db:StepTraceTime"].status == PRESENT
    assert names["profiler_metadata.json"].status == ABSENT


def test_absent_tables_recorded_with_reason(corpus: Path, db_ranks: dict[int, RankData], tmp_path: Path) -> None:
    # rank 1's profiler database really has no OVERLAP_ANALYSIS table
    s = {x.name: x for x in db_ranks[1].sources}
    assert s["ascend_pytorch_profiler_1.db:OVERLAP_ANALYSIS"].status == ABSENT
    assert s["ascend_pytorch_profiler_1.db:OVERLAP_ANALYSIS"].reason
    # without analysis.db: the rank still loads, the missing analysis is said
    d = _writable_copy(_rank_dir(corpus, 0), tmp_path / "rank0_ascend_pt")
    (d / "ASCEND_PROFILER_OUTPUT" / "analysis.db").unlink()
    rd = se.load_db_rank(d, 0, "ascend_pt")
    s = {x.name: x for x in rd.sources}
    assert s["analysis.db"].status == ABSENT and "StepTraceTime" in s["analysis.db"].reason
    assert "profiler_steps" not in rd.tables and len(rd.tables["kernels"]) == 191


# ---- never writing, strict on corrupt files ------------------------------------------------------


def test_folder_is_left_unchanged(corpus: Path, tmp_path: Path) -> None:
    d = _writable_copy(_rank_dir(corpus, 0), tmp_path / "rank0_ascend_pt")
    before = _snapshot(d)
    prof = d / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    assert prof.read_bytes()[18:20] == b"\x02\x02"  # a WAL-mode database: the case where mode=ro writes
    se.load_db_rank(d, 0, "ascend_pt")
    assert _snapshot(d) == before  # no -wal / -shm / -journal, nothing touched
    # and in place on the corpus (as root, a read-only folder does not stop a writer)
    for folder in (corpus / DB_RUN, corpus / "cann-msprof"):
        before = _snapshot(folder)
        if folder.name == "cann-msprof":
            p = folder / "msprof_0.db"
            se.read_db_files(RankData(rank=0, family="cann_msprof", path=str(folder)), p)
        else:
            for r in RANKS:
                se.load_db_rank(_rank_dir(corpus, r), r, "ascend_pt")
        assert _snapshot(folder) == before
        assert not list(folder.rglob("*.db-*"))


def test_pending_wal_is_read_from_a_private_copy(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    db = live / "x.db"
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO STRING_IDS VALUES (1, 'only in the wal')")
    con.commit()
    user = tmp_path / "user"
    user.mkdir()
    for f in live.iterdir():  # a copy taken while the writer still holds the WAL
        if not f.name.endswith("-shm"):
            shutil.copyfile(f, user / f.name)
    con.close()
    assert (user / "x.db-wal").stat().st_size > 0
    before = _snapshot(user)
    with connect(user / "x.db") as d:  # the one place msdiag opens a database
        assert d.names([1]).tolist() == ["only in the wal"]
    assert _snapshot(user) == before


def test_truncated_database_is_a_parse_error(corpus: Path, tmp_path: Path) -> None:
    d = _writable_copy(_rank_dir(corpus, 0), tmp_path / "rank0_ascend_pt")
    prof = d / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    data = prof.read_bytes()
    prof.write_bytes(data[: len(data) // 3])
    with pytest.raises(ParseError) as e:
        se.load_db_rank(d, 0, "ascend_pt")
    assert e.value.path == str(prof) and "truncated" in e.value.problem
    prof.write_bytes(b"not a database at all" * 10)
    with pytest.raises(ParseError, match="not an SQLite database"):
        se.load_db_rank(d, 0, "ascend_pt")
    prof.write_bytes(b"")
    with pytest.raises(ParseError, match="empty"):
        se.load_db_rank(d, 0, "ascend_pt")


def test_corrupt_page_is_a_parse_error(corpus: Path, tmp_path: Path) -> None:
    d = _writable_copy(_rank_dir(corpus, 0), tmp_path / "rank0_ascend_pt")
    ana = d / "ASCEND_PROFILER_OUTPUT" / "analysis.db"
    data = bytearray(ana.read_bytes())
    data[4096:8192] = b"\xff" * 4096  # a b-tree page overwritten; the header still looks fine
    ana.write_bytes(bytes(data))
    with pytest.raises(ParseError) as e:
        se.load_db_rank(d, 0, "ascend_pt")
    assert e.value.path == str(ana)


# ---- MindSpore names, the CANN msprof database ---------------------------------------------------


def test_mindspore_file_names(corpus: Path, tmp_path: Path) -> None:
    """No real MindSpore DB sample exists: the torch_npu files renamed as MindSpore 2.5+ names them
    (same schema per formats.md) check that the names are found."""
    d = _writable_copy(_rank_dir(corpus, 0), tmp_path / "host_1_2_ascend_ms")
    out = d / "ASCEND_PROFILER_OUTPUT"
    (out / "ascend_pytorch_profiler_0.db").rename(out / "ascend_mindspore_profiler_0.db")
    (out / "analysis.db").rename(out / "communication_analyzer.db")
    assert se.is_db_rank(d)
    rd = se.load_db_rank(d, 0, "ascend_ms")
    assert len(rd.tables["kernels"]) == 191 and len(rd.tables["comm_ops"]) == 4
    s = {x.name: x for x in rd.sources}
    assert s["communication_analyzer.db:StepTraceTime"].status == PRESENT
    assert s["ascend_mindspore_profiler_0.db:PYTORCH_API"].status == PRESENT  # (torch data renamed)


def test_cann_msprof_db(corpus: Path) -> None:
    """msprof_0.db is CANN's own export (beside PROF_* folders, no ASCEND_PROFILER_OUTPUT): the same
    TASK / COMPUTE_TASK_INFO / STRING_IDS schema, no STEP_TIME, no analysis tables, no memory."""
    p = corpus / "cann-msprof" / "msprof_0.db"
    n = _sql(p, "SELECT COUNT(*) FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId")[0][0]
    rd = se.read_db_files(RankData(rank=0, family="cann_msprof", path=str(p.parent)), p)
    k = rd.tables["kernels"]
    assert len(k) == n == 11
    assert k["step"].isna().all() and set(k["core"]) == {"AI_VECTOR_CORE"}
    assert k["input_shapes"].isna().sum() == 1  # msprof writes "NULL" for MemSet's shapes
    s = {x.name: x for x in rd.sources}
    assert s["msprof_0.db:STEP_TIME"].status == ABSENT
    assert s["msprof_0.db:COMMUNICATION_OP"].status == PRESENT and s["msprof_0.db:COMMUNICATION_OP"].rows == 0
    assert s["msprof_0.db:MEMORY_RECORD"].status == ABSENT
    assert len(step_breakdown(rd)) == 1  # one row covering the capture


# ---- the DB run against the text run of the same job (two runs) ----------------------------------


def test_db_run_vs_text_run(corpus: Path, db_ranks: dict[int, RankData]) -> None:
    text = load(corpus / TEXT_RUN, jobs=1)
    for r in RANKS:
        t, d = text.ranks[r], db_ranks[r]
        kt, kd = t.tables["kernels"], d.tables["kernels"]
        assert set(kt["type"]) == set(kd["type"])
        assert set(kt["core"]) == set(kd["core"])
        assert len(kt) == len(kd)
        assert set(kt["step"].dropna()) == set(kd["step"].dropna()) == {50}
        for name in ("comm_ops", "comm_transport", "comm_links", "memory_allocs"):
            assert list(t.tables[name].columns) == list(d.tables[name].columns)
            assert len(t.tables[name]) == len(d.tables[name])
        st, sd = step_breakdown(t).iloc[0], step_breakdown(d).iloc[0]
        for col in ("total_us", "computing_us", "communication_us", "free_us"):
            assert abs(math.log10(st[col] / sd[col])) < 1, (r, col, st[col], sd[col])  # same order of magnitude
