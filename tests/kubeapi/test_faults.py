"""Fault injection, restarts and the request log — fake-only by nature."""

import socket
import time

import pytest
import urllib3
from kubernetes import client

from .server import FakeKubeApiServer
from .util import expect_status, pod

pytestmark = pytest.mark.kube


def test_restart_keeps_state_and_port(kube):
    server = kube.require_fake()
    v1, ns = kube.core, kube.namespace
    before = v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    port = server.port
    server.restart()
    assert server.port == port
    after = v1.read_namespaced_config_map("cm", ns)  # the pooled connection was dropped: reconnects
    assert after.metadata.uid == before.metadata.uid
    assert after.metadata.resource_version == before.metadata.resource_version
    updated = v1.patch_namespaced_config_map("cm", ns, {"data": {"a": "2"}})
    assert int(updated.metadata.resource_version) > int(before.metadata.resource_version)


def test_requests_fail_while_down(kube):
    server = kube.require_fake()
    cfg = server.configuration()
    cfg.retries = 0
    with client.ApiClient(cfg) as api:
        v1 = client.CoreV1Api(api)
        with server.down():
            with pytest.raises(urllib3.exceptions.HTTPError):
                v1.list_namespace()
            with pytest.raises(OSError), socket.create_connection(("127.0.0.1", server.port), timeout=1):
                pass
        assert v1.list_namespace().items


def test_fail_next_n_requests(kube):
    server = kube.require_fake()
    v1, ns = kube.core, kube.namespace
    fault = server.fail_next("GET", rf"/api/v1/namespaces/{ns}/configmaps", status=503, times=2)
    for _ in range(2):
        body = expect_status(503, v1.list_namespaced_config_map, ns)
        assert body["reason"] == "ServiceUnavailable"
    assert fault.remaining == 0
    v1.list_namespaced_config_map(ns)
    assert [r.status for r in server.requests("GET", rf".*/namespaces/{ns}/configmaps")] == [503, 503, 200]


def test_fault_with_conflict_and_retry_after(kube):
    server = kube.require_fake()
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    server.fail_next("PATCH", r".*/configmaps/cm", status=409, message="injected conflict")
    body = expect_status(409, v1.patch_namespaced_config_map, "cm", ns, {"data": {"a": "1"}})
    assert body["message"] == "injected conflict" and body["reason"] == "Conflict"
    server.fail_next("POST", r".*/pods/.*/eviction", status=429, retry_after=7)
    with pytest.raises(client.ApiException) as info:
        v1.create_namespaced_pod_eviction("x", ns, {"metadata": {"name": "x"}})
    assert info.value.status == 429 and info.value.headers["Retry-After"] == "7"
    assert v1.patch_namespaced_config_map("cm", ns, {"data": {"a": "1"}}).data == {"a": "1"}


def test_dropped_connection(kube):
    server = kube.require_fake()
    cfg = server.configuration()
    cfg.retries = 0
    with client.ApiClient(cfg) as api:
        server.fail_next("GET", r"/api/v1/namespaces", drop=True)
        with pytest.raises(urllib3.exceptions.HTTPError):
            client.CoreV1Api(api).list_namespace()
        assert client.CoreV1Api(api).list_namespace().items


def test_delay(kube):
    server = kube.require_fake()
    server.fail_next("GET", r"/api/v1/namespaces", status=500, delay=0.3)
    started = time.monotonic()
    expect_status(500, kube.core.list_namespace)
    assert time.monotonic() - started >= 0.3


def test_request_log_shows_a_single_eviction(kube):
    server = kube.require_fake()
    v1, ns = kube.core, kube.namespace
    v1.create_namespaced_pod(ns, pod("victim"))
    server.clear_requests()
    v1.create_namespaced_pod_eviction("victim", ns, {"metadata": {"name": "victim"}})
    evictions = server.requests("POST", r".*/pods/[^/]+/eviction")
    assert len(evictions) == 1
    assert evictions[0].path == f"/api/v1/namespaces/{ns}/pods/victim/eviction"
    assert evictions[0].content_type in (None, "application/json")  # this client sends none
    assert evictions[0].status == 201 and evictions[0].body["metadata"]["name"] == "victim"


def test_before_hook_simulates_a_concurrent_writer(kube):
    server = kube.require_fake()
    v1, ns = kube.core, kube.namespace
    cm = v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"n": "0"}})

    def other_writer(srv, request):
        srv.cluster.patch(srv.cluster.rt("", "v1", "configmaps"), ns, "cm", {"data": {"n": "9"}},
                          "application/merge-patch+json", manager="someone-else")

    server.before("PUT", r".*/configmaps/cm", other_writer)
    cm.data["n"] = "1"
    expect_status(409, v1.replace_namespaced_config_map, "cm", ns, cm)
    assert v1.read_namespaced_config_map("cm", ns).data == {"n": "9"}


def test_kubeconfig_for_code_that_loads_one(tmp_path):
    from kubernetes import config

    with FakeKubeApiServer() as server:
        path = server.write_kubeconfig(str(tmp_path / "kubeconfig"))
        api = config.new_client_from_config(config_file=path)
        assert "default" in {n.metadata.name for n in client.CoreV1Api(api).list_namespace().items}
        api.close()


def test_discovery_documents(kube):
    server = kube.require_fake()
    core = client.CoreApi(kube.api_client).get_api_versions()
    assert core.versions == ["v1"]
    apis = client.ApisApi(kube.api_client).get_api_versions()
    assert {"apps", "coordination.k8s.io", "policy", "scheduling.k8s.io",
            "apiextensions.k8s.io"} <= {g.name for g in apis.groups}
    v1 = client.CoreV1Api(kube.api_client).get_api_resources()
    by_name = {r.name: r for r in v1.resources}
    assert by_name["pods"].namespaced and not by_name["nodes"].namespaced
    assert by_name["pods/eviction"].group == "policy"
    apps = client.AppsV1Api(kube.api_client).get_api_resources()
    assert {r.name for r in apps.resources} >= {"deployments", "deployments/scale", "statefulsets/status"}
    assert client.VersionApi(kube.api_client).get_code().minor == "37"
    assert server.url.startswith("http://127.0.0.1:")


def test_dynamic_client_discovers_resources(kube):
    from kubernetes import dynamic

    dyn = dynamic.DynamicClient(kube.api_client)
    leases = dyn.resources.get(api_version="coordination.k8s.io/v1", kind="Lease")
    leases.create(body={"metadata": {"name": "dyn"}, "spec": {"holderIdentity": "x"}},
                  namespace=kube.namespace)
    got = leases.get(name="dyn", namespace=kube.namespace)
    assert got.spec.holderIdentity == "x"
