"""A cluster for `observe_cluster` without an API server: every object it lists, as the JSON the
API server returns (dicts, camelCase), and `serving(cluster)`, which answers the official
client's list calls from them for the length of a `with`.

Built-in kinds (Nodes, Pods, Jobs, Deployments, StatefulSets, HPAs, ResourceQuotas,
PriorityClasses, Namespaces) are turned into the client's models by the client's own
deserializer, as a real answer is; an item that is already a model object is handed over as it
is (a shape no API server sends, but a watch cache or a buggy client could hold). Custom
objects (GpuNodeStates, PodGroups of both kinds, KEDA ScaledObjects, Kueue's objects) are
handed over as dicts, as `CustomObjectsApi` does; a list that is None answers 404 (CRD not
installed, API not served).

`base()` is a small valid cluster that reads without a report: two A100 nodes (one whose agent
publishes its cards and pods, one read from its capacity), pods bound, gated, admitted by
gpupool and owned by Jobs, a Job gpupool suspended, a Move's next-pod reservation, an inference
Deployment with an HPA and a StatefulSet with a ScaledObject, a PodGroup, quotas and classes.
Used by tests/observe/test_loose_shapes.py, tests/observe/test_workload_gangs.py and
tests/test_hostile_cluster.py.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from unittest import mock

from kubernetes import client

from reconciler import conventions as C

NOW = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)
T0 = "2026-12-03T05:00:00Z"
A100 = "A100-SXM4-80GB"


@dataclass
class Cluster:
    nodes: list = field(default_factory=list)
    pods: list = field(default_factory=list)
    node_states: list | None = field(default_factory=list)
    jobs: list = field(default_factory=list)
    pod_groups: list | None = None
    workload_pod_groups: list | None = None
    """The Workload API's PodGroups (scheduling.k8s.io/v1beta1); None: the API is not served."""
    deployments: list = field(default_factory=list)
    stateful_sets: list = field(default_factory=list)
    hpas: list = field(default_factory=list)
    scaled_objects: list | None = None
    quotas: list = field(default_factory=list)
    priority_classes: list = field(default_factory=list)
    namespaces: list = field(default_factory=list)
    kueue: dict[str, list] | None = None
    """Kueue plural -> its objects; None: Kueue's CRDs are not served."""
    api_server: bool = True
    """Answer only what an API server can hold: an object the client's deserializer refuses
    (a built-in kind), a custom object that is not an object or whose `metadata` is not an
    ObjectMeta, and a second object of a kind with one namespace and name are not answered
    (`refused`). False: every item is answered as it is (a shape no API server sends)."""
    refused: list[tuple[str, int, str]] = field(default_factory=list)
    """(field, index, why) of each object the last answers left out."""

    def find(self, kind: str, name: str, namespace: str = "") -> Any:
        """The object of `kind` (a field name of this class) named so, for a test to edit."""
        for o in getattr(self, kind) or []:
            meta = o.get("metadata") if isinstance(o, dict) else None
            if (
                isinstance(meta, dict)
                and meta.get("name") == name
                and (not namespace or meta.get("namespace") == namespace)
            ):
                return o
        raise KeyError((kind, namespace, name))


# --------------------------------------------------------------------------- the base cluster


def managed(*annotations: str, manager: str = C.FIELD_MANAGER, spec: tuple = ()) -> dict:
    """A managedFields entry: `manager` set these annotations (and `spec` fields)."""
    fields: dict = {"f:metadata": {"f:annotations": {f"f:{k}": {} for k in annotations}}}
    if spec:
        fields["f:spec"] = {f"f:{k}": {} for k in spec}
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        "time": T0,
    }


