"""Whole-card placement shared by training and defragmentation: a gang's pods each on one
node, through the shared placement policy over a best-fit shortlist, cards by NVLink island /
NUMA preference; a gang of several pods within one multi-node NVLink domain (the nodes' GPU
feature discovery label `nvidia.com/gpu.clique`) where one has room for it, the fullest such
domain first, else anywhere (said as a finding)."""

from __future__ import annotations

from collections import Counter

from reconciler.conventions import GPU_CLIQUE_LABEL
from reconciler.plan import placement
from reconciler.plan.cluster import (
    GpuSlot,
    PoolView,
)
from reconciler.plan.run import PLACEMENT_POLICY, SHORTLIST, UNMETERED, Demand, Run


def _gang_on(
    slots: list[GpuSlot], n: int, topology: str, going: frozenset[int] = frozenset()
) -> list[GpuSlot] | None:
    """`n` free cards of the node, by the topology preference; cards a terminating pod still
    holds (`going`: free to the plan, but an admission onto them waits until it is gone) last,
    so a pod is not kept waiting for a stop (perhaps a stuck one) beside a card free now."""
    free = sorted((g for g in slots if g.free_whole), key=lambda g: g.index in going)
    if len(free) < n:
        return None
    if topology in ("nvlink", "numa"):
        groups: dict[int, list[GpuSlot]] = {}
        for g in free:
            groups.setdefault(g.island if topology == "nvlink" else g.numa, []).append(g)
        fitting = [grp for _, grp in sorted(groups.items()) if len(grp) >= n]
        if fitting:  # the tightest group; of those, the one with fewest cards still going

            def cost(grp: list[GpuSlot]) -> tuple[int, int]:
                return len(grp), sum(g.index in going for g in grp[:n])

            return min(fitting, key=cost)[:n]
    return free[:n]


def _fits_group(slots: list[GpuSlot], n: int, topology: str) -> bool:
    """`n` free cards of one NVLink island / NUMA node on this node."""
    groups: Counter = Counter(
        (g.island if topology == "nvlink" else g.numa) for g in slots if g.free_whole
    )
    return any(c >= n for c in groups.values())


def is_inference(run: Run, p: Demand) -> bool:
    """Whole-card demand that serves: replicas a ScalingPolicy adds, pods of an inference
    class."""
    c = run.pclass(p.priority_class)
    return p.origin.startswith("scale-up") or (c is not None and c.workload == "inference")


def inference_nodes(run: Run, pv: PoolView) -> set[str]:
    """The pool's nodes where inference holds whole cards (pods of an inference class), kept
    for the run and grown as the run places inference (`_place_one`). Serving pods are not
    moved or preempted for training, so a node that hosts one never comes back whole: new
    replicas go there first, and the other nodes stay whole-able for gangs."""
    key = ("inference-nodes", pv.name)
    known = run.memo.get(key)
    if known is None:
        nodes = set()
        for g in pv.gpus:
            for h in g.holders:
                w = run.cluster.workloads.get(h)
                c = run.pclass(w.priority_class) if w is not None else None
                if c is not None and c.workload == "inference":
                    nodes.add(g.node)
                    break
        known = run.memo[key] = (nodes,)
    return known[0]


def _place_one(
    run: Run,
    pv: PoolView,
    n: int,
    holder: str,
    within: set[str] | None = None,
    pack: set[str] | None = None,
) -> list[GpuSlot] | None:
    """The node comes from the shared placement policy (the simulator's code) over a shortlist
    of nodes that can take the pod, best-fit first; the cards within it from the pool's
    topology preference. With an NVLink/NUMA preference, nodes where one island/NUMA node
    holds the whole pod are shortlisted first, across the pool. `within`: only those nodes.
    `pack` (inference): the nodes of that set that fit are the shortlist, when one does."""
    topology = pv.pool.spec.training.topology
    packed = []
    if pack and within is None:
        packed = sorted((pv.free_whole_on(x), x) for x in pack if pv.free_whole_on(x) >= n)
    if packed:
        shortlist = [x for _, x in packed[:SHORTLIST]]
    elif within is None:
        shortlist = pv.nodes_fitting(n, SHORTLIST)
    else:
        shortlist = [x for x in pv.nodes_fitting(n, len(pv.nodes)) if x in within][:SHORTLIST]
    if not shortlist:
        return None
    if n > 1 and topology in ("nvlink", "numa") and not packed:
        grouped = [
            node
            for node in pv.nodes_fitting(n, len(pv.nodes))
            if _fits_group(pv.by_node()[node], n, topology) and (within is None or node in within)
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
    going = frozenset(i for node, i in run.stopping if node == chosen.node)
    got = _gang_on(pv.by_node()[chosen.node], n, topology, going)
    pv.reserve(got, holder)
    if pack is not None:
        pack.add(chosen.node)
    return got


def place_gang(run: Run, pv: PoolView, p: Demand) -> bool:
    """Every pod of the gang gets its cards, or none does; within one NVLink domain where one
    has room for all of it (`nvlink_domains`), else anywhere."""
    domains = nvlink_domains(pv, p.request.gpus, len(p.members))
    for within in [*domains.values(), None] if domains else [None]:
        if _place_all(run, pv, p, within):
            if within is None and pv.cliques():
                run.find(
                    "info",
                    "gang-spans-nvlink-domains",
                    p.key,
                    f"{p.key} ({len(p.members)} pods) is placed across NVLink domains: no "
                    f"{GPU_CLIQUE_LABEL} domain of {pv.name} has room for all of it",
                )
            return True
    return False


def _place_all(run: Run, pv: PoolView, p: Demand, within: set[str] | None) -> bool:
    placed: list[list[GpuSlot]] = []
    pack = inference_nodes(run, pv) if is_inference(run, p) else None
    for key in p.members:
        got = _place_one(run, pv, p.request.gpus, key, within, pack)
        if got is None:
            for cards in placed:
                pv.unreserve(cards)
            return False
        placed.append(got)
    return True


def by_domain(pv: PoolView, n: int, pods: int) -> bool:
    """A gang of `pods` pods of `n` cards each goes within one NVLink domain where it can: it
    has several pods, the pool's topology is not `none` and its nodes carry domains
    (`PoolView.cliques`)."""
    return pods >= 2 and n >= 1 and pv.pool.spec.training.topology != "none" and bool(pv.cliques())


def nvlink_domains(pv: PoolView, n: int, pods: int) -> dict[str, set[str]]:
    """The NVLink domains where a gang of `pods` pods of `n` cards each could go now, fullest
    first (fewest free cards: best fit), then by name; none when it is not placed by domain
    (`by_domain`: a lone pod, a pool whose topology is `none`, nodes without the label)."""
    if not by_domain(pv, n, pods):
        return {}
    domains = pv.cliques()
    room = {
        c: (sum(pv.free_whole_on(x) // n for x in nodes), sum(pv.free_whole_on(x) for x in nodes))
        for c, nodes in domains.items()
    }
    fitting = sorted(
        (c for c, (fit, _) in room.items() if fit >= pods), key=lambda c: (room[c][1], c)
    )
    return {c: domains[c] for c in fitting}


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
