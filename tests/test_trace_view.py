"""trace_view.json reader: real corpus traces, with expected numbers counted independently.

The oracle for the lane and counter counts is a plain ``json.load`` of the same file and a few lines of
counting (``_expected``), not the reader's code; a few numbers were also counted by hand and are
written out with a comment.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pandas.testing as pdt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msdiag import model
from msdiag.errors import ParseError
from msdiag.ingest import trace_view as tvmod
from msdiag.ingest.trace_view import STEP_SOURCE, read_trace_view

LEVEL1 = "ascend/torchnpu-2rank-level1/rank{r}_ascend_pt/ASCEND_PROFILER_OUTPUT"
MS_DP2 = "mindspore-cpu/msrun_dp2_pynative"
HOST = {"Python", "python", "python3", "MindSpore", "CANN"}


def _events(path: Path) -> list[dict[str, Any]]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return raw["traceEvents"] if isinstance(raw, dict) else raw


def _expected(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Lane, counter and host-op counts from the rules in the reader's docstring, counted plainly."""
    procs: dict[Any, str] = {}
    threads: dict[Any, str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    lanes: Counter[str] = Counter()
    host_ops = 0
    for e in events:
        if e.get("ph") != "X" or e.get("ts") is None:
            continue
        proc = procs.get(e["pid"])
        thread = threads.get((e["pid"], e["tid"]), "")
        if re.fullmatch(r"ProfilerStep#\d+", e["name"]):
            lanes["step"] += 1
        elif proc == "Ascend Hardware":
            lanes["device"] += 1
        elif proc == "HCCL" and thread.startswith("Group ") and thread.endswith(" Communication"):
            lanes["hccl"] += 1
        elif proc == "Overlap Analysis":
            lanes["overlap"] += 1
        elif proc == "Scope Layer":
            lanes["scope"] += 1
        elif proc == "CPU OP":
            host_ops += 1
        elif proc in HOST:
            lanes["host"] += 1
    counters = sum(1 for e in events if e.get("ph") == "C")
    return {"lanes": dict(lanes), "counters": counters, "host_ops": host_ops, "processes": list(procs.values())}


def _corpus_traces(corpus: Path) -> list[Path]:
    return sorted(corpus.glob("**/trace_view*.json"))


def _frames_equal(a: tvmod.TraceView, b: tvmod.TraceView) -> None:
    pdt.assert_frame_equal(a.timeline, b.timeline)
    pdt.assert_frame_equal(a.counters, b.counters)
    pdt.assert_frame_equal(a.host_ops, b.host_ops)
    assert a.processes == b.processes
    assert a.step_source == b.step_source


def _check_schema(tv: tvmod.TraceView, rank: int) -> None:
    for df, table in ((tv.timeline, model.TIMELINE), (tv.counters, model.COUNTERS), (tv.host_ops, model.KERNELS)):
        assert list(df.columns) == list(table.columns)
        assert {c: str(t) for c, t in df.dtypes.items()} == dict(table.columns)
        assert (df["rank"] == rank).all()


# ---- every trace_view.json of the corpus -----------------------------------------------------------


def test_every_corpus_trace_matches_a_plain_count(corpus: Path) -> None:
    paths = _corpus_traces(corpus)
    assert len(paths) >= 14  # 3 single files, 4 torch_npu ranks, 7 MindSpore CPU captures
    for path in paths:
        exp = _expected(_events(path))
        tv = read_trace_view(path, 5)
        _check_schema(tv, 5)
        got = tv.timeline.groupby("lane").size().to_dict()
        assert got == exp["lanes"], path
        assert len(tv.counters) == exp["counters"], path
        assert len(tv.host_ops) == exp["host_ops"], path
        assert tv.processes == list(dict.fromkeys(exp["processes"])), path
        assert tv.step_source == (STEP_SOURCE if exp["lanes"].get("step") else None), path


# ---- torch_npu level1, rank 0 ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def level1(corpus: Path) -> tuple[Path, tvmod.TraceView]:
    path = corpus / LEVEL1.format(r=0) / "trace_view.json"
    return path, read_trace_view(path, 0)


def test_level1_lanes(level1: tuple[Path, tvmod.TraceView]) -> None:
    path, tv = level1
    tl = tv.timeline
    _check_schema(tv, 0)
    assert tv.processes[:2] == ["Python", "Ascend Hardware"]
    assert {"CANN", "HCCL", "Overlap Analysis", "AI Core Freq", "NPU MEM"} <= set(tv.processes)
    # Counted in the file: 535 'X' events in the "Ascend Hardware" process, on streams 0, 2, 3 and 4.
    device = tl[tl.lane == "device"]
    assert len(device) == 535
    assert set(device.track) == {"Stream 0", "Stream 2", "Stream 3", "Stream 4"}
    # HCCL has 300 'X' events: 4 ops on "Group 0 Communication", 296 tasks on "Plane 0".."Plane 7".
    hccl = tl[tl.lane == "hccl"]
    assert len(hccl) == 4
    assert set(hccl.track) == {"Group 0 Communication"}
    assert hccl.name.str.startswith("hcom_").all()
    # Overlap Analysis threads, counted in the file.
    overlap = tl[tl.lane == "overlap"].groupby("track").size().to_dict()
    assert overlap == {"Computing": 187, "Communication": 4, "Communication(Not Overlapped)": 101, "Free": 90}
    # Host: 2460 Python 'X' events minus the one step marker, plus 707 CANN events.
    host = tl[tl.lane == "host"]
    assert len(host) == 2459 + 707
    assert "Python/Thread 3096504" in set(host.track)
    assert "CANN/Thread 3099702" in set(host.track)


def test_level1_step_marker(level1: tuple[Path, tvmod.TraceView]) -> None:
    _, tv = level1
    steps = tv.timeline[tv.timeline.lane == "step"]
    assert len(steps) == 1
    row = steps.iloc[0]
    # As written in the file: "ts": "1736408883686740.710", "dur": 155985.8, in the Python process.
    assert row["name"] == "ProfilerStep#50"
    assert row["track"] == "Python"
    assert row["start_us"] == float("1736408883686740.710")
    assert row["dur_us"] == 155985.8
    assert tv.step_source == STEP_SOURCE


def test_level1_overlap_matches_step_trace_time(corpus: Path, level1: tuple[Path, tvmod.TraceView]) -> None:
    """step_trace_time.csv's Computing etc. are sums of the Overlap Analysis events inside the step."""
    _, tv = level1
    with open(corpus / LEVEL1.format(r=0) / "step_trace_time.csv", newline="") as f:
        row = next(csv.DictReader(f))
    assert row["Step"] == "50"
    tl = tv.timeline
    step = tl[tl.lane == "step"].iloc[0]
    start, end = step["start_us"], step["start_us"] + step["dur_us"]
    ov = tl[(tl.lane == "overlap") & (tl.start_us >= start) & (tl.start_us < end)]
    sums = ov.groupby("track")["dur_us"].sum()
    for col in ("Computing", "Communication", "Communication(Not Overlapped)", "Free"):
        assert sums[col] == pytest.approx(float(row[col]), rel=1e-3), col
    assert sums["Computing"] == pytest.approx(8873.756, rel=1e-3)


def test_level1_counters(level1: tuple[Path, tvmod.TraceView]) -> None:
    _, tv = level1
    c = tv.counters
    assert len(c) == 4431  # 'C' events counted in the file
    freq = c[c.track == "AI Core Freq"]
    assert set(freq.unit) == {"MHz"} and set(freq.value) == {1800.0}
    # Acc PMU writes {"value": 0, "acc_id": 0}: the unit is "value", never "acc_id".
    assert set(c[c.track == "Acc PMU"].unit) == {"value"}
    assert "acc_id" not in set(c.unit)
    assert set(c[c.track == "NPU MEM"].unit) == {"KB"}
    assert set(c[c.name == "HBM 0/Read"].unit) == {"Read(MB/s)"}
    assert c.ts_us.notna().all() and c.value.notna().all()
    assert tv.host_ops.empty and list(tv.host_ops.columns) == list(model.KERNELS.columns)


# ---- MindSpore CPU -----------------------------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 1])
def test_mindspore_cpu_host_ops(corpus: Path, which: int) -> None:
    path = sorted((corpus / MS_DP2).glob("*/ASCEND_PROFILER_OUTPUT/trace_view.json"))[which]
    events = _events(path)
    cpu_ops = [e for e in events if e["ph"] == "X" and e["pid"] == 2]  # pid 2 is named "CPU OP" in the file
    assert isinstance(cpu_ops[0]["ts"], str) and isinstance(cpu_ops[0]["dur"], str)
    tv = read_trace_view(path, which)
    _check_schema(tv, which)
    ops = tv.host_ops
    assert len(ops) == len(cpu_ops) == 1140
    assert sorted(ops.start_us) == sorted(float(e["ts"]) for e in cpu_ops)
    assert sorted(ops.dur_us) == sorted(float(e["dur"]) for e in cpu_ops)
    assert set(ops.core) == {"CPU"} and ops.stream.isna().all()
    allreduce = ops[ops.type == "AllReduce"]
    assert len(allreduce) == sum(1 for e in cpu_ops if re.search(r"/AllReduce-op\d+$", e["name"])) == 156
    assert set(allreduce.kind) == {"communication"}
    assert set(ops[ops.type != "AllReduce"].kind) == {"compute"}
    assert "MatMul" in set(ops.type) and not ops.type.str.contains("-op").any()
    # CPU OP events are host ops only, not also host-lane rows; "Default" is the one Scope Layer event.
    assert set(tv.timeline.lane) == {"scope"}
    assert list(tv.timeline.name) == ["Default"]
    assert tv.processes == ["CPU OP", "Scope Layer"]
    assert tv.step_source is None
    assert tv.counters.empty


def test_op_type_and_kind() -> None:
    assert tvmod._op_type("Default/network-WithLossCell/_backbone-Net/dense-Dense/MatMul-op3") == "MatMul"
    assert tvmod._op_type("Default/AllReduce-op16") == "AllReduce"
    assert tvmod._op_type("MatMul") == "MatMul"
    for t in ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AlltoAll", "AllToAll", "AlltoAllV",
              "Send", "Receive", "Recv", "Barrier", "HcomAllReduce", "hcom_allReduce", "HcomSend"):
        assert tvmod._op_kind(t) == "communication", t
    for t in ("MatMul", "ReduceSum", "ReduceMean", "Adam", "BroadcastTo", "Sub"):
        assert tvmod._op_kind(t) == "compute", t


