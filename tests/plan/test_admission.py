"""Admission by scheduling gate: which pods the planner admits (`Admit`), where, after what,
and which it tells why they wait (`Hold`).

Every row plans a small two-node A100 cluster on the golden desired state
(tests/plan/scenarios.py via `tests.plan.support.desired`: team-a cap 8, guaranteed 4 +
borrows 4; team-b cap 16; budget 4/h; minRuntime 15m), with `run` checking the invariants any
plan keeps (dependencies earlier in the plan, a checkpoint before each non-spot eviction).
Where a decision spans cycles, the plan takes effect through `reconciler.sim.effects.step`
(`tests.plan.cycles_support.simulate`).

`a100-2` is usually full of non-preemptible work (`fill()`), so `a100-1` is the only place a
pod can go and its Admit names exact cards.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from reconciler.observe.builders import gpu, mig_pod, node, shared_pod, snapshot, training
from reconciler.observe.model import Allocation, Request, Workload
from reconciler.plan.actions import EVICTION_KINDS, Admit, Hold
from reconciler.plan.model import Plan
from reconciler.plan.planner import plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan import scenarios
from tests.plan.cycles_support import overcommits, simulate
from tests.plan.scenarios import A100, BAL, NOW, _objects
from tests.plan.support import HIGH, LOW, desired, job, pend, run, two_nodes

ALL = tuple(range(8))
LOWER, UPPER = (0, 1, 2, 3), (4, 5, 6, 7)

# training-high may preempt training-low too (the golden rules give it spot only), so a
# preemption for a gated gang needs checkpoints
PREEMPT_LOW = (
    "{preemptor: training-high, victims: [spot], when: always}",
    "{preemptor: training-high, victims: [training-low, spot], when: always}",
)
HIGH_CLASS = "    - {name: training-high, value: 50000, workload: training, preemptible: false}\n"
URGENT = "training-urgent"  # above training-high, may preempt nobody
WITH_URGENT = (
    HIGH_CLASS,
    HIGH_CLASS
    + f"    - {{name: {URGENT}, value: 60000, workload: training, preemptible: false}}\n",
)


def fill() -> Workload:
    """a100-2 full of team-b's non-preemptible work."""
    return job("team-b", "fill", "a100-2", 8, HIGH)


def victims() -> list[Workload]:
    """a100-1 full of team-b's preemptible training-low jobs (old enough, checkpointed)."""
    return [job("team-b", "v1", "a100-1", LOWER), job("team-b", "v2", "a100-1", UPPER)]


def big(**update) -> Workload:
    """team-a's gated 8-GPU training-high pod."""
    return pend("team-a", "big", 8, HIGH).model_copy(update=update)


RESERVED = {"reserved_node": "a100-1", "reserved_gpus": list(ALL)}  # as the first Admit wrote


def as_(admission: str, w: Workload, **update) -> Workload:
    return w.model_copy(update={"admission": admission, **update})


def admitted_on(w: Workload, node_name: str, cards: tuple[int, ...]) -> Workload:
    """Ungated by gpupool, pinned to its node, not bound yet: it holds the cards meant for it."""
    allocations = [Allocation(gpu=i) for i in cards]
    return as_("admitted", w, node=node_name, allocations=allocations)


def admits(p: Plan) -> dict[str, dict[str, tuple[str, tuple[int, ...]]]]:
    """Admit target -> {pod name: (node, cards)}."""
    return {
        a.target: {pa.name: (pa.node, pa.gpus) for pa in a.pods}
        for a in p.actions
        if isinstance(a, Admit)
    }


def the_admit(p: Plan) -> Admit:
    (a,) = [a for a in p.actions if isinstance(a, Admit)]
    return a


def holds(p: Plan) -> dict[str, str]:
    """Hold target -> code."""
    return {a.target: a.code for a in p.actions if isinstance(a, Hold)}


def targets(p: Plan, kind: str) -> set[str]:
    return {a.target for a in p.actions if a.kind == kind}


def findings(p: Plan) -> set[tuple[str, str, str]]:
    return {(f.severity, f.code, f.subject) for f in p.findings}


# =========================================================================== 1. who is demand

WAITS = "waits"  # nothing can be placed or freed for it this cycle

