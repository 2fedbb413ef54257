"""The Kubernetes objects the policy implies: ResourceQuotas per namespace, PriorityClasses.

A ResourceQuota is per namespace, so each namespace of a team gets the team's whole limit;
the planner enforces the team-wide cap across namespaces itself (admission holds demand).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from reconciler.conventions import GPU_RESOURCE, MANAGED_BY, SHARED_RESOURCE, mig_resource
from reconciler.observe.model import PriorityClassObject, Request, Workload
from reconciler.plan.dra import quota_key
from reconciler.policy.models import MemoryAllotment, SharedInference
from reconciler.policy.quantity import quantity_bytes
from reconciler.policy.state import DesiredState

QUOTA_PREFIX = "gpupool-"


def _limit(guaranteed: int, borrowing: int | None, cap: int | None) -> int | None:
    if borrowing is None:
        return cap
    total = guaranteed + borrowing
    return min(total, cap) if cap is not None else total


def _adder(hard: dict[str, int], unlimited: set[str]):
    def add(resource: str, value: int | None) -> None:
        if value is None:
            unlimited.add(resource)
        else:
            hard[resource] = hard.get(resource, 0) + value

    return add


def quota_use(r: Request) -> dict[str, int]:
    """What one pod with request `r` counts against a ResourceQuota (`requests.<resource>`)."""
    use: dict[str, int] = {}
    if r.gpus:
        use["requests." + GPU_RESOURCE] = r.gpus
    for prof, n in sorted(r.mig.items()):
        key = "requests." + mig_resource(prof)
        use[key] = use.get(key, 0) + n
    if r.shared_slices:
        use["requests." + SHARED_RESOURCE] = r.shared_slices
    return use


def quota_use_by_namespace(workloads: Iterable[Workload]) -> dict[str, Counter]:
    """Namespace -> what its pods count against its ResourceQuota: the sum of `quota_use`,
    each request shape priced once (namespaces in the order their first pod comes)."""
    shapes: dict[str, Counter] = {}
    requests: dict[tuple, Request] = {}
    for w in workloads:
        r = w.request
        shape = (r.gpus, tuple(r.mig.items()), r.shared_slices)
        requests.setdefault(shape, r)
        shapes.setdefault(w.namespace, Counter())[shape] += 1
    out: dict[str, Counter] = {}
    for ns, counted in shapes.items():
        use = out[ns] = Counter()
        for shape, n in counted.items():
            use.update({res: k * n for res, k in quota_use(requests[shape]).items()})
    return out


def desired_resource_quotas(desired: DesiredState) -> dict[tuple[str, str], dict[str, str]]:
    """(namespace, name) -> spec.hard, for every namespace a Quota governs."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for q in sorted(desired.quotas.values(), key=lambda q: q.metadata.name):
        cap = q.spec.max_gpus
        hard: dict[str, int] = {}
        unlimited: set[str] = set()
        add = _adder(hard, unlimited)

        for pq in q.spec.pools:
            pool = desired.pools.get(pq.pool)
            if pool is not None and pool.spec.backend == "dra":
                _dra_quota(pq, add, cap)
                continue
            if pq.whole.guaranteed or pq.whole.borrowing_limit:
                add(
                    "requests." + GPU_RESOURCE,
                    _limit(pq.whole.guaranteed, pq.whole.borrowing_limit, cap),
                )
            for prof, a in sorted(pq.mig.items()):
                add(f"requests.{mig_resource(prof)}", _limit(a.guaranteed, a.borrowing_limit, None))
            sh = pool.spec.inference.shared if pool else None
            if pq.shared_memory is not None and sh is not None:
                g, b = shared_slices(pq.shared_memory, sh)
                add(f"requests.{SHARED_RESOURCE}", _limit(g, b, None))
        if cap is not None and "requests." + GPU_RESOURCE not in hard:
            hard["requests." + GPU_RESOURCE] = cap
        final = {k: str(v) for k, v in sorted(hard.items()) if k not in unlimited}
        for ns in q.spec.namespaces:
            out[(ns, QUOTA_PREFIX + q.team)] = final
    return out


def shared_slices(memory: MemoryAllotment, shared: SharedInference) -> tuple[int, int | None]:
    """A shared-memory allotment (guarantee, borrowing limit: None for none) in the pool's
    slices, each rounded up: what the rendered ResourceQuota counts, and gpupool's admission
    holds a team to."""
    per = quantity_bytes(shared.memory_per_slice)
    b = memory.borrowing_limit
    return math.ceil(quantity_bytes(memory.guaranteed) / per), (
        math.ceil(quantity_bytes(b) / per) if b else None
    )


def _dra_quota(pq, add, cap: int | None) -> None:
    """A DRA pool's allotments counted in devices of its DeviceClasses (plan/dra.py): its pods
    ask for no `nvidia.com/*` resource."""
    if pq.whole.guaranteed or pq.whole.borrowing_limit:
        add(quota_key(pq.pool), _limit(pq.whole.guaranteed, pq.whole.borrowing_limit, cap))
    for prof, a in sorted(pq.mig.items()):
        add(quota_key(pq.pool, prof), _limit(a.guaranteed, a.borrowing_limit, None))


def desired_priority_classes(desired: DesiredState) -> dict[str, PriorityClassObject]:
    """The PriorityClasses the policy implies, by name. gpupool decides preemption itself, so
    the scheduler's own preemption is off (`Never`): it must not evict behind the plan's back.
    `defaultClass` is the `globalDefault` class: the API server stamps it on pods created
    without a class, so kube-scheduler and the planner see the same priority for them."""
    if desired.priority is None:
        return {}
    default = desired.priority.spec.default_class
    return {
        c.name: PriorityClassObject(
            name=c.name,
            value=c.value,
            preemption_policy="Never",
            global_default=c.name == default,
            managed_by=MANAGED_BY,
        )
        for c in sorted(desired.priority.spec.classes, key=lambda c: c.name)
    }
