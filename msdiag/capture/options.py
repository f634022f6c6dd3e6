"""What to capture: the options of `msdiag capture`, shared by the runner and the manifest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class CaptureOptions:
    """What to capture; the defaults work on a job of 20 steps."""

    out: Path
    skip: int = 2  # steps left out at the start (graph compilation, first fetches)
    warmup: int = 1  # profiler warm-up steps (profiler on, nothing kept)
    steps: int = 5  # active steps recorded
    stop_after: bool = False  # stop the job once the window is written
    seconds: float = 10.0  # length of the time-window fallback
    wait_for_steps: float = 30.0  # seconds after `import mindspore` without a step before falling back
    profile_memory: bool = True
    minddata: bool = True
    minddata_interval_ms: int | None = None  # MindData queue sampling period (None: MindSpore's, 1000 ms)

    def runtime_config(self) -> dict[str, Any]:
        return {
            "out": str(self.out.resolve()),
            "skip": self.skip,
            "warmup": self.warmup,
            "steps": self.steps,
            "stop_after": self.stop_after,
            "seconds": self.seconds,
            "wait_for_steps": self.wait_for_steps,
            "profile_memory": self.profile_memory,
            "minddata": self.minddata,
            "minddata_interval_ms": self.minddata_interval_ms,
        }
