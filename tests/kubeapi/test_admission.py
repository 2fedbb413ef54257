"""PriorityClass and ResourceQuota admission."""

import pytest

from .util import eventually, expect_status, pod

pytestmark = pytest.mark.kube


def _pc(name, value, **extra):
    return {"metadata": {"name": name}, "value": value, **extra}


def test_missing_priority_class_is_forbidden(kube):
    body = expect_status(403, kube.core.create_namespaced_pod, kube.namespace,
                         pod("p", priority_class="no-such-class"))
    assert body["reason"] == "Forbidden"
    assert "no PriorityClass with name no-such-class was found" in body["message"]


def test_priority_is_resolved_from_the_class(kube):
    name = kube.unique("train-low")
    kube.scheduling.create_priority_class(_pc(name, 1000, preemptionPolicy="Never"))
    kube.cleanup(lambda: kube.scheduling.delete_priority_class(name))
    created = kube.core.create_namespaced_pod(kube.namespace, pod("p", priority_class=name))
    assert created.spec.priority == 1000
    assert created.spec.preemption_policy == "Never"
    bad = pod("q", priority_class=name)
    bad["spec"]["priority"] = 5
    body = expect_status(403, kube.core.create_namespaced_pod, kube.namespace, bad)
    assert "must not be provided in pod spec" in body["message"]


def test_global_default_priority_class(kube):
    server = kube.require_fake()  # a global default would affect a shared cluster
    kube.scheduling.create_priority_class(_pc("default-serve", 500, globalDefault=True))
    created = kube.core.create_namespaced_pod(kube.namespace, pod("p"))
    assert (created.spec.priority_class_name, created.spec.priority) == ("default-serve", 500)
    assert server is not None


def test_system_priority_classes_exist(kube):
    names = {pc.metadata.name for pc in kube.scheduling.list_priority_class().items}
    assert {"system-cluster-critical", "system-node-critical"} <= names


def test_user_priority_value_limit(kube):
    body = expect_status(422, kube.scheduling.create_priority_class, _pc(kube.unique("huge"), 2_000_000_000))
    assert "maximum allowed value" in body["message"]


def _quota(name, hard, **spec):
    return {"metadata": {"name": name}, "spec": {"hard": hard, **spec}}


def test_gpu_quota_admission_and_usage(kube):
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_resource_quota(ns, _quota("gpus", {"requests.nvidia.com/gpu": "8", "pods": "3"}))
    # a cluster refuses pods until the quota controller has filled in status.hard
    eventually(lambda: v1.create_namespaced_pod(ns, pod("a", gpus=4)))
    v1.create_namespaced_pod(ns, pod("b", gpus=3))
    quota = v1.read_namespaced_resource_quota("gpus", ns)
    assert quota.status.used == {"requests.nvidia.com/gpu": "7", "pods": "2"}
    assert quota.status.hard == {"requests.nvidia.com/gpu": "8", "pods": "3"}
    body = expect_status(403, v1.create_namespaced_pod, ns, pod("c", gpus=2))
    assert body["message"] == (
        'pods "c" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=2, '
        "used: requests.nvidia.com/gpu=7, limited: requests.nvidia.com/gpu=8")
    v1.create_namespaced_pod(ns, pod("c", gpus=1))
    body = expect_status(403, v1.create_namespaced_pod, ns, pod("d"))
    assert "exceeded quota: gpus, requested: pods=1, used: pods=3, limited: pods=3" in body["message"]
    v1.delete_namespaced_pod("a", ns)
    eventually(lambda: v1.create_namespaced_pod(ns, pod("d", gpus=4)))  # released asynchronously
    assert v1.read_namespaced_resource_quota("gpus", ns).status.used["requests.nvidia.com/gpu"] == "8"


def test_finished_pods_release_quota(kube):
    server = kube.require_fake()
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_resource_quota(ns, _quota("gpus", {"requests.nvidia.com/gpu": "4"}))
    v1.create_namespaced_pod(ns, pod("a", gpus=4))
    expect_status(403, v1.create_namespaced_pod, ns, pod("b", gpus=4))
    server.cluster.add_node("n1")
    server.cluster.set_pod_status(ns, "a", "Succeeded", ready=False, node="n1")
    v1.create_namespaced_pod(ns, pod("b", gpus=4))


def test_quota_scoped_to_priority_class(kube):
    v1, ns = kube.core, kube.namespace
    low = kube.unique("low")
    kube.scheduling.create_priority_class(_pc(low, 10))
    kube.cleanup(lambda: kube.scheduling.delete_priority_class(low))
    v1.create_namespaced_resource_quota(ns, _quota(
        "low-gpus", {"requests.nvidia.com/gpu": "2"},
        scopeSelector={"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                             "values": [low]}]}))
    eventually(lambda: v1.create_namespaced_pod(ns, pod("low-a", gpus=2, priority_class=low)))
    expect_status(403, v1.create_namespaced_pod, ns, pod("low-b", gpus=1, priority_class=low))
    v1.create_namespaced_pod(ns, pod("unscoped", gpus=8))


def test_quota_on_cpu_requires_requests(kube):
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_resource_quota(ns, _quota("cpu", {"requests.cpu": "4"}))
    eventually(lambda: v1.create_namespaced_pod(ns, pod("p", cpu="500m")))
    body = expect_status(403, v1.create_namespaced_pod, ns, pod("q"))
    assert "must specify requests.cpu" in body["message"]
    assert v1.read_namespaced_resource_quota("cpu", ns).status.used == {"requests.cpu": "500m"}


def test_object_count_quota(kube):
    v1, ns = kube.core, kube.namespace
    # every namespace already holds kube-root-ca.crt, as in a cluster
    v1.create_namespaced_resource_quota(ns, _quota("cms", {"count/configmaps": "2"}))
    eventually(lambda: v1.create_namespaced_config_map(ns, {"metadata": {"name": "one"}}))
    expect_status(403, v1.create_namespaced_config_map, ns, {"metadata": {"name": "two"}})
