"""bench/soak_checks.py's count of lost actions (`lost_groups`), on pods as the API server
returns them: what counts as a gated group that gpupool should have admitted, and what is
waiting for a reason gpupool's own rules give (a gang not complete yet, a node back from a
failure and settling: left out of `capacity` by the caller)."""

from __future__ import annotations

from bench.soak_checks import NOT_LOST, PodLife, lost_groups, stopped_whole
from reconciler.conventions import (
    ADMISSION_GATE,
    ADMITTED_ANN,
    GANG_ANN,
    GANG_SIZE_ANN,
    GPU_RESOURCE,
)


def pod(name: str, gpus: int, *, node=None, gang=None, size=2, phase="Pending", **kw) -> dict:
    ann = {GANG_ANN: gang, GANG_SIZE_ANN: str(size)} if gang else {}
    ann |= kw.get("annotations", {})
    meta = {"name": name, "annotations": ann}
    if kw.get("deleting"):
        meta["deletionTimestamp"] = "2026-12-04T23:00:00Z"
    spec = {"containers": [{"resources": {"limits": {GPU_RESOURCE: str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    elif kw.get("gated", True):
        spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def counted(out: dict) -> int:
    return sum(len(v) for k, v in out.items() if k not in NOT_LOST)


def gang(name: str, gpus: int = 8, pods: int = 2) -> list[dict]:
    return [pod(f"{name}-{i}", gpus, gang=name, size=2) for i in range(pods)]


def test_a_gang_that_fits_two_free_nodes_is_lost():
    out = lost_groups(gang("g1"), {"n1": 8, "n2": 8})
    assert counted(out) == 1 and "g1 (2 pod(s), 16 cards" in out["gated, fits the free cards"][0]


def test_two_gangs_cannot_both_take_the_same_free_nodes():
    out = lost_groups(gang("g1") + gang("g2"), {"n1": 8, "n2": 8})
    assert counted(out) == 1


def test_a_gang_missing_a_member_waits_and_is_not_lost():
    """One pod of a 2-pod gang was never created (its creation fell in an API server restart):
    gpupool waits for the whole gang."""
    out = lost_groups(gang("g1", pods=1), {"n1": 8, "n2": 8})
    assert counted(out) == 0
    assert out["waiting, not lost: gang incomplete"] == ["g1 (1 of 2 pods)"]


def test_a_node_left_out_of_capacity_is_not_room():
    """n2 came back from a failure within nodeSettleTime: the caller leaves it out."""
    assert counted(lost_groups(gang("g1"), {"n1": 8})) == 0


def test_bound_pods_hold_their_cards_finished_and_terminating_ones_do_not():
    bound = [
        pod("busy", 4, node="n1", phase="Running"),
        pod("done", 8, node="n2", phase="Succeeded"),
        pod("going", 8, node="n2", phase="Running", deleting=True),
    ]
    out = lost_groups(bound + gang("g1"), {"n1": 8, "n2": 8})
    assert counted(out) == 0  # n1 has 4 free: one 8-card pod fits n2 only
    out = lost_groups(bound + [pod("p1", 4), pod("p2", 8)], {"n1": 8, "n2": 8})
    assert len(out["gated, fits the free cards"]) == 2


def test_an_admitted_pod_still_unbound_is_lost():
    p = pod("p1", 1, gated=False, annotations={ADMITTED_ANN: "n1"})
    out = lost_groups([p], {"n1": 8})
    assert out["admitted, unbound"] == ["p1 -> n1"] and counted(out) == 1


def life(name: str, *, ended=None, end="", stopping=None) -> PodLife:
    return PodLife(name, 8, "g", 0.0, running_at=1.0, ended_at=ended, end=end, stopping_at=stopping)


def test_a_gang_is_stopped_whole_when_its_other_members_stop_within_the_window():
    """Lost at t=100 s, window 60 s."""
    assert stopped_whole([life("a", stopping=130.0)], 100.0, 60.0) is True
    assert stopped_whole([life("a", stopping=190.0)], 100.0, 60.0) is False  # too late
    assert stopped_whole([life("a")], 100.0, 60.0) is False  # ran on
    assert stopped_whole([life("a", ended=120.0, end="Failed:Evicted")], 100.0, 60.0) is True


def test_a_gang_that_finished_or_had_nothing_else_running_is_not_judged():
    assert stopped_whole([life("a", ended=101.0, end="Succeeded")], 100.0, 60.0) is None
    assert stopped_whole([life("a", ended=90.0, end="Succeeded")], 100.0, 60.0) is None
    assert stopped_whole([], 100.0, 60.0) is None
