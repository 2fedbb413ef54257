"""CRUD, resourceVersion semantics, selectors and validation, through the official client."""

import pytest
from kubernetes import client

from .util import eventually, expect_status, pod, raw

pytestmark = pytest.mark.kube


def test_create_get_list_delete_pod(kube):
    v1, ns = kube.core, kube.namespace
    created = v1.create_namespaced_pod(ns, pod("a", {"app": "x"}))
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert int(created.metadata.resource_version) > 0
    assert created.status.phase == "Pending"
    got = v1.read_namespaced_pod("a", ns)
    assert got.metadata.uid == created.metadata.uid
    listed = v1.list_namespaced_pod(ns)
    assert [p.metadata.name for p in listed.items] == ["a"]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)
    deleted = v1.delete_namespaced_pod("a", ns, grace_period_seconds=0)
    assert deleted.metadata.name == "a"
    if kube.is_fake:
        expect_status(404, v1.read_namespaced_pod, "a", ns)


def test_already_exists_and_not_found_status(kube):
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    body = expect_status(409, v1.create_namespaced_config_map, ns,
                         {"metadata": {"name": "cm"}, "data": {}})
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'configmaps "cm" already exists'
    body = expect_status(404, v1.read_namespaced_config_map, "nope", ns)
    assert body["reason"] == "NotFound"
    assert body["details"] == {"name": "nope", "kind": "configmaps"}
    body = expect_status(404, kube.coordination.read_namespaced_lease, "nope", ns)
    assert body["message"] == 'leases.coordination.k8s.io "nope" not found'


def test_generate_name(kube):
    cm = kube.core.create_namespaced_config_map(
        kube.namespace, {"metadata": {"generateName": "gen-"}, "data": {}})
    assert cm.metadata.name.startswith("gen-") and len(cm.metadata.name) == len("gen-") + 5


def test_stale_update_conflicts_and_noop_keeps_rv(kube):
    v1, ns = kube.core, kube.namespace
    cm = v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    cm.data["a"] = "2"
    updated = v1.replace_namespaced_config_map("cm", ns, cm)
    assert int(updated.metadata.resource_version) > int(cm.metadata.resource_version)
    cm.data["a"] = "3"  # still carries the old resourceVersion
    body = expect_status(409, v1.replace_namespaced_config_map, "cm", ns, cm)
    assert body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    same = v1.replace_namespaced_config_map("cm", ns, updated)
    assert same.metadata.resource_version == updated.metadata.resource_version


def test_generation_bumps_on_spec_not_metadata(kube):
    apps, ns = kube.apps, kube.namespace
    dep = apps.create_namespaced_deployment(ns, {
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}},
                              "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}})
    assert dep.metadata.generation == 1
    dep = apps.patch_namespaced_deployment("d", ns, {"metadata": {"labels": {"x": "y"}}})
    assert dep.metadata.generation == 1
    dep = apps.patch_namespaced_deployment("d", ns, {"spec": {"replicas": 3}})
    assert dep.metadata.generation == 2


def test_list_across_namespaces(kube):
    kube.require_fake()
    v1 = kube.core
    v1.create_namespace({"metadata": {"name": "other"}})
    v1.create_namespaced_pod(kube.namespace, pod("a"))
    v1.create_namespaced_pod("other", pod("b"))
    names = sorted((p.metadata.namespace, p.metadata.name) for p in v1.list_pod_for_all_namespaces().items)
    assert names == [(kube.namespace, "a"), ("other", "b")]


def test_label_selectors(kube):
    v1, ns = kube.core, kube.namespace
    for name, labels in [("a", {"tier": "train", "gpu": "a100"}), ("b", {"tier": "serve"}),
                         ("c", {"tier": "train", "gpu": "h100"}), ("d", {})]:
        v1.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})

    def names(sel):
        items = v1.list_namespaced_config_map(ns, label_selector=sel).items
        return sorted(c.metadata.name for c in items if c.metadata.name != "kube-root-ca.crt")

    assert names("tier=train") == ["a", "c"]
    assert names("tier==train,gpu=h100") == ["c"]
    assert names("tier!=train") == ["b", "d"]
    assert names("tier in (serve, train),gpu notin (a100)") == ["b", "c"]
    assert names("gpu") == ["a", "c"]
    assert names("!gpu") == ["b", "d"]
    expect_status(400, v1.list_namespaced_config_map, ns, label_selector="tier in (a")


