"""Exact admission on DRA, on the real API server and kube-scheduler (issue 32 item 3).

Pods on a DRA pool reference gpupool's ResourceClaimTemplates in a gated namespace: the admission
gate (deploy/admission-gate.yaml) gates them, the resourceclaim controller makes their claims
from the templates, gpupool plans them, replaces each claim with one whose CEL selector names
the planned devices by `uuid` (reconciler/apply/handlers/dra_admit.py) and releases the gate;
kube-scheduler's DynamicResources plugin allocates. In two rounds of whole cards, a 2-pod gang
and a MIG pod, the allocated devices (claim status.allocation) are the planned ones, every time.
The rights this takes are the controller's own (deploy/rbac.yaml), nothing is refused, and
deploy/controller-admission.yaml refuses the controller any other claim write.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client

from reconciler import conventions as C
from tests.support.wait import wait_for

from .dra_support import (
    admit_round,
    claim_of,
    claim_pod,
    claims_gone,
    claims_in,
    claims_made,
    cycle_until_admitted,
    dra_nodes,
    dra_policy,
    each_allocated,
    gated,
    resource_claim,
)
from .gating import gate_names, gated_namespace
from .harness import audit_mark, controller, write_policy, writes
from .rbac_rules import unused_controller_rules

G, V = C.DRA_GROUP, C.DRA_VERSION


def test_allocations_are_the_plan(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    pool = f"d{sfx}"
    ns = gated_namespace(kube)
    mark = audit_mark(kube)
    na, nb = f"dra-x-{sfx}", f"dra-y-{sfx}"
    dra_nodes(kube, pool, na, nb, mig={nb: {0: [("3g.40gb", 0), ("3g.40gb", 4)]}})
    write_policy(tmp_path, dra_policy(sfx, ns))
    ctl = controller(kube, tmp_path, kube.clock)
    r = ctl.cycle()
    assert r.error is None, r.error

    whole, mig = f"gpupool-{pool}-gpu", f"gpupool-{pool}-mig-3g-40gb"
    # ... and not a pod on someone else's template
    other = {
        "metadata": {"name": "other"},
        "spec": {
            "resourceClaims": [{"name": "x", "resourceClaimTemplateName": "vendor-gpu"}],
            "containers": [{"name": "main", "image": "registry.example.com/work:1"}],
        },
    }
    assert gate_names(kube.core.create_namespaced_pod(ns, other, dry_run="All")) == []

    # two rounds, each admitted and allocated, the second after the first's pods are gone;
    # in the second one pod's claim is lost before gpupool writes it (gpupool makes it again
    # pinned from the template and names it in the pod's status; the gate goes a cycle later)
    rounds = [
        {"solo": (f"{whole}-1", ""), "gang-0": (f"{whole}-2", "g"), "gang-1": (f"{whole}-2", "g")},
        {"big": (f"{whole}-4", ""), "pair-0": (f"{whole}-1", "h"), "pair-1": (f"{whole}-1", "h")},
    ]
    for i, spec in enumerate(rounds):
        spec = {**spec, f"ranker-{i}": (mig, "")}
        at = audit_mark(kube)
        got, results = admit_round(kube, ctl, ns, sfx, spec, lose="big" if i else "")
        # kube-scheduler wrote each claim's allocation and bound each pod (and its events),
        # nothing else: the pinned claims carry the finalizer it adds before an allocation,
        # the pods' status the node it would nominate before its PreBind
        # (handlers/dra_admit.py `_replace`)
        sched = [
            (e.verb, e.resource, e.subresource or "")
            for e in writes(kube, since=at, user="system:kube-scheduler")
            if e.namespace == ns and e.resource != "events"
        ]
        assert sorted(set(sched)) == [
            ("create", "pods", "binding"),
            ("update", "resourceclaims", "status"),
        ], sched
        for c in claims_in(kube, ns):
            assert c["metadata"].get("finalizers") == [C.DRA_DELETE_PROTECTION], c["metadata"]
        for p, (node, devices, planned) in got.items():
            assert planned and devices == planned, (p, devices, planned, results)
            admitted_to = kube.core.read_namespaced_pod(p, ns).metadata.annotations[C.ADMITTED_ANN]
            assert node == admitted_to
        ranker = got[f"ranker-{i}"]
        assert ranker[0] == nb and ranker[1][0].startswith("gpu-0-mig-3g40gb-")
        # the gang is admitted whole: one Admit released both pods (their claims written first)
        first, second = sorted(p for p, (_, g) in spec.items() if g)
        gang = [m for outs in results.values() for st, m in outs if f"{first} ->" in m]
        assert gang and "admitted 2 pod(s)" in gang[-1] and f"{second} ->" in gang[-1], results
        counts = {p: len(d) for p, (_, d, _) in got.items()}
        assert counts == {
            p: int(t.rsplit("-", 1)[1]) if t != mig else 1 for p, (t, _) in spec.items()
        }
        assert len(claims_in(kube, ns)) == len(spec)  # one per pod: none made beside gpupool's
        for p in spec:
            kube.core.delete_namespaced_pod(p, ns, grace_period_seconds=0)
        claims_gone(kube, ns, "the round's claims gone")

    # the controller's own rights did it: no 403; the claim rules were each used
    def claim_rule(label: str) -> bool:
        return (
            "resource.k8s.io/resourceclaims" in label
            and " list " not in label
            and " watch " not in label  # the watch cache's: test_dra_informer.py
            and "resourceclaims/" not in label  # status, binding: DynamicMIG's allocation write
            and " patch " not in label  # `dra.admission: allocate`'s: test_dra_allocate.py
        )

    picked, unused = unused_controller_rules(kube, mark, claim_rule)
    assert picked == 3 and unused == [], unused

    # gpupool-controller-claims narrows those rights: no claim but a pod's own from a template
    loose = resource_claim("loose", whole)
    kube.custom.create_namespaced_custom_object(G, V, ns, "resourceclaims", loose)
    as_controller = client.CustomObjectsApi(kube.controller_client())
    # a claim as exact admission makes one, but with a finalizer not Kubernetes' own
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "solo", "uid": str(uuid.uuid4())}
    kept = {
        "name": "kept",
        "annotations": {C.DRA_PLANNED_ANN: "GPU-x", C.DRA_POD_CLAIM_ANN: "gpus"},
        "ownerReferences": [{**owner, "controller": True}],
        "finalizers": [C.DRA_DELETE_PROTECTION, "example.com/keep"],
    }
    for write in (
        lambda: as_controller.delete_namespaced_custom_object(G, V, ns, "resourceclaims", "loose"),
        lambda: as_controller.create_namespaced_custom_object(
            G, V, ns, "resourceclaims", {**loose, "metadata": {"name": "mine"}}
        ),
        lambda: as_controller.create_namespaced_custom_object(
            G, V, ns, "resourceclaims", {**loose, "metadata": kept}
        ),
    ):
        with pytest.raises(client.ApiException) as refused:
            write()
        assert refused.value.status == 403 and "gpupool-controller-claims" in refused.value.body


HOLD = "example.com/hold"  # a finalizer of the test's: keeps a deleted pod terminating


def test_a_terminating_pods_card_goes_last_and_then_once_its_claim_is_released(kube, tmp_path):
    """Issue 32: a pod is deleted while its claim is still allocated (here a finalizer keeps it
    terminating on its node, so the resourceclaim controller keeps the reservation: the window
    between a pod's end and its claim's release, held open).

    - The card it holds is the node's last choice: the next pod is planned on the other card
      and bound at once (once, it was planned on the held card and waited for the terminating
      pod though the other card was free: this test timed out then).
    - The pod after that has only the held card: it is planned there (anticipated, as on the
      device plugin, no `dra-claim-unreleased` fence), and its Admit waits for the pod gone
      and its claim deallocated (`after`, `after_claims`), never admitting onto a device the
      allocator still counts taken ("cannot allocate all claims", bench/admission_openb.py's
      DRA run, once). Once the finalizer goes, it is admitted onto exactly that device."""
    sfx = uuid.uuid4().hex[:6]
    pool = f"d{sfx}"
    ns = gated_namespace(kube)
    node = f"dra-h-{sfx}"
    dra_nodes(kube, pool, node, cards=2)
    write_policy(tmp_path, dra_policy(sfx, ns))
    ctl = controller(kube, tmp_path, kube.clock)
    r = ctl.cycle()
    assert r.error is None, r.error
    whole = f"gpupool-{pool}-gpu-1"

    got, _ = admit_round(kube, ctl, ns, sfx, {"first": (whole, "")})
    _, held, _ = got["first"]

    def release() -> None:
        try:
            kube.core.patch_namespaced_pod("first", ns, {"metadata": {"finalizers": None}})
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    kube.core.patch_namespaced_pod("first", ns, {"metadata": {"finalizers": [HOLD]}})
    kube.cleanup(release)
    kube.core.delete_namespaced_pod("first", ns, grace_period_seconds=0)
    wait_for(
        "first terminating",
        lambda: kube.core.read_namespaced_pod("first", ns).metadata.deletion_timestamp,
        timeout=30,
    )
    first_claim = claim_of(kube, ns, "first")
    assert first_claim and first_claim["status"].get("allocation"), first_claim  # still held

    got, results = admit_round(kube, ctl, ns, sfx, {"second": (whole, "")})
    _, devices, planned = got["second"]
    assert devices == planned and devices != held, (devices, held, results)

    claim_pod(kube, ns, "third", whole, f"low-{sfx}")
    claims_made(kube, ns, ["third"])
    kube.clock.advance(30)
    r = ctl.cycle()
    assert r.error is None and r.plan is not None, r.error
    (admit,) = [a for a in r.plan.actions if a.kind == "admit"]
    first_key = f"{ns}/{first_claim['metadata']['name']}"
    assert (admit.after, admit.after_claims) == ((f"{ns}/first",), (first_key,)), admit
    assert not [f for f in r.plan.findings if f.code == "dra-claim-unreleased"]
    (outcome,) = [o for o in r.applied.outcomes if o.action == admit.id]
    assert outcome.status == "waiting" and f"{ns}/first (terminating)" in outcome.message
    assert gated(kube, ns, ["third"]) == ["third"]

    release()
    results = cycle_until_admitted(kube, ctl, ns, ["third"], timeout=60, interval=0.5)
    _, devices, planned = each_allocated(kube, ns, ["third"])["third"]
    assert devices == planned == held, (devices, planned, held, results)

    for p in ("second", "third"):
        kube.core.delete_namespaced_pod(p, ns, grace_period_seconds=0)
    claims_gone(kube, ns)


def slow_claim_writes(ops, seconds: float) -> None:
    """Each ResourceClaim create and delete of gpupool's returns `seconds` late: what a loaded
    controller process leaves between two requests, widened so that the resourceclaim
    controller always acts in the gap (bench/admission_openb.py's DRA run found it 1-2 times
    in ~225 admissions)."""
    for op in ("create_dra_object", "delete_dra_object"):
        write = getattr(ops, op)

        def slow(*a, write=write, **kw):
            out = write(*a, **kw)
            body = a[0] if isinstance(a[0], dict) else {"kind": a[0]}
            if body.get("kind") == "ResourceClaim":
                time.sleep(seconds)
            return out

        setattr(ops, op, slow)


def test_a_slow_replacement_is_still_the_plan(kube, tmp_path):
    """Issue 32 (drafix): between gpupool's delete of a pod's template claim and its create of
    the pinned one, kube-controller-manager's resourceclaim controller found the pod's claim
    gone and made one from the template (k8s.io/kubernetes v1.37.2
    pkg/controller/resourceclaim/controller.go `handleClaim`: "perhaps it was deleted
    accidentally. In that case we re-create it"), naming it in the pod's status; the gate went
    and kube-scheduler allocated that unpinned claim. With each claim write slowed (the gap
    held open), the allocation is still the plan and the pod has one claim: gpupool makes the
    pinned claim first, names it in the pod's status, and only then deletes the old one."""
    sfx = uuid.uuid4().hex[:6]
    pool = f"d{sfx}"
    ns = gated_namespace(kube)
    dra_nodes(kube, pool, f"dra-s-{sfx}", cards=2)
    write_policy(tmp_path, dra_policy(sfx, ns))
    ctl = controller(kube, tmp_path, kube.clock)
    r = ctl.cycle()
    assert r.error is None, r.error
    slow_claim_writes(ctl.ops, 3.0)

    def forget() -> None:
        # a resourceclaim controller that did not make the claim itself (restarted since, or
        # its record of its own creates aged out: one hour, 1,000 claims) checks the API
        # server alone; one that made it believes it is there after a delete
        kube.plane.restart_controller_manager()
        time.sleep(5)  # its informers list afresh

    spec = {"slow": (f"gpupool-{pool}-gpu-1", "")}
    got, results = admit_round(kube, ctl, ns, sfx, spec, before=forget)
    _, devices, planned = got["slow"]
    assert planned and devices == planned, (devices, planned, results)
    claims = claims_in(kube, ns)
    assert len(claims) == 1, [c["metadata"]["name"] for c in claims]  # none made beside
    kube.core.delete_namespaced_pod("slow", ns, grace_period_seconds=0)
    claims_gone(kube, ns)


def test_a_claim_left_after_the_gate_is_swept(kube, tmp_path):
    """Issue 32: the template's claim is deleted after the pod's gate went (off the path from
    plan to running pod). When that delete fails, the pod still runs on its pinned claim (the
    status names it: kube-scheduler allocates only that one, the resourceclaim controller
    makes none beside it), the Admit says the claim is left, and a later cycle's sweep of
    replaced claims (plan/objects/dra_objects.py `sweep_replaced_claims`) deletes it."""
    from reconciler.apply.port import ApiError

    sfx = uuid.uuid4().hex[:6]
    pool = f"d{sfx}"
    ns = gated_namespace(kube)
    dra_nodes(kube, pool, f"dra-l-{sfx}", cards=2)
    write_policy(tmp_path, dra_policy(sfx, ns))
    ctl = controller(kube, tmp_path, kube.clock)
    r = ctl.cycle()
    assert r.error is None, r.error
    delete = ctl.ops.delete_dra_object
    refused: list[str] = []

    def fail_once(kind, namespace, name):
        if kind == "ResourceClaim" and not refused:
            refused.append(name)
            raise ApiError(500, "Internal Server Error", "injected")
        return delete(kind, namespace, name)

    ctl.ops.delete_dra_object = fail_once
    spec = {"left": (f"gpupool-{pool}-gpu-1", "")}
    got, results = admit_round(kube, ctl, ns, sfx, spec)
    _, devices, planned = got["left"]
    assert planned and devices == planned, (devices, planned, results)
    (old,) = refused
    said = [m for outs in results.values() for s, m in outs if s == "done" and old in m]
    assert said and "left to a later cycle's sweep" in said[0], results
    names = {c["metadata"]["name"] for c in claims_in(kube, ns)}
    assert old in names and len(names) == 2, names  # the pinned one and the one left

    def swept() -> bool:
        kube.clock.advance(30)
        r = ctl.cycle()
        assert r.error is None, r.error
        return [c["metadata"]["name"] for c in claims_in(kube, ns)] == [
            claim_of(kube, ns, "left")["metadata"]["name"]
        ]

    wait_for("the claim left swept", swept, timeout=60, interval=1)
    assert each_allocated(kube, ns, ["left"])["left"][1] == planned  # still the plan
    kube.core.delete_namespaced_pod("left", ns, grace_period_seconds=0)
    claims_gone(kube, ns)