def node(name: str, gpus: int = 8) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {C.POOL_LABEL: "a100", C.PRODUCT_LABEL: A100},
            "annotations": {},
            "creationTimestamp": T0,
        },
        "spec": {},
        "status": {
            "capacity": {C.GPU_RESOURCE: str(gpus), "cpu": "64"},
            "allocatable": {C.GPU_RESOURCE: str(gpus), "cpu": "64"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def node_state(name: str, cards: list[dict], pods: list[dict]) -> dict:
    return {
        "apiVersion": C.API_VERSION,
        "kind": C.NODE_STATE_KIND,
        "metadata": {"name": name},
        "status": {"gpus": cards, "pods": pods},
    }


def card(index: int, *, mig: list[tuple[str, int]] | None = None) -> dict:
    out: dict = {"index": index, "model": A100, "memoryMib": 81920, "utilization": 3.0}
    out["belowSince"] = {"5": T0, "10": T0}
    if mig is not None:
        out["migEnabled"] = True
        out["migInstances"] = [{"profile": p, "start": s} for p, s in mig]
    return out


def pod(
    ns: str,
    name: str,
    *,
    node_name: str | None = None,
    limits: dict | None = None,
    annotations: dict | None = None,
    labels: dict | None = None,
    managed_fields: list | None = None,
    owner: tuple[str, str] | None = None,
    gated: bool = False,
    phase: str | None = None,
    cls: str = "training-low",
) -> dict:
    meta: dict = {
        "name": name,
        "namespace": ns,
        "uid": f"uid-{ns}-{name}",
        "creationTimestamp": T0,
        "annotations": annotations or {},
        "labels": labels or {},
    }
    if managed_fields:
        meta["managedFields"] = managed_fields
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": owner[0], "name": owner[1], "uid": "u"}
        ]
    spec: dict = {
        "priorityClassName": cls,
        "nodeSelector": {C.POOL_LABEL: "a100"},
        "containers": [
            {"name": "main", "image": "x", "resources": {"limits": limits or {}}},
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    if gated:
        spec["schedulingGates"] = [{"name": C.ADMISSION_GATE}]
    status: dict = {"phase": phase or ("Running" if node_name else "Pending")}
    if node_name:
        status["startTime"] = T0
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def template(gpus: int = 1, cls: str = "serving") -> dict:
    return {
        "metadata": {"annotations": {C.GPU_MEMORY_ANN: "20Gi"}},
        "spec": {
            "priorityClassName": cls,
            "nodeSelector": {C.POOL_LABEL: "a100"},
            "containers": [
                {"name": "main", "image": "x", "resources": {"limits": {C.GPU_RESOURCE: str(gpus)}}}
            ],
        },
    }


def job(
    ns: str,
    name: str,
    *,
    parallelism: int = 1,
    annotations: dict | None = None,
    managed_fields: list | None = None,
    suspend: bool = False,
) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ns,
            "annotations": annotations or {},
            "managedFields": managed_fields or [],
            "labels": {},
        },
        "spec": {
            "parallelism": parallelism,
            "suspend": suspend,
            "template": template(2, cls="training-low"),
        },
    }


def app(kind: str, ns: str, name: str, replicas: int = 2) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {C.INFERENCE_LABEL: "true"},
            "annotations": {C.QUEUE_LENGTH_ANN: "12", C.LAST_SCALE_ANN: T0},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template(1),
        },
        "status": {"replicas": replicas, "readyReplicas": replicas},
    }


