"""What the analysis reads of a rank: the reduction applied to every rank before it is gathered.

A rank's tables are read where the rank is parsed (a pool worker, a Dask worker) and only what
the metrics and the report read is sent back, so that the memory of the process holding every rank
grows with the ops the analysis needs, not with the size of the traces. What is dropped, and why
no result changes (tests/test_cluster.py compares the report of corpus captures of every format
family with and without this reduction):

- timeline, lane ``host``: the step breakdown reads the host events whose names are dataset waits
  (``breakdown.DATA_WAIT_PATTERN``), whole; every other host event is read only by its name
  (``memory._recompute_on`` looks at distinct names): one row per distinct name is kept. On a
  torch_npu trace with Python call stacks these are most of the timeline.
- timeline, lane ``scope``: read only by distinct name (recompute evidence): one row per name.
- timeline, lane ``overlap``: the profiler's own Overlap Analysis lanes; msdiag computes the overlap
  itself from the device lanes and reads these nowhere.
- counters: only the tracks a metric reads (``hardware.AICORE_FREQ_TRACK``); the sampled PMU, QoS,
  HBM and LLC tracks are about half the rows of an Ascend trace.

A metric or chart that starts reading more of these tables must widen this reduction in the same
change (``REDUCE_VERSION`` too, so that cached ranks are rebuilt).

The rank's step breakdown (``breakdown.step_breakdown``, the per-rank part of the analysis) is
computed here too, before anything is dropped, and kept as the rank's ``steps`` table: it is then
computed on the workers, in parallel, and read back from the cache with the rank.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msdiag.metrics.breakdown import DATA_WAIT_PATTERN, step_breakdown
from msdiag.metrics.hardware import AICORE_FREQ_TRACK
from msdiag.model import RankData

#: Bumped whenever the reduction keeps less or more: part of the cache key.
REDUCE_VERSION = 2
#: Counter tracks some metric reads.
COUNTER_TRACKS = (AICORE_FREQ_TRACK,)
#: Timeline lanes read only by distinct event name.
NAME_ONLY_LANES = ("scope",)
#: Timeline lanes nothing reads.
UNREAD_LANES = ("overlap",)


def reduce_rank(rd: RankData) -> RankData:
    """Store the rank's step rows, then drop the rows no metric or chart reads (module doc); returns ``rd``."""
    rd.tables["steps"] = step_breakdown(rd)
    tl = rd.tables.get("timeline")
    if tl is not None and len(tl):
        rd.tables["timeline"] = _reduce_timeline(tl)
    c = rd.tables.get("counters")
    if c is not None and len(c):
        keep = c["track"].isin(COUNTER_TRACKS).fillna(False).to_numpy(bool)
        if not keep.all():
            rd.tables["counters"] = c[keep].reset_index(drop=True)
    return rd


def _reduce_timeline(tl: pd.DataFrame) -> pd.DataFrame:
    lane = tl["lane"].to_numpy(dtype=object, na_value="")
    keep = ~np.isin(lane, UNREAD_LANES + NAME_ONLY_LANES + ("host",))
    names = tl["name"]
    for which in NAME_ONLY_LANES + ("host",):
        m = lane == which
        if not m.any():
            continue
        sub = names[m]
        first = ~sub.duplicated(keep="first").to_numpy(bool)
        if which == "host":
            # the distinct names are few: match them, not every event
            distinct = pd.Series(sub.dropna().unique()).astype("string")
            waits = set(distinct[distinct.str.contains(DATA_WAIT_PATTERN, regex=True, na=False)])
            first |= sub.isin(waits).fillna(False).to_numpy(bool)
        idx = np.flatnonzero(m)
        keep[idx[first]] = True
    if keep.all():
        return tl
    return tl[keep].reset_index(drop=True)
