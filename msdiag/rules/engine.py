"""Evaluate rules against metrics: findings, skipped rules, and the one-bottleneck verdict.

Rules see metrics only (a mapping of metric id to a number, text or null), never DataFrames.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from msdiag.rules.causes import top_cause
from msdiag.rules.loader import _PLACEHOLDER, INFERENCE_BOTTLENECKS, Rule

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
    unavailable: list[str] | None = None  # corroborating metrics that were null: the finding has lower confidence


def _compare(c: Mapping[str, Any], metrics: Mapping[str, Any], params: Mapping[str, float], absent: list[str] | None = None) -> bool:
    m = c["metric"]
    left = metrics.get(m)
    if left is None:
        if c.get("optional"):
            return False
        if c.get("corroborating") and absent is not None:  # holds, at lower confidence: the finding says so
            absent.append(m)
            return True
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


def holds(cond: Mapping[str, Any], metrics: Mapping[str, Any], params: Mapping[str, float], absent: list[str] | None = None) -> bool:
    """Evaluate a declarative condition (raises _Missing when a required metric is null).

    ``absent``: where a corroborating comparison whose metric is null is recorded (it then holds); without
    it (critical_when, a suggestion's when) a corroborating comparison is required like any other.
    """
    if "all" in cond:
        return all(holds(c, metrics, params, absent) for c in cond["all"])
    if "any" in cond:
        missing: _Missing | None = None
        for c in cond["any"]:
            try:
                if holds(c, metrics, params, absent):
                    return True
            except _Missing as e:
                missing = missing or e
        if missing:
            raise missing
        return False
    if "not" in cond:
        return not holds(cond["not"], metrics, params)
    return _compare(cond, metrics, params, absent)


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


# ``[[A||B]]`` in a message: A when every metric A names is available, else B (``[[A]]``: A or nothing), so a
# rule that fired without a corroborating metric does not print "n/a" where that metric's clause stood
_ALTERNATIVE = re.compile(r"\[\[(.*?)(?:\|\|(.*?))?\]\]", re.S)


def render_message(template: str, metrics: Mapping[str, Any], params: Mapping[str, float]) -> str:
    def sub(m: Any) -> str:
        name, spec = m.group(1), m.group(2)
        value = params.get(name[6:]) if name.startswith("param.") else metrics.get(name)
        return fmt(value, spec)

    def choose(m: Any) -> str:
        names = [n for n, _ in _PLACEHOLDER.findall(m.group(1)) if not n.startswith("param.")]
        return m.group(1) if all(metrics.get(n) is not None for n in names) else (m.group(2) or "")

    return _PLACEHOLDER.sub(sub, _ALTERNATIVE.sub(choose, template))


def evaluate_rule(rule: Rule, metrics: Mapping[str, Any], params: Mapping[str, float]) -> Outcome:
    absent: list[str] = []
    try:
        fired = holds(rule.condition, metrics, params, absent)
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
    message = render_message(rule.message, metrics, params)
    if absent:
        message += f" (Lower confidence: {', '.join(sorted(set(absent)))} not available to corroborate.)"
    return Outcome(
        rule, "fired", severity=severity, message=message,
        evidence=evidence, suggestions=suggestions, unavailable=sorted(set(absent)) or None,
    )


def evaluate(rules: Mapping[str, Rule], metrics: Mapping[str, Any], values: Mapping[str, Mapping[str, float]]) -> list[Outcome]:
    """Every rule's outcome, in rule id order."""
    return [evaluate_rule(rules[rid], metrics, values[rid]) for rid in sorted(rules)]


def finding(o: Outcome) -> dict[str, Any]:
    """The JSON form of a fired rule."""
    r = o.rule
    out = {
        "rule_id": r.id,
        "name": r.name,
        "category": r.category,
        "severity": o.severity,
        "message": o.message,
        "evidence": o.evidence,
        "suggestions": o.suggestions,
        "bottleneck": (r.verdict or {}).get("bottleneck"),
    }
    if o.unavailable:  # a corroborating metric was null: the rule fired at lower confidence
        out["confidence"] = "low"
        out["not_available"] = [{"metric": m, "reason": None} for m in o.unavailable]
    return out


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
        if b in INFERENCE_BOTTLENECKS:  # a share of TTFT / TPOT, not of the step: see inference_verdict
            continue
        if isinstance(cost, (int, float)) and b != "compute":
            if b not in candidates or cost > candidates[b][0]:
                candidates[b] = (float(cost), o)
    ranked = sorted(candidates.items(), key=lambda kv: kv[1][0], reverse=True)
    step = metrics.get("step_time_us")
    computing = metrics.get("computing_share")
    if ranked:
        return _overhead_verdict(ranked, outcomes, metrics)
    if step is None:  # a request log alone: its own verdict (queueing / batching / prefill / decode)
        inf = inference_verdict(outcomes, metrics)
        if inf:
            return inf
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


def _overhead_verdict(ranked: list[tuple[str, tuple[float, Outcome]]], outcomes: list[Outcome], metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict when overheads fired (``ranked``: bottleneck -> (cost, outcome), costliest first): the costliest,
    its runner-up, the same-category findings as causes, a confidence from the margin, and the cause behind it."""
    step = metrics.get("step_time_us")
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


#: what an inference bottleneck's cost is a share of
SHARE_OF = {"batching": "ttft", "queueing": "ttft", "prefill": "ttft", "decode": "tpot"}


def inference_verdict(outcomes: list[Outcome], metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A request log's ONE bottleneck: among fired rules with an inference verdict block, the largest cost (its
    share of TTFT, or of TPOT for decode); on a tie the more specific cause first (INFERENCE_BOTTLENECKS order:
    static batching is why requests queue). Confidence is low when the winner lacked a corroborating metric,
    medium when the runner-up is close, high otherwise (the analysis lowers it for modelled arrivals). {} when
    none fired."""
    cands: list[tuple[float, int, Outcome]] = []
    for o in outcomes:
        b = (o.rule.verdict or {}).get("bottleneck")
        cost = metrics.get((o.rule.verdict or {}).get("cost", ""))
        if o.status == "fired" and b in INFERENCE_BOTTLENECKS and isinstance(cost, (int, float)) and math.isfinite(cost):
            cands.append((float(cost), -INFERENCE_BOTTLENECKS.index(b), o))
    if not cands:
        return {}
    cands.sort(key=lambda c: (c[0], c[1]), reverse=True)
    share, _, o = cands[0]
    b = str(o.rule.verdict["bottleneck"])  # type: ignore[index]
    cost = o.rule.verdict["cost"]  # type: ignore[index]
    # rules costed by the same metric measure the same time (queueing, and static batching behind it): causes
    same = [c[2].rule.id for c in cands[1:] if c[2].rule.verdict["cost"] == cost]  # type: ignore[index]
    runner = next((c for c in cands[1:] if c[2].rule.verdict["cost"] != cost), None)  # type: ignore[index]
    if o.unavailable:
        confidence = "low"
    elif runner and runner[0] >= share / 1.25:
        confidence = "medium"
    else:
        confidence = "high"
    return {
        "bottleneck": b,
        "share": share,
        "share_of": SHARE_OF[b],
        "rule_id": o.rule.id,
        "sentence": f"{o.rule.name}: {o.message}",
        "evidence": o.evidence,
        "confidence": confidence,
        "causes": same,
        "runner_up": {"bottleneck": runner[2].rule.verdict["bottleneck"], "share": runner[0],  # type: ignore[index]
                      "rule_id": runner[2].rule.id} if runner else None,
    }
