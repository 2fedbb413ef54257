"""What each kind of plan action does to a snapshot: the effect model's `apply_plan`.

`apply_plan` carries out a plan's actions on an `ObservedState` the way the executor's
handlers (`reconciler/apply/handlers/`) and the components behind them would, assuming every
wait ends within the cycle (checkpoint grace periods, mig-manager, the device plugin). The
repartitions (MigReconfigure, SetSharing) are in `reconciler.sim.partition`; the working
copy they all change, and the admission of the pods owners create, in `reconciler.sim.world`.
See `reconciler.sim.effects` for the model as a whole.

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
  applies them (`_targets` in `reconciler.sim.partition`: sharing is per node); only on a
  cordoned node, and only when no card that changes has a running holder. A repartition
  under a running pod would break it (mig-manager and the device plugin do not wait), so the
  effect model refuses it and records nothing; the multi-cycle invariants catch a plan that
  asks for it.
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
  holding the cards meant for it) for `schedule` to bind there, and nowhere else. Those
  cards are a hint: `schedule` binds the ones the device plugin prefers, which may differ.
* Hold: the pod's `held` message. Pods an owner recreates (eviction, scale-up) come back
  gated (`admission: gpupool`), as the admission policy gates them, unless the evicted pod
  was kube-scheduler's own (`scheduler`).
* ApplyQuota / ApplyPriorityClass: the observed objects become what the action writes (a
  second globalDefault class is refused, as the API server does).
* PruneQuota / PrunePriorityClass: the object is gone, if it still carries gpupool's label
* ApplyKueueObject / PruneKueueObject: the Kueue object is stored as sent / gone (ours only)
* ApplyDraObject / PruneDraObject / TaintDevice: the DeviceClass, ResourceClaimTemplate or
  DeviceTaintRule is stored as sent / gone (ours only)
  (the handlers delete nothing else).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from reconciler.conventions import CORDONED_FOR_ANN, DRA_PROFILE_ANN, MANAGED_BY, POOL_LABEL
from reconciler.observe.model import (
    Allocation,
    InferenceService,
    KueueObject,
    Node,
    ObservedState,
    PriorityClassObject,
    QuotaObject,
    SuspendedJob,
    Workload,
    scale_down_order,
)
from reconciler.observe.model_dra import (
    ClaimTemplateObject,
    DeviceClassObject,
    DeviceTaint,
    DeviceTaintRuleObject,
)
from reconciler.plan.actions import (
    Admit,
    ApplyDraObject,
    ApplyKueueObject,
    ApplyPriorityClass,
    ApplyQuota,
    Checkpoint,
    Cordon,
    Eviction,
    Hold,
    LabelNode,
    Move,
    PartitionChange,
    PruneDraObject,
    PruneKueueObject,
    PrunePriorityClass,
    PruneQuota,
    Resume,
    Scale,
    SetScaleEnvelope,
    TaintDevice,
    Uncordon,
)
from reconciler.plan.cluster import node_pool_name as node_pool
from reconciler.plan.model import Plan
from reconciler.policy.state import DesiredState
from reconciler.sim.partition import repartition
from reconciler.sim.world import World, admitted, with_default_class


def _cordon(world: World, a: Cordon, now: datetime) -> None:
    node = world.nodes.get(a.target)
    if node is None or node.unschedulable:
        return
    world.nodes[a.target] = node.model_copy(
        update={
            "unschedulable": True,
            "annotations": {**node.annotations, CORDONED_FOR_ANN: "repartition"},
        }
    )


def _uncordon(world: World, a: Uncordon, now: datetime) -> None:
    node = world.nodes.get(a.target)
    if node is None or not node.unschedulable or CORDONED_FOR_ANN not in node.annotations:
        return
    annotations = {k: v for k, v in node.annotations.items() if k != CORDONED_FOR_ANN}
    world.nodes[a.target] = node.model_copy(
        update={"unschedulable": False, "annotations": annotations}
    )


def _label(world: World, a: LabelNode, now: datetime) -> None:
    node = world.nodes.get(a.target)
    if node is not None:
        labels = {**node.labels, **a.labels}
        world.nodes[a.target] = node.model_copy(
            update={"labels": {k: v for k, v in labels.items() if v is not None}}
        )


def _checkpoint(world: World, a: Checkpoint, now: datetime) -> None:
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


def _suspend(world: World, a: Eviction, w: Workload, now: datetime) -> None:
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


def _evict(world: World, a: Eviction, now: datetime) -> None:
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


_NUMBER = re.compile(r"-(\d+)$")


def _number(w: Workload) -> int:
    m = _NUMBER.search(w.name)
    return int(m.group(1)) if m else -1


def _scale(world: World, a: Scale, now: datetime) -> None:
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


def _match_pods(world: World, svc: InferenceService, now: datetime) -> None:
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


def _quota(world: World, a: ApplyQuota, now: datetime) -> None:
    ns, _, name = a.target.partition("/")
    q = QuotaObject(namespace=ns, name=name, hard=dict(a.hard), managed_by=MANAGED_BY)
    at = next((i for i, o in enumerate(world.quotas) if (o.namespace, o.name) == (ns, name)), None)
    if at is None:
        world.quotas.append(q)
    else:
        world.quotas[at] = q


def _priority_class(world: World, a: ApplyPriorityClass, now: datetime) -> None:
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


def _prune_quota(world: World, a: PruneQuota, now: datetime) -> None:
    ns, _, name = a.target.partition("/")
    world.quotas[:] = [
        o for o in world.quotas if (o.namespace, o.name) != (ns, name) or o.managed_by != MANAGED_BY
    ]


def _prune_priority_class(world: World, a: PrunePriorityClass, now: datetime) -> None:
    world.priority_classes[:] = [
        o for o in world.priority_classes if o.name != a.target or o.managed_by != MANAGED_BY
    ]


def _admit(world: World, a: Admit, now: datetime) -> None:
    """The handler: reservations on the gated pods first; then, once no pod of `after` is
    still placed, each gated pod is pinned to its node and ungated (a whole-card pod holds
    the cards meant for it until it is bound, where the device plugin picks its own:
    `reconciler.sim.scheduler.preferred_allocation`; a MIG or shared one holds nothing
    known)."""
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


def _resume(world: World, a: Resume, now: datetime) -> None:
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


def _scale_envelope(world: World, a: SetScaleEnvelope, now: datetime) -> None:
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


def _hold(world: World, a: Hold, now: datetime) -> None:
    i = world.workload_at(a.target)
    if i is not None and world.workloads[i].admission == "gpupool":
        world.workloads[i] = world.workloads[i].model_copy(update={"held": a.message})


def _kueue_object(world: World, a: ApplyKueueObject, now: datetime) -> None:
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


def _prune_kueue_object(world: World, a: PruneKueueObject, now: datetime) -> None:
    if world.kueue is None:
        return
    key = (a.object_kind, a.namespace, a.name)
    world.kueue[:] = [
        o for o in world.kueue if (o.kind, o.namespace, o.name) != key or o.managed_by != MANAGED_BY
    ]


def _dra_object(world: World, a: ApplyDraObject, now: datetime) -> None:
    """A DRA pool's DeviceClass or ResourceClaimTemplate as the API server would store it."""
    dra = world.dra
    if dra is None:
        return
    if a.object_kind == "DeviceClass":
        obj = DeviceClassObject(
            name=a.name,
            selectors=[s["cel"]["expression"] for s in a.spec.get("selectors", [])],
            managed_by=MANAGED_BY,
            pool=a.labels.get(POOL_LABEL, ""),
            profile=a.annotations.get(DRA_PROFILE_ANN, ""),
        )
        kept = [c for c in dra.device_classes if c.name != a.name or c.managed_by != MANAGED_BY]
        if any(c.name == a.name for c in kept):
            return  # someone else's
        world.dra = dra.model_copy(update={"device_classes": [*kept, obj]})
        return
    req = a.spec["spec"]["devices"]["requests"][0]["exactly"]
    tmpl = ClaimTemplateObject(
        namespace=a.namespace,
        name=a.name,
        devices={req["deviceClassName"]: req.get("count", 1)},
        managed_by=MANAGED_BY,
    )
    key = (a.namespace, a.name)
    kept_t = [
        t for t in dra.claim_templates if (t.namespace, t.name) != key or t.managed_by != MANAGED_BY
    ]
    if any((t.namespace, t.name) == key for t in kept_t):
        return
    world.dra = dra.model_copy(update={"claim_templates": [*kept_t, tmpl]})


