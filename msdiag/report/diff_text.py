"""The terminal view of a diff object (``msdiag.diff.compare``): `msdiag diff` and `analyze --baseline`."""

from __future__ import annotations

from typing import Any

from msdiag import fmt


def _side(s: dict[str, Any]) -> str:
    cap = s.get("capture") or {}
    what = ", ".join(str(x) for x in (cap.get("family"), cap.get("device"), cap.get("profiler_level")) if x)
    warm = f", {s['warmup_steps_left_out']} warm-up left out" if s.get("warmup_steps_left_out") else ""
    return f"{s['label']} ({what}; {len(s['ranks'])} rank(s), {s['steps']} step(s){warm})"


def _judged(j: dict[str, Any], unit: str) -> str:
    return (
        f"{fmt.value_short(j['baseline'], unit)} -> {fmt.value_short(j['candidate'], unit)} ({fmt.signed_pct(j['relative_change'])}): "
        f"{j['judgement'].upper()}"
    )


def headline(d: dict[str, Any]) -> str:
    """The comparison in one line, first in every diff view:
    "IMPROVED: step time -82.7% (95% CI -90.6..-73.0%, p = 0.0006)"."""
    st = d.get("step_time")
    if not st:
        return "NOT JUDGED: the two captures have no step time in common to compare"
    rel = fmt.signed_pct(st.get("relative_change"))
    if st["judgement"] == "too few samples":
        return (
            f"TOO FEW SAMPLES: step time {rel} ({st['n_baseline']} against {st['n_candidate']} steps cannot be "
            "told from run-to-run noise)"
        )
    ci = st.get("ci_relative")
    ci_txt = f"{int(round(100 * st['ci_level']))}% CI {100 * ci[0]:+.1f}..{100 * ci[1]:+.1f}%, " if ci else ""
    p = st["p_value"]
    return f"{st['judgement'].upper()}: step time {rel} ({ci_txt}p = {p:.1g})" if p < 0.01 else (
        f"{st['judgement'].upper()}: step time {rel} ({ci_txt}p = {p:.2g})"
    )


def _step_lines(d: dict[str, Any]) -> list[str]:
    out = []
    st = d.get("step_time")
    if st:
        out.append(f"Step time (median): {_judged(st, 'us')}, confidence {st['confidence']}")
        out.append(f"  {st['sentence']}")
    p9 = d.get("step_time_p90")
    if p9:
        out.append(f"Step time (p90):    {_judged(p9, 'us')}")
    return out


def _breakdown_lines(d: dict[str, Any]) -> list[str]:
    out = []
    if d["breakdown"]:
        out.append("\nBreakdown (share of the step; judged over the same per-step samples):")
        for j in d["breakdown"]:
            out.append(
                f"  {j['metric']:<30} {100 * j['baseline']:6.1f}% -> {100 * j['candidate']:6.1f}% "
                f"({fmt.pts(j['candidate'] - j['baseline'])})  {j['judgement']}"
            )
    if d["per_rank_step_time"] and len(d["per_rank_step_time"]) > 1:
        out.append("\nMedian step time per rank (ranks both have):")
        for r in d["per_rank_step_time"][:16]:
            out.append(f"  rank {r['rank']:>4}: {fmt.us(r['baseline_us'])} -> {fmt.us(r['candidate_us'])} ({fmt.signed_pct(r['relative_change'])})")
        if len(d["per_rank_step_time"]) > 16:
            out.append(f"  ... {len(d['per_rank_step_time']) - 16} more (--format json)")
    return out


def _verdict_short(x: dict[str, Any]) -> str:
    share = f" {100 * x['share']:.0f}%" if x.get("share") is not None else ""
    return f"{x.get('bottleneck') or '-'}{share}"


