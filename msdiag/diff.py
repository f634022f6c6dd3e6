"""Compare two captures (or a saved baseline and a capture): what changed, and is it beyond noise?

``snapshot(Analysis)`` is what a side of a comparison is: the report object (``contract.build``:
the JSON contract, whose ``steps`` rows are the per-step samples) plus the per-kernel-type and
per-communication-group tables a diff needs. A saved baseline (``msdiag.baseline``) is the same
snapshot on disk, so a name and a path compare the same way. ``compare(base, cand)`` reads two
snapshots and returns the diff object (JSON-ready; rendered by ``report.diff_text``):

- step time (median, p90) and each share of the breakdown, judged over the per-step samples of all
  ranks pooled, warm-up steps left out: a bootstrap interval of the relative change
  (``msdiag.stats``), a Mann-Whitney rank test and a minimum effect size;
- every metric both sides have (better / worse by the metric's direction, ``direction``);
- kernel types that got slower or faster (time per step and per call), communication per group
  and op type, on the ranks both sides have;
- the verdict and the findings that appeared or were resolved;
- with a threshold, the gate: regressions beyond it and beyond noise (``GateError`` exit 1 in the CLI).

Captures that cannot be compared (no steps on one side, different workloads, no metric in common)
raise ``IncomparableError`` with the reason.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from msdiag import contract, fmt, stats
from msdiag.analysis import Analysis, finite_or_none
from msdiag.errors import InputError

DIFF_SCHEMA_VERSION = "1.0"
ALPHA = 0.05  # significance of the rank test (and 1 - the bootstrap interval's level)
DEFAULT_MIN_EFFECT = 0.02  # smallest relative change called improved / regressed (--min-effect 2)
TOP_KERNELS = 10  # kernel types listed per direction

# ---- which way is better ---------------------------------------------------------------------
# Metrics where more is better. Every other numeric metric is better lower when its id ends in
# one of LOWER_SUFFIXES or it is in LOWER_IS_BETTER; NEUTRAL metrics describe the job rather than
# rate it (a change is reported, never judged better or worse). Anything else has no known
# direction: shown, never gated (the gate refuses it with this message).
HIGHER_IS_BETTER = frozenset(
    {
        "mfu", "hfu", "achieved_tflops", "computing_share", "comm_transit_share",
        "bandwidth_hccs_gbps", "bandwidth_rdma_gbps", "bandwidth_sdma_gbps", "bandwidth_pcie_gbps", "bandwidth_sio_gbps",
        "bandwidth_utilization_min", "large_packet_ratio_min", "slow_link_bandwidth_gbps",
        # inference (msdiag.metrics.inference)
        "throughput_rps", "output_tokens_per_s", "goodput_rps", "goodput_share", "inflight_join_share",
        "prefill_tflops", "decode_tflops",
    }
)
LOWER_IS_BETTER = frozenset(
    {
        "step_time_jitter", "aicore_freq_drop", "dynamic_shape_ops", "tp_group_spans_nodes", "kernels_per_step",
        "data_wait_ms_per_step", "failed_requests", "queueing_ms_p50", "prefill_est_ms_p50", "ttft_load_slope",
    }
)
LOWER_SUFFIXES = ("_us", "_ms", "_share", "_mb", "_imbalance", "_ratio")
NEUTRAL = frozenset(
    {
        "step_count", "kernel_count", "flops_per_step", "peak_tflops", "memory_capacity_gb", "comm_groups",
        "data_workers_total", "data_workers_vs_cores", "recompute_on", "kernel_mean_us", "vector_time_share",
        "matmul_time_share", "memory_activation_share", "slow_rank_votes", "stage_imbalance", "groups_spanning_nodes",
        "request_count", "ttft_prompt_corr", "prompt_tokens_p50", "decode_batch_size_p50", "decode_batch_size_max",
        "prefill_share", "arrived_busy_share",
    }
)
# Units of metrics whose value is a label (a rank, a link, an op): compared as same / changed.
LABEL_UNITS = ("text", "rank", "link", "op", "transport")


def direction(metric_id: str) -> str | None:
    """'higher' or 'lower' (which is better), 'neutral', or None when unknown."""
    if metric_id in NEUTRAL:
        return "neutral"
    if metric_id in HIGHER_IS_BETTER:
        return "higher"
    if metric_id in LOWER_IS_BETTER or metric_id.endswith(LOWER_SUFFIXES):
        return "lower"
    return None


# ---- metrics judged over per-step samples ----------------------------------------------------
# id -> (columns of a step row, the statistic over resampled rows, its name). Shares are
# sum(part) / sum(total) over the steps, as msdiag.metrics.steps computes them.
SAMPLED: dict[str, tuple[tuple[str, ...], Callable[[np.ndarray], np.ndarray], str]] = {
    "step_time_us": (("total_us",), stats.median, "median"),
    "step_time_p90_us": (("total_us",), stats.p90, "90th percentile"),
    "computing_share": (("computing_us", "total_us"), stats.ratio_of_sums, "share"),
    "communication_exposed_share": (("communication_exposed_us", "total_us"), stats.ratio_of_sums, "share"),
    "free_share": (("free_us", "total_us"), stats.ratio_of_sums, "share"),
    "bubble_share": (("bubble_us", "total_us"), stats.ratio_of_sums, "share"),
    "data_wait_share": (("data_wait_us", "total_us"), stats.ratio_of_sums, "share"),
    "host_bound_share": (("host_idle_us", "total_us"), stats.ratio_of_sums, "share"),
}
BREAKDOWN = [m for m in SAMPLED if m.endswith("_share")]


# analysis options that change how a capture is read, never what comes out
RESULT_NEUTRAL_OPTIONS = ("jobs", "cache", "scheduler")


class IncomparableError(InputError):
    """Two captures that cannot be compared (the reason names what is missing or different)."""


# ---- a side of the comparison ----------------------------------------------------------------


def _window(kr: pd.DataFrame, steps: pd.DataFrame) -> tuple[pd.DataFrame, int, str]:
    """A rank's kernels (or comm ops) inside its timed (non-warm-up) steps, and how many steps those are."""
    if not len(steps):
        return kr, 1, "the whole capture (no step rows)"
    keep = steps["total_us"].notna() & (steps["total_us"] > 0)
    if "warmup" in steps.columns:
        keep &= ~steps["warmup"].fillna(False).astype(bool)
    timed = steps[keep.to_numpy(bool)]
    if kr["step"].notna().any() and steps["step"].notna().any():
        keep = set(int(s) for s in timed["step"].dropna())
        return kr[kr["step"].isin(keep).fillna(False).astype(bool)], max(len(keep), 1), "step ids"
    if "start_us" in kr.columns and timed["start_us"].notna().all() and timed["end_us"].notna().all() and len(timed):
        t = timed.sort_values("start_us")
        starts, ends = t["start_us"].to_numpy(float), t["end_us"].to_numpy(float)
        s = kr["start_us"].to_numpy(float)
        i = np.searchsorted(starts, s, side="right") - 1
        inside = (i >= 0) & (s < ends[np.clip(i, 0, None)])
        return kr[inside], len(t), "step spans"
    return kr, max(len(steps), 1), "the whole capture (kernels carry no step)"


