"""Analytic model FLOPs per training step from a model description (the numerator of MFU).

Shape-derived FLOPs (:mod:`msdiag.metrics.flops`) count what the kernels did, padding and
recompute included; MFU wants what the model needs, by a stated convention, so two runs of the
same model with different recompute or kernels compare. This module reads a model description
and counts FLOPs the Megatron-LM way (``num_floating_point_operations``):

    per token: 3 (forward, weight gradient, data gradient) x 2 (multiply-add) x
      layers x [QKV projections (GQA-aware) + output projection + core attention QK^T and PV
      (causal: half) + FFN (2 matmuls, 3 with SwiGLU; x top-k for MoE)] + 3 x 2 x hidden x vocab

times tokens per step (global batch x sequence length), divided by the world size. Hardware
FLOPs add what recompute executes again. Two description formats are accepted:

(a) msdiag's own YAML, strict (an unknown key is an error)::

        layers: 24          # or params: 7.0e9 (active parameters) instead of the architecture
        hidden: 1024
        ffn: 4096           # default 4 x hidden; required with swiglu
        heads: 16
        kv_heads: 16        # default heads
        vocab: 50257
        seq_len: 1024
        global_batch: 8     # sequences per optimizer step, over all data-parallel ranks
        moe_experts: 8      # optional, with moe_top_k
        moe_top_k: 2
        swiglu: false
        causal: true        # default true
        recompute: none     # none | selective | full

(b) a MindFormers model YAML: ``model.model_config`` (num_layers, hidden_size, num_heads,
    n_kv_heads, intermediate_size or ffn_dim_multiplier / multiple_of, vocab_size, seq_length),
    ``runner_config`` (batch_size, gradient_accumulation_steps), ``parallel_config``
    (data_parallel, model_parallel, pipeline_stage, micro_batch_num), ``micro_batch_interleave_num``,
    ``recompute_config`` and ``moe_config`` (expert_num, num_experts_chosen); other keys are
    MindFormers' business and are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

RECOMPUTE_MODES = ("none", "selective", "full")

OWN_KEYS = (
    "params",
    "layers",
    "hidden",
    "ffn",
    "heads",
    "kv_heads",
    "vocab",
    "seq_len",
    "global_batch",
    "moe_experts",
    "moe_top_k",
    "swiglu",
    "causal",
    "recompute",
)
ARCHITECTURE_KEYS = ("layers", "hidden", "heads", "vocab")

# MindFormers model types whose FFN is gated (SwiGLU) when hidden_act is not written.
_GATED_MODEL_HINTS = ("llama", "qwen", "internlm", "baichuan", "mixtral", "deepseek", "chatglm2", "chatglm3", "glm4")
_GATED_ACTIVATIONS = ("silu", "swiglu", "swish")
MINDFORMERS_DEFAULT_MULTIPLE_OF = 256


@dataclass(frozen=True)
class ModelConfig:
    """What the FLOPs count needs to know about a model and its batch.

    ``params`` is the active parameter count (per token, for MoE). The architecture fields are
    None when the description gave only ``params``. ``recompute_fraction`` is the share of layers
    recomputed (MindFormers can list per-stage layer counts). ``devices`` is the device count the
    description's parallel layout implies, where it has one.
    """

    seq_len: int
    global_batch: int
    params: float | None = None
    layers: int | None = None
    hidden: int | None = None
    ffn: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    vocab: int | None = None
    moe_experts: int | None = None
    moe_top_k: int | None = None
    swiglu: bool = False
    causal: bool = True
    recompute: str = "none"
    recompute_fraction: float = 1.0
    devices: int | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def has_architecture(self) -> bool:
        return all(getattr(self, k) is not None for k in ARCHITECTURE_KEYS)


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def _err(path: Path, problem: str) -> ValueError:
    return ValueError(f"{path}: {problem}")


def _int(path: Path, key: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise _err(path, f"{key} must be an integer, found {value!r}")
    if int(value) < minimum:
        raise _err(path, f"{key} must be at least {minimum}, found {value!r}")
    return int(value)


def _opt_int(path: Path, key: str, value: Any, minimum: int = 1) -> int | None:
    return None if value is None else _int(path, key, value, minimum)


def _bool(path: Path, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _err(path, f"{key} must be true or false, found {value!r}")
    return value


def _number(path: Path, key: str, value: Any) -> float:
    """A positive number; also a string such as '7e9', which YAML 1.1 leaves unparsed."""
    try:
        x = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        raise _err(path, f"{key} must be a number, found {value!r}") from None
    if not x > 0:
        raise _err(path, f"{key} must be a positive number, found {value!r}")
    return x


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml  # only when a model description is given: not on every analysis' import path

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise _err(path, f"cannot be read ({e.strerror or e})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise _err(path, f"is not valid YAML ({e})") from None
    if not isinstance(data, dict):
        raise _err(path, "expected a YAML mapping of model settings")
    return data


def _check_moe(path: Path, experts: int | None, top_k: int | None, names: tuple[str, str]) -> None:
    if (experts is None) != (top_k is None):
        missing = names[1] if top_k is None else names[0]
        raise _err(path, f"missing key {missing}: MoE needs both {names[0]} and {names[1]}")
    if experts is not None and top_k is not None and top_k > experts:
        raise _err(path, f"{names[1]} ({top_k}) exceeds {names[0]} ({experts})")


def _load_own(path: Path, data: Mapping[str, Any]) -> ModelConfig:
    unknown = [k for k in data if k not in OWN_KEYS]
    if unknown:
        raise _err(path, f"unknown key {unknown[0]!r}; known keys: {', '.join(OWN_KEYS)}")
    for key in ("seq_len", "global_batch"):
        if data.get(key) is None:
            raise _err(path, f"missing key {key}")
    has_arch = [k for k in ARCHITECTURE_KEYS if data.get(k) is not None]
    if data.get("params") is None and len(has_arch) < len(ARCHITECTURE_KEYS):
        missing = next(k for k in ARCHITECTURE_KEYS if data.get(k) is None)
        raise _err(path, f"missing key {missing} (give params, or layers, hidden, heads and vocab)")
    swiglu = _bool(path, "swiglu", data.get("swiglu", False))
    causal = _bool(path, "causal", data.get("causal", True))
    recompute = data.get("recompute", "none")
    recompute = "none" if recompute is None or recompute is False else recompute
    if recompute not in RECOMPUTE_MODES:
        raise _err(path, f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, found {recompute!r}")
    hidden = _opt_int(path, "hidden", data.get("hidden"))
    heads = _opt_int(path, "heads", data.get("heads"))
    kv_heads = _opt_int(path, "kv_heads", data.get("kv_heads"))
    ffn = _opt_int(path, "ffn", data.get("ffn"))
    full_arch = len(has_arch) == len(ARCHITECTURE_KEYS)
    if full_arch and ffn is None:
        if swiglu:
            raise _err(path, "missing key ffn (a SwiGLU FFN has no standard width; give ffn)")
        ffn = 4 * hidden  # type: ignore[operator]
    if heads is not None and kv_heads is None:
        kv_heads = heads
    if heads is not None and kv_heads is not None and kv_heads > heads:
        raise _err(path, f"kv_heads ({kv_heads}) exceeds heads ({heads})")
    experts = _opt_int(path, "moe_experts", data.get("moe_experts"))
    top_k = _opt_int(path, "moe_top_k", data.get("moe_top_k"))
    _check_moe(path, experts, top_k, ("moe_experts", "moe_top_k"))
    return ModelConfig(
        seq_len=_int(path, "seq_len", data["seq_len"]),
        global_batch=_int(path, "global_batch", data["global_batch"]),
        params=None if data.get("params") is None else _number(path, "params", data["params"]),
        layers=_opt_int(path, "layers", data.get("layers")),
        hidden=hidden,
        ffn=ffn,
        heads=heads,
        kv_heads=kv_heads,
        vocab=_opt_int(path, "vocab", data.get("vocab")),
        moe_experts=experts,
        moe_top_k=top_k,
        swiglu=swiglu,
        causal=causal,
        recompute=recompute,
        source=f"{path} (msdiag model YAML)",
        notes=("params ignored: the architecture is given",) if full_arch and data.get("params") is not None else (),
    )


def _section(path: Path, data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    sec = data.get(key)
    if sec is None:
        return {}
    if not isinstance(sec, Mapping):
        raise _err(path, f"{key} must be a mapping, found {type(sec).__name__}")
    return sec


def _first(mc: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if mc.get(k) is not None:
            return mc[k]
    return None


def mindformers_ffn(
    hidden: int, intermediate_size: int | None, ffn_dim_multiplier: float | None, multiple_of: int
) -> int:
    """The FFN width MindFormers' LLaMA feed-forward builds (llama_layer.LlamaFeedForward):
    intermediate_size if given, else 4h, times (ffn_dim_multiplier + 0.01) if given, times 2/3,
    rounded up to a multiple of multiple_of."""
    if intermediate_size is not None:
        return intermediate_size
    dim = 4 * hidden
    if ffn_dim_multiplier is not None:
        dim = int((ffn_dim_multiplier + 0.01) * dim)
    dim = int(2 * dim / 3)
    return multiple_of * ((dim + multiple_of - 1) // multiple_of)


def _recompute_mode(path: Path, rc: Mapping[str, Any], layers: int) -> tuple[str, float]:
    """MindFormers recompute_config -> (mode, share of layers). ``recompute`` may be a bool or a
    per-stage list of layer counts; ``select_recompute`` likewise."""

    def amount(v: Any) -> float:
        if isinstance(v, bool) or v is None:
            return 1.0 if v else 0.0
        if isinstance(v, (list, tuple)):
            try:
                return min(1.0, sum(int(x) for x in v) / layers)
            except (TypeError, ValueError):
                raise _err(path, f"recompute_config: expected a list of layer counts, found {v!r}") from None
        if isinstance(v, int):
            return min(1.0, v / layers)
        return 1.0 if v else 0.0

    full = amount(rc.get("recompute"))
    if full > 0:
        return "full", full
    sel = amount(rc.get("select_recompute"))
    if sel > 0:
        return "selective", sel
    return "none", 1.0


def _load_mindformers(path: Path, data: Mapping[str, Any]) -> ModelConfig:
    model = _section(path, data, "model")
    mc = _section(path, model, "model_config")
    runner = _section(path, data, "runner_config")
    par = _section(path, data, "parallel_config")

    def need(value: Any, key: str) -> Any:
        if value is None:
            raise _err(path, f"missing key {key}")
        return value

    layers = _int(path, "model.model_config.num_layers", need(mc.get("num_layers"), "model.model_config.num_layers"))
    hidden = _int(path, "model.model_config.hidden_size", need(mc.get("hidden_size"), "model.model_config.hidden_size"))
    heads_v = need(_first(mc, "num_heads", "num_attention_heads"), "model.model_config.num_heads")
    heads = _int(path, "model.model_config.num_heads", heads_v)
    kv_v = _first(mc, "n_kv_heads", "num_key_value_heads", "num_query_groups")
    kv_heads = heads if kv_v is None else _int(path, "model.model_config.n_kv_heads", kv_v)
    vocab = _int(path, "model.model_config.vocab_size", need(mc.get("vocab_size"), "model.model_config.vocab_size"))
    seq = _int(path, "model.model_config.seq_length", need(mc.get("seq_length"), "model.model_config.seq_length"))
    notes: list[str] = []
    swiglu, ffn = _mindformers_ffn(path, model, mc, hidden, notes)
    global_batch, devices = _mindformers_batch(path, data, mc, runner, par, need, notes)
    experts, top_k = _mindformers_moe(path, data)

    recompute, fraction = _recompute_mode(path, _section(path, data, "recompute_config"), layers)
    return ModelConfig(
        seq_len=seq,
        global_batch=global_batch,
        layers=layers,
        hidden=hidden,
        ffn=ffn,
        heads=heads,
        kv_heads=kv_heads,
        vocab=vocab,
        moe_experts=experts,
        moe_top_k=top_k,
        swiglu=swiglu,
        causal=True,
        recompute=recompute,
        recompute_fraction=fraction,
        devices=devices,
        source=f"{path} (MindFormers YAML)",
        notes=tuple(notes),
    )


def _mindformers_ffn(path: Path, model: Mapping[str, Any], mc: Mapping[str, Any], hidden: int, notes: list[str]) -> tuple[bool, int]:
    """(SwiGLU or not, the FFN width) of a MindFormers model_config."""
    act = mc.get("hidden_act")
    mtype = " ".join(str(x) for x in (mc.get("type"), _section(path, model, "arch").get("type")) if x).lower()
    if act is not None:
        swiglu = str(act).lower() in _GATED_ACTIVATIONS
    else:
        swiglu = any(h in mtype for h in _GATED_MODEL_HINTS) or mc.get("multiple_of") is not None
        notes.append(f"SwiGLU {'assumed' if swiglu else 'not assumed'} from the model type ({mtype or 'none given'})")
    inter = _first(mc, "intermediate_size", "ffn_hidden_size")
    if inter is not None:
        return swiglu, _int(path, "model.model_config.intermediate_size", inter)
    if swiglu:
        mult = mc.get("ffn_dim_multiplier")
        return swiglu, mindformers_ffn(
            hidden,
            None,
            None if mult is None else _number(path, "model.model_config.ffn_dim_multiplier", mult),
            _int(path, "model.model_config.multiple_of", mc.get("multiple_of") or MINDFORMERS_DEFAULT_MULTIPLE_OF),
        )
    return swiglu, 4 * hidden


def _mindformers_batch(
    path: Path,
    data: Mapping[str, Any],
    mc: Mapping[str, Any],
    runner: Mapping[str, Any],
    par: Mapping[str, Any],
    need: Callable[[Any, str], Any],
    notes: list[str],
) -> tuple[int, int]:
    """(the global batch, the devices of the parallel layout) of a MindFormers config."""
    batch_key = "runner_config.batch_size"
    batch = _int(path, batch_key, need(runner.get("batch_size", mc.get("batch_size")), batch_key))
    gas = _int(path, "runner_config.gradient_accumulation_steps", runner.get("gradient_accumulation_steps") or 1)
    dp = _int(path, "parallel_config.data_parallel", par.get("data_parallel") or 1)
    mp = _int(path, "parallel_config.model_parallel", par.get("model_parallel") or 1)
    pp = _int(path, "parallel_config.pipeline_stage", par.get("pipeline_stage") or 1)
    cp = _int(path, "parallel_config.context_parallel", par.get("context_parallel") or 1)
    mbn = _int(path, "parallel_config.micro_batch_num", par.get("micro_batch_num") or 1)
    mbi = _int(path, "micro_batch_interleave_num", data.get("micro_batch_interleave_num") or 1)
    # MindFormers base_trainer, semi-auto parallel with full_batch: pipeline runs micro_batch_num
    # micro-batches per step (gradient accumulation is then ignored); otherwise it accumulates.
    global_batch = batch * dp * mbi * (mbn if pp > 1 else gas)
    notes.append(
        f"global batch {global_batch} = batch_size {batch} x data_parallel {dp} x micro_batch_interleave_num {mbi}"
        + (f" x micro_batch_num {mbn}" if pp > 1 else f" x gradient_accumulation_steps {gas}")
    )
    return global_batch, dp * mp * pp * cp


def _mindformers_moe(path: Path, data: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(experts, experts per token) of a MindFormers moe_config; (None, None) for a dense model."""
    moe = _section(path, data, "moe_config")
    experts = _opt_int(path, "moe_config.expert_num", moe.get("expert_num"))
    top_k = _opt_int(path, "moe_config.num_experts_chosen", moe.get("num_experts_chosen"))
    if experts is not None and experts <= 1:
        experts, top_k = None, None  # MindFormers writes expert_num: 1 for a dense model
    elif experts is not None and top_k is None:
        top_k = 1
    _check_moe(path, experts, top_k, ("moe_config.expert_num", "moe_config.num_experts_chosen"))
    return experts, top_k


