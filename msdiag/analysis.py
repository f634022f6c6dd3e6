"""The analysis pipeline: capture -> ingest -> canonical model -> metrics -> (rules) -> report object.

``analyze`` is what every command that analyzes calls; renderers (text, JSON, HTML) only read
the ``Analysis`` it returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd

from msdiag.errors import InputError, RuleError
from msdiag.ingest.loader import Tiered, describe, load
from msdiag.ingest.paths import within
from msdiag.metrics.breakdown import step_breakdown
from msdiag.metrics.registry import Context, Value, compute_all, declared_params, rank_rows
from msdiag.model import STEPS, Capture, RankData, Rows, entry, pieces
from msdiag.options import Options
from msdiag.rules.advice import for_framework
from msdiag.rules.engine import SEVERITY_RANK, evaluate, finding, verdict
from msdiag.rules.loader import Rule, apply_overrides, load_rules
from msdiag.units import US_PER_MS

__all__ = ["AGREEMENT_TOLERANCE", "Analysis", "Options", "analyze", "diagnose", "finite_or_none", "resolve_rules"]

if TYPE_CHECKING:  # imported where the views are built: importing it first would reorder the metric registry
    from msdiag.metrics.views import ChartViews

# Agreement required between msdiag's own breakdown and the profiler's step_trace_time.csv.
AGREEMENT_TOLERANCE = 0.01


@dataclass
class Analysis:
    capture: Capture
    identity: dict[str, Any]
    steps: pd.DataFrame
    profiler_steps: pd.DataFrame  # the profiler's own step_trace_time.csv rows, where present
    checks: list[dict[str, Any]]
    metrics: dict[str, Value]
    options: Options  # as resolved: rule_params filled from the loaded rules and overrides
    verdict: dict[str, Any] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    checked: list[dict[str, Any]] = field(default_factory=list)  # rules evaluated that found nothing (checked_rules)
    disabled: list[str] = field(default_factory=list)  # rule ids left out by --disable / config disable
    requests: Any = None  # the request log (msdiag.inference.requests.RequestLog), where one was given
    inference: dict[str, Any] = field(default_factory=dict)  # {"requests": summary, "phases": summary}
    train_log: Any = None  # the training log (msdiag.trainlog.reader.TrainLog), where one was given
    training: dict[str, Any] | None = None  # the JSON training_log object (trainlog/summary.py), None without a log
    cluster: dict[str, Any] = field(default_factory=dict)  # rank_table, link_heatmap (metrics/cluster.py)
    views: ChartViews | None = None  # what each chart draws (metrics/views.py), computed on first use
    plan: dict[str, Any] = field(default_factory=dict)  # the findings ordered by saving (msdiag/plan.py)
    goals: list[dict[str, Any]] = field(default_factory=list)  # each --goal: now, gap, the plan prefix reaching it
    # what analyze's ``early`` made of the capture and the checks while a forked child computed metrics (the contract's
    # parts that read no metric, with their JSON: contract.early_parts); empty without a child or an ``early``
    early: dict[str, Any] = field(default_factory=dict)


# A rank's first step slower than this many times the median of its other steps is warm-up
# (graph compilation, first data fetch, communicator set-up): reported, but left out of the shares.
WARMUP_FACTOR = 2.0
WARMUP_MIN_STEPS = 3

# Beyond this disagreement with step_trace_time.csv the kernel table is taken as incomplete
# (e.g. a trimmed kernel_details.csv without trace_view.json) and the profiler's rows are used.
INCOMPLETE_TIMELINE = 0.05


def _steps_for(cap: Capture, checks_wanted: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, list[dict[str, Any]], list[str]]:
    """Steps from each rank's timeline, cross-checked against the profiler's own rows. ``checks_wanted`` False: the
    cross-checks are not listed (their worst total per rank still decides whose rows a rank's steps are; the deep
    choice reads the steps only)."""
    # each rank's frames as held (model.entry: a frame, or Rows of a joined one, not cut here: _joined concatenates)
    ours: list[pd.DataFrame | Rows] = []
    theirs: list[pd.DataFrame | Rows] = []
    notes: list[str] = []
    per_rank = []
    for rd in cap.ranks:
        prof = entry(rd.tables, "profiler_steps") if "profiler_steps" in rd.tables else None
        # computed where the rank was read (metrics/reduce.py)
        mine = entry(rd.tables, "steps") if "steps" in rd.tables else step_breakdown(rd)
        per_rank.append((rd, mine, prof, prof is not None and len(prof) > 0))
    # one comparison over every rank (rows keep the ranks' order): not a merge per rank
    pairs = [(mine, prof) for _, mine, prof, has_prof in per_rank if has_prof and len(mine)]
    checks: list[dict[str, Any]] = []
    worst_of: dict[int, float] = {}
    if pairs:
        merged = _merged(_joined(cap, "steps", [m for m, _ in pairs]), _joined(cap, "profiler_steps", [p for _, p in pairs]))
        if checks_wanted:
            checks = _agreement(merged)
        worst_of = _worst_totals(merged)
    for rd, mine, prof, has_prof in per_rank:
        if has_prof:
            theirs.append(prof)
        worst = worst_of.get(int(rd.rank), 0.0) if has_prof and len(mine) else 0.0
        if len(mine) and worst <= INCOMPLETE_TIMELINE:
            ours.append(mine)
        elif has_prof:
            ours.append(prof)
            if len(mine):
                # worst is |ours - theirs| / theirs: beyond 1 the timeline is not a part of the step at all
                spans = f"{100 * (1 - worst):.0f}% or less of" if 0 <= worst < 1 else "nothing like"
                notes.append(
                    f"rank {rd.rank}: the kernel timeline spans {spans} the step the "
                    "profiler measured (kernel_details.csv incomplete, trace_view.json absent?): "
                    "step rows are step_trace_time.csv's"
                )
            else:
                notes.append(f"rank {rd.rank}: no kernel timeline; step rows are step_trace_time.csv's")
        else:
            notes.append(f"rank {rd.rank}: no timeline and no step_trace_time.csv: no step rows")
    steps = _joined(cap, "steps", ours).copy() if ours else STEPS.empty()  # (a frame of its own: warm-up is marked on it)
    notes.extend(_mark_warmup(steps))
    prof_all = _joined(cap, "profiler_steps", theirs) if theirs else STEPS.empty()
    return steps, prof_all, checks, notes


def _joined(cap: Capture, name: str, frames: list[pd.DataFrame | Rows]) -> pd.DataFrame:
    """``pd.concat(frames, ignore_index=True)`` (``frames``: as ranks hold them, model.entry): the capture's table
    ``name`` itself when ``frames`` are every rank's frame of it (Capture.table, kept or joined: a frame of hundreds of
    ranks' rows concatenated once, not at every call). Callers must not modify it."""
    holders = [x for rd in cap.ranks if name in rd.tables and len(x := entry(rd.tables, name))]
    if len(holders) > 1 and len(holders) == len(frames) and all(a is b for a, b in zip(holders, frames)):
        return cap.table(name)
    return pd.concat(pieces(frames), ignore_index=True)  # (runs of Rows of one frame as one slice: model.pieces)


