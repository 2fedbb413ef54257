"""DRA handlers: the DeviceClasses and ResourceClaimTemplates gpupool renders for pools with
`spec.backend: dra` (reconciler/plan/dra.py), and the DeviceTaintRules of drains
(reconciler/plan/stages/drain_taints.py), applied and pruned through the port's
`dra_manager` / `create_dra_object` / `patch_dra_object` / `delete_dra_object`. Only objects
with gpupool's managed-by label are changed or deleted."""

from __future__ import annotations

from typing import Any

from reconciler import conventions as C
from reconciler.apply.handlers.base import Context, Outcome, handles
from reconciler.apply.handlers.objects import _apply_object, _prune
from reconciler.plan.actions import ApplyDraObject, PruneDraObject, TaintDevice


@handles(ApplyDraObject, TaintDevice)
def dra_object(a: ApplyDraObject | TaintDevice, ctx: Context) -> Outcome:
    """Create the object, or merge-patch its labels, annotations and `spec`; only while
    gpupool's (`objects._apply_object`)."""
    meta: dict[str, Any] = {"labels": dict(a.labels)}
    if getattr(a, "annotations", None):
        meta["annotations"] = dict(a.annotations)
    return _apply_object(
        a,
        ctx,
        api_version=f"{C.DRA_GROUP}/{C.DRA_VERSION}",
        meta=meta,
        manager_of=ctx.ops.dra_manager,
        create=ctx.ops.create_dra_object,
        patch=ctx.ops.patch_dra_object,
    )


@handles(PruneDraObject)
def prune_dra_object(a: PruneDraObject, ctx: Context) -> Outcome:
    kind, ns, name = a.object_kind, a.namespace, a.name
    return _prune(
        a,
        kind,
        ctx.ops.dra_manager(kind, ns, name),
        lambda: ctx.ops.delete_dra_object(kind, ns, name),
    )
