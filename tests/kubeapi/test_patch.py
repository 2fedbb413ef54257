"""Merge, strategic-merge, JSON patch and server-side apply, through the official client."""

import pytest

from .util import expect_status, pod, raw

pytestmark = pytest.mark.kube

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


def test_merge_patch_sets_and_deletes_keys(kube):
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"a": "1", "b": "2"}})
    cm = v1.patch_namespaced_config_map("cm", ns, {"data": {"a": None, "c": "3"}}, _content_type=MERGE)
    assert cm.data == {"b": "2", "c": "3"}


def test_strategic_merge_merges_containers_by_name(kube):
    v1, ns = kube.core, kube.namespace
    body = pod("p")
    body["spec"]["containers"].append({"name": "sidecar", "image": "registry.local/side:1"})
    v1.create_namespaced_pod(ns, body)
    # the client's default content type for a dict body on a built-in is strategic merge
    patched = v1.patch_namespaced_pod("p", ns, {"spec": {"containers": [
        {"name": "sidecar", "image": "registry.local/side:2"}]}})
    images = {c.name: c.image for c in patched.spec.containers}
    assert images == {"main": "registry.local/trainer:1.0", "sidecar": "registry.local/side:2"}
    assert kube.server is None or kube.server.requests("PATCH")[-1].content_type == \
        "application/strategic-merge-patch+json"


def test_strategic_merge_on_status_conditions(kube):
    server = kube.require_fake()
    v1, ns = kube.core, kube.namespace
    server.cluster.add_node("n1")
    v1.create_namespaced_pod(ns, pod("p"))
    server.cluster.set_pod_status(ns, "p", "Running", node="n1")
    patched = v1.patch_namespaced_pod_status("p", ns, {"status": {"conditions": [
        {"type": "gpupool.io/Preempting", "status": "True"}]}})
    types = {c.type: c.status for c in patched.status.conditions}
    assert types["Ready"] == "True" and types["gpupool.io/Preempting"] == "True"
    patched = v1.patch_namespaced_pod_status("p", ns, {"status": {"conditions": [
        {"type": "gpupool.io/Preempting", "$patch": "delete"}]}})
    assert "gpupool.io/Preempting" not in {c.type for c in patched.status.conditions}


def test_json_patch_with_test_op(kube):
    v1, ns = kube.core, kube.namespace
    cm = v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"owner": "a"}})
    rv = cm.metadata.resource_version
    cm = v1.patch_namespaced_config_map("cm", ns, [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "replace", "path": "/data/owner", "value": "b"},
        {"op": "add", "path": "/metadata/labels", "value": {"held-by": "b"}},
    ])
    assert cm.data == {"owner": "b"} and cm.metadata.labels == {"held-by": "b"}
    body = expect_status(422, v1.patch_namespaced_config_map, "cm", ns, [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "replace", "path": "/data/owner", "value": "c"},
    ])
    assert body["reason"] == "Invalid"
    assert "test" in body["details"]["causes"][0]["message"]
    assert v1.read_namespaced_config_map("cm", ns).data == {"owner": "b"}


def test_merge_patch_with_stale_resource_version_conflicts(kube):
    v1, ns = kube.core, kube.namespace
    cm = v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    v1.patch_namespaced_config_map("cm", ns, {"data": {"a": "2"}})
    expect_status(409, v1.patch_namespaced_config_map, "cm", ns,
                  {"metadata": {"resourceVersion": cm.metadata.resource_version}, "data": {"a": "3"}})


def test_patch_missing_object_is_404(kube):
    expect_status(404, kube.core.patch_namespaced_config_map, "nope", kube.namespace, {"data": {}})


def _cm_apply(name, data, labels=None):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, **({"labels": labels} if labels else {})}, "data": data}


