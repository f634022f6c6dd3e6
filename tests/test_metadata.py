"""profiler_info / profiler_metadata readers, group hashes and the rank grid, on the corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from msdiag.errors import ParseError
from msdiag.ingest.metadata import (
    group_hash,
    parallel_config,
    read_profiler_info,
    read_profiler_metadata,
)
from msdiag.model import ParallelLayout


def rank_coordinates(rank: int, cfg: ParallelLayout | dict) -> dict[str, int]:
    """The grid placement now lives on model.ParallelLayout (typed data, no ingest import in metrics)."""
    layout = cfg if isinstance(cfg, ParallelLayout) else ParallelLayout(**cfg)
    return layout.coordinates(rank)

TP_GROUP_ID = "10.174.216.241%enp189s0f1_55000_0_1738895506630464"
TP2PP2DP2 = "ascend/metadata/profiler_metadata_tp2pp2dp2.json"
COMM_GROUP = "ascend/metadata/communication_group.json"

# ---------------------------------------------------------------------------------------------------
# group_hash


def test_group_hash_known_value() -> None:
    assert group_hash(TP_GROUP_ID) == 6960437680420871035


def test_group_hash_matches_communication_group_json(corpus: Path) -> None:
    # msprof-analyze's communication_group.json records group_id and, as group_name, its hash.
    info = json.loads((corpus / COMM_GROUP).read_text())["comm_group_parallel_info"]
    pairs = [(g["group_id"], g["group_name"]) for g in info if g["group_id"]]
    assert len(pairs) == 21
    for gid, name in pairs:
        assert str(group_hash(gid)) == name, gid


@given(st.text())
def test_group_hash_is_64_bit(s: str) -> None:
    h = group_hash(s)
    assert 0 <= h < 2**64
    assert h == group_hash(s)


def test_group_hash_empty_and_single() -> None:
    assert group_hash("") == 0
    assert group_hash("A") == (65 << 32) | 65


# ---------------------------------------------------------------------------------------------------
# profiler_info_{rank}.json


def test_profiler_info_torch_npu_level1(corpus: Path) -> None:
    info = read_profiler_info(corpus / "ascend/torchnpu-2rank-level1/rank1_ascend_pt/profiler_info_1.json")
    assert info["framework"] == "torch_npu" and info["format"] == "torch_npu"
    assert info["rank"] == 1
    assert info["profiler_level"] == "Level1"
    assert info["aic_metrics"] == "PipeUtilization"  # written as ACL_AICORE_PIPE_UTILIZATION
    assert info["schedule"] == {"wait": 0, "active": 1, "warmup": 10, "repeat": 1, "skip_first": 40}
    assert info["record_shapes"] is True and info["profile_memory"] is True and info["with_stack"] is True
    assert info["end_time_ns"] == 1736408884003926530
    assert info["export_type"] == ["text"]
    assert info["framework_version"] is None and info["cann_version"] is None
    assert info["raw"]["start_info"]["freq"] == 100


def test_profiler_info_torch_npu_level0_and_db(corpus: Path) -> None:
    lv0 = read_profiler_info(corpus / "ascend/torchnpu-2rank-level0/rank0_ascend_pt/profiler_info_0.json")
    assert lv0["profiler_level"] == "Level0" and lv0["aic_metrics"] == "None" and lv0["rank"] == 0
    db = read_profiler_info(corpus / "ascend/torchnpu-2rank-level1-db/rank0_ascend_pt/profiler_info_0.json")
    assert db["export_type"] == ["db"] and db["end_time_ns"] == 1736410576713429440


def test_profiler_info_torch_npu_2023(corpus: Path) -> None:
    # older torch_npu: schedule keys with a leading '_', no start_info, no _export_type
    info = read_profiler_info(corpus / "ascend/torchnpu-2rank-p2p-2024/test_rank_0/profiler_info_0.json")
    assert info["framework"] == "torch_npu" and info["rank"] == 0
    assert info["schedule"] == {"wait": 1, "warmup": 0, "active": 1, "repeat": 1, "skip_first": 1}
    assert info["aic_metrics"] == "MemoryL0"  # ACL_AICORE_L0B_AND_WIDTH
    assert info["export_type"] is None
    assert info["end_time_ns"] == 1695115379279542430


def test_profiler_info_mindspore_legacy(corpus: Path) -> None:
    info = read_profiler_info(corpus / "mindspore-legacy/parallel_strategy/profiler_info_0.json")
    assert info["framework"] == "mindspore" and info["format"] == "mindspore_legacy"
    assert info["rank"] == 0  # written as the string "0"
    assert info["rank_size"] == 2 and info["stage_num"] == 1
    assert info["parallel_mode"] == "auto_parallel" and info["context_mode"] == "graph"
    assert info["profiler_level"] is None and info["end_time_ns"] is None


# profiler_parameters is exactly what MindSpore 2.10's ProfilerParameters(...).original_params returns
# for profiler_level=Level1, aic_metrics=PipeUtilization, with_stack/profile_memory/record_shapes=True and
# schedule(wait=1, warmup=1, active=2, repeat=1, skip_first=1); the other keys follow ProfilerInfo
# (profiler_info.py) and NpuProfiler.stop() (ms_profiler_info = {rank_id, device_id}).
MS_INFO = {
    "profiler_parameters": {
        "is_set_schedule": True, "output_path": "./data", "profiler_level": "Level1",
        "activities": ["CPU", "NPU"], "aic_metrics": "PipeUtilization", "with_stack": True,
        "profile_memory": True, "data_process": False, "parallel_strategy": False, "start_profile": True,
        "l2_cache": False, "hbm_ddr": False, "pcie": False, "sys_io": False, "sys_interconnection": False,
        "host_sys": [], "sync_enable": True, "data_simplification": True, "record_shapes": True,
        "export_type": ["text"], "mstx": False, "mstx_domain_include": [], "mstx_domain_exclude": [],
        "schedule": {"wait": 1, "active": 2, "warmup": 1, "repeat": 1, "skip_first": 1},
    },
    "ms_profiler_info": {"rank_id": 3, "device_id": "3"},
    "cann_profiler_info": {},
    "analysis_cost_time": {},
    "ms_version": "2.10.0",
    "cann_version": "8.0.RC3",
    "jit_level": "O0",
}


def test_profiler_info_mindspore(tmp_path: Path) -> None:
    p = tmp_path / "profiler_info_3.json"
    p.write_text(json.dumps(MS_INFO, indent=4))
    info = read_profiler_info(p)
    assert info["framework"] == "mindspore" and info["format"] == "mindspore"
    assert info["rank"] == 3 and info["device_id"] == 3
    assert info["framework_version"] == "2.10.0" and info["cann_version"] == "8.0.RC3"
    assert info["profiler_level"] == "Level1" and info["aic_metrics"] == "PipeUtilization"
    assert info["schedule"] == {"wait": 1, "active": 2, "warmup": 1, "repeat": 1, "skip_first": 1}
    assert info["record_shapes"] is True and info["profile_memory"] is True and info["with_stack"] is True
    assert info["export_type"] == ["text"] and info["jit_level"] == "O0"
    assert info["end_time_ns"] is None


def test_profiler_info_mindspore_default_schedule_is_no_schedule(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(MS_INFO))
    doc["profiler_parameters"].update(
        is_set_schedule=False, schedule={"wait": 0, "active": 1, "warmup": 0, "repeat": 0, "skip_first": 0}
    )
    doc["ms_profiler_info"] = {"context_mode": 1, "rank_id": 0}
    doc["cann_version"] = "not known"  # what get_cann_version() returns without CANN
    p = tmp_path / "profiler_info_0.json"
    p.write_text(json.dumps(doc))
    info = read_profiler_info(p)
    assert info["schedule"] is None and info["context_mode"] == "pynative"
    assert info["cann_version"] is None and info["rank"] == 0


def test_profiler_info_unknown_shape_and_no_rank(tmp_path: Path) -> None:
    p = tmp_path / "profiler_info_0.json"
    p.write_text('{"something": 1}')
    info = read_profiler_info(p)
    assert info["framework"] is None and info["rank"] is None and info["raw"] == {"something": 1}
    p.write_text('{"config": {}, "end_info": {}, "rank_id": -1}')
    assert read_profiler_info(p)["rank"] is None  # torch_npu writes -1 without torch.distributed


@pytest.mark.parametrize(
    "content,words",
    [
        (b"", "empty"),
        (b'{"config": {"common_config": ', "truncated"),
        (b"{'single': 'quotes'}", "not valid JSON"),
        (b"[]", "found a list"),
        (b'{"config": [], "rank_id": 0}', "'config' should be a JSON object"),
    ],
)
def test_profiler_info_bad(tmp_path: Path, content: bytes, words: str) -> None:
    p = tmp_path / "profiler_info_0.json"
    p.write_bytes(content)
    with pytest.raises(ParseError) as e:
        read_profiler_info(p)
    assert str(p) in str(e.value) and words in str(e.value)


# ---------------------------------------------------------------------------------------------------
# profiler_metadata.json


def test_metadata_tp2pp2dp2(corpus: Path) -> None:
    path = corpus / TP2PP2DP2
    raw = json.loads(path.read_text())
    meta = read_profiler_metadata(path)
    assert meta["distributed_args"] == raw["distributed_args"]
    assert meta["env"] == raw["ENV_VARIABLES"] and len(meta["env"]) == 9
    assert meta["extra"] == {}
    groups = meta["parallel_groups"]
    assert len(groups) == len(raw["parallel_group_info"]) == 21
    tp = next(g for g in groups if g["group_id"] == TP_GROUP_ID)
    assert tp == {"group_id": TP_GROUP_ID, "group_name": "tp", "group_rank": 0, "global_ranks": [0, 1],
                  "hash": "6960437680420871035"}
    # every id also listed by communication_group.json has the hash it records
    known = {
        g["group_id"]: g["group_name"]
        for g in json.loads((corpus / COMM_GROUP).read_text())["comm_group_parallel_info"]
        if g["group_id"]
    }
    shared = [g for g in groups if g["group_id"] in known]
    assert len(shared) == 6
    assert all(g["hash"] == known[g["group_id"]] for g in shared)


def test_metadata_env_only_and_user_keys(corpus: Path) -> None:
    meta = read_profiler_metadata(corpus / "ascend/torchnpu-2rank-level1/rank0_ascend_pt/profiler_metadata.json")
    assert meta["distributed_args"] is None and meta["parallel_groups"] == [] and meta["extra"] == {}
    assert "HCCL_RDMA_TC" in meta["env"]
    tiny = next((corpus / "mindspore-cpu/profile_metadata_tiny").glob("*/profiler_metadata.json"))
    meta = read_profiler_metadata(tiny)
    assert meta == {"env": {}, "distributed_args": None, "parallel_groups": [],
                    "extra": {"job": "msdiag-test", "cfg": {"bs": 32}}}


@pytest.mark.parametrize(
    "content,words",
    [
        (b"", "empty"),
        (b'{"ENV_VARIABLES": {"A": ', "truncated"),
        (b"{,}", "not valid JSON"),
        (b"42", "found a number"),
        (b'{"parallel_group_info": [1, 2]}', "'parallel_group_info' should be a JSON object"),
        (b'{"parallel_group_info": {"g": "tp"}}', "parallel_group_info['g'] should be a JSON object"),
        (b'{"parallel_group_info": {"g": {"global_ranks": "0,1"}}}', "list of rank numbers"),
        (b'{"distributed_args": "tp=2"}', "'distributed_args' should be a JSON object"),
        (b'{"ENV_VARIABLES": ["A"]}', "'ENV_VARIABLES' should be a JSON object"),
    ],
)
def test_metadata_bad(tmp_path: Path, content: bytes, words: str) -> None:
    p = tmp_path / "profiler_metadata.json"
    p.write_bytes(content)
    with pytest.raises(ParseError) as e:
        read_profiler_metadata(p)
    assert str(p) in str(e.value) and words in str(e.value)


# ---------------------------------------------------------------------------------------------------
# parallel layout


def test_parallel_config(corpus: Path) -> None:
    cfg = parallel_config(read_profiler_metadata(corpus / TP2PP2DP2)["distributed_args"])
    assert cfg.as_dict() == {"tp": 2, "pp": 2, "dp": 2, "cp": 1, "ep": 1, "world_size": 8, "rank": 0}
    assert parallel_config(None).as_dict() == {"tp": None, "pp": None, "dp": None, "cp": None, "ep": None,
                                     "world_size": None, "rank": None}
    # dp derived from world / (tp * cp * pp) when not given
    derived = parallel_config({"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
                               "context_parallel_size": 2, "world_size": 16})
    assert derived.dp == 2


# Which grid dimensions vary inside a Megatron group of each name (ep = 1 in the sample, so the
# expert groups collapse onto their dense counterparts). embd (embedding ranks) is not a grid slice.
VARYING = {
    "tp": {"tp"}, "tp_exp": {"tp"}, "pp": {"pp"}, "pp_new_stream": {"pp"}, "dp": {"dp"},
    "dp_modulo_exp": {"dp"}, "cp": {"cp"}, "dp_cp": {"dp", "cp"}, "mp": {"tp", "pp"}, "mp_exp": {"tp", "pp"},
    "tp_dp": {"tp", "dp"}, "tp_cp": {"tp", "cp"}, "tp_dp_cp": {"tp", "dp", "cp"}, "exp": {"ep"},
    "default_group": {"tp", "pp", "dp", "cp"},
}
DIMS = ("tp", "cp", "dp", "pp", "ep")


def _groups(corpus: Path) -> list[tuple[str, list[int]]]:
    meta = read_profiler_metadata(corpus / TP2PP2DP2)
    out = [(g["group_name"], g["global_ranks"]) for g in meta["parallel_groups"]]
    info = json.loads((corpus / COMM_GROUP).read_text())["comm_group_parallel_info"]
    out += [(g["pg_name"], g["rank_set"]) for g in info if g["pg_name"]]
    return [(n, r) for n, r in out if n in VARYING]


def test_rank_coordinates_agree_with_parallel_groups(corpus: Path) -> None:
    """Each named group is exactly the set of ranks that agree on every dimension it does not span."""
    cfg = parallel_config(read_profiler_metadata(corpus / TP2PP2DP2)["distributed_args"])
    coords = {r: rank_coordinates(r, cfg) for r in range(8)}
    groups = _groups(corpus)
    assert {n for n, _ in groups} >= {"tp", "pp", "dp", "dp_cp", "mp", "tp_dp"}
    assert len(groups) >= 35
    for name, ranks in groups:
        fixed = [d for d in DIMS if d not in VARYING[name]]
        c0 = coords[ranks[0]]
        expected = [r for r in range(8) if all(coords[r][f"{d}_index"] == c0[f"{d}_index"] for d in fixed)]
        assert sorted(ranks) == expected, (name, ranks)


def test_rank_coordinates_megatron_order() -> None:
    # tp-cp-ep-dp-pp: rank = tp_i + tp*(cp_i + cp*(dp_i + dp*pp_i))
    cfg = {"tp": 2, "cp": 2, "dp": 2, "pp": 2, "ep": 2, "world_size": 16}
    assert rank_coordinates(5, cfg) == {"tp_index": 1, "cp_index": 0, "dp_index": 1, "pp_index": 0, "ep_index": 0}
    assert rank_coordinates(11, cfg) == {"tp_index": 1, "cp_index": 1, "dp_index": 0, "pp_index": 1,
                                         "ep_index": 1}
    # the tp2pp2dp2 sample: rank 6 = tp 0, dp 1, pp 1
    c = rank_coordinates(6, {"tp": 2, "pp": 2, "dp": 2, "cp": 1, "ep": 1, "world_size": 8})
    assert (c["tp_index"], c["dp_index"], c["pp_index"]) == (0, 1, 1)


@pytest.mark.parametrize(
    "rank,cfg,words",
    [
        (0, {"tp": None, "pp": 2, "dp": 2}, "unknown"),
        (0, {"tp": 2, "pp": 2, "dp": 2, "world_size": 16}, "world_size is 16"),
        (8, {"tp": 2, "pp": 2, "dp": 2, "world_size": 8}, "outside"),
        (0, {"tp": 1, "pp": 1, "dp": 3, "ep": 2}, "not divisible"),
    ],
)
def test_rank_coordinates_errors(rank: int, cfg: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        rank_coordinates(rank, cfg)
