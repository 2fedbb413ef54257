"""The pod part of an observation made from what changed (reconciler/observe/kube_pod_delta.py,
`PodDelta`): over random event sequences (pods created, changed, bound, admitted, finished,
deleted; nodes' GpuNodeStates republished; owners, nodes, relists; with DRA, claims allocated,
released and deleted, slices republished, classes read anew), the workloads, failed
members and reports made through a `WorkloadMemo` cycle after cycle equal the ones made
afresh without any memo, after every step. Pods come as a watch cache hands them over: the
same object for a pod without a new event, a new object for one with."""

from __future__ import annotations

import copy
import random
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from reconciler import conventions as C
from reconciler.observe import kube_pod_delta
from reconciler.observe.dra_holdings import ClaimReader
from reconciler.observe.kube_common import _UNREADABLE
from reconciler.observe.kube_owners import Owners
from reconciler.observe.kube_pod_delta import identified_pods, read_pods
from reconciler.observe.kube_pods import WorkloadMemo, published_pods
from reconciler.observe.model import Gpu, Node, Workload
from reconciler.observe.model_dra import (
    ClaimTemplateObject,
    DeviceClassObject,
    DeviceResult,
    DraDevice,
    DraState,
    ResourceClaimObject,
    ResourceSlice,
)

T0 = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
JOBS = ["a", "b", "c", "d"]


def gpu_node(name: str, cards: int) -> Node:
    return Node(name=name, gpus=[Gpu(index=i) for i in range(cards)])


def wrote(*annotations: str) -> list:
    """gpupool's field manager set these annotations (`gpupool_wrote`)."""
    fields = {"f:metadata": {"f:annotations": {f"f:{k}": {} for k in annotations}}}
    return [
        client.V1ManagedFieldsEntry(
            manager=C.FIELD_MANAGER, operation="Update", fields_type="FieldsV1", fields_v1=fields
        )
    ]


