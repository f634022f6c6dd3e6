"""Collective instances matched across the captured ranks: who arrives last, when the ranks are released,
and which ranks of the job the capture misses.

slow_rank (communication.py) votes: it names a rank only when it is late again and again. This module
reports the cost of every late arrival, even one: for each collective instance seen on the captured
ranks (matched by step, group, op name and occurrence, as slow_rank matches them; p2p ops left out),
each rank's arrival (its op's start), the release (the earliest moment a rank stops waiting: its op's
end less its own transfer time where communication.json / COMMUNICATION_OP give one, else its end),
each rank's wait (release - arrival), the last captured arriver and how long the ranks sit after it
arrived. A release long after the last captured arrival, on every captured rank at once, is a wait for
ranks outside the capture; the rank lists the capture records (communication_matrix links, the
parallel groups, the world size) say which ranks those are.

Sources: comm_ops (communication.json, the SQLite COMMUNICATION_OP table, legacy hccl_raw), else the
communication kernels (trace_view HCCL ops, CANN task rows, MindSpore CPU host collectives), whose steps
come from the step breakdown when the kernels carry none. Times are the profiler's epoch us; ranks of
one capture share a clock (the profiler aligns them to the system clock).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from msdiag.metrics.communication import cached_collective_rows, collective_rows
from msdiag.metrics.registry import Context, Reads, Value, metric, rank_rows
from msdiag.model import Capture
from msdiag.units import US_PER_MS

#: SQLite export: a rank id of 2**32 - 1 in COMMUNICATION_TASK_INFO / CommAnalyzerMatrix means "no rank".
NO_RANK = 4294967295

#: Families whose link keys are global rank ids: the Ascend profiler's communication_matrix.json and the
#: SQLite CommAnalyzerMatrix. Legacy hccl_raw and CANN hccl slices number a link's ends inside the group
#: (rank 6's hccl_raw_6.csv in the corpus lists links 0-0 and 1-0), so they name no job rank.
GLOBAL_LINK_FAMILIES = ("ascend_pt", "ascend_ms")

#: Columns of the collectives table (one row per matched instance).
COLLECTIVE_COLUMNS = [
    "step", "group", "op", "ranks", "arrival_offset_ms", "wait_ms", "last_arriver", "late_ms",
    "release_after_last_ms", "release_spread_ms", "source",
]  # fmt: skip

_INT_COLUMNS = ("step", "last_arriver")
_NO_RANK_LIST = "the capture records no rank list (no communication_matrix links, parallel_group_info or world size)"
_READS = Reads(tables=("comm_ops", "kernels", "comm_links"))
_SOURCE = "comm_ops (communication.json / COMMUNICATION_OP / hccl_raw), else communication kernels"


# ---- instances ---------------------------------------------------------------------------------


class _StepLookup:
    """The step of a rank whose span holds a time (the step breakdown's rows): one sorted array per rank,
    found by bisection, so that thousands of instances cost thousands of lookups, not scans of every step."""

    def __init__(self, steps: pd.DataFrame) -> None:
        self._by_rank: dict[int, tuple[np.ndarray, np.ndarray, list[Any]]] = {}
        if not len(steps) or "start_us" not in steps:
            return
        # on arrays, each rank's rows cut by position (rank_rows: the groups of groupby("rank")), each put in
        # start order by numpy's stable argsort (NaN last in their order: sort_values' order, kind="stable")
        start = steps["start_us"].to_numpy(dtype=float, na_value=np.nan)
        end = steps["end_us"].to_numpy(dtype=float, na_value=np.nan)
        ids = np.empty(len(steps), dtype=object)
        ids[:] = steps["step"].tolist()
        for rank, rows in rank_rows(steps):
            at = rows[np.argsort(start[rows], kind="stable")]
            self._by_rank[rank] = (start[at], end[at], ids[at].tolist())

    def __call__(self, rank: int, t: float) -> Any:
        if rank not in self._by_rank:
            return None
        starts, ends, ids = self._by_rank[rank]
        i = int(np.searchsorted(starts, t, side="right")) - 1
        # the first step (in start order) whose span holds t, as a scan in start order would find it
        while i > 0 and starts[i - 1] <= t and ends[i - 1] >= t:
            i -= 1
        if i < 0 or not ends[i] >= t or pd.isna(ids[i]):
            return None
        return int(ids[i])


def _instance(rank: np.ndarray, start: np.ndarray, own: np.ndarray) -> dict[str, Any]:
    """One matched instance's arrivals, release and waits (ms), from its rows (one per rank, in rank order):
    ``own`` is when each rank's waiting ended (its op's end less its own transfer, which runs at the end)."""
    ranks = [int(r) for r in rank]
    first, last, release = float(start.min()), float(start.max()), float(own.min())
    late = last - first
    last_arriver = ranks[int(np.argmax(start))] if len(ranks) > 1 and late > 0 else None
    return {
        "ranks": ranks,
        # (np.round of the array: what round() of each numpy float gives, numpy's own rounding, in one call)
        "arrival_offset_ms": list(np.round((start - first) / US_PER_MS, 3)),
        "wait_ms": list(np.round(np.where(release - start > 0.0, release - start, 0.0) / US_PER_MS, 3)),  # (max(0.0, x))
        "last_arriver": last_arriver,
        "late_ms": round(late / US_PER_MS, 3) if len(ranks) > 1 else None,
        "release_after_last_ms": round(max(0.0, release - last) / US_PER_MS, 3),
        "release_spread_ms": round(float(own.max() - own.min()) / US_PER_MS, 3),
        "first_us": first,
    }


def collectives(capture: Capture, steps: pd.DataFrame, rows_source: tuple[pd.DataFrame, str] | None = None) -> pd.DataFrame:
    """Every collective instance on the captured ranks (COLLECTIVE_COLUMNS), in time order.

    ``late_ms``: the last captured arrival minus the earliest (null on one rank); ``wait_ms`` per rank:
    release minus its arrival; ``release_after_last_ms``: release minus the last captured arrival, the
    rank's own transfer time left out where known; ``release_spread_ms``: how far apart the captured
    ranks stop waiting (near 0: released together, by a peer). ``rows_source``: :func:`collective_rows` of the
    capture when the caller has them.
    """
    rows, source = collective_rows(capture) if rows_source is None else rows_source
    rows = rows[rows["start_us"].notna() & rows["elapse_us"].notna()]
    if not len(rows):
        return pd.DataFrame(columns=COLLECTIVE_COLUMNS)
    # one pass over every instance's rows (one per rank, the first of a rank's duplicates kept, in rank order):
    # a pandas group per instance costs milliseconds, and a CPU trace holds thousands of instances
    gid = rows.groupby(["step", "group", "op_name", "occurrence"], dropna=False, sort=True).ngroup()
    rows = rows.assign(_gid=gid.to_numpy()).sort_values(["_gid", "rank"], kind="stable").drop_duplicates(["_gid", "rank"])
    g_id = rows["_gid"].to_numpy()
    rank = rows["rank"].to_numpy(dtype=np.int64)
    start = rows["start_us"].to_numpy(dtype=float, na_value=np.nan)
    end = start + rows["elapse_us"].to_numpy(dtype=float, na_value=np.nan)
    own = end - np.nan_to_num(rows["transit_us"].to_numpy(dtype=float, na_value=np.nan), nan=0.0)
    cuts = [*np.flatnonzero(np.r_[True, g_id[1:] != g_id[:-1]]).tolist(), len(rows)]
    keys = rows[["step", "group", "op_name"]].to_numpy(dtype=object)
    step_of = _StepLookup(steps)
    out: list[dict[str, Any]] = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        row = _instance(rank[lo:hi], start[lo:hi], own[lo:hi])
        step, group, op = keys[lo]
        if pd.isna(step):
            i = lo + int(np.argmin(start[lo:hi]))
            step = step_of(int(rank[i]), float(start[i]))
        row.update(step=None if pd.isna(step) else int(step), group=None if pd.isna(group) else str(group))
        out.append({**row, "op": str(op), "source": source})
    df = pd.DataFrame(out).sort_values("first_us", kind="stable")
    df["last_arriver"] = df["last_arriver"].astype("Int64")
    df["step"] = df["step"].astype("Int64")
    # first_us (the earliest arrival, epoch us) places an instance on a timeline; not part of the contract
    return df[[*COLLECTIVE_COLUMNS, "first_us"]].reset_index(drop=True)


#: The JSON lists at most this many instances: a long capture holds hundreds of thousands (one per
#: collective call and step), and the report must stay a small multiple of what it describes.
RECORDS_LIMIT = 1000


def collective_records(ctx: Context) -> list[dict[str, Any]]:
    """The JSON contract's ``collectives``: one record per instance (COLLECTIVE_COLUMNS), nulls as None, in
    time order; beyond RECORDS_LIMIT instances, the RECORDS_LIMIT whose captured ranks waited longest
    (late_ms + release_after_last_ms), and a capture note says how many there were."""
    df = _cached(ctx)
    if len(df) > RECORDS_LIMIT:
        cost = df["late_ms"].fillna(0.0).astype(float) + df["release_after_last_ms"].fillna(0.0).astype(float)
        keep = cost.sort_values(ascending=False, kind="stable").index[:RECORDS_LIMIT]
        ctx.capture.notes.append(
            f"collectives: {len(df)} collective instances; the JSON lists the {RECORDS_LIMIT} whose captured ranks "
            "waited longest (the metrics use every instance)"
        )
        df = df.loc[sorted(keep)]
    return [
        {c: (None if not isinstance(v, list) and pd.isna(v) else (int(v) if c in _INT_COLUMNS else v))
         for c, v in zip(COLLECTIVE_COLUMNS, row)}
        for row in df[COLLECTIVE_COLUMNS].itertuples(index=False, name=None)
    ]  # fmt: skip


def collectives_table(ctx: Context) -> pd.DataFrame:
    """The collectives table of the analysis (COLLECTIVE_COLUMNS + ``first_us``), computed once per analysis."""
    return _cached(ctx)


def _cached(ctx: Context) -> pd.DataFrame:
    if "collectives" not in ctx.cache:
        ctx.cache["collectives"] = collectives(ctx.capture, ctx.steps, cached_collective_rows(ctx))
    df: pd.DataFrame = ctx.cache["collectives"]
    return df


def _per_step_median(df: pd.DataFrame, col: str) -> float:
    """Per step, the sum of ``col`` over its collectives; the median over steps (one step key if none)."""
    key = df["step"].astype("Float64").fillna(-1.0)
    return float(df.groupby(key)[col].sum().median())


def _steps_count(df: pd.DataFrame) -> int:
    return int(df["step"].astype("Float64").fillna(-1.0).nunique())


# ---- late arrivals ----------------------------------------------------------------------------


def _matched(ctx: Context) -> tuple[pd.DataFrame | None, str | None]:
    """Instances seen on two or more captured ranks, or why there are none."""
    if len(ctx.capture.ranks) < 2:
        return None, "a single rank: no other captured rank to compare arrivals with"
    df = _cached(ctx)
    df = df[df["late_ms"].notna()] if len(df) else df
    if not len(df):
        return None, "no collective op was seen on two or more captured ranks"
    return df, None


@metric(
    "late_arrival_ms_per_step",
    "ms",
    "Per step, the sum over its collectives of how long the other captured ranks waited for the last "
    "captured arriver (its arrival minus the earliest captured arrival); median over steps; no vote threshold",
    _SOURCE,
    reads=_READS,
    given=_matched,
)
def _late_arrival(ctx: Context, df: pd.DataFrame) -> Value:
    n = _steps_count(df)
    per: dict[int, float | str | None] = {}
    for r, g in df[df["last_arriver"].notna()].groupby("last_arriver"):
        per[int(r)] = round(float(g["late_ms"].sum()) / n, 3)
    return Value(round(_per_step_median(df, "late_ms"), 3), per)


@metric(
    "late_rank",
    "rank",
    "The captured rank the others wait for most: the last captured arriver with the largest summed lateness "
    "(late_arrival); per rank: ms per step the others waited for it; null when every rank arrives together",
    _SOURCE,
    reads=_READS,
    given=_matched,
)
def _late_rank(ctx: Context, df: pd.DataFrame) -> Value:
    late = df[df["last_arriver"].notna()]
    if not len(late):
        return Value(None, reason=f"the captured ranks arrived together at all {len(df)} collective instances")
    n = _steps_count(df)
    totals = late.groupby("last_arriver")["late_ms"].sum().sort_index()
    per: dict[int, float | str | None] = {int(r): round(float(v) / n, 3) for r, v in totals.items()}
    return Value(int(totals.idxmax()), per)


# ---- capture coverage -------------------------------------------------------------------------


def _global_links(capture: Capture) -> pd.DataFrame:
    """comm_links rows of the ranks whose link keys are global rank ids (GLOBAL_LINK_FAMILIES)."""
    links = capture.table("comm_links")
    ranks = [rd.rank for rd in capture.ranks if rd.family in GLOBAL_LINK_FAMILIES]
    return links[links["rank"].isin(ranks)] if len(links) else links


def group_ranks(capture: Capture) -> dict[str, set[int]]:
    """Per group (the hash of op keys), the ranks its communication_matrix links and parallel group name."""
    out: dict[str, set[int]] = {}
    links = _global_links(capture)
    if len(links):
        for g, x in links[links["group"].notna()].groupby("group"):
            ids = pd.concat([x["src"], x["dst"]]).dropna().astype("int64")
            out.setdefault(str(g), set()).update(int(r) for r in ids if 0 <= int(r) < NO_RANK)
    for rd in capture.ranks:
        for pg in rd.info.groups or []:
            _members(out.setdefault(str(pg.hash), set()), pg.global_ranks)
    return out


def _members(into: set[int], ranks: list[int | None] | None) -> None:
    """Add a group's global ranks, less the unknown ones, to ``into``: the list as it is (each entry an int or None, as
    the metadata reader and the cache give it; a world group lists every rank of the job, and each rank's metadata
    lists it again: no entry converted in Python)."""
    if ranks:
        into.update(ranks)  # type: ignore[arg-type]
        into.discard(None)  # type: ignore[arg-type]


def known_ranks(capture: Capture) -> tuple[set[int], list[str]]:
    """Ranks the capture's files name (job or group members), and which files named them.

    From communication_matrix links (src / dst; NO_RANK is not a rank), parallel_group_info's
    global_ranks and the recorded world size (ranks 0..world-1).
    """
    known: set[int] = set()
    whence: list[str] = []
    links = _global_links(capture)
    if len(links):
        ids = pd.concat([links["src"], links["dst"]]).dropna().astype("int64").to_numpy(np.int64)
        known |= set(np.unique(ids[(ids >= 0) & (ids < NO_RANK)]).tolist())  # each distinct id once, on arrays
        whence.append("communication_matrix links")
    sizes: set[int] = set()  # the world sizes recorded: ranks 0..world-1 of each added once
    for rd in capture.ranks:
        for g in rd.info.groups or []:
            _members(known, g.global_ranks)
            whence.append("parallel_group_info")
        ws = rd.info.world_size()
        if ws is not None:
            sizes.add(int(ws[0]))
            whence.append(ws[1])
    for n in sizes:
        known |= set(range(n))
    return known, sorted(set(whence))


def _coverage(ctx: Context) -> tuple[tuple[list[int], list[int]] | None, str | None]:
    """(captured ranks, known ranks not captured), or why the job's ranks are unknown."""
    known, whence = known_ranks(ctx.capture)
    if not whence:
        return None, _NO_RANK_LIST
    captured = sorted(ctx.capture.rank_ids())
    return (captured, sorted(known - set(captured))), None


