"""Forecast pre-warming, the arithmetic (pure): the replicas a ScalingPolicy's `forecast`
asks for, from what its signal recorded at the same time of day on previous days.

Model: the queue (requests running + waiting, the signal the policy scales on) over the
coming `lookahead` was, on each of the last `days` days, at most q_d (one reading per day,
`plan/signals.py` `forecast_queries`). The expected queue is the highest q_d (`max`, the
default: a daily peak seen once is expected again) or their median (`median`: one odd day
does not count), times `headroom`; the replicas that keep it at the scale-up threshold are
ceil(expected / scaleUp.queueLengthPerReplica). Days without history are left out; with
none, there is no forecast and the policy scales reactively.

With `model: scaled` each day's reading is first multiplied by that day's level ratio: the
mean queue over the last `levelWindow` now over the mean over the same window that day
(`level_ratios`), kept within [1 / maxLevelRatio, maxLevelRatio]; a day whose level is 0 or
unread, or no level now, is taken as it is. This is the seasonal-naive forecast with a
multiplicative level correction (the level x season split of Holt-Winters' multiplicative
form, the level estimated over one window instead of smoothed): the shape of the day comes
from the previous days, how high it runs from today.

Why this model: the daily shape of inference demand repeats (the Azure LLM 2024 trace's
Coding week: strong diurnal cycle), the queue is read where the policy already reads it,
and a window maximum over the time a replica needs to come up (model load + a cycle)
covers the rise before it happens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import median

LEVEL_FLOOR = 1e-6
"""A past level at or below this is no level (0: nothing queued that hour), no correction."""


def level_ratio(now: float | None, then: float | None, bound: float = 4.0) -> float:
    """How busy today is against a previous day: `now` / `then`, the mean queue over the level
    window today and that day, within [1 / bound, bound]; 1 (no correction) without either
    reading or when `then` is ~0."""
    if bound < 1:
        raise ValueError("bound must be at least 1")
    if now is None or then is None or then <= LEVEL_FLOOR:
        return 1.0
    return min(bound, max(1.0 / bound, now / then))


def level_ratios(
    now: float | None, days: Sequence[float | None], bound: float = 4.0
) -> list[float]:
    """`level_ratio` of today's level against each previous day's (`days[d - 1]`: d days back)."""
    return [level_ratio(now, then, bound) for then in days]


def scaled(days: Sequence[float | None], ratios: Sequence[float]) -> list[float | None]:
    """Each day's reading times its level ratio (a day without a reading stays None; a day
    without a ratio, 1)."""
    return [
        None if v is None else v * (ratios[i] if i < len(ratios) else 1.0)
        for i, v in enumerate(days)
    ]


def combine(days: Sequence[float | None], aggregate: str = "max") -> float | None:
    """The expected queue from one reading per day (None: no history that day): the highest
    or the median of the days that have one; None when none has."""
    seen = [v for v in days if v is not None]
    if not seen:
        return None
    if aggregate == "max":
        return max(seen)
    if aggregate == "median":
        return float(median(seen))
    raise ValueError(f"unknown aggregate {aggregate!r}")


def replicas_for(queue: float, per_replica: float, headroom: float = 1.0) -> int:
    """Replicas that keep `queue` x `headroom` at `per_replica` each (at least 0)."""
    if per_replica <= 0:
        raise ValueError("per_replica must be positive")
    want = queue * headroom / per_replica
    # a float a hair above a whole number (0.1 x 30 / 3) is that number
    return max(0, math.ceil(round(want, 9)))


def forecast_replicas(
    days: Sequence[float | None],
    per_replica: float,
    *,
    aggregate: str = "max",
    headroom: float = 1.0,
) -> tuple[int, float] | None:
    """(replicas, expected queue) for the readings `days`, or None without history."""
    q = combine(days, aggregate)
    if q is None:
        return None
    return replicas_for(q, per_replica, headroom), q
