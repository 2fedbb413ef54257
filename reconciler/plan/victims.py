"""Which running workloads to preempt, and in what order.

Pure: the caller describes each candidate; nothing here reads a clock or the cluster.
The order is the policy of the seed: lowest priority first, then teams borrowing beyond
their guarantee, then the least work lost since the last checkpoint, then the name (so the
order is total and therefore deterministic).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running workload that might be preempted."""

    key: str  # stable identity, e.g. "namespace/name"
    priority: int  # value of its priority class
    preemptible: bool  # False for classes the policy marks non-preemptible
    over_quota: bool  # its team uses more than its guarantee (it is borrowing)
    running_seconds: float  # time since it started
    seconds_since_checkpoint: float  # work that would be lost if it stopped now
    gpus: float = 1.0  # GPU capacity it frees, in whole-GPU units


def eligible(c: Candidate, *, preemptor_priority: int, min_runtime_seconds: float) -> bool:
    """A candidate may be preempted only by a strictly higher priority,
    and only after min runtime."""
    return (
        c.preemptible
        and c.priority < preemptor_priority
        and c.running_seconds >= min_runtime_seconds
    )


def victim_order_key(c: Candidate) -> tuple:
    return (c.priority, not c.over_quota, c.seconds_since_checkpoint, c.key)


def order_victims(
    candidates: Iterable[Candidate], *, preemptor_priority: int, min_runtime_seconds: float
) -> list[Candidate]:
    """The eligible candidates, best victim first."""
    ok = [
        c
        for c in candidates
        if eligible(
            c, preemptor_priority=preemptor_priority, min_runtime_seconds=min_runtime_seconds
        )
    ]
    return sorted(ok, key=victim_order_key)
