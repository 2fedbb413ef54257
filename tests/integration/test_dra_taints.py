"""Drains by device taint, a gang on one NVLink domain (placed, and freed by preemption), and
DRA read only when needed, on the real API server and kube-scheduler (issue 32 items 4 and 6).

A drain by device taint: a DRA pool's card about to change layout (static MIG through
mig-manager) gets a DeviceTaintRule (NoSchedule) per device before its node is cordoned; a pod
that bypasses gpupool (its own claim and DeviceClass, tolerating the cordon) is not allocated
the tainted card while it drains, the rule is put back when edited, and it is removed once the
driver republished the new layout, after which the MIG pod gpupool planned gets its device.
The rights this takes are the controller's own (deploy/rbac.yaml), each of the taint rules'
rules used and nothing refused.

A training gang of two 4-card pods on a DRA pool whose nodes carry GPU feature discovery's
`nvidia.com/gpu.clique`: it lands on the two nodes of one NVLink domain, on exactly the devices
gpupool planned (exact admission); and when no node is free for its second pod, the job
preempted for it is the one in the free node's domain, not the pool's cheapest victim in
another. A controller with no DRA pool lists nothing of
resource.k8s.io after its first cycle (the audit log). A reserved card (a waiting gang's) is
kept from a claim that bypasses gpupool and allocated to one pinned as exact admission writes it.
"""

from __future__ import annotations

import time
import uuid

from reconciler import conventions as C
from tests.support.wait import wait_for

from .dra_support import (
    allocated_devices,
    claim_of,
    claim_pod,
    claims_made,
    dra_nodes,
    dra_policy,
    each_allocated,
    gated,
    pod_on_claim,
    resource_claim,
    taint_cycle,
    taint_rule,
)
from .gating import gated_namespace
from .harness import audit_mark, controller, write_policy
from .rbac_rules import CONTROLLER, audited, unused_controller_rules

G, V = C.DRA_GROUP, C.DRA_VERSION
RULES = "devicetaintrules"


def own_claim_pod(kube, ns: str, name: str, cls: str, count: int, spec: dict, **exactly) -> None:
    """A pod `name` with a ResourceClaim of its own, made by hand (no template), of `count`
    devices of DeviceClass `cls` (`exactly`: the request's other fields); `spec`: the rest of
    the pod's spec."""
    claim = resource_claim(name, cls, count=count, **exactly)
    kube.custom.create_namespaced_custom_object(G, V, ns, "resourceclaims", claim)
    kube.core.create_namespaced_pod(ns, pod_on_claim(name, {"resourceClaimName": name}, spec))


def own_allocated(kube, ns: str, name: str) -> list[tuple[str, str]] | None:
    """(pool, device) allocated to the ResourceClaim `name` an `own_claim_pod` made."""
    return allocated_devices(
        kube.custom.get_namespaced_custom_object(G, V, ns, "resourceclaims", name)
    )


def bypass(kube, ns: str, name: str, cls: str, count: int, pool: str) -> None:
    """A pod gpupool does not admit: its own ResourceClaim on a DeviceClass of its own,
    tolerating the node's cordon (as a DaemonSet's pods do)."""
    own_claim_pod(
        kube,
        ns,
        name,
        cls,
        count,
        {
            "nodeSelector": {C.POOL_LABEL: pool},
            "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}],
        },
    )


def own_class(kube, name: str) -> None:
    """A DeviceClass of the test's: any whole card NVIDIA's driver publishes."""
    expr = f"device.driver == '{C.DRA_DRIVER}' && device.attributes['{C.DRA_DRIVER}'].type == 'gpu'"
    kube.custom.create_cluster_custom_object(
        G,
        V,
        "deviceclasses",
        {
            "apiVersion": f"{G}/{V}",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expr}}]},
        },
    )
    kube.cleanup(lambda: kube.custom.delete_cluster_custom_object(G, V, "deviceclasses", name))


