"""The capture runtime: runs inside the Python processes of the user's job.

``msdiag capture`` copies this file, as ``_msdiag_capture_runtime.py``, next to a generated
``sitecustomize.py`` in a temporary folder that it prepends to the job's PYTHONPATH. Python loads
``sitecustomize`` at start-up, which calls :func:`install`. Nothing here imports msdiag (the job's
Python may not have it) and nothing imports MindSpore until the job does.

What it does in a process that owns the capture (the job's process, or each msrun worker):

- hooks on import (a ``sys.meta_path`` finder that patches modules after they load):
  ``mindspore.dataset`` iterators (``Iterator.__init__`` turns MindData pipeline profiling on before
  the pipeline launches; ``Iterator.__next__`` is timed: each fetch is a step boundary and its
  duration the step's data wait), ``mindspore.train.Model.train`` (a callback marks steps where no
  Python fetch happens, e.g. dataset sink mode) and ``mindspore.nn.Cell.__call__`` (in a loop with no
  dataset, each top-level Cell call is a step);
- at the first step boundary, a ``mindspore.profiler.profile`` with a ``schedule`` (skip, warm-up,
  active steps, once) and ``prof.step()`` at every boundary, so that MindSpore's profiler step number
  is the job's step number; the trace is parsed by ``tensorboard_trace_handler`` into
  ``<out>/<host>_<pid>_<ts>_ascend_ms/``;
- when the trace is ready: MindData pipeline files (``ASCEND_PROFILER_OUTPUT/minddata_pipeline_raw_<rank>.csv``,
  ``minddata_pipeline_summary_<rank>.json``, parsed by MindSpore's own MindData parser) and msdiag's
  step markers (``msdiag_steps.json``, see :data:`MARKERS_FILE`) in the rank folder;
- where nothing marks steps for ``wait_for_steps`` seconds after MindSpore is imported, a time window
  of ``seconds`` seconds instead;
- a per-process state file in ``<out>/.msdiag/`` for the manifest, and a log ``<out>/msdiag_capture.log``.

Every hook catches its own errors (logged, the capture is given up, the job goes on); the job's own
exceptions pass through untouched.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

CONFIG_ENV = "MSDIAG_CAPTURE"
# pid of the process owning the capture in this process tree (subprocesses started by it stay passive)
OWNER_ENV = "MSDIAG_CAPTURE_OWNER"
WORKER_OWNER_ENV = "MSDIAG_CAPTURE_WORKER_OWNER"  # the same, below an msrun worker (MS_ROLE=MS_WORKER)

STATE_DIR = ".msdiag"
LOG_FILE = "msdiag_capture.log"

# The sidecar written into each rank folder. Times are unix-epoch microseconds (time.time_ns() / 1000),
# the clock of trace_view.json "ts" on MindSpore CPU captures.
MARKERS_FILE = "msdiag_steps.json"
MARKERS_FORMAT = "msdiag-markers"
MARKERS_VERSION = 1

# Step sources, weakest first: a stronger source seen once takes over step counting.
_PRIORITY = {"cell": 1, "callback": 2, "fetch": 3}
STEP_SOURCE_LABEL = {
    "fetch": "dataset iterator fetches (each next() on a mindspore.dataset iterator starts a step)",
    "callback": "Model.train step callbacks",
    "cell": "top-level Cell calls (each call of the loop's outermost Cell is a step)",
}
_LAUNCHER_MODULES = ("mindspore.parallel.cluster.run",)

_CAP: Optional["_Capture"] = None


def _now_us() -> float:
    return time.time_ns() / 1000.0


def install() -> None:
    """Called by the bootstrap's sitecustomize: set up the capture in this process if it owns one."""
    global _CAP
    raw = os.environ.get(CONFIG_ENV)
    if not raw or _CAP is not None:
        return
    try:
        cfg = json.loads(raw)
    except ValueError:
        return
    if not _claim():
        return
    _CAP = _Capture(cfg)
    _CAP.install_hooks()
    _CAP.save_state()


