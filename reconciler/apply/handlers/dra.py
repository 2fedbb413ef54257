"""DRA handlers: the DeviceClasses and ResourceClaimTemplates gpupool renders for pools with
`spec.backend: dra` (reconciler/plan/dra.py), applied and pruned through the port's
`dra_manager` / `create_dra_object` / `patch_dra_object` / `delete_dra_object`. Only objects
with gpupool's managed-by label are changed or deleted."""

from __future__ import annotations

from typing import Any

from reconciler import conventions as C
from reconciler.apply.handlers.base import Context, Outcome, handles
from reconciler.apply.handlers.objects import _not_ours, _prune
from reconciler.apply.port import ApiError
from reconciler.plan.actions import ApplyDraObject, PruneDraObject


@handles(ApplyDraObject)
def dra_object(a: ApplyDraObject, ctx: Context) -> Outcome:
    """Create the object, or merge-patch its labels, annotations and `spec` (a JSON merge
    patch replaces lists whole: a selector the policy dropped goes); only while gpupool's."""
    kind, ns, name = a.object_kind, a.namespace, a.name
    if ns and not ctx.ops.namespace_exists(ns):
        return Outcome(a.id, "blocked", f"namespace {ns} does not exist")
    manager = ctx.ops.dra_manager(kind, ns, name)
    if manager is not None and manager != C.MANAGED_BY:
        return _not_ours(kind, a, manager)
    meta: dict[str, Any] = {"labels": dict(a.labels)}
    if a.annotations:
        meta["annotations"] = dict(a.annotations)
    if manager is None:
        meta["name"] = name
        if ns:
            meta["namespace"] = ns
        body = {
            "apiVersion": f"{C.DRA_GROUP}/{C.DRA_VERSION}",
            "kind": kind,
            "metadata": meta,
            "spec": a.spec,
        }
        try:
            ctx.ops.create_dra_object(body)
        except ApiError as e:
            if e.status != 409:
                raise
            return Outcome(a.id, "blocked", f"{kind} {a.target} exists already: {e.message}")
        return Outcome(a.id, "done", "created", changed=True)
    ctx.ops.patch_dra_object(kind, ns, name, {"metadata": meta, "spec": a.spec})
    return Outcome(a.id, "done", "updated", changed=True)


@handles(PruneDraObject)
def prune_dra_object(a: PruneDraObject, ctx: Context) -> Outcome:
    kind, ns, name = a.object_kind, a.namespace, a.name
    return _prune(
        a,
        kind,
        ctx.ops.dra_manager(kind, ns, name),
        lambda: ctx.ops.delete_dra_object(kind, ns, name),
    )