def base() -> Cluster:
    """A valid cluster that `observe_cluster` reads whole, with no report: 8 GPU pods (one
    asking for a shared slice), a CPU pod."""
    admitted = {C.ADMITTED_ANN: "a100-2", C.INTENDED_GPUS_ANN: "4,5"}
    reserved = {C.RESERVED_ANN: "a100-2:6,7"}
    next_pod = {C.NEXT_POD_RESERVED_ANN: "a100-1:6,7@2026-12-03T05:59:00Z"}
    return Cluster(
        nodes=[node("a100-1"), node("a100-2")],
        node_states=[
            node_state(
                "a100-1",
                [card(0, mig=[("3g.40gb", 0), ("3g.40gb", 4)])] + [card(i) for i in range(1, 8)],
                [
                    {
                        "namespace": "team-a",
                        "name": "train-0",
                        "allocations": [{"gpu": 2}, {"gpu": 3}],
                    },
                    {
                        "namespace": "team-b",
                        "name": "ranker-0",
                        "allocations": [{"gpu": 0, "migStart": 0, "migProfile": "3g.40gb"}],
                    },
                ],
            )
        ],
        pods=[
            pod(
                "team-a",
                "train-0",
                node_name="a100-1",
                limits={C.GPU_RESOURCE: "2"},
                owner=("Job", "train"),
                annotations={C.CHECKPOINTABLE_ANN: "true", C.LAST_CHECKPOINT_ANN: T0},
            ),
            pod(
                "team-b",
                "ranker-0",
                node_name="a100-1",
                limits={C.mig_resource("3g.40gb"): "1"},
                cls="serving",
            ),
            pod(
                "team-a",
                "on-two",
                node_name="a100-2",
                limits={C.GPU_RESOURCE: "1"},
                annotations={C.GPUS_ANN: "0"},
                managed_fields=[managed(C.GPUS_ANN, manager=C.AGENT_FIELD_MANAGER)],
            ),
            pod("team-a", "waiting", limits={C.GPU_RESOURCE: "2"}, gated=True),
            pod(
                "team-b",
                "reserved",
                limits={C.GPU_RESOURCE: "2"},
                gated=True,
                annotations=reserved,
                managed_fields=[managed(*reserved)],
            ),
            pod(
                "team-a",
                "admitted",
                limits={C.GPU_RESOURCE: "2"},
                annotations=admitted,
                managed_fields=[managed(*admitted)],
            ),
            pod(
                "team-a",
                "gang-0",
                limits={C.GPU_RESOURCE: "1"},
                gated=True,
                labels={C.POD_GROUP_LABEL: "gang"},
            ),
            pod("team-a", "cpu-only", node_name="a100-2"),
            pod("team-b", "embed-0", limits={C.SHARED_RESOURCE: "1"}, cls="serving"),
        ],
        jobs=[
            job("team-a", "train", annotations=next_pod, managed_fields=[managed(*next_pod)]),
            job(
                "team-b",
                "paused",
                parallelism=2,
                suspend=True,
                annotations={C.SUSPENDED_BY_ANN: T0},
                managed_fields=[managed(C.SUSPENDED_BY_ANN, spec=("suspend",))],
            ),
        ],
        pod_groups=[
            {
                "apiVersion": f"{C.POD_GROUP_GROUP}/{C.POD_GROUP_VERSION}",
                "kind": "PodGroup",
                "metadata": {"name": "gang", "namespace": "team-a"},
                "spec": {"minMember": 2},
            }
        ],
        deployments=[app("Deployment", "team-b", "chat")],
        stateful_sets=[app("StatefulSet", "team-b", "summarize", replicas=1)],
        hpas=[
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "chat", "namespace": "team-b"},
                "spec": {
                    "scaleTargetRef": {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": "chat",
                    },
                    "minReplicas": 1,
                    "maxReplicas": 6,
                },
            }
        ],
        scaled_objects=[
            {
                "apiVersion": f"{C.KEDA_GROUP}/{C.KEDA_VERSION}",
                "kind": C.SCALED_OBJECT_KIND,
                "metadata": {"name": "summarize", "namespace": "team-b"},
                "spec": {
                    "scaleTargetRef": {"kind": "StatefulSet", "name": "summarize"},
                    "minReplicaCount": 1,
                    "maxReplicaCount": 4,
                },
            }
        ],
        quotas=[
            {
                "metadata": {
                    "name": "gpupool",
                    "namespace": "team-a",
                    "labels": {C.MANAGED_BY_LABEL: "gpupool"},
                },
                "spec": {"hard": {f"requests.{C.GPU_RESOURCE}": "16"}},
            }
        ],
        priority_classes=[
            {"metadata": {"name": "serving"}, "value": 30000},
            {"metadata": {"name": "training-low"}, "value": 10000},
        ],
        namespaces=[
            {
                "metadata": {
                    "name": "team-a",
                    "labels": {C.ADMISSION_NAMESPACE_LABEL: C.ADMISSION_NAMESPACE_VALUE},
                }
            },
            {"metadata": {"name": "team-b"}},
        ],
    )


# --------------------------------------------------------------------------- the fake API


_DESERIALIZER = client.ApiClient()


def as_model(obj: Any, klass: str) -> Any:
    """A dict as the client's model `klass` (its own deserializer); a model object as it is."""
    if not isinstance(obj, dict):
        return obj
    return _DESERIALIZER._ApiClient__deserialize(copy.deepcopy(obj), klass)


def _labelled(obj: Any, selector: str) -> bool:
    """`obj` matches a `key=value` label selector (what the API server filters on)."""
    key, _, value = selector.partition("=")
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, dict) else None
    else:
        labels = getattr(getattr(obj, "metadata", None), "labels", None)
    return isinstance(labels, dict) and labels.get(key) == value


def _identity(obj: Any) -> tuple | None:
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return None
        ns, name = meta.get("namespace"), meta.get("name")
    else:
        meta = getattr(obj, "metadata", None)
        ns, name = getattr(meta, "namespace", None), getattr(meta, "name", None)
    return (ns, name) if name else None


