"""The comparison section of the HTML report: a diff object (``msdiag.diff.compare``) formatted for
``reports/templates/_baseline_diff.html.j2``. Formatting only: every figure comes from the diff.

``report.html.context`` calls ``context(report["baseline_diff"])`` when the report object has one
(``msdiag report PATH --baseline NAME``, ``msdiag diff A B --report FILE``), else passes None.
"""

from __future__ import annotations

from typing import Any

from msdiag import fmt

JUDGEMENT_CLASS = {"improved": "better", "regressed": "worse", "better": "better", "worse": "worse"}


def _judged(j: dict[str, Any], label: str, unit: str) -> dict[str, str]:
    """A judged figure; shares show their change in percentage points, times in percent."""
    ci = j.get("ci_relative")
    if unit == "ratio":
        lo, hi = j["ci_change"]
        change, ci_txt = fmt.pts(j["change"]), f"{fmt.pts(lo)} .. {fmt.pts(hi)}"
    else:
        change, ci_txt = fmt.signed_pct(j["relative_change"]), (f"{fmt.signed_pct(ci[0])} .. {fmt.signed_pct(ci[1])}" if ci else "-")
    return {
        "label": label,
        "baseline": fmt.value_short(j["baseline"], unit),
        "candidate": fmt.value_short(j["candidate"], unit),
        "change": change,
        "judgement": j["judgement"],
        "cls": JUDGEMENT_CLASS.get(j["judgement"], ""),
        "ci": ci_txt,
        "p": f"{j['p_value']:.2g}",
        "n": f"{j['n_baseline']} vs {j['n_candidate']}",
    }


def context(d: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the template reads, already formatted; None without a comparison."""
    if not d:
        return None
    b = d["baseline"]
    rows = []
    if d.get("step_time"):
        rows.append(_judged(d["step_time"], "step time (median)", "us"))
    if d.get("step_time_p90"):
        rows.append(_judged(d["step_time_p90"], "step time (p90)", "us"))
    rows += [_judged(j, j["metric"], "ratio") for j in d["breakdown"]]
    metrics = [
        {
            "id": r["metric"],
            "baseline": fmt.value_short(r["baseline"], r.get("unit")),
            "candidate": fmt.value_short(r["candidate"], r.get("unit")),
            "change": fmt.signed_pct(r.get("relative_change")) if r.get("relative_change") is not None else "",
            "outcome": r["outcome"],
            "cls": JUDGEMENT_CLASS.get(r["outcome"], ""),
        }
        for r in d["metrics"]
        if r.get("outcome") in ("better", "worse") and r["metric"] not in {x["metric"] for x in d["breakdown"]}
        and r["metric"] not in ("step_time_us", "step_time_p90_us")
    ]
    k = d["kernels"]
    kernels = []
    if k["compared"]:
        for key in ("slower", "faster"):
            for r in k[key][:8]:
                kernels.append(
                    {
                        "direction": key, "type": r["type"],
                        "per_step": f"{fmt.us(r['baseline_us_per_step'])} → {fmt.us(r['candidate_us_per_step'])}",
                        "change": fmt.signed_pct(r["relative_change"]),
                        "per_call": f"{fmt.us(r['baseline_us_per_call'])} → {fmt.us(r['candidate_us_per_call'])}",
                        "cls": "worse" if key == "slower" else "better",
                    }
                )
    v = d["verdict"]
    g = d.get("gate")
    return {
        "baseline": b.get("saved_baseline") or b["label"],
        "baseline_path": str(b.get("path")),
        "saved_at": b.get("saved_at") or "",
        "headline": d["step_time"]["sentence"] if d.get("step_time") else "",
        "rows": rows,
        "metrics": metrics,
        "kernels": kernels,
        "verdict": f"{v['baseline']['bottleneck'] or '-'} → {v['candidate']['bottleneck'] or '-'}",
        "verdict_changed": bool(v["changed"]),
        "appeared": [f"{r['rule_id']} ({r['severity']})" for r in d["findings"]["appeared"]],
        "resolved": [f"{r['rule_id']} ({r['severity']})" for r in d["findings"]["resolved"]],
        "gate": [e["sentence"] for e in g["metrics"]] if g else [],
        "gate_failed": bool(g and g["failed"]),
        "not_compared": list(d["not_compared"]),
        "notes": list(d["notes"]),
        "settings": (
            f"bootstrap {d['settings']['resamples']} resamples (seed {d['settings']['seed']}), "
            f"{int(100 * d['settings']['ci_level'])}% interval, Mann-Whitney U, minimum effect "
            f"{100 * d['settings']['min_effect']:g}%; {d['settings']['samples']}"
        ),
    }
