"""Exact admission by allocation (`spec.dra.admission: allocate`, `PodAdmission.refs`): in a
guarded DRA pool, the planned devices are written as the allocation of the pod's own claim, the
one Kubernetes' resourceclaim controller made from gpupool's template, while the pod is gated.
No pinned claim is made, the pod's status is not rewritten and nothing is deleted after the
gate: two requests of gpupool's before the gate (the claim's metadata, then its status), as
pinning makes two (the pinned claim, the pod's status), but the cards are taken at the second
of them, not at kube-scheduler's allocation after the gate; and none after it (pinning deletes
the template's claim). The status write also reserves the claim for its pod, as
kube-scheduler's PreBind would (`reservedFor`: the pod, the claim's controlling owner), so
kube-scheduler's binding cycle writes no claim at all: it nominates the node (asynchronously:
`SchedulerAsyncAPICalls`) and binds the pod where the allocation's node selector says; its
allocator counts the devices taken for every other claim from the moment the allocation is
written (k8s.io/kubernetes v1.37.2, dynamicresources.go `PreBind`: `bindClaim` only for a claim
not reserved for the pod yet; `Filter` checks an allocated claim's node selector, no device
taint; tests/integration/test_dra_allocate.py reads the scheduler's writes from the audit log).
The reservation of a gated pod is kept: v1.37.2's resourceclaim controller drops a pod's only
once it is gone or done (controller.go `syncClaim`), and gpupool's snapshot does not count it
as the pod's holding while the gate is on (observe/dra_holdings.py `unreleased_claims`: the
cards are fenced until the gate goes or the claim is taken back).

What a write carries, as kube-scheduler would write it (dra_allocate.py `allocate`): the
claim first gets Kubernetes' finalizer `resource.kubernetes.io/delete-protection` (the
scheduler adds it in an update of its own before an allocation it makes; without it the
resourceclaim controller would not deallocate the claim when its pod ends, only delete it, and
a claim deleted while its pod runs would free its devices at once: controller.go `syncClaim`)
and `gpupool.io/planned-devices` (which plan it is: an earlier run's write is found again, an
allocation for another plan while the pod stayed gated is taken back, and the admission policy
checks the allocation against it), in one merge patch conditional on the version read; then
the allocation. A version that changed since the read (the watch cache's copy lagged) reads the
claim again and tries once more.

Only a plain claim of gpupool's templates is allocated so: every request `exactly` on one of
gpupool's DeviceClasses, with no selector, capacity, admin access or allocation mode but the
count, and no constraint or config on the claim. gpupool's plan accounts for pool, partition
and count; it cannot evaluate a selector or a constraint someone else wrote, nor copy a config
the allocator would. Any other claim is pinned instead (dra_admit.py), and so is every claim of
a node whose guard is not in place (the plan leaves `refs` empty there): without the guard a
claim outside gpupool's gate could be allocated the same device at the same instant, which
kube-scheduler's allocator, not consulted here, would otherwise have refused."""

from __future__ import annotations

from reconciler import conventions as C
from reconciler.apply.handlers.base import Context
from reconciler.apply.handlers.dra_allocate import (
    allocate,
    deallocate,
    short_profile,
    stale_allocation,
)
from reconciler.apply.port import ApiError, PodInfo
from reconciler.plan.actions import PodAdmission

KIND = "ResourceClaim"

WROTE = "wrote"
"""`allocate_own`'s answer when it wrote the allocation now."""

PLAIN_KEYS = {"deviceClassName", "count", "allocationMode"}
"""What a request of gpupool's templates may carry to be allocated by gpupool."""


def plain_requests(spec: dict) -> list[tuple[str, str, int]] | None:
    """(request name, class, count) of each request of a plain claim (the module's
    docstring); None for any other."""
    devices = spec.get("devices") or {}
    if set(devices) - {"requests"}:
        return None  # constraints, config
    out = []
    for r in devices.get("requests") or []:
        body = r.get("exactly")
        if set(r) - {"name", "exactly"} or not isinstance(body, dict):
            return None  # firstAvailable
        if set(body) - PLAIN_KEYS or body.get("allocationMode", "ExactCount") != "ExactCount":
            return None
        out.append((str(r.get("name", "")), str(body.get("deviceClassName", "")), body))
    return [(n, c, int(b.get("count") or 1)) for n, c, b in out] or None


def own_results(
    requests: list[tuple[str, str, int]], kinds: dict[str, str], left: list[tuple[str, str, str]]
) -> list[dict] | None:
    """The allocation results giving each request its planned devices, taken from `left`
    ((driver, pool, device) refs; removed there): a whole-card class (`kinds[class]` "") takes
    `gpu-<minor>` devices, a MIG class those of its profile. None when a request names a class
    that is not gpupool's (not in `kinds`) or too few such devices are planned."""
    results = []
    for name, cls, count in requests:
        if cls not in kinds:
            return None
        profile = kinds[cls]
        mine = [r for r in left if _of_kind(r[2], profile)][:count]
        if len(mine) < count:
            return None
        for r in mine:
            left.remove(r)
            results.append({"request": name, "driver": r[0], "pool": r[1], "device": r[2]})
    return results


def _of_kind(device: str, profile: str) -> bool:
    head, mig, rest = device.partition("-mig-")
    if not profile:
        return not mig and head.startswith("gpu-")
    return bool(mig) and rest.rsplit("-", 2)[0] == short_profile(profile)


def owned_by(claim: dict, uid: str) -> bool:
    """Whether the pod of `uid` is the claim's controlling owner (the pod's own claim)."""
    refs = (claim.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("uid") == uid and o.get("controller") for o in refs)


