"""Gangs from the Workload API: `scheduling.k8s.io/v1beta1` PodGroups (Kubernetes 1.37, beta,
served with the `GenericWorkload` feature gate and
`--runtime-config=scheduling.k8s.io/v1beta1=true`).

A `Workload` is a template (`spec.podGroupTemplates`); what pods belong to is its runtime
instance, a namespaced `PodGroup`, named by each pod's `spec.schedulingGroup.podGroupName`
(k8s.io/api core/v1 `PodSchedulingGroup`; the pod field is immutable). A PodGroup whose
`spec.schedulingPolicy` is `gang: {minCount: N}` is scheduled all or nothing by kube-scheduler's
GangScheduling plugin: no pod of it is queued before N exist, and none is bound before N are
placed (pkg/scheduler/framework/plugins/gangscheduling: PreEnqueue, Permit). A `basic` policy
makes no gang. gpupool reads PodGroups only (the Workload adds nothing a pod's group does not
say).

Each pod is read onto gpupool's one gang model (`Workload.gang`, `Workload.gang_size`): a pod in
a gang PodGroup is in gang `podgroup:<name>` (`conventions.WORKLOAD_GANG_PREFIX`), its size the
group's `minCount`, so it is admitted, stopped and recovered whole like any gang. Where a gang
comes from when a pod has several sources, in order (`gang_of`):

1. a pod owned by a Job the built-in Job controller runs stays the Job's gang (stopped by
   suspending the Job, as today; with the alpha `WorkloadWithJob` gate the Job controller makes
   a PodGroup of the Job's pods, `minCount` its parallelism: the same pods);
2. its gang PodGroup (an explicit `gpupool.io/gang` that names another gang is ignored,
   reported: kube-scheduler enforces the PodGroup whatever the annotation says);
3. otherwise what `kube_pods._gang` reads today (`gpupool.io/gang`, a coscheduling pod group,
   the owning Job).

Where the API is not served (404) or not readable (403), nothing changes: `spec.schedulingGroup`
is not read (the API server drops the field when the gate is off). A gated pod kube-scheduler
would not schedule as its group stands is held (`Workload.admission` "other", reported), so
gpupool reserves nothing for it: its PodGroup does not exist (the scheduler waits for it), or
the group's priority is not the pod's (the scheduler refuses the whole group; a PodGroup without
`priorityClassName` gets the default class's priority, not its pods'). A PodGroup whose
policy does not read (no or unknown policy, a `minCount` that is not an integer in
1..`MAX_GANG_SIZE`) is a gang of unknown size (the pods that exist), reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from reconciler import conventions as C
from reconciler.observe.kube_common import _each, _json_type, _objects, _unreadable, listed
from reconciler.observe.model import count_problem


@dataclass(frozen=True)
class GroupPolicy:
    """What a PodGroup says about its pods: a gang or not, and its `minCount`."""

    gang: bool
    min_count: int | None = None
    """A gang's size; None: unreadable (the pods that exist are the gang)."""
    priority: int | None = None
    """`spec.priority` (the API server resolves it from `spec.priorityClassName`, else the
    default class): every pod of the group must have it, or none is scheduled."""


@dataclass
class PodGroups:
    """The Workload API's PodGroups, as read this cycle (the API is served)."""

    groups: dict[tuple[str, str], GroupPolicy] = field(default_factory=dict)
    """(namespace, name) -> the group's policy."""


def read_pod_groups(api_client: Any) -> PodGroups | None:
    """Every PodGroup of `scheduling.k8s.io/v1beta1`; None where the API is not served (404)
    or gpupool may not list it (403). Each object that does not read is left out, reported."""
    from kubernetes import client

    try:
        items = listed(
            C.WORKLOAD_POD_GROUPS,
            lambda: client.CustomObjectsApi(api_client).list_cluster_custom_object(
                C.WORKLOAD_API_GROUP, C.WORKLOAD_API_VERSION, C.WORKLOAD_POD_GROUP_PLURAL
            ),
        )
    except client.ApiException as exc:
        if exc.status not in (403, 404):
            raise
        return None
    groups = _objects("PodGroup", items, "metadata", "spec")
    out = PodGroups()
    for found in _each("PodGroup", groups, _group):
        if found is not None:
            out.groups[found[0]] = found[1]
    return out


def _group(g: dict) -> tuple[tuple[str, str], GroupPolicy] | None:
    """((namespace, name), policy) of one PodGroup; None without a namespace and a name."""
    meta, spec = g.get("metadata") or {}, g.get("spec") or {}
    ns, name = meta.get("namespace"), meta.get("name")
    if not (isinstance(ns, str) and ns and isinstance(name, str) and name):
        _unreadable(
            "PodGroup",
            ns if isinstance(ns, str) else None,
            name if isinstance(name, str) else None,
            "left out: no namespace or no name (no pod can name it)",
        )
        return None
    policy = _policy(spec.get("schedulingPolicy"), (ns, name))
    priority = spec.get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool):
        policy = replace(policy, priority=priority)
    return (ns, name), policy


