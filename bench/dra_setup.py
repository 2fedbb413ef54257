"""The DRA half of bench/admission_openb.py's cluster (issue 32, item 7): the same nodes publish
their cards as ResourceSlices the way NVIDIA's DRA driver does (tests/cluster/dra_kubelet.py's
`DraPlugin`, the card's `productName` as NVML names the pool's model), the policy turns the pool
to `spec.backend: dra` with a Quota naming the DRA runs' namespaces (gpupool renders its
DeviceClass and ResourceClaimTemplates `gpupool-<pool>-gpu-<n>` there), and the claims are read
back: the devices they hold per node (the cards in use) and, per pod, whether the allocated
devices are the ones gpupool planned (the claim's `gpupool.io/planned-devices`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.cluster.dra_kubelet import DraPlugin
from tests.cluster.dra_slices import gpu_device, uuid


@dataclass
class DraNode(DraPlugin):
    """A node's DRA plugin whose cards carry `product` (DraPlugin's are A100s)."""

    product: str = ""

    def devices(self) -> list[dict]:
        return [gpu_device(self.node, m, product=self.product) for m in range(self.cards)]


def publish_slices(custom: Any, nodes: list[tuple[str, int]], model: str) -> list[DraNode]:
    """Every (node, cards) publishes its slice, cards of catalog model `model`."""
    from reconciler.policy.catalog import default_catalog

    found = default_catalog().model(model)
    product = found.nvml_names[0] if found and found.nvml_names else model
    plugins = [DraNode(custom, n, cards=c, product=product) for n, c in nodes]
    for p in plugins:
        p.publish()
    return plugins


def quota_doc(name: str, pool: str, namespaces: list[str], cards: int) -> str:
    """A Quota `name` (after a `---`) guaranteeing `pool`'s `cards` in `namespaces`, borrowing
    unbounded (so its ResourceQuota never refuses a queued pod's claim)."""
    return (
        "---\napiVersion: gpupool.io/v1alpha1\nkind: Quota\n"
        f"metadata: {{name: {name}}}\nspec:\n  namespaces: [{', '.join(namespaces)}]\n"
        f"  pools:\n    - pool: {pool}\n      whole: {{guaranteed: {cards}}}\n"
    )


def template(pool: str, cards: int) -> str:
    """gpupool's ResourceClaimTemplate for `cards` whole cards (reconciler/plan/dra.py)."""
    from reconciler.plan.dra import class_name

    return f"{class_name(pool)}-{cards}"


def claim_pod_spec(pool: str, cards: int) -> dict:
    """The pod spec fields that ask for `cards` whole cards of DRA pool `pool` (one claim from
    gpupool's template, as tests/integration/test_dra_admit.py's pods do)."""
    return {
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template(pool, cards)}],
        "resources": {"claims": [{"name": "gpus"}]},  # the container's
    }


@dataclass
class Claims:
    """The claims of one namespace as last listed: devices held per node, and per pod (first
    seen allocated) whether its allocated devices are the planned ones."""

    held: dict[str, int] = field(default_factory=dict)
    checked: dict[str, bool] = field(default_factory=dict)  # pod -> allocated == planned
    unplanned: set[str] = field(default_factory=set)  # allocated pods without a plan annotation
    mismatches: list[str] = field(default_factory=list)

    def read(self, custom: Any, ns: str, planned_key: str) -> None:
        from reconciler import conventions as C

        resp = custom.list_namespaced_custom_object(
            C.DRA_GROUP, C.DRA_VERSION, ns, "resourceclaims", _preload_content=False
        )
        held: dict[str, int] = {}
        for claim in json.loads(resp.data).get("items") or []:
            meta = claim["metadata"]
            alloc = (claim.get("status") or {}).get("allocation") or {}
            results = (alloc.get("devices") or {}).get("results") or []
            if not results:
                continue
            for r in results:
                held[r["pool"]] = held.get(r["pool"], 0) + 1
            owners = [o["name"] for o in meta.get("ownerReferences") or [] if o["kind"] == "Pod"]
            pod = owners[0] if owners else meta["name"]
            if pod in self.checked or pod in self.unplanned:
                continue
            planned = (meta.get("annotations") or {}).get(planned_key)
            if planned is None:
                self.unplanned.add(pod)
                continue
            got = sorted(uuid(r["pool"], int(r["device"].removeprefix("gpu-"))) for r in results)
            want = sorted(u for u in planned.split(",") if u)
            self.checked[pod] = got == want
            if got != want and len(self.mismatches) < 5:
                self.mismatches.append(f"{pod}: allocated {got}, planned {want}")
        self.held = held
