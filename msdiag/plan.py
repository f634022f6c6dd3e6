"""From findings to a plan: what each fix would buy, in what order, and whether the plan reaches a goal.

Each rule that names time declares what its fix removes (``projection`` in its YAML: kinds of
model.STEP_KINDS, or model.REQUEST_KINDS for inference). A finding's ``projection`` is

- the bound: the median step with the finding's intervals taken out of every timed step
  (metrics/projection.py), i.e. the most the fix could win (``saving_us_per_step``,
  ``step_time_us_after``);
- beside it, where the rule names an estimate model with measured inputs, the estimate
  (``estimate_saving_us_per_step``, ``estimate_step_time_us_after``; ``kind`` "estimate", else "bound");
- MFU and throughput after, scaled by step time (same FLOPs and tokens per step), and the assumptions.

The ``plan`` orders the findings by saving and gives, for each, the step time when it and the ones
before it are applied: the union of their intervals is removed (an instant two fixes both remove is
counted once). Inference findings project TTFT percentiles from the request log with queueing removed.
``goals`` says, for each ``--goal``, where the job is, the gap and the shortest prefix of the plan
that reaches it (or the best projected figure when none does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from msdiag.metrics.projection import TIMELINE_ONLY, StepSets, removed_us, step_sets, timed_steps
from msdiag.metrics.registry import Context, Value
from msdiag.model import REQUEST_KINDS, STEP_KINDS
from msdiag.rules.loader import Rule

__all__ = ["GOALS", "THROUGHPUT_METRICS", "evaluate_goals", "project"]

#: Throughput metrics that scale with step time (same work per step), read by name where present.
THROUGHPUT_METRICS = ("tokens_per_s", "samples_per_s")
#: goal name -> (the metrics giving its figure, first present wins; "higher" or "lower" is better; scale)
GOALS: dict[str, tuple[tuple[str, ...], str, float]] = {
    "mfu": (("mfu",), "higher", 1.0),
    "step-ms": (("step_time_us",), "lower", 1e-3),
    "tokens-per-s": (("tokens_per_s", "output_tokens_per_s"), "higher", 1.0),
    "memory-share": (("memory_peak_share",), "lower", 1.0),
    "ttft-p99-ms": (("ttft_p99_ms",), "lower", 1.0),
    "tpot-p99-ms": (("tpot_p99_ms",), "lower", 1.0),
}
_SCALES = "MFU and throughput scale as the step time (same FLOPs and tokens per step)"


@dataclass
class _Base:
    """Today's job: the timed steps with their removable kinds, the median step, MFU and throughput."""

    sets: list[StepSets]
    totals: np.ndarray
    metrics: dict[str, Any]

    @property
    def step_us(self) -> float | None:
        return float(np.median(self.totals)) if len(self.totals) else None

    def after(self, kinds: list[str]) -> float | None:
        """The median step with the union of ``kinds``' intervals taken out of every step."""
        if not len(self.totals):
            return None
        return float(np.median(self.totals - removed_us(self.sets, kinds)))

    def scaled(self, after_us: float | None) -> dict[str, Any]:
        """MFU and throughput at a projected step time (same work per step)."""
        step = self.step_us
        ratio = step / after_us if step and after_us else None
        mfu = self.metrics.get("mfu")
        thr = {m: self.metrics[m] * ratio for m in THROUGHPUT_METRICS if self.metrics.get(m) is not None and ratio}
        return {"mfu_after": mfu * ratio if mfu is not None and ratio else None, "throughput_after": thr}


def _estimate(rule: Rule, bound_saving: float, metrics: dict[str, Any]) -> tuple[float | None, str]:
    """The estimate model's saving per step (never above the bound) and what it reads."""
    est = (rule.projection or {}).get("estimate")
    if not est:
        return None, ""
    if est["model"] == "measured":
        v = metrics.get(est["metric"])
        if v is None:
            return None, f"; no estimate: {est['metric']} is not measured"
        return min(bound_saving, float(v) * 1e3), f"; estimate: the measured {est['metric']}, at most the bound"
    return None, ""


