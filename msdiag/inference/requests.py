"""Request timing logs -> one canonical request table.

Three formats are read, told apart by their content (the file name is only a hint):

``msdiag-jsonl`` / ``msdiag-json`` / ``msdiag-csv``: msdiag's own request log. One record per request
(a JSON object per line, a JSON array of objects, or a CSV row under a header):

==================  ========  =================================================================
field               required  meaning
==================  ========  =================================================================
``request_id``      no        any text or number (default: the record's position)
``arrival_s``       yes       when the request arrived (seconds, any clock shared by the log)
``first_token_s``   yes [1]_  when its first output token was produced
``finish_s``        yes [1]_  when its last output token was produced
``prompt_tokens``   yes       prompt length in tokens
``output_tokens``   yes [1]_  tokens generated (the first included)
``token_times_s``   no        the time of every output token (JSON list; in CSV numbers joined by ``;``)
``batch_size``      no        the decode batch the request ran in (median if it changed)
``status``          no        ``ok`` (default) or anything else: a failed request, counted, left out
``error``           no        a non-empty error text marks a failed request too
==================  ========  =================================================================

.. [1] may be left out when ``token_times_s`` is given: its first and last entries and its length.

A JSONL file may start with a header object ``{"format": "msdiag-requests", "version": 1, ...}``
whose other keys describe the run (rate, batching policy); they are kept as ``meta``. Other
fields of a record are ignored.

``vllm-benchmark``: the result JSON of vLLM's ``benchmarks/benchmark_serving.py`` (and ``vllm bench
serve``) written with ``--save-result --save-detailed``: a JSON object with per-request lists
``ttfts`` (seconds), ``itls`` (list of lists, seconds), ``input_lens``, ``output_lens``, ``errors``
and, in newer versions, ``latencies`` / ``e2els`` (seconds) and ``start_times``; ``duration`` is
the benchmark's wall time. Without ``latencies`` / ``e2els`` a request's end-to-end latency is
``ttft + sum(itls)``. Without ``start_times`` the arrivals are modelled from ``request_rate`` as the benchmark
generates them (:func:`modelled_arrivals`; labelled ``arrivals = "modelled"``), else unknown (the metrics that need
them are null with that reason).

Derived per request: TTFT = first token - arrival, end-to-end = finish - arrival, TPOT = the mean of
its inter-token latencies, i.e. (last token - first token) / (output tokens - 1) (vLLM's definition;
null for a one-token answer). A malformed log is a ParseError naming the file, the record and what
is wrong.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from msdiag import model
from msdiag.errors import ParseError
from msdiag.units import MS_PER_S

HEADER_FORMAT = "msdiag-requests"
HEADER_VERSION = 1

MSDIAG_JSONL = "msdiag-jsonl"
MSDIAG_JSON = "msdiag-json"
MSDIAG_CSV = "msdiag-csv"
VLLM = "vllm-benchmark"
FORMAT_LABEL = {
    MSDIAG_JSONL: "msdiag request log (JSONL)",
    MSDIAG_JSON: "msdiag request log (JSON array)",
    MSDIAG_CSV: "msdiag request log (CSV)",
    VLLM: "vLLM benchmark_serving result JSON",
}
# Suffixes that make a file a request log for `msdiag analyze FILE` even when its content is not
# recognised (the reader then says what is wrong with it).
LOG_SUFFIXES = (".jsonl", ".ndjson", ".csv")
_SNIFF_BYTES = 65536
_TIME_TOLERANCE_S = 1e-6  # clocks written with microsecond rounding

# the request tables are defined with the others in msdiag.model
REQUESTS = model.REQUESTS
TOKEN_GAPS = model.TOKEN_GAPS


@dataclass
class RequestLog:
    """A request log read into canonical tables."""

    path: str
    format: str
    requests: pd.DataFrame  # REQUESTS: completed requests only
    gaps: pd.DataFrame  # TOKEN_GAPS: empty when the log has no per-token times
    total: int  # records in the log, failed ones included
    failed: int
    duration_s: float | None = None  # the benchmark's own wall time, where the log records one
    meta: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # where arrival times come from: "recorded" (the log's), "modelled" (from the benchmark's request rate), "absent"
    arrivals: str = "recorded"
    arrivals_how: str | None = None  # how modelled arrivals were made (one sentence)

    @property
    def has_arrivals(self) -> bool:
        return bool(len(self.requests)) and bool(self.requests["arrival_s"].notna().all())

    @property
    def has_token_times(self) -> bool:
        return bool(len(self.gaps))

    def window_s(self) -> tuple[float | None, str]:
        """The wall time the requests span (first arrival to last finish), else the log's duration (first when the
        arrivals are modelled: the benchmark measured its duration)."""
        r = self.requests
        if self.arrivals == "modelled" and self.duration_s and self.duration_s > 0:  # measured beats modelled
            return float(self.duration_s), "the log's benchmark duration"
        if self.has_arrivals and len(r):
            w = float(r["finish_s"].max() - r["arrival_s"].min())
            if w > 0:
                return w, "first arrival to last token"
        if self.duration_s and self.duration_s > 0:
            return float(self.duration_s), "the log's benchmark duration"
        return None, "the log has neither arrival times nor a benchmark duration"


# ---- detection -----------------------------------------------------------------------------


def _head(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            raw = f.read(_SNIFF_BYTES)
    except OSError:
        return ""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    return raw.decode("utf-8", errors="replace")


def looks_like_request_log(path: str | Path) -> bool:
    """True when the file's first bytes look like a request log of a format msdiag reads."""
    p = Path(path)
    if not p.is_file():
        return False
    head = _head(p).lstrip()
    if not head:
        return False
    if head.startswith("{"):
        if any(k in head for k in ('"ttfts"', '"input_lens"', '"output_lens"', '"itls"')):
            return True
        first = head.splitlines()[0]
        try:
            d = json.loads(first)
        except ValueError:
            return False
        return isinstance(d, dict) and (d.get("format") == HEADER_FORMAT or "arrival_s" in d)
    if head.startswith("["):
        return '"arrival_s"' in head
    first = head.splitlines()[0]
    return "arrival_s" in [c.strip().strip('"') for c in first.split(",")]


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError(path, "not UTF-8 text: expected a request log (JSONL, JSON or CSV)") from None
    if not text.strip():
        raise ParseError(path, "the file is empty: expected a request log (JSONL, JSON or CSV)")
    return text