WHO = [
    pytest.param(
        [fill(), pend("team-a", "job", 2)],
        {"team-a/job": {"job": ("a100-1", (0, 1))}},
        {},
        set(),
        id="gated-fits-one-admit-naming-node-and-cards",
    ),
    pytest.param(
        [fill(), as_("scheduler", pend("team-a", "job", 2))],
        {},
        {},
        set(),
        id="ungated-fits-never-admitted",
    ),
    # the planner places an ungated pod as a prediction of kube-scheduler: its cards are taken
    pytest.param(
        [fill(), as_("scheduler", pend("team-b", "s", 8, HIGH)), pend("team-a", "g", 4, LOW)],
        {},
        {"team-a/g": WAITS},
        {("info", WAITS, "team-a/g")},
        id="ungated-pod-counted-gated-lower-one-waits",
    ),
    pytest.param(
        [fill(), as_("scheduler", pend("team-b", "s", 4, HIGH)), pend("team-a", "g", 4, LOW)],
        {"team-a/g": {"g": ("a100-1", UPPER)}},
        {},
        set(),
        id="ungated-pod-counted-gated-one-beside-it",
    ),
    pytest.param(
        [*victims(), fill(), big()],
        {"team-a/big": {"big": ("a100-1", ALL)}},
        {},
        set(),
        id="gated-high-preempts-and-is-admitted",
    ),
    pytest.param(
        [*victims(), fill(), as_("other", big())],
        {},
        {},
        set(),
        id="other-gate-not-demand-no-preemption-no-hold",
    ),
    pytest.param(
        [*victims(), fill(), as_("scheduler", big())],
        {},
        {},
        set(),
        id="ungated-high-preempts-but-is-never-admitted",
    ),
    pytest.param(
        [fill(), pend("team-a", "g", 4, LOW)],
        {"team-a/g": {"g": ("a100-1", LOWER)}},
        {},
        set(),
        id="gated-four-on-an-empty-node-takes-the-lower-cards",
    ),
    pytest.param(
        [
            fill(),
            admitted_on(pend("team-b", "in", 4, HIGH), "a100-1", LOWER),
            pend("team-a", "g", 4),
        ],
        {"team-a/g": {"g": ("a100-1", UPPER)}},
        {},
        set(),
        id="admitted-pod-holds-its-cards-gated-one-beside-it",
    ),
    pytest.param(
        [
            fill(),
            admitted_on(pend("team-b", "in", 4, HIGH), "a100-1", LOWER),
            pend("team-a", "g", 8),
        ],
        {},
        {"team-a/g": WAITS},
        {("info", WAITS, "team-a/g")},
        id="admitted-pod-holds-its-cards-gated-eight-waits",
    ),
]


@pytest.mark.parametrize(("work", "admitted", "held", "found"), WHO)
def test_who_is_admitted(work, admitted, held, found):
    p = run(desired(PREEMPT_LOW), two_nodes(), work)
    assert admits(p) == admitted
    assert holds(p) == held
    assert findings(p) == found
    # a100-1's preemptible victims are stopped only for a pending 8-GPU training-high pod that
    # is demand (gated or not); never for one another system gates
    demand = [w for w in work if w.key == "team-a/big" and w.admission != "other"]
    stopped = {"team-b/v1", "team-b/v2"} if demand else set()
    assert {a.target for a in p.actions if a.kind in EVICTION_KINDS} == stopped


# =========================================================================== 2. hold

SAME = object()  # the pod already shows the message of its finding


@pytest.mark.parametrize(
    ("admission", "shown", "hold", "finding"),
    [
        pytest.param("gpupool", "", True, True, id="gated-told-why"),
        pytest.param("gpupool", "an older reason", True, True, id="gated-stale-reason-replaced"),
        pytest.param("gpupool", SAME, False, True, id="gated-already-told-idempotent"),
        pytest.param("scheduler", "", False, True, id="ungated-held-but-no-hold"),
        pytest.param("other", "", False, False, id="other-gate-not-demand"),
    ],
)
def test_hold_tells_a_gated_pod_over_its_cap_why_once(admission, shown, hold, finding):
    def plan_with(held: str) -> Plan:
        more = as_(admission, pend("team-a", "more", 2, HIGH), held=held)
        return run(desired(), two_nodes(), [job("team-a", "at-cap", "a100-1", 8, HIGH), more])

    first = plan_with("")
    why = [f.message for f in first.findings if (f.code, f.subject) == ("held-cap", "team-a/more")]
    p = plan_with(why[0] if shown is SAME else shown) if shown else first
    assert [f.message for f in p.findings if f.code == "held-cap"] == why
    assert bool(why) is finding
    if hold:
        (h,) = p.actions
        assert isinstance(h, Hold)
        assert (h.target, h.code, h.message) == ("team-a/more", "held-cap", why[0])
    else:
        assert not p.actions


