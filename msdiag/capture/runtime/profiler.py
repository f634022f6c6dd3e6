"""The profiler driver: ``mindspore.profiler.profile`` with a schedule, ``prof.step()`` at every step.

At the first step boundary the job is identified (rank, device, world size, parallel layout: what the
manifest needs) and a profiler is created with a ``schedule`` (skip, warm-up, active steps, once);
``prof.step()`` at every boundary keeps MindSpore's profiler step number equal to the job's step
number. The trace is parsed by ``tensorboard_trace_handler`` into ``<out>/<host>_<pid>_<ts>_ascend_ms/``
when the window closes (``on_ready``). Without steps, an unscheduled profiler records a time window.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict

from .journal import Journal
from .minddata import MindDataProfiling
from .settings import Settings, now_us
from .signals import SigtermGuard
from .steps import Window

OnReady = Callable[[Callable[[Any], None], Any], None]  # (MindSpore's trace handler, the profiler) -> None


class ProfilerDriver:
    """Creates, steps and stops the profiler; moves the window through its states."""

    def __init__(
        self,
        settings: Settings,
        window: Window,
        journal: Journal,
        minddata: MindDataProfiling,
        sigterm: SigtermGuard,
        save_state: Callable[[], None],
        on_ready: OnReady,
    ):
        self.settings = settings
        self.window = window
        self.journal = journal
        self.minddata = minddata
        self.sigterm = sigterm
        self.save_state = save_state
        self.on_ready = on_ready
        self.prof: Any = None
        self.stop_requested = False  # --stop-after: the window is written, stop at the next boundary

    def drive(self, step: int, step_start: float, mode: str | None) -> None:
        """At each step boundary: create the scheduled profiler (first step), then prof.step()."""
        s, w = self.settings, self.window
        if self.prof is None:
            if w.state != "waiting":
                return
            identify(self.journal.info)
            self.prof = self._make(scheduled=True)
            w.state = "scheduled"
            self.sigterm.catch()
            self.journal.log(f"steps from {mode}; schedule: skip {s.skip}, warm-up {s.warmup}, record steps {s.first}-{s.last}")
            self.save_state()
        self.prof.step()  # MindSpore's profiler step number == the job's step number
        if getattr(self.prof, "step_num", step) != step:
            self.journal.notes.append(f"profiler step {getattr(self.prof, 'step_num', '?')} != job step {step}")
        if step == s.skip + 1:
            self.minddata.start()  # from the warm-up on: more queue samples, none of the skipped steps
        if step == s.first:
            w.state = "recording"
            w.rec_start = step_start
            self.journal.log(f"recording from step {step}")
            self.save_state()
        if step == s.last + 1 and w.state == "captured" and s.stop_after:
            self.stop_requested = True

    def start_time_window(self) -> None:
        """Nothing marks steps: record from now on, for ``seconds`` (the watchdog ends it)."""
        s, w = self.settings, self.window
        identify(self.journal.info)
        w.mode = "time"
        w.state = "time"
        self.prof = self._make(scheduled=False)
        self.prof.start()
        w.rec_start = now_us()
        self.minddata.start()
        self.journal.note(
            f"no step boundary in the first {s.wait_for_steps:g} s after `import mindspore`: "
            f"recorded a time window of {s.seconds:g} s instead"
        )
        self.save_state()

    def stop(self) -> None:
        """Stop the profiler (which parses the trace: ``on_ready``)."""
        prof, self.prof = self.prof, None
        if prof is not None:
            prof.stop()

    def abandon(self) -> None:
        """The capture is given up: the profiler is stopped, whatever it says."""
        self.sigterm.release()
        try:
            self.stop()
        except Exception:  # noqa: BLE001
            pass

    def _make(self, scheduled: bool) -> Any:
        import mindspore
        from mindspore.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        s = self.settings
        target = mindspore.get_context("device_target")
        activities = [ProfilerActivity.CPU]
        if target == "Ascend":
            activities.append(ProfilerActivity.NPU)
        elif target == "GPU":
            activities.append(ProfilerActivity.GPU)
        handler = tensorboard_trace_handler(s.out)
        if handler is None:
            raise RuntimeError(f"tensorboard_trace_handler({s.out!r}) failed (see MindSpore's log)")

        def ready(prof_inst: Any) -> None:
            self.on_ready(handler, prof_inst)

        kwargs: Dict[str, Any] = dict(activities=activities, profile_memory=s.profile_memory, on_trace_ready=ready)
        if scheduled:
            # profile() starts at step_num 0; the first prof.step() comes at once, so job step N is
            # the profiler's step N: skip_first covers step 0 and the skipped steps
            kwargs["schedule"] = schedule(wait=0, warmup=s.warmup, active=s.active, repeat=1, skip_first=s.skip + 1)
        else:
            kwargs["start_profile"] = False
        return profile(**kwargs)


def identify(info: Dict[str, Any]) -> None:
    """What the manifest needs from inside the job: rank, device, world size, parallel mode."""
    import mindspore

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
    info["device_properties"] = device_properties(info["device_target"])
    try:
        info["parallel"] = {
            key: mindspore.get_auto_parallel_context(key)
            for key in ("parallel_mode", "device_num", "pipeline_stages", "gradients_mean")
        }
    except Exception:  # noqa: BLE001
        pass


def device_properties(target: str) -> Dict[str, Any]:
    """The device as MindSpore describes it, for the manifest and the rank's sidecar (issue 15).

    ``mindspore.hal.get_device_properties`` gives ``name`` and ``total_memory`` (bytes) on Ascend and
    GPU (Ascend: the current device, once initialised; the job has run its first steps by now); it
    gives no core count, clock or peak. On CPU MindSpore exposes no properties (and warns when
    asked), so nothing is asked and the record says so.
    """
    if target not in ("Ascend", "GPU"):
        return {"name": None, "total_memory_bytes": None, "from": f"none: MindSpore exposes no device properties on {target}"}
    try:
        import mindspore
        from mindspore import hal

        props = hal.get_device_properties(int(mindspore.get_context("device_id") or 0), target)
    except Exception as e:  # noqa: BLE001
        return {"name": None, "total_memory_bytes": None, "from": f"mindspore.hal.get_device_properties failed ({type(e).__name__})"}
    total = getattr(props, "total_memory", None)
    name = getattr(props, "name", None)
    return {
        "name": str(name) if name else None,
        "total_memory_bytes": int(total) if isinstance(total, int) and total > 0 else None,
        "from": "mindspore.hal.get_device_properties",
    }
