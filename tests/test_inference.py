"""Inference: request logs (msdiag JSONL / CSV, vLLM benchmark JSON), TTFT / TPOT / tails, goodput, queueing,
batching evidence, prefill / decode phases of a capture, and the load test on the real MindSpore example.

Request logs here are written in tmp_path by the tests; their numbers are chosen so that every expected value
can be derived by hand (the comments show how). The vLLM-format file is synthetic: it has the keys vLLM's
``benchmark_serving.py --save-result --save-detailed`` writes (ttfts, itls, input_lens, output_lens, errors,
duration, ...), with made-up values.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import REPO, SAMPLE_TRACES

from msdiag import model
from msdiag.analysis import Options, analyze
from msdiag.cli import main
from msdiag.errors import ParseError
from msdiag.inference import latency as lat
from msdiag.inference.requests import looks_like_request_log, read_request_log
from msdiag.metrics import phases as ph
from msdiag.model import Capture, RankData, RankInfo

HAS_MINDSPORE = importlib.util.find_spec("mindspore") is not None
needs_mindspore = pytest.mark.skipif(
    not HAS_MINDSPORE, reason="MindSpore is not importable here: install it (pip install 'msdiag[capture]') to run the load test"
)
EXAMPLES = REPO / "examples"
SAMPLE_LOG = SAMPLE_TRACES / "serve_load" / "requests_rate50.jsonl"
LOW_LOG = SAMPLE_TRACES / "serve_load" / "requests_rate0.5.jsonl"  # the same server at 0.5 requests/s

# ---- a log whose figures are derived by hand ---------------------------------------------------
#
# request  arrival  token times (s)              TTFT   TPOT (mean gap)  E2E   prompt  batch
# r0       0.0      0.100 0.110 0.130             100    (10+20)/2 = 15   130   10      1
# r1       0.5      0.700 0.720 0.740 0.760       200    20               260   20      2
# r2       1.0      1.300 1.330                   300    30               330   30      2
# r3       1.5      1.900 1.940 1.980             400    40               480   40      4
# r4       2.0      3.000 3.100                  1000    100             1100   50      4
HAND = [
    ("r0", 0.0, [0.100, 0.110, 0.130], 10, 1),
    ("r1", 0.5, [0.700, 0.720, 0.740, 0.760], 20, 2),
    ("r2", 1.0, [1.300, 1.330], 30, 2),
    ("r3", 1.5, [1.900, 1.940, 1.980], 40, 4),
    ("r4", 2.0, [3.000, 3.100], 50, 4),
]


def _records(rows: list[tuple[str, float, list[float], int, int]] = HAND) -> list[dict[str, Any]]:
    return [
        {"request_id": rid, "arrival_s": a, "first_token_s": t[0], "finish_s": t[-1], "prompt_tokens": p,
         "output_tokens": len(t), "token_times_s": t, "batch_size": b}
        for rid, a, t, p, b in rows
    ]


def write_jsonl(path: Path, records: list[dict[str, Any]], header: bool = True) -> Path:
    lines = [json.dumps({"format": "msdiag-requests", "version": 1, "generator": "test"})] if header else []
    lines += [json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_csv(path: Path, records: list[dict[str, Any]]) -> Path:
    cols = ["request_id", "arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens", "token_times_s", "batch_size"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in records:
            w.writerow([";".join(str(x) for x in r[c]) if c == "token_times_s" else r[c] for c in cols])
    return path


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def report(path: Path, *extra: str) -> dict[str, Any]:
    code, out, err = run("analyze", str(path), "--format", "json", "--jobs", "1", *extra)
    assert code == 0, err
    return json.loads(out)


def test_percentiles_tails_and_throughput_by_hand(tmp_path: Path) -> None:
    m = report(write_jsonl(tmp_path / "r.jsonl", _records()))["metrics"]
    # TTFT sorted 100 200 300 400 1000; linear interpolation at rank q/100 x 4:
    assert m["ttft_p50_ms"] == pytest.approx(300.0)
    assert m["ttft_p90_ms"] == pytest.approx(760.0)  # 3.6 -> 400 + 0.6 x 600
    assert m["ttft_p99_ms"] == pytest.approx(976.0)  # 3.96 -> 400 + 0.96 x 600
    assert m["ttft_p999_ms"] == pytest.approx(997.6)  # 3.996
    assert m["ttft_tail_ratio"] == pytest.approx(976.0 / 300.0)
    # TPOT 15 20 30 40 100
    assert m["tpot_p50_ms"] == pytest.approx(30.0)
    assert m["tpot_p99_ms"] == pytest.approx(97.6)  # 40 + 0.96 x 60
    assert m["tpot_tail_ratio"] == pytest.approx(97.6 / 30.0)
    # E2E 130 260 330 480 1100
    assert m["e2e_p50_ms"] == pytest.approx(330.0)
    assert m["e2e_p90_ms"] == pytest.approx(852.0)  # 480 + 0.6 x 620
    # gaps 10 20 | 20 20 20 | 30 | 40 40 | 100 -> sorted, 9 values: p50 = 20, p99 at 7.92 -> 40 + 0.92 x 60
    assert m["itl_p50_ms"] == pytest.approx(20.0)
    assert m["itl_p99_ms"] == pytest.approx(95.2)
    # window: first arrival 0 to last token 3.1 s; 14 output tokens
    assert m["throughput_rps"] == pytest.approx(5 / 3.1)
    assert m["output_tokens_per_s"] == pytest.approx(14 / 3.1)
    assert m["request_count"] == 5 and m["failed_requests"] == 0
    # batch sizes 1 2 2 4 4: median 2, max 4; quartiles 2 and 4 -> TPOT median 20 (b <= 2) vs 70 (b >= 4)
    assert m["decode_batch_size_p50"] == 2 and m["decode_batch_size_max"] == 4
    assert m["tpot_batch_ratio"] == pytest.approx(3.5)
    assert m["ttft_prompt_corr"] == pytest.approx(1.0)  # TTFT rises with every longer prompt
    assert m["prompt_tokens_p50"] == 30


def test_queueing_from_the_fastest_requests_by_hand(tmp_path: Path) -> None:
    log = read_request_log(write_jsonl(tmp_path / "r.jsonl", _records()))
    # bounds: r0..r3 cost 10 ms per token; for 50 tokens every one of them says 500 ms (r3: 400 x 50/40),
    # so r4 (1000 ms) waited 500 ms; the others waited nothing
    assert lat.queueing_ms(log).tolist() == pytest.approx([0, 0, 0, 0, 500])
    assert lat.prefill_est_ms_p50(log) == pytest.approx(300.0)  # 30 tokens
    m = report(tmp_path / "r.jsonl")["metrics"]
    assert m["queueing_ms_p50"] == 0 and m["queueing_share"] == 0
    # a prefill costs 200 ms + 1 ms per token; r3 and r4 arrive while r2 decodes for 1.26 s and wait for it
    #        arrival  prompt  first token               TTFT   finish
    # r0     0        10      0.21                      210    0.31
    # r1     10       20      10.22                     220    10.32
    # r2     20       40      20.24                     240    21.5
    # r3     20.1     80      21.5 + 0.28 = 21.78       1680   21.9
    # r4     20.2     20      21.9 + 0.22 = 22.12       1920   22.2
    # r5     30       30      30.23                     230    30.33
    rows = [(0, 10, 0.21, 0.31), (10, 20, 10.22, 10.32), (20, 40, 20.24, 21.5), (20.1, 80, 21.78, 21.9),
            (20.2, 20, 22.12, 22.2), (30, 30, 30.23, 30.33)]
    recs = [{"arrival_s": a, "first_token_s": f, "finish_s": e, "prompt_tokens": p, "output_tokens": 2} for a, p, f, e in rows]
    log = read_request_log(write_jsonl(tmp_path / "q.jsonl", recs))
    # r0 r1 r2 r5 arrived to an empty server: their bounds, median per length. 80 tokens: 210 x 8, 220 x 4,
    # 240 x 2, 230 x 80/30 -> median (613.3 + 880) / 2 = 746.7, r3 waited 1680 - 746.7 = 933.3 (truly 1400:
    # conservative); 20 tokens: 420, 220, 240, 230 -> 235, r4 waited 1685 (truly 1700); the others 0
    assert lat.queueing_ms(log).tolist() == pytest.approx([0, 0, 0, 1680 - (230 * 80 / 30 + 880) / 2, 1685, 0])


def test_csv_json_array_and_jsonl_give_the_same_figures(tmp_path: Path) -> None:
    recs = _records()
    a = report(write_jsonl(tmp_path / "a.jsonl", recs))
    b = report(write_csv(tmp_path / "b.csv", recs))
    arr = tmp_path / "c.json"
    arr.write_text(json.dumps(recs))
    c = report(arr)
    assert a["requests"]["format"] == "msdiag-jsonl" and b["requests"]["format"] == "msdiag-csv"
    assert c["requests"]["format"] == "msdiag-json"
    for mid, v in a["metrics"].items():
        if isinstance(v, float):
            assert b["metrics"][mid] == pytest.approx(v), mid
            assert c["metrics"][mid] == pytest.approx(v), mid


def test_counts_only_without_token_times(tmp_path: Path) -> None:
    # no token_times_s: TPOT = (finish - first) / (output_tokens - 1) = (1.0 - 0.2) / 4 = 200 ms
    recs = [{"arrival_s": 0.0, "first_token_s": 0.2, "finish_s": 1.0, "prompt_tokens": 5, "output_tokens": 5},
            {"arrival_s": 0.1, "first_token_s": 0.4, "finish_s": 0.4, "prompt_tokens": 5, "output_tokens": 1}]
    log = read_request_log(write_jsonl(tmp_path / "r.jsonl", recs, header=False))
    assert log.requests["tpot_ms"].iloc[0] == pytest.approx(200.0)
    assert pd.isna(log.requests["tpot_ms"].iloc[1])  # one token: no TPOT
    assert not log.has_token_times
    with pytest.raises(lat.Unavailable, match="per-token"):
        lat.itl(log, 50)


def _vllm(**over: Any) -> dict[str, Any]:
    # Synthetic, with the keys of vLLM's benchmark_serving.py result (seconds); request 3 failed.
    doc = {
        "date": "20250101-000000", "backend": "vllm", "model_id": "m", "num_prompts": 4, "request_rate": 2.0,
        "duration": 4.0, "completed": 3,
        "input_lens": [100, 200, 300, 400],
        "output_lens": [3, 2, 4, 0],
        "ttfts": [0.1, 0.2, 0.5, 0.0],
        "itls": [[0.02, 0.04], [0.03], [0.05, 0.05, 0.05], []],
        "errors": ["", "", "", "timeout"],
        "generated_texts": ["a", "b", "c", ""],
    }
    doc.update(over)
    return doc


def test_vllm_benchmark_json(tmp_path: Path) -> None:
    p = tmp_path / "vllm-2.0qps-m.json"
    p.write_text(json.dumps(_vllm()))
    assert looks_like_request_log(p)
    rep = report(p)
    r, m = rep["requests"], rep["metrics"]
    assert r["format"] == "vllm-benchmark" and r["requests"] == 4 and r["completed"] == 3 and r["failed"] == 1
    # TTFT 100 200 500 ms; E2E = ttft + sum(itls) = 160 230 650; TPOT = (e2e - ttft) / (out - 1) = 30 30 50
    assert m["ttft_p50_ms"] == pytest.approx(200.0)
    assert m["e2e_p50_ms"] == pytest.approx(230.0)
    assert m["tpot_p50_ms"] == pytest.approx(30.0)
    assert m["tpot_p99_ms"] == pytest.approx(49.6)  # 30 + 0.98 x 20 (rank 1.98)
    # no start_times: the window is the benchmark's duration (4 s); arrival-based figures are null with the reason
    assert m["throughput_rps"] == pytest.approx(3 / 4.0)
    assert m["ttft_load_slope"] is None and "arrival" in rep["metric_details"]["ttft_load_slope"]["reason"]
    assert any("failed" in n for n in r["notes"])
    # newer vLLM: latencies and start_times
    p2 = tmp_path / "v2.json"
    p2.write_text(json.dumps(_vllm(latencies=[0.2, 0.25, 0.7, 0.0], start_times=[10.0, 10.5, 11.0, 11.5])))
    log = read_request_log(p2)
    assert log.requests["e2e_ms"].tolist() == pytest.approx([200.0, 250.0, 700.0])
    assert log.requests["arrival_s"].tolist() == pytest.approx([0.0, 0.5, 1.0])  # relative to the first start
    assert log.window_s()[0] == pytest.approx(1.7)  # 1.0 + 0.7


def test_slo_goodput(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", _records())
    m = report(path, "--slo-ttft-ms", "350")["metrics"]
    assert m["goodput_share"] == pytest.approx(3 / 5)  # TTFT 100 200 300 meet 350
    assert m["goodput_rps"] == pytest.approx(3 / 3.1)
    rep = report(path, "--slo-ttft-ms", "350", "--slo-tpot-ms", "25")
    assert rep["metrics"]["goodput_share"] == pytest.approx(2 / 5)  # and TPOT 15 20 meet 25
    assert rep["requests"]["slo"] == {"ttft_ms": 350.0, "tpot_ms": 25.0, "met": 2, "missed": 3}
    assert rep["options"]["slo_ttft_ms"] == 350.0
    none = report(path)
    assert none["metrics"]["goodput_rps"] is None and "SLO" in none["metric_details"]["goodput_rps"]["reason"]


def test_request_log_alone_keeps_the_json_contract(tmp_path: Path, analysed_json: Any) -> None:
    rep = report(write_jsonl(tmp_path / "r.jsonl", _records()))
    cap = analysed_json("sample")  # the session's analysis of sample_traces/train_small_cpu, as analyze prints it
    assert set(rep) == set(cap)  # same keys; requests / phases null for the capture
    assert rep["steps"] == [] and rep["ranks"] == [] and rep["phases"] is None
    assert rep["capture"]["workload"] == "inference" and rep["capture"]["family"] == "request_log"
    assert cap["requests"] is None
    assert cap["metrics"]["ttft_p50_ms"] is None
    assert "no request log" in cap["metric_details"]["ttft_p50_ms"]["reason"]
    assert "training" in cap["metric_details"]["prefill_step_ms"]["reason"]  # Adam, *Grad ops
    code, out, err = run("analyze", str(tmp_path / "r.jsonl"))
    assert code == 0 and "TTFT  p50" in out and "Per rank and step" not in out


def test_capture_with_requests(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "r.jsonl", _records())
    rep = report(SAMPLE_TRACES / "train_small_cpu", "--requests", str(log))
    assert rep["steps"] and rep["requests"]["completed"] == 5
    assert rep["metrics"]["ttft_p50_ms"] == pytest.approx(300.0)
    assert rep["options"]["requests"] == str(log)
    assert rep["phases"]["classified_by"] is None and "training" in rep["phases"]["reason"]


@pytest.mark.parametrize(
    "content,problem",
    [
        ("", "empty"),
        ('{"arrival_s": 0, "first_token_s": 1}\n', "'finish_s' is missing"),
        ('{"arrival_s": "soon", "first_token_s": 1, "finish_s": 2, "prompt_tokens": 3, "output_tokens": 2}\n', "not a finite number"),
        ('{"arrival_s": 2, "first_token_s": 1, "finish_s": 3, "prompt_tokens": 3, "output_tokens": 2}\n', "before arrival_s"),
        ('{"arrival_s": 0, "first_token_s": 1, "finish_s": 3, "prompt_tokens": 3.5, "output_tokens": 2}\n', "whole number"),
        ('{"arrival_s": 0, "token_times_s": [1, 0.5], "prompt_tokens": 3}\n', "back in time"),
        ('{"arrival_s": 0, "token_times_s": [1, 2], "output_tokens": 3, "prompt_tokens": 3}\n', "lists 2 times"),
        ('{"arrival_s": 0, "first_token_s": 1, "finish_s": 2, "prompt_tokens": 3, "output_tokens": 2}\n{"arrival_s": 1, "fir', "truncated"),
        ('{"format": "msdiag-requests", "version": 9}\n{"arrival_s": 0}\n', "version 9"),
    ],
)
def test_malformed_jsonl_names_the_file_and_the_problem(tmp_path: Path, content: str, problem: str) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    code, _, err = run("analyze", str(p))
    assert code == 2
    assert str(p) in err and problem in err and "Traceback" not in err


def test_malformed_csv_and_vllm(tmp_path: Path) -> None:
    p = tmp_path / "kernel_details.csv"
    p.write_text('"Step ID","Name","Duration(us)"\n1,MatMul,3\n')
    code, _, err = run("analyze", str(p))
    assert code == 2 and "arrival_s" in err and "capture folder" in err
    v = tmp_path / "v.json"
    v.write_text(json.dumps(_vllm(itls=[[0.1]])))
    code, _, err = run("analyze", str(v))
    assert code == 2 and f"{v}: 'itls' has 1 entries but 'ttfts' has 4" in err
    v.write_text(json.dumps(_vllm(errors=["x", "y", "z", "w"])))
    code, _, err = run("analyze", str(v))
    assert code == 2 and "all 4 requests failed" in err


def test_format_detection_and_routing(tmp_path: Path) -> None:
    jl = write_jsonl(tmp_path / "log.txt", _records(), header=False)  # detected from content, not the name
    assert looks_like_request_log(jl)
    assert report(jl)["requests"]["format"] == "msdiag-jsonl"
    trace = tmp_path / "trace_view.json"
    trace.write_text(json.dumps([{"ph": "X", "name": "MatMul", "ts": 1, "dur": 2}]))
    assert not looks_like_request_log(trace)
    code, _, err = run("analyze", str(trace))  # a file that is no request log: discovery's error, which names both
    assert code == 2 and "is a file" in err and "request timing log" in err
    code, _, err = run("analyze", str(jl), "--requests", str(jl))
    assert code == 2 and "itself a request log" in err
    code, _, err = run("analyze", str(SAMPLE_TRACES / "train_small_cpu"), "--requests", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "nope.jsonl: no such file" in err
    with pytest.raises(ParseError, match="is a folder"):
        read_request_log(tmp_path)


# ---- batching, load and stalls on simulated servers ------------------------------------------------


def simulate(arrivals: list[float], prompts: list[int], outs: list[int], policy: str, max_batch: int = 4) -> list[dict[str, Any]]:
    """A deterministic toy server: prefill 20 ms + 2 ms per prompt token, a decode step 50 ms.

    static: the requests waiting when the server is free form a batch (<= max_batch) that decodes until its
    longest answer is done. continuous: at every iteration the waiting requests are prefilled (one by one) and
    join the running batch, then one decode step runs for those already running.
    """
    n = len(arrivals)
    times: list[list[float]] = [[] for _ in range(n)]
    batch = [0] * n
    t = 0.0
    waiting = list(range(n))
    if policy == "static":
        while waiting:
            ready = [i for i in waiting if arrivals[i] <= t + 1e-12]
            if not ready:
                t = min(arrivals[i] for i in waiting)
                continue
            b = ready[:max_batch]
            for i in b:
                waiting.remove(i)
                batch[i] = len(b)
            t += 0.020 + 0.002 * max(prompts[i] for i in b)
            for i in b:
                times[i].append(t)
            for _ in range(max(outs[i] for i in b) - 1):
                t += 0.050
                for i in b:
                    if len(times[i]) < outs[i]:
                        times[i].append(t)
    else:
        running: list[int] = []
        while waiting or running:
            ready = [i for i in waiting if arrivals[i] <= t + 1e-12]
            if not ready and not running:
                t = min(arrivals[i] for i in waiting)
                continue
            decoding = list(running)
            for i in ready[: max(0, max_batch - len(running))]:
                waiting.remove(i)
                t += 0.020 + 0.002 * prompts[i]
                times[i].append(t)
                running.append(i)
            if decoding:
                t += 0.050
                for i in decoding:
                    times[i].append(t)
            running = [i for i in running if len(times[i]) < outs[i]]
            for i in running:
                batch[i] = max(batch[i], len(running))
    return [
        {"request_id": f"r{i}", "arrival_s": arrivals[i], "prompt_tokens": prompts[i], "token_times_s": times[i], "batch_size": max(batch[i], 1)}
        for i in range(n)
    ]


def _poisson(n: int, rate: float, seed: int = 0) -> tuple[list[float], list[int], list[int]]:
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, n)
    arr = (np.cumsum(gaps) - gaps[0]).round(6).tolist()
    return arr, rng.integers(20, 200, n).tolist(), rng.integers(4, 16, n).tolist()


def test_static_batching_under_load_fires_and_not_at_low_load(tmp_path: Path) -> None:
    arr, p, o = _poisson(24, rate=20.0)
    high = report(write_jsonl(tmp_path / "high.jsonl", simulate(arr, p, o, "static")))
    arr, p, o = _poisson(24, rate=0.5)
    low = report(write_jsonl(tmp_path / "low.jsonl", simulate(arr, p, o, "static")))
    hm, lm = high["metrics"], low["metrics"]
    assert hm["ttft_p99_ms"] > 3 * lm["ttft_p99_ms"]
    assert hm["inflight_join_share"] == 0.0 and hm["arrived_busy_share"] > 0.5
    assert hm["queueing_share"] > 0.5 and hm["ttft_load_slope"] > 0
    fired_high = {f["rule_id"] for f in high["findings"]}
    fired_low = {f["rule_id"] for f in low["findings"]}
    assert {"inference-queueing", "inference-static-batching"} <= fired_high
    assert not fired_low & {"inference-queueing", "inference-static-batching"}


def test_continuous_batching_joins_and_prefills_stall_decodes(tmp_path: Path) -> None:
    arr, p, o = _poisson(24, rate=3.0, seed=1)
    rep = report(write_jsonl(tmp_path / "cont.jsonl", simulate(arr, p, o, "continuous", max_batch=16)))
    m = rep["metrics"]
    assert m["inflight_join_share"] > 0.8  # requests that arrive to a busy server join it while others decode
    # a decode gap is 50 ms; a prefill of 20-200 tokens inserts 60-420 ms into the running streams' gaps
    assert m["prefill_stall_share"] > 0.2 and m["itl_tail_ratio"] > 2
    fired = {f["rule_id"] for f in rep["findings"]}
    assert "inference-prefill-stalls-decode" in fired and "inference-static-batching" not in fired
    # static batching never interleaves prefills with decodes
    static = report(write_jsonl(tmp_path / "st.jsonl", simulate(arr, p, o, "static")))
    assert static["metrics"]["prefill_stall_share"] == 0.0


def test_in_flight_and_load_slope_by_hand(tmp_path: Path) -> None:
    # 9 requests arrive together-ish and are served one after another: 0, 1, ..., 8 in flight at arrival;
    # each takes 1 s, so TTFT grows 1000 ms per request ahead: windows of 3 -> (1, 1000), (4, 4000), (7, 7000)
    recs = [{"arrival_s": 0.001 * i, "first_token_s": i + 0.5, "finish_s": i + 1.0, "prompt_tokens": 10, "output_tokens": 2} for i in range(9)]
    log = read_request_log(write_jsonl(tmp_path / "r.jsonl", recs))
    assert lat.in_flight_at_arrival(log).tolist() == list(range(9))
    x, y = lat.load_windows(log)
    assert x.tolist() == [1.0, 4.0, 7.0]
    assert y.tolist() == pytest.approx([1499.0, 4496.0, 7493.0])  # medians: i + 0.5 - 0.001 i seconds
    assert lat.ttft_load_slope(log) == pytest.approx(999.0)


# ---- phases of a capture (synthetic tables) ----------------------------------------------------


def _capture(durations_ms: list[float], shapes: list[str | None], memory: list[float] | None = None, cells: bool = True) -> tuple[Capture, pd.DataFrame]:
    """One rank; step i runs [i s, i s + duration); a LayerNorm at its start carries the step's input shape."""
    starts = [1e6 * i for i in range(len(durations_ms))]
    steps = model.STEPS.frame(
        {
            "rank": pd.array([0] * len(starts), dtype="Int64"),
            "step": pd.array(list(range(1, len(starts) + 1)), dtype="Int64"),
            "start_us": starts,
            "end_us": [s + d * 1000 for s, d in zip(starts, durations_ms)],
            "total_us": [d * 1000 for d in durations_ms],
            "computing_us": [d * 500 for d in durations_ms],
            "free_us": [d * 500 for d in durations_ms],
        }
    )
    steps["warmup"] = pd.array([False] * len(starts), dtype="boolean")
    k = model.KERNELS.frame(
        {
            "rank": pd.array([0] * len(starts), dtype="Int64"),
            "name": pd.array([f"Default/LayerNorm-op{i}" for i in range(len(starts))], dtype="string"),
            "type": pd.array(["LayerNorm"] * len(starts), dtype="string"),
            "core": pd.array(["AI_VECTOR_CORE"] * len(starts), dtype="string"),
            "kind": pd.array(["compute"] * len(starts), dtype="string"),
            "start_us": [s + 10 for s in starts],
            "dur_us": [100.0] * len(starts),
            "input_shapes": pd.array(shapes, dtype="string"),
        }
    )
    rd = RankData(0, "ascend_ms", "/x", tables={"kernels": k}, info=RankInfo(step_source="msdiag capture markers: top-level Cell calls" if cells else ""))
    if memory is not None:
        rd.tables["memory"] = model.MEMORY.frame(
            {"rank": pd.array([0] * len(memory), dtype="Int64"), "ts_us": [s - 1 for s in starts], "allocated_mb": memory}
        )
    return Capture("/x", [rd]), steps


