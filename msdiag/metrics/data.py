"""Input-pipeline metrics: data wait per step and the MindData pipeline (queues, workers, bottleneck op).

``data_wait_share`` lives in steps.py with the other step-time shares.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from msdiag.metrics.registry import Context, Value, metric

US_PER_MS = 1000.0
CONSUMER_OP_ID = -1  # the device queue / dataset iterator row (ingest.ascend_csv.MINDDATA_CONSUMER_OP_ID)

# MindInsight's pipeline rule (mindinsight/profiler/analyser/minddata_pipeline_analyser.py,
# _filter_outside_threshold, with the UI's thresholds [0.8, 0.6]): a non-root op is a bottleneck when
# a child's output-queue usage exceeds its own by more than 0.1; a leaf (source) op is one when its
# own queue usage is under 0.6; when every non-root queue is at least 0.8 full the pipeline keeps up.
# They are part of what "the slowest op" means here, so they live with the metric, not in a rule.
MINDINSIGHT_CHILD_GAP = 0.1
MINDINSIGHT_LEAF_LOW = 0.6
MINDINSIGHT_ALL_FULL = 0.8

_NO_PIPELINE = "no MindData pipeline profile (minddata_pipeline_raw / summary absent: data_process off, or no mindspore.dataset pipeline)"


def _pipeline(ctx: Context) -> dict[int, pd.DataFrame]:
    dp = ctx.capture.table("data_pipeline")
    return {int(r): g.reset_index(drop=True) for r, g in dp.groupby("rank", sort=True)}


def _ops(g: pd.DataFrame) -> pd.DataFrame:
    """The pipeline ops proper (without the consumer row)."""
    return g[(g["op_id"] != CONSUMER_OP_ID).fillna(True).to_numpy()]


def _num(x: Any) -> float | None:
    return None if x is None or pd.isna(x) else float(x)


def _children(ops: pd.DataFrame) -> dict[int, list[int]]:
    ids = {int(i) for i in ops["op_id"]}
    out: dict[int, list[int]] = {i: [] for i in ids}
    for oid, parent in zip(ops["op_id"], ops["parent_id"]):
        if not pd.isna(parent) and int(parent) in ids:
            out[int(parent)].append(int(oid))
    return out


def _roots(ops: pd.DataFrame) -> list[int]:
    ids = {int(i) for i in ops["op_id"]}
    return sorted(
        int(oid)
        for oid, parent in zip(ops["op_id"], ops["parent_id"])
        if pd.isna(parent) or int(parent) == CONSUMER_OP_ID or int(parent) not in ids
    )


def _label(row: pd.Series) -> str:
    t = row["op_type"]
    return f"{'Op' if pd.isna(t) else t}(id={int(row['op_id'])})"


def _most_common(per: dict[int, Any]) -> Any:
    vals = [v for _, v in sorted(per.items()) if v is not None]
    if not vals:
        return None
    counts = Counter(vals)
    best = max(counts.values())
    return next(v for v in vals if counts[v] == best)  # ties: the lowest rank's


# ---- data wait ----------------------------------------------------------------------------


@metric(
    "data_wait_ms_per_step",
    "ms",
    "Median over ranks and steps of the host time a step waits on the dataset",
    "steps.data_wait_us (host timeline: GetNext / DataLoader iterator events)",
)
def _data_wait_ms(ctx: Context) -> Value:
    s = ctx.steps
    if not len(s) or "data_wait_us" not in s.columns or s["data_wait_us"].isna().all():
        return Value(None, reason="data wait is not measured in this capture (no dataset iterator events on the host timeline)")
    s = s[s["data_wait_us"].notna()]
    per: dict[int, float | None] = {int(r): float(g["data_wait_us"].median()) / US_PER_MS for r, g in s.groupby("rank")}
    return Value(float(np.median(s["data_wait_us"].to_numpy(float))) / US_PER_MS, per)


# ---- MindData pipeline --------------------------------------------------------------------


def _consumer_queue_empty(g: pd.DataFrame) -> tuple[float | None, str | None]:
    """The empty share of the queue the consumer reads: the consumer row's own, else the op nearest
    the consumer (breadth first from the root) that has queue samples (EpochCtrl has none: it passes
    batches through). Several ops at that depth: the emptiest."""
    cons = g[(g["op_id"] == CONSUMER_OP_ID).fillna(False).to_numpy()]
    if len(cons) and cons["queue_empty_share"].notna().any():
        return float(cons["queue_empty_share"].dropna().iloc[0]), "device queue / iterator"
    ops = _ops(g)
    by_id = {int(r["op_id"]): r for _, r in ops.iterrows()}
    kids = _children(ops)
    level = _roots(ops)
    while level:
        vals = [(float(by_id[i]["queue_empty_share"]), i) for i in level if not pd.isna(by_id[i]["queue_empty_share"])]
        if vals:
            v, i = max(vals)
            return v, _label(by_id[i])
        level = sorted(c for i in level for c in kids.get(i, []))
    return None, None


@metric(
    "data_queue_empty_share",
    "ratio",
    "Share of samples in which the queue the training loop reads from (device queue / iterator, else the op "
    "nearest it) was empty, max over ranks",
    "data_pipeline.queue_empty_share (minddata_pipeline_raw output_queue_size, summary queue_empty_freq_pct)",
)
def _data_queue_empty(ctx: Context) -> Value:
    pipes = _pipeline(ctx)
    if not pipes:
        return Value(None, reason=_NO_PIPELINE)
    per: dict[int, float | None] = {r: _consumer_queue_empty(g)[0] for r, g in pipes.items()}
    vals = [v for v in per.values() if v is not None]
    if not vals:
        return Value(None, per, "no pipeline op has queue samples")
    return Value(max(vals), per)


def _slowest_op(g: pd.DataFrame) -> tuple[str | None, str]:
    """MindInsight's bottleneck op of one rank's pipeline, or None and why. Ops without a queue
    usage figure are left out of the comparisons (MindInsight takes them as 0)."""
    ops = _ops(g)
    if not len(ops) or ops["queue_usage"].isna().all():
        return None, "no pipeline op has a queue usage figure"
    by_id = {int(r["op_id"]): r for _, r in ops.iterrows()}
    kids = _children(ops)
    roots = set(_roots(ops))
    flagged: list[tuple[float, float, int]] = []  # (own usage, -gap, op id)
    non_root_usage: list[float] = []
    for oid, row in by_id.items():
        own = _num(row["queue_usage"])
        if oid in roots or own is None:
            continue
        non_root_usage.append(own)
        child_usage = [u for c in kids[oid] if (u := _num(by_id[c]["queue_usage"])) is not None]
        if not kids[oid]:
            if own < MINDINSIGHT_LEAF_LOW:
                flagged.append((own, 0.0, oid))
            continue
        gap = max((u - own for u in child_usage), default=0.0)
        if gap > MINDINSIGHT_CHILD_GAP:
            flagged.append((own, -gap, oid))
    if flagged:
        _, _, oid = min(flagged)  # the emptiest own queue; then the largest gap; then the lowest id
        return _label(by_id[oid]), ""
    if non_root_usage and min(non_root_usage) >= MINDINSIGHT_ALL_FULL:
        return None, f"every op's output queue is at least {MINDINSIGHT_ALL_FULL:.0%} full: the pipeline keeps up with its consumer"
    return None, (
        f"no op meets MindInsight's rule (a child's queue usage above the op's by more than {MINDINSIGHT_CHILD_GAP}, "
        f"or a source op's usage under {MINDINSIGHT_LEAF_LOW})"
    )


@metric(
    "data_slowest_op",
    "op",
    "The pipeline op that holds the data back (MindInsight's rule: a child's output-queue usage exceeds the op's "
    "own by more than 0.1, or a source op's usage is under 0.6), as 'Type(id=N)'; the most common over ranks",
    "data_pipeline.queue_usage, parent_id",
)
def _data_slowest_op(ctx: Context) -> Value:
    pipes = _pipeline(ctx)
    if not pipes:
        return Value(None, reason=_NO_PIPELINE)
    per: dict[int, Any] = {}
    why: list[str] = []
    for r, g in pipes.items():
        op, reason = _slowest_op(g)
        per[r] = op
        if op is None:
            why.append(f"rank {r}: {reason}")
    best = _most_common(per)
    return Value(best, per, None if best is not None else "; ".join(why))


@metric(
    "data_per_batch_ms",
    "ms",
    "Time the pipeline takes per batch at its consumer, max over ranks",
    "data_pipeline.per_batch_us (minddata_pipeline_summary per_batch_time)",
)
def _data_per_batch(ctx: Context) -> Value:
    pipes = _pipeline(ctx)
    if not pipes:
        return Value(None, reason=_NO_PIPELINE)
    per: dict[int, float | None] = {}
    for r, g in pipes.items():
        v = g["per_batch_us"].dropna()
        per[r] = float(v.max()) / US_PER_MS if len(v) else None
    vals = [v for v in per.values() if v is not None]
    if not vals:
        return Value(None, per, "no per-batch time (written only in minddata_pipeline_summary_*.json)")
    return Value(max(vals), per)


def _workers(ctx: Context) -> tuple[dict[int, float | None], str | None]:
    pipes = _pipeline(ctx)
    if not pipes:
        return {}, _NO_PIPELINE
    per: dict[int, float | None] = {}
    for r, g in pipes.items():
        w = _ops(g)["num_workers"].dropna()
        per[r] = float(w.sum()) if len(w) else None
    if all(v is None for v in per.values()):
        return per, "the pipeline profile records no num_workers"
    return per, None


@metric(
    "data_workers_total",
    "workers",
    "Data-pipeline workers of one training process (sum of num_parallel_workers over its ops), max over ranks",
    "data_pipeline.num_workers",
)
def _data_workers_total(ctx: Context) -> Value:
    per, why = _workers(ctx)
    vals = [v for v in per.values() if v is not None]
    if why or not vals:
        return Value(None, per, why)
    return Value(int(max(vals)), per)


@metric(
    "data_workers_vs_cores",
    "ratio",
    "Data-pipeline workers on a host over its CPU cores: workers of one rank x ranks per node (option, else 1) "
    "/ option host_cores; max over ranks",
    "data_pipeline.num_workers; options host_cores, ranks_per_node",
)
def _data_workers_vs_cores(ctx: Context) -> Value:
    per, why = _workers(ctx)
    if why:
        return Value(None, per, why)
    n_cores = ctx.options.host_cores  # a positive integer when given (msdiag/options.py)
    if n_cores is None:
        return Value(None, reason="the capture does not record the host's CPU cores: give host_cores")
    ranks_per_node = ctx.options.ranks_per_node or 1
    out = {r: (None if v is None else v * ranks_per_node / n_cores) for r, v in per.items()}
    vals = [v for v in out.values() if v is not None]
    return Value(max(vals), out) if vals else Value(None, out, "the pipeline profile records no num_workers")
