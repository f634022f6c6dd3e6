"""Run the user's command with the capture bootstrap and collect what its processes recorded.

The command runs unchanged: same arguments, stdin/stdout/stderr inherited (its output passes through
as it is), its exit code returned. The only changes to its environment: a temporary folder holding
``sitecustomize.py`` + the capture runtime first on PYTHONPATH, ``MSDIAG_CAPTURE`` (the capture's
settings, JSON), and ``MS_PROFILER_OPTIONS`` removed if set (two profilers cannot run at once).

Ctrl-C: when msdiag runs in the terminal's foreground process group the terminal delivers SIGINT to
the job as well, so msdiag only waits for it; otherwise (a script or CI sent SIGINT to msdiag alone)
msdiag forwards it. SIGTERM and SIGHUP are always forwarded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from msdiag import __version__
from msdiag.capture import runtime
from msdiag.errors import InputError

INSTALL_HINT = "pip install 'msdiag[capture]'"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "msdiag-capture"
MANIFEST_VERSION = 1
_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$")


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


@dataclass
class CaptureResult:
    out: Path
    exit_code: int  # what msdiag exits with: the job's exit code (0 when --stop-after stopped it)
    job_returncode: int | None  # as subprocess reports it (negative: killed by that signal)
    manifest: dict[str, Any]
    ranks: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def captured(self) -> bool:
        return any(r.get("state") == "captured" for r in self.ranks)


def default_out(now: datetime | None = None) -> Path:
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return Path(f"msdiag_capture_{stamp}")


def _job_python(command: list[str]) -> str | None:
    """The Python interpreter the job runs: the command itself, or the shebang of a script (msrun)."""
    exe = shutil.which(command[0])
    if exe is None:
        return None
    if _PYTHON_RE.match(os.path.basename(command[0])):
        return exe
    try:
        with open(exe, "rb") as f:
            head = f.readline(512)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    parts = head[2:].decode("utf-8", "replace").split()
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env" and len(parts) > 1:
        return shutil.which(parts[1])
    return parts[0] if _PYTHON_RE.match(os.path.basename(parts[0])) else None


_PROBE = (
    "import importlib.util, sys\n"
    "spec = importlib.util.find_spec('mindspore')\n"
    "if spec is None: sys.exit(3)\n"
    "try:\n"
    "    from importlib.metadata import version; print(version('mindspore'))\n"
    "except Exception: print('unknown')\n"
)


def check_mindspore(command: list[str], env: dict[str, str]) -> tuple[str | None, str | None]:
    """(python, MindSpore version) of the job's Python; InputError when MindSpore is not importable there.

    Commands whose interpreter cannot be told (a shell script) are not checked: (None, None).
    """
    if shutil.which(command[0]) is None:
        hint = f": it comes with MindSpore ({INSTALL_HINT})" if command[0] == "msrun" else ""
        raise InputError(command[0], f"command not found{hint}")
    py = _job_python(command)
    if py is None:
        return None, None
    probe_env = {k: v for k, v in env.items() if k != runtime.CONFIG_ENV}
    try:
        r = subprocess.run([py, "-c", _PROBE], env=probe_env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError(py, f"cannot run the job's Python to check for MindSpore ({e})") from None
    if r.returncode == 3:
        raise InputError(
            py,
            f"MindSpore is not importable by the job's Python; install it there with {INSTALL_HINT} "
            "(MindSpore 2.10 with numpy<2), or run the job with the Python that has it",
        )
    if r.returncode != 0:
        return py, None
    return py, (r.stdout.strip() or None)


def _prepare_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a folder (--out)")
    if out.is_dir() and (any(out.glob("*_ascend_ms")) or (out / MANIFEST).exists()):
        raise InputError(out, "already holds a capture: choose another --out or remove it")
    out.mkdir(parents=True, exist_ok=True)


def _bootstrap_dir() -> Path:
    """A temporary folder with sitecustomize.py and the runtime (removed after the job)."""
    d = Path(tempfile.mkdtemp(prefix="msdiag_boot_"))
    here = Path(__file__).resolve().parent
    shutil.copyfile(here / "runtime.py", d / "_msdiag_capture_runtime.py")
    shutil.copyfile(here / "bootstrap_sitecustomize.py", d / "sitecustomize.py")
    return d


def child_env(opts: CaptureOptions, boot: Path, base: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    env = dict(os.environ if base is None else base)
    problems: list[str] = []
    for k in (runtime.OWNER_ENV, runtime.WORKER_OWNER_ENV):
        env.pop(k, None)
    if env.pop("MS_PROFILER_OPTIONS", None) is not None:
        problems.append("MS_PROFILER_OPTIONS was set: it is not passed to the job during the capture (two profilers cannot run at once)")
    env["PYTHONPATH"] = os.pathsep.join([str(boot)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env[runtime.CONFIG_ENV] = json.dumps(opts.runtime_config())
    return env, problems


def _foreground() -> bool:
    """Whether msdiag is in the terminal's foreground process group (then Ctrl-C reaches the job too)."""
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except (AttributeError, OSError, ValueError):
            continue
    return False


