"""DRA through the Kubernetes adapter (reconciler/observe/kube_dra.py): ResourceSlices as
NVIDIA's DRA driver publishes them (tests/cluster/dra_slices.py), DeviceClasses, claims and
their allocations, which pod holds which device; snapshot files carry it; hostile shapes are
findings, never tracebacks."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler import conventions as C
from reconciler.observe.dra_holdings import DraIndex, unreleased_claims
from reconciler.observe.kube import observe_cluster
from reconciler.observe.snapshot import dump_snapshot, parse_snapshot
from tests.cluster.dra_slices import gpu_device, mig_device, mig_name, node_slice
from tests.observe.fake_cluster import NOW, Cluster, managed, node, pod, serving
from tests.policy.fuzzing import mutate
from tests.support.hostile import HOSTILE as HOSTILE_RUNS


def claim(ns: str, name: str, devices: list[str], node: str, pods: list[str]) -> dict:
    return {
        "metadata": {"namespace": ns, "name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": "d100-whole", "count": len(devices)},
                    }
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": d}
                        for d in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{ns}-{p}"} for p in pods],
        },
    }


def cluster() -> Cluster:
    devices = [mig_device("n1", 0, "3g.40gb", 0, 4), mig_device("n1", 0, "3g.40gb", 4, 4)]
    devices += [gpu_device("n1", i) for i in range(1, 4)]
    trainer = pod("team-a", "trainer-0", node_name="n1", limits={})
    trainer["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "whole-2"}]
    trainer["status"] = {
        "phase": "Running",
        "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "trainer-0-gpus-x1"}],
    }
    waiting = pod("team-a", "waiting-0", limits={})
    waiting["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "whole-2"}]
    return Cluster(
        dra={
            "resourceslices": [node_slice("n1", devices)],
            "deviceclasses": [
                {
                    "metadata": {
                        "name": "d100-whole",
                        "labels": {
                            "app.kubernetes.io/managed-by": "gpupool",
                            "gpupool.io/pool": "d100",
                        },
                    },
                    "spec": {
                        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]
                    },
                }
            ],
            "resourceclaims": [
                claim("team-a", "trainer-0-gpus-x1", ["gpu-1", "gpu-2"], "n1", ["trainer-0"])
            ],
            "resourceclaimtemplates": [
                {
                    "metadata": {"namespace": "team-a", "name": "whole-2"},
                    "spec": {
                        "spec": {
                            "devices": {
                                "requests": [
                                    {
                                        "name": "gpu",
                                        "exactly": {"deviceClassName": "d100-whole", "count": 2},
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
        },
        pods=[trainer, waiting],
        nodes=[node("n1")],
    )


def observe(c: Cluster):
    with serving(c):
        return observe_cluster(object(), now=NOW)


def test_slices_classes_claims_and_holders_are_read() -> None:
    o = observe(cluster())
    dra = o.dra
    assert dra is not None and not o.unreadable, o.unreadable
    names = [d.name for d in dra.devices("n1")]
    assert names == [
        mig_name(0, "3g.40gb", 0),
        mig_name(0, "3g.40gb", 4),
        "gpu-1",
        "gpu-2",
        "gpu-3",
    ]
    mig = dra.devices("n1")[0]
    assert (mig.type, mig.attr("profile"), mig.attr("parentUUID")) == ("mig", "3g.40gb", "GPU-n1-0")
    assert mig.capacity["memorySlice3"] == "1" and mig.capacity["memory"] == "40Gi"
    gpu = dra.devices("n1")[2]
    assert (gpu.type, gpu.attr("productName"), gpu.attr("cudaComputeCapability")) == (
        "gpu",
        "NVIDIA A100-SXM4-80GB",
        "8.0.0",
    )
    assert [c.name for c in dra.device_classes] == ["d100-whole"]
    assert dra.device_classes[0].managed_by == "gpupool"
    assert dra.claim_templates[0].devices == {"d100-whole": 2}
    assert dra.device_classes[0].pool == "d100"
    assert dra.holders() == {
        "gpu.nvidia.com/n1/gpu-1": ["team-a/trainer-0"],
        "gpu.nvidia.com/n1/gpu-2": ["team-a/trainer-0"],
    }
    assert [r.device for r in DraIndex(dra).pod_devices("team-a", "trainer-0")] == [
        "gpu-1",
        "gpu-2",
    ]
    assert dra.claims[0].node == "n1"
    waiting = {p.pod: p for p in dra.pods}["waiting-0"]
    assert (waiting.claims, waiting.templates) == ([], ["whole-2"])


def test_the_claims_a_pinned_claim_replaces_are_read() -> None:
    """`gpupool.io/replaces-claims` (exact admission's pinned claims) -> `replaces`, what the
    planner's sweep of replaced claims looks for; a claim without it replaces none."""
    c = cluster()
    c.dra["resourceclaims"][0]["metadata"]["annotations"] = {
        C.DRA_REPLACES_ANN: "trainer-0-gpus-abcde,left-0"
    }
    dra = observe(c).dra
    assert dra is not None
    assert dra.claims[0].replaces == ["trainer-0-gpus-abcde", "left-0"]
    assert all(x.replaces == [] for x in observe(cluster()).dra.claims)


def test_an_older_generation_of_a_pool_is_outdated() -> None:
    c = cluster()
    old = node_slice("n1", [gpu_device("n1", 7)], generation=0)
    old["metadata"]["name"] = "n1-old"
    c.dra["resourceslices"].append(old)
    dra = observe(c).dra
    assert "gpu-7" not in [d.name for d in dra.devices("n1")]
    # every node's in one pass over the slices, each as `devices` reads it alone
    every = dra.devices_by_node()
    assert every and all(every[n] == dra.devices(n) for n in every)
    assert dra.devices_by_node(only="n1") == {"n1": dra.devices("n1")}
    assert dra.devices("no-such-node") == [] and dra.devices_by_node("another.driver") == {}


def test_without_resource_k8s_io_there_is_no_dra_state() -> None:
    c = cluster()
    c.dra = None
    assert observe(c).dra is None


def test_a_snapshot_file_carries_dra() -> None:
    o = observe(cluster())
    for fmt in ("yaml", "json"):
        again = parse_snapshot(dump_snapshot(o, fmt), f"s.{fmt}")
        assert again.dra == o.dra


SHAPES = [
    ("resourceslices", 0, ("spec", "devices"), "many", "spec.devices is a string"),
    (
        "resourceslices",
        0,
        ("spec", "devices", 0, "attributes", "type"),
        {"float": 1.5},
        "no string",
    ),
    (
        "resourceslices",
        0,
        ("spec", "devices", 2, "capacity", "memory"),
        {"value": 80},
        "value is a number",
    ),
    ("resourceslices", 0, ("spec", "pool"), None, "spec.pool.name is missing"),
    ("resourceslices", 0, ("spec", "devices"), [gpu_device("n1", 0)] * 129, "over 128"),
    ("resourceclaims", 0, ("status", "allocation", "devices", "results"), {"a": 1}, "is an object"),
    ("resourceclaims", 0, ("status", "reservedFor"), [7], "reservedFor[] is a number"),
    ("deviceclasses", 0, ("spec", "selectors", 0, "cel"), "x", "cel is a string"),
    ("resourceclaimtemplates", 0, ("spec", "spec"), [], "spec.spec is a list"),
]


@pytest.mark.parametrize(("plural", "i", "path", "value", "words"), SHAPES)
def test_a_hostile_dra_object_is_a_finding_never_a_traceback(plural, i, path, value, words) -> None:
    c = cluster()
    obj = c.dra[plural][i]
    target = obj
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = copy.deepcopy(value)
    o = observe(c)
    said = [u.message for u in o.unreadable]
    assert any(words in m for m in said), said
    assert o.dra is not None and o.nodes == observe(cluster()).nodes


def test_a_pod_that_claims_gpupools_classes_is_a_gpu_workload() -> None:
    o = observe(cluster())
    by_name = {w.name: w for w in o.workloads}
    trainer, waiting = by_name["trainer-0"], by_name["waiting-0"]
    assert trainer.request.gpus == 2 and waiting.request.gpus == 2
    assert sorted(a.gpu for a in trainer.allocations) == [1, 2]
    assert not waiting.allocations


def test_a_pod_whose_made_claim_is_gone_asks_for_its_templates_devices() -> None:
    """A pod's status can name a claim that is not there (deleted by someone else before the
    resourceclaim controller or exact admission makes another): it still asks for what its
    template does (else it would drop out of the plan)."""
    c = cluster()
    waiting = c.pods[1]
    waiting["status"] = {
        "phase": "Pending",
        "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "waiting-0-gpus-y2"}],
    }
    o = observe(c)
    by_name = {w.name: w for w in o.workloads}
    assert by_name["waiting-0"].request.gpus == 2 and not by_name["waiting-0"].allocations


def test_a_claim_on_someone_elses_class_is_no_gpu_request() -> None:
    c = cluster()
    del c.dra["deviceclasses"][0]["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    assert {w.name for w in observe(c).workloads}.isdisjoint({"trainer-0", "waiting-0"})


PLURALS = ("resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates")


@settings(HOSTILE_RUNS, max_examples=60)
@given(st.data())
def test_fuzzed_dra_objects_are_read_or_reported(data) -> None:
    """One to three DRA objects, each with one to three values dropped, replaced by any
    YAML-shaped value or added to (tests/policy/fuzzing.py `mutate`): observation never raises,
    every node is still read, and an object not read back is an unreadable entry."""
    c = cluster()
    for _ in range(data.draw(st.integers(1, 3), label="objects")):
        plural = data.draw(st.sampled_from(PLURALS), label="plural")
        c.dra[plural][0] = mutate(c.dra[plural][0], data)
    o = observe(c)
    assert [n.name for n in o.nodes] == ["n1"]
    assert o.dra is not None
    for plural, got in (
        ("resourceslices", o.dra.slices),
        ("deviceclasses", o.dra.device_classes),
        ("resourceclaims", o.dra.claims),
        ("resourceclaimtemplates", o.dra.claim_templates),
    ):
        if not got and c.dra[plural]:
            assert o.unreadable or c.refused, plural


@pytest.mark.parametrize("phase", ["deleted", "Succeeded", "reserved for none"])
def test_a_claim_still_allocated_after_its_pod_ended_holds_its_cards(phase) -> None:
    """Issue 32: the pod ended (or was deleted, or its reservation is already gone) and the
    resourceclaim controller has not deallocated its claim yet: the pod is no workload, its
    cards would read as free, but the allocator still counts them taken. `unreleased_claims`
    names the claim and the cards (the planner fences them: `dra-claim-unreleased`)."""
    c = cluster()
    trainer = c.pods[0]
    if phase == "deleted":
        c.pods.remove(trainer)
    elif phase == "Succeeded":
        trainer["status"]["phase"] = "Succeeded"
    else:  # the controller took the gone pod's reservation off, and has not deallocated yet
        c.pods.remove(trainer)
        c.dra["resourceclaims"][0]["status"]["reservedFor"] = []
    o = observe(c)
    assert "trainer-0" not in {w.name for w in o.workloads}
    (u,) = unreleased_claims(o.dra, o.nodes, (w.key for w in o.workloads))
    assert (u.claim, u.node) == ("team-a/trainer-0-gpus-x1", "n1")
    assert sorted(a.gpu for a in u.cards) == [1, 2]
    assert u.reserved_for == (() if phase == "reserved for none" else ("trainer-0",))


def test_a_claim_its_running_pod_holds_or_not_allocated_is_not_unreleased() -> None:
    o = observe(cluster())
    assert unreleased_claims(o.dra, o.nodes, (w.key for w in o.workloads)) == []
    c = cluster()
    del c.dra["resourceclaims"][0]["status"]["allocation"]
    c.pods.pop(0)
    o = observe(c)
    assert unreleased_claims(o.dra, o.nodes, (w.key for w in o.workloads)) == []
    assert unreleased_claims(None, o.nodes, ()) == []


def test_the_index_reads_every_pod_as_the_state_does() -> None:
    """`DraIndex` (built once per snapshot) answers per pod: the devices of its allocated
    claims, none for a pod waiting on a template or one it does not know; and a node's devices
    as `DraState` lists them."""
    o = observe(cluster())
    index = DraIndex(o.dra)
    assert [r.ref for r in index.pod_devices("team-a", "trainer-0")] == [
        "gpu.nvidia.com/n1/gpu-1",
        "gpu.nvidia.com/n1/gpu-2",
    ]
    assert index.pod_devices("team-a", "waiting-0") == []
    assert index.pod_devices("team-a", "nobody") == []
    assert list(index.devices("n1").values()) == o.dra.devices("n1")


@pytest.mark.parametrize("gated", [False, True])
def test_a_released_pod_not_bound_yet_holds_what_its_allocated_claim_names(gated) -> None:
    """gpupool writes a DynamicMIG partition's allocation at admission, before the gate goes
    (apply/handlers/dra_allocate.py), and kube-scheduler reserves and binds the pod after: in
    between, the released pod holds the devices its claim names on the allocation's node
    (else the planner would count them free and plan them again). A pod still gated holds
    nothing (its claim's allocation is fenced as unreleased until it is released)."""
    c = cluster()
    waiting = c.pods[1]
    waiting["status"] = {
        "phase": "Pending",
        "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "waiting-0-gpus-y2"}],
    }
    if gated:
        waiting["spec"]["schedulingGates"] = [{"name": "gpupool.io/admission"}]
    else:  # admitted by gpupool to n1
        waiting["metadata"]["annotations"] = {C.ADMITTED_ANN: "n1", C.INTENDED_GPUS_ANN: "0"}
        waiting["metadata"]["managedFields"] = [managed(C.ADMITTED_ANN, C.INTENDED_GPUS_ANN)]
    c.dra["resourceclaims"].append(claim("team-a", "waiting-0-gpus-y2", ["gpu-3"], "n1", []))
    o = observe(c)
    assert DraIndex(o.dra).claim_node("team-a", "waiting-0") == "n1"
    w = {w.name: w for w in o.workloads}["waiting-0"]
    # admitted: the allocated card 3, not the intended card 0 (a guess before the allocation)
    assert [a.gpu for a in w.allocations] == ([] if gated else [3])


def test_a_claim_allocated_for_a_released_pod_not_bound_yet_is_not_unreleased() -> None:
    """gpupool's DynamicMIG allocation write comes before kube-scheduler reserves the claim:
    reserved for nobody, but the pod using it is admitted (placed), so it is that pod's."""
    c = cluster()
    c.dra["resourceclaims"].append(claim("team-a", "waiting-0-gpus-y2", ["gpu-3"], "n1", []))
    c.pods[1]["status"] = {
        "phase": "Pending",
        "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "waiting-0-gpus-y2"}],
    }
    o = observe(c)
    keys = [w.key for w in o.workloads]
    (u,) = unreleased_claims(o.dra, o.nodes, keys)
    assert u.claim == "team-a/waiting-0-gpus-y2"
    assert unreleased_claims(o.dra, o.nodes, keys, ["team-a/waiting-0"]) == []


def test_a_claim_reserved_for_a_pod_still_gated_is_unreleased() -> None:
    """`spec.dra.admission: allocate` reserves the claim for its pod with the allocation,
    before the gate goes: while the gate holds the pod it holds no card in the snapshot, so the
    claim counts as unreleased (its cards fenced) though a live pod is in its reservation."""
    c = cluster()
    c.dra["resourceclaims"].append(
        claim("team-a", "waiting-0-gpus-y2", ["gpu-3"], "n1", ["waiting-0"])
    )
    c.pods[1]["spec"]["schedulingGates"] = [{"name": "gpupool.io/admission"}]
    c.pods[1]["status"] = {
        "phase": "Pending",
        "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "waiting-0-gpus-y2"}],
    }
    o = observe(c)
    keys = [w.key for w in o.workloads]
    assert unreleased_claims(o.dra, o.nodes, keys) == []  # a live pod holds it
    (u,) = unreleased_claims(o.dra, o.nodes, keys, gated=["team-a/waiting-0"])
    assert (u.claim, u.reserved_for) == ("team-a/waiting-0-gpus-y2", ("waiting-0",))
    assert [a.gpu for a in u.cards] == [3]
