"""Stage 2, scaling with a forecast (issue 28 item 5): desired = max(reactive, forecast).

The policy (`scaling()` of tests/plan/support.py: replicas 1..6, up above 10 per replica by 2
with a 2m cooldown, down below 1 per replica after 10m) gets a `forecast`; each row gives the
forecast days' readings (None: an empty result, no history that day; a string: the reading's
error), the service, and what the stage wants: the replicas, the Scale, whether its reason is
a pre-warm (`forecast: ...`) and the findings.
"""

from __future__ import annotations

import pytest

from reconciler.observe.model import SignalReading, SignalSample
from reconciler.plan import signals as sig
from reconciler.plan.actions import Scale
from reconciler.plan.stages.scaling import emit_scales, plan_scaling
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.support import SHARED_CARD, desired, findings_of, scaling, stage_run, svc, two_nodes

CHAT = "team-b/chat"


def policy(forecast: str = "{days: 3}") -> str:
    return desired(extra=scaling(lo=1, hi=6) + f"  forecast: {forecast}\n")


def readings(text: str, days: list) -> list[SignalReading]:
    pol = load([SourceFile("desired.yaml", text)]).scaling["chat"]
    out = []
    for q, v in zip(sig.forecast_queries("chat", pol, pol.spec.targets[0]), days, strict=True):
        if isinstance(v, str):
            out.append(SignalReading(id=q.id, query=q.query, error=v))
        else:
            samples = [] if v is None else [SignalSample(value=v)]
            out.append(SignalReading(id=q.id, query=q.query, samples=samples))
    return out


# (forecast, days' readings, service, wanted replicas (None: no intent), pre-warm, findings)
ROWS = [
    pytest.param("{days: 3}", [None] * 3, svc(2, queue=15), None, False, set(), id="no-history"),
    pytest.param(
        "{days: 3}", [30, 50, 40], svc(2, queue=15), 5, True, set(), id="max-of-days-prewarms"
    ),
    pytest.param(
        "{days: 3, aggregate: median}",
        [30, 50, 40],
        svc(2, queue=15),
        4,
        True,
        set(),
        id="median-of-days",
    ),
    pytest.param("{days: 1, headroom: 1.5}", [20], svc(2, queue=15), 3, True, set(), id="headroom"),
    pytest.param(
        "{days: 2}", [None, 45], svc(2, queue=15), 5, True, set(), id="a-day-without-history"
    ),
    pytest.param("{days: 1}", [100], svc(2, queue=15), 6, True, set(), id="bounded-by-max"),
    pytest.param(
        "{days: 1}", [40], svc(2, queue=15, last=1), None, False, set(), id="scale-up-cooldown"
    ),
    pytest.param(
        "{days: 1}", [30], svc(4, queue=0), 3, False, set(), id="scale-down-stops-at-forecast"
    ),
    pytest.param(
        "{days: 1}", [40], svc(4, queue=0), None, False, set(), id="scale-down-held-by-forecast"
    ),
    pytest.param("{days: 1}", [5], svc(4, queue=0), 3, False, set(), id="forecast-below-down"),
    pytest.param(
        "{days: 1}", [10], svc(2, queue=60), 4, False, set(), id="reactive-above-forecast"
    ),
    pytest.param("{days: 1}", [55], svc(2, queue=60), 6, True, set(), id="forecast-above-reactive"),
    pytest.param(
        "{days: 2}",
        ["connection refused", 50],
        svc(2, queue=15),
        5,
        True,
        {("forecast-unavailable", CHAT)},
        id="a-failed-day-is-a-finding",
    ),
]


@pytest.mark.parametrize(("forecast", "days", "service", "want", "prewarm", "findings"), ROWS)
def test_scaling_with_forecast(forecast, days, service, want, prewarm, findings):
    text = policy(forecast)
    run = stage_run(
        text, two_nodes(SHARED_CARD), [], services=[service], signals=readings(text, days)
    )
    intents, new, _ = plan_scaling(run)
    assert [(i.svc.key, i.want) for i in intents] == ([(CHAT, want)] if want else [])
    emit_scales(run, intents, new)
    scales = [a for a in run.actions.values() if isinstance(a, Scale)]
    assert [(a.from_replicas, a.to_replicas) for a in scales] == (
        [(service.replicas, want)] if want else []
    )
    for a in scales:
        assert a.reason.startswith("forecast: ") == prewarm, a.reason
        assert ("forecast" in a.reason) == (prewarm or "stops at" in a.reason), a.reason
        if prewarm:
            assert any(s.name.startswith("forecast/") for s in a.signals), a.signals
    assert findings_of(run) == findings


def test_the_reason_says_what_was_forecast():
    text = policy("{days: 3, lookahead: 15m}")
    run = stage_run(
        text,
        two_nodes(SHARED_CARD),
        [],
        services=[svc(2, queue=15)],
        signals=readings(text, [30, 50, None]),
    )
    intents, new, _ = plan_scaling(run)
    emit_scales(run, intents, new)
    (a,) = run.actions.values()
    assert a.reason == (
        "forecast: queue over the next 15m was max 50 on the last 2 days -> 5 replicas at "
        f"10/replica: pre-warm {CHAT} 2 -> 5"
    )