def snapshot(a: Analysis, report: dict[str, Any] | None = None) -> dict[str, Any]:
    """One side of a comparison: the report object and the kernel-type and communication tables.

    Kernel and communication totals cover the timed steps only (warm-up left out, as in the step
    samples), so that captures of different lengths compare per step.
    """
    rep = report if report is not None else contract.build(a)
    steps = a.steps
    kernels = a.capture.table("kernels")
    comm = a.capture.table("comm_ops")
    ktypes: list[dict[str, Any]] = []
    windows: list[dict[str, Any]] = []
    crows: list[dict[str, Any]] = []
    for rd in a.capture.ranks:
        r = int(rd.rank)
        st = steps[steps["rank"] == r] if len(steps) else steps
        kr, n, by = _window(kernels[kernels["rank"] == r], st)
        windows.append({"rank": r, "steps": int(n), "by": by})
        if len(kr):
            typ = kr["type"].fillna(kr["name"]).astype(str)
            g = kr.assign(_t=typ, _k=kr["kind"].fillna("other").astype(str)).groupby(["_t", "_k"])["dur_us"]
            for (t, k), calls, tot in zip(g.size().index, g.size().to_numpy(), g.sum().to_numpy()):
                ktypes.append({"rank": r, "type": t, "kind": k, "calls": int(calls), "total_us": float(tot)})
        cr, _, _ = _window(comm[comm["rank"] == r], st)
        if len(cr):
            g2 = cr.assign(_g=cr["group"].fillna("-").astype(str), _o=cr["op_type"].fillna("-").astype(str)).groupby(["_g", "_o"])
            for (grp, op), sub in g2:
                crows.append(
                    {
                        "rank": r, "group": grp, "op_type": op, "ops": int(len(sub)),
                        **{c: finite_or_none(float(sub[c].sum())) if sub[c].notna().any() else None
                           for c in ("elapse_us", "transit_us", "wait_us", "sync_us", "idle_us")},
                    }
                )
    return {"report": rep, "kernel_types": ktypes, "kernel_windows": windows, "comm": crows}


def _timed_rows(snap: dict[str, Any]) -> pd.DataFrame:
    """The per-step samples: step rows with a measured duration, warm-up left out."""
    rows = pd.DataFrame(snap["report"]["steps"])
    if not len(rows):
        return pd.DataFrame(columns=["rank", "total_us"])
    keep = rows["total_us"].notna() & (rows["total_us"].astype(float) > 0)
    if "warmup" in rows.columns:
        keep &= ~rows["warmup"].fillna(False).astype(bool)
    rows = rows[keep].copy()
    for c in ("computing_us", "communication_exposed_us", "free_us", "bubble_us", "data_wait_us", "total_us"):
        rows[c] = pd.to_numeric(rows[c], errors="coerce") if c in rows.columns else np.nan
    rows["host_idle_us"] = (rows["free_us"].fillna(0.0) - rows["data_wait_us"].fillna(0.0)).clip(lower=0.0)
    return rows