def _take(
    pod: PodInfo, claim: dict, kinds: dict[str, str], left: list[tuple[str, str, str]]
) -> list[dict] | None:
    """The allocation results of the pod's own plain claim, its planned devices taken from
    `left` (`own_results`); None, `left` as it was, when the claim is not one to allocate so."""
    requests = plain_requests(claim.get("spec") or {})
    if requests is None or not pod.uid or not owned_by(claim, pod.uid):
        return None
    taken = list(left)
    results = own_results(requests, kinds, taken)
    if results is not None:
        left[:] = taken
    return results


def _written(claim: dict, planned: str, results: list[dict]) -> bool:
    """Whether the claim carries this plan's allocation already (an earlier run's)."""
    ann = (claim.get("metadata") or {}).get("annotations") or {}
    got = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    key = [(r.get("request"), r.get("device")) for r in got.get("results") or []]
    return ann.get(C.DRA_PLANNED_ANN) == planned and sorted(key) == sorted(
        (r["request"], r["device"]) for r in results
    )


def allocate_own(
    ctx: Context,
    ns: str,
    want: PodAdmission,
    pod: PodInfo,
    claim: dict,
    kinds: dict[str, str],
    left: list[tuple[str, str, str]],
) -> tuple[str, str] | None:
    """Write `want.refs` (those of `left` the claim's requests take) as the allocation of the
    pod's own plain claim `claim` (as read: the watch cache's copy or the server's). None when
    the claim is not one to allocate so (not the pod's own, not plain, not all of its requests
    on gpupool's classes or not enough planned devices for them: it is pinned instead, and
    `left` is as it was); else ("", WROTE) when written now, ("", "") when an earlier run
    wrote it, or (status, why) for the Admit's outcome."""
    results = _take(pod, claim, kinds, left)
    if results is None:
        return None
    name, planned = claim["metadata"]["name"], ",".join(want.refs)
    for fresh in (False, True):
        if fresh:
            claim = ctx.ops.read_dra_object(KIND, ns, name) or {}
            if not claim:
                return "waiting", f"claim {ns}/{name} went before its allocation was written"
        if _written(claim, planned, results):
            return "", ""
        if (claim.get("status") or {}).get("allocation"):
            if not stale_allocation(claim, pod.uid):
                return "failed", f"claim {ns}/{name} is allocated already: it cannot be the plan"
            deallocate(ctx, ns, claim)  # gpupool's, for another plan; no running pod holds it
            continue  # read again: the version changed
        try:
            # marked for this plan already (`mark_own`, before the step's wait): as written
            got = claim if _marked(claim, planned) else _mark(ctx, ns, claim, planned)
            if not allocate(ctx, ns, name, want.node, results, got, (pod.name, pod.uid)):
                return "waiting", f"claim {ns}/{name} went before its allocation was written"
        except ApiError as exc:
            if exc.status == 409:  # changed since the read: read again (once)
                continue
            if exc.status == 404:
                return "waiting", f"claim {ns}/{name} went before its allocation was written"
            raise
        return "", WROTE
    return "waiting", f"claim {ns}/{name} changed while its allocation was written: next cycle"


def mark_own(
    ctx: Context,
    ns: str,
    want: PodAdmission,
    pod: PodInfo,
    claim: dict,
    kinds: dict[str, str],
    left: list[tuple[str, str, str]],
) -> dict | None:
    """`allocate_own`'s first write ahead of its turn: the plan and Kubernetes' finalizer on
    the pod's own plain claim (`_mark`), written while the Admit step waits for the pods it
    frees cards from to go (admission.py `_marks_early`), so that once they are gone only the
    allocation is left to write. Takes the claim's planned devices from `left` as
    `allocate_own` does. -> the claim as written (or as read, marked for this plan already);
    None when it is not a claim to allocate so, is allocated, or the write was refused
    because the claim changed or went (its turn reads it again)."""
    if _take(pod, claim, kinds, left) is None:
        return None
    if (claim.get("status") or {}).get("allocation"):
        return None
    planned = ",".join(want.refs)
    if _marked(claim, planned):
        return claim
    try:
        return _mark(ctx, ns, claim, planned)
    except ApiError as exc:
        if exc.status in (404, 409):
            return None
        raise


def _marked(claim: dict, planned: str) -> bool:
    """Whether the claim carries this plan and Kubernetes' finalizer, unallocated (`_mark`
    wrote them)."""
    md = claim.get("metadata") or {}
    return (
        (md.get("annotations") or {}).get(C.DRA_PLANNED_ANN) == planned
        and C.DRA_DELETE_PROTECTION in (md.get("finalizers") or [])
        and not (claim.get("status") or {}).get("allocation")
    )


def _mark(ctx: Context, ns: str, claim: dict, planned: str) -> dict | None:
    """The plan and Kubernetes' finalizer on the claim, if the claim is still the version
    read (a merge patch with its resourceVersion: 409 otherwise) -> the claim as written."""
    md = claim.get("metadata") or {}
    finalizers = [f for f in md.get("finalizers") or [] if f != C.DRA_DELETE_PROTECTION]
    patch = {
        "metadata": {
            "resourceVersion": md.get("resourceVersion"),
            "annotations": {C.DRA_PLANNED_ANN: planned},
            "finalizers": [*finalizers, C.DRA_DELETE_PROTECTION],
        }
    }
    if not patch["metadata"]["resourceVersion"]:
        del patch["metadata"]["resourceVersion"]
    return ctx.ops.patch_dra_object(KIND, ns, md["name"], patch)
