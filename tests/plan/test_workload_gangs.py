"""Workload-API PodGroup gangs in the planner (issue 32, item 5): pods the adapter reads into
gang `podgroup:<name>` (reconciler/observe/kube_podgroups.py) are one gang everywhere a gang is:
admitted whole or not at all, stopped whole by pod evictions (no Job to suspend), and stopped
whole when a member is lost (stages/recovery.py), then admitted whole again. The planner has no
code of its own for them: these rows pin that the one gang model carries them.

Every row plans tests/plan/support.py's two-node A100 cluster on the golden desired state.
"""

from __future__ import annotations

from reconciler.observe.builders import training
from reconciler.observe.model import Workload
from reconciler.plan.actions import Admit
from tests.plan.support import HIGH, LOW, ago, desired, evicted, pend, run, two_nodes

GANG = "podgroup:train"
PREEMPT_LOW = (
    "{preemptor: training-high, victims: [spot], when: always}",
    "{preemptor: training-high, victims: [training-low, spot], when: always}",
)


def in_group(w: Workload, size: int | None = 2) -> Workload:
    """`w` as a pod of PodGroup `train` (a bare pod: no owner to suspend)."""
    return w.model_copy(
        update={"gang": GANG, "gang_size": size, "owner_kind": "", "owner_name": ""}
    )


def gated(i: int, gpus: int = 8, size: int | None = 2, cls: str = HIGH) -> Workload:
    return in_group(pend("team-b", f"t-{i}", gpus, cls), size).model_copy(
        update={"admission": "gpupool"}
    )


def running(i: int, node: str, cards, cls: str = LOW) -> Workload:
    w = training("team-b", f"t-{i}", node, cards, cls=cls, started=ago(5), checkpoint=ago(0.2))
    return in_group(w)


def ids(p) -> set[str]:
    return {a.id for a in p.actions}


def test_two_pods_of_eight_cards_are_admitted_together_one_node_each():
    p = run(desired(), two_nodes(), [gated(0), gated(1)])
    (admit,) = [a for a in p.actions if isinstance(a, Admit)]
    assert sorted(x.name for x in admit.pods) == ["t-0", "t-1"]
    assert {x.node for x in admit.pods} == {"a100-1", "a100-2"}


def test_a_gang_that_does_not_fit_is_not_admitted_in_part():
    """Three 8-card pods on two 8-card nodes: none is admitted (each is held with the
    gang's reason)."""
    p = run(desired(), two_nodes(), [gated(i, size=3) for i in range(3)])
    assert not [a for a in p.actions if isinstance(a, Admit)]
    assert {a.id for a in p.actions if a.kind == "hold"} == {f"hold:team-b/t-{i}" for i in range(3)}


def test_a_gang_that_is_not_complete_waits():
    p = run(desired(), two_nodes(), [gated(0)])
    assert not [a for a in p.actions if isinstance(a, Admit)]
    assert "gang-incomplete" in {f.code for f in p.findings}


def test_preempting_the_group_stops_every_pod_by_evictions():
    """A training-high pod needs a100-1, where the low gang's two pods hold four cards each
    (a100-2 is full of non-preemptible work): both are stopped, each evicted after a
    checkpoint (no Job to suspend), and the pod is admitted once they are gone."""
    gang = [running(0, "a100-1", [0, 1, 2, 3]), running(1, "a100-1", [4, 5, 6, 7])]
    fill = training("team-b", "fill", "a100-2", 8, cls=HIGH, started=ago(5))
    high = pend("team-a", "big", 8, HIGH).model_copy(update={"admission": "gpupool"})
    p = run(desired(PREEMPT_LOW), two_nodes(), [*gang, fill, high])
    assert evicted("preempt", "team-b/t-0", "team-b/t-1") <= ids(p)
    assert "admit:team-a/big" in ids(p)
    stops = [a for a in p.actions if a.kind == "preempt"]
    assert all(getattr(a, "suspend_job", None) is None for a in stops)


def test_a_member_too_young_to_stop_protects_the_whole_group():
    """minRuntime holds for one member: none is stopped (a group is never split)."""
    young = running(1, "a100-1", [4, 5, 6, 7]).model_copy(update={"started_at": ago(0.1)})
    gang = [running(0, "a100-1", [0, 1, 2, 3]), young]
    fill = training("team-b", "fill", "a100-2", 8, cls=HIGH, started=ago(5))
    high = pend("team-a", "big", 8, HIGH).model_copy(update={"admission": "gpupool"})
    p = run(desired(PREEMPT_LOW), two_nodes(), [*gang, fill, high])
    assert not [a for a in p.actions if a.kind in ("preempt", "checkpoint")]


def test_a_lost_member_stops_the_group_and_its_replacement_waits():
    """t-1's node failed: t-0 checkpoints and is evicted, t-1 is stopped without a checkpoint,
    and the gated replacement t-2 is not admitted this cycle (the gang comes back whole)."""
    nodes = two_nodes()
    nodes[1] = nodes[1].model_copy(update={"ready": False, "ready_changed_at": ago(0.05)})
    gang = [running(0, "a100-1", [0, 1, 2, 3]), running(1, "a100-2", [0, 1, 2, 3])]
    replacement = gated(2, gpus=4, cls=LOW)
    p = run(desired(), nodes, [*gang, replacement])
    assert {"checkpoint:team-b/t-0", "reclaim:team-b/t-0", "reclaim:team-b/t-1"} <= ids(p)
    assert "checkpoint:team-b/t-1" not in ids(p) and "admit:team-b/t-2" not in ids(p)
    (lost,) = [f for f in p.findings if f.code == "gang-member-lost"]
    assert lost.message.startswith(f"gang {GANG} lost team-b/t-1 on node a100-2")
    assert all(getattr(a, "suspend_job", None) is None for a in p.actions if a.kind == "reclaim")
