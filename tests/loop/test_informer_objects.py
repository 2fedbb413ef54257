"""The informer (reconciler/loop/informer.py) over custom objects, without an API server: a
`CustomObjectsApi` list answers JSON (dicts), which the cache keys and versions as it does the
client's models; a list answered 404 (the CRD not installed) leaves it `absent`, not synced, so
readers list for themselves and `ClusterCache.wait_synced` does not wait for it. The watch on
the real API server: tests/integration/test_informer.py."""

from __future__ import annotations

import threading

from kubernetes import client

from reconciler.loop.informer import Informer


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