# =========================================================================== 3. gangs


def member(i: int, owner: str = "job", size: int | None = 2, n: int = 4, **update) -> Workload:
    """Pod i of team-a's gated job `owner` of `size` pods of n cards."""
    w = pend("team-a", f"{owner}-{i}", n, HIGH)
    return w.model_copy(update={"owner_name": owner, "gang_size": size, **update})


def running_member(i: int, size: int, cards: tuple[int, ...] = LOWER) -> Workload:
    """Pod i of team-a's job `job` of `size` pods, running on a100-1."""
    w = job("team-a", f"job-{i}", "a100-1", list(cards), HIGH)
    return w.model_copy(update={"owner_name": "job", "gang_size": size})


OWNERLESS = {"owner_kind": "", "owner_name": ""}

GANGS = [
    pytest.param(
        [member(0), member(1)],
        {"team-a/job-0": {"job-0": ("a100-1", LOWER), "job-1": ("a100-1", UPPER)}},
        {},
        set(),
        id="job-of-two-one-admit-with-both",
    ),
    pytest.param(
        [member(0, size=3), member(1, size=3)],
        {},
        {"team-a/job-0": "gang-incomplete", "team-a/job-1": "gang-incomplete"},
        {("info", "gang-incomplete", "team-a/job-0")},
        id="two-of-three-incomplete",
    ),
    pytest.param(
        [member(0), member(1, request=Request(gpus=2))],
        {},
        {"team-a/job-0": "gang-inconsistent", "team-a/job-1": "gang-inconsistent"},
        {("warning", "gang-inconsistent", "team-a/job-0")},
        id="members-disagree-on-request-inconsistent",
    ),
    pytest.param(
        [member(0, gang="g", **OWNERLESS), member(1, gang="g", **OWNERLESS)],
        {"team-a/job-0": {"job-0": ("a100-1", LOWER), "job-1": ("a100-1", UPPER)}},
        {},
        set(),
        id="explicit-gang-without-owner-one-unit",
    ),
    pytest.param(
        [member(0, **OWNERLESS), member(1, **OWNERLESS)],
        {
            "team-a/job-0": {"job-0": ("a100-1", LOWER)},
            "team-a/job-1": {"job-1": ("a100-1", UPPER)},
        },
        {},
        set(),
        id="ownerless-pods-without-gang-stand-alone",
    ),
    pytest.param(
        [running_member(0, size=2), member(1)],
        {"team-a/job-1": {"job-1": ("a100-1", UPPER)}},
        {},
        set(),
        id="one-member-runs-recreated-one-admitted-alone",
    ),
    pytest.param(
        [running_member(0, size=3), member(1, size=3)],
        {},
        {"team-a/job-1": "gang-incomplete"},
        {("info", "gang-incomplete", "team-a/job-1")},
        id="one-runs-one-pending-of-three-incomplete",
    ),
]


@pytest.mark.parametrize(("work", "admitted", "held", "found"), GANGS)
def test_gangs(work, admitted, held, found):
    p = run(desired(), two_nodes(), [fill(), *work])
    assert admits(p) == admitted
    assert holds(p) == held
    assert findings(p) == found
    for a in p.actions:
        if isinstance(a, Hold):  # each member is told the gang's reason
            assert a.message == next(f.message for f in p.findings if f.code == a.code)


# ======================================================================= 4. preemption for a gang


def test_preemption_for_a_gated_pod_admits_it_after_its_victims():
    p = run(desired(PREEMPT_LOW), two_nodes(), [*victims(), fill(), big()])
    assert targets(p, "preempt") == {"team-b/v1", "team-b/v2"}
    assert targets(p, "checkpoint") == {"team-b/v1", "team-b/v2"}
    assert {a.preemptor for a in p.actions if a.kind == "preempt"} == {"team-a/big"}
    a = the_admit(p)
    assert (a.namespace, a.after) == ("team-a", ("team-b/v1", "team-b/v2"))
    freed = {(w.node, x.gpu) for w in victims() for x in w.allocations}
    assert {(pa.node, g) for pa in a.pods for g in pa.gpus} == freed
    # the reservation is written before the evictions that free its cards
    order = [x.id for x in p.actions]
    assert order.index(a.id) < min(order.index(f"preempt:{v.key}") for v in victims())