_EXPECTED = (
    "expected a request log: msdiag JSONL/CSV (fields arrival_s, first_token_s, finish_s, prompt_tokens, "
    "output_tokens) or vLLM benchmark_serving result JSON (ttfts, itls, input_lens, output_lens)"
)


def read_request_log(path: str | Path) -> RequestLog:
    """Read a request log of any supported format (detected from its content)."""
    p = Path(path)
    if not p.exists():
        raise ParseError(p, "no such file")
    if p.is_dir():
        raise ParseError(p, "is a folder; --requests takes a request log file")
    text = _read_text(p)
    s = text.lstrip()
    if s.startswith("{"):
        try:
            doc = json.loads(s)
        except ValueError:
            doc = None  # several objects: JSONL
        if isinstance(doc, dict):
            if "ttfts" in doc or "itls" in doc or "input_lens" in doc:
                return _from_vllm(p, doc)
            if doc.get("format") != HEADER_FORMAT and "arrival_s" not in doc:
                keys = ", ".join(sorted(map(str, doc))[:8])
                raise ParseError(p, f"a JSON object with keys {keys}: {_EXPECTED}")
        return _from_jsonl(p, text)
    if s.startswith("["):
        try:
            doc = json.loads(s)
        except ValueError as e:
            raise ParseError(p, f"not valid JSON ({e})") from None
        if not isinstance(doc, list):
            raise ParseError(p, _EXPECTED)
        return _from_records(p, MSDIAG_JSON, [(f"record {i + 1}", r) for i, r in enumerate(doc)], {})
    return _from_csv(p, text)


# ---- msdiag's own format -------------------------------------------------------------------


def _from_jsonl(p: Path, text: str) -> RequestLog:
    records: list[tuple[str, Any]] = []
    meta: dict[str, Any] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            if n == len(text.splitlines()) and not text.endswith("\n"):
                raise ParseError(p, f"line {n}: truncated or not JSON ({e}); the log ends in the middle of a record") from None
            raise ParseError(p, f"line {n}: not a JSON object ({e})") from None
        if isinstance(obj, dict) and obj.get("format") == HEADER_FORMAT and not records and not meta:
            version = obj.get("version")
            if not isinstance(version, int) or version > HEADER_VERSION:
                raise ParseError(p, f"line {n}: request log version {version!r}; this msdiag reads version {HEADER_VERSION}")
            meta = {k: v for k, v in obj.items() if k not in ("format", "version")}
            continue
        records.append((f"line {n}", obj))
    return _from_records(p, MSDIAG_JSONL, records, meta)


