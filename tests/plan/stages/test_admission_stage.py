"""Stages 6, 7 and 11, admission (reconciler/plan/stages/admission.py), run alone on a fresh
run with its usage ledger.

`admit_demand` returns the demand that may be worked for, highest priority first: in a pool,
reachable there, within the team's cap and borrowing limit and, for a replica not created yet,
its namespace's ResourceQuota; the rest waits (a finding, and a Hold on its gated pods; a held
replica's finding is its service's, so only its wait is recorded). What it admits counts in
the ledger at once. `honour_reservations` places a gated gang on the cards its pods'
reservations name when all of them are free. `emit_admissions`: an Admit for every gated pending
gang the plan placed (node, cards, the pods stopped for it), a Resume for a suspended Job that
fits, nothing for a pod kube-scheduler places itself.
"""

from __future__ import annotations

import pytest

from reconciler.observe.builders import gpu, mig_pod
from reconciler.observe.model import Request, SuspendedJob
from reconciler.plan.actions import Admit, Hold, Resume
from reconciler.plan.demand import pending_demand, suspended_demand
from reconciler.plan.evictions import evict
from reconciler.plan.run import Demand
from reconciler.plan.stages.admission import admit_demand, emit_admissions, honour_reservations
from tests.plan.scenarios import A100, NOW
from tests.plan.support import (
    HIGH,
    LOW,
    ago,
    desired,
    findings_of,
    job,
    pend,
    run_a,
    stage_run,
    two_nodes,
)

TEAM_A_POOLS = "pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 4}}]"
BORROW_2 = (TEAM_A_POOLS, TEAM_A_POOLS.replace("borrowingLimit: 4", "borrowingLimit: 2"))
TWO_3G = [gpu(i, mig=["3g.40gb", "3g.40gb"], model=A100) for i in range(4)]
EIGHT_3G = [
    mig_pod("team-b", f"ranker-{2 * i + j}", "a100-1", "3g.40gb", gpu_index=i, start=4 * j)
    for i in range(4)
    for j in range(2)
]
REPLICA = Demand(
    key="team-b/ranker#replica-9",
    namespace="team-b",
    request=Request(mig={"3g.40gb": 1}),
    priority_class="serving",
    pool="a100",
    created=NOW,
    origin="scale-up of team-b/ranker",
    order=8,
)

# (swaps, a100-1's cards, workloads, extra demand, admitted keys, waits (key -> why, in part),
#  findings)
ADMIT_ROWS = [
    pytest.param(
        (),
        None,
        [pend("team-a", "job", 2)],
        [],
        ["team-a/job"],
        {},
        set(),
        id="demand-within-the-teams-limits-is-admitted",
    ),
    pytest.param(
        (),
        None,
        [run_a("team-a", "big", "a100-1", 8), pend("team-a", "more", 2, HIGH)],
        [],
        [],
        {"team-a/more": "over its cap of 8"},
        {("held-cap", "team-a/more")},
        id="over-the-teams-cap-is-held",
    ),
    pytest.param(
        (BORROW_2,),
        None,
        [run_a("team-a", "four", "a100-1", 4), pend("team-a", "borrow", 4)],
        [],
        [],
        {"team-a/borrow": "over guarantee + borrowing (6)"},
        {("held-borrowing", "team-a/borrow")},
        id="beyond-guarantee-plus-borrowing-limit-is-held",
    ),
    pytest.param(
        (),
        None,
        [
            run_a("team-a", "six", "a100-1", 6),
            pend("team-a", "low", 2, LOW, created=2),
            pend("team-a", "high", 2, HIGH, created=0.1),
        ],
        [],
        ["team-a/high"],
        {"team-a/low": "over its cap of 8"},
        {("held-cap", "team-a/low")},
        id="higher-priority-is-admitted-first-the-older-lower-one-is-held",
    ),
    pytest.param(
        (),
        None,
        [mig_pod("team-b", "big-0", None, "7g.80gb")],
        [],
        [],
        {"team-b/big-0": "no pool can run it"},
        {("no-pool", "team-b/big-0")},
        id="demand-no-pool-offers-waits",
    ),
    pytest.param(
        (),
        None,
        [pend("team-a", "giant", 16, HIGH)],
        [],
        [],
        {"team-a/giant": "can never run as asked"},
        {("unreachable", "team-a/giant")},
        id="demand-that-can-never-run-in-its-pool-waits",
    ),
    pytest.param(
        (),
        TWO_3G + [gpu(i) for i in range(4, 8)],
        EIGHT_3G,
        [REPLICA],
        [],
        {REPLICA.key: "ResourceQuota allows 8 requests.nvidia.com/mig-3g.40gb"},
        set(),
        id="a-replica-its-resourcequota-would-refuse-waits-without-a-finding",
    ),
]