def test_a_drain_by_device_taint_on_the_real_scheduler(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    pool, ns, node = f"d{sfx}", gated_namespace(kube), f"dra-t-{sfx}"
    sim, plugin = dra_nodes(kube, pool, node)[node]
    # its pods that bypass gpupool must reach the pool: no guard (test_dra_guard.py)
    write_policy(tmp_path, dra_policy(sfx, ns, nodes=1, whole=2, guard=False))
    mark = audit_mark(kube)
    ctl = controller(kube, tmp_path, kube.clock)
    taint_cycle(kube, ctl)

    # a MIG pod on gpupool's template: the plan turns one whole card into two 3g.40gb
    claim_pod(kube, ns, "ranker", f"gpupool-{pool}-mig-3g-40gb", f"serve-{sfx}")
    wait_for("the ranker's claim made", lambda: claim_of(kube, ns, "ranker"), timeout=60)
    out = taint_cycle(kube, ctl)
    taints = {k: v for k, v in out.items() if k.startswith("taint-device:")}
    assert len(taints) == 1 and all(v == "done: created" for v in taints.values()), out
    device = next(iter(taints)).rsplit("/", 1)[1]
    card = int(device.split("-")[1])
    name = f"gpupool-drain-{node}-{device}"
    got = taint_rule(kube, name)
    assert got["metadata"]["labels"][C.MANAGED_BY_LABEL] == C.MANAGED_BY
    assert got["spec"]["deviceSelector"] == {"driver": C.DRA_DRIVER, "pool": node, "device": device}
    taint = got["spec"]["taint"]
    assert (taint["key"], taint["value"], taint["effect"]) == (
        C.DRA_DRAIN_TAINT,
        "repartition",
        "NoSchedule",
    )
    assert out[f"cordon:{node}"].startswith("done")
    assert kube.core.read_node(node).spec.unschedulable

    # during the drain, pods that bypass gpupool: three cards go to the untainted ones, a
    # fourth card is not given (the tainted one is the only one left)
    other = kube.new_namespace()
    own_class(kube, f"any-gpu-{sfx}")
    bypass(kube, other, "three", f"any-gpu-{sfx}", 3, pool)
    got3 = wait_for(
        "three cards allocated", lambda: own_allocated(kube, other, "three"), timeout=60
    )
    assert got3 == sorted((node, f"gpu-{i}") for i in range(4) if i != card)
    bypass(kube, other, "fourth", f"any-gpu-{sfx}", 1, pool)
    time.sleep(6)  # the scheduler tries; the only free card is tainted
    assert own_allocated(kube, other, "fourth") is None
    for p in ("three", "fourth"):
        kube.core.delete_namespaced_pod(p, other, grace_period_seconds=0)
        kube.custom.delete_namespaced_custom_object(G, V, other, "resourceclaims", p)

    # someone edits the rule: gpupool puts its taint back (a merge patch)
    kube.custom.patch_cluster_custom_object(
        G, V, RULES, name, {"spec": {"taint": {"value": "edited"}}}
    )
    out = taint_cycle(kube, ctl)
    assert out.get(f"taint-device:{node}/{device}") == "done: updated", out
    assert taint_rule(kube, name)["spec"]["taint"]["value"] == "repartition"

    # mig-manager applies gpupool's config and the agent shows it; until the driver
    # republishes the node's slices the rule stays
    def relaid() -> bool:
        taint_cycle(kube, ctl)
        sim.step()
        kube.clock.advance(120)
        state = kube.custom.get_cluster_custom_object(C.GROUP, C.VERSION, C.NODE_STATE_PLURAL, node)
        gpus = {g["index"]: g for g in state["status"]["gpus"]}
        return bool(gpus[card].get("migEnabled") or gpus[card].get("migInstances"))

    wait_for("mig-manager applied the new layout", relaid, timeout=120, interval=0.5)
    taint_cycle(kube, ctl)
    assert taint_rule(kube, name) is not None
    plugin.relayout({card: [("3g.40gb", 0), ("3g.40gb", 4)]})

    def freed() -> bool:
        out = taint_cycle(kube, ctl)
        return taint_rule(kube, name) is None and not [
            k for k in out if k.startswith("taint-device")
        ]

    wait_for("the rule removed once the driver republished", freed, timeout=120, interval=1)
    assert not kube.core.read_node(node).spec.unschedulable

    def ranker() -> list | None:
        taint_cycle(kube, ctl)
        return allocated_devices(claim_of(kube, ns, "ranker"))

    got = wait_for("the ranker allocated", ranker, timeout=120, interval=1)
    assert len(got) == 1 and got[0][1].startswith(f"gpu-{card}-mig-3g40gb-"), got

    # the controller's own rights did it: every taint rule verb was used, nothing refused
    # `watch` is the DRA informer's (Controller.run's watch cache: test_dra_informer.py); this
    # test's cycles read without one
    picked, unused = unused_controller_rules(
        kube, mark, lambda label: RULES in label and ": watch " not in label
    )
    assert picked == 5 and unused == [], unused


def test_a_training_gang_on_one_nvlink_domain_on_dra(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    pool, ns = f"d{sfx}", gated_namespace(kube)
    na, nb, nc = (f"dra-{x}-{sfx}" for x in "abc")
    clique = {na: "fabric.1", nb: "fabric.0", nc: "fabric.1"}  # nb alone in its domain
    labels = {n: {C.GPU_CLIQUE_LABEL: c} for n, c in clique.items()}
    dra_nodes(kube, pool, na, nb, nc, labels=labels)
    write_policy(tmp_path, dra_policy(sfx, ns, nodes=3, whole=8))
    ctl = controller(kube, tmp_path, kube.clock)
    taint_cycle(kube, ctl)
    got = gang_admitted(kube, ctl, ns, pool, f"low-{sfx}", timeout=120)
    nodes = {node for node, _, _ in got.values()}
    assert nodes == {na, nc}, got  # one NVLink domain, the one with room for both
    for _, devices, planned in got.values():
        assert devices == planned == [f"gpu-{i}" for i in range(4)], got


def pinned_claim_pod(kube, ns: str, name: str, cls: str, count: int, node: str, dc: str) -> None:
    """A running job gpupool did not place: its own claim of `count` cards (DeviceClass `dc`),
    on `node` (node affinity), in a namespace gpupool does not gate."""
    field = {"key": "metadata.name", "operator": "In", "values": [node]}
    own_claim_pod(
        kube,
        ns,
        name,
        dc,
        count,
        {
            "priorityClassName": cls,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [field]}]
                    }
                }
            },
        },
    )


