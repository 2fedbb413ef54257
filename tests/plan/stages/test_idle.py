"""Stage 5, idle reclaim (reconciler/plan/stages/idle.py), run alone on a fresh run with its
usage ledger.

`reclaim_idle`: a running workload whose whole cards all stayed under the MaintenancePolicy's
`utilizationBelow` for `idleFor` (counted from its start at the earliest) is reclaimed (a
Reclaim after its checkpoint, its Job suspended), unless its class is excluded; with
`action: report` it is only an `idle-report`; one the eviction check refuses is an
`idle-protected` finding. MIG and shared cards are not judged: a card's utilization is not
one workload's there.
"""

from __future__ import annotations

import pytest

from reconciler.observe.builders import gpu, mig_pod
from reconciler.plan.actions import Reclaim
from reconciler.plan.stages.idle import reclaim_idle
from tests.plan.scenarios import A100, BAL
from tests.plan.support import (
    FORGOTTEN,
    HIGH,
    IDLE,
    ago,
    desired,
    findings_of,
    idle_gpus,
    job,
    maint,
    stage_run,
    two_nodes,
)

FORGOT = "team-b/forgotten"
HIGH_FORGOTTEN = job("team-b", "forgotten", "a100-1", [0, 1], HIGH, ckpt=3)
IDLE_MIG = [gpu(0, mig=BAL, model=A100, util=1.0, idle_since=ago(3))] + idle_gpus()[1:]
RANKER = mig_pod(
    "team-b", "ranker-0", "a100-1", "3g.40gb", start=4, cls="training-low", started=ago(5)
)

# (idleReclaim rule, a100-1's cards, workloads, reclaims, findings)
ROWS = [
    pytest.param(
        IDLE,
        idle_gpus(),
        [FORGOTTEN],
        {f"reclaim:{FORGOT}": ("forgotten", (0, 1))},
        set(),
        id="whole-cards-idle-past-idle-for-are-reclaimed",
    ),
    pytest.param(IDLE, idle_gpus(util=40.0), [FORGOTTEN], {}, set(), id="busy-cards-are-kept"),
    pytest.param(
        IDLE, idle_gpus(idle=0.5), [FORGOTTEN], {}, set(), id="idle-shorter-than-idle-for-is-kept"
    ),
    pytest.param(
        IDLE,
        idle_gpus(idle=3),
        [job("team-b", "fresh", "a100-1", [0, 1], started=0.5)],
        {},
        set(),
        id="idleness-counts-from-the-workloads-start-at-the-earliest",
    ),
    pytest.param(
        IDLE, idle_gpus(), [HIGH_FORGOTTEN], {}, set(), id="an-excluded-class-is-not-reclaimed"
    ),
    pytest.param(
        IDLE.replace("}", ", action: report}"),
        idle_gpus(),
        [FORGOTTEN],
        {},
        {("idle-report", FORGOT)},
        id="action-report-is-a-finding-only",
    ),
    pytest.param(
        IDLE.replace("training-high", "training-low"),
        idle_gpus(),
        [HIGH_FORGOTTEN],
        {},
        {("idle-protected", FORGOT)},
        id="work-the-eviction-check-refuses-is-idle-protected",
    ),
    pytest.param(IDLE, IDLE_MIG, [RANKER], {}, set(), id="mig-cards-are-not-judged"),
]


@pytest.mark.parametrize(("rule", "gpus1", "work", "reclaims", "findings"), ROWS)
def test_idle_reclaim(rule, gpus1, work, reclaims, findings):
    run = stage_run(desired(maint(idle=rule)), two_nodes(gpus1), work)
    assert reclaim_idle(run) is None
    got = {a.id: (a.suspend_job, a.gpus) for a in run.actions.values() if isinstance(a, Reclaim)}
    assert got == reclaims
    assert set(run.actions) == set(reclaims) | {f"checkpoint:{FORGOT}" for _ in reclaims}
    assert run.evicted == {a.split(":", 1)[1] for a in reclaims}
    assert findings_of(run) == findings
