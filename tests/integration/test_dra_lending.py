"""A lendingLimit per MIG profile on a dynamic-MIG DRA pool, on the real API server, scheduler
and controller-manager (issue 32's leftover: per-profile lending limits on DRA).

Two H100 cards under the simulated driver's `DynamicMIG` (tests/cluster/dra_kubelet.py): the
counters allow four 3g.40gb partitions. The lender team guarantees itself two and lends none
(`lendingLimit: 0`) and uses none; the borrower, with no guarantee, asks for three. gpupool's
admission lets two in (the room left, two, is what the lender keeps) and holds the third
(`held-lending`, its gate kept), as plan/stages/admission.py `_lending` says; the two admitted
are allocated by kube-scheduler's DRA allocator on the planned card and profile."""

from __future__ import annotations

import uuid

from tests.support.wait import wait_for

from .dra_dynamic_support import allocation, claim_pod
from .dra_support import (
    claims_made,
    documents,
    dra_nodes,
    gated,
    guaranteed,
    pool_doc,
    priority_doc,
    quota_doc,
)
from .gating import gated_namespace
from .harness import H100, controller, write_policy


def test_a_borrower_is_held_where_the_room_left_is_the_lenders_unlent_guarantee(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    pool, ns, lender = f"l{sfx}", gated_namespace(kube), f"lender-{sfx}"
    kube.ensure_namespace(lender)
    node = f"lend-{sfx}"
    dra_nodes(kube, pool, node, model=H100, cards=2, dynamic=True)
    write_policy(
        tmp_path,
        documents(
            pool_doc(pool, model=H100, dynamic=True, gpus_per_node=2),
            priority_doc(sfx, "serve"),
            quota_doc(f"borrower-{sfx}", ns, pool, mig={"3g.40gb": guaranteed(0)}, flow=True),
            quota_doc(
                f"lender-{sfx}",
                lender,
                pool,
                mig={"3g.40gb": guaranteed(2, lendingLimit=0)},
                flow=True,
            ),
        ),
    )
    ctl = controller(kube, tmp_path, kube.clock)
    r = ctl.cycle()
    assert r.error is None, r.error

    pods = ["ranker-0", "ranker-1", "ranker-2"]
    for p in pods:
        claim_pod(kube, ns, p, f"gpupool-{pool}-mig-3g-40gb", f"serve-{sfx}")
    claims_made(kube, ns, pods)
    holds: dict[str, str] = {}

    def two_admitted() -> bool:
        kube.clock.advance(30)
        r = ctl.cycle()
        assert r.error is None, r.error
        holds.update({a.target: a.code for a in r.plan.actions if a.kind == "hold"})
        return gated(kube, ns, pods) == ["ranker-2"]

    wait_for("the oldest two admitted, the third held", two_admitted, timeout=120, interval=1)
    assert holds.get(f"{ns}/ranker-2") == "held-lending", holds
    for p in pods[:2]:
        where, devices, planned, _ = wait_for(
            f"{p} allocated", lambda p=p: allocation(kube, ns, p), timeout=60
        )
        assert where == node and planned == f"gpu.nvidia.com/{node}/{devices[0]}", (p, planned)
        assert len(devices) == 1 and "-mig-3g40gb-" in devices[0], devices
