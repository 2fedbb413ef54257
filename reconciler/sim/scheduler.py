"""A kube-scheduler stand-in for the effect model: `schedule` binds pending pods.

kube-scheduler picks the node; the whole cards on it are the ones the kubelet gets from the
NVIDIA device plugin's GetPreferredAllocation (`preferred_allocation`), whatever the plan
meant (`overrides`). See `schedule` for the rules, docs/simulator.md ("Which cards a pod
gets") for the device choice, and `reconciler.sim.effects` for the model as a whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache, lru_cache
from itertools import combinations

from reconciler.conventions import GPU_RESOURCE, POOL_LABEL, SHARED_RESOURCE
from reconciler.conventions import mig_resource as _mig_resource
from reconciler.observe.model import Allocation, Gpu, Node, ObservedState, Workload
from reconciler.policy.state import DesiredState
from reconciler.sim.partition import is_mps

BUSY_UTILIZATION = 50.0
"""Utilization a whole card gets when a pod is bound to it (the builders' default)."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass
class _Free:
    """What is free on one schedulable node, kept up to date as pods are bound."""

    node: Node
    whole: list[int]  # free whole cards (mode whole, nothing on them)
    mig: dict[int, list[tuple[str, int]]]  # card -> free (profile, start)
    shared: dict[int, int]  # shared card -> free slices

    @property
    def mig_units(self) -> int:
        return sum(len(v) for v in self.mig.values())


def _tolerated(node: Node, w: Workload, extended_resource_toleration: bool) -> bool:
    resources: set[str] = set()
    if extended_resource_toleration:
        r = w.request
        if r.gpus:
            resources.add(GPU_RESOURCE)
        resources.update(_mig_resource(p) for p in r.mig)
        if r.shared_slices:
            resources.add(SHARED_RESOURCE)
    return all(
        t.effect not in BLOCKING_EFFECTS or (t.effect == "NoSchedule" and t.key in resources)
        for t in node.taints
    )


def _free(node: Node, running: list[Workload]) -> _Free:
    used: dict[int, list[Allocation]] = {}
    for w in running:
        for a in w.allocations:
            used.setdefault(a.gpu, []).append(a)
    whole, mig, shared = [], {}, {}
    for g in sorted(node.gpus, key=lambda g: g.index):
        allocs = used.get(g.index, [])
        if g.mode == "whole":
            if not allocs:
                whole.append(g.index)
        elif g.mode == "mig":
            starts = {a.mig_start for a in allocs}
            free = sorted(
                ((i.profile, i.start) for i in g.mig_instances if i.start not in starts),
                key=lambda x: (x[1], x[0]),
            )
            if any(a.mig_start is None for a in allocs):
                free = []  # a whole-card holder on a MIG card: nothing is free there
            mig[g.index] = free
        else:
            if not any(a.mig_start is not None or not a.slices for a in allocs):
                shared[g.index] = max(0, (g.shared_slices or 0) - sum(a.slices for a in allocs))
    return _Free(node, whole, mig, shared)


# ------------------------------------------------------------- the device plugin's choice
# Pair scores of go-gpuallocator's best-effort policy (NVIDIA/go-gpuallocator v0.6.0,
# gpuallocator/besteffort_policy.go, calculateGPUPairScore), for the two links gpupool's
# topology knows (`Gpu.nvlink_island`, `Gpu.numa_node`, as the planner reads them in
# reconciler/plan/cluster.py `GpuSlot.island` / `numa`). A pair on one NVLink island is
# assumed to have one NVLink (100 per link there) besides its PCIe path; a PCIe path within
# one NUMA node is assumed to be P2PLinkSameCPU (20; a shared PCIe switch would score more),
# across NUMA nodes P2PLinkCrossCPU (10).
_NVLINK_SCORE = 100
_SAME_CPU_SCORE = 20
_CROSS_CPU_SCORE = 10


def _pair_score(a: tuple[int, int], b: tuple[int, int]) -> int:
    """How well two cards, given as (NVLink island, NUMA node), are connected, as
    go-gpuallocator scores a pair (see above)."""
    score = _SAME_CPU_SCORE if a[1] == b[1] else _CROSS_CPU_SCORE
    if a[0] == b[0]:
        score += _NVLINK_SCORE
    return score


def preferred_allocation(free: Sequence[Gpu], size: int) -> list[int]:
    """The whole cards (indices, ascending) the NVIDIA device plugin prefers for a container
    asking for `size` of them, out of the `free` whole cards of its node.

    The kubelet asks the plugin's GetPreferredAllocation for the devices it allocates
    (kubernetes v1.37.2 pkg/kubelet/cm/devicemanager/manager.go, devicesToAllocate); for
    whole cards without replicas the plugin (NVIDIA/k8s-device-plugin v0.19.3,
    internal/rm/nvml_manager.go, getPreferredAllocation -> alignedAlloc) runs
    go-gpuallocator's best-effort policy (NVIDIA/go-gpuallocator v0.6.0,
    gpuallocator/besteffort_policy.go, Allocate), ported here: pad the available cards to a
    multiple of `size`, find the partition of them into sets of `size` (at most one set
    holding padding, and all of it) with the highest total pair score (`_pair_score`), the
    first such in the policy's enumeration order, and return that partition's best-scoring
    set, the first on ties. So a set is taken on one NVLink island / NUMA node when one fits,
    and the choice also keeps the rest of the node in good sets. `size` 1: the first card.

    Ties follow the order of the available list, which the kubelet passes unsorted (a Go set);
    here the cards are taken in index order, so ties go to the lowest index (an assumption:
    the real choice among equals is arbitrary). Should the best set be a padded one (fewer
    cards than `size`), the kubelet allocates the rest from the other free cards: here the
    lowest-indexed. The topology manager's NUMA filter (policy `none` by default) is not
    modelled. The search is exponential in the free cards, as the policy's is: instant for 8,
    up to a second or two for 16 (results are cached by topology)."""
    cards = sorted(free, key=lambda g: g.index)
    if size <= 0 or len(cards) < size:
        return []
    chosen = _preferred(tuple((g.nvlink_island, g.numa_node) for g in cards), size)
    return sorted(cards[i].index for i in chosen)


@lru_cache(maxsize=4096)
def _preferred(cards: tuple[tuple[int, int], ...], size: int) -> tuple[int, ...]:
    """`preferred_allocation` over cards given as (NVLink island, NUMA node), in the order the
    plugin is given them: the positions of the chosen ones."""
    if size == 1:
        return (0,)
    pad = -len(cards) % size
    devices: tuple[int | None, ...] = tuple(range(len(cards))) + (None,) * pad

    @cache
    def score(s: tuple[int | None, ...]) -> int:
        real = [i for i in s if i is not None]
        return sum(_pair_score(cards[i], cards[j]) for i, j in combinations(real, 2))

    def sets(rest: tuple[int | None, ...]) -> Iterator[tuple[tuple, tuple]]:
        """The policy's candidate first sets of `rest` (its first device and `size - 1` of
        the others, in its order; no padding or all of it), each with what remains."""
        for others in combinations(rest[1:], size - 1):
            s = (rest[0], *others)
            if s.count(None) not in (0, pad):
                continue
            yield s, tuple(d for d in rest if d not in s)

    @cache
    def best(rest: tuple[int | None, ...]) -> int:
        if len(rest) == size:
            return score(rest)
        return max(score(s) + best(r) for s, r in sets(rest))

    # the first partition of the policy's enumeration with the highest total
    partition, rest = [], devices
    while len(rest) > size:
        s, rest = next((s, r) for s, r in sets(rest) if score(s) + best(r) == best(rest))
        partition.append(s)
    partition.append(rest)
    chosen = partition[0]
    for s in partition[1:]:
        if score(s) > score(chosen):
            chosen = s
    got = [i for i in chosen if i is not None]
    got += [i for i in range(len(cards)) if i not in got][: size - len(got)]
    return tuple(got)


def _bind_whole(frees: list[_Free], n: int) -> tuple[_Free, list[Allocation]] | None:
    """The node: the tightest that fits (kube-scheduler counts cards); the cards on it: the
    device plugin's (`preferred_allocation`)."""
    fits = [f for f in frees if len(f.whole) >= n]
    if not fits:
        return None
    f = min(fits, key=lambda f: (len(f.whole), f.node.name))
    gpus = {g.index: g for g in f.node.gpus}
    cards = preferred_allocation([gpus[i] for i in f.whole], n)
    f.whole = [i for i in f.whole if i not in cards]
    return f, [Allocation(gpu=i) for i in cards]


def _bind_mig(frees: list[_Free], want: dict[str, int]) -> tuple[_Free, list[Allocation]] | None:
    def fits(f: _Free) -> bool:
        return all(
            sum(1 for v in f.mig.values() for p, _ in v if p == prof) >= n
            for prof, n in want.items()
        )

    ok = [f for f in frees if want and fits(f)]
    if not ok:
        return None
    f = min(ok, key=lambda f: (f.mig_units, f.node.name))
    out = []
    for prof, n in sorted(want.items()):
        for _ in range(n):
            card = min(
                (i for i, v in f.mig.items() if any(p == prof for p, _ in v)),
                key=lambda i: (len(f.mig[i]), i),
            )
            inst = next(x for x in f.mig[card] if x[0] == prof)
            f.mig[card].remove(inst)
            out.append(Allocation(gpu=card, mig_start=inst[1], mig_profile=prof))
    return f, out


def _bind_shared(frees: list[_Free], k: int) -> tuple[_Free, list[Allocation]] | None:
    options = [
        (free, f.node.name, i, f) for f in frees for i, free in f.shared.items() if free >= k
    ]
    if not options:
        return None
    _, _, i, f = min(options, key=lambda o: o[:3])
    f.shared[i] -= k
    return f, [Allocation(gpu=i, slices=k)]


def _aware(t: datetime | None) -> datetime:
    if t is None:
        return EPOCH
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _pending(desired: DesiredState, observed: ObservedState) -> list[Workload]:
    """The pending pods without a gate, in the order `schedule` binds them."""
    values = {c.name: c.value for c in desired.priority.spec.classes} if desired.priority else {}
    return sorted(
        (
            w
            for w in observed.workloads
            if w.phase == "Pending"
            and w.request.kind != "none"
            and w.admission in ("scheduler", "admitted")
        ),
        key=lambda w: (-values.get(w.priority_class or "", 0), _aware(w.created_at), w.key),
    )


def _frees(observed: ObservedState) -> dict[str, _Free]:
    """What is free on each Ready, uncordoned node, by name."""
    running = [w for w in observed.workloads if w.phase == "Running"]
    frees: dict[str, _Free] = {}
    for node in sorted(observed.nodes, key=lambda n: n.name):
        if node.ready and not node.unschedulable:
            frees[node.name] = _free(node, [w for w in running if w.node == node.name])
    return frees


def _bind(
    w: Workload, frees: dict[str, _Free], extended_resource_toleration: bool
) -> tuple[_Free, list[Allocation]] | None:
    """Where pending `w` binds (its node and allocations, taken from `frees`), if anywhere."""
    eligible = [
        f
        for f in frees.values()
        if (w.pool is None or f.node.labels.get(POOL_LABEL) == w.pool)
        and (w.admission != "admitted" or f.node.name == w.node)  # its node affinity
        and _tolerated(f.node, w, extended_resource_toleration)
    ]
    r = w.request
    if r.kind == "whole":
        return _bind_whole(eligible, r.gpus)
    if r.kind == "mig":
        return _bind_mig(eligible, dict(r.mig))
    # under MPS the plugin fails a request for more than one replica
    # (failRequestsGreaterThanOne, api/config/v1/config.go): the pod never runs there
    fits = [f for f in eligible if r.shared_slices == 1 or not is_mps(f.node)]
    return _bind_shared(fits, r.shared_slices)


def _with_busy(observed: ObservedState, busy: set[tuple[str, int]], now: datetime) -> list[Node]:
    """The nodes, the whole cards just bound (`busy`: node, index) busy from `now` on."""
    nodes = {n.name: n for n in observed.nodes}
    new_nodes = []
    for node in observed.nodes:
        if any(n == node.name for n, _ in busy):
            gpus = [
                g.with_sample(BUSY_UTILIZATION, now) if (node.name, g.index) in busy else g
                for g in node.gpus
            ]
            node = nodes[node.name].model_copy(update={"gpus": gpus})
        new_nodes.append(node)
    return new_nodes


@dataclass(frozen=True)
class Override:
    """An admitted whole-card pod the device plugin gave other cards than the plan meant."""

    pod: str
    node: str
    planned: tuple[int, ...]
    got: tuple[int, ...]


def overrides(before: ObservedState, after: ObservedState) -> list[Override]:
    """The pods `schedule` bound (`before`: its input, `after`: its output) on other whole
    cards than the plan meant for them: admitted pods whose cards in `before` (the Admit's
    `PodAdmission.gpus`, the `gpupool.io/intended-gpus` hint) are not the ones the device
    plugin preferred. `schedule` binds the plugin's either way (the kubelet does); this is
    for a caller that counts how often the plan's choice was not followed."""
    bound = {w.key: w for w in after.workloads if w.phase == "Running"}
    out = []
    for w in before.workloads:
        got = bound.get(w.key)
        if (
            got is None
            or w.phase != "Pending"
            or w.admission != "admitted"
            or w.request.kind != "whole"
            or not w.allocations
        ):
            continue
        planned = tuple(sorted(a.gpu for a in w.allocations))
        cards = tuple(sorted(a.gpu for a in got.allocations))
        if planned != cards:
            out.append(Override(w.key, got.node or "", planned, cards))
    return out


def schedule(
    desired: DesiredState,
    observed: ObservedState,
    *,
    now: datetime,
    extended_resource_toleration: bool = False,
) -> ObservedState:
    """Bind pending pods the way kube-scheduler would, never kinder.

    Only pods without a gate bind: kube-scheduler's own (`admission: scheduler`) and those
    gpupool admitted, which bind only to the node they were admitted to (required node
    affinity). A pending pod binds only to a Ready node that is not cordoned and has no
    NoSchedule or NoExecute taint (with `extended_resource_toleration`, a NoSchedule taint
    keyed by a GPU resource the pod requests is tolerated, as Kubernetes'
    ExtendedResourceToleration admission plugin arranges when it is enabled), labelled with
    the pool it asks for (`gpupool.io/pool`, its node selector) or any node when it asks for
    none. Whole cards:
    `gpus` free whole cards on one node; MIG: a free instance of each profile asked for on
    one node; shared: `shared_slices` free slices on one shared card. Highest priority
    first (the value of its class in the desired PriorityPolicy; no class or an unknown one:
    0, as Kubernetes without a global default), then the oldest, then by key. Among the
    places that fit: the node (or card) with the fewest free units, then by name and index.
    The whole cards on the node are the device plugin's choice (`preferred_allocation`), not
    the first free ones, and not the plan's: an admitted pod's cards (the Admit's, a hint)
    are replaced by the plugin's where they differ (`overrides` lists those).
    """
    # The real scheduler places one pod at a time and knows nothing of the planner's intent:
    # the cards a plan reserved for a gang or a Move's `to_node` do not bind anything here.
    # This is deliberate: a plan that only works if the scheduler follows it is a bad plan.
    pending = _pending(desired, observed)
    if not pending:
        return observed
    frees = _frees(observed)
    bound: dict[str, Workload] = {}
    busy: set[tuple[str, int]] = set()
    for w in pending:
        got = _bind(w, frees, extended_resource_toleration)
        if got is None:
            continue
        f, allocations = got
        if w.request.kind == "whole":
            busy.update((f.node.name, a.gpu) for a in allocations)
        bound[w.key] = w.model_copy(
            update={
                "phase": "Running",
                "node": f.node.name,
                "allocations": allocations,
                "started_at": now,
            }
        )
    if not bound:
        return observed
    return observed.model_copy(
        update={
            "nodes": _with_busy(observed, busy, now),
            "workloads": [bound.get(w.key, w) for w in observed.workloads],
        }
    )
