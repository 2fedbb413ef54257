"""Exact admission on DRA, the executor's half: before a gated pod of a DRA pool is released,
each of its claims on gpupool's DeviceClasses is written so that kube-scheduler's allocator can
pick only the devices the plan chose (`PodAdmission.devices`, their `uuid` attributes).

Kubernetes v1.37.2 forbids changing a claim's spec and a pod's `spec.resourceClaims` (gated or
not), and its resourceclaim controller makes a pod's claim from its template as soon as the pod
exists. What works on the real API server (tests/integration/test_dra_admit.py): while the pod
is gated and the claim unallocated, delete the claim made from the template and create one
under the same name, with the same owner (the pod, as controller) and annotations, whose
requests on gpupool's classes carry one more CEL selector,
`device.attributes['gpu.nvidia.com'].uuid in [...]`, and tolerate the taint gpupool puts on
cards it keeps for a waiting gang (`gpupool.io/reserved-for-gang`). The pod's
`status.resourceClaimStatuses` already names the claim, so the controller makes no other, and
kube-scheduler uses it as the pod's own (owner check). The claim is annotated
`gpupool.io/planned-devices`, so it is written once. A claim the pod's status names but that
is gone (a run deleted it and failed before the create) is made again from the pod's template.

A claim the pod only references (`resourceClaimName`: possibly shared, not the pod's own) is not
rewritten: such a pod is not admitted (the allocation could not be the plan)."""

from __future__ import annotations

import copy
from typing import Any

from reconciler import conventions as C
from reconciler.apply.handlers.base import Context
from reconciler.apply.port import ApiError, PodInfo
from reconciler.plan.actions import PodAdmission

KIND = "ResourceClaim"


SELECTOR_PREFIX = (
    f"device.driver == '{C.DRA_DRIVER}' && device.attributes['{C.DRA_DRIVER}'].uuid in ["
)


RESERVED_TOLERATION = {"key": C.DRA_RESERVED_TAINT, "operator": "Exists", "effect": "NoSchedule"}
"""On every request gpupool pins: the cards gpupool keeps for a waiting gang carry a device taint
of that key (plan/stages/drain_taints.py); the pins choose which gang gets which card."""


PARENT_PREFIX = (
    f"device.driver == '{C.DRA_DRIVER}' && device.attributes['{C.DRA_DRIVER}'].type == 'mig' "
    f"&& device.attributes['{C.DRA_DRIVER}'].parentUUID in ["
)
"""A dynamic MIG partition (`<parent uuid>/<profile>` in `PodAdmission.devices`) has no uuid
before it is prepared: the request may take its class's profile on those cards only."""


def uuid_selector(devices: tuple[str, ...]) -> str:
    """The CEL selector that lets a request pick only these devices (by their `uuid`; dynamic
    MIG partitions by their parent card's)."""
    parents = sorted({d.split("/", 1)[0] for d in devices if "/" in d})
    if parents:
        return PARENT_PREFIX + ", ".join(f"'{d}'" for d in parents) + "]"
    return SELECTOR_PREFIX + ", ".join(f"'{d}'" for d in devices) + "]"


def _not_gpupools(selectors: list) -> list:
    """A request's selectors without one gpupool wrote for an earlier plan."""
    return [
        s
        for s in selectors
        if not str(((s or {}).get("cel") or {}).get("expression", "")).startswith(
            (SELECTOR_PREFIX, PARENT_PREFIX)
        )
    ]


def _requests(spec: dict) -> list[dict]:
    """The request bodies that name a device class: `exactly`, or each `firstAvailable`."""
    out = []
    for r in (spec.get("devices") or {}).get("requests") or []:
        if isinstance(r.get("exactly"), dict):
            out.append(r["exactly"])
        out += [s for s in r.get("firstAvailable") or [] if isinstance(s, dict)]
    return out


class _Classes:
    """Whether a DeviceClass is gpupool's (read once per admission)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.seen = ctx, {}

    def ours(self, name: str) -> bool:
        if name not in self.seen:
            self.seen[name] = self.ctx.ops.dra_manager("DeviceClass", "", name) == C.MANAGED_BY
        return self.seen[name]


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
            *(t for t in r.get("tolerations") or [] if t != RESERVED_TOLERATION),
            RESERVED_TOLERATION,
        ]
    return spec


def _replace(
    ctx: Context, ns: str, claim: dict, spec: dict, planned: str, *, gone: bool = False
) -> None:
    """Delete the template's claim (unless `gone`) and create the pinned one under its name
    and owner."""
    md = claim["metadata"]
    meta: dict[str, Any] = {
        "name": md["name"],
        "namespace": ns,
        "ownerReferences": md.get("ownerReferences") or [],
        "annotations": {**(md.get("annotations") or {}), C.DRA_PLANNED_ANN: planned},
    }
    if md.get("labels"):
        meta["labels"] = md["labels"]
    try:
        if not gone:
            ctx.ops.delete_dra_object(KIND, ns, md["name"])
    except ApiError as exc:
        if exc.status != 404:
            raise
    body = {"apiVersion": f"{C.DRA_GROUP}/{C.DRA_VERSION}", "kind": KIND}
    ctx.ops.create_dra_object({**body, "metadata": meta, "spec": spec})


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


def pin_claims(
    ctx: Context, ns: str, want: PodAdmission, pod: PodInfo, wrote: list[str]
) -> tuple[str, str]:
    """Write the pod's claims for its planned devices (their names appended to `wrote`):
    ("", "") when done (or nothing to do), else (status, why) for the Admit's outcome:
    "waiting" while a claim is not made yet, "failed" when a claim cannot be made exact
    (allocated already, or not the pod's own)."""
    if not want.devices:
        return "", ""
    planned, classes = ",".join(want.devices), _Classes(ctx)
    for entry, name in pod.claims:
        if not name:
            return "waiting", f"pod {ns}/{want.name}: claim {entry} is not made yet"
        claim = ctx.ops.read_dra_object(KIND, ns, name)
        gone = claim is None
        if gone and entry in pod.claim_templates:
            claim = _from_template(ctx, ns, pod, entry, name, pod.claim_templates[entry])
        if claim is None:
            return "waiting", f"pod {ns}/{want.name}: claim {name} is not there (yet)"
        md = claim.get("metadata") or {}
        if (md.get("annotations") or {}).get(C.DRA_PLANNED_ANN) == planned:
            continue  # written by an earlier run of this step (another plan's: written again)
        spec = _pinned(claim, classes, want.devices)
        if spec is None:
            continue
        if ((claim.get("status") or {}).get("allocation")) is not None:
            return "failed", f"claim {ns}/{name} is allocated already: it cannot be pinned"
        owned = any(
            o.get("uid") == pod.uid and o.get("controller") for o in md.get("ownerReferences") or []
        )
        if not owned:
            return "failed", (
                f"claim {ns}/{name} is not pod {want.name}'s own (made from a template): "
                f"gpupool rewrites only those, so it cannot make the allocation the plan"
            )
        _replace(ctx, ns, claim, spec, planned, gone=gone)
        wrote.append(name)
    return "", ""
