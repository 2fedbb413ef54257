"""The planner's working view of one snapshot: pools, their GPUs, who holds what.

Built once per plan from (desired, observed); mutable only inside a planning run so that
placement and conversions can be tried on it. Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction

from reconciler.conventions import CORDONED_FOR_ANN, GPU_CLIQUE_LABEL, NVIDIA, PRODUCT_LABEL
from reconciler.observe.model import (
    Gpu,
    Node,
    ObservedState,
    Request,
    Workload,
    idle_since_below,
)
from reconciler.plan.census import CensusKey, count_the_rest, count_workloads
from reconciler.plan.kept import Keeper, fresh, shared_ends
from reconciler.policy.catalog import GpuModel
from reconciler.policy.models import LabelSelector, Pool
from reconciler.policy.state import DesiredState


def selector_matches(sel: LabelSelector, labels: dict[str, str]) -> bool:
    for k, v in sel.match_labels.items():
        if labels.get(k) != v:
            return False
    for r in sel.match_expressions:
        present = r.key in labels
        if r.operator == "In" and (not present or labels[r.key] not in r.values):
            return False
        if r.operator == "NotIn" and present and labels[r.key] in r.values:
            return False
        if r.operator == "Exists" and not present:
            return False
        if r.operator == "DoesNotExist" and present:
            return False
    return True


@dataclass(eq=False)  # identity: a card is itself, whatever its state (and cheap to look up)
class GpuSlot:
    """One card: what it is now, what the plan makes it, and what holds it."""

    node: str
    index: int
    mode: str  # whole | mig | shared (now)
    layout: tuple[str, ...] = ()  # MIG profiles now (sorted)
    instances: list[tuple[str, int]] = field(default_factory=list)  # (profile, start) now
    slices: int = 0  # shared slices now
    numa: int = 0
    island: int = 0
    utilization: float = 0.0
    idle_since: object = None
    below_since: dict[int, datetime] = field(default_factory=dict)  # level (percent) -> since
    # who holds it
    holders: set[str] = field(default_factory=set)  # workload keys
    used_instances: set[tuple[str, int]] = field(default_factory=set)
    instance_holders: dict[tuple[str, int], str] = field(default_factory=dict)  # placed now
    used_slices: int = 0
    # the plan's target
    target_mode: str = ""
    target_layout: tuple[str, ...] = ()
    target_slices: int = 0
    target_instances: list[tuple[str, int]] = field(default_factory=list)
    reserved_by: str | None = None  # a pending workload the plan makes room for
    converted: bool = False  # the plan repartitions this card
    why: str = ""  # the reason for the repartition
    fenced: str = ""  # why nothing may be placed on or done to this card (node unavailable)

    def __post_init__(self) -> None:
        self.target_mode = self.mode
        self.target_layout = self.layout
        self.target_slices = self.slices
        self.target_instances = list(self.instances)

    def idle_since_below(self, percent: float) -> datetime | None:
        """Since when the card's utilization has stayed below `percent` (a policy's
        `utilizationBelow`), read conservatively from the levels the agent publishes
        (`reconciler.observe.model.idle_since_below`); None: not known to be."""
        since = self.idle_since if isinstance(self.idle_since, datetime) else None
        return idle_since_below(self.below_since, since, percent)

    @property
    def open(self) -> bool:
        """New work may be placed here: its node is available."""
        return not self.fenced

    def free_instances(self, profile: str) -> list[tuple[str, int]]:
        if not self.open:
            return []
        return [
            i for i in self.target_instances if i[0] == profile and i not in self.used_instances
        ]

    @property
    def free_slices(self) -> int:
        if not self.open or self.target_mode != "shared":
            return 0
        return max(0, self.target_slices - self.used_slices)

    @property
    def free_whole(self) -> bool:
        return (
            self.target_mode == "whole"
            and not self.holders
            and self.reserved_by is None
            and not self.fenced
        )

    @property
    def key(self) -> str:
        return f"{self.node}/gpu{self.index}"

    @property
    def changes(self) -> bool:
        return (self.target_mode, self.target_layout, self.target_slices) != (
            self.mode,
            self.layout,
            self.slices,
        )

    @property
    def empty(self) -> bool:
        return not self.holders

    def describe(self, target: bool = False) -> str:
        mode, layout, slices = (
            (self.target_mode, self.target_layout, self.target_slices)
            if target
            else (self.mode, self.layout, self.slices)
        )
        if mode == "mig":
            return "MIG[" + ", ".join(layout) + "]"
        if mode == "shared":
            return f"shared x{slices}"
        return "whole"


def mig_key(g: GpuSlot) -> tuple:
    return (len(g.target_instances) - len(g.used_instances), g.node, g.index)


@dataclass
class PoolView:
    name: str
    pool: Pool
    model: GpuModel | None
    nodes: dict[str, Node] = field(default_factory=dict)
    gpus: list[GpuSlot] = field(default_factory=list)  # sorted by node, index

    _nodes: dict[str, list[GpuSlot]] | None = None
    _free: dict[str, int] = field(default_factory=dict)
    _buckets: list[list[str]] = field(default_factory=list)
    _inference: list[GpuSlot] | None = None
    _mig_free: dict[str, list[GpuSlot]] | None = None

    _shared_free: list[list[GpuSlot]] | None = None
    _empty_inference: dict[str, list[GpuSlot]] | None = None

    _empty_nodes: list[str] = field(default_factory=list)
    _cliques: dict[str, set[str]] | None = None

    def cliques(self) -> dict[str, set[str]]:
        """Multi-node NVLink domain (GPU feature discovery's label `nvidia.com/gpu.clique`)
        -> the pool's nodes in it; read once per run (a pool's nodes and their labels do not
        change during one). Read-only to callers."""
        if self._cliques is None:
            out: dict[str, set[str]] = {}
            for name, node in self.nodes.items():
                clique = node.labels.get(GPU_CLIQUE_LABEL, "")
                if clique:
                    out.setdefault(clique, set()).add(name)
            self._cliques = out
        return self._cliques

    def empty_inference_by_node(self) -> dict[str, list[GpuSlot]]:
        """Node -> inference cards nobody held when last counted (callers re-check `holders`);
        kept per node by `touch`, iterate with `empty_inference_nodes()` for name order."""
        if self._empty_inference is None:
            out: dict[str, list[GpuSlot]] = {}
            for g in self.inference_slots():
                if not g.holders:
                    out.setdefault(g.node, []).append(g)
            self._empty_inference = out
            self._empty_nodes = sorted(out)
        return self._empty_inference

    def empty_inference_nodes(self) -> list[str]:
        self.empty_inference_by_node()
        return self._empty_nodes

    def _recount_empty(self, node: str) -> None:
        if self._empty_inference is None:
            return
        cards = [
            g for g in self.by_node().get(node, []) if g.target_mode != "whole" and not g.holders
        ]
        had = node in self._empty_inference
        if cards:
            self._empty_inference[node] = cards
            if not had:
                bisect.insort(self._empty_nodes, node)
        elif had:
            del self._empty_inference[node]
            del self._empty_nodes[bisect.bisect_left(self._empty_nodes, node)]

    def shared_buckets(self) -> list[list[GpuSlot]]:
        """Shared cards by free slices: bucket f holds the cards with f free, in node/index
        order (bucket 0 unused). `shared_used` re-files a card after a placement."""
        if self._shared_free is None:
            top = max(
                (g.target_slices for g in self.inference_slots() if g.target_mode == "shared"),
                default=0,
            )
            buckets: list[list[GpuSlot]] = [[] for _ in range(top + 1)]
            for g in self.inference_slots():
                if g.free_slices > 0:
                    buckets[g.free_slices].append(g)
            self._shared_free = buckets
        return self._shared_free

    def shared_used(self, g: GpuSlot, before: int) -> None:
        buckets = self.shared_buckets()
        if before < len(buckets):
            b = buckets[before]
            for i, other in enumerate(b):
                if other is g:
                    del b[i]
                    break
        if 0 < g.free_slices < len(buckets):
            bisect.insort(buckets[g.free_slices], g, key=lambda s: (s.node, s.index))

    def repartitioned(self, g: GpuSlot) -> None:
        """Keep the inference indexes right after `g` got a new target partitioning."""
        if self._inference is not None:
            if g.target_mode == "whole":
                if g in self._inference:
                    self._inference.remove(g)
            elif g not in self._inference:
                bisect.insort(self._inference, g, key=lambda s: (s.node, s.index))
        self._mig_free = None
        self._shared_free = None
        self.touch(g.node)
        self._recount_empty(g.node)

    # -- the only ways the planner changes a card: each keeps the indexes right ----------
    def take_instance(self, g: GpuSlot, instance: tuple[str, int], holder: str) -> None:
        """`holder` is placed on MIG instance (profile, start) of `g`."""
        g.used_instances.add(instance)
        g.instance_holders[instance] = holder
        g.holders.add(holder)
        self.mig_used(g, instance[0])

    def take_slices(self, g: GpuSlot, slices: int, holder: str) -> None:
        """`holder` is placed on `slices` shared slices of `g`."""
        self.shared_buckets()  # the index must exist before the card changes, or it files it twice
        before = g.free_slices
        g.used_slices += slices
        g.holders.add(holder)
        self.shared_used(g, before)

    def reserve(self, cards: list[GpuSlot], holder: str) -> None:
        """Free whole cards kept for `holder` (a gang the plan admits, a workload it moves)."""
        for g in cards:
            g.reserved_by = holder
        for node in sorted({g.node for g in cards}):
            self.touch(node)

    def unreserve(self, cards: list[GpuSlot]) -> None:
        """Give back cards `reserve` kept (a gang that could not be placed whole)."""
        for g in cards:
            g.reserved_by = None
        for node in sorted({g.node for g in cards}):
            self.touch(node)

    def repartition(
        self,
        g: GpuSlot,
        mode: str,
        *,
        layout: tuple[str, ...] = (),
        instances: list[tuple[str, int]] | None = None,
        slices: int = 0,
        why: str,
    ) -> None:
        """The plan gives `g` a new partitioning (it must be emptied first)."""
        g.target_mode = mode
        g.target_layout = layout if mode == "mig" else ()
        g.target_instances = list(instances or []) if mode == "mig" else []
        g.target_slices = slices if mode == "shared" else 0
        g.converted = True
        g.why = why
        g.used_instances, g.used_slices = set(), 0
        self.repartitioned(g)

    def mig_with_free(self, profile: str) -> list[tuple[tuple, GpuSlot]]:
        """MIG cards with a free instance of `profile`, as (packing key, card) sorted by key:
        the fewest free instances first, then node and index. Keys of a card in other
        profiles' lists may be stale after a placement; callers re-check what is free."""
        if self._mig_free is None:
            self._mig_free = {}
            for g in self.inference_slots():
                if g.target_mode == "mig":
                    for prof in sorted({p for p, _ in g.target_instances}):
                        if g.free_instances(prof):
                            self._mig_free.setdefault(prof, []).append((mig_key(g), g))
            for lst in self._mig_free.values():
                lst.sort(key=lambda e: e[0])
        return self._mig_free.setdefault(profile, [])

    def mig_used(self, g: GpuSlot, profile: str) -> None:
        """Re-file a card in `profile`'s list after one of its instances was taken."""
        lst = self.mig_with_free(profile)
        for i, (_, other) in enumerate(lst):
            if other is g:
                del lst[i]
                break
        if g.free_instances(profile):
            bisect.insort(lst, (mig_key(g), g), key=lambda e: e[0])

    def inference_slots(self) -> list[GpuSlot]:
        """Cards whose target is MIG or shared (recomputed after a repartition)."""
        if self._inference is None:
            self._inference = [g for g in self.gpus if g.target_mode != "whole"]
        return self._inference

    def by_node(self) -> dict[str, list[GpuSlot]]:
        """Node -> its cards, in node-name order (cards never change node during a plan)."""
        if self._nodes is None:
            out: dict[str, list[GpuSlot]] = {}
            for g in self.gpus:
                out.setdefault(g.node, []).append(g)
            self._nodes = dict(sorted(out.items()))
        return self._nodes

    # -- free whole cards per node: an index so gang placement is not a scan per job ----
    def _index(self) -> None:
        if self._buckets:
            return
        size = max((len(s) for s in self.by_node().values()), default=0)
        self._buckets = [[] for _ in range(size + 1)]
        for node, slots in self.by_node().items():
            c = sum(1 for g in slots if g.free_whole)
            self._free[node] = c
            self._buckets[c].append(node)  # nodes arrive sorted

    def touch(self, node: str, *, repartitioned: bool = False, released: bool = False) -> None:
        """Re-count a node's free whole cards after its cards changed; drop the inference
        indexes when a card was repartitioned or a workload released MIG/shared capacity."""
        if repartitioned:
            self._inference = None
        if repartitioned or released:
            self._mig_free = None
            self._shared_free = None
            self._recount_empty(node)
        if not self._buckets or node not in self._free:
            return
        old = self._free[node]
        new = sum(1 for g in self.by_node()[node] if g.free_whole)
        if new != old:
            bucket = self._buckets[old]
            del bucket[bisect.bisect_left(bucket, node)]
            bisect.insort(self._buckets[new], node)
            self._free[node] = new

    def free_whole_on(self, node: str) -> int:
        self._index()
        return self._free.get(node, 0)

    def nodes_with_free(self, lo: int, hi: int) -> list[str]:
        """Nodes with between lo and hi free whole cards, in name order."""
        self._index()
        lo = max(lo, 0)
        return sorted(n for b in self._buckets[lo : hi + 1] for n in b)

    def nodes_fitting(self, n: int, limit: int) -> list[str]:
        """Up to `limit` nodes with at least n free whole cards, fewest free first, then by name."""
        self._index()
        out: list[str] = []
        for bucket in self._buckets[n:]:
            out.extend(bucket[: limit - len(out)])
            if len(out) >= limit:
                break
        return out

    def total_free_whole(self) -> int:
        self._index()
        return sum(c * len(b) for c, b in enumerate(self._buckets))

    def count(self, mode: str, target: bool = True) -> int:
        return sum(1 for g in self.gpus if (g.target_mode if target else g.mode) == mode)

    def capacity(self, target: bool) -> dict[str, int]:
        """`count` of each mode, in one pass over the cards."""
        out = {"whole": 0, "mig": 0, "shared": 0}
        for g in self.gpus:
            m = g.target_mode if target else g.mode
            if m in out:
                out[m] += 1
        return out