def test_prefill_and_decode_from_shapes_and_kv_growth() -> None:
    # prefill [2, 16, 128] then 3 decodes [2, 1, 128], twice; allocated memory at each step start
    shapes = ["2,16,128;128;128", "2,1,128;128;128", "2,1,128;128;128", "2,1,128;128;128"] * 2
    mem = [100.0, 110.0, 111.0, 112.0, 100.0, 112.0, 113.0, 114.5]
    cap, steps = _capture([80, 20, 21, 22, 82, 20, 20, 24], shapes, mem)
    p = ph.classify(cap, steps)
    assert p.classified_by.startswith("input shapes")
    assert p.steps["phase"].tolist() == ["prefill", "decode", "decode", "decode"] * 2
    assert p.steps["batch"].tolist() == [2] * 8 and p.steps["seq"].tolist() == [16, 1, 1, 1] * 2
    s = ph.phase_summary(cap, p, None)
    assert s["prefill"]["steps"] == 2 and s["prefill"]["step_ms_p50"] == pytest.approx(81.0)
    assert s["decode"]["step_ms_p50"] == pytest.approx(20.5)  # 20 20 21 22 22 24 -> (21 + 22) / 2 ... sorted 20 20 20 21 22 24
    assert s["prefill"]["share"] == pytest.approx(162 / (162 + 127))
    # KV held: run 1 grows 112 - 100 = 12 MB, run 2 114.5 - 100 = 14.5 MB (the larger)
    assert ph.kv_cache_from_memory(cap, p)[0] == pytest.approx(14.5)


