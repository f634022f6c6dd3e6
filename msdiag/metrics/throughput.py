"""Training throughput: samples/s and tokens/s, per device and for the job (issue 15).

The batch a step trains on comes from, in order: ``--tokens-per-step`` (the job's tokens per step),
``--model-config`` (global batch x sequence length), or the kernels' recorded input shapes: the
indices of the step's first embedding lookup (GatherV2 / Embedding: [batch, sequence]) give samples
and tokens, else the step's first image input (a 4-D NCHW / NHWC map of 1-4 channels) gives
samples. Shapes are one device's inputs; the job's figure multiplies by its data-parallel
replicas, so it needs the job's size as the profiler recorded it. Per device means the job's
figure over its devices (PaLM's convention for tokens/s per device); with no parallel layout
recorded, each device's inputs are taken as its own data-parallel share, and the source says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from msdiag.metrics import flops, model_config
from msdiag.metrics.registry import Context, Reads, Value, metric

READS = Reads(tables=("kernels",))


@dataclass(frozen=True)
class Batch:
    """What one step trains on: per device and for the job (None: not known), with how it was found."""

    device_samples: float | None
    device_tokens: float | None
    job_samples: float | None
    job_tokens: float | None
    source: str
    why_job: str | None = None  # why the job's figures are unknown
    why_tokens: str | None = None  # why no tokens (an image model, or --tokens-per-step only ...)


def _step_s(ctx: Context) -> float | None:
    st = ctx.steps.loc[ctx.steps["total_us"] > 0, "total_us"] if len(ctx.steps) else pd.Series(dtype=float)
    return float(np.median(st)) * 1e-6 if len(st) else None


def _world(ctx: Context) -> tuple[int | None, int, str]:
    """(the job's devices as recorded, devices sharing one replica's batch (tp x pp x cp), how)."""
    for rd in ctx.capture.ranks:
        lay = rd.info.layout
        ws = rd.info.world_size()
        if lay is not None and lay.tp and lay.pp:
            share = lay.tp * lay.pp * (lay.cp or 1)
            return (ws[0] if ws else None), share, f"tp {lay.tp} x pp {lay.pp} x cp {lay.cp or 1} devices share a replica's batch"
        if ws is not None:
            return ws[0], 1, f"no parallel layout recorded: each of the {ws[0]} devices taken as a data-parallel replica"
    return None, 1, "no parallel layout recorded: each device taken as a data-parallel replica"


def _first_per_step(k: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """The first kernel (by start) matching ``mask`` in each rank's step (a null step: the rank's whole capture)."""
    c = k[mask].assign(_step=k.loc[mask, "step"].fillna(-1).astype("int64"))
    return c.sort_values("start_us").groupby(["rank", "_step"], sort=True).head(1)


def _strs(c: pd.DataFrame, col: str) -> list[str]:
    return [str(x) if isinstance(x, str) else "" for x in c[col].tolist()]


def _from_shapes(ctx: Context) -> tuple[float, float | None, str] | None:
    """(samples, tokens or None, how) one device's inputs hold per step: median over steps and ranks."""
    whole = ctx.capture.table("kernels")
    # the compute rows of the columns the search reads, not a copy of every column (at 512 ranks: 100+ MB at the
    # peak); the shape texts of the rows found only (taking every compute row's cost the parent ~0.1 s at 512 ranks)
    at = np.flatnonzero((whole["kind"] == "compute").fillna(False).to_numpy())
    if not len(at):
        return None
    k = whole[["rank", "step", "start_us"]].take(at).set_axis(at)  # (labelled by position in the whole)

    def texts(first: pd.DataFrame) -> pd.DataFrame:  # (its rows' type and shape texts, taken by position from the whole)
        shapes = whole[["type", "input_shapes", "input_dtypes", "input_formats"]].take(first.index.to_numpy())
        return first.join(shapes.set_axis(first.index))

    # each distinct type and format judged once, on the column's codes (kernels._text_mask: the test pandas makes on
    # the texts, a null False), not every compute kernel's text taken and judged
    from msdiag.metrics.kernels import _text_mask  # (here: a module's import registers its metrics, the JSON's order)

    emb = _text_mask(ctx, "type", at, lambda t: t.str.lower().isin(flops.EMBEDDING_TYPES))
    first = texts(_first_per_step(k, emb))
    found = [flops.embedding_batch(t, s, d) for t, s, d in zip(_strs(first, "type"), _strs(first, "input_shapes"), _strs(first, "input_dtypes"))]
    pairs = [f for f in found if f is not None]
    if pairs:
        b = float(np.median([p[0] for p in pairs]))
        s = float(np.median([p[1] for p in pairs]))
        return b, b * s, f"batch {b:g} x sequence {s:g} from the indices of each step's first embedding lookup ({len(pairs)} step(s))"
    img = _text_mask(ctx, "input_formats", at, lambda t: t.str.upper().str.match(r"^(FORMAT_)?NC?HWC?"))
    first = texts(_first_per_step(k, img))
    got = [flops.image_batch(s, d, f) for s, d, f in zip(_strs(first, "input_shapes"), _strs(first, "input_dtypes"), _strs(first, "input_formats"))]
    batches = [g for g in got if g is not None]
    if batches:
        b = float(np.median(batches))
        return b, None, f"batch {b:g} from each step's first image input (4-D feature map of at most 4 channels, {len(batches)} step(s))"
    return None