class World:
    """A random cluster's pods, GpuNodeStates, nodes and owners, changed one event at a time."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.rv = 1000
        self.n = 0
        self.nodes = {f"n{i}": gpu_node(f"n{i}", self.r.choice([2, 4, 8])) for i in range(5)}
        self.pods: dict[tuple, client.V1Pod] = {}
        self.states: dict[str, dict] = {}
        self.owners = Owners()
        for _ in range(30):
            self.create()
        for name in self.nodes:
            self.publish(name)

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def create(self) -> None:
        r = self.r
        self.n += 1
        ns = r.choice(["t1", "t2"])
        name = f"p{self.n}"
        limits = {C.GPU_RESOURCE: str(r.choice([1, 1, 2, 3]))} if r.random() < 0.9 else {}
        ann: dict[str, str] = {}
        node = r.choice([*self.nodes, "gone"]) if r.random() < 0.5 else None
        gates = None
        fields = None
        if node is None:
            kind = r.random()
            if kind < 0.4:
                gates = [client.V1PodSchedulingGate(name=C.ADMISSION_GATE)]
            elif kind < 0.8:
                ann[C.ADMITTED_ANN] = r.choice([*self.nodes, "gone"])
                if r.random() < 0.3:
                    ann[C.INTENDED_GPUS_ANN] = str(r.randrange(4))
                fields = wrote(*ann) if r.random() < 0.8 else None  # else: forged, reported
        elif r.random() < 0.3:
            ann[C.GPUS_ANN] = r.choice(["0", "1,2", "bad!"])
            fields = wrote(C.GPUS_ANN) if r.random() < 0.5 else None
        if r.random() < 0.1:
            ann[C.RESERVED_ANN] = r.choice(["n1:0", "unreadable"])
        job = r.choice(JOBS)
        self.pods[(ns, name)] = client.V1Pod(
            metadata=client.V1ObjectMeta(
                name=name,
                namespace=ns,
                uid=f"uid-{self.n}",
                resource_version=self.next_rv(),
                # a few instants only: pods created together are ordered by name
                creation_timestamp=T0 + timedelta(seconds=r.randrange(6)),
                annotations=ann,
                managed_fields=fields,
                owner_references=[
                    client.V1OwnerReference(api_version="batch/v1", kind="Job", name=job, uid="o")
                ]
                if r.random() < 0.7
                else None,
            ),
            spec=client.V1PodSpec(
                containers=[
                    client.V1Container(
                        name="main",
                        image="x",
                        resources=client.V1ResourceRequirements(limits=limits),
                    )
                ],
                node_name=node,
                scheduling_gates=gates,
            ),
            status=client.V1PodStatus(phase="Running" if node else "Pending"),
        )

    def change(self) -> None:
        """A new object for one pod, as a MODIFIED event hands it over."""
        r = self.r
        key = r.choice(sorted(self.pods))
        p = copy.deepcopy(self.pods[key])
        p.metadata.resource_version = self.next_rv()
        what = r.random()
        if what < 0.3 and not p.spec.node_name:  # bound: kube-scheduler placed it
            p.spec.node_name = (p.metadata.annotations or {}).get(C.ADMITTED_ANN) or r.choice(
                list(self.nodes)
            )
            p.spec.scheduling_gates = None
            p.status.phase = "Running"
        elif what < 0.45:
            p.status.phase = r.choice(["Failed", "Succeeded"])
        elif what < 0.55:
            p.metadata.deletion_timestamp = T0
        elif what < 0.7 and p.spec.scheduling_gates:  # gpupool admitted it
            p.spec.scheduling_gates = None
            p.metadata.annotations = {
                **(p.metadata.annotations or {}),
                C.ADMITTED_ANN: r.choice(list(self.nodes)),
            }
            p.metadata.managed_fields = wrote(C.ADMITTED_ANN)
        else:
            p.metadata.annotations = {**(p.metadata.annotations or {}), "x": self.next_rv()}
        self.pods[key] = p

    def delete(self) -> None:
        del self.pods[self.r.choice(sorted(self.pods))]

    def publish(self, name: str) -> None:
        """The node's agent publishes anew what some of the pods bound there hold."""
        r = self.r
        listed = [
            {
                "namespace": p.metadata.namespace,
                "name": p.metadata.name,
                "allocations": [{"gpu": r.randrange(8)}],
            }
            for p in self.pods.values()
            if p.spec.node_name == name and r.random() < 0.7
        ]
        if r.random() < 0.1:
            listed.append({"namespace": "t1", "allocations": "bad"})  # reported, left out
        state = {"metadata": {"name": name, "resourceVersion": self.next_rv()}}
        if r.random() < 0.85:
            state["status"] = {"pods": listed}
        self.states[name] = state

    def reown(self) -> None:
        """The owners as read anew: sizes, reservations, queues, managers changed."""
        r = self.r
        job = ("t1", r.choice(JOBS))
        sizes = dict(self.owners.sizes)
        sizes[("t1", "Job", job[1])] = r.randrange(1, 4)
        queues = dict(self.owners.queues)
        queues[job] = r.choice(["q1", "q2"])
        foreign = set(self.owners.foreign_jobs) ^ ({job} if r.random() < 0.3 else set())
        next_pod = dict(self.owners.next_pod)
        if r.random() < 0.3:
            next_pod[job] = ("n1", [0], T0)
        self.owners = Owners(sizes=sizes, queues=queues, foreign_jobs=foreign, next_pod=next_pod)

    def step(self) -> str:
        r = self.r
        what = r.random()
        if what < 0.25:
            self.create()
        elif what < 0.55:
            self.change()
        elif what < 0.65 and len(self.pods) > 5:
            self.delete()
        elif what < 0.78:
            self.publish(r.choice(list(self.nodes)))
        elif what < 0.86:
            self.reown()
        elif what < 0.9:
            self.owners = copy.deepcopy(self.owners)  # read anew, the same
        elif what < 0.93:  # a node read anew (another object), or its cards changed
            name = r.choice(list(self.nodes))
            self.nodes[name] = gpu_node(name, r.choice([2, 4, 8]))
        elif what < 0.94:  # a node comes: sometimes the one admitted pods name
            name = r.choice(["gone", f"n{len(self.nodes)}"])
            self.nodes[name] = gpu_node(name, 4)
        elif what < 0.95 and len(self.nodes) > 2:  # a node goes (its pods stay a while)
            del self.nodes[r.choice(sorted(self.nodes))]
        elif what < 0.97:  # a relist: every pod a new object
            self.pods = {k: copy.deepcopy(p) for k, p in self.pods.items()}
        else:
            return "nothing"
        return "step"


def observed(world: World, memo: WorkloadMemo | None) -> tuple:
    """(workloads, failed members, reports) as `_observe` reads the pods (in a `DraWorld`, with
    their DRA claims read through a `ClaimReader`, as `_observe` reads them)."""
    found: list = []
    token = _UNREADABLE.set(found)
    if memo is not None:
        memo.begin()
    try:
        held = {
            name: published_pods(s) if memo is None else memo.published(name, s)
            for name, s in world.states.items()
        }
        by_name = dict(world.nodes)
        claimed = ClaimReader(world.dra(), by_name) if isinstance(world, DraWorld) else None
        made, failed = read_pods(
            list(world.pods.values()), held, by_name, world.owners, claimed, memo
        )
    finally:
        _UNREADABLE.reset(token)
    if memo is not None:
        memo.end()
    return made, failed, sorted({(u.kind, u.namespace, u.name, u.message) for u in found})


