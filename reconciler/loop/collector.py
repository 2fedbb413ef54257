"""The cyclic garbage collector paused while the planner runs.

A plan allocates hundreds of thousands of small objects (the working view: a `GpuSlot` with
its sets and lists per card, indexes, candidates) that live until the plan returns. Each
allocation burst makes CPython's cyclic collector run, and its older generations scan every
container alive, the snapshot's millions of objects included: at 10,000 nodes that scanning
was about a third of the plan's CPU time (bench/README.md, `plan_scale.py`). Nothing the
planner builds needs the cycle collector to be freed in time (reference counting frees it),
so the shell pauses the collector around a plan and restores it after; cycles made
meanwhile are collected on the collector's next run. The planner itself stays pure: this is
the shell's choice of how to run it, and changes no decision."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_collector() -> Iterator[None]:
    """Disable the cyclic collector for the block (if it was enabled), then restore it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
