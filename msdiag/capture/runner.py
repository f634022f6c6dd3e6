"""Run the user's command with the capture bootstrap and collect what its processes recorded.

The command runs unchanged: same arguments, stdin/stdout/stderr inherited (its output passes through
as it is), its exit code returned. The only changes to its environment: a temporary folder holding
``sitecustomize.py`` + the capture runtime first on PYTHONPATH, ``MSDIAG_CAPTURE`` (the capture's
settings, JSON), and ``MS_PROFILER_OPTIONS`` removed if set (two profilers cannot run at once).

The steps, each in its module: ``preflight`` (every refusal, before anything runs or is created),
``launch`` (the job and its signals), ``manifest`` (what came of it). A capture folder msdiag
created is removed again when the job never imported MindSpore and nothing needs reading there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from msdiag.capture import runtime
from msdiag.capture.launch import describe_exit, run_job
from msdiag.capture.manifest import MANIFEST_FORMAT, MANIFEST_VERSION, build_manifest, is_launcher, problems, states
from msdiag.capture.options import CaptureOptions
from msdiag.capture.preflight import INSTALL_HINT, MANIFEST, check_mindspore, check_out, make_out, remove_out
from msdiag.errors import InputError, one_line

__all__ = [
    "INSTALL_HINT", "MANIFEST", "MANIFEST_FORMAT", "MANIFEST_VERSION", "CaptureOptions", "CaptureResult",
    "child_env", "default_out", "run_capture",
]

BOOT_PACKAGE = "_msdiag_capture_runtime"  # the runtime package's name on the job's PYTHONPATH


@dataclass
class CaptureResult:
    out: Path
    exit_code: int  # what msdiag exits with: the job's exit code (0 when --stop-after stopped it)
    job_returncode: int | None  # as subprocess reports it (negative: killed by that signal)
    manifest: dict[str, Any]
    ranks: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    removed: bool = False  # the job never imported MindSpore: the empty folder msdiag created is gone

    @property
    def captured(self) -> bool:
        return any(r.get("state") == "captured" for r in self.ranks)

    def ending(self) -> str:
        """How the job ended, with the exit code msdiag returns: both say the same thing."""
        if self.manifest.get("stopped_by_msdiag"):
            return f"job stopped by msdiag after the window; exit code {self.exit_code}"
        return describe_exit(self.job_returncode or 0)[0]

    def messages(self) -> list[str]:
        """What the CLI tells the user on stderr, one escaped line each (without the ``msdiag: `` prefix)."""
        out = str(self.out)
        n = sum(r.get("state") == "captured" for r in self.ranks)
        lines = [f"capture in {out}: {n} rank(s) captured; {self.ending()}"]
        lines += [f"capture: rank {r.get('rank')}: {note}" for r in self.ranks for note in r.get("notes") or []]
        lines += [f"capture: {p}" for p in self.problems]
        if self.removed:
            lines.append(f"nothing was captured; {out} held nothing else and was removed")
        elif not n:
            log = self.out / runtime.LOG_FILE
            lines.append("nothing was captured, nothing to analyze" + (f" (see {log})" if log.exists() else ""))
        return [one_line(line) for line in lines]


def default_out(now: datetime | None = None) -> Path:
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return Path(f"msdiag_capture_{stamp}")


def _bootstrap_dir() -> Path:
    """A temporary folder with sitecustomize.py and the runtime package (removed after the job)."""
    d = Path(tempfile.mkdtemp(prefix="msdiag_boot_"))
    here = Path(__file__).resolve().parent
    shutil.copytree(here / "runtime", d / BOOT_PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copyfile(here / "bootstrap_sitecustomize.py", d / "sitecustomize.py")
    return d


def child_env(opts: CaptureOptions, boot: Path, base: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    env = dict(os.environ if base is None else base)
    notes: list[str] = []
    for k in (runtime.OWNER_ENV, runtime.WORKER_OWNER_ENV):
        env.pop(k, None)
    if env.pop("MS_PROFILER_OPTIONS", None) is not None:
        notes.append("MS_PROFILER_OPTIONS was set: it is not passed to the job during the capture (two profilers cannot run at once)")
    env["PYTHONPATH"] = os.pathsep.join([str(boot)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env[runtime.CONFIG_ENV] = json.dumps(opts.runtime_config())
    return env, notes


def run_capture(command: list[str], opts: CaptureOptions, log: Callable[[str], None] | None = None,
                env: dict[str, str] | None = None) -> CaptureResult:
    """Run ``command`` under the capture and return what was captured (raises InputError before the
    job starts, having created nothing, when it cannot run: command not found, MindSpore missing,
    --out already used). ``env``: the environment the job starts from (this process' by default; the CLI's is
    the user's, without what msdiag set for itself)."""
    say = log or (lambda msg: print(f"msdiag: {one_line(msg)}", file=sys.stderr, flush=True))
    if not command:
        raise InputError("COMMAND", "no command given: msdiag capture [options] -- python train.py ...")
    out = opts.out
    check_out(out)
    boot = _bootstrap_dir()
    created: Path | None = None
    try:
        env, notes = child_env(opts, boot, env)
        python, ms_version = check_mindspore(command, env)
        created = make_out(out)
        say(
            f"capturing into {out}: skip {opts.skip} steps, warm up {opts.warmup}, record {opts.steps}"
            + (", then stop the job" if opts.stop_after else "")
        )
        started = datetime.now(timezone.utc)
        t0 = time.monotonic()
        try:
            returncode = run_job(command, env)
        except OSError as e:  # the command cannot be executed (no shebang, not permitted)
            remove_out(out, created)
            raise InputError(command[0], f"cannot run the command: {e.strerror or e}") from None
        wall = time.monotonic() - t0
    finally:
        shutil.rmtree(boot, ignore_errors=True)
    found = states(out)
    ranks = [s for s in found if s.get("mindspore_imported") and not is_launcher(s)]
    stopped = bool(ranks) and all(s.get("stopped_by_msdiag") for s in ranks if s.get("state") == "captured") and any(
        s.get("stopped_by_msdiag") for s in ranks
    )
    exit_code = 0 if stopped and returncode in (0, -signal.SIGTERM) else describe_exit(returncode)[1]
    notes += problems(ranks, found, returncode, opts)
    manifest = build_manifest(command, opts, started, wall, returncode, exit_code, stopped, ranks, notes, python, ms_version)
    removed = False
    if not any(s.get("mindspore_imported") for s in found) and not (out / runtime.LOG_FILE).exists():
        removed = remove_out(out, created)  # issue 19: no empty msdiag_capture_* folder left behind
    if not removed:
        (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return CaptureResult(out, exit_code, returncode, manifest, manifest["ranks"], notes, removed)
