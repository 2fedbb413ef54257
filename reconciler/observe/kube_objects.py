"""The cluster objects gpupool writes besides workloads, each with who manages it (the
`app.kubernetes.io/managed-by` label): ResourceQuotas, PriorityClasses, and Kueue's
ResourceFlavors, ClusterQueues and LocalQueues."""

from __future__ import annotations

from typing import Any

from reconciler import conventions as C
from reconciler.observe.kube_common import _each, listed
from reconciler.observe.model import KueueObject, PriorityClassObject, QuotaObject


def read_quotas(core: Any) -> list[QuotaObject]:
    """Every ResourceQuota, gpupool's or not (`core`: the CoreV1Api to list them with)."""
    return _each(
        "ResourceQuota",
        listed(C.RESOURCE_QUOTAS, core.list_resource_quota_for_all_namespaces),
        lambda q: QuotaObject(
            namespace=q.metadata.namespace,
            name=q.metadata.name,
            hard={k: str(v) for k, v in (q.spec.hard or {}).items()},
            managed_by=(q.metadata.labels or {}).get(C.MANAGED_BY_LABEL, ""),
        ),
    )


def read_priority_classes(api_client: Any) -> list[PriorityClassObject]:
    """Every PriorityClass, gpupool's or not."""
    from kubernetes import client

    return _each(
        "PriorityClass",
        listed(C.PRIORITY_CLASSES, client.SchedulingV1Api(api_client).list_priority_class),
        lambda c: PriorityClassObject(
            name=c.metadata.name,
            value=c.value,
            preemption_policy=c.preemption_policy or "PreemptLowerPriority",
            global_default=bool(c.global_default),
            managed_by=(c.metadata.labels or {}).get(C.MANAGED_BY_LABEL, ""),
        ),
    )


# ---------------------------------------------------------------------------------------- Kueue


def read_kueue(api_client: Any) -> list[KueueObject] | None:
    """Kueue's ResourceFlavors, ClusterQueues and LocalQueues (kueue.x-k8s.io, the stored
    version, conventions.KUEUE_VERSION); None when Kueue's CRDs are not served (404 on a
    list: the group or the resource is unknown to the API server). All of them, not only
    gpupool's: a name gpupool would use and someone else took is a finding."""
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)
    out: list[KueueObject] = []
    for kind, plural in C.KUEUE_PLURALS.items():
        try:
            items = listed(
                C.KUEUE_RESOURCES[kind],
                lambda plural=plural: api.list_cluster_custom_object(
                    C.KUEUE_GROUP, C.KUEUE_VERSION, plural
                ),
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

        def one(o: dict, kind: str = kind) -> KueueObject:
            meta = o.get("metadata") or {}
            return KueueObject(
                kind=kind,
                namespace=meta.get("namespace") or "",
                name=meta["name"],
                spec=o.get("spec") or {},
                managed_by=(meta.get("labels") or {}).get(C.MANAGED_BY_LABEL, ""),
                terminating=bool(meta.get("deletionTimestamp")),
            )

        out.extend(_each(kind, items, one))
    return out