def test_field_selectors(kube):
    v1, ns = kube.core, kube.namespace
    server = kube.require_fake()
    server.cluster.add_node("n1")
    v1.create_namespaced_pod(ns, pod("on-n1"))
    v1.create_namespaced_pod(ns, pod("pending"))
    server.cluster.set_pod_status(ns, "on-n1", "Running", node="n1")

    def names(sel):
        return sorted(p.metadata.name for p in v1.list_namespaced_pod(ns, field_selector=sel).items)

    assert names("spec.nodeName=n1") == ["on-n1"]
    assert names("spec.nodeName=") == ["pending"]
    assert names("status.phase=Running") == ["on-n1"]
    assert names("status.phase!=Running,metadata.name=pending") == ["pending"]
    assert names(f"metadata.namespace={ns}") == ["on-n1", "pending"]
    body = expect_status(400, v1.list_namespaced_pod, ns, field_selector="spec.bogus=1")
    assert "field label not supported" in body["message"]


def test_pagination(kube):
    v1, ns = kube.core, kube.namespace
    for i in range(5):
        v1.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i}", "labels": {"page": "y"}}})
    page = v1.list_namespaced_config_map(ns, limit=2, label_selector="page=y")
    seen = [c.metadata.name for c in page.items]
    assert page.metadata.remaining_item_count == 3
    while page.metadata._continue:
        page = v1.list_namespaced_config_map(ns, limit=2, label_selector="page=y",
                                             _continue=page.metadata._continue)
        seen += [c.metadata.name for c in page.items]
    assert seen == [f"cm-{i}" for i in range(5)]


def test_delete_preconditions_and_collection(kube):
    v1, ns = kube.core, kube.namespace
    cm = v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm", "labels": {"x": "1"}}})
    v1.patch_namespaced_config_map("cm", ns, {"data": {"a": "b"}})
    body = expect_status(409, v1.delete_namespaced_config_map, "cm", ns, body=client.V1DeleteOptions(
        preconditions=client.V1Preconditions(resource_version=cm.metadata.resource_version)))
    assert "Precondition failed" in body["message"]
    status = v1.delete_namespaced_config_map("cm", ns, propagation_policy="Foreground")
    assert status["status"] == "Success"
    for i in range(3):
        v1.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i}", "labels": {"del": str(i % 2)}}})
    v1.delete_collection_namespaced_config_map(ns, label_selector="del=0")
    assert sorted(c.metadata.name for c in v1.list_namespaced_config_map(ns, label_selector="del").items) == ["c1"]


def test_finalizers_delay_deletion(kube):
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm", "finalizers": ["gpupool.io/hold"]}})
    v1.delete_namespaced_config_map("cm", ns)
    cm = v1.read_namespaced_config_map("cm", ns)
    assert cm.metadata.deletion_timestamp is not None
    v1.patch_namespaced_config_map("cm", ns, {"metadata": {"finalizers": None}})
    expect_status(404, v1.read_namespaced_config_map, "cm", ns)


def test_owner_references_cascade(kube):
    v1, ns = kube.core, kube.namespace

    def make(name, *owners):
        refs = [{"apiVersion": "v1", "kind": "ConfigMap", "name": o.metadata.name,
                 "uid": o.metadata.uid} for o in owners]
        return v1.create_namespaced_config_map(ns, {"metadata": {"name": name, "ownerReferences": refs}})

    owner, other, keeper = make("owner"), make("other"), make("keeper")
    make("child", owner)
    make("shared", owner, other)
    make("kept", keeper)
    v1.delete_namespaced_config_map("owner", ns, propagation_policy="Background")
    eventually(lambda: expect_status(404, v1.read_namespaced_config_map, "child", ns))

    def shared_lost_one_owner():
        refs = v1.read_namespaced_config_map("shared", ns).metadata.owner_references
        assert [r.name for r in refs] == ["other"]

    eventually(shared_lost_one_owner)
    v1.delete_namespaced_config_map("keeper", ns, propagation_policy="Orphan")

    def kept_is_orphaned():
        assert not v1.read_namespaced_config_map("kept", ns).metadata.owner_references

    eventually(kept_is_orphaned)


