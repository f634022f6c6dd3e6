"""Typed options, the project config ([tool.msdiag] / msdiag.toml), rule selection and thresholds with one home.

Figures on the corpus capture torchnpu-2rank-level1 (read by tests/test_comm_metrics.py too): its slowest
link is 1-7 HCCS on rank 1 at 15.14 GB/s = 0.841 x the 18 GB/s HCCS standard, rank 0's slowest is at
0.854 x; collectives move data 3.7% of their time; the rules that fire are comm-exposed (the verdict),
comm-idle and host-bound.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner

import msdiag
from msdiag import config
from msdiag.analysis import Options, analyze
from msdiag.cli import main
from msdiag.errors import RuleError
from msdiag.metrics import reduce
from msdiag.metrics.registry import Reads, all_reads, declared_params
from msdiag.rules.loader import load_rules

LEVEL1 = "ascend/torchnpu-2rank-level1"
PACKAGE = Path(msdiag.__file__).resolve().parent  # the package under test (the checkout, or the wheel in CI)


def _analyze(path: Path, *extra: str) -> tuple[int, dict, str]:
    """``analyze --format json`` with the rank cache of the test session (the CLI's default folder, tests/conftest.py):
    the options under test act on the metrics and rules, which every run computes; the ranks are parsed once."""
    r = CliRunner().invoke(main, ["analyze", str(path), "--format", "json", "--jobs", "1", *extra])
    return r.exit_code, (json.loads(r.stdout) if r.exit_code in (0, 1) else {}), r.stderr


def _fail(*args: str, usage: bool = False) -> str:
    """Exit 2 with one line on stderr (a usage error: click's usage text, ending in the error)."""
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert usage or len(lines) == 1, r.stderr
    return lines[-1]


# ---- typed options ---------------------------------------------------------------------------------


def test_options_are_checked_when_made() -> None:
    o = Options(ranks_per_node="4", device_memory_gb="48", bandwidth_norms="hccs=28, RDMA=25")
    assert (o.ranks_per_node, o.device_memory_gb) == (4, 48.0)
    assert dict(o.bandwidth_norms) == {"HCCS": 28.0, "RDMA": 25.0}
    for bad in ({"ranks_per_node": 0}, {"ranks_per_node": 2.5}, {"host_cores": True}, {"peak_tflops": "fast"},
                {"bandwidth_norms": {"XLINK": 3}}, {"bandwidth_norms": "HCCS"}, {"slo_ttft_ms": -1}):
        with pytest.raises(ValueError):
            Options(**bad)


def test_json_options_unchanged_unless_the_new_options_are_set() -> None:
    # the keys of the JSON `options` before this change; disable / bandwidth_norms / config only when set
    base = {"jobs", "peak_tflops", "device", "model_config", "ranks_per_node", "device_memory_gb", "host_cores",
            "rules", "set", "scheduler", "requests", "slo_ttft_ms", "slo_tpot_ms"}
    assert set(Options().as_dict()) == base
    o = Options(disable=("step-time-jitter",), bandwidth_norms={"HCCS": 28}, config="/p/msdiag.toml").as_dict()
    assert set(o) - base == {"disable", "bandwidth_norms", "config"}
    assert o["disable"] == ["step-time-jitter"] and o["bandwidth_norms"] == {"HCCS": 28.0}


# ---- thresholds have one home ------------------------------------------------------------------------


def test_every_metric_threshold_is_a_rule_parameter() -> None:
    rules = load_rules()
    declared = declared_params()
    assert declared["slow_link"] == ("comm-slow-link.min_utilization",)
    for keys in declared.values():
        for key in keys:
            rid, _, name = key.partition(".")
            assert name in rules[rid].params, key


def test_set_moves_the_metric_and_the_rule_together(corpus: Path, analysed_json: Callable[[str], dict]) -> None:
    path = corpus / LEVEL1
    rep = analysed_json(LEVEL1)  # without --set: the session's analysis, as analyze --format json prints it
    assert rep["metrics"]["slow_link"] is None  # 0.841 is above the default cut 0.8
    assert "below 0.8 x" in rep["metric_details"]["slow_link"]["reason"]
    # cut at 0.85: rank 1's 1-7 HCCS (0.841) is now slow, rank 0's (0.854) still is not the slowest;
    # with min_transit lowered under the capture's 3.7% the rule fires and names that link
    code, rep, err = _analyze(path, "--set", "comm-slow-link.min_utilization=0.85", "--set", "comm-slow-link.min_transit=0.03")
    assert code == 0, err
    assert rep["metrics"]["slow_link"] == "1-7 HCCS"
    f = {x["rule_id"]: x for x in rep["findings"]}
    assert "comm-slow-link" in f
    assert any("1-7 HCCS" in s["action"] for s in f["comm-slow-link"]["suggestions"])


def test_bandwidth_norm_flag(corpus: Path) -> None:
    # a 20 GB/s HCCS standard: 15.14 / 20 = 0.757 < 0.8, so the link is named (tests/test_comm_metrics.py)
    code, rep, err = _analyze(corpus / LEVEL1, "--bandwidth-norm", "HCCS=20")
    assert code == 0, err
    assert rep["metrics"]["slow_link"] == "1-7 HCCS"
    assert rep["options"]["bandwidth_norms"] == {"HCCS": 20.0}
    assert "--bandwidth-norm" in _fail("analyze", str(corpus / LEVEL1), "--bandwidth-norm", "XLINK=3", usage=True)


# ---- rule selection --------------------------------------------------------------------------------


def test_disable_leaves_a_rule_out_everywhere(corpus: Path) -> None:
    code, rep, err = _analyze(corpus / LEVEL1, "--disable", "comm-exposed", "--disable", "step-time-jitter")
    assert code == 0, err
    assert rep["options"]["disable"] == ["comm-exposed", "step-time-jitter"]
    # issue 14's rules (capture-partial, comm-wait-uncaptured, host-sync-in-step) fire on level1 too
    assert {f["rule_id"] for f in rep["findings"]} == {
        "comm-idle", "host-bound", "capture-partial", "comm-wait-uncaptured", "host-sync-in-step"
    }
    assert "step-time-jitter" not in {s["rule_id"] for s in rep["rules_skipped"]}  # disabled, not skipped
    assert rep["verdict"]["rule_id"] != "comm-exposed"
    assert "comm-exposed" not in (rep["verdict"].get("causes") or [])
    line = _fail("analyze", str(corpus / LEVEL1), "--disable", "no-such-rule")
    assert "--disable" in line and "unknown rule 'no-such-rule'" in line


def test_disabled_rules_in_the_analysis(corpus: Path, analysed: Callable[[str], Any], rank_cache: str) -> None:
    # host-bound fires on level1 (the session's analysis, module doc); disabled, it does not
    assert "host-bound" in {f["rule_id"] for f in analysed(LEVEL1).findings}
    a = analyze(corpus / LEVEL1, Options(jobs=1, cache=rank_cache, disable=("host-bound",)))
    assert a.disabled == ["host-bound"]
    assert "host-bound" not in {f["rule_id"] for f in a.findings}
    with pytest.raises(RuleError, match="unknown rule"):
        analyze(corpus / LEVEL1, Options(jobs=1, disable=("nope",)))


# ---- the config file ---------------------------------------------------------------------------------


def test_found_upward_msdiag_toml_first(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (tmp_path / "a" / "pyproject.toml").write_text('[project]\nname = "x"\n')  # no [tool.msdiag]: passed over
    assert config.find_config(deep) != tmp_path / "a" / "pyproject.toml"
    (tmp_path / "pyproject.toml").write_text('[tool.msdiag]\ndevice = "910B2"\n')
    assert config.find_config(deep) == tmp_path / "pyproject.toml"
    (tmp_path / "a" / "msdiag.toml").write_text('device = "910B3"\n')
    assert config.find_config(deep) == tmp_path / "a" / "msdiag.toml"


def test_load_config_values(tmp_path: Path) -> None:
    (tmp_path / "my_rules").mkdir()
    f = tmp_path / "pyproject.toml"
    f.write_text(
        '[project]\nname = "x"\n\n[tool.msdiag]\ndevice = "910B2"\npeak_tflops = 280\nranks_per_node = 8\n'
        'rules = ["my_rules"]\ndisable = ["step-time-jitter"]\nset = {"comm-slow-link.min_utilization" = 0.7}\n\n'
        "[tool.msdiag.bandwidth_norms]\nhccs = 28\n"
    )
    c = config.load_config(f)
    assert c.values == {
        "device": "910B2", "peak_tflops": 280, "ranks_per_node": 8, "rules_dirs": (str(tmp_path / "my_rules"),),
        "disable": ("step-time-jitter",), "overrides": {"comm-slow-link.min_utilization": "0.7"},
        "bandwidth_norms": {"HCCS": 28.0},
    }
    # the command line over the file: tables key by key, lists extended, plain values replaced
    m = config.merged(c, {"device": "910B3", "peak_tflops": None, "disable": ("host-bound",),
                          "overrides": {"comm-slow-link.min_utilization": "0.6"}, "bandwidth_norms": {}})
    assert m["device"] == "910B3" and m["peak_tflops"] == 280 and m["config"] == str(f)
    assert m["disable"] == ("step-time-jitter", "host-bound")
    assert m["overrides"] == {"comm-slow-link.min_utilization": "0.6"}
    assert Options(**m).bandwidth_norms == {"HCCS": 28.0}


@pytest.mark.parametrize(
    "text, line, problem",
    [
        ('device = "910B2"\npeak = 3\n', 2, "unknown key 'peak'"),
        ('device = "910B2"\n\nranks_per_node = "8"\n', 3, "ranks_per_node: should be a positive integer"),
        ('disable = "host-bound"\n', 1, "disable: should be a list of text"),
        ('[set]\n"comm-slow-link.min_utilization" = "low"\n', 2, "set.comm-slow-link.min_utilization: should be a number"),
        ('set = {"comm-slow-link.min_utilization" = true}\n', 1, "should be a number"),
        ("[bandwidth_norms]\nXLINK = 3\n", 1, "unknown transport 'XLINK'"),
        ('rules = ["absent"]\n', 1, "is not a folder"),
        ('device = "910B2\n', 1, "not valid TOML"),
    ],
)
def test_config_errors_name_file_and_line(tmp_path: Path, text: str, line: int, problem: str) -> None:
    f = tmp_path / "msdiag.toml"
    f.write_text(text)
    with pytest.raises(config.ConfigError) as e:
        config.load_config(f)
    assert e.value.line == line and problem in e.value.problem
    assert str(e.value).startswith(f"{f}:{line}: ")


def test_pyproject_error_line_counts_the_whole_file(tmp_path: Path) -> None:
    f = tmp_path / "pyproject.toml"
    f.write_text('[project]\nname = "x"\n\n[tool.msdiag]\ndevice = "910B2"\nhost_core = 64\n')
    with pytest.raises(config.ConfigError, match=r"pyproject.toml:6: unknown key 'host_core'"):
        config.load_config(f)


def test_cli_reads_the_config_of_the_current_folder(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "msdiag.toml"
    f.write_text('disable = ["comm-exposed"]\n[bandwidth_norms]\nHCCS = 20\n')
    monkeypatch.chdir(tmp_path)
    code, rep, err = _analyze(corpus / LEVEL1)
    assert code == 0, err
    assert rep["options"]["config"] == str(f.resolve())
    assert rep["options"]["disable"] == ["comm-exposed"] and rep["metrics"]["slow_link"] == "1-7 HCCS"
    assert "comm-exposed" not in {x["rule_id"] for x in rep["findings"]}
    code, rep, err = _analyze(corpus / LEVEL1, "--no-config")
    assert "config" not in rep["options"] and rep["metrics"]["slow_link"] is None
    # --config names one explicitly; a bad one is one line, exit 2
    bad = tmp_path / "other.toml"
    bad.write_text("hosts = 3\n")
    line = _fail("analyze", str(corpus / LEVEL1), "--config", str(bad))
    assert line == f"msdiag: error: {bad.resolve()}:1: unknown key 'hosts' (known: {', '.join(sorted(config.KEYS))})"
    assert "exclude each other" in _fail("analyze", str(corpus / LEVEL1), "--config", str(f), "--no-config", usage=True)


# ---- what the reduction keeps follows from the declarations ----------------------------------------------


def test_reduction_plan_follows_the_declarations() -> None:
    p = reduce.plan()
    # before the declarations, reduce.py listed these by hand: overlap dropped, host and scope by name,
    # host data waits whole, counters only 'AI Core Freq'
    assert p.whole_lanes == ("device", "hccl", "step")
    assert p.name_lanes == ("host", "scope")
    assert {lane for lane, _ in p.lane_rows} == {"host"}  # data waits, and issue 14's host causes
    assert p.dropped_lanes == ("overlap",)
    assert p.tracks == ("AI Core Freq", "NPU MEM")  # the clock (aicore_freq_drop, chip) and the device footprint (device_memory)
    rid = reduce.reduce_id()
    assert rid == reduce.reduce_id() and rid.startswith(f"reduce-{reduce.REDUCE_VERSION}-")
    assert all(isinstance(r, Reads) and r for r in all_reads().values())


def test_reduce_id_changes_with_a_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    from msdiag.metrics import registry

    before = reduce.reduce_id()
    monkeypatch.setitem(registry.READERS, "test.overlap", Reads(lanes=("overlap",)))
    assert reduce.plan().dropped_lanes == ()
    assert reduce.reduce_id() != before


def test_the_plan_is_made_again_when_a_declaration_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    # a rank's reduction asks for its plan: kept while the declarations are the same objects, made again when one is
    # added, replaced or removed
    from msdiag.metrics import registry

    first = reduce.shallow_plan()
    assert reduce.shallow_plan() is first and reduce.plan() is reduce.plan()
    with monkeypatch.context() as m:
        m.setitem(registry.READERS, "test.overlap", Reads(lanes=("overlap",)))
        assert reduce.plan().dropped_lanes == () and reduce.shallow_plan().dropped_lanes == ()
        m.setitem(registry.READERS, "test.overlap", Reads(lanes=("device",)))  # replaced: another object
        assert reduce.plan().dropped_lanes == ("overlap",)
    assert reduce.shallow_plan() == first and reduce.plan().dropped_lanes == ("overlap",)


# ---- dependencies point one way ---------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    """Every msdiag module a file imports, at any depth (functions, TYPE_CHECKING)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("msdiag")}


def test_inference_imports_nothing_from_metrics_and_metrics_nothing_from_rules() -> None:
    for f in (PACKAGE / "inference").glob("*.py"):
        assert not {m for m in _imports(f) if m.startswith("msdiag.metrics")}, f
    for f in (PACKAGE / "metrics").glob("*.py"):
        assert not {m for m in _imports(f) if m.startswith(("msdiag.rules", "msdiag.analysis", "msdiag.config"))}, f
    for f in ("options.py", "config.py"):
        assert all(m in ("msdiag.errors", "msdiag.options") or m.startswith(("msdiag.errors.", "msdiag.options."))
                   for m in _imports(PACKAGE / f)), f


def test_bad_set_or_disable_in_a_config_names_it(corpus: Path, tmp_path: Path) -> None:
    f = tmp_path / "msdiag.toml"
    f.write_text('set = {"comm-slow-link.min_utilization" = 2}\n')  # bounds [0, 1]
    line = _fail("analyze", str(corpus / LEVEL1), "--config", str(f))
    assert f"--set / set in {f.resolve()}" in line and "outside the parameter's bounds" in line
    f.write_text('disable = ["no-such-rule"]\n')
    line = _fail("analyze", str(corpus / LEVEL1), "--config", str(f))
    assert f"--disable / disable in {f.resolve()}" in line and "unknown rule 'no-such-rule'" in line


def test_rules_list_reads_the_project_config(tmp_path: Path, repo: Path) -> None:
    src = repo / "rules" / "data-wait.yaml"
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "my-data-wait.yaml").write_text(src.read_text().replace("id: data-wait", "id: my-data-wait", 1))
    f = tmp_path / "msdiag.toml"
    f.write_text('rules = ["extra"]\ndisable = ["data-wait"]\n')
    r = CliRunner().invoke(main, ["rules", "list", "--format", "json", "--config", str(f)])
    assert r.exit_code == 0, r.stderr
    listed = {x["id"]: x["disabled"] for x in json.loads(r.stdout)}
    assert listed["my-data-wait"] is False and listed["data-wait"] is True
    r = CliRunner().invoke(main, ["rules", "explain", "data-wait", "--config", str(f)])
    assert r.exit_code == 0 and "[disabled by the project config]" in r.stdout.splitlines()[0]
    r = CliRunner().invoke(main, ["rules", "list", "--format", "json", "--no-config"])
    assert not any(x["disabled"] for x in json.loads(r.stdout))
