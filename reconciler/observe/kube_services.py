"""Inference services (Deployments and StatefulSets labelled `gpupool.io/inference=true`)
with their demand signals, and the autoscalers that scale them: autoscaling/v2 HPAs and KEDA
ScaledObjects.

A demand signal that is not a finite number >= 0 (`gpupool.io/queue-length`,
`gpupool.io/pending-p99-seconds`) and a time outside the years the cluster can mean read as
absent, each reported against its object (`kube_common._float`, `_ts`)."""

from __future__ import annotations

from typing import Any

from reconciler import conventions as C
from reconciler.observe.kube_common import _each, _float, _shape, _ts, listed
from reconciler.observe.kube_requests import _declared_memory_mib, template_request
from reconciler.observe.model import Autoscaler, InferenceService


def read_services(api_client: Any) -> list[InferenceService]:
    """The Deployments, then the StatefulSets, labelled `gpupool.io/inference=true`, as
    services (without their autoscalers: `with_autoscalers` adds them)."""
    from kubernetes import client

    apps = client.AppsV1Api(api_client)
    services = _each(
        "Deployment",
        listed(
            C.DEPLOYMENTS,
            lambda: apps.list_deployment_for_all_namespaces(label_selector=C.INFERENCE_SELECTOR),
        ),
        lambda d: _service(d, "Deployment"),
    )
    services += _each(
        "StatefulSet",
        listed(
            C.STATEFUL_SETS,
            lambda: apps.list_stateful_set_for_all_namespaces(label_selector=C.INFERENCE_SELECTOR),
        ),
        lambda d: _service(d, "StatefulSet"),
    )
    return services


def _service(obj: Any, kind: str) -> InferenceService:
    ann = obj.metadata.annotations or {}
    return InferenceService(
        namespace=obj.metadata.namespace,
        name=obj.metadata.name,
        kind=kind,
        replicas=obj.spec.replicas if obj.spec.replicas is not None else 1,
        ready_replicas=(obj.status.ready_replicas or 0) if obj.status else 0,
        replica_request=template_request(obj.spec.template.spec).model_copy(
            update={
                "gpu_memory_mib": _declared_memory_mib(
                    obj.spec.template.metadata.annotations,
                    (kind, obj.metadata.namespace, obj.metadata.name),
                )
                if obj.spec.template.metadata
                else 0
            }
        ),
        priority_class=obj.spec.template.spec.priority_class_name,
        pool=(obj.spec.template.spec.node_selector or {}).get(C.POOL_LABEL),
        queue_length=_float(ann.get(C.QUEUE_LENGTH_ANN), f"annotation {C.QUEUE_LENGTH_ANN}"),
        pending_seconds_p99=_float(ann.get(C.PENDING_P99_ANN), f"annotation {C.PENDING_P99_ANN}"),
        last_scale_at=_ts(ann.get(C.LAST_SCALE_ANN), f"annotation {C.LAST_SCALE_ANN}"),
    )


# --------------------------------------------------------------------------- autoscalers

TargetRef = tuple[str, str, str]
"""(namespace, kind, name) of the workload an autoscaler scales."""


def _apps_target(namespace: str, api_version: str, kind: str, name: str) -> TargetRef | None:
    """The workload a scaleTargetRef names, when it is an apps/* Deployment or StatefulSet
    (the only kinds gpupool scales); None otherwise."""
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    if group != "apps" or kind not in ("Deployment", "StatefulSet") or not name:
        return None
    return (namespace, kind, name)


def _hpa(h: Any) -> tuple[TargetRef | None, Autoscaler]:
    """An autoscaling/v2 HorizontalPodAutoscaler: its target and envelope. One KEDA made for a
    ScaledObject (KEDA sets the ScaledObject as its controller ownerReference: keda v2.19.0
    controllers/keda/hpa.go, newHPAForScaledObject, SetControllerReference) is marked with
    that owner."""
    meta, spec = h.metadata, h.spec
    ref = spec.scale_target_ref
    owner = next(
        (
            f"{C.SCALED_OBJECT_KIND}/{r.name}"
            for r in meta.owner_references or []
            if r.controller
            and r.kind == C.SCALED_OBJECT_KIND
            and (r.api_version or "").split("/", 1)[0] == C.KEDA_GROUP
        ),
        "",
    )
    return _apps_target(meta.namespace, ref.api_version or "", ref.kind, ref.name), Autoscaler(
        kind=C.HPA_KIND,
        namespace=meta.namespace,
        name=meta.name,
        min_replicas=spec.min_replicas if spec.min_replicas is not None else C.HPA_DEFAULT_MIN,
        max_replicas=spec.max_replicas,
        owner=owner,
        last_change_at=_ts(
            (meta.annotations or {}).get(C.LAST_SCALE_ANN), f"annotation {C.LAST_SCALE_ANN}"
        ),
    )


