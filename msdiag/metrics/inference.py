"""Inference metrics: TTFT / TPOT / end-to-end latency, throughput, goodput, queueing (request logs), and
prefill / decode phases and the KV cache (captures of an inference process).

Request metrics read ``Context.requests`` (a request log: ``msdiag analyze LOG`` or ``--requests LOG``) and
are null with that reason without one; phase metrics read the capture's steps (see
:mod:`msdiag.metrics.phases`). Latencies are milliseconds; percentiles across requests with linear
interpolation (numpy's default).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from msdiag.inference import latency as lat
from msdiag.inference.latency import Unavailable
from msdiag.inference.requests import RequestLog
from msdiag.metrics import phases as ph
from msdiag.metrics.registry import Context, Value, metric
from msdiag.units import MIB_PER_GIB, US_PER_MS

NO_LOG = "no request log (msdiag analyze LOG, or msdiag analyze CAPTURE --requests LOG)"
LOG_SOURCE = "request log"


def _log(ctx: Context) -> RequestLog:
    log = getattr(ctx, "requests", None)
    if log is None:
        raise Unavailable(NO_LOG)
    return log


def _from_log(fn: Callable[[RequestLog, Context], float]) -> Callable[[Context], Value]:
    def run(ctx: Context) -> Value:
        try:
            v = fn(_log(ctx), ctx)
            return Value(v if isinstance(v, int) else float(v))
        except Unavailable as e:
            return Value(None, reason=str(e))

    return run


# ---- latency distributions ------------------------------------------------------------------

_WHAT = {
    "ttft": ("ttft_ms", "Time to first token (arrival to first output token)"),
    "tpot": ("tpot_ms", "Time per output token after the first (a request's mean inter-token latency)"),
    "e2e": ("e2e_ms", "End-to-end latency (arrival to last output token)"),
}
_PCT_WORD = {"p50": "median", "p90": "90th percentile", "p99": "99th percentile", "p999": "99.9th percentile"}


def _pct(col: str, q: float) -> Callable[[RequestLog, Context], float]:
    return lambda log, ctx: lat.latency(log, col, q)


for _name, (_col, _doc) in _WHAT.items():
    for _key, _q in lat.PERCENTILES.items():
        metric(f"{_name}_{_key}_ms", "ms", f"{_doc}: {_PCT_WORD[_key]} over requests", f"{LOG_SOURCE}: {_col}")(
            _from_log(_pct(_col, _q))
        )

metric("ttft_tail_ratio", "ratio", "How heavy the TTFT tail is: P99 / P50 of time to first token", f"{LOG_SOURCE}: ttft_ms")(
    _from_log(lambda log, ctx: lat.tail_ratio(log, "ttft_ms"))
)
metric("tpot_tail_ratio", "ratio", "How heavy the TPOT tail is: P99 / P50 of time per output token", f"{LOG_SOURCE}: tpot_ms")(
    _from_log(lambda log, ctx: lat.tail_ratio(log, "tpot_ms"))
)
metric("itl_p50_ms", "ms", "Inter-token latency: median over every gap between consecutive tokens", f"{LOG_SOURCE}: token times")(
    _from_log(lambda log, ctx: lat.itl(log, 50.0))
)
metric("itl_p99_ms", "ms", "Inter-token latency: 99th percentile over every gap between consecutive tokens", f"{LOG_SOURCE}: token times")(
    _from_log(lambda log, ctx: lat.itl(log, 99.0))
)


@metric("itl_tail_ratio", "ratio", "How uneven token pacing is: P99 / P50 of inter-token latency", f"{LOG_SOURCE}: token times")
def _itl_tail(ctx: Context) -> Value:
    def f(log: RequestLog, c: Context) -> float:
        p50 = lat.itl(log, 50.0)
        if p50 <= 0:
            raise Unavailable("median inter-token latency is 0")
        return lat.itl(log, 99.0) / p50

    return _from_log(f)(ctx)


# ---- throughput and goodput -----------------------------------------------------------------

metric("request_count", "requests", "Completed requests in the request log", LOG_SOURCE)(_from_log(lambda log, ctx: len(log.requests)))
metric("failed_requests", "requests", "Requests the log marks as failed (left out of the latencies)", LOG_SOURCE)(
    _from_log(lambda log, ctx: log.failed)
)
metric("throughput_rps", "req/s", "Completed requests per second over the log's window (first arrival to last token)", LOG_SOURCE)(
    _from_log(lambda log, ctx: lat.throughput_rps(log))
)
metric("output_tokens_per_s", "tokens/s", "Output tokens per second over the log's window", LOG_SOURCE)(
    _from_log(lambda log, ctx: lat.output_tokens_per_s(log))
)
metric(
    "goodput_rps", "req/s", "Requests per second that meet every SLO given (--slo-ttft-ms, --slo-tpot-ms)",
    f"{LOG_SOURCE} + options slo_ttft_ms / slo_tpot_ms",
)(_from_log(lambda log, ctx: lat.goodput_rps(log, ctx.options.slo_ttft_ms, ctx.options.slo_tpot_ms)))
metric(
    "goodput_share", "ratio", "Share of all requests (failed ones included) that meet every SLO given",
    f"{LOG_SOURCE} + options slo_ttft_ms / slo_tpot_ms",
)(_from_log(lambda log, ctx: lat.goodput_share(log, ctx.options.slo_ttft_ms, ctx.options.slo_tpot_ms)))

# ---- queueing, load and batching ------------------------------------------------------------

metric(
    "queueing_ms_p50", "ms",
    "Median time a request waited before its prefill: TTFT minus what a prefill of its prompt costs (from requests that found the server empty, else the fastest)",
    f"{LOG_SOURCE}: ttft_ms, prompt_tokens",
)(_from_log(lambda log, ctx: float(np.median(lat.queueing_ms(log)))))
metric("queueing_share", "ratio", "Median queueing over median TTFT: how much of the first-token wait is waiting", f"{LOG_SOURCE}: ttft_ms, prompt_tokens")(
    _from_log(lambda log, ctx: lat.queueing_share(log))
)
metric(
    "prefill_ttft_share", "ratio", "Estimated prefill of the median prompt over the median TTFT (at most 1): how much of the first-token wait is prefill",
    f"{LOG_SOURCE}: ttft_ms, prompt_tokens",
)(_from_log(lambda log, ctx: lat.prefill_ttft_share(log)))
metric(
    "prefill_est_ms_p50", "ms", "Estimated prefill time of the median prompt (from requests that found the server empty, else the fastest)",
    f"{LOG_SOURCE}: ttft_ms, prompt_tokens",
)(_from_log(lambda log, ctx: lat.prefill_est_ms_p50(log)))
metric(
    "ttft_load_slope", "ms/request",
    "TTFT growth with load: slope of the median TTFT of arrival windows against the requests in flight at arrival",
    f"{LOG_SOURCE}: arrival_s, finish_s, ttft_ms",
)(_from_log(lambda log, ctx: lat.ttft_load_slope(log)))
metric("ttft_prompt_corr", "ratio", "Rank correlation of TTFT with prompt length (1: longer prompts always wait longer)", f"{LOG_SOURCE}: ttft_ms, prompt_tokens")(
    _from_log(lambda log, ctx: lat.ttft_prompt_corr(log))
)


@metric("prompt_tokens_p50", "tokens", "Median prompt length", f"{LOG_SOURCE}: prompt_tokens")
def _prompt_p50(ctx: Context) -> Value:
    def f(log: RequestLog, c: Context) -> float:
        v = log.requests["prompt_tokens"].dropna()
        if not len(v):
            raise Unavailable("the log records no prompt lengths")
        return float(np.median(v.astype(float)))

    return _from_log(f)(ctx)


metric(
    "arrived_busy_share", "ratio", "Share of requests that arrived while another request was in flight (a batch to join, or a queue)",
    f"{LOG_SOURCE}: arrival_s, finish_s",
)(_from_log(lambda log, ctx: lat.arrived_busy_share(log)))
metric(
    "inflight_join_share", "ratio",
    "Of the requests that arrived while others were in flight, the share whose first token came while another request "
    "was still decoding (continuous batching: near 1; static batches: 0)",
    f"{LOG_SOURCE}: arrival_s, first_token_s, finish_s",
)(_from_log(lambda log, ctx: lat.inflight_join_share(log)))
metric(
    "tpot_batch_ratio", "ratio", "Median TPOT of requests in the largest decode batches (top quarter) over that of the smallest (bottom quarter)",
    f"{LOG_SOURCE}: tpot_ms, batch_size",
)(_from_log(lambda log, ctx: lat.tpot_batch_ratio(log)))
metric(
    "prefill_stall_share", "ratio",
    "Share of decode time lost in token gaps that another request's prefill interrupted (gaps over 2x the request's median gap)",
    f"{LOG_SOURCE}: token times",
)(_from_log(lambda log, ctx: lat.prefill_stall_share(log)))


# ---- phases of a capture -------------------------------------------------------------------


def _phase_value(fn: Callable[[ph.Phases, Context], float | None], why_none: str) -> Callable[[Context], Value]:
    def run(ctx: Context) -> Value:
        phases = ph.phases_for(ctx)
        if not phases.ok:
            return Value(None, reason=phases.reason)
        v = fn(phases, ctx)
        return Value(None, reason=why_none) if v is None else Value(float(v))

    return run


def _median_ms(p: str) -> Callable[[ph.Phases, Context], float | None]:
    def f(phases: ph.Phases, ctx: Context) -> float | None:
        s = phases.timed(p)
        return float(np.median(s["total_us"])) / US_PER_MS if len(s) else None

    return f


metric("prefill_step_ms", "ms", "Median duration of a prefill step (a forward call over whole prompts)", "capture steps told apart by input shapes or duration")(
    _phase_value(_median_ms(ph.PREFILL), "no prefill step (after warm-up)")
)
metric("decode_step_ms", "ms", "Median duration of a decode step (one new token per sequence)", "capture steps told apart by input shapes or duration")(
    _phase_value(_median_ms(ph.DECODE), "no decode step (after warm-up)")
)


@metric("prefill_share", "ratio", "Share of forward time spent in prefill steps (prefill + decode = 1; warm-up left out)", "capture steps")
def _prefill_share(ctx: Context) -> Value:
    def f(phases: ph.Phases, c: Context) -> float | None:
        a = float(phases.timed(ph.PREFILL)["total_us"].sum())
        b = float(phases.timed(ph.DECODE)["total_us"].sum())
        return a / (a + b) if a + b > 0 else None

    return _phase_value(f, "no timed prefill or decode step")(ctx)


def _decode_batches(ctx: Context) -> tuple[np.ndarray | None, str]:
    phases = ph.phases_for(ctx)
    if phases.ok:
        b = phases.timed(ph.DECODE)["batch"].dropna()
        if len(b):
            return b.to_numpy(dtype=float), "capture: decode steps' input shapes"
    log = getattr(ctx, "requests", None)
    if log is not None:
        try:
            return lat.batch_sizes(log), "request log: batch_size"
        except Unavailable as e:
            return None, str(e)
    return None, phases.reason or "decode steps carry no input shapes and there is no request log with batch_size"


@metric("decode_batch_size_p50", "requests", "Median decode batch size (sequences per decode step)",
        "capture decode steps' input shapes, else the request log's batch_size", given=_decode_batches)
def _batch_p50(ctx: Context, b: np.ndarray) -> Value:
    return Value(float(np.median(b)))


@metric("decode_batch_size_max", "requests", "Largest decode batch size seen",
        "capture decode steps' input shapes, else the request log's batch_size", given=_decode_batches)
def _batch_max(ctx: Context, b: np.ndarray) -> Value:
    return Value(float(np.max(b)))


def _phase_tflops(p: str) -> Callable[[Context], Value]:
    def run(ctx: Context) -> Value:
        phases = ph.phases_for(ctx)
        if not phases.ok:
            return Value(None, reason=phases.reason)
        d = ph.summary_for(ctx).get(p)
        if not d:
            return Value(None, reason=f"no {p} step (after warm-up)")
        if d.get("tflops") is None:
            return Value(None, reason=f"no {p} kernel carries shapes with a FLOPs formula (PyNative CPU PyBoost ops record none)")
        return Value(float(d["tflops"]))

    return run


metric("prefill_tflops", "TFLOP/s", "Achieved TFLOP/s in prefill steps: FLOPs of their kernels (from shapes) over their duration", "capture kernels in prefill steps")(_phase_tflops(ph.PREFILL))
metric("decode_tflops", "TFLOP/s", "Achieved TFLOP/s in decode steps: FLOPs of their kernels (from shapes) over their duration", "capture kernels in decode steps")(_phase_tflops(ph.DECODE))


def _kv_mb(ctx: Context) -> tuple[float | None, str]:
    phases = ph.phases_for(ctx)
    why = phases.reason or ""
    if len(ctx.capture.ranks):
        mb, why = ph.kv_cache_from_memory(ctx.capture, phases)
        if mb is not None:
            return mb, why
    cfg_path = ctx.options.model_config
    if cfg_path:
        from msdiag.metrics import model_config

        try:
            cfg = model_config.load_model_config(str(cfg_path))
        except ValueError as e:
            return None, str(e)
        mb2, why2 = ph.kv_cache_from_model(cfg)
        if mb2 is not None:
            return mb2, why2
        why = f"{why}; {why2}"
    return None, (why + "; or give --model-config (layers, hidden, heads, kv_heads, seq_len, global_batch)").lstrip("; ")


@metric(
    "kv_cache_mb", "MB", "Memory held by the KV cache: growth of allocated memory over decode runs, else K and V of the model description",
    "capture memory timeline over decode steps, else --model-config", given=_kv_mb,
)
def _kv_cache_mb(ctx: Context, mb: np.ndarray) -> Value:
    return Value(float(mb))


@metric("kv_cache_share", "ratio", "KV cache memory over device memory", "kv_cache_mb / device memory (--device-memory-gb or --device)",
        given=_kv_mb)
def _kv_cache_share(ctx: Context, mb: np.ndarray) -> Value:
    from msdiag.metrics.memory import _capacity

    gb, cwhy = _capacity(ctx)
    if gb is None:
        return Value(None, reason=cwhy or "device memory unknown")
    return Value(float(mb) / (float(gb) * MIB_PER_GIB))