@pytest.mark.parametrize("seed", range(12))
def test_the_pods_read_from_what_changed_equal_the_ones_read_afresh(seed, monkeypatch):
    if seed % 3 == 2:  # a small splice limit: more cycles take the whole pass again
        monkeypatch.setattr(kube_pod_delta, "SPLICE_MAX", 3)
    follow(World(seed), 120)


def follow(world: World, steps: int) -> list[Workload]:
    """`steps` random steps of `world`, each read afresh and through one `WorkloadMemo`: the
    same each time, and the memo's delta kept. -> every workload read afresh on the way."""
    memo = WorkloadMemo()
    seen: list[Workload] = []
    for i in range(steps):
        fresh = observed(world, None)
        kept = observed(world, memo)
        assert kept[0] == fresh[0], f"step {i}: workloads"
        assert kept[1] == fresh[1], f"step {i}: failed members"
        assert kept[2] == fresh[2], f"step {i}: reports"
        assert memo.delta is not None
        seen += fresh[0]
        world.step()
    return seen


def read_twice(world: World) -> tuple[WorkloadMemo, list[Workload]]:
    """`world` read twice through one memo: the second read hands back the same objects."""
    memo = WorkloadMemo()
    first = observed(world, memo)[0]
    again = observed(world, memo)[0]
    assert all(a is b for a, b in zip(first, again, strict=True))
    return memo, again


def test_unchanged_pods_keep_their_workloads_and_a_pod_twice_takes_the_plain_pass():
    world = World(99)
    memo, _ = read_twice(world)
    world.change()
    assert observed(world, memo)[0] == observed(world, None)[0]
    key = sorted(world.pods)[0]
    twice = copy.deepcopy(world.pods[key])
    pods = list(world.pods.values()) + [twice]
    held = {name: published_pods(s) for name, s in world.states.items()}
    made, _ = read_pods(pods, held, dict(world.nodes), world.owners, None, memo)
    plain, _ = read_pods(pods, held, dict(world.nodes), world.owners, None, None)
    assert made == plain and memo.delta is None  # the next cycle starts afresh


def test_a_pod_without_a_name_is_left_out_and_reported_every_cycle():
    world = World(7)
    memo = WorkloadMemo()
    observed(world, memo)
    nameless = copy.deepcopy(next(iter(world.pods.values())))
    nameless.metadata.name = None
    pods = list(world.pods.values())
    raw = pods[:3] + [nameless] + pods[3:]
    for _ in range(2):
        found: list = []
        token = _UNREADABLE.set(found)
        try:
            assert identified_pods(raw, memo) == pods
        finally:
            _UNREADABLE.reset(token)
        assert [u.message for u in found] == ["left out: metadata.name is missing"]
    assert identified_pods(pods, memo) == pods and identified_pods(pods, None) == pods


# ---------------------------------------------------------------------- DRA (issue 32)
CLASS, TEMPLATE = "gpupool-a-gpu", "gpupool-a-gpu-1"


