"""Exact admission on DRA, the executor's half: before a gated pod of a DRA pool is released,
each of its claims on gpupool's DeviceClasses is written so that kube-scheduler's allocator can
pick only the devices the plan chose (`PodAdmission.devices`, their `uuid` attributes). With
`spec.dra.admission: allocate` (`PodAdmission.refs`) a plain claim of the pod's own is
allocated by gpupool instead, and nothing below is done for it (dra_own.py).

Kubernetes v1.37.2 forbids changing a claim's spec and a pod's `spec.resourceClaims` (gated or
not), and its resourceclaim controller makes a pod's claim from its template as soon as the pod
exists. What works on the real API server (tests/integration/test_dra_admit.py): while the pod
is gated and the claim unallocated, create a claim of the pod's own beside it (`pinned_name`;
the same owner, the pod as controller, and annotations) whose requests on gpupool's classes
carry one more CEL selector, `device.attributes['gpu.nvidia.com'].uuid in [...]`, and tolerate
the taints gpupool puts on cards it keeps for a waiting gang (`gpupool.io/reserved-for-gang`)
and on every device of a guarded pool (`gpupool.io/guarded`: only claims gpupool pins get those
devices; never the drain's `gpupool.io/drain`);
name it in the pod's `status.resourceClaimStatuses`; release the gate (admission.py `admit`);
then delete the template's claim (`delete_replaced`), off the path from plan to running pod.
kube-scheduler uses the claim the status names as the pod's own (owner check) and nothing
else; the unallocated old claim only counts against the namespace's ResourceQuota until it is
deleted. The claim is annotated `gpupool.io/planned-devices`, so it is written once per plan.
The order create pinned -> name it in the status -> release the gate -> delete the old one
matters: the resourceclaim controller makes a claim from the template again for a pod whose
named claim is gone, unless it holds another claim of the pod's for that entry (`_replace`,
`delete_replaced`); here the named claim is never gone. The pinned claim names the claims it
replaced (`gpupool.io/replaces-claims`): one whose delete failed is deleted by this step
while the pod is still gated (`_leftovers`), else by the planner's sweep of replaced claims
(plan/objects/dra_objects.py `sweep_replaced_claims`, apply/handlers/dra.py `sweep_claim`).
A claim the pod's status names but that the read finds gone (deleted by someone else) is made
again pinned, and the gate waits a cycle (the resourceclaim controller may answer the same
gap with its own); a 404 on the delete after the gate is checked against the pod's status
(`delete_replaced`).

A claim the pod only references (`resourceClaimName`: possibly shared, not the pod's own) is not
rewritten: such a pod is not admitted (the allocation could not be the plan).

A DynamicMIG partition (`<driver>/<pool>/<device>` in `PodAdmission.devices`: plan/dra_admit.py)
cannot be picked by a selector: NVIDIA's driver publishes every placement of a profile with the
same attributes and capacities, and CEL cannot see a device's name. So, once the pinned claim is
made under its own name and named in the pod's status (its selector asks only for a MIG device
of the profile's class), gpupool writes the pinned claim's `status.allocation` itself, naming
the planned devices, with the node selector and `allocationTimestamp` kube-scheduler would write
(v1.37.2 adds a timestamp to an allocation that lacks one when it reserves the claim, and an
allocation is immutable once set: without it the scheduler's reservation fails). kube-scheduler
then only reserves the claim for the pod and binds it where the allocation says (checked on the
real scheduler: tests/integration/test_dra_dynamic_placement.py), and its allocator counts the
written devices' counters as taken for every other claim. An allocation written for another plan
while the pod stayed gated (a run failed before the gate went) is removed first (no running
pod holds it: no `reservedFor`, or only the gated pod's own, dra_own.py), and the claim is
replaced by one pinned to the new plan, allocated in turn."""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

from reconciler import conventions as C
from reconciler.apply.handlers.base import Context
from reconciler.apply.handlers.dra_allocate import (
    allocate,
    deallocate,
    refs_of,
    results_for,
    stale_allocation,
)
from reconciler.apply.handlers.dra_own import WROTE, allocate_own, mark_own, owned_by
from reconciler.apply.port import ApiError, PodInfo
from reconciler.plan.actions import PodAdmission

KIND = "ResourceClaim"


