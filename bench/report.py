"""Benchmark of ``msdiag report`` on a 64-rank capture (not run by CI).

The capture is built from a real corpus capture (torch_npu, 2-rank Level1): each of its rank
folders is repeated under a temp folder as ``rank<N>_ascend_pt`` for N = 0..ranks-1. The files
are symbolic links to the corpus (nothing large is copied) except ``profiler_info_<N>.json``,
which is written anew with its ``rank_id`` set to N. With ``--shift-us`` each rank's
trace_view.json and kernel_details.csv are not linked but copied with their timestamps shifted by
N x that many microseconds (optional: the report aligns each rank at its own step start anyway).
``--minddata`` adds the MindData pipeline files of the CPU corpus capture to every rank, so the
data-pipeline chart is drawn too.

Measured, in a fresh subprocess: the wall time of ``python -m msdiag.cli report DIR -o FILE``
(the fastest of ``--repeat`` runs), and the size of the HTML it writes. A second, in-process run
of the analysis and of the rendering alone splits the time between them.

Usage:
  python bench/report.py                       # 64 ranks
  python bench/report.py --ranks 128 --keep --out /tmp/msdiag-report-bench
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("MSDIAG_CORPUS", REPO.parent / "shared" / "corpus"))
SOURCE = CORPUS / "ascend" / "torchnpu-2rank-level1"
MINDDATA = CORPUS / "mindspore-cpu" / "minddata_manual" / "md_parsed"


def _link_tree(src: Path, dst: Path, skip: set[str]) -> None:
    """Recreate ``src``'s folders under ``dst`` with every file a symbolic link to the original."""
    for d, _dirs, files in os.walk(src):
        rel = Path(d).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for f in files:
            if f in skip or f.startswith("profiler_info_"):
                continue
            os.symlink(Path(d) / f, dst / rel / f)


def _shift_trace(src: Path, dst: Path, shift_us: float) -> None:
    raw = json.loads(src.read_bytes())
    events = raw["traceEvents"] if isinstance(raw, dict) else raw
    for e in events:
        ts = e.get("ts")
        if isinstance(ts, str):
            try:
                e["ts"] = f"{float(ts) + shift_us:.3f}"
            except ValueError:
                pass
        elif isinstance(ts, (int, float)) and not isinstance(ts, bool):
            e["ts"] = ts + shift_us
    dst.write_text(json.dumps(raw, ensure_ascii=False))


def _shift_kernels(src: Path, dst: Path, shift_us: float) -> None:
    import csv

    with open(src, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    head = rows[0]
    col = next((i for i, h in enumerate(head) if h.strip().startswith("Start Time")), None)
    if col is not None:
        for r in rows[1:]:
            try:
                r[col] = f"{float(r[col].strip().strip(chr(9))) + shift_us:.3f}"
            except (ValueError, IndexError):
                pass
    with open(dst, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)


def build(out: Path, ranks: int, shift_us: float = 0.0, minddata: bool = False) -> None:
    """Lay out ``ranks`` rank folders under ``out``, renumbered 0..ranks-1."""
    sources = sorted(p for p in SOURCE.glob("rank*_ascend_pt") if p.is_dir())
    if not sources:
        sys.exit(f"corpus rank folders not found under {SOURCE}")
    shifted = {"trace_view.json", "kernel_details.csv"} if shift_us else set()
    for r in range(ranks):
        src = sources[r % len(sources)]
        dst = out / f"rank{r}_ascend_pt"
        _link_tree(src, dst, shifted)
        info = json.loads(next(src.glob("profiler_info_*.json")).read_text())
        info["rank_id"] = r
        (dst / f"profiler_info_{r}.json").write_text(json.dumps(info, indent=4))
        apo = dst / "ASCEND_PROFILER_OUTPUT"
        if shift_us:
            _shift_trace(src / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", apo / "trace_view.json", r * shift_us)
            _shift_kernels(src / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", apo / "kernel_details.csv", r * shift_us)
        if minddata and MINDDATA.is_dir():
            os.symlink(MINDDATA / "minddata_pipeline_raw_0.csv", apo / f"minddata_pipeline_raw_{r}.csv")
            os.symlink(MINDDATA / "minddata_pipeline_summary_0.json", apo / f"minddata_pipeline_summary_{r}.json")


IN_PROCESS = """
import json, sys, time
t0 = time.perf_counter()
from msdiag.analysis import analyze
from msdiag.contract import build
from msdiag.report import html
t1 = time.perf_counter()
a = analyze(sys.argv[1])
t2 = time.perf_counter()
page = html.render(a, build(a))
t3 = time.perf_counter()
print(json.dumps({"imports_s": t1 - t0, "analyze_s": t2 - t1, "render_s": t3 - t2, "bytes": len(page.encode())}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64, help="number of ranks to build (default 64)")
    ap.add_argument("--shift-us", type=float, default=0.0, help="shift rank N's timestamps by N x this (copies the files)")
    ap.add_argument("--minddata", action=argparse.BooleanOptionalAction, default=True,
                    help="add the CPU corpus's MindData pipeline files to every rank (default on)")
    ap.add_argument("--out", type=Path, help="build here instead of a temp folder (kept)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder and the report")
    ap.add_argument("--repeat", type=int, default=3, help="runs of the command (the fastest is reported)")
    args = ap.parse_args(argv)

    tmp = args.out or Path(tempfile.mkdtemp(prefix="msdiag-report-bench-"))
    cap = tmp / "capture"
    html_path = tmp / "report.html"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        if cap.exists():
            shutil.rmtree(cap)
        cap.mkdir(parents=True)
        t = time.perf_counter()
        build(cap, args.ranks, args.shift_us, args.minddata)
        print(f"built {args.ranks} ranks under {cap} in {time.perf_counter() - t:.1f} s", file=sys.stderr)

        walls = []
        for _ in range(max(1, args.repeat)):
            t = time.perf_counter()
            res = subprocess.run([sys.executable, "-m", "msdiag.cli", "report", str(cap), "-o", str(html_path)],
                                 env=env, capture_output=True, text=True, check=False)
            walls.append(time.perf_counter() - t)
            if res.returncode not in (0, 1):
                print(res.stderr, file=sys.stderr)
                return 1
        size = html_path.stat().st_size
        split = subprocess.run([sys.executable, "-c", IN_PROCESS, str(cap)], env=env, capture_output=True, text=True, check=False)
        parts = json.loads(split.stdout.strip().splitlines()[-1]) if split.returncode == 0 else {}

        print(f"\nmsdiag report on {args.ranks} ranks ({SOURCE.name}, ranks linked and renumbered"
              f"{', MindData pipeline added' if args.minddata else ''}{f', shifted {args.shift_us:g} us/rank' if args.shift_us else ''})")
        print(f"  command wall time: {min(walls):.2f} s (fastest of {len(walls)}; all: {', '.join(f'{w:.2f}' for w in walls)})")
        print(f"  HTML size: {size / 1e3:.0f} kB ({size:,} bytes)")
        if parts:
            print(f"  in-process split: imports {parts['imports_s']:.2f} s, analyze {parts['analyze_s']:.2f} s, "
                  f"render (report object + charts + templates) {parts['render_s']:.2f} s")
        if args.keep or args.out:
            print(f"  report: {html_path}")
        return 0
    finally:
        if args.out is None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
