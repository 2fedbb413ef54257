"""Rows for exact admission by allocation (`spec.dra.admission: allocate`,
reconciler/apply/handlers/dra_own.py): the plan's devices (`PodAdmission.refs`) written as the
allocation of the pod's own claim, with the plan's annotation and Kubernetes' finalizer, before
the gate goes; a claim that is not a plain one of gpupool's templates is pinned instead
(tests/apply/rows.py `TABLES["dra-own"]`)."""

from __future__ import annotations

import copy
import dataclasses

from reconciler import conventions as C
from reconciler.apply.handlers.dra_admit import pinned_name
from reconciler.apply.port import ApiError
from reconciler.plan.actions import PodAdmission
from tests.apply.rows_dra import (
    CLAIM,
    CLAIM_SPEC,
    DRA_ADMIT,
    MADE,
    MIG_CLASS_OBJ,
    MIG_SPEC,
    OUR_CLASS,
    PART,
    REF,
    claim,
    gated_claimant,
    mig_claim,
    not_admitted,
    pinned,
)
from tests.apply.table import NS, Dra, Pod, Probe, Row

REFS = ("gpu.nvidia.com/node-a/gpu-0", "gpu.nvidia.com/node-a/gpu-1")
OWN_ADMIT = DRA_ADMIT.model_copy(
    update={
        "pods": (
            PodAdmission(
                name="p-0", node="node-a", gpus=(0, 1), devices=("GPU-a", "GPU-b"), refs=REFS
            ),
        )
    }
)
RESULTS = [
    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": d}
    for d in ("gpu-0", "gpu-1")
]
PLANNED = ",".join(REFS)
HELD_BY_POD = {"resource": "pods", "name": "p-0", "uid": "uid-p-0"}


def _claim(p: Probe) -> dict:
    obj = p.cluster.dra.get(("ResourceClaim", NS, CLAIM))  # type: ignore[attr-defined]
    assert obj is not None
    return obj


def allocated_own(p: Probe) -> None:
    """The pod's own claim (no pinned one: the status still names it) carries the plan, the
    finalizer and the allocation on the plan's node; its spec is as the template made it."""
    pod = p.pod("p-0")
    assert pod is not None and pod.claims == (("gpus", CLAIM),)
    obj = _claim(p)
    md = obj["metadata"]
    assert md["annotations"] == {C.DRA_POD_CLAIM_ANN: "gpus", C.DRA_PLANNED_ANN: PLANNED}
    assert md["finalizers"] == [C.DRA_DELETE_PROTECTION]
    assert obj["spec"] == CLAIM_SPEC
    alloc = obj["status"]["allocation"]
    assert alloc["devices"]["results"] == RESULTS
    (term,) = alloc["nodeSelector"]["nodeSelectorTerms"]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]
    assert alloc["allocationTimestamp"].endswith("Z")
    # reserved for its pod in the same write, as kube-scheduler's PreBind would: the scheduler
    # writes no claim then
    assert obj["status"]["reservedFor"] == [HELD_BY_POD]
    claims = [k for k in p.cluster.dra if k[0] == "ResourceClaim"]  # type: ignore[attr-defined]
    assert claims == [("ResourceClaim", NS, CLAIM)]


def admitted_own(p: Probe) -> None:
    allocated_own(p)
    pod = p.pod("p-0")
    assert pod is not None and pod.gates == ()


def untouched(p: Probe) -> None:
    obj = _claim(p)
    assert C.DRA_PLANNED_ANN not in (obj["metadata"].get("annotations") or {})
    not_admitted(p)


SELECTED = {
    "devices": {
        "requests": [
            {
                "name": "gpu",
                "exactly": {
                    **CLAIM_SPEC["devices"]["requests"][0]["exactly"],
                    "selectors": [{"cel": {"expression": "device.attributes['x'].y == 1"}}],
                },
            }
        ]
    }
}
ELSEWHERE = {
    "allocation": {
        "devices": {
            "results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-b", "device": d}
                for d in ("gpu-2", "gpu-3")
            ]
        }
    }
}
OTHER_PLAN = "gpu.nvidia.com/node-b/gpu-2,gpu.nvidia.com/node-b/gpu-3"


def other_plans(status: dict) -> tuple:
    """The cluster of a row whose claim gpupool allocated for another plan earlier (`status`:
    its allocation, and reservation if any), the pod still gated."""
    meta = {**MADE, "annotations": {C.DRA_POD_CLAIM_ANN: "gpus", C.DRA_PLANNED_ANN: OTHER_PLAN}}
    return (OUR_CLASS, claim(meta, status=status), gated_claimant())


