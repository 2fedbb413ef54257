"""The eviction check and the one place that stops work (reconciler/plan/evictions.py), run
alone on a fresh run with its usage ledger.

`stop_refusal`: '' when a workload and its gang may be stopped now; otherwise why not: a member
already stopped by this plan, an unknown or non-preemptible class, under minRuntime (spot has
none), a priority not lower than the preemptor's, the hour's budget (unless `budget=False`).
`evict`: checkpoint (unless spot) -> stop, for every member of the gang (a Job's suspended),
each spending one unit of the budget; their cards are free in the working view and the team's
usage drops. `victims_for`: the workloads the priority rules (or a team reclaiming its own
guarantee) let a preemptor displace, cheapest first.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from reconciler.observe.model import Request
from reconciler.plan.actions import EVICTION_KINDS
from reconciler.plan.evictions import evict, stop_refusal, victim_classes, victims_for
from reconciler.plan.run import Demand
from tests.plan.scenarios import NOW
from tests.plan.support import HIGH, LOW, ago, desired, job, stage_run, two_nodes

LOW_JOB = job("team-b", "low", "a100-1", [0])
SPENT = {"recent_preemptions": [ago(0.1 * i) for i in range(1, 5)]}


def of_job(w, name: str = "w"):
    """`w` as a pod of Job `name`: pods of one Job stop together."""
    return w.model_copy(update={"owner_name": name})


W0 = of_job(job("team-b", "w-0", "a100-1", [0]))
W1 = of_job(job("team-b", "w-1", "a100-2", [0]))


def stopped_already(key: str):
    return lambda run: run.evicted.add(key)


# (workloads, the first of them judged; the preemptor's priority, the budget counts, snapshot
#  kwargs, what the plan did before, why not)
REFUSALS = [
    pytest.param([LOW_JOB], None, True, {}, None, "", id="preemptible-past-min-runtime-may-stop"),
    pytest.param(
        [job("team-b", "high", "a100-1", [0], HIGH)],
        None,
        True,
        {},
        None,
        "team-b/high's class training-high is not preemptible",
        id="a-non-preemptible-class-never",
    ),
    pytest.param(
        [job("team-b", "fresh", "a100-1", [0], started=0.1)],
        None,
        True,
        {},
        None,
        "team-b/fresh has run 6m of minRuntime 15m",
        id="not-before-min-runtime",
    ),
    pytest.param(
        [job("team-b", "fresh", "a100-1", [0], "spot", started=0.1)],
        None,
        True,
        {},
        None,
        "",
        id="spot-has-no-min-runtime",
    ),
    pytest.param(
        [LOW_JOB],
        10000,
        True,
        {},
        None,
        "team-b/low's priority 10000 is not lower",
        id="not-for-a-preemptor-of-the-same-priority",
    ),
    pytest.param(
        [LOW_JOB],
        None,
        True,
        SPENT,
        None,
        "the preemption budget for this hour is spent",
        id="not-once-the-hours-budget-is-spent",
    ),
    pytest.param([LOW_JOB], None, False, SPENT, None, "", id="the-budget-may-be-left-out"),
    pytest.param(
        [W0, W1.model_copy(update={"priority_class": HIGH})],
        None,
        True,
        {},
        None,
        "team-b/w-1's class training-high is not preemptible",
        id="a-gang-member-that-may-not-stop-protects-the-gang",
    ),
    pytest.param(
        [W0, W1],
        None,
        True,
        {},
        stopped_already("team-b/w-1"),
        "team-b/w-1 is already stopped by this plan",
        id="a-gang-a-member-of-which-this-plan-stops-already",
    ),
]


@pytest.mark.parametrize(("work", "priority", "budget", "kw", "before", "why"), REFUSALS)
def test_stop_refusal(work, priority, budget, kw, before, why):
    run = stage_run(desired(), two_nodes(), work, **kw)
    if before is not None:
        before(run)
    assert stop_refusal(run, run.cluster.workloads[work[0].key], priority, budget=budget) == why


# (workloads, the first of them evicted; kind, stops: action id -> (waits for, suspended Job))
EVICTIONS = [
    pytest.param(
        [LOW_JOB],
        "preempt",
        {
            "checkpoint:team-b/low": ((), None),
            "preempt:team-b/low": (("checkpoint:team-b/low",), "low"),
        },
        id="a-job-is-checkpointed-then-preempted-and-suspended",
    ),
    pytest.param(
        [job("team-b", "sweep", "a100-1", [0, 1], "spot")],
        "reclaim",
        {"reclaim:team-b/sweep": ((), "sweep")},
        id="spot-is-stopped-without-a-checkpoint",
    ),
    pytest.param(
        [W0, W1],
        "preempt",
        {
            "checkpoint:team-b/w-0": ((), None),
            "checkpoint:team-b/w-1": ((), None),
            "preempt:team-b/w-0": (("checkpoint:team-b/w-0",), "w"),
            "preempt:team-b/w-1": (("checkpoint:team-b/w-1",), "w"),
        },
        id="stopping-one-pod-stops-its-whole-gang",
    ),
]


@pytest.mark.parametrize(("work", "kind", "stops"), EVICTIONS)
def test_evict(work, kind, stops):
    run = stage_run(desired(), two_nodes(), work)
    budget = run.budget_left
    first = evict(run, run.cluster.workloads[work[0].key], kind, "why", "a100")
    assert first == f"{kind}:{work[0].key}"
    got = {a.id: (a.depends_on, getattr(a, "suspend_job", None)) for a in run.actions.values()}
    assert got == stops
    assert run.evicted == {w.key for w in work}
    assert run.budget_left == budget - len(work)
    assert run.team_usage["team-b"] == Fraction(0)
    assert not any(g.holders for g in run.cluster.slot.values()), "their cards are free"
    assert {k for k, a in run.actions.items() if a.kind in EVICTION_KINDS} == {
        f"{kind}:{w.key}" for w in work
    }


SERVING = Demand("team-b/ranker-0", "team-b", Request(mig={"3g.40gb": 1}), "serving", "a100", NOW)
TRAIN_HIGH = Demand("team-a/job", "team-a", Request(gpus=2), HIGH, "a100", NOW)
TRAIN_LOW = Demand("team-a/job", "team-a", Request(gpus=2), LOW, "a100", NOW)
BORROWED = [
    job("team-b", "big", "a100-1", 8),
    job("team-b", "sweep", "a100-2", [0, 1], "spot"),
]

# (workloads, preemptor, cards needed, victims cheapest first)
VICTIMS = [
    pytest.param(
        [
            job("team-a", "low", "a100-1", [0, 1], ckpt=2),
            job("team-a", "recent", "a100-1", [2, 3], ckpt=0.1),
            job("team-a", "s", "a100-1", [4], "spot"),
            job("team-a", "high", "a100-2", [0], HIGH),
        ],
        SERVING,
        1,
        ["team-a/s", "team-a/recent", "team-a/low"],
        id="serving-may-displace-training-low-and-spot-the-cheapest-first",
    ),
    pytest.param(
        [job("team-a", "low", "a100-1", [0, 1]), job("team-b", "s", "a100-2", [2], "spot")],
        TRAIN_HIGH,
        1,
        ["team-b/s"],
        id="training-high-may-displace-spot-only",
    ),
    pytest.param(
        [*BORROWED, job("team-a", "mine", "a100-2", [2, 3])],
        TRAIN_LOW,
        2,
        ["team-b/sweep"],
        id="a-team-reclaiming-its-guarantee-displaces-lower-borrowed-work",
    ),
    pytest.param(
        [*BORROWED, job("team-a", "mine", "a100-2", [2, 3, 4, 5])],
        TRAIN_LOW,
        2,
        [],
        id="beyond-its-guarantee-a-team-reclaims-nothing",
    ),
]


@pytest.mark.parametrize(("work", "preemptor", "need", "victims"), VICTIMS)
def test_victims_for(work, preemptor, need, victims):
    run = stage_run(desired(), two_nodes(), work)
    running = [w for w in run.cluster.workloads.values() if w.phase == "Running"]
    classes = victim_classes(run, preemptor.priority_class)
    got = victims_for(run, running, preemptor, "a100", classes, need)
    assert [c.key for c in got] == victims
    assert not run.actions and not run.evicted, "choosing victims stops nothing"
