"""What pods' owners say about them: gang sizes (a Job's parallelism, a coscheduling
PodGroup's minMember, the Workload API's PodGroups: `kube_podgroups.py`), Kueue queues, the
next-pod reservations moves leave on Jobs, the Jobs another controller manages, the Jobs
gpupool suspended (demand) and how often in a row it stopped each because its gang lost a
member (`gpupool.io/recoveries`).

A gang size over `conventions.MAX_GANG_SIZE` is unreadable (reported): a Job's `parallelism`
then gives its pods no gang size and its suspension no demand (it stays suspended), a
PodGroup's `minMember` no size; the planner would otherwise make one unit per pod."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from reconciler import conventions as C
from reconciler.observe.kube_common import (
    _each,
    _int,
    _node_cards,
    _objects,
    _ts,
    _unreadable,
    listed,
)
from reconciler.observe.kube_podgroups import PodGroups, read_pod_groups
from reconciler.observe.kube_requests import template_request
from reconciler.observe.model import SuspendedJob, count_problem
from reconciler.observe.trust import annotation_path, owners

JOB_CONTROLLER = "kubernetes.io/job-controller"
"""`spec.managedBy` of a Job the built-in Job controller reconciles (also: no value)."""


def _next_pod_reservation(j: Any) -> tuple[str, list[int], datetime] | None:
    """A Job's `gpupool.io/next-pod-reserved` = "<node>:<gpus>@<time>"; unreadable: None."""
    text = (j.metadata.annotations or {}).get(C.NEXT_POD_RESERVED_ANN)
    if not text:
        return None
    if not gpupool_wrote(j, C.NEXT_POD_RESERVED_ANN):
        _unreadable(
            "Job",
            j.metadata.namespace,
            j.metadata.name,
            f"forged-state: {not_written(j, C.NEXT_POD_RESERVED_ANN)}; ignored",
        )
        return None
    where, _, when = str(text).rpartition("@")
    found = _node_cards(where)
    at = _ts(when, f"annotation {C.NEXT_POD_RESERVED_ANN}", _job(j))
    if found is None or at is None:
        _unreadable(
            "Job",
            j.metadata.namespace,
            j.metadata.name,
            f"unreadable {C.NEXT_POD_RESERVED_ANN} annotation {text!r}; ignored",
        )
        return None
    return found[0], found[1], at


@dataclass
class Owners:
    """What pods' owners say about them."""

    sizes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """(namespace, kind, name) -> pods a complete gang has."""
    next_pod: dict[tuple[str, str], tuple[str, list[int], datetime]] = field(default_factory=dict)
    """(namespace, Job) -> (node, cards, since): where a move reserved its next pod."""
    suspended: list[SuspendedJob] = field(default_factory=list)
    """Jobs gpupool suspended to stop their gang (`gpupool.io/suspended-at`)."""
    foreign_jobs: set[tuple[str, str]] = field(default_factory=set)
    """(namespace, Job) of Jobs another controller manages (`spec.managedBy`)."""
    queues: dict[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, Job) -> its Kueue queue (`kueue.x-k8s.io/queue-name` label), if any."""
    recoveries: dict[str, int] = field(default_factory=dict)
    """namespace/Job -> its `gpupool.io/recoveries` count, when gpupool's field manager wrote
    it (a count another writer set is forged state: ignored, reported)."""
    pod_groups: PodGroups | None = None
    """The Workload API's PodGroups (`kube_podgroups.py`); None: the API is not served."""
    jobs: set[tuple[str, str]] = field(default_factory=set)
    """(namespace, Job) of every Job read: a gated pod whose Job is not among them is held
    (`kube_pods.held_for_job`)."""


def _recoveries(j: Any) -> int | None:
    """The Job's `gpupool.io/recoveries` count: gpupool's own (its field manager), an integer
    in 1..`conventions.MAX_RECOVERIES_READ`; else None, reported."""
    text = (j.metadata.annotations or {}).get(C.RECOVERIES_ANN)
    if text is None:
        return None
    if not gpupool_wrote(j, C.RECOVERIES_ANN):
        _unreadable(*_job(j), f"forged-state: {not_written(j, C.RECOVERIES_ANN)}; ignored")
        return None
    try:
        value = int(str(text))
    except ValueError:
        value = -1
    if not 0 < value <= C.MAX_RECOVERIES_READ:
        _unreadable(*_job(j), f"unreadable {C.RECOVERIES_ANN} annotation {text!r}; ignored")
        return None
    return value


def _job(j: Any) -> tuple[str, str, str]:
    return "Job", j.metadata.namespace, j.metadata.name


def field_managers(obj: Any, *path: str) -> set[str]:
    """The field managers that own the field at `path` of `obj`, in the keys of
    `metadata.managedFields[].fieldsV1` ("f:spec", "f:suspend"): who set its value last. The API
    server keeps this record itself: whenever a field's value changes, ownership moves from its
    current manager to the one that changed it, through non-apply patches and updates too
    (kubernetes.io, "Server-Side Apply", Field management). An object without `managedFields`
    (a client that strips them) names none. (`trust.owners`, shared with apply.)"""
    return set(owners(getattr(obj.metadata, "managed_fields", None), *path))


