"""Cluster views for the report: one row per rank, and the link bandwidth matrix, rank by rank.

Not metrics (a metric is one job-level figure): tables the report object carries as ``rank_table``
and ``link_heatmap`` so that a cluster of a thousand ranks can be read, sorted and drawn. Both are
built from what the metrics already computed (step rows, per-rank values) and from comm_links, in
time linear in ranks and links.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from msdiag.fmt import finite_float
from msdiag.metrics.balance import _stage_of
from msdiag.metrics.communication import DEFAULT_RANKS_PER_NODE, US_PER_MS, parallel_groups
from msdiag.metrics.registry import Value
from msdiag.model import Capture

RANK_TABLE_COLUMNS = [
    "rank", "node", "stage", "steps", "step_time_us", "computing_us", "communication_exposed_us", "free_us",
    "wait_ratio", "sync_ratio", "slow_rank_votes",
]  # fmt: skip
RANK_TABLE_DOC = (
    "Per rank: node (rank // ranks per node), pipeline stage (profiler_metadata.json, null when unknown), "
    "steps measured (warm-up left out), medians over those steps of step time, computing, exposed "
    "communication and free time (us), its communication wait and synchronization ratios, and its votes as "
    "the late arriver of collectives"
)
LINK_COLUMNS = ["src", "dst", "transport", "size_mb", "bandwidth_gbps"]




def rank_table(
    capture: Capture, steps: pd.DataFrame, metrics: Mapping[str, Value], ranks_per_node: int | None = None
) -> list[dict[str, Any]]:
    """One row per rank of the capture (RANK_TABLE_COLUMNS), in rank order."""
    rpn = int(ranks_per_node or DEFAULT_RANKS_PER_NODE)
    s = steps
    if len(s):
        keep = s["total_us"].notna() & (s["total_us"] > 0)
        if "warmup" in s.columns:
            keep &= ~s["warmup"].fillna(False)
        s = s[keep.to_numpy(bool)]
    cols = ["total_us", "computing_us", "communication_exposed_us", "free_us"]
    med = s.groupby("rank")[cols].median() if len(s) else pd.DataFrame(columns=cols)
    count = s.groupby("rank").size() if len(s) else pd.Series(dtype="int64")

    def per(mid: str) -> Mapping[int, Any]:
        v = metrics.get(mid)
        return v.per_rank if v is not None else {}

    wait, sync, votes = per("comm_wait_ratio"), per("comm_sync_ratio"), per("slow_rank_votes")
    rows = []
    for rd in sorted(capture.ranks, key=lambda r: r.rank):
        r = int(rd.rank)
        stage, _, _ = _stage_of(r, rd.info)
        m = med.loc[r] if r in med.index else None
        v = votes.get(r)
        rows.append(
            {
                "rank": r,
                "node": r // rpn,
                "stage": stage,
                "steps": int(count.get(r, 0)),
                "step_time_us": None if m is None else finite_float(m["total_us"]),
                "computing_us": None if m is None else finite_float(m["computing_us"]),
                "communication_exposed_us": None if m is None else finite_float(m["communication_exposed_us"]),
                "free_us": None if m is None else finite_float(m["free_us"]),
                "wait_ratio": finite_float(wait.get(r)),
                "sync_ratio": finite_float(sync.get(r)),
                "slow_rank_votes": None if v is None else int(v),
            }
        )
    return rows


def link_heatmap(capture: Capture) -> dict[str, Any]:
    """Bandwidth of every recorded link, per communication group, for a rank-by-rank heatmap.

    From comm_links of every rank: the "total" entries where an op type has them (top1 / middle /
    bottom repeat parts of it), otherwise every entry; on-chip LOCAL links left out. Per group and
    link (src, dst: group-local ranks; transport): size summed over the capture and bandwidth = sum
    size / sum time. Sparse rows [src, dst, transport, size_mb, bandwidth_gbps]: a thousand ranks
    with eight peers each is eight thousand rows, not a million cells. ``global_ranks``: the
    group's global rank ids in group-local order, where profiler_metadata.json gives them.
    """
    links = capture.table("comm_links")
    out: dict[str, Any] = {"columns": LINK_COLUMNS, "groups": []}
    if not len(links):
        return out
    k = ["rank", "step", "category", "op_type", "group"]
    is_total = (links["variant"] == "total").fillna(False).to_numpy(bool)
    has_total = links.assign(_t=is_total).groupby(k, dropna=False)["_t"].transform("any").to_numpy(bool)
    keep = links[~has_total | is_total]
    keep = keep[(keep["transport"] != "LOCAL").fillna(True).to_numpy(bool)]
    keep = keep[keep["src"].notna() & keep["dst"].notna() & keep["size_mb"].notna() & (keep["time_us"] > 0).fillna(False)]
    if not len(keep):
        return out
    keep = keep.assign(group=keep["group"].fillna(""), transport=keep["transport"].fillna(""))
    g = keep.groupby(["group", "src", "dst", "transport"], as_index=False, sort=True)[["size_mb", "time_us"]].sum()
    g["bandwidth_gbps"] = g["size_mb"] / (g["time_us"] / US_PER_MS)
    groups = parallel_groups(capture) or {}
    traffic = g.groupby("group")["size_mb"].sum().sort_values(ascending=False, kind="stable")
    for grp in traffic.index:
        p = g[g["group"] == grp]
        info = groups.get(str(grp)) or {}
        out["groups"].append(
            {
                "group": str(grp) or None,
                "group_name": info.get("group_name"),
                "global_ranks": info.get("global_ranks"),
                "rows": [
                    [int(a), int(b), str(t) or None, finite_float(sz), finite_float(bw)]
                    for a, b, t, sz, bw in zip(p["src"], p["dst"], p["transport"], p["size_mb"], p["bandwidth_gbps"])
                ],
            }
        )
    return out
