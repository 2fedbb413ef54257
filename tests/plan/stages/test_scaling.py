"""Stage 2, scaling (reconciler/plan/stages/scaling.py), run alone on a fresh run.

`plan_scaling` reads each ScalingPolicy target: a queue per replica (or a p99 wait) over the
scale-up threshold scales up by `step` once the cooldown is over, a calm queue scales down;
it returns the intents, the new replicas as demand (`Demand`, origin `scale-up of ...`) and
the pending pods a scale-down deletes (demand no longer). A service an autoscaler scales gets
that autoscaler's envelope instead. `emit_scales` runs after admission: a Scale (or a
SetScaleEnvelope) for as many new replicas as admission let in, `scale-held` for the rest.
"""

from __future__ import annotations

import pytest

from reconciler.observe.builders import shared_pod
from reconciler.plan.actions import Scale, SetScaleEnvelope
from reconciler.plan.stages.scaling import emit_scales, plan_scaling
from tests.plan.support import (
    SHARED_CARD,
    SO,
    ago,
    desired,
    findings_of,
    hpa,
    scaled,
    scaling,
    stage_run,
    svc,
    two_nodes,
)

CHAT = "team-b/chat"
HELD = "held: team team-b would use 16.25 GPUs, over its cap of 16"
RUNNING = [shared_pod("team-b", f"chat-{i}", "a100-1", 1, started=ago(2)) for i in range(3)]
PENDING = shared_pod("team-b", "chat-3", None, 1, pool="a100").model_copy(
    update={"owner_kind": "ReplicaSet", "owner_name": "chat-5d8f"}
)


def replicas(*numbers: int) -> list[str]:
    return [f"{CHAT}#replica-{n}" for n in numbers]


def emitted(run) -> dict[str, tuple]:
    """Action id -> (from, to) replicas of a Scale, (from, to) max of an envelope."""
    out = {}
    for a in run.actions.values():
        if isinstance(a, Scale):
            out[a.id] = (a.from_replicas, a.to_replicas)
        elif isinstance(a, SetScaleEnvelope):
            out[a.id] = (a.from_max, a.to_max)
    return out


# (policy kwargs, service, pods, new replicas admission lets in (None: all),
#  wanted replicas, new replicas as demand, pending pods deleted, actions, findings)
ROWS = [
    pytest.param(
        {},
        svc(2, queue=60),
        [],
        None,
        4,
        replicas(3, 4),
        set(),
        {f"scale:{CHAT}": (2, 4)},
        set(),
        id="hot-queue-scales-up-by-step-and-the-new-replicas-are-demand",
    ),
    pytest.param(
        {},
        svc(2, queue=60, last=1),
        [],
        None,
        None,
        [],
        set(),
        {},
        set(),
        id="within-the-scale-up-cooldown-nothing-changes",
    ),
    pytest.param(
        {},
        svc(6, queue=100),
        [],
        None,
        None,
        [],
        set(),
        {},
        {("at-max-replicas", CHAT)},
        id="hot-at-its-maximum-is-a-finding-only",
    ),
    pytest.param(
        {"down_step": 2},
        svc(4, queue=0),
        [*RUNNING, PENDING],
        None,
        2,
        [],
        {"team-b/chat-3"},
        {f"scale:{CHAT}": (4, 2)},
        set(),
        id="calm-queue-scales-down-and-its-pending-pod-leaves-demand",
    ),
    pytest.param(
        {"target": "gone"},
        svc(2, queue=60),
        [],
        None,
        None,
        [],
        set(),
        {},
        {("scale-target-missing", "team-b/gone")},
        id="a-target-that-was-not-observed-is-a-finding",
    ),
    pytest.param(
        {},
        svc(2, queue=60),
        [],
        1,
        4,
        replicas(3, 4),
        set(),
        {f"scale:{CHAT}": (2, 3)},
        {("scale-held", CHAT)},
        id="scale-up-stops-where-admission-stops-its-replicas",
    ),
    pytest.param(
        {},
        scaled(svc(2, queue=60), hpa(1, 2)),
        [],
        None,
        4,
        replicas(3, 4),
        set(),
        {f"scale-envelope:{CHAT}": (2, 4)},
        set(),
        id="an-autoscaled-service-gets-its-envelope-max-not-a-scale",
    ),
    pytest.param(
        {},
        scaled(svc(2, queue=60), hpa(1, 2), hpa(1, 3, kind=SO)),
        [],
        None,
        None,
        [],
        set(),
        {},
        {("autoscaler-conflict", CHAT)},
        id="two-autoscalers-on-one-workload-change-nothing",
    ),
]


@pytest.mark.parametrize(
    ("policy", "service", "pods", "admit", "want", "demand", "gone", "actions", "findings"), ROWS
)
def test_scaling(policy, service, pods, admit, want, demand, gone, actions, findings):
    run = stage_run(
        desired(extra=scaling(**policy)), two_nodes(SHARED_CARD), pods, services=[service]
    )
    intents, new, deleted = plan_scaling(run)
    assert [(i.svc.key, i.policy, i.want) for i in intents] == (
        [(CHAT, "chat", want)] if want else []
    )
    assert [p.key for p in new] == demand
    assert all(
        (p.origin, p.pool, p.priority_class) == (f"scale-up of {CHAT}", "a100", "serving")
        for p in new
    )
    assert deleted == gone
    admitted = new if admit is None else new[:admit]
    for p in new[len(admitted) :]:
        run.waiting[p.key] = HELD  # what admission records for a replica it holds
    emit_scales(run, intents, admitted)
    assert emitted(run) == actions
    assert findings_of(run) == findings
