"""The forecast's arithmetic (reconciler/plan/forecast.py) and its queries
(reconciler/plan/signals.py: one per previous day, the coming window shifted back by d days),
pure functions on plain values."""

from __future__ import annotations

import pytest

from reconciler.observe.model import ObservedState, SignalReading, SignalSample
from reconciler.plan import signals as sig
from reconciler.plan.forecast import (
    combine,
    forecast_replicas,
    level_ratio,
    level_ratios,
    replicas_for,
    scaled,
)
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.support import NOW, desired, scaling


@pytest.mark.parametrize(
    ("days", "aggregate", "want"),
    [
        ([], "max", None),
        ([None, None], "max", None),
        ([30, None, 50, 40], "max", 50),
        ([30, 50, 40], "median", 40),
        ([30, 50], "median", 40),
        ([None, 7], "median", 7),
    ],
)
def test_combine(days, aggregate, want):
    assert combine(days, aggregate) == want


def test_combine_refuses_an_unknown_aggregate():
    with pytest.raises(ValueError, match="unknown aggregate"):
        combine([1.0], "mean")


@pytest.mark.parametrize(
    ("queue", "per", "headroom", "want"),
    [(0, 8, 1, 0), (8, 8, 1, 1), (8.01, 8, 1, 2), (0.1 * 30, 3, 1, 1), (20, 10, 1.5, 3)],
)
def test_replicas_for(queue, per, headroom, want):
    assert replicas_for(queue, per, headroom) == want


def test_forecast_replicas():
    assert forecast_replicas([None], 8) is None
    assert forecast_replicas([16, 40], 8) == (5, 40)
    assert forecast_replicas([16, 40, 24], 8, aggregate="median", headroom=1.25) == (4, 24)
    with pytest.raises(ValueError):
        replicas_for(1, 0)


@pytest.mark.parametrize(
    ("now", "then", "bound", "want"),
    [
        (6, 3, 4, 2.0),  # today twice as busy as that day
        (3, 6, 4, 0.5),
        (40, 2, 4, 4.0),  # bounded both ways
        (1, 40, 4, 0.25),
        (40, 2, 10, 10.0),
        (0, 5, 4, 0.25),  # nothing queued now: the lower bound
        (5, 0, 4, 1.0),  # no level that day: no correction
        (5, 1e-9, 4, 1.0),
        (None, 5, 4, 1.0),  # no level now
        (5, None, 4, 1.0),
    ],
)
def test_level_ratio(now, then, bound, want):
    assert level_ratio(now, then, bound) == pytest.approx(want)


def test_level_ratio_refuses_a_bound_below_one():
    with pytest.raises(ValueError, match="at least 1"):
        level_ratio(1, 1, 0.5)


def test_scaled_multiplies_each_day_by_its_ratio():
    ratios = level_ratios(6, [3, None, 12])
    assert ratios == [2.0, 1.0, 0.5]
    assert scaled([10, 20, None], ratios) == [20.0, 20.0, None]
    assert scaled([10, 20], [2.0]) == [20.0, 20.0]  # a day without a ratio: as it is
    # the median of the scaled days: the weekend's readings raised to a weekday's level
    assert forecast_replicas(scaled([10, 12, 40], [3.0, 3.0, 1.0]), 8, aggregate="median") == (
        5,
        36.0,
    )


def policy(forecast: str):
    text = desired(extra=scaling() + f"  forecast: {forecast}\n")
    pol = load([SourceFile("desired.yaml", text)]).scaling["chat"]
    return pol, pol.spec.targets[0]


def test_one_query_per_day_reads_the_coming_window_on_that_day():
    pol, t = policy("{days: 2, lookahead: 10m}")
    qs = sig.forecast_queries("chat", pol, t)
    assert [q.id for q in qs] == [
        "scaling/chat/Deployment/team-b/chat/forecast/1d",
        "scaling/chat/Deployment/team-b/chat/forecast/2d",
    ]
    queue = 'sum(vllm:num_requests_waiting{namespace="team-b",pod=~"chat-.*"})'
    # [600s] offset 85800s covers [now - 86400s, now - 85800s]: the next 10m, a day ago
    assert qs[0].query == f"max_over_time(({queue})[600s:30s] offset 85800s)"
    assert qs[1].query.endswith("[600s:30s] offset 172200s)")


