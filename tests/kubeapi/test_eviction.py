"""Eviction subresource and PodDisruptionBudgets."""

import time

import pytest
from kubernetes import client

from .server import FakeKubeApiServer
from .util import expect_status, pod

pytestmark = pytest.mark.kube


def _eviction(name, ns):
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}


def _pdb(name, selector, **spec):
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": selector}, **spec}}


@pytest.fixture
def running(kube):
    """Create running, ready pods labelled app=train (the fake stands in for scheduler + kubelet)."""
    server = kube.require_fake()
    server.cluster.add_node("n1")

    def make(*names, ready=True, labels=None, owner=None):
        for name in names:
            body = pod(name, labels or {"app": "train"})
            if owner is not None:
                body["metadata"]["ownerReferences"] = [{
                    "apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner.metadata.name,
                    "uid": owner.metadata.uid, "controller": True}]
            kube.core.create_namespaced_pod(kube.namespace, body)
            server.cluster.set_pod_status(kube.namespace, name, "Running", ready=ready, node="n1")

    return make


def test_eviction_without_pdb_deletes_the_pod(kube, running):
    running("a")
    kube.core.create_namespaced_pod_eviction("a", kube.namespace, _eviction("a", kube.namespace))
    expect_status(404, kube.core.read_namespaced_pod, "a", kube.namespace)


def test_pdb_min_available_blocks_with_429(kube, running):
    v1, ns = kube.core, kube.namespace
    running("a", "b")
    kube.policy.create_namespaced_pod_disruption_budget(ns, _pdb("keep2", {"app": "train"}, minAvailable=2))
    pdb = kube.policy.read_namespaced_pod_disruption_budget("keep2", ns)
    assert (pdb.status.current_healthy, pdb.status.desired_healthy, pdb.status.disruptions_allowed) == (2, 2, 0)
    body = expect_status(429, v1.create_namespaced_pod_eviction, "a", ns, _eviction("a", ns))
    assert body["reason"] == "TooManyRequests"
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "needs 2 healthy pods and has 2 currently" in body["details"]["causes"][0]["message"]
    assert v1.read_namespaced_pod("a", ns).metadata.deletion_timestamp is None


def test_pdb_allows_one_disruption_then_blocks(kube, running):
    v1, ns = kube.core, kube.namespace
    sts = kube.apps.create_namespaced_stateful_set(ns, {
        "metadata": {"name": "train"},
        "spec": {"replicas": 4, "serviceName": "train", "selector": {"matchLabels": {"app": "train"}},
                 "template": {"metadata": {"labels": {"app": "train"}},
                              "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}})
    running("a", "b", "c", "d", owner=sts)
    kube.policy.create_namespaced_pod_disruption_budget(
        ns, _pdb("quarter", {"app": "train"}, maxUnavailable="25%"))
    status = kube.policy.read_namespaced_pod_disruption_budget("quarter", ns).status
    assert (status.expected_pods, status.disruptions_allowed) == (4, 1)
    v1.create_namespaced_pod_eviction("a", ns, _eviction("a", ns))
    # expectedPods comes from the StatefulSet's replicas, not from the pods left
    status = kube.policy.read_namespaced_pod_disruption_budget("quarter", ns).status
    assert (status.expected_pods, status.current_healthy, status.disruptions_allowed) == (4, 3, 0)
    expect_status(429, v1.create_namespaced_pod_eviction, "b", ns, _eviction("b", ns))
    # the controller (here: the test) brought a replacement up: one disruption is allowed again
    running("a2", owner=sts)
    v1.create_namespaced_pod_eviction("b", ns, _eviction("b", ns))


def test_unready_and_pending_pods_are_evictable(kube, running):
    v1, ns = kube.core, kube.namespace
    running("a", "b")
    running("sick", ready=False)
    v1.create_namespaced_pod(ns, pod("pending", {"app": "train"}))
    kube.policy.create_namespaced_pod_disruption_budget(ns, _pdb("all", {"app": "train"}, minAvailable="100%"))
    expect_status(429, v1.create_namespaced_pod_eviction, "a", ns, _eviction("a", ns))
    v1.create_namespaced_pod_eviction("pending", ns, _eviction("pending", ns))
    # IfHealthyBudget: an unready pod may go only while currentHealthy (2) >= desiredHealthy (3)
    expect_status(429, v1.create_namespaced_pod_eviction, "sick", ns, _eviction("sick", ns))
    kube.policy.patch_namespaced_pod_disruption_budget(
        "all", ns, {"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}})
    v1.create_namespaced_pod_eviction("sick", ns, _eviction("sick", ns))


def test_two_pdbs_selecting_a_pod_is_an_error(kube, running):
    running("a")
    for name in ("one", "two"):
        kube.policy.create_namespaced_pod_disruption_budget(
            kube.namespace, _pdb(name, {"app": "train"}, maxUnavailable=1))
    expect_status(500, kube.core.create_namespaced_pod_eviction, "a", kube.namespace,
                  _eviction("a", kube.namespace))


def test_eviction_of_pod_with_finalizer_marks_it_terminating(kube, running):
    v1, ns = kube.core, kube.namespace
    running("a")
    v1.patch_namespaced_pod("a", ns, {"metadata": {"finalizers": ["gpupool.io/drain"]}})
    v1.create_namespaced_pod_eviction("a", ns, _eviction("a", ns))
    assert v1.read_namespaced_pod("a", ns).metadata.deletion_timestamp is not None


def test_eviction_of_missing_pod_is_404(kube):
    expect_status(404, kube.core.create_namespaced_pod_eviction, "ghost", kube.namespace,
                  _eviction("ghost", kube.namespace))


def test_graceful_termination_keeps_evicted_pod_until_the_kubelet_stand_in_removes_it():
    with FakeKubeApiServer(pod_termination_seconds=0.5) as server:
        api = server.api_client()
        v1 = client.CoreV1Api(api)
        server.cluster.add_node("n1")
        v1.create_namespaced_pod("default", pod("a", gpus=8))
        server.cluster.set_pod_status("default", "a", "Running", node="n1")
        v1.create_namespaced_pod_eviction("a", "default", _eviction("a", "default"))
        terminating = v1.read_namespaced_pod("a", "default")
        assert terminating.metadata.deletion_timestamp is not None
        assert terminating.metadata.deletion_grace_period_seconds == 30
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if not v1.list_namespaced_pod("default", field_selector="metadata.name=a").items:
                break
            time.sleep(0.05)
        else:
            pytest.fail("terminating pod was never removed")
        # gracePeriodSeconds=0 removes at once; unscheduled pods go at once too
        v1.create_namespaced_pod("default", pod("b"))
        server.cluster.set_pod_status("default", "b", "Running", node="n1")
        v1.delete_namespaced_pod("b", "default", grace_period_seconds=0)
        v1.create_namespaced_pod("default", pod("c"))
        v1.delete_namespaced_pod("c", "default")
        assert not v1.list_namespaced_pod("default").items
        api.close()
