"""Communication metrics: where collectives spend their time, how fast each transport moves data,
which rank arrives late, which link is slow, and how communication groups sit on nodes.

Sources: HCCL's own analysis (communication.json -> comm_ops and comm_transport;
communication_matrix.json -> comm_links), the communication kernels when communication.json is
absent (slow rank only), and profiler_metadata.json's parallel_group_info (group names and ranks).

Times in communication.json, per op: Elapse = Transit + Wait + Idle; Synchronization is the part of
Wait spent waiting for the peers to arrive (the first notify wait). A figure the capture cannot give
is null with the reason, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from msdiag.metrics.registry import Context, Value, metric, nan_sum, rank_rows
from msdiag.model import ABSENT, FAILED, Capture
from msdiag.options import TRANSPORTS
from msdiag.units import US_PER_MS

# ---- constants --------------------------------------------------------------------------------

#: Transports communication.json reports: TRANSPORTS, defined in msdiag/options.py (which checks the
#: bandwidth_norms option). SDMA aggregates the on-node transports (in the corpus it repeats HCCS
#: exactly), so transports are never added together.

#: Standard bandwidth (GB/s) of a transport, the norm a measured bandwidth is compared with.
#: CANN msprof's cluster analysis rules (chip V2 standard): RDMA 12.5, HCCS 18, PCIe 20
#: (see shared/docs/anchors.md, "CANN msprof's own cluster rules"). The same rules give chip V4:
#: RDMA 25, HCCS 28 (BANDWIDTH_NORMS_V4_GBPS); which products the chip ids are is unconfirmed, so V2
#: is the default. Override with the bandwidth_norms option (--bandwidth-norm HCCS=28, or
#: [tool.msdiag.bandwidth_norms] in a config): the transports named replace the defaults; the others keep them.
BANDWIDTH_NORMS_GBPS: dict[str, float] = {"HCCS": 18.0, "RDMA": 12.5, "PCIE": 20.0}
BANDWIDTH_NORMS_V4_GBPS: dict[str, float] = {"HCCS": 28.0, "RDMA": 25.0}

#: CANN msprof: a link is slow when its bandwidth is below 0.8 of its transport's standard. The cut is
#: the rule's parameter (rules/comm-slow-link.yaml), read through the options: one home, so that
#: ``--set comm-slow-link.min_utilization=X`` moves the metric and the rule together.
SLOW_LINK_PARAM = "comm-slow-link.min_utilization"
#: A link or transport that moved less than this (MB, summed over the capture) is latency-bound:
#: its bandwidth is reported but not judged against the standard (a 4-byte AllReduce "runs" at
#: 0.004 GB/s in the corpus).
MIN_JUDGED_MB = 1.0

#: Large-packet size (MB) per transport, as CANN msprof computes Large Packet Ratio: the share of
#: packets above it (shared/docs/formats.md). msprof-analyze's packet check uses other cut-offs
#: (SDMA under 16 MB, RDMA under 1 MB, by op count); msdiag uses these, the ones the ratio in
#: communication.json is built on.
LARGE_PACKET_MB: dict[str, float] = {"HCCS": 32.0, "PCIE": 32.0, "SIO": 32.0, "RDMA": 0.5}

#: Dixon's Q (r10) critical values at 95% confidence, n = 3..100, for the statistic
#: gap / range at the suspect end. n = 3..30: Rorabacher, D. B. (1991), "Statistical treatment for
#: rejection of deviant values: critical values of Dixon's Q parameter and related subrange ratios
#: at the 95% confidence level", Analytical Chemistry 63(2), 139-146 (Q95 column). n = 31..100:
#: Monte Carlo quantiles in the same sense (10^6 standard-normal samples per n, numpy
#: default_rng(20240601), 0.95 quantile of max(x2-x1, xn-x(n-1)) / (xn-x1)), the method of Verma &
#: Quiroz-Ruiz (2006), Revista Mexicana de Ciencias Geologicas 23(2), 133-161, who tabulate up to
#: n = 100; the same simulation reproduces Rorabacher's n = 3..30 values within 0.002. Applied to
#: the low end only, the test is one-sided at about 97.5%: a vote needs a clear outlier.
DIXON_Q95: dict[int, float] = {
    3: 0.970, 4: 0.829, 5: 0.710, 6: 0.625, 7: 0.568, 8: 0.526, 9: 0.493, 10: 0.466,
    11: 0.444, 12: 0.426, 13: 0.410, 14: 0.396, 15: 0.384, 16: 0.374, 17: 0.365, 18: 0.356,
    19: 0.349, 20: 0.342, 21: 0.337, 22: 0.331, 23: 0.326, 24: 0.321, 25: 0.317, 26: 0.312,
    27: 0.308, 28: 0.305, 29: 0.301, 30: 0.298, 31: 0.295, 32: 0.292, 33: 0.289, 34: 0.286,
    35: 0.284, 36: 0.281, 37: 0.279, 38: 0.277, 39: 0.275, 40: 0.273, 41: 0.271, 42: 0.269,
    43: 0.267, 44: 0.265, 45: 0.263, 46: 0.262, 47: 0.261, 48: 0.258, 49: 0.257, 50: 0.255,
    51: 0.254, 52: 0.253, 53: 0.252, 54: 0.250, 55: 0.249, 56: 0.248, 57: 0.247, 58: 0.246,
    59: 0.245, 60: 0.244, 61: 0.243, 62: 0.241, 63: 0.240, 64: 0.240, 65: 0.238, 66: 0.237,
    67: 0.237, 68: 0.235, 69: 0.235, 70: 0.234, 71: 0.233, 72: 0.232, 73: 0.231, 74: 0.231,
    75: 0.230, 76: 0.229, 77: 0.229, 78: 0.228, 79: 0.227, 80: 0.227, 81: 0.226, 82: 0.225,
    83: 0.224, 84: 0.224, 85: 0.223, 86: 0.222, 87: 0.222, 88: 0.221, 89: 0.221, 90: 0.220,
    91: 0.219, 92: 0.219, 93: 0.219, 94: 0.218, 95: 0.218, 96: 0.217, 97: 0.216, 98: 0.216,
    99: 0.215, 100: 0.215,
}  # fmt: skip
DIXON_MAX_N = 100
#: Beyond DIXON_MAX_N ranks: a value more than 3 standard deviations below the mean is an outlier
#: (msprof-analyze's slow_rank recipe does the same).
SIGMA_LIMIT = 3.0

#: A late arrival shorter than this share of the op's median elapse is scheduling jitter, not a
#: slow rank (3 or more ranks).
MIN_LATE_SHARE = 0.05
#: Two ranks: the early rank waited (synchronization) for more than this share of its active time
#: (transit + wait; idle is excluded: it is time neither moving data nor waiting for a peer) ...
SYNC_LARGE_SHARE = 0.2
#: ... while the late rank's synchronization is at most this fraction of the early rank's.
SYNC_NEAR_ZERO = 0.1
#: Two ranks without synchronization times (communication kernels only): the shorter op is the
#: late arriver when the two elapses differ by more than this share of the longer one.
ELAPSE_GAP_SHARE = 0.2

#: Ranks per node when the options do not say (8 NPUs per Ascend server).
DEFAULT_RANKS_PER_NODE = 8

_P2P_NAME = r"(?i)send|receive|recv"
_TIME_COLS = ("elapse_us", "transit_us", "wait_us", "sync_us", "idle_us")


# ---- shared helpers ---------------------------------------------------------------------------


def _missing(capture: Capture, source: str) -> str:
    """Why a communication source gave no rows, from the sources the loader recorded."""
    srcs = [s for s in capture.sources if s.name == source]
    failed = [s for s in srcs if s.status == FAILED]
    if failed:
        ranks = ", ".join(str(s.rank) for s in failed)
        return f"{source} could not be read on rank {ranks}: {failed[0].reason}"
    absent = [s for s in srcs if s.status == ABSENT]
    if srcs and len(absent) == len(srcs):
        return f"{source} absent ({absent[0].reason})" if absent[0].reason else f"{source} absent"
    if srcs:
        return f"{source} lists no communication op"
    if capture.ranks and all(rd.family == "mindspore_cpu" for rd in capture.ranks):
        return f"{source} absent (MindSpore on CPU writes no HCCL communication analysis)"
    return f"{source} absent (profiler Level0?)"


def _floats(s: pd.Series) -> np.ndarray:
    return s.to_numpy(dtype=float, na_value=np.nan)


def _option_norms(ctx: Context) -> dict[str, float]:
    """The bandwidth norms: the defaults, with the option bandwidth_norms laid over them."""
    return {**BANDWIDTH_NORMS_GBPS, **ctx.options.bandwidth_norms}


def _ranks_per_node(ctx: Context) -> int:
    rpn = ctx.options.ranks_per_node
    return DEFAULT_RANKS_PER_NODE if rpn is None else rpn


# ---- time split of collectives ----------------------------------------------------------------


def _time_ratio(num: Sequence[str], den: Sequence[str], what: str) -> Callable[[Context], Value]:
    """sum(num columns) / sum(den columns) over all ops (rows missing a column are left out)."""

    def fn(ctx: Context) -> Value:
        ops = ctx.capture.table("comm_ops")
        if not len(ops):
            return Value(None, reason=_missing(ctx.capture, "communication.json"))
        cols = list(dict.fromkeys([*num, *den]))
        ops = ops.dropna(subset=cols)
        if not len(ops):
            return Value(None, reason=f"communication.json gives no {' / '.join(cols)} for any op")

        def ratio(df: pd.DataFrame) -> float | None:
            d = float(sum(df[c].sum() for c in den))
            return float(sum(df[c].sum() for c in num)) / d if d > 0 else None

        # per rank on arrays: each column summed over the rank's rows in order (np.nansum: pandas' sum), the
        # columns added in the same order as ratio() adds them
        col = {c: _floats(ops[c]) for c in cols}
        per: dict[int, float | None] = {}
        for r, rows in rank_rows(ops):
            d = float(sum(nan_sum(col[c][rows]) for c in den))
            per[r] = float(sum(nan_sum(col[c][rows]) for c in num)) / d if d > 0 else None
        job = ratio(ops)
        if job is None:
            return Value(None, per, reason=f"{what}: the denominator is zero in every op")
        return Value(job, per)

    return fn


for _id, _num, _den, _doc in (
    ("comm_wait_ratio", ("wait_us",), ("wait_us", "transit_us"),
     "Wait / (wait + transit) over all communication ops: time in notify waits against time moving data"),
    ("comm_sync_ratio", ("sync_us",), ("sync_us", "transit_us"),
     "Synchronization / (synchronization + transit) over all communication ops: waiting for late peers"),
    ("comm_idle_share", ("idle_us",), ("elapse_us",),
     "Idle / elapse over all communication ops: time inside collectives neither moving data nor waiting "
     "(launched long before its inputs are ready, or stalled by the host)"),
    ("comm_transit_share", ("transit_us",), ("elapse_us",),
     "Transit / elapse over all communication ops: the share of collective time spent moving data"),
    ("sync_wait_share", ("sync_us",), ("elapse_us",),
     "Synchronization / elapse over all communication ops: the share of collective time waiting for late ranks"),
):  # fmt: skip
    metric(_id, "ratio", _doc, "communication.json (Communication Time Info)")(_time_ratio(_num, _den, _id))


# ---- bandwidth per transport -----------------------------------------------------------------


def transport_bandwidth(capture: Capture) -> pd.DataFrame:
    """Per rank and transport: size_mb, time_us and bandwidth_gbps = sum size / sum time over ops."""
    tr = capture.table("comm_transport")
    tr = tr[tr["size_mb"].notna() & tr["time_us"].notna() & (tr["time_us"] > 0)]
    cols = ["rank", "transport", "size_mb", "time_us", "bandwidth_gbps"]
    if not len(tr):
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    g = tr.groupby(["rank", "transport"], as_index=False)[["size_mb", "time_us"]].sum()
    g["bandwidth_gbps"] = g["size_mb"] / (g["time_us"] / US_PER_MS)
    return g[cols]


def _transport_bandwidth(ctx: Context) -> pd.DataFrame:
    """:func:`transport_bandwidth` of the analysis' capture, once (a metric per transport and the utilization read it)."""
    return ctx.once("communication.transport_bandwidth", lambda: transport_bandwidth(ctx.capture))


