"""FLOPs of each kernel, derived from the shapes the profiler recorded.

Model FLOPs for MFU must come from what the job computed, not from what the hardware counted
(the PMU's ``cube_fops`` includes padding to the cube's 16x16 fractals and is absent unless the
capture used ``aic_metrics=ArithmeticUtilization``). These functions turn a kernel's recorded input
and output shapes into the FLOPs of the mathematical operation it performs, counting a multiply-add
as 2 FLOPs and nothing but the matrix products (bias adds, softmax and scaling are left out, as in
the Megatron-LM and PaLM conventions).

Op types with a formula:

- matrix products: MatMul, MatMulV2, MatMulV3, BatchMatMul, BatchMatMulV2, BatchMatMulV3 (and
  MindSpore's MatMulExt / BatchMatMulExt), Dense, GroupedMatmul: ``2 * batch * M * N * K``;
- convolutions: Conv2D, Conv2DBackpropInput(D), Conv2DBackpropFilter(D): ``2 * N * Ho * Wo * Cout *
  Cin_per_group * kh * kw``, each backprop costing the same as its forward;
- attention: FlashAttentionScore ``4 * B * N * Sq * Sk * D`` and FlashAttentionScoreGrad at 2.5
  times that. An attention mask of Sq x Sk is assumed causal and the count halved (the profiler
  records the mask's shape, not its content); without a mask the count is full.

Any other op type, a shape that is missing or dynamic (``-1``), or shapes that contradict each
other give NaN: a figure that cannot be derived is null, never 0.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Iterable, Optional, Sequence

import numpy as np
import pandas as pd

Shape = tuple[int, ...]
Shapes = tuple[Optional[Shape], ...]  # one entry per tensor; None = absent, scalar or unknown

MATMUL_TYPES = frozenset(
    {
        "MatMul",
        "MatMulV2",
        "MatMulV3",
        "BatchMatMul",
        "BatchMatMulV2",
        "BatchMatMulV3",
        "MatMulExt",  # MindSpore mint.matmul (numpy semantics, no transpose flags)
        "BatchMatMulExt",
    }
)
DENSE_TYPES = frozenset({"Dense"})
GROUPED_MATMUL_TYPES = frozenset({"GroupedMatmul"})
CONV_FORWARD_TYPES = frozenset({"Conv2D"})
# The "D" variants carry the size input as an attribute: the same tensors minus that one.
CONV_BACKPROP_INPUT_TYPES = frozenset({"Conv2DBackpropInput", "Conv2DBackpropInputD"})
CONV_BACKPROP_FILTER_TYPES = frozenset({"Conv2DBackpropFilter", "Conv2DBackpropFilterD"})
FLASH_ATTENTION_TYPES = frozenset({"FlashAttentionScore"})
FLASH_ATTENTION_GRAD_TYPES = frozenset({"FlashAttentionScoreGrad"})

#: Every op type that has a FLOPs formula here.
FLOPS_OP_TYPES = (
    MATMUL_TYPES
    | DENSE_TYPES
    | GROUPED_MATMUL_TYPES
    | CONV_FORWARD_TYPES
    | CONV_BACKPROP_INPUT_TYPES
    | CONV_BACKPROP_FILTER_TYPES
    | FLASH_ATTENTION_TYPES
    | FLASH_ATTENTION_GRAD_TYPES
)

#: FlashAttentionScoreGrad recomputes QK^T and runs four more products (dV, dP, dQ, dK): 5 / 2.
FLASH_ATTENTION_GRAD_FACTOR = 2.5
#: Last dimension of FlashAttention's softmax_max / softmax_sum tensors ([B, N, Sq, 8]).
SOFTMAX_STAT_LAST_DIM = 8
#: Side of the compressed causal mask CANN FlashAttention takes with sparse_mode 2/3/4.
COMPRESSED_MASK_SIDE = 2048

_OP_SUFFIX = re.compile(r"-op\d+$")
_LAYER_INDEX = re.compile(r"(?<=/)\d+(?=-)")  # '.../1-Block/...' -> '.../#-Block/...'
_NA = "\x00NA"  # stands for a null cell while de-duplicating


# --------------------------------------------------------------------------------------------
# names and shape strings
# --------------------------------------------------------------------------------------------


def _known_type(segment: str) -> str | None:
    """``segment`` if it names an op type with a formula, also after dropping trailing digits
    one at a time (kernel names such as ``MatMul91`` or ``Conv2D1``)."""
    s = segment
    while s:
        if s in FLOPS_OP_TYPES:
            return s
        if not s[-1].isdigit():
            return None
        s = s[:-1]
    return None


def op_type_from_name(name: str | None) -> str | None:
    """The op type of a kernel whose ``type`` is null, recovered from its name.

    Device kernel names chain ``_``-separated parts and end with the op type
    (``aclnnMm_MatMulCommon_MatMulV2`` -> ``MatMulV2``); MindSpore prefixes its launch op
    (``Default/MatMul-op1/...``) and host ops end in ``-opN``. The rightmost ``_`` segment of the
    last ``/`` segment that names an op type with a FLOPs formula is returned (so a trailing
    ``_varlen`` is skipped); None when there is none, since an op without a formula has no FLOPs
    to recover anyway.
    """
    if name is None or (isinstance(name, float) and math.isnan(name)) or name is pd.NA:
        return None
    last = _OP_SUFFIX.sub("", str(name).strip().rsplit("/", 1)[-1])
    for segment in reversed(last.split("_")):
        t = _known_type(segment)
        if t is not None:
            return t
    return None


def _parse_shape(text: str) -> Shape | None:
    text = text.strip().strip('"')
    if not text:
        return None
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        return None
    if any(d < 0 for d in dims):  # dynamic (-1, -2): unknown
        return None
    return dims


def _parse_shapes(text: str, cache: dict[str, Shapes]) -> Shapes:
    """'4096,12288;4608,12288' -> ((4096, 12288), (4608, 12288)); '' entries -> None."""
    hit = cache.get(text)
    if hit is None:
        hit = () if text == _NA else tuple(_parse_shape(p) for p in text.split(";"))
        cache[text] = hit
    return hit


def _parse_formats(text: str) -> tuple[str, ...]:
    """'FORMAT_ND;NC1HWC0' -> ('ND', 'NC1HWC0')."""
    if text == _NA:
        return ()
    return tuple(p.strip().upper().removeprefix("FORMAT_") for p in text.split(";"))


def _prod(dims: Iterable[int]) -> int:
    return math.prod(dims)


def _get(seq: Sequence[Shape | None], i: int) -> Shape | None:
    return seq[i] if 0 <= i < len(seq) else None


def _broadcast_batch(a: Shape, b: Shape) -> int | None:
    """Product of the broadcast batch dims of two (..., r, c) shapes; None if they do not broadcast."""
    da, db = list(a[:-2]), list(b[:-2])
    n = max(len(da), len(db))
    da = [1] * (n - len(da)) + da
    db = [1] * (n - len(db)) + db
    out = []
    for x, y in zip(da, db):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return _prod(out)


# --------------------------------------------------------------------------------------------
# matrix products
# --------------------------------------------------------------------------------------------

# Orders in which transpose flags are tried when only input shapes exist and several fit.
# They follow what a training graph launches: for 2-D products, dX = dY.W (none) and
# dW = dY^T.X (transpose_a) before the forward x.W^T (transpose_b); for batched products,
# Q.K^T (transpose_b) before the gradients' transpose_a.
_ORDER_2D = ((False, False), (True, False), (False, True), (True, True))
_ORDER_BATCHED = ((False, False), (False, True), (True, False), (True, True))


def matmul_flops(a: Shape, b: Shape, out: Shape | None = None) -> float | None:
    """FLOPs ``2 * batch * M * N * K`` of ``op(a) @ op(b)``, op being an optional transpose.

    With the output shape, M, N and the batch come from it and K is the dimension of ``a`` that
    is not M, checked against ``b``: the transposes are inferred from which dims match and the
    result does not depend on them. Without it (MindSpore CPU records input shapes only, and no
    transpose flags), every transpose pair whose inner dimensions match is a candidate; when
    candidates disagree on K (``a`` and ``b`` of the same shape [X, Y]: a.b^T contracts Y,
    a^T.b contracts X) the first fitting pair in training-graph order is taken: 2-D ops prefer
    no transpose, then transpose_a (the weight gradient dY^T.X), batched ops prefer transpose_b
    (Q.K^T). 1-D operands are vectors ([K] @ [K, N], [M, K] @ [K]). None when nothing fits.
    """
    if not a or not b:
        return None
    if len(a) == 1:
        a = (1,) + a
    if len(b) == 1:
        b = b + (1,)
    if out is not None and len(out) >= 2:
        rows, cols = out[-2], out[-1]
        from_a = {a[-1]} if a[-2] == rows else set()
        if a[-1] == rows:
            from_a.add(a[-2])
        from_b = {b[-2]} if b[-1] == cols else set()
        if b[-2] == cols:
            from_b.add(b[-1])
        ks = from_a & from_b
        if len(ks) != 1:
            return None
        return 2.0 * _prod(out[:-2]) * rows * cols * ks.pop()
    bcast = _broadcast_batch(a, b)
    if bcast is None:
        return None
    batch = bcast
    order = _ORDER_BATCHED if max(len(a), len(b)) > 2 else _ORDER_2D
    for ta, tb in order:
        m, ka = (a[-1], a[-2]) if ta else (a[-2], a[-1])
        kb, n = (b[-1], b[-2]) if tb else (b[-2], b[-1])
        if ka == kb:
            return 2.0 * batch * m * n * ka
    return None


def _matmul(ins: Shapes, fmts: tuple[str, ...], outs: Shapes) -> float | None:
    a, b = _get(ins, 0), _get(ins, 1)
    if a is None or b is None:
        return None
    return matmul_flops(a, b, _get(outs, 0))


def _dense(ins: Shapes, fmts: tuple[str, ...], outs: Shapes) -> float | None:
    """Dense: x [..., in], weight [out, in] (bias ignored)."""
    x, w = _get(ins, 0), _get(ins, 1)
    if x is None or w is None or len(w) != 2:
        return None
    if x[-1] == w[1]:
        return 2.0 * _prod(x[:-1]) * w[1] * w[0]
    return None


def _grouped_matmul(ins: Shapes, fmts: tuple[str, ...], outs: Shapes) -> float | None:
    """GroupedMatmul: every token row goes through one expert's [K, N] weight: 2 * T * K * N.

    Single-tensor form: x [T, K], weight [E, K, N] (or [E, N, K]), y [T, N]. The weight-gradient
    form (group over K) has y [E, K, N] and x holding T on its other dim. List form (one x and
    one y per group): summed pairwise over the outputs.
    """
    ys = [y for y in outs if y is not None]
    x = _get(ins, 0)
    if x is None or not ys:
        return None
    if len(ys) == 1:
        y = ys[0]
        if len(y) == 2 and len(x) == 2 and x[0] == y[0]:
            return 2.0 * x[0] * x[1] * y[1]
        if len(y) == 3 and len(x) == 2:
            k, n = y[1], y[2]
            if x[1] == k:
                return 2.0 * x[0] * k * n
            if x[0] == k:
                return 2.0 * x[1] * k * n
        return None
    total = 0.0
    for i, y in enumerate(ys):
        xi = _get(ins, i)
        if xi is None or len(xi) != 2 or len(y) != 2 or xi[0] != y[0]:
            return None
        total += 2.0 * xi[0] * xi[1] * y[1]
    return total


# --------------------------------------------------------------------------------------------
# convolutions
# --------------------------------------------------------------------------------------------


def _fmt(fmts: tuple[str, ...], i: int) -> str:
    return fmts[i] if 0 <= i < len(fmts) else ""


def _feature_map(shape: Shape, fmt: str) -> tuple[int, int, int, int] | None:
    """(N, C, H, W) of a feature map: NC1HWC0 [N, C1, H, W, C0] (C = C1*C0), NHWC or NCHW."""
    if len(shape) == 5:
        return shape[0], shape[1] * shape[4], shape[2], shape[3]
    if len(shape) == 4:
        if fmt == "NHWC":
            return shape[0], shape[3], shape[1], shape[2]
        return shape[0], shape[1], shape[2], shape[3]
    return None


def _cin_k(weight: Shape, fractal_z: bool, cout: int) -> int | None:
    """Cin_per_group * kh * kw: FRACTAL_Z [C1*kh*kw, Cout/16, 16, C0] gives d0 * d3; a plain
    4-D weight (OIHW, OHWI or HWIO) gives its element count over Cout."""
    if len(weight) != 4:
        return None
    if fractal_z:
        return weight[0] * weight[3]
    total = _prod(weight)
    if cout <= 0 or total % cout:
        return None
    return total // cout


def conv2d_flops(n: int, cout: int, ho: int, wo: int, cin_k: int) -> float:
    """``2 * N * Ho * Wo * Cout * (Cin_per_group * kh * kw)``."""
    return 2.0 * n * ho * wo * cout * cin_k


def _conv_from(fm: Shape | None, fm_fmt: str, weight: Shape | None, weight_fractal: bool) -> float | None:
    """FLOPs from the output-side feature map (the forward output or dy) and the weight."""
    if fm is None or weight is None:
        return None
    nchw = _feature_map(fm, fm_fmt)
    if nchw is None:
        return None
    n, cout, ho, wo = nchw
    k = _cin_k(weight, weight_fractal, cout)
    return None if k is None else conv2d_flops(n, cout, ho, wo, k)


def _conv_forward(ins: Shapes, fmts: tuple[str, ...], outs: Shapes) -> float | None:
    """Conv2D: x, filter[, bias]; the output gives N, Cout, Ho, Wo. Without an output shape
    (MindSpore CPU) stride and padding are unknown: None."""
    x, w, y = _get(ins, 0), _get(ins, 1), _get(outs, 0)
    if x is None or w is None or y is None:
        return None
    fractal = _fmt(fmts, 1) == "FRACTAL_Z" or len(x) == 5
    return _conv_from(y, "NHWC" if _fmt(fmts, 0) == "NHWC" else "NCHW", w, fractal)


def _last_feature_map(ins: Shapes, fmts: tuple[str, ...]) -> tuple[Shape, str] | None:
    """The last 5-D (NC1HWC0) or 4-D non-FRACTAL_Z input: dy of a conv backprop."""
    for i in range(len(ins) - 1, -1, -1):
        s = ins[i]
        if s is not None and len(s) in (4, 5) and _fmt(fmts, i) != "FRACTAL_Z":
            return s, _fmt(fmts, i)
    return None


def _conv_backprop_input(ins: Shapes, fmts: tuple[str, ...], outs: Shapes) -> float | None:
    """Conv2DBackpropInput: (input_size,) filter, out_backprop. Same FLOPs as the forward."""
    dy = _last_feature_map(ins, fmts)
    if dy is None:
        return None
    candidates = [
        (s, _fmt(fmts, i) == "FRACTAL_Z") for i, s in enumerate(ins) if s is not None and s is not dy[0] and len(s) == 4
    ]
    if not candidates:
        return None
    labelled = [c for c in candidates if c[1]]
    weight = (labelled or candidates)[0][0]
    fractal = bool(labelled) or len(dy[0]) == 5
    return _conv_from(dy[0], dy[1], weight, fractal)


def _conv_backprop_filter(ins: Shapes, fmts: tuple[str, ...], outs: Shapes) -> float | None:
    """Conv2DBackpropFilter: x, (filter_size,) out_backprop -> dw. Same FLOPs as the forward.

    The output format is not in the table: dw is FRACTAL_Z when x is NC1HWC0 (5-D)."""
    x, dw = _get(ins, 0), _get(outs, 0)
    dy = _last_feature_map(ins[1:], fmts[1:])
    if x is None or dw is None or dy is None:
        return None
    return _conv_from(dy[0], dy[1], dw, len(x) == 5)


# --------------------------------------------------------------------------------------------
# FlashAttention
# --------------------------------------------------------------------------------------------


def flash_attention_flops(
    batch: int, heads: int, sq: int, sk: int, head_dim: int, causal: bool
) -> float:
    """Forward FLOPs of attention: QK^T and PV, ``4 * B * N * Sq * Sk * D``; half when causal.

    Counting half for a causal mask follows Megatron-LM (only the lower triangle is computed);
    counting it in full would put MFU above 100% at long sequences.
    """
    f = 4.0 * batch * heads * sq * sk * head_dim
    return f / 2.0 if causal else f


def _is_stat(s: Shape | None) -> bool:
    """softmax_max / softmax_sum: [B, N, Sq, 8]."""
    return s is not None and len(s) == 4 and s[3] == SOFTMAX_STAT_LAST_DIM


def _is_tnd_stat(s: Shape | None) -> bool:
    """softmax_max / softmax_sum of the TND (varlen) layout: [T, N, 8]."""
    return s is not None and len(s) == 3 and s[2] == SOFTMAX_STAT_LAST_DIM


def _is_mask(s: Shape | None, q: Shape) -> bool:
    return s is not None and len(s) in (2, 4) and not _is_stat(s) and s != q


def _flash_attention_forward(q: Shape, k: Shape, stats: list[Shape], mask: Shape | None) -> float | None:
    """Resolve B, N, Sq, Sk, D of a FlashAttention kernel and return its forward FLOPs.

    B, N and Sq come from softmax_max ([B, N, Sq, 8], an output of the forward, an input of the
    grad) when present; else Sq and Sk come from the attention mask ([Sq, Sk] or
    [B|1, 1, Sq, Sk]). A mask of Sq x Sk, or the 2048 x 2048 compressed mask of sparse modes 2-4,
    is assumed causal and the count halved: the profiler records the mask's shape, not its content
    or the sparse mode. TND (varlen) layouts give None: per-sequence lengths are not recorded.
    """
    if any(_is_tnd_stat(s) for s in stats):
        return None
    stat = next((s for s in stats if _is_stat(s)), None)
    if len(q) == 3 and len(k) == 3:
        hq = q[2]
        if stat is not None:
            b, n, sq = stat[0], stat[1], stat[2]
            if (q[0], q[1]) == (sq, b):  # SBH
                sk = k[0]
            elif (q[0], q[1]) == (b, sq):  # BSH
                sk = k[1]
            else:
                return None
            if hq % n:
                return None
            d = hq // n
        elif mask is not None:
            mq = mask[-2]
            if q[0] == mq and q[1] != mq:  # SBH
                b, sq, sk = q[1], q[0], k[0]
            elif q[1] == mq and q[0] != mq:  # BSH
                b, sq, sk = q[0], q[1], k[1]
            elif q[0] == q[1] == mq:
                b, sq, sk = q[0], q[1], k[0]
            else:
                return None
            n, d = 1, hq  # 4*B*N*Sq*Sk*D = 4*B*Sq*Sk*H: the head count cancels
        else:
            return None
    elif len(q) == 4 and len(k) == 4:
        b = q[0]
        if stat is not None:
            n, sq = stat[1], stat[2]
            if (q[1], q[2]) == (n, sq):  # BNSD
                sk = k[2]
            elif (q[1], q[2]) == (sq, n):  # BSND
                sk = k[1]
            else:
                return None
        elif mask is not None:
            mq, mk = mask[-2], mask[-1]
            if q[2] == mq and q[1] != mq and k[2] == mk:  # BNSD
                n, sq, sk = q[1], q[2], k[2]
            elif q[1] == mq and q[2] != mq and k[1] == mk:  # BSND
                n, sq, sk = q[2], q[1], k[1]
            else:
                return None
        else:
            return None
        d = q[3]
    else:
        return None
    causal = mask is not None and (
        (mask[-2], mask[-1]) == (sq, sk) or (mask[-2], mask[-1]) == (COMPRESSED_MASK_SIDE, COMPRESSED_MASK_SIDE)
    )
    return flash_attention_flops(b, n, sq, sk, d, causal)


# FlashAttentionScore input slots (aclnn order); the profiler keeps empty slots for absent inputs.
_FA_MASK_SLOT = 6  # q, k, v, pse, drop_mask, padding_mask, atten_mask, prefix, actual_seq_qlen, ...


def _flash_attention(ins: Shapes, fmts: tuple[str, ...], outs: Shapes) -> float | None:
    """FlashAttentionScore forward: inputs q, k, v, pse, drop_mask, padding_mask, atten_mask, ...;
    outputs softmax_max, softmax_sum, softmax_out, attention_out. pse can be [B, N, Sq, Sk] as
    well, so the mask is taken from its slot, or (a list without empty slots) the last mask-shaped
    input."""
    q, k = _get(ins, 0), _get(ins, 1)
    if q is None or k is None:
        return None
    if len(ins) > _FA_MASK_SLOT:
        mask = ins[_FA_MASK_SLOT] if _is_mask(ins[_FA_MASK_SLOT], q) else None
    else:
        mask = next((s for s in reversed(ins[3:]) if _is_mask(s, q)), None)
    stats = [s for s in outs if s is not None]
    return _flash_attention_forward(q, k, stats, mask)


def _flash_attention_grad(ins: Shapes, fmts: tuple[str, ...], outs: Shapes) -> float | None:
    """FlashAttentionScoreGrad: q, k, v, dy, [pse, drop_mask, padding_mask,] atten_mask,
    softmax_max, softmax_sum, softmax_in, attention_in, ...: the profiler leaves some absent inputs
    out, so the mask is the input just before softmax_max (or, without softmax_max, the last
    mask-shaped input). 2.5 x the forward."""
    q, k = _get(ins, 0), _get(ins, 1)
    if q is None or k is None:
        return None
    rest = ins[4:]
    first_stat = next((i for i, s in enumerate(rest) if _is_stat(s) or _is_tnd_stat(s)), None)
    if first_stat is not None:
        before = rest[first_stat - 1] if first_stat > 0 else None
        mask = before if _is_mask(before, q) else None
    else:
        mask = next((s for s in reversed(rest) if _is_mask(s, q)), None)
    stats = [s for s in rest if s is not None and (_is_stat(s) or _is_tnd_stat(s))]
    f = _flash_attention_forward(q, k, stats, mask)
    return None if f is None else FLASH_ATTENTION_GRAD_FACTOR * f


# --------------------------------------------------------------------------------------------
# the table-level functions
# --------------------------------------------------------------------------------------------

_Formula = Callable[[Shapes, tuple[str, ...], Shapes], Optional[float]]
_FORMULAS: dict[str, _Formula] = {}
for _types, _fn in (
    (MATMUL_TYPES, _matmul),
    (DENSE_TYPES, _dense),
    (GROUPED_MATMUL_TYPES, _grouped_matmul),
    (CONV_FORWARD_TYPES, _conv_forward),
    (CONV_BACKPROP_INPUT_TYPES, _conv_backprop_input),
    (CONV_BACKPROP_FILTER_TYPES, _conv_backprop_filter),
    (FLASH_ATTENTION_TYPES, _flash_attention),
    (FLASH_ATTENTION_GRAD_TYPES, _flash_attention_grad),
):
    for _t in _types:
        _FORMULAS[_t] = _fn


def _unique_rows(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(np.stack(parts, axis=1), axis=0, return_inverse=True)`` for columns of codes (each >= -1): the
    distinct rows in the same (lexicographic) order and each row's index among them, found on one int64 key per row
    (the codes in mixed radix, each shifted by one: a key orders as its row does), not by sorting the rows (~10x the
    time); rows whose keys would not fit in int64 are left to numpy."""
    sizes = [int(p.max()) + 2 if len(p) else 1 for p in parts]
    if float(np.prod(np.array(sizes, dtype=float))) >= 2.0**62:
        combos, inverse = np.unique(np.stack(parts, axis=1), axis=0, return_inverse=True)
        return combos, inverse.reshape(-1)
    key = np.zeros(len(parts[0]), dtype=np.int64)
    for p, size in zip(parts, sizes):
        key = key * size + (p.astype(np.int64) + 1)
    keys, inverse = np.unique(key, return_inverse=True)
    combos = np.empty((len(keys), len(parts)), dtype=np.int64)
    for j in range(len(parts) - 1, -1, -1):
        combos[:, j] = keys % sizes[j] - 1
        keys = keys // sizes[j]
    return combos, inverse.reshape(-1)