def test_prefill_and_decode_from_durations_when_shapes_are_absent() -> None:
    cap, steps = _capture([300, 50, 52, 49, 51, 310, 50, 48], [None] * 8)
    p = ph.classify(cap, steps)
    assert "duration" in p.classified_by
    assert p.steps["phase"].tolist() == ["prefill"] + ["decode"] * 4 + ["prefill"] + ["decode"] * 2
    flat, steps = _capture([50, 52, 49, 51, 50, 48], [None] * 6)
    assert not ph.classify(flat, steps).ok  # one cluster: no prefill to tell apart
    cap, steps = _capture([300, 50, 52, 49], [None] * 4, cells=False)
    assert "not forward calls" in ph.classify(cap, steps).reason


def test_kv_cache_share_from_a_model_description(tmp_path: Path) -> None:
    cfg = tmp_path / "m.yaml"
    # 2 x 32 layers x 8 KV heads x 128 x 4096 tokens x 16 sequences x 2 bytes = 8 GiB
    cfg.write_text("layers: 32\nhidden: 4096\nheads: 32\nkv_heads: 8\nvocab: 32000\nseq_len: 4096\nglobal_batch: 16\n")
    log = write_jsonl(tmp_path / "r.jsonl", _records())
    rep = report(log, "--model-config", str(cfg), "--device-memory-gb", "10")
    assert rep["metrics"]["kv_cache_mb"] == pytest.approx(8192.0)
    assert rep["metrics"]["kv_cache_share"] == pytest.approx(0.8)
    rep = report(log, "--model-config", str(cfg), "--device-memory-gb", "9")
    assert "inference-kv-cache-memory" in {f["rule_id"] for f in rep["findings"]}  # 8 / 9 = 89%


