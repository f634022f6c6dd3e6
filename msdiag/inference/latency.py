"""Figures over a request log: latency percentiles, goodput, queueing, growth with load, batching evidence.

Pure functions of a :class:`~msdiag.inference.requests.RequestLog`; each returns a number, or raises
:class:`Unavailable` with the reason the log cannot give it (the metric is then null with that reason).

Conventions:

- percentiles across requests with linear interpolation (numpy's default), P99.9 included;
- a request's TPOT is the mean of its inter-token latencies (null for a one-token answer);
- goodput counts the requests that meet every SLO given (a one-token answer meets the TPOT SLO, as in
  vLLM); failed requests never do;
- queueing, from a request log alone: a prefill costs the same whatever the load (a fixed part plus a part
  per prompt token), so the fastest requests say what a prefill costs: each request's TTFT bounds the cost of
  a prompt no longer than its own, and, scaled by the length ratio, of a longer one. The requests that arrived
  to an empty server did not wait: the median of their bounds is the estimate; without arrival times (or no
  such request), the smallest bound of any request (:func:`prefill_reference`). A request's TTFT above the
  estimate for its prompt is time it waited (for a slot, a batch, other prefills);
- growth with load: requests in arrival order are cut into windows of equal count; the slope of the
  windows' median TTFT against the mean number of requests in flight when they arrived (ms per request
  in flight).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from msdiag.inference.requests import RequestLog

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
MAX_BOUND_REQUESTS = 4000  # requests whose TTFT bounds the prefill cost (an even sample beyond this)
MIN_REQUESTS = 5  # fewer requests give no percentile worth reporting beyond the median
LOAD_WINDOWS = 8  # arrival-time windows for the TTFT-against-load slope
MIN_PER_WINDOW = 3
# A token gap is a stall when it is this many times the request's own median gap...
STALL_FACTOR = 2.0
# ...and a request that arrived while others decode "joined" when its first token came before they all finished.


class Unavailable(Exception):
    """The log cannot give this figure; the message says why."""


def _vals(s: pd.Series) -> np.ndarray:
    return s.dropna().to_numpy(dtype=float)


def percentile(values: np.ndarray, q: float) -> float:
    if not len(values):
        raise Unavailable("no value to take a percentile of")
    return float(np.percentile(values, q))  # linear interpolation


def latency(log: RequestLog, col: str, q: float) -> float:
    """Percentile ``q`` of a per-request latency column (ttft_ms, tpot_ms, e2e_ms)."""
    v = _vals(log.requests[col])
    if not len(v):
        if col == "tpot_ms":
            raise Unavailable("every request produced a single token: no time per output token")
        raise Unavailable(f"no request has {col}")
    return percentile(v, q)


def tail_ratio(log: RequestLog, col: str) -> float:
    """P99 / P50 of a latency column."""
    p50 = latency(log, col, 50.0)
    if p50 <= 0:
        raise Unavailable(f"median {col} is 0")
    return latency(log, col, 99.0) / p50


def itl(log: RequestLog, q: float) -> float:
    """Percentile ``q`` of every inter-token gap of every request."""
    if not log.has_token_times:
        raise Unavailable("the log has no per-token times (token_times_s / itls)")
    return percentile(_vals(log.gaps["itl_ms"]), q)


def window(log: RequestLog) -> float:
    w, why = log.window_s()
    if w is None:
        raise Unavailable(why)
    return w


def throughput_rps(log: RequestLog) -> float:
    return len(log.requests) / window(log)


def output_tokens_per_s(log: RequestLog) -> float:
    return float(log.requests["output_tokens"].astype(float).sum()) / window(log)


def good_mask(log: RequestLog, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> np.ndarray:
    """Which completed requests meet every SLO given."""
    if slo_ttft_ms is None and slo_tpot_ms is None:
        raise Unavailable("no SLO given (--slo-ttft-ms, --slo-tpot-ms)")
    r = log.requests
    ok = np.ones(len(r), dtype=bool)
    if slo_ttft_ms is not None:
        ok &= r["ttft_ms"].to_numpy(dtype=float) <= float(slo_ttft_ms)
    if slo_tpot_ms is not None:
        tp = r["tpot_ms"].to_numpy(dtype=float)
        ok &= np.isnan(tp) | (tp <= float(slo_tpot_ms))  # a one-token answer has no TPOT to miss
    return ok


def goodput_rps(log: RequestLog, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> float:
    return float(good_mask(log, slo_ttft_ms, slo_tpot_ms).sum()) / window(log)


def goodput_share(log: RequestLog, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> float:
    """Requests meeting the SLOs over all requests of the log (failed ones count as missing them)."""
    return float(good_mask(log, slo_ttft_ms, slo_tpot_ms).sum()) / max(log.total, 1)


# ---- queueing ------------------------------------------------------------------------------


def _prompt_mask(log: RequestLog) -> np.ndarray:
    r = log.requests
    return (r["prompt_tokens"].notna() & (r["prompt_tokens"].fillna(0) > 0)).to_numpy(dtype=bool)


def _with_prompts(log: RequestLog) -> pd.DataFrame:
    r = log.requests[_prompt_mask(log)]
    if len(r) < MIN_REQUESTS:
        raise Unavailable(f"fewer than {MIN_REQUESTS} requests with a known prompt length")
    return r


def prefill_bound_ms(prompts: np.ndarray, ttfts: np.ndarray, targets: np.ndarray, how: str = "min") -> np.ndarray:
    """What a prefill of each target length costs, from the given (prompt, TTFT) of requests.

    Every request bounds the prefill cost: a prompt no longer than its own costs at most its TTFT, a longer one
    at most its TTFT scaled by the length ratio (a prefill is a fixed part plus a part per token, so cost per
    token only falls with length). ``how`` reduces the bounds for each length: ``min`` (the fastest request
    sets it: a prefill cannot be faster than it is) or ``median`` (for requests known not to have waited, whose
    spread is noise rather than queueing).
    """
    j = np.arange(len(prompts))
    if len(j) > MAX_BOUND_REQUESTS:  # keep it linear for huge logs: an even sample of the requests
        j = np.linspace(0, len(prompts) - 1, MAX_BOUND_REQUESTS).astype(int)
    pj, tj = prompts[j], ttfts[j]
    out = np.empty(len(targets), dtype=float)
    for lo in range(0, len(targets), 256):
        t = targets[lo : lo + 256, None]
        bounds = tj[None, :] * np.maximum(1.0, t / pj[None, :])
        out[lo : lo + 256] = bounds.min(axis=1) if how == "min" else np.median(bounds, axis=1)
    return out


def prefill_reference(log: RequestLog) -> tuple[np.ndarray, np.ndarray, str]:
    """(prompts, TTFTs, reduction) of the requests that say what a prefill costs.

    With arrival times, the requests that arrived to an empty server (nothing else in flight) did not wait:
    their TTFT is all prefill, and the median of their bounds is robust to timing noise. Without arrival times,
    or when every request arrived to a busy server, the fastest request's bound (``min``).
    """
    r = _with_prompts(log)
    p = r["prompt_tokens"].to_numpy(dtype=float)
    t = r["ttft_ms"].to_numpy(dtype=float)
    if log.has_arrivals:
        idle = in_flight_at_arrival(log)[_prompt_mask(log)] == 0
        if idle.any():
            return p[idle], t[idle], "median"
    return p, t, "min"


def prefill_est_ms(log: RequestLog) -> np.ndarray:
    """Per request (with a known prompt length): what a prefill of its prompt costs."""
    r = _with_prompts(log)
    rp, rt, how = prefill_reference(log)
    return prefill_bound_ms(rp, rt, r["prompt_tokens"].to_numpy(dtype=float), how)


def queueing_ms(log: RequestLog) -> np.ndarray:
    """Per request: TTFT minus what a prefill of its prompt costs (>= 0)."""
    r = _with_prompts(log)
    return np.clip(r["ttft_ms"].to_numpy(dtype=float) - prefill_est_ms(log), 0.0, None)


def prefill_est_ms_p50(log: RequestLog) -> float:
    """What a prefill of the median prompt costs."""
    r = _with_prompts(log)
    rp, rt, how = prefill_reference(log)
    median = float(np.median(r["prompt_tokens"].to_numpy(dtype=float)))
    return float(prefill_bound_ms(rp, rt, np.array([median]), how)[0])


def queueing_share(log: RequestLog) -> float:
    """Median queueing over median TTFT."""
    ttft = latency(log, "ttft_ms", 50.0)
    if ttft <= 0:
        raise Unavailable("median TTFT is 0")
    return float(np.median(queueing_ms(log))) / ttft


def prefill_ttft_share(log: RequestLog) -> float:
    """The median prompt's estimated prefill over the median TTFT: how much of the first-token wait is prefill."""
    ttft = latency(log, "ttft_ms", 50.0)
    if ttft <= 0:
        raise Unavailable("median TTFT is 0")
    return min(1.0, prefill_est_ms_p50(log) / ttft)


