"""An SRE's scenarios, one group per class of wrong decision found in issue 11.

Each test builds a small two-node A100 cluster on the golden desired state
(tests/plan/scenarios.py: serving may preempt training-low and spot, training-high preempts
spot, budget 4/h, minRuntime 15m; team-a guaranteed 4 + borrows 4, cap 8; team-b guaranteed
4 + borrows 12, cap 16) and asserts what a careful operator would accept: which workloads
are stopped, which cards change, and what the findings say. Where a decision spans cycles,
the plan's effects are applied with `reconciler.sim.effects.step` and the next plan is
checked too.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from reconciler.conventions import CORDONED_FOR_ANN
from reconciler.observe.builders import gpu, mig_pod, node, shared_pod, snapshot, training
from reconciler.observe.model import InferenceService, Request, Taint, Workload
from reconciler.plan.cluster import build_cluster
from reconciler.plan.run import Run
from reconciler.plan.stages.whole_cards import _place_one
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import A100, BAL, NOW, _objects
from tests.plan.support import ago, desired, job, pend, run, two_nodes

HIGH, LOW = "training-high", "training-low"


def only_holds(p) -> bool:
    """Nothing changes but the reason shown on gated pods that wait (`hold`)."""
    return all(a.kind == "hold" for a in p.actions)


def ids(p, kind: str) -> set[str]:
    return {a.target for a in p.actions if a.kind == kind}


H100 = "H100-SXM5-80GB"


def hopper_nodes() -> list:
    """`two_nodes()` with H100 cards, whose MIG mode changes one card at a time."""
    return [node(f"a100-{i}", "a100", H100, [gpu(k, model=H100) for k in range(8)]) for i in (1, 2)]


def codes(p) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in p.findings:
        out.setdefault(f.code, set()).add(f.subject)
    return out


def full_of_low_training() -> list[Workload]:
    """Every card of both nodes runs preemptible training-low jobs (old enough, checkpointed)."""
    return [job("team-b", "wide-1", "a100-1", 8), job("team-b", "wide-2", "a100-2", 8)]


# =========================================================================== 1. unreachable


def test_shared_pod_larger_than_a_card_disrupts_nothing():
    work = full_of_low_training() + [
        shared_pod("serve", "huge", None, 5, pool="a100")  # a card offers 4 slices
    ]
    p = run(desired(), two_nodes(), work)
    assert only_holds(p)
    assert "serve/huge" in codes(p)["unreachable"]
    assert "slices" in next(f.message for f in p.findings if f.code == "unreachable")


def test_mig_profile_no_layout_offers_disrupts_nothing():
    work = full_of_low_training() + [mig_pod("serve", "big", None, "7g.80gb", pool="a100")]
    p = run(desired(), two_nodes(), work)
    assert only_holds(p)
    assert "serve/big" in codes(p)["unreachable"]


def test_gang_larger_than_any_node_disrupts_nothing_and_takes_no_cap():
    work = [
        job("team-b", "small", "a100-1", [0], "spot"),
        pend("team-a", "giant", 16, HIGH),
        pend("team-a", "fits", 4, HIGH, created=0.1),
    ]
    p = run(desired(), two_nodes(), work)
    assert "team-a/giant" in codes(p)["unreachable"]
    assert "held-cap" not in codes(p)  # the giant does not take team-a's cap from `fits`
    assert not ids(p, "preempt")


# =========================================================================== 2. drift


def test_shared_slice_count_changed_by_policy_is_repartitioned_when_empty():
    # the policy says x4; an empty node still runs x8 from an older policy: the device plugin
    # shares per node, so the node's config changes, every card with it
    nodes = two_nodes([gpu(i, shared=8) for i in range(8)])
    p = run(desired(), nodes, [])
    (sharing,) = [a for a in p.actions if a.kind == "set-sharing"]
    assert (sharing.slices, sharing.plain_cards) == (4, 8)
    assert {(c.before, c.after) for c in sharing.cards} == {("shared x8", "shared x4")}
    assert len(sharing.cards) == 8


def test_one_busy_card_keeps_its_node_at_the_old_slice_count():
    nodes = two_nodes([gpu(i, shared=8) for i in range(8)])
    p = run(desired(), nodes, [shared_pod("serve", "old", "a100-1", 1, started=ago(2))])
    assert not [a for a in p.actions if a.kind == "set-sharing"]
    assert "a100-1/gpu0" in codes(p)["partition-drift"]


def test_busy_drifted_shared_card_is_counted_where_kube_scheduler_binds():
    # x8 card with 3 pods on it, the policy says x4: the device plugin still offers its 5
    # free slices and kube-scheduler binds the new pod there, so no x4 card is made for it
    # (it would stay empty and be given back: a loop); the finding says why and warns
    nodes = two_nodes([gpu(0, shared=8)] + [gpu(i, mig=BAL, model=A100) for i in range(1, 8)])
    work = [shared_pod("serve", f"chat-{i}", "a100-1", 1, started=ago(2)) for i in range(3)]
    # ungated: kube-scheduler places it (a gated pod that does not fit the x8 slices' memory
    # waits instead: tests/plan/test_drift_overcommit.py)
    new = shared_pod("serve", "new", None, 1, pool="a100")
    work += [new.model_copy(update={"admission": "scheduler"})]
    p = run(desired(), nodes, work)
    assert "a100-1/gpu0" in codes(p)["partition-drift"]
    assert not [a for a in p.actions if a.kind in ("set-sharing", "mig-reconfigure")]
    (drift,) = [f for f in p.findings if f.code == "partition-drift"]
    assert "once its workloads finish" in drift.message and "memory" in drift.message


def test_empty_mig_card_with_a_layout_the_policy_dropped_is_reshaped():
    nodes = two_nodes([gpu(0, mig=["7g.80gb"], model=A100)] + [gpu(i) for i in range(1, 8)])
    p = run(desired(), nodes, [])
    mig = [a for a in p.actions if a.kind == "mig-reconfigure"]
    assert [(c.before, c.after) for a in mig for c in a.cards] == [
        ("MIG[7g.80gb]", "MIG[" + ", ".join(sorted(BAL)) + "]")
    ]


def test_shared_card_in_a_pool_without_shared_policy_does_not_crash():
    text = desired().replace("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "")
    nodes = two_nodes([gpu(0, shared=4)] + [gpu(i, mig=BAL, model=A100) for i in range(1, 8)])
    busy = nodes
    p = run(text, nodes, [])
    assert [c.after for a in p.actions if a.kind == "mig-reconfigure" for c in a.cards] == [
        "MIG[" + ", ".join(sorted(BAL)) + "]"
    ]
    p = run(text, busy, [shared_pod("serve", "old", "a100-1", 1, started=ago(2))])
    assert "a100-1/gpu0" in codes(p)["partition-drift"] and only_holds(p)


def test_empty_mig_card_of_a_shared_node_becomes_shared_for_shared_demand():
    # inference may have 8 cards and has them: the MIG card turns off MIG and joins the node's
    # slices (its plain cards are shared, so a card leaving MIG is shared too). On H100 a MIG
    # mode change costs only the card; on A100 it resets every GPU of the node, whose shared
    # cards serve: it waits
    def cards(model):
        return [gpu(0, mig=BAL, model=model)] + [  # noqa: E731
            gpu(i, shared=4, model=model) for i in range(1, 8)
        ]

    busy = [shared_pod("serve", f"s{i}", "a100-1", 4, gpu_index=i) for i in range(1, 8)]
    chat = shared_pod("serve", "chat", None, 2, pool="a100")
    h100 = desired().replace(A100, "H100-SXM5-80GB")
    nodes = [node("a100-1", "a100", "H100-SXM5-80GB", cards("H100-SXM5-80GB"))]
    p = run(h100, nodes, [*busy, chat])
    assert [(a.kind, c.gpu, c.after) for a in p.actions for c in getattr(a, "cards", ())] == [
        ("mig-reconfigure", 0, "shared x4")
    ]
    p = run(desired(), [node("a100-1", "a100", A100, cards(A100))], [*busy, chat])
    assert not [a for a in p.actions if a.kind == "mig-reconfigure"]
    assert "serve/chat" in codes(p)["waits"]


def test_a_node_is_shared_whole_or_not_at_all():
    # maxGPUs 1: sharing a node shares all 7 of its plain cards, over the limit: it waits
    text = desired().replace("maxGPUs: 8\n    prefer", "maxGPUs: 1\n    prefer")
    nodes = two_nodes([gpu(0, mig=BAL, model=A100)] + [gpu(i) for i in range(1, 8)])
    p = run(text, nodes, [shared_pod("serve", "chat", None, 2, pool="a100")])
    assert not [a for a in p.actions if a.kind in ("set-sharing", "mig-reconfigure")]
    assert "serve/chat" in codes(p)["waits"]
    # room for it: the node with the fewest plain cards is shared whole (7 cards, not 8)
    p = run(desired(), nodes, [shared_pod("serve", "chat", None, 2, pool="a100")])
    (sharing,) = [a for a in p.actions if a.kind == "set-sharing"]
    assert (sharing.target, sharing.slices, len(sharing.cards)) == ("a100-1", 4, 7)
    assert sharing.plain_cards == 7


# =========================================================================== 3. node health


def test_node_cordoned_by_an_sre_is_not_capacity():
    cordoned = node("a100-1", "a100", A100).model_copy(update={"unschedulable": True})
    nodes = [cordoned, node("a100-2", "a100", A100)]
    work = [job("team-b", "wide-2", "a100-2", 8)]
    work += [mig_pod("serve", "ranker", None, "3g.40gb", cls="serving", pool="a100")]
    p = run(desired(), nodes, work)
    assert not [a for a in p.actions if a.target == "a100-1"]  # no repartition, no uncordon
    assert "a100-1" in codes(p)["node-unavailable"]
    assert ids(p, "preempt") == {"team-b/wide-2"}  # the only node that can take it


def test_gang_is_not_placed_on_a_notready_node():
    sick = node("a100-2", "a100", A100).model_copy(update={"ready": False})
    nodes = [node("a100-1", "a100", A100), sick]
    work = [job("team-b", "spot", "a100-1", 8, "spot"), pend("team-a", "llm", 8, HIGH)]
    p = run(desired(), nodes, work)
    assert ids(p, "preempt") == {"team-b/spot"}
    assert "a100-2" in codes(p)["node-unavailable"]


def test_tainted_node_is_not_capacity_but_the_gpu_taint_is_tolerated():
    taint = Taint(key="maintenance", value="disk", effect="NoSchedule")
    gpu_taint = Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")
    nodes = [
        node("a100-1", "a100", A100).model_copy(update={"taints": [taint]}),
        node("a100-2", "a100", A100).model_copy(update={"taints": [gpu_taint]}),
    ]
    work = [mig_pod("serve", "ranker", None, "3g.40gb", cls="serving", pool="a100")]
    p = run(desired(), nodes, work)
    assert {a.target for a in p.actions if a.kind == "mig-reconfigure"} == {"a100-2"}
    assert codes(p)["node-unavailable"] == {"a100-1"}


def test_node_gpupool_cordoned_itself_is_still_finished():
    ours = node("a100-1", "a100", A100).model_copy(
        update={"unschedulable": True, "annotations": {CORDONED_FOR_ANN: "repartition"}}
    )
    p = run(desired(), [ours, node("a100-2", "a100", A100)], [])
    assert ids(p, "uncordon") == {"a100-1"}
    assert "node-unavailable" not in codes(p)


# =========================================================================== 4. victim size


def test_one_mig_instance_preempts_the_one_gpu_job_not_the_eight_gpu_job():
    work = [
        job("team-b", "eight", "a100-1", 8),
        job("team-b", "one", "a100-2", [0]),
        job("team-b", "seven", "a100-2", [1, 2, 3, 4, 5, 6, 7], HIGH),
    ]
    work += [mig_pod("serve", "ranker", None, "1g.10gb", cls="serving", pool="a100")]
    # H100: a MIG mode change costs one card
    p = run(desired().replace(A100, H100), hopper_nodes(), work)
    assert ids(p, "preempt") == {"team-b/one"}
    # A100: it resets every GPU of the node, and a100-2 also runs a job that may not be
    # preempted: a100-1 is drained instead, the only node that can be
    p = run(desired(), two_nodes(), work)
    assert ids(p, "preempt") == {"team-b/eight"}


def test_warm_minimum_never_preempts():
    p = run(desired(("minGPUs: 0\n", "minGPUs: 2\n")), two_nodes(), full_of_low_training())
    assert only_holds(p)
    assert "a100" in codes(p)["warm-short"]


# =========================================================================== 5. quotas


def borrowed_cluster() -> list[Workload]:
    """team-b runs all 16 cards (guarantee 4, borrowing 12); team-a runs nothing."""
    return [
        job("team-b", "b-1", "a100-1", [0, 1, 2, 3]),
        job("team-b", "b-2", "a100-1", [4, 5, 6, 7]),
        job("team-b", "b-3", "a100-2", [0, 1, 2, 3]),
        job("team-b", "b-4", "a100-2", [4, 5, 6, 7], started=8, ckpt=1),
    ]


def test_team_coming_back_to_its_guarantee_preempts_a_borrower():
    # training-low has no preemption rule for spot: only the Quota promise frees room
    spot = [w.model_copy(update={"priority_class": "spot"}) for w in borrowed_cluster()]
    p = run(desired(), two_nodes(), spot + [pend("team-a", "mine", 4, LOW)])
    assert len(ids(p, "preempt")) == 1
    (victim,) = [a for a in p.actions if a.kind == "preempt"]
    assert victim.target.startswith("team-b/") and "guarantee" in victim.reason
    assert victim.preemptor == "team-a/mine"


def test_a_guarantee_is_not_reclaimed_from_work_of_the_same_or_higher_priority():
    # ungated, the victim's owner recreates it at once and kube-scheduler ranks it first
    # (higher priority) or races it (same priority): the default reclaimWithinCohort is
    # LowerPriority (gated namespaces: tests/plan/test_reclaim.py)
    for cls in (LOW, HIGH):
        work = [w.model_copy(update={"priority_class": cls}) for w in borrowed_cluster()]
        p = run(desired(), two_nodes(), work + [pend("team-a", "mine", 4, LOW)])
        assert not ids(p, "preempt"), cls


def test_team_beyond_its_guarantee_does_not_reclaim():
    work = borrowed_cluster() + [pend("team-a", "mine", 4, LOW), pend("team-a", "more", 2, LOW)]
    work[0] = job("team-a", "a-1", "a100-1", [0, 1, 2, 3])  # team-a already uses 4 = guarantee
    p = run(desired(), two_nodes(), work)
    assert not ids(p, "preempt")


def test_lending_limit_keeps_an_unused_guarantee_from_borrowers():
    text = desired(
        (
            "pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 4}}]",
            "pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 4, lendingLimit: 0}}]",
        )
    )
    work = [job("team-b", "b-1", "a100-1", 8), pend("team-b", "more", 8, LOW)]
    p = run(text, two_nodes(), work)
    assert "team-b/more" in codes(p)["held-lending"]
    p = run(desired(), two_nodes(), work)  # without lendingLimit the free node is borrowed
    assert "held-lending" not in codes(p)


def test_scale_up_respects_the_namespace_mig_quota():
    # team-b may hold 8 x 3g.40gb (ResourceQuota); it runs 8; the service wants more
    gpus1 = [gpu(i, mig=["3g.40gb", "3g.40gb"], model=A100) if i < 4 else gpu(i) for i in range(8)]
    work = [
        mig_pod("team-b", f"rank-{i}", "a100-1", "3g.40gb", gpu_index=i // 2, start=4 * (i % 2))
        for i in range(8)
    ]
    work += [job("team-b", "seven", "a100-2", [0, 1, 2, 3, 4, 5, 6])]
    svc = InferenceService(
        namespace="team-b",
        name="rank",
        replicas=8,
        replica_request=Request(mig={"3g.40gb": 1}),
        priority_class="serving",
        queue_length=500,
    )
    scaling = """\
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {name: rank}
spec:
  pool: a100
  targets: [{namespace: team-b, name: rank, minReplicas: 1, maxReplicas: 16}]
  scaleUp: {queueLengthPerReplica: 10, step: 2, cooldown: 2m}
  scaleDown: {queueLengthPerReplica: 1, step: 1, cooldown: 10m}
