"""Shared test fixtures: the read-only corpus beside the checkout, the repository root, and the corpus
captures analysed once per session (``analysed``), which most test files read again and again."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from msdiag.analysis import Analysis

# msdiag is imported where a fixture needs it, not here: under xdist the controller process loads this file and
# runs no test, and the workers start after it

# Property tests must not depend on the machine's load: hypothesis's default 200 ms deadline per example and its
# too_slow health check fail a test when the machine is busy, not when the code is wrong. CI (CI set) uses
# hypothesis's own "ci" profile (no deadline, derandomized: the same examples every run); elsewhere examples stay
# random, without the deadline.
settings.register_profile("msdiag", deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The quick loop (pytest -m "not slow", outside CI) tries 25 examples per property instead of 100: each property
# still meets its edge cases (hypothesis tries the simplest values first), the full run tries the rest.
settings.register_profile("msdiag-quick", parent=settings.get_profile("msdiag"), max_examples=25)
settings.load_profile("ci" if os.environ.get("CI") else "msdiag")

# MSDIAG_REPO: the checkout, when the tests run from a copy against an installed wheel (CI)
REPO = Path(os.environ.get("MSDIAG_REPO", Path(__file__).resolve().parents[1]))
SAMPLE_TRACES = REPO / "sample_traces"
CORPUS = Path(os.environ.get("MSDIAG_CORPUS", REPO.parent / "shared" / "corpus"))


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The shared corpus of real profiler outputs (read in place, never copied)."""
    if not CORPUS.is_dir():
        pytest.skip(f"corpus folder {CORPUS} is absent: tests on real profiler output are skipped")
    return CORPUS


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


def _shared(factory: pytest.TempPathFactory, kind: str, key: str, make: Callable[[], Any]) -> Any:
    """``make()``, made once for the whole test session, however many xdist workers run it.

    In one process this is ``make()``. Under xdist the first worker to need ``key`` makes it, holding a lock on a
    file in the folder the workers share (the parent of their temp folders), and keeps it there pickled; the others
    wait for the lock and read it back (an analysis of a corpus capture: ~1 s to make, ~15 ms to read back). What a
    worker reads back is what the maker's test saw: the same objects, through pickle."""
    import hashlib
    import pickle

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make()
    import fcntl

    folder = factory.getbasetemp().parent / f"shared-{kind}"
    folder.mkdir(exist_ok=True)
    stem = folder / hashlib.sha256(key.encode()).hexdigest()[:24]
    with open(stem.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = stem.with_suffix(".pickle")
        if done.is_file():
            return pickle.loads(done.read_bytes())
        value = make()
        tmp = stem.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        tmp.replace(done)
        return value


# The captures the test files analyse most, by short name; `analysed` takes any other corpus-relative path too.
CAPTURES = {
    "level0": "ascend/torchnpu-2rank-level0",
    "level1": "ascend/torchnpu-2rank-level1",
    "level1-db": "ascend/torchnpu-2rank-level1-db",
    "p2p": "ascend/torchnpu-2rank-p2p-2024",
    "cpu-graph": "mindspore-cpu/legacy_Profiler_graph_mem",
    "cpu-pynative": "mindspore-cpu/legacy_Profiler_pynative_mem",
    "cpu-dp2": "mindspore-cpu/msrun_dp2_pynative",
    "sample": str(SAMPLE_TRACES / "train_small_cpu"),
}


def _capture_path(name: str) -> Path:
    """The capture ``analysed(name)`` reads: a short name of CAPTURES or a corpus-relative path (an absolute
    path, the sample, stays itself)."""
    return CORPUS / CAPTURES.get(name, name)


@pytest.fixture(scope="session")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Analysis]:
    """``analysed(name)``: the Analysis of a capture, made once per session with ``Options(jobs=1)`` (no rank cache).

    ``name`` is a key of CAPTURES or a path relative to the corpus. The Analysis is shared by every test that
    asks for the same capture: read it, never change it (a test that changes one analyses its own copy).
    """
    from msdiag.analysis import analyze
    from msdiag.options import Options

    done: dict[Path, Analysis] = {}

    def get(name: str) -> Analysis:
        path = _capture_path(name)
        if not path.exists() and not CORPUS.is_dir():
            pytest.skip(f"corpus folder {CORPUS} is absent: tests on real profiler output are skipped")
        if path not in done:
            done[path] = _shared(tmp_path_factory, "analysed", str(path), lambda: analyze(path, Options(jobs=1)))
        return done[path]

    return get


