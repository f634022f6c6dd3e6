"""Where inference meets the analysis pipeline: routing a request log, and the report's summaries.

- :func:`request_log_for` decides whether ``msdiag analyze PATH`` was given a request log (a file whose
  content is one) and reads the log of ``--requests``;
- :func:`empty_capture` stands in for the capture when a request log is analyzed alone (no ranks, no
  steps: the JSON contract keeps its keys);
- :func:`build` gives the ``requests`` and ``phases`` objects of the JSON contract (the phases object is
  made by :mod:`msdiag.metrics.phases`: inference/ reads request logs and imports nothing from metrics/).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from msdiag.errors import InputError
from msdiag.inference import latency as lat
from msdiag.inference.requests import FORMAT_LABEL, LOG_SUFFIXES, RequestLog, looks_like_request_log, read_request_log
from msdiag.model import Capture


def is_request_log_path(path: str | Path) -> bool:
    """A file that is (or claims by its suffix to be) a request log; folders never are."""
    p = Path(path)
    return p.is_file() and (looks_like_request_log(p) or p.suffix.lower() in LOG_SUFFIXES)


def request_log_for(path: str | Path, requests: str | None) -> tuple[RequestLog | None, bool]:
    """(the request log to analyze, whether PATH itself is that log)."""
    if is_request_log_path(path):
        if requests:
            raise InputError("--requests", f"{path} is itself a request log: give --requests with a capture folder")
        return read_request_log(path), True
    if requests:
        return read_request_log(requests), False
    return None, False


def empty_capture(log: RequestLog) -> tuple[Capture, dict[str, Any]]:
    """The capture of a request-log-only analysis (no ranks) and its identity."""
    cap = Capture(path=log.path, ranks=[], notes=list(log.notes))
    identity = {
        "framework": None,
        "family": "request_log",
        "device": None,
        "ranks": 0,
        "workload": "inference",
        "request_log": FORMAT_LABEL.get(log.format, log.format),
    }
    return cap, identity


def _dist(values: np.ndarray) -> dict[str, float] | None:
    v = values[np.isfinite(values)]
    if not len(v):
        return None
    out = {k: float(np.percentile(v, q)) for k, q in lat.PERCENTILES.items()}
    out["mean"] = float(np.mean(v))
    out["max"] = float(np.max(v))
    return out


def tail_note(n: int) -> str | None:
    """Which tail percentiles of ``n`` requests are set by the two slowest: with linear interpolation, percentile q
    lies between the two slowest requests when q / 100 x (n - 1) > n - 2. None when every tail is a real tail."""
    if n < 2:
        return f"{n} request: every percentile is its value" if n == 1 else None
    # q / 100 x (n - 1) > n - 2, i.e. (n - 1) x (1 - q / 100) < 1, in per mille so that no rounding decides it
    names = [name for name, permil in (("P90", 900), ("P99", 990), ("P99.9", 999)) if (n - 1) * (1000 - permil) < 1000]
    if not names:
        return None
    said = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"{said} of {n} requests: set by the two slowest requests (interpolated between them), not a measured tail"


def requests_summary(log: RequestLog, slo_ttft: float | None, slo_tpot: float | None) -> dict[str, Any]:
    """The ``requests`` object of the JSON contract (SLO counts against the objectives given)."""
    r = log.requests
    window, window_from = log.window_s()
    slo = None
    if slo_ttft is not None or slo_tpot is not None:
        met = int(lat.good_mask(log, slo_ttft, slo_tpot).sum())
        slo = {"ttft_ms": slo_ttft, "tpot_ms": slo_tpot, "met": met, "missed": int(log.total - met)}
    prompts = r["prompt_tokens"].dropna().astype(float).to_numpy()
    outs = r["output_tokens"].dropna().astype(float).to_numpy()
    return {
        "path": log.path,
        "format": log.format,
        "format_label": FORMAT_LABEL.get(log.format, log.format),
        "requests": int(log.total),
        "completed": int(len(r)),
        "failed": int(log.failed),
        "window_s": window,
        "window_from": window_from,
        "arrival_times": log.has_arrivals,
        # "recorded" (the log's own), "modelled" (a vLLM result without start_times: from its request rate), "absent"
        "arrivals": log.arrivals if log.has_arrivals or log.arrivals == "absent" else "absent",
        "arrivals_how": log.arrivals_how,
        "token_times": log.has_token_times,
        "batch_size_recorded": bool(r["batch_size"].notna().any()),
        "ttft_ms": _dist(r["ttft_ms"].to_numpy(dtype=float)),
        # tails from few requests: which percentiles are in effect the slowest request
        "tail_note": tail_note(int(np.isfinite(r["ttft_ms"].to_numpy(dtype=float)).sum())),
        "tpot_ms": _dist(r["tpot_ms"].to_numpy(dtype=float)),
        "e2e_ms": _dist(r["e2e_ms"].to_numpy(dtype=float)),
        "itl_ms": _dist(log.gaps["itl_ms"].to_numpy(dtype=float)) if log.has_token_times else None,
        "prompt_tokens": {"p50": float(np.median(prompts)), "max": float(np.max(prompts))} if len(prompts) else None,
        "output_tokens": {"p50": float(np.median(outs)), "max": float(np.max(outs)), "total": int(outs.sum())} if len(outs) else None,
        "slo": slo,
        "meta": dict(log.meta),
        "notes": list(log.notes),
    }


def _clean(x: Any) -> Any:
    """JSON-safe: NaN / inf -> None, numpy scalars -> Python, recursively."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(float(x)) else None
    return x


def build(log: RequestLog | None, slo_ttft_ms: float | None, slo_tpot_ms: float | None, phases: dict[str, Any] | None) -> dict[str, Any]:
    """{"requests": ..., "phases": ...} of the JSON contract (JSON-safe); ``phases`` comes from metrics/phases.py."""
    return _clean(
        {
            "requests": requests_summary(log, slo_ttft_ms, slo_tpot_ms) if log is not None else None,
            "phases": phases,
        }
    )