@pytest.mark.parametrize(
    "reserved", [pytest.param(RESERVED, id="reserved"), pytest.param({}, id="not-reserved-yet")]
)
def test_terminating_victims_are_waited_for_and_not_stopped_again(reserved):
    going = [v.model_copy(update={"terminating": True}) for v in victims()]
    p = run(desired(PREEMPT_LOW), two_nodes(), [*going, fill(), big(**reserved)])
    assert admits(p) == {"team-a/big": {"big": ("a100-1", ALL)}}
    assert the_admit(p).after == ("team-b/v1", "team-b/v2")
    assert not [a for a in p.actions if a.kind in (*EVICTION_KINDS, "checkpoint")]
    assert not p.findings


@pytest.mark.parametrize(
    ("reserved", "winner", "loser"),
    [
        pytest.param(RESERVED, "team-a/big", "team-b/urgent", id="reservation-wins"),
        pytest.param({}, "team-b/urgent", "team-a/big", id="without-it-priority-wins"),
    ],
)
def test_a_reservation_keeps_its_cards_from_higher_priority_demand(reserved, winner, loser):
    urgent = pend("team-b", "urgent", 8, URGENT, created=3)
    p = run(desired(PREEMPT_LOW, WITH_URGENT), two_nodes(), [fill(), big(**reserved), urgent])
    name = winner.split("/")[1]
    assert admits(p) == {winner: {name: ("a100-1", ALL)}}
    assert the_admit(p).after == ()
    assert holds(p) == {loser: WAITS}
    assert findings(p) == {("info", WAITS, loser)}


# =========================================================================== 5. over cycles


def test_preemption_for_a_gated_pod_converges_over_cycles():
    text = desired(PREEMPT_LOW)
    d = load([SourceFile("desired.yaml", text)])
    start = snapshot(NOW, two_nodes(), [*victims(), fill(), big()], **_objects(text))
    t = simulate(d, start, timedelta(seconds=60), cycles=6)
    assert t.error is None and len(t.plans) == 6
    assert [m for s in t.states for m in overcommits(s)] == []

    final = {w.key: w for w in t.states[-1].workloads}
    b = final["team-a/big"]
    freed = sorted((w.node, x.gpu) for w in victims() for x in w.allocations)
    assert b.phase == "Running"
    assert sorted((b.node, x.gpu) for x in b.allocations) == freed

    # each victim evicted exactly once, and the budget's bookkeeping says so
    stopped = Counter(a.target for p in t.plans for a in p.actions if a.kind in EVICTION_KINDS)
    assert stopped == {"team-b/v1": 1, "team-b/v2": 1}
    assert len(t.states[-1].recent_preemptions) == 2
    # their Jobs are suspended (no replacement pod races for the cards), demand to resume
    assert not {"team-b/v1", "team-b/v2"} & set(final)
    assert {j.key for j in t.states[-1].suspended_jobs} == {"team-b/v1", "team-b/v2"}
    assert all(a.suspend_job for p in t.plans for a in p.actions if a.kind in EVICTION_KINDS)

    # from the cycle that admitted it on, nothing is stopped; at the end only reasons are shown
    # plans[k] turns states[k] into states[k + 1]: the first plan after which it is placed
    admitted_by = next(
        k
        for k, s in enumerate(t.states[1:])
        if any(w.key == "team-a/big" and w.placed for w in s.workloads)
    )
    assert all(a.kind not in EVICTION_KINDS for p in t.plans[admitted_by:] for a in p.actions)
    for p in t.plans[admitted_by + 1 :]:  # no room to resume them: nothing else happens
        assert p.actions == ()
        assert {f.subject for f in p.findings if f.code == "waits"} == {"team-b/v1", "team-b/v2"}


# =========================================================================== 6. after a repartition


