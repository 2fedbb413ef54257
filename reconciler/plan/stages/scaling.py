"""Step 2: elastic inference. Services whose queue per replica or p99 wait crosses their
ScalingPolicy thresholds scale (cooldowns respected), and a policy's `forecast` pre-warms
replicas ahead of the daily curve (`plan/forecast.py`; desired = max(reactive, forecast));
the new replicas become demand, the pending pods a scale-down deletes stop being demand.
A service an HPA or a KEDA ScaledObject scales gets its autoscaler's envelope (min/max)
instead."""

from __future__ import annotations

import math
from dataclasses import dataclass

from reconciler.observe.model import (
    Autoscaler,
    InferenceService,
    scale_down_order,
)
from reconciler.plan import signals as sig
from reconciler.plan.actions import (
    Scale,
    SetScaleEnvelope,
    SignalValue,
)
from reconciler.plan.forecast import forecast_replicas as fc_replicas
from reconciler.plan.forecast import level_ratios, scaled
from reconciler.plan.run import Demand, Run
from reconciler.policy.models import (
    ScaleTarget,
    ScalingPolicy,
)
from reconciler.policy.quantity import format_duration


@dataclass
class _ScaleIntent:
    svc: InferenceService
    policy: str
    pool: str
    want: int
    why: str
    envelope: _Envelope | None = None
    """Set when an autoscaler scales the service: `want` is its new maxReplicas."""


def plan_scaling(run: Run) -> tuple[list[_ScaleIntent], list[Demand], set[str]]:
    """What each ScalingPolicy asks; a scale-up becomes pending replicas, and the Scale
    action is emitted after admission, for the replicas admission lets in. A scale-down
    deletes the service's pending pods first (`scale_down_order`): their keys come back
    as the third item, demand no longer."""
    # a Deployment and a StatefulSet may share a name: the target names its kind
    services = {(s.kind, s.key): s for s in run.observed.services}
    intents: list[_ScaleIntent] = []
    out: list[Demand] = []
    gone: set[str] = set()
    for name in sorted(run.desired.scaling):
        pol = run.desired.scaling[name]
        for t in pol.spec.targets:
            svc = services.get((t.kind, f"{t.namespace}/{t.name}"))
            if svc is None:
                run.find(
                    "warning",
                    "scale-target-missing",
                    f"{t.namespace}/{t.name}",
                    f"ScalingPolicy/{name} targets a {t.kind} that was not observed",
                )
                continue
            scaler = _autoscaler(run, name, svc)
            if scaler is _CONFLICT:
                continue
            if isinstance(scaler, Autoscaler):
                intent = _envelope_intent(run, name, pol, t, svc, scaler)
                if intent is None:
                    continue
                intents.append(intent)
                want = intent.want
            else:
                want, why = _desired_replicas(run, pol, svc, t.min_replicas, t.max_replicas)
                if want == svc.replicas:
                    continue
                intents.append(_ScaleIntent(svc, name, pol.spec.pool, want, why))
            if want < svc.replicas:
                pods = sorted(
                    (w for w in run.cluster.workloads.values() if svc.owns(w)),
                    key=scale_down_order,
                )
                doomed = pods[: max(0, len(pods) - want)]
                gone.update(w.key for w in doomed if w.phase == "Pending")
            grows = intents[-1].envelope is None or want > intents[-1].envelope.scaler.max_replicas
            for i in range(svc.replicas, want if grows else 0):
                out.append(
                    Demand(
                        key=f"{svc.key}#replica-{i + 1}",
                        namespace=svc.namespace,
                        request=svc.replica_request,
                        priority_class=svc.priority_class,
                        pool=pol.spec.pool,
                        created=run.now,
                        borrow_from=tuple(pol.spec.borrow_from),
                        origin=f"scale-up of {svc.key}",
                        order=i,
                    )
                )
    return intents, out, gone