@pytest.mark.parametrize(
    ("swaps", "gpus1", "work", "extra", "admitted", "waits", "findings"), ADMIT_ROWS
)
def test_admit_demand(swaps, gpus1, work, extra, admitted, waits, findings):
    run = stage_run(desired(*swaps), two_nodes(gpus1), work)
    before = dict(run.team_usage)
    out = admit_demand(run, pending_demand(run) + extra)
    assert [p.key for p in out] == admitted
    assert set(run.waiting) == set(waits)
    assert all(why in run.waiting[key] for key, why in waits.items())
    assert findings_of(run) == findings
    holds = {(a.code, a.target) for a in run.actions.values() if isinstance(a, Hold)}
    assert holds == findings, "each gated pod that waits is held with its finding's code"
    assert set(run.actions) == {f"hold:{key}" for _, key in holds}
    for p in out:  # admitted demand counts in the ledger at once
        team = run.team(p.namespace)
        assert run.team_usage[team] == before.get(team, 0) + p.request.gpus


def reserved(w, node: str, gpus: list[int]):
    return w.model_copy(update={"reserved_node": node, "reserved_gpus": gpus})


def place(run, key: str, *cards: tuple[str, int]) -> None:
    """What placement (step 8) would do: `key` holds these cards in the working view."""
    run.cluster.pools["a100"].reserve([run.cluster.slot[c] for c in cards], key)


SUSPENDED = SuspendedJob(
    namespace="team-a",
    name="sus",
    parallelism=1,
    request=Request(gpus=2),
    priority_class="training-low",
    pool="a100",
    suspended_at=ago(1),
)


def on_its_reservation(run, demand):
    honour_reservations(run, demand)


def placed_by_hand(key, *cards):
    return lambda run, demand: place(run, key, *cards)


def preempted_then_placed(run, demand):
    evict(run, run.cluster.workloads["team-b/low"], "preempt", "for job", "a100")
    place(run, "team-a/job", ("a100-1", 0))


# (workloads, snapshot kwargs, what places the demand, on its reservation,
#  emitted: action id -> (node, cards, pods stopped for it) or None for a Resume)
EMIT_ROWS = [
    pytest.param(
        [reserved(pend("team-a", "job", 2, HIGH), "a100-1", [2, 3])],
        {},
        on_its_reservation,
        {"team-a/job"},
        {"admit:team-a/job": ("a100-1", (2, 3), ())},
        id="a-gated-gang-whose-reserved-cards-are-free-is-placed-there-and-admitted",
    ),
    pytest.param(
        [
            reserved(pend("team-a", "job", 2, HIGH), "a100-1", [2, 3]),
            job("team-b", "other", "a100-1", [3]),
        ],
        {},
        on_its_reservation,
        set(),
        {},
        id="a-reservation-with-a-busy-card-is-not-honoured",
    ),
    pytest.param(
        [pend("team-a", "job", 1, HIGH), job("team-b", "low", "a100-1", [0])],
        {},
        preempted_then_placed,
        set(),
        {"admit:team-a/job": ("a100-1", (0,), ("team-b/low",))},
        id="an-admit-waits-for-the-pod-stopped-on-its-card",
    ),
    pytest.param(
        [pend("team-a", "job", 2).model_copy(update={"admission": "scheduler"})],
        {},
        placed_by_hand("team-a/job", ("a100-1", 0), ("a100-1", 1)),
        set(),
        {},
        id="a-pod-kube-scheduler-places-is-never-admitted",
    ),
    pytest.param(
        [],
        {"suspended_jobs": [SUSPENDED]},
        placed_by_hand("team-a/sus#0", ("a100-1", 0), ("a100-1", 1)),
        set(),
        {"resume:team-a/sus": None},
        id="a-suspended-job-that-fits-is-resumed",
    ),
]


@pytest.mark.parametrize(("work", "kw", "placer", "on_reservation", "emitted"), EMIT_ROWS)
def test_reservations_and_admissions(work, kw, placer, on_reservation, emitted):
    run = stage_run(desired(), two_nodes(), work, **kw)
    demand = admit_demand(run, pending_demand(run) + suspended_demand(run))
    placer(run, demand)
    assert {p.key for p in demand if p.on_reservation} == on_reservation
    assert emit_admissions(run, demand) is None
    got = {}
    for a in run.actions.values():
        if isinstance(a, Admit):
            (pod,) = a.pods
            got[a.id] = (pod.node, pod.gpus, a.after)
        elif isinstance(a, Resume):
            got[a.id] = None
    assert got == emitted
    assert not run.findings
