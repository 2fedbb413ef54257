"""Rows for the DRA handlers (reconciler/apply/handlers/dra.py): DeviceClasses and
ResourceClaimTemplates gpupool renders for DRA pools, applied and pruned; and exact admission
(handlers/dra_admit.py): a gated pod's claim replaced by one pinned to the planned devices
before the gate goes (tests/apply/rows.py `TABLES["dra"]`)."""

from __future__ import annotations

from reconciler import conventions as C
from reconciler.apply.handlers.dra_admit import (
    REF_SELECTOR,
    TOLERATIONS,
    pinned_name,
    uuid_selector,
)
from reconciler.apply.port import ApiError
from reconciler.plan.actions import (
    Admit,
    ApplyDraObject,
    PodAdmission,
    PruneDraObject,
    TaintDevice,
)
from tests.apply.table import NS, Dra, Pod, Probe, Row

CLASS = "gpupool-d100-gpu"
SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
CLASS_SPEC = {"selectors": [{"cel": {"expression": SELECTOR}}]}
OLD_CLASS_SPEC = {"selectors": [{"cel": {"expression": "true"}}, {"cel": {"expression": "false"}}]}
LABELS = {C.MANAGED_BY_LABEL: C.MANAGED_BY, C.POOL_LABEL: "d100", C.DRA_PARTITION_LABEL: "gpu"}
TEMPLATE_SPEC = {
    "spec": {
        "devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 2}}]
        }
    }
}
APPLY_CLASS = ApplyDraObject(
    id=f"dra:DeviceClass:{CLASS}",
    target=CLASS,
    reason="Pool d100 (DRA)",
    object_kind="DeviceClass",
    name=CLASS,
    verb="create",
    labels=LABELS,
    spec=CLASS_SPEC,
)
APPLY_TEMPLATE = ApplyDraObject(
    id=f"dra:ResourceClaimTemplate:{NS}/{CLASS}-2",
    target=f"{NS}/{CLASS}-2",
    reason="Pool d100 (DRA)",
    object_kind="ResourceClaimTemplate",
    namespace=NS,
    name=f"{CLASS}-2",
    verb="create",
    labels={C.MANAGED_BY_LABEL: C.MANAGED_BY, C.POOL_LABEL: "d100"},
    spec=TEMPLATE_SPEC,
)
PRUNE_CLASS = PruneDraObject(
    id=f"prune-dra:DeviceClass:{CLASS}",
    target=CLASS,
    reason="no DRA pool renders it",
    object_kind="DeviceClass",
    name=CLASS,
)


def dra_is(kind: str, name: str, spec: dict | None, ns: str = "", labelled: bool = True):
    def check(p: Probe) -> None:
        obj = p.cluster.dra.get((kind, ns, name))  # type: ignore[attr-defined]
        if spec is None:
            assert obj is None
            return
        assert obj is not None and obj["spec"] == spec
        labels = obj["metadata"].get("labels") or {}
        assert (labels.get(C.MANAGED_BY_LABEL) == C.MANAGED_BY) == labelled
        if labelled:
            assert labels.get(C.POOL_LABEL) == "d100"

    return check