def _mark_warmup(steps: pd.DataFrame) -> list[str]:
    """Flag each rank's first step when it is far slower than the rank's other steps."""
    steps["warmup"] = pd.array([False] * len(steps), dtype="boolean")
    notes = []
    # each rank's rows with a step, on arrays (rank_rows: the groups of groupby("rank")); ordered by step as
    # sort_values("step") orders them (the Int64 values' quicksort), the median as pandas' (np.nanmedian)
    has = np.flatnonzero(steps["step"].notna().to_numpy(bool))
    step = steps["step"].to_numpy(np.float64, na_value=np.nan)[has]
    total = steps["total_us"].to_numpy(float, na_value=np.nan)[has]
    firsts = _first_and_median(steps["rank"].to_numpy(np.int64)[has], step.astype(np.int64), total)
    if firsts is None:  # a rank with a step twice: each rank's steps ordered as before, rank by rank
        firsts = _first_and_median_by_rank(steps.iloc[has], step, total)
    warm = []
    for rank, first, med in firsts:
        first_total = float(total[first])
        if med > 0 and first_total > WARMUP_FACTOR * med:
            warm.append(has[first])
            notes.append(
                f"rank {rank}: step {int(step[first])} ({first_total / US_PER_MS:.1f} ms, {first_total / med:.1f}x "
                "the median of the others) looks like warm-up: left out of the step-time shares"
            )
    if warm:
        steps.loc[steps.index[warm], "warmup"] = True
    return notes