def emit_scales(run: Run, intents: list[_ScaleIntent], admitted: list[Demand]) -> None:
    keys = {p.key for p in admitted}
    for it in intents:
        if it.envelope is not None:
            _emit_envelope(run, it, it.envelope, keys)
            continue
        svc, want = it.svc, it.want
        if want > svc.replicas:
            ok = 0
            while svc.replicas + ok < want and f"{svc.key}#replica-{svc.replicas + ok + 1}" in keys:
                ok += 1
            held = run.waiting.get(f"{svc.key}#replica-{svc.replicas + ok + 1}")
            if ok < want - svc.replicas and held:
                run.find(
                    "info",
                    "scale-held",
                    svc.key,
                    f"scale-up to {want} stops at {svc.replicas + ok}: {held}",
                )
            if ok == 0:
                continue
            why = it.why if ok == want - svc.replicas else f"{it.why} (admission allows {ok})"
            want = svc.replicas + ok
        else:
            why = it.why
        run.add(
            Scale(
                id=f"scale:{svc.key}",
                target=svc.key,
                pool=it.pool,
                reason=why,
                workload_kind=svc.kind,
                from_replicas=svc.replicas,
                to_replicas=want,
                policy=it.policy,
                signals=run.scale_signals.get(svc.key, ()),
            )
        )


def _desired_replicas(
    run: Run, pol: ScalingPolicy, svc: InferenceService, lo: int, hi: int
) -> tuple[int, str]:
    """max(reactive, forecast): the reactive decision (`_reactive_replicas`), raised to the
    forecast's replicas (`_forecast`) when the policy has a forecast. A forecast above the
    replicas now is a pre-warm, subject to the scale-up cooldown, its reason `forecast: ...`;
    a reactive scale-down stops at the forecast over the scale-down window
    (forecast.scaleDownLookahead, else the lookahead), or is held when that is at or above
    the replicas now. Bounds first: a service outside its target's bounds is brought inside
    them, forecast or not."""
    want, why = _reactive_replicas(run, pol, svc, lo, hi)
    n = svc.replicas
    fc = pol.spec.forecast
    if fc is None or n < lo or n > hi:
        return want, why
    ahead = _forecast(run, pol, svc, lo, hi)
    if want < n and fc.scale_down_lookahead is not None:  # a scale-down: the longer window
        held = _forecast(run, pol, svc, lo, hi, sig.FORECAST_DOWN)
        if held is not None:  # it holds replicas, never adds any (the pre-warm reads lookahead)
            held = (min(held[0], n), held[1])
            if ahead is None or held[0] > ahead[0]:
                ahead = held
    if ahead is None or ahead[0] <= want:
        return want, why
    floor, text = ahead
    if floor <= n:  # a scale-down, held up by the forecast
        if floor == n:
            return n, ""
        return floor, f"{why}; stops at {floor} ({text})"
    since = run.seconds_since(svc.last_scale_at)
    if want <= n and since is not None and since < pol.spec.scale_up.cooldown.total_seconds():
        return n, ""
    pre = f"{text}: pre-warm {svc.key} {n} -> {floor}"
    return floor, f"{pre}; {why}" if want > n else pre


def _forecast(
    run: Run,
    pol: ScalingPolicy,
    svc: InferenceService,
    lo: int,
    hi: int,
    signal: str = sig.FORECAST,
) -> tuple[int, str] | None:
    """The forecast's replicas within the target's bounds over the pre-warm's window (signal
    FORECAST) or the scale-down's (FORECAST_DOWN), and the reason's text (`forecast: ...`);
    None without a forecast or without history. A day whose reading failed is a finding (the
    forecast uses the days that were read)."""
    fc = pol.spec.forecast
    per = pol.spec.scale_up.queue_length_per_replica
    if fc is None or per is None:
        return None
    name = pol.metadata.name
    target = _target(pol, svc)
    read = sig.forecast_readings(run.observed, name, pol, target, signal)
    for what, query, why in read.problems:
        run.find(
            "warning",
            "forecast-unavailable",
            svc.key,
            f"ScalingPolicy/{name} cannot read {what} ({query}): {why}; "
            "the forecast uses the other days",
        )
    days, level, evidence = read.days, "", read.evidence
    if fc.model == "scaled":
        days, level, more = _level_scaled(run, pol, svc, target, read.days, signal)
        evidence = (*evidence, *more)
    got = fc_replicas(days, per, aggregate=fc.aggregate, headroom=fc.headroom)
    if got is None:
        return None
    want, queue = got
    if evidence:
        run.scale_signals[svc.key] = (*run.scale_signals.get(svc.key, ()), *evidence)
    seen = sum(1 for v in read.days if v is not None)
    length = fc.scale_down_lookahead if signal == sig.FORECAST_DOWN else fc.lookahead
    window = format_duration((length or fc.lookahead).total_seconds())
    clamp = min(hi, max(lo, want))
    bound = f" (the target's {'maximum' if clamp < want else 'minimum'})" if clamp != want else ""
    head = f" x {fc.headroom:g}" if fc.headroom != 1 else ""
    return clamp, (
        f"forecast: queue over the next {window} was {fc.aggregate} {queue:g} on the last "
        f"{seen} day{'s' if seen != 1 else ''}{level}{head} -> {clamp} replicas at "
        f"{per:g}/replica{bound}"
    )