# ---- load ----------------------------------------------------------------------------------


def _need_arrivals(log: RequestLog) -> pd.DataFrame:
    if not log.has_arrivals:
        raise Unavailable("the log has no arrival times (vLLM results need start_times)")
    return log.requests


def in_flight_at_arrival(log: RequestLog) -> np.ndarray:
    """For each request: the other requests that had arrived and not finished when it arrived."""
    r = _need_arrivals(log)
    a = r["arrival_s"].to_numpy(dtype=float)
    f = r["finish_s"].to_numpy(dtype=float)
    idx = np.arange(len(a))
    out = np.zeros(len(a), dtype=float)
    for i in range(len(a)):
        earlier = (a < a[i]) | ((a == a[i]) & (idx < i))  # simultaneous arrivals: the log's order
        out[i] = float(np.sum(earlier & (f > a[i])))
    return out


def load_windows(log: RequestLog) -> tuple[np.ndarray, np.ndarray]:
    """(mean requests in flight at arrival, median TTFT ms) per arrival-order window."""
    r = _need_arrivals(log)
    n = len(r)
    k = min(LOAD_WINDOWS, n // MIN_PER_WINDOW)
    if k < 3:
        raise Unavailable(f"fewer than {3 * MIN_PER_WINDOW} requests: too few arrival windows for a slope")
    load = in_flight_at_arrival(log)
    order = np.argsort(r["arrival_s"].to_numpy(dtype=float), kind="stable")
    ttft = r["ttft_ms"].to_numpy(dtype=float)
    xs, ys = [], []
    for part in np.array_split(order, k):
        xs.append(float(np.mean(load[part])))
        ys.append(float(np.median(ttft[part])))
    return np.array(xs), np.array(ys)


def ttft_load_slope(log: RequestLog) -> float:
    """Least-squares slope of the windows' median TTFT against requests in flight (ms per request)."""
    x, y = load_windows(log)
    if float(np.ptp(x)) < 0.5:
        raise Unavailable("the load hardly varied over the log (requests in flight at arrival nearly constant)")
    slope, _ = np.polyfit(x, y, 1)
    return float(slope)


# ---- batching evidence ---------------------------------------------------------------------


def _busy_and_joined(log: RequestLog) -> tuple[np.ndarray, np.ndarray]:
    """Per request: (it arrived while another request was in flight, its first token came while another was decoding).

    Under static batching a first token never comes while another request is mid-decode (the batch in service
    must finish first; requests of the same batch share their first token); under continuous batching a
    request that arrives to a busy server joins the running batch at its next step, while others still decode.
    """
    r = _need_arrivals(log)
    a = r["arrival_s"].to_numpy(dtype=float)
    ft = r["first_token_s"].to_numpy(dtype=float)
    fin = r["finish_s"].to_numpy(dtype=float)
    idx = np.arange(len(a))
    eps = 1e-9
    busy = np.zeros(len(a), dtype=bool)
    joined = np.zeros(len(a), dtype=bool)
    for i in range(len(a)):
        earlier = (a < a[i]) | ((a == a[i]) & (idx < i))
        busy[i] = bool(np.any(earlier & (fin > a[i])))
        mid = (ft < ft[i] - eps) & (fin > ft[i] + eps)
        mid[i] = False
        joined[i] = bool(mid.any())
    return busy, joined


def arrived_busy_share(log: RequestLog) -> float:
    """Share of requests that arrived while another request was in flight (arrived, not finished)."""
    busy, _ = _busy_and_joined(log)
    return float(busy.mean())


def inflight_join_share(log: RequestLog) -> float:
    """Of the requests that arrived to a busy server, the share whose first token came while another still decoded."""
    if log.arrivals == "modelled":  # the join test compares instants: a modelled arrival is off by a decode step or more
        raise Unavailable(
            "needs recorded arrival times (start_times): modelled arrivals are off by more than the gap between one "
            "batch's last token and the next batch's first"
        )
    busy, joined = _busy_and_joined(log)
    if not busy.any():
        raise Unavailable("no request arrived while another was in flight")
    return float(joined[busy].mean())


def batch_sizes(log: RequestLog) -> np.ndarray:
    b = _vals(log.requests["batch_size"].astype("Float64"))
    if not len(b):
        raise Unavailable("the log records no batch_size")
    return b


def tpot_batch_ratio(log: RequestLog) -> float:
    """Median TPOT of requests in the largest batches (top quarter) over that of the smallest (bottom quarter)."""
    r = log.requests[log.requests["batch_size"].notna() & log.requests["tpot_ms"].notna()]
    if len(r) < MIN_REQUESTS:
        raise Unavailable("fewer than 5 requests with both batch_size and a TPOT")
    b = r["batch_size"].to_numpy(dtype=float)
    lo, hi = np.percentile(b, 25), np.percentile(b, 75)
    if hi <= lo:
        raise Unavailable("every request ran at nearly the same batch size: no comparison")
    small = r["tpot_ms"].to_numpy(dtype=float)[b <= lo]
    large = r["tpot_ms"].to_numpy(dtype=float)[b >= hi]
    base = float(np.median(small))
    if base <= 0:
        raise Unavailable("median TPOT at small batches is 0")
    return float(np.median(large)) / base


# ---- decode stalls -------------------------------------------------------------------------


def prefill_stall_share(log: RequestLog) -> float:
    """Share of decode time lost in token gaps that another request's first token (its prefill) interrupted.

    A gap counts when it is more than STALL_FACTOR times the request's median gap and another
    request's first token falls inside it; what it lost is the gap minus that median.
    """
    if not log.has_token_times:
        raise Unavailable("the log has no per-token times (token_times_s / itls)")
    g = log.gaps
    if g["start_s"].isna().any():
        raise Unavailable("token times are not on the arrival clock (vLLM results need start_times)")
    firsts = np.sort(log.requests["first_token_s"].to_numpy(dtype=float))
    itl_ms = g["itl_ms"].to_numpy(dtype=float)
    total = float(itl_ms.sum())
    if total <= 0:
        raise Unavailable("no decode time")
    med = g.groupby("req")["itl_ms"].transform("median").to_numpy(dtype=float)
    stalled = itl_ms > STALL_FACTOR * med
    # first tokens strictly after the gap's start (the request's own first token never is) and by its end
    lo = np.searchsorted(firsts, g["start_s"].to_numpy(dtype=float), side="right")
    hi = np.searchsorted(firsts, g["end_s"].to_numpy(dtype=float), side="right")
    hit = stalled & (hi > lo)
    return float(np.sum(itl_ms[hit] - med[hit])) / total


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (Pearson on ranks, ties averaged)."""
    if len(x) < MIN_REQUESTS:
        raise Unavailable("fewer than 5 requests")
    rx = pd.Series(x).rank().to_numpy(dtype=float)
    ry = pd.Series(y).rank().to_numpy(dtype=float)
    if np.std(rx) == 0 or np.std(ry) == 0:
        raise Unavailable("one of the two does not vary")
    c = float(np.corrcoef(rx, ry)[0, 1])
    if not math.isfinite(c):
        raise Unavailable("no correlation")
    return c


def ttft_prompt_corr(log: RequestLog) -> float:
    r = _with_prompts(log)
    return spearman(r["prompt_tokens"].to_numpy(dtype=float), r["ttft_ms"].to_numpy(dtype=float))
