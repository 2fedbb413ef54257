"""CustomResourceDefinitions: serving, validation, pruning, defaults, status, watch."""

import pytest
from kubernetes import client, watch

from .util import expect_status, raw

pytestmark = pytest.mark.kube

GROUP = "gpupool.io"


def _crd(plural="gpunodestates", kind="GPUNodeState", scope="Cluster", status=True):
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "gpus": {"type": "integer", "minimum": 0},
            "pool": {"type": "string", "default": "shared"},
            "migProfile": {"x-kubernetes-int-or-string": True},
        }, "required": ["gpus"]},
        "status": {"type": "object", "properties": {
            "allocated": {"type": "integer"},
            "conditions": {"type": "array", "items": {"type": "object",
                                                      "x-kubernetes-preserve-unknown-fields": True}},
        }},
    }}
    version = {"name": "v1alpha1", "served": True, "storage": True,
               "schema": {"openAPIV3Schema": schema}}
    if status:
        version["subresources"] = {"status": {}}
    return {"metadata": {"name": f"{plural}.{GROUP}"},
            "spec": {"group": GROUP, "scope": scope,
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind,
                               "listKind": f"{kind}List"},
                     "versions": [version]}}


@pytest.fixture
def crd(kube):
    kube.require_fake()  # installing CRDs is cluster-wide
    created = kube.apiextensions.create_custom_resource_definition(_crd())
    return created


def _obj(name, gpus=8, **extra):
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "GPUNodeState", "metadata": {"name": name},
            "spec": {"gpus": gpus, **extra}}


def test_crd_is_established_and_discoverable(kube, crd):
    got = kube.apiextensions.read_custom_resource_definition(f"gpunodestates.{GROUP}")
    assert {c.type: c.status for c in got.status.conditions}["Established"] == "True"
    groups = client.ApisApi(kube.api_client).get_api_versions()
    assert GROUP in {g.name for g in groups.groups}
    resources = client.CustomObjectsApi(kube.api_client).get_api_resources(GROUP, "v1alpha1")
    names = {r.name for r in resources.resources}
    assert {"gpunodestates", "gpunodestates/status"} <= names


def test_custom_object_crud_with_defaults_and_pruning(kube, crd):
    co = kube.custom
    body = _obj("node-1")
    body["spec"]["unknownField"] = "dropped"
    created = co.create_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates", body)
    assert created["spec"] == {"gpus": 8, "pool": "shared"}
    assert created["metadata"]["generation"] == 1
    got = co.get_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates", "node-1")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    patched = co.patch_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates", "node-1",
                                             {"spec": {"gpus": 4}})
    assert patched["spec"]["gpus"] == 4 and patched["metadata"]["generation"] == 2
    listing = co.list_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates")
    assert [i["metadata"]["name"] for i in listing["items"]] == ["node-1"]
    assert listing["items"][0]["kind"] == "GPUNodeState"
    co.delete_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates", "node-1")
    expect_status(404, co.get_cluster_custom_object, GROUP, "v1alpha1", "gpunodestates", "node-1")


def test_custom_object_schema_validation(kube, crd):
    pytest.importorskip("jsonschema", reason="the fake validates custom resources with it")
    body = expect_status(422, kube.custom.create_cluster_custom_object, GROUP, "v1alpha1",
                         "gpunodestates", _obj("bad", gpus=-1))
    assert "spec.gpus" in body["message"]
    expect_status(422, kube.custom.create_cluster_custom_object, GROUP, "v1alpha1", "gpunodestates",
                  {"apiVersion": f"{GROUP}/v1alpha1", "kind": "GPUNodeState",
                   "metadata": {"name": "nogpus"}, "spec": {}})
    kube.custom.create_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates",
                                             _obj("mig", migProfile="1g.10gb"))


def test_status_subresource_of_custom_object(kube, crd):
    co = kube.custom
    co.create_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates", _obj("n"))
    got = co.patch_cluster_custom_object_status(GROUP, "v1alpha1", "gpunodestates", "n",
                                                {"status": {"allocated": 3}, "spec": {"gpus": 1}})
    assert got["status"] == {"allocated": 3} and got["spec"]["gpus"] == 8
    assert got["metadata"]["generation"] == 1
    got = co.patch_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates", "n",
                                         {"status": {"allocated": 0}})
    assert got["status"] == {"allocated": 3}


def test_custom_object_update_needs_resource_version(kube, crd):
    co = kube.custom
    obj = co.create_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates", _obj("n"))
    stale = dict(obj)
    obj["spec"]["gpus"] = 2
    co.replace_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates", "n", obj)
    expect_status(409, co.replace_cluster_custom_object, GROUP, "v1alpha1", "gpunodestates", "n", stale)
    no_rv = _obj("n", gpus=1)
    expect_status(422, co.replace_cluster_custom_object, GROUP, "v1alpha1", "gpunodestates", "n", no_rv)


