"""Capture metadata: profiler_info_{rank}.json, profiler_metadata.json and parallel groups.

- ``profiler_info_{rank}.json`` comes in three shapes (torch_npu, MindSpore 2.5+, MindSpore 2.0-2.2);
  :func:`read_profiler_info` maps each to one normalized dict.
- ``profiler_metadata.json`` holds user metadata, ``ENV_VARIABLES``, Megatron-style ``distributed_args``
  and ``parallel_group_info``; :func:`read_profiler_metadata` splits them and hashes every group id
  with :func:`group_hash`, the number communication.json writes after ``@`` in its op keys.
- :func:`parallel_config` gives the TP/CP/DP/PP sizes (``model.ParallelLayout``); the readers put
  them and the groups into the rank's ``RankInfo`` (:data:`JSON_SOURCES`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import msgspec

from msdiag.errors import ParseError
from msdiag.ingest.engine import Ctx, Read, Src
from msdiag.model import ParallelGroup, ParallelLayout

_MASK32 = 0xFFFFFFFF


def load_json(path: Path) -> Any:
    """Decode a JSON file, naming the file and the problem in a ParseError when it cannot be read.

    Empty, truncated and malformed files are errors. ``NaN``/``Infinity`` (which Python's json module
    writes) are accepted.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        raise ParseError(path, "the file is empty: expected a JSON document")
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        first = str(e)
    except RecursionError:
        raise ParseError(path, f"JSON nested deeper than the decoder's limit ({sys.getrecursionlimit()} levels)") from None
    try:  # Python's json module also accepts NaN and Infinity, which msgspec rejects
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        pass
    if "truncated" in first:
        raise ParseError(path, "the JSON is truncated (the file ends in the middle of a value)") from None
    raise ParseError(path, f"not valid JSON ({first})") from None


def _type_name(x: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(x), "a number" if isinstance(x, (int, float)) else type(x).__name__
    )


# ---------------------------------------------------------------------------------------------------
# group hash


def group_hash(group_id: str) -> int:
    """The 64-bit number HCCL writes after ``@`` in a communication op key, from the group's id.

    Two polynomial hashes over the id's code points, h1 (base 29) and h2 (base 131), each mod 2^32,
    combined as ``(h1 << 32) | h2``. ``parallel_group_info`` in profiler_metadata.json is keyed by the
    id, so this links ops to named groups (tp, pp, dp, ...).
    """
    h1 = 0
    h2 = 0
    for ch in group_id:
        c = ord(ch)
        h1 = (h1 * 29 + c) & _MASK32
        h2 = (h2 * 131 + c) & _MASK32
    return (h1 << 32) | h2


# ---------------------------------------------------------------------------------------------------
# profiler_info_{rank}.json

# torch_npu writes CANN's ACL names; MindSpore writes its own AicoreMetrics values. msdiag uses
# MindSpore's spelling; "None" means PMU metrics were switched off.
_AIC_METRICS = {
    "ACL_AICORE_PIPE_UTILIZATION": "PipeUtilization",
    "ACL_AICORE_ARITHMETIC_UTILIZATION": "ArithmeticUtilization",
    "ACL_AICORE_MEMORY_BANDWIDTH": "Memory",
    "ACL_AICORE_L0B_AND_WIDTH": "MemoryL0",
    "ACL_AICORE_MEMORY_UB": "MemoryUB",
    "ACL_AICORE_RESOURCE_CONFLICT_RATIO": "ResourceConflictRatio",
    "ACL_AICORE_L2_CACHE": "L2Cache",
    "ACL_AICORE_MEMORY_ACCESS": "MemoryAccess",
    "ACL_AICORE_NONE": "None",
}

_CONTEXT_MODES = {0: "graph", 1: "pynative"}


def _opt_int(x: Any) -> int | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, str) and re.fullmatch(r"\s*-?\d+\s*", x):
        return int(x)
    return None


def _opt_bool(x: Any) -> bool | None:
    return x if isinstance(x, bool) else None


def _opt_str(x: Any) -> str | None:
    if x is None or isinstance(x, (dict, list)):
        return None
    s = str(x).strip()
    return s or None


def _rank(x: Any) -> int | None:
    """Rank id; torch_npu writes -1 for a job without torch.distributed: that is no rank, not rank -1."""
    r = _opt_int(x)
    return r if r is not None and r >= 0 else None


