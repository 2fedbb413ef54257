"""Stage 4, team caps (reconciler/plan/stages/caps.py), run alone on a fresh run with its
usage ledger.

`enforce_team_caps`: a team over its Quota's maxGPUs gives back its cheapest preemptible work
(Preempt naming no preemptor, after its checkpoint unless spot; a Job's is suspended), until it
is within its cap, but only work its namespace's ResourceQuota keeps out once stopped: a pod
its owner would recreate and the quota admit again is left running, as is work the eviction
check (`stop_refusal`) refuses; then `over-cap` says so (`budget-spent` too when the hour's
budget stopped it). In a namespace gpupool gates, admission holds a recreated pod, so it may
be stopped. The ledger follows: the team's usage drops by what was stopped.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from reconciler.observe.builders import gpu, mig_pod
from reconciler.plan.actions import Checkpoint, Preempt
from reconciler.plan.stages.caps import enforce_team_caps
from tests.plan.scenarios import A100, BAL
from tests.plan.support import HIGH, ago, desired, findings_of, job, stage_run, two_nodes

BIG = job("team-a", "big", "a100-1", 8, HIGH)
BIG7 = job("team-a", "big", "a100-1", 7, HIGH)
EXTRA = job("team-a", "extra", "a100-2", [0])
RANKER = mig_pod("team-a", "ranker-0", "a100-2", "3g.40gb", gpu_index=1, start=4, started=ago(2))
MIG_CARD = {"gpus2": [gpu(i, mig=BAL if i == 1 else None, model=A100) for i in range(8)]}
RECREATED = job("team-a", "low", "a100-2", [0]).model_copy(
    update={"owner_kind": "ReplicaSet", "owner_name": "low-5d8f"}
)
SPENT = {"recent_preemptions": [ago(0.1 * i) for i in range(1, 5)]}


def preempted(run) -> dict[str, tuple]:
    """Preempt id -> (its suspended Job, preemptor, waits for its checkpoint)."""
    return {
        a.id: (a.suspend_job, a.preemptor, f"checkpoint:{a.target}" in a.depends_on)
        for a in run.actions.values()
        if isinstance(a, Preempt)
    }


# (workloads, snapshot kwargs, preemptions, team-a's usage after, findings)
ROWS = [
    pytest.param([BIG], {}, {}, 8, set(), id="a-team-at-its-cap-keeps-everything"),
    pytest.param(
        [BIG, EXTRA],
        {},
        {"preempt:team-a/extra": ("extra", None, True)},
        8,
        set(),
        id="over-by-one-its-cheapest-job-is-preempted-and-suspended",
    ),
    pytest.param(
        [BIG7, job("team-a", "low", "a100-1", [7]), job("team-a", "sweep", "a100-2", [0], "spot")],
        {},
        {"preempt:team-a/sweep": ("sweep", None, False)},
        8,
        set(),
        id="spot-goes-before-training-low-and-without-a-checkpoint",
    ),
    pytest.param(
        [BIG7, RECREATED, RANKER],
        MIG_CARD,
        {},
        Fraction(17, 2),
        {("over-cap", "team-a")},
        id="a-pod-its-owner-recreates-within-the-quota-is-left-running",
    ),
    pytest.param(
        [BIG7, RECREATED, RANKER],
        {**MIG_CARD, "gated_namespaces": ["team-a"]},
        {"preempt:team-a/low": (None, None, True)},
        Fraction(15, 2),
        set(),
        id="in-a-gated-namespace-admission-holds-it-so-it-is-stopped",
    ),
    pytest.param(
        [BIG, job("team-a", "more", "a100-2", [0, 1], HIGH)],
        {},
        {},
        10,
        {("over-cap", "team-a")},
        id="non-preemptible-work-stays-over-the-cap",
    ),
    pytest.param(
        [BIG, EXTRA],
        SPENT,
        {},
        9,
        {("budget-spent", "team-a"), ("over-cap", "team-a")},
        id="the-hours-budget-spent-stops-it-and-says-so",
    ),
    pytest.param(
        [BIG, EXTRA, job("team-b", "cheap", "a100-2", [1, 2], cls="spot")],
        {},
        {"preempt:team-a/extra": ("extra", None, True)},
        8,
        set(),
        id="other-teams-work-is-untouched",
    ),
]


@pytest.mark.parametrize(("work", "kw", "preempts", "usage", "findings"), ROWS)
def test_team_caps(work, kw, preempts, usage, findings):
    kw = dict(kw)
    run = stage_run(desired(), two_nodes(None, kw.pop("gpus2", None)), work, **kw)
    budget = run.budget_left
    assert enforce_team_caps(run) is None
    assert preempted(run) == preempts
    checkpoints = {a.target for a in run.actions.values() if isinstance(a, Checkpoint)}
    assert set(run.actions) == set(preempts) | {f"checkpoint:{t}" for t in checkpoints}
    assert run.team_usage["team-a"] == usage
    assert run.budget_left == budget - len(preempts)
    assert findings_of(run) == findings
