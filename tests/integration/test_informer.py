"""The controller's watch-fed caches: list, watch, resume, relist on 410 and on restarts."""

from __future__ import annotations

import threading
import time

from reconciler.loop.informer import ClusterCache
from reconciler.observe.kube import observe_cluster
from tests.integration.harness import add_gpu_node, create_pod, install_crds


def eventually(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def names(items) -> set[str]:
    return {f"{o.metadata.namespace or ''}/{o.metadata.name}" for o in items or []}


def test_cache_follows_changes_and_survives_compaction_and_restart(kube):
    server = kube.require_fake()
    ns = kube.namespace
    add_gpu_node(kube, "a100-1", state=False)
    create_pod(kube, ns, "before", gpus=1, pool=None, cls=None)
    stop = threading.Event()
    cache = ClusterCache(kube.api_client, timeout_seconds=5, backoff_seconds=0.1).start(stop)
    try:
        assert cache.wait_synced(10)
        assert f"{ns}/before" in names(cache.pods()) and "/a100-1" in names(cache.nodes())

        create_pod(kube, ns, "added", gpus=1, pool=None, cls=None)
        eventually(lambda: f"{ns}/added" in names(cache.pods()))
        kube.core.delete_namespaced_pod("before", ns)
        eventually(lambda: f"{ns}/before" not in names(cache.pods()))
        kube.core.patch_node("a100-1", {"metadata": {"labels": {"x": "1"}}}, _content_type="application/merge-patch+json")
        eventually(lambda: any((n.metadata.labels or {}).get("x") == "1" for n in cache.nodes()))

        # the apiserver goes away, history is compacted while it is down, things change:
        # resuming from the old resourceVersion gets 410 Gone, and the cache relists
        relists = cache.pod_informer.relists
        with server.down():
            time.sleep(0.3)
        create_pod(kube, ns, "while-away", gpus=1, pool=None, cls=None)
        server.cluster.compact()
        server.restart()
        eventually(lambda: f"{ns}/while-away" in names(cache.pods()), timeout=20)
        assert cache.pod_informer.relists > relists
        assert names(cache.pods()) == names(kube.core.list_pod_for_all_namespaces().items)
    finally:
        stop.set()


def test_observed_state_from_the_cache_equals_the_listed_one(kube):
    kube.require_fake()
    ns = kube.namespace
    install_crds(kube)
    add_gpu_node(kube, "a100-1")
    create_pod(kube, ns, "job", node="a100-1", gpus=2, allocation="0,1", cls=None)
    stop = threading.Event()
    cache = ClusterCache(kube.api_client, timeout_seconds=5).start(stop)
    try:
        assert cache.wait_synced(10)
        listed = observe_cluster(kube.api_client)
        cached = observe_cluster(kube.api_client, cache=cache, now=listed.observed_at)
        assert cached == listed
        assert [w.key for w in cached.workloads] == [f"{ns}/job"]
    finally:
        stop.set()