def _schedule(x: Any) -> dict[str, int] | None:
    """torch_npu and MindSpore write wait/warmup/active/repeat/skip_first, older torch_npu with a '_'."""
    if not isinstance(x, dict) or not x:
        return None
    return {str(k).lstrip("_"): v for k, v in x.items()}


def _export_type(x: Any) -> list[str] | None:
    if isinstance(x, str):
        return [x]
    if isinstance(x, list) and all(isinstance(v, str) for v in x):
        return list(x)
    return None


def _aic_metrics(x: Any) -> str | None:
    s = _opt_str(x)
    return None if s is None else _AIC_METRICS.get(s, s)


def _context_mode(x: Any) -> str | None:
    if isinstance(x, int) and not isinstance(x, bool):
        return _CONTEXT_MODES.get(x, str(x))
    s = _opt_str(x)
    return None if s is None else s.lower()


def _empty_info(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "rank": None,
        "framework": None,
        "format": None,
        "framework_version": None,
        "cann_version": None,
        "profiler_level": None,
        "aic_metrics": None,
        "schedule": None,
        "record_shapes": None,
        "profile_memory": None,
        "with_stack": None,
        "end_time_ns": None,
        "export_type": None,
        "device_id": None,
        "context_mode": None,
        "jit_level": None,
        "parallel_mode": None,
        "rank_size": None,
        "stage_num": None,
        "raw": raw,
    }


def read_profiler_info(path: Path) -> dict[str, Any]:
    """Read ``profiler_info_{rank}.json`` (any of its three shapes) into one normalized dict.

    Keys: rank, framework ("torch_npu" | "mindspore" | None), format ("torch_npu" | "mindspore" |
    "mindspore_legacy" | None: which shape was found), framework_version, cann_version, profiler_level
    ("Level0", ...), aic_metrics (MindSpore spelling: "PipeUtilization", ..., "None" when off), schedule
    (wait/warmup/active/repeat/skip_first; None when MindSpore says the user set none), record_shapes,
    profile_memory, with_stack, end_time_ns (torch_npu end_info.collectionTimeEnd), export_type (list
    such as ["text"] or ["db"]), device_id, context_mode ("graph" | "pynative"), jit_level,
    parallel_mode, rank_size, stage_num, and raw (the whole file). A value the file does not hold is
    None, never a default. A JSON object of an unknown shape gives all None (and the raw object).
    """
    raw = load_json(path)
    if not isinstance(raw, dict):
        raise ParseError(path, f"expected a JSON object of profiler settings, found {_type_name(raw)}")
    info = _empty_info(raw)

    if "config" in raw or "start_info" in raw or "end_info" in raw:
        _fill_torch_npu(path, raw, info)
    elif isinstance(raw.get("profiler_parameters"), dict) or isinstance(raw.get("ms_profiler_info"), dict):
        _fill_mindspore(raw, info)
    elif any(k in raw for k in ("ms_version", "context_mode", "rank_size", "parallel_mode", "stage_num")):
        _fill_mindspore_legacy(raw, info)
    return info


def _section(path: Path, raw: dict[str, Any], key: str) -> dict[str, Any]:
    v = raw.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ParseError(path, f"'{key}' should be a JSON object, found {_type_name(v)}")
    return v


def _fill_torch_npu(path: Path, raw: dict[str, Any], info: dict[str, Any]) -> None:
    config = _section(path, raw, "config")
    common = _section(path, config, "common_config")
    exp = _section(path, config, "experimental_config")
    end = _section(path, raw, "end_info")
    info.update(
        framework="torch_npu",
        format="torch_npu",
        rank=_rank(raw.get("rank_id")),
        framework_version=_opt_str(raw.get("torch_npu_version")),
        cann_version=_opt_str(raw.get("cann_version")),
        profiler_level=_opt_str(exp.get("_profiler_level", exp.get("profiler_level"))),
        aic_metrics=_aic_metrics(exp.get("_aic_metrics", exp.get("aic_metrics"))),
        export_type=_export_type(exp.get("_export_type", exp.get("export_type"))),
        schedule=_schedule(common.get("schedule")),
        record_shapes=_opt_bool(common.get("record_shapes")),
        profile_memory=_opt_bool(common.get("profile_memory")),
        with_stack=_opt_bool(common.get("with_stack")),
        end_time_ns=_opt_int(end.get("collectionTimeEnd")),
    )


