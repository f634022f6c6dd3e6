"""msdiag capture bootstrap, copied as ``sitecustomize.py`` into a temporary folder on the job's PYTHONPATH.

Python imports ``sitecustomize`` at start-up. This one installs msdiag's capture runtime (which waits
for the job to import MindSpore), then runs the ``sitecustomize`` it shadows, if there is one, as
Python would have: that module becomes ``sys.modules["sitecustomize"]`` (so ``import sitecustomize``
in the job gives the user's module), and an exception in it is printed on stderr as ``site.py``
prints it, then the job goes on. It never raises: msdiag's own failures go to the capture log.
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
        _run_shadowed(here)
    except Exception:  # noqa: BLE001
        _log_failure("running the sitecustomize this bootstrap shadows")


def _run_shadowed(here: str) -> None:
    """Import the user's ``sitecustomize`` (the next one on sys.path) in this module's place."""
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or not spec.origin:
        return
    if os.path.dirname(os.path.abspath(spec.origin)) == here:
        return
    module = importlib.util.module_from_spec(spec)
    mine = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module  # as an import does; the import of this file keeps it there
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - site.py's way: say it on stderr, go on
        if mine is not None:
            sys.modules["sitecustomize"] = mine  # a failed import leaves no module behind
        if isinstance(err, ImportError) and err.name == "sitecustomize":
            return
        _log_failure("running the sitecustomize this bootstrap shadows")
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{err.__class__.__name__}: {err}\n")


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
