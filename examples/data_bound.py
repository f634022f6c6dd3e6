"""A data-bound MindSpore training job: the step waits on a slow input pipeline.

An MLP classifier (512 -> 1024 -> 1024 -> 10) in graph mode fed by a ``GeneratorDataset``
whose Python ``map`` op is slow: per sample it waits ``--load-ms`` (a stand-in for reading and
decoding a file from slow storage) and normalises the features with numpy, with one worker. A batch
of 64 then takes about 64 x 2 ms to prepare, several times what the step computes (about 30 ms on
2 cores): the training loop waits on ``next()``.

``--fixed`` is the same job with the input pipeline fixed: the samples are read as one packed record
per batch (one wait per batch instead of one per sample) and normalised with one vectorized numpy
call after ``batch``, with as many parallel workers as the machine has cores (up to 4) and a larger
prefetch, so the next batch is ready when the step asks for it.

    python examples/data_bound.py --steps 20            # data-bound
    python examples/data_bound.py --steps 20 --fixed    # fixed

No profiler code: ``msdiag capture -- python examples/data_bound.py`` profiles it from outside.
Every step prints its wall time.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Optional

import mindspore
import mindspore.dataset as ds
import numpy as np
from mindspore import nn

FEATURES = 512
HIDDEN = 1024
CLASSES = 10
BATCH = 64


class Samples:
    """Random-access source of (features, label), deterministic per index."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(index)
        return rng.standard_normal(FEATURES).astype(np.float32), np.array(index % CLASSES, dtype=np.int32)


def make_load(load_ms: float):
    """The slow op: wait load_ms (one read from slow storage), then normalise each sample with numpy."""

    def load(x: np.ndarray) -> np.ndarray:
        time.sleep(load_ms / 1000.0)
        mean = x.mean(axis=-1, keepdims=True)
        std = x.std(axis=-1, keepdims=True)
        return ((x - mean) / (std + 1e-6)).astype(np.float32)

    return load


def build_dataset(steps: int, fixed: bool, load_ms: float) -> ds.Dataset:
    data = ds.GeneratorDataset(Samples(steps * BATCH), column_names=["x", "label"], shuffle=False, num_parallel_workers=1)
    if not fixed:  # one slow op per sample, one worker
        ds.config.set_prefetch_size(2)
        data = data.map(operations=[make_load(load_ms)], input_columns=["x"], num_parallel_workers=1)
        return data.batch(BATCH, drop_remainder=True)
    # fixed: one packed read per batch, vectorized, several workers, deeper prefetch
    ds.config.set_prefetch_size(16)
    workers = max(1, min(4, os.cpu_count() or 1))
    data = data.batch(BATCH, drop_remainder=True)
    return data.map(operations=[make_load(load_ms)], input_columns=["x"], num_parallel_workers=workers)


class MLP(nn.SequentialCell):
    def __init__(self) -> None:
        super().__init__([nn.Dense(FEATURES, HIDDEN), nn.ReLU(), nn.Dense(HIDDEN, HIDDEN), nn.ReLU(), nn.Dense(HIDDEN, CLASSES)])


def train(steps: int, fixed: bool, load_ms: float) -> list[float]:
    mindspore.set_device("CPU")
    mindspore.set_context(mode=mindspore.GRAPH_MODE)
    mindspore.set_seed(0)
    net = MLP()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train_net = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    train_net.set_train()
    batches = build_dataset(steps, fixed, load_ms).create_tuple_iterator(num_epochs=1)
    times = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        x, label = next(batches)
        loss = float(train_net(x, label).asnumpy())
        dt = (time.perf_counter() - t0) * 1000.0
        times.append(dt)
        print(f"step {step}/{steps}  loss {loss:.4f}  time {dt:.1f} ms", flush=True)
    return times


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    parser.add_argument("--fixed", action="store_true", help="the fixed input pipeline (packed reads, vectorized op, more workers and prefetch)")
    parser.add_argument("--load-ms", type=float, default=2.0, help="latency of one read in ms (default 2)")
    args = parser.parse_args(argv)
    times = train(args.steps, args.fixed, args.load_ms)
    rest = sorted(times[1:] or times)
    print(f"done: {len(times)} steps, median {rest[len(rest) // 2]:.1f} ms/step after the first", flush=True)


if __name__ == "__main__":
    main()
