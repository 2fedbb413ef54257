"""Who holds which card through DRA, the pure half (no API client): what a pod asks for through
its claims, which cards its allocated claims hold, and which allocated claims hold cards for no
pod the snapshot counts (`unreleased_claims`).

`DraIndex` indexes a `DraState` once (claims, templates and pods by name, devices by node), so
that reading every pod of a cluster costs one pass over its claims, not one per pod. The
observer (`kube.py` through `kube_dra.py`) and the planner's consistency check
(`reconciler/plan/consistency.py`, `dra-claim-unreleased`) both read through it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from reconciler import conventions as C
from reconciler.observe.model import Allocation, Node, Request
from reconciler.observe.model_dra import (
    ClaimTemplateObject,
    DeviceResult,
    DraDevice,
    DraState,
    PodClaims,
    ResourceClaimObject,
)


class DraIndex:
    """A `DraState` indexed by name: built once per snapshot, read per pod."""

    def __init__(self, dra: DraState) -> None:
        self.dra = dra
        self.mine = {c.name: c for c in dra.device_classes if c.pool}
        self.claims: dict[str, ResourceClaimObject] = {c.key: c for c in dra.claims}
        self.templates: dict[str, ClaimTemplateObject] = {
            f"{t.namespace}/{t.name}": t for t in dra.claim_templates
        }
        self.pods: dict[tuple[str, str], list[PodClaims]] = {}
        for p in dra.pods:
            self.pods.setdefault((p.namespace, p.pod), []).append(p)
        self._devices: dict[str, dict[str, DraDevice]] = {}

    def request(self, namespace: str, pod: str) -> Request:
        """What a pod asks for through its claims, in the planner's terms: whole cards and MIG
        instances by profile, counted on gpupool's DeviceClasses only (a claim on anyone else's
        class is not a GPU request gpupool plans)."""
        gpus, mig = 0, {}
        for p in self.pods.get((namespace, pod), ()):
            asked = [
                self.claims.get(f"{namespace}/{n}")
                or self.templates.get(f"{namespace}/{p.made_from.get(n)}")
                for n in p.claims
            ]
            asked += [self.templates.get(f"{namespace}/{n}") for n in p.templates]
            for obj in asked:
                for cls, n in (obj.devices if obj else {}).items():
                    c = self.mine.get(cls)
                    if c is None:
                        continue
                    if c.profile:
                        mig[c.profile] = mig.get(c.profile, 0) + n
                    else:
                        gpus += n
        return Request(gpus=gpus, mig=mig)

    def pod_devices(self, namespace: str, pod: str) -> list[DeviceResult]:
        """The devices allocated to `pod`'s claims."""
        out: list[DeviceResult] = []
        for p in self.pods.get((namespace, pod), ()):
            for name in p.claims:
                c = self.claims.get(f"{namespace}/{name}")
                out.extend(c.allocated or [] if c else [])
        return out

    def devices(self, node: str) -> dict[str, DraDevice]:
        """Device name -> NVIDIA's current device on `node` (`DraState.devices`), listed once."""
        got = self._devices.get(node)
        if got is None:
            got = self._devices[node] = {d.name: d for d in self.dra.devices(node)}
        return got

    def cards(self, node: Node, results: Iterable[DeviceResult]) -> list[Allocation]:
        """The cards of `node` that allocated `results` hold (NVIDIA's devices only: a card by
        its `uuid` attribute matched to the agent's card, else by the minor in `gpu-<minor>`; a
        MIG device on its parent card at the placement start its name ends with). A device not
        published any more, or not named the way NVIDIA's driver names them, is left out: held,
        but where is unknown."""
        devices = self.devices(node.name)
        by_uuid = {g.uuid: g.index for g in node.gpus if g.uuid}
        out: list[Allocation] = []
        for r in results:
            if r.driver != C.DRA_DRIVER:
                continue
            d = devices.get(r.device)
            parts = r.device.split("-")
            if d is None or len(parts) < 2 or not parts[1].isdigit():
                continue
            if d.type == "mig":
                parent = by_uuid.get(str(d.attr("parentUUID")), int(parts[1]))
                start = int(parts[-1]) if parts[-1].isdigit() else None
                out.append(
                    Allocation(gpu=parent, mig_start=start, mig_profile=str(d.attr("profile")))
                )
            else:
                out.append(Allocation(gpu=by_uuid.get(str(d.attr("uuid")), int(parts[1]))))
        return out

    def claim_node(self, namespace: str, pod: str) -> str:
        """The node `pod`'s allocated claims are for ('' when none is allocated): where a pod
        not bound yet holds its devices (gpupool wrote a DynamicMIG partition's allocation at
        admission, or kube-scheduler allocated and has not bound it yet)."""
        for p in self.pods.get((namespace, pod), ()):
            for name in p.claims:
                c = self.claims.get(f"{namespace}/{name}")
                if c is not None and c.allocated:
                    return c.node or c.allocated[0].pool
        return ""

    def allocations(self, node: Node | None, namespace: str, pod: str) -> list[Allocation] | None:
        """The cards a pod's allocated claims hold on `node`; None when none of its claims is
        allocated a device of NVIDIA's driver."""
        if node is None:
            return None
        results = [r for r in self.pod_devices(namespace, pod) if r.driver == C.DRA_DRIVER]
        return self.cards(node, results) if results else None