def _step_projection(rule: Rule, base: _Base) -> dict[str, Any]:
    """A finding's projection from the timed steps: the bound, the estimate, MFU and throughput after."""
    p = rule.projection or {}
    removes = [k for k in p["removes"] if k in STEP_KINDS]
    assumes = str(p.get("assumes", "its intervals are gone from every step")).rstrip(".")
    out: dict[str, Any] = {"kind": "bound", "removes": removes, "steps": len(base.sets)}
    after, step = base.after(removes), base.step_us
    unmeasured = [k for k in removes if k in TIMELINE_ONLY] if all(s.source == "columns" for s in base.sets) else []
    if after is None or step is None or unmeasured:
        why = (f"{', '.join(unmeasured)} is measured on a timeline's host lane, which these step rows do not have"
               if unmeasured else "no step with a measured duration in the capture")
        out.update(saving_us_per_step=None, step_time_us_after=None, estimate_saving_us_per_step=None,
                   estimate_step_time_us_after=None, mfu_after=None, throughput_after={},
                   assumptions=f"Cannot tell: {why}.")
        return out
    saving = step - after
    est, est_note = _estimate(rule, saving, base.metrics)
    columns = sum(s.source == "columns" for s in base.sets)
    src = f"; {columns} of {len(base.sets)} steps from their rows' totals (no timeline)" if columns else ""
    out.update(saving_us_per_step=saving, step_time_us_after=after,
               estimate_saving_us_per_step=est, estimate_step_time_us_after=None if est is None else step - est,
               **base.scaled(after))
    if est is not None:
        out["kind"] = "estimate"
    out["assumptions"] = f"Removes {', '.join(removes)} from every step: {assumes}; the rest of the step unchanged; {_SCALES}{est_note}{src}."
    return out


def _ttft_after(log: Any) -> dict[str, Any]:
    """TTFT percentiles with each request's queueing removed (what a prefill of its prompt costs)."""
    from msdiag.inference import latency as lat

    ttft = log.requests["ttft_ms"].to_numpy(dtype=float).copy()
    try:
        mask = lat._prompt_mask(log)
        ttft[mask] = ttft[mask] - lat.queueing_ms(log)
    except lat.Unavailable as e:
        return {"ttft_p50_ms_after": None, "ttft_p99_ms_after": None, "reason": str(e)}
    v = ttft[np.isfinite(ttft)]
    return {"ttft_p50_ms_after": float(np.percentile(v, 50)), "ttft_p99_ms_after": float(np.percentile(v, 99)),
            "how": "each request's TTFT less its queueing (TTFT minus what a prefill of its prompt costs)"}


def _tpot_after(log: Any) -> dict[str, Any]:
    """TPOT percentiles of the requests that decoded at or below the cap: the 75th percentile of batch sizes."""
    r = log.requests
    keep = r["batch_size"].notna() & r["tpot_ms"].notna()
    b = r.loc[keep, "batch_size"].to_numpy(dtype=float)
    t = r.loc[keep, "tpot_ms"].to_numpy(dtype=float)
    if len(b) < 5:
        return {"tpot_p50_ms_after": None, "tpot_p99_ms_after": None, "reason": "fewer than 5 requests with both batch_size and a TPOT"}
    cap = float(np.percentile(b, 75))
    v = t[b <= cap]
    return {"tpot_p50_ms_after": float(np.percentile(v, 50)), "tpot_p99_ms_after": float(np.percentile(v, 99)),
            "decode_batch_cap": cap,
            "how": f"the TPOT of the requests that decoded in batches of at most {cap:g} (the 75th percentile), as if "
                   "the batch were capped there; fewer sequences per step lower the throughput, which is not projected"}


def _request_projection(rule: Rule, metrics: dict[str, Any], log: Any) -> dict[str, Any]:
    """An inference finding's projection: TTFT percentiles with queueing removed, or TPOT with the batch capped."""
    p = rule.projection or {}
    assumes = str(p.get("assumes", "the requests no longer wait")).rstrip(".")
    col = "ttft" if "queueing" in p["removes"] else "tpot"
    out: dict[str, Any] = {"kind": "bound" if col == "ttft" else "estimate", "removes": list(p["removes"]),
                           f"{col}_p50_ms": metrics.get(f"{col}_p50_ms"), f"{col}_p99_ms": metrics.get(f"{col}_p99_ms")}
    if log is None:
        out.update({f"{col}_p50_ms_after": None, f"{col}_p99_ms_after": None, "assumptions": "Cannot tell: no request log."})
        return out
    after = _ttft_after(log) if col == "ttft" else _tpot_after(log)
    reason, how = after.pop("reason", None), after.pop("how", "")
    out.update(after)
    out["assumptions"] = f"Cannot tell: {reason}." if reason else f"{how[0].upper()}{how[1:]}: {assumes}."
    return out