def _level_scaled(
    run: Run,
    pol: ScalingPolicy,
    svc: InferenceService,
    target: ScaleTarget,
    days: list[float | None],
    signal: str,
) -> tuple[list[float | None], str, tuple[SignalValue, ...]]:
    """forecast.model scaled: each day's reading times its level ratio (`plan/forecast.py`
    `level_ratios`), the reason's text for it and the level readings used. A level that
    could not be read is a finding (once, with the pre-warm's window) and no correction."""
    fc = pol.spec.forecast
    assert fc is not None
    name = pol.metadata.name
    lv = sig.forecast_readings(run.observed, name, pol, target, sig.FORECAST_LEVEL)
    if signal == sig.FORECAST:
        for what, query, why in lv.problems:
            run.find(
                "warning",
                "forecast-unavailable",
                svc.key,
                f"ScalingPolicy/{name} cannot read {what} ({query}): {why}; "
                "a day without both levels is not scaled",
            )
    now, past = (lv.days[0], lv.days[1:]) if lv.days else (None, [])
    ratios = level_ratios(now, past, fc.max_level_ratio)
    used = [r for v, r in zip(days, ratios, strict=False) if v is not None]
    window = format_duration(fc.level_window.total_seconds())
    text = ""
    if now is None:
        text = f", not scaled (no queue level of the last {window} now)"
    elif used:
        lo, hi = min(used), max(used)
        span = f"{lo:.2g}" if round(lo, 2) == round(hi, 2) else f"{lo:.2g}-{hi:.2g}"
        text = f", scaled x{span} to the queue of the last {window}"
    return scaled(days, ratios), text, lv.evidence


def _reactive_replicas(
    run: Run, pol: ScalingPolicy, svc: InferenceService, lo: int, hi: int
) -> tuple[int, str]:
    up, down = pol.spec.scale_up, pol.spec.scale_down
    n = svc.replicas
    if n < lo:
        return lo, f"{svc.key} runs {n} replicas, below its minimum of {lo}"
    if n > hi:
        return hi, f"{svc.key} runs {n} replicas, above its maximum of {hi}"
    since = run.seconds_since(svc.last_scale_at)
    read = _target_signals(run, pol, svc)
    per = sig.per_replica(read, n)
    shown = f" [{sig.describe(read.evidence)}]" if read.evidence else ""
    hot = sig.scale_up_reasons(pol, n, read)
    if hot:
        if n >= hi:
            run.find(
                "warning",
                "at-max-replicas",
                svc.key,
                f"wants to scale up ({'; '.join(hot)}) but is at its maximum of {hi} replicas",
            )
            return n, ""
        if since is not None and since < up.cooldown.total_seconds():
            return n, ""
        want = min(hi, _grown(pol, n, read.queue_length))
        return want, f"{'; '.join(hot)}: scale {svc.key} {n} -> {want}{shown}"
    # a signal that could not be read is not calm: never a scale-down on a missing reading
    if (
        sig.calm(pol, n, read)
        and n > lo
        and (since is None or since >= down.cooldown.total_seconds())
    ):
        want = max(lo, _shrunk(pol, n, read.queue_length))
        return (
            want,
            f"queue {per:g}/replica < {down.queue_length_per_replica:g} "
            f"for over {format_duration(down.cooldown.total_seconds())}: "
            f"scale {svc.key} {n} -> {want}{shown}",
        )
    return n, ""


def _grown(pol: ScalingPolicy, n: int, queue: float | None) -> int:
    """The replicas a scale-up asks from `n` (bounds aside): `n + step`, or in mode
    proportional ceil(queue / queueLengthPerReplica), at least n + 1 (a scale-up the p99 wait
    asks, or one with the queue unread, adds one), at most n + maxStep."""
    up = pol.spec.scale_up
    if up.mode == "step":
        return n + up.step
    per = up.queue_length_per_replica
    want = n + 1 if queue is None or per is None else max(n + 1, math.ceil(queue / per))
    return want if up.max_step is None else min(want, n + up.max_step)


