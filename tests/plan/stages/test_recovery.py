"""Recovery from node failure (reconciler/plan/stages/recovery.py), planned whole.

A gang with a member on a failed node (NotReady, or tainted unreachable) or a member evicted
while the others run is stopped whole: its survivors checkpoint, then stop (the Job
suspended), the pods on the failed node get no checkpoint request and stop after them, the
lost GPU-time is reported; its gated replacements are not admitted meanwhile. Inference
replicas on a failed node are evicted at once (their Deployment replaces them). A node back
Ready settles (`nodeSettleTime`) before anything lands there. A Job that lost a member soon
after each of its last `RECOVERY_ATTEMPTS` starts stays suspended. Over several cycles (the
effect model): the gang is stopped whole, re-admitted once, on healthy nodes, no card is
over-committed.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from reconciler import conventions as C
from reconciler.observe.builders import shared_pod, snapshot, training
from reconciler.observe.model import Request, SuspendedJob, Taint, Workload
from reconciler.plan.actions import EVICTION_KINDS, Reclaim
from reconciler.plan.evictions import stop_lost
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.cycles_support import overcommits, simulate
from tests.plan.scenarios import NOW, _objects
from tests.plan.support import HIGH, LOW, ago, desired, run, stage_run, two_nodes

DOWN = "a100-2"


def member(name: str, node: str | None, gpus, job: str = "g", cls: str = LOW, **kw) -> Workload:
    """A pod of Job `job` (a gang), started 5 h ago, checkpointed 12 min ago."""
    w = training(
        "team-b", name, node, gpus, cls=cls, started=ago(kw.pop("started", 5)), checkpoint=ago(0.2)
    )
    return w.model_copy(update={"owner_name": job, **kw})


def failed(how: str = "notready", since: float = 0.05):
    nodes = two_nodes()
    n = nodes[1]
    if how == "notready":
        n = n.model_copy(update={"ready": False, "ready_changed_at": ago(since)})
    elif how == "unreachable":
        n = n.model_copy(
            update={"taints": [Taint(key="node.kubernetes.io/unreachable", effect="NoExecute")]}
        )
    elif how.startswith("back"):  # Ready again `since` hours ago, created long before
        n = n.model_copy(update={"ready_changed_at": ago(since), "created_at": ago(100)})
    nodes[1] = n
    return nodes


GANG = [member("g-0", "a100-1", [0, 1, 2, 3]), member("g-1", DOWN, [0, 1, 2, 3])]
REPLACEMENT = member("g-2", None, 4, admission="gpupool")


def ids(p) -> set[str]:
    return {a.id for a in p.actions}


# (nodes, workloads, snapshot kwargs, actions wanted, actions not wanted, finding code)
ROWS = [
    pytest.param(
        failed(),
        GANG,
        {},
        {"checkpoint:team-b/g-0", "reclaim:team-b/g-0", "reclaim:team-b/g-1"},
        {"checkpoint:team-b/g-1"},
        "gang-member-lost",
        id="two-node-gang-one-node-notready-stopped-whole",
    ),
    pytest.param(
        failed("unreachable"),
        GANG,
        {},
        {"checkpoint:team-b/g-0", "reclaim:team-b/g-0", "reclaim:team-b/g-1"},
        set(),
        "gang-member-lost",
        id="unreachable-taint-counts-as-failed",
    ),
    pytest.param(
        failed(),
        [member("s-0", DOWN, 8, job="s")],
        {},
        {"reclaim:team-b/s-0"},
        {"checkpoint:team-b/s-0"},
        "gang-member-lost",
        id="single-node-gang-on-failed-node-stopped-without-checkpoint",
    ),
    pytest.param(
        failed(),
        [member("h-0", "a100-1", 4, job="h", cls=HIGH), member("h-1", DOWN, 4, job="h", cls=HIGH)],
        {},
        {"reclaim:team-b/h-0", "reclaim:team-b/h-1"},
        set(),
        "gang-member-lost",
        id="non-preemptible-gang-is-stopped-too",
    ),
    pytest.param(
        two_nodes(),
        [member("g-0", "a100-1", 4), member("g-1", "a100-2", 4, terminating=True), REPLACEMENT],
        {},
        {"checkpoint:team-b/g-0", "reclaim:team-b/g-0"},
        {"admit:team-b/g-2"},
        "gang-member-lost",
        id="member-evicted-while-sibling-runs-stops-gang-replacement-not-admitted",
    ),
    pytest.param(
        failed(),
        [GANG[0], GANG[1].model_copy(update={"terminating": True})],
        {},
        {"checkpoint:team-b/g-0", "reclaim:team-b/g-0"},
        {"reclaim:team-b/g-1"},
        "gang-member-lost",
        # taint eviction (a short NoExecute toleration) deleted the lost pod before the
        # survivor's stop was done: the survivor is still stopped (the soak found it going on)
        id="member-on-failed-node-already-terminating-survivor-still-stopped",
    ),
    pytest.param(
        failed(),
        GANG,
        {"recent_preemptions": [ago(0.1 * i) for i in range(1, 30)]},
        {"reclaim:team-b/g-0", "reclaim:team-b/g-1"},
        set(),
        "gang-member-lost",
        id="the-preemption-budget-does-not-stop-recovery",
    ),
    pytest.param(
        failed(),
        [
            shared_pod("team-b", "chat-x1", DOWN, started=ago(2)),
            shared_pod("team-b", "chat-x2", "a100-1", started=ago(2)),
        ],
        {},
        {"reclaim:team-b/chat-x1"},
        {"checkpoint:team-b/chat-x1", "reclaim:team-b/chat-x2"},
        None,
        id="inference-replica-on-failed-node-replaced-at-once",
    ),
    pytest.param(
        failed(),
        [
            shared_pod("team-b", "db-0", DOWN, started=ago(2)).model_copy(
                update={"owner_kind": "StatefulSet", "owner_name": "db"}
            )
        ],
        {},
        set(),
        {"reclaim:team-b/db-0"},
        None,
        id="statefulset-pod-left-to-kubernetes",
    ),
    pytest.param(
        two_nodes(),
        GANG,
        {},
        set(),
        {"reclaim:team-b/g-0", "reclaim:team-b/g-1"},
        None,
        id="healthy-gang-untouched",
    ),
]


@pytest.mark.parametrize(("nodes", "work", "kw", "want", "not_want", "code"), ROWS)
def test_recovery(nodes, work, kw, want, not_want, code):
    p = run(desired(), nodes, work, **kw)
    assert want <= ids(p), sorted(ids(p))
    assert not (not_want & ids(p)), sorted(not_want & ids(p))
    codes = {f.code for f in p.findings}
    if code:
        assert code in codes
    else:
        assert "gang-member-lost" not in codes


def test_lost_pod_stops_after_survivors_and_job_is_suspended_with_lost_time():
    p = run(desired(), failed(), GANG)
    by = {a.id: a for a in p.actions}
    lost, survivor = by["reclaim:team-b/g-1"], by["reclaim:team-b/g-0"]
    assert survivor.id in lost.depends_on  # its suspension waits out the survivors' checkpoint
    assert "checkpoint:team-b/g-0" in survivor.depends_on
    assert lost.suspend_job == survivor.suspend_job == "g"
    assert survivor.recoveries == lost.recoveries == 1  # started 5 h ago: not a quick failure
    (f,) = [f for f in p.findings if f.code == "gang-member-lost"]
    assert "1.60 GPU-hours" in f.message  # 8 GPUs x 12 min since the last checkpoint
    assert "1.60 GPU-hours" in survivor.reason


@pytest.mark.parametrize(("started", "before", "after"), [(0.05, 1, 2), (0.05, 0, 1), (5, 2, 1)])
def test_recoveries_count_on_only_when_the_gang_fails_soon_after_a_start(started, before, after):
    gang = [member("g-0", "a100-1", 4, started=started), member("g-1", DOWN, 4, started=started)]
    kw = {"job_recoveries": {"team-b/g": before}} if before else {}
    p = run(desired(), failed(), gang, **kw)
    assert {a.id: a for a in p.actions}["reclaim:team-b/g-0"].recoveries == after


def suspended(name: str = "g") -> SuspendedJob:
    return SuspendedJob(
        namespace="team-b",
        name=name,
        parallelism=2,
        request=Request(gpus=4),
        priority_class=LOW,
        pool="a100",
        suspended_at=ago(0.1),
    )


@pytest.mark.parametrize(("tries", "resumed"), [(0, True), (C.RECOVERY_ATTEMPTS - 1, True)])
def test_a_job_under_the_attempts_is_resumed(tries, resumed):
    kw = {"job_recoveries": {"team-b/g": tries}} if tries else {}
    p = run(desired(), two_nodes(), [], suspended_jobs=[suspended()], **kw)
    assert ("resume:team-b/g" in ids(p)) == resumed


def test_a_job_that_fails_after_every_resume_is_held_and_its_cards_go_to_other_work():
    other = member("o-0", None, 8, job="o", admission="gpupool", created=ago(0.1))
    p = run(
        desired(),
        [two_nodes()[0]],
        [other],
        suspended_jobs=[suspended()],
        job_recoveries={"team-b/g": C.RECOVERY_ATTEMPTS},
    )
    assert "resume:team-b/g" not in ids(p)
    assert "admit:team-b/o-0" in ids(p)
    held = [f for f in p.findings if f.code == "recovery-held"]
    assert held and C.RECOVERIES_ANN in held[0].message


@pytest.mark.parametrize(
    ("since", "settling"), [(0.02, True), (0.2, False)], ids=["2-min-ago", "12-min-ago"]
)
def test_a_node_back_from_failure_settles_before_work_lands(since, settling):
    """Only a100-2 has room; it came back Ready `since` hours ago (nodeSettleTime 5m)."""
    nodes = failed("back", since)
    nodes[0] = nodes[0].model_copy(update={"gpus": []})
    pending = member("p-0", None, 4, job="p", admission="gpupool", created=ago(0.1))
    p = run(desired(), nodes, [pending])
    assert ("admit:team-b/p-0" not in ids(p)) == settling
    assert any(f.code == "node-settling" for f in p.findings) == settling


def test_a_new_node_does_not_settle():
    nodes = two_nodes()
    nodes[1] = nodes[1].model_copy(update={"ready_changed_at": ago(0.01), "created_at": ago(0.02)})
    p = run(desired(), nodes, [])
    assert not any(f.code == "node-settling" for f in p.findings)


def test_settle_time_is_a_pool_field_validated():
    text = desired(("gpuModel: A100-SXM4-80GB", "gpuModel: A100-SXM4-80GB\n  nodeSettleTime: 0s"))
    nodes = failed("back", 0.01)
    p = run(text, nodes, [])
    assert not any(f.code == "node-settling" for f in p.findings)
    with pytest.raises(Exception, match="nodeSettleTime|node_settle_time"):
        load([SourceFile("d.yaml", text.replace("nodeSettleTime: 0s", "nodeSettleTime: -1s"))])


def test_a_repartition_on_a_failed_node_is_not_continued_and_its_cordon_stays():
    """a100-2 was cordoned by gpupool for a repartition and failed: nothing that needs its
    agent (a repartition) and no uncordon is planned while it is NotReady."""
    nodes = failed()
    nodes[1] = nodes[1].model_copy(
        update={"unschedulable": True, "annotations": {C.CORDONED_FOR_ANN: "mig"}}
    )
    p = run(desired(), nodes, [])
    on_node = {a.id for a in p.actions if a.target == DOWN}
    assert on_node == set(), on_node


def test_stop_lost_adds_its_action_whole_with_what_it_waits_for():
    """The run keeps the first action of an id: `stop_lost` builds its action with `after`
    among its dependencies before adding it, and leaves an action of that id added earlier
    as it was (it used to patch the stored action after `run.add`, whichever that was)."""
    r = stage_run(desired(), failed(), GANG)
    lost = next(w for w in r.observed.workloads if w.name == "g-1")
    aid = stop_lost(r, lost, "lost", checkpoint=False, recoveries=1, after=("reclaim:x",))
    a = r.actions[aid]
    assert a.depends_on == ("reclaim:x",) and a.lost and a.recoveries == 1

    r = stage_run(desired(), failed(), GANG)
    first = Reclaim(
        id="reclaim:team-b/g-1",
        target="team-b/g-1",
        pool="a100",
        reason="first",
        node=DOWN,
        gpus=(),
    )
    r.add(first)
    stop_lost(r, lost, "lost", checkpoint=False, recoveries=1, after=("reclaim:x",))
    assert r.actions["reclaim:team-b/g-1"] == first


def crashed(
    name: str, node: str, failed_h: float, created_h: float = 5, job: str = "g"
) -> Workload:
    """A member of Job `job` that Failed `failed_h` hours ago (created `created_h` ago)."""
    w = member(name, node, 4, job=job, created_at=ago(created_h))
    return w.model_copy(update={"allocations": [], "failed_at": ago(failed_h)})


def test_a_member_that_failed_while_the_others_run_stops_the_gang_whole():
    """Issue 29 item 1, "it failed": g-1 Failed on a healthy node (its Job's backoffLimit made a
    replacement, g-2, gated): g-0 is asked to checkpoint and stopped with its Job, the
    replacement is not admitted alone."""
    live = member("g-0", "a100-1", [0, 1, 2, 3], created_at=ago(5))
    p = run(
        desired(),
        two_nodes(),
        [live, REPLACEMENT],
        failed_members=[crashed("g-1", DOWN, 0.1)],
    )
    assert {"checkpoint:team-b/g-0", "reclaim:team-b/g-0"} <= ids(p), sorted(ids(p))
    assert "admit:team-b/g-2" not in ids(p)
    (f,) = [f for f in p.findings if f.code == "gang-member-lost"]
    assert "team-b/g-1 failed on node a100-2" in f.message
    assert {a.id: a for a in p.actions}["reclaim:team-b/g-0"].suspend_job == "g"


def test_a_member_that_failed_before_the_gang_was_resumed_is_history():
    """g-1 Failed 2 h ago; the gang was stopped and resumed since (its pods now running were
    all created 1 h ago): nothing is stopped."""
    gang = [
        member("g-2", "a100-1", [0, 1, 2, 3], created_at=ago(1), started=1),
        member("g-3", DOWN, [0, 1, 2, 3], created_at=ago(1), started=1),
    ]
    p = run(desired(), two_nodes(), gang, failed_members=[crashed("g-1", DOWN, 2)])
    assert not {a for a in ids(p) if a.startswith("reclaim:")}, sorted(ids(p))
    assert "gang-member-lost" not in {f.code for f in p.findings}


def test_a_failed_pod_of_a_finished_gang_or_a_service_stops_nothing():
    replica = shared_pod("team-b", "chat-x1", "a100-1", started=ago(2))
    p = run(
        desired(),
        two_nodes(),
        [replica],
        failed_members=[crashed("g-1", DOWN, 0.1)],  # its gang has no member running
    )
    assert not {a for a in ids(p) if a.startswith("reclaim:")}, sorted(ids(p))


@pytest.mark.parametrize(("reported", "fenced"), [(0.3, True), (0.1, False), (None, False)])
def test_a_node_back_is_capacity_only_once_its_agent_has_reported_since(reported, fenced):
    """a100-2 came back Ready 12 min ago (settled); its agent last published `reported` hours
    ago: before the Ready transition, its cards are not read since it came back."""
    nodes = failed("back", 0.2)
    nodes[0] = nodes[0].model_copy(update={"gpus": []})
    nodes[1] = nodes[1].model_copy(
        update={"agent_reported_at": ago(reported) if reported is not None else None}
    )
    pending = member("p-0", None, 4, job="p", admission="gpupool", created=ago(0.1))
    p = run(desired(), nodes, [pending])
    assert ("admit:team-b/p-0" not in ids(p)) == fenced
    assert any(f.code == "node-unreported" for f in p.findings) == fenced


@pytest.mark.parametrize(
    ("config", "state", "uncordoned"),
    [
        ("gpupool-0123456789ab", "pending", False),
        ("gpupool-0123456789ab", "", False),  # gpupool set the label; mig-manager not yet
        ("gpupool-0123456789ab", "success", True),
        ("all-disabled", "pending", True),  # not gpupool's config: not gpupool's to wait for
    ],
)
def test_a_gpupool_cordon_is_undone_only_once_its_repartition_is_resolved(
    config, state, uncordoned
):
    """a100-2 was cordoned by gpupool for a repartition (abandoned: nothing is planned there
    now); mig-manager's state of the config gpupool named decides whether it is over."""
    nodes = two_nodes()
    labels = {**nodes[1].labels, C.MIG_CONFIG_LABEL: config}
    if state:
        labels[C.MIG_STATE_LABEL] = state
    nodes[1] = nodes[1].model_copy(
        update={
            "unschedulable": True,
            "annotations": {C.CORDONED_FOR_ANN: "repartition"},
            "labels": labels,
        }
    )
    p = run(desired(), nodes, [])
    assert ("uncordon:a100-2" in ids(p)) == uncordoned, sorted(ids(p))
    assert any(f.code == "repartition-unresolved" for f in p.findings) == (not uncordoned)


