"""Reclaiming a guarantee (Quota `reclaimWithinCohort`), judged over several cycles.

The golden desired state (tests/plan/scenarios.py: team-a guaranteed 4 + borrows 4, team-b
guaranteed 4 + borrows 12, budget 4/h, minRuntime 15m) on two 8-card A100 nodes. Team-b runs
all 16 cards, borrowing 12 of them (four training-low jobs of 4 cards); team-a, idle until
now, asks for 4 cards of its guarantee at the same priority (training-low).

Today's rule (`LowerPriority`) frees nothing for it: a borrower of equal priority would be
recreated and race the lender for the cards. Where gpupool gates the lender's namespaces the
default is `Any`: the borrower's stopped job waits for gpupool's plan (its Job suspended, or its
recreated pods gated), so the lender is admitted onto the cards and keeps them. Each row of the
table changes one thing and says what the plan does. Plans take effect through
`reconciler.sim.effects.step` (`tests.plan.test_cycles.simulate`).
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from reconciler.observe.builders import snapshot
from reconciler.observe.model import Workload
from reconciler.plan.actions import EVICTION_KINDS
from reconciler.plan.model import Plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.cycles_support import overcommits, simulate, undone
from tests.plan.scenarios import NOW, _objects
from tests.plan.support import HIGH, LOW, ago, desired, job, pend, run, two_nodes

GATED = ["team-a", "team-b"]
LENDER = "team-a/mine"
CYCLES = 6


def reclaim(mode: str, team: str = "team-a") -> tuple[str, str]:
    """A swap setting `team`'s Quota reclaimWithinCohort."""
    old = f"namespaces: [{team}]\n"
    return old, old + f"  reclaimWithinCohort: {mode}\n"


def borrower(cls: str = LOW, owner: str = "Job", **kw) -> list[Workload]:
    """team-b on all 16 cards (guarantee 4, so it borrows 12), four jobs of 4 cards."""
    work = [
        job("team-b", "b-1", "a100-1", [0, 1, 2, 3], cls, **kw),
        job("team-b", "b-2", "a100-1", [4, 5, 6, 7], cls, **kw),
        job("team-b", "b-3", "a100-2", [0, 1, 2, 3], cls, **kw),
        job("team-b", "b-4", "a100-2", [4, 5, 6, 7], cls, **{"started": 8, "ckpt": 1, **kw}),
    ]
    return [w.model_copy(update={"owner_kind": owner}) for w in work]


def lender(cls: str = LOW) -> Workload:
    """team-a's gated 4-card job, idle team-a's first."""
    return pend("team-a", "mine", 4, cls)


def stops(p: Plan) -> set[str]:
    return {a.target for a in p.actions if a.kind in EVICTION_KINDS}


def waits(p: Plan, key: str = LENDER, code: str = "waits") -> str:
    """The message of `key`'s finding `code` ('' when there is none)."""
    return next((f.message for f in p.findings if f.code == code and f.subject == key), "")


# =========================================================================== over cycles


@pytest.mark.parametrize(
    ("owner", "suspended"),
    [
        pytest.param("Job", True, id="job-suspended"),
        pytest.param("PyTorchJob", False, id="pods-recreated-gated"),
    ],
)
def test_a_gated_lender_takes_its_guarantee_back_from_an_equal_priority_borrower(owner, suspended):
    """Default (unset) reclaimWithinCohort, both teams' namespaces gated: team-a's job is
    admitted and runs on cards team-b borrowed; team-b's cheapest job is checkpointed and
    stopped (its Job suspended, or its pods evicted and recreated gated), waits, and is not
    admitted back onto those cards while team-a runs; nothing is undone."""
    text = desired()
    d = load([SourceFile("desired.yaml", text)])
    work = [*borrower(owner=owner), lender()]
    start = snapshot(NOW, two_nodes(), work, gated_namespaces=GATED, **_objects(text))
    t = simulate(d, start, timedelta(seconds=60), cycles=CYCLES)
    assert t.error is None and len(t.plans) == CYCLES
    assert [m for s in t.states for m in overcommits(s)] == []
    assert undone(t) == []

    # one borrower stopped, once, after a checkpoint, for team-a's job, naming the rule
    evictions = [a for p in t.plans for a in p.actions if a.kind in EVICTION_KINDS]
    assert Counter(a.target for a in evictions) == {"team-b/b-1": 1}
    (stop,) = evictions
    assert (stop.kind, stop.preemptor) == ("preempt", LENDER)
    assert "checkpoint:team-b/b-1" in stop.depends_on
    assert "reclaims team team-a's guarantee" in stop.reason
    assert "reclaimWithinCohort Any" in stop.reason
    assert bool(stop.suspend_job) is suspended
    assert len(t.states[-1].recent_preemptions) == 1

    # team-a runs on the cards team-b's job held, from the first cycle it is placed to the end
    freed = [("a100-1", i) for i in (0, 1, 2, 3)]
    placed = [
        k
        for k, s in enumerate(t.states)
        if any(w.key == LENDER and w.phase == "Running" for w in s.workloads)
    ]
    assert placed and placed == list(range(placed[0], CYCLES + 1))
    for s in t.states[placed[0] :]:
        mine = next(w for w in s.workloads if w.key == LENDER)
        assert sorted((mine.node, a.gpu) for a in mine.allocations) == freed
        # team-b's stopped job runs nowhere and is admitted nowhere while team-a runs
        assert not any(w.owner_name == "b-1" and w.node for w in s.workloads)

    # it waits: suspended, or recreated gated; the plan says why and admits nothing of it
    final = t.states[-1]
    if suspended:
        assert {j.key for j in final.suspended_jobs} == {"team-b/b-1"}
    else:
        (back,) = [w for w in final.workloads if w.owner_name == "b-1"]
        assert (back.phase, back.admission) == ("Pending", "gpupool")
    for p in t.plans[placed[0] :]:  # settled: at most the reason shown on its gated pod
        assert {a.kind for a in p.actions} <= {"hold"}
        assert {f.subject for f in p.findings if f.code == "waits"} == {"team-b/b-1"}


