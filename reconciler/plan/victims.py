"""Which running workloads to stop, and in what order: the cost model for victims.

Pure: the caller describes each candidate; nothing here reads a clock or the cluster.
A victim costs, in this order: its priority (lower goes first: the policy), whether its team
is within its guarantee (borrowed capacity goes first: the Quota promise), the cards it
frees beyond what is still needed (an 8-GPU job is not stopped for one MIG instance), how
much of the need it covers (fewer, larger victims over many small ones when the need is
large), the work lost since its last checkpoint times its GPUs, and its name (so the order
is total and therefore deterministic).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running workload (with the rest of its gang) that might be stopped."""

    key: str  # stable identity, e.g. "namespace/name"
    priority: int  # value of its priority class
    preemptible: bool  # False for classes the policy marks non-preemptible
    over_quota: bool  # its team uses more than its guarantee (it is borrowing)
    running_seconds: float  # time since it started
    seconds_since_checkpoint: float  # work that would be lost if it stopped now
    gpus: float = 1.0  # GPU capacity it frees, in whole-GPU units
    lost_gpu_seconds: float | None = None  # GPU-seconds lost (default: gpus x since checkpoint)

    @property
    def lost(self) -> float:
        if self.lost_gpu_seconds is not None:
            return self.lost_gpu_seconds
        return self.gpus * self.seconds_since_checkpoint


def eligible(c: Candidate, *, preemptor_priority: int, min_runtime_seconds: float) -> bool:
    """A candidate may be preempted only by a strictly higher priority,
    and only after min runtime."""
    return (
        c.preemptible
        and c.priority < preemptor_priority
        and c.running_seconds >= min_runtime_seconds
    )


def victim_cost(c: Candidate, need: float) -> tuple:
    """What stopping `c` costs while `need` cards are still wanted (smaller is better)."""
    return (
        c.priority,
        not c.over_quota,
        max(0.0, c.gpus - need),
        -min(c.gpus, need),
        c.lost,
        c.key,
    )


def order_victims(
    candidates: Iterable[Candidate],
    need: float = 1.0,
    *,
    preemptor_priority: int | None = None,
    min_runtime_seconds: float | None = None,
) -> list[Candidate]:
    """The candidates (the eligible ones, when a preemptor is given), best victim first for
    `need` cards: each pick is the cheapest for what is still needed after the ones before."""
    pool = [
        c
        for c in candidates
        if preemptor_priority is None
        or eligible(
            c,
            preemptor_priority=preemptor_priority,
            min_runtime_seconds=min_runtime_seconds or 0.0,
        )
    ]
    out: list[Candidate] = []
    left = float(need)
    while pool and left > 0:
        best = min(pool, key=lambda c: victim_cost(c, left))
        pool.remove(best)
        out.append(best)
        left -= best.gpus
    out.extend(sorted(pool, key=lambda c: victim_cost(c, 0.0)))
    return out
