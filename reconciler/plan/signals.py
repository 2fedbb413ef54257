"""Signals from Prometheus, the pure half: which PromQL queries the policies need this cycle, and
what the readings in the observed state say about a scale target or a card.

The shell (`reconciler/loop/signals.py`) asks `signal_queries` for the queries, runs them
through the Prometheus adapter (`reconciler/observe/prometheus.py`) and puts the readings into
the observed state; the planner reads them back here. A reading is matched to its query by id
and by query text: a reading of another text (the policy changed since the snapshot was taken)
is no reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.observe.model import Gpu, InferenceService, ObservedState, SignalReading
from reconciler.plan.actions import SignalValue
from reconciler.policy.models import (
    PLACEHOLDER,
    MaintenancePolicy,
    ScaleTarget,
    ScalingPolicy,
)
from reconciler.policy.quantity import format_duration
from reconciler.policy.state import DesiredState

QUEUE_LENGTH = "queueLength"
WAIT_TIME = "waitTime"


@dataclass(frozen=True)
class SignalQuery:
    id: str
    """What the query is for: `scaling/<policy>/<kind>/<namespace>/<name>/<signal>` or
    `utilization/<MaintenancePolicy>`."""
    query: str
    """The PromQL sent, placeholders substituted."""


def render_query(template: str, values: Mapping[str, str]) -> str:
    """`$name` placeholders replaced by plain text (never str.format: PromQL has braces). The
    policy loader refuses unknown placeholders, so every one here has a value."""
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def scaling_query_id(policy: str, t: ScaleTarget, signal: str) -> str:
    return f"scaling/{policy}/{t.kind}/{t.namespace}/{t.name}/{signal}"


def utilization_query_id(policy: str) -> str:
    return f"utilization/{policy}"


def scaling_queries(policy: str, pol: ScalingPolicy, t: ScaleTarget) -> list[SignalQuery]:
    """The queries one target needs: the queue length always (scale-down reads it), the wait
    time only when scaleUp.pendingTime is set. None with source annotations."""
    sig = pol.spec.signals
    if sig.source != "prometheus":
        return []
    values = {"namespace": t.namespace, "name": t.name}
    queue = render_query(sig.queue_length, values)
    out = [SignalQuery(scaling_query_id(policy, t, QUEUE_LENGTH), queue)]
    if pol.spec.scale_up.pending_time is not None:
        out.append(
            SignalQuery(scaling_query_id(policy, t, WAIT_TIME), render_query(sig.wait_time, values))
        )
    return out


FORECAST = "forecast"
FORECAST_DOWN = "forecast-down"
"""The signal of the scale-down window's readings (forecast.scaleDownLookahead)."""
FORECAST_LEVEL = "forecast-level"
"""The signal of the level readings of forecast.model scaled: the mean queue over the last
levelWindow, today (day 0) and on each previous day."""
DAY_SECONDS = 86400
FORECAST_RESOLUTION = "30s"
"""The subquery step of the default forecast query (a usual scrape interval)."""


def forecast_query_id(policy: str, t: ScaleTarget, day: int, signal: str = FORECAST) -> str:
    return f"{scaling_query_id(policy, t, signal)}/{day}d"


def forecast_template(pol: ScalingPolicy) -> str:
    """One day's forecast query before substitution: the policy's own, or the highest (or mean,
    `statistic`) of signals.queueLength over the window, as a subquery."""
    fc = pol.spec.forecast
    if fc is not None and fc.query is not None:
        return fc.query
    stat = fc.statistic if fc is not None else "max"
    return (
        f"{stat}_over_time(({pol.spec.signals.queue_length})[$window:{FORECAST_RESOLUTION}] "
        "offset $offset)"
    )


@dataclass(frozen=True)
class ForecastQuery:
    """One forecast query and what it reads: `signal` (FORECAST: the pre-warm's window,
    FORECAST_DOWN: the scale-down's), the day `day` days back, a window of `window` seconds."""

    query: SignalQuery
    signal: str
    day: int
    window: int

    @property
    def start(self) -> int:
        """Where the window starts, in seconds from now (negative: in the past): the coming
        window as it was `day` days ago, or (FORECAST_LEVEL) the window that ended then."""
        back = self.day * DAY_SECONDS
        return -back - self.window if self.signal == FORECAST_LEVEL else -back