def _no_transport(ctx: Context) -> str | None:
    if len(ctx.capture.table("comm_transport")):
        return None
    if len(ctx.capture.table("comm_ops")):
        return "communication.json gives no bandwidth info for any op"
    return _missing(ctx.capture, "communication.json")


def _bandwidth(transport: str) -> Callable[[Context], Value]:
    def fn(ctx: Context) -> Value:
        why = _no_transport(ctx)
        if why:
            return Value(None, reason=why)
        bw = _transport_bandwidth(ctx)
        bw = bw[bw["transport"] == transport]
        if not len(bw):
            return Value(None, reason=f"no {transport} traffic in communication.json")
        per = {int(r): float(v) for r, v in zip(bw["rank"], bw["bandwidth_gbps"])}
        return Value(float(np.median(list(per.values()))), per)

    return fn


for _t in TRANSPORTS:
    metric(
        f"bandwidth_{_t.lower()}_gbps",
        "GB/s",
        f"{_t} bandwidth: sum of transit size / sum of transit time over a rank's ops, median over ranks",
        f"communication.json (Communication Bandwidth Info, {_t})",
    )(_bandwidth(_t))


def _utilization(ctx: Context) -> pd.DataFrame:
    """transport_bandwidth rows of transports with a norm, with norm_gbps and utilization."""
    norms = _option_norms(ctx)
    bw = _transport_bandwidth(ctx)
    bw = bw[bw["transport"].isin(list(norms)) & (bw["size_mb"] >= MIN_JUDGED_MB)].copy()
    bw["norm_gbps"] = [norms[str(t)] for t in bw["transport"]]
    bw["utilization"] = bw["bandwidth_gbps"] / bw["norm_gbps"]
    return bw.sort_values(["utilization", "rank"], kind="stable")


