"""Inference: request timing logs (TTFT, TPOT, end-to-end latency), read like a capture is by ingest/.

- :mod:`msdiag.inference.requests`  request logs -> the canonical request table (our JSONL / CSV, vLLM's
  ``benchmark_serving`` result JSON), format detected from content;
- :mod:`msdiag.inference.latency`   pure figures over the request table: percentiles, goodput, queueing,
  growth with load, batching evidence, decode stalls;
- :mod:`msdiag.inference.summary`   routing a request log, and the ``requests`` object of the JSON contract.

This package imports nothing from ``msdiag.metrics``. A capture's steps told apart as prefill or decode
(input shapes, else step-duration clusters; kernel FLOPs) are metrics: :mod:`msdiag.metrics.phases`. The
metrics that rules and diff read are registered in :mod:`msdiag.metrics.inference`.
"""