def pinned_on(kube, ns: str, name: str) -> str | None:
    """The node of `pinned_claim_pod`'s pod once its claim is allocated."""
    claim = kube.custom.get_namespaced_custom_object(G, V, ns, "resourceclaims", name)
    if not (claim.get("status") or {}).get("allocation"):
        return None
    return kube.core.read_namespaced_pod(name, ns).spec.node_name


def gang_admitted(kube, ctl, ns: str, pool: str, cls: str, timeout: float) -> dict:
    """A gang of two 4-card trainers of class `cls` on gpupool's 4-card template of `pool`,
    cycled until gpupool admits both: pod -> (node, allocated devices, planned devices)."""
    pods = ("trainer-0", "trainer-1")
    for p in pods:
        claim_pod(kube, ns, p, f"gpupool-{pool}-gpu-4", cls, gang="t")
    claims_made(kube, ns, pods)

    def admitted() -> bool:
        taint_cycle(kube, ctl)
        return not gated(kube, ns, pods)

    wait_for("the gang admitted", admitted, timeout=timeout, interval=1)
    return each_allocated(kube, ns, pods)


def test_a_gang_preempts_within_one_nvlink_domain_on_dra(kube, tmp_path):
    """No node is free for the gang's second pod: the cheapest victim of the pool (the younger
    job, on nb) is in another NVLink domain than the free node; the plan preempts the job on
    nc instead, in na's domain, and the gang lands on na and nc (plan/stages/training.py)."""
    sfx = uuid.uuid4().hex[:6]
    pool, ns, other = f"d{sfx}", gated_namespace(kube), kube.new_namespace()
    na, nb, nc = (f"dra-p{x}-{sfx}" for x in "abc")
    clique = {na: "fabric.1", nb: "fabric.0", nc: "fabric.1"}  # nb alone in its domain
    labels = {node: {C.GPU_CLIQUE_LABEL: c} for node, c in clique.items()}
    dra_nodes(kube, pool, na, nb, nc, labels=labels)
    classes = ("low", "serve", "high")
    # old-job and young-job bypass gpupool: no guard (test_dra_guard.py)
    text = dra_policy(
        sfx, ns, nodes=3, whole=8, classes=classes, preemption=("high", "low"), guard=False
    )
    write_policy(tmp_path, text)
    dc = f"gpupool-{pool}-gpu"  # gpupool's class: the cards it counts
    ctl = controller(kube, tmp_path, kube.clock)
    taint_cycle(kube, ctl)
    pinned_claim_pod(kube, other, "old-job", f"low-{sfx}", 4, nc, dc)
    wait_for(
        "old-job on nc", lambda: pinned_on(kube, other, "old-job"), 60, until=lambda v: v == nc
    )
    kube.clock.advance(600)
    pinned_claim_pod(kube, other, "young-job", f"low-{sfx}", 4, nb, dc)
    wait_for(
        "young-job on nb", lambda: pinned_on(kube, other, "young-job"), 60, until=lambda v: v == nb
    )
    kube.clock.advance(120)  # both past minRuntime; young-job loses less work if stopped
    got = gang_admitted(kube, ctl, ns, pool, f"high-{sfx}", timeout=180)
    assert {node for node, _, _ in got.values()} == {na, nc}, got  # one NVLink domain
    for _, devices, planned in got.values():
        assert devices == planned == [f"gpu-{i}" for i in range(4)], got
    assert kube.core.read_namespaced_pod("young-job", other).status.phase == "Running"