def _utilization_value(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    """The utilization rows (:func:`_utilization`) or why there are none; once per analysis (two metrics read them)."""
    return ctx.once("communication.utilization", lambda: _utilization_rows(ctx))


def _utilization_rows(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    why = _no_transport(ctx)
    if why:
        return None, why
    u = _utilization(ctx)
    if not len(u):
        norms = ", ".join(sorted(_option_norms(ctx)))
        return None, f"no transport with a standard bandwidth ({norms}) moved {MIN_JUDGED_MB:g} MB or more"
    return u, None


@metric(
    "bandwidth_utilization_min",
    "ratio",
    "Lowest bandwidth / standard bandwidth over transports and ranks (standards: HCCS 18, RDMA 12.5, "
    "PCIE 20 GB/s, CANN msprof chip V2; option bandwidth_norms overrides)",
    "communication.json (Communication Bandwidth Info)",
    given=_utilization_value,
)
def _utilization_min(ctx: Context, u: pd.DataFrame) -> Value:
    per = {int(r): float(v) for r, v in u.groupby("rank")["utilization"].min().items()}  # each rank's Series.min
    return Value(float(u["utilization"].iloc[0]), per)


@metric(
    "slow_transport",
    "transport",
    "The transport with the lowest bandwidth utilization (see bandwidth_utilization_min); per rank: its utilization",
    "communication.json (Communication Bandwidth Info)",
    given=_utilization_value,
)
def _slow_transport(ctx: Context, u: pd.DataFrame) -> Value:
    t = str(u["transport"].iloc[0])
    mine = u[u["transport"] == t]
    return Value(t, {int(r): float(v) for r, v in sorted(zip(mine["rank"], mine["utilization"]))})


# ---- packets ----------------------------------------------------------------------------------


def _packet_rows(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    """comm_transport rows that carry a Size Distribution (SDMA has none: its ratio is always 0)."""
    why = _no_transport(ctx)
    if why:
        return None, why
    tr = ctx.capture.table("comm_transport")
    tr = tr[tr["packets"].notna() & (tr["packets"] > 0) & tr["large_packet_ratio"].notna() & (tr["time_us"] > 0)]
    if not len(tr):
        return None, "communication.json gives no packet size distribution for any op"
    return tr, None


def _weighted(lpr: np.ndarray, t: np.ndarray) -> float:
    """The large-packet ratios ``lpr`` weighted by the transit times ``t``."""
    return float((lpr * t).sum() / t.sum())


@metric(
    "large_packet_ratio_min",
    "ratio",
    "Lowest large-packet ratio over transports and ranks, each the op ratios weighted by transit time "
    "(large: over 32 MB on HCCS/PCIE/SIO, over 0.5 MB on RDMA)",
    "communication.json (Large Packet Ratio)",
    given=_packet_rows,
)
def _lpr_min(ctx: Context, tr: pd.DataFrame) -> Value:
    # per rank and transport (the groups of tr.groupby(["rank", "transport"]): ranks ascending, transports sorted, no
    # null key) on arrays: each group's rows in their order, the sums of the same values
    lpr, t = _floats(tr["large_packet_ratio"]), _floats(tr["time_us"])
    transport = tr["transport"].to_numpy(object)
    per_rt: dict[tuple[int, str], float] = {}
    for r, rows in rank_rows(tr):
        names = transport[rows]
        known = ~pd.isna(names)
        for name in sorted(set(names[known])):
            sub = rows[known & (names == name)]
            per_rt[(r, str(name))] = _weighted(lpr[sub], t[sub])
    per: dict[int, float | None] = {}
    for (r, _), v in per_rt.items():
        per[r] = v if per.get(r) is None else min(v, per[r])  # type: ignore[type-var]
    return Value(min(per_rt.values()), per)


@metric(
    "small_packet_share",
    "ratio",
    "Share of transit time in small packets (at or under 32 MB on HCCS/PCIE/SIO, 0.5 MB on RDMA), "
    "estimated per op as (1 - large-packet ratio) x transit time: the canonical table keeps packet "
    "counts, not the Size Distribution's time per size",
    "communication.json (Large Packet Ratio)",
    given=_packet_rows,
)
def _small_share(ctx: Context, tr: pd.DataFrame) -> Value:
    # per rank on arrays: 1 - the weighted ratio of the rank's rows (the same values, in order)
    lpr, t = _floats(tr["large_packet_ratio"]), _floats(tr["time_us"])
    per: dict[int, float | None] = {r: 1.0 - _weighted(lpr[rows], t[rows]) for r, rows in rank_rows(tr)}
    return Value(1.0 - _weighted(lpr, t), per)  # (the job's: every row, the arrays read once)


# ---- slow rank ---------------------------------------------------------------------------------


def dixon_q_low(values: Sequence[float]) -> int | None:
    """Index of the smallest value if Dixon's Q test (95%, DIXON_Q95) rejects it as an outlier.

    Q = (x2 - x1) / (xn - x1) on the sorted values, for 3 <= n <= 100. None when the test does not
    reject, when n is outside the table, or when all values are equal.
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n not in DIXON_Q95 or np.isnan(x).any():
        return None
    order = np.argsort(x, kind="stable")
    s = x[order]
    span = s[-1] - s[0]
    if not span > 0:
        return None
    q = (s[1] - s[0]) / span
    return int(order[0]) if q > DIXON_Q95[n] else None


def sigma_low(values: Sequence[float], limit: float = SIGMA_LIMIT) -> int | None:
    """Index of the smallest value if it lies more than ``limit`` standard deviations below the mean."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2 or np.isnan(x).any():
        return None
    i = int(np.argmin(x))
    sd = float(x.std())
    return i if sd > 0 and x[i] < x.mean() - limit * sd else None


def outlier_low(values: Sequence[float]) -> int | None:
    """The outlier-short value: Dixon's Q test for 3..100 values, 3 sigma beyond, None below 3."""
    n = len(values)
    if n < 3:
        return None
    return dixon_q_low(values) if n <= DIXON_MAX_N else sigma_low(values)


_INSTANCE_COLS = {
    "step": "Int64",
    "group": "string",
    "op_name": "string",
    "occurrence": "Int64",
    "n": "Int64",
    "method": "string",
    "late_rank": "Int64",
    "statistic": "float64",
    "late_us": "float64",
    "source": "string",
}


def collective_rows(capture: Capture) -> tuple[pd.DataFrame, str]:
    """One row per rank and collective op instance: (rank, key..., start_us, elapse_us, sync/transit/wait_us),
    and the table they come from (comm_ops, else the communication kernels). Also read by metrics/collectives.py."""
    ops = capture.table("comm_ops")
    if len(ops):
        ops = ops[ops["category"].fillna("collective") != "p2p"]
        ops = ops.sort_values(["rank", "start_us"], kind="stable")
        ops = ops.assign(occurrence=ops.groupby(["rank", "step", "group", "op_name"], dropna=False).cumcount())
        return ops[["rank", "step", "group", "op_name", "occurrence", "start_us", *_TIME_COLS]], "comm_ops"
    k = capture.table("kernels")
    k = k[(k["kind"] == "communication") & k["name"].notna() & k["dur_us"].notna()]
    k = k[~k["name"].str.contains(_P2P_NAME, regex=True)]
    k = k.sort_values(["rank", "start_us"], kind="stable")
    k = k.assign(
        occurrence=k.groupby(["rank", "step", "name"], dropna=False).cumcount(),
        group=pd.Series(pd.NA, index=k.index, dtype="string"),
        op_name=k["name"],
        elapse_us=k["dur_us"],
    )
    for c in _TIME_COLS[1:]:
        k[c] = np.nan
    return k[["rank", "step", "group", "op_name", "occurrence", "start_us", *_TIME_COLS]], "kernels"


def _two_ranks(g: pd.DataFrame) -> tuple[str, int | None, float, float]:
    """(method, late row index 0/1 or None, statistic, late_us) for an op seen on two ranks."""
    el = _floats(g["elapse_us"])
    sync = _floats(g["sync_us"])
    active = _floats(g["transit_us"]) + _floats(g["wait_us"])
    if not (np.isnan(sync).any() or np.isnan(active).any()):
        for w, late in ((0, 1), (1, 0)):
            share = sync[w] / active[w] if active[w] > 0 else 0.0
            if share > SYNC_LARGE_SHARE and sync[late] <= SYNC_NEAR_ZERO * sync[w] and el[late] < el[w]:
                return "sync", late, float(share), float(sync[w])
        w = int(np.argmax(sync))
        return "sync", None, float(sync[w] / active[w]) if active[w] > 0 else 0.0, 0.0
    if np.isnan(el).any():
        return "elapse", None, float("nan"), 0.0
    long_, short = (0, 1) if el[0] >= el[1] else (1, 0)
    gap = el[long_] - el[short]
    share = gap / el[long_] if el[long_] > 0 else 0.0
    return "elapse", (short if share > ELAPSE_GAP_SHARE else None), float(share), float(gap)


def cached_collective_rows(ctx: Context) -> tuple[pd.DataFrame, str]:
    """:func:`collective_rows` of the analysis' capture, once (the slow-rank vote and metrics/collectives.py read them)."""
    return ctx.once("communication.collective_rows", lambda: collective_rows(ctx.capture))


def late_arrivals(capture: Capture, rows_source: tuple[pd.DataFrame, str] | None = None) -> pd.DataFrame:
    """Every collective op instance seen on two or more ranks, with its late arriver (or none).

    Instances match by step, group, op name and occurrence across ranks in comm_ops (p2p ops left
    out: a send and its receive are not one collective); without communication.json, by step, name
    and order among the communication kernels. The late arriver is the rank everyone else waited for:
    its op is outlier-short (Dixon's Q test for 3..100 ranks, 3 sigma beyond, and at least
    MIN_LATE_SHARE of the median elapse). Two ranks: the rank with near-zero synchronization while
    the other's exceeds SYNC_LARGE_SHARE of its transit + wait; without synchronization times, the
    shorter op when the elapses differ by more than ELAPSE_GAP_SHARE. Columns: step, group, op_name,
    occurrence, n, method, late_rank, statistic (Q, z, or the sync / gap share), late_us (how long the
    others waited), source. ``rows_source``: :func:`collective_rows` of the capture when the caller has them.
    """
    rows, source = collective_rows(capture) if rows_source is None else rows_source
    out: list[dict[str, Any]] = []
    keys = ["step", "group", "op_name", "occurrence"]
    # each rank's first row of an instance, and only instances seen on two or more ranks: the loop
    # visits only what it compares (one rank's million host ops cost one vectorised pass, not minutes)
    rows = rows.drop_duplicates([*keys, "rank"])
    rows = rows[rows.groupby(keys, dropna=False)["rank"].transform("size").to_numpy() >= 2]
    for key, g in rows.groupby(keys, dropna=False, sort=True):
        n = len(g)
        if n < 2:
            continue
        ranks = [int(r) for r in g["rank"]]
        el = _floats(g["elapse_us"])
        late: int | None = None
        if n == 2:
            method, idx, stat, late_us = _two_ranks(g)
            late = None if idx is None else ranks[idx]
        else:
            method = "dixon_q" if n <= DIXON_MAX_N else "3sigma"
            s = np.sort(el)
            late_us = float(s[1] - s[0]) if not np.isnan(s[:2]).any() else 0.0
            if n <= DIXON_MAX_N:
                stat = float(late_us / (s[-1] - s[0])) if s[-1] > s[0] else 0.0
            else:
                sd = float(np.nanstd(el))
                stat = float((np.nanmean(el) - s[0]) / sd) if sd > 0 else 0.0
            i = outlier_low(list(el))
            if i is not None and late_us >= MIN_LATE_SHARE * float(np.median(el)):
                late = ranks[i]
        out.append(
            dict(zip(keys, key), n=n, method=method, late_rank=late, statistic=stat, late_us=late_us, source=source)
        )
    if not out:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in _INSTANCE_COLS.items()})
    df = pd.DataFrame(out, columns=list(_INSTANCE_COLS))
    return df.astype(_INSTANCE_COLS)


def slow_rank_verdict(
    instances: pd.DataFrame, ranks: Sequence[int] = ()
) -> tuple[int | None, dict[int, int], str | None]:
    """(slow rank or None, votes per rank, why none): vote the late arrivers of ``late_arrivals``.

    The most-voted rank is the slow rank when it holds a strict majority of the votes cast and at
    least 2 votes; with two ranks, 1 vote is enough when it covers more than half the ops compared.
    """
    votes = {int(r): 0 for r in ranks}
    for r in instances["late_rank"].dropna():
        votes[int(r)] = votes.get(int(r), 0) + 1
    compared = len(instances)
    cast = sum(votes.values())
    if not compared:
        return None, votes, "no collective op was seen on two or more ranks"
    if not cast:
        return None, votes, f"no late arriver in the {compared} collective op instances compared"
    ranked = sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))
    top, top_votes = ranked[0]
    tally = ", ".join(f"rank {r}: {v}" for r, v in ranked if v)
    if len(ranked) > 1 and ranked[1][1] == top_votes:
        return None, votes, f"no rank stands out: votes tied ({tally}) over {compared} op instances"
    two = instances[instances["n"] == 2]
    two_votes = int((two["late_rank"] == top).sum()) if len(two) else 0
    if top_votes * 2 <= cast:
        return None, votes, f"no rank holds a majority of the {cast} votes ({tally})"
    if top_votes >= 2 or (len(two) and two_votes * 2 > len(two)):
        return top, votes, None
    return None, votes, (
        f"no rank stands out: rank {top} arrived late in {top_votes} of {compared} op instances compared "
        "(needs 2 votes, or with two ranks more than half of the ops)"
    )


