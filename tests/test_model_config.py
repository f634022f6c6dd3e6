"""Analytic model FLOPs per step from a model YAML (msdiag.metrics.model_config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from msdiag.metrics.model_config import flops_per_step, load_model_config, mindformers_ffn


def write(tmp_path: Path, text: str, name: str = "model.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_gpt_like_by_hand(tmp_path: Path) -> None:
    """GPT-like: 24 layers, hidden 1024, 16 heads (MHA), FFN 4h = 4096 (default), GELU, vocab
    50000, seq 1024, global batch 8, causal, on 8 devices.

    Forward FLOPs per token and layer:
      QKV   2 * 1024 * (1024 + 2 * 1024)   =  6,291,456
      out   2 * 1024 * 1024                =  2,097,152
      core  4 * 1024 * 1024 / 2 (causal)   =  2,097,152
      FFN   2 * 1024 * 4096 * 2            = 16,777,216
      layer                                = 27,262,976;  x 24 = 654,311,424
    logits 2 * 1024 * 50000 = 102,400,000 -> forward 756,711,424 per token
    x 3 (fwd, wgrad, dgrad) = 2,270,134,272 per token; x 8 * 1024 = 8192 tokens
    = 18,596,939,956,224 per step; / 8 devices = 2,324,617,494,528.
    (Megatron's closed form agrees: 12 * 8 * 1024 * 24 * 1024^2 * (1 + 1 + 1024/2048 + 4 +
    50000/(2*24*1024)) = 2,473,901,162,496 * 7.5172526... = 18,596,939,956,224.)
    """
    p = write(tmp_path, "layers: 24\nhidden: 1024\nheads: 16\nvocab: 50000\nseq_len: 1024\nglobal_batch: 8\n")
    cfg = load_model_config(p)
    assert cfg.ffn == 4096 and cfg.kv_heads == 16 and cfg.causal and cfg.recompute == "none"
    r = flops_per_step(cfg, 8)
    assert r["model_flops_per_device"] == 2_324_617_494_528
    assert r["hardware_flops_per_device"] == r["model_flops_per_device"]
    assert "causal core attention counted half" in r["convention"]
    assert "Megatron-LM" in r["convention"]


def test_gqa_swiglu_moe_recompute_by_hand(tmp_path: Path) -> None:
    """2 layers, hidden 64, 8 heads of 8 with 2 KV heads, SwiGLU FFN 128, 4 experts top-2,
    vocab 1000, seq 32, global batch 4 (128 tokens).

    Forward per token and layer:
      QKV  2 * 64 * (64 + 2 * 64 * 2/8) = 2 * 64 * 96 = 12,288
      out  2 * 64 * 64                              =  8,192
      core 4 * 64 * 32 / 2                          =  4,096
      FFN  2 * 64 * 128 * 3 (SwiGLU) * 2 (top-2)    = 98,304
      layer = 122,880; x 2 = 245,760; logits 2 * 64 * 1000 = 128,000 -> 373,760
    model = 3 * 373,760 * 128 = 143,523,840 per step.
    selective recompute: + 128 tokens * 2 layers * 4,096 = 1,048,576 -> 144,572,416.
    full recompute: + 128 * 245,760 = 31,457,280 -> 174,981,120.
    On 2 devices: halves.
    """
    base = (
        "layers: 2\nhidden: 64\nheads: 8\nkv_heads: 2\nffn: 128\nvocab: 1000\nseq_len: 32\n"
        "global_batch: 4\nmoe_experts: 4\nmoe_top_k: 2\nswiglu: true\n"
    )
    r = flops_per_step(load_model_config(write(tmp_path, base + "recompute: selective\n")), 2)
    assert r["model_flops_per_device"] == 143_523_840 / 2
    assert r["hardware_flops_per_device"] == 144_572_416 / 2
    assert "top-2 of 4 experts" in r["convention"] and "selective recompute" in r["convention"]
    r = flops_per_step(load_model_config(write(tmp_path, base + "recompute: full\n")), 1)
    assert r["model_flops_per_device"] == 143_523_840
    assert r["hardware_flops_per_device"] == 174_981_120
    # not causal: core doubles to 8,192 per token and layer: + 3 * 128 * 2 * 4,096 = 3,145,728
    r = flops_per_step(load_model_config(write(tmp_path, base + "causal: false\n")), 1)
    assert r["model_flops_per_device"] == 143_523_840 + 3_145_728


def test_params_only(tmp_path: Path) -> None:
    """params 1e9, 24 layers, hidden 2048, seq 2048, global batch 16 (32,768 tokens), causal:
    6 * 1e9 * 32768 = 196,608,000,000,000
    + attention 3 * 4 * 2048 * 2048 / 2 * 24 = 603,979,776 per token * 32768 = 19,791,209,299,968
    = 216,399,209,299,968. Full recompute adds a third: 288,532,279,066,624 (rounded in float).
    Without layers / hidden: 6N only.
    """
    p = write(tmp_path, "params: 1.0e9\nlayers: 24\nhidden: 2048\nseq_len: 2048\nglobal_batch: 16\n")
    r = flops_per_step(load_model_config(p), 1)
    assert r["model_flops_per_device"] == 216_399_209_299_968
    p = write(tmp_path, "params: 7e9\nseq_len: 2048\nglobal_batch: 16\nrecompute: full\n")
    r = flops_per_step(load_model_config(p), 4)
    # 6 * 7e9 * 32768 / 4 = 344,064,000,000,000; hardware x 4/3
    assert r["model_flops_per_device"] == 344_064_000_000_000
    assert r["hardware_flops_per_device"] == pytest.approx(344_064_000_000_000 * 4 / 3)
    assert "no attention term" in r["convention"]


def test_mindformers_llama2_7b(tmp_path: Path) -> None:
    """MindFormers LLaMA2-7B layout: 32 layers, hidden 4096, 32 heads, vocab 32000, seq 4096,
    multiple_of 256 -> FFN: 4 * 4096 = 16384 -> 2/3 -> 10922 -> up to a multiple of 256 = 11008.
    batch_size 1 x data_parallel 8 = global batch 8 (32,768 tokens) on 8 devices.

    Forward per token and layer: QKV 2*4096*12288 = 100,663,296; out 33,554,432;
    core 4*4096*4096/2 = 33,554,432; FFN 2*4096*11008*3 = 270,532,608 -> 438,304,768;
    x 32 = 14,025,752,576; logits 2*4096*32000 = 262,144,000 -> 14,287,896,576;
    x 3 = 42,863,689,728 per token; x 32768 = 1,404,557,385,007,104; / 8 = 175,569,673,125,888.
    """
    text = """