def test_no_dra_list_without_a_dra_pool(kube, tmp_path):
    """After its first cycle (which finds no DRA object of gpupool's), a controller whose
    policy has no DRA pool lists nothing of resource.k8s.io."""
    from .dra_support import G as group

    sfx = uuid.uuid4().hex[:6]
    ns = kube.new_namespace()
    write_policy(tmp_path, dra_policy(sfx, ns, backend="devicePlugin"))
    ctl = controller(kube, tmp_path, kube.clock)
    mark = audit_mark(kube)
    taint_cycle(kube, ctl)
    first = [e.uri for e in audited(kube, CONTROLLER, mark) if f"/apis/{group}/" in e.uri]
    assert any("resourceslices" in u for u in first), first  # the first cycle looks
    mark = audit_mark(kube)
    for _ in range(2):
        taint_cycle(kube, ctl)
    later = [e.uri for e in audited(kube, CONTROLLER, mark) if f"/apis/{group}/" in e.uri]
    assert later == [], later


def test_a_reserved_card_is_kept_from_others_and_given_to_the_pinned_claim(kube):
    """The shapes gpupool writes for a waiting gang's cards, on the real scheduler: a device
    under a `gpupool.io/reserved-for-gang` rule is not allocated to a claim that bypasses
    gpupool, and is allocated to a claim pinned as exact admission writes it (its uuid
    selector and the reservation's toleration)."""
    from reconciler.apply.handlers.dra_admit import RESERVED_TOLERATION, uuid_selector
    from reconciler.plan.stages.drain_taints import RESERVED_VALUE, rule_name
    from tests.cluster.dra_slices import uuid as card_uuid

    sfx = uuid.uuid4().hex[:6]
    pool, node = f"d{sfx}", f"dra-r-{sfx}"
    dra_nodes(kube, pool, node, cards=2)
    name = rule_name(node, "gpu-0", C.DRA_RESERVED_TAINT)
    kube.custom.create_cluster_custom_object(
        G,
        V,
        RULES,
        {
            "apiVersion": f"{G}/{V}",
            "kind": "DeviceTaintRule",
            "metadata": {"name": name, "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY}},
            "spec": {
                "deviceSelector": {"driver": C.DRA_DRIVER, "pool": node, "device": "gpu-0"},
                "taint": {
                    "key": C.DRA_RESERVED_TAINT,
                    "value": RESERVED_VALUE,
                    "effect": "NoSchedule",
                },
            },
        },
    )
    ns = kube.new_namespace()
    cls = f"any-gpu-{sfx}"
    own_class(kube, cls)
    bypass(kube, ns, "first", cls, 1, pool)
    got = wait_for(
        "the bypassing claim allocated", lambda: own_allocated(kube, ns, "first"), timeout=60
    )
    assert got == [(node, "gpu-1")]
    bypass(kube, ns, "second", cls, 1, pool)
    time.sleep(6)  # the only free card is reserved
    assert own_allocated(kube, ns, "second") is None
    kube.core.delete_namespaced_pod("second", ns, grace_period_seconds=0)
    kube.custom.delete_namespaced_custom_object(G, V, ns, "resourceclaims", "second")
    # the claim gpupool pins for the gang: its uuid selector and the reservation's toleration
    own_claim_pod(
        kube,
        ns,
        "pinned",
        cls,
        1,
        {"nodeSelector": {C.POOL_LABEL: pool}},
        selectors=[{"cel": {"expression": uuid_selector((card_uuid(node, 0),))}}],
        tolerations=[RESERVED_TOLERATION],
    )
    got = wait_for(
        "the pinned claim allocated", lambda: own_allocated(kube, ns, "pinned"), timeout=60
    )
    assert got == [(node, "gpu-0")]
