"""Kueue mode: the Quotas as Kueue objects. Pure: no I/O.

With PriorityPolicy `spec.admission.controller: kueue`, every Quota becomes one ClusterQueue
in the policy's cohort, every Pool one ResourceFlavor, every team namespace one LocalQueue,
and Kueue admits (and suspends) training Jobs; gpupool renders no ResourceQuota then.

Kueue's API, as this module renders it, was read in kubernetes-sigs/kueue v0.17.0 (the Go
module sigs.k8s.io/kueue@v0.17.0): the types in apis/kueue/v1beta2/{clusterqueue,
localqueue,resourceflavor}_types.go and the CRDs in config/components/crd/bases/
kueue.x-k8s.io_{clusterqueues,localqueues,resourceflavors}.yaml (v1beta2 is the stored
version). Field by field, next to the code that writes it.

A rendered spec is a plain dict in Kueue's JSON shape. A `None` value means "must be absent"
(a limit the Quota does not set): `spec_matches` requires it absent from the observed object
and `body` leaves it out of what is sent (a JSON merge patch replaces lists whole, so a limit
dropped from the policy disappears with the list it was in).
"""

from __future__ import annotations

import math
from typing import Any

from reconciler.conventions import (
    GPU_RESOURCE,
    KUEUE_LOCAL_QUEUE,
    NAMESPACE_NAME_LABEL,
    POOL_LABEL,
    SHARED_RESOURCE,
    mig_resource,
)
from reconciler.policy.models import Allotment, Quota
from reconciler.policy.quantity import quantity_bytes
from reconciler.policy.state import DesiredState

PREFIX = "gpupool-"
KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue")
"""The order they are applied in: a ClusterQueue names its flavors, a LocalQueue its
ClusterQueue (Kueue marks a ClusterQueue whose flavor is missing inactive,
apis/kueue/v1beta2/clusterqueue_types.go `FlavorReference`); pruned in reverse."""

Key = tuple[str, str, str]
"""(kind, namespace or "", name)."""


def flavor_name(pool: str) -> str:
    return PREFIX + pool


def cluster_queue_name(quota: Quota) -> str:
    return PREFIX + quota.metadata.name


def _quota(a: Allotment) -> tuple[int, int | None, int | None]:
    return a.guaranteed, a.borrowing_limit, a.lending_limit


def _resource(name: str, nominal: int, borrowing: int | None, lending: int | None) -> dict:
    # ResourceQuota in apis/kueue/v1beta2/clusterqueue_types.go:
    # - nominalQuota: "the quantity of this resource that is available for Workloads
    #   admitted by this ClusterQueue at a point in time" -> our `guaranteed`;
    # - borrowingLimit: "the maximum amount of quota for the [flavor, resource] combination
    #   that this ClusterQueue is allowed to borrow from the unused quota of other
    #   ClusterQueues in the same cohort ... If null, it means that there is no borrowing
    #   limit" -> our `borrowingLimit` (None: no limit), exactly;
    # - lendingLimit: "the maximum amount of unused quota ... that this ClusterQueue can lend
    #   to other ClusterQueues in the same cohort ... If null ... all the nominalQuota can be
    #   borrowed" -> our `lendingLimit` (None: all of it), exactly (beta, on by default).
    return {
        "name": name,
        "nominalQuota": nominal,
        "borrowingLimit": borrowing,
        "lendingLimit": lending,
    }


