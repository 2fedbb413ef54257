"""Object handlers: ResourceQuotas, PriorityClasses and Kueue objects gpupool manages,
applied and pruned."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reconciler import conventions as C
from reconciler.apply.handlers.base import Context, Outcome, _ns_name, handles
from reconciler.apply.port import ApiError
from reconciler.plan.actions import (
    Action,
    ApplyKueueObject,
    ApplyPriorityClass,
    ApplyQuota,
    PruneKueueObject,
    PrunePriorityClass,
    PruneQuota,
)

# gpupool changes or deletes only objects that carry its managed-by label: a PriorityClass or
# ResourceQuota of the same name that someone else made is theirs (the planner reports the
# collision; this is the last check, for one created between plan and apply).


def _not_ours(kind: str, a: Action, manager: str) -> Outcome:
    by = f"managed by {manager}" if manager else f"no {C.MANAGED_BY_LABEL} label"
    return Outcome(
        a.id,
        "skipped",
        f"{kind} {a.target} exists and is not gpupool's ({by}): left as it is",
    )


@handles(ApplyQuota)
def quota(a: ApplyQuota, ctx: Context) -> Outcome:
    ns, name = _ns_name(a.target)
    if not ctx.ops.namespace_exists(ns):
        return Outcome(a.id, "blocked", f"namespace {ns} does not exist")
    manager = ctx.ops.quota_manager(ns, name)
    if manager is not None and manager != C.MANAGED_BY:
        return _not_ours("ResourceQuota", a, manager)
    ctx.ops.server_side_apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY},
            },
            "spec": {"hard": dict(a.hard)},
        }
    )
    return Outcome(a.id, "done", "applied", changed=True)


@handles(ApplyPriorityClass)
def priority_class(a: ApplyPriorityClass, ctx: Context) -> Outcome:
    cur = ctx.ops.read_priority_class(a.target)
    if cur is not None and cur.managed_by != C.MANAGED_BY:
        return _not_ours("PriorityClass", a, cur.managed_by)
    # value and preemptionPolicy are immutable in Kubernetes: replace the object
    if cur is not None and (cur.value != a.value or cur.preemption_policy != a.preemption_policy):
        ctx.ops.delete_priority_class(a.target)
    ctx.ops.server_side_apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": a.target, "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY}},
            "value": a.value,
            "preemptionPolicy": a.preemption_policy,
            "globalDefault": a.global_default,
            "description": "managed by gpupool",
        }
    )
    return Outcome(a.id, "done", "applied", changed=True)


def _prune(a: Action, kind: str, manager: str | None, delete: Callable[[], None]) -> Outcome:
    """Delete an object gpupool made (`manager`: its managed-by label, None when it is gone)."""
    if manager is None:
        return Outcome(a.id, "done", "already gone")
    if manager != C.MANAGED_BY:
        return _not_ours(kind, a, manager)
    try:
        delete()
    except ApiError as e:
        if e.status != 404:
            raise
        return Outcome(a.id, "done", "already gone")
    return Outcome(a.id, "done", "deleted", changed=True)


@handles(PruneQuota)
def prune_quota(a: PruneQuota, ctx: Context) -> Outcome:
    ns, name = _ns_name(a.target)
    return _prune(
        a,
        "ResourceQuota",
        ctx.ops.quota_manager(ns, name),
        lambda: ctx.ops.delete_resource_quota(ns, name),
    )


@handles(PrunePriorityClass)
def prune_priority_class(a: PrunePriorityClass, ctx: Context) -> Outcome:
    cur = ctx.ops.read_priority_class(a.target)
    return _prune(
        a,
        "PriorityClass",
        None if cur is None else cur.managed_by,
        lambda: ctx.ops.delete_priority_class(a.target),
    )


# ------------------------------------------------------------------------------------------ Kueue


def _apply_object(
    a: Any,
    ctx: Context,
    *,
    api_version: str,
    meta: dict[str, Any],
    manager_of: Callable[[str, str, str], str | None],
    create: Callable[[dict], None],
    patch: Callable[[str, str, str, dict], None],
) -> Outcome:
    """Create `a`'s object (apiVersion, kind, name, namespace, `meta`'s labels/annotations and
    `a.spec`), or merge-patch its `meta` and `spec` (a JSON merge patch replaces the lists in it
    whole, so what the policy dropped goes); only while it is gpupool's. Kueue's and DRA's
    objects go this way, each through its own calls of the port."""
    kind, ns, name = a.object_kind, a.namespace, a.name
    if ns and not ctx.ops.namespace_exists(ns):
        return Outcome(a.id, "blocked", f"namespace {ns} does not exist")
    manager = manager_of(kind, ns, name)
    if manager is not None and manager != C.MANAGED_BY:
        return _not_ours(kind, a, manager)
    if manager is None:
        made = {"name": name, **meta, **({"namespace": ns} if ns else {})}
        try:
            create({"apiVersion": api_version, "kind": kind, "metadata": made, "spec": a.spec})
        except ApiError as e:
            if e.status != 409:
                raise
            # made meanwhile, or still being deleted (Kueue's resource-in-use finalizer keeps
            # a queue in use): the next cycle sees which
            return Outcome(a.id, "blocked", f"{kind} {a.target} exists already: {e.message}")
        return Outcome(a.id, "done", "created", changed=True)
    patch(kind, ns, name, {"metadata": meta, "spec": a.spec})
    return Outcome(a.id, "done", "updated", changed=True)


@handles(ApplyKueueObject)
def kueue_object(a: ApplyKueueObject, ctx: Context) -> Outcome:
    return _apply_object(
        a,
        ctx,
        api_version=C.KUEUE_API_VERSION,
        meta={"labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY}},
        manager_of=ctx.ops.kueue_manager,
        create=ctx.ops.create_kueue_object,
        patch=ctx.ops.patch_kueue_object,
    )


@handles(PruneKueueObject)
def prune_kueue_object(a: PruneKueueObject, ctx: Context) -> Outcome:
    kind, ns, name = a.object_kind, a.namespace, a.name
    return _prune(
        a,
        kind,
        ctx.ops.kueue_manager(kind, ns, name),
        lambda: ctx.ops.delete_kueue_object(kind, ns, name),
    )