# =========================================================================== one plan

NOTHING = "nothing in a100 can be freed"
HIGH_PREEMPTIBLE = (
    "{name: training-high, value: 50000, workload: training, preemptible: false}",
    "{name: training-high, value: 50000, workload: training}",
)
HIGH_PREEMPTS_LOW = (
    "{preemptor: training-high, victims: [spot], when: always}",
    "{preemptor: training-high, victims: [training-low, spot], when: always}",
)


def wide_borrower() -> list[Workload]:
    """team-b (guarantee 12 here) on 16 cards: one preemptible 8-card job, 8 cards it keeps."""
    return [job("team-b", "wide", "a100-1", 8), job("team-b", "keep", "a100-2", 8, HIGH)]


def split_gang() -> list[Workload]:
    """team-a's gang of two 4-card pods, one per node; team-b holds 12 of the 16 cards, one
    preemptible 4-card job per node; team-c, without a Quota, holds the rest of a100-1."""
    pods = [
        pend("team-a", f"mine-{i}", 4).model_copy(update={"owner_name": "mine"}) for i in (0, 1)
    ]
    return [
        job("team-c", "other", "a100-1", [0, 1, 2, 3], HIGH),
        job("team-b", "b-1", "a100-1", [4, 5, 6, 7]),
        job("team-b", "keep", "a100-2", [0, 1, 2, 3], HIGH),
        job("team-b", "b-2", "a100-2", [4, 5, 6, 7]),
        *pods,
    ]


TEAM_A_8 = (
    "pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 4}}]",
    "pools: [{pool: a100, whole: {guaranteed: 8}}]",
)
TEAM_B_GUARANTEE = "pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 12}, "
TEAM_B_NO_POOLS = (
    TEAM_B_GUARANTEE + "mig: {3g.40gb: {guaranteed: 2, borrowingLimit: 6}}}]",
    "pools: []",
)

