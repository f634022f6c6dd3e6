"""Shared test fixtures: the read-only corpus beside the checkout, and the repository root."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session", autouse=True)
def _user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The CLI caches ranks in the user's cache folder by default: the tests' go to a temp folder."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MSDIAG_HOME", raising=False)
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mindspore: needs MindSpore installed (capture tests)")
    config.addinivalue_line("markers", "slow: starts subprocesses, MindSpore jobs, a browser or a Dask cluster, or builds inputs of 100+ MB (pytest -m 'not slow')")
    config.addinivalue_line("markers", "dask: starts a local Dask cluster (skipped without Dask: pip install 'msdiag[cluster]')")
    config.addinivalue_line("markers", "hostile: issue 20's hostile-input cases (tests/test_hostile.py), each run in a bounded subprocess")
