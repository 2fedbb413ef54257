"""Exact admission on DRA, the pure half: the devices the plan chose for a pod of a DRA pool,
as the `uuid` attributes NVIDIA's driver publishes on them (a CEL selector cannot see a device's
name, but it sees its attributes: docs/architecture.md, "DRA"). The Admit action carries them
(`PodAdmission.devices`); apply/handlers/dra_admit.py writes the pod's claims with a selector on
them before it releases the gate, so kube-scheduler's allocator can pick only these.

A planned card is the driver's device whose `uuid` is the node agent's uuid of that card, else
the device named `gpu-<index>` (the driver names a card by its minor); a planned MIG instance
(profile, placement start) on a card is the `type: mig` device of that profile whose
`parentUUID` is the card's (else whose name starts `gpu-<index>-`) and whose name ends with the
placement start (cmd/gpu-kubelet-plugin/deviceinfo.go; tests/cluster/dra_slices.py).

Under the driver's `DynamicMIG` a MIG partition has no `uuid` until it is prepared (an abstract
partition: cmd/gpu-kubelet-plugin/mig.go v0.4.1 `CommonAttributesMig` has `parentUUID` and
`profile`, and neither attributes nor capacities say its placement: partitions.go
`MigSpec.Capacities`), and a CEL selector cannot see a device's name, so no selector can pick
one placement. The plan names the device itself, `<driver>/<pool>/<device>` (a
`DeviceResult.ref`, e.g. `gpu.nvidia.com/node-1/gpu-0-mig-4g40gb-5-0`: the placement the plan
chose), and the executor writes it as the claim's allocation (apply/handlers/dra_admit.py), so
the allocation is the plan's placement, not the first free one
(tests/integration/test_dra_dynamic_placement.py)."""

from __future__ import annotations

from collections.abc import Iterable

from reconciler import conventions as C
from reconciler.observe.model import Node
from reconciler.observe.model_dra import DraDevice, DraState
from reconciler.plan.cluster import GpuSlot


def _uuid(d: DraDevice | None) -> str:
    v = d.attr("uuid") if d is not None else None
    return v if isinstance(v, str) and v else ""


def _card(devices: list[DraDevice], card_uuid: str, index: int) -> DraDevice | None:
    cards = [d for d in devices if d.type == "gpu"]
    by_uuid = [d for d in cards if card_uuid and _uuid(d) == card_uuid]
    by_name = [d for d in cards if d.name == f"gpu-{index}"]
    return (by_uuid or by_name or [None])[0]


def _instance(
    devices: list[DraDevice], card_uuid: str, index: int, profile: str, start: int
) -> DraDevice | None:
    for d in devices:
        if d.type != "mig" or d.attr("profile") != profile:
            continue
        parent = d.attr("parentUUID")
        on_card = (card_uuid and parent == card_uuid) or d.name.startswith(f"gpu-{index}-")
        if on_card and d.name.rsplit("-", 1)[-1] == str(start):
            return d
    return None


def planned_devices(
    dra: DraState | None,
    node: Node | None,
    cards: list[GpuSlot],
    holder: str,
    *,
    refs: bool = False,
) -> tuple[str, ...] | None:
    """The uuids of what `holder` was placed on (`cards`, all on one node): its whole cards,
    or the MIG instances it holds on them (`refs`: each as `<driver>/<pool>/<device>`, what an
    allocation names). None when a planned device is not published (the
    driver has not republished the node's slices yet): then the pod is not admitted (its gang
    is held: `dra-devices-unpublished`)."""
    if dra is None or node is None or not cards:
        return None
    devices = dra.devices(node.name)
    pool = dra.driver_pools().get(node.name, node.name)
    uuids = {g.index: g.uuid for g in node.gpus}
    out: list[str] = []
    for g in cards:
        mine = sorted(i for i, h in g.instance_holders.items() if h == holder)
        found = (
            [_instance(devices, uuids.get(g.index, ""), g.index, p, s) for p, s in mine]
            if mine
            else [_card(devices, uuids.get(g.index, ""), g.index)]
        )
        names = [_name(d, pool, refs) for d in found]
        if "" in names:
            return None
        out += names
    return tuple(out)


def _name(d: DraDevice | None, pool: str, refs: bool = False) -> str:
    """How a claim names `d`: its uuid, or a dynamic partition's ref (driver/pool/device);
    with `refs` every device by its ref."""
    if d is not None and (refs or not _uuid(d) and d.type == "mig" and d.consumes_counters):
        return dynamic_ref(pool, d.name)
    return _uuid(d)


def guard_in_place(dra: DraState | None, node: str) -> bool:
    """Whether gpupool's guard of `node` is there (its DeviceTaintRule, as observed): every
    device of NVIDIA's driver on the node tainted `gpupool.io/guarded` NoSchedule, so no claim
    but one gpupool writes gets one (plan/stages/drain_taints.py `_guards`)."""
    return dra is not None and any(
        r.managed_by == C.MANAGED_BY
        and r.taint.key == C.DRA_GUARD_TAINT
        and r.taint.effect == "NoSchedule"
        and r.driver == C.DRA_DRIVER
        and r.pool == node
        and not r.device
        for r in dra.taint_rules
    )


def dynamic_ref(pool: str, device: str) -> str:
    """How the plan names a DynamicMIG partition: NVIDIA's driver, its pool (the node) and the
    device (`DeviceResult.ref`)."""
    return f"{C.DRA_DRIVER}/{pool}/{device}"


def claims_held_for(dra: DraState | None, pods: Iterable[str]) -> tuple[str, ...]:
    """The allocated ResourceClaims (NVIDIA's devices; keys namespace/name, sorted) reserved
    for any of `pods` (keys namespace/name): what must be deallocated, after those pods are
    gone, before the allocator gives their devices to another claim."""
    want = set(pods)
    if dra is None or not want:
        return ()
    return tuple(
        sorted(
            c.key
            for c in dra.claims
            if any(r.driver == C.DRA_DRIVER for r in c.allocated or [])
            and any(f"{c.namespace}/{p}" in want for p in c.reserved_for)
        )
    )
