"""DRA on the real API server (issue 32; Kubernetes 1.37.2 serves resource.k8s.io/v1).

- gpupool's objects for a pool with `spec.backend: dra`: the DeviceClasses (whose CEL the API
  server compiles on create) and the teams' ResourceClaimTemplates are created, left alone
  once converged, put back after someone edits them, and pruned when the pool leaves DRA;
  every DRA rule of deploy/rbac.yaml is needed by this run and none is refused.
- the simulated kubelets publish ResourceSlices the way NVIDIA's DRA driver does
  (tests/cluster/dra_slices.py), and the adapter reads them and who holds which device.
"""

from __future__ import annotations

import time
import uuid

from reconciler import conventions as C
from tests.cluster.dra_slices import gpu_device, mig_device, mig_name, node_slice

from .dra_support import dra_policy, pod_on_claim
from .harness import (
    audit_mark,
    controller,
    custom_object,
    write_policy,
    writes,
)
from .harness import outcome_texts as outcomes
from .rbac_rules import unused_controller_rules

G, V = C.DRA_GROUP, C.DRA_VERSION


def policy(sfx: str, ns: str, *, nodes: int = 1, whole: int = 2, backend: str = "dra") -> str:
    """Pool d<sfx> of `nodes` nodes, the low class only, a quota of `whole` cards and one
    3g.40gb."""
    return dra_policy(sfx, ns, nodes=nodes, whole=whole, mig=1, backend=backend, classes=("low",))


def get(kube, plural: str, name: str, ns: str = "") -> dict | None:
    return custom_object(kube, G, V, plural, name, ns)