@pytest.fixture(scope="session")
def analysed_json(analysed: Callable[[str], Analysis]) -> Callable[[str], dict[str, Any]]:
    """``analysed_json(name)``: the JSON report object of ``analysed(name)``, as ``msdiag analyze --format json
    --jobs 1`` prints it (through JSON and back), made once per session. Tests that check figures of the report
    read it here; a few end-to-end tests per command run the command itself. Read it, never change it (a test
    that edits one edits a deep copy)."""
    import json

    from msdiag.contract import build

    done: dict[str, dict[str, Any]] = {}

    def get(name: str) -> dict[str, Any]:
        if name not in done:
            done[name] = json.loads(json.dumps(build(analysed(name)), ensure_ascii=False))
        return done[name]

    return get


@pytest.fixture(scope="session")
def rank_cache(_user_cache: None) -> str:
    """The test session's rank cache: the folder the CLI caches ranks in by default (``_user_cache`` points it at a
    temp folder). An analysis in process with ``Options(cache=rank_cache)`` parses a corpus capture's ranks the
    first time and reads them back after, as repeated CLI runs do: for tests of options, rules and goals, which act
    on what the metrics compute, not on how the ranks were read (the cache's own tests use caches of their own)."""
    from msdiag.ingest.cachedir import default_dir

    return str(default_dir())


def page_of(ctx: dict[str, Any]) -> str:
    """The HTML page of a template context (``html.context``): what ``html.render`` returns for the same analysis and
    report object, without drawing the charts again for a test that reads both."""
    from msdiag.report import html

    return html.environment().get_template(html.BASE_TEMPLATE).render(**ctx)


@pytest.fixture(scope="session")
def _pages(analysed: Callable[[str], Analysis],
           tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[dict[str, Any], str]]:
    """``_pages(name)``: (context, page) of ``analysed(name)``'s HTML report, made once per session: the page is
    ``msdiag.report.html.render`` of the analysis and its JSON report object (what ``msdiag report`` writes for
    it), rendered from that context as render() does. Drawing the charts (in the context) is most of a page's cost."""
    from msdiag.contract import build
    from msdiag.report import html

    done: dict[int, tuple[dict[str, Any], str]] = {}  # by the shared Analysis: a short name and its path are one page

    def get(name: str) -> tuple[dict[str, Any], str]:
        a = analysed(name)
        if id(a) not in done:

            def make() -> tuple[dict[str, Any], str]:
                ctx = html.context(a, build(a))
                return ctx, page_of(ctx)

            done[id(a)] = _shared(tmp_path_factory, "pages", str(_capture_path(name)), make)
        return done[id(a)]

    return get


@pytest.fixture(scope="session")
def rendered(_pages: Callable[[str], tuple[dict[str, Any], str]]) -> Callable[[str], str]:
    """``rendered(name)``: the HTML page of ``analysed(name)``, rendered once per session. Read it, never change it."""
    return lambda name: _pages(name)[1]


@pytest.fixture(scope="session")
def page_context(_pages: Callable[[str], tuple[dict[str, Any], str]]) -> Callable[[str], dict[str, Any]]:
    """``page_context(name)``: what the templates read for ``rendered(name)`` (``html.context``), made once per
    session. Read it, never change it."""
    return lambda name: _pages(name)[0]


