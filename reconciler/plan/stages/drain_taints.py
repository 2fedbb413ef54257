"""Device taints on DRA (issue 32 item 4): DeviceTaintRules (resource.k8s.io/v1) gpupool writes,
with its managed-by label, on devices NVIDIA's driver publishes, so that kube-scheduler's DRA
allocator gives them to no claim that does not tolerate the taint:

- drains: before a card of a DRA pool changes layout (static MIG: mig-manager through the
  backend's MigReconfigure), a NoSchedule `gpupool.io/drain=repartition` on each of the card's
  devices, so nothing new is allocated there while it drains, whatever a pod tolerates of the
  node's cordon. The rules run first in the plan (`taint-device` before `cordon`) and stay while
  the repartition is not over on the node (gpupool's cordon is on, mig-manager has not
  finished, or the driver has not republished the node's slices as the node agent reports its
  cards); then they are pruned.
- reservations: the cards the plan frees for a waiting gated gang (an Admit that waits for its
  victims, then the pods' `gpupool.io/reserved`) get a NoSchedule
  `gpupool.io/reserved-for-gang=gang`, so a pod that bypasses gpupool's gate cannot take them
  while the victims terminate; the claims gpupool pins at exact admission tolerate it
  (apply/handlers/dra_admit.py), and the pins keep one gang off another's cards. Pruned once
  the gang is admitted (no pod gated on that reservation any more).
- guards (`spec.dra.guard`, on by default): a NoSchedule `gpupool.io/guarded=pinned-only` on
  every device of each node of a DRA pool whose claims gpupool pins, one rule per node (selector:
  driver and the node's pool, no device; v1.37.2's ResourceSlice tracker,
  k8s.io/dynamic-resource-allocation resourceslice/tracker `applyPatches`, then taints every
  device of every slice of that pool, DynamicMIG partitions included). The allocator
  (structured/internal/*/allocator_*.go `taintPreventsAllocation`) skips a device whose
  NoSchedule or NoExecute taint the request does not tolerate, and only the claims gpupool pins
  tolerate this key, so no claim outside gpupool's gate takes a device the plan counts on, and
  kube-scheduler cannot allocate a DynamicMIG partition at the instant gpupool writes it as a
  pinned claim's allocation. A claim allocated already is left alone: the allocator sees only
  unallocated claims, kube-scheduler's dynamicresources plugin reserves an allocated claim
  without looking at taints (so the allocation gpupool writes is reserved as before), and the
  device-taint eviction controller acts on NoExecute only. Wanted while every namespace of the
  Quotas naming the pool is gated (pods elsewhere are placed by kube-scheduler from gpupool's
  templates and would get no device) and the API server serves DeviceTaintRules; else none,
  and the finding `dra-guard-off` says why. Pruned when no longer wanted (kept while the
  snapshot does not say which namespaces are gated, or the policy has no Pool).

A rule gpupool made that is wanted by neither is stale and pruned. resource.k8s.io/v1
DeviceTaintRule (Kubernetes v1.37.2 serves it in v1 only; v1beta2 and v1alpha3 answer 404):
`spec.deviceSelector` has `driver`, `pool` and `device` (a `deviceClassName` or CEL `selectors`
there is dropped by the server), `spec.taint` a key, value and effect (`NoSchedule` |
`NoExecute`; the server stamps `timeAdded`): one rule per device."""

from __future__ import annotations

from dataclasses import dataclass

from reconciler import conventions as C
from reconciler.observe.model import Node
from reconciler.observe.model_dra import DeviceTaintRuleObject, DraDevice, DraState
from reconciler.plan.actions import Admit, PruneDraObject, TaintDevice
from reconciler.plan.objects.dra_objects import published_layout, reported_layout
from reconciler.plan.objects.wanted import foreign
from reconciler.plan.partition import partition_for
from reconciler.plan.run import Run
from reconciler.plan.stages.repartitions import unresolved

KIND = "DeviceTaintRule"
DRAIN_VALUE = "repartition"
RESERVED_VALUE = "gang"
GUARD_VALUE = "pinned-only"
KEYS = (C.DRA_DRAIN_TAINT, C.DRA_RESERVED_TAINT, C.DRA_GUARD_TAINT)


@dataclass(frozen=True)
class Wanted:
    """One rule the plan wants: on `device` of `node` (card `index`), for Pool `pool`; a guard
    names no device (every device of the node's pool) and no card (`index` -1)."""

    key: str
    value: str
    node: str
    device: str
    index: int
    pool: str
    why: str

    @property
    def name(self) -> str:
        return rule_name(self.node, self.device, self.key)


def rule_name(node: str, device: str, key: str = C.DRA_DRAIN_TAINT) -> str:
    if key == C.DRA_GUARD_TAINT:
        return f"gpupool-guard-{node}"
    what = "drain" if key == C.DRA_DRAIN_TAINT else "reserve"
    return f"gpupool-{what}-{node}-{device}"


