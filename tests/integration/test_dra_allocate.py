"""Exact admission by allocation (`spec.dra.admission: allocate`, issue 32), on the real API
server and kube-scheduler: in a guarded DRA pool gpupool writes the plan's devices as the
allocation of each pod's own claim, the one Kubernetes' resourceclaim controller made from
gpupool's template (reconciler/apply/handlers/dra_own.py), then releases the gate.

- Whole cards (one pod, a 2-pod gang) and a static MIG device: the allocated devices are the
  planned ones, each pod keeps the claim the resourceclaim controller made (no claim made
  beside it, none deleted), and the claim carries Kubernetes' finalizer.
- gpupool reserves each claim for its pod in the allocation's write, as kube-scheduler's
  PreBind would, so kube-scheduler writes no claim: it nominates the node (asynchronously) and
  binds. It checks no device taint on an allocated claim (the guard's NoSchedule taint is on
  every device) and allocates nothing.
- gpupool's own writes on claims are a merge patch (the plan's annotation and the finalizer)
  and the status: no claim created or deleted. Its rights are the controller's own
  (deploy/rbac.yaml), and deploy/controller-admission.yaml refuses it any other change of a
  claim's metadata, and a reservation for any pod but the claim's own.
- Once the pods are deleted, the resourceclaim controller deallocates each claim and takes its
  finalizer off: the claims go.
"""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from reconciler import conventions as C

from .dra_support import (
    admit_round,
    claim_of,
    claims_gone,
    claims_in,
    dra_nodes,
    dra_policy,
    taint_cycle,
)
from .gating import gated_namespace
from .harness import audit_mark, controller, write_policy, writes
from .rbac_rules import unused_controller_rules

G, V = C.DRA_GROUP, C.DRA_VERSION


def test_the_plan_is_written_as_the_claims_allocation(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    pool = f"d{sfx}"
    ns = gated_namespace(kube)
    na, nb = f"dra-a-{sfx}", f"dra-b-{sfx}"
    dra_nodes(kube, pool, na, nb, mig={nb: {0: [("3g.40gb", 0), ("3g.40gb", 4)]}})
    write_policy(tmp_path, dra_policy(sfx, ns, admission="allocate"))
    ctl = controller(kube, tmp_path, kube.clock)
    out = taint_cycle(kube, ctl)  # the guard first: refs only where it is in place
    for node in (na, nb):
        assert out.get(f"taint-device:guard:{node}") == "done: created", out

    whole, mig = f"gpupool-{pool}-gpu", f"gpupool-{pool}-mig-3g-40gb"
    spec = {
        "solo": (f"{whole}-1", ""),
        "gang-0": (f"{whole}-2", "g"),
        "gang-1": (f"{whole}-2", "g"),
        "ranker": (mig, ""),
    }
    at = audit_mark(kube)
    made: dict[str, str] = {}

    def record() -> None:  # the claims as the resourceclaim controller made them
        made.update({p: claim_of(kube, ns, p)["metadata"]["name"] for p in spec})

    got, results = admit_round(kube, ctl, ns, sfx, spec, before=record)
    for p, (node, devices, planned) in got.items():
        assert planned and devices == planned, (p, devices, planned, results)
        claim = claim_of(kube, ns, p)
        assert claim["metadata"]["name"] == made[p]  # the template's claim, allocated
        assert claim["metadata"]["finalizers"] == [C.DRA_DELETE_PROTECTION]
        refs = claim["metadata"]["annotations"][C.DRA_PLANNED_ANN].split(",")
        assert all(r.startswith(f"{C.DRA_DRIVER}/{node}/") for r in refs), refs
        assert [r["name"] for r in claim["status"]["reservedFor"]] == [p]
    assert got["ranker"][0] == nb and got["ranker"][1][0].startswith("gpu-0-mig-3g40gb-")
    assert {len(d) for p, (_, d, _) in got.items() if p.startswith("gang")} == {2}
    assert len(claims_in(kube, ns)) == len(spec)

    # kube-scheduler nominated the node (its PreBind runs: the pod has claims) and bound,
    # writing no claim (each is reserved for its pod already); gpupool patched, allocated and
    # reserved, made and deleted no claim
    sched = {
        (e.verb, e.resource, e.subresource or "")
        for e in writes(kube, since=at, user="system:kube-scheduler")
        if e.namespace == ns and e.resource != "events"
    }
    assert sched == {("patch", "pods", "status"), ("create", "pods", "binding")}, sched
    mine = {
        (e.verb, e.subresource or "", e.code)
        for e in writes(kube, since=at)
        if e.namespace == ns and e.resource == "resourceclaims"
    }
    assert mine == {("patch", "", 200), ("update", "status", 200)}, mine
    picked, unused = unused_controller_rules(
        kube, at, lambda label: "resource.k8s.io/resourceclaims" in label and " patch " in label
    )
    assert picked == 1 and unused == [], unused  # the controller's own rights, none refused

    # the admission policy: no other metadata change, not on an allocated claim
    as_controller = client.CustomObjectsApi(kube.controller_client())
    name = made["solo"]
    for patch in (
        {"metadata": {"labels": {"example.com/x": "y"}}},  # allocated already, and a label
        {"metadata": {"finalizers": [C.DRA_DELETE_PROTECTION, "example.com/keep"]}},
    ):
        with pytest.raises(client.ApiException) as refused:
            as_controller.patch_namespaced_custom_object(G, V, ns, "resourceclaims", name, patch)
        assert refused.value.status == 403 and "gpupool-controller-claims" in refused.value.body

    # nor a reservation for another pod (here beside the pod's own, on an allocated claim:
    # RBAC gives the controller update on the status, the policy refuses it)
    body = claim_of(kube, ns, "solo")
    ranker = claim_of(kube, ns, "ranker")["metadata"]["ownerReferences"][0]
    body["status"]["reservedFor"].append(
        {"resource": "pods", "name": "ranker", "uid": ranker["uid"]}
    )
    with pytest.raises(client.ApiException) as refused:
        as_controller.replace_namespaced_custom_object_status(
            G, V, ns, "resourceclaims", name, body
        )
    assert refused.value.status == 403 and "gpupool-controller-claims" in refused.value.body

    # the pods go: the resourceclaim controller deallocates each claim, takes the finalizer
    # off, and the claims go with their pods
    for p in spec:
        kube.core.delete_namespaced_pod(p, ns, grace_period_seconds=0)
    claims_gone(kube, ns)