def test_html_report_of_a_request_log(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "r.jsonl", _records())
    pages = []
    for name in ("a.html", "b.html"):
        code, _, err = run("report", str(log), "-o", str(tmp_path / name), "--slo-ttft-ms", "350")
        assert code == 0, err
        pages.append((tmp_path / name).read_bytes())
    assert pages[0] == pages[1]  # deterministic
    html = pages[0].decode()
    assert "Request latency: TTFT, TPOT and end-to-end (CDF)" in html and "TTFT against prompt length" in html
    assert "TPOT against decode batch size" in html and "Step time by rank and step" not in html


def test_committed_sample_log(tmp_path: Path) -> None:
    """sample_traces/serve_load/requests_rate50.jsonl: a real run of examples/serve_load.py at high load."""
    rep = report(SAMPLE_LOG)
    m = rep["metrics"]
    assert rep["requests"]["meta"]["generator"] == "examples/serve_load.py"
    assert m["queueing_share"] > 0.5 and m["ttft_load_slope"] > 0 and m["inflight_join_share"] == 0.0
    assert {"inference-queueing", "inference-static-batching"} <= {f["rule_id"] for f in rep["findings"]}


def test_chart_views_show_the_figures_the_json_reports() -> None:
    """The latency chart's P50 / P90 / P99 lines and the TTFT scatter come from the analysis's views
    (msdiag/metrics/views.py): the same numbers as the metrics, computed once, drawn by the report."""
    a = analyze(SAMPLE_LOG, Options(slo_ttft_ms=350.0))
    assert a.views is not None and a.views.has_inference and not a.views.has_capture
    cdf = a.views.latency_cdf
    assert cdf.absent is None and cdf.any_slo and cdf.requests == len(a.requests.requests)
    ttft = {c.column: c for c in cdf.columns}["ttft_ms"]
    # one definition of a percentile (numpy's linear interpolation): the chart's lines are the metrics
    assert dict(ttft.percentiles) == pytest.approx(
        {"p50": a.metrics["ttft_p50_ms"].value, "p90": a.metrics["ttft_p90_ms"].value, "p99": a.metrics["ttft_p99_ms"].value}
    )
    assert ttft.slo_ms == 350.0 and list(ttft.values) == sorted(ttft.values)
    sc = a.views.ttft_prompt
    # the estimated prefill line at the median prompt is the metric prefill_est_ms_p50 (same bound, same requests)
    med = float(np.median(sc.x))
    est = lat.prefill_bound_ms(*lat.prefill_reference(a.requests)[:2], np.array([med]), sc.how)[0]
    assert est == pytest.approx(a.metrics["prefill_est_ms_p50"].value)
    assert a.views.phase_bars.absent == "no capture: a request log alone has no steps (give a capture with --requests)"