def _verdict_lines(d: dict[str, Any]) -> list[str]:
    v = d["verdict"]
    out = [f"\nVerdict: {_verdict_short(v['baseline'])} -> {_verdict_short(v['candidate'])}" + (" (changed)" if v["changed"] else "")]
    f = d["findings"]
    for r in f["appeared"]:
        out.append(f"  appeared [{r['severity']}] {r['rule_id']}: {r['message']}")
    for r in f["resolved"]:
        out.append(f"  resolved [{r['severity']}] {r['rule_id']}")
    sev = [p for p in f["persisting"] if p["baseline_severity"] != p["candidate_severity"]]
    for p in sev:
        out.append(f"  {p['rule_id']}: {p['baseline_severity']} -> {p['candidate_severity']}")
    if f["persisting"] and not sev:
        out.append(f"  still firing: {', '.join(p['rule_id'] for p in f['persisting'])}")
    return out


# metrics always listed in the diff's text when both sides have them; others only when they moved
FOCUS_METRICS = (
    "mfu", "hfu", "achieved_tflops", "memory_peak_allocated_mb", "memory_peak_reserved_mb",
    "data_wait_ms_per_step", "data_queue_empty_share", "comm_wait_ratio", "kernels_per_step",
)  # fmt: skip


def _metric_lines(d: dict[str, Any]) -> list[str]:
    out = []
    rows = {r["metric"]: r for r in d["metrics"]}
    shown = [rows[m] for m in FOCUS_METRICS if m in rows]
    moved = [r for r in d["metrics"] if r["metric"] not in FOCUS_METRICS and r["metric"] not in {j["metric"] for j in d["breakdown"]}
             and r["metric"] not in ("step_time_us", "step_time_p90_us") and r.get("outcome") in ("better", "worse")]
    if shown or moved:
        out.append("\nMetrics:")
        for r in shown + moved[:12]:
            rel = f" ({fmt.signed_pct(r.get('relative_change'))})" if r.get("relative_change") is not None else ""
            why = f": {r['reason']}" if r.get("reason") else ""
            out.append(f"  {r['metric']:<30} {fmt.value_short(r['baseline'], r['unit'])} -> {fmt.value_short(r['candidate'], r['unit'])}{rel}  {r['outcome']}{why}")
        if len(moved) > 12:
            out.append(f"  ... {len(moved) - 12} more better or worse (--format json)")
    return out


def _kernel_lines(d: dict[str, Any]) -> list[str]:
    out: list[str] = []
    k = d["kernels"]
    if not k["compared"]:
        return out
    out.append(
        f"\nKernel types (time per step over {k['rank_steps']['baseline']} vs {k['rank_steps']['candidate']} rank-steps; "
        f"{k['types']['common']} types in common):"
    )
    out.append(f"  {'top types (time per step)':<34} {'baseline':>10}   {'candidate':>10}")
    for r in k.get("top", [])[:5]:
        change = f"  ({fmt.signed_pct(r['relative_change'])})" if r.get("relative_change") is not None else ""
        out.append(f"  {r['type'][:34]:<34} {fmt.us(r['baseline_us_per_step']):>10} | {fmt.us(r['candidate_us_per_step']):>10}{change}")
    for title, key in (("slower", "slower"), ("faster", "faster")):
        for r in k[key][:5]:
            pc = f", per call {fmt.us(r['baseline_us_per_call'])} -> {fmt.us(r['candidate_us_per_call'])} ({fmt.signed_pct(r['relative_change_per_call'])})"
            out.append(
                f"  {title} {r['type']}: {fmt.us(r['baseline_us_per_step'])} -> {fmt.us(r['candidate_us_per_step'])} per step "
                f"({fmt.signed_pct(r['relative_change'])}){pc}"
            )
    for title, key, col in (("new", "new", "candidate_us_per_step"), ("gone", "gone", "baseline_us_per_step")):
        if k[key]:
            out.append(f"  {title}: " + "; ".join(f"{r['type']} {fmt.us(r[col])}/step" for r in k[key][:5]))
    if k.get("naming"):
        out.append(f"  ({k['naming']})")
    return out


