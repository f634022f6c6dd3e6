"""The report object: one JSON-ready dict built from an Analysis, shared by every renderer and the diff.

This is the stable JSON contract of ``msdiag analyze --format json`` (documented in the README
and docs/architecture.md). It sits at the top of the package, beside the analysis, so that both
``msdiag.report`` (which renders it) and ``msdiag.diff`` (which compares two of them) read it
without either importing the other. Renderers never compute metrics; they only read this
structure (and, for the charts, ``Analysis.views``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from msdiag import __version__
from msdiag.analysis import Analysis, finite_or_none
from msdiag.metrics import kernel_types as ktypes
from msdiag.metrics.registry import all_metrics
from msdiag.model import SCHEMA_VERSION, Capture, Rows, entry, held_rows

STEP_COLUMNS = [
    "rank", "step", "total_us", "computing_us", "communication_us", "communication_exposed_us",
    "overlapped_us", "free_us", "bubble_us", "preparing_us", "data_wait_us", "stage_us", "start_us", "end_us", "source", "warmup",
]


def _records(df: pd.DataFrame, cols: list[str]) -> list[dict[str, Any]]:
    cols = [c for c in cols if c in df.columns]
    return [{c: finite_or_none(v) for c, v in zip(cols, row)} for row in df[cols].itertuples(index=False)]


def _sum(held: pd.DataFrame | Rows, name: str, memo: dict[tuple[int, str], np.ndarray] | None = None) -> float:
    """``float(frame[name].sum())`` of a rank's frame as it is held (``model.entry``: Rows of a joined table are read
    as the whole's column between their rows, not cut into a frame), a float column on its array: pandas' nansum
    (nulls as 0, then numpy's sum, over the same values in the same order). ``memo``: the whole's column with its
    nulls as 0, made once for every rank held in it (a rank's sum is then numpy's over its own slice of it)."""
    whole, lo, hi = (held.whole, held.lo, held.hi) if isinstance(held, Rows) else (held, 0, len(held))
    zeroed = memo.get((id(whole), name)) if memo is not None else None
    if zeroed is None:
        col = whole[name]
        if col.dtype != np.float64:
            return float(col.iloc[lo:hi].sum())
        x = col.to_numpy()
        zeroed = np.where(np.isnan(x), 0.0, x)
        if memo is not None:  # (the whole is held by its ranks: its id stays its own while the memo lives)
            memo[(id(whole), name)] = zeroed
    return float(zeroed[lo:hi].sum())


def _comm_summary(rd: Any, memo: dict[tuple[int, str], np.ndarray] | None = None) -> dict[str, Any] | None:
    """The rank's communication: its own tables (the capture's rows of that rank, in the same order), not the
    capture's filtered once per rank (a thousand ranks: a thousand scans of every rank's rows)."""
    if held_rows(rd, "comm_ops"):
        ops = entry(rd.tables, "comm_ops")
        return {
            "source": "communication analysis",
            "ops": len(ops),
            **{f"{c}_us": _sum(ops, f"{c}_us", memo) for c in ("elapse", "transit", "wait", "sync", "idle")},
        }
    k = rd.table("kernels")
    k = k.loc[k["kind"] == "communication", ["dur_us"]]
    if len(k):
        return {"source": "kernels", "ops": int(len(k)), "elapse_us": float(k["dur_us"].sum())}
    return None


def _rank_entry(a: Analysis, rd: Any, steps: int, top: list[dict[str, Any]],
                memo: dict[tuple[int, str], np.ndarray] | None = None) -> dict[str, Any]:
    """One rank's entry; ``steps``: its step rows, ``top``: its top_kernels (both computed for every rank at once);
    ``memo``: :func:`_sum`'s, shared by the ranks."""
    peak = a.metrics["memory_peak_allocated_mb"].per_rank.get(rd.rank) if "memory_peak_allocated_mb" in a.metrics else None
    return {
        "rank": int(rd.rank),
        "family": rd.family,
        "path": rd.path,
        "rank_from": rd.info.rank_from,
        "steps": steps,
        "steps_from": rd.info.steps_from,
        "kernels": held_rows(rd, "kernels"),
        "kernels_from": rd.info.kernels_from,
        "top_kernels": top,
        "communication": _comm_summary(rd, memo),
        "memory_peak_allocated_mb": finite_or_none(peak),
        "notes": list(rd.notes),
    }


def ranks_left_out(a: Analysis) -> list[dict[str, Any]]:
    """Ranks of the job that were found but not analysed (a broken core file): rank, file, reason."""
    return [
        {"rank": int(x["rank"]), "file": str(x["path"]), "reason": str(x["problem"])}
        for x in a.capture.ingest.get("left_out", [])
    ]


def runs_left_out(a: Analysis) -> list[dict[str, Any]]:
    """Other runs found under the folder given (ingest/discover.py ``runs``), not analysed with this one."""
    return [dict(x) for x in a.capture.ingest.get("runs_left_out", [])]


def read_depth(a: Analysis) -> dict[str, Any] | None:
    """How deep the ranks were read (--deep; ingest/loader.py): mode, the ranks read deep, why each was
    chosen (only a job of more than Options.deep_all_up_to ranks chooses), how many were read shallow and, of those,
    how many without parsing their trace_view.json (``summary``)."""
    rd = a.capture.ingest.get("read_depth")
    if rd is None:
        return None
    why = {str(r): list(v) for r, v in rd["why"].items()}
    return {"mode": rd["mode"], "deep": list(rd["deep"]), "why": why, "shallow": int(rd["shallow"]),
            "summary": int(rd["summary"])}


