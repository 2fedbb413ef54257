"""Waking the loop on a signal's threshold crossing (issue 28, `reconciler/loop/wake.py`): the
rule is the planner's own (`plan/signals.direction`), a move to scale-up or scale-down wakes
once, a change that keeps the direction wakes nothing, the Prometheus poll runs only the
ScalingPolicies' queries, and a wake inside a cooldown plans no scale. The rule is fed here by
hand (`put`, `drop`, `poll`); the feed itself, the watch cache's informers and the poller's
thread that `SignalWake.start` sets up, is tests/loop/test_wake_cache.py's."""

from __future__ import annotations

import pytest

from reconciler.loop.wake import Directions, SignalWake
from reconciler.plan.signals import DOWN, HOLD, UP, target_directions
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.loop.wake_support import Prom
from tests.plan.scenarios import NOW
from tests.plan.support import (
    QUEUE_Q,
    desired,
    maint,
    prom_scaling,
    run,
    scaling,
    svc,
    two_nodes,
)

KEY = "scaling/chat/Deployment/team-b/chat"


def annotated(**kw):
    """A SignalWake over the annotation-sourced policy (minReplicas 1, maxReplicas 6, scale up
    over 10 per replica, down under 1), counting its wakes."""
    d = load([SourceFile("d.yaml", desired(extra=scaling(**kw)))])
    woke: list[int] = []
    w = SignalWake(lambda: d, lambda: woke.append(1), clock=lambda: NOW)
    return w, woke


def test_directions_move_only_to_up_or_down_and_a_first_sighting_is_a_baseline():
    d = Directions()
    assert d.moved({"a": UP}) == []  # first sighting
    assert d.moved({"a": UP}) == []
    assert d.moved({"a": HOLD}) == []  # back to hold: a cycle would change nothing
    assert d.moved({"a": UP, "b": DOWN}) == ["a"]  # b is new
    assert d.moved({"a": DOWN, "b": DOWN}) == ["a"]


def test_a_queue_annotation_crossing_wakes_once():
    w, woke = annotated()
    w.put(svc(2, queue=4))  # 2/replica: inside the band, the baseline
    assert woke == []
    w.put(svc(2, queue=8))  # still inside
    assert woke == []
    w.put(svc(2, queue=60))  # 30/replica > 10: crosses the scale-up threshold
    assert woke == [1]
    w.put(svc(2, queue=120))  # grows while over it: no new crossing
    assert woke == [1]
    w.put(svc(4, queue=120))  # gpupool scaled to 4: 30/replica, still up
    assert woke == [1]
    w.put(svc(4, queue=8))  # back inside the band: nothing to do
    assert woke == [1]
    w.put(svc(4, queue=0))  # under 1/replica: crosses the scale-down threshold
    assert len(woke) == 2
    assert w.wakes == 2


def test_bounds_are_the_planners_a_target_at_its_max_or_min_does_not_wake():
    w, woke = annotated(lo=2, hi=4)
    w.put(svc(4, queue=4))
    w.put(svc(4, queue=400))  # over the threshold, but at its maximum: no scale-up to plan
    w.put(svc(2, queue=8))
    w.put(svc(2, queue=0))  # calm, but at its minimum
    assert woke == []


def test_a_deleted_workload_and_no_policy_wake_nothing():
    w, woke = annotated()
    w.put(svc(2, queue=4))
    w.drop("Deployment", "team-b/chat")
    w.put(svc(2, queue=60))  # seen again: a baseline, not a move
    assert woke == []
    none = SignalWake(lambda: None, lambda: woke.append(1), clock=lambda: NOW)
    none.put(svc(2, queue=4))
    none.put(svc(2, queue=60))
    assert woke == [] and not none.check("x")


@pytest.mark.parametrize("replicas", [1, 2, 4, 6])
@pytest.mark.parametrize("queue", [0, 1, 5, 10, 20, 21, 40, 61, 200])
def test_the_direction_is_the_planners_decision(replicas, queue):
    """With no cooldown in the way, the wake's direction says exactly whether the planner
    scales the target up, down or not at all (one rule, not a copy)."""
    text = desired(extra=scaling())
    service = svc(replicas, queue=queue, last=None)
    p = run(text, two_nodes(), [], services=[service])
    d = load([SourceFile("d.yaml", text)])
    from reconciler.observe.builders import snapshot

    direction = target_directions(d, snapshot(NOW, two_nodes(), [], services=[service]))[KEY]
    scales = [a for a in p.actions if a.kind == "scale"]
    planned = HOLD if not scales else UP if scales[0].to_replicas > replicas else DOWN
    held = [f for f in p.findings if f.code == "scale-held"]
    if held:  # the planner wanted up; admission found no room this time
        planned = UP
    assert direction == planned, (p.summary, [f.message for f in p.findings])


