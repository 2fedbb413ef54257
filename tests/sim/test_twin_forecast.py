"""The twin with a forecasting ScalingPolicy (issue 28 item 5): it answers the policy's
forecast queries from the load curve's previous days, and the planner pre-warms replicas
before the daily rise that the reactive policy only follows."""

from __future__ import annotations

from datetime import timedelta

import reconciler.sim.twin as twin_mod
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.sim.load import read_load
from reconciler.sim.twin import TwinConfig, run_twin
from tests.sim.twin_inputs import POLICIES, POOL, START

REAL_PLAN = twin_mod.plan
DAY, RISE = 86400, 3600  # each day the load rises from 1 to 6 req/s at 1 h, for an hour


def desired(forecast: str | None):
    text = POOL + "---\n" + POLICIES + (f"  forecast: {forecast}\n" if forecast else "")
    return load([SourceFile("desired.yaml", text)])


def two_days(path):
    lines = ["Time,TIMESTAMP"]
    t = START
    for day in range(2):
        for i in range(int((RISE + 2 * 3600 if day else DAY) // 10)):
            rate = 6 if RISE <= i * 10 < RISE + 3600 else 1
            lines.append(f"{t:%Y-%m-%d %H:%M:%S},{rate * 10:g}")
            t += timedelta(seconds=10)
    path.write_text("\n".join(lines) + "\n")
    return read_load(path)


def ups(monkeypatch, d, curve):
    """(time, from, to, reason) of every scale-up the planner made, and the run's record."""
    seen = []

    def plan(desired, observed, now):
        p = REAL_PLAN(desired, observed, now)
        t = (now - START).total_seconds()
        seen.extend(
            (t, a.from_replicas, a.to_replicas, a.reason)
            for a in p.actions
            if a.kind == "scale" and a.to_replicas > a.from_replicas
        )
        return p

    monkeypatch.setattr(twin_mod, "plan", plan)
    cfg = TwinConfig(service_rate=1.0, period=120.0, warmup=DAY, concurrency=10.0, load_time=120.0)
    return seen, run_twin(d, curve, [], cfg).record()


def test_prewarm_raises_replicas_before_the_daily_rise(tmp_path, monkeypatch):
    curve = two_days(tmp_path / "load.csv")
    rise = DAY + RISE
    plain, without = ups(monkeypatch, desired(None), curve)
    warm, with_fc = ups(monkeypatch, desired("{days: 1, lookahead: 10m}"), curve)
    # reactive only: nothing grows on day 2 before the load does
    assert not [u for u in plain if DAY <= u[0] < rise]
    # with the forecast: day 1 has no history, so no pre-warm there; on day 2 the replicas
    # the rise needs (6 req/s x 10 concurrency / 8 per replica = 8) come within the 10 minutes
    # before it, each a pre-warm
    assert not [u for u in warm if u[0] < DAY and u[3].startswith("forecast")]
    early = [u for u in warm if rise - 600 <= u[0] < rise]
    assert early and all(u[3].startswith("forecast: ") for u in early), early
    assert max(u[2] for u in early) == 8
    assert not [u for u in warm if DAY <= u[0] < rise - 600]
    # and the rise is met: no shortfall on day 2 with pre-warming, some without
    assert with_fc["shortfall_gpu_s"] == 0 < without["shortfall_gpu_s"]
    assert with_fc["slo_attainment"] > without["slo_attainment"]


def test_the_twin_answers_the_scale_down_window_over_its_own_length(tmp_path):
    """With scaleDownLookahead the twin answers both queries per day, each over its window:
    50 minutes before day 2's rise, yesterday's next 10 minutes were calm (1 req/s), its next
    hour held the rise (6 req/s); x 10 concurrency / 1 req/s per replica."""
    curve = two_days(tmp_path / "load.csv")
    d = desired("{days: 1, lookahead: 10m, scaleDownLookahead: 1h}")
    cfg = TwinConfig(service_rate=1.0, period=120.0, warmup=DAY, concurrency=10.0)
    twin = twin_mod.Twin(d, curve, [], cfg)
    got = {
        r.id.split("/", 5)[-1]: [s.value for s in r.samples]
        for r in twin._history(DAY + RISE - 3000)
    }
    assert got == {"forecast/1d": [10.0], "forecast-down/1d": [60.0]}
    # the first day has no history for either window
    assert all(not r.samples for r in twin._history(RISE))


def test_the_twin_answers_the_level_queries_of_the_scaled_model(tmp_path):
    """With model scaled the twin answers the level of today and of each previous day: the
    mean queue over the level window that ended now and a day ago at this time. 30 minutes
    into day 2's rise, the last 30 minutes ran at 6 req/s today and a day ago; half an hour
    before the rise, a day ago, at 1 req/s; x 10 concurrency / 1 req/s per replica."""
    curve = two_days(tmp_path / "load.csv")
    d = desired("{days: 1, lookahead: 10m, model: scaled, levelWindow: 30m}")
    cfg = TwinConfig(service_rate=1.0, period=120.0, warmup=DAY, concurrency=10.0)
    twin = twin_mod.Twin(d, curve, [], cfg)

    def history(t):
        return {r.id.split("/", 5)[-1]: [s.value for s in r.samples] for r in twin._history(t)}

    assert history(DAY + RISE + 1800) == {
        "forecast/1d": [60.0],
        "forecast-level/0d": [60.0],
        "forecast-level/1d": [60.0],
    }
    # 15 minutes past the rise: the last 30 minutes are half calm, half busy
    assert history(DAY + RISE + 900)["forecast-level/0d"] == [35.0]
    assert history(DAY + RISE - 1800)["forecast-level/1d"] == [10.0]
    # the first day: no history a day back, and no level before the first 30 minutes
    assert history(RISE)["forecast-level/1d"] == []
    assert history(600)["forecast-level/0d"] == []
