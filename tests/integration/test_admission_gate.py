"""deploy/admission-gate.yaml on the real API server and scheduler (tests/cluster, v1.37.2).

The MutatingAdmissionPolicy gates every GPU pod created in a namespace labelled for gpupool's
admission; pods of other schedulers, pods created bound (spec.nodeName), CPU pods and pods of
other namespaces are left alone; a gate already there (Kueue's) is kept. Then the admission
itself: the one strategic-merge patch gpupool sends (node affinity on metadata.name, the gate's
removal, an annotation) is accepted on a gated pod and kube-scheduler binds the pod to the named
node; the same affinity on a pod that is no longer gated is refused (the API server lets only
gated pods tighten their node affinity: k8s.io/kubernetes pkg/apis/core/validation/
validation.go, ValidatePodUpdate, "podIsGated" is the OLD pod's gates), which is why the affinity
and the gate's removal go in one patch. A pod with required node-affinity terms of its own is
admitted by adding the node's matchFields to each of its terms (replacing them is refused).
"""

from __future__ import annotations

import pytest
from kubernetes import client

from reconciler.conventions import (
    ADMISSION_GATE,
    ADMITTED_ANN,
    GPU_RESOURCE,
    POOL_LABEL,
    SHARED_RESOURCE,
    mig_resource,
)
from tests.support.wait import wait_for

from .gating import gate_names, gated_namespace, pod
from .harness import add_gpu_node
from .world import World

pytestmark = pytest.mark.kube

# Kueue's gate for plain pods (kubernetes-sigs/kueue pkg/controller/jobs/pod/constants,
# SchedulingGateName); not a key gpupool owns, so it is not in reconciler/conventions.py.
KUEUE_GATE = "kueue.x-k8s.io/admission"
SMP = "application/strategic-merge-patch+json"


# ---------------------------------------------------------------- helpers
def scheduled_condition(kube: World, ns: str, name: str) -> client.V1PodCondition | None:
    p = kube.core.read_namespaced_pod(name, ns)
    return next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None)


# ---------------------------------------------------------------- gated at creation
GATED = {  # pod name -> what it asks for
    "whole": {"limits": {GPU_RESOURCE: "1"}},
    "whole-requests-and-limits": {
        "limits": {GPU_RESOURCE: "2"},
        "requests": {GPU_RESOURCE: "2"},
    },
    "mig": {"limits": {mig_resource("1g.10gb"): "1"}},
    "shared": {"limits": {SHARED_RESOURCE: "1"}},
    "init-only": {"init_limits": {GPU_RESOURCE: "1"}, "limits": {"cpu": "1"}},
}


def test_gpu_pods_in_a_gated_namespace_are_created_gated(kube: World):
    ns = gated_namespace(kube)
    created = {
        name: gate_names(kube.core.create_namespaced_pod(ns, pod(name, **asks)))
        for name, asks in GATED.items()
    }
    assert created == {name: [ADMISSION_GATE] for name in GATED}
    # kube-scheduler saw each one and left it Pending because of the gate
    for name in GATED:
        cond = wait_for(
            f"kube-scheduler to set a PodScheduled condition on {ns}/{name}",
            lambda name=name: scheduled_condition(kube, ns, name),
            interval=0.1,
        )
        assert (cond.status, cond.reason) == ("False", "SchedulingGated"), name
        p = kube.core.read_namespaced_pod(name, ns)
        assert p.spec.node_name is None and p.status.phase == "Pending", name


