"""``manifest.json``: what ran, where, with which window, and what came of it, from the processes' state files.

Each process of the job that owned a capture wrote ``<out>/.msdiag/pid_<pid>.json``
(runtime/journal.py); the ranks are those that imported MindSpore, less msrun's launcher.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msdiag import __version__
from msdiag.capture import runtime
from msdiag.capture.launch import describe_exit
from msdiag.capture.preflight import INSTALL_HINT

if TYPE_CHECKING:
    from msdiag.capture.options import CaptureOptions

MANIFEST_FORMAT = "msdiag-capture"
MANIFEST_VERSION = 1


def states(out: Path) -> list[dict[str, Any]]:
    """The state files of the job's processes (unreadable ones are skipped)."""
    d = out / runtime.STATE_DIR
    found = []
    for p in sorted(d.glob("pid_*.json")) if d.is_dir() else []:
        try:
            found.append(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return found


def is_launcher(state: dict[str, Any]) -> bool:
    """msrun's own process imports MindSpore but never trains: not a rank."""
    argv = [str(a) for a in state.get("argv") or []]
    if not argv or state.get("steps_seen", 0):
        return False
    return os.path.basename(argv[0]) == "msrun" or argv[0].replace(os.sep, "/").endswith("mindspore/parallel/cluster/run.py")


def problems(ranks: list[dict[str, Any]], found: list[dict[str, Any]], returncode: int, opts: CaptureOptions) -> list[str]:
    """What went wrong, one sentence each: the job as a whole, then each rank."""
    out: list[str] = []
    if not found:
        out.append(
            "the capture runtime never started in the job (a Python run with -I / -S / -E ignores PYTHONPATH's "
            "sitecustomize; a job that is not Python is not supported)"
        )
    elif not ranks:
        out.append(
            "the job never imported MindSpore: nothing to profile (if it failed with \"No module named "
            f"'mindspore'\", install MindSpore where the job runs: {INSTALL_HINT})"
        )
    for s in ranks:
        out.extend(_rank_problems(s, opts))
    if returncode != 0 and any(s.get("state") == "captured" for s in ranks):
        out.append(f"the job failed ({describe_exit(returncode)[0]}): what was captured before is analyzed")
    return out


def _rank_problems(s: dict[str, Any], opts: CaptureOptions) -> list[str]:
    who = f"rank {s.get('rank', '?')} (pid {s.get('pid')})"
    out = [f"{who}: {p}" for p in s.get("problems", [])]
    state = s.get("state")
    if state == "captured":
        got = len(s.get("captured_steps") or [])
        if s.get("window_mode") == "steps" and got < opts.steps:
            out.append(f"{who}: {got} of {opts.steps} steps captured (the job ended during the window)")
    elif state in ("waiting", "scheduled"):
        seen = s.get("steps_seen", 0)
        need = opts.skip + opts.warmup + 1
        if seen == 0:
            out.append(
                f"{who}: no step boundary seen (no dataset fetch, Model.train step or top-level Cell call) "
                f"and the job ended before the time-window fallback ({opts.wait_for_steps:g} s)"
            )
        else:
            out.append(
                f"{who}: the job ran {seen} steps; the window opens at step {need} "
                f"(--skip {opts.skip} + --warmup {opts.warmup} + 1): lower --skip / --warmup"
            )
    elif state == "failed":
        out.append(f"{who}: the capture failed (see msdiag_capture.log)")
    elif state in ("recording", "time"):
        out.append(f"{who}: the process ended while recording without closing the window (killed?): no trace was written")
    return out


def build_manifest(
    command: list[str],
    opts: CaptureOptions,
    started: datetime,
    wall_s: float,
    returncode: int,
    exit_code: int,
    stopped: bool,
    ranks: list[dict[str, Any]],
    problems: list[str],
    python: str | None,
    ms_version: str | None,
) -> dict[str, Any]:
    """The capture's manifest.json: what ran, where, with which window, and what came of it."""
    first = ranks[0] if ranks else {}
    world = max((int(r.get("world_size") or 1) for r in ranks), default=None)
    parallel = next((r.get("parallel") for r in ranks if r.get("parallel")), None)
    window = asdict(opts)
    window.pop("out")
    window["mode"] = "time" if any(r.get("window_mode") == "time" for r in ranks) else "steps"
    window["recorded_steps"] = f"{opts.skip + opts.warmup + 1}-{opts.skip + opts.warmup + opts.steps}"
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "command": list(command),
        "msdiag_version": __version__,
        "mindspore_version": first.get("mindspore_version") or ms_version,
        "python": os.path.basename(python) if python else None,
        "host": socket.gethostname(),
        "device": first.get("device_target"),
        "device_info": device_info(ranks),
        "execution_mode": first.get("mode"),
        "world_size": world,
        "parallel": parallel,
        "window": window,
        "started_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_time_s": round(wall_s, 3),
        "exit_code": exit_code,
        "job_returncode": returncode,
        "stopped_by_msdiag": stopped,
        "ranks": sorted((_rank_entry(r) for r in ranks), key=_rank_order),
        "problems": problems,
    }


def device_info(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's device as MindSpore described it at capture time (name, memory), and the peak of that
    name in msdiag's device table (MindSpore exposes no core count, clock or peak): each None with why."""
    from msdiag.metrics.devices import PEAKS, device_key

    props = next((r["device_properties"] for r in ranks if (r.get("device_properties") or {}).get("name")), None)
    props = props or next((r.get("device_properties") for r in ranks if r.get("device_properties")), None) or {}
    name = props.get("name")
    total = props.get("total_memory_bytes")
    out: dict[str, Any] = {
        "name": name,
        "memory_gb": round(total / 2**30, 2) if total else None,
        "from": props.get("from") or "not recorded (the job's processes recorded no device properties)",
        "peak_tflops": None,
        "peak_source": None,
    }
    try:
        key = device_key(name) if name else None
    except ValueError:
        key = None
    if key is not None:
        out["peak_tflops"], out["peak_source"] = PEAKS[key].tflops, f"{key} in msdiag's device table: {PEAKS[key].source}"
    else:
        out["peak_source"] = f"device {name!r} is not in msdiag's device table" if name else "no device name recorded"
    return out


def _rank_entry(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "rank": r.get("rank"),
        "pid": r.get("pid"),
        "folder": r.get("folder"),
        "state": r.get("state"),
        "window_mode": r.get("window_mode"),
        "steps_from": runtime.STEP_SOURCE_LABEL.get(r.get("steps_from") or "", None),
        "steps_seen": r.get("steps_seen"),
        "captured_steps": r.get("captured_steps"),
        "minddata_sampling_ms": r.get("minddata_sampling_ms"),
        "device_properties": r.get("device_properties"),
        "notes": r.get("notes", []),
        "problems": r.get("problems", []),
    }


def _rank_order(r: dict[str, Any]) -> tuple[bool, int, int]:
    return (r["rank"] is None, r["rank"] if r["rank"] is not None else 0, r["pid"] or 0)