def _slow_rank_data(ctx: Context) -> tuple[pd.DataFrame, int | None, dict[int, int], str | None]:
    """(late-arrival instances, slow rank, votes, why none), once per analysis (slow_rank and its votes read it)."""
    return ctx.once("communication.slow_rank", lambda: _slow_rank_vote(ctx))


def _slow_rank_vote(ctx: Context) -> tuple[pd.DataFrame, int | None, dict[int, int], str | None]:
    inst = late_arrivals(ctx.capture, cached_collective_rows(ctx))
    if not len(inst):
        has_ops = len(ctx.capture.table("comm_ops")) > 0
        k = ctx.capture.table("kernels")
        has_k = bool((k["kind"] == "communication").any()) if len(k) else False
        why: str | None
        if len(ctx.capture.ranks) < 2:
            why = "a single rank: no other rank to compare with"
        elif not has_ops and not has_k:
            why = f"no communication op ({_missing(ctx.capture, 'communication.json')}; no communication kernels)"
        else:
            why = "no collective op was seen on two or more ranks"
        return inst, None, {}, why
    slow, votes, why = slow_rank_verdict(inst, ctx.capture.rank_ids())
    return inst, slow, votes, why


_SLOW_RANK_SOURCE = "communication.json (elapse, synchronization); communication kernels without it"