def _from_csv(p: Path, text: str) -> RequestLog:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    if "arrival_s" not in header:
        hint = ""
        if any(h in header for h in ("Duration(us)", "Step ID", "Op Name", "Name")):
            hint = " (this looks like a profiler CSV: give its capture folder instead)"
        raise ParseError(p, f"CSV header has no arrival_s column{hint}: {_EXPECTED}")
    records: list[tuple[str, Any]] = []
    for n, row in enumerate(reader, start=2):
        if None in row:
            raise ParseError(p, f"line {n}: more values than header columns")
        d: dict[str, Any] = {}
        for k, v in row.items():
            k = (k or "").strip()
            v = (v or "").strip()
            if v == "":
                continue
            if k == "token_times_s":
                try:
                    d[k] = [float(x) for x in v.replace(",", ";").split(";") if x.strip()]
                except ValueError:
                    raise ParseError(p, f"line {n}: token_times_s {v!r} is not numbers joined by ';'") from None
            elif k in ("request_id", "status", "error"):
                d[k] = v
            else:
                try:
                    d[k] = float(v)
                except ValueError:
                    d[k] = v  # reported as not a number below, for the fields that must be
        records.append((f"line {n}", d))
    return _from_records(p, MSDIAG_CSV, records, {})


def _bad(p: Path, where: str, problem: str) -> ParseError:
    return ParseError(p, f"{where}: {problem}")


def _number(p: Path, where: str, d: dict[str, Any], key: str, required: bool = True) -> float | None:
    v = d.get(key)
    if v is None:
        if required:
            raise _bad(p, where, f"'{key}' is missing")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise _bad(p, where, f"'{key}' is {v!r}, not a finite number")
    return float(v)


def _count(p: Path, where: str, d: dict[str, Any], key: str, minimum: int, required: bool = True) -> int | None:
    v = _number(p, where, d, key, required)
    if v is None:
        return None
    if v != int(v) or v < minimum:
        raise _bad(p, where, f"'{key}' is {d[key]!r}, not a whole number >= {minimum}")
    return int(v)


def _failed(d: dict[str, Any]) -> bool:
    status = d.get("status")
    err = d.get("error")
    return (status is not None and str(status).lower() not in ("ok", "success", "succeeded", "")) or bool(err)


def _from_records(p: Path, fmt: str, records: list[tuple[str, Any]], meta: dict[str, Any]) -> RequestLog:
    if not records:
        raise ParseError(p, "holds no request records")
    rows: list[dict[str, Any]] = []
    gaps: list[tuple[int, float, float]] = []
    failed = 0
    seen_ids: set[str] = set()
    for i, (where, d) in enumerate(records):
        if not isinstance(d, dict):
            raise _bad(p, where, f"a record must be a JSON object, found {type(d).__name__}")
        rid = str(d.get("request_id", i))
        if rid in seen_ids:
            raise _bad(p, where, f"request_id {rid!r} appears twice")
        seen_ids.add(rid)
        if _failed(d):
            failed += 1
            continue
        arrival = _number(p, where, d, "arrival_s")
        tt = d.get("token_times_s")
        times: list[float] | None = None
        if tt is not None:
            if not isinstance(tt, list) or not tt or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x)) for x in tt
            ):
                raise _bad(p, where, "'token_times_s' must be a non-empty list of numbers")
            times = [float(x) for x in tt]
            if any(b < a - _TIME_TOLERANCE_S for a, b in zip(times, times[1:])):
                raise _bad(p, where, "'token_times_s' goes back in time")
        first = _number(p, where, d, "first_token_s", required=times is None)
        finish = _number(p, where, d, "finish_s", required=times is None)
        prompt = _count(p, where, d, "prompt_tokens", 0)
        out = _count(p, where, d, "output_tokens", 1, required=times is None)
        batch = _count(p, where, d, "batch_size", 1, required=False)
        if times is not None:
            if first is not None and abs(first - times[0]) > _TIME_TOLERANCE_S:
                raise _bad(p, where, f"first_token_s {first} differs from token_times_s[0] {times[0]}")
            if out is not None and out != len(times):
                raise _bad(p, where, f"output_tokens is {out} but token_times_s lists {len(times)} times")
            first = times[0] if first is None else first
            finish = times[-1] if finish is None else finish
            out = len(times)
        assert arrival is not None and first is not None and finish is not None and out is not None
        if first < arrival - _TIME_TOLERANCE_S:
            raise _bad(p, where, f"first_token_s {first} is before arrival_s {arrival}")
        if finish < first - _TIME_TOLERANCE_S:
            raise _bad(p, where, f"finish_s {finish} is before first_token_s {first}")
        if times is not None and finish < times[-1] - _TIME_TOLERANCE_S:
            raise _bad(p, where, f"finish_s {finish} is before the last token time {times[-1]}")
        last = times[-1] if times is not None else finish
        tpot = (last - first) * MS_PER_S / (out - 1) if out >= 2 else float("nan")
        k = len(rows)
        rows.append(
            {
                "request_id": rid, "arrival_s": arrival, "first_token_s": first, "finish_s": finish,
                "prompt_tokens": prompt, "output_tokens": out, "batch_size": batch,
                "ttft_ms": (first - arrival) * MS_PER_S, "tpot_ms": tpot, "e2e_ms": (finish - arrival) * MS_PER_S,
            }
        )
        if times is not None:
            gaps.extend((k, a, b) for a, b in zip(times, times[1:]))
    if not rows:
        raise ParseError(p, f"all {len(records)} requests failed: no latency to analyze")
    notes = [f"{failed} of {len(records)} requests failed (status / error): left out of the latencies"] if failed else []
    return RequestLog(str(p), fmt, _requests_frame(rows), _gaps_frame(gaps), len(records), failed, None, meta, notes)