def _shrunk(pol: ScalingPolicy, n: int, queue: float | None) -> int:
    """The replicas a scale-down leaves of `n` (bounds aside): `n - step`, or in mode
    proportional ceil(queue / scaleDown.queueLengthPerReplica), at most n - 1, at least
    n - maxStep. A scale-down comes only with the queue read (`signals.calm`)."""
    down = pol.spec.scale_down
    if down.mode == "step":
        return n - down.step
    per = down.queue_length_per_replica
    want = n - 1 if queue is None or per <= 0 else min(n - 1, math.ceil(queue / per))
    return want if down.max_step is None else max(want, n - down.max_step)


_CONFLICT = object()  # two autoscalers target one workload: gpupool changes nothing


@dataclass
class _Envelope:
    scaler: Autoscaler
    to_min: int
    """The envelope's new minReplicas for the planned max (`_envelope_min`)."""


def _autoscaler(run: Run, policy: str, svc: InferenceService) -> Autoscaler | object | None:
    """The one autoscaler that scales `svc`, None without one, `_CONFLICT` (after a finding)
    with two. The HPA KEDA made for a ScaledObject is the ScaledObject's (KEDA owns it and
    would revert a change: keda v2.19.0 controllers/keda/hpa.go, updateHPAIfNeeded), never
    one of its own."""
    mine = [a for a in svc.autoscalers if not a.owner]
    if len(mine) > 1:
        run.find(
            "warning",
            "autoscaler-conflict",
            svc.key,
            f"{svc.kind} {svc.key} is scaled by {' and '.join(a.ref for a in mine)}: they fight "
            f"each other, so gpupool changes neither (nor its replicas) for ScalingPolicy/"
            f"{policy}; remove one",
        )
        return _CONFLICT
    return mine[0] if mine else None


def _envelope_floor(a: Autoscaler) -> int:
    """The least minReplicas the autoscaler accepts. An HPA refuses minReplicas 0 unless the
    HPAScaleToZero gate is on (kubernetes v1.37.2
    pkg/registry/autoscaling/horizontalpodautoscaler/strategy.go, MinReplicasLowerBound), so 0
    only where it is 0 already. A ScaledObject with `idleReplicaCount` needs minReplicaCount
    above it, a minReplicaCount of 0 counting as 1: KEDA's operator otherwise stops scaling it
    (Ready False, "IdleReplicaCount=1 must be less than MinReplicaCount=1": keda v2.19.0
    apis/keda/v1alpha1/scaledobject_types.go, CheckReplicaCountBoundsAreValid with
    GetHPAMinReplicas, called by controllers/keda/scaledobject_controller.go). So an idle count
    of 0 allows any min, and one of n >= 1 needs n + 1."""
    if a.kind == "HorizontalPodAutoscaler":
        return 1 if a.min_replicas > 0 else 0
    return a.idle_replicas + 1 if a.idle_replicas else 0


def _envelope_min(a: Autoscaler, lo: int, top: int) -> int:
    """The envelope's minReplicas: the target's minimum, at most `top` (the new max), at least
    what the autoscaler accepts (`_envelope_floor`)."""
    return max(_envelope_floor(a), min(lo, top))


