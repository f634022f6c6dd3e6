"""Shared test fixtures: the read-only corpus beside the checkout, and the repository root."""

from __future__ import annotations

import os
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mindspore: needs MindSpore installed (capture tests)")