def test_server_side_apply_creates_and_conflicts(kube):
    v1, ns = kube.core, kube.namespace
    cm = v1.patch_namespaced_config_map("cm", ns, _cm_apply("cm", {"gpus": "4"}),
                                        field_manager="planner", _content_type=APPLY)
    assert cm.data == {"gpus": "4"}
    assert [(m.manager, m.operation) for m in cm.metadata.managed_fields] == [("planner", "Apply")]
    # another manager applying the same value co-owns it: no conflict
    v1.patch_namespaced_config_map("cm", ns, _cm_apply("cm", {"gpus": "4"}),
                                   field_manager="operator", _content_type=APPLY)
    # changing a field someone else owns is a conflict...
    body = expect_status(409, v1.patch_namespaced_config_map, "cm", ns, _cm_apply("cm", {"gpus": "8"}),
                         field_manager="intruder", _content_type=APPLY)
    assert body["reason"] == "Conflict"
    assert {c["field"] for c in body["details"]["causes"]} == {".data.gpus"}
    assert {c["reason"] for c in body["details"]["causes"]} == {"FieldManagerConflict"}
    assert any('conflict with "planner"' in c["message"] for c in body["details"]["causes"])
    assert body["message"].startswith("Apply failed with 2 conflicts")
    # ...unless forced, which takes ownership
    cm = v1.patch_namespaced_config_map("cm", ns, _cm_apply("cm", {"gpus": "8"}),
                                        field_manager="intruder", force=True, _content_type=APPLY)
    assert cm.data == {"gpus": "8"}
    owners = {m.manager for m in cm.metadata.managed_fields if "f:gpus" in str(m.fields_v1)}
    assert owners == {"intruder"}


def test_server_side_apply_removes_fields_the_manager_dropped(kube):
    v1, ns = kube.core, kube.namespace
    v1.patch_namespaced_config_map("cm", ns, _cm_apply("cm", {"a": "1", "b": "2"}, {"l": "x"}),
                                   field_manager="m", _content_type=APPLY)
    v1.patch_namespaced_config_map("cm", ns, {"data": {"other": "kept"}})  # an Update manager
    cm = v1.patch_namespaced_config_map("cm", ns, _cm_apply("cm", {"a": "1"}),
                                        field_manager="m", _content_type=APPLY)
    assert cm.data == {"a": "1", "other": "kept"}
    assert not cm.metadata.labels


def test_update_takes_ownership_from_apply(kube):
    v1, ns = kube.core, kube.namespace
    v1.patch_namespaced_config_map("cm", ns, _cm_apply("cm", {"a": "1"}),
                                   field_manager="applier", _content_type=APPLY)
    v1.patch_namespaced_config_map("cm", ns, {"data": {"a": "edited"}}, field_manager="human")
    body = expect_status(409, v1.patch_namespaced_config_map, "cm", ns, _cm_apply("cm", {"a": "2"}),
                         field_manager="applier", _content_type=APPLY)
    assert 'conflict with "human"' in body["message"]


def test_apply_requires_field_manager(kube):
    code, body, _ = raw(kube.api_client, "PATCH",
                        f"/api/v1/namespaces/{kube.namespace}/configmaps/cm",
                        _cm_apply("cm", {"a": "1"}), content_type=APPLY)
    assert code == 422 and "fieldManager" in body["message"]


def test_apply_to_deployment_status_is_ignored_on_main_resource(kube):
    apps, ns = kube.apps, kube.namespace
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
           "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}},
                    "template": {"metadata": {"labels": {"app": "d"}},
                                 "spec": {"containers": [{"name": "c", "image": "i:1"}]}}},
           "status": {"replicas": 99}}
    got = apps.patch_namespaced_deployment("d", ns, dep, field_manager="gitops", _content_type=APPLY)
    assert got.spec.replicas == 2
    assert not got.status or not got.status.replicas


