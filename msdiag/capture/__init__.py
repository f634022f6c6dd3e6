"""Run a user's MindSpore job, unchanged, under the MindSpore Profiler and write a capture + manifest.

``runner`` is the parent side (``msdiag capture``): it launches the command with a bootstrap on
PYTHONPATH and writes ``manifest.json``. ``runtime`` runs inside the job's processes (copied next to
``bootstrap_sitecustomize.py``): it marks steps, drives ``mindspore.profiler.profile`` and writes
``msdiag_steps.json`` into each rank folder.
"""

from msdiag.capture.runner import CaptureOptions, CaptureResult, default_out, run_capture

__all__ = ["CaptureOptions", "CaptureResult", "default_out", "run_capture"]