SELECTOR_PREFIX = (
    f"device.driver == '{C.DRA_DRIVER}' && device.attributes['{C.DRA_DRIVER}'].uuid in ["
)


RESERVED_TOLERATION = {"key": C.DRA_RESERVED_TAINT, "operator": "Exists", "effect": "NoSchedule"}
"""On every request gpupool pins: the cards gpupool keeps for a waiting gang carry a device taint
of that key (plan/stages/drain_taints.py); the pins choose which gang gets which card."""

GUARD_TOLERATION = {"key": C.DRA_GUARD_TAINT, "operator": "Exists", "effect": "NoSchedule"}
"""On every request gpupool pins: every device of a guarded DRA pool carries a device taint of
that key (plan/stages/drain_taints.py), so the allocator gives those devices only to requests
gpupool pinned (to the plan's devices)."""

TOLERATIONS = (RESERVED_TOLERATION, GUARD_TOLERATION)


PARENT_PREFIX = (
    f"device.driver == '{C.DRA_DRIVER}' && device.attributes['{C.DRA_DRIVER}'].type == 'mig' "
    f"&& device.attributes['{C.DRA_DRIVER}'].parentUUID in ["
)
"""A dynamic MIG partition (`<parent uuid>/<profile>` in `PodAdmission.devices`) has no uuid
before it is prepared: the request may take its class's profile on those cards only."""


def is_ref(device: str) -> bool:
    """A planned DynamicMIG partition, named `<driver>/<pool>/<device>` (not a uuid)."""
    return device.count("/") == 2


REF_SELECTOR = (
    f"device.driver == '{C.DRA_DRIVER}' && device.attributes['{C.DRA_DRIVER}'].type == 'mig'"
)
"""The selector on a request whose DynamicMIG partitions gpupool allocates itself (by name, in
the claim's status): the allocation, not the selector, picks the placement."""


def uuid_selector(devices: tuple[str, ...]) -> str:
    """The CEL selector that lets a request pick only these devices (by their `uuid`; dynamic
    MIG partitions named by their parent card and profile by their parent's; those named by
    device, `is_ref`, are allocated by name: `REF_SELECTOR`)."""
    if devices and all(is_ref(d) for d in devices):
        return REF_SELECTOR
    parents = sorted({d.split("/", 1)[0] for d in devices if d.count("/") == 1})
    if parents:
        return PARENT_PREFIX + ", ".join(f"'{d}'" for d in parents) + "]"
    return SELECTOR_PREFIX + ", ".join(f"'{d}'" for d in devices) + "]"


def _not_gpupools(selectors: list) -> list:
    """A request's selectors without one gpupool wrote for an earlier plan."""
    return [
        s
        for s in selectors
        if not _gpupools(str(((s or {}).get("cel") or {}).get("expression", "")))
    ]


def _gpupools(expression: str) -> bool:
    return expression == REF_SELECTOR or expression.startswith((SELECTOR_PREFIX, PARENT_PREFIX))


def _requests(spec: dict) -> list[dict]:
    """The request bodies that name a device class: `exactly`, or each `firstAvailable`."""
    out = []
    for r in (spec.get("devices") or {}).get("requests") or []:
        if isinstance(r.get("exactly"), dict):
            out.append(r["exactly"])
        out += [s for s in r.get("firstAvailable") or [] if isinstance(s, dict)]
    return out


