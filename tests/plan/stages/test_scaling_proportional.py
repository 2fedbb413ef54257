"""Stage 2, scaling in proportion to the queue (`scaleUp.mode` / `scaleDown.mode:
proportional`, reconciler/plan/stages/scaling.py `_grown` / `_shrunk`): a scale-up goes to
ceil(queue / scaleUp.queueLengthPerReplica) replicas at once, at least one more, at most
`maxStep` more, within the target's bounds; a scale-down to ceil(queue /
scaleDown.queueLengthPerReplica), at least one fewer, at most `maxStep` fewer. Thresholds
(when to scale) and cooldowns are those of mode step."""

from __future__ import annotations

import pytest

from reconciler.plan.stages.scaling import plan_scaling
from tests.plan.support import SHARED_CARD, desired, scaling, stage_run, svc, two_nodes

CHAT = "team-b/chat"
UP_STEP = "step: 2, cooldown: 2m"
DOWN_STEP = "step: 1, cooldown: 10m"


def policy(up: str = "", down: str = "", hi: int = 20) -> str:
    """The stage tests' ScalingPolicy (up 10 / down 1 per replica) with scaleUp's and/or
    scaleDown's `step` replaced by `up` / `down` (e.g. `mode: proportional, maxStep: 3`)."""
    swaps = []
    if up:
        swaps.append((UP_STEP, f"{up}, cooldown: 2m"))
    if down:
        swaps.append((DOWN_STEP, f"{down}, cooldown: 10m"))
    return desired(*swaps, extra=scaling(hi=hi))


PROP = "mode: proportional"

# (scaleUp, scaleDown, target max, service, wanted replicas: None when nothing changes)
ROWS = [
    pytest.param("", "", 20, svc(2, queue=60), 4, id="mode-step-adds-its-step"),
    pytest.param(PROP, "", 20, svc(2, queue=60), 6, id="up-to-queue-over-threshold"),
    pytest.param(PROP, "", 20, svc(2, queue=61), 7, id="up-rounds-up"),
    pytest.param(PROP, "", 6, svc(2, queue=100), 6, id="up-stops-at-the-target-max"),
    pytest.param(f"{PROP}, maxStep: 3", "", 20, svc(2, queue=60), 5, id="up-at-most-max-step"),
    pytest.param(PROP, "", 20, svc(2, queue=5, p99=60), 3, id="up-on-wait-alone-adds-one"),
    pytest.param(PROP, "", 20, svc(2, p99=60), 3, id="up-with-the-queue-unread-adds-one"),
    pytest.param(PROP, "", 20, svc(2, queue=60, last=1), None, id="up-waits-out-the-cooldown"),
    pytest.param(PROP, "", 20, svc(2, queue=20), None, id="at-the-threshold-no-scale-up"),
    pytest.param("", "", 20, svc(6, queue=2), 5, id="mode-step-removes-its-step"),
    pytest.param("", PROP, 20, svc(6, queue=2), 2, id="down-to-queue-over-threshold"),
    pytest.param("", PROP, 20, svc(6, queue=0), 1, id="down-stops-at-the-target-min"),
    pytest.param("", PROP, 20, svc(6, queue=5.5), 5, id="down-removes-at-least-one"),
    pytest.param("", f"{PROP}, maxStep: 2", 20, svc(6, queue=0), 4, id="down-at-most-max-step"),
    pytest.param("", PROP, 20, svc(6, queue=0, last=5), None, id="down-waits-out-the-cooldown"),
    pytest.param("", PROP, 20, svc(6, queue=6), None, id="queue-between-thresholds-holds"),
]


@pytest.mark.parametrize(("up", "down", "hi", "service", "want"), ROWS)
def test_proportional_scaling(up, down, hi, service, want):
    run = stage_run(policy(up, down, hi), two_nodes(SHARED_CARD), [], services=[service])
    intents, new, _ = plan_scaling(run)
    assert [(i.svc.key, i.want) for i in intents] == ([(CHAT, want)] if want else [])
    grown = max(0, (want or service.replicas) - service.replicas)
    assert [p.key for p in new] == [
        f"{CHAT}#replica-{i}" for i in range(service.replicas + 1, service.replicas + grown + 1)
    ]


def test_the_reason_names_the_replicas_the_queue_asks():
    run = stage_run(policy(PROP), two_nodes(SHARED_CARD), [], services=[svc(2, queue=60)])
    (intent,) = plan_scaling(run)[0]
    assert intent.why.startswith(f"queue 30/replica > 10: scale {CHAT} 2 -> 6")