def node_pool_name(desired: DesiredState, node: Node) -> str | None:
    """The pool whose selector (and GPU model) `node` matches: the first by name. The model's
    `nvidia.com/gpu.product` values are implied, so pools of different models never overlap."""
    product = node.labels.get(PRODUCT_LABEL)
    for name in sorted(desired.pools):
        pool = desired.pools[name]
        model = desired.catalog.model(pool.spec.gpu_model)
        if product and model and desired.catalog.model_for_product(product) is not model:
            continue
        if selector_matches(pool.spec.node_selector, node.labels):
            return name
    return None


UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"  # comes with a cordon: judged as one


def node_fence(node: Node) -> str:
    """Why no new GPU work can land on `node` (empty: it can).

    NotReady nodes and nodes cordoned by somebody else are not capacity. A NoSchedule or
    NoExecute taint blocks too, except a NoSchedule taint keyed by an NVIDIA resource name:
    Kubernetes' ExtendedResourceToleration admission plugin gives every pod requesting that
    resource a toleration for it (key = resource name, operator Exists, effect NoSchedule;
    kubernetes/kubernetes#55839), which is how dedicated GPU nodes are usually tainted.
    A node gpupool itself cordoned for a repartition stays usable by the plan that drains it.
    """
    if not node.ready:
        return "NotReady"
    ours = CORDONED_FOR_ANN in node.annotations
    if node.unschedulable and not ours:
        return "cordoned (not by gpupool)"
    for t in sorted(node.taints, key=lambda t: (t.key, t.effect, t.value)):
        if t.effect == "PreferNoSchedule" or t.key == UNSCHEDULABLE_TAINT:
            continue
        if t.effect == "NoSchedule" and t.key.startswith(NVIDIA):
            continue
        return f"tainted {t.key}{'=' + t.value if t.value else ''}:{t.effect}"
    return ""