def test_dra_objects_on_the_real_api_server(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    ns = kube.new_namespace()
    clock = kube.clock
    mark = audit_mark(kube)
    whole, mig = f"gpupool-d{sfx}-gpu", f"gpupool-d{sfx}-mig-3g-40gb"
    write_policy(tmp_path, policy(sfx, ns))
    ctl = controller(kube, tmp_path, clock)
    done = outcomes(ctl.cycle())
    want = {
        f"dra:DeviceClass:{whole}": "done: created",
        f"dra:DeviceClass:{mig}": "done: created",
        **{f"dra:ResourceClaimTemplate:{ns}/{whole}-{n}": "done: created" for n in (1, 2, 4)},
        f"dra:ResourceClaimTemplate:{ns}/{mig}": "done: created",
    }
    assert {k: v for k, v in done.items() if k.startswith("dra:")} == want
    cls = get(kube, "deviceclasses", mig)
    assert cls["metadata"]["labels"][C.MANAGED_BY_LABEL] == C.MANAGED_BY
    assert "profile == '3g.40gb'" in cls["spec"]["selectors"][0]["cel"]["expression"]
    tmpl = get(kube, "resourceclaimtemplates", f"{whole}-4", ns)
    assert tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 4
    # the quota counts devices of gpupool's classes (the API server takes the DRA quota keys)
    hard = kube.core.read_namespaced_resource_quota(f"gpupool-q{sfx}", ns).spec.hard
    assert hard == {
        f"{whole}.deviceclass.resource.k8s.io/devices": "2",
        f"{mig}.deviceclass.resource.k8s.io/devices": "1",
    }

    # the next cycle changes nothing
    write_mark = audit_mark(kube)
    clock.advance(30)
    again = ctl.cycle()
    assert again.converged and again.applied is None, again.summary
    assert writes(kube, since=write_mark, exclude=("leases", "reconcilerstatuses")) == []

    # drift: someone widens gpupool's class; gpupool puts its selector back (a merge patch)
    kube.custom.patch_cluster_custom_object(
        G, V, "deviceclasses", whole, {"spec": {"selectors": [{"cel": {"expression": "true"}}]}}
    )
    clock.advance(30)
    assert outcomes(ctl.cycle()) == {f"dra:DeviceClass:{whole}": "done: updated"}
    expr = get(kube, "deviceclasses", whole)["spec"]["selectors"][0]["cel"]["expression"]
    assert expr.startswith("device.driver == 'gpu.nvidia.com'")

    # the pool back on the device plugin: every DRA object gpupool made is pruned
    write_policy(tmp_path, policy(sfx, ns, backend="devicePlugin"))
    clock.advance(30)
    done = outcomes(ctl.cycle())
    assert {k for k in done if k.startswith("prune-dra:")} == {
        k.replace("dra:", "prune-dra:", 1) for k in want
    }
    assert get(kube, "deviceclasses", whole) is None
    assert get(kube, "resourceclaimtemplates", f"{whole}-1", ns) is None
    clock.advance(30)
    assert ctl.cycle().converged

    # least privilege: every DRA rule was needed by this run, and nothing was refused
    def dra_rule(label: str) -> bool:
        return (
            "resource.k8s.io" in label
            # exact admission's claim writes: used and checked in test_dra_admit.py
            and not ("resourceclaims" in label and " list " not in label)
            # a drain's taint rules (read, written, pruned): test_dra_taints.py
            and not ("devicetaintrules" in label and " list " not in label)
            # the watch cache (`Controller.run`; not started here): test_dra_informer.py
            and " watch " not in label
        )

    picked, unused = unused_controller_rules(kube, mark, dra_rule)
    assert picked == 12 and unused == [], unused


def test_slices_as_nvidias_driver_publishes_them_are_read(kube):
    """Slices published on the real API server (whole cards, static MIG), a claim allocated on
    them and reserved for a pod: the adapter reads devices and holders through the controller's
    own rights."""
    from reconciler.observe.kube import observe_cluster

    node = f"dra-{uuid.uuid4().hex[:6]}"
    devices = [mig_device(node, 0, "3g.40gb", 0, 4), mig_device(node, 0, "3g.40gb", 4, 4)]
    devices += [gpu_device(node, i) for i in (1, 2, 3)]
    body = node_slice(node, devices)
    body["spec"]["nodeName"] = None  # no Node object: a slice for all nodes' pool
    body["spec"]["allNodes"] = True
    kube.custom.create_cluster_custom_object(G, V, "resourceslices", body)
    kube.cleanup(
        lambda: kube.custom.delete_cluster_custom_object(
            G, V, "resourceslices", body["metadata"]["name"]
        )
    )
    observed = observe_cluster(kube.controller_client(), now=kube.clock.now)
    assert observed.dra is not None
    names = [d.name for d in observed.dra.devices(node)]
    assert names == [mig_name(0, "3g.40gb", 0), mig_name(0, "3g.40gb", 4)] + [
        f"gpu-{i}" for i in (1, 2, 3)
    ]


# ------------------------------------------------------------- the real scheduler allocates


def claim_pod(kube, ns: str, name: str, template: str, pool: str) -> None:
    """A pod on `pool`'s nodes whose claim is made from `template` (no priority class)."""
    source, on_pool = (
        {"resourceClaimTemplateName": template},
        {"nodeSelector": {C.POOL_LABEL: pool}},
    )
    kube.core.create_namespaced_pod(ns, pod_on_claim(name, source, on_pool))


def allocated(kube, ns: str, pod: str) -> list[tuple[str, str]] | None:
    """(pool, device) of the pod's claim once the scheduler allocated it and bound the pod."""
    p = kube.core.read_namespaced_pod(pod, ns)
    made = {s.name: s.resource_claim_name for s in (p.status.resource_claim_statuses or [])}
    if not p.spec.node_name or not made.get("gpus"):
        return None
    claim = get(kube, "resourceclaims", made["gpus"], ns)
    results = (((claim or {}).get("status") or {}).get("allocation") or {}).get("devices", {})
    out = [(r["pool"], r["device"]) for r in results.get("results", [])]
    assert {pool for pool, _ in out} <= {p.spec.node_name}, "devices of another node"
    return sorted(out) or None


def test_the_real_scheduler_allocates_from_the_drivers_slices(kube, tmp_path):
    """Two DRA nodes publish slices as NVIDIA's driver does (one with four whole cards, one
    with a card in static MIG mode, 2 x 3g.40gb, beside three whole cards); gpupool renders its
    classes, templates and device quota; kube-scheduler's DynamicResources plugin allocates:
    a 4-card trainer lands on the node with four whole cards, a MIG inference pod gets a 3g.40gb
    device; a second trainer is refused by the quota counted in devices until the first one is
    stopped, whose devices are then allocated again. gpupool reads every pod's request and held
    cards from the claims, equal to what the allocator chose."""
    from reconciler.observe.kube import observe_cluster
    from tests.support.wait import wait_for

    from .dra_support import dra_nodes

    sfx = uuid.uuid4().hex[:6]
    pool, ns = f"d{sfx}", kube.new_namespace()
    na, nb = f"dra-a-{sfx}", f"dra-b-{sfx}"
    dra_nodes(kube, pool, na, nb, mig={nb: {0: [("3g.40gb", 0), ("3g.40gb", 4)]}}, agent=False)
    write_policy(tmp_path, policy(sfx, ns, nodes=2, whole=4))
    ctl = controller(kube, tmp_path, kube.clock)
    outcomes(ctl.cycle())

    whole, mig = f"gpupool-{pool}-gpu", f"gpupool-{pool}-mig-3g-40gb"
    claim_pod(kube, ns, "trainer", f"{whole}-4", pool)
    claim_pod(kube, ns, "ranker", mig, pool)
    got = wait_for("the trainer allocated", lambda: allocated(kube, ns, "trainer"), timeout=60)
    assert got == [(na, f"gpu-{i}") for i in range(4)]
    got = wait_for("the ranker allocated", lambda: allocated(kube, ns, "ranker"), timeout=60)
    assert got in ([(nb, "gpu-0-mig-3g40gb-9-0")], [(nb, "gpu-0-mig-3g40gb-9-4")]), got

    # quota by devices: 4 whole cards are in use, a 2-card claim is refused at creation
    claim_pod(kube, ns, "second", f"{whole}-2", pool)
    time.sleep(5)  # the resourceclaim controller tries, the quota refuses (no claim: no allocation)
    assert allocated(kube, ns, "second") is None

    observed = observe_cluster(kube.controller_client(), now=kube.clock.now)
    by = {w.name: w for w in observed.workloads if w.namespace == ns}
    assert by["trainer"].request.gpus == 4 and sorted(a.gpu for a in by["trainer"].allocations) == [
        0,
        1,
        2,
        3,
    ]
    assert by["ranker"].request.mig == {"3g.40gb": 1}
    assert [(a.gpu, a.mig_profile) for a in by["ranker"].allocations] == [(0, "3g.40gb")]
    assert by["second"].request.gpus == 2 and not by["second"].allocations

    # the trainer stopped (as a preemption would): its claim goes, the quota frees, the
    # second trainer's claim is made and allocated on freed cards
    kube.core.delete_namespaced_pod("trainer", ns, grace_period_seconds=0)
    got = wait_for(
        "the second trainer allocated", lambda: allocated(kube, ns, "second"), timeout=90
    )
    assert len(got) == 2 and all(node in (na, nb) for node, _ in got)