# ---- the real MindSpore load test --------------------------------------------------------------------


def _serve(tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.jsonl"
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / "serve_load.py"), "--out", str(out), *args],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return report(out)


def test_raising_the_load_raises_the_tail_and_msdiag_says_why() -> None:
    """The same server (examples/serve_load.py) at 50 and at 0.5 requests/s: the two bundled real logs
    (sample_traces/README.md), so that the comparison never depends on this machine's load."""
    high, low = report(SAMPLE_LOG), report(LOW_LOG)
    hm, lm = high["metrics"], low["metrics"]
    # TTFT = first_token_s - arrival_s per request; percentiles interpolate linearly (numpy's default).
    #   rate 50, 12 requests: sorted TTFTs (ms) 459.491 2722.405 2733.412 2733.457 2733.853 5428.903 5485.239
    #     5500.345 5513.817 7137.539 7137.565 7203.293 -> P50 (5428.903 + 5485.239) / 2 = 5457.071,
    #     P99 at 0.99 x 11 = 10.89: 7137.565 + 0.89 x 65.728 = 7196.063
    #   rate 0.5, 10 requests: 66.722 253.690 284.321 414.484 469.137 472.755 819.045 823.583 1068.313 1740.585
    #     -> P50 (469.137 + 472.755) / 2 = 470.946, P99 at 0.99 x 9 = 8.91: 1068.313 + 0.91 x 672.272 = 1680.081
    assert (hm["ttft_p50_ms"], hm["ttft_p99_ms"]) == pytest.approx((5457.071, 7196.063), abs=0.01)
    assert (lm["ttft_p50_ms"], lm["ttft_p99_ms"]) == pytest.approx((470.946, 1680.081), abs=0.01)
    assert hm["ttft_p99_ms"] > 1.5 * lm["ttft_p99_ms"]
    assert hm["request_count"] == 12 and lm["request_count"] == 10
    # queueing at rate 50: r0 alone found the server empty (TTFT 459.491 ms for 17 prompt tokens), which bounds a
    # prefill of up to 32 tokens by 459.491 x 32 / 17 = 865 ms; every request queued at least its TTFT minus
    # that, so the median queueing is at least 5457 - 865 = 4592 ms, 0.84 of the median TTFT (above the rule's 0.5)
    assert hm["queueing_share"] > 0.8 and hm["queueing_ms_p50"] > 4500
    # at rate 0.5, six of ten requests found the server empty (r0 r1 r5 r6 r8 r9; r2 r3 came within 45 ms of r1,
    # r4 while r2 and r3 decoded, r7 while r6 did): their TTFTs are the prefill cost, so the median request
    # queued only the spread among them (12 ms), under inference-queueing's min_ms of 20 ms
    assert lm["queueing_ms_p50"] < 20 and lm["queueing_share"] < 0.1
    assert hm["queueing_share"] > lm["queueing_share"]
    # arrived while another was in flight: 11 of 12 at rate 50, 4 of 10 (r2 r3 r4 r7) at rate 0.5; none joined
    assert hm["arrived_busy_share"] == pytest.approx(11 / 12) and lm["arrived_busy_share"] == pytest.approx(4 / 10)
    fired_high = {f["rule_id"] for f in high["findings"]}
    fired_low = {f["rule_id"] for f in low["findings"]}
    assert {"inference-queueing", "inference-static-batching"} <= fired_high
    # static batching needs queueing too (queueing_share above 0.3): quiet at low load
    assert "inference-queueing" not in fired_low and "inference-static-batching" not in fired_low


