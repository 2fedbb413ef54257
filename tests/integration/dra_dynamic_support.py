"""Shared helpers for the DynamicMIG integration tests (test_dra_dynamic.py,
test_dra_dynamic_placement.py, test_dra_lending.py): pods on gpupool's ResourceClaimTemplates,
their claims, and the kubelet's prepare step as the simulated DRA driver takes it
(tests/cluster/dra_kubelet.py `DraPlugin.prepare`)."""

from __future__ import annotations

from reconciler import conventions as C

from .dra_support import claim_of, claim_pod  # noqa: F401 - shared with the other DRA tests

G, V = C.DRA_GROUP, C.DRA_VERSION


def allocation(kube, ns: str, pod: str) -> tuple[str, list[str], str, dict] | None:
    """(node, allocated devices, planned devices as gpupool wrote them, the claim) once the pod
    is bound and its claim allocated."""
    p = kube.core.read_namespaced_pod(pod, ns)
    claim = claim_of(kube, ns, pod)
    alloc = ((claim or {}).get("status") or {}).get("allocation")
    if not p.spec.node_name or not alloc:
        return None
    got = sorted(r["device"] for r in alloc["devices"]["results"])
    planned = (claim["metadata"].get("annotations") or {}).get(C.DRA_PLANNED_ANN, "")
    return p.spec.node_name, got, planned, claim


def prepare(plugin, sim, claims: list[dict]) -> dict[int, list[tuple[str, int]]]:
    """The kubelet prepares the claims on the node: the driver makes their MIG instances
    (`DraPlugin.prepare`), which the node's NVML then shows, and gpupool's node agent
    publishes; -> card -> instances made."""
    for c in claims:
        plugin.prepare(c)
    for minor in range(plugin.cards):
        sim.gpus.set_instances(minor, sorted(plugin.made.get(minor, [])))
    sim.publish()
    return {m: sorted(v) for m, v in plugin.made.items()}
