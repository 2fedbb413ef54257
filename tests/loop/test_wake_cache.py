"""The signal wake on the watch cache's informers (`SignalWake.start(cache=...)`,
`ClusterCache.on_object_event`): under the controller the inference Deployments and
StatefulSets are listed and watched once, by the cache, and the wake is fed by that watch's
events; no informer of the wake's own is started. Without an API server: the apps API and the
client's watch are fakes that count their lists and watches. The same on the real control plane:
tests/integration/test_wake.py."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest
from kubernetes import client, watch

from reconciler import conventions as C
from reconciler.loop.informer import ClusterCache
from reconciler.loop.wake import SignalWake
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import NOW
from tests.plan.support import desired, scaling
from tests.support.wait import wait_for

DEPLOYMENTS = "list_deployment_for_all_namespaces"
STATEFUL_SETS = "list_stateful_set_for_all_namespaces"


def deployment(queue_length: float, rv: str, replicas: int = 2) -> client.V1Deployment:
    """team-b/chat, the target of tests.plan.support's ScalingPolicy."""
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(
            name="chat",
            namespace="team-b",
            resource_version=rv,
            labels={C.INFERENCE_LABEL: "true"},
            annotations={C.QUEUE_LENGTH_ANN: str(queue_length)},
        ),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels={"app": "chat"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "chat"}),
                spec=client.V1PodSpec(
                    containers=[
                        client.V1Container(
                            name="vllm",
                            resources=client.V1ResourceRequirements(
                                requests={C.SHARED_RESOURCE: "1"}
                            ),
                        )
                    ],
                    priority_class_name="serving",
                    node_selector={C.POOL_LABEL: "a100"},
                ),
            ),
        ),
        status=client.V1DeploymentStatus(ready_replicas=replicas),
    )


class Server:
    """What the fake apps API lists (each list recorded, with its label selector) and what its
    watches stream (one queue of events per list function; each watch started recorded)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.lists: list[tuple[str, str | None]] = []
        self.watches: list[str] = []
        self.events: dict[str, queue.Queue] = {
            DEPLOYMENTS: queue.Queue(),
            STATEFUL_SETS: queue.Queue(),
        }
        self.deployments = [deployment(4, "5")]

    def apps(self, _api_client: Any = None) -> Any:
        server = self

        class Apps:
            def list_deployment_for_all_namespaces(
                self, label_selector: str | None = None, **_: Any
            ) -> client.V1DeploymentList:
                server.lists.append((DEPLOYMENTS, label_selector))
                return client.V1DeploymentList(
                    items=list(server.deployments), metadata=client.V1ListMeta(resource_version="5")
                )

            def list_stateful_set_for_all_namespaces(
                self, label_selector: str | None = None, **_: Any
            ) -> client.V1StatefulSetList:
                server.lists.append((STATEFUL_SETS, label_selector))
                return client.V1StatefulSetList(
                    items=[], metadata=client.V1ListMeta(resource_version="5")
                )

        return Apps()

    def watch(self) -> Any:
        server = self

        class Watch:
            def stream(self, list_fn: Any, **_: Any):
                name = list_fn.__name__
                server.watches.append(name)
                while not server.stop.is_set():
                    try:
                        yield server.events[name].get(timeout=0.02)
                    except queue.Empty:
                        continue

            def stop(self) -> None:
                pass

        return Watch()

    def send(self, name: str, kind: str, obj: Any) -> None:
        self.events[name].put({"type": kind, "object": obj})


@pytest.fixture
def server(monkeypatch):
    stop = threading.Event()
    s = Server(stop)
    monkeypatch.setattr(client, "AppsV1Api", s.apps)
    monkeypatch.setattr(watch, "Watch", s.watch)
    yield s
    stop.set()


def api() -> client.ApiClient:
    return client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))


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
    assert w.start(None, server.stop, cache=cache) is w
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


def test_without_a_cache_the_wake_watches_for_itself(server):
    w, woke = wake_of()
    w.start(None, server.stop, backoff_seconds=30)
    assert [i.name for i in w.informers] == ["inference-deployments", "inference-statefulsets"]
    assert w.wait_synced(5)
    wait_for("both watches", lambda: len(server.watches) == 2, timeout=5, interval=0.01)
    server.send(DEPLOYMENTS, "MODIFIED", deployment(60, "6"))
    wait_for("the wake", lambda: woke == [1], timeout=5, interval=0.01)
    assert sorted(server.lists) == [
        (DEPLOYMENTS, C.INFERENCE_SELECTOR),
        (STATEFUL_SETS, C.INFERENCE_SELECTOR),
    ]


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
