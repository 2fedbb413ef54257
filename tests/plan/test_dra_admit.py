"""Exact admission on DRA, the planner's half (reconciler/plan/dra_admit.py): an Admit on a DRA
pool carries the `uuid`s of the devices the plan chose for each pod (NVIDIA's driver's devices
as its slices publish them), matched by the node agent's card uuid, else by the driver's
`gpu-<minor>` name; a MIG instance by its parent card, profile and placement start. A planned
device the driver has not published yet (a repartition in flight) admits nothing: the pod waits
whole, and is admitted once the slices show it."""

from __future__ import annotations

import pytest

from reconciler import conventions as C
from reconciler.observe.builders import node, snapshot, training
from reconciler.observe.model import Gpu, MigInstance, Node
from reconciler.observe.model_dra import (
    DeviceResult,
    DeviceTaint,
    DeviceTaintRuleObject,
    DraDevice,
    DraState,
    ResourceClaimObject,
    ResourceSlice,
)
from reconciler.plan.actions import Admit
from reconciler.plan.cluster import GpuSlot
from reconciler.plan.dra_admit import guard_in_place, planned_devices
from reconciler.plan.planner import plan_with_facts
from reconciler.plan.stages.whole_cards import _gang_on
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import (
    A100,
    NOW,
    _objects,
    ago,
    always_rule_preempts_before_giving_back,
    desired_text,
)