def _slot(node: Node, gpu: Gpu) -> GpuSlot:
    instances = sorted((i.profile, i.start) for i in gpu.mig_instances) if gpu.mig_enabled else []
    return GpuSlot(
        node=node.name,
        index=gpu.index,
        mode=gpu.mode,
        below_since=dict(gpu.below_since),
        layout=tuple(sorted(p for p, _ in instances)),
        instances=instances,
        slices=gpu.shared_slices or 0,
        numa=gpu.numa_node,
        island=gpu.nvlink_island,
        utilization=gpu.utilization,
        idle_since=gpu.idle_since,
    )


@dataclass
class ClusterView:
    pools: dict[str, PoolView]
    node_pool: dict[str, str]  # node -> pool
    slot: dict[tuple[str, int], GpuSlot]
    workloads: dict[str, Workload]
    unmatched_nodes: list[str]
    fenced_nodes: dict[str, str] = field(default_factory=dict)  # node -> why it is not capacity
    census: dict[CensusKey, int] = field(default_factory=dict)
    """How many of `workloads` there are per `CensusKey` (as observed: the plan changes
    nothing of it)."""
    releases: int = 0
    """How many workloads `release` has freed in this run (answers about who holds what, kept
    during a run, are valid while it and `Run.generation` stay as they were)."""

    def pool_of(self, w: Workload) -> str | None:
        if w.node:
            return self.node_pool.get(w.node)
        return w.pool

    def release(self, w: Workload) -> None:
        """`w` stops (evicted, preempted, moved): its cards, instances and slices are free."""
        self.releases += 1
        for a in w.allocations:
            s = self.slot.get((w.node or "", a.gpu))
            if s is None:
                continue
            s.holders.discard(w.key)
            if a.mig_start is not None:
                s.used_instances = {i for i in s.used_instances if i[1] != a.mig_start}
            s.used_slices -= a.slices
        pool = self.pools.get(self.node_pool.get(w.node or "", ""))
        if pool is not None and w.node:
            pool.touch(w.node, released=True)

    def targets(self) -> dict[tuple[str, str, int], str]:
        """(pool, node, index) -> the card's partitioning after the plan, as people read it."""
        return {
            (pv.name, g.node, g.index): g.describe(target=True)
            for pv in self.pools.values()
            for g in pv.gpus
        }


