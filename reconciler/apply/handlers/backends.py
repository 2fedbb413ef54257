"""Repartitions through partition backends other than the device plugin's: a `PartitionChange`
goes to the handler its backend registered with `handles_partition(name)`. A backend's handler
family lives in a module of its own that registers itself here; no other handler changes, and
the executor dispatches `PartitionChange` like any action (reconciler/plan/partition)."""

from __future__ import annotations

from collections.abc import Callable

from reconciler.apply.handlers.base import Context, Outcome, handles
from reconciler.plan.actions import PartitionChange

PartitionHandler = Callable[[PartitionChange, Context], Outcome]
PARTITION_HANDLERS: dict[str, PartitionHandler] = {}
"""Backend name (`PartitionBackend.name`) -> the handler that carries out its changes."""


def handles_partition(backend: str) -> Callable[[PartitionHandler], PartitionHandler]:
    def register(fn: PartitionHandler) -> PartitionHandler:
        PARTITION_HANDLERS[backend] = fn
        return fn

    return register


@handles(PartitionChange)
def partition_change(a: PartitionChange, ctx: Context) -> Outcome:
    handler = PARTITION_HANDLERS.get(a.backend)
    if handler is None:
        return Outcome(
            a.id,
            "failed",
            f"no handler is registered for partition backend {a.backend!r} "
            f"(known: {', '.join(sorted(PARTITION_HANDLERS)) or 'none'})",
        )
    return handler(a, ctx)
