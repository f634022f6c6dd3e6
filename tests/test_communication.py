"""communication.json / communication_matrix.json readers, on the corpus and on broken files.

Expected values are derived independently with plain ``json`` from the same files: the profiler's
own "Total Op Info" sums, key counts and values quoted from the files.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from msdiag import model
from msdiag.errors import ParseError
from msdiag.ingest.communication import read_communication, read_communication_matrix

CAPTURES = [
    ("ascend/torchnpu-2rank-level1/rank0_ascend_pt", 0),
    ("ascend/torchnpu-2rank-level1/rank1_ascend_pt", 1),
    ("ascend/torchnpu-2rank-p2p-2024/test_rank_0", 0),
    ("ascend/torchnpu-2rank-p2p-2024/test_rank_1", 1),
]
IDS = [f"{c.split('/')[1]}-r{r}" for c, r in CAPTURES]
TOTAL = "Total Op Info"


def _comm(corpus: Path, capture: str) -> Path:
    return corpus / capture / "ASCEND_PROFILER_OUTPUT" / "communication.json"


def _matrix(corpus: Path, capture: str) -> Path:
    return corpus / capture / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"


def _step(key: str) -> int | None:
    return int(key[4:]) if key[4:] else None


def _rel_close(a: float, b: float, rel: float = 1e-6) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-9


# ---------------------------------------------------------------------------------------------------
# communication.json on the corpus


@pytest.mark.parametrize("capture,rank", CAPTURES, ids=IDS)
def test_comm_ops_match_total_op_info(corpus: Path, capture: str, rank: int) -> None:
    path = _comm(corpus, capture)
    raw = json.loads(path.read_text())
    ops, _ = read_communication(path, rank)
    assert list(ops.columns) == list(model.COMM_OPS.columns)
    assert (ops["rank"] == rank).all()
    n_total = 0
    for step_key, cats in raw.items():
        for cat, entries in cats.items():
            names = [k for k in entries if k != TOTAL]
            n_total += len(names)
            sel = ops[(ops["category"] == cat) & (ops["step"] == _step(step_key))]
            assert len(sel) == len(names)
            if not names:
                continue
            total = entries[TOTAL]["Communication Time Info"]
            for col, key in [
                ("elapse_us", "Elapse Time(ms)"),
                ("transit_us", "Transit Time(ms)"),
                ("wait_us", "Wait Time(ms)"),
                ("sync_us", "Synchronization Time(ms)"),
                ("idle_us", "Idle Time(ms)"),
            ]:
                assert _rel_close(sel[col].sum(), total[key] * 1000.0), (step_key, cat, col)
    assert len(ops) == n_total


@pytest.mark.parametrize("capture,rank", CAPTURES, ids=IDS)
def test_comm_ops_idle_and_keys(corpus: Path, capture: str, rank: int) -> None:
    ops, _ = read_communication(_comm(corpus, capture), rank)
    idle = ops["elapse_us"] - ops["transit_us"] - ops["wait_us"]
    assert ((ops["idle_us"] - idle).abs() <= 1e-6 * ops["elapse_us"].abs() + 1e-6).all()
    assert not ops["op_name"].str.contains("@").any()
    assert (ops["op_type"] == ops["op_name"].str.split("__").str[0]).all()
    assert ops["group"].str.fullmatch(r"\d+").all()
    assert ops["start_us"].gt(1.6e15).all()  # absolute us timestamps


def test_comm_ops_quoted_values(corpus: Path) -> None:
    # level1 rank 0, step50, quoted from the file:
    # "hcom_allReduce__586_1_1@17522688603477080586": Start 1736408883811334.8 us, Elapse 2.2811055625 ms,
    # Transit 1.2285845 ms, Wait 0.0724014375 ms, Synchronization 2e-05 ms, Idle 0.9801196250000002 ms
    ops, _ = read_communication(_comm(corpus, CAPTURES[0][0]), 0)
    row = ops[ops["op_name"] == "hcom_allReduce__586_1_1"].iloc[0]
    assert row["step"] == 50 and row["category"] == "collective"
    assert row["op_type"] == "hcom_allReduce" and row["group"] == "17522688603477080586"
    assert row["start_us"] == 1736408883811334.8
    assert row["elapse_us"] == pytest.approx(2281.1055625)
    assert row["transit_us"] == pytest.approx(1228.5845)
    assert row["wait_us"] == pytest.approx(72.4014375)
    assert row["sync_us"] == pytest.approx(0.02)
    assert row["idle_us"] == pytest.approx(980.1196250000002)


def test_comm_ops_p2p_category(corpus: Path) -> None:
    ops, _ = read_communication(_comm(corpus, CAPTURES[2][0]), 0)
    p2p = ops[ops["category"] == "p2p"]
    assert list(p2p["op_name"]) == ["hcom_send__822_0"]
    assert p2p["group"].iloc[0] == "13337953553061386822"
    assert (ops["step"] == 2).all()


@pytest.mark.parametrize("capture,rank", CAPTURES, ids=IDS)
def test_comm_transport_match_total_op_info(corpus: Path, capture: str, rank: int) -> None:
    path = _comm(corpus, capture)
    raw = json.loads(path.read_text())
    _, tr = read_communication(path, rank)
    assert list(tr.columns) == list(model.COMM_TRANSPORT.columns)
    expected_rows = 0
    for step_key, cats in raw.items():
        for cat, entries in cats.items():
            names = {k.rsplit("@", 1)[0] for k in entries if k != TOTAL}
            if not names:
                continue
            sel = tr[(tr["step"] == _step(step_key)) & tr["op_name"].isin(names)]
            for key, op in entries.items():
                if key == TOTAL:
                    continue
                for t in op["Communication Bandwidth Info"].values():
                    expected_rows += bool(t["Transit Size(MB)"] or t["Transit Time(ms)"])
            for transport, t in entries[TOTAL]["Communication Bandwidth Info"].items():
                part = sel[sel["transport"] == transport]
                assert _rel_close(part["size_mb"].sum(), t["Transit Size(MB)"]), (cat, transport)
                assert _rel_close(part["time_us"].sum(), t["Transit Time(ms)"] * 1000.0), (cat, transport)
                counts = sum(v[0] for v in t["Size Distribution"].values())
                assert int(part["packets"].fillna(0).sum()) == counts, (cat, transport)
    assert len(tr) == expected_rows


@pytest.mark.parametrize("capture,rank", CAPTURES, ids=IDS)
def test_comm_transport_bandwidth_is_mb_per_ms(corpus: Path, capture: str, rank: int) -> None:
    """Our size/time equals the file's own Bandwidth(GB/s), which it rounds to 4 decimals."""
    path = _comm(corpus, capture)
    raw = json.loads(path.read_text())
    _, tr = read_communication(path, rank)
    by_key = {(r.step, r.op_name, r.transport): r for r in tr.itertuples()}
    checked = 0
    for step_key, cats in raw.items():
        for entries in cats.values():
            for key, op in entries.items():
                if key == TOTAL:
                    continue
                for transport, t in op["Communication Bandwidth Info"].items():
                    if not t["Transit Time(ms)"]:
                        continue
                    r = by_key[(_step(step_key), key.rsplit("@", 1)[0], transport)]
                    assert abs(r.bandwidth_gbps - t["Bandwidth(GB/s)"]) <= 5.1e-5, (key, transport)
                    assert r.large_packet_ratio == t["Large Packet Ratio"]
                    checked += 1
    assert checked > 0


