"""Capture examples/train_small.py once with the MindSpore 2.10 profiler API (CPU).

This is how ``sample_traces/train_small_cpu/`` was made, before ``msdiag capture`` existed (it
will replace this script). The training job itself is unchanged: its ``train()`` takes an
``on_step_end`` callback, and this script passes the profiler's ``step``.

    python examples/capture_with_profiler_api.py --out sample_traces/train_small_cpu

Schedule (``mindspore.profiler.schedule``, counted in ``prof.step()`` calls): skip 2 steps (graph
building, first dataset fetch), wait 1, warm up 1, record 3 active steps, once; the
``tensorboard_trace_handler`` then parses the data online into ``<out>/<host>_<pid>_<ts>_ascend_ms/``.
CPU captures carry no step markers: the active steps are not delimited in the output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import mindspore
from mindspore.profiler import ProfilerActivity

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_small  # noqa: E402  (the example job, imported from beside this file)

SKIP_FIRST, WAIT, WARMUP, ACTIVE = 2, 1, 1, 3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("sample_traces/train_small_cpu"))
    parser.add_argument("--mode", choices=["pynative", "graph"], default="pynative")
    args = parser.parse_args(argv)
    out: Path = args.out
    if any(out.glob("*_ascend_ms")):
        parser.error(f"{out} already holds a capture (*_ascend_ms): remove it first")
    out.mkdir(parents=True, exist_ok=True)

    # The prof.step() after the last active step stops the profiler and runs the online parse;
    # one more, unprofiled step shows the job carrying on after the capture.
    steps = SKIP_FIRST + WAIT + WARMUP + ACTIVE + 1
    with mindspore.profiler.profile(
        activities=[ProfilerActivity.CPU],
        schedule=mindspore.profiler.schedule(
            wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1, skip_first=SKIP_FIRST
        ),
        on_trace_ready=mindspore.profiler.tensorboard_trace_handler(str(out)),
        profile_memory=True,
    ) as prof:
        train_small.train(steps, args.mode, on_step_end=prof.step)
    print(f"capture written under {out}: {sorted(p.name for p in out.glob('*_ascend_ms'))}")


if __name__ == "__main__":
    main()
