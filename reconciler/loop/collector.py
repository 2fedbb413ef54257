"""The cyclic garbage collector paused while a cycle runs, and the long-lived heap frozen.

A plan allocates hundreds of thousands of small objects (the working view: a `GpuSlot` with
its sets and lists per card, indexes, candidates) that live until the plan returns. Each
allocation burst makes CPython's cyclic collector run, and its older generations scan every
container alive, the snapshot's millions of objects included: at 10,000 nodes that scanning
was about a third of the plan's CPU time (bench/README.md, `plan_scale.py`). Nothing the
planner builds needs the cycle collector to be freed in time (reference counting frees it),
so the shell pauses the collector around a plan and restores it after; cycles made
meanwhile are collected on the collector's next run. The planner itself stays pure: this is
the shell's choice of how to run it, and changes no decision.

The controller pauses it for the whole cycle (observe, plan, apply: `Controller.cycle`): a
collection is triggered by whichever thread allocates, so a watch event or the observation
could start one on the way from a pod's arrival to its admission. Measured in
bench/admission_openb.py's controller process (20 nodes, 2026-12-07): about 700 young
collections (0.5 ms each), 60 middle (3 ms) and 5-6 full ones of 130-210 ms each in a 135 s
run, the full ones scanning the 250,000 objects alive from the start (modules, the client's
models, the first lists). So, once the controller has started (caches synced, a first cycle
made), `freeze_heap` collects once and moves everything alive to the permanent generation
(`gc.freeze`): later full collections scan only what came after. Frozen objects are still
freed by reference counting; only a reference cycle among them would stay (once)."""

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


def freeze_heap() -> None:
    """Collect everything collectable now, then freeze what is alive (`gc.freeze`): the
    collector's later runs do not scan it. Called once, after start-up."""
    gc.collect()
    gc.freeze()
