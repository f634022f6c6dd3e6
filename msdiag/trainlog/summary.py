"""Where training logs meet the analysis: routing, the log-only capture, the verdict and the JSON object.

- :func:`train_log_for` decides whether ``msdiag analyze PATH`` was given a training log (a file whose
  content is one, or a folder of msrun ``worker_N.log``) and reads the log of ``--train-log``;
- :func:`empty_capture` stands in for the capture when a log is analyzed alone (no ranks, no steps);
- :func:`stability` is the stability finding to show beside the profiling verdict (and the verdict of a
  log alone: :func:`verdict`);
- :func:`build` gives the ``training_log`` object of the JSON contract.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msdiag.errors import InputError
from msdiag.fmt import finite_float
from msdiag.model import Capture
from msdiag.trainlog.reader import FORMAT_LABEL, TrainLog, is_train_log_path, read_train_log

CATEGORY = "stability"
#: The training-log rules (rules/stability-*.yaml); step-time-jitter shares the category but reads the capture.
RULE_PREFIX = "stability-"
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def train_log_for(path: str | Path, train_log: str | None) -> tuple[TrainLog | None, bool]:
    """(the training log to analyze, whether PATH itself is that log)."""
    if is_train_log_path(path):
        if train_log:
            raise InputError("--train-log", f"{path} is itself a training log: give --train-log with a capture folder")
        return read_train_log(path), True
    if train_log:
        return read_train_log(train_log), False
    return None, False


def empty_capture(log: TrainLog) -> tuple[Capture, dict[str, Any]]:
    """The capture of a log-only analysis (no ranks) and its identity."""
    cap = Capture(path=log.path, ranks=[], notes=list(log.notes))
    identity = {
        "framework": None,
        "family": "training_log",
        "device": None,
        "ranks": len(log.ranks),
        "workload": "training",
        "training_log": ", ".join(FORMAT_LABEL.get(f, f) for f in log.formats),
    }
    return cap, identity


def stability(findings: list[dict[str, Any]], log: TrainLog | None) -> dict[str, Any] | None:
    """The most severe stability finding (status ``unstable`` / ``watch``), ``stable`` when none fired; None
    without a training log."""
    if log is None:
        return None
    mine = sorted(
        (f for f in findings if f.get("category") == CATEGORY and str(f.get("rule_id")).startswith(RULE_PREFIX)),
        key=lambda f: SEVERITY_ORDER.get(f["severity"], 3),
    )
    if not mine:
        n = int(log.steps["step"].nunique())
        return {"status": "stable", "rule_id": None, "severity": None,
                "sentence": f"Stable: no stability rule fires on the {n} logged step(s)."}  # fmt: skip
    top = mine[0]
    status = "unstable" if top["severity"] in ("warning", "critical") else "watch"
    return {"status": status, "rule_id": top["rule_id"], "severity": top["severity"], "sentence": f"{top['name']}: {top['message']}",
            "others": [f["rule_id"] for f in mine[1:]]}  # fmt: skip


def verdict(findings: list[dict[str, Any]], log: TrainLog) -> dict[str, Any]:
    """The verdict of a training log analyzed alone: its stability finding."""
    s = stability(findings, log) or {}
    return {
        "bottleneck": "stability" if s.get("status") == "unstable" else "stable",  # an info finding: stable, to watch
        "share": None,
        "rule_id": s.get("rule_id"),
        "sentence": s.get("sentence", ""),
        "evidence": next((f["evidence"] for f in findings if f["rule_id"] == s.get("rule_id")), {}),
        "confidence": "medium",
        "runner_up": None,
    }




def build(log: TrainLog | None, findings: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``training_log`` object of the JSON contract (null without a log)."""
    if log is None:
        return None
    st = log.steps
    loss = st["loss"].to_numpy(dtype=float)
    events = log.events["kind"].value_counts().to_dict() if len(log.events) else {}
    return {
        "path": log.path,
        "formats": log.formats,
        "format_labels": [FORMAT_LABEL.get(f, f) for f in log.formats],
        "files": log.files,
        "ranks": log.ranks,
        "steps": int(st["step"].nunique()),
        "first_step": int(st["step"].min()),
        "last_step": int(st["step"].max()),
        "steps_per_epoch": log.steps_per_epoch,
        "step_time_from": log.step_time_from,
        "max_grad_norm": log.max_grad_norm,
        "fields": [c for c in ("loss", "lr", "grad_norm", "loss_scale", "overflow", "step_time_ms", "tokens", "samples", "throughput")
                   if st[c].notna().any()],  # fmt: skip
        "extra_columns": [c for c in log.extra.columns if c not in ("rank", "step")],
        "loss": {"first": finite_float(loss[0]) if len(loss) else None, "last": finite_float(loss[-1]) if len(loss) else None,
                 "min": finite_float(loss[loss == loss].min()) if (loss == loss).any() else None},  # fmt: skip
        "events": {str(k): int(v) for k, v in events.items()},
        "stability": stability(findings, log),
        "notes": list(log.notes),
    }