def gpupool_owns(obj: Any, *path: str) -> bool:
    """gpupool's field manager (`conventions.FIELD_MANAGER`, which every write of
    `reconciler/apply/kube.py` names) owns the field at `path`: gpupool set it, and nobody
    has changed it since."""
    return C.FIELD_MANAGER in field_managers(obj, *path)


def gpupool_wrote(obj: Any, annotation: str) -> bool:
    """The value of `annotation` on `obj` is gpupool's: its field manager owns the key."""
    return gpupool_owns(obj, *annotation_path(annotation))


def not_written(obj: Any, annotation: str, trusted: Iterable[str] = (C.FIELD_MANAGER,)) -> str:
    """What is wrong with gpupool's `annotation` on `obj` that no manager of `trusted` wrote:
    for a `forged-state` report."""
    value = str((obj.metadata.annotations or {}).get(annotation))
    value = value if len(value) <= 80 else value[:77] + "..."
    who = sorted(field_managers(obj, *annotation_path(annotation)))
    by = f"field manager {', '.join(who)}" if who else "no field manager on record"
    return f"{annotation} {value!r} was not written by gpupool ({by}, not {', '.join(trusted)})"


def _suspended_by_us(j: Any) -> bool:
    """gpupool's suspension is still the one in force: its field manager owns `spec.suspend`.
    The annotation alone is not enough: if someone else unsuspended the Job and another
    system (Kueue) suspended it again, the annotation is left over, but the API server moved
    the field's ownership to whoever changed it last (`gpupool_owns`)."""
    return gpupool_owns(j, "f:spec", "f:suspend")


def _suspended_job(j: Any, parallelism: int, since: str) -> SuspendedJob:
    """A Job gpupool suspended, as demand: its pod template's request, class and pool."""
    tmpl = j.spec.template
    return SuspendedJob(
        namespace=j.metadata.namespace,
        name=j.metadata.name,
        parallelism=parallelism,
        request=template_request(tmpl.spec),
        priority_class=tmpl.spec.priority_class_name,
        pool=(tmpl.spec.node_selector or {}).get(C.POOL_LABEL),
        suspended_at=_ts(since, f"annotation {C.SUSPENDED_BY_ANN}", _job(j)),
    )


def read_owners(api_client: Any) -> Owners:
    """Gang sizes: a Job's `parallelism` (default 1), a coscheduling PodGroup's `minMember`
    (kubernetes-sigs/scheduler-plugins apis/scheduling/v1alpha1; absent CRD or no
    permission: none); the Workload API's PodGroups (`kube_podgroups.py`); and the next-pod
    reservations moves left on Jobs."""
    from kubernetes import client

    owners = Owners()
    out = owners.sizes

    def read_job(j: Any) -> None:
        owners.jobs.add((j.metadata.namespace, j.metadata.name))
        par = j.spec.parallelism if j.spec.parallelism is not None else 1
        why = count_problem(par, C.MAX_GANG_SIZE, "pods in one gang", "MAX_GANG_SIZE")
        if why:
            # one unit of demand per pod: a Job of 10^9 would stall the plan for everyone
            _unreadable(
                *_job(j),
                f"spec.parallelism={par}: {why}; its pods get no gang size, and it is not "
                "resumed while suspended",
            )
            par = 0
        if par > 0:
            out[(j.metadata.namespace, "Job", j.metadata.name)] = par
        ann = j.metadata.annotations or {}
        queue = (j.metadata.labels or {}).get(C.KUEUE_QUEUE_LABEL)
        if queue:
            owners.queues[(j.metadata.namespace, j.metadata.name)] = queue
        count = _recoveries(j)
        if count:
            owners.recoveries[f"{j.metadata.namespace}/{j.metadata.name}"] = count
        moved = _next_pod_reservation(j)
        if moved is not None:
            owners.next_pod[(j.metadata.namespace, j.metadata.name)] = moved
        if j.spec.managed_by not in (None, "", JOB_CONTROLLER):
            # the built-in Job controller skips such a Job (batch/v1 JobSpec.managedBy): a
            # suspension would stop nothing, so its gang is stopped pod by pod (`_gang`)
            owners.foreign_jobs.add((j.metadata.namespace, j.metadata.name))
        elif j.spec.suspend and C.SUSPENDED_BY_ANN in ann and par > 0 and _suspended_by_us(j):
            owners.suspended.append(_suspended_job(j, par, ann[C.SUSPENDED_BY_ANN]))

    _each(
        "Job",
        listed(C.JOBS, client.BatchV1Api(api_client).list_job_for_all_namespaces),
        read_job,
    )
    try:
        groups = listed(
            C.COSCHEDULING_POD_GROUPS,
            lambda: client.CustomObjectsApi(api_client).list_cluster_custom_object(
                C.POD_GROUP_GROUP, C.POD_GROUP_VERSION, C.POD_GROUP_PLURAL
            ),
        )
    except client.ApiException as exc:
        if exc.status not in (403, 404):
            raise
        groups = []
    for g in _objects("PodGroup", groups, "metadata", "spec"):
        meta, spec = g.get("metadata") or {}, g.get("spec") or {}
        who = ("PodGroup", meta.get("namespace"), meta.get("name"))
        size = _int(spec.get("minMember"), "spec.minMember", who)
        if size is not None and meta.get("namespace") and meta.get("name"):
            out[(meta["namespace"], "PodGroup", meta["name"])] = size
    owners.pod_groups = read_pod_groups(api_client)
    return owners
