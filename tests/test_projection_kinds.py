"""The step windows' removable kinds computed where a rank is reduced (metrics/reduce.py, table ``step_kinds``)
are what the analysis computes from the reduced rank itself (metrics/projection.py), to the bit.

Each capture is read with the full and with the shallow reduction; the projection's step sets read from the
kept table are compared with the ones computed in this process on the same reduced ranks, the table taken
away. No figure is written by hand: both sides come from the real corpus traces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from msdiag.analysis import _steps_for
from msdiag.ingest.loader import load
from msdiag.metrics.projection import StepSets, step_sets
from msdiag.metrics.reduce import reduce_id, reduce_rank, reduce_rank_shallow
from msdiag.metrics.registry import Context
from msdiag.model import STEP_KINDS_TABLE, Capture, RankData

#: Captures with a timeline, of the formats that have one: torch_npu text (level 0 and 1, with Python frames; an
#: older one with pipeline receives), its SQLite export, MindSpore on CPU (host ops; graph and pynative), MindSpore
#: Ascend legacy captures, a CANN msprof capture, and the project's own CPU sample (with dataset waits). Paths
#: under the corpus, or the repository's for sample_traces/.
CAPTURES = (
    "ascend/torchnpu-2rank-level0",
    "ascend/torchnpu-2rank-level1",
    "ascend/torchnpu-2rank-level1-db",
    "ascend/torchnpu-2rank-p2p-2024",
    "mindspore-cpu/legacy_Profiler_graph_mem",
    "mindspore-cpu/msrun_dp2_pynative",
    "mindspore-cpu/profile_schedule_pynative",
    "mindspore-legacy/single-rank",
    "mindspore-legacy/run_2",
    "cann-msprof/PROF_000001_20230818142704322_COJGGGCANRMICFBC",
    "sample_traces/train_small_cpu",
)

#: Of those, captures whose step rows come from their timeline (the others' from the profiler's step rows).
MEASURED = ("ascend/torchnpu-2rank-level0", "ascend/torchnpu-2rank-level1", "ascend/torchnpu-2rank-level1-db",
            "sample_traces/train_small_cpu")


def _sets(ranks: list[RankData], path: Path) -> list[StepSets]:
    cap = Capture(path=str(path), ranks=ranks)
    return step_sets(Context(capture=cap, steps=_steps_for(cap)[0]))


def _same(a: list[StepSets], b: list[StepSets]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x.rank, x.step, x.total_us, x.source) == (y.rank, y.step, y.total_us, y.source)
        assert list(x.kinds) == list(y.kinds)
        for k in x.kinds:
            for u, v in zip(x.kinds[k], y.kinds[k]):
                assert u.dtype == v.dtype and np.array_equal(u, v), (x.rank, x.step, k)


@pytest.mark.parametrize("reducer", [reduce_rank, reduce_rank_shallow], ids=["deep", "shallow"])
@pytest.mark.parametrize("capture", CAPTURES)
def test_kept_kinds_are_the_parents(corpus: Path, repo: Path, capture: str, reducer: Callable[[RankData], RankData]) -> None:
    path = (repo if capture.startswith("sample_traces/") else corpus) / capture
    cap = load(path, jobs=1, reduce=reducer)
    assert all(STEP_KINDS_TABLE.name in rd.tables for rd in cap.ranks)
    kept = _sets(cap.ranks, path)
    for rd in cap.ranks:  # the same reduced ranks without the table: computed here, as a rank read unreduced is
        del rd.tables[STEP_KINDS_TABLE.name]
    mine = _sets(cap.ranks, path)
    _same(kept, mine)
    if capture in MEASURED:  # steps from their timeline: the kinds were measured
        assert any(s.source == "timeline" and any(len(v[0]) for v in s.kinds.values()) for s in kept)
    if capture.startswith("sample_traces/"):  # dataset waits: the host idle time is not the idle time there
        assert any(len(s.kinds["data_wait"][0]) for s in kept)


def test_kept_kinds_survive_the_cache(corpus: Path, tmp_path: Path) -> None:
    # The table comes back from the rank cache as it was written (a warm read gives the same step sets).
    path = corpus / "ascend/torchnpu-2rank-level1"
    cache = tmp_path / "cache"
    cold = load(path, jobs=1, cache=cache, reduce=reduce_rank, reduce_id=reduce_id())
    warm = load(path, jobs=1, cache=cache, reduce=reduce_rank, reduce_id=reduce_id())
    stats: dict[str, Any] = warm.ingest["cache"]
    assert stats["hits"] == len(warm.ranks) == 2
    _same(_sets(cold.ranks, path), _sets(warm.ranks, path))