# ---- single files --------------------------------------------------------------------------------


def test_single_files(corpus: Path) -> None:
    d = corpus / "ascend" / "single-files"
    adv = read_trace_view(d / "trace_view_advisor.json", 0)
    # Counted in the file: 276 Ascend Hardware, 547 Overlap Analysis, 1007 Python (1 step marker) + 382 CANN.
    assert adv.timeline.groupby("lane").size().to_dict() == {"device": 276, "overlap": 547, "host": 1388, "step": 1}
    assert adv.step_source == STEP_SOURCE
    heat = read_trace_view(d / "trace_view_heatmap.json", 0)
    assert heat.timeline.groupby("lane").size().to_dict() == {"device": 1, "host": 3}
    assert set(heat.timeline[heat.timeline.lane == "host"].name) >= {"Prefill_layer::Execute"}
    tiny = read_trace_view(d / "trace_view_tiny.json", 0)  # metadata events only
    assert tiny.timeline.empty and tiny.counters.empty
    assert tiny.processes == ["Ascend Hardware", "HBM", "LLC"]
    assert tiny.step_source is None


# ---- format variants and the two split paths ---------------------------------------------------------


def test_object_form_string_numbers_and_bom(corpus: Path, tmp_path: Path) -> None:
    """{"traceEvents": [...]}, ts/dur as strings with trailing blanks, a BOM: same tables."""
    src = corpus / LEVEL1.format(r=0) / "trace_view.json"
    events = _events(src)
    for i, e in enumerate(events):
        for k in ("ts", "dur"):
            if k in e:
                v = float(e[k])
                e[k] = (repr(v) + ("\t" if i % 2 else " ")) if i % 3 else v
    p = tmp_path / "trace_view.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}).encode())
    _frames_equal(read_trace_view(p, 0), read_trace_view(src, 0))