def _first_and_median_by_rank(steps: pd.DataFrame, step: np.ndarray, total: np.ndarray) -> list[tuple[int, int, float]]:
    """Per rank of at least WARMUP_MIN_STEPS steps (ranks ascending): its first step's row, and the median of its other
    steps' totals (NaN ignored; NaN when none), its rows ordered by step as sort_values("step") orders them."""
    out = []
    for rank, rows in rank_rows(steps):
        if len(rows) < WARMUP_MIN_STEPS:
            continue
        order = rows[np.argsort(step[rows].astype(np.int64), kind="quicksort")]
        with np.errstate(all="ignore"):
            med = float(np.nanmedian(total[order[1:]])) if not np.isnan(total[order[1:]]).all() else float("nan")
        out.append((int(rank), int(order[0]), med))
    return out


def _first_and_median(rank: np.ndarray, step: np.ndarray, total: np.ndarray) -> list[tuple[int, int, float]] | None:
    """:func:`_first_and_median_by_rank` on arrays, every rank at once (a Python median per rank: 512 ranks ~30 ms, twice
    a run); None where a rank holds a step twice (the order of its equal steps is then the quicksort's own)."""
    order = np.lexsort((step, rank))  # by rank, then step
    r, s = rank[order], step[order]
    if len(order) > 1 and ((r[1:] == r[:-1]) & (s[1:] == s[:-1])).any():
        return None
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]]) if len(order) else np.empty(0, dtype=np.int64)
    ends = np.r_[starts[1:], len(order)]
    keep = ends - starts >= WARMUP_MIN_STEPS
    starts, ends = starts[keep], ends[keep]
    # the other steps' totals of each rank, ascending within the rank, NaN last (numpy sorts NaN last)
    group = np.repeat(np.arange(len(starts)), ends - starts - 1)
    at = np.concatenate([order[a + 1 : b] for a, b in zip(starts, ends)]) if len(starts) else np.empty(0, dtype=np.int64)
    vals = total[at]
    by = np.lexsort((vals, group))
    vals = vals[by]
    lo = np.r_[0, np.cumsum(ends - starts - 1)[:-1]].astype(np.int64) if len(starts) else np.empty(0, dtype=np.int64)
    known = np.bincount(group, weights=~np.isnan(vals), minlength=len(starts)).astype(np.int64)
    out = []
    for a, k, base in zip(starts.tolist(), known.tolist(), lo.tolist()):
        if k == 0:
            med = float("nan")
        elif k % 2:  # np.median: the mean of the middle value, its sum from 0.0 (-0.0 becomes 0.0)
            med = 0.0 + float(vals[base + k // 2])
        else:  # the mean of the two middle values, summed from 0.0, halved
            med = (0.0 + float(vals[base + k // 2 - 1]) + float(vals[base + k // 2])) / 2
        out.append((int(r[a]), int(order[a]), med))
    return out


def _merged(steps: pd.DataFrame, prof: pd.DataFrame) -> pd.DataFrame:
    """msdiag's step rows beside the profiler's of the same rank and step (the profiler's columns suffixed _prof)."""
    return steps.merge(prof, on=["rank", "step"], suffixes=("", "_prof"))


def _values(m: pd.DataFrame, col: str) -> list[Any]:
    """A column's plain Python values, None where null (no row Series per row: ranks x steps rows)."""
    return m[col].astype(object).where(m[col].notna(), None).tolist()  # type: ignore[no-any-return]


def _relative(a: float, b: float) -> float:
    """How far msdiag's value ``a`` is from the profiler's ``b``, relative to it."""
    return abs(a - b) / abs(b) if b else (0.0 if abs(a) < 1e-6 else float("inf"))


def _worst_totals(m: pd.DataFrame) -> dict[int, float]:
    """Per rank of the merged rows (:func:`_merged`), the largest relative difference of its step totals: the largest
    ``relative_difference`` of its total_us checks (:func:`_agreement`), 0 where none is measured."""
    worst: dict[int, float] = {}
    for rank, a, b in zip(m["rank"].tolist(), _values(m, "total_us"), _values(m, "total_us_prof")):
        if a is not None and b is not None:
            worst[int(rank)] = max(worst.get(int(rank), 0.0), float(_relative(a, b)))
    return worst


def _agreement(m: pd.DataFrame) -> list[dict[str, Any]]:
    """Compare msdiag's breakdown with step_trace_time.csv, column by column (the rows merged: :func:`_merged`)."""
    out = []
    cols = ("computing_us", "communication_us", "communication_exposed_us", "free_us", "total_us")
    values = {c: _values(m, c) for c in cols}
    values.update({f"{c}_prof": _values(m, f"{c}_prof") for c in cols})
    sources, ranks, step_ids = m["source_prof"].tolist(), m["rank"].tolist(), m["step"].tolist()
    for i in range(len(m)):
        for col in cols:
            a, b = values[col][i], values[f"{col}_prof"][i]
            if a is None or b is None:
                continue
            rel = _relative(a, b)
            # a part that is tiny against the step is compared against the step's span instead
            rel_step = abs(a - b) / max(float(values["total_us_prof"][i]), 1e-9)
            out.append(
                {
                    "check": str(sources[i]),  # step_trace_time.csv, analysis.db:StepTraceTime, ...
                    "rank": int(ranks[i]),
                    "step": int(step_ids[i]),
                    "column": col,
                    "msdiag": float(a),
                    "profiler": float(b),
                    # null where the profiler's figure is 0 and msdiag's is not (infinite: JSON has no number for it)
                    "relative_difference": float(rel) if math.isfinite(rel) else None,
                    "ok": bool(rel <= AGREEMENT_TOLERANCE or rel_step <= AGREEMENT_TOLERANCE / 10),
                }
            )
    return out


def _check_options(opts: Options) -> None:
    """Options that name files or devices are checked before any work, as input errors."""
    from msdiag.metrics import devices, model_config

    if opts.device:
        try:
            devices.device_key(opts.device)
        except ValueError as e:
            raise InputError("--device", str(e)) from None
    if opts.model_config:
        try:
            model_config.load_model_config(opts.model_config)
        except ValueError as e:
            raise InputError(opts.model_config, str(e).replace(f"{opts.model_config}: ", "")) from None


def resolve_rules(opts: Options, rules_cache: Path | None = None) -> tuple[dict[str, Rule], Options]:
    """The rules of this analysis and the options with every rule parameter resolved (overrides checked).

    Thresholds have one home: a metric that cuts at a rule's parameter declares it
    (``@metric(..., params=)``) and reads the resolved value from ``Context.options``, so a
    ``--set`` moves the metric and the rule together. Unknown ids in ``disable`` are errors.
    """
    rules = load_rules(opts.rules_dirs, cache=rules_cache)
    params = apply_overrides(rules, opts.overrides, "--set" if not opts.config else f"--set / set in {opts.config}")
    where = "--disable" if not opts.config else f"--disable / disable in {opts.config}"
    for rid in opts.disable:
        if rid not in rules:
            raise RuleError(where, f"unknown rule '{rid}' (see: msdiag rules list)")
    for mid, keys in declared_params().items():
        for key in keys:
            rid, _, name = key.partition(".")
            if name not in params.get(rid, {}):
                src = rules[rid].path if rid in rules else "the loaded rules"
                raise RuleError(src, f"metric {mid} cuts at rule parameter {key}, which is not defined")
    return rules, replace(opts, rule_params=params)


def _read(path: str | Path, opts: Options) -> tuple[Capture, dict[str, Any], pd.DataFrame, pd.DataFrame, list[dict[str, Any]], Any]:
    """The capture (or a request log alone) and its steps: (capture, identity, steps, profiler steps, checks, log)."""
    from msdiag.inference import summary as inference
    from msdiag.metrics.reduce import reduce_id, reduce_rank

    log, alone = inference.request_log_for(path, opts.requests)  # a request log is a file discovery refuses
    if alone and log is not None:
        return _no_capture(*inference.empty_capture(log), log)
    # --trace exports the timeline: the ranks are kept whole (metrics/reduce.py drops what no metric reads)
    reduce, rid = (None, None) if opts.whole_timeline else (reduce_rank, reduce_id())
    tiered = None if opts.whole_timeline else _tiered(path, opts)
    cap = load(path, jobs=opts.jobs, cache=opts.cache, scheduler=opts.scheduler, reduce=reduce, reduce_id=rid, tiered=tiered)
    identity = describe(cap)
    steps, prof, checks, notes = _steps_for(cap)
    cap.notes.extend(notes)
    return cap, identity, steps, prof, checks, log


def _tiered(path: str | Path, opts: Options) -> Tiered:
    """How deep the ranks are read (--deep): a large job's ranks shallow, then deep those metrics/depth.py picks."""
    from msdiag.metrics.depth import select_deep
    from msdiag.metrics.reduce import reduce_rank_shallow

    def select(ranks: list[RankData]) -> dict[int, list[str]]:
        cap = Capture(path=str(path), ranks=ranks)
        steps, _, _, _ = _steps_for(cap, checks_wanted=False)
        return select_deep(Context(capture=cap, steps=steps, options=opts))

    return Tiered(mode=opts.deep, up_to=opts.deep_all_up_to, reduce=reduce_rank_shallow, select=select)


def _no_capture(cap: Capture, identity: dict[str, Any], log: Any) -> tuple[Capture, dict[str, Any], pd.DataFrame, pd.DataFrame, list[dict[str, Any]], Any]:
    """The _read result of a log analyzed alone: no ranks, no steps."""
    steps = STEPS.empty()
    _mark_warmup(steps)
    return cap, identity, steps, STEPS.empty(), [], log


def _rules_cache(path: str | Path, opts: Options) -> Path | None:
    """Where parsed rule files are kept: the cache folder of the run (none without one, or when it lies
    inside the capture: the loader then refuses it, and nothing is ever written into a capture)."""
    if opts.cache is None:
        return None
    return None if within(opts.cache, path) else Path(opts.cache).expanduser().resolve()


def analyze(path: str | Path, options: Options | None = None,
            early: Callable[[Capture, list[dict[str, Any]]], dict[str, Any]] | None = None) -> Analysis:
    """Read the capture at ``path`` and compute its step breakdown, metrics and diagnosis. ``early``: the caller's
    work on the capture and the cross-checks alone, done where this process would wait for a forked child computing
    metrics (its result is ``Analysis.early``; not called without such a child)."""
    from msdiag.inference import summary as inference
    from msdiag.metrics import phases
    from msdiag.trainlog import summary as training

    opts = options or Options()
    _check_options(opts)
    rules, opts = resolve_rules(opts, _rules_cache(path, opts))  # a bad --set or --disable fails before any work
    tlog, talone = training.train_log_for(path, opts.train_log)  # a training log: alone, or --train-log (issue 18)
    cap, identity, steps, prof, checks, log = _no_capture(*training.empty_capture(tlog), None) if talone and tlog else _read(path, opts)
    ctx = Context(capture=cap, steps=steps, options=opts, requests=log, train_log=tlog)
    from msdiag.metrics import causes, cluster, collectives, device_memory, kernel_types, kernels

    made: dict[str, Any] = {}  # views of the capture alone, computed while a forked child computes metrics

    def meanwhile() -> None:  # (each rank's top kernel types come back with the child's kernels metrics: kernels.top_types)
        made["link_heatmap"] = cluster.link_heatmap(cap)
        if early is not None:
            made["caller"] = early(cap, checks)

    metrics = compute_all(ctx, meanwhile)
    kind = phases.workload(ctx)
    if kind:
        identity["workload"] = kind
    verdict, findings, skipped = diagnose(
        {k: v.value for k, v in metrics.items()}, rules, opts, {k: v.reason for k, v in metrics.items() if v.reason}
    )
    skipped, checked = checked_rules(rules, opts, findings, skipped, metrics)
    findings = for_framework(findings, identity.get("framework"))  # advice for the framework that ran
    if talone and tlog is not None:
        verdict = training.verdict(findings, tlog)  # a training log alone: its stability is the verdict
    on_repaired_data(verdict, cap)
    on_modelled_arrivals(verdict, findings, log)
    on_unmeasured_cause(verdict, metrics)
    from msdiag import plan as planning

    plan = planning.project(ctx, metrics, findings, rules, log)  # adds each finding's projection (issue 16)
    from msdiag.metrics.views import ChartViews

    views = {
        "rank_table": cluster.rank_table(cap, steps, metrics, opts.ranks_per_node),
        "link_heatmap": made["link_heatmap"] if "link_heatmap" in made else cluster.link_heatmap(cap),
        # each rank's compute kernel types by time (the JSON ranks' top_kernels)
        "top_kernels": kernels.top_types(ctx),
        "collectives": collectives.collective_records(ctx),  # instances matched across ranks (issue 14)
        "causes": causes.cause_rows(ctx),  # what the host does while the device waits (issue 14)
        "memory_composition": device_memory.composition_rows(ctx),  # the device peak by component (issue 15)
        "memory_peak_holders": device_memory.holder_rows(ctx),  # who holds memory at the allocated peak
        # compute op types with their bound AI Core unit: the table the metrics computed (kernel_types.cached_table)
        "kernel_types": kernel_types.rows(kernel_types.cached_table(ctx)),
        "kernel_types_absent": kernel_types.absent_reasons(cap, kernel_types.cached_table(ctx)),
    }
    return Analysis(
        capture=cap,
        identity=identity,
        steps=steps,
        profiler_steps=prof,
        checks=checks,
        metrics=metrics,
        options=opts,
        verdict=verdict,
        findings=findings,
        skipped=skipped,
        checked=checked,
        disabled=list(opts.disable),
        cluster=views,
        requests=log,
        inference=inference.build(log, opts.slo_ttft_ms, opts.slo_tpot_ms, phases.phases_summary(ctx)),
        views=ChartViews(ctx, metrics, findings, identity.get("workload")),
        plan=plan,
        goals=planning.evaluate_goals(opts.goals, {k: v.value for k, v in metrics.items()}, plan),
        train_log=tlog,
        training=training.build(tlog, findings),
        early=made.get("caller") or {},
    )


def on_repaired_data(verdict: dict[str, Any], cap: Capture) -> None:
    """Say in the verdict when it stands on repaired data: values outside physical bounds that the
    readers' rows lost (ingest/bounds.py, counted in each source's ``repaired``). Sets
    ``verdict["repaired"]`` (true, only then) and ends the sentence with how many values were left out."""
    left_out = sum(sum(s.repaired.values()) for s in cap.sources if s.repaired)
    if not left_out or not verdict:
        return
    verdict["repaired"] = True
    verdict["sentence"] = (
        f"{verdict.get('sentence', '')} (stands on repaired data: {left_out} value(s) outside physical bounds "
        "were left out; see the notes)"
    )


#: request-log metrics that stand on arrival times: modelled arrivals are said wherever they are evidence
ARRIVAL_METRICS = ("ttft_load_slope", "arrived_busy_share", "inflight_join_share")


def on_modelled_arrivals(verdict: dict[str, Any], findings: list[dict[str, Any]], log: Any) -> None:
    """A vLLM result without start_times has modelled arrivals (inference/requests.py): every finding whose
    evidence stands on them, and the verdict, say so; the verdict's confidence is at most medium
    (``verdict["arrivals"] = "modelled"``)."""
    if log is None or getattr(log, "arrivals", None) != "modelled":
        return
    said = " (arrival times modelled from the benchmark's request rate: the result has no start_times)"
    for f in findings:
        if any(m in (f.get("evidence") or {}) for m in ARRIVAL_METRICS):
            f["message"] = f"{f['message']}{said}"
    if verdict and verdict.get("share_of"):  # an inference verdict
        verdict["arrivals"] = "modelled"
        verdict["sentence"] = f"{verdict.get('sentence', '')}{said}"
        if verdict.get("confidence") == "high":
            verdict["confidence"] = "medium"


#: For each verdict category, the metrics that measure its causes (rules/causes.py), most telling first:
#: when none gives a cause, the verdict says why (the first one's reason for being null).
CAUSE_METRICS = {
    "communication": ("uncaptured_wait_ms_per_step", "late_arrival_ms_per_step"),
    "host": ("host_sync_ms_per_step",),
    "data": ("data_wait_share",),
}


def on_unmeasured_cause(verdict: dict[str, Any], metrics: dict[str, Value]) -> None:
    """When the verdict's category has causes msdiag can measure but none was measured, say what the
    capture lacks: ``verdict["cause_unknown"]`` (the reason of the first null cause metric)."""
    if not verdict or verdict.get("cause"):
        return
    for mid in CAUSE_METRICS.get(str(verdict.get("bottleneck")), ()):
        m = metrics.get(mid)
        if m is not None and m.value is None and m.reason:
            verdict["cause_unknown"] = f"no cause measured: {m.reason}"
            return


def diagnose(
    values: dict[str, Any], rules: dict[str, Rule], opts: Options, reasons: dict[str, str] | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Rules against the metrics: the verdict, findings (most severe first) and skipped rules.

    A disabled rule is not evaluated: it is neither a finding, nor skipped, nor in the verdict.
    ``opts.rule_params`` are the resolved parameters (resolve_rules). ``reasons``: why a null
    metric is null, quoted in a skipped rule's reason.
    """
    enabled = {rid: r for rid, r in rules.items() if rid not in opts.disable}
    outcomes = evaluate(enabled, values, opts.rule_params)
    fired = [o for o in outcomes if o.status == "fired"]
    fired.sort(key=lambda o: (-SEVERITY_RANK[o.severity or "info"], o.rule.category, o.rule.id))
    why = reasons or {}
    skipped = [
        {"rule_id": o.rule.id, "reason": f"{o.reason}: {why[o.missing]}" if o.missing in why else o.reason, "metric": o.missing}
        for o in outcomes
        if o.status == "skipped"
    ]
    findings = [finding(o) for o in fired]
    for f in findings:  # a corroborating metric that was null: say why, as a skipped rule's reason does
        for na in f.get("not_available") or []:
            na["reason"] = why.get(na["metric"])
    return verdict(outcomes, values), findings, skipped


def checked_rules(
    rules: dict[str, Rule], opts: Options, findings: list[dict[str, Any]], skipped: list[dict[str, Any]],
    metrics: dict[str, Value],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Tell "could not check" from "checked, nothing found": (rules skipped, rules checked).

    A rule that evaluated to false was checked; so was a rule skipped only because its metric is a
    negative result (``Value.checked``: e.g. no rank stands out), which moves from the skipped list to
    the checked one with that metric's reason. Each checked entry: {rule_id, reason (null when the
    condition was simply not met)}. Disabled rules are in neither.
    """
    fired = {f["rule_id"] for f in findings}
    truly: list[dict[str, Any]] = []
    checked: dict[str, str | None] = {}
    for s in skipped:
        m = metrics.get(s.get("metric") or "")
        if m is not None and m.checked:
            checked[s["rule_id"]] = m.reason
        else:
            truly.append(s)
    left = {s["rule_id"] for s in truly}
    for rid in rules:
        if rid not in opts.disable and rid not in fired and rid not in left:
            checked.setdefault(rid, None)
    return truly, [{"rule_id": rid, "reason": checked[rid]} for rid in sorted(checked)]


def finite_or_none(x: Any) -> Any:
    """JSON-safe numbers: NaN/inf and pandas NA become None; numpy scalars become Python."""
    if type(x) is float:  # (the common case first: math's test, not numpy's on a Python float)
        return x if math.isfinite(x) else None
    if x is None or x is pd.NA:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    return x