def _from_options(ctx: Context, world: int | None, world_how: str) -> Batch | None:
    o = ctx.options
    if o.model_config:
        cfg = model_config.load_model_config(str(o.model_config))
        devices = cfg.devices or world
        tokens = float(cfg.global_batch * cfg.seq_len)
        per = (lambda x: x / devices) if devices else (lambda x: None)
        return Batch(per(cfg.global_batch), per(tokens), float(cfg.global_batch), tokens,
                     f"--model-config: global batch {cfg.global_batch} x sequence {cfg.seq_len}"
                     + (f" over {devices} devices" if devices else ""),
                     why_job=None)
    if o.tokens_per_step:
        t = float(o.tokens_per_step)
        n = world or len(ctx.capture.ranks)
        how = f"over {world} devices" if world else f"over the {n} ranks of the capture (the job's size is not recorded)"
        return Batch(None, t / n, None, t, f"--tokens-per-step {o.tokens_per_step} {how}",
                     why_tokens=None)
    return None


def _batch(ctx: Context) -> tuple[Batch | None, str | None]:
    """The step's batch (per device and job) and how it was found, or None and why not."""
    cached = ctx.cache.get("throughput_batch")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    world, share, world_how = _world(ctx)
    out: tuple[Batch | None, str | None]
    given = _from_options(ctx, world, world_how)
    found = None if given is not None else _from_shapes(ctx)
    if given is not None:
        out = (given, None)
    elif found is not None:
        b, t, how = found
        dev_s, dev_t = b / share, (None if t is None else t / share)
        job_s = None if world is None else dev_s * world
        job_t = None if world is None or dev_t is None else dev_t * world
        out = (Batch(dev_s, dev_t, job_s, job_t, f"{how}; {world_how}",
                     why_job=None if world else "the job's size is not recorded (profiler_metadata.json distributed_args); "
                     "give --tokens-per-step or --model-config",
                     why_tokens=None if t is not None else "an image batch has no tokens"), None)
    else:
        out = (None, "no batch found: no embedding lookup or image input with recorded shapes (record_shapes off, "
                     "Level0?); give --tokens-per-step or --model-config")
    ctx.cache["throughput_batch"] = out
    return out


def _rate(ctx: Context, attr: str, why_attr: str | None) -> Value:
    b, why = _batch(ctx)
    if b is None:
        return Value(None, reason=why)
    v = getattr(b, attr)
    if v is None:
        tokens_why = b.why_tokens if "tokens" in attr else None
        reason = tokens_why or (getattr(b, why_attr) if why_attr else None) or b.why_job
        if reason is None and attr.endswith("samples"):
            reason = "--tokens-per-step gives tokens, not samples"
        return Value(None, reason=reason or "not known")
    step = _step_s(ctx)
    if not step:
        return Value(None, reason="no step time")
    return Value(float(v) / step)


@metric("throughput_source", "text", "How the training batch per step was found (options or the inputs' shapes) and the parallel convention", "--tokens-per-step, --model-config, kernel input shapes", reads=READS)
def _throughput_source(ctx: Context) -> Value:
    b, why = _batch(ctx)
    return Value(None, reason=why) if b is None else Value(b.source)


@metric("samples_per_s", "samples/s", "Training samples the job processes per second (median step)", "batch per step x data-parallel replicas / step time", reads=READS)
def _samples_job(ctx: Context) -> Value:
    return _rate(ctx, "job_samples", "why_job")


@metric("tokens_per_s", "tokens/s", "Training tokens the job processes per second (median step)", "tokens per step / step time", reads=READS)
def _tokens_job(ctx: Context) -> Value:
    return _rate(ctx, "job_tokens", "why_job")


@metric("samples_per_s_device", "samples/s", "Training samples per second per device: the job's over its devices", "batch per step / devices sharing it / step time", reads=READS)
def _samples_device(ctx: Context) -> Value:
    return _rate(ctx, "device_samples", None)


@metric("tokens_per_s_device", "tokens/s", "Training tokens per second per device: the job's over its devices", "tokens per step / devices sharing it / step time", reads=READS)
def _tokens_device(ctx: Context) -> Value:
    return _rate(ctx, "device_tokens", None)
