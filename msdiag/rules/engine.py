"""Evaluate rules against metrics: findings, skipped rules, and the one-bottleneck verdict.

Rules see metrics only (a mapping of metric id to a number, text or null), never DataFrames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from msdiag.rules.causes import top_cause
from msdiag.rules.loader import _PLACEHOLDER, Rule

SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
# The verdict is "compute" when no overhead passes its threshold and the device computes at
# least this share of the step; otherwise "balanced".
COMPUTE_VERDICT_SHARE = 0.5


class _Missing(Exception):
    def __init__(self, metric: str):
        self.metric = metric


@dataclass
class Outcome:
    rule: Rule
    status: str  # fired | quiet | skipped
    severity: str | None = None
    reason: str | None = None  # why skipped
    message: str | None = None
    evidence: dict[str, Any] | None = None
    suggestions: list[dict[str, Any]] | None = None
    missing: str | None = None  # the null metric that made the rule skip


def _compare(c: Mapping[str, Any], metrics: Mapping[str, Any], params: Mapping[str, float]) -> bool:
    m = c["metric"]
    left = metrics.get(m)
    if left is None:
        if c.get("optional"):
            return False
        raise _Missing(m)
    if "param" in c:
        right: Any = params[c["param"]]
    elif "other" in c:
        right = metrics.get(c["other"])
        if right is None:
            if c.get("optional"):
                return False
            raise _Missing(c["other"])
    else:
        right = c["value"]
    op = c["op"]
    try:
        if op == ">":
            return bool(left > right)
        if op == ">=":
            return bool(left >= right)
        if op == "<":
            return bool(left < right)
        if op == "<=":
            return bool(left <= right)
        if op == "==":
            return bool(left == right)
        return bool(left != right)
    except TypeError:
        return False  # text against a number: never true


def holds(cond: Mapping[str, Any], metrics: Mapping[str, Any], params: Mapping[str, float]) -> bool:
    """Evaluate a declarative condition (raises _Missing when a required metric is null)."""
    if "all" in cond:
        return all(holds(c, metrics, params) for c in cond["all"])
    if "any" in cond:
        missing: _Missing | None = None
        for c in cond["any"]:
            try:
                if holds(c, metrics, params):
                    return True
            except _Missing as e:
                missing = missing or e
        if missing:
            raise missing
        return False
    if "not" in cond:
        return not holds(cond["not"], metrics, params)
    return _compare(cond, metrics, params)


def fmt(value: Any, spec: str | None) -> str:
    """Render a number for a message: pct, ms, us, s, mb, gb, x, int, f1..f3, raw."""
    if value is None:
        return "n/a"
    if isinstance(value, str) or spec == "raw":
        return str(value)
    v = float(value)
    if not math.isfinite(v):
        return "n/a"
    if spec == "pct":
        return f"{100 * v:.1f}%"
    if spec == "ms":
        return f"{v / 1000:.2f} ms"
    if spec == "us":
        return f"{v:.1f} us"
    if spec == "s":
        return f"{v / 1e6:.2f} s"
    if spec == "mb":
        return f"{v:.1f} MB"
    if spec == "gb":
        return f"{v:.1f} GB"
    if spec == "x":
        return f"{v:.2f}x"
    if spec == "int":
        return f"{int(round(v))}"
    if spec in ("f1", "f2", "f3"):
        return f"{v:.{spec[1]}f}"
    return f"{v:.4g}"


def render_message(template: str, metrics: Mapping[str, Any], params: Mapping[str, float]) -> str:
    def sub(m: Any) -> str:
        name, spec = m.group(1), m.group(2)
        value = params.get(name[6:]) if name.startswith("param.") else metrics.get(name)
        return fmt(value, spec)

    return _PLACEHOLDER.sub(sub, template)


def evaluate_rule(rule: Rule, metrics: Mapping[str, Any], params: Mapping[str, float]) -> Outcome:
    try:
        fired = holds(rule.condition, metrics, params)
    except _Missing as e:
        return Outcome(rule, "skipped", reason=f"metric {e.metric} is not available", missing=e.metric)
    if not fired:
        return Outcome(rule, "quiet")
    severity = rule.severity
    if rule.critical_when is not None:
        try:
            if holds(rule.critical_when, metrics, params):
                severity = "critical"
        except _Missing:
            pass
    evidence = {m: metrics.get(m) for m in sorted(rule.metrics()) if metrics.get(m) is not None}
    suggestions = []
    for s in rule.suggestions:
        if "when" in s:
            try:
                if not holds(s["when"], metrics, params):
                    continue
            except _Missing:
                continue
        # only the prose carries placeholders: api and snippet are code, kept verbatim
        suggestions.append(
            {k: render_message(v, metrics, params) if k in ("action", "effect") else v for k, v in s.items() if k != "when"}
        )
    return Outcome(
        rule, "fired", severity=severity, message=render_message(rule.message, metrics, params),
        evidence=evidence, suggestions=suggestions,
    )


def evaluate(rules: Mapping[str, Rule], metrics: Mapping[str, Any], values: Mapping[str, Mapping[str, float]]) -> list[Outcome]:
    """Every rule's outcome, in rule id order."""
    return [evaluate_rule(rules[rid], metrics, values[rid]) for rid in sorted(rules)]