def card_devices(devices: list[DraDevice], node: Node | None, index: int) -> list[DraDevice]:
    """The devices NVIDIA's driver publishes for card `index`: the card itself (`gpu-<minor>`,
    or its `uuid`) and its MIG devices (`parentUUID`, or a name under `gpu-<minor>-`)."""
    uuid = next((g.uuid for g in (node.gpus if node else []) if g.index == index and g.uuid), "")
    out = []
    for d in devices:
        by_uuid = bool(uuid) and uuid in (d.attr("uuid"), d.attr("parentUUID"))
        if by_uuid or d.name == f"gpu-{index}" or d.name.startswith(f"gpu-{index}-"):
            out.append(d)
    return out


def _spec(w: Wanted, pool: str) -> dict:
    device = {"device": w.device} if w.device else {}
    return {
        "deviceSelector": {"driver": C.DRA_DRIVER, "pool": pool, **device},
        "taint": {"key": w.key, "value": w.value, "effect": "NoSchedule"},
    }


def _same(r: DeviceTaintRuleObject, w: Wanted, pool: str) -> bool:
    t = r.taint
    return (r.driver, r.pool, r.device, t.key, t.value, t.effect) == (
        C.DRA_DRIVER,
        pool,
        w.device,
        w.key,
        w.value,
        "NoSchedule",
    )


def drain_taints(run: Run) -> None:
    """After the repartitions and admissions (steps 10-11): the rules of drains and
    reservations, created where missing or different; gpupool's rules no longer wanted pruned
    (a drain's only once its node's repartition is over)."""
    dra = run.observed.dra
    if dra is None:
        return
    nodes = {n.name: n for n in run.observed.nodes}
    live = {r.name: r for r in dra.taint_rules}
    wanted = [*_drains(run, dra, nodes), *_reservations(run, dra, nodes), *_guards(run, dra)]
    want = {w.name: w for w in wanted}
    pools = dra.driver_pools()
    for name, w in sorted(want.items()):
        _want(run, live.get(name), w, pools.get(w.node, w.node))
    for name, r in sorted(live.items()):
        mine = r.managed_by == C.MANAGED_BY and r.taint.key in KEYS
        if name in want or not mine:
            continue
        if r.taint.key == C.DRA_DRAIN_TAINT and _draining(run, dra, nodes.get(r.pool)):
            continue
        if r.taint.key == C.DRA_GUARD_TAINT and not _guards_known(run):
            continue
        what = {
            C.DRA_DRAIN_TAINT: f"the repartition it drained {r.device} on {r.pool} for is over",
            C.DRA_RESERVED_TAINT: f"no gated gang waits for {r.device} on {r.pool} any more",
            C.DRA_GUARD_TAINT: f"no DRA pool gpupool pins claims of guards {r.pool} any more",
        }[r.taint.key]
        run.add(
            PruneDraObject(
                id=f"prune-dra:{KIND}:{name}",
                target=name,
                reason=f"prune {KIND} {name}: {what} "
                f"(gpupool made it: {C.MANAGED_BY_LABEL}={C.MANAGED_BY})",
                object_kind=KIND,
                name=name,
            )
        )


def _drains(run: Run, dra: DraState, nodes: dict[str, Node]) -> list[Wanted]:
    out = []
    for pv in run.cluster.pools.values():
        if pv.pool.spec.backend != "dra" or not partition_for(run, pv).changes_on_node(pv):
            continue  # DynamicMIG: a partition is made at allocation, nothing drains
        for node, slots in sorted(pv.by_node().items()):
            for g in sorted((g for g in slots if g.changes), key=lambda g: g.index):
                for d in card_devices(dra.devices(node), nodes.get(node), g.index):
                    why = "while the card drains for its repartition"
                    out.append(
                        Wanted(C.DRA_DRAIN_TAINT, DRAIN_VALUE, node, d.name, g.index, pv.name, why)
                    )
    return out


def _reservations(run: Run, dra: DraState, nodes: dict[str, Node]) -> list[Wanted]:
    """The cards of gated gangs' reservations on DRA pools: those an Admit of this plan waits
    for its victims (evicted by this plan) to free, and those observed gated pods'
    `gpupool.io/reserved` name. An Admit that waits only for pods terminating already waits a
    moment in its step and, if they are not gone by then, writes the reservation itself (apply
    admission.py `_reserve`): no taint for a hand-off over in milliseconds."""
    pool_of = {
        n: pv.name
        for pv in run.cluster.pools.values()
        if pv.pool.spec.backend == "dra"
        for n in pv.nodes
    }
    held: dict[tuple[str, int], str] = {}
    going = {k for keys in run.stopping.values() for k in keys}
    for a in run.actions.values():
        if isinstance(a, Admit) and set(a.after) - going:
            for pa in a.pods:
                held.update({(pa.node, i): f"{a.namespace}/{pa.name}" for i in pa.gpus})
    for w in run.observed.workloads:
        if w.admission == "gpupool" and w.reserved_node:
            held.update({(w.reserved_node, i): w.key for i in w.reserved_gpus})
    out = []
    for (node, index), pod in sorted(held.items()):
        if node not in pool_of:
            continue
        for d in card_devices(dra.devices(node), nodes.get(node), index):
            why = f"while its victims free it for {pod}'s gang"
            out.append(
                Wanted(
                    C.DRA_RESERVED_TAINT, RESERVED_VALUE, node, d.name, index, pool_of[node], why
                )
            )
    return out