class DraWorld(World):
    """`World` where some pods ask for cards through a ResourceClaim made from a template (no
    `nvidia.com/gpu`): the claims' allocations and reservations, the nodes' ResourceSlices and
    the DeviceClass change apart from the pods, as the watch cache hands over a new model for
    an object with an event (`DraMemo`) and the same one otherwise."""

    def __init__(self, seed: int) -> None:
        self.claims: dict[str, ResourceClaimObject] = {}
        self.dra_pods: set[tuple] = set()
        self.classes = [DeviceClassObject(name=CLASS, pool="a")]
        self.templates = [
            ClaimTemplateObject(namespace=ns, name=TEMPLATE, devices={CLASS: 1})
            for ns in ("t1", "t2")
        ]
        self.slices: dict[str, ResourceSlice] = {}
        super().__init__(seed)
        for name in self.nodes:
            self.republish(name)

    def create(self) -> None:
        super().create()
        if self.r.random() < 0.5:
            return
        key = max(self.pods, key=lambda k: int(k[1][1:]))  # the pod just made
        p = self.pods[key]
        p.spec.containers[0].resources = client.V1ResourceRequirements(
            claims=[client.CoreV1ResourceClaim(name="gpus")]
        )
        p.spec.resource_claims = [
            client.V1PodResourceClaim(name="gpus", resource_claim_template_name=TEMPLATE)
        ]
        self.dra_pods.add(key)
        if self.r.random() < 0.8:  # the resourceclaim controller made its claim
            claim = f"{key[1]}-gpus-x"
            p.status.resource_claim_statuses = [
                client.V1PodResourceClaimStatus(name="gpus", resource_claim_name=claim)
            ]
            self.claims[f"{key[0]}/{claim}"] = ResourceClaimObject(
                namespace=key[0], name=claim, devices={CLASS: 1}
            )
            if p.spec.node_name and self.r.random() < 0.8:
                self.allocate(f"{key[0]}/{claim}", p.spec.node_name, key[1])

    def allocate(self, claim: str, node: str, pod: str | None) -> None:
        c = self.claims[claim]
        result = DeviceResult(
            request="gpus", driver="gpu.nvidia.com", pool=node, device=f"gpu-{self.r.randrange(8)}"
        )
        self.claims[claim] = c.model_copy(
            update={"allocated": [result], "node": node, "reserved_for": [pod] if pod else []}
        )

    def claim_event(self) -> None:
        """A claim allocated (perhaps for a pod not bound yet), deallocated or deleted."""
        if not self.claims:
            return
        key = self.r.choice(sorted(self.claims))
        what = self.r.random()
        if what < 0.5:
            node = self.r.choice([*self.nodes, "gone"])
            self.allocate(key, node, self.r.choice([None, key.split("/")[1].split("-")[0]]))
        elif what < 0.85:
            c = self.claims[key]
            self.claims[key] = c.model_copy(
                update={"allocated": None, "node": "", "reserved_for": []}
            )
        else:
            del self.claims[key]

    def republish(self, name: str) -> None:
        """The node's slice anew (another object), its cards named by minor."""
        devices = [
            DraDevice(name=f"gpu-{i}", attributes={"type": "gpu"})
            for i in range(self.r.choice([4, 8]))
        ]
        self.slices[name] = ResourceSlice(
            name=f"{name}-gpu.nvidia.com",
            driver="gpu.nvidia.com",
            pool=name,
            node=name,
            devices=devices,
        )

    def step(self) -> str:
        what = self.r.random()
        if what < 0.25:
            self.claim_event()
        elif what < 0.28:
            self.republish(self.r.choice(sorted(self.slices)))
        elif what < 0.3:
            self.classes = [c.model_copy() for c in self.classes]  # read anew
        else:
            return super().step()
        return "step"

    def dra(self) -> DraState:
        from reconciler.observe.kube_dra import _pod_claims

        pods = [_pod_claims(p) for p in self.pods.values()]
        return DraState(
            slices=list(self.slices.values()),
            device_classes=list(self.classes),
            claims=list(self.claims.values()),
            claim_templates=list(self.templates),
            pods=[p for p in pods if p is not None],
        )


@pytest.mark.parametrize("seed", range(10))
def test_dra_pods_read_from_what_changed_equal_the_ones_read_afresh(seed):
    """With DRA read, a pod is read again when its claims changed (another object), every
    pod when the classes, templates or slices did, and those of a node that changed: the
    workloads equal the ones read afresh, cycle after cycle, and the delta is kept."""
    world = DraWorld(seed)
    seen = follow(world, 150)
    claimed = sum(1 for w in seen if w.allocations and (w.namespace, w.name) in world.dra_pods)
    assert claimed > 50  # pods held cards through their claims along the way


def test_dra_pods_keep_their_workloads_while_their_claims_do_not_change():
    world = DraWorld(3)
    memo, again = read_twice(world)
    w = next(w for w in again if w.allocations and (w.namespace, w.name) in world.dra_pods)
    (status,) = world.pods[(w.namespace, w.name)].status.resource_claim_statuses
    key = f"{w.namespace}/{status.resource_claim_name}"
    c = world.claims[key]
    (r,) = c.allocated or []
    other = f"gpu-{(int(r.device.split('-')[1]) + 1) % 4}"  # another card of its node
    world.claims[key] = c.model_copy(update={"allocated": [r.model_copy(update={"device": other})]})
    changed = observed(world, memo)[0]
    assert changed == observed(world, None)[0]
    moved = [b for a, b in zip(again, changed, strict=True) if a is not b]
    assert (w.namespace, w.name) in {(x.namespace, x.name) for x in moved}