def top_kernels(a: Analysis) -> list[list[dict[str, Any]]]:
    """Each rank's ``top_kernels`` (its compute kernel types by total time), in the capture's order of ranks: as the
    analysis computed them (while it waited for the metrics computed apart: analysis.analyze), else now."""
    if "top_kernels" in a.cluster:
        return a.cluster["top_kernels"]  # type: ignore[no-any-return]
    from msdiag.metrics import kernels  # (here: a module imported first registers its metrics first, the JSON's order)

    return kernels.top_types_per_rank(a.capture)


def kernel_type_rows(a: Analysis) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The JSON ``kernel_types`` (one row per compute op type over every rank, with its bound unit)
    and ``kernel_types_absent`` (why a figure is null on every row, said once)."""
    if "kernel_types" in a.cluster:  # computed once by the analysis (analysis.analyze)
        return a.cluster["kernel_types"], a.cluster["kernel_types_absent"]
    table = ktypes.type_table(a.capture)
    return ktypes.rows(table), ktypes.absent_reasons(a.capture, table)


def early_parts(cap: Capture, checks: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's parts that read no metric, made while a forked child computes metrics (``analyze(early=...)``):
    per JSON key, (its value, its text as :func:`encoded` writes it, None where JSON cannot write it), and the
    sources' objects they were made from. ``build`` takes these very values, and the CLI's encoding their text
    (cli._compact): at 512 bench ranks the JSON of the sources and the cross-checks, ~0.03 s, off the serial tail."""
    sources = cap.sources
    rows = [s.to_dict() for s in sources]
    return {"sources": (rows, encoded(rows)), "checks": (checks, encoded(checks)), "_of": sources}


def encoded(value: Any) -> str | None:
    """``json.dumps(value, ensure_ascii=False, allow_nan=False)``: the report's JSON text (what the result cache
    stores), or None where JSON cannot write the value (NaN, infinities, another type)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _sources(a: Analysis) -> list[dict[str, Any]]:
    """The JSON ``sources``: those ``early_parts`` made when they are still the capture's (the same Source objects)."""
    sources = a.capture.sources
    made = a.early.get("_of")
    if made is not None and len(made) == len(sources) and all(x is y for x, y in zip(made, sources)):
        return a.early["sources"][0]  # type: ignore[no-any-return]
    return [s.to_dict() for s in sources]


def build(a: Analysis) -> dict[str, Any]:
    """The report object (JSON contract) of an analysis."""
    reg = all_metrics()
    metrics = {mid: finite_or_none(v.value) for mid, v in a.metrics.items()}
    details = {
        mid: {
            "unit": reg[mid].unit,
            "doc": reg[mid].doc,
            "source": reg[mid].source,
            "reason": v.reason,
            "per_rank": {str(r): finite_or_none(x) for r, x in v.per_rank.items()},
            "per_rank_unit": reg[mid].per_rank_unit or reg[mid].unit,
        }
        for mid, v in a.metrics.items()
    }
    steps = a.steps.sort_values(["rank", "step"], na_position="first") if len(a.steps) else a.steps
    kernel_types, kernel_types_absent = kernel_type_rows(a)
    memo: dict[tuple[int, str], np.ndarray] = {}  # (_sum's, for every rank's communication sums)
    n_steps = {int(r): int(m) for r, m in a.steps.groupby("rank").size().items()} if len(a.steps) else {}
    return {
        "schema_version": SCHEMA_VERSION,
        "msdiag_version": __version__,
        "path": a.capture.path,
        "capture": a.identity,
        "ranks": [_rank_entry(a, rd, n_steps.get(rd.rank, 0), top, memo) for rd, top in zip(a.capture.ranks, top_kernels(a))],
        "ranks_left_out": ranks_left_out(a),  # ranks found but not analysed, with the file and why
        "runs_left_out": runs_left_out(a),  # other runs under the folder given: analysed apart, never mixed
        "read_depth": read_depth(a),  # which ranks were read deep (their Python frames) and why
        "steps": _records(steps, STEP_COLUMNS),
        "rank_table": a.cluster.get("rank_table", []),
        "link_heatmap": a.cluster.get("link_heatmap"),
        "collectives": a.cluster.get("collectives", []),  # collective instances matched across captured ranks
        "causes": a.cluster.get("causes", []),  # host causes while the device waits, with call sites
        "memory_composition": a.cluster.get("memory_composition", []),  # device peak by component, per rank
        "memory_peak_holders": a.cluster.get("memory_peak_holders", []),  # holders at the allocated peak, per rank
        "requests": a.inference.get("requests"),  # request log summary (inference), null without one
        "phases": a.inference.get("phases"),  # prefill / decode steps of an inference capture, null without a capture
        "kernel_types": kernel_types,  # compute op types over every rank: time, FLOPs, bound AI Core unit
        "kernel_types_absent": kernel_types_absent,  # {figure: why it is null on every row}
        "training_log": a.training,  # the training log's summary and stability (issue 18), null without one
        "metrics": metrics,
        "metric_details": details,
        "verdict": a.verdict,
        "findings": a.findings,
        "plan": a.plan,  # the findings ordered by saving, cumulative step time after (msdiag/plan.py)
        "goals": a.goals,  # each --goal: now, gap, met / reachable (the plan prefix) / not_reachable / unknown
        "rules_skipped": a.skipped,  # could not check: a metric a rule needs is missing
        "rules_checked": a.checked,  # checked, nothing found: the condition was not met, or a negative result
        "checks": a.checks,
        "sources": _sources(a),
        "notes": list(a.capture.notes),
        "options": a.options.as_dict(),
    }
