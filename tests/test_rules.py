"""Rules are data: every rule's own cases run here, a meta-test checks each rule's docs and
cases, and the loader refuses malformed rules with the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from msdiag.cli import main
from msdiag.errors import RuleError
from msdiag.metrics.registry import all_metrics
from msdiag.rules.engine import evaluate_rule, verdict
from msdiag.rules.loader import apply_overrides, load_rules, parse_rule

RULES = load_rules()
CASES = [(rid, i) for rid, r in sorted(RULES.items()) for i in range(len(r.cases))]


@pytest.mark.parametrize("rule_id,case", CASES, ids=[f"{r}[{RULES[r].cases[i]['name']}]" for r, i in CASES])
def test_rule_case(rule_id: str, case: int) -> None:
    rule = RULES[rule_id]
    c = rule.cases[case]
    params = apply_overrides({rule_id: rule}, {f"{rule_id}.{k}": str(v) for k, v in (c.get("set") or {}).items()})[rule_id]
    o = evaluate_rule(rule, c["metrics"], params)
    expect = c["expect"]
    if expect == "skip":
        assert o.status == "skipped", o
        assert o.reason and "not available" in o.reason
    elif expect == "quiet":
        assert o.status == "quiet", o.message
    else:
        assert o.status == "fired", f"{rule_id} did not fire on case {c['name']!r}"
        assert o.severity == ("critical" if expect == "critical" else rule.severity) or (
            expect == "fire" and o.severity != "critical"
        )
        assert o.message and "n/a" not in o.message, o.message
        assert o.suggestions, "a fired rule must say what to change"


def test_every_rule_has_docs_cases_and_fixes() -> None:
    assert len(RULES) >= 1
    for r in RULES.values():
        assert all(r.docs[k].strip() for k in ("why", "how", "false_positives")), r.id
        expects = {c["expect"] for c in r.cases}
        assert expects & {"fire", "critical"}, f"{r.id} has no firing case"
        assert "quiet" in expects, f"{r.id} has no non-firing case"
        assert all(s["action"] and s["effect"] for s in r.suggestions), r.id
        assert Path(r.path).stem == r.id, f"{r.path}: the file is named after the rule id"


def test_rules_only_name_registered_metrics() -> None:
    known = set(all_metrics())
    for r in RULES.values():
        assert r.metrics() <= known, r.id


# ---- strict schema ------------------------------------------------------------------------




def _variant(tmp_path: Path, old: str, new: str) -> Path:
    src = next(p for p in (RULES["comm-exposed"].path,))
    text = Path(src).read_text()
    assert old in text
    p = tmp_path / "comm-exposed.yaml"
    p.write_text(text.replace(old, new, 1))
    return p


def test_unknown_key_names_file_and_line(tmp_path: Path) -> None:
    p = _variant(tmp_path, "severity: warning", "severity: warning\nseverty: critical")
    with pytest.raises(RuleError) as e:
        parse_rule(p, set(all_metrics()))
    assert "unknown key 'severty'" in str(e.value)
    assert f"{p}:5" in str(e.value)  # the typo sits on line 5


def test_unknown_metric_is_a_load_error(tmp_path: Path) -> None:
    p = _variant(tmp_path, "{metric: communication_exposed_share, op: \">\", param: threshold}", "{metric: comm_exposd_share, op: \">\", param: threshold}")
    with pytest.raises(RuleError, match="unknown metric id 'comm_exposd_share'"):
        parse_rule(p, set(all_metrics()))


def test_code_in_a_condition_is_refused(tmp_path: Path) -> None:
    p = _variant(tmp_path, "- {metric: communication_exposed_share, op: \">\", param: threshold}", "- {eval: \"__import__('os')\"}")
    with pytest.raises(RuleError, match="unknown key 'eval'"):
        parse_rule(p, set(all_metrics()))


def test_default_outside_bounds(tmp_path: Path) -> None:
    p = _variant(tmp_path, "default: 0.10", "default: 1.5")
    with pytest.raises(RuleError, match="outside its bounds"):
        parse_rule(p, set(all_metrics()))


def test_set_overrides_a_threshold_and_checks_it() -> None:
    vals = apply_overrides(RULES, {"comm-exposed.threshold": "0.8"})
    assert vals["comm-exposed"]["threshold"] == 0.8
    with pytest.raises(RuleError, match="no parameter 'thresold'"):
        apply_overrides(RULES, {"comm-exposed.thresold": "0.8"})
    with pytest.raises(RuleError, match="bounds"):
        apply_overrides(RULES, {"comm-exposed.threshold": "7"})
    with pytest.raises(RuleError, match="unknown rule"):
        apply_overrides(RULES, {"nope.threshold": "0.1"})


def test_extra_rules_folder_overrides_by_id(tmp_path: Path) -> None:
    _variant(tmp_path, "name: Exposed communication", "name: Exposed communication (team copy)")
    rs = load_rules([tmp_path])
    assert rs["comm-exposed"].name == "Exposed communication (team copy)"


# ---- the verdict -------------------------------------------------------------------------


def test_verdict_picks_the_costliest_overhead_and_names_the_runner_up() -> None:
    m = {"communication_exposed_share": 0.2, "data_wait_share": 0.3, "free_share": 0.1, "step_time_us": 1e5, "computing_share": 0.4, "step_count": 10}
    vals = apply_overrides(RULES, {})
    outs = [evaluate_rule(r, m, vals[r.id]) for r in RULES.values()]
    v = verdict(outs, m)
    fired = {o.rule.verdict["bottleneck"]: m[o.rule.verdict["cost"]] for o in outs if o.status == "fired" and o.rule.verdict and o.rule.verdict["bottleneck"] != "memory"}
    best = max(fired, key=fired.get)
    assert v["bottleneck"] == best
    assert v["share"] == fired[best]


def test_compute_verdict_when_no_overhead_passes() -> None:
    m = {"communication_exposed_share": 0.01, "step_time_us": 1e5, "computing_share": 0.95, "step_count": 10}
    vals = apply_overrides(RULES, {})
    outs = [evaluate_rule(r, m, vals[r.id]) for r in RULES.values()]
    if any(o.status == "fired" and o.rule.verdict and o.rule.verdict["bottleneck"] not in ("compute", "memory") for o in outs):
        pytest.skip("another overhead rule fires on this metric set")
    v = verdict(outs, m)
    assert v["bottleneck"] == "compute" and "MFU" in v["sentence"]


# ---- CLI -----------------------------------------------------------------------------------


def test_rules_list_and_explain() -> None:
    r = CliRunner().invoke(main, ["rules", "list", "--format", "json"])
    assert r.exit_code == 0
    import json

    ids = {x["id"] for x in json.loads(r.stdout)}
    assert ids == set(RULES)
    r = CliRunner().invoke(main, ["rules", "explain", "comm-exposed"])
    assert r.exit_code == 0 and "Why it matters" in r.stdout and "comm-exposed.threshold" in r.stdout
    r = CliRunner().invoke(main, ["rules", "explain", "no-such-rule"])
    assert r.exit_code == 2


def test_fail_on_gates_ci(corpus: Path) -> None:
    path = str(corpus / "ascend/torchnpu-2rank-level1")
    r = CliRunner().invoke(main, ["analyze", path, "--jobs", "1", "--fail-on", "warning"])
    assert r.exit_code == 1  # 74% exposed communication: a critical finding
    r = CliRunner().invoke(main, ["analyze", path, "--jobs", "1"])
    assert r.exit_code == 0
    r = CliRunner().invoke(main, ["analyze", path, "--jobs", "1", "--set", "comm-exposed.threshold=2"])
    assert r.exit_code == 2 and "bounds" in r.stderr
