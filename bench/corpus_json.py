"""Dump the JSON report of every corpus capture and bundled sample, or compare two dumps.

Refactors must leave the JSON contract unchanged: dump before, dump after, compare.

    python bench/corpus_json.py dump OUT_DIR        # one <name>.json per capture (msdiag_version blanked)
    python bench/corpus_json.py compare A_DIR B_DIR # lists every capture whose JSON differs, and where

Not run by CI (it analyzes every capture); the tests keep their own hand-derived figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("MSDIAG_CORPUS", REPO.parent / "shared" / "corpus"))

# (name, path relative to the corpus or "sample:" + path relative to the repository)
CAPTURES = [
    ("level0", "ascend/torchnpu-2rank-level0"),
    ("level1", "ascend/torchnpu-2rank-level1"),
    ("level1_rank0", "ascend/torchnpu-2rank-level1/rank0_ascend_pt"),
    ("level1_db", "ascend/torchnpu-2rank-level1-db"),
    ("p2p_2024", "ascend/torchnpu-2rank-p2p-2024"),
    ("cann_prof_dev0", "cann-msprof/PROF_000001_20230818142704322_COJGGGCANRMICFBC"),
    ("cann_msprof", "cann-msprof"),
    ("vllm_ascend", "cann-msprof/vllm-ascend-prof"),
    ("cpu_pynative", "mindspore-cpu/legacy_Profiler_pynative_mem"),
    ("cpu_graph", "mindspore-cpu/legacy_Profiler_graph_mem"),
    ("cpu_minddata", "mindspore-cpu/minddata_manual/vm_17248_20261129090045894_ascend_ms"),
    ("cpu_msrun_dp2", "mindspore-cpu/msrun_dp2_pynative"),
    ("cpu_schedule", "mindspore-cpu/profile_schedule_pynative"),
    ("cpu_tiny", "mindspore-cpu/profile_metadata_tiny"),
    ("legacy_hccl", "mindspore-legacy/hccl-one-allreduce"),
    ("legacy_run2", "mindspore-legacy/run_2"),
    ("legacy_single", "mindspore-legacy/single-rank"),
    ("legacy_parallel", "mindspore-legacy/parallel_strategy"),
    ("sample_train_small", "sample:sample_traces/train_small_cpu"),
    ("sample_serve", "sample:sample_traces/serve_load/requests_rate50.jsonl"),
]


def _path(rel: str) -> Path:
    return REPO / rel[len("sample:"):] if rel.startswith("sample:") else CORPUS / rel


def dump(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, rel in CAPTURES:
        p = _path(rel)
        if not p.exists():
            print(f"{name}: {p} absent, skipped")
            continue
        r = subprocess.run([sys.executable, "-m", "msdiag.cli", "analyze", str(p), "--format", "json", "--no-cache", "--jobs", "1"],
                           capture_output=True, text=True, cwd=REPO)
        if r.returncode not in (0, 1):
            (out / f"{name}.err").write_text(f"exit {r.returncode}\n{r.stderr}")
            print(f"{name}: exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
            continue
        doc = json.loads(r.stdout)
        doc["msdiag_version"] = None
        (out / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"{name}: ok (exit {r.returncode})")


def _diff(a: object, b: object, where: str, out: list[str]) -> None:
    if len(out) > 20:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'B' if k not in a else 'A'}")
            else:
                _diff(a[k], b[k], f"{where}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{where}: {len(a)} items vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{where}[{i}]", out)
    elif a != b:
        out.append(f"{where}: {a!r:.120} vs {b!r:.120}")


def compare(a: Path, b: Path) -> int:
    bad = 0
    for fa in sorted(a.glob("*.json")):
        fb = b / fa.name
        if not fb.exists():
            print(f"{fa.stem}: missing in {b}")
            bad += 1
            continue
        out: list[str] = []
        _diff(json.loads(fa.read_text()), json.loads(fb.read_text()), fa.stem, out)
        if out:
            bad += 1
            print("\n".join(out))
    print(f"{bad} capture(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "dump":
        dump(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
