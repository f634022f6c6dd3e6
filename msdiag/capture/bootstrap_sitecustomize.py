"""msdiag capture bootstrap, copied as ``sitecustomize.py`` into a temporary folder on the job's PYTHONPATH.

Python imports ``sitecustomize`` at start-up. This one installs msdiag's capture runtime (which waits
for the job to import MindSpore), then runs the ``sitecustomize`` it shadows, if there is one, so
the job's environment is unchanged. It never raises: a failure is written to the capture log.
"""

import os
import sys


def _msdiag_boot() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import _msdiag_capture_runtime

        _msdiag_capture_runtime.install()
    except Exception:  # noqa: BLE001 - the job must start whatever happens here
        _log_failure("loading the msdiag capture runtime")
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None and spec.origin:
            if os.path.dirname(os.path.abspath(spec.origin)) != here:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001
        _log_failure("running the sitecustomize this bootstrap shadows")


def _log_failure(what: str) -> None:
    try:
        import json
        import time
        import traceback

        out = json.loads(os.environ.get("MSDIAG_CAPTURE", "{}")).get("out")
        if out:
            with open(os.path.join(out, "msdiag_capture.log"), "a", encoding="utf-8") as f:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
                f.write(f"{stamp}Z pid {os.getpid()}: PROBLEM {what} failed:\n{traceback.format_exc()}\n")
    except Exception:  # noqa: BLE001
        pass


_msdiag_boot()
