"""Run a user's MindSpore job, unchanged, under the MindSpore Profiler and write a capture + manifest.

The parent side (``msdiag capture``), one job per module: ``runner`` composes them and returns a
:class:`CaptureResult`; ``preflight`` refuses what cannot run before anything runs or is created;
``launch`` runs the job and passes signals on so each reaches it once; ``manifest`` writes
``manifest.json`` from the processes' state files. ``runtime/`` (a package of standard-library
modules, copied next to ``bootstrap_sitecustomize.py``) runs inside the job's processes: it marks
steps, drives ``mindspore.profiler.profile`` and writes ``msdiag_steps.json`` into each rank folder.
"""

from msdiag.capture.runner import CaptureOptions, CaptureResult, default_out, run_capture

__all__ = ["CaptureOptions", "CaptureResult", "default_out", "run_capture"]