@dataclass(frozen=True)
class UnknownHolding:
    """A running workload that holds more than its allocations say: its node's agent publishes
    no allocation for it (or fewer than it asks for), so which cards it holds is unknown."""

    workload: str
    node: str
    missing: tuple[str, ...]
    """What it asks for beyond what it is known to hold, in words ("2 whole GPUs")."""
    cards: tuple[tuple[str, int], ...]
    """Every card of its node it may hold, by (node, index): each card of a kind it asks for
    with room no other known allocation takes."""


UNKNOWN_HOLDER = "a running pod whose cards are unknown may hold it"


def unknown_holdings(observed: ObservedState, keep: Keeper | None = None) -> list[UnknownHolding]:
    """Running workloads that hold cards the snapshot does not say, and the cards of their
    node they may hold, by workload key.

    Conservative: whatever it asks for and is not known to hold, it may hold on any card of its
    node where that would fit beside what is known (a free whole card for a whole request, a
    MIG instance of its profile no known allocation uses, a shared card with free slices).
    Which of those it really holds is not known, so it is taken to hold all of them: the planner
    places nothing there, repartitions none of them and resets no node under it. Holding only
    as many as it asks for would be enough for kube-scheduler's counts, but not for a
    repartition: gpupool would pick one of the others as empty and reset it under the pod.

    Each key counts once (its last listing, as the working view keeps it); a workload whose node
    the snapshot lacks is `consistency`'s `unknown-node`. Pure; never raises.

    `keep`: when the previous plan's workloads had none short, only the workloads that
    changed since (`shared_ends`) are looked at, and the answer kept for the next."""
    ws = observed.workloads
    before = keep.last(UNKNOWN) if keep is not None else None
    if keep is not None and before is not None and not before[1]:  # none short: only changes
        i, j = shared_ends(before[0], ws)
        if not any(_running_short(w) for w in ws[i : len(ws) - j]):
            keep.keep_last(UNKNOWN, ws, False)
            return []
    short = [w for w in ws if _running_short(w)]
    if keep is not None:
        keep.keep_last(UNKNOWN, ws, bool(short))
    if not short:
        return []  # the common case: one cheap pass
    last = {w.key: w for w in observed.workloads}
    short = sorted((w for w in short if last[w.key] is w), key=lambda w: w.key)
    nodes: dict[str, Node] = {}
    for n in observed.nodes:
        nodes.setdefault(n.name, n)
    whole: set[tuple[str, int]] = set()
    starts: dict[tuple[str, int], set[int]] = {}
    slices: dict[tuple[str, int], int] = {}
    for w in last.values():
        if not w.placed:
            continue
        for a in w.allocations:
            card = (w.node or "", a.gpu)
            if a.mig_start is not None:
                starts.setdefault(card, set()).add(a.mig_start)
            elif a.slices:
                slices[card] = slices.get(card, 0) + a.slices
            else:
                whole.add(card)
    out = []
    for w in short:
        n = nodes.get(w.node or "")
        if n is None:
            continue
        missing, cards = _unknown_part(w, n, whole, starts, slices)
        if missing:
            out.append(UnknownHolding(w.key, n.name, tuple(missing), tuple(sorted(cards))))
    return out


