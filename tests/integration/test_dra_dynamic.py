"""A repartition under DynamicMIG, and quota by devices, on the real API server, kube-scheduler
and kube-controller-manager (issue 32 items 4 and 6).

The simulated NVIDIA DRA driver runs with its alpha `DynamicMIG` gate on a Hopper node
(tests/cluster/dra_kubelet.py, `dynamic`): it publishes every possible MIG partition of each
card beside the whole card, all consuming the card's shared counters, and makes an instance
when a claim on it is prepared. A Pool with `spec.dra.mig: dynamic` has two MIG pods planned on
one whole card: gpupool writes no mig-manager label and cordons nothing (its plan has no
repartition action), writes each claim's allocation as the planned partition (placement
included), and kube-scheduler reserves and binds them, the counters keeping them apart; once the
kubelet prepared them the card reads as MIG and nothing changes. The team's cap counts MIG
devices by the memory slices they consume (the driver's counters): a third pod is held. When
the first pod ends, the kubelet unprepares its claim (the driver destroys the instance), and
the held pod is admitted to exactly the freed partition, still with no node action."""

from __future__ import annotations

import uuid

from kubernetes import client

from reconciler import conventions as C
from tests.support.wait import wait_for

from .dra_dynamic_support import allocation, claim_of, claim_pod, prepare
from .dra_support import (
    claims_made,
    documents,
    dra_nodes,
    each_allocated,
    gated,
    guaranteed,
    pool_doc,
    priority_doc,
    quota_doc,
)
from .gating import gated_namespace
from .harness import H100, controller, write_policy

G, V = C.DRA_GROUP, C.DRA_VERSION


