"""Import hooks: patch MindSpore's modules right after the job imports them, and report what the job does.

A ``sys.meta_path`` finder (:class:`ImportPatcher`) runs a patch after a watched module has been
executed. The patches tell the capture (an :class:`Events` sink) about:

- ``import mindspore``: the capture sets itself up (watchdog, exit handler);
- ``mindspore.dataset`` iterators: ``Iterator.__init__`` (MindData pipeline profiling must be on
  before the pipeline launches) and every ``Iterator.__next__`` (a step boundary, and its duration
  the step's data wait);
- ``mindspore.train.Model.train``: a callback marks steps where no Python fetch happens (dataset
  sink mode);
- ``mindspore.nn.Cell.__call__``: each call of an outermost Cell (in a loop with no dataset, the
  loop's Cell calls are steps).

A Cell call or a fetch made inside another (a thread-local depth) is not a boundary. The job's own
exceptions pass through untouched; the sink catches its own.
"""

from __future__ import annotations

import inspect
import sys
import threading
from typing import Any, Callable, Dict, Optional, Protocol

from .settings import now_us


class Events(Protocol):
    """What the hooks report to (the capture coordinator)."""

    def owns(self) -> bool: ...

    def guard(self, what: str, fn: Callable[[], Any], fatal: bool = True) -> Any: ...

    def on_mindspore_imported(self, module: Any) -> None: ...

    def on_iterator_init(self) -> None: ...

    def on_fetch(self, t0: float, t1: float) -> None: ...

    def on_cell_call(self, cell: Any, t: float) -> None: ...

    def on_step_begin(self, source: str, t: float, wait_end: Optional[float] = None) -> None: ...

    def on_activity_end(self, t: float) -> None: ...


class ImportPatcher:
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


def _like(new: Callable[..., Any], old: Callable[..., Any]) -> None:
    """The wrapper shows the original's docstring and leads back to it (``__wrapped__``)."""
    setattr(new, "__wrapped__", old)  # noqa: B010
    new.__doc__ = old.__doc__


class Hooks:
    """The patches of MindSpore's classes; each reports to ``events``."""

    def __init__(self, events: Events):
        self.events = events
        self.local = threading.local()  # depth > 0: inside a Cell call (nested calls and fetches are not boundaries)

    def install(self) -> None:
        """Watch the modules' imports; patch at once those already imported (by an earlier sitecustomize)."""
        patches: Dict[str, Callable[[Any], None]] = {
            "mindspore": self.events.on_mindspore_imported,
            "mindspore.nn.cell": self.patch_cell,
            "mindspore.dataset.engine.iterators": self.patch_iterators,
            "mindspore.train.model": self.patch_model,
        }
        sys.meta_path.insert(0, ImportPatcher(patches))
        for name, patch in patches.items():
            if name in sys.modules:
                patch(sys.modules[name])

    def _outside(self) -> bool:
        """Whether a call is a candidate boundary: in the owning process, not nested in a Cell call."""
        return not getattr(self.local, "depth", 0) and self.events.owns()

    def patch_cell(self, module: Any) -> None:
        events, local, outside = self.events, self.local, self._outside
        cell_cls = module.Cell
        orig = cell_cls.__call__

        def __call__(cell: Any, *args: Any, **kwargs: Any) -> Any:
            if not outside():
                return orig(cell, *args, **kwargs)
            local.depth = 1
            try:
                events.on_cell_call(cell, now_us())
                return orig(cell, *args, **kwargs)
            finally:
                local.depth = 0
                events.on_activity_end(now_us())

        _like(__call__, orig)
        __call__.__name__ = "__call__"
        __call__.__qualname__ = getattr(orig, "__qualname__", "Cell.__call__")
        cell_cls.__call__ = __call__

    def patch_iterators(self, module: Any) -> None:
        events, outside = self.events, self._outside
        it_cls = module.Iterator
        orig_init = it_cls.__init__
        orig_next = it_cls.__next__

        def __init__(it: Any, *args: Any, **kwargs: Any) -> None:
            events.on_iterator_init()
            orig_init(it, *args, **kwargs)

        def __next__(it: Any) -> Any:
            if not outside():
                return orig_next(it)
            t0 = now_us()
            try:
                out = orig_next(it)
            except StopIteration:
                events.on_activity_end(t0)
                raise
            events.on_fetch(t0, now_us())
            return out

        _like(__init__, orig_init)
        _like(__next__, orig_next)
        it_cls.__init__ = __init__
        it_cls.__next__ = __next__

    def patch_model(self, module: Any) -> None:
        events = self.events
        model_cls = module.Model
        orig = model_cls.train
        sig = inspect.signature(orig)

        def train(model: Any, *args: Any, **kwargs: Any) -> Any:
            if events.owns():
                added = events.guard(
                    "adding the step callback to Model.train",
                    lambda: with_step_callback(events, sig, model, args, kwargs),
                    fatal=False,
                )
                if added is not None:
                    args, kwargs = added
            return orig(model, *args, **kwargs)

        _like(train, orig)
        model_cls.train = train


def with_step_callback(events: Events, sig: inspect.Signature, model: Any, args: tuple, kwargs: dict) -> tuple:
    """Model.train's arguments with msdiag's step callback appended to its ``callbacks``."""
    from mindspore.train.callback import Callback

    class MsdiagStepCallback(Callback):  # type: ignore[misc, valid-type]
        """msdiag capture: marks step boundaries of Model.train."""

        def on_train_step_begin(self, run_context: Any) -> None:
            events.on_step_begin("callback", now_us())

        def on_train_step_end(self, run_context: Any) -> None:
            events.on_activity_end(now_us())

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
