"""The analysis pipeline: capture -> ingest -> canonical model -> metrics -> (rules) -> report object.

``analyze`` is what every command that analyzes calls; renderers (text, JSON, HTML) only read
the ``Analysis`` it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msdiag.errors import InputError
from msdiag.ingest.loader import describe, load
from msdiag.metrics.breakdown import step_breakdown
from msdiag.metrics.registry import Context, Value, compute_all
from msdiag.model import STEPS, Capture
from msdiag.rules.engine import SEVERITY_RANK, evaluate, finding, verdict
from msdiag.rules.loader import apply_overrides, load_rules

# Agreement required between msdiag's own breakdown and the profiler's step_trace_time.csv.
AGREEMENT_TOLERANCE = 0.01


@dataclass
class Options:
    """Analysis options shared by analyze, report and diff."""

    jobs: int | None = None
    peak_tflops: float | None = None
    device: str | None = None
    model_config: str | None = None
    ranks_per_node: int | None = None
    device_memory_gb: float | None = None
    host_cores: int | None = None
    rules_dirs: tuple[str, ...] = ()
    overrides: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "peak_tflops": self.peak_tflops,
            "device": self.device,
            "model_config": self.model_config,
            "ranks_per_node": self.ranks_per_node,
            "device_memory_gb": self.device_memory_gb,
            "host_cores": self.host_cores,
            "rules": list(self.rules_dirs),
            "set": dict(self.overrides),
        }


@dataclass
class Analysis:
    capture: Capture
    identity: dict[str, Any]
    steps: pd.DataFrame
    profiler_steps: pd.DataFrame  # the profiler's own step_trace_time.csv rows, where present
    checks: list[dict[str, Any]]
    metrics: dict[str, Value]
    options: Options
    verdict: dict[str, Any] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)


# A rank's first step slower than this many times the median of its other steps is warm-up
# (graph compilation, first data fetch, communicator set-up): reported, but left out of the shares.
WARMUP_FACTOR = 2.0
WARMUP_MIN_STEPS = 3

# Beyond this disagreement with step_trace_time.csv the kernel table is taken as incomplete
# (e.g. a trimmed kernel_details.csv without trace_view.json) and the profiler's rows are used.
INCOMPLETE_TIMELINE = 0.05


def _steps_for(cap: Capture) -> tuple[pd.DataFrame, pd.DataFrame, list[dict[str, Any]], list[str]]:
    """Steps from each rank's timeline, cross-checked against the profiler's own rows."""
    ours: list[pd.DataFrame] = []
    theirs: list[pd.DataFrame] = []
    checks: list[dict[str, Any]] = []
    notes: list[str] = []
    for rd in cap.ranks:
        prof = rd.tables.get("profiler_steps")
        has_prof = prof is not None and len(prof) > 0
        if has_prof:
            theirs.append(prof)
        mine = step_breakdown(rd)
        rank_checks = _agreement(mine, prof) if has_prof and len(mine) else []
        checks.extend(rank_checks)
        worst = max(
            (c["relative_difference"] for c in rank_checks if c["column"] == "total_us"), default=0.0
        )
        if len(mine) and worst <= INCOMPLETE_TIMELINE:
            ours.append(mine)
        elif has_prof:
            ours.append(prof)
            if len(mine):
                notes.append(
                    f"rank {rd.rank}: the kernel timeline spans {100 * (1 - worst):.0f}% or less of the step the "
                    "profiler measured (kernel_details.csv incomplete, trace_view.json absent?): "
                    "step rows are step_trace_time.csv's"
                )
            else:
                notes.append(f"rank {rd.rank}: no kernel timeline; step rows are step_trace_time.csv's")
        else:
            notes.append(f"rank {rd.rank}: no timeline and no step_trace_time.csv: no step rows")
    steps = pd.concat(ours, ignore_index=True) if ours else STEPS.empty()
    notes.extend(_mark_warmup(steps))
    prof_all = pd.concat(theirs, ignore_index=True) if theirs else STEPS.empty()
    return steps, prof_all, checks, notes


def _mark_warmup(steps: pd.DataFrame) -> list[str]:
    """Flag each rank's first step when it is far slower than the rank's other steps."""
    steps["warmup"] = pd.array([False] * len(steps), dtype="boolean")
    notes = []
    for rank, g in steps[steps["step"].notna()].groupby("rank"):
        if len(g) < WARMUP_MIN_STEPS:
            continue
        g = g.sort_values("step")
        first, rest = g.iloc[0], g.iloc[1:]["total_us"]
        med = float(rest.median())
        if med > 0 and first["total_us"] > WARMUP_FACTOR * med:
            steps.loc[g.index[0], "warmup"] = True
            notes.append(
                f"rank {rank}: step {int(first['step'])} ({first['total_us'] / 1000:.1f} ms, {first['total_us'] / med:.1f}x "
                "the median of the others) looks like warm-up: left out of the step-time shares"
            )
    return notes


def _agreement(steps: pd.DataFrame, prof: pd.DataFrame) -> list[dict[str, Any]]:
    """Compare msdiag's breakdown with step_trace_time.csv, column by column."""
    m = steps.merge(prof, on=["rank", "step"], suffixes=("", "_prof"))
    out = []
    for _, row in m.iterrows():
        for col in ("computing_us", "communication_us", "communication_exposed_us", "free_us", "total_us"):
            a, b = row[col], row[f"{col}_prof"]
            if pd.isna(a) or pd.isna(b):
                continue
            rel = abs(a - b) / abs(b) if b else (0.0 if abs(a) < 1e-6 else float("inf"))
            # a part that is tiny against the step is compared against the step's span instead
            rel_step = abs(a - b) / max(float(row["total_us_prof"]), 1e-9)
            out.append(
                {
                    "check": str(row["source_prof"]),  # step_trace_time.csv, analysis.db:StepTraceTime, ...
                    "rank": int(row["rank"]),
                    "step": int(row["step"]),
                    "column": col,
                    "msdiag": float(a),
                    "profiler": float(b),
                    "relative_difference": float(rel),
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


def analyze(path: str | Path, options: Options | None = None) -> Analysis:
    """Read the capture at ``path`` and compute its step breakdown and metrics."""
    opts = options or Options()
    _check_options(opts)
    cap = load(path, jobs=opts.jobs)
    steps, prof, checks, notes = _steps_for(cap)
    cap.notes.extend(notes)
    ctx = Context(capture=cap, steps=steps, options=opts.as_dict())
    metrics = compute_all(ctx)
    verdict, findings, skipped = diagnose({k: v.value for k, v in metrics.items()}, opts)
    return Analysis(
        capture=cap,
        identity=describe(cap),
        steps=steps,
        profiler_steps=prof,
        checks=checks,
        metrics=metrics,
        options=opts,
        verdict=verdict,
        findings=findings,
        skipped=skipped,
    )


def diagnose(values: dict[str, Any], opts: Options) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Rules against the metrics: the verdict, findings (most severe first) and skipped rules."""
    rules = load_rules(opts.rules_dirs)
    params = apply_overrides(rules, opts.overrides)
    outcomes = evaluate(rules, values, params)
    fired = [o for o in outcomes if o.status == "fired"]
    fired.sort(key=lambda o: (-SEVERITY_RANK[o.severity or "info"], o.rule.category, o.rule.id))
    skipped = [{"rule_id": o.rule.id, "reason": o.reason} for o in outcomes if o.status == "skipped"]
    return verdict(outcomes, values), [finding(o) for o in fired], skipped


def finite_or_none(x: Any) -> Any:
    """JSON-safe numbers: NaN/inf and pandas NA become None; numpy scalars become Python."""
    if x is None or x is pd.NA:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    return x