DRA_ROWS = [
    Row(
        "dra/create-class",
        APPLY_CLASS,
        (),
        "done",
        "created",
        ("create_dra_object",),
        check=dra_is("DeviceClass", CLASS, CLASS_SPEC),
    ),
    Row(
        # a merge patch replaces the selector list whole: the policy's one selector is left
        "dra/update-ours",
        APPLY_CLASS.model_copy(update={"verb": "update"}),
        (Dra("DeviceClass", CLASS, spec=OLD_CLASS_SPEC),),
        "done",
        "updated",
        ("patch_dra_object",),
        check=dra_is("DeviceClass", CLASS, CLASS_SPEC),
    ),
    Row(
        "dra/foreign",
        APPLY_CLASS,
        (Dra("DeviceClass", CLASS, spec=OLD_CLASS_SPEC, managed_by=""),),
        "skipped",
        "is not gpupool's (no app.kubernetes.io/managed-by label)",
        (),
        check=dra_is("DeviceClass", CLASS, OLD_CLASS_SPEC, labelled=False),
    ),
    Row(
        "dra/create-template",
        APPLY_TEMPLATE,
        (),
        "done",
        "created",
        ("create_dra_object",),
        check=dra_is("ResourceClaimTemplate", f"{CLASS}-2", TEMPLATE_SPEC, ns=NS),
    ),
    Row(
        "dra/template-namespace-missing",
        APPLY_TEMPLATE.model_copy(update={"namespace": "nowhere", "target": f"nowhere/{CLASS}-2"}),
        (),
        "blocked",
        "namespace nowhere does not exist",
    ),
    Row(
        "dra/create-conflict",
        APPLY_CLASS,
        (),
        "blocked",
        "exists already",
        fail={"create_dra_object": ApiError(409, "Conflict", "already exists")},
    ),
    Row(
        "prune-dra/ours",
        PRUNE_CLASS,
        (Dra("DeviceClass", CLASS, spec=CLASS_SPEC),),
        "done",
        "deleted",
        ("delete_dra_object",),
        check=dra_is("DeviceClass", CLASS, None),
    ),
    Row("prune-dra/gone", PRUNE_CLASS, (), "done", "already gone", ()),
    Row(
        "prune-dra/foreign",
        PRUNE_CLASS,
        (Dra("DeviceClass", CLASS, spec=CLASS_SPEC, managed_by="helm"),),
        "skipped",
        "is not gpupool's (managed by helm)",
        (),
    ),
]

# ------------------------------------------------------------------ drains by device taint
RULE = "gpupool-drain-node-a-gpu-1"
RULE_SPEC = {
    "deviceSelector": {"driver": C.DRA_DRIVER, "pool": "node-a", "device": "gpu-1"},
    "taint": {"key": C.DRA_DRAIN_TAINT, "value": "repartition", "effect": "NoSchedule"},
}
TAINT = TaintDevice(
    id="taint-device:node-a/gpu-1",
    target="node-a/gpu-1",
    reason="drain gpu-1 for its repartition",
    pool="d100",
    name=RULE,
    verb="create",
    labels={C.MANAGED_BY_LABEL: C.MANAGED_BY, C.POOL_LABEL: "d100"},
    spec=RULE_SPEC,
)
PRUNE_RULE = PruneDraObject(
    id=f"prune-dra:DeviceTaintRule:{RULE}",
    target=RULE,
    reason="the repartition is over",
    object_kind="DeviceTaintRule",
    name=RULE,
)
DRA_ROWS += [
    Row(
        "taint-device/create",
        TAINT,
        (),
        "done",
        "created",
        ("create_dra_object",),
        check=dra_is("DeviceTaintRule", RULE, RULE_SPEC),
    ),
    Row(
        "taint-device/foreign",
        TAINT,
        (Dra("DeviceTaintRule", RULE, spec=RULE_SPEC, managed_by="someone"),),
        "skipped",
        "is not gpupool's (managed by someone)",
        (),
    ),
    Row(
        "prune-dra/taint-rule",
        PRUNE_RULE,
        (Dra("DeviceTaintRule", RULE, spec=RULE_SPEC),),
        "done",
        "deleted",
        ("delete_dra_object",),
        check=dra_is("DeviceTaintRule", RULE, None),
    ),
]


# ------------------------------------------------------------------ exact admission
UUIDS = ("GPU-a", "GPU-b")
CLAIM = "p-0-gpus-x1"
DRA_ADMIT = Admit(
    id=f"admit:{NS}/p-0",
    target=f"{NS}/p-0",
    reason="p-0 on two planned cards",
    namespace=NS,
    pods=(PodAdmission(name="p-0", node="node-a", gpus=(0, 1), devices=UUIDS),),
)
OWNER = {"apiVersion": "v1", "kind": "Pod", "name": "p-0", "uid": "uid-p-0", "controller": True}
MADE = {
    "annotations": {C.DRA_POD_CLAIM_ANN: "gpus"},
    "ownerReferences": [OWNER],
}
CLAIM_SPEC = TEMPLATE_SPEC["spec"]


