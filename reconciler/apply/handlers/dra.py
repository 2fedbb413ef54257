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
from reconciler.apply.port import ApiError
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
    if kind == "ResourceClaim":
        return sweep_claim(a, ctx)
    return _prune(
        a,
        kind,
        ctx.ops.dra_manager(kind, ns, name),
        lambda: ctx.ops.delete_dra_object(kind, ns, name),
    )


def sweep_claim(a: PruneDraObject, ctx: Context) -> Outcome:
    """Delete a claim a pinned claim replaced (plan/objects/dra_objects.py
    `sweep_replaced_claims`) only while the plan's reasons still hold, read from the server:
    unallocated and reserved for nobody (kube-scheduler allocates only a claim a pod's status
    names), and its owning pod (controller owner reference) does not name it in
    `status.resourceClaimStatuses` (the resourceclaim controller names a claim the pod owns
    again only when the named one is gone: `findPodResourceClaim`). 404: done."""
    ns, name = a.namespace, a.name
    claim = ctx.ops.read_dra_object("ResourceClaim", ns, name)
    if claim is None:
        return Outcome(a.id, "done", "already gone")
    status = claim.get("status") or {}
    if status.get("allocation") or status.get("reservedFor"):
        return Outcome(a.id, "skipped", f"claim {ns}/{name} is allocated or reserved now: kept")
    for o in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if o.get("kind") != "Pod" or not o.get("controller"):
            continue
        pod = ctx.ops.read_pod(ns, str(o.get("name", "")))
        if pod is not None and pod.uid == o.get("uid") and any(n == name for _, n in pod.claims):
            return Outcome(
                a.id, "skipped", f"pod {ns}/{pod.name}'s status names it again: claim kept"
            )
    try:
        ctx.ops.delete_dra_object("ResourceClaim", ns, name)
    except ApiError as e:
        if e.status != 404:
            raise
        return Outcome(a.id, "done", "already gone")
    return Outcome(a.id, "done", "deleted", changed=True)