seed: 0
runner_config:
  epochs: 2
  batch_size: 1
  sink_mode: True
  sink_size: 2
parallel_config:
  data_parallel: 8
  model_parallel: 1
  pipeline_stage: 1
  use_seq_parallel: False
  micro_batch_num: 1
  vocab_emb_dp: True
micro_batch_interleave_num: 1
recompute_config:
  recompute: False
  select_recompute: False
model:
  model_config:
    type: LlamaConfig
    batch_size: 1
    seq_length: 4096
    hidden_size: 4096
    num_layers: 32
    num_heads: 32
    vocab_size: 32000
    multiple_of: 256
    rms_norm_eps: 1.0e-5
    compute_dtype: "float16"
  arch:
    type: LlamaForCausalLM
"""
    cfg = load_model_config(write(tmp_path, text))
    assert (cfg.ffn, cfg.swiglu, cfg.global_batch, cfg.devices) == (11008, True, 8, 8)
    r = flops_per_step(cfg, 8)
    assert r["model_flops_per_device"] == 175_569_673_125_888
    assert r["hardware_flops_per_device"] == r["model_flops_per_device"]
    assert "global batch 8" in r["convention"]


def test_mindformers_pipeline_gqa_recompute(tmp_path: Path) -> None:
    """pipeline_stage 2: global batch = batch_size 2 x dp 2 x micro_batch_num 4 = 16 (gradient
    accumulation is ignored under pipeline parallel); 2 x 2 x 2 = 8 devices; recompute: True = full.
    4 layers, hidden 512, 8 heads / 2 KV heads, intermediate_size 1024, silu (SwiGLU), vocab 1000,
    seq 128 (2048 tokens).
    Forward per token and layer: QKV 2*512*(512 + 2*512*2/8) = 786,432; out 524,288;
    core 4*512*128/2 = 131,072; FFN 2*512*1024*3 = 3,145,728 -> 4,587,520; x 4 = 18,350,080;
    logits 2*512*1000 = 1,024,000 -> 19,374,080; x 3 = 58,122,240; x 2048 = 119,034,347,520.
    Full recompute: + 2048 * 18,350,080 = 37,580,963,840 -> 156,615,311,360. / 8 devices.
    """
    text = """