def claim(meta=MADE, status=None, managed_by="") -> Dra:
    return Dra(
        "ResourceClaim", CLAIM, NS, spec=CLAIM_SPEC, managed_by=managed_by, meta=meta, status=status
    )


def gated_claimant(made: str = CLAIM, name: str = "p-0") -> Pod:
    return Pod(
        name,
        node=None,
        gates=(C.ADMISSION_GATE,),
        claims=(("gpus", made),),
        templates={"gpus": f"{CLASS}-2"},
    )


GANG_ADMIT = Admit(
    id=f"admit:{NS}/p-0",
    target=f"{NS}/p-0",
    reason="a gang of two on four planned cards",
    namespace=NS,
    pods=(
        PodAdmission(name="p-0", node="node-a", gpus=(0, 1), devices=UUIDS),
        PodAdmission(name="p-1", node="node-a", gpus=(2, 3), devices=("GPU-c", "GPU-d")),
    ),
)
QUOTA_REFUSED = ApiError(
    403,
    "Forbidden",
    'resourceclaims "p-1-gpus" is forbidden: exceeded quota: gpupool-team-a, requested: '
    "gpupool-d100-gpu.deviceclass.resource.k8s.io/devices=2, used: 4, limited: 4",
)


def gang_claim() -> Dra:
    owner = {**OWNER, "name": "p-1", "uid": "uid-p-1"}
    meta = {**MADE, "ownerReferences": [owner]}
    return Dra("ResourceClaim", "p-1-gpus-x1", NS, spec=CLAIM_SPEC, managed_by="", meta=meta)


def gang_pinned(p: Probe) -> None:
    """Both pods admitted on their pinned claims; both template claims gone."""
    for pod_name, devices, old in (
        ("p-0", "GPU-a,GPU-b", CLAIM),
        ("p-1", "GPU-c,GPU-d", "p-1-gpus-x1"),
    ):
        pod = p.pod(pod_name)
        made = pinned_name(pod_name, f"uid-{pod_name}", "gpus", devices)
        assert pod is not None and pod.claims == (("gpus", made),) and pod.gates == ()
        assert p.cluster.dra.get(("ResourceClaim", NS, old)) is None  # type: ignore[attr-defined]
        assert p.cluster.dra.get(("ResourceClaim", NS, made)) is not None  # type: ignore[attr-defined]


ADMITS_NEXT_RUN = frozenset(
    {"dra-admit/claim-gone-made-from-the-template", "dra-admit/dynamic-claim-gone-made-again"}
)
"""Rows whose outcome is "waiting" after a write, and whose next run admits (a write): the
second-run test leaves them to `test_dra_gone_claim_admits_on_the_next_run`."""

PINNED = pinned_name("p-0", "uid-p-0", "gpus", "GPU-a,GPU-b")
"""The pinned claim's own name (the template's claim is deleted once the pod names it)."""


