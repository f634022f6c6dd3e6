"""Forking a process that holds a large heap, without its children copying it.

A forked child shares its parent's pages until one is written; the garbage collector writes to every
object it traces (its reference counts and links), so a collection in the child would copy each page of
the objects it inherited. ``frozen()`` moves the parent's objects out of the collector's sight while the
children are forked (``gc.freeze``: a child's collections leave them alone), and moves them back after,
unless a freeze was already held: an unfreeze releases every frozen object, the caller's too (the CLI
holds one during an analysis, cli._lean_gc).
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """``gc.freeze()`` for the time of the block; undone after it only when no freeze was held before."""
    held = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not held:
            gc.unfreeze()