def test_strategic_merge_is_unsupported_for_custom_objects(kube, crd):
    kube.custom.create_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates", _obj("n"))
    code, body, _ = raw(kube.api_client, "PATCH", f"/apis/{GROUP}/v1alpha1/gpunodestates/n",
                        {"spec": {"gpus": 1}}, content_type="application/strategic-merge-patch+json")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"


def test_server_side_apply_on_custom_object(kube, crd):
    co = kube.custom
    created = co.patch_cluster_custom_object(
        GROUP, "v1alpha1", "gpunodestates", "n", _obj("n", gpus=2), field_manager="gpupool",
        _content_type="application/apply-patch+yaml")
    # apply that creates answers 201, which this client maps to None for custom objects only
    # (its response map for them lists 200 alone) — the same happens against a real cluster
    assert created is None
    obj = co.get_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates", "n")
    assert obj["spec"]["gpus"] == 2
    assert [m["manager"] for m in obj["metadata"]["managedFields"]] == ["gpupool"]
    again = co.patch_cluster_custom_object(
        GROUP, "v1alpha1", "gpunodestates", "n", _obj("n", gpus=4), field_manager="gpupool",
        _content_type="application/apply-patch+yaml")
    assert again["spec"]["gpus"] == 4
    expect_status(409, co.patch_cluster_custom_object, GROUP, "v1alpha1", "gpunodestates", "n",
                  _obj("n", gpus=3), field_manager="other", _content_type="application/apply-patch+yaml")


def test_namespaced_crd_and_watch(kube):
    kube.require_fake()
    kube.apiextensions.create_custom_resource_definition(
        _crd("poolstatuses", "PoolStatus", scope="Namespaced"))
    co, ns = kube.custom, kube.namespace
    start = co.list_namespaced_custom_object(GROUP, "v1alpha1", ns, "poolstatuses")
    body = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "PoolStatus", "metadata": {"name": "train"},
            "spec": {"gpus": 16}}
    co.create_namespaced_custom_object(GROUP, "v1alpha1", ns, "poolstatuses", body)
    events = list(watch.Watch().stream(co.list_namespaced_custom_object, GROUP, "v1alpha1", ns,
                                       "poolstatuses",
                                       resource_version=start["metadata"]["resourceVersion"],
                                       timeout_seconds=1))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "train")]
    expect_status(404, co.list_cluster_custom_object, GROUP, "v1alpha1", "nonexistent")


def test_deleting_crd_removes_its_objects(kube, crd):
    kube.custom.create_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates", _obj("n"))
    kube.apiextensions.delete_custom_resource_definition(f"gpunodestates.{GROUP}")
    expect_status(404, kube.custom.list_cluster_custom_object, GROUP, "v1alpha1", "gpunodestates")
    kube.apiextensions.create_custom_resource_definition(_crd())
    assert kube.custom.list_cluster_custom_object(GROUP, "v1alpha1", "gpunodestates")["items"] == []


def test_apply_list_map_in_custom_resource(kube):
    kube.require_fake()
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "slices": {"type": "array", "x-kubernetes-list-type": "map",
                   "x-kubernetes-list-map-keys": ["id"],
                   "items": {"type": "object", "properties": {
                       "id": {"type": "string"}, "job": {"type": "string"}}}},
        "tags": {"type": "array", "items": {"type": "string"}}}}}}
    kube.apiextensions.create_custom_resource_definition({
        "metadata": {"name": "gpus.gpupool.io"},
        "spec": {"group": GROUP, "scope": "Cluster",
                 "names": {"plural": "gpus", "singular": "gpu", "kind": "GPU"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": schema}}]}})

    def apply(manager, spec, **kw):
        return kube.custom.patch_cluster_custom_object(
            GROUP, "v1", "gpus", "g0", {"apiVersion": f"{GROUP}/v1", "kind": "GPU",
                                         "metadata": {"name": "g0"}, "spec": spec},
            field_manager=manager, _content_type="application/apply-patch+yaml", **kw)

    apply("train", {"slices": [{"id": "0", "job": "a"}], "tags": ["x"]})
    got = apply("serve", {"slices": [{"id": "1", "job": "b"}]})
    assert [s["id"] for s in got["spec"]["slices"]] == ["0", "1"]
    # "tags" has no list type: atomic, so replacing it conflicts with its owner
    expect_status(409, apply, "serve", {"tags": ["y"]})
    expect_status(409, apply, "serve", {"slices": [{"id": "0", "job": "b"}]})