def pinned_claim(p: Probe) -> None:
    """The pod's status names the pinned claim, made beside the template's, which is gone."""
    pod = p.pod("p-0")
    assert pod is not None and pod.claims == (("gpus", PINNED),)
    assert p.cluster.dra.get(("ResourceClaim", NS, CLAIM)) is None  # type: ignore[attr-defined]
    obj = p.cluster.dra.get(("ResourceClaim", NS, PINNED))  # type: ignore[attr-defined]
    assert obj is not None
    exactly = obj["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["selectors"] == [{"cel": {"expression": uuid_selector(UUIDS)}}]
    assert exactly["tolerations"] == list(TOLERATIONS)
    assert exactly["deviceClassName"] == CLASS and exactly["count"] == 2
    md = obj["metadata"]
    assert md["ownerReferences"] == [OWNER]
    ann = dict(md["annotations"])
    assert ann.pop(C.DRA_REPLACES_ANN, CLAIM) == CLAIM  # none when the template's claim was gone
    assert ann == {C.DRA_POD_CLAIM_ANN: "gpus", C.DRA_PLANNED_ANN: "GPU-a,GPU-b"}


def pinned(p: Probe) -> None:
    pinned_claim(p)
    pod = p.pod("p-0")
    assert pod is not None and pod.gates == ()


def pinned_gated(p: Probe) -> None:
    pinned_claim(p)
    not_admitted(p)


def leftover_admitted(p: Probe) -> None:
    """The pod's status names the pinned claim, which names the template's claim it replaced;
    that one is still there (its delete failed, or the fake's 404 left it); the gate is gone
    (the pod runs on the pinned claim)."""
    pod = p.pod("p-0")
    assert pod is not None and pod.claims == (("gpus", PINNED),) and pod.gates == ()
    assert p.cluster.dra.get(("ResourceClaim", NS, CLAIM)) is not None  # type: ignore[attr-defined]
    obj = p.cluster.dra.get(("ResourceClaim", NS, PINNED))  # type: ignore[attr-defined]
    assert obj["metadata"]["annotations"][C.DRA_REPLACES_ANN] == CLAIM


def leftover_gone(p: Probe) -> None:
    """The claims an earlier pinned claim replaced are gone; the one pinned now names them."""
    pod = p.pod("p-0")
    assert pod is not None and pod.claims == (("gpus", PINNED),) and pod.gates == ()
    assert p.cluster.dra.get(("ResourceClaim", NS, "left-0")) is None  # type: ignore[attr-defined]
    assert p.cluster.dra.get(("ResourceClaim", NS, CLAIM)) is None  # type: ignore[attr-defined]
    obj = p.cluster.dra.get(("ResourceClaim", NS, PINNED))  # type: ignore[attr-defined]
    assert obj["metadata"]["annotations"][C.DRA_REPLACES_ANN] == f"{CLAIM},left-0"


def replaced_not_yet(p: Probe) -> None:
    """The template's claim is still there and still the pod's (never a pod without one)."""
    pod = p.pod("p-0")
    assert pod is not None and pod.claims == (("gpus", CLAIM),)
    assert p.cluster.dra.get(("ResourceClaim", NS, CLAIM)) is not None  # type: ignore[attr-defined]
    not_admitted(p)


def not_admitted(p: Probe) -> None:
    pod = p.pod("p-0")
    assert pod is not None and pod.gates == (C.ADMISSION_GATE,)


OUR_CLASS = Dra("DeviceClass", CLASS, spec=CLASS_SPEC)
DRA_ROWS += [
    Row(
        "dra-admit/claim-replaced-then-admitted",
        DRA_ADMIT,
        (OUR_CLASS, claim(), gated_claimant()),
        "done",
        "admitted 1 pod(s): p-0 -> node-a",
        ("create_dra_object", "set_pod_claim", "admit_pod", "delete_dra_object"),
        check=pinned,
    ),
    Row(
        # an earlier run wrote the claim and stopped before the gate went
        "dra-admit/claim-pinned-already",
        DRA_ADMIT,
        (
            OUR_CLASS,
            claim({**MADE, "annotations": {C.DRA_PLANNED_ANN: "GPU-a,GPU-b"}}),
            gated_claimant(),
        ),
        "done",
        "admitted 1 pod(s)",
        ("admit_pod",),
    ),
    Row(
        # the claim the pod's status names is gone (deleted by someone else): gpupool makes it
        # again pinned and names it, but the gate waits a cycle: the resourceclaim controller
        # may be making one from the template for the same gap and naming it instead
        "dra-admit/claim-gone-made-from-the-template",
        DRA_ADMIT,
        (
            OUR_CLASS,
            Dra("ResourceClaimTemplate", f"{CLASS}-2", NS, spec=TEMPLATE_SPEC),
            gated_claimant(),
        ),
        "waiting",
        f"claim(s) {CLAIM} -> {PINNED} made again pinned",
        ("create_dra_object", "set_pod_claim"),
        check=pinned_gated,
    ),
    Row(
        "dra-admit/claim-gone-no-template",
        DRA_ADMIT,
        (OUR_CLASS, gated_claimant()),
        "waiting",
        f"claim {CLAIM} is not there (yet)",
        (),
        check=not_admitted,
    ),
    Row(
        # the pinned claim cannot be made: the template's claim is left as it was (the pod is
        # never without a claim of its own), nothing admitted
        "dra-admit/create-fails",
        DRA_ADMIT,
        (OUR_CLASS, claim(), gated_claimant()),
        "error",
        "403",
        (),
        fail={"create_dra_object": ApiError(403, "Forbidden", "denied")},
        check=replaced_not_yet,
    ),
    Row(
        # made, but the pod's status could not name it: the template's claim is not deleted
        "dra-admit/status-fails-after-create",
        DRA_ADMIT,
        (OUR_CLASS, claim(), gated_claimant()),
        "error",
        "500",
        ("create_dra_object",),
        fail={"set_pod_claim": ApiError(500, "Internal Server Error", "etcd")},
        check=replaced_not_yet,
    ),
    Row(
        # made, named in the pod's status, the gate gone, but the template's claim could not be
        # deleted: the pod stays admitted (on the pinned claim), the claim is left to the
        # planner's sweep of replaced claims (the pinned claim names it in
        # `gpupool.io/replaces-claims`; test_handlers.py `test_dra_leftover_claim_swept`)
        "dra-admit/delete-fails-after-gate",
        DRA_ADMIT,
        (OUR_CLASS, claim(), gated_claimant()),
        "done",
        f"admitted 1 pod(s): p-0 -> node-a; replaced claim(s) {CLAIM} (500 Internal Server "
        "Error) not deleted: left to a later cycle's sweep",
        ("create_dra_object", "set_pod_claim", "admit_pod"),
        fail={"delete_dra_object": ApiError(500, "Internal Server Error", "etcd")},
        check=leftover_admitted,
    ),
    Row(
        # a gang: the second pod's pinned claim is refused for the namespace's ResourceQuota
        # (the first pod's template claim still counts, its delete waits for the gate): that
        # claim is deleted first (its pod's status names its pinned claim already), the create
        # tried again; the second pod's template claim goes after the gates
        "dra-admit/gang-quota-refused-deletes-the-earlier-claim-first",
        GANG_ADMIT,
        (OUR_CLASS, claim(), gang_claim(), gated_claimant(), gated_claimant("p-1-gpus-x1", "p-1")),
        "done",
        "admitted 2 pod(s)",
        (
            "annotate_pod",
            "annotate_pod",
            "create_dra_object",
            "set_pod_claim",
            "delete_dra_object",
            "create_dra_object",
            "set_pod_claim",
            "admit_pod",
            "admit_pod",
            "delete_dra_object",
        ),
        fail={"create_dra_object": [None, QUOTA_REFUSED]},  # type: ignore[dict-item]
        check=gang_pinned,
    ),
    Row(
        # the quota refuses the first pod's pinned claim: nothing queued to free, an error
        "dra-admit/quota-refused-nothing-to-free",
        DRA_ADMIT,
        (OUR_CLASS, claim(), gated_claimant()),
        "error",
        "403",
        (),
        fail={"create_dra_object": QUOTA_REFUSED},
        check=replaced_not_yet,
    ),
    Row(
        # the template's claim went (someone deleted it) after the pod's status named the
        # pinned claim: the delete's 404 is harmless, the pod runs on the pinned claim
        "dra-admit/replaced-gone-after-status",
        DRA_ADMIT,
        (OUR_CLASS, claim(), gated_claimant()),
        "done",
        "admitted 1 pod(s): p-0 -> node-a",
        ("create_dra_object", "set_pod_claim", "admit_pod"),
        fail={"delete_dra_object": ApiError(404, "Not Found", "gone")},
        check=leftover_admitted,
    ),
    Row(
        # an earlier run made the pinned claim and stopped before the status named it: the
        # create's conflict finds it (the pod's, this plan, unallocated) and goes on
        "dra-admit/pinned-made-already",
        DRA_ADMIT,
        (
            OUR_CLASS,
            claim(),
            Dra(
                "ResourceClaim",
                PINNED,
                NS,
                spec=CLAIM_SPEC,
                managed_by="",
                meta={
                    **MADE,
                    "annotations": {C.DRA_POD_CLAIM_ANN: "gpus", C.DRA_PLANNED_ANN: "GPU-a,GPU-b"},
                },
            ),
            gated_claimant(),
        ),
        "done",
        "admitted 1 pod(s)",
        ("set_pod_claim", "admit_pod", "delete_dra_object"),
    ),
    Row(
        # a claim of that name that is not this pod's pinned one: not taken over
        "dra-admit/pinned-name-taken",
        DRA_ADMIT,
        (
            OUR_CLASS,
            claim(),
            Dra("ResourceClaim", PINNED, NS, spec=CLAIM_SPEC, managed_by="", meta=MADE),
            gated_claimant(),
        ),
        "error",
        "409",
        (),
        check=replaced_not_yet,
    ),
    Row(
        # pinned for an earlier plan while the pod stayed gated: its selector is replaced, not
        # added to (both would allow no device)
        "dra-admit/claim-pinned-for-another-plan",
        DRA_ADMIT,
        (
            OUR_CLASS,
            Dra(
                "ResourceClaim",
                CLAIM,
                NS,
                spec={
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": CLASS,
                                    "count": 2,
                                    "selectors": [
                                        {"cel": {"expression": uuid_selector(("GPU-x", "GPU-y"))}}
                                    ],
                                },
                            }
                        ]
                    }
                },
                managed_by="",
                meta={
                    **MADE,
                    "annotations": {C.DRA_POD_CLAIM_ANN: "gpus", C.DRA_PLANNED_ANN: "GPU-x,GPU-y"},
                },
            ),
            gated_claimant(),
        ),
        "done",
        "admitted 1 pod(s)",
        ("create_dra_object", "set_pod_claim", "admit_pod", "delete_dra_object"),
        check=pinned,
    ),
    Row(
        # pinned for an earlier plan, which named a claim it replaced and could not delete
        # (and, planned again, this plan's own name): that one goes too, this plan's stays
        "dra-admit/another-plan-with-a-leftover",
        DRA_ADMIT,
        (
            OUR_CLASS,
            claim(
                {
                    **MADE,
                    "annotations": {
                        C.DRA_POD_CLAIM_ANN: "gpus",
                        C.DRA_PLANNED_ANN: "GPU-x,GPU-y",
                        C.DRA_REPLACES_ANN: f"left-0,{PINNED}",
                    },
                }
            ),
            Dra("ResourceClaim", "left-0", NS, spec=CLAIM_SPEC, managed_by="", meta=MADE),
            gated_claimant(),
        ),
        "done",
        "admitted 1 pod(s)",
        (
            "create_dra_object",
            "set_pod_claim",
            "admit_pod",
            "delete_dra_object",
            "delete_dra_object",
        ),
        check=leftover_gone,
    ),
    Row(
        "dra-admit/claim-not-made-yet",
        DRA_ADMIT,
        (OUR_CLASS, gated_claimant(made="")),
        "waiting",
        "claim gpus is not made yet",
        (),
        check=not_admitted,
    ),
    Row(
        "dra-admit/claim-allocated",
        DRA_ADMIT,
        (OUR_CLASS, claim(status={"allocation": {"devices": {"results": []}}}), gated_claimant()),
        "failed",
        "is allocated already",
        (),
        check=not_admitted,
    ),
    Row(
        # a claim the pod only references (shared, someone else's): never rewritten
        "dra-admit/claim-not-the-pods-own",
        DRA_ADMIT,
        (OUR_CLASS, claim({"annotations": {}}), gated_claimant()),
        "failed",
        "is not pod p-0's own",
        (),
        check=not_admitted,
    ),
    Row(
        # a claim on someone else's class is not gpupool's to pin: the pod is admitted as is
        "dra-admit/foreign-class",
        DRA_ADMIT,
        (Dra("DeviceClass", CLASS, spec=CLASS_SPEC, managed_by=""), claim(), gated_claimant()),
        "done",
        "admitted 1 pod(s)",
        ("admit_pod",),
    ),
]


