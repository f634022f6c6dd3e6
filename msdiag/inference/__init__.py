"""Inference: request timing logs (TTFT, TPOT, end-to-end latency) and prefill / decode phases of a capture.

- :mod:`msdiag.inference.requests`  request logs -> the canonical request table (our JSONL / CSV, vLLM's
  ``benchmark_serving`` result JSON), format detected from content;
- :mod:`msdiag.inference.latency`   pure figures over the request table: percentiles, goodput, queueing,
  growth with load, batching evidence, decode stalls;
- :mod:`msdiag.inference.phases`    a capture's steps told apart as prefill or decode (input shapes, else
  step-duration clusters), each phase's breakdown, kernels and FLOP/s, and the KV cache's memory.

The metrics that rules and diff read are registered in :mod:`msdiag.metrics.inference`.
"""
