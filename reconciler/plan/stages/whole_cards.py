"""Whole-card placement shared by training and defragmentation: a gang's pods each on one
node, through the shared placement policy over a best-fit shortlist, cards by NVLink island /
NUMA preference."""

from __future__ import annotations

from collections import Counter

from reconciler.plan import placement
from reconciler.plan.cluster import (
    GpuSlot,
    PoolView,
)
from reconciler.plan.run import PLACEMENT_POLICY, SHORTLIST, UNMETERED, Demand, Run


def _gang_on(slots: list[GpuSlot], n: int, topology: str) -> list[GpuSlot] | None:
    free = [g for g in slots if g.free_whole]
    if len(free) < n:
        return None
    if topology in ("nvlink", "numa"):
        groups: dict[int, list[GpuSlot]] = {}
        for g in free:
            groups.setdefault(g.island if topology == "nvlink" else g.numa, []).append(g)
        fitting = [grp for _, grp in sorted(groups.items()) if len(grp) >= n]
        if fitting:
            return min(fitting, key=len)[:n]
    return free[:n]


def _fits_group(slots: list[GpuSlot], n: int, topology: str) -> bool:
    """`n` free cards of one NVLink island / NUMA node on this node."""
    groups: Counter = Counter(
        (g.island if topology == "nvlink" else g.numa) for g in slots if g.free_whole
    )
    return any(c >= n for c in groups.values())


def _place_one(run: Run, pv: PoolView, n: int, holder: str) -> list[GpuSlot] | None:
    """The node comes from the shared placement policy (the simulator's code) over a shortlist
    of nodes that can take the pod, best-fit first; the cards within it from the pool's
    topology preference. With an NVLink/NUMA preference, nodes where one island/NUMA node
    holds the whole pod are shortlisted first, across the pool."""
    topology = pv.pool.spec.training.topology
    shortlist = pv.nodes_fitting(n, SHORTLIST)
    if not shortlist:
        return None
    if n > 1 and topology in ("nvlink", "numa"):
        grouped = [
            node
            for node in pv.nodes_fitting(n, len(pv.nodes))
            if _fits_group(pv.by_node()[node], n, topology)
        ][:SHORTLIST]
        shortlist = grouped or shortlist
    states = [whole_state(pv, node) for node in shortlist]
    chosen = placement.choose(
        PLACEMENT_POLICY,
        states,
        placement.PodDemand(num_gpu=n, gpu_milli=1000),
        run.placement_ctx(pv),
    )
    if chosen is None:  # pragma: no cover - every shortlisted node fits
        return None
    got = _gang_on(pv.by_node()[chosen.node], n, topology)
    pv.reserve(got, holder)
    return got


def place_gang(run: Run, pv: PoolView, p: Demand) -> bool:
    """Every pod of the gang gets its cards, or none does."""
    placed: list[list[GpuSlot]] = []
    for key in p.members:
        got = _place_one(run, pv, p.request.gpus, key)
        if got is None:
            for cards in placed:
                pv.unreserve(cards)
            return False
        placed.append(got)
    return True


def whole_state(pv: PoolView, node: str) -> placement.NodeState:
    """A node as the placement policies see it for whole-card demand: free cards are 1000 milli."""
    slots = pv.by_node()[node]
    return placement.NodeState(
        node,
        pv.pool.spec.gpu_model,
        UNMETERED,
        UNMETERED,
        [1000 if g.free_whole else 0 for g in slots],
    )