@pytest.mark.parametrize(
    ("swaps", "pod", "step"),
    [
        pytest.param(
            (),
            mig_pod("team-b", "ranker-0", None, "3g.40gb", pool="a100"),
            "mig-reconfigure",
            id="mig",
        ),
        pytest.param(
            (("prefer: mig", "prefer: shared"),),
            shared_pod("team-b", "chat-0", None, 1, pool="a100"),
            "set-sharing",
            id="shared",
        ),
    ],
)
def test_an_admit_waits_for_the_repartition_and_uncordon_of_its_node(swaps, pod, step):
    p = run(desired(*swaps), two_nodes(), [pod])
    a = the_admit(p)
    ((node_name, cards),) = admits(p)[pod.key].values()
    assert set(a.depends_on) == {f"{step}:{node_name}", f"uncordon:{node_name}"}
    (change,) = [x for x in p.actions if x.id == f"{step}:{node_name}"]
    assert set(cards) <= change.changed_gpus and cards
    # ungated, the same pod gets the same repartition and no Admit
    q = run(desired(*swaps), two_nodes(), [as_("scheduler", pod)])
    assert {x.id for x in q.actions} == {x.id for x in p.actions} - {a.id}


# =========================================================================== 7. moves that land


def test_a_defragmentation_move_lands_on_its_target_over_cycles():
    """The defragment scenario: two migratable one-card probes on a100-1 are moved so the
    pending 8-GPU gang gets a100-1. Each Move names its target card; the recreated (gated)
    probe is reserved there (the handler writes it on the Job) and admitted there, not
    wherever the placement would put it next cycle; the gang gets a100-1 whole."""
    text, start = scenarios.defragment()
    # a100-3 has one free card: a tighter fit for a one-card pod than the moves' target
    # a100-2 (two free), so a probe placed afresh would go there, not where it was moved
    third = node("a100-3", "a100", scenarios.A100)
    fill = training(
        "team-b", "fill", "a100-3", list(range(7)), cls="training-low", started=scenarios.ago(1)
    )
    start = start.model_copy(
        update={"nodes": [*start.nodes, third], "workloads": [*start.workloads, fill]}
    )
    d = load([SourceFile("desired.yaml", text)])
    t = simulate(d, start, timedelta(seconds=60), cycles=5)
    assert t.error is None
    moves = [a for a in t.plans[0].actions if a.kind == "move"]
    assert {a.target for a in moves} == {"team-b/probe-0", "team-b/probe-1"}
    assert all(a.to_node == "a100-2" and len(a.to_gpus) == 1 for a in moves)
    final = {w.key: w for w in t.states[-1].workloads}
    for a in moves:
        w = final[a.target]
        assert (w.phase, w.node, [x.gpu for x in w.allocations]) == (
            "Running",
            a.to_node,
            list(a.to_gpus),
        ), a.target
    gang = final["team-a/gang"]
    assert (gang.phase, gang.node) == ("Running", "a100-1")
    # moved once each, nothing else stopped
    stopped = Counter(a.target for p in t.plans for a in p.actions if a.kind in EVICTION_KINDS)
    assert stopped == {"team-b/probe-0": 1, "team-b/probe-1": 1}
    assert [m for s in t.states for m in overcommits(s)] == []


# =========================================================================== 8. bad input


def test_a_gate_removed_by_someone_else_is_a_warning_and_not_admitted():
    # the first Admit wrote the reservation; someone then removed gpupool's gate by hand
    pod = pend("team-a", "job", 2).model_copy(
        update={"admission": "scheduler", "reserved_node": "a100-1", "reserved_gpus": [0, 1]}
    )
    p = run(desired(), two_nodes(), [pod])
    assert [a for a in p.actions if a.kind in ("admit", "hold")] == []
    (f,) = [f for f in p.findings if f.code == "gate-removed"]
    assert (f.severity, f.subject) == ("warning", "team-a/job")


@pytest.mark.parametrize(
    ("gated_namespaces", "warned"),
    [(None, False), (["team-a"], False), (["team-b"], True)],
    ids=["namespaces-unknown", "labelled", "not-labelled"],
)
def test_a_pod_gated_in_a_namespace_not_labelled_for_gpupool_is_still_admitted(
    gated_namespaces, warned
):
    p = run(desired(), two_nodes(), [pend("team-a", "job", 2)], gated_namespaces=gated_namespaces)
    assert [a.target for a in p.actions if a.kind == "admit"] == ["team-a/job"]
    codes = {(f.code, f.subject) for f in p.findings}
    assert (("gated-unmanaged-namespace", "team-a/job") in codes) == warned


# =========================================================================== 9. suspend, resume