def _requests_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    cols = {c: [r[c] for r in rows] for c in REQUESTS.columns}
    for c in ("prompt_tokens", "output_tokens", "batch_size"):
        cols[c] = pd.array(cols[c], dtype=model.INT)  # type: ignore[assignment]
    for c in ("arrival_s", "first_token_s", "finish_s", "ttft_ms", "tpot_ms", "e2e_ms"):
        cols[c] = np.array([np.nan if v is None else float(v) for v in cols[c]], dtype=float)  # type: ignore[assignment]
    return REQUESTS.frame(cols)


def _gaps_frame(gaps: Iterable[tuple[int, float, float]], itl_ms: list[float] | None = None) -> pd.DataFrame:
    g = list(gaps)
    if not g:
        return TOKEN_GAPS.empty()
    req = pd.array([x[0] for x in g], dtype=model.INT)
    start = np.array([x[1] for x in g], dtype=float)
    end = np.array([x[2] for x in g], dtype=float)
    itl = np.array(itl_ms, dtype=float) if itl_ms is not None else (end - start) * MS_PER_S
    return TOKEN_GAPS.frame({"req": req, "start_s": start, "end_s": end, "itl_ms": itl})


# ---- vLLM benchmark_serving ----------------------------------------------------------------

_VLLM_META = ("backend", "model_id", "date", "request_rate", "burstiness", "max_concurrency", "num_prompts")


def _vlist(p: Path, doc: dict[str, Any], key: str, n: int | None) -> list[Any] | None:
    v = doc.get(key)
    if v is None:
        return None
    if not isinstance(v, list):
        raise ParseError(p, f"'{key}' is a {type(v).__name__}, expected a list with one entry per request")
    if n is not None and len(v) != n:
        raise ParseError(p, f"'{key}' has {len(v)} entries but 'ttfts' has {n}: the per-request lists must align")
    return v


@dataclass
class _VllmColumns:
    """The per-request lists of a vLLM benchmark result (None where the version writes none)."""

    ttfts: list[Any]
    itls: list[Any] | None
    inputs: list[Any] | None
    outputs: list[Any] | None
    e2e_key: str
    e2els: list[Any] | None
    starts: list[Any] | None
    errors: list[Any] | None


