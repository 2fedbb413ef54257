"""Objects to render: the ResourceQuotas, PriorityClasses and pool labels the desired state
asks for, diffed against the live ones (create / update, never an object gpupool does not
manage). What to delete is prune.py's; Kueue's objects are kueue_objects.py's."""

from __future__ import annotations

from reconciler.conventions import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    POOL_LABEL,
)
from reconciler.plan.actions import (
    ApplyPriorityClass,
    ApplyQuota,
    LabelNode,
)
from reconciler.plan.quotas import (
    desired_priority_classes,
    desired_resource_quotas,
)
from reconciler.plan.run import Run, kueue_mode


def resource_quotas(run: Run) -> dict[tuple[str, str], dict[str, str]]:
    """The ResourceQuotas gpupool keeps: every team namespace's, except in namespaces gpupool
    gates. There admission enforces caps, borrowing and lending limits, holding a pod gated
    until it fits; a quota counts gated pods from their creation and would refuse pods
    admission would only queue, so it is kept empty."""
    if kueue_mode(run):
        return {}  # the Quotas are Kueue's ClusterQueues (reconciler/plan/kueue.py)
    gated = set(run.observed.gated_namespaces or ())
    return {
        (ns, name): ({} if ns in gated else hard)
        for (ns, name), hard in desired_resource_quotas(run.desired).items()
    }


def foreign(run: Run, kind: str, name: str, manager: str, what: str) -> None:
    """A policy object whose name is taken by an object gpupool does not manage (no
    managed-by label, or another manager's): gpupool never changes or deletes it."""
    by = f"is managed by {manager}" if manager else f"has no {MANAGED_BY_LABEL} label"
    run.find(
        "warning",
        "foreign-object",
        f"{kind} {name}",
        f"{kind} {name} exists and {by}, so gpupool leaves it as it is instead of making it "
        f"{what}. Rename it in the policy, or label the object "
        f"{MANAGED_BY_LABEL}={MANAGED_BY} to hand it to gpupool",
    )


def desired_objects(run: Run) -> None:
    """Step 9: quotas, priority classes and pool labels that differ from the desired state."""
    _quotas(run)
    _priority_classes(run)
    _pool_labels(run)


def _quotas(run: Run) -> None:
    have = {(q.namespace, q.name): q for q in run.observed.quotas}
    for (ns, name), hard in resource_quotas(run).items():
        cur = have.get((ns, name))
        if cur is None and not hard:
            continue
        if cur is not None and cur.hard == hard:
            continue
        if cur is not None and cur.managed_by != MANAGED_BY:
            foreign(
                run, "ResourceQuota", f"{ns}/{name}", cur.managed_by, f"team {run.team(ns)}'s quota"
            )
            continue
        verb = "create" if cur is None else "update"
        changed = sorted(
            k
            for k in set(hard) | set(cur.hard if cur else {})
            if (cur.hard.get(k) if cur else None) != hard.get(k)
        )
        run.add(
            ApplyQuota(
                id=f"quota:{ns}/{name}",
                target=f"{ns}/{name}",
                reason=f"{verb} ResourceQuota for team {run.team(ns)}: "
                + ", ".join(f"{k}={hard.get(k, '(removed)')}" for k in changed)
                + (
                    f" ({ns} is gated: gpupool's admission enforces the team's limits and "
                    "queues what a quota would refuse)"
                    if ns in (run.observed.gated_namespaces or ())
                    else ""
                ),
                verb=verb,
                hard=hard,
                previous=cur.hard if cur else None,
            )
        )


def _priority_classes(run: Run) -> None:
    classes = {c.name: c for c in run.observed.priority_classes}
    wanted = desired_priority_classes(run.desired)
    # The API server admits one globalDefault class (plugin/pkg/admission/priority): another
    # one, not the policy's, keeps that role and the policy's default is published without it.
    other = sorted(c.name for c in classes.values() if c.global_default and c.name not in wanted)
    for name, want in wanted.items():
        if want.global_default and other:
            want = want.model_copy(update={"global_default": False})
            run.find(
                "warning",
                "default-class-taken",
                name,
                f"PriorityClass {other[0]} is the cluster's globalDefault: pods created without "
                f"a class get its priority, not defaultClass {name}'s",
            )
        cur = classes.get(name)
        if cur is not None and cur.model_dump(exclude={"name", "managed_by"}) == want.model_dump(
            exclude={"name", "managed_by"}
        ):
            continue
        if cur is not None and cur.managed_by != MANAGED_BY:
            foreign(
                run,
                "PriorityClass",
                name,
                cur.managed_by,
                f"the policy's class (value {want.value}, preemptionPolicy "
                f"{want.preemption_policy}); pods naming it get value {cur.value}",
            )
            continue
        default = ", the default for pods that name none" if want.global_default else ""
        run.add(
            ApplyPriorityClass(
                id=f"priority-class:{name}",
                target=name,
                reason=(
                    f"{'create' if cur is None else 'update'} PriorityClass {name} "
                    f"(value {want.value}, preemptionPolicy {want.preemption_policy}{default})"
                ),
                value=want.value,
                preemption_policy=want.preemption_policy,
                global_default=want.global_default,
            )
        )


def _pool_labels(run: Run) -> None:
    for pv in run.cluster.pools.values():
        for node in sorted(pv.nodes):
            if pv.nodes[node].labels.get(POOL_LABEL) != pv.name:
                run.add(
                    LabelNode(
                        id=f"label-node:{node}",
                        target=node,
                        pool=pv.name,
                        reason=(
                            f"{node} matches Pool/{pv.name}'s selector; "
                            f"label it {POOL_LABEL}={pv.name}"
                        ),
                        labels={POOL_LABEL: pv.name},
                    )
                )