ROWS = [
    pytest.param((), borrower(), GATED, {"team-b/b-1"}, "", id="default-gated-any"),
    pytest.param(
        (), borrower(), ["team-a"], {"team-b/b-1"}, "", id="default-lender-gated-job-suspended"
    ),
    pytest.param((), borrower(), [], set(), NOTHING, id="default-not-gated-lower-priority"),
    pytest.param((), borrower(), None, set(), NOTHING, id="default-gating-unknown"),
    pytest.param(
        (reclaim("LowerPriority"),), borrower(), GATED, set(), NOTHING, id="lower-priority"
    ),
    pytest.param((reclaim("Never"),), borrower(), GATED, set(), NOTHING, id="never"),
    pytest.param(
        (reclaim("Never"),), borrower("spot"), GATED, set(), NOTHING, id="never-not-even-spot"
    ),
    pytest.param(
        (reclaim("LowerPriority"),),
        borrower("spot"),
        GATED,
        {"team-b/b-1"},
        "",
        id="lower-priority-spot-reclaimed",
    ),
    pytest.param((reclaim("Any"),), borrower(), [], {"team-b/b-1"}, "", id="any-job-suspended"),
    # pods another job object owns are evicted and recreated at once, ungated: not held
    pytest.param(
        (reclaim("Any"),),
        borrower(owner="PyTorchJob"),
        [],
        set(),
        NOTHING,
        id="any-borrower-not-held-back",
    ),
    pytest.param(
        (),
        borrower(owner="PyTorchJob"),
        ["team-a"],
        set(),
        NOTHING,
        id="default-borrower-pods-ungated",
    ),
    pytest.param((), borrower(HIGH), GATED, set(), NOTHING, id="non-preemptible-borrower"),
    pytest.param(
        (HIGH_PREEMPTIBLE,),
        borrower(HIGH),
        GATED,
        {"team-b/b-1"},
        "",
        id="higher-priority-borrower-reclaimed",
    ),
    # training-high could preempt training-low back by the rules: it would oscillate
    pytest.param(
        (HIGH_PREEMPTIBLE, HIGH_PREEMPTS_LOW),
        borrower(HIGH),
        GATED,
        set(),
        NOTHING,
        id="borrower-whose-class-outranks-by-rule",
    ),
    pytest.param(
        (),
        borrower(started=0.1),
        GATED,
        set(),
        NOTHING,
        id="borrower-within-min-runtime",
    ),
    pytest.param(
        ((TEAM_B_GUARANTEE, TEAM_B_GUARANTEE.replace("guaranteed: 4", "guaranteed: 11")),),
        wide_borrower(),
        GATED,
        set(),
        NOTHING,
        id="job-larger-than-what-its-team-borrows",
    ),
    pytest.param(
        (), wide_borrower(), GATED, {"team-b/wide"}, "", id="job-within-what-its-team-borrows"
    ),
    pytest.param(
        (TEAM_A_8, (TEAM_B_GUARANTEE, TEAM_B_GUARANTEE.replace("guaranteed: 4", "guaranteed: 7"))),
        split_gang(),
        GATED,
        set(),
        "reclaiming it would stop 8 whole cards of team team-b, which borrows 5 in a100",
        id="gang-over-nodes-beyond-what-a-team-borrows",
    ),
    # team-a's guarantee is 4: the gang's 8 cards are not its guarantee, nothing is reclaimed
    # (not even spot work: every pod of the gang counts)
    pytest.param((), split_gang(), GATED, set(), NOTHING, id="gang-beyond-the-guarantee"),
    pytest.param(
        (),
        [
            w.model_copy(update={"priority_class": "spot"}) if w.key.startswith("team-b/b") else w
            for w in split_gang()
        ],
        [],
        set(),
        NOTHING,
        id="gang-beyond-the-guarantee-spot",
    ),
    # a Quota without a guarantee in the pool: all team-b runs there is borrowed
    pytest.param(
        (TEAM_B_NO_POOLS,), borrower(), GATED, {"team-b/b-1"}, "", id="borrower-without-guarantee"
    ),
    pytest.param(
        (TEAM_A_8,),
        split_gang(),
        GATED,
        {"team-b/b-1", "team-b/b-2"},
        "",
        id="gang-over-nodes-within-what-a-team-borrows",
    ),
]


@pytest.mark.parametrize(("swaps", "work", "gated", "stopped", "why"), ROWS)
def test_what_a_lender_coming_back_may_stop(swaps, work, gated, stopped, why):
    lending = [w for w in work if w.namespace == "team-a"] or [lender()]
    rest = [w for w in work if w.namespace != "team-a"]
    p = run(desired(*swaps), two_nodes(), [*rest, *lending], gated_namespaces=gated)
    assert stops(p) == stopped
    head = lending[0].key
    if stopped:
        assert not waits(p, head)
        assert {a.preemptor for a in p.actions if a.kind == "preempt"} == {head}
    else:
        assert why in waits(p, head)


def test_a_spent_budget_keeps_the_borrower_running_and_says_so():
    text = desired()
    spent = [ago(0.5)] * 4  # budgetPerHour 4
    p = run(
        text, two_nodes(), [*borrower(), lender()], gated_namespaces=GATED, recent_preemptions=spent
    )
    assert not stops(p)
    assert "the preemption budget for this hour has 0 left" in waits(p, code="budget-spent")
    assert {a.target for a in p.actions if a.kind == "hold"} == {LENDER}
    ok = run(
        text,
        two_nodes(),
        [*borrower(), lender()],
        gated_namespaces=GATED,
        recent_preemptions=spent[:3],
    )
    assert stops(ok) == {"team-b/b-1"}


def test_the_field_is_kueues_in_kueue_mode():
    """Kueue mode: the ClusterQueue says how its guarantee comes back (unset: `Any`)."""
    from reconciler.plan.kueue import cluster_queue_spec

    for swaps, want in (((), "Any"), ((reclaim("Never"),), "Never")):
        d = load([SourceFile("desired.yaml", desired(*swaps))])
        spec = cluster_queue_spec(d, d.quotas["team-a"])
        assert spec["preemption"]["reclaimWithinCohort"] == want


def test_the_field_is_strict():
    from reconciler.policy.problems import InvalidDesiredState

    with pytest.raises(InvalidDesiredState, match="reclaimWithinCohort"):
        load([SourceFile("desired.yaml", desired(reclaim("any")))])
