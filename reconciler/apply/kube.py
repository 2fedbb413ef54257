"""`ClusterOps` over the official Kubernetes client: the only module of apply that imports it.

Every write names gpupool's field manager (`conventions.FIELD_MANAGER`, `?fieldManager=gpupool`):
the API server then records in `metadata.managedFields` which fields gpupool set, until someone
else changes them. Observation believes gpupool's state on pods and Jobs (`gpupool.io/admitted`,
`reserved`, `intended-gpus`, `next-pod-reserved`, a suspension) only where that manager owns it
(`reconciler/observe/kube_owners.py`, `gpupool_owns`). Without it the API server would name the
manager after the client's User-Agent (`OpenAPI-Generator`), which any client may send."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import urllib3
from kubernetes import client

from reconciler import conventions as C
from reconciler.apply.port import (
    ApiError,
    AutoscalerInfo,
    AutoscalerKind,
    ConfigMapInfo,
    JobInfo,
    NodeInfo,
    PodCondition,
    PodInfo,
    PriorityClassInfo,
    Unset,
    WorkloadInfo,
    WorkloadKind,
)
from reconciler.observe.trust import annotation_writers

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
POD_REUSE_SECONDS = 10.0
"""How old a pod gpupool read or wrote may be for `admit_pod` to patch against it instead of
reading it again (an Admit step reads its pods first: seconds at most; older is read)."""
POD_MEMORY = 10_000
"""Pods remembered for that at most (a Hold reads pods that may never be admitted)."""


def _message(exc: client.ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message", ""))[:300]
    except (TypeError, ValueError, AttributeError):
        return ""


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except client.ApiException as exc:
        raise ApiError(int(exc.status or 0), str(exc.reason or ""), _message(exc)) from exc
    except (
        urllib3.exceptions.HTTPError
    ) as exc:  # no answer: refused, reset, timed out, retries spent
        raise ApiError(0, "NoResponse", f"{type(exc).__name__}: {exc}"[:300]) from exc


def _or_none(read: Callable[[], Any]) -> Any:
    try:
        with _errors():
            return read()
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def _gpu_resources(pod: Any) -> bool:
    for c in pod.spec.containers or []:
        res = c.resources
        keys = set((res.limits or {}) if res else {}) | set((res.requests or {}) if res else {})
        if any(
            k in (C.GPU_RESOURCE, C.SHARED_RESOURCE) or k.startswith(C.MIG_RESOURCE_PREFIX)
            for k in keys
        ):
            return True
    return False


def _time(t: Any) -> str:
    if t is None:
        return ""
    return t.isoformat() if hasattr(t, "isoformat") else str(t)


def _owner(p: Any) -> tuple[str, str]:
    """(kind, name) of the pod's controller ownerReference, else of its first; ("", "")."""
    refs = p.metadata.owner_references or []
    ref = next((r for r in refs if r.controller), refs[0] if refs else None)
    return (ref.kind or "", ref.name or "") if ref is not None else ("", "")


def _pod(p: Any) -> PodInfo:
    status = p.status
    owner_kind, owner_name = _owner(p)
    return PodInfo(
        namespace=p.metadata.namespace,
        name=p.metadata.name,
        phase=(status.phase if status else None) or "Pending",
        annotations=dict(p.metadata.annotations or {}),
        deleting=p.metadata.deletion_timestamp is not None,
        delete_asked=_delete_asked(p.metadata),
        created=_created(p.metadata),
        resource_version=p.metadata.resource_version or "",
        gpu_resources=_gpu_resources(p),
        node=p.spec.node_name or None,
        gates=tuple(g.name for g in p.spec.scheduling_gates or []),
        conditions=tuple(
            PodCondition(
                c.type, c.status, c.reason or "", c.message or "", _time(c.last_transition_time)
            )
            for c in (status.conditions if status else None) or []
        ),
        owner_kind=owner_kind,
        owner_name=owner_name,
        uid=p.metadata.uid or "",
        claims=_claims(p),
        nominated=(getattr(status, "nominated_node_name", None) or "") if status else "",
        claim_templates={
            c.name: c.resource_claim_template_name
            for c in (getattr(p.spec, "resource_claims", None) or [])
            if c.resource_claim_template_name
        },
        annotation_writers=annotation_writers(
            p.metadata.managed_fields, (p.metadata.annotations or {}).keys()
        ),
    )