@pytest.mark.slow
@pytest.mark.mindspore
@needs_mindspore
def test_the_live_server_log_is_well_formed_and_every_request_counted(tmp_path: Path) -> None:
    """examples/serve_load.py run live: what does not depend on timing (the load comparison above uses the bundled
    logs, since live tails depend on the machine's load): the log is well-formed, msdiag analyzes it, and every
    request is counted, in arrival order, with its tokens."""
    rep = _serve(tmp_path, "live", "--rate", "50", "--requests", "8", "--max-batch", "4")
    log = read_request_log(rep["requests"]["path"])
    r = log.requests
    assert looks_like_request_log(Path(rep["requests"]["path"]))
    assert rep["requests"]["meta"]["generator"] == "examples/serve_load.py"
    assert rep["metrics"]["request_count"] == len(r) == 8 and rep["metrics"]["failed_requests"] == 0
    assert list(r["request_id"]) == [f"r{i}" for i in range(8)]
    assert (r["arrival_s"].diff().dropna() >= 0).all()  # in arrival order
    # every request got its first token after it arrived and finished no earlier; answers are 2-6 tokens
    assert (r["first_token_s"] >= r["arrival_s"]).all() and (r["finish_s"] >= r["first_token_s"]).all()
    assert r["output_tokens"].between(2, 6).all() and r["batch_size"].between(1, 4).all()
    assert rep["metrics"]["ttft_p99_ms"] is not None and rep["metrics"]["ttft_p99_ms"] >= rep["metrics"]["ttft_p50_ms"]


