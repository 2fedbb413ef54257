"""Watch: from a resourceVersion, selectors, 410 Gone, timeouts, bookmarks, restarts."""

import threading
import time

import pytest
from kubernetes import client, watch

from .server import FakeKubeApiServer

pytestmark = pytest.mark.kube


def _cm(name, labels=None, data=None):
    # every test object carries t=w, and watches select on it: a cluster adds its own objects
    # (kube-root-ca.crt) to a namespace asynchronously
    return {"metadata": {"name": name, "labels": {"t": "w", **(labels or {})}}, "data": data or {}}


def _events(stream):
    return [(e["type"], e["object"].metadata.name) for e in stream]


def test_watch_from_resource_version_replays_later_events(kube):
    v1, ns = kube.core, kube.namespace
    a = v1.create_namespaced_config_map(ns, _cm("a"))
    v1.create_namespaced_config_map(ns, _cm("b"))
    v1.patch_namespaced_config_map("a", ns, {"data": {"x": "1"}})
    v1.delete_namespaced_config_map("b", ns)
    started = time.monotonic()
    events = _events(watch.Watch().stream(v1.list_namespaced_config_map, ns, label_selector="t=w",
                                          resource_version=a.metadata.resource_version,
                                          timeout_seconds=1))
    assert events == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert 0.9 <= time.monotonic() - started < 5  # timeoutSeconds honoured


def test_watch_without_resource_version_starts_with_current_state(kube):
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_config_map(ns, _cm("existing"))
    events = _events(watch.Watch().stream(v1.list_namespaced_config_map, ns, label_selector="t=w",
                                          timeout_seconds=1))
    assert events == [("ADDED", "existing")]


def test_list_then_watch_sees_concurrent_writes(kube):
    v1, ns = kube.core, kube.namespace
    listing = v1.list_namespaced_config_map(ns)
    threading.Timer(0.3, lambda: v1.create_namespaced_config_map(ns, _cm("late"))).start()
    w = watch.Watch()
    seen = []
    for event in w.stream(v1.list_namespaced_config_map, ns, label_selector="t=w",
                          resource_version=listing.metadata.resource_version, timeout_seconds=10):
        seen.append((event["type"], event["object"].metadata.name))
        w.stop()
    assert seen == [("ADDED", "late")]


def test_watch_selectors_turn_label_changes_into_added_and_deleted(kube):
    v1, ns = kube.core, kube.namespace
    start = v1.create_namespaced_config_map(ns, _cm("x", {"pool": "train"}))
    v1.patch_namespaced_config_map("x", ns, {"metadata": {"labels": {"pool": "serve"}}})
    v1.patch_namespaced_config_map("x", ns, {"data": {"k": "v"}})
    v1.patch_namespaced_config_map("x", ns, {"metadata": {"labels": {"pool": "train"}}})
    v1.create_namespaced_config_map(ns, _cm("other", {"pool": "serve"}))
    events = _events(watch.Watch().stream(v1.list_namespaced_config_map, ns,
                                          label_selector="t=w,pool=train",
                                          resource_version=start.metadata.resource_version,
                                          timeout_seconds=1))
    assert events == [("DELETED", "x"), ("ADDED", "x")]


def test_watch_pods_by_node_field_selector(kube):
    server = kube.require_fake()
    v1, ns = kube.core, kube.namespace
    server.cluster.add_node("n1")
    listing = v1.list_namespaced_pod(ns)
    for name in ("p1", "p2"):
        v1.create_namespaced_pod(ns, {"metadata": {"name": name},
                                      "spec": {"containers": [{"name": "c", "image": "i:1"}]}})
    server.cluster.set_pod_status(ns, "p1", "Running", node="n1")
    events = _events(watch.Watch().stream(v1.list_pod_for_all_namespaces, field_selector="spec.nodeName=n1",
                                          resource_version=listing.metadata.resource_version,
                                          timeout_seconds=1))
    assert events[0] == ("ADDED", "p1") and {n for _, n in events} == {"p1"}


def test_too_old_resource_version_is_410_gone(kube):
    server = kube.require_fake()
    v1, ns = kube.core, kube.namespace
    old = v1.create_namespaced_config_map(ns, _cm("a"))
    v1.patch_namespaced_config_map("a", ns, {"data": {"x": "1"}})
    server.cluster.compact()
    with pytest.raises(client.ApiException) as info:
        list(watch.Watch().stream(v1.list_namespaced_config_map, ns,
                                  resource_version=old.metadata.resource_version, timeout_seconds=1))
    assert info.value.status == 410
    assert "too old resource version" in info.value.reason
    # the raw stream carries the ERROR event with an Expired Status, as kube-apiserver sends it
    resp = v1.list_namespaced_config_map(ns, watch=True, resource_version=old.metadata.resource_version,
                                         timeout_seconds=1, _preload_content=False)
    line = resp.read().decode().splitlines()[0]
    assert '"type": "ERROR"' in line and '"reason": "Expired"' in line and '"code": 410' in line


def test_bounded_history_expires_old_versions():
    with FakeKubeApiServer(history_size=5) as server:
        api = server.api_client()
        v1 = client.CoreV1Api(api)
        first = v1.create_namespaced_config_map("default", _cm("a"))
        for i in range(10):
            v1.patch_namespaced_config_map("a", "default", {"data": {"i": str(i)}})
        with pytest.raises(client.ApiException) as info:
            list(watch.Watch().stream(v1.list_namespaced_config_map, "default",
                                      resource_version=first.metadata.resource_version,
                                      timeout_seconds=1))
        assert info.value.status == 410
        recent = v1.read_namespaced_config_map("a", "default").metadata.resource_version
        assert list(watch.Watch().stream(v1.list_namespaced_config_map, "default",
                                         resource_version=recent, timeout_seconds=1)) == []
        api.close()


def test_bookmarks_advance_the_resource_version(kube):
    server = kube.require_fake()
    server.bookmark_interval = 0.2
    v1, ns = kube.core, kube.namespace
    start = v1.list_namespaced_config_map(ns).metadata.resource_version
    v1.create_namespaced_config_map("default", _cm("elsewhere"))  # other namespace: filtered out
    w = watch.Watch()
    types = [e["type"] for e in w.stream(v1.list_namespaced_config_map, ns, resource_version=start,
                                         allow_watch_bookmarks=True, timeout_seconds=1)]
    assert types and set(types) == {"BOOKMARK"}
    assert int(w.resource_version) > int(start)


def test_watch_ends_on_restart_and_resumes_without_loss(kube):
    server = kube.require_fake()
    v1, ns = kube.core, kube.namespace
    start = v1.create_namespaced_config_map(ns, _cm("a")).metadata.resource_version
    w = watch.Watch()
    seen, errors = [], []

    def consume():
        try:
            for e in w.stream(v1.list_namespaced_config_map, ns, resource_version=start,
                              timeout_seconds=30):
                seen.append(e["object"].metadata.name)
        except Exception as e:  # the connection is cut mid-stream
            errors.append(e)

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.3)
    v1.create_namespaced_config_map(ns, _cm("b"))
    time.sleep(0.3)
    server.stop()
    t.join(timeout=5)
    assert not t.is_alive()
    assert seen == ["b"]
    # written while the API was down (e.g. by another apiserver replica)
    server.cluster.create(server.cluster.rt("", "v1", "configmaps"), ns, _cm("c"))
    server.start()
    resumed = _events(watch.Watch().stream(v1.list_namespaced_config_map, ns,
                                           resource_version=w.resource_version, timeout_seconds=1))
    assert resumed == [("ADDED", "c")]
