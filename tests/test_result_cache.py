"""The result cache of `msdiag analyze` (msdiag/result_cache.py): a warm run prints the report stored by the
first, byte for byte, without analysing; any change to an input, a rule text, an option or msdiag's version
analyses again; a damaged entry is analysed again and rewritten; any doubt about an input: no result cache."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import msdiag
import msdiag.analysis
from msdiag import result_cache
from msdiag.cli import main
from msdiag.options import Options

# the smallest two-rank Ascend capture of the corpus (two torch_npu ranks, one P2P pair): analysed in about a second
P2P = ("ascend", "torchnpu-2rank-p2p-2024")


@pytest.fixture
def cap(corpus: Path, tmp_path: Path) -> Path:
    """A copy of the capture (the tests change its files' mtimes and sizes; the corpus is never touched)."""
    return Path(shutil.copytree(corpus.joinpath(*P2P), tmp_path / "cap"))


@pytest.fixture
def analyses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths analysis.analyze was called with during the test: a hit calls it not at all."""
    calls: list[str] = []
    real = msdiag.analysis.analyze

    def counting(path: Any, options: Any = None, early: Any = None) -> Any:
        calls.append(str(path))
        return real(path, options, early)

    monkeypatch.setattr(msdiag.analysis, "analyze", counting)  # cli._analyze imports it at call time
    yield calls


def _run(cap: Path, cache: Path, *args: str) -> str:
    r = CliRunner().invoke(main, ["analyze", str(cap), "--jobs", "1", "--cache", str(cache), "--no-config", *args])
    assert r.exit_code == 0, r.stderr
    return r.stdout


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob(f"msdiag-results-v{result_cache.RESULTS_FORMAT}/*/*.json"))


def test_warm_run_prints_the_same_bytes_without_analysing(cap: Path, tmp_path: Path, analyses: list[str]) -> None:
    cache = tmp_path / "cache"
    cold = _run(cap, cache, "--format", "json")
    assert len(analyses) == 1 and len(_entries(cache)) == 1
    warm = _run(cap, cache, "--format", "json")
    assert warm == cold and len(analyses) == 1  # the stored report, byte for byte: nothing analysed
    # text is rendered from the stored report object: the same bytes as a run without any cache
    text = _run(cap, cache)
    assert len(analyses) == 1
    r = CliRunner().invoke(main, ["analyze", str(cap), "--jobs", "1", "--no-cache", "--no-config"])
    assert r.exit_code == 0 and text == r.stdout
    assert len(analyses) == 2 and len(_entries(cache)) == 1  # --no-cache: neither read nor written


def test_an_entry_stored_from_the_printed_text_is_the_same_file(cap: Path, tmp_path: Path) -> None:
    # the CLI dumps the report once (cli._compact) for the result cache and the JSON it prints: the stored file is
    # the one put() writes from the report itself, to the byte, and the printed text json.dumps(indent=1)'s
    from msdiag.cli import _compact, _indented

    report = json.loads(_run(cap, tmp_path / "c0", "--format", "json"))
    files = []
    for k, compact in enumerate((None, _compact(report))):
        entry = result_cache.open_for(tmp_path / f"c{k + 1}", cap, Options(jobs=1), {"command": "analyze"})
        assert entry is not None and entry.put(report, compact)
        files.append(entry.file.read_bytes())
    assert files[0] == files[1] and json.loads(files[1])["report"] == report
    assert _indented(report, _compact(report)) == json.dumps(report, indent=1, ensure_ascii=False)
    # a report json cannot write without NaN has no compact text, and is not stored
    odd = {**report, "x": float("nan")}
    entry = result_cache.open_for(tmp_path / "c3", cap, Options(jobs=1), {"command": "analyze"})
    assert _compact(odd) is None and entry is not None and not entry.put(odd, _compact(odd)) and not entry.file.exists()


def _touch_rank_file(cap: Path) -> None:
    f = next(cap.rglob("kernel_details.csv"))
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # the same bytes, one second newer


def _grow_rank_file(cap: Path) -> None:
    f = next(cap.rglob("communication_matrix.json"))
    st = f.stat()
    f.write_bytes(f.read_bytes() + b"\n")  # one byte longer (JSON whitespace), the same mtime
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


def _new_file(cap: Path) -> None:
    (cap / "README.txt").write_text("notes beside the ranks\n", encoding="utf-8")


@pytest.mark.parametrize("change", [_touch_rank_file, _grow_rank_file, _new_file], ids=["mtime", "size", "new_file"])
def test_a_changed_input_file_misses(cap: Path, tmp_path: Path, analyses: list[str], change: Any) -> None:
    cache = tmp_path / "cache"
    cold = _run(cap, cache, "--format", "json")
    change(cap)
    again = _run(cap, cache, "--format", "json")
    assert len(analyses) == 2  # analysed again
    assert json.loads(again)["metrics"] == json.loads(cold)["metrics"]  # nothing a metric reads changed
    _run(cap, cache, "--format", "json")
    assert len(analyses) == 2 and len(_entries(cache)) == 1  # the entry was rewritten for the new files


def test_rule_text_option_and_version_miss(cap: Path, tmp_path: Path, analyses: list[str],
                                           monkeypatch: pytest.MonkeyPatch, repo: Path) -> None:
    cache, rules = tmp_path / "cache", tmp_path / "rules"
    rules.mkdir()
    shutil.copy(repo / "rules" / "comm-slow-link.yaml", rules / "comm-slow-link.yaml")  # overrides the built-in one
    _run(cap, cache, "--format", "json", "--rules", str(rules))
    _run(cap, cache, "--format", "json", "--rules", str(rules))
    assert len(analyses) == 1
    with (rules / "comm-slow-link.yaml").open("a", encoding="utf-8") as f:
        f.write("# a comment: the same rule, another text\n")
    _run(cap, cache, "--format", "json", "--rules", str(rules))
    assert len(analyses) == 2  # a rule file's text is part of the key
    _run(cap, cache, "--format", "json", "--rules", str(rules), "--peak-tflops", "300")
    assert len(analyses) == 3  # another option
    monkeypatch.setattr(msdiag, "__version__", msdiag.__version__ + ".post1")
    _run(cap, cache, "--format", "json", "--rules", str(rules), "--peak-tflops", "300")
    assert len(analyses) == 4  # another msdiag


@pytest.mark.parametrize("damage", ["truncated", "not_json", "another_key", "empty"])
def test_damaged_entry_is_analysed_again_and_rewritten(cap: Path, tmp_path: Path, analyses: list[str], damage: str) -> None:
    cache = tmp_path / "cache"
    cold = _run(cap, cache, "--format", "json")
    (entry,) = _entries(cache)
    text = entry.read_text(encoding="utf-8")
    if damage == "truncated":
        entry.write_text(text[: len(text) // 2], encoding="utf-8")
    elif damage == "not_json":
        entry.write_bytes(b"\x00\xff" * 10)
    elif damage == "another_key":  # a report stored under another key must never be printed
        stored = json.loads(text)
        stored["key"]["inputs"]["capture"] = "0" * 64
        stored["report"]["verdict"] = {"bottleneck": "forged"}
        entry.write_text(json.dumps(stored), encoding="utf-8")
    else:
        entry.write_bytes(b"")
    assert _run(cap, cache, "--format", "json") == cold
    assert len(analyses) == 2
    assert json.loads(entry.read_text(encoding="utf-8"))["key"] == json.loads(text)["key"]  # rewritten whole
    assert _run(cap, cache, "--format", "json") == cold and len(analyses) == 2


def test_an_input_that_cannot_be_fingerprinted_means_no_result_cache(cap: Path, tmp_path: Path) -> None:
    """A dangling symbolic link in the capture (its target gone): no entry, never a partial fingerprint."""
    opts = Options(cache=str(tmp_path / "cache"))
    assert result_cache.open_for(tmp_path / "cache", cap, opts, {}) is not None
    (cap / "gone").symlink_to(tmp_path / "no-such-file")
    assert result_cache.open_for(tmp_path / "cache", cap, opts, {}) is None
    # a cache folder inside the capture is never written (the loader refuses it with its own error)
    (cap / "gone").unlink()
    assert result_cache.open_for(cap / "cache", cap, opts, {}) is None


def test_fingerprint_follows_every_file(tmp_path: Path) -> None:
    """The fingerprint changes with a file's size, mtime or name, and with a new file deep down; not with atime."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    f = tmp_path / "a" / "b" / "x.csv"
    f.write_text("1,2\n", encoding="utf-8")
    first = result_cache.fingerprint(tmp_path)
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns + 5_000_000_000, st.st_mtime_ns))
    assert result_cache.fingerprint(tmp_path) == first
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert result_cache.fingerprint(tmp_path) != first
    second = result_cache.fingerprint(tmp_path)
    f.rename(tmp_path / "a" / "b" / "y.csv")
    assert result_cache.fingerprint(tmp_path) not in (first, second)