# ---------------------------------------------------------------- left alone
def test_pods_the_gate_leaves_alone(kube: World):
    node, pool = "admgate-free-0", "admgate-free"
    add_gpu_node(kube, node, pool=pool, count=2, state=False)
    gated = gated_namespace(kube)
    plain = kube.new_namespace("ungated")
    cases = {  # (namespace, pod) -> why no gate
        (gated, "cpu-only"): pod("cpu-only", limits={"cpu": "1"}, pool=pool),
        (gated, "no-resources"): pod("no-resources", init_limits={}, pool=pool),
        (gated, "other-scheduler"): pod(
            "other-scheduler", limits={GPU_RESOURCE: "1"}, scheduler="other-scheduler", pool=pool
        ),
        (gated, "created-bound"): pod("created-bound", limits={GPU_RESOURCE: "1"}, node=node),
        (plain, "unlabelled-namespace"): pod(
            "unlabelled-namespace", limits={GPU_RESOURCE: "1"}, pool=pool
        ),
    }
    created = {
        key: gate_names(kube.core.create_namespaced_pod(key[0], body))
        for key, body in cases.items()
    }
    assert created == {key: [] for key in cases}
    # the default scheduler places what is its own; the other scheduler's pod stays unbound
    for ns, name in [(gated, "cpu-only"), (plain, "unlabelled-namespace")]:
        wait_for(
            f"{ns}/{name} to be scheduled",
            lambda ns=ns, name=name: kube.core.read_namespaced_pod(name, ns).spec.node_name,
            interval=0.1,
        )
        assert kube.core.read_namespaced_pod(name, ns).spec.node_name == node
    assert kube.core.read_namespaced_pod("other-scheduler", gated).spec.node_name is None


# ---------------------------------------------------------------- other gates
def test_gates_already_there_are_kept(kube: World):
    ns = gated_namespace(kube)
    cases = {  # pod -> (gates it is created with, gates it has once created)
        "kueue": ((KUEUE_GATE,), [KUEUE_GATE, ADMISSION_GATE]),  # merged by name, appended
        "already-gated": ((ADMISSION_GATE,), [ADMISSION_GATE]),
        "both": ((ADMISSION_GATE, KUEUE_GATE), [ADMISSION_GATE, KUEUE_GATE]),
    }
    created = {
        name: gate_names(
            kube.core.create_namespaced_pod(ns, pod(name, limits={GPU_RESOURCE: "1"}, gates=given))
        )
        for name, (given, _) in cases.items()
    }
    assert created == {name: want for name, (_, want) in cases.items()}
    # gpupool admitting a pod Kueue still holds removes only its own gate: the pod stays gated
    kube.core.patch_namespaced_pod(
        "kueue",
        ns,
        {"spec": {"schedulingGates": [{"$patch": "delete", "name": ADMISSION_GATE}]}},
        _content_type=SMP,
    )
    assert gate_names(kube.core.read_namespaced_pod("kueue", ns)) == [KUEUE_GATE]