# forecast.scaleDownLookahead: a scale-down stops at the forecast over the longer window (the
# cards are lent to training only when it says they stay free that long); the pre-warm still
# reads the lookahead. (pre-warm window's reading, scale-down window's, service, wanted
# replicas (None: no intent), the reason's tail)
DOWN_ROWS = [
    pytest.param(10, 40, svc(4, queue=0), None, "", id="held-by-the-scale-down-window"),
    pytest.param(10, 60, svc(4, queue=0), None, "", id="held-never-raised-by-the-window"),
    pytest.param(10, 30, svc(4, queue=0), 3, "stops at 3", id="stops-at-the-scale-down-window"),
    pytest.param(30, 10, svc(4, queue=0), 3, "stops at 3", id="the-lookahead-still-holds"),
    pytest.param(5, 5, svc(4, queue=0), 1, "scale team-b/chat 4 -> 1", id="both-below-reactive"),
    pytest.param(10, 60, svc(2, queue=15), None, "", id="no-pre-warm-from-the-longer-window"),
    pytest.param(40, 60, svc(2, queue=15), 4, "pre-warm team-b/chat 2 -> 4", id="pre-warm"),
    pytest.param(10, None, svc(4, queue=0), 1, "4 -> 1", id="no-history-over-the-longer-window"),
]


@pytest.mark.parametrize(("ahead", "down", "service", "want", "tail"), DOWN_ROWS)
def test_a_scale_down_reads_the_scale_down_window(ahead, down, service, want, tail):
    text = desired(
        extra=scaling(lo=1, hi=6, down_step=3)
        + "  forecast: {days: 1, lookahead: 10m, scaleDownLookahead: 1h}\n"
    )
    pol = load([SourceFile("desired.yaml", text)]).scaling["chat"]
    queries = sig.forecast_queries("chat", pol, pol.spec.targets[0])
    signals = [
        SignalReading(id=q.id, query=q.query, samples=[] if v is None else [SignalSample(value=v)])
        for q, v in zip(queries, [ahead, down], strict=True)
    ]
    run = stage_run(text, two_nodes(SHARED_CARD), [], services=[service], signals=signals)
    intents, new, _ = plan_scaling(run)
    assert [(i.svc.key, i.want) for i in intents] == ([(CHAT, want)] if want else [])
    emit_scales(run, intents, new)
    (scale,) = [a for a in run.actions.values() if isinstance(a, Scale)] or [None]
    assert (scale is None) == (want is None)
    if scale is not None:
        assert tail in scale.reason, scale.reason
        if "stops at" in tail:
            window = "1h" if down >= ahead else "10m"
            assert f"forecast: queue over the next {window} was max" in scale.reason
    assert findings_of(run) == set()


# forecast.model scaled: each day's reading times today's level over that day's (the mean
# queue over levelWindow now and then). (the days' readings, the levels: now then day 1..3,
# wanted replicas (None: no intent), the reason's middle, findings)
LEVEL_ROWS = [
    pytest.param(
        [30, 50, 40],
        [20, 10, 40, 20],
        6,
        "max 60 on the last 3 days, scaled x0.5-2",
        set(),
        id="each-day-by-its-ratio",
    ),
    pytest.param(
        [10, 10, 10],
        [40, 5, 5, 5],
        4,
        "max 40 on the last 3 days, scaled x4",
        set(),
        id="bounded-at-4",
    ),
    pytest.param(
        [30, 50, 40],
        [None, 10, 40, 20],
        5,
        "max 50 on the last 3 days, not scaled",
        set(),
        id="no-level-now-no-correction",
    ),
    pytest.param(
        [30, 50, 40],
        [20, 0, 100, 20],
        4,
        "max 40 on the last 3 days, scaled x0.25-1",
        set(),
        id="a-day-at-zero-is-not-scaled",
    ),
    pytest.param(
        [30, 50, None],
        [20, 10, "timeout", 20],
        6,
        "max 60 on the last 2 days, scaled x1-2",
        {("forecast-unavailable", CHAT)},
        id="an-unread-level-is-a-finding",
    ),
]


@pytest.mark.parametrize(("days", "levels", "want", "middle", "findings"), LEVEL_ROWS)
def test_the_scaled_model_scales_each_day_to_todays_level(days, levels, want, middle, findings):
    text = policy("{days: 3, model: scaled}")
    run = stage_run(
        text,
        two_nodes(SHARED_CARD),
        [],
        services=[svc(2, queue=15)],
        signals=readings(text, days + levels),
    )
    intents, new, _ = plan_scaling(run)
    assert [(i.svc.key, i.want) for i in intents] == [(CHAT, want)]
    emit_scales(run, intents, new)
    (a,) = run.actions.values()
    assert a.reason.startswith(f"forecast: queue over the next 10m was {middle}"), a.reason
    assert a.reason.endswith(f"at 10/replica: pre-warm {CHAT} 2 -> {want}"), a.reason
    names = {s.name for s in a.signals}
    assert {"forecast/1d", "forecast-level/1d"} <= names, names
    assert ("forecast-level/0d" in names) == (levels[0] is not None)
    assert findings_of(run) == findings