@metric(
    "slow_rank",
    "rank",
    "The rank the others wait for: voted late arriver over collective op instances (Dixon's Q, 3 sigma "
    "over 100 ranks, synchronization with two); per rank: votes; null when no rank stands out",
    _SLOW_RANK_SOURCE,
)
def _slow_rank(ctx: Context) -> Value:
    inst, slow, votes, why = _slow_rank_data(ctx)
    per = {r: float(v) for r, v in votes.items()}
    # votes were cast over matched instances: a null is "no rank stands out", a negative result
    return Value(slow, per, reason=why if slow is None else None, checked=slow is None and len(inst) > 0)


@metric(
    "slow_rank_votes",
    "votes",
    "Votes of the most-voted late arriver (the slow rank when one is named); per rank: votes",
    _SLOW_RANK_SOURCE,
)
def _slow_rank_votes(ctx: Context) -> Value:
    inst, slow, votes, why = _slow_rank_data(ctx)
    if not len(inst):
        return Value(None, reason=why)
    return Value(max(votes.values(), default=0), {r: float(v) for r, v in votes.items()})


# ---- slow link ---------------------------------------------------------------------------------


def link_bandwidth(capture: Capture, norms: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Per rank, group and link (src-dst, transport): sum size / sum time, against its transport's norm.

    From comm_links: the "total" variant where an op type has one (top1/middle/bottom repeat parts
    of it), otherwise every entry (older files list one entry per op). LOCAL (on-chip) links,
    transports without a norm and links that moved under MIN_JUDGED_MB are left out. Columns: rank,
    group, src, dst, transport, size_mb, time_us, bandwidth_gbps, norm_gbps, ratio (bandwidth /
    norm), sorted by ratio.
    """
    norms = dict(BANDWIDTH_NORMS_GBPS if norms is None else norms)
    links = capture.table("comm_links")
    cols = ["rank", "group", "src", "dst", "transport", "size_mb", "time_us", "bandwidth_gbps", "norm_gbps", "ratio"]
    if not len(links):
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    k = ["rank", "step", "category", "op_type", "group"]
    has_total = links.assign(_t=links["variant"] == "total").groupby(k, dropna=False)["_t"].transform("any")
    keep = links[(~has_total.astype(bool)) | (links["variant"] == "total")]
    keep = keep[keep["transport"].isin(list(norms)) & keep["size_mb"].notna() & (keep["time_us"] > 0)]
    if not len(keep):
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    g = keep.groupby(["rank", "group", "src", "dst", "transport"], as_index=False, dropna=False)[
        ["size_mb", "time_us"]
    ].sum()
    g = g[g["size_mb"] >= MIN_JUDGED_MB].copy()
    g["bandwidth_gbps"] = g["size_mb"] / (g["time_us"] / US_PER_MS)
    g["norm_gbps"] = [norms[str(t)] for t in g["transport"]]
    g["ratio"] = g["bandwidth_gbps"] / g["norm_gbps"]
    return g.sort_values(["ratio", "rank", "src", "dst"], kind="stable").reset_index(drop=True)[cols]


def _slowest_link(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    """The links against their standards, slowest first (:func:`link_bandwidth` with the option's norms), or why
    there are none; once per analysis (the slow-link metrics and the link view read them)."""
    return ctx.once("communication.slowest_link", lambda: _links_against_norms(ctx))


def _links_against_norms(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    links = ctx.capture.table("comm_links")
    if not len(links):
        return None, _missing(ctx.capture, "communication_matrix.json")
    lb = link_bandwidth(ctx.capture, _option_norms(ctx))
    if not len(lb):
        return None, (
            f"no link on a transport with a standard bandwidth moved {MIN_JUDGED_MB:g} MB or more "
            "in communication_matrix.json"
        )
    return lb, None


def _link_name(row: pd.Series) -> str:
    return f"{int(row['src'])}-{int(row['dst'])} {row['transport']}"


@metric(
    "slow_link",
    "link",
    "The link ('src-dst transport', group-local ranks) with the lowest bandwidth against its transport's "
    "standard, named only below 0.8 x the standard; per rank: that rank's lowest bandwidth / standard",
    "communication_matrix.json",
    params=(SLOW_LINK_PARAM,),
    given=_slowest_link,
)
def _slow_link(ctx: Context, lb: pd.DataFrame) -> Value:
    per = {int(r): float(v) for r, v in lb.groupby("rank")["ratio"].min().items()}  # each rank's Series.min
    worst = lb.iloc[0]
    cut = ctx.options.param(SLOW_LINK_PARAM)
    if worst["ratio"] < cut:
        return Value(_link_name(worst), per)
    return Value(
        None,
        per,
        checked=True,  # every link was measured: none is slow enough to name
        reason=(
            f"no link below {cut:g} x its standard bandwidth (slowest: {_link_name(worst)} "
            f"on rank {int(worst['rank'])} at {worst['bandwidth_gbps']:.2f} GB/s = {worst['ratio']:.2f} x "
            f"{worst['norm_gbps']:g} GB/s)"
        ),
    )


@metric(
    "slow_link_bandwidth_gbps",
    "GB/s",
    "Bandwidth of the link with the lowest bandwidth against its transport's standard (whether or not "
    "it is slow enough to be named in slow_link); per rank: that rank's such link",
    "communication_matrix.json",
    given=_slowest_link,
)
def _slow_link_bw(ctx: Context, lb: pd.DataFrame) -> Value:
    bw = lb["bandwidth_gbps"].to_numpy(float, na_value=np.nan)
    per = {r: float(bw[rows[0]]) for r, rows in rank_rows(lb)}  # each rank's first row (groupby's .iloc[0]), on arrays
    return Value(float(lb["bandwidth_gbps"].iloc[0]), per)


# ---- parallel groups ---------------------------------------------------------------------------


def parallel_groups(capture: Capture) -> dict[str, dict[str, Any]] | None:
    """Groups from every rank's parallel_group_info, by hash (the '@<hash>' of op keys).

    None when no rank has a profiler_metadata.json.
    """
    groups = [rd.info.groups for rd in capture.ranks if rd.info.groups is not None]
    if not groups:
        return None
    out: dict[str, dict[str, Any]] = {}
    for gs in groups:
        for g in gs:
            key = str(g.hash)
            if key not in out:  # the first rank's; a copy made only for it (every rank lists the same groups)
                out[key] = g.as_dict()
    return out


def _group_label(g: dict[str, Any] | None, h: str) -> str:
    return str(g.get("group_name") or h) if g else h


@metric(
    "comm_groups",
    "groups",
    "Number of distinct communication groups ('@<hash>' of op keys) the ops ran in; per rank: its groups",
    "communication.json",
)
def _comm_groups(ctx: Context) -> Value:
    ops = ctx.capture.table("comm_ops")
    if not len(ops):
        return Value(None, reason=_missing(ctx.capture, "communication.json"))
    ops = ops[ops["group"].notna()]
    if not len(ops):
        return Value(None, reason="communication.json op keys carry no '@<group>' suffix")
    per = ops.groupby("rank", sort=True)["group"].nunique()  # (one grouping, not a frame per rank)
    return Value(int(ops["group"].nunique()), {int(r): float(n) for r, n in per.items()})


def _linked_groups(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    """comm_ops groups linked to parallel_group_info: rank, hash, name, global_ranks, nodes, spans."""
    groups = parallel_groups(ctx.capture)
    if groups is None:
        return None, "no profiler_metadata.json: parallel groups unknown"
    if not groups:
        return None, "profiler_metadata.json has no parallel_group_info"
    ops = ctx.capture.table("comm_ops")
    if not len(ops):
        return None, f"no communication ops to link to the groups ({_missing(ctx.capture, 'communication.json')})"
    rpn = _ranks_per_node(ctx)
    rows = []
    nodes_of: dict[str, list[int]] = {}  # a group's nodes, found once (every member rank's ops name its group)
    for rank, h in ops[ops["group"].notna()].groupby(["rank", "group"]).size().index:  # the groups' keys, no frame each
        g = groups.get(str(h))
        if g is None or not g.get("global_ranks"):
            continue
        nodes = nodes_of.get(str(h))
        if nodes is None:
            nodes = nodes_of[str(h)] = sorted({int(r) // rpn for r in g["global_ranks"]})
        rows.append(
            {"rank": int(rank), "hash": str(h), "name": _group_label(g, str(h)), "global_ranks": g["global_ranks"],
             "nodes": list(nodes), "spans": len(nodes) > 1}
        )  # fmt: skip
    if not rows:
        return None, "no communication op group matches a group of parallel_group_info (by hash)"
    return pd.DataFrame(rows), None


_GROUPS_SOURCE = "communication.json group hashes + profiler_metadata.json parallel_group_info"


@metric(
    "tp_group_spans_nodes",
    "flag",
    "1 when a tensor-parallel ('tp') group that communication ops ran in has ranks on more than one node "
    "(node = rank // ranks_per_node, default 8), else 0; per rank: its tp group",
    _GROUPS_SOURCE,
    given=_linked_groups,
)
def _tp_spans(ctx: Context, linked: pd.DataFrame) -> Value:
    tp = linked[linked["name"] == "tp"]
    if not len(tp):
        return Value(None, reason="no communication op ran in a group named 'tp'")
    per = {int(r): float(g["spans"].any()) for r, g in tp.groupby("rank")}
    return Value(int(tp["spans"].any()), per)


@metric(
    "groups_spanning_nodes",
    "groups",
    "Names of the communication groups (linked to parallel_group_info) whose ranks sit on more than one "
    "node, comma-separated; null when none does; per rank: how many of its groups span nodes",
    _GROUPS_SOURCE,
    given=_linked_groups,
)
def _groups_spanning(ctx: Context, linked: pd.DataFrame) -> Value:
    per = {int(r): float(n) for r, n in linked.groupby("rank")["spans"].sum().items()}  # booleans counted per rank
    names = sorted(set(linked.loc[linked["spans"], "name"]))
    if not names:
        rpn = _ranks_per_node(ctx)
        return Value(None, per, reason=f"no linked group spans nodes at {rpn} ranks per node")
    return Value(", ".join(names), per)


# ---- report table ------------------------------------------------------------------------------


COMM_TABLE_COLUMNS = [
    "group", "group_name", "op_type", "count", "ranks", "elapse_us", "transit_us", "wait_us", "sync_us",
    "idle_us", "wait_ratio", "sync_ratio", "idle_share", "transit_share",
]  # fmt: skip


def comm_table(capture: Capture) -> pd.DataFrame:
    """Per group (hash, with its name where parallel_group_info gives one) and op type: op count,
    ranks, elapse/transit/wait/sync/idle sums (us) and the wait and sync ratios, idle and transit
    shares; longest elapse first. For the report; not a metric. Empty (with the columns) without
    communication.json.
    """
    ops = capture.table("comm_ops")
    if not len(ops):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in COMM_TABLE_COLUMNS})
    groups = parallel_groups(capture) or {}
    ops = ops.assign(group=ops["group"].fillna(""))
    agg = ops.groupby(["group", "op_type"], as_index=False, dropna=False).agg(
        count=("op_name", "size"),
        ranks=("rank", "nunique"),
        **{c: (c, "sum") for c in _TIME_COLS},
    )

    def div(a: pd.Series, b: pd.Series) -> pd.Series:
        return (a / b).where(b > 0)

    agg["wait_ratio"] = div(agg["wait_us"], agg["wait_us"] + agg["transit_us"])
    agg["sync_ratio"] = div(agg["sync_us"], agg["sync_us"] + agg["transit_us"])
    agg["idle_share"] = div(agg["idle_us"], agg["elapse_us"])
    agg["transit_share"] = div(agg["transit_us"], agg["elapse_us"])
    agg["group_name"] = [(groups.get(str(h)) or {}).get("group_name") for h in agg["group"]]
    agg["group"] = agg["group"].replace("", pd.NA)
    return agg.sort_values("elapse_us", ascending=False, kind="stable").reset_index(drop=True)[COMM_TABLE_COLUMNS]