class ClaimReader:
    """What a pod (a V1Pod) asks for and holds through its DRA claims, in one snapshot
    (`__call__`: its request, and the cards its allocated claims hold on its node, or for a pod
    released and not bound yet, on the node they are allocated on). Besides the pod itself,
    that reading depends only on `dra`'s claims by name, its device classes, claim templates
    and slices, and the nodes (`by_name`): what a reader of what changed
    (observe/kube_pod_delta.py) compares to know which pods to read again."""

    def __init__(self, dra: DraState, by_name: dict[str, Node]) -> None:
        self.dra, self.by_name = dra, by_name
        self.index = DraIndex(dra)

    def __call__(self, p: Any) -> tuple[Request, list[Allocation] | None]:
        ns, name = p.metadata.namespace, p.metadata.name
        released = not p.spec.node_name and not p.spec.scheduling_gates
        at = p.spec.node_name or (self.index.claim_node(ns, name) if released else "")
        return self.index.request(ns, name), self.index.allocations(self.by_name.get(at), ns, name)

    def users(self, claims: set[str]) -> set[tuple[str, str]]:
        """The pods (namespace, name) whose claims name one of `claims` (keys namespace/name)."""
        out = set()
        for (ns, pod), entries in self.index.pods.items():
            if any(f"{ns}/{n}" in claims for e in entries for n in e.claims):
                out.add((ns, pod))
        return out


@dataclass(frozen=True)
class UnreleasedClaim:
    """An allocated ResourceClaim none of whose reserving pods is a workload of the snapshot
    (the pods ended or were deleted, or `reservedFor` is empty): Kubernetes' allocator still
    counts its devices as taken until the resourceclaim controller deallocates (or deletes) the
    claim, so the cards are held though no pod holds them."""

    claim: str
    """`namespace/name`."""
    node: str
    reserved_for: tuple[str, ...]
    cards: tuple[Allocation, ...]
    """What it holds on `node`'s cards (NVIDIA's devices that map to one)."""


def unreleased_claims(
    dra: DraState | None,
    nodes: Iterable[Node],
    workloads: Iterable[str],
    placed: Iterable[str] = (),
    gated: Iterable[str] = (),
) -> list[UnreleasedClaim]:
    """Allocated claims (NVIDIA's devices) reserved for none of `workloads` (keys
    `namespace/name`) but those of `gated` (still behind gpupool's gate: `spec.dra.admission:
    allocate` reserves the claim for its pod before the gate goes, and a pod the gate still
    holds holds no card in the snapshot), with the cards of their node they hold, by claim key;
    a claim reserved for nobody that a pod of `placed` (admitted or bound) uses is that pod's,
    not unreleased. A claim whose node the snapshot lacks, or whose devices map to no card, is
    left out (nothing of gpupool's to hold). Pure; never raises."""
    if dra is None or not dra.claims:
        return []
    live = set(workloads).difference(gated)
    # most claims are reserved for a live pod: only the others are looked at further, with
    # their results on NVIDIA's devices
    left: list[tuple[ResourceClaimObject, list[DeviceResult]]] = []
    for c in dra.claims:
        if any(f"{c.namespace}/{p}" in live for p in c.reserved_for):
            continue
        results = [r for r in c.allocated or [] if r.driver == C.DRA_DRIVER]
        if results:
            left.append((c, results))
    if not left:
        return []
    released = set(placed)
    users: dict[str, set[str]] = {}  # claim key -> the pods (keys) whose claims name it
    if any(not c.reserved_for for c, _ in left):
        for p in dra.pods:
            for n in p.claims:
                users.setdefault(f"{p.namespace}/{n}", set()).add(f"{p.namespace}/{p.pod}")
    by_name = {n.name: n for n in nodes}
    index: DraIndex | None = None
    out = []
    for c, results in sorted(left, key=lambda x: x[0].key):
        if not c.reserved_for and users.get(c.key, set()) & released:
            continue  # allocated for a released pod not bound yet (gpupool's DynamicMIG write)
        node = by_name.get(c.node or results[0].pool)
        if node is None:
            continue
        index = index or DraIndex(dra)
        cards = index.cards(node, results)
        if cards:
            out.append(UnreleasedClaim(c.key, node.name, tuple(c.reserved_for), tuple(cards)))
    return out
