"""The sidecar ``msdiag_steps.json``: the steps and data waits of the window, written into the rank folder.

MindSpore on CPU writes no step markers, so the capture records them itself, in the trace's clock;
``msdiag/ingest/msdiag_markers.py`` reads them as ``ProfilerStep#N`` markers (its docstring shows
the format).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from .journal import write_json_atomic
from .settings import MARKERS_FILE, MARKERS_FORMAT, MARKERS_VERSION, STEP_SOURCE_LABEL, Settings
from .steps import Step, Wait, Window


def markers(
    rank: int, pid: int, mode: Optional[str], settings: Settings, window: Window, steps: List[Step], waits: List[Wait],
    device: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """The sidecar's document: the window and its steps (``steps``) and data waits (``waits``), and the
    device as MindSpore described it (``device``: name, total_memory_bytes, from; profiler.device_properties)."""
    return {
        "device": device,
        "format": MARKERS_FORMAT,
        "version": MARKERS_VERSION,
        "rank": rank,
        "pid": pid,
        "clock": "unix epoch microseconds (time.time_ns() / 1000), as trace_view.json ts on MindSpore CPU",
        "steps_from": STEP_SOURCE_LABEL.get(mode or "", None),
        "window": {
            "mode": window.mode,
            **settings.window(),
            "recording_start_us": window.rec_start,
            "recording_end_us": window.rec_end,
        },
        "steps": [{"step": s, "start_us": a, "end_us": b, "end_from": how} for s, a, b, how in steps],
        "data_waits": [{"step": s, "start_us": a, "end_us": b} for s, a, b in waits],
    }


def write_markers(folder: str, doc: Dict[str, Any]) -> None:
    """``<folder>/msdiag_steps.json``, written atomically."""
    write_json_atomic(os.path.join(folder, MARKERS_FILE), doc)