@metric(
    "capture_rank_coverage",
    "ratio",
    "Captured ranks over the ranks the capture's files name (communication_matrix links, parallel groups, "
    "world size): 1 when every known rank is captured",
    "communication_matrix.json / CommAnalyzerMatrix, profiler_metadata.json, profiler_info",
    reads=_READS,
    given=_coverage,
)
def _capture_coverage(ctx: Context, cov: tuple[list[int], list[int]]) -> Value:
    captured, missing = cov
    return Value(round(len(captured) / (len(captured) + len(missing)), 4))


@metric(
    "ranks_known",
    "ranks",
    "Ranks the capture's files name (communication_matrix links, parallel groups, world size) plus the captured ones",
    "communication_matrix.json / CommAnalyzerMatrix, profiler_metadata.json, profiler_info",
    reads=_READS,
    given=_coverage,
)
def _ranks_known(ctx: Context, cov: tuple[list[int], list[int]]) -> Value:
    captured, missing = cov
    return Value(len(captured) + len(missing))


def _rank_list(ranks: list[int]) -> str:
    """'2-7' for a run, '0, 3, 5-7' otherwise (ranks sorted)."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@metric(
    "ranks_not_captured",
    "ranks",
    "Ranks the capture's files name (links, parallel groups, world size) that are not in the capture, "
    "e.g. '2-7'; null when every known rank is captured",
    "communication_matrix.json / CommAnalyzerMatrix, profiler_metadata.json, profiler_info",
    reads=_READS,
    given=_coverage,
)
def _ranks_not_captured(ctx: Context, cov: tuple[list[int], list[int]]) -> Value:
    _, missing = cov
    if not missing:
        return Value(None, reason="every rank the capture's files name is captured")
    return Value(_rank_list(missing))


# ---- waits for ranks outside the capture ------------------------------------------------------


@metric(
    "uncaptured_wait_ms_per_step",
    "ms",
    "Per step, the sum over collectives of the release minus the last captured arrival (less the op's own "
    "transfer time where known): time every captured rank waits for ranks outside the capture; median over "
    "steps; 0 when every known rank is captured",
    _SOURCE,
    reads=_READS,
    given=_coverage,
)
def _uncaptured_wait(ctx: Context, cov: tuple[list[int], list[int]]) -> Value:
    _, missing = cov
    df = _cached(ctx)
    if not len(df):
        return Value(None, reason="no collective op in the capture")
    if not missing:
        return Value(0.0)
    captured = set(ctx.capture.rank_ids())
    groups = group_ranks(ctx.capture)
    # an op of a group whose every known member is captured waits for no one outside the capture
    outside = [g is None or str(g) not in groups or bool(groups[str(g)] - captured) for g in df["group"]]
    waits = df.assign(uncaptured_ms=df["release_after_last_ms"].where(outside, 0.0))
    return Value(round(_per_step_median(waits, "uncaptured_ms"), 3))