def _answer(
    c: Cluster, kind: str, items: list | None, klass: str | None, selector: str | None = None
) -> list:
    """The items of `c`'s list `kind` as an API server answers them: built-in kinds (`klass`)
    as the client's models, custom objects as dicts (see `Cluster.api_server`); with a label
    `selector` (key=value), only those it selects (the others are `refused` too)."""
    out, seen = [], set()
    for i, o in enumerate(items or []):
        if selector is not None and not _labelled(o, selector):
            c.refused.append((kind, i, f"not selected by {selector}"))
            continue
        try:
            if klass is not None:
                o = as_model(o, klass)
            elif c.api_server:
                if not isinstance(o, dict):
                    raise ValueError("not an object")
                client.V1ObjectMeta.from_dict(o.get("metadata") or {})
                o = copy.deepcopy(o)
            else:
                o = copy.deepcopy(o)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            if not c.api_server:
                raise
            c.refused.append((kind, i, f"{type(exc).__name__}: {exc}".splitlines()[0]))
            continue
        who = _identity(o)
        if c.api_server and who is not None:
            if who in seen:
                c.refused.append((kind, i, f"a second {who}"))
                continue
            seen.add(who)
        out.append(o)
    return out


def _listing(c: Cluster, kind: str, klass: str, selector: str | None = None) -> Any:
    return mock.Mock(items=_answer(c, kind, getattr(c, kind), klass, selector))


def _not_found() -> client.ApiException:
    return client.ApiException(status=404, reason="Not Found")


@contextlib.contextmanager
def serving(cluster: Cluster) -> Iterator[None]:
    """The official client's API classes answer from `cluster` inside the `with`: pass any
    object as `observe_cluster`'s api_client."""
    c = cluster
    c.refused.clear()

    class Core:
        def __init__(self, _api: Any = None):
            pass

        def list_node(self, **_):
            return _listing(c, "nodes", "V1Node")

        def list_pod_for_all_namespaces(self, **_):
            return _listing(c, "pods", "V1Pod")

        def list_resource_quota_for_all_namespaces(self, **_):
            return _listing(c, "quotas", "V1ResourceQuota")

        def list_namespace(self, label_selector: str | None = None, **_):
            return _listing(c, "namespaces", "V1Namespace", label_selector)

    class Batch:
        def __init__(self, _api: Any = None):
            pass

        def list_job_for_all_namespaces(self, **_):
            return _listing(c, "jobs", "V1Job")

    class Apps:
        def __init__(self, _api: Any = None):
            pass

        def list_deployment_for_all_namespaces(self, label_selector: str | None = None, **_):
            return _listing(c, "deployments", "V1Deployment", label_selector)

        def list_stateful_set_for_all_namespaces(self, label_selector: str | None = None, **_):
            return _listing(c, "stateful_sets", "V1StatefulSet", label_selector)

    class Autoscaling:
        def __init__(self, _api: Any = None):
            pass

        def list_horizontal_pod_autoscaler_for_all_namespaces(self, **_):
            return _listing(c, "hpas", "V2HorizontalPodAutoscaler")

    class Scheduling:
        def __init__(self, _api: Any = None):
            pass

        def list_priority_class(self, **_):
            return _listing(c, "priority_classes", "V1PriorityClass")

    class Custom:
        def __init__(self, _api: Any = None):
            pass

        def list_cluster_custom_object(self, group: str, version: str, plural: str, **_):
            if (group, plural) == (C.GROUP, C.NODE_STATE_PLURAL):
                kind = "node_states"
            elif (group, plural) == (C.POD_GROUP_GROUP, C.POD_GROUP_PLURAL):
                kind = "pod_groups"
            elif (group, version, plural) == (
                C.WORKLOAD_API_GROUP,
                C.WORKLOAD_API_VERSION,
                C.WORKLOAD_POD_GROUP_PLURAL,
            ):
                kind = "workload_pod_groups"
            elif (group, plural) == (C.KEDA_GROUP, C.SCALED_OBJECT_PLURAL):
                kind = "scaled_objects"
            elif group == C.KUEUE_GROUP:
                if c.kueue is None:
                    raise _not_found()
                return {"items": _answer(c, f"kueue.{plural}", c.kueue.get(plural, []), None)}
            else:
                raise AssertionError(f"unexpected list of {group}/{version} {plural}")
            if getattr(c, kind) is None:
                raise _not_found()
            return {"items": _answer(c, kind, getattr(c, kind), None)}

    with contextlib.ExitStack() as stack:
        for name, fake in (
            ("CoreV1Api", Core),
            ("BatchV1Api", Batch),
            ("AppsV1Api", Apps),
            ("AutoscalingV2Api", Autoscaling),
            ("SchedulingV1Api", Scheduling),
            ("CustomObjectsApi", Custom),
        ):
            stack.enter_context(mock.patch.object(client, name, fake))
        yield