DRA_OWN_ROWS = [
    Row(
        "dra-own/allocated-then-admitted",
        OWN_ADMIT,
        (OUR_CLASS, claim(), gated_claimant()),
        "done",
        "admitted 1 pod(s): p-0 -> node-a",
        ("patch_dra_object", "replace_dra_status", "admit_pod"),
        check=admitted_own,
    ),
    Row(
        # an earlier run wrote the allocation and stopped before the gate went
        "dra-own/allocated-already",
        OWN_ADMIT,
        (
            OUR_CLASS,
            claim(
                {
                    **MADE,
                    "annotations": {C.DRA_POD_CLAIM_ANN: "gpus", C.DRA_PLANNED_ANN: PLANNED},
                    "finalizers": [C.DRA_DELETE_PROTECTION],
                },
                status={"allocation": {"devices": {"results": RESULTS}}},
            ),
            gated_claimant(),
        ),
        "done",
        "admitted 1 pod(s)",
        ("admit_pod",),
    ),
    Row(
        # an earlier run allocated it for another plan (the pod stayed gated, nobody holds it):
        # taken back, then written for this plan
        "dra-own/another-plans-allocation-taken-back",
        OWN_ADMIT,
        other_plans(ELSEWHERE),
        "done",
        "admitted 1 pod(s)",
        ("replace_dra_status", "patch_dra_object", "replace_dra_status", "admit_pod"),
        check=admitted_own,
    ),
    Row(
        # as above, and reserved for the pod (this pod, still gated): taken back the same way
        "dra-own/reserved-for-the-gated-pod-taken-back",
        OWN_ADMIT,
        other_plans({**ELSEWHERE, "reservedFor": [HELD_BY_POD]}),
        "done",
        "admitted 1 pod(s)",
        ("replace_dra_status", "patch_dra_object", "replace_dra_status", "admit_pod"),
        check=admitted_own,
    ),
    Row(
        # gpupool's allocation, but reserved for another pod (of another uid): a pod holds it,
        # never taken back
        "dra-own/reserved-for-another-pod",
        OWN_ADMIT,
        other_plans({**ELSEWHERE, "reservedFor": [{**HELD_BY_POD, "uid": "uid-earlier"}]}),
        "failed",
        "is allocated already",
        (),
        check=not_admitted,
    ),
    Row(
        # allocated by someone else: never overwritten, nothing admitted
        "dra-own/allocated-elsewhere",
        OWN_ADMIT,
        (OUR_CLASS, claim(status=ELSEWHERE), gated_claimant()),
        "failed",
        "is allocated already",
        (),
        check=not_admitted,
    ),
    Row(
        # a selector gpupool did not write: the allocator must check it, so the claim is pinned
        "dra-own/not-plain-pinned",
        OWN_ADMIT,
        (OUR_CLASS, dataclasses.replace(claim(), spec=SELECTED), gated_claimant()),
        "done",
        "admitted 1 pod(s)",
        ("create_dra_object", "set_pod_claim", "admit_pod", "delete_dra_object"),
    ),
    Row(
        # not gpupool's class: pinned as without refs (and the pin path finds nothing to pin)
        "dra-own/not-gpupools-class",
        OWN_ADMIT,
        (claim(), gated_claimant()),
        "done",
        "admitted 1 pod(s)",
        ("admit_pod",),
    ),
    Row(
        # the version changed under the patch twice (the watch cache's copy, then the server's):
        # nothing written, the gate stays, the next cycle tries again
        "dra-own/conflict",
        OWN_ADMIT,
        (OUR_CLASS, claim(), gated_claimant()),
        "waiting",
        "changed while its allocation was written",
        (),
        fail={"patch_dra_object": ApiError(409, "Conflict", "the object has been modified")},
        check=untouched,
    ),
    Row(
        "dra-own/status-refused",
        OWN_ADMIT,
        (OUR_CLASS, claim(), gated_claimant()),
        "error",
        "403",
        ("patch_dra_object",),
        fail={"replace_dra_status": ApiError(403, "Forbidden", "denied")},
        check=not_admitted,
    ),
    Row(
        # without refs (no guard in place on the node) the same claim is pinned as ever
        "dra-own/no-refs-pinned",
        DRA_ADMIT,
        (OUR_CLASS, claim(), gated_claimant()),
        "done",
        "admitted 1 pod(s)",
        ("create_dra_object", "set_pod_claim", "admit_pod", "delete_dra_object"),
        check=pinned,
    ),
]


# A DynamicMIG pod with two claims: the plain one is allocated by gpupool, the other (a selector
# of the team's) pinned and then allocated; each gets its own partition, never the same one.
PART2 = "gpu-0-mig-4g40gb-5-4"
REF2 = f"gpu.nvidia.com/node-a/{PART2}"
TWO = (REF, REF2)
TWO_ADMIT = DRA_ADMIT.model_copy(
    update={"pods": (PodAdmission(name="p-0", node="node-a", gpus=(0,), devices=TWO, refs=TWO),)}
)
MORE = "p-0-more-x1"
MORE_PINNED = pinned_name("p-0", "uid-p-0", "more", ",".join(TWO))
TEAM_SELECTOR = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile != ''"}}


def two_claims() -> tuple[Dra, Dra, Pod]:
    more_spec = copy.deepcopy(MIG_SPEC)
    more_spec["devices"]["requests"][0]["exactly"]["selectors"] = [TEAM_SELECTOR]
    more = Dra(
        "ResourceClaim",
        MORE,
        NS,
        spec=more_spec,
        managed_by="",
        meta={**MADE, "annotations": {C.DRA_POD_CLAIM_ANN: "more"}},
    )
    pod = Pod(
        "p-0",
        node=None,
        gates=(C.ADMISSION_GATE,),
        claims=(("gpus", CLAIM), ("more", MORE)),
        templates={"gpus": "t-gpus", "more": "t-more"},
    )
    return mig_claim(), more, pod


def each_its_own_partition(p: Probe) -> None:
    own = p.cluster.dra[("ResourceClaim", NS, CLAIM)]  # type: ignore[attr-defined]
    pinned = p.cluster.dra[("ResourceClaim", NS, MORE_PINNED)]  # type: ignore[attr-defined]
    got = [
        [r["device"] for r in c["status"]["allocation"]["devices"]["results"]]
        for c in (own, pinned)
    ]
    assert got == [[PART], [PART2]], got


DRA_OWN_ROWS += [
    Row(
        "dra-own/two-claims-one-pinned",
        TWO_ADMIT,
        (MIG_CLASS_OBJ, *two_claims()),
        "done",
        "admitted 1 pod(s)",
        (
            "patch_dra_object",
            "replace_dra_status",
            "create_dra_object",
            "set_pod_claim",
            "replace_dra_status",
            "admit_pod",
            "delete_dra_object",
        ),
        check=each_its_own_partition,
    ),
]
