"""The comparison section of the HTML report: a diff object (``msdiag.diff.compare``) formatted for
``reports/templates/_baseline_diff.html.j2``. Formatting only: every figure comes from the diff.

``report.html.context`` calls ``context(report["baseline_diff"])`` when the report object has one
(``msdiag report PATH --baseline NAME``, ``msdiag diff A B --report FILE``), else passes None.
"""

from __future__ import annotations

from typing import Any

from msdiag import fmt
from msdiag.report.diff_text import headline

#: the breakdown shares drawn as one stacked bar per side, with the colour class of the report's charts
BAR_PARTS = (
    ("computing_share", "compute", "computing"), ("communication_exposed_share", "comm", "exposed communication"),
    ("bubble_share", "bubble", "bubble"), ("free_share", "free", "free"),
)  # fmt: skip

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


def _bars(d: dict[str, Any]) -> list[dict[str, Any]]:
    """Baseline and candidate step breakdowns as two stacked bars (segment widths in % of the step)."""
    judged = {j["metric"]: j for j in d["breakdown"]}
    out = []
    for side, label in (("baseline", "baseline"), ("candidate", "this capture")):
        segs = [
            {"kind": kind, "label": name, "width": f"{100 * judged[m][side]:.2f}", "value": fmt.pct(judged[m][side])}
            for m, kind, name in BAR_PARTS
            if m in judged and judged[m][side] is not None and judged[m][side] > 0
        ]
        if segs:
            out.append({"side": label, "segments": segs})
    return out


def _top_kernels(k: dict[str, Any]) -> list[dict[str, str]]:
    """The largest kernel types of either side, baseline and candidate time per step side by side (bar widths
    relative to the largest figure of the table)."""
    rows = k.get("top") or [] if k.get("compared") else []
    peak = max((max(r["baseline_us_per_step"] or 0.0, r["candidate_us_per_step"] or 0.0) for r in rows), default=0.0)
    return [
        {
            "type": r["type"],
            "baseline": fmt.us(r["baseline_us_per_step"]), "candidate": fmt.us(r["candidate_us_per_step"]),
            "bw": f"{100 * (r['baseline_us_per_step'] or 0.0) / peak:.1f}" if peak else "0",
            "cw": f"{100 * (r['candidate_us_per_step'] or 0.0) / peak:.1f}" if peak else "0",
            "change": fmt.signed_pct(r["relative_change"]) if r.get("relative_change") is not None else "",
        }
        for r in rows
    ]


def lead(d: dict[str, Any]) -> dict[str, str]:
    """The comparison's banner: its judgement as a badge and the one-line headline (diff_text.headline)."""
    st = d.get("step_time") or {}
    judgement = st.get("judgement") or "not judged"
    return {"label": judgement.upper(), "text": headline(d).split(": ", 1)[1], "cls": JUDGEMENT_CLASS.get(judgement, "")}


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
        "lead": lead(d),
        "bars": _bars(d),
        "top_kernels": _top_kernels(k),
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