def kernel_flops(kernels: pd.DataFrame) -> pd.Series:
    """FLOPs of every kernel of a KERNELS table (float; NaN where no formula or shapes apply).

    Reads ``type``, ``name`` (to recover the type when it is null, see :func:`op_type_from_name`),
    ``input_shapes``, ``input_formats`` and ``output_shapes``. Each distinct (type, shapes,
    formats) combination is computed once and each shape string parsed once, so a capture with
    millions of launches of a few hundred distinct kernels costs a few hundred evaluations. The
    combinations are found on the columns' codes (``pd.factorize`` of each column: a null is its own
    value, as the text :data:`_NA`), not on the texts of every row.
    """
    out = np.full(len(kernels), np.nan)
    if len(kernels) == 0:
        return pd.Series(out, index=kernels.index, dtype="float64", name="flops")
    if "type" in kernels.columns:
        types = kernels["type"]
    else:
        types = pd.Series(None, index=kernels.index, dtype=object)
    null_type = types.isna()
    if null_type.any() and "name" in kernels.columns:
        names = kernels.loc[null_type, "name"].astype(object)
        recovered = {n: op_type_from_name(n) for n in names.dropna().unique()}
        types = types.astype(object)
        types[null_type] = names.map(recovered)
    t_codes, t_uniq = pd.factorize(types)
    t_texts = [str(t) for t in t_uniq]
    known = np.array([t in _FORMULAS for t in t_texts] + [False])  # (code -1, a null type: the last, False)
    sel = known[t_codes]
    if not sel.any():
        return pd.Series(out, index=kernels.index, dtype="float64", name="flops")
    rows = np.flatnonzero(sel)
    parts = [t_codes[rows]]
    texts: list[list[str]] = [t_texts]
    for col in ("input_shapes", "input_formats", "output_shapes"):
        if col in kernels.columns:
            codes, uniq = pd.factorize(kernels[col])
            parts.append(codes[rows])
            texts.append([str(u) for u in uniq] + [_NA])  # (code -1, a null: _NA)
        else:
            parts.append(np.full(len(rows), -1, dtype=np.intp))
            texts.append([_NA])
    combos, inverse = _unique_rows(parts)
    cache: dict[str, Shapes] = {}
    values = np.empty(len(combos))
    for j, (tc, ic, fc, oc) in enumerate(combos.tolist()):
        ins = _parse_shapes(texts[1][ic], cache)
        f = _FORMULAS[t_texts[tc]](ins, _parse_formats(texts[2][fc]), _parse_shapes(texts[3][oc], cache)) if ins else None
        values[j] = np.nan if f is None else float(f)
    out[rows] = values[inverse.reshape(-1)]
    return pd.Series(out, index=kernels.index, dtype="float64", name="flops")