class _Classes:
    """Whether a DeviceClass is gpupool's, and its MIG profile (once per admission): the watch
    cache's copy says so when it holds the class with gpupool's label (`peek_dra_object`);
    otherwise it is read. A cache that lags can only take a class for gpupool's that just
    stopped being so (the request is then pinned to the planned devices all the same), never
    leave one of gpupool's unpinned: "not gpupool's" is always the server's answer."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.seen, self.profiles = ctx, {}, {}

    def ours(self, name: str) -> bool:
        if name not in self.seen:
            cached = self.ctx.ops.peek_dra_object("DeviceClass", "", name) or {}
            labels = (cached.get("metadata") or {}).get("labels") or {}
            self.seen[name] = labels.get(C.MANAGED_BY_LABEL) == C.MANAGED_BY or (
                self.ctx.ops.dra_manager("DeviceClass", "", name) == C.MANAGED_BY
            )
        return self.seen[name]

    def profile_of(self, spec: dict) -> dict[str, str]:
        """gpupool's MIG classes the claim's requests name -> their profile."""
        out = {}
        for r in _requests(spec):
            name = str(r.get("deviceClassName", ""))
            if name not in self.profiles:
                self.profiles[name] = self._profile(name)
            if self.profiles[name]:
                out[name] = self.profiles[name]
        return out

    def kinds(self, spec: dict) -> dict[str, str]:
        """gpupool's classes the claim's requests name -> their MIG profile ("" for whole
        cards)."""
        profiles = self.profile_of(spec)
        names = {str(r.get("deviceClassName", "")) for r in _requests(spec)}
        return {n: profiles.get(n, "") for n in sorted(names) if self.ours(n)}

    def _profile(self, name: str) -> str:
        """The MIG profile of gpupool's class `name` ("" for another class, or gpupool's class
        of whole cards): the watch cache's copy when it holds the class as gpupool's with a
        profile, or as its whole-card class (a class's name carries its partition: gpupool
        never changes one under the same name), else the server's."""
        for read in (self.ctx.ops.peek_dra_object, self.ctx.ops.read_dra_object):
            md = (read("DeviceClass", "", name) or {}).get("metadata") or {}
            labels = md.get("labels") or {}
            mine = labels.get(C.MANAGED_BY_LABEL) == C.MANAGED_BY
            prof = (md.get("annotations") or {}).get(C.DRA_PROFILE_ANN, "")
            if mine and (prof or labels.get(C.DRA_PARTITION_LABEL) == "gpu"):
                return prof
        return ""


def _read_claim(ctx: Context, ns: str, name: str) -> dict | None:
    """The claim the pod's status names: the watch cache's copy or the server's. The cache's
    copy is taken only for a claim gpupool has not pinned (no `gpupool.io/planned-devices`:
    the resourceclaim controller's, to be replaced): what the replacement takes from it (spec,
    owner, annotations) does not change once made, and it cannot be allocated while its pod
    is gated; whether it was still there is the delete's answer, after the gate
    (`delete_replaced`: a 404 reads the pod's status again). A pinned one,
    or one the cache does not hold, is read from the server: that it is there decides
    whether the gate may go."""
    cached = ctx.ops.peek_dra_object(KIND, ns, name)
    if cached is not None and C.DRA_PLANNED_ANN not in (
        (cached.get("metadata") or {}).get("annotations") or {}
    ):
        return cached
    return ctx.ops.read_dra_object(KIND, ns, name)


def _pinned(claim: dict, classes: _Classes, devices: tuple[str, ...]) -> dict | None:
    """The claim's spec with the uuid selector on each request of gpupool's classes; None when
    it has no such request (not a claim gpupool plans)."""
    spec = copy.deepcopy(claim.get("spec") or {})
    mine = [r for r in _requests(spec) if classes.ours(str(r.get("deviceClassName", "")))]
    if not mine:
        return None
    for r in mine:
        r["selectors"] = [
            *_not_gpupools(r.get("selectors") or []),
            {"cel": {"expression": uuid_selector(devices)}},
        ]
        r["tolerations"] = [
            *(t for t in r.get("tolerations") or [] if t not in TOLERATIONS),
            *TOLERATIONS,
        ]
    return spec


def pinned_name(pod: str, uid: str, entry: str, planned: str) -> str:
    """The name of the claim pinned to `planned` for the pod's claim `entry`: the pod and entry
    as the resourceclaim controller names its claims (cut to keep within 63 characters), then a
    digest of the pod's uid, the entry and the plan. Another plan for the pod gets another
    name; the same plan the same one (a run that created it and failed after finds it again)."""
    digest = hashlib.sha256(f"{uid}/{entry}/{planned}".encode()).hexdigest()[:10]
    return f"{f'{pod}-{entry}'[:52].rstrip('-.')}-{digest}"