def _scaled_object(o: dict) -> tuple[TargetRef | None, Autoscaler]:
    """A KEDA ScaledObject: its target (scaleTargetRef's apiVersion defaults to apps/v1 and its
    kind to Deployment: keda v2.19.0 apis/keda/v1alpha1/gvkr.go, ParseGVKR) and envelope
    (minReplicaCount 0 and maxReplicaCount 100 when absent: `C.KEDA_DEFAULT_MIN/MAX`)."""
    meta, spec = o["metadata"], _shape(o.get("spec"), dict, "spec") or {}
    ref = _shape(spec.get("scaleTargetRef"), dict, "spec.scaleTargetRef", required=True)
    for key in ("apiVersion", "kind", "name"):  # a target that is no name would be no target
        _shape(ref.get(key), str, f"spec.scaleTargetRef.{key}", required=key == "name")
    lo, hi = spec.get("minReplicaCount"), spec.get("maxReplicaCount")
    idle = spec.get("idleReplicaCount")
    for field_name, v in (
        ("minReplicaCount", lo),
        ("maxReplicaCount", hi),
        ("idleReplicaCount", idle),
    ):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise ValueError(f"spec.{field_name} {v!r} is not an integer")
    target = _apps_target(
        meta["namespace"],
        ref.get("apiVersion") or "apps/v1",
        ref.get("kind") or "Deployment",
        ref["name"],
    )
    return target, Autoscaler(
        kind=C.SCALED_OBJECT_KIND,
        namespace=meta["namespace"],
        name=meta["name"],
        min_replicas=C.KEDA_DEFAULT_MIN if lo is None else lo,
        max_replicas=C.KEDA_DEFAULT_MAX if hi is None else hi,
        idle_replicas=idle,
        last_change_at=_ts(
            (meta.get("annotations") or {}).get(C.LAST_SCALE_ANN), f"annotation {C.LAST_SCALE_ANN}"
        ),
    )


def read_autoscalers(api_client: Any) -> list[tuple[TargetRef | None, Autoscaler]]:
    """Every HPA (autoscaling/v2) and KEDA ScaledObject with the workload it scales. Listed each
    cycle, like the workloads, or read from the controller's watch cache (`listed`). No
    ScaledObject CRD (404): KEDA is not installed, there are none. Any other error (a 403: the
    RBAC rule is missing) fails the observation: planning without knowing which workloads KEDA
    scales would patch replicas KEDA owns. A malformed object is left out and reported."""
    from kubernetes import client

    hpas = listed(
        C.HPAS,
        client.AutoscalingV2Api(api_client).list_horizontal_pod_autoscaler_for_all_namespaces,
    )
    out = _each(C.HPA_KIND, hpas, _hpa)
    try:
        objs = listed(
            C.SCALED_OBJECTS,
            lambda: client.CustomObjectsApi(api_client).list_cluster_custom_object(
                C.KEDA_GROUP, C.KEDA_VERSION, C.SCALED_OBJECT_PLURAL
            ),
        )
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        objs = []
    out += _each(C.SCALED_OBJECT_KIND, objs, _scaled_object)
    return out


def with_autoscalers(
    services: list[InferenceService], found: list[tuple[TargetRef | None, Autoscaler]]
) -> list[InferenceService]:
    """Each service with the autoscalers that target it (sorted by kind and name)."""
    by_target: dict[TargetRef, list[Autoscaler]] = {}
    for target, a in found:
        if target is not None:
            by_target.setdefault(target, []).append(a)
    out = []
    for s in services:
        mine = by_target.get((s.namespace, s.kind, s.name))
        if mine:
            s = s.model_copy(update={"autoscalers": sorted(mine, key=lambda a: (a.kind, a.name))})
        out.append(s)
    return out
