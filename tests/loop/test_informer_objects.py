"""The informer (reconciler/loop/informer.py) over custom objects, without an API server: a
`CustomObjectsApi` list answers JSON (dicts), which the cache keys and versions as it does the
client's models; a list answered 404 (the CRD not installed) leaves it `absent`, not synced, so
readers list for themselves and `ClusterCache.wait_synced` does not wait for it. The resources
an observation reads besides nodes, pods and GpuNodeStates (`ClusterCache.listed`): a 404
believed only once confirmed, a 403 backed off, gpupool's own writes seen before the cache
serves them, and an observation through the cache that lists nothing. The watch on the real
API server: tests/integration/test_informer.py."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client

from reconciler import conventions as C
from reconciler.loop.informer import ABSENT_CONFIRMED, ClusterCache, Informer
from tests.support.wait import wait_for


def state(name: str, rv: str) -> dict:
    return {"metadata": {"name": name, "resourceVersion": rv}, "status": {"gpus": []}}


def test_a_custom_objects_list_fills_the_cache():
    answer = {
        "apiVersion": "gpupool.io/v1alpha1",
        "items": [state("a", "7"), state("b", "9")],
        "metadata": {"resourceVersion": "12"},
    }
    inf = Informer(lambda **_: answer, name="gpunodestates")
    assert inf.items() is None
    assert inf._relist() == "12"
    assert inf.rv == 12 and inf.synced.is_set() and inf.relists == 1
    assert sorted(o["metadata"]["name"] for o in inf.items()) == ["a", "b"]
    assert inf._key(state("a", "7")) == "/a"


def test_a_list_answered_404_leaves_the_informer_absent():
    def not_served(**_):
        raise client.ApiException(status=404, reason="Not Found")

    stop = threading.Event()
    inf = Informer(not_served, name="gpunodestates", backoff_seconds=0.01).start(stop)
    try:
        assert inf.settled(5)
        assert inf.absent and inf.items() is None and not inf.synced.is_set()
    finally:
        stop.set()


def test_settled_waits_for_a_list():
    inf = Informer(lambda **_: None, name="x")
    assert not inf.settled(0.2)


def refused(status: int, times: int, then: dict | None = None):
    """A list answered `status` `times` times, then `then` (None: refused for ever)."""
    calls = []

    def list_fn(watch=False, **_):
        if watch:
            raise client.ApiException(status=500, reason="no watch here")
        calls.append(status)
        if then is None or len(calls) <= times:
            raise client.ApiException(status=status, reason="refused")
        return then

    return list_fn, calls


def object_cache(resource: str, list_fn) -> ClusterCache:
    cache = ClusterCache(
        client.ApiClient(client.Configuration(host="http://127.0.0.1:9")), backoff_seconds=0.01
    )
    cache.object_informers = {resource: Informer(list_fn, name=resource, backoff_seconds=0.01)}
    return cache


def test_a_404_is_believed_only_once_it_was_answered_again_and_again():
    """An API server that has just started answers 404 for CRDs for a moment: the cache makes
    the reader list (and meet the 404) until the list was refused ABSENT_CONFIRMED times in a
    row, then answers 404 itself, without a request; a list that succeeds again ends it."""
    queues = C.KUEUE_RESOURCES["ClusterQueue"]
    list_fn, calls = refused(404, 0)
    cache = object_cache(queues, list_fn)
    inf = cache.object_informers[queues]
    stop = threading.Event()
    inf.start(stop)
    try:
        wait_for("the first 404", lambda: inf.refusals >= 1, timeout=5, interval=0.001)
        wait_for("the 404 confirmed", lambda: inf.refusals >= ABSENT_CONFIRMED, timeout=5)
    finally:
        stop.set()
    assert inf.absent and not inf.synced.is_set()
    with pytest.raises(client.ApiException) as exc:
        cache.listed(queues)
    assert exc.value.status == 404
    inf.refusals = ABSENT_CONFIRMED - 1  # one 404 fewer: not believed, the reader lists
    assert cache.listed(queues) is None
    answer = {"items": [state("q", "3")], "metadata": {"resourceVersion": "4"}}
    inf.list_fn = lambda **_: answer
    inf._relist()  # the CRD installed since
    assert not inf.absent and inf.refusals == 0
    [q] = cache.listed(queues)
    assert q["metadata"]["name"] == "q"


def test_a_403_leaves_the_reader_to_list_and_backs_off():
    list_fn, calls = refused(403, 0)
    cache = object_cache(C.PRIORITY_CLASSES, list_fn)
    inf = cache.object_informers[C.PRIORITY_CLASSES]
    stop = threading.Event()
    inf.start(stop)
    try:
        wait_for("three refusals", lambda: inf.refusals >= 3, timeout=5, interval=0.001)
        assert inf.forbidden and not inf.absent and not inf.synced.is_set()
        assert cache.listed(C.PRIORITY_CLASSES) is None  # the reader lists: its own 403
        time.sleep(0.3)  # waits double each time: 0.01, 0.02, 0.04, 0.08, 0.16, ...
        assert len(calls) <= 7
    finally:
        stop.set()


def test_a_resource_is_read_from_the_cache_only_once_it_saw_gpupools_writes():
    answer = {
        "items": [
            {"metadata": {"name": "q", "namespace": "ns", "uid": "u1", "resourceVersion": "5"}}
        ],
        "metadata": {"resourceVersion": "9"},
    }
    cache = object_cache(C.RESOURCE_QUOTAS, lambda **_: answer)
    inf = cache.object_informers[C.RESOURCE_QUOTAS]
    inf._relist()
    assert cache.listed("no.such.resource") is None
    assert cache.caught_up({}, 0.1)
    assert [o["metadata"]["name"] for o in cache.listed(C.RESOURCE_QUOTAS)] == ["q"]
    # gpupool wrote a quota the cache has not seen: read afresh, not from the cache
    assert cache.caught_up({C.RESOURCE_QUOTAS: 12}, 0.05)  # nodes and pods need no wait
    assert cache.listed(C.RESOURCE_QUOTAS) is None
    with inf._lock:
        inf._seen("12")
    assert cache.listed(C.RESOURCE_QUOTAS) is not None
    # gpupool deleted it: the cache must not hold it any more
    assert cache.caught_up({}, 0.05, {C.RESOURCE_QUOTAS: {"ns/q": "u1"}})
    assert cache.listed(C.RESOURCE_QUOTAS) is None
    with inf._lock:
        inf._items.pop("ns/q")
    assert cache.listed(C.RESOURCE_QUOTAS) == []


def test_an_observation_through_the_cache_lists_nothing():
    """Every resource read from the cache: the API client is never called (`object()` would
    fail at the first request)."""
    from reconciler.observe.kube import observe_cluster

    class Cache:
        def nodes(self):
            return []

        def pods(self):
            return []

        def node_states(self):
            return []

        def listed(self, resource):
            if resource == C.KUEUE_RESOURCES["ResourceFlavor"]:
                raise client.ApiException(status=404, reason="not served")
            return []

    observed = observe_cluster(object(), cache=Cache(), dra=False)
    assert observed.kueue is None and observed.quotas == [] and observed.services == []


def test_a_selected_list_keeps_the_type_its_watch_decodes_events_into():
    """The inference Deployments and the gated namespaces are listed with a label selector;
    the watch must still decode their events into the client's models, as the list does."""
    from kubernetes import watch

    from reconciler.loop.informer import _listers

    listers = _listers(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    decoded = {r: watch.Watch().get_return_type(f) for r, f in listers.items()}
    assert decoded[C.DEPLOYMENTS] is client.V1Deployment
    assert decoded[C.STATEFUL_SETS] is client.V1StatefulSet
    assert decoded[C.GATED_NAMESPACES] is client.V1Namespace
    assert decoded[C.JOBS] is client.V1Job