UNKNOWN = "unknown-holdings"


def _running_short(w: Workload) -> bool:
    return w.phase == "Running" and bool(w.node) and _short(w)


def _short(w: Workload) -> bool:
    """`w` holds fewer whole cards, MIG instances or shared slices than it asks for (cheap: which
    MIG profiles are missing is `_unknown_part`'s; an allocation of another profile than the
    card's instance is `consistency`'s `unknown-mig-instance`)."""
    r = w.request
    whole = mig = slices = 0
    for a in w.allocations:
        if a.mig_start is not None:
            mig += 1
        elif a.slices:
            slices += a.slices
        else:
            whole += 1
    return r.gpus > whole or r.shared_slices > slices or (bool(r.mig) and sum(r.mig.values()) > mig)


def _unknown_part(
    w: Workload,
    n: Node,
    whole: set[tuple[str, int]],
    starts: dict[tuple[str, int], set[int]],
    slices: dict[tuple[str, int], int],
) -> tuple[list[str], set[tuple[str, int]]]:
    """What `w` asks for beyond its allocations, in words, and the cards of `n` it may hold."""
    r = w.request
    known_whole = sum(1 for a in w.allocations if a.mig_start is None and not a.slices)
    known_slices = sum(a.slices for a in w.allocations)
    known_mig: dict[str, int] = {}
    for a in w.allocations:
        if a.mig_start is not None:
            prof = a.mig_profile or next(
                (
                    i.profile
                    for g in n.gpus
                    if g.index == a.gpu
                    for i in g.mig_instances
                    if i.start == a.mig_start
                ),
                "",
            )
            known_mig[prof] = known_mig.get(prof, 0) + 1
    missing: list[str] = []
    cards: set[tuple[str, int]] = set()
    if r.gpus > known_whole:
        k = r.gpus - known_whole
        missing.append(f"{k} whole GPU{'s' if k > 1 else ''}")
        cards |= {(n.name, g.index) for g in n.gpus if g.mode == "whole"} - whole
    for prof, want in sorted(r.mig.items()):
        if want > known_mig.get(prof, 0):
            k = want - known_mig.get(prof, 0)
            missing.append(f"{k} MIG {prof} instance{'s' if k > 1 else ''}")
            cards |= {
                (n.name, g.index)
                for g in n.gpus
                if g.mig_enabled
                and any(
                    i.profile == prof and i.start not in starts.get((n.name, g.index), set())
                    for i in g.mig_instances
                )
            }
    if r.shared_slices > known_slices:
        k = r.shared_slices - known_slices
        missing.append(f"{k} shared slice{'s' if k > 1 else ''}")
        cards |= {
            (n.name, g.index)
            for g in n.gpus
            if g.mode == "shared" and slices.get((n.name, g.index), 0) < (g.shared_slices or 0)
        }
    return missing, cards