def load_model_config(path: Path | str) -> ModelConfig:
    """Read a model description YAML (msdiag's own, or a MindFormers one recognised by its
    ``model.model_config`` section). Raises ValueError naming the file and the key for an unknown
    key (own format), a missing needed key or a value of the wrong kind."""
    path = Path(path)
    data = _read_yaml(path)
    model = data.get("model")
    if isinstance(model, Mapping) and "model_config" in model:
        return _load_mindformers(path, data)
    return _load_own(path, data)


# --------------------------------------------------------------------------------------------
# counting
# --------------------------------------------------------------------------------------------


def _layer_forward_flops_per_token(cfg: ModelConfig) -> dict[str, float]:
    """Forward FLOPs per token of one transformer layer, by part (head dim = hidden / heads)."""
    h = float(cfg.hidden)  # type: ignore[arg-type]
    kv_ratio = cfg.kv_heads / cfg.heads  # type: ignore[operator]
    core = 4.0 * h * cfg.seq_len * (0.5 if cfg.causal else 1.0)  # QK^T + PV over seq_len keys
    ffn_mats = 3.0 if cfg.swiglu else 2.0
    top_k = cfg.moe_top_k if cfg.moe_experts else 1
    return {
        "qkv": 2.0 * h * (h + 2.0 * h * kv_ratio),
        "out": 2.0 * h * h,
        "core": core,
        "ffn": 2.0 * h * cfg.ffn * ffn_mats * top_k,  # type: ignore[operator]
    }