def _delete_asked(meta: Any) -> datetime | None:
    """When a pod's deletion was asked for: its deletionTimestamp is that moment plus the grace
    period the delete gave (pkg/registry/rest/delete.go, BeforeDelete)."""
    at, grace = meta.deletion_timestamp, meta.deletion_grace_period_seconds
    if not isinstance(at, datetime) or not isinstance(grace, int):
        return None
    return at - timedelta(seconds=grace)


def _created(meta: Any) -> datetime | None:
    at = meta.creation_timestamp
    return at if isinstance(at, datetime) else None


def _claims(p: Any) -> tuple[tuple[str, str], ...]:
    """(entry, ResourceClaim name or "" while not made) of the pod's DRA claims."""
    made = {
        s.name: s.resource_claim_name or ""
        for s in (getattr(p.status, "resource_claim_statuses", None) or [])
    }
    return tuple(
        (c.name, c.resource_claim_name or made.get(c.name, ""))
        for c in (getattr(p.spec, "resource_claims", None) or [])
    )


def _required_terms(api: Any, p: Any) -> list[dict]:
    """The pod's required node affinity terms, as the API's JSON."""
    aff = p.spec.affinity
    na = aff.node_affinity if aff else None
    req = na.required_during_scheduling_ignored_during_execution if na else None
    if req is None:
        return []
    return [api.sanitize_for_serialization(t) for t in req.node_selector_terms or []]


