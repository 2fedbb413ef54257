"""FGD-style replay: fill an empty cluster with a shuffled, inflated trace; no departures.

This is how the FGD paper (Weng et al., ATC '23) evaluates placement: shuffle the pods
with a seed, tune the trace to `inflation` x the cluster's GPU capacity (extra copies
drawn with replacement are appended; a trace that is too large loses random pods),
place each pod in turn with the policy under test, and record the GPU allocation ratio
against the GPU demand that has arrived so far. Placement goes through
`reconciler.plan.placement.choose`, the planner's own code.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from reconciler.plan.placement import (
    GPU_MILLI,
    Migration,
    NodeState,
    PlacementContext,
    Resident,
    allocate,
    choose,
    choose_with_migration,
    cluster_fragmentation,
    release,
    typical_workload,
)
from reconciler.sim.trace import NodeSpec, Pod

MAX_PCT = 130  # the allocation curve is recorded for arrived load 0..MAX_PCT % of capacity

Progress = Callable[[int, int], None]


@dataclass
class ReplayResult:
    policy: str
    seed: int
    total_gpus: int
    gpu_allocation_ratio: float  # allocated GPU milli / capacity at the end, 0..1
    fragmentation_rate: float  # fragmented / free GPU milli at the end, 0..1
    unscheduled_pods: int
    migrations: int
    pods: int
    arrived_gpu_ratio: float  # arrived GPU demand / capacity
    seconds: float
    curve: list[float] = field(default_factory=list)  # allocation % at arrived % = index

    def record(self) -> dict:
        return {
            "policy": self.policy,
            "seed": self.seed,
            "total_gpus": self.total_gpus,
            "gpu_allocation_ratio": round(self.gpu_allocation_ratio, 6),
            "fragmentation_rate": round(self.fragmentation_rate, 6),
            "unscheduled_pods": self.unscheduled_pods,
            "migrations": self.migrations,
            "pods": self.pods,
            "arrived_gpu_ratio": round(self.arrived_gpu_ratio, 6),
            "seconds": round(self.seconds, 3),
            "allocation_curve": [round(v, 3) for v in self.curve],
        }


def tune_workload(
    pods: Sequence[Pod], capacity_milli: int, ratio: float, rng: random.Random
) -> list[Pod]:
    """Shuffle, then tune the total GPU demand to `ratio` x capacity (ratio <= 0: keep all)."""
    out = list(pods)
    rng.shuffle(out)
    if ratio <= 0:
        return out
    target = ratio * capacity_milli
    demand = sum(p.req.total_gpu_milli for p in out)
    if demand > target:
        while demand > target and out:
            demand -= out.pop(rng.randrange(len(out))).req.total_gpu_milli
    elif demand < target:
        originals = list(pods)
        while True:
            extra = originals[rng.randrange(len(originals))]
            if demand + extra.req.total_gpu_milli > target:
                break
            out.append(extra)
            demand += extra.req.total_gpu_milli
    return out


def _migrate(
    moves: Sequence[Migration], by_name: dict[str, NodeState], residents: dict[str, list[Resident]]
) -> int:
    """Carry out `moves` (each running pod to its target); returns how many moved."""
    migrations = 0
    for mv in moves:
        src, dst = by_name[mv.source.node], by_name[mv.target.node]
        release(src, mv.req, mv.source)
        allocate(dst, mv.req, mv.target)
        lst = residents[mv.source.node]
        lst[:] = [r for r in lst if r.key != mv.key]
        residents[mv.target.node].append(Resident(mv.key, mv.req, mv.target))
        migrations += 1
    return migrations


def _fill(curve: list[float | None], final: float, top: int) -> None:
    """The curve's points no pod landed on: the last value before them, and from `top` (the
    arrived load at the end) on, the final allocation."""
    last = 0.0
    for k in range(MAX_PCT + 1):
        if curve[k] is None:
            curve[k] = final if k >= top else last
        last = curve[k]


def replay(
    nodes: Sequence[NodeSpec],
    pods: Sequence[Pod],
    policy: str,
    seed: int,
    inflation: float = 1.3,
    progress: Progress | None = None,
    migrate: bool = False,
) -> ReplayResult:
    """Replay `pods` onto empty `nodes` with `policy`. With `migrate`, a pod that fits
    nowhere may move one running pod (`choose_with_migration`)."""
    start = time.perf_counter()
    states = [n.state() for n in nodes]
    by_name = {n.name: n for n in states}
    capacity = sum(n.num_gpus for n in states) * GPU_MILLI
    if capacity == 0:
        raise ValueError("the cluster has no GPUs")
    workload = tune_workload(pods, capacity, inflation, random.Random(seed))
    ctx = PlacementContext(
        target=typical_workload(p.req for p in pods),
        rng=random.Random(f"{policy}/{seed}"),
        memo=True,
    )
    curve: list[float | None] = [None] * (MAX_PCT + 1)
    arrived = allocated = failed = migrations = 0
    residents: dict[str, list[Resident]] = {n.name: [] for n in states}
    successes = 0
    gave_up: dict = {}  # request -> successes count when defragmentation last found nothing
    n = len(workload)
    step = max(1, n // 200)
    for i, pod in enumerate(workload):
        req = pod.req
        moves: tuple = ()
        if migrate and gave_up.get(req) != successes:
            got = choose_with_migration(policy, states, req, ctx, residents)
            if got is None:
                placement = None
                gave_up[req] = successes
            else:
                placement, moves = got
        else:
            placement = None if migrate else choose(policy, states, req, ctx)
        if placement is None:
            failed += 1
        else:
            migrations += _migrate(moves, by_name, residents)
            allocate(by_name[placement.node], req, placement)
            residents[placement.node].append(Resident(f"{pod.name}#{i}", req, placement))
            allocated += req.total_gpu_milli
            successes += 1
        arrived += req.total_gpu_milli
        pct = arrived * 100 // capacity
        if pct <= MAX_PCT:
            curve[pct] = allocated * 100 / capacity
        if progress is not None and (i % step == 0 or i == n - 1):
            progress(i + 1, n)
    _fill(curve, allocated * 100 / capacity, min(MAX_PCT, arrived * 100 // capacity))
    frag, free = cluster_fragmentation(states, ctx)
    return ReplayResult(
        policy=policy,
        seed=seed,
        total_gpus=capacity // GPU_MILLI,
        gpu_allocation_ratio=allocated / capacity,
        fragmentation_rate=(frag / free) if free else 0.0,
        unscheduled_pods=failed,
        migrations=migrations,
        pods=n,
        arrived_gpu_ratio=arrived / capacity,
        seconds=time.perf_counter() - start,
        curve=curve,  # type: ignore[arg-type]
    )
