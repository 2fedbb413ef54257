"""Details a reconciler's desired-vs-observed comparison trips over, and a few request options."""

import datetime

import pytest
from kubernetes import watch

from .util import expect_status, pod, raw

pytestmark = pytest.mark.kube


def test_quantities_come_back_canonical(kube):
    v1, ns = kube.core, kube.namespace
    body = pod("p")
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "0.5", "memory": "1024Mi"}, "limits": {"memory": "1.5Gi", "cpu": "2000m"}}
    got = v1.create_namespaced_pod(ns, body).spec.containers[0].resources
    assert got.requests == {"cpu": "500m", "memory": "1Gi"}
    assert got.limits == {"cpu": "2", "memory": "1536Mi"}


def test_invalid_quantity_is_rejected(kube):
    body = pod("p")
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    code, status, _ = raw(kube.api_client, "POST", f"/api/v1/namespaces/{kube.namespace}/pods", body)
    assert code in (400, 422) and "quantities must match" in status["message"]


def test_times_are_truncated_to_seconds_and_micro_times_kept(kube):
    coord, ns = kube.coordination, kube.namespace
    t = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)
    lease = coord.create_namespaced_lease(ns, {"metadata": {"name": "l"},
                                               "spec": {"holderIdentity": "a", "renewTime": t}})
    assert lease.spec.renew_time == t  # MicroTime keeps microseconds
    cm_status = kube.core.create_namespaced_pod(ns, pod("p"))
    assert cm_status.metadata.creation_timestamp.microsecond == 0
    if kube.is_fake:
        got = kube.core.patch_namespaced_pod_status("p", ns, {"status": {"conditions": [
            {"type": "gpupool.io/Drained", "status": "True",
             "lastTransitionTime": t.isoformat()}]}})
        cond = next(c for c in got.status.conditions if c.type == "gpupool.io/Drained")
        assert cond.last_transition_time == t.replace(microsecond=0)  # metav1.Time: seconds


def test_noop_patch_sends_no_watch_event(kube):
    v1, ns = kube.core, kube.namespace
    cm = v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm", "labels": {"t": "n"}},
                                              "data": {"a": "1"}})
    same = v1.patch_namespaced_config_map("cm", ns, {"data": {"a": "1"}})
    assert same.metadata.resource_version == cm.metadata.resource_version
    events = list(watch.Watch().stream(v1.list_namespaced_config_map, ns, label_selector="t=n",
                                       resource_version=cm.metadata.resource_version,
                                       timeout_seconds=1))
    assert events == []


def test_dry_run_changes_nothing(kube):
    v1, ns = kube.core, kube.namespace
    created = v1.create_namespaced_config_map(ns, {"metadata": {"name": "dry"}}, dry_run="All")
    assert created.metadata.name == "dry"
    expect_status(404, v1.read_namespaced_config_map, "dry", ns)
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    patched = v1.patch_namespaced_config_map("cm", ns, {"data": {"a": "2"}}, dry_run="All")
    assert patched.data == {"a": "2"}
    assert v1.read_namespaced_config_map("cm", ns).data == {"a": "1"}
    v1.delete_namespaced_config_map("cm", ns, dry_run="All")
    assert v1.read_namespaced_config_map("cm", ns).data == {"a": "1"}


def test_send_initial_events_ends_with_a_marked_bookmark(kube):
    kube.require_fake()  # needs the WatchList feature on a real cluster
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm", "labels": {"t": "i"}}})
    w = watch.Watch()
    events = []
    for e in w.stream(v1.list_namespaced_config_map, ns, label_selector="t=i", send_initial_events=True,
                      allow_watch_bookmarks=True, resource_version_match="NotOlderThan",
                      timeout_seconds=1):
        events.append(e)
    assert [e["type"] for e in events][:2] == ["ADDED", "BOOKMARK"]
    marker = events[1]["raw_object"]["metadata"]["annotations"]
    assert marker == {"k8s.io/initial-events-end": "true"}


def test_crd_selectable_fields(kube):
    kube.require_fake()
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "node": {"type": "string"}}}}}
    kube.apiextensions.create_custom_resource_definition({
        "metadata": {"name": "slices.gpupool.io"},
        "spec": {"group": "gpupool.io", "scope": "Namespaced",
                 "names": {"plural": "slices", "singular": "slice", "kind": "Slice"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "selectableFields": [{"jsonPath": ".spec.node"}],
                               "schema": {"openAPIV3Schema": schema}}]}})
    for name, node in (("a", "n1"), ("b", "n2")):
        kube.custom.create_namespaced_custom_object("gpupool.io", "v1", kube.namespace, "slices", {
            "apiVersion": "gpupool.io/v1", "kind": "Slice", "metadata": {"name": name},
            "spec": {"node": node}})
    got = kube.custom.list_namespaced_custom_object("gpupool.io", "v1", kube.namespace, "slices",
                                                    field_selector="spec.node=n2")
    assert [i["metadata"]["name"] for i in got["items"]] == ["b"]
    expect_status(400, kube.custom.list_namespaced_custom_object, "gpupool.io", "v1",
                  kube.namespace, "slices", field_selector="spec.other=x")


def test_events_both_apis(kube):
    from kubernetes import client

    ns = kube.namespace
    now = datetime.datetime.now(datetime.UTC)
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": ns}
    client.EventsV1Api(kube.api_client).create_namespaced_event(ns, {
        "metadata": {"generateName": "gpupool-"}, "eventTime": now, "reportingController": "gpupool.io/controller",
        "reportingInstance": "gpupool-0", "action": "Preempt", "reason": "Preempted", "type": "Normal",
        "regarding": ref, "note": "preempted for a higher-priority training job"})
    kube.core.create_namespaced_event(ns, {
        "metadata": {"name": "legacy"}, "involvedObject": ref, "reason": "Preempted",
        "message": "m", "type": "Normal", "source": {"component": "gpupool"}})
    legacy = kube.core.list_namespaced_event(ns, field_selector="reason=Preempted").items
    assert "legacy" in {e.metadata.name for e in legacy}
    new = client.EventsV1Api(kube.api_client).list_namespaced_event(ns).items
    assert any(e.reason == "Preempted" and e.regarding.name == "p" for e in new)
