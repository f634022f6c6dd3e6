"""Reading ``msdiag_steps.json``: the step markers and data waits ``msdiag capture`` records in a rank folder.

MindSpore on CPU writes no step markers (its ``ProfilerStep#N`` ranges go to a file the CPU parser
never reads), so the capture runtime records the job's step boundaries and dataset waits itself and
writes them next to MindSpore's output, one file per rank folder::

    {"format": "msdiag-markers", "version": 1, "rank": 0, "pid": 123,
     "clock": "unix epoch microseconds ...", "steps_from": "dataset iterator fetches ...",
     "window": {"mode": "steps", "skip": 2, "warmup": 1, "steps": 5, "first": 4, "last": 8,
                "recording_start_us": ..., "recording_end_us": ...},
     "steps": [{"step": 4, "start_us": 1.7e15, "end_us": 1.7e15, "end_from": "next step"}, ...],
     "data_waits": [{"step": 4, "start_us": ..., "end_us": ...}, ...]}

Times are unix-epoch microseconds (``time.time_ns() / 1000`` in the job), the clock of
trace_view.json ``ts`` on MindSpore CPU captures. ``step`` is the job's step number (1 = its first
fetch or call), which is also MindSpore's profiler step number. A step runs from its boundary (the
dataset fetch, Model.train step or top-level Cell call that starts it) to the next one; a data wait
is the fetch that starts its step, so it lies inside the step it delays.

Rows (model.TIMELINE): each step -> lane ``step``, track ``msdiag``, name ``ProfilerStep#<step>``;
each data wait -> lane ``host``, track ``msdiag/data_wait``, name ``msdiag::data_wait`` (matched by
breakdown.DATA_WAIT_PATTERN).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msdiag import model
from msdiag.errors import ParseError
from msdiag.ingest.engine import Ctx, Read
from msdiag.ingest.metadata import load_json

MARKERS_FILE = "msdiag_steps.json"
MARKERS_FORMAT = "msdiag-markers"
MARKERS_VERSION = 1
STEP_TRACK = "msdiag"
WAIT_TRACK = "msdiag/data_wait"
WAIT_NAME = "msdiag::data_wait"


def read_markers_doc(path: Path) -> dict[str, Any]:
    """The validated document (ParseError naming the file and the problem otherwise)."""
    doc = load_json(path)
    if not isinstance(doc, dict) or doc.get("format") != MARKERS_FORMAT:
        raise ParseError(path, f"not an msdiag markers file (expected \"format\": \"{MARKERS_FORMAT}\")")
    version = doc.get("version")
    if not isinstance(version, int) or version > MARKERS_VERSION:
        raise ParseError(path, f"markers version {version!r}: this msdiag reads version {MARKERS_VERSION} (upgrade msdiag)")
    for key in ("steps", "data_waits"):
        items = doc.get(key, [])
        if not isinstance(items, list):
            raise ParseError(path, f"'{key}' is not a list")
        for i, it in enumerate(items):
            if not isinstance(it, dict):
                raise ParseError(path, f"{key}[{i}] is not an object")
            step = it.get("step")
            if not isinstance(step, int) or isinstance(step, bool):
                raise ParseError(path, f"{key}[{i}].step is {step!r}, not an integer")
            lo, hi = _time(path, f"{key}[{i}].start_us", it.get("start_us")), _time(path, f"{key}[{i}].end_us", it.get("end_us"))
            if hi < lo:
                raise ParseError(path, f"{key}[{i}] ends before it starts ({hi} < {lo})")
    return doc


def _time(path: Path, where: str, v: Any) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v):
        raise ParseError(path, f"{where} is {v!r}, not a number")
    return float(v)


def read_markers(path: Path, rank: int) -> pd.DataFrame:
    """msdiag_steps.json -> model.TIMELINE rows: step markers (lane step) and data waits (lane host)."""
    return markers_timeline(read_markers_doc(Path(path)), rank)


def markers_timeline(doc: dict[str, Any], rank: int) -> pd.DataFrame:
    """The TIMELINE rows of a validated markers document."""
    steps = doc.get("steps", [])
    waits = doc.get("data_waits", [])
    n = len(steps) + len(waits)
    if not n:
        return model.TIMELINE.empty()
    lanes = ["step"] * len(steps) + ["host"] * len(waits)
    tracks = [STEP_TRACK] * len(steps) + [WAIT_TRACK] * len(waits)
    names = [f"ProfilerStep#{s['step']}" for s in steps] + [WAIT_NAME] * len(waits)
    items = steps + waits
    start = np.array([float(it["start_us"]) for it in items])
    dur = np.array([float(it["end_us"]) - float(it["start_us"]) for it in items])
    return model.TIMELINE.frame(
        {
            "rank": pd.Series([rank] * n, dtype=model.INT),
            "lane": pd.Series(lanes, dtype=model.STR),
            "track": pd.Series(tracks, dtype=model.STR),
            "name": pd.Series(names, dtype=model.STR),
            "start_us": start,
            "dur_us": dur,
        }
    )


def read_markers_source(path: Path, ctx: Ctx) -> Read:
    """msdiag capture's step markers and data waits; the profiler's own step markers win where present."""
    doc = read_markers_doc(path)
    rows = markers_timeline(doc, ctx.rank)
    tl = ctx.table("timeline")
    out = Read()
    if len(tl) and (tl["lane"] == "step").any():
        rows = rows[rows["lane"] != "step"]
        out.notes.append(f"{path.name}: the profiler's own ProfilerStep#N markers are used; msdiag's data waits are added")
    else:
        out.info["step_source"] = f"msdiag capture markers ({path.name}): {doc.get('steps_from') or 'source unknown'}"
    device = doc.get("device")
    if isinstance(device, dict) and isinstance(device.get("name"), str) and device["name"]:
        out.info["device_name"] = device["name"]  # MindSpore's device properties at capture time (issue 15)
    total = device.get("total_memory_bytes") if isinstance(device, dict) else None
    if isinstance(total, int) and not isinstance(total, bool) and total > 0:
        out.info["device_memory_gb"] = total / 2**30
    if (doc.get("window") or {}).get("mode") == "time":
        out.notes.append(f"{path.name}: nothing marked steps when the job was captured: msdiag capture recorded a time window")
    out.tables["timeline"] = rows
    return out