def _guards(run: Run, dra: DraState) -> list[Wanted]:
    """The guard of each node of a DRA pool with `spec.dra.guard` whose claims gpupool pins:
    every namespace of the Quotas naming the pool gated, and DeviceTaintRules served; the
    pools left unguarded are said (`dra-guard-off`), except while the gated namespaces are
    not known (a snapshot that does not say)."""
    gated = run.observed.gated_namespaces
    out = []
    for pv in sorted(run.cluster.pools.values(), key=lambda v: v.name):
        spec = pv.pool.spec
        if spec.backend != "dra" or not spec.dra.guard or gated is None:
            continue
        teams = sorted(
            {
                ns
                for q in run.desired.quotas.values()
                if any(pq.pool == pv.name for pq in q.spec.pools)
                for ns in q.spec.namespaces
            }
        )
        open_ns = [ns for ns in teams if ns not in gated]
        if open_ns or not dra.taint_rules_served:
            why = (
                f"namespace(s) {', '.join(open_ns)} of its Quotas are not gated "
                f"({C.ADMISSION_NAMESPACE_LABEL}=gated): kube-scheduler places their pods "
                "from gpupool's templates, which a guard would give no device"
                if open_ns
                else "the API server serves no DeviceTaintRule (Kubernetes' "
                "DRADeviceTaintRules gate is off)"
            )
            run.find(
                "info",
                "dra-guard-off",
                f"Pool/{pv.name}",
                f"Pool/{pv.name}'s devices are not kept for the claims gpupool pins (no "
                f"{C.DRA_GUARD_TAINT} taint): {why}; a claim outside gpupool's admission may "
                "take a device the plan counts on",
            )
            continue
        for node in sorted(pv.nodes):
            why = f"but those gpupool pins (Pool {pv.name}'s devices are the plan's)"
            out.append(Wanted(C.DRA_GUARD_TAINT, GUARD_VALUE, node, "", -1, pv.name, why))
    return out


def _guards_known(run: Run) -> bool:
    """Whether the plan knows which guards it wants (else gpupool's are left as they are)."""
    return run.observed.gated_namespaces is not None and bool(run.desired.pools)


def _want(run: Run, cur: DeviceTaintRuleObject | None, w: Wanted, pool: str) -> None:
    if cur is not None and cur.managed_by != C.MANAGED_BY:
        foreign(run, KIND, w.name, cur.managed_by, "gpupool's device taint")
        return
    if cur is not None and _same(cur, w, pool):
        return
    verb = "taint" if cur is None else "fix the taint of"
    taint = f"{w.key}={w.value}:NoSchedule"
    if w.key == C.DRA_GUARD_TAINT:
        aid, target = f"taint-device:guard:{w.node}", w.node
        reason = (
            f"{verb} every device of {w.node} {taint}: the DRA allocator gives them to no new "
            f"claim {w.why}"
        )
    else:
        prefix = "" if w.key == C.DRA_DRAIN_TAINT else "reserve:"
        aid, target = f"taint-device:{prefix}{w.node}/{w.device}", f"{w.node}/{w.device}"
        reason = (
            f"{verb} {w.device} (GPU {w.index} of {w.node}) {taint}: the DRA allocator gives "
            f"it to no new claim {w.why}"
        )
    run.add(
        TaintDevice(
            id=aid,
            target=target,
            pool=w.pool,
            reason=reason,
            name=w.name,
            verb="create" if cur is None else "update",
            labels={C.MANAGED_BY_LABEL: C.MANAGED_BY, C.POOL_LABEL: w.pool},
            spec=_spec(w, pool),
        )
    )


def _draining(run: Run, dra: DraState, node: Node | None) -> bool:
    """Whether `node`'s repartition is not over: gpupool's cordon stays this cycle, mig-manager
    has not finished gpupool's config, or the driver publishes another layout than the node
    agent reports (it has not republished yet)."""
    if node is None:
        return False
    cordoned = node.unschedulable and C.CORDONED_FOR_ANN in node.annotations
    if cordoned and f"uncordon:{node.name}" not in run.actions:
        return True
    if f"cordon:{node.name}" in run.actions or unresolved(node.labels):
        return True
    devices = dra.devices(node.name)
    return bool(devices) and published_layout(devices) != reported_layout(node)