NO_SHARED = ("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "")
DRIVER = "gpu.nvidia.com"
DRA = ("  gpuModel: A100-SXM4-80GB\n", "  gpuModel: A100-SXM4-80GB\n  backend: dra\n")


def card(minor: int, uuid: str) -> DraDevice:
    return DraDevice(name=f"gpu-{minor}", attributes={"type": "gpu", "uuid": uuid})


def mig(minor: int, parent: str, profile: str, start: int) -> DraDevice:
    name = f"gpu-{minor}-mig-{profile.replace('.', '')}-9-{start}"
    attributes = {"type": "mig", "uuid": f"MIG-{minor}-{start}", "parentUUID": parent}
    return DraDevice(name=name, attributes={**attributes, "profile": profile})


def published(nodes: list[Node]) -> DraState:
    """Each node's cards as the driver publishes them (one slice, named after the node)."""
    slices = []
    for n in nodes:
        devices = []
        for g in n.gpus:
            if g.mig_enabled:
                devices += [mig(g.index, g.uuid, i.profile, i.start) for i in g.mig_instances]
            else:
                devices.append(card(g.index, g.uuid or f"GPU-{n.name}-{g.index}"))
        slices.append(
            ResourceSlice(
                name=f"{n.name}-gpu.nvidia.com",
                driver="gpu.nvidia.com",
                pool=n.name,
                node=n.name,
                devices=devices,
            )
        )
    return DraState(slices=slices)


def test_cards_by_the_agents_uuid_else_by_minor_and_mig_by_parent_and_start() -> None:
    node = Node(
        name="n",
        gpus=[
            Gpu(index=0, uuid="GPU-zero"),
            Gpu(index=1, uuid=""),
            Gpu(
                index=2,
                uuid="GPU-two",
                mig_enabled=True,
                mig_instances=[MigInstance(profile="3g.40gb", start=s) for s in (0, 4)],
            ),
        ],
    )
    # the driver's minor 5 carries the uuid the agent reports for index 0
    dra = DraState(
        slices=[
            ResourceSlice(
                name="s",
                driver="gpu.nvidia.com",
                pool="n",
                node="n",
                devices=[
                    card(5, "GPU-zero"),
                    card(1, "GPU-one"),
                    mig(2, "GPU-two", "3g.40gb", 0),
                    mig(2, "GPU-two", "3g.40gb", 4),
                ],
            )
        ]
    )
    whole = [GpuSlot(node="n", index=0, mode="whole"), GpuSlot(node="n", index=1, mode="whole")]
    assert planned_devices(dra, node, whole, "ns/p") == ("GPU-zero", "GPU-one")
    g = GpuSlot(node="n", index=2, mode="mig")
    g.instance_holders[("3g.40gb", 4)] = "ns/p"
    g.instance_holders[("3g.40gb", 0)] = "ns/other"
    assert planned_devices(dra, node, [g], "ns/p") == ("MIG-2-4",)
    # not published (yet): nothing to name, so no admission
    g.instance_holders[("3g.40gb", 4)] = "ns/other"
    g.instance_holders[("1g.10gb", 6)] = "ns/p"
    assert planned_devices(dra, node, [g], "ns/p") is None
    assert planned_devices(None, node, whole, "ns/p") is None


def _plan(backend_dra: bool, slices: bool):
    text, observed = always_rule_preempts_before_giving_back()
    text = text.replace(*NO_SHARED)
    if backend_dra:
        text = text.replace(*DRA, 1)
    if slices:
        observed = observed.model_copy(update={"dra": published(observed.nodes)})
    plan, _ = plan_with_facts(load([SourceFile("desired.yaml", text)]), observed)
    return observed, [a for a in plan.actions if isinstance(a, Admit)]


def test_an_admit_on_a_dra_pool_names_the_planned_cards_by_uuid() -> None:
    observed, admits = _plan(backend_dra=True, slices=True)
    _, plugin = _plan(backend_dra=False, slices=True)
    assert [a.id for a in admits] == [a.id for a in plugin]  # the same placement
    (pod,) = admits[0].pods
    node = next(n for n in observed.nodes if n.name == pod.node)
    uuids = {g.index: g.uuid or f"GPU-{node.name}-{g.index}" for g in node.gpus}
    assert pod.devices == tuple(uuids[i] for i in pod.gpus) and len(pod.devices) == 8
    assert all(p.devices == () for a in plugin for p in a.pods)  # device plugin: a hint only
    assert "devices" not in plugin[0].pods[0].model_dump()  # its plans are written as before


def _guarded(observed, nodes: list[str]):
    """`observed` with gpupool's guard in place on `nodes` (its DeviceTaintRule each)."""
    rules = [
        DeviceTaintRuleObject(
            name=f"gpupool-guard-{n}",
            driver=DRIVER,
            pool=n,
            taint=DeviceTaint(key=C.DRA_GUARD_TAINT, value="pinned-only"),
            managed_by=C.MANAGED_BY,
        )
        for n in nodes
    ]
    dra = observed.dra or DraState()
    return observed.model_copy(update={"dra": dra.model_copy(update={"taint_rules": rules})})


@pytest.mark.parametrize("admission", ["pin", "allocate"])
@pytest.mark.parametrize("guarded", [True, False])
def test_admission_allocate_names_the_devices_as_refs_where_the_guard_is_in_place(
    admission: str, guarded: bool
) -> None:
    """`dra.admission: allocate` adds the devices as `<driver>/<pool>/<device>` (what an
    allocation names) beside their uuids, only on a node whose guard is observed in place;
    the placement is the same, and `pin` (the default) plans are written as before."""
    text, observed = always_rule_preempts_before_giving_back()
    text = text.replace(*NO_SHARED).replace(*DRA, 1)
    text = text.replace(
        "  backend: dra\n", f"  backend: dra\n  dra: {{admission: {admission}}}\n", 1
    )
    observed = observed.model_copy(update={"dra": published(observed.nodes)})
    if guarded:
        observed = _guarded(observed, [n.name for n in observed.nodes])
    plan, _ = plan_with_facts(load([SourceFile("desired.yaml", text)]), observed)
    (admit,) = [a for a in plan.actions if isinstance(a, Admit)]
    (pod,) = admit.pods
    _, pinned = _plan(backend_dra=True, slices=True)
    assert (pod.node, pod.gpus, pod.devices) == (
        pinned[0].pods[0].node,
        pinned[0].pods[0].gpus,
        pinned[0].pods[0].devices,
    )
    if admission == "allocate" and guarded:
        assert pod.refs == tuple(f"{DRIVER}/{pod.node}/gpu-{i}" for i in pod.gpus)
    else:
        assert pod.refs == () and "refs" not in pod.model_dump()


def test_a_guard_of_another_node_or_not_gpupools_is_not_in_place() -> None:
    node = Node(name="n", gpus=[Gpu(index=0, uuid="GPU-zero")])
    dra = _guarded(snapshot(NOW, [node]), ["other"]).dra
    assert not guard_in_place(dra, "n") and guard_in_place(dra, "other")
    foreign = dra.model_copy(
        update={"taint_rules": [r.model_copy(update={"managed_by": ""}) for r in dra.taint_rules]}
    )
    assert not guard_in_place(foreign, "other") and not guard_in_place(None, "other")


def test_a_dra_pod_waits_while_its_devices_are_not_published() -> None:
    _, admits = _plan(backend_dra=True, slices=False)
    assert admits == []


def _unreleased(observed, node: str, minor: int, reserved_for: list[str], ns: str = "team-b"):
    """`observed` with a claim still allocated `gpu-<minor>` of `node` for `reserved_for`."""
    claim = ResourceClaimObject(
        namespace=ns,
        name="gone-0-gpu",
        allocated=[DeviceResult(request="gpu", driver=DRIVER, pool=node, device=f"gpu-{minor}")],
        node=node,
        reserved_for=reserved_for,
    )
    dra = observed.dra or DraState()
    return observed.model_copy(update={"dra": dra.model_copy(update={"claims": [claim]})})


def _on_dra():
    """The preemption scenario with its pool on DRA, the devices published: (desired,
    observed)."""
    text, observed = always_rule_preempts_before_giving_back()
    text = text.replace(*NO_SHARED).replace(*DRA, 1)
    observed = observed.model_copy(update={"dra": published(observed.nodes)})
    return load([SourceFile("desired.yaml", text)]), observed


def _admitted_once():
    """`_on_dra`, planned once: (desired, observed, the one pod its Admit places)."""
    desired, observed = _on_dra()
    before, _ = plan_with_facts(desired, observed)
    (admit,) = [a for a in before.actions if isinstance(a, Admit)]
    (pod,) = admit.pods
    return desired, observed, pod


def _nothing_placed_on(plan, pod) -> None:
    """No Admit of `plan` places a pod on the first card `pod` was planned on."""
    for a in plan.actions:
        if isinstance(a, Admit):
            assert all((pod.node, pod.gpus[0]) not in {(p.node, g) for g in p.gpus} for p in a.pods)


@pytest.mark.parametrize("reserved_for", [["spot-sweep-old"], []])
def test_a_card_a_claim_still_holds_after_its_pod_is_gone_is_not_planned_on(reserved_for) -> None:
    """Issue 32: a pod deleted (or ended) while its claim is still allocated: until Kubernetes
    deallocates the claim, its allocator counts the device as taken. The planner places nothing
    on that card (the pod waits or goes elsewhere), and does not repartition it."""
    desired, observed, pod = _admitted_once()
    held = _unreleased(observed, pod.node, pod.gpus[0], reserved_for)
    after, _ = plan_with_facts(desired, held)
    _nothing_placed_on(after, pod)
    assert not any(pod.node in a.id for a in after.actions if a.kind == "mig-reconfigure")
    (f,) = [f for f in after.findings if f.code == "dra-claim-unreleased"]
    assert f.subject == "ResourceClaim team-b/gone-0-gpu"
    assert f"{pod.node}/gpu{pod.gpus[0]}" in f.message


def test_a_claim_reserved_for_a_pod_still_gated_holds_its_card() -> None:
    """`spec.dra.admission: allocate` writes a claim's allocation and its reservation for the
    pod before the gate goes (apply/handlers/dra_own.py). A run that stopped in between leaves
    the pod gated with its claim held: the pod holds nothing in the snapshot, so the card is
    fenced like an unreleased claim's, not planned for another pod, until the claim is taken
    back or the pod admitted."""
    desired, observed, pod = _admitted_once()
    w = next(w for w in observed.workloads if w.name == pod.name)
    assert w.admission == "gpupool" and not w.node  # behind gpupool's gate
    held = _unreleased(observed, pod.node, pod.gpus[0], [pod.name], ns=w.namespace)
    after, _ = plan_with_facts(desired, held)
    _nothing_placed_on(after, pod)
    (f,) = [f for f in after.findings if f.code == "dra-claim-unreleased"]
    assert f.subject == f"ResourceClaim {w.namespace}/gone-0-gpu"
    assert "still behind gpupool's gate" in f.message


def test_a_claim_its_running_pod_holds_is_no_finding() -> None:
    desired, observed = _on_dra()
    spot = next(w for w in observed.workloads if w.name == "spot-sweep")
    held = _unreleased(observed, spot.node, 0, [spot.name])
    plan, _ = plan_with_facts(desired, held)
    assert spot.namespace == "team-b"
    assert not [f for f in plan.findings if f.code == "dra-claim-unreleased"]


def _terminating(observed, name: str):
    ws = [
        w.model_copy(update={"terminating": True}) if w.name == name else w
        for w in observed.workloads
    ]
    return observed.model_copy(update={"workloads": ws})


def test_a_terminating_pods_cards_go_to_the_next_pod_once_it_and_its_claims_are_gone() -> None:
    """Issue 32: a pod terminating on a DRA pool still holds its claim (the resourceclaim
    controller releases it once the pod is gone). Its cards are planned for the next pod, as
    on the device plugin: the Admit waits for the pod gone and its claim deallocated, in its
    step (`after`, `after_claims`). No fence, no eviction, no reservation taint."""
    desired, observed = _on_dra()
    spot = next(w for w in observed.workloads if w.name == "spot-sweep")
    held = _unreleased(_terminating(observed, "spot-sweep"), spot.node, 0, [spot.name])
    p, _ = plan_with_facts(desired, held)
    (admit,) = [a for a in p.actions if isinstance(a, Admit)]
    assert [pa.node for pa in admit.pods] == [spot.node]
    assert admit.after == (spot.key,) and admit.after_claims == ("team-b/gone-0-gpu",)
    assert "and their 1 ResourceClaim(s) deallocated" in admit.reason
    assert not [a for a in p.actions if a.kind in ("evict", "checkpoint")]
    assert not [f for f in p.findings if f.code == "dra-claim-unreleased"]
    assert not [a for a in p.actions if "taint" in a.kind], [a.id for a in p.actions]
    # the claim's pod gone too (no longer listed): the claim is unreleased, the card fenced
    gone = held.model_copy(
        update={"workloads": [w for w in held.workloads if w.name != "spot-sweep"]}
    )
    p, _ = plan_with_facts(desired, gone)
    assert not [a for a in p.actions if isinstance(a, Admit)]
    assert [f.subject for f in p.findings if f.code == "dra-claim-unreleased"] == [
        "ResourceClaim team-b/gone-0-gpu"
    ]


@pytest.mark.parametrize("dra", [True, False], ids=["dra", "device-plugin"])
def test_a_card_free_now_goes_before_one_a_terminating_pod_holds(dra: bool) -> None:
    """Cards a terminating pod holds are the node's last choice: a pod is not kept waiting
    for a stop (perhaps a stuck one: a finalizer) beside a card that is free now."""
    text = desired_text().replace(*NO_SHARED)
    if dra:
        text = text.replace(*DRA, 1)
    w = [
        training("team-b", "spot-sweep", "a100-2", [0], cls="spot", started=ago(2)),
        training("team-a", "one", None, 1, cls="training-high", pool="a100", created=ago(0.5)),
    ]
    nodes = [node("a100-2", "a100", A100)]
    observed = snapshot(NOW, nodes, w, **_objects(text))
    observed = _terminating(observed, "spot-sweep")
    if dra:
        observed = observed.model_copy(update={"dra": published(observed.nodes)})
        observed = _unreleased(observed, "a100-2", 0, ["spot-sweep"])
    p, _ = plan_with_facts(load([SourceFile("desired.yaml", text)]), observed)
    (admit,) = [a for a in p.actions if isinstance(a, Admit)]
    assert [(pa.node, pa.gpus) for pa in admit.pods] == [("a100-2", (1,))]
    assert admit.after == () and admit.after_claims == ()


@pytest.mark.parametrize("topology", ["nvlink", "node"])
def test_of_equal_nvlink_islands_the_one_free_now_goes_first(topology: str) -> None:
    """Within a node's topology preference too: two islands of two free cards, one of them a
    terminating pod's, and a 2-card pod takes the other island (any topology: the free
    cards first)."""
    slots = [GpuSlot(node="n", index=i, mode="whole", island=i // 2) for i in range(4)]
    got = _gang_on(slots, 2, topology, going=frozenset({0}))
    want = [1, 2] if topology == "node" else [2, 3]
    assert [g.index for g in got or []] == want
    assert [g.index for g in _gang_on(slots, 2, topology) or []] == [0, 1]
