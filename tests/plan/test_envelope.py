"""Scaling through the autoscaler that is there: a workload an HPA or a KEDA ScaledObject scales
gets its autoscaler's envelope (min/max) set, never its replicas (docs/planner.md, "Beside an
autoscaler"). Table rows for the planner, then several cycles through the effect model."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reconciler.observe.builders import gpu, mig_pod, shared_pod, snapshot
from reconciler.observe.model import InferenceService
from reconciler.plan.actions import Scale, SetScaleEnvelope
from reconciler.plan.planner import plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.sim.effects import step
from tests.plan.scenarios import A100, NOW, _objects
from tests.plan.support import (
    QUEUE_ID,
    QUEUE_Q,
    SHARED_CARD,
    SO,
    WAIT_ID,
    WQ,
    ago,
    desired,
    hpa,
    ok,
    prom_scaling,
    run,
    run_a,
    scaled,
    scaling,
    svc,
    two_nodes,
)


def envelopes(p) -> list[tuple[str, int, int, int, int]]:
    return [
        (a.target, a.from_min, a.to_min, a.from_max, a.to_max)
        for a in p.actions
        if isinstance(a, SetScaleEnvelope)
    ]


# (policy kwargs, service, expected envelopes, findings)
ROWS = [
    pytest.param(
        {},
        scaled(svc(2, queue=60), hpa(1, 2)),
        [("team-b/chat", 1, 1, 2, 4)],
        set(),
        id="hot-grows-max-by-step-with-n-the-max",
    ),
    pytest.param(
        {},
        scaled(svc(2, queue=40), hpa(1, 4)),
        [],
        set(),
        id="queue-per-replica-counted-over-the-max",  # 40 / 4 = 10: not over 10 (40 / 2 is)
    ),
    pytest.param(
        {},
        scaled(svc(4, queue=0), hpa(1, 4)),
        [("team-b/chat", 1, 1, 4, 3)],
        set(),
        id="calm-shrinks-max-below-replicas",
    ),
    pytest.param(
        {},
        scaled(svc(2, queue=0), hpa(1, 4)),
        [("team-b/chat", 1, 1, 4, 3)],
        set(),
        id="calm-shrinks-max-above-replicas",
    ),
    pytest.param(
        {},
        scaled(svc(2, queue=60), hpa(1, 2, last=1)),
        [],
        set(),
        id="cooldown-counts-from-the-last-envelope-change",
    ),
    pytest.param(
        {},
        scaled(svc(2, queue=60, last=0), hpa(1, 2, last=5)),
        [("team-b/chat", 1, 1, 2, 4)],
        set(),
        id="the-workloads-last-scale-is-not-gpupools",
    ),
    pytest.param(
        {"hi": 6},
        scaled(svc(3, queue=0, last=0), hpa(1, 10, last=0)),
        [("team-b/chat", 1, 1, 10, 6)],
        set(),
        id="max-above-target-max-lowered-despite-cooldown",
    ),
    pytest.param(
        {"lo": 3},
        scaled(svc(1), hpa(1, 2, last=0)),
        [("team-b/chat", 1, 3, 2, 3)],
        set(),
        id="max-below-target-min-raised-min-follows",
    ),
    pytest.param(
        {"lo": 2},
        scaled(svc(3, queue=6), hpa(1, 4)),
        [("team-b/chat", 1, 2, 4, 4)],
        set(),
        id="min-alone-corrected",
    ),
    pytest.param(
        {"lo": 0},
        scaled(svc(3, queue=6), hpa(1, 4)),
        [],
        set(),
        id="hpa-min-stays-1-for-a-target-min-0",
    ),
    pytest.param(
        {"lo": 0},
        scaled(svc(3, queue=6), hpa(0, 4)),
        [],
        set(),
        id="hpa-min-0-where-the-cluster-allows-it",
    ),
    pytest.param(
        {},
        scaled(svc(3, queue=6), hpa(1, 4)),
        [],
        set(),
        id="no-change-no-action",
    ),
    pytest.param(
        {},
        scaled(svc(4, queue=100), hpa(1, 6)),
        [],
        {("at-max-replicas", "team-b/chat")},
        id="hot-at-target-max-finding-only",
    ),
    pytest.param(
        {},
        scaled(svc(0), hpa(1, 3)),
        [],
        {("autoscaling-disabled", "team-b/chat")},
        id="hpa-on-a-workload-at-0-is-disabled",
    ),
    pytest.param(
        {"lo": 0},
        scaled(svc(0), hpa(0, 3, kind=SO)),
        [],
        set(),
        id="keda-scales-from-0-itself",
    ),
    # KEDA's operator refuses a ScaledObject whose minReplicaCount (0 counting as 1) is not
    # above its idleReplicaCount (CheckReplicaCountBoundsAreValid): tests/integration/test_keda.py
    pytest.param(
        {"lo": 0},
        scaled(svc(3, queue=6), hpa(1, 4, kind=SO, idle=0)),
        [("team-b/chat", 1, 0, 4, 4)],
        set(),
        id="keda-min-0-beside-idle-0-counts-as-1",
    ),
    pytest.param(
        {"lo": 1},
        scaled(svc(3, queue=6), hpa(1, 4, kind=SO, idle=1)),
        [("team-b/chat", 1, 2, 4, 4)],
        set(),
        id="keda-min-at-idle-raised-above-it",
    ),
    pytest.param(
        {"lo": 1},
        scaled(svc(3, queue=0), hpa(1, 4, kind=SO, idle=2)),
        [("team-b/chat", 1, 3, 4, 3)],
        set(),
        id="keda-calm-max-stops-above-idle",
    ),
    pytest.param(
        {"lo": 0, "hi": 3},
        scaled(svc(3, queue=0), hpa(4, 5, kind=SO, idle=3)),
        [],
        {("idle-replicas-over-target", "team-b/chat")},
        id="keda-idle-over-target-max-finding-only",
    ),
    pytest.param(
        {},
        scaled(svc(2, queue=60), hpa(1, 2), hpa(0, 5, kind=SO)),
        [],
        {("autoscaler-conflict", "team-b/chat")},
        id="two-autoscalers-change-nothing",
    ),
    pytest.param(
        {},
        scaled(
            svc(2, queue=60),
            hpa(1, 2, name="keda-hpa-chat", owner="ScaledObject/chat"),
            hpa(0, 2, kind=SO),
        ),
        [("team-b/chat", 0, 1, 2, 4)],
        set(),
        id="keda-made-hpa-is-the-scaledobjects",
    ),
]


@pytest.mark.parametrize(("policy", "service", "want", "findings"), ROWS)
def test_envelope(policy, service, want, findings):
    p = run(desired(extra=scaling(**policy)), two_nodes(SHARED_CARD), [], services=[service])
    assert envelopes(p) == want
    assert not [a for a in p.actions if isinstance(a, Scale)], "replicas are never patched"
    for a in p.actions:
        if isinstance(a, SetScaleEnvelope):
            assert a.id == f"scale-envelope:{a.target}" and a.policy == "chat"
            assert a.workload == "chat" and a.workload_kind == "Deployment"
    assert {(f.code, f.subject) for f in p.findings} == findings


def test_without_an_autoscaler_replicas_are_scaled_as_before():
    p = run(desired(extra=scaling()), two_nodes(SHARED_CARD), [], services=[svc(2, queue=60)])
    assert [(a.from_replicas, a.to_replicas) for a in p.actions if isinstance(a, Scale)] == [(2, 4)]
    assert not envelopes(p)


def test_an_autoscaler_of_another_workload_changes_nothing():
    other = scaled(svc(2, queue=0, name="rank"), hpa(1, 4, name="rank"))
    p = run(
        desired(extra=scaling()),
        two_nodes(SHARED_CARD),
        [],
        services=[svc(2, queue=60), other],
    )
    assert [a.target for a in p.actions if isinstance(a, Scale)] == ["team-b/chat"]
    assert not envelopes(p)


def _capped():
    """team-b holds 15.75 of its cap of 16 card equivalents: one more shared slice fits."""
    nodes = two_nodes(
        [gpu(0, shared=4)] + [gpu(i, mig=["7g.80gb"], model=A100) for i in range(1, 8)]
    )
    work = [run_a("team-b", "huge", "a100-2", 8)]
    work += [
        mig_pod("team-b", f"big-{i}", "a100-1", "7g.80gb", gpu_index=i, started=ago(2))
        for i in range(1, 8)
    ]
    work += [shared_pod("team-b", f"chat-{i}", "a100-1", 1, started=ago(2)) for i in range(3)]
    return nodes, work


def test_the_max_grows_only_as_far_as_admission_allows():
    nodes, work = _capped()
    p = run(desired(extra=scaling()), nodes, work, services=[scaled(svc(3, queue=60), hpa(1, 3))])
    # the decision is 3 -> 5 (n = the max, 3); replicas 4 and 5 go through admission like a
    # scale-up's, and the team's cap lets one in
    assert envelopes(p) == [("team-b/chat", 1, 1, 3, 4)]
    assert "admission allows 4" in next(a.reason for a in p.actions if a.kind == "scale-envelope")
    assert [f.subject for f in p.findings if f.code == "scale-held"] == ["team-b/chat"]


def test_a_max_admission_holds_entirely_stays_and_min_is_clamped_to_it():
    nodes, work = _capped()
    work += [shared_pod("team-b", "chat-3", "a100-1", 1, started=ago(2))]  # the cap is full
    p = run(
        desired(extra=scaling(lo=5, hi=8)),
        nodes,
        work,
        services=[scaled(svc(4, queue=60), hpa(1, 4))],
    )
    # below the target's minimum 5: the max would rise to 5, admission lets nothing in, so it
    # stays 4, and minReplicas goes to the target's 5 clamped to the max: 4
    assert envelopes(p) == [("team-b/chat", 1, 4, 4, 4)]
    assert [f.subject for f in p.findings if f.code == "scale-held"] == ["team-b/chat"]


def test_growing_the_max_asks_for_cards_exactly_like_a_scale_up():
    """The replicas the max grows into are demand like a Scale's new replicas: the same
    placement steps and the same findings (here: they wait, no node can be shared whole)."""
    nodes = two_nodes(SHARED_CARD)
    work = [
        shared_pod("team-b", f"other-{i}", "a100-1", 1, gpu_index=i // 4, started=ago(2))
        for i in range(8)
    ]
    text = desired(extra=scaling())
    with_hpa = run(text, nodes, work, services=[scaled(svc(2, queue=60), hpa(1, 2))])
    plain = run(text, nodes, work, services=[svc(2, queue=60)])
    assert envelopes(with_hpa) == [("team-b/chat", 1, 1, 2, 4)]
    assert [a.id for a in plain.actions] == ["scale:team-b/chat"]
    assert [a.id for a in with_hpa.actions] == ["scale-envelope:team-b/chat"]
    waits = [f for f in with_hpa.findings if f.code == "waits"]
    assert len(waits) == 2 and "scale-up of team-b/chat" in waits[0].message
    assert with_hpa.findings == plain.findings


# ------------------------------------------------------------------ several cycles


def cycles(text: str, observed, n: int, period: timedelta = timedelta(minutes=1)):
    d = load([SourceFile("desired.yaml", text)])
    plans, states = [], [observed]
    now = observed.observed_at
    for _ in range(n):
        p = plan(d, observed, now)
        plans.append(p)
        observed = step(d, observed, p, now=now, period=period)
        now += period
        states.append(observed)
    return plans, states


def chat(state) -> InferenceService:
    return next(s for s in state.services if s.name == "chat")


def test_grows_to_the_target_max_then_stays_without_flapping():
    text = desired(extra=scaling())
    obs = snapshot(
        NOW,
        two_nodes(SHARED_CARD),
        [shared_pod("team-b", f"chat-{i}", "a100-1", 1, started=ago(2)) for i in range(2)],
        services=[scaled(svc(2, queue=60), hpa(1, 2))],
        **_objects(text),
    )
    plans, states = cycles(text, obs, 8)
    maxes = [chat(s).autoscalers[0].max_replicas for s in states]
    # 2 -> 4 at once; the cooldown (2m) holds the next step; 4 -> 6 (the target max); then
    # at max: nothing more, and never back down (the queue is still long)
    assert maxes == [2, 4, 4, 6, 6, 6, 6, 6, 6]
    assert all(not [a for a in p.actions if isinstance(a, Scale)] for p in plans)
    assert all(chat(s).replicas == 2 for s in states), "the HPA's metrics decide within the max"
    assert not plans[-1].actions and not plans[-2].actions


def test_shrinking_the_max_makes_the_autoscaler_scale_down_and_settles():
    text = desired(extra=scaling(lo=2))
    obs = snapshot(
        NOW,
        two_nodes(SHARED_CARD),
        [shared_pod("team-b", f"chat-{i}", "a100-1", 1, started=ago(2)) for i in range(4)],
        services=[scaled(svc(4, queue=0), hpa(1, 4))],
        **_objects(text),
    )
    plans, states = cycles(text, obs, 30)
    got = [
        (chat(s).autoscalers[0].min_replicas, chat(s).autoscalers[0].max_replicas) for s in states
    ]
    # min to the target's 2 at once with the first step down; then one step per 10m cooldown
    assert got[1] == (2, 3)
    assert got[-1] == (2, 2)
    assert [m for _, m in got] == sorted((m for _, m in got), reverse=True), "no flapping"
    # the autoscaler (not gpupool) brought the workload down to the max, its pods with it
    assert chat(states[-1]).replicas == 2
    assert len([w for w in states[-1].workloads if w.name.startswith("chat-")]) == 2
    assert all(not [a for a in p.actions if isinstance(a, Scale)] for p in plans)
    assert not plans[-1].actions


def test_an_envelope_from_prometheus_readings_carries_them():
    """With ScalingPolicy signals from Prometheus, the envelope's decision reads them as a
    Scale's would (per replica over the max) and the action carries query and value."""
    p = run(
        desired(extra=prom_scaling()),
        two_nodes(SHARED_CARD),
        [],
        services=[scaled(svc(2, queue=0), hpa(1, 2))],
        signals=[ok(QUEUE_ID, QUEUE_Q, 60), ok(WAIT_ID, WQ, 0)],
    )
    (a,) = [a for a in p.actions if isinstance(a, SetScaleEnvelope)]
    assert (a.from_max, a.to_max) == (2, 4), a.reason
    assert "queue 30/replica" in a.reason and QUEUE_Q in a.reason
    assert {(s.name, s.query, s.value) for s in a.signals} >= {("queueLength", QUEUE_Q, 60.0)}