def _fill_mindspore(raw: dict[str, Any], info: dict[str, Any]) -> None:
    params: dict[str, Any] = raw["profiler_parameters"] if isinstance(raw.get("profiler_parameters"), dict) else {}
    ms: dict[str, Any] = raw["ms_profiler_info"] if isinstance(raw.get("ms_profiler_info"), dict) else {}
    cann = _opt_str(raw.get("cann_version"))
    # MindSpore always records a schedule (wait=0, active=1 when none is given) and says in
    # is_set_schedule whether the user set one.
    schedule = _schedule(params.get("schedule"))
    if params.get("is_set_schedule") is False:
        schedule = None
    info.update(
        framework="mindspore",
        format="mindspore",
        rank=_rank(ms.get("rank_id", raw.get("rank_id"))),
        device_id=_opt_int(ms.get("device_id")),
        framework_version=_opt_str(raw.get("ms_version")),
        cann_version=None if cann in (None, "not known") else cann,
        profiler_level=_opt_str(params.get("profiler_level")),
        aic_metrics=_aic_metrics(params.get("aic_metrics")),
        export_type=_export_type(params.get("export_type")),
        schedule=schedule,
        record_shapes=_opt_bool(params.get("record_shapes")),
        profile_memory=_opt_bool(params.get("profile_memory")),
        with_stack=_opt_bool(params.get("with_stack")),
        context_mode=_context_mode(ms.get("context_mode")),
        jit_level=_opt_str(raw.get("jit_level")),
    )


def _fill_mindspore_legacy(raw: dict[str, Any], info: dict[str, Any]) -> None:
    info.update(
        framework="mindspore",
        format="mindspore_legacy",
        rank=_rank(raw.get("rank_id")),
        framework_version=_opt_str(raw.get("ms_version")),
        context_mode=_context_mode(raw.get("context_mode")),
        parallel_mode=_opt_str(raw.get("parallel_mode")),
        rank_size=_opt_int(raw.get("rank_size")),
        stage_num=_opt_int(raw.get("stage_num")),
    )


# ---------------------------------------------------------------------------------------------------
# profiler_metadata.json

_KNOWN_METADATA_KEYS = ("ENV_VARIABLES", "distributed_args", "parallel_group_info")


def read_profiler_metadata(path: Path) -> dict[str, Any]:
    """Read ``profiler_metadata.json``: environment, distributed args, parallel groups, user keys.

    Returns {"env": dict ({} when absent), "distributed_args": dict | None, "parallel_groups": list of
    {"group_id", "group_name", "group_rank", "global_ranks", "hash"} ([] when absent; hash is
    str(group_hash(group_id)), the text after '@' in communication op keys), "extra": every other
    top-level key (what the user added with add_metadata)}.
    """
    raw = load_json(path)
    if not isinstance(raw, dict):
        raise ParseError(path, f"expected a JSON object of metadata, found {_type_name(raw)}")

    env = raw.get("ENV_VARIABLES", {})
    if env is None:
        env = {}
    if not isinstance(env, dict):
        raise ParseError(path, f"'ENV_VARIABLES' should be a JSON object, found {_type_name(env)}")

    dargs = raw.get("distributed_args")
    if dargs is not None and not isinstance(dargs, dict):
        raise ParseError(path, f"'distributed_args' should be a JSON object, found {_type_name(dargs)}")

    groups_raw = raw.get("parallel_group_info")
    if groups_raw is None:
        groups_raw = {}
    if not isinstance(groups_raw, dict):
        raise ParseError(
            path, f"'parallel_group_info' should be a JSON object keyed by group id, found {_type_name(groups_raw)}"
        )
    groups = []
    for gid, g in groups_raw.items():
        if not isinstance(g, dict):
            raise ParseError(path, f"parallel_group_info['{gid}'] should be a JSON object, found {_type_name(g)}")
        ranks = g.get("global_ranks")
        if ranks is not None:
            # a list of plain ints taken as it is (a world group lists every rank: thousands at scale), else each
            # entry as _opt_int takes it
            numbers = (list(ranks) if all(type(r) is int for r in ranks) else [_opt_int(r) for r in ranks]) \
                if isinstance(ranks, list) else None
            if numbers is None or any(r is None for r in numbers):
                raise ParseError(path, f"parallel_group_info['{gid}'].global_ranks should be a list of rank numbers")
        groups.append(
            {
                "group_id": gid,
                "group_name": _opt_str(g.get("group_name")),
                "group_rank": _opt_int(g.get("group_rank")),
                "global_ranks": None if ranks is None else numbers,
                "hash": str(group_hash(gid)),
            }
        )

    extra = {k: v for k, v in raw.items() if k not in _KNOWN_METADATA_KEYS}
    return {"env": dict(env), "distributed_args": dargs, "parallel_groups": groups, "extra": extra}