def _replace(p: _Pins, entry: str, claim: dict, spec: dict, gone: bool) -> str:
    """Create the pinned claim under a name of its own (`pinned_name`: the pod as controlling
    owner, the old claim's annotations and labels) and name it in the pod's status; the claim it
    replaces (unless `gone`: the read found it gone), and what that one named as replaced, are
    queued on `p.replaced`, deleted once the gang's gates went (`delete_replaced`) -> the
    pinned claim's name.

    In this order the resourceclaim controller never finds the pod without a claim of its own:
    it makes a claim from the template (unpinned) for a pod whose named claim is gone, unless
    its cache holds another claim the pod owns for that entry (k8s.io/kubernetes v1.37.2
    pkg/controller/resourceclaim/controller.go, `handleClaim`, `findPodResourceClaim`), and one
    watch delivers the pinned claim's creation before the old one's deletion. Deleting first
    and creating under the same name left it a window: with the old claim gone and the new one
    not made, it made one from the template and named it in the pod's status, and the allocator
    took that unpinned claim once the gate went (bench/README.md, drafix).

    The pinned claim names what it replaces (`gpupool.io/replaces-claims`: the old claim, and
    what the old one named), so a delete that fails after the pod's status names the pinned
    claim is done again later: by this step while the pod is still gated (`_leftovers`), by
    the planner's sweep of replaced claims once it is not (plan/objects/dra_objects.py
    `sweep_replaced_claims`).

    Two writes kube-scheduler would make on the way from the gate to the binding are made here
    instead, in requests this step makes anyway (k8s.io/kubernetes v1.37.2, checked on the real
    scheduler: tests/integration/test_dra_admit.py):
    - The claim is made with the finalizer an allocated claim carries
      (`resource.kubernetes.io/delete-protection`). The DRA plugin's PreBind adds it in an
      update of its own before it writes the allocation unless it is there
      (dynamicresources.go `bindClaim`). An allocation gpupool writes itself (DynamicMIG) is
      protected by it the same way, and the resourceclaim controller removes it once the claim
      is deallocated, or deleted unreserved (controller.go `syncClaim`): a replaced pinned claim
      still goes.
    - The pod's status names the plan's node as `nominatedNodeName` beside the claim
      (KEP-5278: a component that decided where a pod goes may say so). Before a PreBind that
      has work to do (a pod with claims), the scheduler writes the node it chose there unless
      the pod carries it already (schedule_one.go `bindingCycle`, `updatePod`). A Hold removes
      it from a pod gpupool's gate still holds (admission.py `hold`)."""
    ctx, ns, pod, planned = p.ctx, p.ns, p.pod, p.planned
    md = claim["metadata"]
    name = pinned_name(pod.name, pod.uid, entry, planned)
    ann = md.get("annotations") or {}
    earlier = [n for n in _replaced(ann) if n != name]  # a plan again: its name again
    replaces = [*([md["name"]] if not gone and md["name"] != name else []), *earlier]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "ownerReferences": md.get("ownerReferences") or [],
        "finalizers": [C.DRA_DELETE_PROTECTION],
        "annotations": {
            **{k: v for k, v in ann.items() if k != C.DRA_REPLACES_ANN},
            C.DRA_PLANNED_ANN: planned,
            **({C.DRA_REPLACES_ANN: ",".join(replaces)} if replaces else {}),
        },
    }
    if md.get("labels"):
        meta["labels"] = md["labels"]
    body = {"apiVersion": f"{C.DRA_GROUP}/{C.DRA_VERSION}", "kind": KIND}
    try:
        _create(p, {**body, "metadata": meta, "spec": spec})
    except ApiError as exc:
        if exc.status != 409 or not _made_already(ctx, ns, name, pod, planned):
            raise
    ctx.ops.set_pod_claim(ns, pod.name, entry, name, node=p.want.node)
    p.replaced += [Replaced(pod.name, old, name) for old in replaces]
    return name


def _create(p: _Pins, body: dict) -> None:
    """Create the pinned claim. Refused for the namespace's ResourceQuota ("exceeded quota":
    unallocated claims count too) while claims the gang's earlier pods' pinned claims replace
    wait for their delete after the gate: those are deleted now (before the gate, safe as
    after it: each of their pods' status names its pinned claim already), and the create is
    tried once more. A gang then needs the quota headroom of one pod's claim, as when every
    replaced claim was deleted before the next pod's create, not of all of its pods'. (gpupool
    keeps its own ResourceQuota of a gated namespace empty, plan/objects/wanted.py
    `resource_quotas`: only someone else's quota there can refuse the create.)"""
    try:
        p.ctx.ops.create_dra_object(body)
    except ApiError as exc:
        if exc.status != 403 or "exceeded quota" not in exc.message or not p.replaced:
            raise
        failed = delete_replaced(p.ctx, p.ns, p.replaced)
        if failed:
            raise
        p.replaced.clear()
        p.ctx.ops.create_dra_object(body)