# ---------------------------------------------------------------- admission
def admission_patch(node: str, terms: list[dict] | None = None) -> dict:
    """What gpupool sends to admit a gated pod to `node`, in one strategic-merge patch.
    schedulingGates is merged by `name` (+patchMergeKey=name in k8s.io/api core/v1/types.go),
    so `$patch: delete` removes only gpupool's gate. NodeSelector and its nodeSelectorTerms
    are atomic (+structType=atomic, +listType=atomic), so the patch replaces the whole list:
    with `terms` (the pod's own required terms) each of them gets the node's matchFields added,
    the only change the API server allows to a gated pod's non-empty terms."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    new_terms = [{**t, "matchFields": [*t.get("matchFields", []), pin]} for t in terms or [{}]]
    return {
        "metadata": {"annotations": {ADMITTED_ANN: node}},
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": new_terms
                    }
                }
            },
            "schedulingGates": [{"$patch": "delete", "name": ADMISSION_GATE}],
        },
    }


def test_the_admission_patch_binds_the_pod_to_the_named_node(kube: World):
    pool = "admgate-admit"
    nodes = ["admgate-admit-0", "admgate-admit-1"]
    for n in nodes:
        add_gpu_node(kube, n, pool=pool, count=2, state=False)
    ns = gated_namespace(kube)
    kube.core.create_namespaced_pod(ns, pod("train", limits={GPU_RESOURCE: "2"}, pool=pool))
    wait_for(
        "the pod to be reported SchedulingGated",
        lambda: (c := scheduled_condition(kube, ns, "train")) and c.reason == "SchedulingGated",
        interval=0.1,
    )
    target = nodes[1]
    patched = kube.core.patch_namespaced_pod(
        "train", ns, admission_patch(target), _content_type=SMP
    )
    assert gate_names(patched) == []
    assert patched.metadata.annotations[ADMITTED_ANN] == target
    bound = wait_for(
        "kube-scheduler to bind the admitted pod",
        lambda: kube.core.read_namespaced_pod("train", ns).spec.node_name,
        interval=0.1,
    )
    assert bound == target
    wait_for(
        f"the kubelet of {target} to run the pod",
        lambda: kube.core.read_namespaced_pod("train", ns).status.phase == "Running",
        interval=0.1,
    )


def test_node_affinity_on_a_pod_no_longer_gated_is_refused(kube: World):
    """Removing the gate first and pinning the node afterwards does not work: once the pod is
    ungated its node affinity is immutable (422 Invalid), and meanwhile the scheduler could
    have placed it anywhere. Its node selector names a pool without nodes, so it stays
    Pending."""
    ns = gated_namespace(kube)
    kube.core.create_namespaced_pod(
        ns, pod("late", limits={GPU_RESOURCE: "1"}, pool="admgate-no-nodes")
    )
    kube.core.patch_namespaced_pod(
        "late",
        ns,
        {"spec": {"schedulingGates": [{"$patch": "delete", "name": ADMISSION_GATE}]}},
        _content_type=SMP,
    )
    wait_for(
        "kube-scheduler to try the ungated pod",
        lambda: (c := scheduled_condition(kube, ns, "late")) and c.reason == "Unschedulable",
        interval=0.1,
    )
    affinity_only = admission_patch("admgate-admit-0")
    del affinity_only["spec"]["schedulingGates"]
    with pytest.raises(client.ApiException) as refused:
        kube.core.patch_namespaced_pod("late", ns, affinity_only, _content_type=SMP)
    assert refused.value.status == 422, refused.value.body
    assert '"reason":"Invalid"' in refused.value.body.replace(" ", "")
    assert "pod updates may not change fields" in refused.value.body, refused.value.body
    p = kube.core.read_namespaced_pod("late", ns)
    assert p.spec.affinity is None and p.spec.node_name is None


def test_a_pod_with_its_own_node_affinity_is_admitted_by_adding_to_its_terms(kube: World):
    """A gated pod that has required node-affinity terms of its own: replacing them with the
    node's term is refused (422: "no additions/deletions to non-empty NodeSelectorTerms list",
    or "only additions are allowed" within a term; validateNodeAffinityMutation in
    k8s.io/kubernetes pkg/apis/core/validation/validation.go); adding the node's matchFields to
    each of its terms is accepted, and the scheduler binds it there."""
    pool = "admgate-own"
    nodes = ["admgate-own-0", "admgate-own-1"]
    for n in nodes:
        add_gpu_node(kube, n, pool=pool, count=2, state=False)
    ns = gated_namespace(kube)
    own = [{"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [pool]}]}]
    body = pod("own-affinity", limits={GPU_RESOURCE: "1"})
    body["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": own}
        }
    }
    kube.core.create_namespaced_pod(ns, body)
    target = nodes[1]
    with pytest.raises(client.ApiException) as refused:
        kube.core.patch_namespaced_pod(
            "own-affinity", ns, admission_patch(target), _content_type=SMP
        )
    assert refused.value.status == 422, refused.value.body
    assert "only additions are allowed" in refused.value.body, refused.value.body
    assert gate_names(kube.core.read_namespaced_pod("own-affinity", ns)) == [ADMISSION_GATE]
    kube.core.patch_namespaced_pod(
        "own-affinity", ns, admission_patch(target, own), _content_type=SMP
    )
    bound = wait_for(
        "kube-scheduler to bind the admitted pod",
        lambda: kube.core.read_namespaced_pod("own-affinity", ns).spec.node_name,
        interval=0.1,
    )
    assert bound == target