def flops_per_step(cfg: ModelConfig, world_size: int) -> dict[str, Any]:
    """Model and hardware FLOPs of one training step per device, and the convention used.

    Model FLOPs follow Megatron-LM (see the module doc) when the architecture is known; with only
    ``params`` they are 6 x params x tokens plus, when layers and hidden are known, the core
    attention term 6 x layers x hidden x seq_len per token (12 when not causal; PaLM's
    12 x L x H x Q x T with causal half). Hardware FLOPs add recompute: selective runs the core
    attention forward once more; full runs every layer's forward once more (the output layer is
    not recomputed; with only params the whole forward, +1/3). Per device = per step / world_size.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world size must be a positive integer, got {world_size!r}")
    tokens = float(cfg.global_batch) * cfg.seq_len
    causal_txt = "causal core attention counted half" if cfg.causal else "core attention counted in full (not causal)"
    parts: list[str] = []
    if cfg.has_architecture:
        layer = _layer_forward_flops_per_token(cfg)
        layer_fwd = sum(layer.values())
        logits_fwd = 2.0 * cfg.hidden * cfg.vocab  # type: ignore[operator]
        model = 3.0 * tokens * (cfg.layers * layer_fwd + logits_fwd)  # type: ignore[operator]
        if cfg.recompute == "selective":
            extra = tokens * cfg.layers * layer["core"] * cfg.recompute_fraction  # type: ignore[operator]
        elif cfg.recompute == "full":
            extra = tokens * cfg.layers * layer_fwd * cfg.recompute_fraction  # type: ignore[operator]
        else:
            extra = 0.0
        ffn_txt = f"FFN {cfg.ffn} x{3 if cfg.swiglu else 2} matmuls ({'SwiGLU' if cfg.swiglu else 'no gate'})"
        if cfg.moe_experts:
            ffn_txt += f" x top-{cfg.moe_top_k} of {cfg.moe_experts} experts"
        parts.append(
            "Megatron-LM: 3 (fwd, wgrad, dgrad) x 2 (FMA) x per-layer matmuls: "
            f"{cfg.layers} layers, hidden {cfg.hidden}, QKV with {cfg.kv_heads}/{cfg.heads} KV heads, "
            f"{causal_txt}, {ffn_txt}; logits 3*2*h*V (V={cfg.vocab})"
        )
    else:
        assert cfg.params is not None
        model = 6.0 * cfg.params * tokens
        attn_fwd = 0.0
        if cfg.layers is not None and cfg.hidden is not None:
            attn_fwd = 4.0 * cfg.hidden * cfg.seq_len * (0.5 if cfg.causal else 1.0) * cfg.layers
            model += 3.0 * tokens * attn_fwd
            parts.append(
                f"6 x {cfg.params:.4g} params per token + core attention 3 x 4 x layers x hidden x seq_len "
                f"({cfg.layers} x {cfg.hidden} x {cfg.seq_len}; {causal_txt})"
            )
        else:
            parts.append(f"6 x {cfg.params:.4g} params per token (no attention term: layers and hidden unknown)")
        if cfg.recompute == "selective":
            extra = tokens * attn_fwd * cfg.recompute_fraction
        elif cfg.recompute == "full":
            extra = model / 3.0 * cfg.recompute_fraction
        else:
            extra = 0.0
    parts.append(f"over {cfg.global_batch} x {cfg.seq_len} tokens per step, divided by {world_size} devices")
    if cfg.recompute != "none":
        what = "core attention forward" if cfg.recompute == "selective" else "forward of every layer"
        share = "" if cfg.recompute_fraction >= 1.0 else f" ({cfg.recompute_fraction:.0%} of layers)"
        parts.append(f"hardware FLOPs add {cfg.recompute} recompute: one more {what}{share}")
    else:
        parts.append("no recompute: hardware FLOPs = model FLOPs")
    parts.extend(cfg.notes)
    if cfg.devices is not None and cfg.devices != world_size:
        parts.append(f"note: the description's parallel layout implies {cfg.devices} devices")
    return {
        "model_flops_per_device": model / world_size,
        "hardware_flops_per_device": (model + extra) / world_size,
        "convention": "; ".join(parts),
    }
