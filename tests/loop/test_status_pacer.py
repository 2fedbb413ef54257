"""The loop's status writes are paced (`StatusPacer`): a cycle report that says something new
is written at once; one that differs from the last written only in its time, the plan's summary
and the conditions' messages waits until the last write is `refresh_seconds` old, and the last
one held back is written when the loop rests (`Controller.rest`) or stops. A lone `cycle()`
writes every report (on the fake API server: test_failed_cycle_status.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reconciler.loop.status import StatusPacer, StatusView, condition

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