def _comm_and_gate_lines(d: dict[str, Any]) -> list[str]:
    out = []
    c = d["communication"]
    if c["compared"]:
        out.append(f"\nCommunication per step, by {c['keyed_by']}:")
        for r in c["rows"][:8]:
            out.append(
                f"  {r['group'][:24]:<24} {r['op_type']:<22} elapse {fmt.us(r['baseline_elapse_us_per_step'])} -> "
                f"{fmt.us(r['candidate_elapse_us_per_step'])} ({fmt.signed_pct(r['relative_change'])}), wait {fmt.us(r['baseline_wait_us_per_step'])} -> "
                f"{fmt.us(r['candidate_wait_us_per_step'])}"
            )
    g = d.get("gate")
    if g:
        out.append(f"\nGate (--fail-on-regression {100 * g['threshold']:g}%): {'FAILED' if g['failed'] else 'passed'}")
        for e in g["metrics"]:
            out.append(f"  {e['metric']}: {e['sentence']}")
    if d["not_compared"]:
        out.append("\nNot compared:")
        out += [f"  {x}" for x in d["not_compared"]]
    return out


def render(d: dict[str, Any]) -> str:
    """The full text view of a diff."""
    out = [headline(d), f"  baseline  {_side(d['baseline'])}", f"  candidate {_side(d['candidate'])}", ""]
    for section in (_step_lines, _breakdown_lines, _verdict_lines, _metric_lines, _kernel_lines, _comm_and_gate_lines):
        out += section(d)
    for n in d["notes"]:
        out.append(f"note: {n}")
    s = d["settings"]
    out.append(
        f"(bootstrap: {s['resamples']} resamples, seed {s['seed']}, {int(100 * s['ci_level'])}% interval; "
        f"minimum effect {100 * s['min_effect']:g}%; {s['samples']})"
    )
    return "\n".join(out) + "\n"


def render_section(d: dict[str, Any]) -> str:
    """The short 'against baseline NAME' section appended to `msdiag analyze --baseline NAME`."""
    name = d["baseline"].get("saved_baseline") or d["baseline"]["label"]
    saved = f", saved {d['baseline']['saved_at']}" if d["baseline"].get("saved_at") else ""
    out = [f"\nAgainst baseline {name} ({d['baseline'].get('path')}{saved}): {headline(d)}"]
    out += ["  " + x for x in _step_lines(d)]
    for j in d["breakdown"]:
        if j["judgement"] in ("improved", "regressed"):
            out.append(
                f"  {j['metric']}: {100 * j['baseline']:.1f}% -> {100 * j['candidate']:.1f}% "
                f"({fmt.pts(j['candidate'] - j['baseline'])}, {j['judgement']})"
            )
    v = d["verdict"]
    if v["changed"]:
        out.append(f"  verdict: {v['baseline']['bottleneck']} -> {v['candidate']['bottleneck']}")
    f = d["findings"]
    if f["appeared"]:
        out.append("  findings appeared: " + ", ".join(r["rule_id"] for r in f["appeared"]))
    if f["resolved"]:
        out.append("  findings resolved: " + ", ".join(r["rule_id"] for r in f["resolved"]))
    k = d["kernels"]
    if k["compared"]:
        for key in ("slower", "faster"):
            if k[key]:
                out.append(f"  {key} kernel types: " + "; ".join(f"{r['type']} ({fmt.signed_pct(r['relative_change'])})" for r in k[key][:3]))
    for x in d["not_compared"][:3]:
        out.append(f"  not compared: {x}")
    for n in d["notes"]:
        out.append(f"  note: {n}")
    out.append(f"  (msdiag diff baseline:{name} PATH for the full comparison)" if d["baseline"].get("saved_baseline") else "")
    return "\n".join(x for x in out if x) + "\n"