def _request_items(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inference plan: each fix with the TTFT / TPOT percentiles after it and the ones before it
    (queueing and the decode batch act on different latencies: each keeps the latest figure)."""
    items: list[dict[str, Any]] = []
    now: dict[str, Any] = {}
    for f in requests:
        now.update({k: v for k, v in f["projection"].items() if k.endswith("_ms_after") and v is not None})
        items.append({"rule_id": f["rule_id"], **now})
    return items


def _plan_items(order: list[tuple[dict[str, Any], Rule]], base: _Base) -> list[dict[str, Any]]:
    """Cumulative step time after each prefix of the ordered findings (their kinds' union removed once)."""
    items: list[dict[str, Any]] = []
    kinds: list[str] = []
    before = base.step_us
    for f, rule in order:
        kinds.extend(k for k in rule.projection["removes"] if k not in kinds)  # type: ignore[index]
        after = base.after(kinds)
        items.append({
            "rule_id": f["rule_id"],
            "saving_us_per_step": f["projection"]["saving_us_per_step"],
            "adds_us_per_step": None if after is None or before is None else before - after,
            "step_time_us_after": after, **base.scaled(after),
        })
        before = after
    return items


def project(ctx: Context, metrics: dict[str, Value], findings: list[dict[str, Any]], rules: dict[str, Rule], log: Any) -> dict[str, Any]:
    """Add ``projection`` to every finding (null when its rule names no time) and return the ``plan``."""
    values = {k: v.value for k, v in metrics.items()}
    fixes = [rules[f["rule_id"]].projection for f in findings if f["rule_id"] in rules]
    if any(p and p["removes"][0] in STEP_KINDS for p in fixes):  # the intervals only when a fix removes some
        sets = step_sets(ctx)
        base = _Base(sets, np.array([s.total_us for s in sets], dtype=float), values)
    else:
        base = _Base([], timed_steps(ctx.steps)["total_us"].to_numpy(dtype=float), values)
    steps, requests = [], []
    for f in findings:
        rule = rules.get(f["rule_id"])
        p = rule.projection if rule is not None else None
        if p is None or rule is None:
            f["projection"] = None
        elif p["removes"][0] in REQUEST_KINDS:
            f["projection"] = _request_projection(rule, values, log)
            requests.append(f)
        else:
            f["projection"] = _step_projection(rule, base)
            steps.append((f, rule))
    order = sorted((x for x in steps if x[0]["projection"]["saving_us_per_step"] is not None),
                   key=lambda x: (-x[0]["projection"]["saving_us_per_step"], x[0]["rule_id"]))
    items = _plan_items(order, base)
    return {
        "step_time_us": base.step_us, "steps": len(base.totals), "mfu": values.get("mfu"),
        "throughput": {m: values[m] for m in THROUGHPUT_METRICS if values.get(m) is not None},
        "items": items,
        "step_time_us_after": items[-1]["step_time_us_after"] if items else base.step_us,
        "requests": _request_items(requests),
    }


def _now(name: str, metrics: dict[str, Any]) -> tuple[str | None, float | None]:
    """The metric a goal reads and its figure now (in the goal's unit)."""
    ids, _, scale = GOALS[name]
    for mid in ids:
        if metrics.get(mid) is not None:
            return mid, float(metrics[mid]) * scale
    return ids[0], None


def _projected(name: str, plan: dict[str, Any]) -> list[tuple[list[str], float]]:
    """The goal's figure after each prefix of the plan: (rule ids applied, figure); empty when the
    listed fixes do not move it (memory)."""
    out: list[tuple[list[str], float]] = []
    ids: list[str] = []
    rows = plan.get("requests", []) if name in ("ttft-p99-ms", "tpot-p99-ms") else plan.get("items", [])
    for it in rows:
        ids = [*ids, it["rule_id"]]
        if name == "step-ms":
            v = it.get("step_time_us_after")
            v = None if v is None else v * 1e-3
        elif name == "mfu":
            v = it.get("mfu_after")
        elif name == "tokens-per-s":
            v = next(iter((it.get("throughput_after") or {}).values()), None)
        elif name in ("ttft-p99-ms", "tpot-p99-ms"):
            v = it.get(f"{name[:4]}_p99_ms_after")
        else:
            v = None
        if v is not None:
            out.append((ids, float(v)))
    return out


def _reached(better: str, target: float, v: float) -> bool:
    return v >= target if better == "higher" else v <= target


def _goal(name: str, target: float, metrics: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """One goal: the figure now, the gap, and met / reachable / not_reachable / unknown."""
    mid, now = _now(name, metrics)
    better = GOALS[name][1]
    g: dict[str, Any] = {"goal": name, "target": target, "better": better, "metric": mid, "now": now,
                         "gap": None, "status": "unknown", "fixes": [], "projected": None}
    if now is None:
        return g
    g["gap"] = target - now if better == "higher" else now - target
    if _reached(better, target, now):
        g["status"] = "met"
        return g
    steps = _projected(name, plan)
    hit = next(((ids, v) for ids, v in steps if _reached(better, target, v)), None)
    if hit:
        g.update(status="reachable", fixes=hit[0], projected=hit[1])
    else:
        best = steps[-1] if steps else None  # the plan's figures only improve prefix by prefix
        g.update(status="not_reachable", fixes=best[0] if best else [], projected=best[1] if best else None)
    return g


def evaluate_goals(goals: tuple[tuple[str, float], ...], metrics: dict[str, Any], plan: dict[str, Any]) -> list[dict[str, Any]]:
    """For each goal: the figure now, the gap, and met / reachable (with the shortest plan prefix) /
    not_reachable (with the best projected figure) / unknown (the figure is not measured)."""
    return [_goal(name, target, metrics, plan) for name, target in goals]