# ---------------------------------------------------------------------------------------------------
# parallel layout

_SIZE_KEYS = {
    "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "dp": "data_parallel_size",
    "cp": "context_parallel_size",
    "ep": "expert_model_parallel_size",
}


def parallel_config(distributed_args: dict[str, Any] | None) -> ParallelLayout:
    """Parallel sizes from Megatron-style ``distributed_args``: tp, pp, dp, cp, ep, world_size, rank.

    A size the args do not give is None, except dp, which is derived as world / (tp*cp*pp) when
    world_size and the others are known and divide evenly (Megatron's data_parallel_size excludes cp).
    Where a rank sits in the grid: :meth:`msdiag.model.ParallelLayout.coordinates`.
    """
    args = distributed_args or {}
    cfg: dict[str, int | None] = {k: _opt_int(args.get(v)) for k, v in _SIZE_KEYS.items()}
    cfg["world_size"] = _opt_int(args.get("world_size"))
    cfg["rank"] = _opt_int(args.get("rank"))
    world, tp, pp, cp = cfg["world_size"], cfg["tp"], cfg["pp"], cfg["cp"]
    if cfg["dp"] is None and world and tp and pp:
        model = tp * pp * (cp or 1)
        if world % model == 0:
            cfg["dp"] = world // model
    return ParallelLayout(**cfg)


# ---------------------------------------------------------------------------------------------------
# the rank's typed description (RankInfo fields) from the two files

# profiler_info keys -> RankInfo fields
_INFO_FIELDS = {
    "framework": "framework",
    "format": "info_format",
    "framework_version": "framework_version",
    "cann_version": "cann_version",
    "profiler_level": "profiler_level",
    "aic_metrics": "aic_metrics",
    "export_type": "export_type",
    "profile_memory": "profile_memory",
    "context_mode": "context_mode",
    "jit_level": "jit_level",
    "parallel_mode": "parallel_mode",
    "rank_size": "rank_size",
    "stage_num": "stage_num",
}


def info_of_profiler_info(info: dict[str, Any]) -> dict[str, Any]:
    """RankInfo fields from :func:`read_profiler_info`'s dict (device_id only where recorded)."""
    out = {field: info.get(key) for key, field in _INFO_FIELDS.items()}
    if info.get("device_id") is not None:
        out["device_id"] = info["device_id"]
    return out


def info_of_metadata(md: dict[str, Any]) -> dict[str, Any]:
    """RankInfo fields from :func:`read_profiler_metadata`'s dict: the layout and the groups."""
    dargs = md.get("distributed_args")
    return {
        "layout": None if dargs is None else parallel_config(dargs),
        "groups": [ParallelGroup(**g) for g in md.get("parallel_groups") or []],
    }


def _r_profiler_info(p: Path, ctx: Ctx) -> Read:
    return Read(info=info_of_profiler_info(read_profiler_info(p)))


def _r_profiler_metadata(p: Path, ctx: Ctx) -> Read:
    return Read(info=info_of_metadata(read_profiler_metadata(p)))


PROFILER_INFO = Src("profiler_info_{rank}.json", read=_r_profiler_info,
                    absent="no profiler_info_N.json: framework, version and profiler settings unknown")
PROFILER_METADATA = Src("profiler_metadata.json", read=_r_profiler_metadata,
                        absent="no profiler_metadata.json: parallel configuration unknown")
#: the two JSON files beside an Ascend rank's output (text or SQLite export)
JSON_SOURCES = (PROFILER_INFO, PROFILER_METADATA)