def test_a_scale_down_window_adds_one_query_per_day_over_it():
    pol, t = policy("{days: 2, lookahead: 10m, scaleDownLookahead: 1h}")
    plan = sig.forecast_plan("chat", pol, t)
    assert [(f.signal, f.day, f.window) for f in plan] == [
        ("forecast", 1, 600),
        ("forecast", 2, 600),
        ("forecast-down", 1, 3600),
        ("forecast-down", 2, 3600),
    ]
    assert plan[2].query.id == "scaling/chat/Deployment/team-b/chat/forecast-down/1d"
    # [3600s] offset 82800s covers [now - 86400s, now - 82800s]: the next hour, a day ago
    assert plan[2].query.query.endswith("[3600s:30s] offset 82800s)")
    assert sig.forecast_queries("chat", pol, t, sig.FORECAST) == [f.query for f in plan[:2]]
    assert sig.forecast_queries("chat", pol, t, sig.FORECAST_DOWN) == [f.query for f in plan[2:]]
    assert sig.forecast_queries("chat", pol, t) == [f.query for f in plan]


def test_model_scaled_adds_the_level_of_today_and_of_each_day():
    pol, t = policy("{days: 2, lookahead: 10m, model: scaled, levelWindow: 30m}")
    plan = sig.forecast_plan("chat", pol, t)
    assert [(f.signal, f.day, f.window, f.start) for f in plan] == [
        ("forecast", 1, 600, -86400),
        ("forecast", 2, 600, -172800),
        ("forecast-level", 0, 1800, -1800),
        ("forecast-level", 1, 1800, -88200),
        ("forecast-level", 2, 1800, -174600),
    ]
    assert plan[2].query.id == "scaling/chat/Deployment/team-b/chat/forecast-level/0d"
    queue = 'sum(vllm:num_requests_waiting{namespace="team-b",pod=~"chat-.*"})'
    # the last 30 minutes now, and the 30 minutes that ended at this time a day ago
    assert plan[2].query.query == f"avg_over_time(({queue})[1800s:30s])"
    assert plan[3].query.query == f"avg_over_time(({queue})[1800s:30s] offset 86400s)"
    assert sig.forecast_queries("chat", pol, t, sig.FORECAST_LEVEL) == [f.query for f in plan[2:]]
    # the seasonal model (the default) reads no level
    pol, t = policy("{days: 2, lookahead: 10m}")
    assert all(f.signal != sig.FORECAST_LEVEL for f in sig.forecast_plan("chat", pol, t))


def test_a_query_of_its_own_gets_the_placeholders():
    pol, t = policy(
        "{days: 1, query: 'avg_over_time(q{n=\"$namespace/$name\"}[$window] offset $offset)'}"
    )
    (q,) = sig.forecast_queries("chat", pol, t)
    assert q.query == 'avg_over_time(q{n="team-b/chat"}[600s] offset 85800s)'


def test_no_forecast_no_queries():
    pol, t = policy("{days: 1}")
    pol = pol.model_copy(update={"spec": pol.spec.model_copy(update={"forecast": None})})
    assert sig.forecast_queries("chat", pol, t) == []


def test_readings_per_day_empty_is_no_history_error_is_a_problem():
    pol, t = policy("{days: 4}")
    q1, q2, q3, q4 = sig.forecast_queries("chat", pol, t)
    observed = ObservedState(
        observed_at=NOW,
        signals=[
            SignalReading(
                id=q1.id, query=q1.query, samples=[SignalSample(value=3), SignalSample(value=4)]
            ),
            SignalReading(id=q2.id, query=q2.query),
            SignalReading(id=q3.id, query=q3.query, error="timeout"),
            SignalReading(id=q4.id, query="another text", samples=[SignalSample(value=9)]),
        ],
    )
    r = sig.forecast_readings(observed, "chat", pol, t)
    assert r.days == [7, None, None, None]
    assert [e.name for e in r.evidence] == ["forecast/1d"]
    assert [(s, why) for s, _, why in r.problems] == [
        ("forecast/3d", "timeout"),
        (
            "forecast/4d",
            "the observed state has a reading of another query text (the policy changed)",
        ),
    ]