def _replaced(annotations: dict) -> list[str]:
    """The claims a pinned claim's `gpupool.io/replaces-claims` names."""
    return [n for n in str(annotations.get(C.DRA_REPLACES_ANN, "")).split(",") if n]


@dataclass(frozen=True)
class Replaced:
    """A claim a pinned claim replaced, to delete once the pod's gate went (`delete_replaced`)."""

    pod: str
    claim: str
    """The replaced claim (the template's, or a leftover of an earlier replacement)."""
    pinned: str
    """The pinned claim the pod's status names in its place."""


def delete_replaced(ctx: Context, ns: str, replaced: list[Replaced]) -> str:
    """Delete the claims the gang's pinned claims replaced, after its gates went (admission.py
    `admit`, step 6): "" when each is deleted (or was gone with the pod's status naming the
    pinned claim), else what is left, for the Admit's outcome.

    Safe after the gate, and off the path from plan to running pod: the pod's status names the
    pinned claim (written before, `_replace`), which exists, so the resourceclaim controller
    leaves the pod alone (`handleClaim` returns once `claimExists` finds the named claim; it
    looks for another claim the pod owns, `findPodResourceClaim`, only when the named one is
    gone), and kube-scheduler's DRA plugin takes each claim of the pod from its status
    (k8s.io/dynamic-resource-allocation resourceclaim `Name`), never a claim it does not name:
    the unallocated old claim is only an object that still counts against the namespace's
    ResourceQuota until it is deleted. Should the controller's pod informer still show the old
    status when the delete's event arrives, it finds that claim gone and looks for a claim
    the pod owns for the entry: its claim informer delivered the pinned claim's creation
    before the old one's deletion, so it finds the pinned claim and names it again (same
    answer). The gate's removal between the status write and the delete only widens the
    margin the old order (delete right after the status write) had.

    A delete that fails (not a 404) leaves the claim to the planner's sweep of replaced claims
    (plan/objects/dra_objects.py `sweep_replaced_claims`: it still exists, is unallocated and
    no pod's status names it), which deletes it in a later cycle; the Admit stays "done" (its
    pods are admitted). A 404 (someone deleted it since our read or the watch cache's copy):
    the pod's status is read again. Naming the pinned claim, nothing was lost (the usual case:
    the old claim went after the status named the pinned one). Naming another claim, the
    resourceclaim controller answered the old claim's deletion before the status named the
    pinned claim (it found no pinned claim in its cache, made one from the template and
    applied its name after ours): the gate cannot be put back, so the outcome says the pod's
    allocation may not be the plan. That takes a third party deleting a gated pod's
    unallocated claim after the copy gpupool read (the server's, or the watch cache's, which
    lags it by milliseconds) and so close to gpupool's status write that the controller's
    answer lands after it; a claim the read already finds gone still holds the gate a cycle
    (`pin_claims`)."""
    failed: list[str] = []
    gone: list[Replaced] = []
    for r in replaced:
        try:
            ctx.ops.delete_dra_object(KIND, ns, r.claim)
        except ApiError as exc:
            if exc.status != 404:
                failed.append(f"{r.claim} ({exc.status} {exc.reason})")
            else:
                gone.append(r)
    notes = []
    if failed:
        notes.append(
            f"replaced claim(s) {', '.join(failed)} not deleted: left to a later cycle's sweep"
        )
    for r in gone:
        try:
            pod = ctx.ops.read_pod(ns, r.pod)
        except ApiError as exc:
            notes.append(f"pod {ns}/{r.pod}: its claims could not be read again ({exc.status})")
            continue
        names = [n for _, n in pod.claims] if pod is not None else []
        if pod is not None and r.pinned not in names:
            notes.append(
                f"pod {ns}/{r.pod}: claim {r.claim} was gone before its delete and the pod's "
                f"status names {', '.join(names) or 'no claim'}, not the pinned {r.pinned}: its "
                f"allocation may not be the plan"
            )
    return "; ".join(notes)


def _leftovers(p: _Pins, claim: dict) -> None:
    """Queue what the pinned claim (written by an earlier run) replaced and may have left (a
    run that stopped after the pod's status named the pinned claim) for `delete_replaced`: a
    claim the pod's status does not name."""
    named = {n for _, n in p.pod.claims}
    name = claim["metadata"]["name"]
    p.replaced += [
        Replaced(p.pod.name, old, name)
        for old in _replaced((claim.get("metadata") or {}).get("annotations") or {})
        if old not in named
    ]


