"""The README's references exist (issue 19, point 7): every metric-shaped or rule-shaped name it quotes is
a registered metric, a shipped rule (or one of its parameters), a key of the JSON report, an option, a host
cause id, a canonical table or a field of an input format msdiag reads; and `msdiag metrics` lists the
registry. A metric or rule renamed in the code without the README fails here.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields
from typing import Any, Callable

from click.testing import CliRunner
from conftest import REPO, SAMPLE_TRACES

from msdiag.analysis import Analysis
from msdiag.cli import main
from msdiag.contract import build
from msdiag.metrics.causes import CAUSE_CATEGORY
from msdiag.metrics.registry import all_metrics
from msdiag.model import TABLES
from msdiag.options import Options
from msdiag.plan import GOALS
from msdiag.rules.causes import CAUSES
from msdiag.rules.loader import load_rules
from msdiag.trainlog.reader import RECORD_FIELDS

# Field names of the input formats the README documents (not msdiag's names): the request log's own
# fields and vLLM's benchmark result keys (inference/requests.py), the profiler's export_type option,
# profiler_metadata.json's parallel_group_info, trace_view.json's python_function events; and
# baseline_diff, the key `analyze --baseline` adds to the report; vLLM's request_rate and max_concurrency;
# the profiler's memory_record.csv and npu_module_mem.csv.
INPUT_FIELDS = {
    "arrival_s", "first_token_s", "finish_s", "token_times_s", "request_id", "batch_size",
    "input_lens", "output_lens", "start_times", "export_type", "parallel_group_info", "python_function",
    "baseline_diff", "request_rate", "max_concurrency", "memory_record", "npu_module_mem",
    # CANN info.json's chip fields and kernel_details' ArithmeticUtilization columns (metrics/chip.py, README levels)
    "ai_core_num", "aic_frequency", "aic_cube_fops", "aic_vector_fops",
    # MindSpore / MindFormers settings the README's advice names
    "clip_grad_norm", "max_grad_norm", "save_checkpoint_steps", "scale_sense", "profile_memory", "device_properties",
    # the capture manifest's device record (capture/manifest.py)
    "device_info",
} | set(RECORD_FIELDS)  # the training log's CSV / JSONL columns (trainlog/reader.py)
# keys of the JSON report that appear only when they apply: a finding's `not_available` (a corroborating
# metric missing, rules/engine.py); a goal's status; the decode-batch projection's keys (plan.py, only when
# inference-oversized-decode-batch fires)
OPTIONAL_KEYS = {"not_available", "not_reachable", "decode_batch_cap", "tpot_p50_ms_after", "tpot_p99_ms_after"}
NAME = re.compile(r"`([a-z][a-z0-9]*(?:[_-][a-z0-9]+)+)`")


def _keys(o: Any, out: set[str]) -> set[str]:
    if isinstance(o, dict):
        for k, v in o.items():
            out.add(str(k))
            _keys(v, out)
    elif isinstance(o, list):
        for v in o:
            _keys(v, out)
    return out


def test_readme_names_exist(analysed: Callable[[str], Analysis]) -> None:
    """Report keys from a training capture and a request log (between them every top-level section is filled)."""
    rules = load_rules(())
    known = set(all_metrics()) | set(rules) | INPUT_FIELDS | OPTIONAL_KEYS | set(TABLES)
    known |= {p for r in rules.values() for p in r.params}
    known |= set(GOALS)  # --goal NAME=VALUE
    known |= {f.name for f in fields(Options)} | {c.id for c in CAUSES} | set(CAUSE_CATEGORY)
    for name in ("level1", str(SAMPLE_TRACES / "serve_load" / "requests_rate50.jsonl")):
        known |= _keys(json.loads(json.dumps(build(analysed(name)), default=str)), set())
    text = (REPO / "README.md").read_text(encoding="utf-8")
    unknown = sorted(set(NAME.findall(text)) - known)
    assert not unknown, f"README.md names what msdiag does not have: {unknown}"


def test_readme_has_no_hand_kept_metric_list() -> None:
    """The list of metrics is generated (msdiag metrics list), never kept by hand in the README."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "Metrics today" not in text and "empty until the rule engine lands" not in text
    assert "msdiag metrics list" in text and "msdiag rules explain" in text


def test_metrics_list_is_the_registry() -> None:
    r = CliRunner().invoke(main, ["metrics", "list", "--format", "json"])
    assert r.exit_code == 0, r.output
    listed = json.loads(r.output)
    reg = all_metrics()
    assert [m["id"] for m in listed] == sorted(reg)
    slow = next(m for m in listed if m["id"] == "slow_rank")
    # rules/comm-slow-rank.yaml's condition reads slow_rank; so do comm-exposed's and comm-sync-wait's suggestions
    assert {"comm-exposed", "comm-slow-rank", "comm-sync-wait"} <= set(slow["rules"])
    text = CliRunner().invoke(main, ["metrics", "list"]).output
    assert len(text.splitlines()) == len(reg)


def test_metrics_explain() -> None:
    r = CliRunner().invoke(main, ["metrics", "explain", "slow_link"])
    assert r.exit_code == 0
    reg = all_metrics()["slow_link"]
    assert r.output.startswith(f"slow_link ({reg.unit})") and reg.doc in r.output
    assert "comm-slow-link.min_utilization" in r.output  # the parameter slow_link cuts at (metrics/communication.py)
    bad = CliRunner().invoke(main, ["metrics", "explain", "no_such_metric"])
    assert bad.exit_code == 2 and "no metric 'no_such_metric'" in bad.output