def test_validation_errors(kube):
    v1, ns = kube.core, kube.namespace
    body = expect_status(422, v1.create_namespaced_config_map, ns, {"metadata": {}})
    assert body["reason"] == "Invalid"
    assert any(c["field"] == "metadata.name" for c in body["details"]["causes"])
    expect_status(422, v1.create_namespaced_config_map, ns, {"metadata": {"name": "Upper_Case"}})
    expect_status(422, v1.create_namespaced_config_map, ns,
                  {"metadata": {"name": "ok", "labels": {"bad key!": "v"}}})
    expect_status(400, v1.create_namespaced_config_map, ns,
                  {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})
    expect_status(404, v1.create_namespaced_config_map, "no-such-namespace", {"metadata": {"name": "x"}})


def test_schema_validation_of_builtin_kinds(kube):
    if kube.is_fake:
        pytest.importorskip("kubernetes_validate", reason="the fake validates schemas with it")
    # the client validates bodies itself, so send these past it
    path = f"/api/v1/namespaces/{kube.namespace}/pods"
    bad = pod("bad")
    bad["spec"]["containers"][0]["image"] = 3
    code, body, _ = raw(kube.api_client, "POST", path, bad)
    assert code == 400 and body["reason"] == "BadRequest"  # a decode error, as in a cluster
    assert "image" in body["message"]
    code, body, _ = raw(kube.api_client, "POST", path, {"metadata": {"name": "m"}, "spec": {}})
    assert code == 422 and body["reason"] == "Invalid"
    assert any(c["field"].startswith("spec") for c in body["details"]["causes"])


def test_unknown_fields_pruned_or_rejected(kube):
    if kube.is_fake:
        pytest.importorskip("kubernetes_validate", reason="the fake validates schemas with it")
    path = f"/api/v1/namespaces/{kube.namespace}/pods"
    body = pod("p")
    body["spec"]["bogusField"] = 1
    code, created, resp = raw(kube.api_client, "POST", path, body)
    assert code == 201
    assert "bogusField" in (resp.getheader("Warning") or "")
    assert "bogusField" not in created["spec"]
    body["metadata"]["name"] = "q"
    code, status, _ = raw(kube.api_client, "POST", path, body, query=[("fieldValidation", "Strict")])
    assert code == 400 and "unknown field" in status["message"]


def test_pod_spec_is_immutable(kube):
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_pod(ns, pod("p"))
    body = expect_status(422, v1.patch_namespaced_pod, "p", ns, {"spec": {"restartPolicy": "Never"}})
    assert "pod updates may not change fields" in body["message"]
    updated = v1.patch_namespaced_pod(
        "p", ns, {"spec": {"containers": [{"name": "main", "image": "registry.local/trainer:2.0"}]}})
    assert updated.spec.containers[0].image.endswith(":2.0")


def test_binding_subresource_sets_node(kube):
    server = kube.require_fake()
    v1, ns = kube.core, kube.namespace
    server.cluster.add_node("n1")
    v1.create_namespaced_pod(ns, pod("p"))
    # the server answers a Status (as kube-apiserver does), which this client cannot read as a
    # V1Binding: take the raw response
    resp = v1.create_namespaced_binding(
        ns, {"metadata": {"name": "p"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}},
        _preload_content=False)
    assert resp.status == 201
    assert v1.read_namespaced_pod("p", ns).spec.node_name == "n1"


def test_namespace_deletion_removes_contents(kube):
    server = kube.require_fake()
    v1 = kube.core
    v1.create_namespace({"metadata": {"name": "gone"}})
    v1.create_namespaced_config_map("gone", {"metadata": {"name": "cm"}})
    v1.delete_namespace("gone")
    assert not v1.list_config_map_for_all_namespaces(field_selector="metadata.namespace=gone").items
    assert server.cluster.rv > 0


def test_malformed_json_body_is_400(kube):
    import json

    import urllib3

    server = kube.require_fake()  # plain urllib3, no TLS/auth setup
    resp = urllib3.PoolManager().request(
        "POST", f"{server.url}/api/v1/namespaces/{kube.namespace}/configmaps", body=b"{not json",
        headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert json.loads(resp.data)["reason"] == "BadRequest"
