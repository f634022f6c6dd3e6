"""Device memory metrics: peaks, capacity, fragmentation, activation share, recompute.

Which rows of the memory table are "the framework's memory"
------------------------------------------------------------
memory_record.csv (torch_npu and MindSpore 2.3+ Ascend) holds one series per Component:

- ``PTA`` (torch_npu's caching allocator) or ``MindSpore`` (MindSpore's device memory pool),
- ``GE`` (the Graph Engine's own pool: graph static memory, workspaces),
- ``PTA+GE`` / ``MindSpore+GE``: one row per PTA or GE event holding the two added together,
- ``APP``: the whole process's device memory as the driver sees it, reserved only (allocated and
  active are empty), which also counts the runtime, HCCL buffers and kernels.

On every corpus file the combined row is the sum of the two: torchnpu-2rank-level0 rank 0 at
ts 1736405443927044.13 has PTA 954.06787 + GE 0.125 = PTA+GE 954.19287 allocated and 1452 + 74.75 =
1526.75 reserved; PTA+GE has 495 rows = 381 PTA + 114 GE. So per rank the framework's memory is the
combined ``*+GE`` component when the rank has it, else ``PTA`` / ``MindSpore`` (a MindSpore CPU
capture's cpu_ms_memory_record rows are component ``MindSpore``), else ``GE`` alone. ``APP`` is left
out (not an allocator, no allocated figure) and so are the npu_module_mem rows (per driver module):
both are the device footprint, read by metrics/device_memory.py, which also holds memory_peak_share.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator, Mapping

import numpy as np
import pandas as pd

from msdiag.metrics import chip
from msdiag.metrics.devices import device_memory_gb
from msdiag.metrics.registry import Context, Reads, Value, kept_in_child, key_rows, metric, rank_rows
from msdiag.model import row_slices

MEMORY_SOURCES = ("memory_record", "cpu_ms_memory_record")
# In order of preference, per rank (see the module doc).
COMBINED_SUFFIX = "+GE"
FRAMEWORK_COMPONENTS = ("PTA", "MindSpore")
GE_COMPONENT = "GE"

MB_PER_GB = 1024.0  # memory tables are MiB (2^20 B); device capacities are GiB (HBM sizes are binary)
KB_PER_MB = 1024.0

_NO_MEMORY = "no framework memory samples (memory_record.csv / cpu_ms_memory_record absent: profile_memory off?)"


# ---- framework rows -----------------------------------------------------------------------


def framework_rows(ctx: Context) -> Mapping[int, pd.DataFrame]:
    """Per rank, the memory rows of the framework's allocator (see the module doc), in time order (each a row
    slice of those rows of every rank, taken at once: the index is 0..n-1, not the memory table's).

    Computed once per analysis (ctx.cache): every memory metric starts from it.
    """
    return _framework(ctx)[0]


#: The key prefix of a framework column per rank (framework_column): read by the memory metrics only.
_COLUMN = kept_in_child("memory.framework_column.")


def framework_column(ctx: Context, col: str) -> dict[int, np.ndarray]:
    """Per rank, the column ``col`` of its :func:`framework_rows` as floats (NaN for a null): the same
    values in the same order, taken from the memory table's column once (``ctx.cache``), not a column
    of each rank's frame (pandas' cost per frame and column, per rank, in every memory metric)."""
    key = _COLUMN + col
    kept = ctx.cache.get(key)
    if kept is None:
        _, m, positions = _framework(ctx)
        values = m[col].to_numpy(float, na_value=np.nan) if len(positions) else np.empty(0)
        kept = ctx.cache[key] = {rank: values[at] for rank, at in positions.items()}
    return kept  # type: ignore[no-any-return]


#: The key prefix of a memory column's codes (text_hits): read by the memory modules' metrics only.
_CODES = kept_in_child("memory.codes.")


def memory_codes(ctx: Context, col: str) -> tuple[np.ndarray, list[str]]:
    """The memory table's column ``col`` factorized once per analysis (``ctx``): (each row's code, each code's text),
    a null's code -1 (so the last of a list of answers per code with a null's answer appended)."""
    def make() -> tuple[np.ndarray, list[str]]:
        codes, uniq = pd.factorize(ctx.capture.table("memory")[col])
        return codes, [str(t) for t in uniq]

    return ctx.once(_CODES + col, make)


def text_hits(ctx: Context, col: str, test: Callable[[str], bool]) -> np.ndarray:
    """Per row of the memory table, ``test`` of its text in column ``col`` (a null as the empty text), each distinct
    text tested once (:func:`memory_codes`), not a text taken or compared per row (512 bench ranks: ~0.5 million rows
    of a few distinct components and sources)."""
    codes, texts = memory_codes(ctx, col)
    return np.array([test(t) for t in texts] + [test("")], dtype=bool)[codes]  # type: ignore[no-any-return]


#: The key of the framework rows (they hold the memory table: too large to come back from a forked child).
_ROWS = kept_in_child("memory.framework_rows")


def _framework(ctx: Context) -> tuple[Mapping[int, pd.DataFrame], pd.DataFrame, dict[int, np.ndarray]]:
    """(framework_rows, the memory rows they are taken from, each rank's row positions in them)."""
    kept = ctx.cache.get(_ROWS)
    if kept is None:
        kept = ctx.cache[_ROWS] = _framework_rows(ctx)
    return kept  # type: ignore[no-any-return]


def _framework_rows(ctx: Context) -> tuple[Mapping[int, pd.DataFrame], pd.DataFrame, dict[int, np.ndarray]]:
    m = ctx.capture.table("memory")
    # the rows of the memory sources as positions in the table (no frame of them: its columns are read where asked)
    at = np.flatnonzero(text_hits(ctx, "source", lambda t: t in MEMORY_SOURCES))
    positions: dict[int, np.ndarray] = {}
    # the components tested at those rows (each distinct text once, a null as ""), each rank's rows taken by
    # position (the groups rank_rows gives of those rows: ranks in order, each rank's rows in their order)
    kinds: list[Callable[[str], bool]] = [
        lambda t: t.endswith(COMBINED_SUFFIX), lambda t: t in FRAMEWORK_COMPONENTS, lambda t: t == GE_COMPONENT]
    tests = [text_hits(ctx, "component", kind)[at] for kind in kinds]
    ts = m["ts_us"].to_numpy(float, na_value=np.nan)[at]
    rank = m["rank"].to_numpy(float, na_value=np.nan)[at]
    present = np.flatnonzero(~np.isnan(rank))
    for r, g in key_rows(rank[present]):
        rows = present[g]
        for hit in tests:
            if hit[rows].any():
                sel = rows[hit[rows]]
                # stable: rows with equal (or spreadsheet-rounded) timestamps keep the file's order; the rows taken
                # once in time order (numpy's stable argsort, NaN last in their order: sort_values' order)
                positions[int(r)] = at[sel[np.argsort(ts[sel], kind="stable")]]
                break
    return _RankFrames(m, positions), m, positions


class _RankFrames(Mapping[int, pd.DataFrame]):
    """:func:`framework_rows`: per rank, its rows of ``m`` at ``positions`` as a frame, every rank's taken at once when
    the first is read (each a row slice of those rows, index 0..n-1). The memory metrics read the ranks and the columns
    (:func:`framework_column`), rarely a frame: at 512 bench ranks taking them all (a filter and a take of every column of
    ~0.5 million rows) cost the metrics' child ~0.25 s."""

    def __init__(self, m: pd.DataFrame, positions: dict[int, np.ndarray]) -> None:
        self._m, self._positions = m, positions
        self._frames: dict[int, pd.DataFrame] | None = None

    def __getitem__(self, rank: int) -> pd.DataFrame:
        if self._frames is None:
            taken = self._m.iloc[np.concatenate(list(self._positions.values()))] if self._positions else self._m.iloc[:0]
            self._frames = dict(zip(self._positions, row_slices(taken, [len(at) for at in self._positions.values()])))
        return self._frames[rank]

    def __iter__(self) -> Iterator[int]:
        return iter(self._positions)

    def __len__(self) -> int:
        return len(self._positions)

    def __contains__(self, rank: object) -> bool:  # (Mapping's reads the frame: every rank's taken)
        return rank in self._positions


def column_max(values: np.ndarray) -> float | None:
    """pandas' ``Series.max()`` of a float column (NaN skipped: put as -inf, then numpy's max; None when
    every value is NaN or there is none), on its array."""
    nan = np.isnan(values)
    if nan.all():
        return None
    return float(np.where(nan, -np.inf, values).max() if nan.any() else values.max())


def _max_job(per: dict[int, float | None], reason: str) -> Value:
    vals = [v for v in per.values() if v is not None]
    if not vals:
        return Value(None, per, reason)
    return Value(max(vals), per)


def _peak_metric(col: str, what: str) -> Callable[[Context], Value]:
    def fn(ctx: Context) -> Value:
        if not framework_rows(ctx):
            return Value(None, reason=_NO_MEMORY)
        # each rank's column as an array (framework_column), its max as pandas' (column_max)
        per: dict[int, float | None] = {rank: column_max(v) for rank, v in framework_column(ctx, col).items()}
        return _max_job(per, f"the framework memory rows carry no {what} figure (older torch_npu writes no Total Active column)")

    return fn



for _col, _id, _doc in (
    ("allocated_mb", "memory_peak_allocated_mb", "Peak memory allocated by the framework (tensors), max over ranks"),
    ("reserved_mb", "memory_peak_reserved_mb", "Peak memory reserved by the framework's allocator (cached included), max over ranks"),
    ("active_mb", "memory_peak_active_mb", "Peak active memory (allocated plus blocks awaiting stream sync), max over ranks"),
):
    metric(_id, "MB", _doc, "memory: memory_record (*+GE, else PTA/MindSpore) / cpu_ms_memory_record")(
        _peak_metric(_col, _col.removesuffix("_mb"))
    )


# ---- capacity -----------------------------------------------------------------------------

# The device memory table and its lookup live in metrics/devices.py (the chip inference reads them too).


def _capacity(ctx: Context) -> tuple[float | None, str | None]:
    """(GB, reason when unknown): option device_memory_gb, else the table entry of option device."""
    given = ctx.options.device_memory_gb  # a positive number when given (msdiag/options.py)
    if given is not None:
        return given, None
    device = ctx.options.device
    if device:
        return device_memory_gb(device)
    gb, how = chip.inferred_memory_gb(ctx)  # the chip the capture records (issue 15)
    if gb is not None:
        return gb, None
    return None, f"device memory unknown: {how}; give --device (e.g. 910B2) or device_memory_gb"


@metric(
    "memory_capacity_gb",
    "GB",
    "Memory of one device (GiB): option device_memory_gb, else msdiag's table for --device",
    "options device_memory_gb / device",
)
def _memory_capacity(ctx: Context) -> Value:
    gb, why = _capacity(ctx)
    return Value(gb, reason=why)


# memory_peak_share (the device peak, else this pool's, over capacity) is in metrics/device_memory.py.


# ---- fragmentation ------------------------------------------------------------------------


def _fragmentation_per_rank(ctx: Context) -> tuple[dict[int, float | None], dict[int, float | None]]:
    """Per rank: (reserved - allocated in MB, that over reserved) at the peak-reserved moment.

    Reserved stays at its peak over a plateau; the moment taken is the sample on that plateau with
    the most memory allocated, the tightest point: what is still reserved but unallocated then was
    never handed out while the pool was at its largest.
    """
    mb: dict[int, float | None] = {}
    share: dict[int, float | None] = {}
    allocated = framework_column(ctx, "allocated_mb")
    for rank, reserved in framework_column(ctx, "reserved_mb").items():  # on arrays: maxima need no order
        ok = ~np.isnan(reserved)
        if not ok.any():
            mb[rank] = share[rank] = None
            continue
        top = float(reserved[ok].max())
        at_top = allocated[rank][ok][reserved[ok] == top]
        alloc = np.nan if np.isnan(at_top).all() else float(np.nanmax(at_top))
        if np.isnan(alloc) or top <= 0:
            mb[rank] = share[rank] = None
            continue
        mb[rank] = top - float(alloc)
        share[rank] = mb[rank] / top  # type: ignore[operator]
    return mb, share


_NO_FRAG = "no framework memory sample with both reserved and allocated memory"


@metric(
    "memory_fragmentation_mb",
    "MB",
    "Reserved minus allocated memory at the peak-reserved moment (most allocated while reserved peaks), max over ranks",
    "memory: framework rows (reserved_mb, allocated_mb)",
)
def _memory_fragmentation_mb(ctx: Context) -> Value:
    if not framework_rows(ctx):
        return Value(None, reason=_NO_MEMORY)
    mb, _ = _fragmentation_per_rank(ctx)
    return _max_job(mb, _NO_FRAG)


@metric(
    "memory_fragmentation_share",
    "ratio",
    "memory_fragmentation_mb over the peak reserved memory, max over ranks",
    "memory: framework rows (reserved_mb, allocated_mb)",
)
def _memory_fragmentation_share(ctx: Context) -> Value:
    if not framework_rows(ctx):
        return Value(None, reason=_NO_MEMORY)
    _, share = _fragmentation_per_rank(ctx)
    return _max_job(share, _NO_FRAG)


# ---- activation share ---------------------------------------------------------------------


@metric(
    "memory_activation_share",
    "ratio",
    "Share of the peak allocated memory held by operator (dynamic) allocations live at the peak; "
    "the rest is static: weights, optimizer state, graph static memory, blocks allocated before the capture",
    "memory_allocs (operator_memory.csv) at the peak-allocated moment of the framework memory rows",
)
def _memory_activation_share(ctx: Context) -> Value:
    """At the moment the framework's allocated memory peaks, the operator allocations (activations,
    workspaces, gradients) alive then, over that peak.

    Static graph memory (static_op_mem.csv) is not added up separately: its op rows reuse blocks (on
    the corpus graph 0 they sum to 19784.7 KB, its TOTAL is 17210.5 KB) and it is already inside
    the framework's allocated figure (the GE part of the ``*+GE`` rows), i.e. in the static rest.
    """
    rows = framework_rows(ctx)
    allocs = ctx.capture.table("memory_allocs")
    dyn_all = allocs[(allocs["kind"] == "dynamic").fillna(False).to_numpy() & allocs["alloc_us"].notna().to_numpy()]
    if not len(dyn_all):
        return Value(None, reason="no operator allocations with times (operator_memory.csv absent: profile_memory off?)")
    if not rows:
        return Value(None, reason=_NO_MEMORY)
    per: dict[int, float | None] = {}
    why: list[str] = []
    # every rank's allocations as arrays, its rows by position (rank_rows: the groups of groupby("rank"), in order)
    dyn_by = dict(rank_rows(dyn_all))
    d_alloc, d_release = dyn_all["alloc_us"].to_numpy(float), dyn_all["release_us"].to_numpy(float, na_value=np.nan)
    d_size = dyn_all["size_kb"].to_numpy(float, na_value=np.nan)
    allocated_of, ts_of = framework_column(ctx, "allocated_mb"), framework_column(ctx, "ts_us")
    for rank in rows:
        allocated, ts = allocated_of[rank], ts_of[rank]
        ok = ~(np.isnan(allocated) | np.isnan(ts))
        at = dyn_by.get(rank, np.empty(0, dtype=np.int64))
        if not ok.any() or not len(at):
            per[rank] = None
            why.append(f"rank {rank}: no allocated-memory samples or no operator allocations")
            continue
        i = allocated[ok].argmax()
        t = float(ts[ok][i])
        peak = float(allocated[ok][i])
        alloc, release = d_alloc[at], d_release[at]
        # the latest time recorded: the max of the allocations, and of the releases where one is (pandas' max:
        # NaN as -inf, then numpy's max)
        last = float(alloc.max()) if np.isnan(release).all() else max(float(alloc.max()), float(np.where(np.isnan(release), -np.inf, release).max()))
        if not alloc.min() <= t <= last or peak <= 0:
            per[rank] = None
            why.append(
                f"rank {rank}: the operator allocations ({alloc.min():.0f}..{last:.0f} us) do not cover the "
                f"moment of the peak ({t:.0f} us): a different run, a partial record or spreadsheet-rounded times"
            )
            continue
        live = (alloc <= t) & (pd.isna(release) | (release > t))
        live_mb = float(d_size[at][live].sum()) / KB_PER_MB
        if live_mb > peak * 1.001:
            per[rank] = None
            why.append(f"rank {rank}: live operator allocations ({live_mb:.1f} MB) exceed the peak ({peak:.1f} MB)")
            continue
        per[rank] = live_mb / peak
    return _max_job(per, "; ".join(why) or "not computable")


# ---- recompute ----------------------------------------------------------------------------

# Evidence of activation recomputation in op, scope or Python-frame names:
# - MindSpore gives every node its recompute pass duplicates a full name starting with "recompute"
#   (mindspore ccsrc recompute helpers: WithRecomputedScope = fullname_with_scope().find(kAttrRecompute) == 0);
# - torch: torch.utils.checkpoint frames ("torch/utils/checkpoint.py(N): checkpoint"), the reentrant
#   autograd node CheckpointFunctionBackward, Megatron's CheckpointFunction / tensor_parallel.checkpoint,
#   MindSpeed's recompute* functions.
RECOMPUTE_EVIDENCE = re.compile(r"recompute|CheckpointFunction|utils/checkpoint\.py\(|\.py\(\d+\): checkpoint\b", re.I)
# Names that would carry that evidence if recompute were on:
# - MindSpore graph mode: backward ops compiled into the graph have scope names starting with "Gradients";
# - a torch with_stack capture: Python frames "file.py(line): function" on the host lane.
GRAPH_BACKWARD_SCOPE = re.compile(r"^Gradients(?:/|$)")
PYTHON_FRAME = re.compile(r"\.py\(\d+\): ")


@metric(
    "recompute_on",
    "flag",
    "1 when op, scope or Python-frame names show activation recomputation, 0 when they would show it but do not",
    "kernels.name, timeline scope and host lanes",
    reads=Reads(tables=("kernels", "timeline"), lane_names=("scope", "host")),
)
def _recompute_on(ctx: Context) -> Value:
    k = ctx.capture.table("kernels")
    tl = ctx.capture.table("timeline")
    per: dict[int, float | None] = {}
    # distinct names only: a big trace repeats the same few thousand names millions of times, and
    # ranks share their names: each distinct name is matched once, then each rank looks its names up
    # (the three columns read, not a copy of every column of the host rows)
    kn = k[["rank", "name"]].dropna().drop_duplicates()
    t = tl.loc[tl["lane"].isin(["scope", "host"]).fillna(False).to_numpy(), ["rank", "lane", "name"]].dropna().drop_duplicates()
    scope = t.loc[(t["lane"] == "scope").to_numpy(bool), ["rank", "name"]]
    host = t.loc[(t["lane"] == "host").to_numpy(bool), ["rank", "name"]]

    def ranks_with(pat: re.Pattern[str], *frames: pd.DataFrame) -> set[int]:
        out: set[int] = set()
        for f in frames:
            hit = {n for n in f["name"].unique() if pat.search(str(n))}
            out |= {int(r) for r in f.loc[f["name"].isin(hit).to_numpy(bool), "rank"].unique()}
        return out

    evidence = ranks_with(RECOMPUTE_EVIDENCE, kn, scope, host)
    graph = ranks_with(GRAPH_BACKWARD_SCOPE, kn, scope)
    frames = ranks_with(PYTHON_FRAME, host)
    for rank in ctx.capture.rank_ids():
        if rank in evidence:
            per[rank] = 1.0
        elif rank in graph or rank in frames:
            per[rank] = 0.0
        else:
            per[rank] = None
    known = [v for v in per.values() if v is not None]
    if not known:
        return Value(
            None,
            per,
            "no way to tell: the names in this capture carry neither graph scopes (MindSpore graph mode) nor "
            "Python call stacks (torch with_stack), where recomputation would show",
        )
    return Value(int(max(known)), per)