def test_a_suspended_jobs_gang_is_resumed_and_admitted_when_room_comes_back():
    """The gang preempted for team-a/big is stopped by suspending its Jobs; when big finishes,
    the Jobs are resumed, their new pods come back gated and are admitted, and run."""
    text = desired(PREEMPT_LOW)
    d = load([SourceFile("desired.yaml", text)])
    start = snapshot(NOW, two_nodes(), [*victims(), fill(), big()], **_objects(text))
    t = simulate(d, start, timedelta(seconds=60), cycles=4)
    assert t.error is None
    last = t.states[-1]
    assert {j.key for j in last.suspended_jobs} == {"team-b/v1", "team-b/v2"}
    assert not any(a.kind == "resume" for p in t.plans for a in p.actions)  # no room
    # big finishes: its cards are free again
    done = last.model_copy(
        update={"workloads": [w for w in last.workloads if w.key != "team-a/big"]}
    )
    t2 = simulate(d, done, timedelta(seconds=60), cycles=4)
    assert t2.error is None
    resumed = Counter(a.target for p in t2.plans for a in p.actions if a.kind == "resume")
    assert resumed == {"team-b/v1": 1, "team-b/v2": 1}
    final = t2.states[-1]
    assert final.suspended_jobs == []
    running = {w.owner_name for w in final.workloads if w.phase == "Running"}
    assert {"v1", "v2"} <= running
    assert not any(a.kind in EVICTION_KINDS for p in t2.plans for a in p.actions)
    assert [m for s in t2.states for m in overcommits(s)] == []


def test_a_job_gang_is_stopped_by_suspending_its_job_and_a_bare_pod_by_eviction():
    text = desired(PREEMPT_LOW)
    bare = [w.model_copy(update={"owner_kind": "", "owner_name": ""}) for w in victims()]
    for work, suspended in ((victims(), True), (bare, False)):
        p = run(text, two_nodes(), [*work, fill(), big()])
        stops = [a for a in p.actions if a.kind == "preempt"]
        assert {a.target for a in stops} == {"team-b/v1", "team-b/v2"}
        assert {a.suspend_job for a in stops} == ({"v1", "v2"} if suspended else {None})


# =========================================================================== 10. quotas


def test_a_gated_namespace_keeps_no_gpu_resourcequota():
    """A quota counts gated pods from their creation and would refuse what admission only
    queues: in a gated namespace gpupool empties its quota (the snapshot's objects are those
    of the ungated policy) and creates none where there is none."""
    text = desired()
    work = [pend("team-a", "job", 2)]
    ungated = run(text, two_nodes(), work, gated_namespaces=[])
    assert not [a for a in ungated.actions if a.kind == "quota"]
    p = run(text, two_nodes(), work, gated_namespaces=["team-a"])
    (q,) = [a for a in p.actions if a.kind == "quota"]
    assert (q.target.split("/")[0], q.verb, q.hard) == ("team-a", "update", {})
    assert "gated" in q.reason
    objs = _objects(text)
    objs["quotas"] = [x for x in objs["quotas"] if x.namespace != "team-a"]
    d = load([SourceFile("desired.yaml", text)])
    none = plan(d, snapshot(NOW, two_nodes(), work, gated_namespaces=["team-a"], **objs))
    assert not [a for a in none.actions if a.kind == "quota"]


def test_a_team_over_its_cap_in_a_gated_namespace_gives_back_what_its_owner_recreates():
    """Ungated, a ReplicaSet's pod the quota would admit again is left running (over-cap);
    gated, the recreated pod is held by admission, so it is stopped."""
    text = desired()
    # 7 + 1 whole cards (the quota's 8) and a MIG share: 8.43 card-equivalents, over 8
    work = [
        job("team-a", "big", "a100-1", 7, HIGH),
        job("team-a", "low", "a100-2", [0]).model_copy(
            update={"owner_kind": "ReplicaSet", "owner_name": "low-5d8f"}
        ),
        mig_pod("team-a", "ranker-0", "a100-2", "3g.40gb", gpu_index=1, start=4),
    ]
    nodes = two_nodes(None, [gpu(i, mig=BAL if i == 1 else None, model=A100) for i in range(8)])
    ungated = run(text, nodes, work, gated_namespaces=[])
    assert not [a for a in ungated.actions if a.kind == "preempt"]
    assert "team-a" in {f.subject for f in ungated.findings if f.code == "over-cap"}
    gated = run(text, nodes, work, gated_namespaces=["team-a"])
    (stop,) = [a for a in gated.actions if a.kind == "preempt"]
    assert (stop.target, stop.preemptor, stop.suspend_job) == ("team-a/low", None, None)