# ------------------------------------------------------------------ exact admission, DynamicMIG
# A planned partition is named by its device (placement included): no selector can pick it, so
# the pinned claim, once made under its own name and named in the pod's status, is given its
# allocation (handlers/dra_allocate.py).
MIG_CLASS = "gpupool-pool-a-mig-4g-40gb"
PART = "gpu-0-mig-4g40gb-5-0"
REF = f"gpu.nvidia.com/node-a/{PART}"
OLD_REF = "gpu.nvidia.com/node-a/gpu-1-mig-4g40gb-5-0"
DYN_PINNED = pinned_name("p-0", "uid-p-0", "gpus", REF)
OLD_PINNED = pinned_name("p-0", "uid-p-0", "gpus", OLD_REF)
DYN_ADMIT = DRA_ADMIT.model_copy(
    update={"pods": (PodAdmission(name="p-0", node="node-a", gpus=(0,), devices=(REF,)),)}
)
MIG_CLASS_OBJ = Dra("DeviceClass", MIG_CLASS, meta={"annotations": {C.DRA_PROFILE_ANN: "4g.40gb"}})
MIG_SPEC = {
    "devices": {
        "requests": [{"name": "gpu", "exactly": {"deviceClassName": MIG_CLASS, "count": 1}}]
    }
}


