"""Fakes for the signal wake's tests (test_wake.py, test_wake_cache.py): the apps API and the
client's watch a `ClusterCache`'s Deployments and StatefulSets informers list and stream from
(`Server`), the workloads they hold, and a stub Prometheus (`Prom`)."""

from __future__ import annotations

import json
import queue
import threading
import urllib.parse
from typing import Any

from kubernetes import client

from reconciler import conventions as C

DEPLOYMENTS = "list_deployment_for_all_namespaces"
STATEFUL_SETS = "list_stateful_set_for_all_namespaces"


def _meta(name: str, rv: str, queue_length: float) -> client.V1ObjectMeta:
    return client.V1ObjectMeta(
        name=name,
        namespace="team-b",
        resource_version=rv,
        labels={C.INFERENCE_LABEL: "true"},
        annotations={C.QUEUE_LENGTH_ANN: str(queue_length)},
    )


def _template(name: str) -> client.V1PodTemplateSpec:
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"app": name}),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="vllm",
                    resources=client.V1ResourceRequirements(requests={C.SHARED_RESOURCE: "1"}),
                )
            ],
            priority_class_name="serving",
            node_selector={C.POOL_LABEL: "a100"},
        ),
    )


def deployment(queue_length: float, rv: str, replicas: int = 2) -> client.V1Deployment:
    """team-b/chat, the target of tests.plan.support's ScalingPolicy."""
    return client.V1Deployment(
        metadata=_meta("chat", rv, queue_length),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels={"app": "chat"}),
            template=_template("chat"),
        ),
        status=client.V1DeploymentStatus(ready_replicas=replicas),
    )


def stateful_set(
    name: str, queue_length: float, rv: str, replicas: int = 1
) -> client.V1StatefulSet:
    """team-b/`name`, an inference StatefulSet no ScalingPolicy targets."""
    return client.V1StatefulSet(
        metadata=_meta(name, rv, queue_length),
        spec=client.V1StatefulSetSpec(
            replicas=replicas,
            service_name=name,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=_template(name),
        ),
        status=client.V1StatefulSetStatus(replicas=replicas, ready_replicas=replicas),
    )


class Server:
    """What the fake apps API lists (each list recorded, with its label selector) and what its
    watches stream (one queue of events per list function; each watch started recorded).
    Patch it in with `client.AppsV1Api = server.apps` and `watch.Watch = server.watch`."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.lists: list[tuple[str, str | None]] = []
        self.watches: list[str] = []
        self.events: dict[str, queue.Queue] = {
            DEPLOYMENTS: queue.Queue(),
            STATEFUL_SETS: queue.Queue(),
        }
        self.deployments: list[client.V1Deployment] = [deployment(4, "5")]
        self.stateful_sets: list[client.V1StatefulSet] = []

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
                    items=list(server.stateful_sets),
                    metadata=client.V1ListMeta(resource_version="5"),
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


def api() -> client.ApiClient:
    return client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))


class Prom:
    """A stub Prometheus: answers each query with the queue value set, records what it ran."""

    def __init__(self) -> None:
        self.value = "0"
        self.asked: list[str] = []

    def __call__(self, url: str, timeout: float) -> tuple[int, bytes]:
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["query"][0]
        self.asked.append(q)
        body = {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": {}, "value": [1700000000, self.value]}],
            },
        }
        return 200, json.dumps(body).encode()