runner_config: {batch_size: 2, gradient_accumulation_steps: 3}
parallel_config: {data_parallel: 2, model_parallel: 2, pipeline_stage: 2, micro_batch_num: 4}
recompute_config: {recompute: True, select_recompute: False}
model:
  model_config: {type: LlamaConfig, num_layers: 4, hidden_size: 512, num_heads: 8, n_kv_heads: 2,
                 intermediate_size: 1024, hidden_act: silu, vocab_size: 1000, seq_length: 128}
"""
    cfg = load_model_config(write(tmp_path, text))
    assert (cfg.global_batch, cfg.devices, cfg.recompute, cfg.kv_heads) == (16, 8, "full", 2)
    r = flops_per_step(cfg, 8)
    assert r["model_flops_per_device"] == 119_034_347_520 / 8
    assert r["hardware_flops_per_device"] == 156_615_311_360 / 8


def test_mindformers_ffn_rule() -> None:
    # LLaMA2-70B: hidden 8192, ffn_dim_multiplier 1.3, multiple_of 4096:
    # int(1.31 * 32768) = 42926; int(2 * 42926 / 3) = 28617; up to 4096 multiple = 28672
    assert mindformers_ffn(8192, None, 1.3, 4096) == 28672
    assert mindformers_ffn(4096, None, None, 256) == 11008
    assert mindformers_ffn(4096, 14336, None, 256) == 14336


@pytest.mark.parametrize(
    "text, key",
    [
        ("layers: 2\nhidden: 8\nheads: 2\nvocab: 10\nseq_len: 4\nglobal_batch: 1\nhiden: 8\n", "hiden"),
        ("layers: 2\nhidden: 8\nheads: 2\nvocab: 10\nseq_len: 4\n", "global_batch"),
        ("layers: 2\nhidden: 8\nvocab: 10\nseq_len: 4\nglobal_batch: 1\n", "heads"),
        ("layers: 2\nhidden: 8\nheads: 2\nvocab: 10\nseq_len: 4\nglobal_batch: 1\nswiglu: true\n", "ffn"),
        ("params: 1e9\nseq_len: 4\nglobal_batch: 1\nmoe_experts: 8\n", "moe_top_k"),
        ("params: 1e9\nseq_len: 4\nglobal_batch: 1\nrecompute: some\n", "recompute"),
        ("params: 1e9\nseq_len: four\nglobal_batch: 1\n", "seq_len"),
        (
            "model:\n  model_config:\n    num_layers: 2\n    hidden_size: 8\n    num_heads: 2\n    seq_length: 4\n",
            "vocab_size",
        ),
        (
            "model:\n  model_config: {num_layers: 2, hidden_size: 8, num_heads: 2, seq_length: 4, vocab_size: 10}\n",
            "runner_config.batch_size",
        ),
    ],
)
def test_errors_name_key_and_file(tmp_path: Path, text: str, key: str) -> None:
    p = write(tmp_path, text, "bad_model.yaml")
    with pytest.raises(ValueError) as e:
        load_model_config(p)
    assert key in str(e.value) and "bad_model.yaml" in str(e.value)


def test_bad_world_size(tmp_path: Path) -> None:
    cfg = load_model_config(write(tmp_path, "params: 1e9\nseq_len: 4\nglobal_batch: 1\n"))
    with pytest.raises(ValueError):
        flops_per_step(cfg, 0)
