"""A compute-bound MindSpore training job: big matmuls in graph mode, data that is always ready.

A deep MLP of wide Dense layers (``--width`` 1024, ``--layers`` 4, batch 256) compiled as one graph
(GRAPH_MODE): every step is a few large MatMuls forward and backward. The input is a small in-memory
``NumpySlicesDataset`` (no Python op), so the next batch is always ready and the step time is the
matmuls' time.

    python examples/compute_bound.py --steps 20

No profiler code: ``msdiag capture -- python examples/compute_bound.py`` profiles it from outside.
Every step prints its wall time (bench/capture_overhead.py reads them).
"""

from __future__ import annotations

import argparse
import time
from typing import Optional

import mindspore
import mindspore.dataset as ds
import numpy as np
from mindspore import nn

BATCH = 256
CLASSES = 10


def build_dataset(width: int, batches: int = 4) -> ds.Dataset:
    """A few batches of random data held in memory, repeated as often as needed."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batches * BATCH, width)).astype(np.float32)
    y = rng.integers(0, CLASSES, batches * BATCH).astype(np.int32)
    return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=False).batch(BATCH, drop_remainder=True)


def build_net(width: int, layers: int) -> nn.Cell:
    cells: list[nn.Cell] = []
    for _ in range(layers):
        cells += [nn.Dense(width, width), nn.ReLU()]
    cells.append(nn.Dense(width, CLASSES))
    return nn.SequentialCell(cells)


def train(steps: int, width: int, layers: int) -> list[float]:
    mindspore.set_device("CPU")
    mindspore.set_context(mode=mindspore.GRAPH_MODE)
    mindspore.set_seed(0)
    net = build_net(width, layers)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train_net = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    train_net.set_train()
    data = build_dataset(width)
    epochs = -(-steps // data.get_dataset_size())
    batches = data.create_tuple_iterator(num_epochs=epochs)
    times = []
    step = 0
    for _ in range(epochs):
        for x, label in batches:
            step += 1
            if step > steps:
                break
            t0 = time.perf_counter()
            loss = float(train_net(x, label).asnumpy())
            dt = (time.perf_counter() - t0) * 1000.0
            times.append(dt)
            print(f"step {step}/{steps}  loss {loss:.4f}  time {dt:.1f} ms", flush=True)
    return times


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    parser.add_argument("--width", type=int, default=1024, help="Dense layer width (default 1024)")
    parser.add_argument("--layers", type=int, default=4, help="hidden Dense layers (default 4)")
    args = parser.parse_args(argv)
    times = train(args.steps, args.width, args.layers)
    rest = sorted(times[1:] or times)
    print(f"done: {len(times)} steps, median {rest[len(rest) // 2]:.1f} ms/step after the first", flush=True)


if __name__ == "__main__":
    main()