def _run_job(command: list[str], env: dict[str, str]) -> int:
    proc = subprocess.Popen(command, env=env)
    foreground = _foreground()

    def forward(signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT and foreground:
            return  # the terminal sent it to the whole foreground group, the job included
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    sigs = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    old = {s: signal.signal(s, forward) for s in sigs}
    try:
        while True:
            try:
                return proc.wait()
            except InterruptedError:
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _states(out: Path) -> list[dict[str, Any]]:
    d = out / runtime.STATE_DIR
    states = []
    for p in sorted(d.glob("pid_*.json")) if d.is_dir() else []:
        try:
            states.append(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return states


def _exit_code(returncode: int) -> int:
    """A shell's convention: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def run_capture(command: list[str], opts: CaptureOptions, log: Any = None) -> CaptureResult:
    """Run ``command`` under the capture and return what was captured (raises InputError before the
    job starts when it cannot run: command not found, MindSpore missing, --out already used)."""
    say = log or (lambda msg: print(f"msdiag: {msg}", file=sys.stderr, flush=True))
    if not command:
        raise InputError("COMMAND", "no command given: msdiag capture [options] -- python train.py ...")
    out = opts.out
    _prepare_out(out)
    boot = _bootstrap_dir()
    try:
        env, problems = child_env(opts, boot)
        python, ms_version = check_mindspore(command, env)
        say(
            f"capturing into {out}: skip {opts.skip} steps, warm up {opts.warmup}, record {opts.steps}"
            + (", then stop the job" if opts.stop_after else "")
        )
        started = datetime.now(timezone.utc)
        t0 = time.monotonic()
        returncode = _run_job(command, env)
        wall = time.monotonic() - t0
    finally:
        shutil.rmtree(boot, ignore_errors=True)
    states = _states(out)
    ranks = [s for s in states if s.get("mindspore_imported") and not _is_launcher(s)]
    stopped = bool(ranks) and all(s.get("stopped_by_msdiag") for s in ranks if s.get("state") == "captured") and any(
        s.get("stopped_by_msdiag") for s in ranks
    )
    exit_code = 0 if stopped and returncode in (0, -signal.SIGTERM) else _exit_code(returncode)
    problems += _problems(ranks, states, returncode, opts)
    manifest = build_manifest(command, opts, started, wall, returncode, exit_code, stopped, ranks, problems, python, ms_version)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return CaptureResult(out, exit_code, returncode, manifest, manifest["ranks"], problems)


def _is_launcher(state: dict[str, Any]) -> bool:
    """msrun's own process imports MindSpore but never trains: not a rank."""
    argv = [str(a) for a in state.get("argv") or []]
    if not argv or state.get("steps_seen", 0):
        return False
    return os.path.basename(argv[0]) == "msrun" or argv[0].replace(os.sep, "/").endswith("mindspore/parallel/cluster/run.py")


def _problems(ranks: list[dict[str, Any]], states: list[dict[str, Any]], returncode: int, opts: CaptureOptions) -> list[str]:
    out: list[str] = []
    if not states:
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
        who = f"rank {s.get('rank', '?')} (pid {s.get('pid')})"
        out.extend(f"{who}: {p}" for p in s.get("problems", []))
        if s.get("state") == "captured":
            got = len(s.get("captured_steps") or [])
            if s.get("window_mode") == "steps" and got < opts.steps:
                out.append(f"{who}: {got} of {opts.steps} steps captured (the job ended during the window)")
            continue
        if s.get("state") in ("waiting", "scheduled"):
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
        elif s.get("state") == "failed":
            out.append(f"{who}: the capture failed (see msdiag_capture.log)")
        elif s.get("state") in ("recording", "time"):
            out.append(f"{who}: the process ended while recording without closing the window (killed?): no trace was written")
    if returncode != 0 and any(s.get("state") == "captured" for s in ranks):
        out.append(f"the job exited with code {_exit_code(returncode)}: what was captured before is analyzed")
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
        "execution_mode": first.get("mode"),
        "world_size": world,
        "parallel": parallel,
        "window": window,
        "started_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_time_s": round(wall_s, 3),
        "exit_code": exit_code,
        "job_returncode": returncode,
        "stopped_by_msdiag": stopped,
        "ranks": sorted(
            (
                {
                    "rank": r.get("rank"),
                    "pid": r.get("pid"),
                    "folder": r.get("folder"),
                    "state": r.get("state"),
                    "window_mode": r.get("window_mode"),
                    "steps_from": runtime.STEP_SOURCE_LABEL.get(r.get("steps_from") or "", None),
                    "steps_seen": r.get("steps_seen"),
                    "captured_steps": r.get("captured_steps"),
                    "minddata_sampling_ms": r.get("minddata_sampling_ms"),
                    "notes": r.get("notes", []),
                    "problems": r.get("problems", []),
                }
                for r in ranks
            ),
            key=lambda r: (r["rank"] is None, r["rank"] if r["rank"] is not None else 0, r["pid"] or 0),
        ),
        "problems": problems,
    }
