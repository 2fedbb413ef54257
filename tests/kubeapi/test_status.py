"""/status and /scale subresources."""

import pytest

from .util import pod

pytestmark = pytest.mark.kube


def _deployment(name="d", replicas=1):
    return {"metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}}


def test_main_update_ignores_status_and_status_update_ignores_spec(kube):
    kube.require_fake()  # a real deployment controller writes status concurrently
    apps, ns = kube.apps, kube.namespace
    dep = apps.create_namespaced_deployment(ns, _deployment())
    dep.status = {"replicas": 5}
    dep.spec.replicas = 2
    dep = apps.replace_namespaced_deployment("d", ns, dep)
    assert dep.spec.replicas == 2 and not (dep.status and dep.status.replicas)
    dep.status = {"replicas": 2, "readyReplicas": 2}
    dep.spec.replicas = 7
    dep = apps.replace_namespaced_deployment_status("d", ns, dep)
    assert dep.status.replicas == 2 and dep.status.ready_replicas == 2
    assert dep.spec.replicas == 2
    assert dep.metadata.generation == 2  # only the spec change bumped it


def test_pod_status_patch(kube):
    kube.require_fake()  # a real kubelet owns pod status
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_pod(ns, pod("p"))
    got = v1.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Running"}})
    assert got.status.phase == "Running"
    got = v1.patch_namespaced_pod("p", ns, {"status": {"phase": "Failed"}})
    assert got.status.phase == "Running"


def test_node_status_subresource(kube):
    server = kube.require_fake()
    v1 = kube.core
    server.cluster.add_node("gpu-1", gpus=8, labels={"gpupool.io/pool": "a"})
    node = v1.read_node("gpu-1")
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    v1.patch_node_status("gpu-1", {"status": {"allocatable": {"nvidia.com/gpu": "7"}}})
    v1.patch_node("gpu-1", {"spec": {"unschedulable": True}, "status": {"allocatable": {"nvidia.com/gpu": "0"}}})
    node = v1.read_node("gpu-1")
    assert node.status.allocatable["nvidia.com/gpu"] == "7"
    assert node.spec.unschedulable is True
    assert [n.metadata.name for n in v1.list_node(field_selector="spec.unschedulable=true").items] == ["gpu-1"]


@pytest.mark.parametrize("kind", ["deployment", "stateful_set"])
def test_scale_subresource(kube, kind):
    apps, ns = kube.apps, kube.namespace
    body = _deployment("w", 1)
    if kind == "stateful_set":
        body["spec"]["serviceName"] = "w"
    getattr(apps, f"create_namespaced_{kind}")(ns, body)
    scale = getattr(apps, f"read_namespaced_{kind}_scale")("w", ns)
    assert scale.spec.replicas == 1 and scale.status.selector == "app=w"
    scale = getattr(apps, f"patch_namespaced_{kind}_scale")("w", ns, {"spec": {"replicas": 3}})
    assert scale.spec.replicas == 3
    assert getattr(apps, f"read_namespaced_{kind}")("w", ns).spec.replicas == 3
    scale.spec.replicas = 0
    getattr(apps, f"replace_namespaced_{kind}_scale")("w", ns, scale)
    assert getattr(apps, f"read_namespaced_{kind}")("w", ns).spec.replicas == 0


def test_json_patch_extended_resource_on_node_status(kube):
    """The device-plugin style update: JSON patch with an escaped '/' in the resource name."""
    server = kube.require_fake()
    server.cluster.add_node("gpu-2", gpus=8)
    node = kube.core.patch_node_status("gpu-2", [
        {"op": "add", "path": "/status/capacity/nvidia.com~1mig-1g.10gb", "value": "7"},
        {"op": "replace", "path": "/status/allocatable/nvidia.com~1gpu", "value": "1"},
    ])
    assert node.status.capacity["nvidia.com/mig-1g.10gb"] == "7"
    assert node.status.allocatable["nvidia.com/gpu"] == "1"