def _layer_template(name: str) -> str:
    return _LAYER_INDEX.sub("#", name)


def _assign_host_shapes(names: pd.Series, starts: pd.Series, shapes: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """Full op name -> (op_type, input_shapes) for one rank.

    host_shapes keeps one row per (op_name, shapes) in order of first launch, and graph mode
    reuses short names (``MatMul-op0`` in every Dense scope), so a short name can own several
    rows. Full names are visited in order of first launch; a name whose short name has one row
    takes it; otherwise a name repeating an earlier one but for layer indices
    (``0-Block`` / ``1-Block``) takes that one's shapes, and any other takes its short name's next
    unclaimed row. A name left without a row stays unassigned (NaN).
    """
    rows: dict[str, list[tuple[str, str]]] = {}
    for op_type, op_name, s in shapes[["op_type", "op_name", "input_shapes"]].itertuples(index=False, name=None):
        if isinstance(op_name, str) and isinstance(s, str):
            rows.setdefault(op_name, []).append((op_type, s))
    first = pd.DataFrame({"name": names.to_numpy(), "start": starts.to_numpy()})
    order = first.groupby("name", sort=False)["start"].min().sort_values(kind="stable").index
    taken: dict[str, int] = {}
    by_template: dict[str, tuple[str, str]] = {}
    out: dict[str, tuple[str, str]] = {}
    for full in order:
        short = full.rsplit("/", 1)[-1]
        cands = rows.get(short)
        if not cands:
            continue
        tpl = _layer_template(full)
        if len(cands) == 1:
            pick: tuple[str, str] | None = cands[0]
        elif tpl in by_template:
            pick = by_template[tpl]
        elif taken.get(short, 0) < len(cands):
            pick = cands[taken.get(short, 0)]
            taken[short] = taken.get(short, 0) + 1
        else:
            pick = None
        if pick is not None:
            out[full] = pick
            by_template.setdefault(tpl, pick)
    return out


def host_op_flops(kernels_cpu: pd.DataFrame, host_shapes: pd.DataFrame) -> pd.Series:
    """FLOPs of MindSpore CPU host ops (a KERNELS table) from the HOST_SHAPES table.

    Kernels are named by scope path (``Default/.../dense-Dense/MatMul-op3``); host_shapes rows
    by the last segment (``MatMul-op3``): the two join on it, per rank (see
    :func:`_assign_host_shapes` for short names that own several shape rows). Rows that already
    carry ``input_shapes`` use them. PyNative ops launched through PyBoost (names without
    ``-opN``, e.g. ``MatMul``) have no recorded shapes: NaN. CPU shapes are inputs only, so
    transposes are inferred (:func:`matmul_flops`) and Conv2D, whose output size depends on
    stride and padding, stays NaN.
    """
    n = len(kernels_cpu)
    result = pd.Series(np.full(n, np.nan), index=kernels_cpu.index, dtype="float64", name="flops")
    if n == 0:
        return result
    if "input_shapes" in kernels_cpu.columns:
        own = kernels_cpu["input_shapes"].notna()
    else:
        own = pd.Series(False, index=kernels_cpu.index)
    if own.any():
        result[own] = kernel_flops(kernels_cpu[own])
    rest = kernels_cpu[~own]
    if not len(rest) or host_shapes is None or not len(host_shapes):
        return result
    ranks = rest["rank"] if "rank" in rest.columns else pd.Series(0, index=rest.index)
    hs_ranks = host_shapes["rank"] if "rank" in host_shapes.columns else pd.Series(0, index=host_shapes.index)
    types: list[object] = []
    shapes: list[object] = []
    idx: list[object] = []
    for rank, part in rest.groupby(ranks.fillna(-1).to_numpy(), sort=False):
        hs = host_shapes[(hs_ranks.fillna(-1) == rank).to_numpy()]
        if not len(hs):
            continue
        if "start_us" in part.columns:
            starts = part["start_us"]
        else:  # no times: rows are taken to be in launch order
            starts = pd.Series(range(len(part)), index=part.index, dtype=float)
        assigned = _assign_host_shapes(part["name"].astype(str), starts, hs)
        for i, name in part["name"].items():
            hit = assigned.get(str(name))
            if hit is not None:
                idx.append(i)
                types.append(hit[0])
                shapes.append(hit[1])
    if idx:
        frame = pd.DataFrame(
            {"type": types, "name": rest.loc[idx, "name"].to_numpy(), "input_shapes": shapes}, index=idx
        )
        result[idx] = kernel_flops(frame)
    return result


# ---- the batch a step's inputs hold (training throughput, issue 15) ------------------------------

#: Op types that look up an embedding table: (table [V, h], indices [batch, seq], ...) -> [batch, seq, h].
EMBEDDING_TYPES = frozenset({"gather", "gatherv2", "gatherv2d", "embedding", "embeddinglookup"})
_INT_DTYPE = re.compile(r"^(DT_)?U?INT(8|16|32|64)$", re.IGNORECASE)
#: An image batch: a 4-D feature map with at most this many channels (grey, RGB, RGBA) is the model's input.
MAX_IMAGE_CHANNELS = 4


def embedding_batch(op_type: str, input_shapes: str, input_dtypes: str) -> tuple[int, int] | None:
    """(batch, sequence length) of an embedding lookup: its indices input, a 2-D integer tensor
    beside a 2-D table; None for any other kernel."""
    if op_type.strip().lower() not in EMBEDDING_TYPES:
        return None
    shapes = _parse_shapes(input_shapes, {})
    dtypes = [d.strip() for d in input_dtypes.split(";")]
    table, idx = _get(shapes, 0), _get(shapes, 1)
    if table is None or idx is None or len(table) != 2 or len(idx) != 2 or len(dtypes) < 2:
        return None
    if not _INT_DTYPE.match(dtypes[1]) or min(idx) <= 0:
        return None
    return idx[0], idx[1]


def image_batch(input_shapes: str, input_dtypes: str, input_formats: str) -> int | None:
    """The batch of an image input: a 4-D NCHW / NHWC float feature map of 1-4 channels as a kernel's
    first input (the first such kernel of a step reads the step's images); None otherwise."""
    shapes = _parse_shapes(input_shapes, {})
    fmts = _parse_formats(input_formats)
    first = _get(shapes, 0)
    fmt = _fmt(fmts, 0)
    dtype = input_dtypes.split(";")[0].strip().upper()
    if first is None or len(first) != 4 or fmt not in ("NCHW", "NHWC") or _INT_DTYPE.match(dtype) or not dtype:
        return None
    fm = _feature_map(first, fmt)
    if fm is None or not 1 <= fm[1] <= MAX_IMAGE_CHANNELS or fm[0] <= 0:
        return None
    return fm[0]