def forecast_plan(policy: str, pol: ScalingPolicy, t: ScaleTarget) -> list[ForecastQuery]:
    """One query per previous day d (1..forecast.days): the signal over [now - d days,
    now - d days + lookahead], the window that is coming up, as it was that day; with
    scaleDownLookahead, as many again over that longer window. `$window` is the window, `$offset`
    d days minus it (PromQL's `[w] offset o` covers [now - o - w, now - o]). With model
    scaled, the levels after them: the mean queue over the last levelWindow now (day 0, no
    offset) and d days ago (offset d days). Read whatever signals.source is: annotations have
    no history."""
    fc = pol.spec.forecast
    if fc is None:
        return []
    windows = [(FORECAST, fc.lookahead)]
    if fc.scale_down_lookahead is not None:
        windows.append((FORECAST_DOWN, fc.scale_down_lookahead))
    template = forecast_template(pol)
    out = []
    for signal, length in windows:
        window = max(1, int(length.total_seconds()))
        for day in range(1, fc.days + 1):
            values = {
                "namespace": t.namespace,
                "name": t.name,
                "window": f"{window}s",
                "offset": f"{day * DAY_SECONDS - window}s",
            }
            q = SignalQuery(
                forecast_query_id(policy, t, day, signal), render_query(template, values)
            )
            out.append(ForecastQuery(q, signal, day, window))
    if fc.model == "scaled":
        window = max(1, int(fc.level_window.total_seconds()))
        for day in range(fc.days + 1):
            values = {"namespace": t.namespace, "name": t.name, "window": f"{window}s"}
            text = render_query(level_template(pol, day), values)
            q = SignalQuery(forecast_query_id(policy, t, day, FORECAST_LEVEL), text)
            out.append(ForecastQuery(q, FORECAST_LEVEL, day, window))
    return out


def level_template(pol: ScalingPolicy, day: int) -> str:
    """The level query of `day` days back before substitution: the mean of signals.queueLength
    over `$window` ending then (day 0: now, no offset clause)."""
    offset = f" offset {day * DAY_SECONDS}s" if day else ""
    return (
        f"avg_over_time(({pol.spec.signals.queue_length})[$window:{FORECAST_RESOLUTION}]{offset})"
    )


def forecast_queries(
    policy: str, pol: ScalingPolicy, t: ScaleTarget, signal: str | None = None
) -> list[SignalQuery]:
    """The queries of `forecast_plan` (only those of `signal` when given), in its order."""
    return [f.query for f in forecast_plan(policy, pol, t) if signal in (None, f.signal)]


@dataclass
class ForecastReadings:
    """What a target's forecast queries returned: one value per day (None: no history that
    day, an empty result), the readings used, and the queries that failed (signal, query, why)."""

    days: list[float | None] = field(default_factory=list)
    evidence: tuple[SignalValue, ...] = ()
    problems: list[tuple[str, str, str]] = field(default_factory=list)


def forecast_readings(
    observed: ObservedState, policy: str, pol: ScalingPolicy, t: ScaleTarget, signal: str = FORECAST
) -> ForecastReadings:
    """Each day's reading of the target's forecast queries of `signal` (the pre-warm's window or
    the scale-down's): the sum of its samples (as the queue); an empty result is a day without
    history, an error or a negative value a problem."""
    out = ForecastReadings()
    evidence: list[SignalValue] = []
    for q in forecast_queries(policy, pol, t, signal):
        name = q.id.rsplit("/", 2)[1] + "/" + q.id.rsplit("/", 1)[1]
        r = reading(observed, q)
        why = unavailable(observed, q)
        if r is not None and not r.error and not r.samples:
            out.days.append(None)
            continue
        values = [s.value for s in r.samples] if r is not None and not why else []
        if not why and any(v < 0 for v in values):
            why = f"negative value {min(values):g}"
        if why:
            out.days.append(None)
            out.problems.append((name, q.query, why))
            continue
        evidence.append(SignalValue(name=name, query=q.query, value=sum(values)))
        out.days.append(sum(values))
    out.evidence = tuple(evidence)
    return out


def utilization_query(policy: str, m: MaintenancePolicy) -> SignalQuery | None:
    """The utilization query of an enabled idle reclaim with source prometheus; `$window` is
    idleFor in whole seconds (a duration every Prometheus version parses)."""
    rule = m.spec.idle_reclaim
    if rule is None or not rule.enabled or rule.utilization.source != "prometheus":
        return None
    window = f"{max(1, int(rule.idle_for.total_seconds()))}s"
    return SignalQuery(
        utilization_query_id(policy), render_query(rule.utilization.query, {"window": window})
    )