def cluster_queue_spec(desired: DesiredState, q: Quota) -> dict[str, Any]:
    """One ClusterQueue for a Quota: one resource group whose flavors are the Quota's pools
    (in the Quota's order: Kueue tries a group's flavors in list order) and whose covered
    resources are whole cards, each MIG profile the Quota names and shared slices."""
    pools = []
    seen: set[str] = set()
    for pq in q.spec.pools:
        if pq.pool not in seen and pq.pool in desired.pools:
            seen.add(pq.pool)
            pools.append(pq)
    profiles = sorted({p for pq in pools for p in pq.mig})
    shared = any(
        pq.shared_memory is not None and desired.pools[pq.pool].spec.inference.shared is not None
        for pq in pools
    )
    covered = [GPU_RESOURCE, *(mig_resource(p) for p in profiles)]
    if shared:
        covered.append(SHARED_RESOURCE)
    flavors = []
    for pq in pools:
        resources = [_resource(GPU_RESOURCE, *_quota(pq.whole))]
        for prof in profiles:
            # a profile this pool's allotment does not name: no guarantee, borrowing as the
            # Allotment default (no limit): what an unnamed allotment means in gpupool mode
            resources.append(_resource(mig_resource(prof), *_quota(pq.mig.get(prof, Allotment()))))
        if shared:
            sh = desired.pools[pq.pool].spec.inference.shared
            mem = pq.shared_memory
            if sh is None or mem is None:
                resources.append(_resource(SHARED_RESOURCE, 0, None, None))
            else:
                # GPU memory -> slices of the pool's memoryPerSlice, rounded up (as the
                # ResourceQuota rendering does, reconciler/plan/quotas.py)
                per = quantity_bytes(sh.memory_per_slice)
                b, lend = mem.borrowing_limit, mem.lending_limit
                resources.append(
                    _resource(
                        SHARED_RESOURCE,
                        math.ceil(quantity_bytes(mem.guaranteed) / per),
                        math.ceil(quantity_bytes(b) / per) if b is not None else None,
                        math.ceil(quantity_bytes(lend) / per) if lend is not None else None,
                    )
                )
        # FlavorQuotas: `name` references a ResourceFlavor; every flavor lists the group's
        # coveredResources in the same order (CRD rule "flavors must have the same number of
        # resources as the coveredResources")
        flavors.append({"name": flavor_name(pq.pool), "resources": resources})
    groups = [{"coveredResources": covered, "flavors": flavors}] if flavors else []
    return {
        # cohortName: "cohortName that this ClusterQueue belongs to. CQs that belong to the
        # same cohort can borrow unused resources from each other" (v1beta2; v1beta1 `cohort`)
        "cohortName": desired.kueue_cohort,
        # namespaceSelector: "which namespaces are allowed to submit workloads to this
        # clusterQueue ... Defaults to null which is a nothing selector"; the API server
        # labels each namespace kubernetes.io/metadata.name=<its name>
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": NAMESPACE_NAME_LABEL,
                    "operator": "In",
                    "values": sorted(q.spec.namespaces),
                }
            ]
        },
        # preemption.reclaimWithinCohort Any: "if the pending Workload fits within the nominal
        # quota of its ClusterQueue, preempt any Workload in the cohort" that borrows: the
        # Quota's promise that a guarantee is lent only while the team does not use it (Kueue
        # holds the preempted Workload unadmitted); the Quota's reclaimWithinCohort, when set.
        # withinClusterQueue Never (Kueue's default): gpupool's class rules are pairs of
        # classes, which Kueue's priority-only policies cannot express; not rendered.
        "preemption": {
            "reclaimWithinCohort": q.spec.reclaim_within_cohort or "Any",
            "withinClusterQueue": "Never",
        },
        "resourceGroups": groups,
    }


def desired_kueue_objects(desired: DesiredState) -> dict[Key, dict[str, Any]]:
    """(kind, namespace, name) -> spec, flavors first, then cluster queues, then local
    queues (each by name): the order they are applied in."""
    out: dict[Key, dict[str, Any]] = {}
    for name in sorted(desired.pools):
        # ResourceFlavor.spec.nodeLabels: "labels that associate the ResourceFlavor with Nodes
        # that have the same labels" (and Kueue injects them into the admitted pods' node
        # selector): the pool label gpupool puts on the pool's nodes
        out[("ResourceFlavor", "", flavor_name(name))] = {"nodeLabels": {POOL_LABEL: name}}
    quotas = sorted(desired.quotas.values(), key=lambda q: q.metadata.name)
    for q in quotas:
        out[("ClusterQueue", "", cluster_queue_name(q))] = cluster_queue_spec(desired, q)
    for q in quotas:
        for ns in sorted(set(q.spec.namespaces)):
            # LocalQueue.spec.clusterQueue: "a reference to a clusterQueue that backs this
            # localQueue" (immutable: CRD rule "field is immutable")
            out[("LocalQueue", ns, KUEUE_LOCAL_QUEUE)] = {"clusterQueue": cluster_queue_name(q)}
    return out


def unmapped_fields(q: Quota) -> list[str]:
    """The Quota's fields Kueue has no equivalent for (set, so not enforced in kueue mode)."""
    out = []
    if q.spec.max_gpus is not None:
        out.append(
            f"maxGPUs {q.spec.max_gpus} (a cap over all pools in card equivalents: a "
            "ClusterQueue limits each flavor and resource separately)"
        )
    return out


def spec_matches(want: Any, have: Any) -> bool:
    """The observed value says what the rendered one says. Keys the rendering does not set
    (defaults the CRD or Kueue's webhook fill in: queueingStrategy, flavorFungibility, ...)
    are not compared; a rendered `None` must be absent; lists compare element by element."""
    if want is None:
        return have is None
    if isinstance(want, dict):
        return isinstance(have, dict) and all(spec_matches(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        have = [] if have is None else have
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(spec_matches(w, h) for w, h in zip(want, have, strict=True))
        )
    return str(want) == str(have)


def body(spec: Any) -> Any:
    """What is sent: the rendered spec without its `None` (absent) values."""
    if isinstance(spec, dict):
        return {k: body(v) for k, v in spec.items() if v is not None}
    if isinstance(spec, list):
        return [body(v) for v in spec]
    return spec