"""
    p = run(desired(extra=scaling), two_nodes(gpus1), work, services=[svc])
    assert not ids(p, "scale") and not ids(p, "preempt")
    assert "team-b/rank" in codes(p)["scale-held"]


def test_training_max_gpus_is_enforced():
    text = desired(
        (
            "training: {minGPUs: 4, topology: node}",
            "training: {minGPUs: 4, maxGPUs: 8, topology: node}",
        )
    )
    work = [job("team-b", "b-1", "a100-1", 8), pend("team-b", "more", 2, LOW)]
    p = run(text, two_nodes(), work)
    assert "team-b/more" in codes(p)["held-training-max"]


# =========================================================================== 6. one eviction gate


def defrag_for_spot(budget: int, started_h: float, cls: str) -> list[Workload]:
    """a100-1: one blocker on card 0; a100-2 has a free card; a spot gang wants 8 on a node."""
    return [
        training(
            "team-b", "blocker", "a100-1", [0], cls=cls, started=ago(started_h), migratable=True
        ),
        job("team-b", "rest", "a100-2", [0, 1, 2, 3, 4, 5, 6]),
        pend("team-b", "spot-gang", 8, "spot"),
    ]


def test_defrag_never_moves_a_fresh_nonpreemptible_higher_priority_job_for_spot():
    work = defrag_for_spot(0, 2 / 60, HIGH)
    p = run(desired(), two_nodes(), work)
    assert not ids(p, "move")


def test_defrag_moves_spend_the_budget():
    work = defrag_for_spot(0, 2, "spot")
    spent = {"recent_preemptions": [ago(0.1 * i) for i in range(1, 5)]}
    p = run(desired(), two_nodes(), work, **spent)
    assert not ids(p, "move")
    assert "team-b/spot-gang" in codes(p)["budget-spent"]


def test_idle_reclaim_respects_min_runtime():
    gpus2 = [gpu(i, util=0.5, idle_since=ago(5)) for i in range(8)]
    work = [training("team-b", "young", "a100-2", [0, 1], started=ago(0.1), checkpoint=None)]
    p = run(desired(), two_nodes(None, gpus2), work)
    assert not ids(p, "reclaim")


def test_budget_spent_does_not_give_inference_back_to_spot_while_serving_waits():
    nodes = two_nodes(
        [gpu(0, mig=["3g.40gb", "3g.40gb"], model=A100)] + [gpu(i) for i in range(1, 8)]
    )
    work = [
        job("team-b", "w1", "a100-1", [1, 2, 3, 4, 5, 6, 7]),
        job("team-b", "w2", "a100-2", 8),
        shared_pod("serve", "chat", None, 1, pool="a100"),  # would need a preemption
        pend("team-b", "spot-1", 1, "spot"),
    ]
    spent = {"recent_preemptions": [ago(0.1 * i) for i in range(1, 5)]}
    p = run(desired(), nodes, work, **spent)
    afters = [c.after for a in p.actions for c in getattr(a, "cards", ())]
    assert "whole" not in afters  # the empty MIG card is not turned back for the spot job


# =========================================================================== 7. idle since start


def test_idle_counts_from_the_jobs_start_not_the_cards():
    gpus2 = [gpu(i, util=0.5, idle_since=ago(3)) for i in range(8)]
    young = [job("team-b", "young", "a100-2", [0, 1], started=10 / 60)]
    assert not ids(run(desired(), two_nodes(None, gpus2), young), "reclaim")
    old = [job("team-b", "old", "a100-2", [0, 1], started=2)]
    p = run(desired(), two_nodes(None, gpus2), old)
    (r,) = [a for a in p.actions if a.kind == "reclaim"]
    assert "for 2h" in r.reason


# =========================================================================== 8. topology


def test_nvlink_gang_takes_a_whole_island_on_another_node():
    text = desired(("topology: node", "topology: nvlink"))
    # a100-1: 2 free on each island (best fit by count); a100-2: island 1 (cards 4-7) free
    work = [
        job("team-b", "a", "a100-1", [0, 1]),
        job("team-b", "b", "a100-1", [4, 5]),
        job("team-b", "c", "a100-2", [0, 1, 2, 3]),
    ]
    d = load([SourceFile("desired.yaml", text)])
    obs = snapshot(NOW, two_nodes(), work, **_objects(text))
    r = Run(d, obs, NOW, build_cluster(d, obs))
    got = _place_one(r, r.cluster.pools["a100"], 4, "team-a/gang")
    assert {(g.node, g.island) for g in got} == {("a100-2", 1)}


# =========================================================================== 9. multi-pod gangs


def two_pod_gang(name: str, n: int, cls: str) -> list[Workload]:
    return [
        training(
            "other", f"{name}-{i}", None, n, cls=cls, pool="a100", created=ago(0.2)
        ).model_copy(update={"owner_name": name})
        for i in range(2)
    ]


def test_a_two_pod_gang_gets_room_for_both_pods():
    work = [job("team-b", "s1", "a100-1", 8, "spot"), job("team-b", "s2", "a100-2", 8, "spot")]
    work += two_pod_gang("llm", 8, HIGH)
    p = run(desired(), two_nodes(), work)
    assert ids(p, "preempt") == {"team-b/s1", "team-b/s2"}


def test_a_two_pod_gang_blocked_by_the_budget_says_so_and_stops_nothing():
    work = [job("team-b", "s1", "a100-1", 8, "spot"), job("team-b", "s2", "a100-2", 8, "spot")]
    work += two_pod_gang("llm", 8, HIGH)
    spent = {"recent_preemptions": [ago(0.1 * i) for i in range(1, 4)]}  # 1 left, 2 needed
    p = run(desired(), two_nodes(), work, **spent)
    assert not ids(p, "preempt")
    assert "other/llm-0" in codes(p)["budget-spent"]


def test_stopping_one_pod_of_a_running_job_stops_the_whole_job():
    pods = [
        job("team-b", f"dist-{i}", f"a100-{i + 1}", [0]).model_copy(update={"owner_name": "dist"})
        for i in range(2)
    ]
    work = pods + [
        job("team-b", "fill-1", "a100-1", [1, 2, 3, 4, 5, 6, 7], HIGH),
        job("team-b", "fill-2", "a100-2", [1, 2, 3, 4, 5, 6, 7], HIGH),
        mig_pod("serve", "ranker", None, "1g.10gb", cls="serving", pool="a100"),
    ]
    p = run(desired().replace(A100, H100), hopper_nodes(), work)  # a card's mode change: one card
    assert ids(p, "preempt") == {"team-b/dist-0", "team-b/dist-1"}


# =========================================================================== 13. wording


def test_held_demand_is_never_called_no_changes():
    work = [job("team-a", "a", "a100-1", 8, HIGH), pend("team-a", "more", 1, LOW)]
    p = run(desired(), two_nodes(), work)
    assert only_holds(p) and "held-cap" in codes(p)
    assert [a.target for a in p.actions] == ["team-a/more"]  # the reason, on the pod
    assert not p.summary.startswith("No changes")


def test_one_hour_later_the_budget_is_back():
    work = [job("team-b", "s1", "a100-1", 8, "spot"), pend("team-a", "llm", 8, HIGH)]
    spent = {"recent_preemptions": [ago(0.1 * i) for i in range(1, 5)]}
    p = run(desired(), [node("a100-1", "a100", A100)], work, **spent)
    assert not ids(p, "preempt") and "team-a/llm" in codes(p)["budget-spent"]
    later = NOW + timedelta(hours=1)
    p = run(desired(), [node("a100-1", "a100", A100)], work, now=later, **spent)
    assert ids(p, "preempt") == {"team-b/s1"}


# =========================================================================== priority as seen


def test_default_class_is_the_global_default_unless_another_class_holds_it():
    from reconciler.observe.model import PriorityClassObject
    from reconciler.plan.planner import plan

    d = load([SourceFile("desired.yaml", desired())])
    classes = _objects(desired())["priority_classes"]
    assert [c.name for c in classes if c.global_default] == ["training-low"]
    plain = [c.model_copy(update={"global_default": False}) for c in classes]
    p = plan(d, snapshot(NOW, two_nodes(), [], priority_classes=plain))
    (pc,) = [a for a in p.actions if a.kind == "priority-class"]
    assert (pc.target, pc.global_default) == ("training-low", True)
    other = PriorityClassObject(name="site-default", value=5, global_default=True)
    p = plan(d, snapshot(NOW, two_nodes(), [], priority_classes=[*plain, other]))
    assert not [a for a in p.actions if a.kind == "priority-class"]
    assert "training-low" in codes(p)["default-class-taken"]


def test_objects_gpupool_does_not_manage_are_never_changed_but_reported():
    """A policy class or team quota whose name is taken by an object without gpupool's
    managed-by label (a site's own PriorityClass, a quota someone made by hand) is not
    rewritten (a PriorityClass update is a delete and recreate: every pod using it would change
    priority) nor deleted: a foreign-object finding names it. One that matches the policy
    already is simply used. Once labelled as gpupool's, it is updated like any other."""
    from reconciler.plan.planner import plan

    d = load([SourceFile("desired.yaml", desired())])
    objs = _objects(desired())
    classes = {c.name: c for c in objs["priority_classes"]}
    site = classes["training-low"].model_copy(update={"value": 7, "managed_by": ""})
    (quota,) = objs["quotas"][:1]
    theirs = quota.model_copy(
        update={"hard": {"requests.nvidia.com/gpu": "1"}, "managed_by": "ops"}
    )
    snap = snapshot(
        NOW,
        two_nodes(),
        [],
        priority_classes=[*(c for n, c in classes.items() if n != "training-low"), site],
        quotas=[theirs, *objs["quotas"][1:]],
    )
    p = plan(d, snap)
    assert not [a for a in p.actions if a.kind in ("priority-class", "quota")]
    found = {f.subject: f.message for f in p.findings if f.code == "foreign-object"}
    assert set(found) == {
        "PriorityClass training-low",
        f"ResourceQuota {quota.namespace}/{quota.name}",
    }
    assert "no app.kubernetes.io/managed-by label" in found["PriorityClass training-low"]
    assert "managed by ops" in found[f"ResourceQuota {quota.namespace}/{quota.name}"]
    # the same objects, matching the policy: used as they are, nothing to say
    same = snapshot(
        NOW,
        two_nodes(),
        [],
        priority_classes=[c.model_copy(update={"managed_by": ""}) for c in classes.values()],
        quotas=objs["quotas"],
    )
    assert "foreign-object" not in codes(plan(d, same))
    # handed over (labelled): updated
    ours = snap.model_copy(
        update={
            "priority_classes": [
                c.model_copy(update={"managed_by": "gpupool"}) for c in snap.priority_classes
            ]
        }
    )
    assert [a.target for a in plan(d, ours).actions if a.kind == "priority-class"] == [
        "training-low"
    ]


def test_a_pending_pod_without_a_class_preempts_nothing():
    # defaultClass training-high may preempt spot, but a pod that exists without a class was
    # created while no class was globalDefault: kube-scheduler gives it priority 0, and a spot
    # victim recreated at 1000 would be bound before it
    text = desired().replace("defaultClass: training-low", "defaultClass: training-high")
    work = [job("team-b", "spot", "a100-1", 8, "spot"), job("team-b", "s2", "a100-2", 8, "spot")]
    named = run(text, two_nodes(), [*work, pend("team-a", "named", 8, HIGH)])
    assert ids(named, "preempt")  # the same pod with its class does
    classless = run(text, two_nodes(), [*work, pend("team-a", "classless", 8, None)])
    assert not ids(classless, "preempt")


# =========================================================================== MPS


def test_mps_never_shares_a_node_with_mig_cards_and_gives_a_pod_one_slice():
    text = (
        desired()
        .replace(
            "shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}",
            "shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi, strategy: mps}",
        )
        .replace("maxGPUs: 8\n    prefer", "maxGPUs: 16\n    prefer")
    )
    # a100-1 has a MIG card: the device plugin refuses MPS there; a100-2 is shared whole
    nodes = two_nodes([gpu(0, mig=BAL, model=A100)] + [gpu(i) for i in range(1, 8)])
    p = run(text, nodes, [shared_pod("serve", "chat", None, 1, pool="a100")])
    (sharing,) = [a for a in p.actions if a.kind == "set-sharing"]
    assert (sharing.target, sharing.strategy, sharing.plain_cards) == ("a100-2", "mps", 8)
    # more than one slice per pod: the plugin fails it under MPS (failRequestsGreaterThanOne)
    p = run(text, nodes, [shared_pod("serve", "big", None, 2, pool="a100")])
    assert "serve/big" in codes(p)["unreachable"] and only_holds(p)


# =========================================================================== memory honesty


def test_shared_work_declaring_more_memory_than_a_card_never_runs():
    big = shared_pod("serve", "big", None, 1, pool="a100")
    big = big.model_copy(update={"request": Request(shared_slices=1, gpu_memory_mib=90 * 1024)})
    p = run(desired(), two_nodes(), [big])
    assert "serve/big" in codes(p)["unreachable"] and only_holds(p)


def test_shared_work_declaring_more_than_its_share_is_warned_about():
    # 2 slices x 20Gi = 40Gi; it declares 60Gi: it fits the card, but time-slicing lets it
    # take its neighbours' memory
    pod = shared_pod("serve", "hungry", None, 2, pool="a100")
    pod = pod.model_copy(update={"request": Request(shared_slices=2, gpu_memory_mib=60 * 1024)})
    p = run(desired(), two_nodes(), [pod])
    (f,) = [f for f in p.findings if f.code == "memory-over-share"]
    assert f.subject == "serve/hungry" and "does not isolate memory" in f.message


@pytest.mark.parametrize(("cls", "kind"), [("serving", "inference"), (LOW, "training")])
def test_whole_card_demand_that_waits_is_named_for_what_it_is(cls: str, kind: str):
    """Whole-card serving replicas go through the same placement as training; the finding
    that says why one waits calls it inference, not training."""
    full = [job("team-b", "wide-1", "a100-1", 8, HIGH), job("team-b", "wide-2", "a100-2", 8, HIGH)]
    p = run(desired(), two_nodes(), [*full, pend("team-a", "one", 1, cls=cls)])
    waits = [f.message for f in p.findings if f.subject == "team-a/one"]
    assert waits and waits[0].startswith(f"pending {kind} (1 whole GPU) waits"), waits