def scaling_signal_queries(desired: DesiredState, observed: ObservedState) -> list[SignalQuery]:
    """The ScalingPolicies' queries, in a stable order: per policy with source prometheus, its
    observed targets' (a target not observed is a finding of its own, and reading its queue
    would change nothing). What the controller's signal poller runs between cycles (not the
    forecasts' history: a past day's reading cannot cross a threshold now)."""
    return _policy_queries(desired, observed, forecasts=False)


def _policy_queries(
    desired: DesiredState, observed: ObservedState, *, forecasts: bool
) -> list[SignalQuery]:
    services = {(s.kind, s.key) for s in observed.services}
    out: dict[str, SignalQuery] = {}
    for name in sorted(desired.scaling):
        pol = desired.scaling[name]
        for t in pol.spec.targets:
            if (t.kind, f"{t.namespace}/{t.name}") in services:
                out.update((q.id, q) for q in scaling_queries(name, pol, t))
                if forecasts:
                    out.update((q.id, q) for q in forecast_queries(name, pol, t))
    return list(out.values())


def signal_queries(desired: DesiredState, observed: ObservedState) -> list[SignalQuery]:
    """Every query this cycle needs, in a stable order: the ScalingPolicies'
    (`scaling_signal_queries`) each followed by its forecast's history (`forecast_queries`);
    per MaintenancePolicy reading utilization from Prometheus, one."""
    out = {q.id: q for q in _policy_queries(desired, observed, forecasts=True)}
    for name in sorted(desired.maintenance):
        q = utilization_query(name, desired.maintenance[name])
        if q is not None:
            out[q.id] = q
    return list(out.values())


def reading(observed: ObservedState, q: SignalQuery) -> SignalReading | None:
    """The observed reading of `q`: same id and same query text."""
    for r in observed.signals:
        if r.id == q.id and r.query == q.query:
            return r
    return None


def unavailable(observed: ObservedState, q: SignalQuery) -> str:
    """Why `q` has no usable reading ('' when it has one)."""
    r = reading(observed, q)
    if r is None:
        if any(x.id == q.id for x in observed.signals):
            return "the observed state has a reading of another query text (the policy changed)"
        return "the observed state has no reading of it"
    if r.error:
        return r.error
    if not r.samples:
        return "empty result: no series matched"
    return ""


# --------------------------------------------------------------------------- scale targets


@dataclass
class TargetSignals:
    """What a scale target's signals say: queue length (all replicas) and p99 wait in seconds,
    None when unknown; the readings they came from; and what could not be read (each is a
    finding, and any one of them rules out a scale-down: no reading is not calm)."""

    queue_length: float | None = None
    wait_seconds: float | None = None
    evidence: tuple[SignalValue, ...] = ()
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    """(signal, query, why) of each signal that could not be read."""


def target_signals(
    observed: ObservedState, policy: str, pol: ScalingPolicy, t: ScaleTarget, svc: InferenceService
) -> TargetSignals:
    """A target's queue length and wait: from its annotations (source annotations, as read by
    the Kubernetes adapter), or from its readings (source prometheus): the queue is the sum of
    the samples, the wait the largest; a failed, empty, negative or missing reading is a
    problem."""
    if pol.spec.signals.source != "prometheus":
        return TargetSignals(svc.queue_length, svc.pending_seconds_p99)
    out = TargetSignals()
    evidence: list[SignalValue] = []
    for q in scaling_queries(policy, pol, t):
        signal = q.id.rsplit("/", 1)[1]
        why = unavailable(observed, q)
        r = reading(observed, q)
        if not why and r is not None:
            values = [s.value for s in r.samples]
            if any(v < 0 for v in values):
                why = f"negative value {min(values):g}"
        if why or r is None:
            out.problems.append((signal, q.query, why))
            continue
        value = sum(values) if signal == QUEUE_LENGTH else max(values)
        evidence.append(SignalValue(name=signal, query=q.query, value=value))
        if signal == QUEUE_LENGTH:
            out.queue_length = value
        else:
            out.wait_seconds = value
    out.evidence = tuple(evidence)
    return out


