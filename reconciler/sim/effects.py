"""What a plan does to a cluster, as a pure function of snapshots: the one effect model.

`apply_plan` carries out a plan's actions on an `ObservedState` the way the executor's
handlers (`reconciler/apply/handlers/`) and the components behind them would, assuming every
wait ends within the cycle (checkpoint grace periods, mig-manager, the device plugin).
`schedule` is a kube-scheduler stand-in that binds pending pods; `step` is one controller
cycle: apply, schedule, advance the clock. The multi-cycle tests (tests/plan/test_cycles.py),
`bench/cycles.py` and a future digital twin judge plans through this module alone.

Pure: no I/O, no clock (time is an argument), no randomness; the same inputs give the same
snapshot. Snapshot lists keep their order; new pods are appended.

What is modelled, per action (a target that no longer exists is skipped, as the executor
re-reads and skips):

* Cordon: `unschedulable` and the `cordoned-for` annotation, unless the node is already
  unschedulable (then nothing: the handler leaves a node somebody else cordoned as it is).
* Uncordon: clears both, only on a node gpupool cordoned.
* LabelNode: the labels.
* Checkpoint: `last_checkpoint_at = now`, only for a checkpointable workload. The handler
  only asks (the `checkpoint-requested-at` annotation); the `last-checkpoint` a snapshot
  reads is the workload's own answer, and one that cannot checkpoint never gives it.
* Preempt, Reclaim, Move: the pod is evicted and its owner recreates it: the workload turns
  Pending (no node or allocations, `created_at = now`, `started_at = None`; request, priority
  class, flags and checkpoint kept; `pool` = the pool of the node it ran on). Each appends
  `now` to `recent_preemptions`: **this is the budget bookkeeping the planner reads** (the
  rolling-hour `budgetPerHour` counts every eviction gpupool makes). A pod without an owner
  is gone for good. A Move of a Job's pod reserves the recreated (gated) pod on `to_node`
  and `to_gpus`, as the handler does through the Job's `next-pod-reserved` annotation.
  ResourceQuota admission applies to every pod an owner creates (here and on scale-up): a
  pod the namespace's quota objects have no room for is not created (the owner's retries
  are not modelled: it is gone from the snapshot). Priority admission too: a pod created
  without a class gets the globalDefault PriorityClass, if one exists.
* MigReconfigure / SetSharing: the node's cards take the layout (instances where
  `catalog.place` puts them), the shared slices, or whole, the way the device plugin
  applies them (`_targets`: sharing is per node); only on a cordoned node, and only
  when no card that changes has a running holder. A repartition under a running pod would
  break it (mig-manager and the device plugin do not wait), so the effect model refuses it
  and records nothing; the multi-cycle invariants catch a plan that asks for it.
* Scale: `replicas`, `last_scale_at = now`; the service's pods are made to match: new
  replicas are Pending pods (`<service>-<n>`, numbered on), a scale-down removes pending pods
  first, then the newest (`scale_down_order`).
* SetScaleEnvelope: the autoscaler's min/max (and its `last_change_at = now`); the workload's
  replicas are brought inside them, as the HPA controller does, and its pods made to match
  (as for Scale); within the bounds the autoscaler's metrics are not modelled.
* Preempt/Reclaim with `suspend_job`: the Job is suspended instead: the pod is deleted and
  not recreated (its pending siblings go too), the Job becomes a `SuspendedJob` (one
  budget entry per pod stopped, as the handler records one per action).
* Resume: the suspended Job's pods are created again, gated.
* Admit: the reservation on the gang's gated pods; then, once no pod of `after` is placed
  any more, each pod is admitted: pinned to its node (`admission: admitted`, a whole-card pod
  holding the cards meant for it) for `schedule` to bind there, and nowhere else.
* Hold: the pod's `held` message. Pods an owner recreates (eviction, scale-up) come back
  gated (`admission: gpupool`), as the admission policy gates them, unless the evicted pod
  was kube-scheduler's own (`scheduler`).
* ApplyQuota / ApplyPriorityClass: the observed objects become what the action writes (a
  second globalDefault class is refused, as the API server does).
* PruneQuota / PrunePriorityClass: the object is gone, if it still carries gpupool's label
* ApplyKueueObject / PruneKueueObject: the Kueue object is stored as sent / gone (ours only)
  (the handlers delete nothing else).

Telemetry: a whole card a pod leaves is idle from then on (utilization 0, `idle_since` kept
if it was idle already, else now); a whole card a pod is bound to is busy (a started pod is
assumed to use its cards). What a workload really does on its cards is not modelled.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from reconciler.conventions import (
    CORDONED_FOR_ANN,
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_RESOURCE,
    MANAGED_BY,
    POOL_LABEL,
    PRODUCT_LABEL,
    SHARED_RESOURCE,
)
from reconciler.conventions import mig_resource as _mig_resource
from reconciler.observe.model import (
    Allocation,
    Gpu,
    InferenceService,
    KueueObject,
    MigInstance,
    Node,
    ObservedState,
    PriorityClassObject,
    QuotaObject,
    SuspendedJob,
    Workload,
    scale_down_order,
)
from reconciler.plan.actions import (
    Admit,
    ApplyKueueObject,
    ApplyPriorityClass,
    ApplyQuota,
    Checkpoint,
    Cordon,
    Eviction,
    Hold,
    LabelNode,
    MigReconfigure,
    Move,
    PruneKueueObject,
    PrunePriorityClass,
    PruneQuota,
    Repartition,
    Resume,
    Scale,
    SetScaleEnvelope,
    SetSharing,
    Uncordon,
)
from reconciler.plan.cluster import node_pool_name as node_pool
from reconciler.plan.model import Plan
from reconciler.plan.quotas import quota_use
from reconciler.policy.state import DesiredState

BUSY_UTILIZATION = 50.0
"""Utilization a whole card gets when a pod is bound to it (the builders' default)."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")

# A card's partitioning as the effect model compares it: ("whole",), ("shared", slices),
# ("mig", sorted profiles).
Partition = tuple


# ----------------------------------------------------------------------------- the world
@dataclass
class _World:
    """A mutable working copy of one snapshot; `state()` freezes it again."""

    desired: DesiredState
    observed: ObservedState
    nodes: dict[str, Node] = field(default_factory=dict)
    workloads: list[Workload] = field(default_factory=list)
    services: list[InferenceService] = field(default_factory=list)
    quotas: list[QuotaObject] = field(default_factory=list)
    priority_classes: list[PriorityClassObject] = field(default_factory=list)
    recent: list[datetime] = field(default_factory=list)
    suspended: list[SuspendedJob] = field(default_factory=list)
    kueue: list[KueueObject] | None = None

    @classmethod
    def of(cls, desired: DesiredState, observed: ObservedState) -> _World:
        return cls(
            desired,
            observed,
            nodes={n.name: n for n in observed.nodes},
            workloads=list(observed.workloads),
            services=list(observed.services),
            quotas=list(observed.quotas),
            priority_classes=list(observed.priority_classes),
            recent=list(observed.recent_preemptions),
            suspended=list(observed.suspended_jobs),
            kueue=None if observed.kueue is None else list(observed.kueue),
        )

    def state(self) -> ObservedState:
        return self.observed.model_copy(
            update={
                "nodes": list(self.nodes.values()),
                "workloads": list(self.workloads),
                "services": list(self.services),
                "quotas": list(self.quotas),
                "priority_classes": list(self.priority_classes),
                "recent_preemptions": list(self.recent),
                "suspended_jobs": list(self.suspended),
                "kueue": None if self.kueue is None else list(self.kueue),
            }
        )

    # -- lookups and replacements ------------------------------------------------------
    def workload_at(self, key: str) -> int | None:
        return next((i for i, w in enumerate(self.workloads) if w.key == key), None)

    def service_at(self, key: str) -> int | None:
        return next((i for i, s in enumerate(self.services) if s.key == key), None)

    def update_gpu(self, node: str, index: int, **update: object) -> None:
        n = self.nodes[node]
        gpus = [g.model_copy(update=update) if g.index == index else g for g in n.gpus]
        self.nodes[node] = n.model_copy(update={"gpus": gpus})

    def create_pod(self, pod: Workload) -> None:
        """A pod an owner creates, as the API server admits it: the globalDefault class if it
        names none (`with_default_class`), then refused if a ResourceQuota of its namespace
        has no room (`admitted`: the owner's retries are not modelled)."""
        pod = with_default_class(self.priority_classes, pod)
        if admitted(self.quotas, self.workloads, pod):
            self.workloads.append(pod)

    def running_on(self, node: str) -> list[Workload]:
        return [w for w in self.workloads if w.phase == "Running" and w.node == node]

    def leave_cards(self, w: Workload, now: datetime) -> None:
        """Whole cards `w` held are idle from now on (unless they were idle already)."""
        if w.node not in self.nodes:
            return
        gpus = {g.index: g for g in self.nodes[w.node].gpus}
        for a in w.allocations:
            g = gpus.get(a.gpu)
            if g is None or a.mig_start is not None or a.slices or g.mode != "whole":
                continue
            idle = g.with_sample(0.0, now)
            self.update_gpu(
                w.node,
                a.gpu,
                utilization=0.0,
                idle_since=idle.idle_since,
                below_since=idle.below_since,
            )


# ----------------------------------------------------------------------------- actions
def _cordon(world: _World, a: Cordon, now: datetime) -> None:
    node = world.nodes.get(a.target)
    if node is None or node.unschedulable:
        return
    world.nodes[a.target] = node.model_copy(
        update={
            "unschedulable": True,
            "annotations": {**node.annotations, CORDONED_FOR_ANN: "repartition"},
        }
    )


def _uncordon(world: _World, a: Uncordon, now: datetime) -> None:
    node = world.nodes.get(a.target)
    if node is None or not node.unschedulable or CORDONED_FOR_ANN not in node.annotations:
        return
    annotations = {k: v for k, v in node.annotations.items() if k != CORDONED_FOR_ANN}
    world.nodes[a.target] = node.model_copy(
        update={"unschedulable": False, "annotations": annotations}
    )


def _label(world: _World, a: LabelNode, now: datetime) -> None:
    node = world.nodes.get(a.target)
    if node is not None:
        labels = {**node.labels, **a.labels}
        world.nodes[a.target] = node.model_copy(
            update={"labels": {k: v for k, v in labels.items() if v is not None}}
        )


def _checkpoint(world: _World, a: Checkpoint, now: datetime) -> None:
    # apply/handlers/workloads.py `checkpoint` writes only `checkpoint-requested-at`; the workload
    # writes `last-checkpoint` (and `checkpoint-done`) when it has saved, and one that is not
    # checkpointable never does: its last checkpoint stays what it was
    i = world.workload_at(a.target)
    if (
        i is not None
        and world.workloads[i].phase == "Running"
        and world.workloads[i].checkpointable
    ):
        world.workloads[i] = world.workloads[i].model_copy(update={"last_checkpoint_at": now})


def recreated(desired: DesiredState, w: Workload, node: Node | None, now: datetime) -> Workload:
    """The pod `w`'s owner creates after `w` was evicted: Pending, in the pool `w` ran in."""
    pool = (node_pool(desired, node) if node is not None else None) or w.pool
    return w.model_copy(
        update={
            "phase": "Pending",
            "node": None,
            "allocations": [],
            "created_at": now,
            "started_at": None,
            "pool": pool,
            # the admission policy gates the new pod as it gated the old one
            "admission": "scheduler" if w.admission == "scheduler" else "gpupool",
            "reserved_node": None,
            "reserved_gpus": [],
            "held": "",
        }
    )


def with_default_class(classes: Iterable[PriorityClassObject], w: Workload) -> Workload:
    """A pod as the API server creates it: without a priorityClassName it gets the
    globalDefault class, if one exists (Priority admission, on create only: kubernetes
    plugin/pkg/admission/priority/admission.go); otherwise it keeps none (priority 0)."""
    if w.priority_class:
        return w
    default = next((c.name for c in classes if c.global_default), None)
    return w.model_copy(update={"priority_class": default}) if default else w


def admitted(quotas: Iterable[QuotaObject], workloads: Iterable[Workload], w: Workload) -> bool:
    """ResourceQuota admission of a new pod `w`: every quota of its namespace has room for it
    beside the namespace's other pods (Pending and Running both count)."""
    mine = [q for q in quotas if q.namespace == w.namespace]
    if not mine:
        return True
    used: dict[str, int] = {}
    for other in workloads:
        if other.namespace == w.namespace and other.key != w.key:
            for k, v in quota_use(other.request).items():
                used[k] = used.get(k, 0) + v
    for q in mine:
        for k, v in quota_use(w.request).items():
            hard = q.hard.get(k)
            if hard is not None and hard.isdigit() and used.get(k, 0) + v > int(hard):
                return False
    return True


def _suspend(world: _World, a: Eviction, w: Workload, now: datetime) -> None:
    """`w`'s Job is suspended: the Job controller deletes its pods (this one and any pending
    one; the running others have their own action) and creates none until resumed."""
    key = f"{w.namespace}/{a.suspend_job}"
    mine = [x for x in world.workloads if x.owner_kind == "Job" and x.owner_name == a.suspend_job]
    if not any(j.key == key for j in world.suspended):
        world.suspended.append(
            SuspendedJob(
                namespace=w.namespace,
                name=a.suspend_job or "",
                parallelism=w.gang_size or len(mine) or 1,
                request=w.request,
                priority_class=w.priority_class,
                pool=recreated(world.desired, w, world.nodes.get(w.node or ""), now).pool,
                suspended_at=now,
            )
        )
    gone = {w.key} | {x.key for x in mine if x.phase == "Pending" and x.namespace == w.namespace}
    world.workloads = [x for x in world.workloads if x.key not in gone]


def _evict(world: _World, a: Eviction, now: datetime) -> None:
    i = world.workload_at(a.target)
    if i is None or world.workloads[i].phase != "Running":
        return  # gone, or already evicted: the handler reports "pod is gone"
    w = world.workloads[i]
    world.leave_cards(w, now)
    if a.suspend_job:
        _suspend(world, a, w, now)
        world.recent.append(now)  # the budget bookkeeping the planner reads
        return
    again = with_default_class(
        world.priority_classes, recreated(world.desired, w, world.nodes.get(w.node or ""), now)
    )
    if (
        isinstance(a, Move)
        and a.to_node
        and w.owner_kind == "Job"
        and again.admission != "scheduler"
    ):
        # the handler reserves the Job's next pod on the move's target
        again = again.model_copy(
            update={"reserved_node": a.to_node, "reserved_gpus": list(a.to_gpus)}
        )
    if w.owner_kind and admitted(world.quotas, world.workloads, again):
        world.workloads[i] = again
    else:
        del world.workloads[i]
    world.recent.append(now)  # the budget bookkeeping the planner reads


def _partition(g: Gpu) -> Partition:
    if g.mig_enabled:
        return ("mig", tuple(sorted(i.profile for i in g.mig_instances)))
    if g.shared_slices:
        return ("shared", g.shared_slices)
    return ("whole",)


def _targets(a: Repartition, node: Node) -> dict[int, Partition]:
    """Card index -> the partitioning the action gives it (cards it does not change: absent).

    As the hardware and the device plugin do it, whatever the plan believed: the plugin's
    config applies to every card of the node not in MIG mode (it ignores a `devices` list:
    NVIDIA/k8s-device-plugin api/config/v1/replicas.go), so SetSharing reshapes all of them,
    and a card MigReconfigure takes out of MIG comes back as the node's other plain cards are
    (shared with their count, or whole)."""
    out: dict[int, Partition] = {}
    if isinstance(a, MigReconfigure):
        plain = [g.shared_slices or 0 for g in node.gpus if not g.mig_enabled]
        node_slices = max(plain, default=0)
        for c in a.layout:
            if c.profiles:
                out[c.gpu] = ("mig", tuple(sorted(c.profiles)))
            elif node_slices:
                out[c.gpu] = ("shared", node_slices)
            else:
                out[c.gpu] = ("whole",)
    elif isinstance(a, SetSharing):
        for g in node.gpus:
            if not g.mig_enabled:
                out[g.index] = ("shared", a.slices) if a.slices else ("whole",)
    return out


def sharing_config(strategy: str, slices: int | None) -> str:
    """The device-plugin config name the effect model puts on a node's
    `nvidia.com/device-plugin.config` label (the executor names configs by content)."""
    return f"{strategy}-x{slices}" if slices else "default"


def _mps(node: Node) -> bool:
    return node.labels.get(DEVICE_PLUGIN_CONFIG_LABEL, "").startswith("mps-")


def _repartition(world: _World, a: Repartition, now: datetime) -> None:
    node = world.nodes.get(a.target)
    if node is None or not node.unschedulable:
        return  # the handler: "node is not cordoned"
    targets = _targets(a, node)
    # MPS beside MIG: the device plugin refuses the node (NVIDIA/k8s-device-plugin
    # internal/plugin/mps.go); the handler refuses such a step before writing anything
    mps = a.strategy == "mps" and bool(a.slices) if isinstance(a, SetSharing) else _mps(node)
    if mps and any(targets.get(g.index, _partition(g))[0] == "mig" for g in node.gpus):
        return
    gpus = {g.index: g for g in node.gpus}
    changing = {i for i, t in targets.items() if i in gpus and _partition(gpus[i]) != t}
    changing |= {i for i in a.changed_gpus if i in gpus}
    held = {al.gpu for w in world.running_on(node.name) for al in w.allocations}
    if changing & held:
        return  # a card that changes still runs a pod: refused, nothing recorded
    catalog = world.desired.catalog
    new: dict[int, Gpu] = {}
    for i in sorted(changing):
        g, t = gpus[i], targets.get(i, _partition(gpus[i]))
        if t[0] == "mig":
            model = catalog.model(g.model) or catalog.model_for_product(
                node.labels.get(PRODUCT_LABEL, "")
            )
            placed = catalog.place(model, list(t[1])) if model is not None else None
            if placed is None:
                return  # mig-manager fails an unplaceable config: nothing changes
            instances = [MigInstance(profile=p, start=s) for p, s in placed]
            new[i] = g.model_copy(
                update={"mig_enabled": True, "mig_instances": instances, "shared_slices": None}
            )
        elif t[0] == "shared":
            new[i] = g.model_copy(
                update={"mig_enabled": False, "mig_instances": [], "shared_slices": t[1]}
            )
        else:
            new[i] = g.model_copy(
                update={"mig_enabled": False, "mig_instances": [], "shared_slices": None}
            )
    labels = node.labels
    if isinstance(a, SetSharing):
        labels = {**labels, DEVICE_PLUGIN_CONFIG_LABEL: sharing_config(a.strategy, a.slices)}
    world.nodes[node.name] = node.model_copy(
        update={"gpus": [new.get(g.index, g) for g in node.gpus], "labels": labels}
    )


_NUMBER = re.compile(r"-(\d+)$")


def _number(w: Workload) -> int:
    m = _NUMBER.search(w.name)
    return int(m.group(1)) if m else -1


def _scale(world: _World, a: Scale, now: datetime) -> None:
    i = world.service_at(a.target)
    if i is None or world.services[i].kind != a.workload_kind:
        return
    svc = world.services[i]
    if svc.replicas == a.to_replicas:
        return  # "already N replicas"
    if svc.replicas != a.from_replicas:
        return  # "replicas changed since the plan": skipped
    svc = svc.model_copy(update={"replicas": a.to_replicas, "last_scale_at": now})
    world.services[i] = svc
    _match_pods(world, svc, now)


def _match_pods(world: _World, svc: InferenceService, now: datetime) -> None:
    """The service's pods made to match its replicas, as its ReplicaSet/StatefulSet would."""
    pods = [w for w in world.workloads if svc.owns(w)]
    if len(pods) > svc.replicas:
        doomed = sorted(pods, key=scale_down_order)
        gone = {w.key for w in doomed[: len(pods) - svc.replicas]}
        for w in world.workloads:
            if w.key in gone and w.phase == "Running":
                world.leave_cards(w, now)
        world.workloads = [w for w in world.workloads if w.key not in gone]
    taken = {w.key for w in world.workloads}
    n = max((_number(w) for w in pods), default=-1) + 1
    for _ in range(svc.replicas - len(pods)):
        while f"{svc.namespace}/{svc.name}-{n}" in taken:
            n += 1
        pod = Workload(
            namespace=svc.namespace,
            name=f"{svc.name}-{n}",
            priority_class=svc.priority_class,
            phase="Pending",
            request=svc.replica_request,
            pool=svc.pool,
            created_at=now,
            owner_kind=svc.pod_owner_kind,
            owner_name=svc.name,
        )
        world.create_pod(pod)
        n += 1


def _quota(world: _World, a: ApplyQuota, now: datetime) -> None:
    ns, _, name = a.target.partition("/")
    q = QuotaObject(namespace=ns, name=name, hard=dict(a.hard), managed_by=MANAGED_BY)
    at = next((i for i, o in enumerate(world.quotas) if (o.namespace, o.name) == (ns, name)), None)
    if at is None:
        world.quotas.append(q)
    else:
        world.quotas[at] = q


def _priority_class(world: _World, a: ApplyPriorityClass, now: datetime) -> None:
    if a.global_default and any(
        o.global_default and o.name != a.target for o in world.priority_classes
    ):
        return  # the API server admits one globalDefault class: refused
    pc = PriorityClassObject(
        name=a.target,
        value=a.value,
        preemption_policy=a.preemption_policy,
        global_default=a.global_default,
        managed_by=MANAGED_BY,
    )
    at = next((i for i, o in enumerate(world.priority_classes) if o.name == a.target), None)
    if at is None:
        world.priority_classes.append(pc)
    else:
        world.priority_classes[at] = pc


def _prune_quota(world: _World, a: PruneQuota, now: datetime) -> None:
    ns, _, name = a.target.partition("/")
    world.quotas[:] = [
        o for o in world.quotas if (o.namespace, o.name) != (ns, name) or o.managed_by != MANAGED_BY
    ]


def _prune_priority_class(world: _World, a: PrunePriorityClass, now: datetime) -> None:
    world.priority_classes[:] = [
        o for o in world.priority_classes if o.name != a.target or o.managed_by != MANAGED_BY
    ]


def _admit(world: _World, a: Admit, now: datetime) -> None:
    """The handler: reservations on the gated pods first; then, once no pod of `after` is
    still placed, each gated pod is pinned to its node and ungated (a whole-card pod holds
    the cards meant for it until it is bound; a MIG or shared one holds nothing known)."""
    at = {p.name: p for p in a.pods}
    idx = [world.workload_at(f"{a.namespace}/{name}") for name in at]
    if any(i is None for i in idx):
        return  # a pod of the gang is gone: skipped
    pods = [world.workloads[i] for i in idx if i is not None]
    if any(w.phase != "Pending" or w.admission not in ("gpupool", "admitted") for w in pods):
        return
    for i in idx:
        w = world.workloads[i]  # type: ignore[index]
        if w.admission == "gpupool":
            pa = at[w.name]
            world.workloads[i] = w.model_copy(  # type: ignore[index]
                update={"reserved_node": pa.node, "reserved_gpus": list(pa.gpus)}
            )
    if any((j := world.workload_at(k)) is not None and world.workloads[j].placed for k in a.after):
        return  # waits for the pods stopped for these cards to be gone
    for i in idx:
        w = world.workloads[i]  # type: ignore[index]
        if w.admission != "gpupool":
            continue
        pa = at[w.name]
        world.workloads[i] = w.model_copy(  # type: ignore[index]
            update={
                "admission": "admitted",
                "node": pa.node,
                "allocations": [Allocation(gpu=g) for g in pa.gpus] if w.request.gpus else [],
            }
        )


def _resume(world: _World, a: Resume, now: datetime) -> None:
    """The Job runs again: its pods are created, gated (as the admission policy gates them)."""
    j = next((j for j in world.suspended if j.key == a.target), None)
    if j is None:
        return
    world.suspended = [x for x in world.suspended if x.key != a.target]
    for i in range(j.parallelism):
        pod = Workload(
            namespace=j.namespace,
            name=f"{j.name}-r{len(world.recent)}-{i}",
            priority_class=j.priority_class,
            phase="Pending",
            request=j.request,
            pool=j.pool,
            created_at=now,
            owner_kind="Job",
            owner_name=j.name,
            gang_size=j.parallelism,
        )
        world.create_pod(pod)


def _scale_envelope(world: _World, a: SetScaleEnvelope, now: datetime) -> None:
    """The autoscaler's new min/max (skipped, as the handler skips, when it is gone, scales
    another workload or changed since the plan); then the autoscaler brings the workload's
    replicas inside the new bounds. That is what the HPA controller does first, metrics or
    none (kubernetes v1.37.2 pkg/controller/podautoscaler/horizontal.go, reconcileAutoscaler:
    above Spec.MaxReplicas or below minReplicas it rescales without computing metrics), and a
    workload at 0 replicas is left alone (scaling is disabled there). Within the bounds the
    autoscaler's own metrics decide; they are not modelled: replicas stay."""
    ns, name = a.target.split("/", 1)
    for i, svc in enumerate(world.services):
        if (svc.namespace, svc.kind, svc.name) != (ns, a.workload_kind, a.workload):
            continue
        j = next(
            (
                j
                for j, x in enumerate(svc.autoscalers)
                if (x.kind, x.name) == (a.autoscaler_kind, name) and not x.owner
            ),
            None,
        )
        if j is None:
            return
        cur = svc.autoscalers[j]
        if (cur.min_replicas, cur.max_replicas) not in (
            (a.from_min, a.from_max),
            (a.to_min, a.to_max),
        ):
            return  # changed since the plan: skipped
        scalers = list(svc.autoscalers)
        scalers[j] = cur.model_copy(
            update={"min_replicas": a.to_min, "max_replicas": a.to_max, "last_change_at": now}
        )
        replicas = svc.replicas
        if replicas > 0:
            replicas = min(max(replicas, a.to_min), a.to_max)
        svc = svc.model_copy(update={"autoscalers": scalers, "replicas": replicas})
        world.services[i] = svc
        _match_pods(world, svc, now)
        return


def _hold(world: _World, a: Hold, now: datetime) -> None:
    i = world.workload_at(a.target)
    if i is not None and world.workloads[i].admission == "gpupool":
        world.workloads[i] = world.workloads[i].model_copy(update={"held": a.message})


def _kueue_object(world: _World, a: ApplyKueueObject, now: datetime) -> None:
    """Kueue's objects as the API server would store them (the spec as sent)."""
    if world.kueue is None:
        return
    key = (a.object_kind, a.namespace, a.name)
    obj = KueueObject(
        kind=a.object_kind, namespace=a.namespace, name=a.name, spec=a.spec, managed_by=MANAGED_BY
    )
    at = next((i for i, o in enumerate(world.kueue) if (o.kind, o.namespace, o.name) == key), None)
    if at is None:
        world.kueue.append(obj)
    elif world.kueue[at].managed_by == MANAGED_BY:
        world.kueue[at] = obj


def _prune_kueue_object(world: _World, a: PruneKueueObject, now: datetime) -> None:
    if world.kueue is None:
        return
    key = (a.object_kind, a.namespace, a.name)
    world.kueue[:] = [
        o for o in world.kueue if (o.kind, o.namespace, o.name) != key or o.managed_by != MANAGED_BY
    ]


EFFECTS: dict[str, Callable] = {
    "cordon": _cordon,
    "uncordon": _uncordon,
    "label-node": _label,
    "checkpoint": _checkpoint,
    "preempt": _evict,
    "reclaim": _evict,
    "move": _evict,
    "mig-reconfigure": _repartition,
    "set-sharing": _repartition,
    "scale": _scale,
    "scale-envelope": _scale_envelope,
    "admit": _admit,
    "resume": _resume,
    "hold": _hold,
    "quota": _quota,
    "priority-class": _priority_class,
    "prune-quota": _prune_quota,
    "prune-priority-class": _prune_priority_class,
    "kueue-object": _kueue_object,
    "prune-kueue-object": _prune_kueue_object,
}


def apply_plan(
    desired: DesiredState, observed: ObservedState, plan: Plan, *, now: datetime
) -> ObservedState:
    """The snapshot after every action of `plan` took effect, in plan order (see the module
    docstring for what each kind does). Pending pods stay pending: `schedule` binds them."""
    world = _World.of(desired, observed)
    for a in plan.actions:
        EFFECTS[a.kind](world, a, now)
    return world.state()


# ----------------------------------------------------------------------------- scheduler
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
    values = {c.name: c.value for c in desired.priority.spec.classes} if desired.priority else {}
    pending = sorted(
        (
            w
            for w in observed.workloads
            if w.phase == "Pending"
            and w.request.kind != "none"
            and w.admission in ("scheduler", "admitted")
        ),
        key=lambda w: (-values.get(w.priority_class or "", 0), _aware(w.created_at), w.key),
    )
    if not pending:
        return observed
    running = [w for w in observed.workloads if w.phase == "Running"]
    frees: dict[str, _Free] = {}
    for node in sorted(observed.nodes, key=lambda n: n.name):
        if node.ready and not node.unschedulable:
            frees[node.name] = _free(node, [w for w in running if w.node == node.name])
    nodes = {n.name: n for n in observed.nodes}
    bound: dict[str, Workload] = {}
    busy: set[tuple[str, int]] = set()
    for w in pending:
        eligible = [
            f
            for f in frees.values()
            if (w.pool is None or f.node.labels.get(POOL_LABEL) == w.pool)
            and (w.admission != "admitted" or f.node.name == w.node)  # its node affinity
            and _tolerated(f.node, w, extended_resource_toleration)
        ]
        r = w.request
        if r.kind == "whole":
            got = _bind_whole(eligible, r.gpus)
        elif r.kind == "mig":
            got = _bind_mig(eligible, dict(r.mig))
        else:
            # under MPS the plugin fails a request for more than one replica
            # (failRequestsGreaterThanOne, api/config/v1/config.go): the pod never runs there
            fits = [f for f in eligible if r.shared_slices == 1 or not _mps(f.node)]
            got = _bind_shared(fits, r.shared_slices)
        if got is None:
            continue
        f, allocations = got
        if r.kind == "whole":
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
    new_nodes = []
    for node in observed.nodes:
        if any(n == node.name for n, _ in busy):
            gpus = [
                g.with_sample(BUSY_UTILIZATION, now) if (node.name, g.index) in busy else g
                for g in node.gpus
            ]
            node = nodes[node.name].model_copy(update={"gpus": gpus})
        new_nodes.append(node)
    return observed.model_copy(
        update={
            "nodes": new_nodes,
            "workloads": [bound.get(w.key, w) for w in observed.workloads],
        }
    )


def step(
    desired: DesiredState,
    observed: ObservedState,
    plan: Plan,
    *,
    now: datetime,
    period: timedelta,
) -> ObservedState:
    """One controller cycle: the plan takes effect, pending pods are scheduled, and the next
    snapshot is taken `period` later."""
    after = schedule(desired, apply_plan(desired, observed, plan, now=now), now=now)
    return after.model_copy(update={"observed_at": observed.observed_at + period})


# ----------------------------------------------------------------------------- completions
def finish(
    desired: DesiredState, observed: ObservedState, keys: Iterable[str], *, now: datetime
) -> ObservedState:
    """Pods that ran to completion are gone (a finished Job's pod leaves the snapshot), and
    the whole cards they held are idle from `now` (the telemetry `leave_cards` keeps).
    Used by the digital twin (`reconciler.sim.twin`), which knows when a job's work is done."""
    gone = set(keys)
    if not gone:
        return observed
    world = _World.of(desired, observed)
    for w in world.workloads:
        if w.key in gone and w.phase == "Running":
            world.leave_cards(w, now)
    world.workloads = [w for w in world.workloads if w.key not in gone]
    return world.state()
