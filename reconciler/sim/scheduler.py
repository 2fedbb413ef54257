"""A kube-scheduler stand-in for the effect model: `schedule` binds pending pods.

See `schedule` for the rules and `reconciler.sim.effects` for the model as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from reconciler.conventions import GPU_RESOURCE, POOL_LABEL, SHARED_RESOURCE
from reconciler.conventions import mig_resource as _mig_resource
from reconciler.observe.model import Allocation, Node, ObservedState, Workload
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


def _bind_whole(frees: list[_Free], n: int) -> tuple[_Free, list[Allocation]] | None:
    fits = [f for f in frees if len(f.whole) >= n]
    if not fits:
        return None
    f = min(fits, key=lambda f: (len(f.whole), f.node.name))
    cards, f.whole = f.whole[:n], f.whole[n:]
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