def _policy(policy: Any, who: tuple[str, str]) -> GroupPolicy:
    """A PodGroup's `spec.schedulingPolicy`: exactly one of `basic` and `gang` (the API
    server's validation); anything else is reported and read as a gang of unknown size (the
    safe reading: admitted whole, never split)."""
    ns, name = who
    if not isinstance(policy, dict) or not (("gang" in policy) ^ ("basic" in policy)):
        keys = sorted(map(str, policy)) if isinstance(policy, dict) else _json_type(policy)
        _unreadable(
            "PodGroup",
            ns,
            name,
            f"spec.schedulingPolicy is not one of basic and gang ({keys}); read as a gang of "
            "the pods that exist",
        )
        return GroupPolicy(gang=True)
    if "basic" in policy:
        return GroupPolicy(gang=False)
    gang = policy["gang"]
    count = gang.get("minCount") if isinstance(gang, dict) else None
    why = (
        "not an integer"
        if not isinstance(count, int) or isinstance(count, bool)
        else "below 1"
        if count < 1
        else count_problem(count, C.MAX_GANG_SIZE, "pods in one gang", "MAX_GANG_SIZE")
    )
    if why:
        text = repr(count)[:40]
        _unreadable(
            "PodGroup",
            ns,
            name,
            f"spec.schedulingPolicy.gang.minCount {text}: {why}; read as a gang of the pods "
            "that exist",
        )
        return GroupPolicy(gang=True)
    return GroupPolicy(gang=True, min_count=count)


def group_name(p: Any) -> str | None:
    """The PodGroup the pod names (`spec.schedulingGroup.podGroupName`), if it names one."""
    sg = getattr(p.spec, "scheduling_group", None)
    name = getattr(sg, "pod_group_name", None) if sg is not None else None
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        _unreadable(
            "Pod",
            p.metadata.namespace,
            p.metadata.name,
            f"spec.schedulingGroup.podGroupName is {_json_type(name)}, not a name; ignored",
        )
        return None
    return name


def gang_of(p: Any, groups: PodGroups | None, job_gang: bool) -> tuple[str, int | None] | None:
    """(`Workload.gang`, `gang_size`) of a pod in a gang PodGroup; None when its gang comes
    from elsewhere (the API is not served, it names no group, the group is `basic`, or
    `job_gang`: it belongs to a Job the built-in controller runs). A group that does not exist
    makes a gang of unknown size (the pod is held meanwhile: `held_for_group`)."""
    if groups is None or job_gang:
        return None
    name = group_name(p)
    if name is None:
        return None
    policy = groups.groups.get((p.metadata.namespace, name), GroupPolicy(gang=True))
    if not policy.gang:
        return None
    gang = C.WORKLOAD_GANG_PREFIX + name
    own = (p.metadata.annotations or {}).get(C.GANG_ANN)
    if own and own != gang:
        _unreadable(
            "Pod",
            p.metadata.namespace,
            p.metadata.name,
            f"{C.GANG_ANN} {str(own)[:80]!r} ignored: the pod is in PodGroup {name}, which "
            "kube-scheduler schedules as a gang; gpupool admits and stops that gang",
        )
    return gang, policy.min_count


def held_for_group(p: Any, groups: PodGroups | None) -> bool:
    """A gated pod kube-scheduler would not schedule as its group stands, where the API is
    served: its PodGroup does not exist (GangScheduling PreEnqueue waits for it), or the
    group's priority is not the pod's (the scheduler's pod-group cycle refuses every pod of the
    group: pkg/scheduler/schedule_one_podgroup.go, `validatePodGroup`). gpupool does not admit
    it either, and says why (reported)."""
    if groups is None:
        return False
    name = group_name(p)
    if name is None:
        return False
    policy = groups.groups.get((p.metadata.namespace, name))
    if policy is None:
        why = f"names PodGroup {name}, which does not exist: kube-scheduler does not schedule it"
    elif policy.priority is not None and isinstance(p.spec.priority, int):
        if p.spec.priority == policy.priority:
            return False
        why = (
            f"has priority {p.spec.priority} and its PodGroup {name} {policy.priority}: "
            "kube-scheduler schedules no pod of a group whose pods' priority is not the "
            "group's (set the PodGroup's priorityClassName to the pods' class)"
        )
    else:
        return False
    _unreadable("Pod", p.metadata.namespace, p.metadata.name, f"{why}; gpupool holds it too")
    return True