@pytest.mark.slow
@pytest.mark.mindspore
@needs_mindspore
def test_capture_of_the_server_and_its_request_log_together(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    out = tmp_path / "cap"
    r = subprocess.run(
        [sys.executable, "-m", "msdiag.cli", "capture", "--out", str(out), "--skip", "0", "--warmup", "0", "--steps", "60", "--",
         sys.executable, str(EXAMPLES / "serve_load.py"), "--rate", "50", "--requests", "8", "--max-batch", "4", "--out", str(log)],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    a = analyze(out, Options(jobs=1, requests=str(log)))
    assert a.identity["workload"] == "inference"
    p = a.inference["phases"]
    assert p["classified_by"].startswith("input shapes")  # LayerNorm [batch, sequence, 128] in cpu_framework
    batches = read_request_log(log).requests.groupby("first_token_s")["batch_size"].first()
    assert p["prefill"]["steps"] >= len(batches) - 1  # each batch prefills once (a warm-up step may be left out)
    assert p["decode"]["steps"] > p["prefill"]["steps"]
    assert a.metrics["decode_batch_size_max"].value == batches.max()
    assert a.metrics["prefill_step_ms"].value > 0 and a.metrics["kv_cache_mb"].value > 0
    assert a.metrics["ttft_p99_ms"].value is not None