def _made_already(ctx: Context, ns: str, name: str, pod: PodInfo, planned: str) -> bool:
    """Whether the claim `name` that exists already is this pod's, pinned to this plan and
    unallocated: made by an earlier run of this step that stopped before the gate went."""
    have = ctx.ops.read_dra_object(KIND, ns, name) or {}
    md = have.get("metadata") or {}
    return (
        (md.get("annotations") or {}).get(C.DRA_PLANNED_ANN) == planned
        and owned_by(have, pod.uid)
        and not (have.get("status") or {}).get("allocation")
    )


def _from_template(
    ctx: Context, ns: str, pod: PodInfo, entry: str, name: str, template: str
) -> dict | None:
    """The claim as the resourceclaim controller makes it from `template` (its spec, the pod
    as controlling owner, the pod-claim-name annotation), for a claim the pod's status names
    but that is gone: an earlier run deleted it and did not get to create the pinned one."""
    t = ctx.ops.read_dra_object("ResourceClaimTemplate", ns, template)
    if t is None or not pod.uid:
        return None
    owner = {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid}
    return {
        "metadata": {
            "name": name,
            "ownerReferences": [{**owner, "controller": True}],
            "annotations": {C.DRA_POD_CLAIM_ANN: entry},
        },
        "spec": copy.deepcopy((t.get("spec") or {}).get("spec") or {}),
    }


@dataclass
class _Pins:
    """One pod's exact admission: what its claims are pinned to, and what was written."""

    ctx: Context
    ns: str
    want: PodAdmission
    pod: PodInfo
    wrote: list[str]
    """The pinned claims' names (the caller's list)."""
    classes: _Classes
    left: list[tuple[str, str, str]]
    """The planned DynamicMIG partitions no claim took yet (`refs_of`)."""
    replaced: list[Replaced]
    """The claims to delete once the gate went (the caller's list, `delete_replaced`)."""
    own: list[tuple[str, str, str]] = field(default_factory=list)
    """`want.refs` no claim took yet (`refs_of`): allocated on the pod's own claims
    (dra_own.py)."""
    remade: list[str] = field(default_factory=list)
    """`old -> new` for each claim that was gone and is made again pinned."""

    @property
    def planned(self) -> str:
        return ",".join(self.want.devices)


def mark_claims(
    ctx: Context, ns: str, want: PodAdmission, pod: PodInfo, marked: dict[str, dict]
) -> None:
    """Before an Admit step by allocation (`want.refs`) waits for the pods it frees cards from
    to go (admission.py `_marks_early`): each of the pod's own plain claims gets its first
    write, the plan and Kubernetes' finalizer (dra_own.py `mark_own`), now; the claims as
    written, by name, into `marked`, for `pin_claims` to allocate once the wait is over.
    Nothing else is written, and a claim not marked here is read and written in its turn as
    without."""
    if not want.refs:
        return
    classes, left = _Classes(ctx), refs_of(want.refs)
    for _, name in pod.claims:
        claim = _read_claim(ctx, ns, name) if name else None
        if claim is None:
            return  # not made yet, or gone: its turn says so
        got = mark_own(ctx, ns, want, pod, claim, classes.kinds(claim.get("spec") or {}), left)
        if got is not None:
            marked[name] = got