def _samples(rows: pd.DataFrame, cols: tuple[str, ...]) -> np.ndarray:
    return rows[list(cols)].astype(float).fillna(0.0).to_numpy()


# ---- judging a metric over per-step samples --------------------------------------------------


def judge(
    metric_id: str,
    base_rows: pd.DataFrame,
    cand_rows: pd.DataFrame,
    min_effect: float = DEFAULT_MIN_EFFECT,
    alpha: float = ALPHA,
) -> dict[str, Any]:
    """Improved / regressed / no significant change / too few samples, with how sure that is."""
    cols, stat, stat_name = SAMPLED[metric_id]
    b, c = _samples(base_rows, cols), _samples(cand_rows, cols)
    nb, nc = len(b), len(c)
    vb, vc = float(stat(b[None])[0]), float(stat(c[None])[0])
    rel = (vc / vb - 1.0) if vb > 0 else (0.0 if vc == vb else None)
    per_b = b[:, 0] / b[:, 1] if b.shape[1] > 1 else b[:, 0]
    per_c = c[:, 0] / c[:, 1] if c.shape[1] > 1 else c[:, 0]
    test = stats.mann_whitney(per_b, per_c)
    ci = stats.bootstrap(b, c, stat, level=1 - alpha)
    mp = stats.min_p(nb, nc)
    d = direction(metric_id)
    ci_excludes_zero = ci.diff_low > 0 or ci.diff_high < 0
    out: dict[str, Any] = {
        "metric": metric_id,
        "statistic": stat_name,
        "direction": d,
        "baseline": vb,
        "candidate": vc,
        "change": vc - vb,
        "relative_change": rel,
        "ci_level": ci.level,
        "ci_relative": [ci.rel_low, ci.rel_high] if ci.rel_low is not None else None,
        "ci_change": [ci.diff_low, ci.diff_high],
        "ci_excludes_zero": bool(ci_excludes_zero),
        "p_value": test.p_value,
        "test": f"Mann-Whitney U ({test.method})",
        "n_baseline": nb,
        "n_candidate": nc,
        "min_possible_p": mp,
        "min_effect": min_effect,
    }
    ci_txt = (
        f"{int(ci.level * 100)}% interval of the change {fmt.signed_pct(ci.rel_low)} .. {fmt.signed_pct(ci.rel_high)}"
        if ci.rel_low is not None
        else f"{int(ci.level * 100)}% interval of the difference {ci.diff_low:.4g} .. {ci.diff_high:.4g}"
    )
    out["evidence"] = f"{nb} against {nc} steps; {ci_txt}; rank test p = {test.p_value:.2g}"
    return _judgement(out, ci, ci_txt, alpha)


def _judgement(out: dict[str, Any], ci: stats.Interval, ci_txt: str, alpha: float) -> dict[str, Any]:
    """Fill the judgement, its confidence and the sentence saying why, from a judged figure's numbers."""
    nb, nc, mp, rel, min_effect = out["n_baseline"], out["n_candidate"], out["min_possible_p"], out["relative_change"], out["min_effect"]
    vb, vc, d, stat_name, evidence = out["baseline"], out["candidate"], out["direction"], out["statistic"], out["evidence"]
    p_value = out["p_value"]
    big = rel is None or abs(rel) >= min_effect
    significant = p_value < alpha and out["ci_excludes_zero"]
    if mp >= alpha:
        need = stats.min_steps_per_side(alpha)
        out["judgement"] = "too few samples"
        out["confidence"] = "none"
        out["sentence"] = (
            f"{nb} against {nc} steps can never reach p < {alpha:g} in a rank test (the smallest possible p is {mp:.2g}): "
            f"the change {fmt.signed_pct(rel)} cannot be told from run-to-run noise; capture at least {need} steps per side "
            f"after warm-up. ({ci_txt}, from too few samples to trust.)"
        )
        return out
    if significant and big and d in ("lower", "higher"):
        worse = (vc > vb) == (d == "lower")
        out["judgement"] = "regressed" if worse else "improved"
        lo = ci.rel_low if ci.rel_low is not None else None
        hi = ci.rel_high if ci.rel_high is not None else None
        beyond = lo is not None and hi is not None and (min(abs(lo), abs(hi)) >= min_effect) and (lo > 0) == (hi > 0)
        doubts = []
        if not beyond:
            doubts.append(f"the interval reaches within the {100 * min_effect:g}% minimum effect")
        if p_value >= alpha / 5:
            doubts.append(f"p is above {alpha / 5:g}")
        out["confidence"] = "medium" if doubts else "high"
        out["sentence"] = f"{out['judgement']}: {stat_name} {fmt.signed_pct(rel)}, beyond noise ({evidence})" + (
            f"; less sure: {' and '.join(doubts)}." if doubts else "."
        )
        return out
    out["judgement"] = "no significant change"
    if significant and not big:
        out["confidence"] = "medium"
        out["sentence"] = f"beyond noise but smaller than the {100 * min_effect:g}% minimum effect: {stat_name} {fmt.signed_pct(rel)} ({evidence})."
    elif significant:
        out["confidence"] = "medium"
        out["sentence"] = f"changed beyond noise ({stat_name} {fmt.signed_pct(rel)}), but this metric has no better direction ({evidence})."
        out["judgement"] = "changed"
    else:
        out["confidence"] = "medium" if nb >= 10 and nc >= 10 else "low"
        out["sentence"] = f"within noise: {stat_name} {fmt.signed_pct(rel)} ({evidence})."
    return out


