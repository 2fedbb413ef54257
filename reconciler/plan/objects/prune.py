"""Objects to prune: what gpupool made (its managed-by label) and the desired state no longer
has: ResourceQuotas, PriorityClasses (never one a pod still names) and stale pool labels.
Pruning every object of a kind while the desired state has none is refused unless the
ChangePolicy allows it."""

from __future__ import annotations

from reconciler.conventions import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    POOL_LABEL,
)
from reconciler.plan.actions import (
    LabelNode,
    PrunePriorityClass,
    PruneQuota,
)
from reconciler.plan.objects.wanted import resource_quotas
from reconciler.plan.quotas import (
    desired_priority_classes,
)
from reconciler.plan.run import Run


def refuse_prune_all(run: Run, kind: str, names: list[str], opt_in: str) -> None:
    run.find(
        "warning",
        "prune-everything-refused",
        kind,
        f"the desired state has no {kind} any more, and pruning would delete every one gpupool "
        f"made ({', '.join(names)}): an empty or unreadable policy directory looks the same, so "
        f"nothing is pruned. Set {opt_in}: true in the ChangePolicy to prune them all",
    )


def prune_objects(run: Run) -> None:
    """Delete what gpupool made (label MANAGED_BY_LABEL=MANAGED_BY) and the desired state no
    longer has; never an object without the label. Pruning every object of a kind while the
    desired state has none of it is refused unless the ChangePolicy allows it (Argo CD's
    allow-empty): a lost policy directory must not wipe the cluster's quotas and classes."""
    change = run.desired.change.spec if run.desired.change else None
    wanted_quotas = resource_quotas(run)
    stale = sorted(
        (q.namespace, q.name)
        for q in run.observed.quotas
        if q.managed_by == MANAGED_BY and (q.namespace, q.name) not in wanted_quotas
    )
    if stale and not run.desired.quotas and not (change and change.allow_delete_all_quotas):
        refuse_prune_all(
            run, "ResourceQuota", [f"{ns}/{n}" for ns, n in stale], "allowDeleteAllQuotas"
        )
    else:
        for ns, name in stale:
            run.add(
                PruneQuota(
                    id=f"prune-quota:{ns}/{name}",
                    target=f"{ns}/{name}",
                    reason=(
                        f"prune ResourceQuota {ns}/{name}: no Quota in the desired state "
                        f"governs namespace {ns} with it any more (gpupool made it: "
                        f"{MANAGED_BY_LABEL}={MANAGED_BY})"
                    ),
                )
            )
    wanted_classes = desired_priority_classes(run.desired)
    # Who still names a class: running and pending pods (their owners recreate them with the
    # same priorityClassName), inference services' templates, Jobs gpupool suspended. Deleting
    # a class they name would make their next pod unadmittable: the Priority admission plugin
    # rejects a pod whose priorityClassName names no PriorityClass ("If the priority class is
    # not found, the Pod is rejected", kubernetes.io/docs/concepts/configuration/
    # pod-priority-preemption/#pod-priority; plugin/pkg/admission/priority/admission.go).
    candidates = [
        c
        for c in sorted(run.observed.priority_classes, key=lambda c: c.name)
        if c.managed_by == MANAGED_BY and c.name not in wanted_classes
    ]
    users: dict[str, list[str]] = {}  # asked only of a class gpupool might prune
    for who in (
        (*run.observed.workloads, *run.observed.services, *run.observed.suspended_jobs)
        if candidates
        else ()
    ):
        if who.priority_class:
            users.setdefault(who.priority_class, []).append(f"{who.namespace}/{who.name}")
    stale_classes: list[str] = []
    for c in candidates:
        if c.name in users:
            names = sorted(set(users[c.name]))
            run.find(
                "warning",
                "prune-class-in-use",
                c.name,
                f"PriorityClass {c.name} is no longer in the policy but is kept: "
                f"{', '.join(names[:5])}{' and others' if len(names) > 5 else ''} still name "
                "it, and a pod naming a missing class is rejected. It is pruned once none does",
            )
            continue
        stale_classes.append(c.name)
    if (
        stale_classes
        and not wanted_classes
        and not (change and change.allow_delete_all_priority_classes)
    ):
        refuse_prune_all(run, "PriorityClass", stale_classes, "allowDeleteAllPriorityClasses")
        return
    for name in stale_classes:
        run.add(
            PrunePriorityClass(
                id=f"prune-priority-class:{name}",
                target=name,
                reason=(
                    f"prune PriorityClass {name}: the policy no longer names it and no pod, "
                    f"service or suspended Job uses it (gpupool made it: "
                    f"{MANAGED_BY_LABEL}={MANAGED_BY})"
                ),
            )
        )


def prune_pool_labels(run: Run) -> None:
    """A node that carries gpupool's pool label but is in no desired pool (its Pool was deleted
    from git, or its selector no longer matches the node) loses the label: the key is
    gpupool's, and a stale label would keep steering the old pool's pods and Kueue's
    ResourceFlavor there. With no Pool desired at all nothing is removed (a policy that lost
    every Pool is more likely a mistake than a decommissioning): a finding says so."""
    pooled = {n for pv in run.cluster.pools.values() for n in pv.nodes}
    stale = sorted(
        (n.name, n.labels[POOL_LABEL])
        for n in run.observed.nodes
        if POOL_LABEL in n.labels and n.name not in pooled
    )
    if not stale:
        return
    if not run.desired.pools:
        run.find(
            "warning",
            "prune-everything-refused",
            "Node",
            f"no Pool is desired, so the {POOL_LABEL} label stays on {len(stale)} node(s) "
            f"({', '.join(n for n, _ in stale[:5])}{', ...' if len(stale) > 5 else ''}); "
            "remove it by hand if the pools are really gone",
        )
        return
    for node, old in stale:
        run.add(
            LabelNode(
                id=f"label-node:{node}",
                target=node,
                pool=old,
                reason=(
                    f"{node} is labelled {POOL_LABEL}={old} but is in no desired pool "
                    f"(Pool/{old} is gone or its selector no longer matches): remove the label"
                ),
                labels={POOL_LABEL: None},
            )
        )
