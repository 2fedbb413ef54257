"""Step 3, demand (reconciler/plan/demand.py), run alone on a fresh run.

`pending_demand`: each pending pod is a unit of demand, and the pending whole-card pods of one
gang (a Job's) one unit whose members are its pods; pods admitted already or gated by another
admission system are not demand; a gang whose pods disagree, or that is not complete yet,
waits (`gang-inconsistent`, `gang-incomplete`, a Hold on each gated pod: `record_wait`).
`suspended_demand`: a Job gpupool suspended is demand for all its pods. `unreachable`: why a
unit can never run in its pool, whatever is freed ('' when it can). `kueue_findings`: in
kueue mode, what Kueue will not see.
"""

from __future__ import annotations

import pytest

from reconciler.observe.model import Request, SuspendedJob
from reconciler.plan.demand import (
    describe,
    kueue_findings,
    pending_demand,
    suspended_demand,
    unreachable,
)
from reconciler.plan.run import Demand
from tests.plan.support import ago, desired, findings_of, pend, stage_run, two_nodes

KUEUE = (
    "  defaultClass: training-low\n",
    "  defaultClass: training-low\n  admission: {controller: kueue}\n",
)
SUSPENDED = SuspendedJob(
    namespace="team-a",
    name="sus",
    parallelism=2,
    request=Request(gpus=2),
    priority_class="training-low",
    pool="a100",
    suspended_at=ago(1),
)


def pod(name: str, **update):
    """A pending 2-card pod of team-a (a Job's: `owner_name` groups pods into a gang)."""
    return pend("team-a", name, 2).model_copy(update=update)


# (workloads, snapshot kwargs, demand: key -> (members, gated, origin, description),
#  pods held, findings)
ROWS = [
    pytest.param(
        [pod("job")],
        {},
        {"team-a/job": (("team-a/job",), True, "pending pod", "2 whole GPUs")},
        set(),
        set(),
        id="a-pending-pod-is-one-unit",
    ),
    pytest.param(
        [pod("job-0", owner_name="job"), pod("job-1", owner_name="job")],
        {},
        {
            "team-a/job-0": (
                ("team-a/job-0", "team-a/job-1"),
                True,
                "pending pod",
                "2 pods x 2 whole GPUs",
            )
        },
        set(),
        set(),
        id="the-pending-pods-of-one-job-are-one-gang",
    ),
    pytest.param(
        [
            pod("a", admission="admitted"),
            pod("b", admission="other"),
            pod("c", admission="scheduler"),
        ],
        {},
        {"team-a/c": (("team-a/c",), False, "pending pod", "2 whole GPUs")},
        set(),
        set(),
        id="pods-admitted-or-gated-by-another-system-are-not-demand",
    ),
    pytest.param(
        [pod("job-0", owner_name="job"), pod("job-1", owner_name="job", request=Request(gpus=4))],
        {},
        {},
        {"team-a/job-0", "team-a/job-1"},
        {("gang-inconsistent", "team-a/job-0")},
        id="a-gang-whose-pods-disagree-waits",
    ),
    pytest.param(
        [pod(f"job-{i}", owner_name="job", gang_size=3) for i in range(2)],
        {},
        {},
        {"team-a/job-0", "team-a/job-1"},
        {("gang-incomplete", "team-a/job-0")},
        id="a-gang-not-complete-yet-waits",
    ),
    pytest.param(
        [pod("job")],
        {"gated_namespaces": ["team-b"]},
        {"team-a/job": (("team-a/job",), True, "pending pod", "2 whole GPUs")},
        set(),
        {("gated-unmanaged-namespace", "team-a/job")},
        id="a-gated-pod-outside-the-gated-namespaces-is-demand-with-a-warning",
    ),
    pytest.param(
        [],
        {"suspended_jobs": [SUSPENDED]},
        {
            "team-a/sus": (
                ("team-a/sus#0", "team-a/sus#1"),
                False,
                "suspended job",
                "2 pods x 2 whole GPUs",
            )
        },
        set(),
        set(),
        id="a-suspended-job-is-demand-for-all-its-pods",
    ),
]


@pytest.mark.parametrize(("work", "kw", "demand", "held", "findings"), ROWS)
def test_demand(work, kw, demand, held, findings):
    run = stage_run(desired(), two_nodes(), work, **kw)
    units = pending_demand(run) + suspended_demand(run)
    assert {p.key: (p.members, p.gated, p.origin, describe(p)) for p in units} == demand
    assert all(p.pool == "a100" for p in units)
    assert set(run.actions) == {f"hold:{k}" for k in held}
    assert findings_of(run) == findings


# (request, why it can never run in a100: '' when it can)
UNREACHABLE = [
    pytest.param(Request(gpus=8), "", id="eight-cards-fit-the-largest-node"),
    pytest.param(
        Request(gpus=9),
        "asks 9 GPUs on one node; the largest node of a100 has 8",
        id="more-cards-than-any-node-has",
    ),
    pytest.param(
        Request(shared_slices=5),
        "asks 5 shared slices of one card; a100's cards offer 4",
        id="more-slices-than-a-card-offers",
    ),
    pytest.param(
        Request(mig={"7g.80gb": 1}),
        "asks MIG 7g.80gb; no layout of a100 offers it",
        id="a-mig-profile-no-layout-offers",
    ),
    pytest.param(
        Request(shared_slices=1, gpu_memory_mib=100000),
        "declares 100000 MiB of GPU memory; a card of a100 has 81920 MiB",
        id="more-memory-than-a-card-has",
    ),
]


@pytest.mark.parametrize(("request_", "why"), UNREACHABLE)
def test_unreachable(request_, why):
    run = stage_run(desired(), two_nodes())
    unit = Demand("team-b/x", "team-b", request_, None, "a100", None)
    assert unreachable(run, run.cluster.pools["a100"], unit) == why


# (snapshot kwargs, findings)
KUEUE_ROWS = [
    pytest.param({}, {("kueue-not-installed", "Kueue")}, id="kueue-mode-without-kueues-crds"),
    pytest.param(
        {"kueue": []},
        {("kueue-queue-name-missing", "team-a/job")},
        id="gated-training-without-a-queue-name-in-kueue-mode",
    ),
]


@pytest.mark.parametrize(("kw", "findings"), KUEUE_ROWS)
def test_kueue_findings(kw, findings):
    run = stage_run(desired(KUEUE), two_nodes(), [pod("job")], **kw)
    kueue_findings(run)
    assert findings_of(run) == findings