def _envelope_intent(
    run: Run,
    policy: str,
    pol: ScalingPolicy,
    t: ScaleTarget,
    svc: InferenceService,
    a: Autoscaler,
) -> _ScaleIntent | None:
    """What the envelope of `a` should be: the scaling decision (`_desired_replicas`: same
    signals, cooldowns, steps and target bounds) taken for n = the autoscaler's maxReplicas,
    the capacity gpupool planned for the service; cooldowns count from gpupool's last
    envelope change. A max outside the target's bounds is brought inside them. None when
    nothing changes."""
    lo, hi = t.min_replicas, t.max_replicas
    if a.kind == "HorizontalPodAutoscaler" and svc.replicas == 0 and a.min_replicas > 0:
        # kubernetes v1.37.2 pkg/controller/podautoscaler/horizontal.go, reconcileAutoscaler:
        # "scaling is disabled since the replica count of the target is zero"
        run.find(
            "info",
            "autoscaling-disabled",
            svc.key,
            f"{svc.kind} {svc.key} has 0 replicas: {a.ref} does not scale it (the HPA controller "
            "disables scaling at 0) whatever its envelope; scale it to 1 to hand it back",
        )
    n = a.max_replicas
    if n < lo:
        want, why = lo, f"{a.ref} allows at most {n} replicas, below the target's minimum {lo}"
    elif n > hi:
        want, why = hi, f"{a.ref} allows {n} replicas, above the target's maximum {hi}"
    else:
        # the decision for a service running its envelope's max (its queue spread over them)
        view = svc.model_copy(update={"replicas": n, "last_scale_at": a.last_change_at})
        want, why = _desired_replicas(run, pol, view, lo, hi)
    floor = _envelope_floor(a)
    if floor > hi:
        run.find(
            "warning",
            "idle-replicas-over-target",
            svc.key,
            f"{a.ref} has idleReplicaCount {a.idle_replicas}: KEDA needs minReplicaCount above "
            f"it, and the target's maxReplicas is {hi}, so gpupool leaves its envelope as it "
            "is; lower idleReplicaCount or raise the target's maxReplicas",
        )
        return None
    # an HPA's maxReplicas is at least 1 (autoscaling validation); KEDA's max at least its min
    want = max(want, 1, floor)
    env = _Envelope(a, _envelope_min(a, lo, want))
    if want == n and env.to_min == a.min_replicas:
        return None
    why = why or f"{a.ref} has minReplicas {a.min_replicas}, the target's minimum is {lo}"
    return _ScaleIntent(svc, policy, pol.spec.pool, want, why, env)


def _emit_envelope(run: Run, it: _ScaleIntent, env: _Envelope, keys: set[str]) -> None:
    """A SetScaleEnvelope for `it`: a max that grows, grows only as far as admission let the
    replicas between the workload's replicas and the new max in (so their cards exist)."""
    svc, a, want = it.svc, env.scaler, it.want
    why = it.why
    if want > a.max_replicas:
        ok = 0
        while svc.replicas + ok < want and f"{svc.key}#replica-{svc.replicas + ok + 1}" in keys:
            ok += 1
        allowed = max(a.max_replicas, svc.replicas + ok)
        if allowed < want:
            held = run.waiting.get(f"{svc.key}#replica-{svc.replicas + ok + 1}", "")
            run.find(
                "info",
                "scale-held",
                svc.key,
                f"{a.ref} maxReplicas {want} stops at {allowed}: {held}".rstrip(": "),
            )
            why = f"{why} (admission allows {allowed})"
            want = allowed
    to_min = _envelope_min(a, env.to_min, want)
    if (want, to_min) == (a.max_replicas, a.min_replicas) or to_min > want:
        return  # (to_min > want: admission held a max that an idleReplicaCount forbids)
    run.add(
        SetScaleEnvelope(
            id=f"scale-envelope:{a.key}",
            target=a.key,
            pool=it.pool,
            reason=f"{a.ref} min/max {a.min_replicas}..{a.max_replicas} -> {to_min}..{want} "
            f"for {svc.kind} {svc.key} ({svc.replicas} replicas now): {why}",
            autoscaler_kind=a.kind,
            workload_kind=svc.kind,
            workload=svc.name,
            from_min=a.min_replicas,
            to_min=to_min,
            from_max=a.max_replicas,
            to_max=want,
            policy=it.policy,
            signals=run.scale_signals.get(svc.key, ()),
        )
    )


def _target_signals(run: Run, pol: ScalingPolicy, svc: InferenceService) -> sig.TargetSignals:
    """Where the target's queue length and wait come from (`plan/signals.py`): annotations, or
    Prometheus readings. Each reading that fails is a finding; the readings used are kept for
    the Scale action (`Scale.signals`)."""
    name = pol.metadata.name
    target = _target(pol, svc)
    read = sig.target_signals(run.observed, name, pol, target, svc)
    for signal, query, why in read.problems:
        run.find(
            "warning",
            "signal-unavailable",
            svc.key,
            f"ScalingPolicy/{name} cannot read {signal} ({query}): {why}; "
            "no scale-down while a signal is unread (scale-up may still come from the other)",
        )
    if read.evidence:
        run.scale_signals[svc.key] = read.evidence
    else:
        run.scale_signals.pop(svc.key, None)
    return read


def _target(pol: ScalingPolicy, svc: InferenceService) -> ScaleTarget:
    return next(
        t
        for t in pol.spec.targets
        if (t.kind, t.namespace, t.name) == (svc.kind, svc.namespace, svc.name)
    )