def _reads_back_alike(live: Any, back: Any) -> bool:
    """The comparison the stored report must pass, by its definition: ``back`` (``live`` through JSON) holds the same
    values, dict keys that were strings already, a float subclass as its float and a tuple as its list."""
    if isinstance(live, float) and type(back) is float:
        return float(live) == back
    if isinstance(live, dict):
        return (type(back) is dict and list(live) == list(back) and all(type(k) is str for k in live)
                and all(_reads_back_alike(live[k], back[k]) for k in live))
    if isinstance(live, (list, tuple)):
        return type(back) is list and len(live) == len(back) and all(_reads_back_alike(x, y) for x, y in zip(live, back))
    return type(live) is type(back) and live == back


def test_stored_only_what_comes_back_from_json_alike(cap: Path) -> None:
    """result_cache._as_stored walks the report once; it must say what the JSON round trip it replaces says."""
    import enum

    import numpy as np

    from msdiag.analysis import analyze
    from msdiag.contract import build

    class Level(enum.IntEnum):
        HIGH = 2

    class Name(str):
        pass

    report = build(analyze(cap, Options(jobs=1)))
    cases: list[Any] = [
        report, {"a": [1, 2.5, True, None, "x", (3, 4)]}, {"f": np.float64(0.1)}, {"t": (1, (2, [3]))},
        {1: "int key"}, {"k": Level.HIGH}, {"k": Name("a str subclass")}, {"k": [{"deep": {2.5: 1}}]},
        {"surrogate": "\ud800"}, [], {}, "text", 10**30,
        # lists judged by their set of types (_all_stored): a subclass among plain values, numpy floats among ints
        {"l": [1, 2, Level.HIGH]}, {"l": ["a", Name("b")]}, {"l": [np.float64(1.5), 2, None]}, {"l": [[1.5], (2, 3)]},
    ]  # fmt: skip
    verdicts = []
    for value in cases:
        back = json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))
        assert result_cache._as_stored(value) == _reads_back_alike(value, back), value if value is not report else "report"
        verdicts.append(result_cache._as_stored(value))
    assert verdicts == [True, True, True, True, False, False, False, False, True, True, True, True, True,
                        False, False, True, True]
