"""The one ingest engine: formats as declarations, sources recorded present / absent / failed, the
rank's typed RankInfo (and the cache restoring it exactly). Real corpus files, expectations read
from the same files by hand here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from msdiag.errors import ParseError
from msdiag.ingest import ascend_csv
from msdiag.ingest.cache import RankCache
from msdiag.ingest.discover import discover
from msdiag.ingest.engine import Format, RankDir, Src, read_rank
from msdiag.ingest.formats import BY_NAME, FORMATS
from msdiag.ingest.loader import load_rank
from msdiag.ingest.metadata import info_of_metadata, read_profiler_metadata
from msdiag.model import ABSENT, FAILED, PRESENT, RankInfo

LEVEL1 = "ascend/torchnpu-2rank-level1"
TP2PP2DP2 = "ascend/metadata/profiler_metadata_tp2pp2dp2.json"


def test_a_new_file_is_one_entry(corpus: Path, tmp_path: Path) -> None:
    """A format declared here with three sources: one present, one absent, one broken."""
    rank_dir = tmp_path / "rank0"
    out = rank_dir / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    shutil.copyfile(corpus / LEVEL1 / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", out / "kernel_details.csv")
    (out / "op_statistic.csv").write_text("OP Type,Core Type,Count\n")  # lacks Total Time(us)
    fmt = Format(
        name="test",
        label="a test format",
        claims=lambda d, names: False,
        ranks=lambda d, names: [],
        sources=(
            Src("kernel_details.csv", "kernels", rows=ascend_csv.read_kernel_details, folder="ASCEND_PROFILER_OUTPUT"),
            Src("memory_record.csv", "memory", rows=ascend_csv.read_memory_record, folder="ASCEND_PROFILER_OUTPUT",
                absent=lambda ctx: f"rank {ctx.rank}: not written"),
            Src("op_statistic.csv", "op_stats", rows=ascend_csv.read_op_statistic, folder="ASCEND_PROFILER_OUTPUT"),
        ),
    )
    rd = read_rank(fmt, RankDir(0, rank_dir, "ascend_pt", "test", None, format="test"))
    by = {s.name: s for s in rd.sources}
    # kernel_details.csv: 192 lines = a header and 191 kernels
    assert by["kernel_details.csv"].status == PRESENT and by["kernel_details.csv"].rows == 191
    assert len(rd.tables["kernels"]) == 191
    assert by["memory_record.csv"].status == ABSENT and by["memory_record.csv"].reason == "rank 0: not written"
    assert by["op_statistic.csv"].status == FAILED and "Total Time(us)" in str(by["op_statistic.csv"].reason)
    # the same file declared core stops the read, naming it
    core = Format("test", "", fmt.claims, fmt.ranks, (Src("op_statistic.csv", "op_stats", rows=ascend_csv.read_op_statistic,
                                                          folder="ASCEND_PROFILER_OUTPUT", core=True),))
    with pytest.raises(ParseError, match="op_statistic.csv"):
        read_rank(core, RankDir(0, rank_dir, "ascend_pt", "test", None, format="test"))


def test_discovery_names_each_rank_format(corpus: Path) -> None:
    assert {f.name for f in FORMATS} == set(BY_NAME) == {
        "mindspore_cpu", "ascend_db", "ascend_text", "mindspore_legacy", "cann_msprof"}
    for path, fmt in ((LEVEL1, "ascend_text"), ("ascend/torchnpu-2rank-level1-db", "ascend_db"),
                      ("mindspore-legacy/run_2", "mindspore_legacy"), ("mindspore-cpu/profile_metadata_tiny", "mindspore_cpu"),
                      ("cann-msprof/PROF_000001_20230818142704322_COJGGGCANRMICFBC", "cann_msprof")):
        ranks = discover(corpus / path).ranks
        assert ranks and {r.format for r in ranks} == {fmt}, path


def test_rank_info_from_the_files(corpus: Path) -> None:
    d = corpus / LEVEL1 / "rank0_ascend_pt"
    raw = json.loads((d / "profiler_info_0.json").read_text())
    exp = raw["config"]["experimental_config"]
    rd = load_rank(next(r for r in discover(d).ranks if r.rank == 0))
    info = rd.info
    assert info.framework == "torch_npu" and info.info_format == "torch_npu"
    assert info.profiler_level == exp["_profiler_level"] == "Level1"
    assert info.aic_metrics == "PipeUtilization"  # ACL_AICORE_PIPE_UTILIZATION in MindSpore's spelling
    assert info.export_type == [exp["_export_type"]] == ["text"]
    assert info.rank_from == "profiler_info_0.json" and info.kernels_from == "kernel_details.csv"
    md = json.loads((d / "profiler_metadata.json").read_text())
    assert info.layout is None and md.get("distributed_args") is None  # no distributed_args recorded
    assert info.groups == []  # a profiler_metadata.json without parallel_group_info


def test_rank_info_round_trip_and_cache(corpus: Path, tmp_path: Path) -> None:
    md = read_profiler_metadata(corpus / TP2PP2DP2)
    info = RankInfo(framework="torch_npu", export_type=["text"], **info_of_metadata(md))
    # TP2 PP2 DP2, world 8 (the file's distributed_args); rank 6 = tp 0, dp 1, pp 1 (tp fastest)
    assert info.layout is not None and info.layout.coordinates(6)["pp_index"] == 1
    assert info.world_size() == (8, "profiler_metadata.json distributed_args.world_size")
    back = RankInfo.from_json(json.loads(json.dumps(info.to_json())))
    assert back == info and back.groups == info.groups and len(back.groups or []) == len(md["parallel_groups"])
    with pytest.raises(TypeError):
        RankInfo.from_json({**info.to_json(), "unknown": 1})
    # the cache stores and restores a real rank's RankInfo exactly
    rd_dir = next(r for r in discover(corpus / LEVEL1).ranks if r.rank == 0)
    rd = load_rank(rd_dir)
    rd.info.layout, rd.info.groups = info.layout, info.groups
    cache = RankCache.open(tmp_path / "cache", "test")
    key = cache.key(rd.rank, rd.family, rd_dir.path, rd_dir.rank_from, rd_dir.captured_ns)
    assert cache.put(key, rd) is None
    got = cache.get(key, path=rd_dir.path)  # rooted at the rank folder as this run names it
    assert got is not None and got.info == rd.info and got.meta == rd.meta and got.sources == rd.sources
