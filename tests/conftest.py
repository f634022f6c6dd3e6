"""Shared test fixtures: the read-only corpus beside the checkout, and the repository root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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
