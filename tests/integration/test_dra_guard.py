"""The guard of a DRA pool (issue 32, plan/stages/drain_taints.py `_guards`), on the real API
server and kube-scheduler: gpupool writes one DeviceTaintRule per node of a DRA pool whose
Quotas' namespaces are all gated (NoSchedule `gpupool.io/guarded`, selecting the node's driver
pool, no device), and the claims it pins at exact admission tolerate it.

Whole cards: a claim outside gpupool's admission (its own claim on a DeviceClass like NVIDIA's
generic `gpu.nvidia.com`, in a namespace gpupool does not gate) is not allocated any of the
pool's cards, free or not, while gpupool's gated pod is admitted and allocated its planned card.
With `dra.guard: false` the rule is pruned, the outside claim gets a free card, and the
admitted pod keeps its allocation; with the guard back, the outside claim keeps its card and
its pod stays (NoSchedule evicts nothing).

DynamicMIG: the rule covers the partitions the driver publishes with counters (an outside claim
on any MIG device gets none), and the allocation gpupool writes on a guarded partition is
reserved and bound by kube-scheduler (it checks no taint on an allocated claim)."""

from __future__ import annotations

import time
import uuid

from reconciler import conventions as C
from reconciler.apply.handlers.dra_admit import GUARD_TOLERATION
from reconciler.plan.stages.drain_taints import GUARD_VALUE
from tests.support.wait import wait_for

from .dra_dynamic_support import allocation
from .dra_support import (
    allocated,
    allocated_devices,
    claim_of,
    claim_pod,
    dra_nodes,
    dra_policy,
    four_two_one_policy,
    taint_cycle,
    taint_rule,
)
from .gating import gated_namespace
from .harness import H100, controller, write_policy

G, V = C.DRA_GROUP, C.DRA_VERSION


def outside(kube, ns: str, name: str, kind: str, pool: str) -> None:
    """A pod gpupool does not admit, on the pool's nodes: a DeviceClass of its own (any device
    of NVIDIA's driver of `kind`, gpu or mig, as the driver's own class selects) and a
    ResourceClaim of its own for one such device."""
    expr = f"device.driver == '{C.DRA_DRIVER}' && device.attributes['{C.DRA_DRIVER}'].type == "
    cls = f"{name}-{pool}"
    kube.custom.create_cluster_custom_object(
        G,
        V,
        "deviceclasses",
        {
            "apiVersion": f"{G}/{V}",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {"selectors": [{"cel": {"expression": f"{expr}'{kind}'"}}]},
        },
    )
    kube.cleanup(lambda: kube.custom.delete_cluster_custom_object(G, V, "deviceclasses", cls))
    request = {"name": "gpu", "exactly": {"deviceClassName": cls, "count": 1}}
    kube.custom.create_namespaced_custom_object(
        G,
        V,
        ns,
        "resourceclaims",
        {
            "apiVersion": f"{G}/{V}",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [request]}},
        },
    )
    kube.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {C.POOL_LABEL: pool},
                "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example.com/work:1",
                        "resources": {"claims": [{"name": "gpus"}]},
                    }
                ],
                "terminationGracePeriodSeconds": 0,
            },
        },
    )


def outside_devices(kube, ns: str, name: str):
    return allocated_devices(
        kube.custom.get_namespaced_custom_object(G, V, ns, "resourceclaims", name)
    )


def admitted(kube, ctl, ns: str, pod: str) -> bool:
    taint_cycle(kube, ctl)
    return not kube.core.read_namespaced_pod(pod, ns).spec.scheduling_gates


def assert_guard(kube, node: str, pool: str) -> None:
    got = taint_rule(kube, f"gpupool-guard-{node}")
    assert got is not None
    assert got["metadata"]["labels"] == {C.MANAGED_BY_LABEL: C.MANAGED_BY, C.POOL_LABEL: pool}
    assert got["spec"]["deviceSelector"] == {"driver": C.DRA_DRIVER, "pool": node}
    taint = got["spec"]["taint"]
    assert (taint["key"], taint["value"], taint["effect"]) == (
        C.DRA_GUARD_TAINT,
        GUARD_VALUE,
        "NoSchedule",
    )