# ----------------------------------------------------------------------------- several cycles
def test_over_cycles_the_gang_is_stopped_whole_and_readmitted_once_on_healthy_nodes():
    """A 2 x 4-GPU gang, one pod on a100-2 which fails; a third node has room. Cycles a minute
    apart (the effect model): the gang is stopped whole, resumed once, admitted on healthy
    nodes only, nothing over-committed."""
    text = desired()
    d = load([SourceFile("desired.yaml", text)])
    nodes = failed()
    third = nodes[0].model_copy(update={"name": "a100-3"})
    start = snapshot(NOW, [*nodes, third], GANG, **_objects(text))
    t = simulate(d, start, timedelta(seconds=60), cycles=8)
    assert t.error is None, t.error
    acts = [a for p in t.plans for a in p.actions]
    stops = Counter(a.target for a in acts if a.kind in EVICTION_KINDS)
    assert set(stops) == {"team-b/g-0", "team-b/g-1"}
    assert Counter(a.target for a in acts if a.kind == "resume") == {"team-b/g": 1}
    final = t.states[-1]
    running = [w for w in final.workloads if w.owner_name == "g" and w.phase == "Running"]
    assert len(running) == 2 and all(w.node != DOWN for w in running), running
    assert [m for s in t.states for m in overcommits(s)] == []
