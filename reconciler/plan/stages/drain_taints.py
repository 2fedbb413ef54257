"""Drains by device taint on DRA (issue 32 item 4): before a card of a DRA pool changes layout
(static MIG: mig-manager through the backend's MigReconfigure), gpupool writes a DeviceTaintRule
(resource.k8s.io/v1) on each device NVIDIA's driver publishes for that card, with a NoSchedule
taint `gpupool.io/drain=repartition`: kube-scheduler's DRA allocator gives none of them to a
new claim while the card drains, whatever the pod tolerates of the node's cordon. The rules run
first in the plan (`taint-device` before `cordon`) and stay while the repartition is not over
on the node (gpupool's cordon is on, mig-manager has not finished, or the driver has not
republished the node's slices as the node agent reports its cards); then they are pruned. A
rule gpupool made on a node with none of that is stale and pruned too.

resource.k8s.io/v1 DeviceTaintRule (Kubernetes v1.37.2 serves it in v1 only; v1beta2 and
v1alpha3 answer 404): `spec.deviceSelector` has `driver`, `pool` and `device` (a `deviceClassName`
or CEL `selectors` there is dropped by the server), `spec.taint` a key, value and effect
(`NoSchedule` | `NoExecute`; the server stamps `timeAdded`)."""

from __future__ import annotations

from reconciler import conventions as C
from reconciler.observe.model import Node
from reconciler.observe.model_dra import DeviceTaintRuleObject, DraDevice, DraState
from reconciler.plan.actions import PruneDraObject, TaintDevice
from reconciler.plan.objects.dra_objects import _published, _reported
from reconciler.plan.objects.wanted import foreign
from reconciler.plan.run import Run
from reconciler.plan.stages.repartitions import unresolved

KIND = "DeviceTaintRule"
DRAIN_VALUE = "repartition"


def rule_name(node: str, device: str) -> str:
    return f"gpupool-drain-{node}-{device}"


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


def _spec(pool: str, device: str) -> dict:
    return {
        "deviceSelector": {"driver": C.DRA_DRIVER, "pool": pool, "device": device},
        "taint": {"key": C.DRA_DRAIN_TAINT, "value": DRAIN_VALUE, "effect": "NoSchedule"},
    }


def _same(r: DeviceTaintRuleObject, pool: str, device: str) -> bool:
    t = r.taint
    return (r.driver, r.pool, r.device, t.key, t.value, t.effect) == (
        C.DRA_DRIVER,
        pool,
        device,
        C.DRA_DRAIN_TAINT,
        DRAIN_VALUE,
        "NoSchedule",
    )


def _driver_pool(dra: DraState, node: str) -> str:
    """The driver's pool for `node` (NVIDIA's driver names it after the node)."""
    return next(
        (s.pool for s in dra.slices if s.driver == C.DRA_DRIVER and (s.node or s.pool) == node),
        node,
    )


def drain_taints(run: Run) -> None:
    """Step 10, after the repartitions: a taint rule on every device of every DRA card the plan
    changes (created where missing or different), and gpupool's drain rules pruned on nodes
    whose repartition is over."""
    dra = run.observed.dra
    if dra is None:
        return
    nodes = {n.name: n for n in run.observed.nodes}
    live = {r.name: r for r in dra.taint_rules}
    keep: set[str] = set()
    for pv in run.cluster.pools.values():
        if pv.pool.spec.backend != "dra":
            continue
        for node, slots in sorted(pv.by_node().items()):
            pool = _driver_pool(dra, node)
            for g in sorted((g for g in slots if g.changes), key=lambda g: g.index):
                for d in card_devices(dra.devices(node), nodes.get(node), g.index):
                    name = rule_name(node, d.name)
                    keep.add(name)
                    _want(run, live.get(name), name, pv.name, node, pool, d.name, g.index)
    for name, r in sorted(live.items()):
        mine = r.managed_by == C.MANAGED_BY and r.taint.key == C.DRA_DRAIN_TAINT
        if name in keep or not mine or _draining(run, dra, nodes.get(r.pool)):
            continue
        run.add(
            PruneDraObject(
                id=f"prune-dra:{KIND}:{name}",
                target=name,
                reason=f"prune {KIND} {name}: the repartition it drained {r.device} on "
                f"{r.pool} for is over (gpupool made it: {C.MANAGED_BY_LABEL}={C.MANAGED_BY})",
                object_kind=KIND,
                name=name,
            )
        )


def _want(
    run: Run,
    cur: DeviceTaintRuleObject | None,
    name: str,
    pool_name: str,
    node: str,
    pool: str,
    device: str,
    index: int,
) -> None:
    if cur is not None and cur.managed_by != C.MANAGED_BY:
        foreign(run, KIND, name, cur.managed_by, "gpupool's drain of a card")
        return
    if cur is not None and _same(cur, pool, device):
        return
    run.add(
        TaintDevice(
            id=f"taint-device:{node}/{device}",
            target=f"{node}/{device}",
            pool=pool_name,
            reason=f"{'taint' if cur is None else 'fix the taint of'} {device} (GPU {index} of "
            f"{node}) {C.DRA_DRAIN_TAINT}={DRAIN_VALUE}:NoSchedule: the DRA allocator gives it "
            "to no new claim while the card drains for its repartition",
            name=name,
            verb="create" if cur is None else "update",
            labels={C.MANAGED_BY_LABEL: C.MANAGED_BY, C.POOL_LABEL: pool_name},
            spec=_spec(pool, device),
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
    return bool(devices) and _published(devices) != _reported(node)
