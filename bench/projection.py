"""Projections checked against reality (issue 16): before/after pairs of our own examples.

For each pair, ``msdiag capture`` records the "before" job and the "after" job (the same job with the
fix applied) with the real MindSpore of this environment; msdiag analyses both and this prints the
projected step time of the "before" capture's top finding (the plan's first fix: its bound, and its
estimate where the rule has one) against the step time measured on the "after" capture, with the
error ``(projected - measured) / measured``. A bound is the most a fix could win, so a bound below the
measured step is expected; a projection off by more than a third is labelled a bound, not an estimate.

    python bench/projection.py [--out DIR] [--keep]

Needs MindSpore (pip install -e '.[capture]'); takes a few minutes. The machine's load (os.getloadavg)
is printed beside the figures: live step times move with it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from msdiag.analysis import analyze  # noqa: E402
from msdiag.options import Options  # noqa: E402

#: Off by more than this share of the measured step, a projection is a bound, not an estimate (issue 16).
ESTIMATE_TOLERANCE = 1 / 3


@dataclass(frozen=True)
class Pair:
    name: str
    before: tuple[str, ...]  # the example's arguments (a path under examples/ first)
    after: tuple[str, ...]
    #: samples per step before and after, when the fix changes the batch: the step times are then compared per
    #: sample (a larger batch does more work per step; what the fix buys is the time per sample)
    batches: tuple[int, int] | None = None


PAIRS = (
    Pair("data pipeline fixed (data_bound.py -> --fixed)", ("examples/data_bound.py",), ("examples/data_bound.py", "--fixed")),
    Pair("PyNative -> graph (train_small.py)", ("examples/train_small.py", "--mode", "pynative"),
         ("examples/train_small.py", "--mode", "graph")),
    # a launch-bound small batch and a four times larger one: the host's per-step work is spread over more
    # samples, which the host-bound projection (host idle removed) bounds per sample
    Pair("batch 4 -> 16 per step (train_small.py, per sample)", ("examples/train_small.py", "--batch-size", "4"),
         ("examples/train_small.py", "--batch-size", "16"), batches=(4, 16)),
)


def capture(out: Path, args: tuple[str, ...]) -> None:
    """``msdiag capture --out OUT -- python ARGS`` from the repository, the window only (--stop-after)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "msdiag.cli", "capture", "--out", str(out), "--stop-after", "--no-memory",
           "--format", "json", "--", sys.executable, *args]
    r = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"capture of {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")


def figures(folder: Path) -> dict[str, Any]:
    """The measured median step and the top fix of the plan with its projection."""
    a = analyze(folder, Options(jobs=1))
    items = a.plan.get("items") or []
    out: dict[str, Any] = {"step_us": a.plan.get("step_time_us"), "verdict": a.verdict.get("bottleneck")}
    if items:
        f = next(x for x in a.findings if x["rule_id"] == items[0]["rule_id"])
        out.update(rule=f["rule_id"], bound_us=f["projection"]["step_time_us_after"],
                   estimate_us=f["projection"]["estimate_step_time_us_after"])
    return out


def _err(projected: float | None, measured: float | None) -> str:
    if projected is None or not measured:
        return "-"
    return f"{100 * (projected - measured) / measured:+.0f}%"


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1e3:.1f} ms"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="where the captures go (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the captures")
    args = ap.parse_args(argv)
    root = args.out or Path(tempfile.mkdtemp(prefix="msdiag_projection_"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print("| pair | before: step, verdict | top fix | projected (bound) | projected (estimate) | measured after | error (bound) | error (estimate) |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for i, p in enumerate(PAIRS):
            capture(root / f"{i}_before", p.before)
            capture(root / f"{i}_after", p.after)
            b, a = figures(root / f"{i}_before"), figures(root / f"{i}_after")
            if p.batches:  # per sample: each side's times over its own batch
                for d, n in ((b, p.batches[0]), (a, p.batches[1])):
                    for k in ("step_us", "bound_us", "estimate_us"):
                        d[k] = None if d.get(k) is None else d[k] / n
            bound_err = _err(b.get("bound_us"), a["step_us"])
            print(f"| {p.name} | {_ms(b['step_us'])}, {b['verdict']} | {b.get('rule', '-')} | {_ms(b.get('bound_us'))} | "
                  f"{_ms(b.get('estimate_us'))} | {_ms(a['step_us'])} | {bound_err} | {_err(b.get('estimate_us'), a['step_us'])} |")
    finally:
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if not args.keep and args.out is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
