"""A small MindSpore job whose stability depends on learning-rate warm-up (CPU, well under a minute).

A 4-layer MLP regresses a fixed random target with Adam at a high peak learning rate. Without warm-up
the first steps at the peak rate throw the loss up and it does not come back below where it started;
with a linear warm-up to the same peak it falls. MindSpore's own ``LossMonitor`` prints every step
(``epoch: E step: S, loss is L``) and ``TimeMonitor`` each epoch's time: the log msdiag reads.

    python examples/train_warmup.py                       # no warm-up: diverges
    python examples/train_warmup.py --warmup-steps 100    # the same peak reached over 100 steps: stable
    msdiag analyze train.log                              # the log, saved with `> train.log`

With ``--data-parallel`` under msrun each rank trains on its shard of the data and the gradients are
averaged over the ranks; msrun writes each rank's output to ``worker_<rank>.log``:

    msrun --worker_num=2 --local_worker_num=2 --master_port=8128 --log_dir=logs --join=True \
        examples/train_warmup.py --warmup-steps 100 --data-parallel
    msdiag analyze logs/                                  # the ranks' logs together
"""

from __future__ import annotations

import argparse
import math

import numpy as np


def lr_schedule(peak: float, steps: int, warmup: int) -> list[float]:
    """Per-step learning rates: a linear ramp to ``peak`` over ``warmup`` steps, then a cosine decay to a
    tenth of the peak at the last step (the usual shape; without warm-up the decay starts at step 1)."""
    out = []
    for i in range(steps):
        if i < warmup:
            out.append(peak * (i + 1) / warmup)
        else:
            t = (i - warmup) / max(1, steps - warmup - 1)
            out.append(peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warmup-steps", type=int, default=0, help="linear warm-up length in steps (0: none)")
    ap.add_argument("--lr", type=float, default=0.05, help="peak learning rate of Adam")
    ap.add_argument("--steps-per-epoch", type=int, default=50)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-parallel", action="store_true", help="under msrun: shard the data, average gradients over ranks")
    args = ap.parse_args()

    import mindspore as ms
    from mindspore import dataset as ds
    from mindspore import nn
    from mindspore.train import LossMonitor, Model, TimeMonitor

    ms.set_seed(args.seed)
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    shard: dict[str, int] = {}
    if args.data_parallel:
        from mindspore.communication import get_group_size, get_rank, init

        init()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
        shard = {"num_shards": get_group_size(), "shard_id": get_rank()}
    rng = np.random.default_rng(args.seed)
    batch, width = 32, 128
    n = batch * args.steps_per_epoch * shard.get("num_shards", 1)
    x = rng.standard_normal((n, width)).astype(np.float32)
    w_true = rng.standard_normal((width, 1)).astype(np.float32) / np.sqrt(width)
    y = np.tanh(x @ w_true * 3.0).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False, **shard).batch(batch)

    net = nn.SequentialCell(
        nn.Dense(width, 256), nn.ReLU(), nn.Dense(256, 256), nn.ReLU(), nn.Dense(256, 256), nn.ReLU(), nn.Dense(256, 1)
    )
    steps = args.steps_per_epoch * args.epochs
    opt = nn.Adam(net.trainable_params(), learning_rate=lr_schedule(args.lr, steps, args.warmup_steps))
    model = Model(net, loss_fn=nn.MSELoss(), optimizer=opt)
    model.train(args.epochs, data, callbacks=[LossMonitor(1), TimeMonitor()], dataset_sink_mode=False)


if __name__ == "__main__":
    main()
