"""A 2-rank data-parallel MindSpore job on CPU, launched with msrun.

Each rank trains the same small MLP (PyNative) on its own shard of the data
(``GeneratorDataset(num_shards=world size, shard_id=rank)``); ``DATA_PARALLEL`` with
``gradients_mean`` makes ``TrainOneStepCell`` average the gradients over the ranks with AllReduce
(MindSpore's CPU collectives; in a CPU trace they are host ops ``Default/AllReduce-opN``).

    msrun --worker_num=2 --local_worker_num=2 --master_port=8118 --join=True examples/dp2_msrun.py --steps 20

Pick a free ``--master_port``. msrun writes each rank's output to ``worker_<rank>.log`` (``--log_dir``,
default the current folder). No profiler code:
``msdiag capture -- msrun --worker_num=2 ... examples/dp2_msrun.py`` profiles every rank.
"""

from __future__ import annotations

import argparse
import time
from typing import Optional

import mindspore
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.communication import get_group_size, get_rank, init

FEATURES = 256
HIDDEN = 512
CLASSES = 10
BATCH = 32


class Samples:
    """Random-access source of (features, label), deterministic per index."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(index)
        return rng.standard_normal(FEATURES).astype(np.float32), np.array(index % CLASSES, dtype=np.int32)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps per rank (default 20)")
    args = parser.parse_args(argv)

    mindspore.set_device("CPU")
    mindspore.set_context(mode=mindspore.PYNATIVE_MODE)
    init()
    rank, world = get_rank(), get_group_size()
    mindspore.set_auto_parallel_context(parallel_mode=mindspore.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    mindspore.set_seed(0)

    net = nn.SequentialCell([nn.Dense(FEATURES, HIDDEN), nn.ReLU(), nn.Dense(HIDDEN, HIDDEN), nn.ReLU(), nn.Dense(HIDDEN, CLASSES)])
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train_net = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    train_net.set_train()

    data = ds.GeneratorDataset(
        Samples(args.steps * BATCH * world), column_names=["x", "label"], shuffle=False, num_shards=world, shard_id=rank
    ).batch(BATCH, drop_remainder=True)
    batches = data.create_tuple_iterator(num_epochs=1)
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        x, label = next(batches)
        loss = float(train_net(x, label).asnumpy())
        print(f"rank {rank}/{world} step {step}/{args.steps}  loss {loss:.4f}  time {(time.perf_counter() - t0) * 1000:.1f} ms", flush=True)
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main()