# ---- the other tables ----------------------------------------------------------------------


def _metric_rows(base: dict[str, Any], cand: dict[str, Any], min_effect: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Every metric at least one side has, with its change and better / worse."""
    mb, mc = base["metrics"], cand["metrics"]
    db, dc = base.get("metric_details") or {}, cand.get("metric_details") or {}
    rows, both_null = [], []
    for mid in list(mb) + [m for m in mc if m not in mb]:
        vb, vc = mb.get(mid), mc.get(mid)
        unit = (db.get(mid) or dc.get(mid) or {}).get("unit")
        if vb is None and vc is None:
            both_null.append(mid)
            continue
        row: dict[str, Any] = {"metric": mid, "unit": unit, "baseline": vb, "candidate": vc, "direction": direction(mid)}
        if vb is None or vc is None:
            side = "baseline" if vb is None else "candidate"
            row["outcome"] = f"only in the {'candidate' if vb is None else 'baseline'}"
            row["reason"] = ((db if vb is None else dc).get(mid) or {}).get("reason") or f"not in the {side}"
        elif isinstance(vb, (int, float)) and isinstance(vc, (int, float)) and not isinstance(vb, bool) and unit not in LABEL_UNITS:
            rel = (vc / vb - 1.0) if vb else (0.0 if vc == vb else None)
            row["change"] = vc - vb
            row["relative_change"] = rel
            d = direction(mid)
            if rel is not None and abs(rel) < min_effect:
                row["outcome"] = "unchanged"
            elif d in ("lower", "higher"):
                row["outcome"] = "worse" if (vc > vb) == (d == "lower") else "better"
            else:
                row["outcome"] = "changed"
        else:
            row["outcome"] = "same" if vb == vc else "changed"
        rows.append(row)
    return rows, both_null


def _per_rank_steps(rb: pd.DataFrame, rc: pd.DataFrame, ranks: list[int]) -> list[dict[str, Any]]:
    out = []
    for r in ranks:
        b = rb.loc[rb["rank"] == r, "total_us"].astype(float)
        c = rc.loc[rc["rank"] == r, "total_us"].astype(float)
        if not len(b) or not len(c):
            continue
        mb, mc = float(np.median(b)), float(np.median(c))
        out.append({"rank": r, "baseline_us": mb, "candidate_us": mc, "relative_change": mc / mb - 1.0 if mb > 0 else None,
                    "n_baseline": int(len(b)), "n_candidate": int(len(c))})
    return out


def _per_step_totals(rows: list[dict[str, Any]], windows: list[dict[str, Any]], ranks: list[int], keys: tuple[str, ...],
                     values: tuple[str, ...]) -> tuple[pd.DataFrame, int]:
    """Rows of the common ranks summed by keys, and the number of rank-steps they cover."""
    steps = sum(int(w["steps"]) for w in windows if int(w["rank"]) in ranks)
    df = pd.DataFrame(rows, columns=["rank", *keys, *values])
    df = df[df["rank"].isin(ranks)]
    g = df.groupby(list(keys), dropna=False)[list(values)].sum(min_count=1) if len(df) else pd.DataFrame(columns=list(values))
    return g, max(steps, 1)


def _kernel_diff(sb: dict[str, Any], sc: dict[str, Any], ranks: list[int], min_effect: float) -> dict[str, Any]:
    """Kernel types by time per step on the common ranks: slower, faster, new, gone.

    Point estimates: kernel totals have no per-step noise estimate; the minimum effect filters them.
    """
    gb, nb = _per_step_totals(sb["kernel_types"], sb["kernel_windows"], ranks, ("type", "kind"), ("calls", "total_us"))
    gc, nc = _per_step_totals(sc["kernel_types"], sc["kernel_windows"], ranks, ("type", "kind"), ("calls", "total_us"))
    if not len(gb) or not len(gc):
        side = "baseline" if not len(gb) else "candidate"
        return {"compared": False, "reason": f"the {side} has no kernel table on the common ranks"}
    j = gb.add_suffix("_b").join(gc.add_suffix("_c"), how="outer")  # same columns both sides: suffixed first
    rows: list[dict[str, Any]] = []
    for (t, k), r in j.iterrows():
        tb = r["total_us_b"] / nb if pd.notna(r["total_us_b"]) else None
        tc = r["total_us_c"] / nc if pd.notna(r["total_us_c"]) else None
        cb = r["total_us_b"] / r["calls_b"] if pd.notna(r["calls_b"]) and r["calls_b"] else None
        cc = r["total_us_c"] / r["calls_c"] if pd.notna(r["calls_c"]) and r["calls_c"] else None
        rows.append(
            {
                "type": str(t), "kind": str(k),
                "baseline_us_per_step": tb, "candidate_us_per_step": tc,
                "change_us_per_step": (tc or 0.0) - (tb or 0.0),
                "relative_change": (tc / tb - 1.0) if tb and tc is not None else None,
                "baseline_calls_per_step": float(r["calls_b"]) / nb if pd.notna(r["calls_b"]) else None,
                "candidate_calls_per_step": float(r["calls_c"]) / nc if pd.notna(r["calls_c"]) else None,
                "baseline_us_per_call": cb, "candidate_us_per_call": cc,
                "relative_change_per_call": (cc / cb - 1.0) if cb and cc is not None else None,
            }
        )
    both = [r for r in rows if r["baseline_us_per_step"] is not None and r["candidate_us_per_step"] is not None]
    moved = [r for r in both if r["relative_change"] is None or abs(r["relative_change"]) >= min_effect]
    slower = sorted((r for r in moved if r["change_us_per_step"] > 0), key=lambda r: -r["change_us_per_step"])
    faster = sorted((r for r in moved if r["change_us_per_step"] < 0), key=lambda r: r["change_us_per_step"])
    new = sorted((r for r in rows if r["baseline_us_per_step"] is None), key=lambda r: -(r["candidate_us_per_step"] or 0))
    gone = sorted((r for r in rows if r["candidate_us_per_step"] is None), key=lambda r: -(r["baseline_us_per_step"] or 0))
    lb = (sb["report"].get("capture") or {}).get("profiler_level")
    lc = (sc["report"].get("capture") or {}).get("profiler_level")
    naming = None
    if new and gone and lb != lc:
        naming = (
            f"{len(new)} type(s) only in the candidate and {len(gone)} only in the baseline: profiler levels "
            f"({lb or '-'} vs {lc or '-'}) may name the same kernel differently (Level0 writes no Type; msdiag takes it from the name)"
        )
    return {
        "compared": True,
        "rank_steps": {"baseline": nb, "candidate": nc},
        "types": {"baseline": int(len(gb)), "candidate": int(len(gc)), "common": len(both)},
        # the largest kernel types on either side, to draw baseline and candidate side by side
        "top": sorted(rows, key=lambda r: -max(r["baseline_us_per_step"] or 0.0, r["candidate_us_per_step"] or 0.0))[:TOP_KERNELS],
        "slower": slower[:TOP_KERNELS],
        "faster": faster[:TOP_KERNELS],
        "new": new[:TOP_KERNELS],
        "gone": gone[:TOP_KERNELS],
        "naming": naming,
        "note": "time per step = kernel time on the common ranks over their timed steps; point estimates (no noise estimate)",
    }


COMM_VALUES = ("ops", "elapse_us", "transit_us", "wait_us", "sync_us", "idle_us")


def _comm_diff(sb: dict[str, Any], sc: dict[str, Any], ranks: list[int]) -> dict[str, Any]:
    """Communication per group and op type (per step, common ranks)."""
    gb, nb = _per_step_totals(sb["comm"], sb["kernel_windows"], ranks, ("group", "op_type"), COMM_VALUES)
    gc, nc = _per_step_totals(sc["comm"], sc["kernel_windows"], ranks, ("group", "op_type"), COMM_VALUES)
    if not len(gb) or not len(gc):
        which = [s for s, g in (("baseline", gb), ("candidate", gc)) if not len(g)]
        return {"compared": False, "reason": f"no communication analysis (communication.json or its DB tables) in the {' and '.join(which)}"}
    keyed_by = "group and op type"
    if not set(gb.index) & set(gc.index):
        gb, gc = gb.groupby(level="op_type").sum(min_count=1), gc.groupby(level="op_type").sum(min_count=1)
        gb.index = pd.MultiIndex.from_tuples([("*", o) for o in gb.index], names=["group", "op_type"])
        gc.index = pd.MultiIndex.from_tuples([("*", o) for o in gc.index], names=["group", "op_type"])
        keyed_by = "op type (no communication group in common: group names differ between the captures)"
    j = gb.add_suffix("_b").join(gc.add_suffix("_c"), how="outer")  # same columns both sides: suffixed first
    rows = []
    for (grp, op), r in j.iterrows():
        row: dict[str, Any] = {"group": str(grp), "op_type": str(op)}
        for v in COMM_VALUES:
            b = r[f"{v}_b"] / nb if pd.notna(r[f"{v}_b"]) else None
            c = r[f"{v}_c"] / nc if pd.notna(r[f"{v}_c"]) else None
            key = v if v == "ops" else v.replace("_us", "_us_per_step")
            row[f"baseline_{key}"] = b
            row[f"candidate_{key}"] = c
        b, c = row["baseline_elapse_us_per_step"], row["candidate_elapse_us_per_step"]
        row["relative_change"] = (c / b - 1.0) if b and c is not None else None
        rows.append(row)
    rows.sort(key=lambda r: -max(r["baseline_elapse_us_per_step"] or 0, r["candidate_elapse_us_per_step"] or 0))
    return {"compared": True, "keyed_by": keyed_by, "rank_steps": {"baseline": nb, "candidate": nc}, "rows": rows}


def _verdict_diff(base: dict[str, Any], cand: dict[str, Any]) -> dict[str, Any]:
    def short(v: dict[str, Any]) -> dict[str, Any]:
        return {"bottleneck": v.get("bottleneck"), "share": v.get("share"), "rule_id": v.get("rule_id"), "confidence": v.get("confidence")}

    vb, vc = short(base.get("verdict") or {}), short(cand.get("verdict") or {})
    changed = vb["bottleneck"] != vc["bottleneck"]
    return {"baseline": vb, "candidate": vc, "changed": changed}


def _findings_diff(base: dict[str, Any], cand: dict[str, Any]) -> dict[str, Any]:
    fb = {f["rule_id"]: f for f in base.get("findings") or []}
    fc = {f["rule_id"]: f for f in cand.get("findings") or []}

    def row(f: dict[str, Any]) -> dict[str, Any]:
        return {"rule_id": f["rule_id"], "severity": f.get("severity"), "category": f.get("category"), "message": f.get("message")}

    persisting = []
    for rid in fb.keys() & fc.keys():
        persisting.append({"rule_id": rid, "baseline_severity": fb[rid].get("severity"), "candidate_severity": fc[rid].get("severity")})
    return {
        "appeared": [row(fc[r]) for r in fc if r not in fb],
        "resolved": [row(fb[r]) for r in fb if r not in fc],
        "persisting": sorted(persisting, key=lambda x: x["rule_id"]),
    }


# ---- comparability -------------------------------------------------------------------------


def describe_side(snap: dict[str, Any], label: str) -> dict[str, Any]:
    rep = snap["report"]
    rows = pd.DataFrame(rep["steps"])
    warm = int(rows["warmup"].fillna(False).astype(bool).sum()) if "warmup" in rows.columns and len(rows) else 0
    return {
        "label": label,
        "path": rep.get("path"),
        "saved_baseline": snap.get("name"),
        "saved_at": snap.get("saved_at"),
        "msdiag_version": rep.get("msdiag_version"),
        "capture": rep.get("capture"),
        "ranks": sorted(int(r["rank"]) for r in rep["ranks"]),
        "steps": int(len(_timed_rows(snap))),
        "warmup_steps_left_out": warm,
    }


def _check_comparable(sb: dict[str, Any], sc: dict[str, Any], lb: str, lc: str) -> list[str]:
    """Refuse what cannot be compared; return notes on what differs but still compares."""
    where = f"{lb} vs {lc}"
    cb, cc = sb["report"].get("capture") or {}, sc["report"].get("capture") or {}
    wb, wc = cb.get("workload"), cc.get("workload")
    if wb and wc and wb != wc:
        raise IncomparableError(where, f"{lb} is {wb} and {lc} is {wc}: their steps and metrics measure different things")
    has_steps = [bool(len(_timed_rows(s))) for s in (sb, sc)]
    notes = []
    if has_steps[0] != has_steps[1]:
        snap, label = (sb, lb) if not has_steps[0] else (sc, lc)
        why = "all its steps are warm-up" if snap["report"]["steps"] else "no step rows (no timeline and no step_trace_time.csv)"
        other = lc if snap is sb else lb
        raise IncomparableError(
            where, f"{label} has no step with a measured duration ({why}) and {other} has: their step times cannot be compared"
        )
    if not any(has_steps):
        notes.append("neither side has step rows (request logs?): step time and its breakdown are not compared, only the metrics")
    mb, mc = sb["report"]["metrics"], sc["report"]["metrics"]
    if not [m for m in mb if mb.get(m) is not None and mc.get(m) is not None]:
        raise IncomparableError(where, "no metric has a value in both captures")
    fb = sorted({r["family"] for r in sb["report"]["ranks"]})
    fc = sorted({r["family"] for r in sc["report"]["ranks"]})
    if fb != fc:
        notes.append(f"formats differ ({', '.join(fb)} vs {', '.join(fc)}): compared on the canonical tables both have")
    for key, what in (("device", "devices"), ("framework", "frameworks"), ("framework_version", "framework versions"),
                      ("cann_version", "CANN versions")):
        if cb.get(key) and cc.get(key) and cb[key] != cc[key]:
            notes.append(f"{what} differ ({cb[key]} vs {cc[key]})")
    if cb.get("profiler_level") != cc.get("profiler_level") and (cb.get("profiler_level") or cc.get("profiler_level")):
        notes.append(
            f"profiler levels differ ({cb.get('profiler_level') or '-'} vs {cc.get('profiler_level') or '-'}): a higher level "
            "records more and adds its own overhead to the step"
        )
    ob = {k: v for k, v in (sb["report"].get("options") or {}).items() if k not in RESULT_NEUTRAL_OPTIONS}
    oc = {k: v for k, v in (sc["report"].get("options") or {}).items() if k not in RESULT_NEUTRAL_OPTIONS}
    if ob != oc:
        diff = ", ".join(f"{k}: {ob.get(k)} vs {oc.get(k)}" for k in sorted(set(ob) | set(oc)) if ob.get(k) != oc.get(k))
        notes.append(f"analysis options differ ({diff}): metrics that depend on them (MFU, rules) may differ for that reason")
    return notes


# ---- the comparison --------------------------------------------------------------------------


def compare(
    sb: dict[str, Any],
    sc: dict[str, Any],
    baseline_label: str,
    candidate_label: str,
    min_effect: float = DEFAULT_MIN_EFFECT,
    fail_on_regression: float | None = None,
    gate_metrics: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The diff object of two snapshots (baseline sb, candidate sc); raises IncomparableError."""
    notes = _check_comparable(sb, sc, baseline_label, candidate_label)
    rb, rc = _timed_rows(sb), _timed_rows(sc)
    base, cand = sb["report"], sc["report"]
    ranks_b = sorted(int(r["rank"]) for r in base["ranks"])
    ranks_c = sorted(int(r["rank"]) for r in cand["ranks"])
    common = sorted(set(ranks_b) & set(ranks_c))
    not_compared: list[str] = []
    if ranks_b != ranks_c:
        only_b = sorted(set(ranks_b) - set(ranks_c))
        only_c = sorted(set(ranks_c) - set(ranks_b))
        notes.append(
            f"{len(ranks_b)} rank(s) against {len(ranks_c)}: step time and job-level metrics use every rank; "
            f"per-rank tables (kernels, communication, per-rank step time) use the {len(common)} rank(s) both have"
        )
        if only_b:
            not_compared.append(f"ranks only in the baseline, left out of the per-rank tables: {_ranks_txt(only_b)}")
        if only_c:
            not_compared.append(f"ranks only in the candidate, left out of the per-rank tables: {_ranks_txt(only_c)}")
    sampled = {}
    for mid in SAMPLED:
        if base["metrics"].get(mid) is None or cand["metrics"].get(mid) is None:
            if base["metrics"].get(mid) is not None or cand["metrics"].get(mid) is not None:
                side = "baseline" if base["metrics"].get(mid) is None else "candidate"
                not_compared.append(f"{mid}: not measured in the {side}")
            continue
        sampled[mid] = judge(mid, rb, rc, min_effect)
    metrics, both_null = _metric_rows(base, cand, min_effect)
    for row in metrics:
        if row["metric"] in sampled:
            row["judgement"] = sampled[row["metric"]]["judgement"]
    no_common = {"compared": False, "reason": "no rank in common" if ranks_b or ranks_c else "neither side has ranks"}
    kernels = _kernel_diff(sb, sc, common, min_effect) if common else no_common
    comm = _comm_diff(sb, sc, common) if common else no_common
    for what, d in (("kernel types", kernels), ("communication per group", comm)):
        if not d["compared"]:
            not_compared.append(f"{what}: {d['reason']}")
    out: dict[str, Any] = {
        "diff_schema_version": DIFF_SCHEMA_VERSION,
        "baseline": describe_side(sb, baseline_label),
        "candidate": describe_side(sc, candidate_label),
        "settings": {
            "min_effect": min_effect, "alpha": ALPHA, "ci_level": 1 - ALPHA, "resamples": stats.RESAMPLES, "seed": stats.SEED,
            "samples": "per-step total_us of every rank pooled, warm-up steps left out",
        },
        "step_time": sampled.get("step_time_us"),
        "step_time_p90": sampled.get("step_time_p90_us"),
        "breakdown": [sampled[m] for m in BREAKDOWN if m in sampled],
        "per_rank_step_time": _per_rank_steps(rb, rc, common),
        "metrics": metrics,
        "metrics_null_on_both_sides": both_null,
        "kernels": kernels,
        "communication": comm,
        "verdict": _verdict_diff(base, cand),
        "findings": _findings_diff(base, cand),
        "ranks": {"baseline": ranks_b, "candidate": ranks_c, "common": common},
        "not_compared": not_compared,
        "notes": notes,
        "gate": None,
    }
    if fail_on_regression is not None:
        out["gate"] = gate(out, sampled, fail_on_regression / 100.0, gate_metrics or ("step_time_us",), (base, cand),
                           "--metric" if gate_metrics else "--fail-on-regression")
    return out


def _ranks_txt(r: list[int]) -> str:
    return ", ".join(str(x) for x in r[:12]) + (f", ... ({len(r)})" if len(r) > 12 else "")


# ---- the gate --------------------------------------------------------------------------------


def check_gate_metrics(ids: tuple[str, ...]) -> None:
    """--metric ids must be registered numeric metrics with a known direction (checked before any work)."""
    from msdiag.metrics.registry import all_metrics

    reg = all_metrics()
    for mid in ids:
        if mid not in reg:
            raise InputError("--metric", f"unknown metric '{mid}' (see: msdiag rules list --format json, or the README's metric list)")
        if reg[mid].unit in LABEL_UNITS:
            raise InputError("--metric", f"'{mid}' is a label ({reg[mid].unit}), not a number: it cannot get worse by a percentage")
        d = direction(mid)
        if d == "neutral":
            raise InputError("--metric", f"'{mid}' describes the job rather than rates it (neither higher nor lower is better): it cannot be gated")
        if d is None:
            raise InputError(
                "--metric",
                f"'{mid}' has no known direction (is higher or lower better?): msdiag.diff.HIGHER_IS_BETTER / LOWER_IS_BETTER "
                "does not list it, so it cannot be gated",
            )


def gate(
    diff: dict[str, Any],
    sampled: dict[str, dict[str, Any]],
    threshold: float,
    ids: tuple[str, ...],
    reports: tuple[dict[str, Any], dict[str, Any]],
    option: str = "--metric",
) -> dict[str, Any]:
    """Which gated metrics got worse by more than the threshold AND beyond noise (exit 1).

    A metric without a value on a side cannot be gated: an InputError names the side and the reason.
    """
    rows = {r["metric"]: r for r in diff["metrics"]}
    entries = []
    for mid in ids:
        d = direction(mid)
        sign = 1.0 if d == "lower" else -1.0
        if mid in sampled:
            j = sampled[mid]
            rel = j["relative_change"]
            worse_by = None if rel is None else sign * rel
            beyond = j["judgement"] not in ("too few samples",) and j["p_value"] < ALPHA and j["ci_excludes_zero"]
            failed = bool(beyond and (worse_by is None and (j["change"] * sign > 0) or (worse_by is not None and worse_by > threshold)))
            if failed:
                why = f"failed: worse by {fmt.signed_pct(worse_by)} (threshold {100 * threshold:g}%), beyond noise ({j['evidence']})"
            elif j["judgement"] == "too few samples":
                why = f"not failed: {j['sentence']}"
            elif worse_by is not None and worse_by > threshold:
                why = f"not failed: worse by {fmt.signed_pct(worse_by)} but within noise ({j['sentence']})"
            else:
                why = f"passed: {fmt.signed_pct(rel)} ({j['judgement']})"
            entries.append({"metric": mid, "relative_change": rel, "worse_by": worse_by, "noise_estimate": True,
                            "beyond_noise": bool(beyond), "failed": failed, "sentence": why})
            continue
        row = rows.get(mid)
        if row is None or row.get("baseline") is None or row.get("candidate") is None:
            missing = [(lbl, rep) for lbl, rep in zip(("baseline", "candidate"), reports) if rep["metrics"].get(mid) is None]
            where = "either capture" if len(missing) == 2 else f"the {missing[0][0]}"
            rep = missing[0][1]
            reason = ((rep.get("metric_details") or {}).get(mid) or {}).get("reason") or "not computed"
            raise InputError(option, f"'{mid}' has no value in {where} ({reason}): it cannot be gated")
        if "change" not in row:
            raise InputError(option, f"'{mid}' is not a number in both captures ({row['baseline']!r} vs {row['candidate']!r}): it cannot be gated")
        rel = row.get("relative_change")
        worse_by = None if rel is None else sign * rel
        failed = bool(worse_by is not None and worse_by > threshold) or (rel is None and row["change"] * sign > 0)
        why = (
            f"{'failed' if failed else 'passed'}: {fmt.signed_pct(rel)} (threshold {100 * threshold:g}%); no noise estimate exists for "
            "this metric (no per-step samples): judged on the relative change alone"
        )
        entries.append({"metric": mid, "relative_change": rel, "worse_by": worse_by, "noise_estimate": False,
                        "beyond_noise": None, "failed": failed, "sentence": why})
    return {"threshold": threshold, "metrics": entries, "failed": any(e["failed"] for e in entries)}