PINNED_MIG_SPEC = {
    "devices": {
        "requests": [
            {
                "name": "gpu",
                "exactly": {
                    "deviceClassName": MIG_CLASS,
                    "count": 1,
                    "selectors": [{"cel": {"expression": REF_SELECTOR}}],
                    "tolerations": list(TOLERATIONS),
                },
            }
        ]
    }
}
"""MIG_SPEC as gpupool pins it (the claim it makes under `pinned_name`)."""


def mig_claim(planned: str = "", status=None, name: str = CLAIM) -> Dra:
    """The template's claim (`name` CLAIM), or one gpupool pinned (its own name)."""
    ann = {C.DRA_POD_CLAIM_ANN: "gpus", **({C.DRA_PLANNED_ANN: planned} if planned else {})}
    return Dra(
        "ResourceClaim",
        name,
        NS,
        spec=MIG_SPEC if name == CLAIM else PINNED_MIG_SPEC,
        managed_by="",
        meta={**MADE, "annotations": ann},
        status=status,
    )


ALLOCATED = {
    "allocation": {
        "devices": {
            "results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": PART}
            ]
        }
    }
}


def allocated_pinned(p: Probe) -> None:
    """The pod's status names the pinned claim (the template's gone), allocated by name."""
    pod = p.pod("p-0")
    assert pod is not None and pod.claims == (("gpus", DYN_PINNED),)
    assert p.cluster.dra.get(("ResourceClaim", NS, CLAIM)) is None  # type: ignore[attr-defined]
    obj = p.cluster.dra.get(("ResourceClaim", NS, DYN_PINNED))  # type: ignore[attr-defined]
    assert obj is not None
    exactly = obj["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["selectors"] == [{"cel": {"expression": REF_SELECTOR}}]
    assert obj["metadata"]["annotations"][C.DRA_PLANNED_ANN] == REF
    alloc = obj["status"]["allocation"]
    assert alloc["devices"]["results"] == ALLOCATED["allocation"]["devices"]["results"]
    (term,) = alloc["nodeSelector"]["nodeSelectorTerms"]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]
    assert alloc["allocationTimestamp"].endswith("Z")