def _claim() -> bool:
    """Whether this process owns a capture: the job's own process or an msrun worker, not their helpers.

    msrun's scheduler (MS_ROLE=MS_SCHED) never trains. A process started by an owner (MindData
    workers, the profiler's parser pool) finds the owner's pid in the environment and stays passive.
    """
    role = os.environ.get("MS_ROLE")
    if role == "MS_SCHED":
        return False
    key = WORKER_OWNER_ENV if role == "MS_WORKER" else OWNER_ENV
    if os.environ.get(key):
        return False
    os.environ[key] = str(os.getpid())
    return True


class _Finder:
    """A meta path finder that runs a patch right after a watched module has been executed."""

    def __init__(self, patches: Dict[str, Callable[[Any], None]]):
        self.patches = patches
        self.busy: set = set()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.patches or name in self.busy:
            return None
        self.busy.add(name)
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self.busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        exec_module = loader.exec_module
        patch = self.patches[name]

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        setattr(loader, "exec_module", exec_and_patch)  # noqa: B010 - patch this module's loader only
        return spec

    def invalidate_caches(self) -> None:
        pass


class _Capture:
    """One process's capture: step boundaries, the profiler schedule, markers and state."""

    def __init__(self, cfg: Dict[str, Any]):
        self.cfg = cfg
        self.out = str(cfg["out"])
        self.skip = int(cfg.get("skip", 2))
        self.warmup = int(cfg.get("warmup", 1))
        self.active = max(1, int(cfg.get("steps", 5)))
        self.stop_after = bool(cfg.get("stop_after", False))
        self.seconds = float(cfg.get("seconds", 10.0))
        self.wait_for_steps = float(cfg.get("wait_for_steps", 30.0))
        self.profile_memory = bool(cfg.get("profile_memory", True))
        self.minddata = bool(cfg.get("minddata", True))
        # MindData samples its queues every N ms; None keeps MindSpore's setting (1000 ms by default).
        # Sampling is not free: every 10 ms it slowed a fetch-heavy loop by about half, every 100 ms by
        # about a third, every 1000 ms not measurably (README, msdiag capture).
        self.md_interval_ms: Optional[int] = cfg.get("minddata_interval_ms")
        self.first = self.skip + self.warmup + 1  # first recorded step (job steps count from 1)
        self.last = self.first + self.active - 1
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.local = threading.local()
        self.mode: Optional[str] = None  # the step source in use
        self.step_thread: Optional[int] = None  # the thread whose boundaries count (the first to show one)
        self.step_cell: Optional[int] = None  # id() of the Cell whose calls are steps (loops without data)
        self.cell_first: Dict[int, float] = {}  # outermost Cells called once so far -> time of that call
        self.step = 0  # step boundaries seen (the job's current step)
        self.cur_start: Optional[float] = None
        self.steps: List[Tuple[int, float, float, str]] = []  # kept steps: (step, start, end, end_from)
        self.waits: List[Tuple[int, float, float]] = []
        self.last_activity: Optional[float] = None
        self.prof: Any = None
        # waiting -> scheduled -> recording -> captured | failed; or waiting -> time -> captured
        self.state = "waiting"
        self.window_mode = "steps"
        self.rec_start: Optional[float] = None
        self.rec_end: Optional[float] = None
        self.folder: Optional[str] = None
        self.problems: List[str] = []
        self.notes: List[str] = []
        self.md: Any = None
        self.md_started = False
        self.md_sampling_ms: Optional[int] = None
        self.ms_imported_us: Optional[float] = None
        self.info: Dict[str, Any] = {}
        self.stop_requested = False
        self.sigterm_caught = False
        self.stopped_by_msdiag = False
        self.exited = False
        self.started_us = _now_us()

    # ---- logging and state -------------------------------------------------------------------

    def log(self, msg: str) -> None:
        try:
            os.makedirs(self.out, exist_ok=True)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            rank = self.info.get("rank", os.environ.get("RANK_ID", "?"))
            with open(os.path.join(self.out, LOG_FILE), "a", encoding="utf-8") as f:
                f.write(f"{stamp}Z pid {self.pid} rank {rank}: {msg}\n")
        except Exception:  # noqa: BLE001 - logging must never fail the job
            pass

    def problem(self, msg: str, exc: Optional[BaseException] = None) -> None:
        self.problems.append(msg if exc is None else f"{msg}: {type(exc).__name__}: {exc}")
        self.log(f"PROBLEM {msg}" + ("\n" + traceback.format_exc() if exc is not None else ""))

    def save_state(self) -> None:
        """This process's state for the manifest: <out>/.msdiag/pid_<pid>.json (written atomically)."""
        try:
            d = os.path.join(self.out, STATE_DIR)
            os.makedirs(d, exist_ok=True)
            captured = [s for s, *_ in self._kept_steps()] if self.state == "captured" else []
            doc = {
                "pid": self.pid,
                "host": socket.gethostname(),
                "argv": list(sys.argv),
                "role": os.environ.get("MS_ROLE"),
                "state": self.state,
                "window_mode": self.window_mode,
                "steps_from": self.mode,
                "steps_seen": self.step,
                "captured_steps": captured,
                "window": {"skip": self.skip, "warmup": self.warmup, "steps": self.active, "first": self.first, "last": self.last},
                "recording_us": [self.rec_start, self.rec_end],
                "folder": self.folder,
                "minddata_sampling_ms": self.md_sampling_ms,
                "stopped_by_msdiag": self.stopped_by_msdiag,
                "exited": self.exited,
                "mindspore_imported": self.ms_imported_us is not None,
                "problems": list(self.problems),
                "notes": list(self.notes),
                **self.info,
            }
            path = os.path.join(d, f"pid_{self.pid}.json")
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)
            os.replace(tmp, path)
        except Exception:  # noqa: BLE001
            self.log("could not write the state file:\n" + traceback.format_exc())

    def _safe(self, what: str, fn: Callable[[], Any], fatal: bool = True) -> Any:
        """Run a piece of capture work; any error is logged and the job goes on.

        ``fatal``: the capture is given up (else only this part of it is missing).
        """
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            if not fatal:
                self.problem(f"{what} failed (the capture goes on without it)", e)
                return None
            self.problem(f"{what} failed; the capture is given up, the job goes on", e)
            self.state = "failed"
            self._give_up()
            self.save_state()
            return None

    def _give_up(self) -> None:
        self._release_sigterm()
        prof, self.prof = self.prof, None
        if prof is not None:
            try:
                prof.stop()
            except Exception:  # noqa: BLE001
                pass

    # ---- hooks ---------------------------------------------------------------------------------

    def install_hooks(self) -> None:
        patches: Dict[str, Callable[[Any], None]] = {
            "mindspore": self._patch_mindspore,
            "mindspore.nn.cell": self._patch_cell,
            "mindspore.dataset.engine.iterators": self._patch_iterators,
            "mindspore.train.model": self._patch_model,
        }
        sys.meta_path.insert(0, _Finder(patches))
        for name, patch in patches.items():  # already imported (by an earlier sitecustomize)
            if name in sys.modules:
                patch(sys.modules[name])

    def _owner(self) -> bool:
        return os.getpid() == self.pid and not self.exited

    def _patch_mindspore(self, module: Any) -> None:
        def run() -> None:
            self.ms_imported_us = _now_us()
            self.info["mindspore_version"] = getattr(module, "__version__", None)
            atexit.register(self._at_exit)
            self.save_state()
            t = threading.Thread(target=self._watchdog, name="msdiag-capture-watchdog", daemon=True)
            t.start()

        self._safe("setting up after `import mindspore`", run, fatal=False)

    def _patch_cell(self, module: Any) -> None:
        cap = self
        cell_cls = module.Cell
        orig = cell_cls.__call__

        def __call__(cell: Any, *args: Any, **kwargs: Any) -> Any:
            local = cap.local
            if getattr(local, "depth", 0) or not cap._owner():
                return orig(cell, *args, **kwargs)
            local.depth = 1
            try:
                cap.on_cell_call(cell, _now_us())
                return orig(cell, *args, **kwargs)
            finally:
                local.depth = 0
                cap.on_activity_end(_now_us())

        __call__.__wrapped__ = orig  # type: ignore[attr-defined]
        __call__.__doc__ = orig.__doc__
        __call__.__name__ = "__call__"
        __call__.__qualname__ = getattr(orig, "__qualname__", "Cell.__call__")
        cell_cls.__call__ = __call__

    def _patch_iterators(self, module: Any) -> None:
        cap = self
        it_cls = module.Iterator
        orig_init = it_cls.__init__
        orig_next = it_cls.__next__

        def __init__(it: Any, *args: Any, **kwargs: Any) -> None:
            if cap.minddata and cap.md is None and cap._owner():
                cap._safe("turning on MindData pipeline profiling", cap._md_init, fatal=False)
            orig_init(it, *args, **kwargs)

        def __next__(it: Any) -> Any:
            if getattr(cap.local, "depth", 0) or not cap._owner():
                return orig_next(it)
            t0 = _now_us()
            try:
                out = orig_next(it)
            except StopIteration:
                cap.on_activity_end(t0)
                raise
            cap.on_fetch(t0, _now_us())
            return out

        for new, old in ((__init__, orig_init), (__next__, orig_next)):
            setattr(new, "__wrapped__", old)  # noqa: B010
            new.__doc__ = old.__doc__
        it_cls.__init__ = __init__
        it_cls.__next__ = __next__

    def _patch_model(self, module: Any) -> None:
        cap = self
        model_cls = module.Model
        orig = model_cls.train
        import inspect

        sig = inspect.signature(orig)

        def train(model: Any, *args: Any, **kwargs: Any) -> Any:
            if cap._owner():
                added = cap._safe(
                    "adding the step callback to Model.train",
                    lambda: cap._with_callback(sig, model, args, kwargs),
                    fatal=False,
                )
                if added is not None:
                    args, kwargs = added
            return orig(model, *args, **kwargs)

        train.__wrapped__ = orig  # type: ignore[attr-defined]
        train.__doc__ = orig.__doc__
        model_cls.train = train

    def _with_callback(self, sig: Any, model: Any, args: tuple, kwargs: dict) -> Tuple[tuple, dict]:
        from mindspore.train.callback import Callback

        cap = self

        class MsdiagStepCallback(Callback):  # type: ignore[misc, valid-type]
            """msdiag capture: marks step boundaries of Model.train."""

            def on_train_step_begin(self, run_context: Any) -> None:
                cap.on_step_begin("callback", _now_us())

            def on_train_step_end(self, run_context: Any) -> None:
                cap.on_activity_end(_now_us())

        bound = sig.bind(model, *args, **kwargs)
        cbs = bound.arguments.get("callbacks")
        if cbs is None:
            cbs = []
        elif isinstance(cbs, (list, tuple)):
            cbs = list(cbs)
        else:
            cbs = [cbs]
        bound.arguments["callbacks"] = cbs + [MsdiagStepCallback()]
        return bound.args[1:], bound.kwargs

    # ---- step boundaries -----------------------------------------------------------------------

    def on_fetch(self, t0: float, t1: float) -> None:
        """A dataset fetch returned a batch: a step starts at t0 and waited on data until t1."""
        self.on_step_begin("fetch", t0, wait_end=t1)

    def on_activity_end(self, t: float) -> None:
        self.last_activity = t

    def on_cell_call(self, cell: Any, t: float) -> None:
        """A call of an outermost Cell: a step boundary when no stronger source marks steps.

        The step Cell is the first one called a second time (a loop's forward, decoder or train
        cell), and only its calls are steps: a training step written as functions calls several
        Cells (network, loss, optimizer), a one-off call before the loop is not the loop.
        """
        if self.mode in ("fetch", "callback"):
            return
        key = id(cell)
        with self.lock:
            if self.step_cell is None:
                first = self.cell_first.get(key)
                if first is None:
                    if len(self.cell_first) < 64:
                        self.cell_first[key] = t
                    return
                self.step_cell = key
                self.cell_first = {}
                self.on_step_begin("cell", first)  # its first call began step 1
            if key == self.step_cell:
                self.on_step_begin("cell", t)

    def on_step_begin(self, source: str, t: float, wait_end: Optional[float] = None) -> None:
        stop = False
        with self.lock:
            if self.exited or self.state == "failed":
                return
            me = threading.get_ident()
            if self.mode is None or _PRIORITY[source] > _PRIORITY[self.mode]:
                if self.mode is not None:
                    self.notes.append(f"from step {self.step + 1} on, steps are counted from {source} (before: {self.mode})")
                    self.log(self.notes[-1])
                self.mode = source
                self.step_thread = me
            elif _PRIORITY[source] < _PRIORITY[self.mode] or me != self.step_thread:
                return
            if self.step and self.cur_start is not None:
                self._keep(self.step, self.cur_start, t, "next step")
            self.step += 1
            self.cur_start = t
            if self.state in ("waiting", "scheduled", "recording"):
                self._safe("driving the profiler schedule", self._drive)
            if wait_end is not None and self._in_window(self.step, t):
                self.waits.append((self.step, t, wait_end))
            stop = self.stop_requested
            if stop:
                self.stop_requested = False
                self.stopped_by_msdiag = True
                self.exited = True
                self.log(f"--stop-after: stopping the job at the start of step {self.step}")
                self.save_state()
        if stop:
            if threading.current_thread() is threading.main_thread():
                raise SystemExit(0)
            os.kill(os.getpid(), signal.SIGTERM)  # steps run in another thread: end the process

    def _in_window(self, step: int, t: float) -> bool:
        if self.state not in ("scheduled", "recording", "time"):
            return False  # nothing is kept before the profiler exists or after the capture
        if self.window_mode == "steps":
            return self.first <= step <= self.last
        return self.rec_start is not None and t >= self.rec_start

    def _keep(self, step: int, start: float, end: float, end_from: str) -> None:
        if self._in_window(step, start):
            self.steps.append((step, start, end, end_from))

    def _kept_steps(self) -> List[Tuple[int, float, float, str]]:
        if self.window_mode == "steps":
            return [s for s in self.steps if self.first <= s[0] <= self.last]
        lo, hi = self.rec_start, self.rec_end
        if lo is None or hi is None:
            return []
        return [s for s in self.steps if s[1] >= lo and s[2] <= hi]

    # ---- the profiler ------------------------------------------------------------------------

    def _drive(self) -> None:
        """At each step boundary: create the scheduled profiler (first step), then prof.step()."""
        if self.prof is None:
            if self.state != "waiting":
                return
            self._identify()
            self.prof = self._make_profiler(scheduled=True)
            self.state = "scheduled"
            self._catch_sigterm()
            self.log(
                f"steps from {self.mode}; schedule: skip {self.skip}, warm-up {self.warmup}, "
                f"record steps {self.first}-{self.last}"
            )
            self.save_state()
        self.prof.step()  # MindSpore's profiler step number == the job's step number
        if getattr(self.prof, "step_num", self.step) != self.step:
            self.notes.append(f"profiler step {getattr(self.prof, 'step_num', '?')} != job step {self.step}")
        if self.step == self.skip + 1:
            self._md_start()  # from the warm-up on: more queue samples, none of the skipped steps
        if self.step == self.first:
            self.state = "recording"
            self.rec_start = self.cur_start
            self.log(f"recording from step {self.step}")
            self.save_state()
        if self.step == self.last + 1 and self.state == "captured" and self.stop_after:
            self.stop_requested = True

    def _make_profiler(self, scheduled: bool) -> Any:
        import mindspore
        from mindspore.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        target = mindspore.get_context("device_target")
        activities = [ProfilerActivity.CPU]
        if target == "Ascend":
            activities.append(ProfilerActivity.NPU)
        elif target == "GPU":
            activities.append(ProfilerActivity.GPU)
        handler = tensorboard_trace_handler(self.out)
        if handler is None:
            raise RuntimeError(f"tensorboard_trace_handler({self.out!r}) failed (see MindSpore's log)")

        def ready(prof_inst: Any) -> None:
            self._on_trace_ready(handler, prof_inst)

        kwargs: Dict[str, Any] = dict(activities=activities, profile_memory=self.profile_memory, on_trace_ready=ready)
        if scheduled:
            # profile() starts at step_num 0; the first prof.step() comes at once, so job step N is
            # the profiler's step N: skip_first covers step 0 and the skipped steps
            kwargs["schedule"] = schedule(wait=0, warmup=self.warmup, active=self.active, repeat=1, skip_first=self.skip + 1)
        else:
            kwargs["start_profile"] = False
        return profile(**kwargs)

    def _identify(self) -> None:
        """What the manifest needs from inside the job: rank, device, world size, parallel mode."""
        import mindspore

        info = self.info
        info["device_target"] = mindspore.get_context("device_target")
        info["mode"] = {0: "graph", 1: "pynative"}.get(mindspore.get_context("mode"), mindspore.get_context("mode"))
        try:
            from mindspore.profiler.common.profiler_context import ProfilerContext

            info["rank"] = int(ProfilerContext().rank_id)
        except Exception:  # noqa: BLE001
            info["rank"] = int(os.environ.get("RANK_ID", "0") or 0)
        world = os.environ.get("MS_WORKER_NUM") or os.environ.get("RANK_SIZE")
        try:
            from mindspore.communication import GlobalComm, get_group_size

            if GlobalComm.INITED:
                world = get_group_size()
        except Exception:  # noqa: BLE001
            pass
        info["world_size"] = int(world) if world else 1
        try:
            par = {
                "parallel_mode": mindspore.get_auto_parallel_context("parallel_mode"),
                "device_num": mindspore.get_auto_parallel_context("device_num"),
                "pipeline_stages": mindspore.get_auto_parallel_context("pipeline_stages"),
                "gradients_mean": mindspore.get_auto_parallel_context("gradients_mean"),
            }
            info["parallel"] = par
        except Exception:  # noqa: BLE001
            pass

    def _on_trace_ready(self, handler: Callable[[Any], None], prof_inst: Any) -> None:
        """The window closed: MindSpore parses the trace, then MindData files and msdiag's markers."""
        try:
            self.rec_end = self.rec_end or _now_us()
            handler(prof_inst)  # MindSpore's online parse (trace_view.json, FRAMEWORK/, ...)
            from mindspore.profiler.common.profiler_context import ProfilerContext

            ctx = ProfilerContext()
            folder = ctx.ascend_ms_dir
            rank = int(ctx.rank_id)
            self.info["rank"] = rank
            self.folder = os.path.basename(folder)
            if self.md is not None:
                try:
                    self._md_save(ctx, rank)
                except Exception as e:  # noqa: BLE001
                    self.problem("MindData pipeline files could not be written", e)
            self._write_markers(folder, rank)
            self.state = "captured"
            self._release_sigterm()
            self.log(f"captured steps {[s for s, *_ in self._kept_steps()]} into {self.folder}")
        except Exception as e:  # noqa: BLE001
            self.problem("writing the capture failed", e)
            self.state = "failed"
        self.save_state()

    def _write_markers(self, folder: str, rank: int) -> None:
        steps = self._kept_steps()
        kept = {s for s, *_ in steps}
        doc = {
            "format": MARKERS_FORMAT,
            "version": MARKERS_VERSION,
            "rank": rank,
            "pid": self.pid,
            "clock": "unix epoch microseconds (time.time_ns() / 1000), as trace_view.json ts on MindSpore CPU",
            "steps_from": STEP_SOURCE_LABEL.get(self.mode or "", None),
            "window": {
                "mode": self.window_mode,
                "skip": self.skip,
                "warmup": self.warmup,
                "steps": self.active,
                "first": self.first,
                "last": self.last,
                "recording_start_us": self.rec_start,
                "recording_end_us": self.rec_end,
            },
            "steps": [{"step": s, "start_us": a, "end_us": b, "end_from": how} for s, a, b, how in steps],
            "data_waits": [{"step": s, "start_us": a, "end_us": b} for s, a, b in self.waits if s in kept],
        }
        path = os.path.join(folder, MARKERS_FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        os.replace(path + ".tmp", path)

    # ---- MindData pipeline profiling -----------------------------------------------------------

    def _md_init(self) -> None:
        """Before the first pipeline launches (MindData registers a pipeline only when profiling is on)."""
        import mindspore.dataset as ds
        from mindspore._c_dataengine import GlobalContext

        if self.md_interval_ms:
            ds.config.set_monitor_sampling_interval(int(self.md_interval_ms))
        interval = ds.config.get_monitor_sampling_interval()
        self.md_sampling_ms = int(interval)
        md = GlobalContext.profiling_manager()
        md.init()
        self.md = md
        self.log(f"MindData pipeline profiling on (queues sampled every {interval} ms)")

    def _md_start(self) -> None:
        if self.md is not None and not self.md_started:
            self.md_started = True
            try:
                self.md.start()
            except Exception as e:  # noqa: BLE001
                self.problem("MindData pipeline profiling could not start", e)
                self.md = None

    def _md_save(self, ctx: Any, rank: int) -> None:
        """Stop MindData profiling, save its raw files into FRAMEWORK/ and parse them with MindSpore's parser."""
        import glob

        from mindspore.profiler.analysis.parser.ms_minddata_parser import MindDataParser
        from mindspore.profiler.analysis.viewer.ms_minddata_viewer import (
            MindDataPipelineRawViewer,
            MindDataPiplineSummaryViewer,
        )

        md, self.md = self.md, None
        md.stop()
        fw = ctx.framework_path
        md.save(fw)
        raw = sorted(glob.glob(os.path.join(fw, "pipeline_profiling_*.json")))
        if not raw:
            self.notes.append("MindData profiling saved no pipeline file (no dataset pipeline ran in the window?)")
            return
        dev = os.path.basename(raw[0])[len("pipeline_profiling_") : -len(".json")]
        kwargs = ctx.to_dict()
        kwargs["device_id"] = dev
        kwargs["rank_id"] = dev
        out = ctx.ascend_profiler_output_path
        os.makedirs(out, exist_ok=True)
        parser = MindDataParser(**kwargs)
        parser.register_post_hook(MindDataPipelineRawViewer(**kwargs).save)
        parser.register_post_hook(MindDataPiplineSummaryViewer(**kwargs).save)
        parser.parse({})
        if dev != str(rank):  # name the files by rank, as the rank folder's other files are
            for name in ("minddata_pipeline_raw_{}.csv", "minddata_pipeline_summary_{}.json", "minddata_pipeline_summary_{}.csv"):
                src = os.path.join(out, name.format(dev))
                if os.path.exists(src):
                    os.replace(src, os.path.join(out, name.format(rank)))
        if not os.path.exists(os.path.join(out, f"minddata_pipeline_raw_{rank}.csv")):
            self.notes.append("MindSpore's MindData parser wrote no minddata_pipeline_raw file")
        self._fix_per_batch_time(os.path.join(fw, f"dataset_iterator_profiling_{dev}.txt"), out, rank)

    def _fix_per_batch_time(self, iterator_file: str, out: str, rank: int) -> None:
        """Recompute the summary's per_batch_time when the window starts after the first batch.

        MindSpore's summary viewer averages the intervals between the iterator's batch records
        (ms timestamps), skipping batch 1; in a window that starts at batch N > 1 nothing is skipped
        and the first interval is counted from 0, which makes the average meaningless. Here the
        first record of the window takes batch 1's place.
        """
        summary = os.path.join(out, f"minddata_pipeline_summary_{rank}.json")
        if not (os.path.exists(iterator_file) and os.path.exists(summary)):
            return
        stamps = []
        with open(iterator_file, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 5 and parts[0] == "1":  # type 1: a batch left the pipeline
                    stamps.append((int(parts[2]), int(parts[4])))
        if not stamps or stamps[0][0] < 2:
            return  # MindSpore's own computation is right
        gaps = [b[1] - a[1] for a, b in zip(stamps, stamps[1:])]
        value = round(sum(gaps) / len(gaps), 3) if gaps else -1
        with open(summary, encoding="utf-8") as f:
            doc = json.load(f)
        old = doc.get("per_batch_time")
        doc["per_batch_time"] = [value]
        with open(summary, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        csv_path = summary[: -len(".json")] + ".csv"
        if os.path.exists(csv_path):
            with open(csv_path, encoding="utf-8") as f:
                lines = f.readlines()
            lines = [f"per_batch_time,{value}\n" if ln.startswith("per_batch_time,") else ln for ln in lines]
            with open(csv_path, "w", encoding="utf-8") as f:
                f.writelines(lines)
        self.notes.append(
            f"minddata_pipeline_summary per_batch_time recomputed over the window's batches ({old} -> [{value}] ms): "
            "MindSpore's parser counts the first interval from 0 when profiling starts after batch 1"
        )

    # ---- the time-window fallback and the end of the job -------------------------------------

    def _is_launcher(self) -> bool:
        return any(m in sys.modules for m in _LAUNCHER_MODULES)

    def _watchdog(self) -> None:
        """No step boundary for wait_for_steps seconds: record a time window of `seconds` instead."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.wait_for_steps:
            time.sleep(0.2)
            if self.step or self.exited:
                return
        if self._is_launcher():
            return
        with self.lock:
            if self.step or self.exited or self.state != "waiting":
                return

            def start() -> None:
                self._identify()
                self.window_mode = "time"
                self.state = "time"
                self.prof = self._make_profiler(scheduled=False)
                self.prof.start()
                self.rec_start = _now_us()
                self._md_start()
                self.notes.append(
                    f"no step boundary in the first {self.wait_for_steps:g} s after `import mindspore`: "
                    f"recorded a time window of {self.seconds:g} s instead"
                )
                self.log(self.notes[-1])
                self.save_state()

            self._safe("starting the time-window profiler", start)
        t1 = time.monotonic()
        while time.monotonic() - t1 < self.seconds:
            time.sleep(0.1)
            if self.exited:
                return
        with self.lock:
            if self.state != "time" or self.exited:
                return
            self._close_open_step()
            self.rec_end = _now_us()
            self._safe("stopping the time-window profiler", self._stop_profiler)
            stop = self.stop_after and self.state == "captured"
            if stop:
                self.stopped_by_msdiag = True
                self.exited = True
                self.log("--stop-after: stopping the job (SIGTERM to itself) after the time window")
                self.save_state()
        if stop:
            os.kill(os.getpid(), signal.SIGTERM)

    def _catch_sigterm(self) -> None:
        """While the window is open, SIGTERM first closes the capture, then ends the job as before.

        MindSpore turns Ctrl-C into SIGTERM (its own SIGINT handler), which skips Python's exit
        handlers: without this the window in progress would be lost. Only when the job has no SIGTERM
        handler of its own, and only in the main thread (where Python runs signal handlers).
        """
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self.sigterm_caught = True

    def _release_sigterm(self) -> None:
        if self.sigterm_caught and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self.sigterm_caught = False

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.log("SIGTERM during the window (Ctrl-C in a MindSpore job, or kill): closing the capture, then the job ends")
        self._release_sigterm()
        try:
            self._at_exit()
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # the default disposition again: the job ends as it would have

    def _stop_profiler(self) -> None:
        prof, self.prof = self.prof, None
        if prof is not None:
            prof.stop()

    def _close_open_step(self) -> None:
        """The step in progress when recording ends: it ends at the last activity seen, if any."""
        if self.step and self.cur_start is not None and self.last_activity and self.last_activity > self.cur_start:
            if not any(s == self.step for s, *_ in self.steps):
                self._keep(self.step, self.cur_start, self.last_activity, "last activity (the job ended or stopped)")

    def _at_exit(self) -> None:
        """The job is ending (normally, by an exception or sys.exit): close the window with what there is."""
        try:
            with self.lock:
                if self._owner() and self.state in ("scheduled", "recording", "time"):
                    was = self.state
                    self._close_open_step()
                    if was != "scheduled":
                        self.rec_end = _now_us()
                    self._stop_profiler()
                    if was == "recording" and self.state != "captured":
                        self.problem("the job ended while recording and no trace was written")
                    elif was == "recording":
                        self.notes.append(f"the job ended at step {self.step}, during the window (steps {self.first}-{self.last})")
                    elif was == "scheduled":
                        self.notes.append(
                            f"the job ended at step {self.step}, before the window opened at step {self.first}: nothing recorded"
                        )
                self.exited = True
                self.save_state()
        except Exception as e:  # noqa: BLE001
            self.problem("closing the capture at exit failed", e)
            self.save_state()