def _prune_dra_object(world: World, a: PruneDraObject, now: datetime) -> None:
    dra = world.dra
    if dra is None:
        return
    if a.object_kind == "DeviceClass":
        kept = [c for c in dra.device_classes if c.name != a.name or c.managed_by != MANAGED_BY]
        world.dra = dra.model_copy(update={"device_classes": kept})
        return
    if a.object_kind == "DeviceTaintRule":
        rules = [r for r in dra.taint_rules if r.name != a.name or r.managed_by != MANAGED_BY]
        world.dra = dra.model_copy(update={"taint_rules": rules})
        return
    key = (a.namespace, a.name)
    if a.object_kind == "ResourceClaim":  # a replaced claim left behind: gone if still unheld
        claims = [
            c
            for c in dra.claims
            if (c.namespace, c.name) != key or c.allocated is not None or c.reserved_for
        ]
        world.dra = dra.model_copy(update={"claims": claims})
        return
    kept_t = [
        t for t in dra.claim_templates if (t.namespace, t.name) != key or t.managed_by != MANAGED_BY
    ]
    world.dra = dra.model_copy(update={"claim_templates": kept_t})


def _taint_device(world: World, a: TaintDevice, now: datetime) -> None:
    dra = world.dra
    if dra is None or any(r.name == a.name and r.managed_by != MANAGED_BY for r in dra.taint_rules):
        return
    sel, taint = a.spec["deviceSelector"], a.spec["taint"]
    rule = DeviceTaintRuleObject(
        name=a.name,
        driver=sel.get("driver", ""),
        pool=sel.get("pool", ""),
        device=sel.get("device", ""),
        taint=DeviceTaint(**taint),
        managed_by=MANAGED_BY,
    )
    kept = [r for r in dra.taint_rules if r.name != a.name]
    world.dra = dra.model_copy(update={"taint_rules": [*kept, rule]})


def _other_backend(world: World, a: PartitionChange, now: datetime) -> None:
    """The effect model knows the device plugin's and mig-manager's partitions only (the
    default backend, which the twin plans with); another backend's change is its own."""
    raise ValueError(
        f"{a.id}: the effect model has no model of partition backend {a.backend!r}; the twin "
        "plans with the default (device plugin) backend only"
    )


EFFECTS: dict[str, Callable] = {
    "cordon": _cordon,
    "uncordon": _uncordon,
    "label-node": _label,
    "checkpoint": _checkpoint,
    "preempt": _evict,
    "reclaim": _evict,
    "move": _evict,
    "mig-reconfigure": repartition,
    "set-sharing": repartition,
    "partition-change": _other_backend,
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
    "dra-object": _dra_object,
    "prune-dra-object": _prune_dra_object,
    "taint-device": _taint_device,
}


def apply_plan(
    desired: DesiredState, observed: ObservedState, plan: Plan, *, now: datetime
) -> ObservedState:
    """The snapshot after every action of `plan` took effect, in plan order (see the module
    docstring for what each kind does). Pending pods stay pending: `schedule` binds them."""
    world = World.of(desired, observed)
    for a in plan.actions:
        EFFECTS[a.kind](world, a, now)
    return world.state()