def pin_claims(
    ctx: Context,
    ns: str,
    want: PodAdmission,
    pod: PodInfo,
    wrote: list[str],
    replaced: list[Replaced],
    marked: dict[str, dict] | None = None,
) -> tuple[str, str]:
    """Write the pod's claims for its planned devices (the pinned claims' names appended to
    `wrote`, the claims they replace to `replaced`, for `delete_replaced` once the gate went):
    ("", "") when done (or nothing to do), else (status, why) for the Admit's outcome:
    "waiting" while a claim is not made yet (or the read found it gone and it is made again:
    the gate goes in a later cycle, as the resourceclaim controller may answer the same gap
    with a claim of its own), "failed" when a claim cannot be made exact (allocated already,
    or not the pod's own). Planned DynamicMIG partitions are then written as the pinned claims'
    allocation (`dra_allocate`). With `want.refs` (`dra.admission: allocate`), a plain claim
    of the pod's own gets them as its allocation instead, and no pinned claim (dra_own.py);
    one of `marked` (`mark_claims`: the claims as this step wrote them before its wait) is
    taken as written there, not read again."""
    if not want.devices:
        return "", ""
    p = _Pins(ctx, ns, want, pod, wrote, _Classes(ctx), refs_of(want.devices), replaced)
    p.own = refs_of(want.refs)
    for entry, name in pod.claims:
        if not name:
            return "waiting", f"pod {ns}/{want.name}: claim {entry} is not made yet"
        claim = (marked or {}).get(name) or _read_claim(ctx, ns, name)
        gone = claim is None
        if claim is not None and p.own:
            kinds = p.classes.kinds(claim.get("spec") or {})
            before = list(p.own)
            got = allocate_own(ctx, ns, want, pod, claim, kinds, p.own)
            # a partition allocated here is no other claim's to take (a pinned one's write)
            p.left = [r for r in p.left if r not in before or r in p.own]
            if got is not None:
                if got[0]:
                    return got
                if got[1] == WROTE:
                    wrote.append(name)
                continue
        if gone and entry in pod.claim_templates:
            claim = _from_template(ctx, ns, pod, entry, name, pod.claim_templates[entry])
        if claim is None:
            return "waiting", f"pod {ns}/{want.name}: claim {name} is not there (yet)"
        status, why = _pin_claim(p, entry, claim, gone)
        if status:
            return status, why
    if p.remade:
        # the resourceclaim controller may be making one from the template for the same gap
        # and name it in the pod's status: the next cycle admits once the status names a
        # pinned claim
        return "waiting", (
            f"pod {ns}/{want.name}: claim(s) {', '.join(p.remade)} made again pinned; the gate "
            f"goes once the pod's status names them"
        )
    return "", ""


def _pin_claim(p: _Pins, entry: str, claim: dict, gone: bool) -> tuple[str, str]:
    """`pin_claims` for one claim (the pod's status names it under `entry`; `gone`: it is not
    there, `claim` is made from the template). The pinned claim is made under its own name
    (`_replace`), then its allocation written; a claim pinned to this plan already (an earlier
    run's, which stopped before its allocation or before the gate went) only gets the
    allocation, and what it replaced is queued for deletion if left (`_leftovers`)."""
    ns, md, name = p.ns, claim.get("metadata") or {}, claim["metadata"]["name"]
    allocated = bool((claim.get("status") or {}).get("allocation"))
    spec0 = claim.get("spec") or {}
    results = results_for(spec0, p.classes.profile_of(spec0), p.left) if p.left else []
    if results is None:
        return "failed", f"claim {ns}/{name}: the planned partitions are not what it asks"
    if (md.get("annotations") or {}).get(C.DRA_PLANNED_ANN) == p.planned:
        _leftovers(p, claim)
        if results and not allocated:  # made by an earlier run, which stopped before this
            if not allocate(p.ctx, ns, name, p.want.node, results):
                return "waiting", _gone_before_allocation(ns, name)
            p.wrote.append(name)
        return "", ""  # written by an earlier run of this step (another plan's: written again)
    spec = _pinned(claim, p.classes, p.want.devices)
    if spec is None:
        return "", ""
    if allocated and not stale_allocation(claim, p.pod.uid):
        return "failed", f"claim {ns}/{name} is allocated already: it cannot be pinned"
    if not owned_by(claim, p.pod.uid):
        return "failed", (
            f"claim {ns}/{name} is not pod {p.want.name}'s own (made from a template): "
            f"gpupool rewrites only those, so it cannot make the allocation the plan"
        )
    if allocated:  # gpupool's, for another plan, and nobody holds it: its devices back
        deallocate(p.ctx, ns, claim)
    made = _replace(p, entry, claim, spec, gone)
    p.wrote.append(made)
    if gone:  # the claim the pod's status names was gone when read
        p.remade.append(f"{name} -> {made}")
    if results and not allocate(p.ctx, ns, made, p.want.node, results):
        return "waiting", _gone_before_allocation(ns, made)
    return "", ""


def _gone_before_allocation(ns: str, name: str) -> str:
    return f"claim {ns}/{name} went before its allocation was written: the gate stays"
