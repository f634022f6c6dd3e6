"""FLOPs per kernel from recorded shapes (msdiag.metrics.flops), checked by hand and against the
PMU's own cube FLOPs on real Ascend output, and against per-launch shapes on MindSpore CPU."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from msdiag.ingest.ascend_csv import read_kernel_details
from msdiag.ingest.loader import load
from msdiag.metrics.flops import host_op_flops, kernel_flops, matmul_flops, op_type_from_name

SINGLE = Path("ascend/single-files")
# NB: the two kernel_details files in single-files are named the other way round from
# PROVENANCE.md: "pipeutil_large" holds the ArithmeticUtilization columns (aic_cube_fops) and
# "arith_fops" the PipeUtilization ones.
ARITH = SINGLE / "kernel_details_pipeutil_large.csv"
FLASH = SINGLE / "kernel_details_arith_fops.csv"
CNN = Path("ascend/torchnpu-2rank-level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
GRAPH_CPU = Path("mindspore-cpu/legacy_Profiler_graph_mem")


def frame(rows: Sequence[Mapping[str, object]]) -> pd.DataFrame:
    cols = ["type", "name", "input_shapes", "input_formats", "output_shapes"]
    return pd.DataFrame([{c: r.get(c) for c in cols} for r in rows]).astype("string")


def one(**row: object) -> float:
    return float(kernel_flops(frame([row])).iloc[0])


# --------------------------------------------------------------------------------------------
# hand-checked single kernels
# --------------------------------------------------------------------------------------------


def test_matmul_transpose_b_from_output_shape() -> None:
    # MatMul91: x [4096, 12288], w [4608, 12288] -> [4096, 4608]: M=4096, N=4608, K=12288
    # (transpose_b). 2 * 4096 * 4608 * 12288 = 463,856,467,968
    f = one(type="MatMul", input_shapes="4096,12288;4608,12288", output_shapes="4096,4608")
    assert f == 2 * 4096 * 4608 * 12288 == 463_856_467_968


def test_matmul_transpose_a_and_bias_input() -> None:
    # weight gradient a^T b: [32, 4096]^T [32, 9216] -> [4096, 9216]: K = 32.
    # 2 * 4096 * 9216 * 32 = 2,415,919,104
    assert one(type="MatMulV3", input_shapes="32,4096;32,9216", output_shapes="4096,9216") == 2_415_919_104
    # Addmm with a bias as third input: [32, 9216] x [4096, 9216]^T + [4096]; the bias is no FLOPs.
    # 2 * 32 * 4096 * 9216 = 2,415,919,104
    assert one(type="MatMulV2", input_shapes="32,9216;4096,9216;4096", output_shapes="32,4096") == 2_415_919_104


def test_batch_matmul_from_output_shape() -> None:
    # BatchMatMul96: [12, 1024, 512] x [12, 512, 1024] -> [12, 1024, 1024]: batch 12, K = 512.
    # 2 * 12 * 1024 * 1024 * 512 = 12,884,901,888
    f = one(type="BatchMatMul", input_shapes="12,1024,512;12,512,1024", output_shapes="12,1024,1024")
    assert f == 12_884_901_888


def test_inconsistent_or_missing_shapes_are_nan() -> None:
    # [81920, 4096] x [8192, 512] -> [4096, 512] (a mangled row of the corpus): no K fits both.
    assert math.isnan(one(type="MatMulV2", input_shapes="81920,4096;8192,512", output_shapes="4096,512"))
    assert math.isnan(one(type="MatMul", input_shapes=None, output_shapes=None))
    assert math.isnan(one(type="MatMul", input_shapes="-1,64;64,64", output_shapes="-1,64"))
    assert math.isnan(one(type="Add", input_shapes="4,4;4,4", output_shapes="4,4"))


def test_type_recovered_from_name() -> None:
    assert op_type_from_name("aclnnMm_MatMulCommon_MatMulV2") == "MatMulV2"
    assert op_type_from_name("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore_varlen") == (
        "FlashAttentionScore"
    )
    assert op_type_from_name("Default/network-WithLossCell/_backbone-Net/dense-Dense/MatMul-op3") == "MatMul"
    assert op_type_from_name("Conv2DBackpropInput5") == "Conv2DBackpropInput"
    assert op_type_from_name("MatMul91") == "MatMul"
    assert op_type_from_name("trans_TransData_0") is None
    assert op_type_from_name(None) is None
    # type null: recovered from the name. [32, 1000] x [1000, 4096] -> [32, 4096]:
    # 2 * 32 * 4096 * 1000 = 262,144,000
    f = one(type=None, name="aclnnMm_MatMulCommon_MatMulV2", input_shapes="32,1000;1000,4096", output_shapes="32,4096")
    assert f == 262_144_000
    # a known non-formula type is not overridden by the name
    f = one(type="Add", name="aclnnMm_MatMulCommon_MatMulV2", input_shapes="2,2;2,2", output_shapes="2,2")
    assert math.isnan(f)


def test_cpu_shapes_infer_transposes() -> None:
    # MindSpore CPU records inputs only. Dense forward x.W^T: [512, 64] x [192, 64]: K = 64.
    # 2 * 512 * 192 * 64 = 12,582,912
    assert one(type="MatMul", input_shapes="512,64;192,64;;") == 12_582_912
    # Same shapes [512, 64] x [512, 64]: a.b^T (K=64) or a^T.b (K=512) fit; 2-D prefers the
    # weight gradient dY^T.X: 2 * 64 * 64 * 512 = 4,194,304
    assert one(type="MatMul", input_shapes="512,64;512,64") == 4_194_304
    # Batched q.k^T: [16, 4, 32, 16] x [16, 4, 32, 16]: batch 64, K = 16 (transpose_b preferred).
    # 2 * 64 * 32 * 32 * 16 = 2,097,152
    assert one(type="BatchMatMul", input_shapes="16,4,32,16;16,4,32,16;;") == 2_097_152
    # Dense: x [16, 64], weight [10, 64]: 2 * 16 * 64 * 10 = 20,480
    assert one(type="Dense", input_shapes="16,64;10,64;10") == 20_480
    # Conv2D without an output shape: stride and padding unknown -> NaN
    assert math.isnan(one(type="Conv2D", input_shapes="8,3,32,32;16,3,3,3"))


def test_conv2d_plain_layouts() -> None:
    # NCHW: x [8, 3, 32, 32], w [16, 3, 3, 3] -> [8, 16, 30, 30]: 2 * 8 * 30 * 30 * 16 * (3*3*3)
    # = 6,220,800
    f = one(type="Conv2D", input_shapes="8,3,32,32;16,3,3,3", input_formats="NCHW;NCHW", output_shapes="8,16,30,30")
    assert f == 2 * 8 * 30 * 30 * 16 * 27 == 6_220_800
    # NHWC: the same conv with x [8, 32, 32, 3], w [16, 3, 3, 3] (OHWI), y [8, 30, 30, 16]
    f = one(type="Conv2D", input_shapes="8,32,32,3;16,3,3,3", input_formats="NHWC;NHWC", output_shapes="8,30,30,16")
    assert f == 6_220_800
    # depthwise (groups = 16): w [16, 1, 3, 3]: 2 * 8 * 30 * 30 * 16 * 9 = 2,073,600
    f = one(type="Conv2D", input_shapes="8,16,32,32;16,1,3,3", input_formats="NCHW;NCHW", output_shapes="8,16,30,30")
    assert f == 2_073_600
    # backprops of the NCHW conv cost the same: dx from (size, w, dy), dw from (x, size, dy)
    assert one(type="Conv2DBackpropInput", input_shapes="4;16,3,3,3;8,16,30,30", output_shapes="8,3,32,32") == 6_220_800
    dw = one(type="Conv2DBackpropFilter", input_shapes="8,3,32,32;4;8,16,30,30", output_shapes="16,3,3,3")
    assert dw == 6_220_800


def test_grouped_matmul() -> None:
    # x [8192, 4096] tokens routed over 8 experts [8, 4096, 1408] -> y [8192, 1408]:
    # every token through one expert: 2 * 8192 * 4096 * 1408 = 94,489,280,512
    f = one(type="GroupedMatmul", input_shapes="8192,4096;8,4096,1408;;;;;;8", output_shapes="8192,1408")
    assert f == 94_489_280_512
    # weight gradient form: x [8192, 4096] (T on dim 0), y [8, 4096, 1408]: same count
    f = one(type="GroupedMatmul", input_shapes="8192,4096;8192,1408;8", output_shapes="8,4096,1408")
    assert f == 94_489_280_512


def test_flash_attention_layouts() -> None:
    # BNSD q [2, 8, 1024, 64], no mask, softmax_max [2, 8, 1024, 8]: 4 * 2 * 8 * 1024 * 1024 * 64
    # = 4,294,967,296 (no mask: not causal, counted in full)
    f = one(
        type="FlashAttentionScore",
        input_shapes="2,8,1024,64;2,8,1024,64;2,8,1024,64;;;;;;;;;",
        output_shapes="2,8,1024,8;2,8,1024,8;;2,8,1024,64",
    )
    assert f == 4_294_967_296
    # BSND with GQA (k has 2 heads) and a causal 1024 x 1024 mask: half of
    # 4 * 2 * 8 * 1024 * 1024 * 64 = 2,147,483,648
    f = one(
        type="FlashAttentionScore",
        input_shapes="2,1024,8,64;2,1024,2,64;2,1024,2,64;;;;1024,1024;;;;;",
        output_shapes="2,8,1024,8;2,8,1024,8;;2,1024,8,64",
    )
    assert f == 2_147_483_648
    # BSH without softmax_max: the mask [1024, 1024] gives S, so B = 2: 4 * B * S * S * H / 2
    # = 4 * 2 * 1024 * 1024 * 512 / 2 = 2,147,483,648
    f = one(type="FlashAttentionScore", input_shapes="2,1024,512;2,1024,512;2,1024,512;;;;1024,1024", output_shapes="")
    assert f == 2_147_483_648
    # a pse (position bias) [2, 8, 1024, 1024] in slot 3 is no mask: BNSD counted in full,
    # 4 * 2 * 8 * 1024 * 1024 * 64 = 4,294,967,296
    f = one(
        type="FlashAttentionScore",
        input_shapes="2,8,1024,64;2,8,1024,64;2,8,1024,64;2,8,1024,1024;;;;;;;;",
        output_shapes="2,8,1024,8;2,8,1024,8;;2,8,1024,64",
    )
    assert f == 4_294_967_296
    # its gradient with pse and a causal mask before softmax_max: 2.5 x 4,294,967,296 / 2
    # = 5,368,709,120
    f = one(
        type="FlashAttentionScoreGrad",
        input_shapes="2,8,1024,64;2,8,1024,64;2,8,1024,64;2,8,1024,64;2,8,1024,1024;1024,1024;"
        "2,8,1024,8;2,8,1024,8;;2,8,1024,64",
        output_shapes="2,8,1024,64;2,8,1024,64;2,8,1024,64;",
    )
    assert f == 5_368_709_120
    # TND (varlen): per-sequence lengths are unknown -> NaN, forward and gradient
    f = one(
        type="FlashAttentionScoreGrad",
        input_shapes="4096,8,64;4096,8,64;4096,8,64;4096,8,64;2048,2048;4096,8,8;4096,8,8;;4096,8,64",
        output_shapes="4096,8,64;4096,8,64;4096,8,64;",
    )
    assert math.isnan(f)
    f = one(
        type="FlashAttentionScore",
        input_shapes="4096,8,64;4096,8,64;4096,8,64;;;;2048,2048;;2;2",
        output_shapes="4096,8,8;4096,8,8;;4096,8,64",
    )
    assert math.isnan(f)


# --------------------------------------------------------------------------------------------
# hypothesis: the transpose inference never changes the count
# --------------------------------------------------------------------------------------------

dims = st.integers(min_value=1, max_value=64)


def _layouts(m: int, n: int, k: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """op(a) is [m, k] and op(b) is [k, n], for every (transpose_a, transpose_b)."""
    return [((m, k), (k, n)), ((k, m), (k, n)), ((m, k), (n, k)), ((k, m), (n, k))]


@given(m=dims, n=dims, k=dims, batch=st.integers(min_value=1, max_value=8))
def test_matmul_flops_symmetric_under_transposes(m: int, n: int, k: int, batch: int) -> None:
    expected = 2.0 * batch * m * n * k
    for a, b in _layouts(m, n, k):
        # with the output shape: exactly 2*batch*M*N*K whatever the transposes
        assert matmul_flops((batch,) + a, (batch,) + b, (batch, m, n)) == expected
        # b^T a^T = (ab)^T: swapping the operands and the output's last dims gives the same count
        assert matmul_flops((batch,) + b[::-1], (batch,) + a[::-1], (batch, n, m)) == expected


@given(m=dims, n=dims, k=dims)
def test_matmul_inference_without_output(m: int, n: int, k: int) -> None:
    expected = 2.0 * m * n * k
    for a, b in _layouts(m, n, k):
        # every (ta, tb) that fits gives a candidate count; the result is always one of them,
        # and exactly the true count when all fitting pairs agree
        cands = set()
        for ta in (False, True):
            for tb in (False, True):
                mm, ka = (a[1], a[0]) if ta else a
                kb, nn = (b[1], b[0]) if tb else b
                if ka == kb:
                    cands.add(2.0 * mm * nn * ka)
        got = matmul_flops(a, b)
        assert got in cands
        if len(cands) == 1:
            assert got == expected


@given(m=dims, n=dims, k=dims)
def test_matmul_inference_unambiguous_shapes(m: int, n: int, k: int) -> None:
    assume(len({m, n, k}) == 3)  # distinct dims: exactly one transpose pair fits
    for a, b in _layouts(m, n, k):
        assert matmul_flops(a, b) == 2.0 * m * n * k


# --------------------------------------------------------------------------------------------
# real Ascend output
# --------------------------------------------------------------------------------------------


def test_matmul_flops_vs_pmu_cube_fops(corpus: Path) -> None:
    """Shape FLOPs are at most the PMU's aic_cube_fops (which includes padding to the cube's
    fractals) and within 10% of it. Seen on this file: MatMul 0.968-0.987, BatchMatMul 0.922-0.957."""
    k = read_kernel_details(corpus / ARITH, 0)
    k["flops"] = kernel_flops(k)
    mm = k[k["type"].isin(["MatMul", "BatchMatMul"])]
    assert len(mm) == 13
    assert mm["flops"].notna().all()
    ratio = mm["flops"] / mm["cube_fops"]
    assert (ratio <= 1.0).all()
    assert (ratio >= 0.9).all()
    # MatMul91 (row 33): 2 * 4096 * 4608 * 12288 = 463,856,467,968 vs PMU 473,250,201,600 -> 0.980
    row = k.loc[33]
    assert row["name"] == "MatMul91"
    assert row["flops"] == 463_856_467_968
    assert row["flops"] / row["cube_fops"] == pytest.approx(0.980, abs=0.001)
    # nothing else in the file has a formula
    assert k["flops"].notna().sum() == 13


def test_flash_attention_corpus_rows(corpus: Path) -> None:
    k = read_kernel_details(corpus / FLASH, 0)
    f = kernel_flops(k)
    # FlashAttentionScore, SBH: q [4096, 2, 512] = [S, B, H]; softmax_max [2, 4, 4096, 8] gives
    # B = 2, N = 4, Sq = 4096, so D = 512 / 4 = 128; k [4096, 2, 512]: Sk = 4096; the atten_mask
    # [4096, 4096] (input 6) = Sq x Sk: causal, half.
    # 4 * 2 * 4 * 4096 * 4096 * 128 / 2 = 34,359,738,368
    fa = k["type"].eq("FlashAttentionScore") & ~k["name"].str.endswith("varlen")
    assert (f[fa] == 34_359_738_368).all() and fa.sum() == 4
    # FlashAttentionScoreGrad: softmax_max and the mask among its inputs; 2.5 x the forward
    # = 85,899,345,920
    grad = k["type"].eq("FlashAttentionScoreGrad")
    assert (f[grad] == 85_899_345_920).all() and grad.sum() == 4
    # the "_varlen" row: q hidden 511 and softmax_max says N = 3: 511 / 3 heads -> NaN
    assert f[k["name"].str.endswith("varlen")].isna().all()
    # the MatMul rows of this file have mangled shapes ([81920, 4096] x [8192, 512] -> [4096, 512],
    # [8192, 15365] x [8192, 4096] -> [1536, 4096]): no K fits both inputs -> NaN
    assert f[k["type"].str.startswith("MatMul")].isna().all()


def test_conv2d_nc1hwc0_fractal_z(corpus: Path) -> None:
    k = read_kernel_details(corpus / CNN, 0)
    k["flops"] = kernel_flops(k)
    by = k.set_index("name")["flops"]
    # Conv2D1 (AlexNet conv1, fp32 so C0 = 8): x [32, 1, 224, 224, 8] NC1HWC0: N = 32,
    # C = 1 * 8 = 8 (3 real channels padded to C0); weight FRACTAL_Z [121, 4, 16, 8]:
    # Cin * kh * kw = 121 * 8 = 968 (= 8 * 11 * 11), Cout = 4 * 16 = 64; output
    # [32, 8, 55, 55, 8]: Ho = Wo = 55, Cout = 8 * 8 = 64.
    # FLOPs = 2 * N * Ho * Wo * Cout * Cin*kh*kw = 2 * 32 * 55 * 55 * 64 * 968 = 11,993,907,200
    # (with the 3 real input channels the model FLOPs would be 3/8 of that: the padding cannot be
    # seen in NC1HWC0 shapes)
    assert by["Conv2D1"] == 2 * 32 * 55 * 55 * 64 * 968 == 11_993_907_200
    # its filter gradient Conv2DBackpropFilter10: x [32, 1, 224, 224, 8], dy [32, 8, 55, 55, 8],
    # dw FRACTAL_Z [121, 4, 16, 8]: the same 11,993,907,200
    assert by["Conv2DBackpropFilter10"] == 11_993_907_200
    # Conv2DBackpropInput5 (first of three): filter [288, 16, 16, 8] -> 288 * 8 = 2304 = 256 * 3 * 3,
    # dy [32, 32, 13, 13, 8]: Cout = 256, Ho = Wo = 13: 2 * 32 * 13 * 13 * 256 * 2304 = 6,379,536,384
    assert k.loc[k["name"].eq("Conv2DBackpropInput5"), "flops"].iloc[0] == 6_379_536_384
    # every conv type: forward total == dx total + the first layer's missing dx == dw total
    fwd = k.loc[k["type"].eq("Conv2D"), "flops"]
    dx = k.loc[k["type"].eq("Conv2DBackpropInput"), "flops"]
    dw = k.loc[k["type"].eq("Conv2DBackpropFilter"), "flops"]
    assert fwd.notna().all() and dx.notna().all() and dw.notna().all()
    assert fwd.sum() == dw.sum()  # 5 convs, 5 filter gradients
    assert fwd.sum() == dx.sum() + by["Conv2D1"]  # conv1 needs no input gradient
    # MatMulV2/V3 of the classifier: all 9 resolved
    assert k.loc[k["type"].str.startswith("MatMul"), "flops"].notna().sum() == 9


def test_kernel_flops_keeps_index_and_dedups() -> None:
    rows = [dict(type="MatMul", input_shapes="4,8;8,2", output_shapes="4,2")] * 1000
    rows += [dict(type="Add", input_shapes="4,8;4,8", output_shapes="4,8")] * 10
    df = frame(rows)
    df.index = pd.RangeIndex(5000, 5000 + len(df))
    f = kernel_flops(df)
    assert list(f.index) == list(df.index)
    assert (f.iloc[:1000] == 2 * 4 * 2 * 8).all()  # 128
    assert f.iloc[1000:].isna().all()
    assert len(kernel_flops(df.iloc[:0])) == 0


# --------------------------------------------------------------------------------------------
# MindSpore CPU
# --------------------------------------------------------------------------------------------

_SHAPE_ITEM = re.compile(r"^input_\d+:\[([-\d,\s]*)\]$")


def _launch_shapes(framework_txt: Path) -> pd.DataFrame:
    """Ground truth: cpu_framework_0.txt has one line per launch in launch order (graph mode)."""
    rows = []
    for line in framework_txt.read_text().splitlines():
        if not line.strip():
            continue
        f = line.strip().split(";")
        shapes = []
        for item in f[3:]:
            if not item.strip():
                continue
            m = _SHAPE_ITEM.match(item.strip())
            shapes.append(m.group(1).replace(" ", "") if m else "")
        rows.append(dict(type=f[0], name=f[1], input_shapes=";".join(shapes)))
    return frame(rows)


def test_host_op_flops_graph_mode(corpus: Path) -> None:
    """Graph mode: every short name such as MatMul-op0 is reused by several Dense scopes; the
    join must still give every launch its own shapes.

    The model (CAPTURES.md + shapes): batch 16, seq 32 (T = 512 tokens), hidden 64, 4 heads of 16,
    MLP 256, 2 blocks, head to 10 classes. Forward per block:
      qkv   2 * 512 * 64 * 192        = 12,582,912
      q.k^T 2 * (16*4) * 32 * 32 * 16 =  2,097,152
      a.v   2 * (16*4) * 32 * 16 * 32 =  2,097,152
      proj  2 * 512 * 64 * 64         =  4,194,304
      fc1   2 * 512 * 64 * 256        = 16,777,216
      fc2   2 * 512 * 256 * 64        = 16,777,216
      block                           = 54,525,952;  x 2 blocks = 109,051,904
    head 2 * 16 * 64 * 10 = 20,480 -> forward 109,072,384; backward = 2 x forward (dX and dW of
    every Dense, both input gradients of every BatchMatMul): one step = 3 x 109,072,384
    = 327,217,152. The capture has 8 steps (every op launched 8 times): the shape-derived total
    per step equals the analytic count exactly.
    """
    cap = load(corpus / GRAPH_CPU)
    k = cap.table("kernels")
    f = host_op_flops(k, cap.table("host_shapes"))
    launches = k.groupby("name").size()
    assert (launches == 8).all()
    assert f.sum() / 8 == 3 * 109_072_384 == 327_217_152
    assert f.notna().sum() == 8 * (27 + 12)  # 27 MatMul + 12 BatchMatMul per step
    # per launch, the same as reading each launch's own line of cpu_framework_0.txt
    (fw,) = (corpus / GRAPH_CPU).glob("*/FRAMEWORK/cpu_framework_0.txt")
    truth = kernel_flops(_launch_shapes(fw))
    ordered = f.loc[k.sort_values("start_us", kind="stable").index].to_numpy()
    assert np.array_equal(np.nan_to_num(ordered, nan=-1.0), np.nan_to_num(truth.to_numpy(), nan=-1.0))


def test_host_op_flops_pynative_sample(repo: Path) -> None:
    """Our own sample (examples/train_small.py, PyNative, 5 recorded steps): MatMul and BatchMatMul run
    through PyBoost, are named by type alone (no -opN) and have no recorded shapes: NaN.

    Analytic FLOPs of one step of that model (batch 16, seq 32 -> T = 512, hidden 64, 4 heads of
    16, MLP 128, 2 blocks, 8 classes):
      qkv 2*512*64*192 = 12,582,912; q.k^T and a.v 2 * 2*64*32*32*16 = 4,194,304;
      proj 2*512*64*64 = 4,194,304; fc1 2*512*64*128 = 8,388,608; fc2 = 8,388,608
      block 37,748,736; x 2 = 75,497,472; head 2*16*64*8 = 16,384; forward 75,513,856
      step = 3 x forward = 226,541,568.
    The capture cannot confirm it from shapes, but its launch counts match: 9 Dense forward +
    18 gradients = 27 MatMul and 4 + 8 = 12 BatchMatMul per step.
    """
    cap = load(repo / "sample_traces" / "train_small_cpu")
    k = cap.table("kernels")
    f = host_op_flops(k, cap.table("host_shapes"))
    assert f.notna().sum() == 0
    counts = k["type"].value_counts()
    # msdiag capture's default window records steps 4-8: 5 steps
    assert counts["MatMul"] == 5 * 27 and counts["BatchMatMul"] == 5 * 12
    # the formulas give the hand count when fed the shapes the model code implies
    b, s, h, mlp, cls = 16, 32, 64, 128, 8
    t = b * s
    fwd = []
    for _ in range(2):
        fwd += [
            ("MatMul", f"{t},{h};{3 * h},{h}"),  # qkv, Dense: x.W^T
            ("BatchMatMul", f"{b},4,{s},16;{b},4,{s},16"),  # q.k^T
            ("BatchMatMul", f"{b},4,{s},{s};{b},4,{s},16"),  # attn.v
            ("MatMul", f"{t},{h};{h},{h}"),  # proj
            ("MatMul", f"{t},{h};{mlp},{h}"),  # fc1
            ("MatMul", f"{t},{mlp};{h},{mlp}"),  # fc2
        ]
    fwd.append(("Dense", f"{b},{h};{cls},{h}"))
    total = kernel_flops(frame([dict(type=ty, input_shapes=sh) for ty, sh in fwd])).sum()
    assert total == 75_513_856
    assert 3 * total == 226_541_568


def test_host_op_flops_prefers_own_shapes() -> None:
    k = pd.DataFrame(
        {
            "rank": pd.array([0, 0], dtype="Int64"),
            "name": pd.array(["Default/MatMul-op0", "Default/MatMul-op1"], dtype="string"),
            "type": pd.array(["MatMul", "MatMul"], dtype="string"),
            "start_us": [1.0, 2.0],
            "input_shapes": pd.array(["2,3;3,4", pd.NA], dtype="string"),
        }
    )
    hs = pd.DataFrame(
        {
            "rank": pd.array([0, 0], dtype="Int64"),
            "op_type": pd.array(["MatMul", "MatMul"], dtype="string"),
            "op_name": pd.array(["MatMul-op0", "MatMul-op1"], dtype="string"),
            "input_shapes": pd.array(["9,9;9,9", "5,6;6,7"], dtype="string"),
        }
    )
    f = host_op_flops(k, hs)
    # own shapes win: 2 * 2 * 4 * 3 = 48; the other joins host_shapes: 2 * 5 * 7 * 6 = 420
    assert list(f) == [48.0, 420.0]


def _flops_by_frames(kernels: pd.DataFrame) -> pd.Series:
    """kernel_flops as it was written on frames (every row's texts, drop_duplicates, merge): the reference of
    the codes' path."""
    from msdiag.metrics.flops import _FORMULAS, _NA, _parse_formats, _parse_shapes, op_type_from_name

    def strs(col: str) -> pd.Series:
        if col not in kernels.columns:
            return pd.Series(_NA, index=kernels.index, dtype=object)
        return kernels[col].astype(object).where(kernels[col].notna(), _NA)

    out = np.full(len(kernels), np.nan)
    types = kernels["type"].astype(object) if "type" in kernels.columns else pd.Series(None, index=kernels.index, dtype=object)
    null_type = types.isna()
    if null_type.any() and "name" in kernels.columns:
        names = kernels.loc[null_type, "name"].astype(object)
        types = types.copy()
        types[null_type] = names.map({n: op_type_from_name(n) for n in names.dropna().unique()})
    sel = types.isin(list(_FORMULAS)).to_numpy()
    cols = ["type", "input_shapes", "input_formats", "output_shapes"]
    key = pd.DataFrame({"type": types[sel].to_numpy(), **{c: strs(c)[sel].to_numpy() for c in cols[1:]}})
    uniq = key.drop_duplicates(ignore_index=True)
    cache: dict[str, object] = {}
    values = []
    for t, ins_s, fmt_s, outs_s in uniq.itertuples(index=False, name=None):
        ins = _parse_shapes(ins_s, cache)  # type: ignore[arg-type]
        f = _FORMULAS[t](ins, _parse_formats(fmt_s), _parse_shapes(outs_s, cache)) if ins else None  # type: ignore[arg-type]
        values.append(np.nan if f is None else float(f))
    if len(key):
        out[sel] = key.merge(uniq.assign(flops=values), on=cols, how="left")["flops"].to_numpy()
    return pd.Series(out, index=kernels.index, dtype="float64", name="flops")


@pytest.mark.parametrize("capture", ["ascend/torchnpu-2rank-level0", "ascend/torchnpu-2rank-level1", "ascend/torchnpu-2rank-p2p-2024",
                                     "ascend/torchnpu-2rank-level1-db", "mindspore-cpu/msrun_dp2_pynative"])
def test_kernel_flops_from_codes_as_from_texts(corpus: Path, capture: str) -> None:
    # every kernel of real captures (Level0's null types recovered from names, shapes with and without formats,
    # host ops with none), and the same kernels with the shape columns cut away or nulled: bit for bit
    from msdiag.ingest import discover, loader

    for d in discover.discover(corpus / capture).ranks:
        k = loader.load_rank(d).table("kernels")
        variants = [k, k.drop(columns=["input_formats", "output_shapes"]), k.assign(input_shapes=pd.NA)]
        for v in variants:
            got, want = kernel_flops(v), _flops_by_frames(v)
            assert np.array_equal(got.to_numpy(), want.to_numpy(), equal_nan=True) and got.index.equals(want.index)


@given(st.integers(1, 4).flatmap(lambda w: st.lists(st.tuples(*[st.integers(-1, 40)] * w), max_size=60)),
       st.sampled_from([0, 1, 2**40]))
def test_distinct_code_rows_found_on_keys_as_numpy_finds_them(rows: list[tuple[int, ...]], big: int) -> None:
    # flops._unique_rows (one int64 key per row of codes) against np.unique(axis=0): the same distinct rows in the same
    # order and the same index of each row; codes too wide for one key (2**40 in every column) go to numpy itself
    from msdiag.metrics.flops import _unique_rows

    assume(rows)
    width = len(rows[0])
    parts = [np.array([r[j] for r in rows], dtype=np.intp) for j in range(width)]
    if big:
        parts = [np.where(p == 0, big, p) for p in parts]
    combos, inverse = _unique_rows(parts)
    want, want_inverse = np.unique(np.stack(parts, axis=1), axis=0, return_inverse=True)
    assert np.array_equal(combos, want) and np.array_equal(inverse, want_inverse.reshape(-1))
