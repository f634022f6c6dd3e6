"""The terminal view of the inference parts of a report object: request latencies and prefill / decode phases."""

from __future__ import annotations

from typing import Any

from msdiag import fmt


def _dist(name: str, d: dict[str, Any] | None) -> str:
    if not d:
        return f"  {name:<5} -"
    return (
        f"  {name:<5} p50 {fmt.ms(d.get('p50')):>10}  p90 {fmt.ms(d.get('p90')):>10}  p99 {fmt.ms(d.get('p99')):>10}  "
        f"p99.9 {fmt.ms(d.get('p999')):>10}  max {fmt.ms(d.get('max')):>10}"
    )


def render_lines(report: dict[str, Any]) -> list[str]:
    """Lines for the text report; none when the report has neither a request log nor inference phases."""
    out: list[str] = []
    r = report.get("requests")
    m = report.get("metrics") or {}
    if r:
        out.append(f"\nRequests ({r['format_label']}): {r['completed']} completed, {r['failed']} failed")
        out.append(_dist("TTFT", r.get("ttft_ms")))
        out.append(_dist("TPOT", r.get("tpot_ms")))
        out.append(_dist("E2E", r.get("e2e_ms")))
        if r.get("itl_ms"):
            out.append(_dist("ITL", r.get("itl_ms")))
        if r.get("tail_note"):
            out.append(f"  ({r['tail_note']})")
        if r.get("arrivals") == "modelled":
            out.append(f"  arrival times modelled: {r.get('arrivals_how')}")
        tp, tok = m.get("throughput_rps"), m.get("output_tokens_per_s")
        if tp is not None:
            out.append(f"  throughput {tp:.2f} req/s, {tok:.1f} output tokens/s over {r['window_s']:.2f} s ({r['window_from']})")
        slo = r.get("slo")
        if slo:
            goals = ", ".join(f"{k.split('_')[0].upper()} <= {v:g} ms" for k, v in (("ttft_ms", slo["ttft_ms"]), ("tpot_ms", slo["tpot_ms"])) if v is not None)
            out.append(f"  goodput ({goals}): {slo['met']} of {r['requests']} requests, {m.get('goodput_rps') or 0:.2f} req/s")
        q, qs = m.get("queueing_ms_p50"), m.get("queueing_share")
        if q is not None:
            slope = m.get("ttft_load_slope")
            grow = f"; TTFT grows {slope:.1f} ms per request in flight" if slope is not None else ""
            out.append(f"  queueing: median {fmt.ms(q)} ({100 * (qs or 0):.0f}% of the median TTFT){grow}")
        for n in r.get("notes") or []:
            out.append(f"  note: {n}")
    p = report.get("phases")
    if p:
        if p.get("classified_by"):
            out.append(f"\nInference phases (told apart by {p['classified_by']}):")
            for name in ("prefill", "decode"):
                d = p.get(name)
                if not d:
                    out.append(f"  {name:<7} no steps")
                    continue
                share = "-" if d.get("share") is None else f"{100 * d['share']:.0f}%"
                comp = "" if d.get("computing_share") is None else f", computing {100 * d['computing_share']:.0f}%"
                batch = "" if d.get("batch_p50") is None else f", batch {d['batch_p50']:g}"
                fl = "" if d.get("tflops") is None else f", {d['tflops']:.3g} TFLOP/s"
                top = "; ".join(f"{k['type']} {100 * k['share']:.0f}%" for k in d.get("top_kernels", [])[:3])
                out.append(
                    f"  {name:<7} {d['steps']} steps, median {fmt.ms(d['step_ms_p50'])}, {share} of forward time{comp}{batch}{fl}"
                    + (f"\n          top kernels: {top}" if top else "")
                )
            if p.get("kv_cache_mb") is not None:
                kv_share = m.get("kv_cache_share")
                of = f" ({100 * kv_share:.1f}% of device memory)" if kv_share is not None else ""
                out.append(f"  KV cache held: {p['kv_cache_mb']:.2f} MB{of} ({p['kv_cache_from']})")
        elif r:
            out.append(f"\nInference phases: not told apart ({p.get('reason')})")
        for n in p.get("notes") or []:
            out.append(f"  note: {n}")
    return out
