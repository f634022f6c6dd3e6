"""Overhead of ``msdiag capture`` on the job it profiles (not run by CI).

Runs an example job N steps plainly and under ``msdiag capture`` (default window: skip 2, warm up 1,
record steps 4-8), alternating, ``--repeat`` times each, and reads the step times the job prints
itself (``step i/N ... time X ms``). Reported, as medians over every run's steps (and, per pair of
adjacent plain/captured runs, the median change with its range: on a shared machine the load drifts
between runs, so read the range before the number):

- outside the window (steps after the first, minus steps 3-9 where the profiler is initialised,
  records, and parses its trace): what the job pays for msdiag's hooks (step marking, data-wait
  timing) for its whole life;
- inside the window (steps 4-8): what the MindSpore profiler itself costs while it records;
- the step that closes the window (step 9): the profiler's online parse runs there, in the job.

msdiag's step boundary, where the profiler starts, stops and parses, is the dataset fetch: a job that
times its step after ``next()`` (compute_bound.py) does not show those in its printed times;
train_small.py times the fetch too.

Usage:
  python bench/capture_overhead.py                          # compute_bound.py, graph mode, 30 steps, 3 runs each
  python bench/capture_overhead.py --job train_small --steps 30 --repeat 3
  python bench/capture_overhead.py --extra=--no-memory        # options passed to msdiag capture
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEP_RE = re.compile(r"^step (\d+)/\d+ .*time ([0-9.]+) ms", re.MULTILINE)
JOBS = {
    "compute_bound": ["examples/compute_bound.py"],
    "train_small": ["examples/train_small.py"],
    "train_small_graph": ["examples/train_small.py", "--mode", "graph"],
    "data_bound_fixed": ["examples/data_bound.py", "--fixed"],
}
WINDOW = range(4, 9)  # recorded steps with the default window
AROUND = range(3, 10)  # warm-up step, recorded steps, the step that closes the window


def step_times(stdout: str) -> dict[int, float]:
    return {int(m.group(1)): float(m.group(2)) for m in STEP_RE.finditer(stdout)}


def run(job: list[str], steps: int, capture: bool, extra: list[str]) -> dict[int, float]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    cmd = [sys.executable, *job, "--steps", str(steps)]
    with tempfile.TemporaryDirectory(prefix="msdiag_overhead_") as tmp:
        if capture:
            cmd = [sys.executable, "-m", "msdiag.cli", "capture", "--out", str(Path(tmp) / "cap"), *extra, "--", *cmd]
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    times = step_times(r.stdout)
    if len(times) != steps:
        sys.exit(f"expected {steps} step times from the job, found {len(times)}")
    return times


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", choices=sorted(JOBS), default="compute_bound")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--extra", action="append", default=[], help="an option for msdiag capture (repeatable)")
    args = p.parse_args()
    if args.steps < 12:
        sys.exit("--steps must be at least 12 (window 4-8, then steps outside it)")
    plain: list[dict[int, float]] = []
    cap: list[dict[int, float]] = []
    for i in range(args.repeat):  # alternate, so that drifting machine load hits both alike
        plain.append(run(JOBS[args.job], args.steps, False, args.extra))
        cap.append(run(JOBS[args.job], args.steps, True, args.extra))
        print(f"run {i + 1}/{args.repeat}: plain {median(list(plain[-1].values())[1:]):.1f} ms/step, "
              f"captured {median(list(cap[-1].values())[1:]):.1f} ms/step", file=sys.stderr)

    def pick(runs: list[dict[int, float]], keep) -> list[float]:  # type: ignore[no-untyped-def]
        return [t for r in runs for s, t in r.items() if keep(s)]

    outside = lambda s: s > 1 and s not in AROUND  # noqa: E731
    inside = lambda s: s in WINDOW  # noqa: E731
    closing = lambda s: s == 9  # noqa: E731
    rows = [
        ("outside the window (hooks only)", outside),
        ("inside the window (profiler recording)", inside),
        ("step 9 (profiler parses the trace)", closing),
        ("all steps after the first", lambda s: s > 1),
    ]
    print(f"job: {' '.join(JOBS[args.job])} --steps {args.steps}; {args.repeat} runs each; msdiag capture {' '.join(args.extra)}")
    print(f"{'steps':<42}{'plain ms':>10}{'captured ms':>13}{'overhead':>10}{'paired runs':>24}")
    for label, keep in rows:
        a, b = median(pick(plain, keep)), median(pick(cap, keep))
        # each captured run against the plain run just before it (machine load drifts less within a pair)
        pairs = sorted(100 * (median(pick([c], keep)) / median(pick([q], keep)) - 1) for q, c in zip(plain, cap))
        spread = f"{pairs[len(pairs) // 2]:+.1f}% [{pairs[0]:+.0f}, {pairs[-1]:+.0f}]"
        print(f"{label:<42}{a:>10.1f}{b:>13.1f}{100 * (b - a) / a:>9.1f}%{spread:>24}")


if __name__ == "__main__":
    main()