@pytest.fixture(scope="session")
def job8(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench/cluster.py's synthetic 8-rank job built from the corpus (torchnpu-2rank-level1, rank 1) once per
    session: 8 ranks x 3 steps, rank 5's compute 3x longer, link 2-3's transit 2.5x (tests/test_cluster.py)."""
    import importlib.util

    def make() -> Path:
        spec = importlib.util.spec_from_file_location("msdiag_bench_cluster", REPO / "bench" / "cluster.py")
        assert spec and spec.loader
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        out = tmp_path_factory.mktemp("cluster") / "job8"
        plan = bench.build(out, 8, 3, 20261129, 0.01, 3.0, 2.5, 1)
        assert (plan["slow_rank"], plan["slow_link"]) == (5, "2-3 HCCS")
        return out

    return _shared(tmp_path_factory, "job8", "job8", make)


@pytest.fixture(scope="session", autouse=True)
def _user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The CLI caches ranks in the user's cache folder by default: the tests' go to a temp folder, one for the session,
    which xdist's workers share as users' runs share theirs (the cache writes each entry to a temp name, then
    renames it into place)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.getbasetemp().parent / "xdg-cache"
        folder.mkdir(mode=0o700, exist_ok=True)
    else:
        folder = tmp_path_factory.mktemp("xdg-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MSDIAG_HOME", raising=False)
        mp.setenv("XDG_CACHE_HOME", str(folder))
        yield


def _copy_tree(node: object, lines: type) -> object:
    """A copy of a parsed rule file: its dicts (with their key lines) and lists are new, its scalars shared.

    The loader's YAML holds only dicts (``lines``: the loader's ``_Lines``), lists and scalars (text, numbers, booleans, dates,
    null: immutable), so this is a deep copy; ``copy.deepcopy`` makes the same one about four times slower
    (its memo and ``__reduce_ex__`` for every dict), which the session paid for every rule file of
    every analysis."""
    if isinstance(node, lines):
        out = lines((k, _copy_tree(v, lines)) for k, v in node.items())  # type: ignore[call-arg]
        out.lines = dict(node.lines)  # type: ignore[attr-defined]
        return out
    if isinstance(node, dict):
        return {k: _copy_tree(v, lines) for k, v in node.items()}
    if isinstance(node, list):
        return [_copy_tree(v, lines) for v in node]
    return node


@pytest.fixture(scope="session", autouse=True)
def _parsed_rules_once() -> Iterator[None]:
    """Every analysis loads every rule file, and YAML parsing is much of the time a small capture's
    analysis takes after its metrics: in the test session a rule file is parsed once per distinct text. The
    key is the path and the file's full text, read again each time by the loader (so a test that writes or
    changes a rule file gets its own parse and its own errors); a hit returns a deep copy (:func:`_copy_tree`), so no caller
    sees another's dicts. Errors are not cached: a bad file raises its RuleError every time, exactly as
    without the cache."""
    from msdiag.rules import loader

    parse = loader._yaml_of
    parsed: dict[tuple[str, str], object] = {}

    def yaml_of(text: str, path: Path) -> object:
        key = (str(path), text)
        if key not in parsed:
            parsed[key] = parse(text, path)
        return _copy_tree(parsed[key], loader._Lines)

    # _yaml_of: what both parse a rule's text (a file read by _read_yaml, and a text the rules cache has not kept)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loader, "_yaml_of", yaml_of)
        yield


def _quick_loop(config: pytest.Config) -> bool:
    """``pytest -m "not slow"`` outside CI: the maintainer's quick loop."""
    return not os.environ.get("CI") and "not slow" in (config.option.markexpr or "")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The quick loop runs its tests in one process per core (pytest-xdist, ``-n auto --dist worksteal``) unless the
    command line says how many (``-n 0``: this process only; ``--pdb`` also keeps to one). The full run stays in one
    process: its live MindSpore jobs count the steps a capture records, which a test running beside them on the same
    cores could change. Runs before xdist's own hook, which turns "auto" into :func:`pytest_xdist_auto_num_workers`."""
    if (_quick_loop(config) and config.pluginmanager.hasplugin("xdist") and config.option.numprocesses is None
            and not os.environ.get("PYTEST_XDIST_WORKER")):
        config.option.numprocesses = "auto"
        config.option.dist = "worksteal"


@pytest.hookimpl(optionalhook=True)  # xdist's hook: without xdist installed, pytest must not call it unknown
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most four (each worker imports the package and collects the tests)."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def pytest_configure(config: pytest.Config) -> None:
    if _quick_loop(config):
        settings.load_profile("msdiag-quick")
    config.addinivalue_line("markers", "mindspore: needs MindSpore installed (capture tests)")
    config.addinivalue_line("markers", "slow: starts subprocesses, MindSpore jobs, a browser or a Dask cluster, or builds inputs of 100+ MB (pytest -m 'not slow')")
    config.addinivalue_line("markers", "dask: starts a local Dask cluster (skipped without Dask: pip install 'msdiag[cluster]')")
    config.addinivalue_line("markers", "hostile: issue 20's hostile-input cases (tests/test_hostile.py), each run in a bounded subprocess")
