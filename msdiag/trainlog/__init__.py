"""Training logs: the per-step loss, learning rate, gradient norm, loss scale and step time a job prints.

``reader`` reads them (by content) into the canonical ``train_steps`` / ``train_events`` tables;
``lines`` declares the text line formats. The stability metrics are in ``msdiag.metrics.training``.
"""