def test_a_wake_inside_the_cooldown_plans_no_scale():
    """The spike wakes the loop, and the cycle it starts holds the scale-up: the last scale
    was a minute ago and scaleUp.cooldown is 2m (the planner enforces it, not the wake)."""
    w, woke = annotated()
    w.put(svc(2, queue=4, last=1))
    w.put(svc(2, queue=60, last=1))
    assert woke == [1]
    p = run(desired(extra=scaling()), two_nodes(), [], services=[svc(2, queue=60, last=1)])
    assert [a for a in p.actions if a.kind == "scale"] == []
    # past the cooldown the same reading scales
    p = run(desired(extra=scaling()), two_nodes(), [], services=[svc(2, queue=60, last=3)])
    assert [(a.from_replicas, a.to_replicas) for a in p.actions if a.kind == "scale"] == [(2, 4)]


def test_the_poll_runs_only_the_scaling_queries_and_wakes_on_a_crossing():
    text = desired(
        maint(idle="{utilizationBelow: 5, idleFor: 1h, utilization: {source: prometheus}}"),
        extra=prom_scaling(),
    )
    d = load([SourceFile("d.yaml", text)])
    prom, woke = Prom(), []
    w = SignalWake(
        lambda: d,
        lambda: woke.append(1),
        prometheus_url="http://prom:9090",
        transport=prom,
        clock=lambda: NOW,
    )
    w.put(svc(2, queue=0))  # the annotation says 0 and is not read (source prometheus)
    prom.value = "8"  # 4/replica, wait 8 s: inside the band
    assert not w.poll()
    assert QUEUE_Q in prom.asked and not any("DCGM" in q for q in prom.asked)
    assert len(set(prom.asked)) == 2  # the queue and the wait (scaleUp.pendingTime is set)
    prom.value = "60"  # 30/replica and a 60 s wait: over both thresholds
    assert w.poll() and woke == [1]
    assert not w.poll()  # unchanged: no new crossing
    prom.value = "0"  # calm: crosses the scale-down threshold
    assert w.poll() and woke == [1, 1]


def test_no_url_no_poll():
    d = load([SourceFile("d.yaml", desired(extra=prom_scaling()))])
    prom = Prom()
    w = SignalWake(lambda: d, lambda: None, transport=prom, clock=lambda: NOW)
    w.put(svc(2, queue=0))
    assert not w.poll() and prom.asked == []


def test_the_wake_reads_the_policies_the_last_cycle_loaded(tmp_path):
    from kubernetes import client

    from reconciler.loop.controller import Controller
    from reconciler.loop.sources import DirectorySource
    from reconciler.loop.status import StatusView

    (tmp_path / "policies").mkdir()
    f = tmp_path / "policies" / "d.yaml"
    f.write_text(desired(extra=scaling()))
    ctl = Controller(
        DirectorySource(tmp_path),
        client.ApiClient(client.Configuration(host="http://127.0.0.1:9")),
        namespace="gpupool-system",
        identity="t",
    )
    ctl.status.read = StatusView  # the cluster is unreachable past the status read
    ctl.elector.try_acquire_or_renew = lambda: False
    assert ctl.last_desired is None  # no cycle has loaded it yet
    ctl.cycle()  # the cluster read fails: the policies were loaded before it
    d = ctl.last_desired
    assert d is not None and "chat" in d.scaling
    f.write_text("kind: [not a policy")
    ctl.cycle()
    assert ctl.last_desired is None  # does not load: no wake (the cycle reports it)


def test_a_check_that_fails_wakes_nothing_and_raises_nothing():
    class Broken:
        scaling = {"chat": object()}  # what no loader makes: the rule cannot be asked

    woke: list[int] = []
    w = SignalWake(lambda: Broken(), lambda: woke.append(1), clock=lambda: NOW)
    w.put(svc(2, queue=60))
    assert not w.check("test") and woke == []
