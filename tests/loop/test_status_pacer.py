"""The loop's status writes are paced (`StatusPacer`): a cycle report that says something new
is written at once; one that differs from the last written only in its time, the plan's summary
and the conditions' messages waits until the last write is `refresh_seconds` old, and the last
one held back is written when the loop rests (`Controller.rest`) or stops. A lone `cycle()`
writes every report. On the in-process fake API server of test_failed_cycle_status.py."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from reconciler.loop.status import StatusPacer, StatusView, condition
from tests.loop.test_failed_cycle_status import (  # noqa: F401 - fixtures
    STATUS,
    fake,
    make_controller,
    status,
)

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


class Tick:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def report(summary: str = "admit 1 pod", ready: bool = False, **extra) -> dict:
    return {
        "conditions": [
            condition("Ready", ready, "Progressing", summary, NOW),
            condition("Reconciling", not ready, "Progressing", summary, NOW),
        ],
        "lastPlanSummary": summary,
        "lastReconcileTime": NOW.isoformat(),
        "lastAppliedRevision": "r1",
        "recentPreemptions": [],
        **extra,
    }


def test_a_report_with_nothing_new_waits_for_the_refresh():
    tick = Tick()
    pacer = StatusPacer(1.0, monotonic=tick)
    view = StatusView()
    assert pacer.admit(report("admit 1 pod"), NOW, view)
    tick.t += 0.2
    second = report("admit 2 pods")
    assert not pacer.admit(second, NOW, view)
    assert pacer.due_in() == pytest.approx(0.8)
    held = pacer.take()
    assert held is not None and held[0] is second and pacer.due_in() is None
    tick.t += 0.3  # take counts as a write: the next report of the same news waits again
    assert not pacer.admit(report("admit 3 pods"), NOW, view)
    tick.t += 1.0
    assert pacer.admit(report("admit 4 pods"), NOW, view)
    assert pacer.take() is None


def test_news_is_written_at_once():
    tick = Tick()
    pacer = StatusPacer(1.0, monotonic=tick)
    view = StatusView()
    assert pacer.admit(report(), NOW, view)
    for news in (
        report(ready=True),  # a condition's status
        report(lastAppliedRevision="r2"),
        report(recentPreemptions=[NOW.isoformat()]),
        report(preemptionIntents=[{"pod": "t/p", "uid": "u", "at": NOW.isoformat()}]),
        report(lastHandledReconcileAt="token"),
        report(observedGeneration=2),
    ):
        assert pacer.admit(news, NOW, view), news
        assert pacer.take() is None


def test_no_refresh_or_forgotten_writes_every_report():
    tick = Tick()
    every = StatusPacer(0.0, monotonic=tick)
    assert every.admit(report(), NOW, StatusView()) and every.admit(report(), NOW, StatusView())
    paced = StatusPacer(1.0, monotonic=tick)
    assert paced.admit(report(), NOW, StatusView())
    paced.forget()  # an error's report was written in between
    assert paced.admit(report(), NOW, StatusView())


def test_the_loop_writes_the_report_it_held_back(make_controller, fake):  # noqa: F811
    """Cycles in a row under pacing: the one that says nothing new is not written; resting
    writes it (its time) before the interval ends."""
    ctl, clock = make_controller()
    tick = Tick()
    ctl.status_pacer = StatusPacer(30.0, monotonic=tick)  # `run` sets the refresh
    assert ctl.cycle().error is None  # creates the object
    assert ctl.cycle().error is None  # the generation it created is news
    first = status(fake)["lastReconcileTime"]
    clock.advance(5)
    fake.log.clear()
    assert ctl.cycle().error is None
    assert fake.requests("PATCH", STATUS + "/status$") == []
    assert status(fake)["lastReconcileTime"] == first
    tick.t += 29.9  # the held report is due in 0.1 s
    ctl.rest(threading.Event(), threading.Event(), 0.6)
    assert len(fake.requests("PATCH", STATUS + "/status$")) == 1
    assert status(fake)["lastReconcileTime"] == clock.now.isoformat()


def test_a_lone_cycle_writes_every_report(make_controller, fake):  # noqa: F811
    ctl, clock = make_controller()
    assert ctl.cycle().error is None
    clock.advance(5)
    fake.log.clear()
    assert ctl.cycle().error is None
    assert len(fake.requests("PATCH", STATUS + "/status$")) == 1