def _dep_apply(containers, replicas=None):
    spec = {"template": {"spec": {"containers": containers}}}
    if replicas is not None:
        spec.update(replicas=replicas, selector={"matchLabels": {"app": "d"}})
        spec["template"]["metadata"] = {"labels": {"app": "d"}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": spec}


def test_apply_tracks_list_map_elements_per_manager(kube):
    apps, ns = kube.apps, kube.namespace
    main = {"name": "main", "image": "trainer:1"}
    apps.patch_namespaced_deployment("d", ns, _dep_apply([main], replicas=1),
                                     field_manager="gpupool", _content_type=APPLY)
    # another manager adds its own container: no conflict, both kept
    dep = apps.patch_namespaced_deployment(
        "d", ns, _dep_apply([{"name": "sidecar", "image": "metrics:1"}]),
        field_manager="injector", _content_type=APPLY)
    assert [c.name for c in dep.spec.template.spec.containers] == ["main", "sidecar"]
    # gpupool re-applies its configuration, which does not mention the sidecar: it stays
    dep = apps.patch_namespaced_deployment("d", ns, _dep_apply([main], replicas=1),
                                           field_manager="gpupool", _content_type=APPLY)
    assert [c.name for c in dep.spec.template.spec.containers] == ["main", "sidecar"]
    fields = next(m.fields_v1 for m in dep.metadata.managed_fields if m.manager == "injector")
    assert 'k:{"name":"sidecar"}' in str(fields)
    # changing gpupool's container image is a conflict on exactly that field
    body = expect_status(409, apps.patch_namespaced_deployment, "d", ns,
                         _dep_apply([{"name": "main", "image": "trainer:2"}]),
                         field_manager="injector", _content_type=APPLY)
    assert [c["field"] for c in body["details"]["causes"]] == \
        ['.spec.template.spec.containers[name="main"].image']
    # the injector stops applying its sidecar: it is removed
    dep = apps.patch_namespaced_deployment(
        "d", ns, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d",
                                                                              "labels": {"x": "y"}}},
        field_manager="injector", _content_type=APPLY)
    assert [c.name for c in dep.spec.template.spec.containers] == ["main"]


def test_update_of_one_element_field_leaves_element_ownership(kube):
    apps, ns = kube.apps, kube.namespace
    apps.patch_namespaced_deployment("d", ns, _dep_apply([{"name": "main", "image": "t:1"}], replicas=1),
                                     field_manager="gpupool", _content_type=APPLY)
    apps.patch_namespaced_deployment("d", ns, {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "t:hotfix"}]}}}}, field_manager="kubectl-set")
    body = expect_status(409, apps.patch_namespaced_deployment, "d", ns,
                         _dep_apply([{"name": "main", "image": "t:2"}], replicas=1),
                         field_manager="gpupool", _content_type=APPLY)
    assert [c["field"] for c in body["details"]["causes"]] == \
        ['.spec.template.spec.containers[name="main"].image']
    assert 'conflict with "kubectl-set" using apps/v1' in body["message"]
    dep = apps.patch_namespaced_deployment(
        "d", ns, _dep_apply([{"name": "main", "image": "t:2"}], replicas=1),
        field_manager="gpupool", force=True, _content_type=APPLY)
    assert dep.spec.template.spec.containers[0].image == "t:2"


def test_strategic_merge_follows_each_lists_schema(kube):
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm", "finalizers": ["a.io/x"]}})
    # finalizers: patchStrategy merge on a list of strings -> union
    cm = v1.patch_namespaced_config_map("cm", ns, {"metadata": {"finalizers": ["b.io/y"]}})
    assert cm.metadata.finalizers == ["a.io/x", "b.io/y"]
    cm = v1.patch_namespaced_config_map("cm", ns, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/x", "b.io/y"]}})
    assert not cm.metadata.finalizers
    server = kube.require_fake()
    server.cluster.add_node("n1")
    v1.patch_node("n1", {"spec": {"taints": [{"key": "gpupool.io/draining", "effect": "NoSchedule"}]}})
    # taints have no patch strategy: the list is replaced, not merged
    node = v1.patch_node("n1", {"spec": {"taints": [{"key": "gpupool.io/mig", "effect": "NoSchedule"}]}})
    assert [t.key for t in node.spec.taints] == ["gpupool.io/mig"]
    # node addresses merge by type
    v1.patch_node_status("n1", {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}})
    node = v1.patch_node_status("n1", {"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}})
    assert {a.type for a in node.status.addresses} == {"InternalIP", "Hostname"}