def build_cluster(
    desired: DesiredState,
    observed: ObservedState,
    suspect: dict[tuple[str, int], str] | None = None,
    keep: Keeper | None = None,
    unknown: list[UnknownHolding] | None = None,
    groups: Mapping[str, tuple[Workload, ...]] | None = None,
    rest: Iterable[Workload] | None = None,
) -> ClusterView:
    """The working view. `suspect` cards (their holders disagree with the card: drift the
    cluster produced) are fenced like the cards of an unavailable node. A running workload
    whose cards are not all known holds every card of its node it may hold
    (`unknown_holdings`; `unknown` when the caller has it), and those are fenced too.

    Each node's pool, fence and card slots with what the workloads on it hold (`node_part`)
    are asked of `keep` per node and the workloads holding cards there (`groups`, node ->
    workloads: `consistency.holding_groups`, given when the snapshot lists no node and no
    workload twice), which may answer from a kept view (`reconciler.plan.kept`): the view's
    slots are copies of the answer's. `rest`: the workloads `groups` leaves out (holding
    nothing; `holding_groups`'s), when the caller has them: the view's `census` is then
    the nodes' kept counts and a count of the others only."""
    keep = keep or fresh()
    suspect = suspect or {}
    pools: dict[str, PoolView] = {}
    for name in sorted(desired.pools):
        p = desired.pools[name]
        pools[name] = PoolView(name, p, desired.catalog.model(p.spec.gpu_model))
    node_pool: dict[str, str] = {}
    slot: dict[tuple[str, int], GpuSlot] = {}
    unmatched = []
    fenced: dict[str, str] = {}
    ws = observed.workloads  # canonical (sorted by key) when `groups` is given: open_run's
    workloads = {w.key: w for w in (ws if groups is not None else sorted(ws, key=lambda w: w.key))}
    census: dict[CensusKey, int] = {}
    counted = groups is not None and rest is not None
    for node in sorted(observed.nodes, key=lambda n: n.name):
        ws = groups.get(node.name, ()) if groups is not None else ()
        part = keep.group(
            "cluster-node", lambda node=node, ws=ws: node_part(desired, node, ws), node, ws
        )
        if counted:
            for k, n in part.census:
                census[k] = census.get(k, 0) + n
        match = pools.get(part.pool or "")
        if match is None:
            if node.gpus:
                unmatched.append(node.name)
            continue
        node_pool[node.name] = match.name
        match.nodes[node.name] = node
        why = part.fence
        if why and node.gpus:
            fenced[node.name] = why
        for t in part.slots:
            s = clone_slot(t)
            s.fenced = why or suspect.get((node.name, t.index), "")
            match.gpus.append(s)
            slot[(node.name, t.index)] = s
    if groups is None:
        for w in workloads.values():
            _hold(slot, w)
    for u in unknown_holdings(observed) if unknown is None else unknown:
        for card in u.cards:
            s = slot.get(card)
            if s is not None:
                s.holders.add(u.workload)
                s.fenced = s.fenced or UNKNOWN_HOLDER
    view = ClusterView(pools, node_pool, slot, workloads, unmatched, fenced, census)
    if counted:
        assert groups is not None and rest is not None
        count_the_rest(census, groups, rest, {n.name for n in observed.nodes}, view.pool_of)
    else:
        count_workloads(census, workloads.values(), view.pool_of)
    return view