def allocated_by_name(p: Probe) -> None:
    allocated_pinned(p)
    pod = p.pod("p-0")
    assert pod is not None and pod.gates == ()


def allocated_gated(p: Probe) -> None:
    allocated_pinned(p)
    not_admitted(p)


REPLACED = ("create_dra_object", "set_pod_claim", "replace_dra_status")
"""The writes that pin a DynamicMIG claim: made, named, allocated (the template's claim is
deleted after the gate: `ADMITTED`)."""

ADMITTED = ("admit_pod", "delete_dra_object")
"""The gate's removal, then the replaced claim's delete."""

DRA_ROWS += [
    Row(
        "dra-admit/dynamic-partition-allocated-by-name",
        DYN_ADMIT,
        (MIG_CLASS_OBJ, mig_claim(), gated_claimant()),
        "done",
        "admitted 1 pod(s): p-0 -> node-a",
        (*REPLACED, *ADMITTED),
        check=allocated_by_name,
    ),
    Row(
        # an earlier run made the pinned claim, named it and stopped before its allocation
        "dra-admit/dynamic-made-not-allocated",
        DYN_ADMIT,
        (MIG_CLASS_OBJ, mig_claim(REF, name=DYN_PINNED), gated_claimant(made=DYN_PINNED)),
        "done",
        "admitted 1 pod(s)",
        ("replace_dra_status", "admit_pod"),
        check=allocated_by_name,
    ),
    Row(
        # an earlier run made the pinned claim and stopped before the pod's status named it:
        # the create's conflict finds it, then it is named, the template's deleted, allocated
        "dra-admit/dynamic-made-not-named",
        DYN_ADMIT,
        (MIG_CLASS_OBJ, mig_claim(), mig_claim(REF, name=DYN_PINNED), gated_claimant()),
        "done",
        "admitted 1 pod(s)",
        (*REPLACED[1:], *ADMITTED),
        check=allocated_by_name,
    ),
    Row(
        # the pinned claim of an earlier run, allocated for another plan and held by nobody
        # (the run stopped before the gate went): its allocation taken back, a claim pinned to
        # this plan made in its place and allocated
        "dra-admit/dynamic-stale-allocation-taken-back",
        DYN_ADMIT,
        (
            MIG_CLASS_OBJ,
            mig_claim(OLD_REF, status=ALLOCATED, name=OLD_PINNED),
            gated_claimant(made=OLD_PINNED),
        ),
        "done",
        "admitted 1 pod(s)",
        ("replace_dra_status", *REPLACED, *ADMITTED),
        check=allocated_by_name,
    ),
    Row(
        # the claim the pod's status names is gone: made again pinned and allocated, the gate
        # waits a cycle (the resourceclaim controller may answer the same gap)
        "dra-admit/dynamic-claim-gone-made-again",
        DYN_ADMIT,
        (
            MIG_CLASS_OBJ,
            Dra("ResourceClaimTemplate", f"{CLASS}-2", NS, spec={"spec": MIG_SPEC}),
            gated_claimant(),
        ),
        "waiting",
        f"claim(s) {CLAIM} -> {DYN_PINNED} made again pinned",
        ("create_dra_object", "set_pod_claim", "replace_dra_status"),
        check=allocated_gated,
    ),
    Row(
        # allocated and held by a pod: not gpupool's to take back
        "dra-admit/dynamic-allocation-held",
        DYN_ADMIT,
        (
            MIG_CLASS_OBJ,
            mig_claim(
                OLD_REF,
                status={**ALLOCATED, "reservedFor": [{"resource": "pods", "name": "x"}]},
            ),
            gated_claimant(),
        ),
        "failed",
        "is allocated already",
        (),
        check=not_admitted,
    ),
    Row(
        # the claim asks a profile the plan gave it no partition of
        "dra-admit/dynamic-partition-of-another-profile",
        DYN_ADMIT.model_copy(
            update={
                "pods": (
                    PodAdmission(
                        name="p-0",
                        node="node-a",
                        gpus=(0,),
                        devices=("gpu.nvidia.com/node-a/gpu-0-mig-2g20gb-14-4",),
                    ),
                )
            }
        ),
        (MIG_CLASS_OBJ, mig_claim(), gated_claimant()),
        "failed",
        "the planned partitions are not what it asks",
        (),
        check=not_admitted,
    ),
]