def _vllm_columns(p: Path, doc: dict[str, Any]) -> _VllmColumns:
    """The lists a vLLM result must hold to give latencies, checked for presence and length."""
    ttfts = _vlist(p, doc, "ttfts", None)
    if ttfts is None:
        raise ParseError(
            p,
            "vLLM benchmark result without 'ttfts': save it with --save-result --save-detailed "
            "(without --save-detailed the per-request lists are dropped)",
        )
    n = len(ttfts)
    if n == 0:
        raise ParseError(p, "'ttfts' is empty: the benchmark recorded no request")
    e2e_key = "latencies" if doc.get("latencies") is not None else "e2els"
    c = _VllmColumns(
        ttfts=ttfts, itls=_vlist(p, doc, "itls", n), inputs=_vlist(p, doc, "input_lens", n),
        outputs=_vlist(p, doc, "output_lens", n), e2e_key=e2e_key, e2els=_vlist(p, doc, e2e_key, n),
        starts=_vlist(p, doc, "start_times", n), errors=_vlist(p, doc, "errors", n),
    )
    if c.e2els is None and c.itls is None:
        raise ParseError(p, "neither 'latencies' / 'e2els' nor 'itls': the end-to-end latency cannot be derived")
    if c.outputs is None and c.itls is None:
        raise ParseError(p, "neither 'output_lens' nor 'itls': the output token counts cannot be derived")
    return c


def _vllm_seconds(p: Path, key: str, i: int, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)) or v < 0:
        raise ParseError(p, f"request {i}: {key} is {v!r}, not a non-negative number (seconds)")
    return float(v)


