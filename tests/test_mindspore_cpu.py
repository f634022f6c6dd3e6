"""Readers of the MindSpore CPU profiler's FRAMEWORK/ files, on every capture of the corpus.

Expected values are derived here independently of the readers: by parsing the raw files with plain
Python (csv, json, str.split), or quoted from the file in a comment.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from msdiag import model
from msdiag.errors import ParseError
from msdiag.ingest.mindspore_cpu import (
    op_kind,
    op_type_of,
    read_cpu_framework,
    read_cpu_memory_record,
    read_cpu_op_timestamps,
    read_cpu_op_type_info,
)

FOLDERS = [
    "legacy_Profiler_pynative_mem",
    "legacy_Profiler_graph_mem",
    "profile_schedule_pynative",
    "msrun_dp2_pynative",
    "minddata_manual",
    "profile_metadata_tiny",
]


def captures(corpus: Path, folder: str) -> list[tuple[Path, int]]:
    """(FRAMEWORK dir, rank) of every *_ascend_ms dir of a corpus folder."""
    base = corpus / "mindspore-cpu" / folder
    if not base.is_dir():
        pytest.skip(f"{base} is absent")
    out = []
    for fw in sorted(base.glob("*_ascend_ms/FRAMEWORK")):
        (ts_file,) = fw.glob("cpu_op_execute_timestamp_*.txt")
        out.append((fw, int(re.search(r"_(\d+)\.txt$", ts_file.name).group(1))))
    assert out, f"no *_ascend_ms/FRAMEWORK in {base}"
    return out


def plain_launches(ts_file: Path) -> list[tuple[str, int, float]]:
    """(name, start_ns, dur_ms) of every launch, parsed with str.split only."""
    out = []
    for line in ts_file.read_text().splitlines():
        if not line.strip():
            continue
        name, _kind, times = line.split(";")
        for t in times.split():
            start, dur, _tid = t.split(",")
            out.append((name, int(start), float(dur)))
    return out


def is_tensor_graph_op(op_name: str) -> bool:
    return re.search(r"-op\d+$", op_name) is not None


# --- cpu_framework_<rank>.txt -------------------------------------------------------------


def plain_shape(item: str) -> str:
    """'[16, 32, 64]' -> '16,32,64' via json; NoShape and TupleShape(NoShape, ...) -> ''."""
    if item.startswith("["):
        return ",".join(str(d) for d in json.loads(item))
    assert item == "NoShape" or set(item[len("TupleShape(") : -1].replace(" ", "").split(",")) == {"NoShape"}, item
    return ""


@pytest.mark.parametrize("folder", FOLDERS)
def test_framework_shapes_match_plain_parse(corpus: Path, folder: str) -> None:
    for fw, rank in captures(corpus, folder):
        path = fw / f"cpu_framework_{rank}.txt"
        df = read_cpu_framework(path, rank)
        assert list(df.columns) == list(model.HOST_SHAPES.columns)

        expected: dict[tuple[str, str], str] = {}
        continuation = 0
        for line in path.read_text().splitlines():
            op_type, op_name, _graph_id, *inputs = line.split(";")
            if op_type == "" and op_name == "":
                continuation += 1
                continue
            values = [i.split(":", 1)[1] for i in inputs if i]
            expected.setdefault((op_name, ";".join(plain_shape(v) for v in values)), op_type)

        got = {(r.op_name, r.input_shapes): r.op_type for r in df.itertuples()}
        assert got == expected
        assert len(df) == len(expected)  # deduplicated
        assert (df["rank"] == rank).all()

        # The ';;<graph_id>;' lines are PyBoost launches: one per launch of an op whose name has no
        # -opN suffix in cpu_op_detail_info (MatMul, GeLU, Softmax, ... in PyNative; none in graph mode).
        with open(fw / f"cpu_op_detail_info_{rank}.csv", newline="") as f:
            pyboost = sum(int(r["op_occurrences"]) for r in csv.DictReader(f) if not is_tensor_graph_op(r["op_name"]))
        assert continuation == pyboost


def test_framework_known_shapes_graph_mode(corpus: Path) -> None:
    ((fw, rank),) = captures(corpus, "legacy_Profiler_graph_mem")
    df = read_cpu_framework(fw / "cpu_framework_0.txt", rank)
    shapes = df.groupby("op_name")["input_shapes"].apply(list).to_dict()
    # "MatMul;MatMul-op4;1799302551;input_1:[512, 192];input_2:[192, 64];input_3:NoShape;input_4:NoShape;"
    assert shapes["MatMul-op4"] == ["512,192;192,64;;"]
    # MatMul-op0 names six MatMuls in different scopes, each with its own shapes (6 distinct lines in the file)
    assert len(shapes["MatMul-op0"]) == 6
    assert "16,10;10,64;;" in shapes["MatMul-op0"]
    # "ReduceMean;ReduceMean-op0;1799302551;input_1:[16, 32, 64];input_2:TupleShape(NoShape);input_3:NoShape;"
    assert shapes["ReduceMean-op0"] == ["16,32,64;;"]
    # "Adam;Adam-op0;...;input_1:[64];input_2:[64];input_3:[64];input_4:[];...;input_9:[];input_10:[64];input_11:NoShape;"
    assert shapes["Adam-op0"] == ["64;64;64;;;;;;;64;"]
    assert df.loc[df.op_name == "MatMul-op4", "op_type"].tolist() == ["MatMul"]


def test_framework_known_shapes_pynative(corpus: Path) -> None:
    ((fw, rank),) = captures(corpus, "legacy_Profiler_pynative_mem")
    df = read_cpu_framework(fw / "cpu_framework_0.txt", rank)
    # "LayerNorm;LayerNorm-op0;2826907031;input_1:[16, 32, 64];input_2:[64];input_3:[64];input_4:NoShape;..."
    assert df.loc[df.op_name == "LayerNorm-op0", "input_shapes"].tolist() == ["16,32,64;64;64;;;"]
    # PyNative MatMul runs through PyBoost: no shapes recorded for it.
    assert "MatMul" not in set(df["op_type"])


# --- cpu_ms_memory_record_<rank>.txt ------------------------------------------------------


@pytest.mark.parametrize("folder", FOLDERS)
def test_memory_record(corpus: Path, folder: str) -> None:
    found = 0
    for fw, rank in captures(corpus, folder):
        path = fw / f"cpu_ms_memory_record_{rank}.txt"
        if not path.exists():
            continue  # captured without profile_memory
        found += 1
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        header, data = rows[0], rows[1:]
        assert header == ["Timestamp(ns)", "Total Allocated(Byte)", "Total Reserved(Byte)", "Total Active(Byte)"]
        df = read_cpu_memory_record(path, rank)
        assert list(df.columns) == list(model.MEMORY.columns)
        assert len(df) == len(data)
        assert df["allocated_mb"].max() == max(int(r[1]) for r in data) / 2**20
        assert df["reserved_mb"].max() == max(int(r[2]) for r in data) / 2**20
        assert df["active_mb"].iloc[-1] == int(data[-1][3]) / 2**20
        assert df["ts_us"].iloc[0] == int(data[0][0]) / 1000
        assert set(df["device"]) == {f"CPU:{rank}"}
        assert set(df["component"]) == {"MindSpore"} and set(df["source"]) == {"cpu_ms_memory_record"}
    if folder in ("legacy_Profiler_pynative_mem", "legacy_Profiler_graph_mem", "msrun_dp2_pynative"):
        assert found, "CAPTURES.md says this capture was made with profile_memory"


def test_memory_known_values(corpus: Path) -> None:
    ((fw, rank),) = captures(corpus, "legacy_Profiler_pynative_mem")
    df = read_cpu_memory_record(fw / "cpu_ms_memory_record_0.txt", rank)
    # first data line: "1795942815495021795,512,1073741824,512"
    assert df["ts_us"].iloc[0] == pytest.approx(1795942815495021.795, abs=0.5)
    assert df["allocated_mb"].iloc[0] == 512 / 2**20
    assert df["reserved_mb"].iloc[0] == 1024.0  # 1073741824 bytes = 1 GiB pool


# --- cpu_op_type_info_<rank>.csv ----------------------------------------------------------


@pytest.mark.parametrize("folder", FOLDERS)
def test_op_type_info_units(corpus: Path, folder: str) -> None:
    for fw, rank in captures(corpus, folder):
        df = read_cpu_op_type_info(fw / f"cpu_op_type_info_{rank}.csv", rank)
        assert list(df.columns) == list(model.OP_STATS.columns)
        launches = plain_launches(fw / f"cpu_op_execute_timestamp_{rank}.txt")
        per_type_ms: dict[str, float] = defaultdict(float)
        per_type_n: Counter[str] = Counter()
        for name, _start, dur_ms in launches:
            t = re.sub(r"-op\d+$", "", name.split("/")[-1])
            per_type_ms[t] += dur_ms
            per_type_n[t] += 1
        # count = launches of the type in the capture
        assert dict(zip(df["op_type"], df["count"].astype(int))) == dict(per_type_n)
        # total_compute_time is ms (6 significant digits): total_us = 1000 x summed dur_ms
        for row in df.itertuples():
            assert row.total_us == pytest.approx(per_type_ms[row.op_type] * 1000, rel=1e-5, abs=0.05)
            assert row.avg_us == pytest.approx(row.total_us / row.count, rel=1e-4)
        # percent is a 0..1 share of the file's total
        assert df["ratio"].between(0, 1).all()
        assert df["ratio"].sum() == pytest.approx(1.0, abs=1e-5)
        total = df["total_us"].sum()
        for row in df.itertuples():
            assert row.ratio == pytest.approx(row.total_us / total, rel=1e-3, abs=1e-7)
        assert set(df["core"]) == {"CPU"}
        assert df["min_us"].isna().all() and df["max_us"].isna().all()


# --- cpu_op_execute_timestamp_<rank>.txt vs trace_view.json ------------------------------------


def trace_cpu_ops(ascend_ms: Path) -> list[dict]:
    """The X events of trace_view.json's 'CPU OP' process, read with plain json."""
    events = json.loads((ascend_ms / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    pids = {
        e["pid"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"] == "CPU OP"
    }
    assert len(pids) == 1
    return [e for e in events if e.get("ph") == "X" and e["pid"] in pids]


@pytest.mark.parametrize("folder", FOLDERS)
def test_timestamps_agree_with_trace_view(corpus: Path, folder: str) -> None:
    for fw, rank in captures(corpus, folder):
        df = read_cpu_op_timestamps(fw / f"cpu_op_execute_timestamp_{rank}.txt", rank)
        assert list(df.columns) == list(model.KERNELS.columns)
        trace = trace_cpu_ops(fw.parent)
        assert len(df) == len(trace)
        # trace 'dur' is us quantized to 0.001: sums agree within half a unit per event
        trace_dur = sum(float(e["dur"]) for e in trace)
        assert abs(df["dur_us"].sum() - trace_dur) <= 0.0005 * len(trace) + 1e-6
        # Same launches: per op name, the same sorted start times. MindSpore writes the trace's ts as
        # Decimal(start_ns) * Decimal(0.001) with a float 0.001 (= 0.001000000000000000020817...), so
        # every trace ts is about 0.037 us late for 2026 epoch timestamps (1.8e18 ns x 2.08e-20); a
        # float64 at 1.8e15 us also resolves only 0.25 us. Hence the 0.5 us tolerance.
        ours: dict[str, list[float]] = defaultdict(list)
        theirs: dict[str, list[float]] = defaultdict(list)
        for name, start in zip(df["name"], df["start_us"]):
            ours[name].append(start)
        for e in trace:
            theirs[e["name"]].append(float(e["ts"]))
        assert ours.keys() == theirs.keys()
        for name in ours:
            a, b = sorted(ours[name]), sorted(theirs[name])
            assert len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= 0.5, name
        assert df["start_us"].is_monotonic_increasing
        assert (df["core"] == "CPU").all() and df["stream"].isna().all() and df["step"].isna().all()
        assert df["rank"].eq(rank).all()


@pytest.mark.parametrize("folder", FOLDERS)
def test_timestamps_types_and_kinds(corpus: Path, folder: str) -> None:
    for fw, rank in captures(corpus, folder):
        df = read_cpu_op_timestamps(fw / f"cpu_op_execute_timestamp_{rank}.txt", rank)
        with open(fw / f"cpu_op_type_info_{rank}.csv", newline="") as f:
            type_counts = {r["op_type"]: int(r["type_occurrences"]) for r in csv.DictReader(f)}
        assert df["type"].value_counts().to_dict() == type_counts
        comm = df[df["kind"] == "communication"]
        if folder == "msrun_dp2_pynative":
            # cpu_op_type_info: "AllReduce,156,26,..." on both ranks
            assert set(comm["type"]) == {"AllReduce"} and len(comm) == 156
        else:
            assert comm.empty
        assert set(df["kind"]) <= {"compute", "communication"}


def test_timestamps_known_launch(corpus: Path) -> None:
    ((fw, rank),) = captures(corpus, "legacy_Profiler_pynative_mem")
    df = read_cpu_op_timestamps(fw / "cpu_op_execute_timestamp_0.txt", rank)
    # first line: "Default/Assign-op0;HostCpuOps;1795942816259642489,0.012439,0 ..."
    row = df[(df["name"] == "Default/Assign-op0")].iloc[0]
    assert row["type"] == "Assign"
    assert row["start_us"] == 1795942816259642489 / 1000
    assert row["dur_us"] == pytest.approx(12.439)


# --- units and errors -----------------------------------------------------------------------


def test_op_type_of_and_kind() -> None:
    assert op_type_of("Default/optimizer-Adam/Adam-op2") == "Adam"
    assert op_type_of("Expand/_SoftmaxBackward/Mul-op1") == "Mul"
    assert op_type_of("GeLU") == "GeLU"
    assert op_kind("AllReduce") == "communication"
    assert op_kind("AlltoAll") == op_kind("AllToAll") == op_kind("Receive") == "communication"
    assert op_kind("ReduceSum") == "compute" and op_kind("MatMul") == "compute"


READERS = [
    (read_cpu_framework, "cpu_framework_0.txt"),
    (read_cpu_memory_record, "cpu_ms_memory_record_0.txt"),
    (read_cpu_op_type_info, "cpu_op_type_info_0.csv"),
    (read_cpu_op_timestamps, "cpu_op_execute_timestamp_0.txt"),
]


@pytest.mark.parametrize("reader,name", READERS)
def test_empty_file_is_a_parse_error(tmp_path: Path, reader, name: str) -> None:
    path = tmp_path / name
    path.write_text("")
    with pytest.raises(ParseError, match="empty") as e:
        reader(path, 0)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("reader,name", READERS)
def test_missing_file_is_a_parse_error(tmp_path: Path, reader, name: str) -> None:
    with pytest.raises(ParseError, match="cannot be read"):
        reader(tmp_path / name, 0)


@pytest.mark.parametrize(
    "reader,name,text,problem",
    [
        (read_cpu_framework, "cpu_framework_0.txt", "just some words\n", "expected"),
        (read_cpu_framework, "cpu_framework_0.txt", "MatMul;MatMul-op0;12;input_1:[16, x];\n", "shape"),
        (read_cpu_framework, "cpu_framework_0.txt", "Default/MatMul-op0;HostCpuOps;1,0.5,0\n", "graph id"),
        (read_cpu_memory_record, "cpu_ms_memory_record_0.txt", "a,b\n1,2\n", "missing column"),
        (
            read_cpu_memory_record,
            "cpu_ms_memory_record_0.txt",
            "Timestamp(ns),Total Allocated(Byte),Total Reserved(Byte),Total Active(Byte)\n12,x,3,4\n",
            "non-number",
        ),
        (read_cpu_op_type_info, "cpu_op_type_info_0.csv", "op_type,count\nMatMul,3\n", "missing column"),
        (read_cpu_op_timestamps, "cpu_op_execute_timestamp_0.txt", "MatMul\n", "expected"),
        (read_cpu_op_timestamps, "cpu_op_execute_timestamp_0.txt", "MatMul;HostCpuOps;12,0.5\n", "expected"),
        (read_cpu_op_timestamps, "cpu_op_execute_timestamp_0.txt", "MatMul;HostCpuOps;12,abc,0\n", "not a number"),
    ],
)
def test_malformed_file_is_a_parse_error(tmp_path: Path, reader, name: str, text: str, problem: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ParseError, match=problem) as e:
        reader(path, 0)
    assert str(path) in str(e.value)


def test_framework_only_pyboost_lines_is_empty_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "cpu_framework_0.txt"
    path.write_text(";;3946786199;\n;;3946786199;\n")
    df = read_cpu_framework(path, 0)
    assert df.empty and list(df.columns) == list(model.HOST_SHAPES.columns)


def test_memory_header_only_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "cpu_ms_memory_record_0.txt"
    path.write_text("Timestamp(ns),Total Allocated(Byte),Total Reserved(Byte),Total Active(Byte)\n")
    df = read_cpu_memory_record(path, 0)
    assert df.empty and list(df.columns) == list(model.MEMORY.columns)


# --- the project's own sample capture --------------------------------------------------------


def test_sample_trace_train_small_cpu(repo: Path) -> None:
    """sample_traces/train_small_cpu: 5 active PyNative steps of examples/train_small.py, memory on."""
    dirs = sorted((repo / "sample_traces" / "train_small_cpu").glob("*_ascend_ms"))
    assert len(dirs) == 1, "one capture folder expected"
    fw = dirs[0] / "FRAMEWORK"
    kernels = read_cpu_op_timestamps(fw / "cpu_op_execute_timestamp_0.txt", 0)
    # 2 blocks x (qkv, proj, fc1, fc2) + head = 9 MatMuls forward, 18 backward: 27 per step;
    # 5 steps (msdiag capture's default window records steps 4-8 of the job's 20)
    assert (kernels["type"] == "MatMul").sum() == 5 * 27
    assert len(kernels) == len(trace_cpu_ops(dirs[0]))
    stats = read_cpu_op_type_info(fw / "cpu_op_type_info_0.csv", 0)
    assert stats["count"].sum() == len(kernels)
    shapes = read_cpu_framework(fw / "cpu_framework_0.txt", 0)
    # first LayerNorm of a block: batch 16 x seq 32 x hidden 64, gamma and beta of 64
    assert shapes.loc[shapes.op_name == "LayerNorm-op0", "input_shapes"].tolist() == ["16,32,64;64;64;;;"]
    memory = read_cpu_memory_record(fw / "cpu_ms_memory_record_0.txt", 0)
    with open(fw / "cpu_ms_memory_record_0.txt", newline="") as f:
        peak = max(int(r["Total Allocated(Byte)"]) for r in csv.DictReader(f))
    assert memory["allocated_mb"].max() == peak / 2**20