def test_comm_transport_quoted_values(corpus: Path) -> None:
    # p2p-2024 rank 0, step2, p2p "hcom_send__822_0@13337953553061386822", RDMA: Transit Size 20.97152 MB,
    # Transit Time 0.86381540625 ms, Bandwidth 24.2778 GB/s, Large Packet Ratio 1.0,
    # Size Distribution {"20.97152": [1, 0.86381540625]}; the zero HCCS/PCIE/SDMA entries give no row.
    _, tr = read_communication(_comm(corpus, CAPTURES[2][0]), 0)
    rows = tr[tr["op_name"] == "hcom_send__822_0"]
    assert list(rows["transport"]) == ["RDMA"]
    r = rows.iloc[0]
    assert r["size_mb"] == 20.97152 and r["time_us"] == pytest.approx(863.81540625)
    assert r["bandwidth_gbps"] == pytest.approx(24.2778, abs=5e-5)
    assert r["large_packet_ratio"] == 1.0 and r["packets"] == 1


def test_mb_is_decimal_megabytes(corpus: Path) -> None:
    """MB in communication.json is 10^6 bytes: each op's HCCS Transit Size(MB) x 10^6 equals the sum of
    the trace's HCCS 'size(Byte)' tasks inside the op (level1 rank 0; a 2^20 MB would be 4.9% off)."""
    cap = CAPTURES[0][0]
    trace = json.loads((corpus / cap / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    tasks = [
        (float(e["ts"]), e["args"]["size(Byte)"])
        for e in trace
        if isinstance(e.get("args"), dict) and e["args"].get("link type") == "HCCS"
    ]
    _, tr = read_communication(_comm(corpus, cap), 0)
    ops, _ = read_communication(_comm(corpus, cap), 0)
    hccs = tr[tr["transport"] == "HCCS"].set_index("op_name")
    assert len(ops) == 4
    for op in ops.itertuples():
        start, end = op.start_us, op.start_us + op.elapse_us
        nbytes = sum(size for ts, size in tasks if start - 1 <= ts <= end + 1)
        assert nbytes == round(hccs.loc[op.op_name, "size_mb"] * 1e6)
        assert nbytes != round(hccs.loc[op.op_name, "size_mb"] * 2**20)


# ---------------------------------------------------------------------------------------------------
# communication_matrix.json on the corpus


@pytest.mark.parametrize("capture,rank", CAPTURES, ids=IDS)
def test_matrix_link_counts(corpus: Path, capture: str, rank: int) -> None:
    path = _matrix(corpus, capture)
    raw = json.loads(path.read_text())
    links = read_communication_matrix(path, rank)
    assert list(links.columns) == list(model.COMM_LINKS.columns)
    expected = defaultdict(int)
    for step_key, cats in raw.items():
        for cat, entries in cats.items():
            for key, ls in entries.items():
                if key != TOTAL:
                    expected[(_step(step_key), cat)] += len(ls)
    got = links.groupby(["step", "category"]).size().to_dict()
    assert got == {k: v for k, v in expected.items() if v}
    assert (links["rank"] == rank).all()


def test_matrix_new_style_keys(corpus: Path) -> None:
    # level1 rank 0: 6 keys "allreduce-{top1,middle,bottom1,total,bottom2,bottom3}@17522688603477080586",
    # 8 links each (0-0 .. 0-7). Quoted: allreduce-top1 "0-1": HCCS, 37.781504 MB, 2.153383 ms,
    # 17.5452 GB/s, Op Name hcom_allReduce__586_2_1.
    links = read_communication_matrix(_matrix(corpus, CAPTURES[0][0]), 0)
    assert len(links) == 48
    assert sorted(links["variant"].unique()) == ["bottom1", "bottom2", "bottom3", "middle", "top1", "total"]
    assert (links["op_type"] == "hcom_allReduce").all()
    assert (links["group"] == "17522688603477080586").all()
    r = links[(links["variant"] == "top1") & (links["src"] == 0) & (links["dst"] == 1)].iloc[0]
    assert r["transport"] == "HCCS" and r["step"] == 50 and r["category"] == "collective"
    assert r["size_mb"] == 37.781504 and r["time_us"] == pytest.approx(2153.383)
    assert r["bandwidth_gbps"] == pytest.approx(17.5452, abs=5e-5)
    local = links[(links["src"] == links["dst"])]
    assert (local["transport"] == "LOCAL").all() and len(local) == 6


def test_matrix_old_style_keys(corpus: Path) -> None:
    # p2p-2024 rank 0, step2, p2p "hcom_send__822_0@13337953553061386822": "0-0" LOCAL and
    # "0-8": RDMA, 20.97152 MB, 0.86381540625 ms, 24.2778 GB/s.
    links = read_communication_matrix(_matrix(corpus, CAPTURES[2][0]), 0)
    p2p = links[links["category"] == "p2p"]
    assert len(p2p) == 2
    assert set(p2p["variant"]) == {"hcom_send__822_0"} and set(p2p["op_type"]) == {"hcom_send"}
    r = p2p[p2p["dst"] == 8].iloc[0]
    assert r["transport"] == "RDMA" and r["group"] == "13337953553061386822"
    assert r["size_mb"] == 20.97152 and r["time_us"] == pytest.approx(863.81540625)
    assert r["bandwidth_gbps"] == pytest.approx(24.2778, abs=5e-5)


@pytest.mark.parametrize("capture,rank", CAPTURES[2:], ids=IDS[2:])
def test_matrix_old_style_total_is_sum(corpus: Path, capture: str, rank: int) -> None:
    """Old files' skipped "Total Op Info" is the per-link sum of the op entries (across groups)."""
    path = _matrix(corpus, capture)
    raw = json.loads(path.read_text())
    links = read_communication_matrix(path, rank)
    for cats in raw.values():
        for cat, entries in cats.items():
            sel = links[links["category"] == cat]
            for link, t in entries[TOTAL].items():
                src, dst = (int(x) for x in link.split("-"))
                part = sel[(sel["src"] == src) & (sel["dst"] == dst)]
                assert _rel_close(part["size_mb"].sum(), t["Transit Size(MB)"]), (cat, link)
                assert _rel_close(part["time_us"].sum(), t["Transit Time(ms)"] * 1000.0), (cat, link)


# ---------------------------------------------------------------------------------------------------
# synthetic files: variants of the format and broken input


def _op(elapse: float, transit: float, wait: float, idle_key: str | None = "Idle Time(ms)") -> dict:
    t = {
        "Start Timestamp(us)": 100.0,
        "Elapse Time(ms)": elapse,
        "Transit Time(ms)": transit,
        "Wait Time(ms)": wait,
        "Synchronization Time(ms)": 0.5,
    }
    if idle_key:
        t[idle_key] = elapse - transit - wait
    return {
        "Communication Time Info": t,
        "Communication Bandwidth Info": {
            "HCCS": {"Transit Size(MB)": 8.0, "Transit Time(ms)": 2.0, "Bandwidth(GB/s)": 4.0,
                     "Large Packet Ratio": 0.0, "Size Distribution": {"4.0": [2, 2.0]}},
            "RDMA": {"Transit Size(MB)": 0, "Transit Time(ms)": 0, "Bandwidth(GB/s)": 0,
                     "Large Packet Ratio": 0, "Size Distribution": {}},
        },
    }


def _write(tmp_path: Path, doc: object, name: str = "communication.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("idle_key", ["Idle Time(ms)", "Idel Time(ms)", None])
def test_idle_spellings_and_absence(tmp_path: Path, idle_key: str | None) -> None:
    doc = {"step": {"collective": {"hcom_allGather__1_2_3@42": _op(10.0, 3.0, 2.0, idle_key)}, "p2p": {}}}
    ops, tr = read_communication(_write(tmp_path, doc), 5)
    assert len(ops) == 1
    r = ops.iloc[0]
    assert pd.isna(r["step"]) and r["rank"] == 5 and r["group"] == "42"
    assert r["idle_us"] == pytest.approx(5000.0)
    assert list(tr["transport"]) == ["HCCS"]
    assert tr.iloc[0]["bandwidth_gbps"] == 4.0 and tr.iloc[0]["packets"] == 2


def test_missing_time_is_null_not_zero(tmp_path: Path) -> None:
    op = _op(10.0, 3.0, 2.0)
    del op["Communication Time Info"]["Synchronization Time(ms)"]
    ops, _ = read_communication(_write(tmp_path, {"step7": {"collective": {"hcom_x__1@9": op}}}), 0)
    assert math.isnan(ops.iloc[0]["sync_us"]) and ops.iloc[0]["step"] == 7


def test_empty_document_gives_empty_tables(tmp_path: Path) -> None:
    ops, tr = read_communication(_write(tmp_path, {}), 0)
    assert ops.empty and list(ops.columns) == list(model.COMM_OPS.columns)
    assert tr.empty and list(tr.columns) == list(model.COMM_TRANSPORT.columns)
    links = read_communication_matrix(_write(tmp_path, {"step1": {"p2p": {}, "collective": {}}}, "m.json"), 0)
    assert links.empty and list(links.columns) == list(model.COMM_LINKS.columns)


BAD_COMM = [
    (b"", "empty"),
    (b'{"step1": {"collective": {"hcom_a__1@2": {"Communication Time Info": {"Elapse', "truncated"),
    (b"not json at all", "not valid JSON"),
    (b"[1, 2, 3]", "found a list"),
    (b'{"iteration1": {}}', "unexpected top-level key 'iteration1'"),
    (b'{"step1": {"broadcast": {}}}', "unexpected key 'broadcast'"),
    (b'{"step1": {"collective": []}}', "should be a JSON object"),
    (b'{"step1": {"collective": {"hcom_a__1@2": {"Communication Bandwidth Info": {}}}}}',
     "no 'Communication Time Info'"),
    (b'{"step1": {"collective": {"hcom_a__1@2": {"Communication Time Info": {"Elapse Time(ms)": "fast"}}}}}',
     "should be a number"),
]


@pytest.mark.parametrize("content,words", BAD_COMM, ids=[w for _, w in BAD_COMM])
def test_bad_communication_json(tmp_path: Path, content: bytes, words: str) -> None:
    p = tmp_path / "communication.json"
    p.write_bytes(content)
    with pytest.raises(ParseError) as e:
        read_communication(p, 0)
    assert str(p) in str(e.value) and words in str(e.value)


BAD_MATRIX = [
    (b"", "empty"),
    (b'{"step1": {"p2p": {"hcom_send__1@2": {"0-1": {"Transport Type": "RDMA"', "truncated"),
    (b'{"step1": {"p2p": {"hcom_send__1@2": {"zero-one": {}}}}}', "not '<src>-<dst>'"),
    (b'{"step1": {"p2p": {"hcom_send__1@2": {"0-1": 5}}}}', "should be a JSON object"),
    (b'"a string"', "found a string"),
]


@pytest.mark.parametrize("content,words", BAD_MATRIX, ids=[w for _, w in BAD_MATRIX])
def test_bad_communication_matrix(tmp_path: Path, content: bytes, words: str) -> None:
    p = tmp_path / "communication_matrix.json"
    p.write_bytes(content)
    with pytest.raises(ParseError) as e:
        read_communication_matrix(p, 0)
    assert str(p) in str(e.value) and words in str(e.value)


def test_matrix_total_variant_without_op_name(tmp_path: Path) -> None:
    """A file with only 'total' entries keeps the op type as written (no Op Name to map it back)."""
    doc = {"step3": {"collective": {"allgather-total@77": {"0-1": {
        "Transport Type": "HCCS", "Transit Size(MB)": 2.0, "Transit Time(ms)": 0.0, "Bandwidth(GB/s)": 0}}}}}
    links = read_communication_matrix(_write(tmp_path, doc, "m.json"), 2)
    r = links.iloc[0]
    assert r["op_type"] == "allgather" and r["variant"] == "total" and r["group"] == "77"
    assert math.isnan(r["bandwidth_gbps"]) and r["time_us"] == 0.0


def _from_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every frame built through DataFrame.from_records, as before the columns were built as arrays."""
    from msdiag.ingest import communication

    monkeypatch.setattr(communication, "_arrays", lambda table, cols, rows: None)


@pytest.mark.parametrize("capture,rank", CAPTURES, ids=IDS)
def test_frames_from_arrays_as_from_records(corpus: Path, capture: str, rank: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # the columns built as arrays give the frames DataFrame.from_records gave: cells and dtypes
    folder = corpus / capture / "ASCEND_PROFILER_OUTPUT"
    got = [*read_communication(folder / "communication.json", rank), read_communication_matrix(folder / "communication_matrix.json", rank)]
    _from_records(monkeypatch)
    want = [*read_communication(folder / "communication.json", rank), read_communication_matrix(folder / "communication_matrix.json", rank)]
    for g, w in zip(got, want):
        pd.testing.assert_frame_equal(g, w, check_exact=True)


def test_link_numbers_beyond_exact_floats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a link "9007199254740993-1" (2^53 + 1: no float64 holds it) is left to from_records, which reads
    # the column as before; a link "3-4" beside a step-less op is built as arrays. By hand: two rows,
    # src 2^53 + 1 then 3 (from_records keeps the ints exact in an int64 column), dst 1 then 4
    doc = {"step": {"collective": {"allreduce-top1@g": {
        "9007199254740993-1": {"Transport Type": "HCCS", "Transit Size(MB)": 1.0, "Transit Time(ms)": 0.5},
        "3-4": {"Transport Type": None, "Transit Size(MB)": 2.0, "Transit Time(ms)": 0.0},
    }}}}
    path = tmp_path / "communication_matrix.json"
    path.write_text(json.dumps(doc))
    links = read_communication_matrix(path, 5)
    assert links["src"].tolist() == [2**53 + 1, 3] and links["dst"].tolist() == [1, 4]
    assert links["step"].isna().all() and links["transport"].tolist()[0] == "HCCS" and pd.isna(links["transport"].iloc[1])
    assert links["bandwidth_gbps"].iloc[0] == 2.0 and math.isnan(links["bandwidth_gbps"].iloc[1])
    doc["step"]["collective"]["allreduce-top1@g"].pop("9007199254740993-1")
    path.write_text(json.dumps(doc))
    arrays = read_communication_matrix(path, 5)
    _from_records(monkeypatch)
    pd.testing.assert_frame_equal(arrays, read_communication_matrix(path, 5), check_exact=True)
    assert list(arrays.dtypes.astype(str)) == list(model.COMM_LINKS.columns.values())


@pytest.mark.parametrize(("key", "column", "scale"), [("Transit Size(MB)", "size_mb", 1.0), ("Transit Time(ms)", "time_us", 1000.0)])
@pytest.mark.parametrize("value", [1.5, 0.0, -2.0, 3, 0, 2**60, True, False, None, "1.25", " 2 ", "x", [1], {"a": 1}])
def test_a_plain_number_taken_as_the_checked_reading_gives_it(
    value: object, key: str, column: str, scale: float, tmp_path: Path
) -> None:
    # the matrix reader takes a plain JSON number (float, or int but not a boolean) as it is; anything else is left to
    # _num, which reads a text, gives NaN for null and names the link where the value is wrong: the link's figure is
    # what _num gives for the value (times in us: x 1000), or the file fails with _num's error
    from msdiag.ingest import communication as c

    link = {"Transport Type": "HCCS", "Transit Size(MB)": 1.0, "Transit Time(ms)": 0.5, key: value}
    path = tmp_path / "communication_matrix.json"
    path.write_text(json.dumps({"step1": {"collective": {"allreduce-top1@g": {"0-1": link}}}}))
    try:
        expected = c._num(path, "w", link, key)
    except ParseError as e:
        with pytest.raises(ParseError) as got_error:
            read_communication_matrix(path, 0)
        assert got_error.value.problem.endswith("'0-1': " + e.problem.removeprefix("w: "))
        return
    got = read_communication_matrix(path, 0)[column].iloc[0]
    assert (math.isnan(got) and math.isnan(expected)) or got == expected * scale


def test_link_numbers_below_exact_floats_left_to_from_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the mirror of the case above: a link "-9007199254740993-1" is not '<src>-<dst>' at all (the key's digits
    # only), so the lowest a link end can be is 0; a src written as 2^53 exactly is still exact: built as arrays, the
    # frame from_records gives (by hand: src 2^53, dst 7)
    doc = {"step1": {"collective": {"allreduce-top1@g": {
        "9007199254740992-7": {"Transport Type": "HCCS", "Transit Size(MB)": 1.0, "Transit Time(ms)": 0.5}}}}}
    path = tmp_path / "communication_matrix.json"
    path.write_text(json.dumps(doc))
    arrays = read_communication_matrix(path, 5)
    assert arrays["src"].tolist() == [2**53] and arrays["dst"].tolist() == [7]
    _from_records(monkeypatch)
    pd.testing.assert_frame_equal(arrays, read_communication_matrix(path, 5), check_exact=True)


def test_plain_ints_within_exact_floats_only() -> None:
    # communication._plain_ints: Python ints as an Int64 array, as pd.array(values, dtype="Int64") gives them, while every
    # value lies within +-2^53 (a float64 holds them exactly, as from_records' column would); beyond, either side, None
    from msdiag.ingest import communication as c

    ok = (0, -(2**53), 2**53, 17)
    got = c._plain_ints(ok)
    pd.testing.assert_extension_array_equal(got, pd.array(list(ok), dtype="Int64"))
    assert type(got) is type(pd.array(list(ok), dtype="Int64"))
    assert c._plain_ints((1, -(2**53) - 1)) is None and c._plain_ints((2**53 + 1,)) is None
    assert c._plain_ints((2**63,)) is None and c._plain_ints((-(2**63),)) is None