def _vllm_whole(p: Path, key: str, i: int, v: Any, least: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < least:
        raise ParseError(p, f"request {i}: {key} is {v!r}, not a whole number >= {least}")
    return int(v)


def _vllm_request(p: Path, c: _VllmColumns, i: int, t0: float | None) -> tuple[dict[str, Any], list[float] | None] | None:
    """Request ``i``'s row and inter-token gaps (s), or None when it failed (an error, no output)."""
    out_i = c.outputs[i] if c.outputs is not None else None
    if (c.errors is not None and c.errors[i]) or out_i == 0 or c.ttfts[i] is None:
        return None
    ttft = _vllm_seconds(p, "ttfts", i, c.ttfts[i])
    il = c.itls[i] if c.itls is not None else None
    if il is not None and (not isinstance(il, list)):
        raise ParseError(p, f"request {i}: itls entry is {type(il).__name__}, expected a list of seconds")
    il_s = [_vllm_seconds(p, "itls", i, x) for x in il] if il is not None else None
    e2e = _vllm_seconds(p, c.e2e_key, i, c.e2els[i]) if c.e2els is not None else ttft + sum(il_s or [])
    if e2e < ttft - _TIME_TOLERANCE_S:
        raise ParseError(p, f"request {i}: end-to-end latency {e2e} s is shorter than its TTFT {ttft} s")
    out = _vllm_whole(p, "output_lens", i, out_i, 1) if out_i is not None else len(il_s or []) + 1
    prompt = _vllm_whole(p, "input_lens", i, c.inputs[i], 0) if c.inputs is not None else None
    arrival = float(c.starts[i]) - t0 if c.starts is not None and t0 is not None else None
    tpot = (e2e - ttft) * MS_PER_S / (out - 1) if out >= 2 else float("nan")
    row = {
        "request_id": str(i), "arrival_s": arrival,
        "first_token_s": None if arrival is None else arrival + ttft,
        "finish_s": None if arrival is None else arrival + e2e,
        "prompt_tokens": prompt, "output_tokens": out, "batch_size": None,
        "ttft_ms": ttft * MS_PER_S, "tpot_ms": tpot, "e2e_ms": e2e * MS_PER_S,
    }
    return row, il_s


def _rate(doc: dict[str, Any]) -> float | None:
    """The benchmark's request rate (requests/s): a positive number, inf (written as "inf" or Infinity), else None."""
    v = doc.get("request_rate")
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(v, (int, float)) and not isinstance(v, bool) and (v > 0 or v == math.inf):
        return float(v)
    return None


def modelled_arrivals(doc: dict[str, Any], n: int) -> tuple[list[float] | None, str]:
    """Arrival times (s from the first send) of a vLLM result without ``start_times``, and how they were made.

    benchmark_serving sends the requests in list order, each after a gap drawn from a gamma distribution of mean
    1 / ``request_rate`` (``burstiness`` 1: a Poisson process), all at once when the rate is inf; the i-th request
    (from 0) is therefore sent at i / rate on average (``num_prompts`` / rate for the whole load). Each arrival is
    bounded by the benchmark's ``duration``, within which the request finished (see _from_vllm). With
    ``max_concurrency`` set the sends wait for a free slot and the gaps say nothing of the arrivals: None.
    """
    rate = _rate(doc)
    if doc.get("max_concurrency") not in (None, 0):
        return None, "max_concurrency gates the sends, so the request rate does not give the arrivals"
    if rate is None:
        return None, "the result records no request_rate"
    if rate == math.inf:
        return [0.0] * n, "request_rate inf: every request sent at t = 0"
    return [i / rate for i in range(n)], (
        f"request i sent at i / request_rate ({rate:g} requests/s), the mean of the benchmark's Poisson arrivals"
    )


def _bounded(arrivals: list[float], e2e_s: list[float | None], duration: float | None) -> int:
    """Move modelled arrivals earlier where the request would otherwise finish after the benchmark's duration;
    the number moved."""
    moved = 0
    if duration is None:
        return 0
    for i, e in enumerate(e2e_s):
        if e is not None and arrivals[i] + e > duration:
            arrivals[i] = max(0.0, duration - e)
            moved += 1
    return moved


def _vllm_arrivals(p: Path, doc: dict[str, Any], c: _VllmColumns, duration: float | None) -> tuple[_VllmColumns, str, str | None]:
    """The columns with start times (recorded, or modelled when the result has none): (columns, arrivals, how)."""
    if c.starts is not None:
        return c, "recorded", None
    n = len(c.ttfts)
    starts, how = modelled_arrivals(doc, n)
    if starts is None:
        return c, "absent", how
    e2e: list[float | None] = []
    for i in range(n):
        v = c.e2els[i] if c.e2els is not None else None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            e2e.append(float(v))
        elif c.itls is not None and isinstance(c.itls[i], list) and isinstance(c.ttfts[i], (int, float)):
            e2e.append(float(c.ttfts[i]) + sum(float(x) for x in c.itls[i] if isinstance(x, (int, float))))
        else:
            e2e.append(None)
    moved = _bounded(starts, e2e, duration)
    if moved:
        how += f"; {moved} moved earlier to finish within the benchmark's duration ({duration:g} s)"
    c.starts = starts
    return c, "modelled", how


def _from_vllm(p: Path, doc: dict[str, Any]) -> RequestLog:
    dur = doc.get("duration")
    duration = float(dur) if isinstance(dur, (int, float)) and not isinstance(dur, bool) and dur > 0 else None
    c, arrivals, how = _vllm_arrivals(p, doc, _vllm_columns(p, doc), duration)
    n = len(c.ttfts)
    rows: list[dict[str, Any]] = []
    gaps: list[tuple[int, float, float]] = []
    gap_ms: list[float] = []
    failed = 0
    t0 = None
    if c.starts is not None:
        ok_starts = [float(s) for s in c.starts if isinstance(s, (int, float)) and not isinstance(s, bool)]
        t0 = min(ok_starts) if ok_starts else None
    for i in range(n):
        got = _vllm_request(p, c, i, t0)
        if got is None:
            failed += 1
            continue
        row, il_s = got
        k = len(rows)
        rows.append(row)
        if il_s:
            t = row["first_token_s"] if row["first_token_s"] is not None else float("nan")
            for x in il_s:
                gaps.append((k, t, t + x))
                gap_ms.append(x * MS_PER_S)
                t = t + x
    if not rows:
        raise ParseError(p, f"all {n} requests failed (errors / zero output): no latency to analyze")
    notes = []
    if failed:
        notes.append(f"{failed} of {n} requests failed (errors or no output): left out of the latencies")
    if arrivals == "absent":
        notes.append(f"no start_times in the vLLM result and {how}: arrival times unknown (load and batching figures are null)")
    elif arrivals == "modelled":
        notes.append(f"no start_times in the vLLM result: arrival times modelled ({how}); load and batching figures stand on them")
    if c.inputs is None:
        notes.append("no input_lens in the vLLM result: prompt lengths unknown")
    meta = {k: doc[k] for k in _VLLM_META if k in doc}
    return RequestLog(str(p), VLLM, _requests_frame(rows), _gaps_frame(gaps, gap_ms), n, failed, duration, meta, notes,
                      arrivals=arrivals, arrivals_how=how)


# ---- writing (the load generator and tests) ------------------------------------------------


def header_line(**meta: Any) -> str:
    """The optional first line of a JSONL request log."""
    return json.dumps({"format": HEADER_FORMAT, "version": HEADER_VERSION, **meta}, sort_keys=False)
