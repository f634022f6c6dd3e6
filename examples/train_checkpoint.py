"""A small MindSpore job that saves a checkpoint every few steps (CPU, well under a minute).

A 4-layer MLP (1024 wide, about 3.2 M parameters; the checkpoint holds them and the momentum) trains
on one batch per epoch, so MindSpore's ``TimeMonitor`` (which prints once per epoch) gives each step's
time, and ``LossMonitor`` each step's loss. ``ModelCheckpoint`` saves synchronously every
``--save-steps`` steps: those steps are slower by the time of the save. MindSpore prints nothing when
it saves, so the log shows the slow steps but not why; msdiag finds their period and measures what
they cost.

    python examples/train_checkpoint.py > ckpt.log        # a save every 5 steps
    python examples/train_checkpoint.py --async-save      # the same with CheckpointConfig(async_save=True)
    msdiag analyze ckpt.log
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40, help="steps (one per epoch)")
    ap.add_argument("--save-steps", type=int, default=5, help="CheckpointConfig(save_checkpoint_steps=)")
    ap.add_argument("--async-save", action="store_true", help="CheckpointConfig(async_save=True)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    import mindspore as ms
    from mindspore import dataset as ds
    from mindspore import nn
    from mindspore.train import CheckpointConfig, LossMonitor, Model, ModelCheckpoint, TimeMonitor

    ms.set_seed(args.seed)
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    rng = np.random.default_rng(args.seed)
    batch, width = 32, 1024
    x = rng.standard_normal((batch, width)).astype(np.float32)
    y = rng.integers(0, 10, size=(batch,)).astype(np.int32)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(batch)  # one batch: one step per epoch

    net = nn.SequentialCell(
        nn.Dense(width, width), nn.ReLU(), nn.Dense(width, width), nn.ReLU(), nn.Dense(width, width), nn.ReLU(), nn.Dense(width, 10)
    )
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer=opt)
    with tempfile.TemporaryDirectory() as out:
        cfg = CheckpointConfig(save_checkpoint_steps=args.save_steps, keep_checkpoint_max=2, async_save=args.async_save)
        ckpt = ModelCheckpoint(prefix="mlp", directory=out, config=cfg)
        model.train(args.steps, data, callbacks=[TimeMonitor(), LossMonitor(1), ckpt], dataset_sink_mode=False)


if __name__ == "__main__":
    main()