def admission_terms(terms: list[dict], node: str) -> list[dict]:
    """Required node affinity terms that pin a pod to `node`: one term with only the node, or,
    when the pod has terms of its own, the node's requirement added to each (a term's
    requirements are ANDed, terms ORed), since a gated pod's non-empty terms may only grow
    (validateNodeAffinityMutation)."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    if not terms:
        return [{"matchFields": [pin]}]
    out = []
    for t in terms:
        fields = list(t.get("matchFields") or [])
        out.append({**t, "matchFields": fields if pin in fields else [*fields, pin]})
    return out


class KubeOps:
    def __init__(self, api_client: Any):
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.sched = client.SchedulingV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._kueue = _ObjectGroup(
            self.custom,
            C.KUEUE_GROUP,
            C.KUEUE_VERSION,
            C.KUEUE_PLURALS,
            on_write=lambda plural, *a, **kw: self._wrote_object(
                f"{plural}.{C.KUEUE_GROUP}", *a, **kw
            ),
        )
        self._dra = _ObjectGroup(
            self.custom, C.DRA_GROUP, C.DRA_VERSION, C.DRA_PLURALS, on_write=self._wrote_object
        )
        self._written_lock = threading.Lock()
        self.written: dict[str, int] = {}
        """"nodes" / "pods" / a resource.k8s.io plural ("resourceclaims", "deviceclasses", ...)
        / another resource an observation reads, by `resource.group` (C.JOBS, C.RESOURCE_QUOTAS,
        ...) -> the newest resourceVersion the server returned for a write of gpupool's
        ("nodestates": for a GpuNodeState it read): what the controller's watch cache must have
        seen before the next plan (`reconciler/loop/informer.py`, read your own writes)."""
        self.deleted: dict[str, dict[str, str]] = {}
        """A resource.k8s.io plural or another resource (as in `written`) -> {"namespace/name"
        ("/name" cluster-scoped): uid} of the objects gpupool deleted there and has not made
        again: what the watch cache must no longer hold (a delete answers a Status with the
        uid, not a resourceVersion). Only what gpupool prunes or replaces (a few names)."""
        self._pods: dict[str, tuple[float, Any]] = {}
        """"namespace/name" -> (time.monotonic(), the pod) as the server last answered a read
        or a write of gpupool's: what `admit_pod` patches against (its resourceVersion and
        required terms) instead of reading the pod again, within `POD_REUSE_SECONDS`."""
        self.pod_peek: Callable[[str, str], Any] | None = None
        """The watch cache's copy of a pod (a model object, read-only) by (namespace, name),
        set by the controller for a cycle that observed through a cache that had seen
        gpupool's pod writes (`ClusterCache.pod`); None: `peek_pod` answers None."""
        self.dra_peek: Callable[[str, str, str], dict | None] | None = None
        """The watch cache's copy of a DRA object by (kind, namespace, name), set by the
        controller for a cycle that observed through a cache that had seen gpupool's writes
        (`ClusterCache.dra_object`); None: `peek_dra_object` answers None."""

    def _saw_pod(self, p: Any) -> None:
        if len(self._pods) > POD_MEMORY:  # pods read and never admitted (held, gone)
            self._pods.clear()
        self._pods[f"{p.metadata.namespace}/{p.metadata.name}"] = (time.monotonic(), p)

    def _wrote(self, kind: str, obj: Any) -> None:
        if kind == "pods" and isinstance(obj, client.V1Pod):
            self._saw_pod(obj)
        rv = C.resource_version(C.raw_resource_version(obj))  # a model object or a custom one
        with self._written_lock:  # steps may run at once (ApplyConfig.parallel_steps)
            if rv is not None and rv > self.written.get(kind, 0):
                self.written[kind] = rv

    def _wrote_object(self, resource: str, key: str, answer: Any, delete: bool = False) -> None:
        """A write's answer for a resource the watch cache keeps by name (a DRA plural, or
        C.JOBS, C.RESOURCE_QUOTAS, ...; `key` "namespace/name", "/name" cluster-scoped): the
        object (created, patched, or deleted but held by a finalizer: its resourceVersion), or
        what a delete removed (a Status with its uid, or the object without a
        deletionTimestamp, as some resources answer). A custom object's answer is a dict, a
        built-in one's a model object."""
        if isinstance(answer, dict):
            meta = answer.get("metadata") or {}
            status = answer.get("kind") == "Status"
            terminating = bool(meta.get("deletionTimestamp"))
            uid = str((answer.get("details") or meta).get("uid") or "")
        elif answer is not None:
            status = isinstance(answer, client.V1Status)
            meta = getattr(answer, "details" if status else "metadata", None)
            terminating = not status and bool(getattr(meta, "deletion_timestamp", None))
            uid = str(getattr(meta, "uid", None) or "")
        else:
            return
        if status or (delete and not terminating):
            if uid:
                with self._written_lock:
                    self.deleted.setdefault(resource, {})[key] = uid
            return
        with self._written_lock:
            self.deleted.get(resource, {}).pop(key, None)
        self._wrote(resource, answer)

    # nodes
    def read_node(self, name: str) -> NodeInfo | None:
        n = _or_none(lambda: self.core.read_node(name))
        if n is None:
            return None
        return NodeInfo(
            name=name,
            unschedulable=bool(n.spec.unschedulable),
            labels=dict(n.metadata.labels or {}),
            annotations=dict(n.metadata.annotations or {}),
            allocatable={
                k: str(v) for k, v in ((n.status.allocatable if n.status else None) or {}).items()
            },
        )

    def patch_node(
        self,
        name: str,
        *,
        unschedulable: bool | None | object = Unset,
        labels: dict[str, str | None] | None = None,
        annotations: dict[str, str | None] | None = None,
    ) -> None:
        body: dict[str, Any] = {"metadata": {}}
        if unschedulable is not Unset:
            body["spec"] = {"unschedulable": unschedulable}
        if labels:
            body["metadata"]["labels"] = labels
        if annotations:
            body["metadata"]["annotations"] = annotations
        with _errors():
            self._wrote(
                "nodes",
                self.core.patch_node(
                    name, body, _content_type=MERGE, field_manager=C.FIELD_MANAGER
                ),
            )

    def read_node_state(self, node: str) -> dict | None:
        """The agent's GpuNodeState of `node`; its resourceVersion is kept (`written`,
        "nodestates") so that the next plan waits for a watch cache that has seen it."""
        state = _or_none(
            lambda: self.custom.get_cluster_custom_object(
                C.GROUP, C.VERSION, C.NODE_STATE_PLURAL, node
            )
        )
        if isinstance(state, dict):
            self._wrote("nodestates", state)
        return state

    # pods
    def read_pod(self, namespace: str, name: str) -> PodInfo | None:
        p = _or_none(lambda: self.core.read_namespaced_pod(name, namespace))
        if p is None:
            return None
        self._saw_pod(p)
        return _pod(p)

    def peek_pod(self, namespace: str, name: str) -> PodInfo | None:
        peek = self.pod_peek
        p = None if peek is None else peek(namespace, name)
        if p is None:
            return None
        self._saw_pod(p)  # `admit_pod` patches against this copy's resourceVersion
        return _pod(p)

    def pods_on_node(self, node: str) -> list[PodInfo]:
        with _errors():
            items = self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}"
            ).items
        return [_pod(p) for p in items]

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        with _errors():
            self._wrote(
                "pods",
                self.core.patch_namespaced_pod(
                    name,
                    namespace,
                    {"metadata": {"annotations": annotations}},
                    _content_type=MERGE,
                    field_manager=C.FIELD_MANAGER,
                ),
            )

    def admit_pod(
        self, namespace: str, name: str, *, node: str, annotations: dict[str, str]
    ) -> None:
        # the pod as gpupool last read or wrote it (the Admit step read it, and on DRA named
        # its pinned claim in its status, moments ago): the resourceVersion below makes any
        # change since then a 409, so it need not be read again. Only a gated one: nobody else
        # writes a gated pod as a rule, while an ungated one is the scheduler's to bind
        seen = self._pods.pop(f"{namespace}/{name}", None)
        if (
            seen is not None
            and time.monotonic() - seen[0] <= POD_REUSE_SECONDS
            and any(g.name == C.ADMISSION_GATE for g in seen[1].spec.scheduling_gates or [])
        ):
            cur = seen[1]
        else:
            with _errors():
                cur = self.core.read_namespaced_pod(name, namespace)
        body = {
            "metadata": {
                # a change since the read (the terms below come from it) is a 409, retried
                "resourceVersion": cur.metadata.resource_version,
                "annotations": annotations,
            },
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": admission_terms(
                                _required_terms(self.api, cur), node
                            )
                        }
                    }
                },
                "schedulingGates": [{"$patch": "delete", "name": C.ADMISSION_GATE}],
            },
        }
        with _errors():
            # strategic merge: schedulingGates is merged by `name` (the directive deletes only
            # gpupool's gate); a merge patch would replace the whole list
            self._wrote(
                "pods",
                self.core.patch_namespaced_pod(
                    name, namespace, body, _content_type=STRATEGIC, field_manager=C.FIELD_MANAGER
                ),
            )

    def set_pod_condition(
        self,
        namespace: str,
        name: str,
        *,
        type: str,
        status: str,
        reason: str,
        message: str,
        last_transition_time: str,
        clear_nominated: bool = False,
        resource_version: str = "",
    ) -> None:
        cond = {
            "type": type,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": last_transition_time,
        }
        # strategic merge: status.conditions is merged by `type`; null removes a field
        status: dict = {"conditions": [cond]}
        if clear_nominated:
            status["nominatedNodeName"] = None
        self._patch_pod_status(namespace, name, status, resource_version)

    def set_pod_claim(
        self, namespace: str, name: str, entry: str, claim: str, *, node: str = ""
    ) -> None:
        # strategic merge: status.resourceClaimStatuses is merged by `name`
        status: dict = {"resourceClaimStatuses": [{"name": entry, "resourceClaimName": claim}]}
        if node:
            status["nominatedNodeName"] = node
        self._patch_pod_status(namespace, name, status)

    def _patch_pod_status(
        self, namespace: str, name: str, status: dict, resource_version: str = ""
    ) -> None:
        # a resourceVersion in the patch is a precondition: the API server refuses it (409)
        # when the pod is another version by then
        meta = {"metadata": {"resourceVersion": resource_version}} if resource_version else {}
        with _errors():
            self._wrote(
                "pods",
                self.core.patch_namespaced_pod_status(
                    name,
                    namespace,
                    {**meta, "status": status},
                    _content_type=STRATEGIC,
                    field_manager=C.FIELD_MANAGER,
                ),
            )

    def evict_pod(self, namespace: str, name: str) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        with _errors():
            self.core.create_namespaced_pod_eviction(name, namespace, body)

    # jobs
    def read_job(self, namespace: str, name: str) -> JobInfo | None:
        with _errors():  # list, not get: the controller's RBAC lists Jobs and gets none
            items = self.batch.list_namespaced_job(
                namespace, field_selector=f"metadata.name={name}"
            ).items
        job = next((j for j in items if j.metadata.name == name), None)
        if job is None:
            return None
        return JobInfo(
            dict(job.metadata.annotations or {}),
            suspended=bool(job.spec is not None and job.spec.suspend),
        )

    def annotate_job(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        with _errors():
            answer = self.batch.patch_namespaced_job(
                name,
                namespace,
                {"metadata": {"annotations": annotations}},
                _content_type=MERGE,
                field_manager=C.FIELD_MANAGER,
            )
        self._wrote_object(C.JOBS, f"{namespace}/{name}", answer)

    def set_job_suspend(
        self, namespace: str, name: str, *, suspend: bool, annotations: dict[str, str | None]
    ) -> None:
        body = {"metadata": {"annotations": annotations}, "spec": {"suspend": suspend}}
        with _errors():
            # under gpupool's field manager: the API server then records gpupool as the owner
            # of spec.suspend until someone else changes it (observe.kube: _suspended_by_us)
            answer = self.batch.patch_namespaced_job(
                name, namespace, body, _content_type=MERGE, field_manager=C.FIELD_MANAGER
            )
        self._wrote_object(C.JOBS, f"{namespace}/{name}", answer)

    # workloads
    def read_workload(self, kind: WorkloadKind, namespace: str, name: str) -> WorkloadInfo:
        read = (
            self.apps.read_namespaced_deployment
            if kind == "Deployment"
            else self.apps.read_namespaced_stateful_set
        )
        with _errors():
            cur = read(name, namespace)
        return WorkloadInfo(
            replicas=cur.spec.replicas if cur.spec.replicas is not None else 1,
            resource_version=cur.metadata.resource_version,
        )

    def scale_workload(
        self,
        kind: WorkloadKind,
        namespace: str,
        name: str,
        *,
        replicas: int,
        resource_version: str,
        annotations: dict[str, str],
    ) -> None:
        patch = (
            self.apps.patch_namespaced_deployment
            if kind == "Deployment"
            else self.apps.patch_namespaced_stateful_set
        )
        body = {
            "metadata": {"resourceVersion": resource_version, "annotations": annotations},
            "spec": {"replicas": replicas},
        }
        with _errors():
            answer = patch(
                name, namespace, body, _content_type=MERGE, field_manager=C.FIELD_MANAGER
            )
        resource = C.DEPLOYMENTS if kind == "Deployment" else C.STATEFUL_SETS
        self._wrote_object(resource, f"{namespace}/{name}", answer)

    # autoscalers
    def read_autoscaler(
        self, kind: AutoscalerKind, namespace: str, name: str
    ) -> AutoscalerInfo | None:
        if kind == C.HPA_KIND:
            h = _or_none(
                lambda: client.AutoscalingV2Api(self.api).read_namespaced_horizontal_pod_autoscaler(
                    name, namespace
                )
            )
            if h is None:
                return None
            ref = h.spec.scale_target_ref
            owner = next(
                (
                    f"{C.SCALED_OBJECT_KIND}/{r.name}"
                    for r in h.metadata.owner_references or []
                    if r.controller and r.kind == C.SCALED_OBJECT_KIND
                ),
                "",
            )
            return AutoscalerInfo(
                min_replicas=h.spec.min_replicas
                if h.spec.min_replicas is not None
                else C.HPA_DEFAULT_MIN,
                max_replicas=h.spec.max_replicas,
                target_kind=ref.kind,
                target_name=ref.name,
                resource_version=h.metadata.resource_version,
                owner=owner,
            )
        o = _or_none(
            lambda: self.custom.get_namespaced_custom_object(
                C.KEDA_GROUP, C.KEDA_VERSION, namespace, C.SCALED_OBJECT_PLURAL, name
            )
        )
        if o is None:
            return None
        spec = o.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        lo, hi = spec.get("minReplicaCount"), spec.get("maxReplicaCount")
        return AutoscalerInfo(
            min_replicas=C.KEDA_DEFAULT_MIN if lo is None else int(lo),
            max_replicas=C.KEDA_DEFAULT_MAX if hi is None else int(hi),
            target_kind=ref.get("kind") or "Deployment",
            target_name=ref.get("name") or "",
            resource_version=o["metadata"]["resourceVersion"],
        )

    def set_autoscaler_bounds(
        self,
        kind: AutoscalerKind,
        namespace: str,
        name: str,
        *,
        min_replicas: int,
        max_replicas: int,
        resource_version: str,
        annotations: dict[str, str],
    ) -> None:
        meta = {"resourceVersion": resource_version, "annotations": annotations}
        with _errors():
            if kind == C.HPA_KIND:
                body = {
                    "metadata": meta,
                    "spec": {"minReplicas": min_replicas, "maxReplicas": max_replicas},
                }
                answer = client.AutoscalingV2Api(
                    self.api
                ).patch_namespaced_horizontal_pod_autoscaler(
                    name, namespace, body, _content_type=MERGE, field_manager=C.FIELD_MANAGER
                )
            else:
                body = {
                    "metadata": meta,
                    "spec": {"minReplicaCount": min_replicas, "maxReplicaCount": max_replicas},
                }
                answer = self.custom.patch_namespaced_custom_object(
                    C.KEDA_GROUP,
                    C.KEDA_VERSION,
                    namespace,
                    C.SCALED_OBJECT_PLURAL,
                    name,
                    body,
                    _content_type=MERGE,
                    field_manager=C.FIELD_MANAGER,
                )
        resource = C.HPAS if kind == C.HPA_KIND else C.SCALED_OBJECTS
        self._wrote_object(resource, f"{namespace}/{name}", answer)

    # objects
    def read_config_map(self, namespace: str, name: str) -> ConfigMapInfo | None:
        cm = _or_none(lambda: self.core.read_namespaced_config_map(name, namespace))
        return (
            None if cm is None else ConfigMapInfo(dict(cm.data or {}), cm.metadata.resource_version)
        )

    def write_config_map(
        self, namespace: str, name: str, data: dict[str, str], *, resource_version: str | None
    ) -> None:
        with _errors():
            if resource_version is None:
                self.core.create_namespaced_config_map(
                    namespace,
                    {
                        "metadata": {
                            "name": name,
                            "namespace": namespace,
                            "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY},
                        },
                        "data": data,
                    },
                    field_manager=C.FIELD_MANAGER,
                )
            else:
                self.core.patch_namespaced_config_map(
                    name,
                    namespace,
                    {"metadata": {"resourceVersion": resource_version}, "data": data},
                    _content_type=MERGE,
                    field_manager=C.FIELD_MANAGER,
                )

    def namespace_exists(self, name: str) -> bool:
        return _or_none(lambda: self.core.read_namespace(name)) is not None

    def server_side_apply(self, body: dict) -> None:
        with _errors():
            if body["kind"] == "ResourceQuota":
                md = body["metadata"]
                answer = self.core.patch_namespaced_resource_quota(
                    md["name"],
                    md["namespace"],
                    body,
                    field_manager=C.FIELD_MANAGER,
                    force=True,
                    _content_type=APPLY,
                )
                self._wrote_object(C.RESOURCE_QUOTAS, f"{md['namespace']}/{md['name']}", answer)
            elif body["kind"] == "PriorityClass":
                answer = self.sched.patch_priority_class(
                    body["metadata"]["name"],
                    body,
                    field_manager=C.FIELD_MANAGER,
                    force=True,
                    _content_type=APPLY,
                )
                self._wrote_object(C.PRIORITY_CLASSES, f"/{body['metadata']['name']}", answer)
            else:  # pragma: no cover - the handlers apply only these two kinds
                raise ValueError(f"server_side_apply: unsupported kind {body['kind']}")

    def read_priority_class(self, name: str) -> PriorityClassInfo | None:
        pc = _or_none(lambda: self.sched.read_priority_class(name))
        return (
            None
            if pc is None
            else PriorityClassInfo(
                pc.value,
                pc.preemption_policy or "PreemptLowerPriority",
                bool(pc.global_default),
                (pc.metadata.labels or {}).get(C.MANAGED_BY_LABEL, ""),
            )
        )

    def quota_manager(self, namespace: str, name: str) -> str | None:
        q = _or_none(lambda: self.core.read_namespaced_resource_quota(name, namespace))
        return None if q is None else (q.metadata.labels or {}).get(C.MANAGED_BY_LABEL, "")

    def delete_priority_class(self, name: str) -> None:
        with _errors():
            answer = self.sched.delete_priority_class(name)
        self._wrote_object(C.PRIORITY_CLASSES, f"/{name}", answer, delete=True)

    def delete_resource_quota(self, namespace: str, name: str) -> None:
        with _errors():
            answer = self.core.delete_namespaced_resource_quota(name, namespace)
        self._wrote_object(C.RESOURCE_QUOTAS, f"{namespace}/{name}", answer, delete=True)

    def create_event(self, namespace: str, body: dict) -> None:
        with _errors():
            self.core.create_namespaced_event(namespace, body, field_manager=C.FIELD_MANAGER)

    # -- Kueue and DRA: CustomObjectsApi on kueue.x-k8s.io/v1beta2 (the version Kueue v0.17.0's
    # CRDs store) and resource.k8s.io/v1 (built-in, served as JSON like any group)
    def kueue_manager(self, kind: str, namespace: str, name: str) -> str | None:
        return self._kueue.manager(kind, namespace, name)

    def create_kueue_object(self, body: dict) -> None:
        self._kueue.create(body)

    def patch_kueue_object(self, kind: str, namespace: str, name: str, patch: dict) -> None:
        self._kueue.patch(kind, namespace, name, patch)

    def delete_kueue_object(self, kind: str, namespace: str, name: str) -> None:
        self._kueue.delete(kind, namespace, name)

    def dra_manager(self, kind: str, namespace: str, name: str) -> str | None:
        return self._dra.manager(kind, namespace, name)

    def read_dra_object(self, kind: str, namespace: str, name: str) -> dict | None:
        return self._dra.read(kind, namespace, name)

    def peek_dra_object(self, kind: str, namespace: str, name: str) -> dict | None:
        peek = self.dra_peek
        return None if peek is None else peek(kind, namespace, name)

    def create_dra_object(self, body: dict) -> None:
        self._dra.create(body)

    def patch_dra_object(self, kind: str, namespace: str, name: str, patch: dict) -> dict | None:
        return self._dra.patch(kind, namespace, name, patch)

    def replace_dra_status(self, kind: str, namespace: str, name: str, body: dict) -> None:
        self._dra.replace_status(kind, namespace, name, body)

    def delete_dra_object(self, kind: str, namespace: str, name: str) -> None:
        self._dra.delete(kind, namespace, name)


class _ObjectGroup:
    """Objects of one API group through CustomObjectsApi, by kind: namespaced when given a
    namespace, cluster-scoped otherwise. Reads answer None for an object that is not there;
    writes raise the port's errors (`_errors`)."""

    def __init__(
        self,
        custom: Any,
        group: str,
        version: str,
        plurals: dict[str, str],
        on_write: Callable[..., None] | None = None,
    ):
        self.custom, self.group, self.version, self.plurals = custom, group, version, plurals
        self.on_write = on_write
        """Called with (plural, "namespace/name", the server's answer, whether a delete)
        after each write."""

    def _answered(
        self, kind: str, namespace: str, name: str, answer: Any, delete: bool = False
    ) -> None:
        if self.on_write is not None:
            self.on_write(self.plurals[kind], f"{namespace or ''}/{name}", answer, delete)

    def _at(self, kind: str, namespace: str, *name: str) -> tuple[str, ...]:
        ns = [namespace] if namespace else []
        return (self.group, self.version, *ns, self.plurals[kind], *name)

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        c = self.custom
        get = c.get_namespaced_custom_object if namespace else c.get_cluster_custom_object
        return _or_none(lambda: get(*self._at(kind, namespace, name)))

    def manager(self, kind: str, namespace: str, name: str) -> str | None:
        """Who manages the object (its `app.kubernetes.io/managed-by`); None: not there."""
        obj = self.read(kind, namespace, name)
        if obj is None:
            return None
        return ((obj.get("metadata") or {}).get("labels") or {}).get(C.MANAGED_BY_LABEL, "")

    def create(self, body: dict) -> None:
        ns = body["metadata"].get("namespace") or ""
        c = self.custom
        create = c.create_namespaced_custom_object if ns else c.create_cluster_custom_object
        with _errors():
            answer = create(*self._at(body["kind"], ns), body, field_manager=C.FIELD_MANAGER)
        self._answered(body["kind"], ns, body["metadata"].get("name") or "", answer)

    def patch(self, kind: str, namespace: str, name: str, patch: dict) -> dict | None:
        c = self.custom
        merge = c.patch_namespaced_custom_object if namespace else c.patch_cluster_custom_object
        with _errors():
            answer = merge(
                *self._at(kind, namespace, name),
                patch,
                field_manager=C.FIELD_MANAGER,
                _content_type=MERGE,
            )
        self._answered(kind, namespace, name, answer)
        return answer if isinstance(answer, dict) else None

    def replace_status(self, kind: str, namespace: str, name: str, body: dict) -> None:
        c = self.custom
        put = (
            c.replace_namespaced_custom_object_status
            if namespace
            else c.replace_cluster_custom_object_status
        )
        with _errors():
            answer = put(*self._at(kind, namespace, name), body, field_manager=C.FIELD_MANAGER)
        self._answered(kind, namespace, name, answer)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        c = self.custom
        drop = c.delete_namespaced_custom_object if namespace else c.delete_cluster_custom_object
        with _errors():
            answer = drop(*self._at(kind, namespace, name))
        self._answered(kind, namespace, name, answer, delete=True)