def test_a_guarded_pool_gives_its_cards_only_to_the_claims_gpupool_pins(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    pool, ns, node = f"d{sfx}", gated_namespace(kube), f"dra-g-{sfx}"
    dra_nodes(kube, pool, node, cards=4)
    text = dra_policy(sfx, ns, nodes=1, whole=2)
    write_policy(tmp_path, text)
    ctl = controller(kube, tmp_path, kube.clock)
    out = taint_cycle(kube, ctl)
    assert out.get(f"taint-device:guard:{node}") == "done: created", out
    assert_guard(kube, node, pool)

    # outside gpupool's admission: no card, although all four are free
    other = kube.new_namespace()
    outside(kube, other, "outside", "gpu", pool)
    time.sleep(6)  # the scheduler tries; every card of the node is guarded
    assert outside_devices(kube, other, "outside") is None

    # gpupool's gated pod: pinned (tolerating the guard) and allocated its planned card
    claim_pod(kube, ns, "trainer", f"gpupool-{pool}-gpu-1", f"low-{sfx}")
    wait_for("the trainer's claim made", lambda: claim_of(kube, ns, "trainer"), timeout=60)
    wait_for("the trainer admitted", lambda: admitted(kube, ctl, ns, "trainer"), 120, interval=1)
    where, devices, planned = wait_for(
        "the trainer allocated", lambda: allocated(kube, ns, "trainer"), timeout=60
    )
    assert where == node and devices == planned and len(devices) == 1, (devices, planned)
    request = claim_of(kube, ns, "trainer")["spec"]["devices"]["requests"][0]["exactly"]
    assert GUARD_TOLERATION in request["tolerations"], request
    assert outside_devices(kube, other, "outside") is None  # three cards free, guarded

    # guard off: the rule goes, the outside claim gets the free card, the trainer keeps its own
    write_policy(tmp_path, dra_policy(sfx, ns, nodes=1, whole=2, guard=False))
    out = taint_cycle(kube, ctl)
    assert out.get(f"prune-dra:DeviceTaintRule:gpupool-guard-{node}", "").startswith("done"), out
    assert taint_rule(kube, f"gpupool-guard-{node}") is None
    got = wait_for(
        "the outside claim allocated", lambda: outside_devices(kube, other, "outside"), 60
    )
    assert len(got) == 1 and got[0][0] == node and got[0][1] not in devices, got
    assert allocated(kube, ns, "trainer") == (where, devices, planned)

    # guard on again: the outside claim keeps its card, its pod is not evicted (NoSchedule)
    write_policy(tmp_path, text)
    out = taint_cycle(kube, ctl)
    assert out.get(f"taint-device:guard:{node}") == "done: created", out
    time.sleep(6)  # time for the device-taint eviction controller, were it to act
    assert outside_devices(kube, other, "outside") == got
    assert kube.core.read_namespaced_pod("outside", other).metadata.deletion_timestamp is None


def test_a_guard_covers_dynamic_mig_partitions_and_gpupools_allocation_is_reserved(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    pool, ns, node = f"g{sfx}", gated_namespace(kube), f"dyn-g-{sfx}"
    dra_nodes(kube, pool, node, model=H100, cards=1, dynamic=True)
    write_policy(tmp_path, four_two_one_policy(pool, sfx, ns))
    ctl = controller(kube, tmp_path, kube.clock)
    out = taint_cycle(kube, ctl)
    assert out.get(f"taint-device:guard:{node}") == "done: created", out
    assert_guard(kube, node, pool)

    other = kube.new_namespace()
    outside(kube, other, "outside-mig", "mig", pool)
    time.sleep(6)  # every partition of the card is guarded
    assert outside_devices(kube, other, "outside-mig") is None

    claim_pod(kube, ns, "ranker", f"gpupool-{pool}-mig-2g-20gb", f"serve-{sfx}")
    wait_for("the ranker's claim made", lambda: claim_of(kube, ns, "ranker"), timeout=60)
    wait_for("the ranker admitted", lambda: admitted(kube, ctl, ns, "ranker"), 120, interval=1)
    # gpupool wrote the allocation on a guarded partition; kube-scheduler reserved and bound it
    where, devices, planned, _ = wait_for(
        "the ranker bound", lambda: allocation(kube, ns, "ranker"), timeout=60
    )
    assert where == node and [f"{C.DRA_DRIVER}/{node}/{d}" for d in devices] == [planned]
    assert outside_devices(kube, other, "outside-mig") is None
