"""mindcv's ``StateMonitor`` on a small MindSpore job: the log lines mindcv's training script prints.

Needs mindcv (``pip install mindcv``) beside MindSpore. A 3-layer MLP trains for 3 epochs of 20 steps with a
learning rate decaying per step; ``StateMonitor(log_interval=5)`` logs every 5th step (loss, lr, the time since
the last logged step) and saves a checkpoint at the end of each epoch (``Saving model to ...``).

    python examples/train_mindcv_monitor.py > mindcv.log 2>&1
    msdiag analyze mindcv.log
"""

from __future__ import annotations

import tempfile

import numpy as np


def main() -> None:
    import mindspore as ms
    from mindcv.utils.callbacks import StateMonitor
    from mindcv.utils.logger import set_logger
    from mindspore import dataset as ds
    from mindspore import nn
    from mindspore.train import Model

    ms.set_seed(1)
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    set_logger(name="mindcv", rank=0, color=False)
    rng = np.random.default_rng(1)
    steps, epochs, batch = 20, 3, 32
    x = rng.standard_normal((batch * steps, 64)).astype(np.float32)
    y = rng.integers(0, 10, size=(batch * steps,)).astype(np.int32)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(batch)
    net = nn.SequentialCell(nn.Dense(64, 256), nn.ReLU(), nn.Dense(256, 256), nn.ReLU(), nn.Dense(256, 10))
    lr = nn.cosine_decay_lr(0.0, 0.05, steps * epochs, steps, epochs)
    opt = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=0.9)
    model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer=opt)
    with tempfile.TemporaryDirectory() as out:
        monitor = StateMonitor(model, model_name="mlp", dataset_sink_mode=False, ckpt_save_dir=out, summary_dir=out,
                               log_interval=5, save_best_ckpt=False)
        model.train(epochs, data, callbacks=[monitor], dataset_sink_mode=False)


if __name__ == "__main__":
    main()
