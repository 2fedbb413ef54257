"""The signal wake's feed (`SignalWake.start(cache=...)`, `ClusterCache.on_object_event`): the
inference Deployments and StatefulSets are listed and watched once, by the watch cache, and the
wake is fed by that watch's events (it has no watch of its own, and no start without a cache);
the Prometheus poller runs on its own thread beside it. Without an API server: the apps API and
the client's watch are fakes that count their lists and watches (tests/loop/wake_support.py).
The same on the real control plane: tests/integration/test_wake.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client, watch

from reconciler import conventions as C
from reconciler.loop.informer import ClusterCache
from reconciler.loop.wake import SignalWake
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.loop.wake_support import (
    DEPLOYMENTS,
    STATEFUL_SETS,
    Prom,
    Server,
    api,
    deployment,
    stateful_set,
)
from tests.plan.scenarios import NOW
from tests.plan.support import desired, prom_scaling, scaling
from tests.support.wait import wait_for


@pytest.fixture
def server(monkeypatch):
    stop = threading.Event()
    s = Server(stop)
    monkeypatch.setattr(client, "AppsV1Api", s.apps)
    monkeypatch.setattr(watch, "Watch", s.watch)
    yield s
    stop.set()


def wake_of() -> tuple[SignalWake, list[int]]:
    d = load([SourceFile("d.yaml", desired(extra=scaling()))])
    woke: list[int] = []
    return SignalWake(lambda: d, lambda: woke.append(1), clock=lambda: NOW), woke


def start_workloads(cache: ClusterCache, stop: threading.Event) -> None:
    """Start the cache's Deployments and StatefulSets informers (the rest would list an API
    server that is not there)."""
    for resource in (C.DEPLOYMENTS, C.STATEFUL_SETS):
        cache.object_informers[resource].start(stop)


def test_the_wake_reads_the_caches_watch_and_starts_none_of_its_own(server):
    cache = ClusterCache(api(), backoff_seconds=30)
    w, woke = wake_of()
    assert w.start(server.stop, cache=cache) is w
    assert w.informers == [
        cache.object_informers[C.DEPLOYMENTS],
        cache.object_informers[C.STATEFUL_SETS],
    ]
    assert server.lists == [] and server.watches == []  # the cache starts them, not the wake
    start_workloads(cache, server.stop)
    assert w.wait_synced(5)
    assert [k for k, _ in w.services] == ["Deployment"]  # the list is the baseline
    wait_for("both watches", lambda: len(server.watches) == 2, timeout=5, interval=0.01)

    server.send(DEPLOYMENTS, "MODIFIED", deployment(8, "6"))  # 4/replica: inside the band
    wait_for("the event", lambda: cache.object_informers[C.DEPLOYMENTS].rv == 6, timeout=5)
    wait_for("the wake saw it", lambda: w.services[("Deployment", "team-b/chat")].queue_length == 8)
    assert woke == []
    server.send(DEPLOYMENTS, "MODIFIED", deployment(60, "7"))  # 30/replica > 10: crosses
    wait_for("the wake", lambda: woke == [1], timeout=5, interval=0.01)
    [listed] = cache.listed(C.DEPLOYMENTS)  # the cache took the same event, for the cycles
    assert listed.metadata.annotations[C.QUEUE_LENGTH_ANN] == "60"
    w.rebase()  # after a cycle: the baseline, no wake
    server.send(DEPLOYMENTS, "DELETED", deployment(60, "8"))
    wait_for("the deletion", lambda: not w.services, timeout=5, interval=0.01)
    assert woke == [1] and w.wakes == 1

    # one list and one watch per resource, the cache's, with the inference selector
    assert sorted(server.lists) == [
        (DEPLOYMENTS, C.INFERENCE_SELECTOR),
        (STATEFUL_SETS, C.INFERENCE_SELECTOR),
    ]
    assert sorted(server.watches) == [DEPLOYMENTS, STATEFUL_SETS]
    assert not [t for t in threading.enumerate() if t.name.startswith("informer-inference-")]


def test_the_wake_needs_a_cache(server):
    w, _ = wake_of()
    with pytest.raises(TypeError):
        w.start(server.stop)  # no cache: no feed to listen to
    assert w.informers == [] and server.lists == [] and server.watches == []


def test_both_kinds_reach_the_wake_lists_as_the_baseline_then_events(server):
    server.stateful_sets = [stateful_set("embed", 3, "5")]
    cache = ClusterCache(api(), backoff_seconds=30)
    w, woke = wake_of()
    w.start(server.stop, cache=cache)
    assert not w.wait_synced(0.05)  # the cache has not listed yet: no baseline taken
    assert w.services == {}
    start_workloads(cache, server.stop)
    assert w.wait_synced(5)
    assert sorted(w.services) == [("Deployment", "team-b/chat"), ("StatefulSet", "team-b/embed")]
    assert w.services[("StatefulSet", "team-b/embed")].kind == "StatefulSet"
    wait_for("both watches", lambda: len(server.watches) == 2, timeout=5, interval=0.01)

    server.send(STATEFUL_SETS, "ADDED", stateful_set("rank", 7, "6", replicas=3))
    wait_for("the new one", lambda: ("StatefulSet", "team-b/rank") in w.services, timeout=5)
    assert w.services[("StatefulSet", "team-b/rank")].replicas == 3
    server.send(STATEFUL_SETS, "DELETED", stateful_set("embed", 3, "7"))
    wait_for("the deletion", lambda: ("StatefulSet", "team-b/embed") not in w.services, timeout=5)
    assert woke == []  # no policy targets these: nothing crosses


def test_the_poller_runs_on_its_own_thread_beside_the_caches_watch(server):
    d = load([SourceFile("d.yaml", desired(extra=prom_scaling()))])
    prom, woke = Prom(), []
    prom.value = "8"  # 4/replica, a wait of 8 s: inside the band
    w = SignalWake(
        lambda: d,
        lambda: woke.append(1),
        prometheus_url="http://prom:9090",
        transport=prom,
        poll_seconds=0.01,
        clock=lambda: NOW,
    )
    cache = ClusterCache(api(), backoff_seconds=30)
    w.start(server.stop, cache=cache)
    start_workloads(cache, server.stop)
    assert w.wait_synced(5)
    [poller] = [t for t in threading.enumerate() if t.name == "gpupool-signal-poll"]
    wait_for("a few polls", lambda: len(prom.asked) >= 6, timeout=5, interval=0.01)
    assert woke == []
    prom.value = "60"  # 30/replica and a 60 s wait: over both thresholds
    wait_for("the poller's wake", lambda: woke == [1], timeout=5, interval=0.01)
    asked = len(prom.asked)
    wait_for("more polls", lambda: len(prom.asked) >= asked + 4, timeout=5, interval=0.01)
    assert woke == [1]  # unchanged: no new crossing
    server.stop.set()
    poller.join(5)
    assert not poller.is_alive()


def test_object_listeners_are_chained_and_the_pod_path_is_left_alone(server):
    def on_pod(kind: str, pod: Any) -> None:
        pass

    cache = ClusterCache(api(), on_pod_event=on_pod)
    seen: list[tuple[str, str, str]] = []
    inf = cache.on_object_event(C.DEPLOYMENTS, lambda k, o: seen.append(("a", k, o)))
    assert inf is cache.object_informers[C.DEPLOYMENTS]
    assert cache.on_object_event(C.DEPLOYMENTS, lambda k, o: seen.append(("b", k, o))) is inf
    inf.on_event("ADDED", "x")
    assert seen == [("a", "ADDED", "x"), ("b", "ADDED", "x")]
    assert cache.pod_informer.on_event is on_pod
    assert cache.node_informer.on_event is None
    others = [i for r, i in cache.object_informers.items() if r != C.DEPLOYMENTS]
    assert all(i.on_event is None for i in others)
    with pytest.raises(KeyError):
        cache.on_object_event("no.such.resource", lambda k, o: None)


def test_the_controller_starts_the_wake_on_its_cache(server, tmp_path):
    from reconciler.loop.controller import Controller
    from reconciler.loop.sources import DirectorySource

    (tmp_path / "policies").mkdir()
    ctl = Controller(DirectorySource(tmp_path), api(), namespace="gpupool-system", identity="t")
    ctl.cache = ClusterCache(ctl.api)
    ctl._start_signal_wake(server.stop)
    deployments = ctl.cache.object_informers[C.DEPLOYMENTS]
    sets = ctl.cache.object_informers[C.STATEFUL_SETS]
    assert ctl.signal_wake.informers == [deployments, sets]
    assert deployments.on_event is not None and sets.on_event is not None
    assert server.lists == [] and server.watches == []
