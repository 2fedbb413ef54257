"""Rows for the DRA handlers (reconciler/apply/handlers/dra.py): DeviceClasses and
ResourceClaimTemplates gpupool renders for DRA pools, applied and pruned (tests/apply/rows.py
`TABLES["dra"]`)."""

from __future__ import annotations

from reconciler import conventions as C
from reconciler.apply.port import ApiError
from reconciler.plan.actions import ApplyDraObject, PruneDraObject
from tests.apply.table import NS, Dra, Probe, Row

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