def per_replica(read: TargetSignals, replicas: int) -> float | None:
    """The queue per replica (None when the queue is unknown)."""
    return read.queue_length / max(replicas, 1) if read.queue_length is not None else None


def scale_up_reasons(pol: ScalingPolicy, replicas: int, read: TargetSignals) -> list[str]:
    """Why the signals ask `replicas` replicas for a scale-up (empty: they do not): the queue
    per replica over scaleUp.queueLengthPerReplica, the p99 wait over scaleUp.pendingTime.
    Bounds and cooldowns are the planner's (`stages/scaling.py`)."""
    up = pol.spec.scale_up
    per, wait = per_replica(read, replicas), read.wait_seconds
    hot = []
    if (
        up.queue_length_per_replica is not None
        and per is not None
        and per > up.queue_length_per_replica
    ):
        hot.append(f"queue {per:g}/replica > {up.queue_length_per_replica:g}")
    if up.pending_time is not None and wait is not None and wait > up.pending_time.total_seconds():
        hot.append(
            f"p99 wait {format_duration(wait)} > {format_duration(up.pending_time.total_seconds())}"
        )
    return hot


def calm(pol: ScalingPolicy, replicas: int, read: TargetSignals) -> bool:
    """The signals allow a scale-down: the queue per replica under
    scaleDown.queueLengthPerReplica and every signal read (no reading is not calm)."""
    per = per_replica(read, replicas)
    return (
        per is not None
        and per < pol.spec.scale_down.queue_length_per_replica
        and not (read.problems)
    )


UP, DOWN, HOLD = "up", "down", "hold"


def direction(pol: ScalingPolicy, t: ScaleTarget, replicas: int, read: TargetSignals) -> str:
    """Which way the signals push a target running `replicas` replicas, cooldowns aside: UP
    (`scale_up_reasons`, below its maximum), DOWN (`calm`, above its minimum) or HOLD (the
    signals change nothing; a count outside the bounds is brought inside them whatever the
    signals say). The controller wakes a cycle when a reading moves a target to UP or DOWN."""
    lo, hi = t.min_replicas, t.max_replicas
    if not lo <= replicas <= hi:
        return HOLD
    if scale_up_reasons(pol, replicas, read):
        return UP if replicas < hi else HOLD
    return DOWN if calm(pol, replicas, read) and replicas > lo else HOLD


def target_directions(desired: DesiredState, observed: ObservedState) -> dict[str, str]:
    """`direction` of every observed ScalingPolicy target, by
    `scaling/<policy>/<kind>/<namespace>/<name>`, from the services' annotations or the
    observed readings (`target_signals`). A service an autoscaler scales is judged on its
    replicas (the planner judges it on the autoscaler's maxReplicas): a wake, not a plan."""
    services = {(s.kind, s.key): s for s in observed.services}
    out: dict[str, str] = {}
    for name in sorted(desired.scaling):
        pol = desired.scaling[name]
        for t in pol.spec.targets:
            svc = services.get((t.kind, f"{t.namespace}/{t.name}"))
            if svc is None:
                continue
            read = target_signals(observed, name, pol, t, svc)
            out[f"scaling/{name}/{t.kind}/{t.namespace}/{t.name}"] = direction(
                pol, t, svc.replicas, read
            )
    return out


def describe(evidence: tuple[SignalValue, ...]) -> str:
    """The readings a decision used, for its reason: `queueLength: <query> = 24`."""
    return "; ".join(f"{e.name}: {e.query} = {e.value:g}" for e in evidence)


# --------------------------------------------------------------------------- cards


def card_utilization(r: SignalReading, node: str, gpu: Gpu) -> float | None:
    """The card's utilization in a utilization reading: the samples of this card (by the DCGM
    exporter's `UUID` label, or `uuid` with its --use-old-namespace, when the card's UUID is
    known; else by node name in `Hostname` or `hostname` and index in `gpu`), the highest of
    them when several match (two scrape jobs, MIG instances of the card); None when none does."""
    found: list[float] = []
    for s in r.samples:
        lab = s.labels
        uuid = lab.get("UUID") or lab.get("uuid") or ""
        if gpu.uuid and uuid:
            hit = uuid == gpu.uuid
        else:
            host = lab.get("Hostname") or lab.get("hostname") or ""
            hit = host == node and lab.get("gpu") == str(gpu.index)
        if hit:
            found.append(s.value)
    return max(found) if found else None
