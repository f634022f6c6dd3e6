"""A small, real MindSpore CPU training job for trying msdiag on.

A tiny transformer-ish classifier (2 blocks of LayerNorm -> Dense QKV -> BatchMatMul + Softmax
attention -> Dense, LayerNorm -> GELU MLP; then a Dense head) trained with Adam on random data fed
by a ``mindspore.dataset.GeneratorDataset`` pipeline (parallel workers -> map -> batch).

It has no profiler code: ``msdiag capture`` profiles it from outside. Run it with

    python examples/train_small.py --steps 20 --mode pynative

Every step prints its wall time. Other scripts can import ``build_dataset``, ``build_train_net`` and
``train`` (its ``on_step_end`` callback runs after every step).
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, Iterator, Optional

import mindspore
import mindspore.dataset as ds
import numpy as np
from mindspore import nn, ops

SEQ_LEN = 32
HIDDEN = 64
HEADS = 4
MLP_HIDDEN = 128
CLASSES = 8
BATCH = 16


class RandomTokens:
    """Random-access source of (features, label) samples, deterministic per index."""

    def __init__(self, size: int, seed: int = 0):
        self.size = size
        self.seed = seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed + index)
        x = rng.standard_normal((SEQ_LEN, HIDDEN)).astype(np.float32)
        label = np.array(rng.integers(0, CLASSES), dtype=np.int32)
        return x, label


def augment(x: np.ndarray) -> np.ndarray:
    """A Python map op: jitter and scale the features (a little real CPU work per sample)."""
    return (x * np.float32(0.9) + np.float32(0.01) * np.sin(x)).astype(np.float32)


def build_dataset(steps: int, batch_size: int = BATCH, workers: int = 2, seed: int = 0) -> ds.Dataset:
    """GeneratorDataset(num_parallel_workers) -> map(augment) -> batch, with enough rows for ``steps``."""
    source = RandomTokens(steps * batch_size, seed)
    data = ds.GeneratorDataset(
        source,
        column_names=["x", "label"],
        num_parallel_workers=workers,
        shuffle=False,
        python_multiprocessing=False,
    )
    data = data.map(operations=[augment], input_columns=["x"], num_parallel_workers=workers)
    return data.batch(batch_size, drop_remainder=True)


class Attention(nn.Cell):
    """Multi-head self-attention: one Dense for Q, K and V, BatchMatMul + Softmax, output Dense."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.qkv = nn.Dense(hidden, 3 * hidden)
        self.proj = nn.Dense(hidden, hidden)
        self.scores = ops.BatchMatMul(transpose_b=True)
        self.mix = ops.BatchMatMul()
        self.softmax = nn.Softmax(axis=-1)
        self.scale = 1.0 / float(np.sqrt(self.head_dim))

    def construct(self, x):
        b, s, h = x.shape
        qkv = self.qkv(x.reshape(b * s, h)).reshape(b, s, 3, self.heads, self.head_dim)
        qkv = qkv.transpose(2, 0, 3, 1, 4)  # 3, b, heads, s, head_dim
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = self.softmax(self.scores(q, k) * self.scale)
        out = self.mix(attn, v).transpose(0, 2, 1, 3).reshape(b * s, h)
        return self.proj(out).reshape(b, s, h)


class Block(nn.Cell):
    """Pre-norm transformer block: x + attn(ln1(x)); x + mlp(ln2(x)) with a GELU MLP."""

    def __init__(self, hidden: int, heads: int, mlp_hidden: int):
        super().__init__()
        self.ln1 = nn.LayerNorm((hidden,))
        self.attn = Attention(hidden, heads)
        self.ln2 = nn.LayerNorm((hidden,))
        self.fc1 = nn.Dense(hidden, mlp_hidden)
        self.gelu = nn.GELU(approximate=False)
        self.fc2 = nn.Dense(mlp_hidden, hidden)

    def construct(self, x):
        x = x + self.attn(self.ln1(x))
        b, s, h = x.shape
        y = self.fc2(self.gelu(self.fc1(self.ln2(x).reshape(b * s, h))))
        return x + y.reshape(b, s, h)


class TinyTransformer(nn.Cell):
    """Two blocks, mean pooling over the sequence, a Dense classification head."""

    def __init__(self, hidden: int = HIDDEN, heads: int = HEADS, mlp_hidden: int = MLP_HIDDEN, classes: int = CLASSES):
        super().__init__()
        self.blocks = nn.SequentialCell([Block(hidden, heads, mlp_hidden) for _ in range(2)])
        self.head = nn.Dense(hidden, classes)

    def construct(self, x):
        return self.head(self.blocks(x).mean(axis=1))


def build_train_net(lr: float = 1e-3) -> nn.Cell:
    """The model wrapped with its loss and an Adam optimizer: one call = one training step."""
    net = TinyTransformer()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Adam(net.trainable_params(), learning_rate=lr)
    train_net = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), optimizer)
    train_net.set_train()
    return train_net


def set_mode(mode: str) -> None:
    """Run on CPU, in PyNative (eager) or graph (compiled) mode."""
    mindspore.set_device("CPU")
    mindspore.set_context(mode=mindspore.PYNATIVE_MODE if mode == "pynative" else mindspore.GRAPH_MODE)


def train(
    steps: int = 20,
    mode: str = "pynative",
    on_step_end: Optional[Callable[[], None]] = None,
    log: Callable[[str], None] = print,
    batch_size: int = BATCH,
) -> list[float]:
    """Train for ``steps`` steps and return each step's wall time in ms.

    ``on_step_end`` is called after every step (a profiler's ``step()``, for instance).
    """
    set_mode(mode)
    mindspore.set_seed(0)
    train_net = build_train_net()
    batches: Iterator = build_dataset(steps, batch_size).create_tuple_iterator(num_epochs=1)
    times_ms: list[float] = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        x, label = next(batches)
        loss = train_net(x, label)
        loss_value = float(loss.asnumpy())  # waits for the step to finish
        dt = (time.perf_counter() - t0) * 1000.0
        times_ms.append(dt)
        log(f"step {step}/{steps}  loss {loss_value:.4f}  time {dt:.1f} ms")
        if on_step_end is not None:
            on_step_end()
    return times_ms


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps to run (default 20)")
    parser.add_argument("--mode", choices=["pynative", "graph"], default="pynative", help="execution mode")
    parser.add_argument("--batch-size", type=int, default=BATCH, help=f"samples per step (default {BATCH})")
    args = parser.parse_args(argv)
    times = train(args.steps, args.mode, batch_size=args.batch_size)
    rest = times[1:] or times
    print(f"done: {len(times)} steps, first {times[0]:.1f} ms, then mean {sum(rest) / len(rest):.1f} ms/step")


if __name__ == "__main__":
    main()