def test_a_whole_card_becomes_mig_by_allocation_alone_and_the_cap_counts_counters(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    pool, ns = f"y{sfx}", gated_namespace(kube)
    node = f"dyn-{sfx}"
    sim, plugin = dra_nodes(kube, pool, node, model=H100, cards=2, dynamic=True)[node]
    write_policy(
        tmp_path,
        documents(
            pool_doc(pool, model=H100, dynamic=True, gpus_per_node=2),
            priority_doc(sfx, "low", "serve"),
            quota_doc(
                f"q{sfx}", ns, pool, max_gpus=1, mig={"3g.40gb": guaranteed(2, borrowingLimit=0)}
            ),
        ),
    )
    ctl = controller(kube, tmp_path, kube.clock)
    r = ctl.cycle()
    assert r.error is None, r.error
    mig = f"gpupool-{pool}-mig-3g-40gb"

    pods = ["ranker-0", "ranker-1"]
    for p in pods:
        claim_pod(kube, ns, p, mig, f"serve-{sfx}")
    claims_made(kube, ns, pods)
    actions: list[str] = []

    def admitted() -> bool:
        kube.clock.advance(30)
        r = ctl.cycle()
        assert r.error is None, r.error
        actions.extend(o.action for o in (r.applied.outcomes if r.applied else []))
        return not gated(kube, ns, pods)

    wait_for("both pods admitted", admitted, timeout=120, interval=1)
    got = each_allocated(kube, ns, pods, allocation)

    # no node action: no mig-manager label, no cordon, no repartition of any kind
    assert not [a for a in actions if a.split(":")[0] in ("mig-reconfigure", "cordon")], actions
    n = kube.core.read_node(node)
    assert C.MIG_CONFIG_LABEL not in (n.metadata.labels or {}) and not n.spec.unschedulable
    # the allocation is the plan: each pod got a 3g.40gb partition of the card planned for it,
    # at the placement the plan counted on, and the two partitions do not overlap
    starts = set()
    for p, (where, devices, planned, _) in got.items():
        assert where == node and len(devices) == 1, (p, devices)
        assert planned == f"gpu.nvidia.com/{node}/{devices[0]}", (p, planned)  # the placement
        assert "-mig-3g40gb-" in devices[0], got
        minor = int(devices[0].split("-")[1])
        starts.add((minor, int(devices[0].rsplit("-", 1)[1])))
    assert len({m for m, _ in starts}) == 1 and {s for _, s in starts} == {0, 4}, starts

    # allocated, not prepared yet (the agent still shows the card whole): no inconsistency
    kube.clock.advance(30)
    r = ctl.cycle()
    assert r.error is None, r.error
    codes = {f.code for f in r.plan.findings} if r.plan else set()
    assert "unknown-mig-instance" not in codes, codes

    # the kubelet prepares the claims: the driver makes the instances, the node agent shows
    # the card in MIG mode; gpupool reads it as the planned layout and changes nothing
    made = prepare(plugin, sim, [got[p][3] for p in pods])
    assert made == {next(iter(starts))[0]: [("3g.40gb", 0), ("3g.40gb", 4)]}
    kube.clock.advance(30)
    r = ctl.cycle()
    assert r.error is None, r.error
    kinds = [a.kind for a in r.plan.actions] if r.plan else []
    assert not {"mig-reconfigure", "cordon", "uncordon"} & set(kinds), kinds
    codes = {f.code for f in r.plan.findings} if r.plan else set()
    assert not {"partition-drift", "dra-slices-stale", "dra-dynamic-mig-manager"} & codes, codes

    # quota by counters: the team's cap (maxGPUs: 1) counts a MIG device as the memory slices
    # it takes of its card (reconciler/plan/cluster.py `card_equivalents`: the driver's
    # `memory-slice-<i>` counters, 8 a card), so two 3g.40gb (4 + 4) are the whole cap; the
    # third stays gated although the other card is free (in a gated namespace gpupool's
    # admission enforces it; the ResourceQuota there is kept empty: plan/objects/wanted.py)
    claim_pod(kube, ns, "ranker-2", mig, f"serve-{sfx}")
    wait_for("its claim made", lambda: claim_of(kube, ns, "ranker-2"), timeout=60)
    kube.clock.advance(30)
    r = ctl.cycle()
    assert r.error is None, r.error
    holds = [a for a in r.plan.actions if a.kind == "hold" and "ranker-2" in a.id]
    assert holds and holds[0].code == "held-cap", [a.id for a in r.plan.actions]
    assert "would use 1.5 GPUs, over its cap of 1" in holds[0].reason, holds[0].reason
    assert kube.core.read_namespaced_pod("ranker-2", ns).spec.scheduling_gates

    # ranker-0 ends: its claim goes, the kubelet unprepares it and the driver destroys its
    # instance; the card reads as the two-3g layout with one partition free, and ranker-2,
    # within the cap now, is admitted to exactly that partition (the same card and start)
    kube.core.delete_namespaced_pod("ranker-0", ns, grace_period_seconds=0)
    wait_for("ranker-0's claim gone", lambda: not _exists(kube, ns, got["ranker-0"][3]), timeout=90)
    card, _ = next(iter(starts))
    plugin.unprepare(got["ranker-0"][3]["metadata"]["uid"])
    sim.gpus.set_instances(card, sorted(plugin.made.get(card, [])))
    sim.publish()
    pods = ["ranker-2"]
    wait_for("ranker-2 admitted", admitted, timeout=120, interval=1)
    where, devices, planned, _ = wait_for(
        "ranker-2 allocated", lambda: allocation(kube, ns, "ranker-2"), timeout=60
    )
    assert planned == f"gpu.nvidia.com/{node}/{devices[0]}", planned
    assert devices == got["ranker-0"][1], (devices, got)  # the partition ranker-0 had
    assert not [a for a in actions if a.split(":")[0] in ("mig-reconfigure", "cordon")], actions


def _exists(kube, ns: str, claim: dict) -> bool:
    try:
        kube.custom.get_namespaced_custom_object(
            G, V, ns, "resourceclaims", claim["metadata"]["name"]
        )
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise
    return True