def finding(o: Outcome) -> dict[str, Any]:
    """The JSON form of a fired rule."""
    r = o.rule
    return {
        "rule_id": r.id,
        "name": r.name,
        "category": r.category,
        "severity": o.severity,
        "message": o.message,
        "evidence": o.evidence,
        "suggestions": o.suggestions,
        "bottleneck": (r.verdict or {}).get("bottleneck"),
    }


def verdict(outcomes: list[Outcome], metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The ONE bottleneck: the overhead above its threshold that costs the most step time.

    Overheads (exposed communication, data wait, free/host time, bubble) are rules with a
    ``verdict`` block naming the metric that is their share of step time. Memory pressure has no
    step-time cost: it is the verdict when no time overhead fires and a memory rule is critical.
    Compute is the verdict only when no overhead passes its threshold and the device computes
    most of the step (then the question becomes MFU); otherwise the job is balanced.
    """
    candidates: dict[str, tuple[float, Outcome]] = {}
    memory: list[Outcome] = []
    for o in outcomes:
        if o.status != "fired" or not o.rule.verdict:
            continue
        b = o.rule.verdict["bottleneck"]
        cost = metrics.get(o.rule.verdict["cost"])
        if b == "memory":
            memory.append(o)
            continue
        if isinstance(cost, (int, float)) and b != "compute":
            if b not in candidates or cost > candidates[b][0]:
                candidates[b] = (float(cost), o)
    ranked = sorted(candidates.items(), key=lambda kv: kv[1][0], reverse=True)
    step = metrics.get("step_time_us")
    computing = metrics.get("computing_share")
    if ranked:
        (b, (share, o)) = ranked[0]
        # the other findings of the same kind say why (e.g. communication: a late rank, a slow link)
        causes = [x.rule.id for x in outcomes if x.status == "fired" and x.rule.category == o.rule.category and x is not o]
        runner = ranked[1] if len(ranked) > 1 else None
        margin = share / runner[1][0] if runner and runner[1][0] > 0 else math.inf
        n = metrics.get("step_count") or 0
        # sure when the overhead is large, well ahead of the next one, and seen over several steps
        if margin >= 2 and share >= 0.3 and n >= 3:
            confidence = "high"
        elif margin >= 1.25 and share >= 0.15:
            confidence = "medium"
        else:
            confidence = "low"
        out = {
            "bottleneck": b,
            "share": share,
            "rule_id": o.rule.id,
            "sentence": f"{o.rule.name}: {o.message}",
            "evidence": o.evidence,
            "confidence": confidence,
            "causes": causes,
            "runner_up": {"bottleneck": runner[0], "share": runner[1][0], "rule_id": runner[1][1].rule.id} if runner else None,
        }
        if step is not None:
            out["time_us_per_step"] = share * float(step)
        fired = {x.rule.id: x.message or "" for x in outcomes if x.status == "fired" and x.rule.category == o.rule.category}
        out["cause"] = top_cause(b, metrics, fired)  # what lies behind the category (rules/causes.py)
        return out
    crit_mem = [o for o in memory if o.severity == "critical"]
    if crit_mem:
        o = crit_mem[0]
        return {
            "bottleneck": "memory", "share": None, "rule_id": o.rule.id,
            "sentence": f"{o.rule.name}: {o.message}", "evidence": o.evidence,
            "confidence": "medium", "runner_up": None,
        }
    if isinstance(computing, (int, float)) and computing >= COMPUTE_VERDICT_SHARE:
        mfu = metrics.get("mfu")
        tail = f"; MFU {fmt(mfu, 'pct')}" if mfu is not None else "; MFU unknown (give --peak-tflops or --device)"
        return {
            "bottleneck": "compute", "share": float(computing), "rule_id": None,
            "sentence": f"Compute-bound: the device computes {fmt(computing, 'pct')} of the step and no overhead passes its threshold{tail}.",
            "evidence": {"computing_share": computing, "mfu": mfu},
            "confidence": "medium", "runner_up": None,
        }
    if step is None:
        return {}
    return {
        "bottleneck": "balanced", "share": None, "rule_id": None,
        "sentence": "Balanced: no overhead passes its threshold and compute does not dominate the step.",
        "evidence": {"computing_share": computing}, "confidence": "low", "runner_up": None,
    }