def test_small_chunks_and_careful_split_agree(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = corpus / LEVEL1.format(r=1) / "trace_view.json"
    ref = read_trace_view(src, 1)
    monkeypatch.setattr(tvmod, "_CHUNK_BYTES", 4096)
    monkeypatch.setattr(tvmod, "_CHUNK_EVENTS", 97)
    _frames_equal(read_trace_view(src, 1), ref)
    monkeypatch.setattr(tvmod, "_fast_read", lambda path: None)
    _frames_equal(read_trace_view(src, 1), ref)


def _write(tmp_path: Path, events: list[Any], name: str = "trace_view.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(events), encoding="utf-8")
    return p


META = [
    {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Python"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "Thread 7"}},
    {"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "Acc PMU"}},
]


def test_tricky_strings_fall_back_to_careful_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names holding "}, {" and args holding arrays of objects: a fast cut there must not change results."""
    events: list[Any] = []
    for i in range(200):
        events.append({"ph": "X", "name": f"op}}, {{{i}", "pid": 1, "tid": 7, "ts": i * 10.0, "dur": 1,
                       "args": {"l": [{"a": 1}, {"b": [{"c": "}, {"}]}]}})
    p = _write(tmp_path, events + META)
    monkeypatch.setattr(tvmod, "_CHUNK_BYTES", 64)
    calls: list[int] = []
    careful = tvmod._raw_chunks
    monkeypatch.setattr(tvmod, "_raw_chunks", lambda path, data: calls.append(1) or careful(path, data))
    tv = read_trace_view(p, 0)
    assert calls  # some cut fell inside an event
    host = tv.timeline[tv.timeline.lane == "host"]
    assert len(host) == 200 and set(host.track) == {"Python/Thread 7"}
    assert list(host.name) == [f"op}}, {{{i}" for i in range(200)]


def test_loose_values_unknown_phases_and_missing_fields(tmp_path: Path) -> None:
    events: list[Any] = [
        {"ph": "X", "name": "a", "pid": 1, "tid": 7, "ts": "100.5\t", "dur": " 2.5"},
        {"ph": "X", "name": "no ts", "pid": 1, "tid": 7, "dur": 1},  # skipped
        {"ph": "X", "name": "no dur", "pid": 1, "tid": 7, "ts": 200},  # kept, dur null
        {"ph": "X", "name": 42, "pid": 1, "tid": 8, "ts": 300, "dur": 1},  # numeric name, unnamed thread
        {"ph": "Z", "name": "unknown phase", "pid": 1, "tid": 7, "ts": 1},
        {"name": "no phase"},
        {"ph": "C", "name": "read_bandwidth", "pid": 9, "tid": 0, "ts": "5", "args": {"acc_id": 3, "value": 7}},
        {"ph": "C", "name": "odd", "pid": 9, "tid": 0, "ts": 6, "args": {"KB": "12.5"}},
        {"ph": "C", "name": "empty", "pid": 4, "tid": 0, "ts": 7, "args": {}},
    ] + META
    tv = read_trace_view(_write(tmp_path, events), 2)
    _check_schema(tv, 2)
    host = tv.timeline.set_index("name")
    assert host.loc["a", "start_us"] == 100.5 and host.loc["a", "dur_us"] == 2.5
    assert "no ts" not in host.index
    assert math.isnan(host.loc["no dur", "dur_us"])
    assert host.loc["42", "track"] == "Python/8"
    c = tv.counters.set_index("name")
    assert c.loc["read_bandwidth", "unit"] == "value" and c.loc["read_bandwidth", "value"] == 7
    assert c.loc["read_bandwidth", "track"] == "Acc PMU"
    assert c.loc["odd", "unit"] == "KB" and c.loc["odd", "value"] == 12.5
    assert pd.isna(c.loc["empty", "unit"]) and math.isnan(c.loc["empty", "value"])
    assert c.loc["empty", "track"] == "4"  # unnamed process: its pid


_text = st.text(alphabet=st.sampled_from(list('ab{}[],: "\\\t\n')), max_size=12)
# 60 examples (fewer in the quick loop's profile, tests/conftest.py): each one writes and reads a file twice
_event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "C", "s", "f", "i"]), "name": _text, "pid": st.sampled_from([1, 9, "p"]),
     "tid": st.sampled_from([0, 7]), "ts": st.floats(0, 1e6, allow_nan=False), "dur": st.floats(0, 100),
     "args": st.one_of(st.just({"v": 1}), st.builds(lambda s: {"s": s, "l": [{"k": s}]}, _text))}
)


@settings(max_examples=min(60, settings().max_examples), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(events=st.lists(_event, max_size=40), chunk=st.integers(1, 400))
def test_fast_split_never_changes_results(tmp_path: Path, events: list[Any], chunk: int) -> None:
    p = _write(tmp_path, events + META, "prop.json")
    saved = tvmod._CHUNK_BYTES, tvmod._fast_read
    try:
        tvmod._CHUNK_BYTES = chunk
        fast = read_trace_view(p, 0)
        tvmod._fast_read = lambda path: None
        careful = read_trace_view(p, 0)
    finally:
        tvmod._CHUNK_BYTES, tvmod._fast_read = saved
    _frames_equal(fast, careful)
    exp = _expected(events + META)
    assert fast.timeline.groupby("lane").size().to_dict() == exp["lanes"]
    assert len(fast.counters) == exp["counters"]


# ---- bad inputs --------------------------------------------------------------------------------------


def _half(corpus: Path) -> bytes:
    data = (corpus / LEVEL1.format(r=0) / "trace_view.json").read_bytes()
    return data[: len(data) // 2]


@pytest.mark.parametrize(
    "content, words",
    [
        (b"", "empty"),
        (b"  \n", "empty"),
        (None, "truncated JSON"),  # the first half of a real file
        (b"this is not JSON", "malformed JSON"),
        (b'[{"ph": "X", "name": "a",, "ts": 1}]', "malformed JSON"),
        (b"42", "not a trace"),
        (b'"a string"', "not a trace"),
        (b'{"schemaVersion": 1}', "traceEvents"),
        (b'{"traceEvents": 3}', "not a trace"),
        (b"[1, 2, 3]", "not a JSON object"),
        (b'[{"a": 1}, {"b": 2}]', "'ph'"),
        (b'[{"ph": "X", "name": "a", "ts": 1}] trailing', "malformed JSON"),
    ],
)
def test_bad_inputs_raise_parse_error(corpus: Path, tmp_path: Path, content: bytes | None, words: str) -> None:
    p = tmp_path / "rank3_trace_view.json"
    p.write_bytes(_half(corpus) if content is None else content)
    with pytest.raises(ParseError) as ei:
        read_trace_view(p, 3)
    msg = str(ei.value)
    assert "rank3_trace_view.json" in msg
    assert words in msg
    assert "Traceback" not in msg and "msgspec" not in msg
    assert len(msg.splitlines()) == 1


def test_truncated_message_names_the_size(corpus: Path, tmp_path: Path) -> None:
    p = tmp_path / "trace_view.json"
    half = _half(corpus)
    p.write_bytes(half)
    with pytest.raises(ParseError, match=rf"truncated JSON: the data ends at byte {len(half)} "):
        read_trace_view(p, 0)


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="cannot be read"):
        read_trace_view(tmp_path / "absent.json", 0)
    with pytest.raises(ParseError, match="folder"):
        read_trace_view(tmp_path, 0)


def test_empty_array_is_an_empty_trace(tmp_path: Path) -> None:
    tv = read_trace_view(_write(tmp_path, []), 0)
    assert tv.timeline.empty and tv.counters.empty and tv.host_ops.empty and tv.processes == []
    _check_schema(tv, 0)


# ---- issue 20: hostile bytes are one ParseError, never a traceback ---------------------------------

L0_TRACE = "ascend/torchnpu-2rank-level0/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"


def test_non_utf8_byte_is_located(corpus: Path, tmp_path: Path) -> None:
    """A 0xFF byte put at the start of the first event name: the error gives its offset.

    Expected offset by hand: the byte goes right after the first ``"name": "`` of the file, so it sits
    at data.index(b'"name": "') + len(b'"name": "') of the damaged copy (the bytes before it are unchanged).
    """
    data = (corpus / L0_TRACE).read_bytes()
    at = data.index(b'"name": "') + len(b'"name": "')
    p = tmp_path / "trace_view.json"
    p.write_bytes(data[:at] + b"\xff" + data[at:])
    with pytest.raises(ParseError, match=rf"not UTF-8 text: byte {at} of {len(data) + 1} "):
        read_trace_view(p, 0)


def test_json_nested_too_deep_is_a_parse_error(corpus: Path, tmp_path: Path) -> None:
    """An event whose args nest 1000 lists deep (the decoder's limit is Python's, 1000): a ParseError."""
    data = (corpus / L0_TRACE).read_bytes().rstrip()
    deep = b"[" * 1000 + b"]" * 1000
    p = tmp_path / "trace_view.json"
    p.write_bytes(data[:-1] + b', {"ph": "X", "name": "deep", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"a": '
                  + deep + b"}}]")
    with pytest.raises(ParseError, match="nested deeper than"):
        read_trace_view(p, 0)


def test_streamed_blocks_with_events_longer_than_the_buffer(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path reads the file a block at a time: a real trace read with 1 KiB blocks, with events of
    50 KB (longer than the buffer, which then grows) spliced in and whitespace around the separators, gives
    the careful path's tables, and never takes the careful path itself."""
    events = json.loads((corpus / LEVEL1.format(r=0) / "trace_view.json").read_bytes())[:3000]
    big = {"ph": "X", "name": "big", "pid": 1, "tid": 7, "ts": 5.0, "dur": 1, "args": {"stack": "x" * 50_000}}
    for i in range(0, len(events), 500):
        events.insert(i, dict(big, ts=5.0 + i))
    p = tmp_path / "trace_view.json"
    p.write_text("[\n " + ",\n  ".join(json.dumps(e) for e in events + META) + " \n]\n", encoding="utf-8")
    careful = tvmod._raw_chunks
    calls: list[int] = []
    monkeypatch.setattr(tvmod, "_raw_chunks", lambda path, data: calls.append(1) or careful(path, data))
    monkeypatch.setattr(tvmod, "_CHUNK_BYTES", 1024)
    fast = read_trace_view(p, 0)
    assert not calls  # every cut fell between two events
    monkeypatch.setattr(tvmod, "_fast_read", lambda path: None)
    _frames_equal(fast, read_trace_view(p, 0))
    assert calls
    # 3000 events of the real trace plus the 6 spliced ones, on the Python process named by META
    assert (fast.timeline["name"] == "big").sum() == 6
