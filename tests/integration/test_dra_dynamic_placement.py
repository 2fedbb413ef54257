"""Exact admission on DynamicMIG pins the placement, not just the card and the profile (found
by bench/admission_openb.py's dynamic-MIG run, 2026-12-05: one admitted pod never bound). Two
partitions planned on one card in one cycle, a 4g.40gb (which fits only at memory slice 0 of an
H100) and a 2g.20gb planned beside it at 4. Pinned by card and profile only, the 2g.20gb whose
gate went first got the first free 2g.20gb in the driver's device order, `...-2g20gb-14-0`, and
the 4g.40gb could never be allocated. NVIDIA's driver publishes every placement with the same
attributes and CEL cannot see a device's name, so the plan names the partition
(`gpu.nvidia.com/<node>/<device>`) and gpupool writes it as the claim's allocation before the
gate goes (apply/handlers/dra_allocate.py): kube-scheduler reserves the claim and binds the pod
there, and each allocated device is the planned one."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from reconciler import conventions as C
from tests.support.wait import wait_for

from .dra_dynamic_support import allocation, claim_of, claim_pod
from .dra_support import (
    claims_made,
    dra_nodes,
    four_two_one_policy,
)
from .gating import gated_namespace
from .harness import H100, controller, write_policy

G, V = C.DRA_GROUP, C.DRA_VERSION


def test_two_partitions_planned_on_one_card_in_one_cycle_are_both_allocated(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    pool, ns = f"p{sfx}", gated_namespace(kube)
    dra_nodes(kube, pool, f"place-{sfx}", model=H100, cards=1, dynamic=True)
    write_policy(tmp_path, four_two_one_policy(pool, sfx, ns))
    ctl = controller(kube, tmp_path, kube.clock)
    assert ctl.cycle().error is None
    # named so that the 2g.20gb's Admit (and gate release) comes first
    pods = {"a-small": "2g-20gb", "z-big": "4g-40gb"}
    for p, prof in pods.items():
        claim_pod(kube, ns, p, f"gpupool-{pool}-mig-{prof}", f"serve-{sfx}")
    claims_made(kube, ns, pods)
    kube.clock.advance(30)
    r = ctl.cycle()
    assert r.error is None, r.error
    admits = [a.id for a in r.plan.actions if a.kind == "admit"]
    assert len(admits) == 2, admits  # both planned on the one card, in this cycle
    got = {}
    node = f"place-{sfx}"
    for p in pods:
        _, devices, planned, _ = wait_for(
            f"{p} allocated", lambda p=p: allocation(kube, ns, p), timeout=30
        )
        assert [f"gpu.nvidia.com/{node}/{d}" for d in devices] == planned.split(","), (p, planned)
        got[p] = devices
    assert got == {"a-small": ["gpu-0-mig-2g20gb-14-4"], "z-big": ["gpu-0-mig-4g40gb-5-0"]}

    # gpupool-controller-claims lets the controller allocate only what the claim's plan names,
    # and only on a claim no pod holds
    loose = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "loose",
            "annotations": {C.DRA_PLANNED_ANN: f"gpu.nvidia.com/{node}/gpu-0-mig-1g10gb-19-6"},
        },
        "spec": claim_of(kube, ns, "a-small")["spec"],
    }
    made = kube.custom.create_namespaced_custom_object(G, V, ns, "resourceclaims", loose)
    as_controller = client.CustomObjectsApi(kube.controller_client())
    made["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": "gpu.nvidia.com",
                        "pool": node,
                        "device": "gpu-0-mig-1g10gb-19-7",
                    }
                ]
            },
            "allocationTimestamp": "2026-12-05T10:00:00Z",
        }
    }
    with pytest.raises(client.ApiException) as refused:
        as_controller.replace_namespaced_custom_object_status(
            G, V, ns, "resourceclaims", "loose", made
        )
    assert refused.value.status == 403 and "gpupool-controller-claims" in refused.value.body
