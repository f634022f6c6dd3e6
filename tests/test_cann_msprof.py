"""Raw CANN msprof output (PROF_* folders) on the corpus, expectations derived independently (csv / json
modules, or by hand in a comment)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from msdiag.errors import ParseError
from msdiag.ingest import cann_msprof, legacy
from msdiag.metrics.breakdown import step_breakdown
from msdiag.metrics.devices import peak_from_info_json

OLD0 = "PROF_000001_20230818142704322_COJGGGCANRMICFBC"  # device_0, 2023 AlexNet run (MindInsight test data)
OLD1 = "PROF_000001_20230818142704567_GQFAMHBKGODKJMLA"  # device_1
L2 = "vllm-ascend-prof/PROF_GROUP_20260823_165254/PROF_L2Cache/PROF_000001_20260823165523228_00627338KRCOPCPN"
MEM = "vllm-ascend-prof/prof_unpack/PROF_GROUP_20260823_165254/PROF_Memory/PROF_000001_20260823165413436_00626258NIRJNPIC"


@pytest.fixture(scope="module")
def msprof(corpus: Path) -> Path:
    d = corpus / "cann-msprof"
    if not d.is_dir():
        pytest.skip(f"{d} is absent")
    return d


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _events(path: Path) -> list[dict]:
    return [e for e in json.loads(path.read_text()) if e.get("ph") == "X"]


def _copytree(src: Path, dst: Path) -> None:
    """A writable copy of a read-only corpus folder (CI runs the tests as a normal user)."""
    shutil.copytree(src, dst, copy_function=shutil.copyfile)
    for p in [dst, *dst.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)


def _check_identities(steps) -> None:  # type: ignore[no-untyped-def]
    for _, s in steps.iterrows():
        tol = 1e-6 * s["total_us"]
        assert s["computing_us"] + s["communication_exposed_us"] + s["free_us"] == pytest.approx(s["total_us"], abs=tol)
        for c in ("computing_us", "communication_us", "communication_exposed_us", "free_us"):
            assert -tol <= s[c] <= s["total_us"] + tol


# ---- discovery ----------------------------------------------------------------------------------


def test_find_ranks(msprof: Path) -> None:
    # rank = info.json.N rank_id where there is one (0 and 1 in the 2023 folders), else the device id
    # (the vllm folders have no device_N/: their CSVs' Device_id column says 0)
    r0 = json.loads((msprof / OLD0 / "device_0" / "info.json.0").read_text())["rank_id"]
    r1 = json.loads((msprof / OLD1 / "device_1" / "info.json.1").read_text())["rank_id"]
    found = cann_msprof.find_msprof_ranks(msprof)
    assert sorted((r, p.relative_to(msprof).as_posix()) for r, p in found) == sorted(
        [(r0, OLD0), (r1, OLD1), (0, L2), (0, MEM)]
    )
    assert cann_msprof.find_msprof_ranks(msprof / OLD1) == [(1, msprof / OLD1)]
    assert cann_msprof.is_msprof_folder(msprof / "vllm-ascend-prof")


def test_ascend_ms_rank_folders_are_not_entered(tmp_path: Path) -> None:
    prof = tmp_path / "x_ascend_ms" / "PROF_000001_20250101000000000_AAAA" / "device_0"
    prof.mkdir(parents=True)
    (tmp_path / "x_ascend_ms" / "ASCEND_PROFILER_OUTPUT").mkdir()
    assert cann_msprof.find_msprof_ranks(tmp_path) == []


# ---- device description: the MFU peak ---------------------------------------------------------------


@pytest.mark.parametrize("prof,rank", [(OLD0, 0), (OLD1, 1)])
def test_info_json_peak(msprof: Path, prof: str, rank: int) -> None:
    rd = cann_msprof.load_msprof_rank(msprof / prof, rank)
    info = json.loads((msprof / prof / f"device_{rank}" / f"info.json.{rank}").read_text())["DeviceInfo"][0]
    assert rd.family == "cann_msprof"
    assert rd.info.ai_core_num == int(info["ai_core_num"]) == 32
    assert rd.info.aic_frequency_mhz == float(info["aic_frequency"]) == 1000.0
    # 32 AI Cores x 1000 MHz x 16*16*16*2 FLOPs per cycle = 262.144 TFLOP/s
    assert peak_from_info_json(Path(rd.info.info_json)) == pytest.approx(32 * 1000e6 * 16 * 16 * 16 * 2 / 1e12)
    assert peak_from_info_json(Path(rd.info.info_json)) == pytest.approx(262.144)


# ---- exported CSVs (CANN 8) ---------------------------------------------------------------------------


def test_op_summary_kernels(msprof: Path) -> None:
    path = next((msprof / L2 / "mindstudio_profiler_output").glob("op_summary_*.csv"))
    rows = _csv_rows(path)
    rd = cann_msprof.load_msprof_rank(msprof / L2, 0)
    k = rd.tables["kernels"]
    assert len(k) == len(rows) == 3
    assert list(k["name"]) == [r["Op Name"] for r in rows]
    assert list(k["core"]) == [r["Task Type"] for r in rows]
    assert k["start_us"].iloc[2] == pytest.approx(float(rows[2]["Task Start Time(us)"].strip()))
    assert k["input_shapes"].iloc[0] == "512,16"  # '"512,16"' as written
    assert set(k["kind"]) == {"compute"}
    assert rd.info.kernels_from == path.name
    b = step_breakdown(rd)
    assert len(b) == 1 and b["step"].isna().all()  # no step markers in raw CANN output: one row
    _check_identities(b)


def test_loose_op_summary(msprof: Path) -> None:
    # op_summary_1.csv lies in cann-msprof/ itself (a copied export, with a Step Id column)
    rows = _csv_rows(msprof / "op_summary_1.csv")
    rd = cann_msprof.load_msprof_rank(msprof, 0)
    k = rd.tables["kernels"]
    assert len(k) == len(rows) == 21
    assert int((k["kind"] == "communication").sum()) == sum(1 for r in rows if r["Task Type"] == "HCCL") == 4
    assert set(k["step"]) == {int(r["Step Id"]) for r in rows}
    b = step_breakdown(rd)
    assert list(b["step"]) == [2]
    _check_identities(b)


def test_op_statistic_and_task_time(msprof: Path) -> None:
    out = msprof / MEM / "mindstudio_profiler_output"
    stat = _csv_rows(next(out.glob("op_statistic_*.csv")))
    tasks = _csv_rows(next(out.glob("task_time_*.csv")))
    rd = cann_msprof.load_msprof_rank(msprof / MEM, 0)
    st = rd.tables["op_stats"].set_index("op_type")
    assert len(st) == len(stat) == 2
    assert st.loc["GroupedMatmul", "ratio"] == pytest.approx(float(stat[0]["Ratio(%)"]) / 100)  # 65.435 %
    assert st.loc["GroupedMatmul", "core"] == "MIX_AIC"
    k = rd.tables["kernels"]  # no op_summary here: kernels from task_time
    assert len(k) == len(tasks) == 6
    compute = [t for t in tasks if t["kernel_type"] in ("AI_VECTOR_CORE", "MIX_AIC")]
    assert int((k["kind"] == "compute").sum()) == len(compute) == 3
    assert set(k.loc[k["kind"] == "compute", "type"]) == {"OnesLike", "GroupedMatmul"}
    gm = next(t for t in tasks if t["kernel_type"] == "MIX_AIC")
    assert k.loc[k["core"] == "MIX_AIC", "start_us"].iloc[0] == pytest.approx(float(gm["task_start(us)"].strip()))
    assert k.loc[k["core"] == "MIX_AIC", "dur_us"].iloc[0] == pytest.approx(float(gm["task_time(us)"]))


# ---- CANN 5/6 timeline slices -------------------------------------------------------------------------


def test_step_trace_slice(msprof: Path) -> None:
    path = msprof / OLD0 / "device_0" / "timeline" / "step_trace_0_2_1.json"
    its = {e["args"]["Iteration ID"]: e for e in _events(path) if e.get("cat") == "Iteration Time"}
    rd = cann_msprof.load_msprof_rank(msprof / OLD0, 0)
    st = rd.tables["profiler_steps"].set_index("step")
    assert list(st.index) == sorted(its) == list(range(1, 11))
    # step 1 runs over its own Iteration Time: 47587.81 us
    assert st.loc[1, "total_us"] == pytest.approx(its[1]["dur"])
    # step 2 runs from iteration 1's end to its own end, its data wait is FP Start(2) - Iteration End(1)
    # = 56635944375.25 - 56635912240.3 = 32134.95 us (CANN's "Data_aug Bound" of the iteration)
    a1, a2 = its[1]["args"], its[2]["args"]
    assert st.loc[2, "total_us"] == pytest.approx(a2["Iteration End"] - a1["Iteration End"])
    assert st.loc[2, "data_wait_us"] == pytest.approx(a2["FP Start"] - a1["Iteration End"])
    assert st.loc[2, "data_wait_us"] == pytest.approx(32134.95, abs=0.01)
    # the Reduce (AllReduce) of iteration 1 runs after BP End: exposed
    red = next(e for e in _events(path) if e["name"] == "Reduce_1_0")
    assert st.loc[1, "communication_exposed_us"] == pytest.approx(red["dur"])
    _check_identities(rd.tables["profiler_steps"])


def test_task_time_slice_and_breakdown_match_overlap_analysis(msprof: Path) -> None:
    tl = msprof / OLD0 / "device_0" / "timeline"
    tasks = _events(tl / "task_time_0_2_1.json")
    hccl_types = {"NOTIFY_WAIT", "NOTIFY_RECORD", "REDUCE_ASYNC_V2", "MEMCPY_ASYNC"}
    rd = cann_msprof.load_msprof_rank(msprof / OLD0, 0)
    k = rd.tables["kernels"]
    # HCCL's notify / copy tasks are replaced by the one AllReduce op of hccl_0_2_1.json
    assert len(k) == len([t for t in tasks if t["args"]["Task Type"] not in hccl_types]) + 1 == 152
    assert list(k.loc[k["kind"] == "communication", "name"]) == ["Default/AllReduce-op534_0"]
    assert set(k["step"].dropna()) == {1}  # the slice covers iteration 1 only
    assert any("covers 1 of the 10 steps" in n for n in rd.notes)
    b = step_breakdown(rd).iloc[0]
    # CANN's own Overlap Analysis lanes in msprof_0_2_1.json for this iteration
    ov = {}
    for e in _events(tl / "msprof_0_2_1.json"):
        if e["name"] in ("Computing", "Free", "Communication", "Communication(Not Overlapped)"):
            ov[e["name"]] = ov.get(e["name"], 0.0) + e["dur"]
    assert b["computing_us"] == pytest.approx(ov["Computing"], abs=0.5)  # 5914.58
    assert b["communication_us"] == pytest.approx(ov["Communication"], abs=0.5)  # 41534.3
    assert b["communication_exposed_us"] == pytest.approx(ov["Communication(Not Overlapped)"], abs=0.5)
    assert b["free_us"] == pytest.approx(ov["Free"], abs=0.5)  # 113.63
    prof_total = rd.tables["profiler_steps"].set_index("step").loc[1, "total_us"]
    assert b["total_us"] == pytest.approx(prof_total, rel=0.01)


def test_hccl_slice(msprof: Path) -> None:
    path = msprof / OLD0 / "device_0" / "timeline" / "hccl_0_2_1.json"
    events = _events(path)
    op = next(e for e in events if "args" not in e)  # the op-level row: Default/AllReduce-op534_0, 41534.3 us
    rd = cann_msprof.load_msprof_rank(msprof / OLD0, 0)
    co = rd.tables["comm_ops"].iloc[0]
    assert co["op_name"] == op["name"] and co["op_type"] == "AllReduce" and co["step"] == 1
    assert co["elapse_us"] == pytest.approx(op["dur"])
    assert co["transit_us"] + co["wait_us"] + co["idle_us"] == pytest.approx(op["dur"])
    # plane 0 (tid 0) Memcpy / Reduce_Inline durations: the transit time
    plane0 = [e for e in events if e.get("tid") == 0 and "args" in e]
    assert co["transit_us"] == pytest.approx(sum(e["dur"] for e in plane0 if e["args"]["task type"] in ("Memcpy", "Reduce_Inline")))
    # bytes moved over HCCS links (link type HCCS), all planes: MB of 1e6 bytes
    hccs = [e for e in events if "args" in e and e["args"].get("link type") == "HCCS" and e["args"]["task type"] in ("Memcpy", "Reduce_Inline")]
    tr = rd.tables["comm_transport"].set_index("transport")
    assert tr.loc["HCCS", "size_mb"] == pytest.approx(sum(e["args"]["size(Byte)"] for e in hccs) / 1e6)
    assert tr.loc["HCCS", "bandwidth_gbps"] == pytest.approx(tr.loc["HCCS", "size_mb"] / (tr.loc["HCCS", "time_us"] / 1000))
    lanes = rd.tables["timeline"]
    assert list(lanes.loc[lanes["lane"] == "hccl", "name"]) == [op["name"]]
    assert list(lanes.loc[lanes["lane"] == "step", "name"]) == ["Iteration 1"]
    assert not lanes["track"].astype(str).str.startswith("Step Trace").to_numpy()[(lanes["lane"] == "device").to_numpy()].any()
    assert rd.meta["clock"]["timeline_slices"] == "monotonic-raw us"


def test_msprof_json_export_reads_like_trace_view(tmp_path: Path, msprof: Path) -> None:
    # a CANN 8 export keeps the same Chrome trace in mindstudio_profiler_output/msprof_<ts>.json
    prof = tmp_path / "PROF_000001_20230818142704322_X"
    out = prof / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    shutil.copyfile(msprof / OLD0 / "device_0" / "timeline" / "msprof_0_2_1.json", out / "msprof_20230818142802.json")
    rd = cann_msprof.load_msprof_rank(prof, 0)
    tl = rd.tables["timeline"]
    n_dev = sum(1 for e in _events(out / "msprof_20230818142802.json") if e["pid"] == 3 and e["tid"] != 10036)
    assert int((tl["lane"] == "device").sum()) == n_dev  # Ascend Hardware streams, Step Trace thread excluded
    assert int((tl["lane"] == "overlap").sum()) > 0


# ---- several devices in one PROF folder, other exports -------------------------------------------------


def test_device_filter(tmp_path: Path, msprof: Path) -> None:
    src = next((msprof / L2 / "mindstudio_profiler_output").glob("op_summary_*.csv"))
    lines = src.read_text().splitlines()
    out = tmp_path / "PROF_000001_20260101000000000_X" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    # the same 3 rows for device 0 and, renumbered, for device 1 (Device_id is the first column)
    body = lines[1:] + ["1" + ln[1:] for ln in lines[1:2]]
    (out / "op_summary_20260101000000.csv").write_text("\n".join([lines[0]] + body) + "\n")
    assert [r for r, _ in cann_msprof.find_msprof_ranks(tmp_path)] == [0, 1]
    assert len(cann_msprof.load_msprof_rank(out.parent, 0).tables["kernels"]) == 3
    assert len(cann_msprof.load_msprof_rank(out.parent, 1).tables["kernels"]) == 1


def test_communication_statistic(tmp_path: Path) -> None:
    out = tmp_path / "PROF_000001_20260101000000000_X" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    # header from the msprof docs (formats.md)
    (out / "communication_statistic_20260101000000.csv").write_text(
        "Device_id,OP Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"
        "0,hcom_allReduce_,4,400.0,90.0,100.0,110.0,80.0\n0,hcom_broadcast_,1,100.0,100.0,100.0,100.0,20.0\n"
    )
    st = cann_msprof.load_msprof_rank(out.parent, 0).tables["op_stats"].set_index("op_type")
    assert st.loc["hcom_allReduce_", "core"] == "HCCL"
    assert st.loc["hcom_allReduce_", "count"] == 4 and st.loc["hcom_allReduce_", "ratio"] == pytest.approx(0.8)


def test_legacy_folder_with_prof_output(tmp_path: Path, msprof: Path, corpus: Path) -> None:
    # MindSpore 2.1/2.2 kept the raw CANN output (PROF_*) beside the flat files: kernels come from it
    _copytree(msprof / OLD0, tmp_path / OLD0)
    shutil.copyfile(corpus / "mindspore-legacy" / "single-rank" / "step_trace_raw_0_detail_time.csv",
                    tmp_path / "step_trace_raw_0_detail_time.csv")
    rd = legacy.load_legacy_rank(tmp_path, 0)  # the legacy format reads the PROF_* beside itself
    assert len(rd.tables["kernels"]) == 152
    assert rd.info.ai_core_num == 32
    assert any(s.name.startswith(OLD0 + "/") and s.status == "present" for s in rd.sources)
    assert len(rd.tables["profiler_steps"]) == 20  # still the flat step trace's rows


# ---- bad input -------------------------------------------------------------------------------------------


def test_truncated_op_summary(tmp_path: Path, msprof: Path) -> None:
    src = next((msprof / L2 / "mindstudio_profiler_output").glob("op_summary_*.csv"))
    out = tmp_path / "PROF_000001_20260101000000000_X" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    text = src.read_text()
    (out / src.name).write_text(text[: len(text) - 60])
    with pytest.raises(ParseError, match=src.name):
        cann_msprof.load_msprof_rank(out.parent, 0)


def test_empty_step_trace_slice(tmp_path: Path, msprof: Path) -> None:
    prof = tmp_path / OLD0
    _copytree(msprof / OLD0, prof)
    (prof / "device_0" / "timeline" / "step_trace_0_2_1.json").write_text("")
    with pytest.raises(ParseError, match="step_trace_0_2_1.json.*empty"):
        cann_msprof.load_msprof_rank(prof, 0)
    (prof / "device_0" / "timeline" / "step_trace_0_2_1.json").write_text('[{"name": "Iteration 1", "ph": "X", "ts": 1')
    with pytest.raises(ParseError, match="step_trace_0_2_1.json.*truncated"):
        cann_msprof.load_msprof_rank(prof, 0)


def test_broken_info_json_is_a_failed_source(tmp_path: Path, msprof: Path) -> None:
    prof = tmp_path / OLD1
    _copytree(msprof / OLD1, prof)
    (prof / "device_1" / "info.json.1").write_text('{"DeviceInfo": [{"id": 1}]}')
    (prof / "device_1" / "timeline" / "hccl_1_0_1.json").write_text("[")
    rd = cann_msprof.load_msprof_rank(prof, 1)
    by = {s.name: s for s in rd.sources}
    assert by["device_1/info.json.1"].status == "failed" and "ai_core_num" in str(by["device_1/info.json.1"].reason)
    assert by["device_1/timeline/hccl_1_0_1.json"].status == "failed"
    assert rd.info.info_json is None
    assert len(rd.tables["kernels"]) > 0  # the rest is read