def _hold(slot: Mapping[tuple[str, int], GpuSlot], w: Workload) -> None:
    """`w`'s allocations held on the slots (when it is placed)."""
    if not w.placed:
        return
    for a in w.allocations:
        s = slot.get((w.node or "", a.gpu))
        if s is None:
            continue
        s.holders.add(w.key)
        if a.mig_start is not None:
            prof = a.mig_profile or next((p for p, st in s.instances if st == a.mig_start), "")
            s.used_instances.add((prof, a.mig_start))
        s.used_slices += a.slices


@dataclass(frozen=True)
class NodePart:
    """What the working view takes from one node and the workloads on it: its pool (None:
    none matches), why it is no capacity ('' it is), and its cards as slots holding what
    those workloads hold, by index. The slots are templates: never placed in a view
    (`clone_slot` copies them), never changed."""

    pool: str | None
    fence: str
    slots: tuple[GpuSlot, ...]
    census: tuple[tuple[CensusKey, int], ...] = ()
    """`census` of the workloads on it (their pool: the node's)."""


def node_part(desired: DesiredState, node: Node, ws: tuple[Workload, ...] = ()) -> NodePart:
    slots = tuple(_slot(node, g) for g in sorted(node.gpus, key=lambda g: g.index))
    by_index = {(node.name, s.index): s for s in slots}
    for w in ws:
        _hold(by_index, w)
    pool = node_pool_name(desired, node)
    counted: dict[CensusKey, int] = {}
    count_workloads(counted, ws, lambda w: pool)
    return NodePart(pool, node_fence(node), slots, tuple(counted.items()))


def clone_slot(t: GpuSlot) -> GpuSlot:
    """A slot of its own with `t`'s state: its containers are copies, so the plan that changes
    it leaves `t` as it was (`t` may be a template kept from one plan to the next)."""
    s = GpuSlot.__new__(GpuSlot)
    s.__dict__ = {
        **t.__dict__,
        "instances": list(t.instances),
        "below_since": dict(t.below_since),
        "holders": set(t.holders),
        "used_instances": set(t.used_instances),
        "instance_holders": dict(t.instance_holders),
        "target_instances": list(t.target_instances),
    }
    return s


def card_equivalents(r: Request, pool: PoolView | None, memory_slices: int = 8) -> Fraction:
    """What a workload asking `r` uses, in whole-card units: what team caps count."""
    total = Fraction(r.gpus)
    if pool is not None and pool.model is not None:
        for prof, n in r.mig.items():
            p = pool.model.profiles.get(prof)
            if p is not None:
                total += Fraction(n * p.memory_slices, memory_slices)
        shared = pool.pool.spec.inference.shared
        if r.shared_slices and shared is not None:
            total += Fraction(r.shared_slices, shared.slices_per_gpu)
    return total
