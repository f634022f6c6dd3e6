"""The median-step timeline marks the late arriver of each collective and the host synchronisations
(metrics/views.py ``Timeline.late`` / ``Timeline.syncs``, drawn by report/charts.py), on the real corpus.
Expected figures are read by hand from the raw files named in the comments.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from msdiag.analysis import Analysis
from msdiag.report import charts

LEVEL1 = "ascend/torchnpu-2rank-level1"
CPU_MSRUN = "mindspore-cpu/msrun_dp2_pynative"


def test_level1_late_arriver_of_the_first_allreduce(analysed: Callable[[str], Analysis]) -> None:
    # rank{0,1}_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json, step50: hcom_allReduce__586_0_1
    # "Start Timestamp(us)" rank 0 1736408883732241.5, rank 1 1736408883737849.5: rank 1 arrives
    # 5608 us = 5.608 ms after rank 0. The three later allreduces of the step start within 15 us on both.
    v = analysed(LEVEL1).views.timeline
    assert v.step == 50 and v.lanes is not None
    first = v.late[0]
    assert (first.rank, first.op) == (1, "hcom_allReduce__586_0_1")
    assert abs(first.late_us - 5608.0) < 1.0
    assert len(v.late) == 4 and all(m.late_us <= 15.0 for m in v.late[1:])
    # the marker sits where rank 1's communication lane begins: its arrival is the start of its op
    lane = next(x for x in v.lanes if x.rank == 1)
    assert np.min(np.abs(lane.communication[0] - first.at_us)) < 1.0


def test_level1_host_syncs_of_the_step(analysed: Callable[[str], Analysis]) -> None:
    # trace_view.json, inside ProfilerStep#50: rank 0 "aten::item" dur 91951.31 us, rank 1 dur 86111.70 us
    # (each holding aclrtSynchronizeStreamWithTimeout), plus short syncs of a few us to 7 ms. The host step
    # begins ~10 ms before the device step and both long syncs end a few hundred us after the device step
    # ends: the view clips them to the device window the lanes show, so they are a little shorter.
    v = analysed(LEVEL1).views.timeline
    assert sorted(v.syncs) == [0, 1]
    longest = {r: float(d.max()) for r, (_, d) in v.syncs.items()}
    assert 91_000.0 <= longest[0] <= 91_952.0 and 85_500.0 <= longest[1] <= 86_112.0
    for s, d in v.syncs.values():  # inside the step, from the rank's start of the step
        assert (s >= 0.0).all() and (s + d <= v.width_us + 1e-6).all()


def test_level1_chart_draws_the_marks(analysed: Callable[[str], Analysis]) -> None:
    ch = charts.step_timeline(analysed(LEVEL1))
    assert "rank 1 at hcom_allReduce__586_0_1, arrived 5.61 ms after the first" in ch.caption
    assert re.search(r"on rank 0, lasts 91\.\d+ ms", ch.caption)
    assert "late arriver of a collective" in ch.svg and "host-device synchronisation" in ch.svg


def test_no_marks_without_collectives_or_syncs(analysed: Callable[[str], Analysis]) -> None:
    # MindSpore CPU host collectives carry no host-sync events: no host lane, no hatched legend entry
    a = analysed(CPU_MSRUN)
    v = a.views.timeline
    assert not v.syncs
    ch = charts.step_timeline(a)
    assert "host-device synchronisation" not in ch.svg


def test_level1_timeline_is_the_same_drawn_twice(analysed: Callable[[str], Analysis]) -> None:
    """The quick loop's half of the determinism check below: in one process the marked timeline is drawn to the
    same bytes each time (the slow test adds two processes with different hash seeds, through the whole page)."""
    a = analysed(LEVEL1)
    first = charts.step_timeline(a).svg
    assert "late arriver of a collective" in first
    assert charts.step_timeline(a).svg == first


@pytest.mark.slow
def test_level1_report_is_deterministic(tmp_path: Path, corpus: Path) -> None:
    """Same input, same bytes with the marks drawn: two processes with different hash seeds."""
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"r{seed}.html"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-m", "msdiag.cli", "report", str(corpus / LEVEL1), "-o", str(out),
                            "--jobs", "1"], env=env, capture_output=True, text=True, check=False)  # fmt: skip
        assert r.returncode in (0, 1), r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert b"late arriver of a collective" in outs[0]
