"""Parsed rule files kept between runs (rules/loader.py, _ParsedRules): the same rules as a fresh parse,
keyed by each file's text, never a way around a rule file's errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from msdiag.errors import RuleError
from msdiag.rules import loader


def _no_yaml(text: str, path: Path) -> object:
    raise AssertionError(f"{path} was parsed although it is kept")


def test_kept_rules_equal_parsed_ones_and_skip_the_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = loader.load_rules()
    first = loader.load_rules(cache=tmp_path)  # parses every file and keeps it
    kept = json.loads((tmp_path / f"msdiag-rules-v{loader.RULES_CACHE_VERSION}.json").read_text())
    assert len(kept) == len(plain)
    monkeypatch.setattr(loader, "_yaml_of", _no_yaml)
    again = loader.load_rules(cache=tmp_path)  # every file read, none parsed
    assert first == plain
    assert again == plain
    assert [r.path for r in again.values()] == [r.path for r in plain.values()]


def test_a_changed_rule_file_is_parsed_again(tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    src = next(iter(loader.load_rules().values()))
    text = Path(src.path).read_text(encoding="utf-8")
    rule = extra / "copy.yaml"
    rule.write_text(text, encoding="utf-8")
    cache = tmp_path / "cache"
    assert loader.load_rules([extra], cache=cache)[src.id].summary == src.summary
    # the same file with another summary: its new text is a new key, so the new summary is read
    rule.write_text(text.replace(f"summary: {src.summary}", "summary: changed by the test", 1), encoding="utf-8")
    assert "changed by the test" in rule.read_text(encoding="utf-8")
    assert loader.load_rules([extra], cache=cache)[src.id].summary == "changed by the test"


def test_a_bad_rule_file_fails_every_run(tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "bad.yaml").write_text("id: [unclosed\n", encoding="utf-8")
    for _ in range(2):
        with pytest.raises(RuleError, match="bad.yaml"):
            loader.load_rules([extra], cache=tmp_path / "cache")


@pytest.mark.parametrize("content", [b"", b"not json", b"[1, 2]", b'{"x": {"params": 3}}'])
def test_an_unreadable_cache_is_not_used(tmp_path: Path, content: bytes) -> None:
    (tmp_path / f"msdiag-rules-v{loader.RULES_CACHE_VERSION}.json").write_bytes(content)
    assert loader.load_rules(cache=tmp_path) == loader.load_rules()


def test_a_cache_that_cannot_be_written_is_not_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be", encoding="utf-8")
    assert loader.load_rules(cache=blocker / "cache") == loader.load_rules()


def test_kept_rules_follow_the_file_where_it_is_now(tmp_path: Path) -> None:
    src = Path(next(iter(loader.load_rules().values())).path)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(src, tmp_path / name / src.name)
    cache = tmp_path / "cache"
    loader.load_rules([tmp_path / "a"], cache=cache)
    rules = loader.load_rules([tmp_path / "b"], cache=cache)  # same text, kept under a's run
    assert any(r.path == str(tmp_path / "b" / src.name) for r in rules.values())


def test_the_command_keeps_parsed_rules_in_its_cache_folder(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from msdiag.cli import main

    path = str(corpus / "ascend" / "torchnpu-2rank-level1" / "rank0_ascend_pt")
    args = ["analyze", path, "--format", "json", "--jobs", "1", "--cache", str(tmp_path / "c")]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.stderr
    kept = tmp_path / "c" / f"msdiag-rules-v{loader.RULES_CACHE_VERSION}.json"
    assert len(json.loads(kept.read_text())) == len(loader.load_rules())
    monkeypatch.setattr(loader, "_yaml_of", _no_yaml)  # the second run parses no rule file
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)


def test_rule_trees_are_what_pyyaml_loads() -> None:
    """The one-pass tree of every shipped rule file holds what PyYAML's safe_load makes of it (values and
    types), and each key's line is the line the key is on."""
    import yaml

    for r in loader.load_rules().values():
        text = Path(r.path).read_text(encoding="utf-8")
        tree = loader._yaml_of(text, Path(r.path))
        assert tree == yaml.safe_load(text)
        lines = text.splitlines()
        for key, line in tree.lines.items():
            if key != "__self__":
                assert lines[line - 1].lstrip().startswith(f"{key}:"), (r.path, key, line)
