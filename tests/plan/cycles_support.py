"""The harness and the checks of the multi-cycle properties (issue 11): `simulate` runs plan ->
`reconciler.sim.effects.step` for CYCLES cycles, and each check of CHECKS reads a trace for one
of the properties (a)-(f) that tests/plan/test_cycles.py states and tests. `faults_of(case)`
runs every check of a case once.

Shared by tests/plan/test_cycles.py (the properties, and the effect model's own tests),
tests/plan/test_admission.py (`simulate`, `overcommits`) and bench/cycles.py (the same checks
on more clusters), so that none of them imports a test module.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

from reconciler.observe.model import ObservedState
from reconciler.plan.actions import EVICTION_KINDS, Move, Preempt, Scale, SetScaleEnvelope
from reconciler.plan.cluster import node_pool_name
from reconciler.plan.model import Plan
from reconciler.plan.planner import plan
from reconciler.plan.render import to_json
from reconciler.policy.quantity import quantity_bytes
from reconciler.policy.state import DesiredState
from reconciler.sim.effects import step
from tests.plan.generators import Case

CYCLES = 10
SETTLED = 6  # K: cycles SETTLED + 1 .. CYCLES plan nothing that acts
ACTING = frozenset(
    {
        "cordon",
        "preempt",
        "reclaim",
        "move",
        "mig-reconfigure",
        "set-sharing",
        "scale",
        "scale-envelope",
    }
)
HOUR = timedelta(hours=1)
SETTLE_PERIOD = HOUR
"""(e) runs with cycles an hour apart: every wait a policy can set (cooldowns, minRuntime up to
1h, idleFor up to 1h, the rolling hour's budget) is over by the next cycle, so a plan that
still acts after SETTLED cycles is not waiting for the clock: the input is stable."""


# ----------------------------------------------------------------------------- the harness
@dataclass
class Trace:
    """states[k] is what cycle k + 1 plans from; plans[k] its plan; states[k + 1] the result.
    `error`: the exception a cycle raised (the trace stops there)."""

    desired: DesiredState
    states: list[ObservedState] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    error: BaseException | None = None


def simulate(
    desired: DesiredState, observed: ObservedState, period: timedelta, cycles: int = CYCLES
) -> Trace:
    """`cycles` times: plan, then let the plan take effect (`reconciler.sim.effects.step`)."""
    trace = Trace(desired, [observed])
    for _ in range(cycles):
        s = trace.states[-1]
        try:
            p = plan(desired, s)
            after = step(desired, s, p, now=s.observed_at, period=period)
        except Exception as exc:  # (a): reported by the crash property, with its traceback
            trace.error = exc
            break
        trace.plans.append(p)
        trace.states.append(after)
    return trace


# ----------------------------------------------------------------------------- (b) over-commit
def overcommits(state: ObservedState) -> list[str]:
    """Cards holding more than they can: every Running pod's allocations against its node."""
    out = []
    nodes = {n.name: n for n in state.nodes}
    on: dict[tuple[str, int], list[tuple[str, object]]] = {}
    for w in state.workloads:
        if w.phase != "Running":
            continue
        if w.node not in nodes:
            out.append(f"{w.key} runs on unknown node {w.node}")
            continue
        for a in w.allocations:
            on.setdefault((w.node, a.gpu), []).append((w.key, a))
    for (n, i), held in sorted(on.items()):
        g = next((g for g in nodes[n].gpus if g.index == i), None)
        if g is None:
            out.append(f"{n}/gpu{i}: held by {[k for k, _ in held]} but the node has no such card")
            continue
        holders = sorted({k for k, _ in held})
        if g.mode == "whole":
            if len(held) > 1 or any(a.mig_start is not None or a.slices for _, a in held):
                out.append(f"{n}/gpu{i} (whole): held by {holders}")
        elif g.mode == "mig":
            instances = {x.start: x.profile for x in g.mig_instances}
            starts = [a.mig_start for _, a in held]
            if len(starts) != len(set(starts)) or any(
                s is None
                or s not in instances
                or (a.mig_profile is not None and a.mig_profile != instances[s])
                for s, (_, a) in zip(starts, held, strict=True)
            ):
                out.append(
                    f"{n}/gpu{i} (MIG {sorted(instances.items())}): instances {starts} "
                    f"held by {holders}"
                )
        else:
            used = sum(a.slices for _, a in held)
            if used > (g.shared_slices or 0) or any(not a.slices for _, a in held):
                out.append(f"{n}/gpu{i} (shared x{g.shared_slices}): {used} held by {holders}")
    return out


def short_slices(desired: DesiredState, state: ObservedState) -> list[str]:
    """Pods gpupool admitted that run on a shared card whose slices have less GPU memory
    (card memory / its slice count) than the pod needs a slice: what it declares for all its
    slices (`gpu_memory_mib`) / its slices, at most its pool's memoryPerSlice (beyond, it is
    warned about, not held), else memoryPerSlice. Time-slicing isolates no memory."""
    out = []
    nodes = {n.name: n for n in state.nodes}
    for w in state.workloads:
        r = w.request
        if w.phase != "Running" or w.admission != "admitted" or not r.shared_slices:
            continue
        n = nodes.get(w.node or "")
        pool = desired.pools.get(node_pool_name(desired, n) or "") if n else None
        if pool is None or pool.spec.inference.shared is None:
            continue
        card = desired.catalog.model(pool.spec.gpu_model).memory_gib * 1024
        share = r.shared_slices * quantity_bytes(pool.spec.inference.shared.memory_per_slice)
        need = min(r.gpu_memory_mib, share // 2**20) if r.gpu_memory_mib else share // 2**20
        for a in w.allocations:
            g = next((g for g in n.gpus if g.index == a.gpu), None)
            if (
                g is not None
                and g.shared_slices
                and need * g.shared_slices > card * r.shared_slices
            ):
                out.append(
                    f"{w.key} needs {need} MiB for {r.shared_slices} slice(s) on {n.name}/gpu"
                    f"{g.index} shared x{g.shared_slices} ({card} MiB)"
                )
    return out


def unsafe_repartitions(state: ObservedState, p: Plan) -> list[str]:
    """Repartitioned cards whose running holder the same plan does not evict."""
    evicted = {a.target for a in p.actions if a.kind in EVICTION_KINDS}
    out = []
    for a in p.actions:
        if a.kind not in ("mig-reconfigure", "set-sharing"):
            continue
        for w in state.workloads:
            if w.phase != "Running" or w.node != a.target or w.key in evicted:
                continue
            hit = sorted({x.gpu for x in w.allocations} & a.changed_gpus)
            if hit:
                out.append(f"{a.id} changes gpu{hit} under running {w.key}, not evicted")
    return out


# ----------------------------------------------------------------------------- (c) undone
def _cards(a) -> set[tuple[int, str]]:
    return {(c.gpu, c.after) for c in a.cards}


def undone(trace: Trace) -> list[str]:
    out = []
    plans = trace.plans
    last_change: dict[str, set[tuple[int, str]]] = {}
    for k, p in enumerate(plans):
        reparts = {a.target: a for a in p.actions if a.kind in ("mig-reconfigure", "set-sharing")}
        # a card repartitioned X -> Y is not made X again in the next two cycles
        for node_name, a in reparts.items():
            for c in a.cards:
                for j in (k + 1, k + 2):
                    if j >= len(plans):
                        continue
                    for b in plans[j].actions:
                        if b.kind in ("mig-reconfigure", "set-sharing") and b.target == node_name:
                            for d in b.cards:
                                if d.gpu == c.gpu and d.after == c.before:
                                    out.append(
                                        f"cycle {k + 1}: {node_name}/gpu{c.gpu} {c.before} -> "
                                        f"{c.after}; cycle {j + 1}: back to {d.after}"
                                    )
        # a node uncordoned is not cordoned again for the same change in the next cycle
        for node_name, a in reparts.items():
            last_change[node_name] = _cards(a)
        if k + 1 < len(plans):
            nxt = plans[k + 1]
            nxt_reparts = {
                a.target: a for a in nxt.actions if a.kind in ("mig-reconfigure", "set-sharing")
            }
            for a in p.actions:
                if a.kind != "uncordon":
                    continue
                again = any(b.kind == "cordon" and b.target == a.target for b in nxt.actions)
                b = nxt_reparts.get(a.target)
                if again and b is not None and _cards(b) & last_change.get(a.target, set()):
                    out.append(
                        f"cycle {k + 1}: uncordon {a.target} after "
                        f"{sorted(last_change[a.target])}; cycle {k + 2}: cordoned again for "
                        f"{sorted(_cards(b) & last_change[a.target])}"
                    )
    # a moved workload is not moved back
    moves: dict[str, list[tuple[int, Move]]] = {}
    for k, p in enumerate(plans):
        for a in p.actions:
            if isinstance(a, Move):
                for j, m in moves.get(a.target, []):
                    if a.to_node == m.node:
                        out.append(
                            f"cycle {j + 1}: move {a.target} {m.node} -> {m.to_node}; "
                            f"cycle {k + 1}: moved back to {a.to_node}"
                        )
                moves.setdefault(a.target, []).append((k, a))
    # a scale-up is not followed by a scale-down within the scale-down cooldown (nor an
    # autoscaler's max grown, then shrunk)
    ups: dict[str, datetime] = {}
    for k, p in enumerate(plans):
        now = trace.states[k].observed_at
        for a in p.actions:
            if isinstance(a, Scale):
                up, down, what = a.up, a.to_replicas < a.from_replicas, a.from_replicas
                to = a.to_replicas
            elif isinstance(a, SetScaleEnvelope):
                up, down, what, to = (
                    a.to_max > a.from_max,
                    a.to_max < a.from_max,
                    a.from_max,
                    a.to_max,
                )
            else:
                continue
            if up:
                ups[a.target] = now
                continue
            pol = trace.desired.scaling.get(a.policy)
            if not down or pol is None or a.target not in ups:
                continue
            cooldown = pol.spec.scale_down.cooldown
            if now - ups[a.target] < cooldown:
                out.append(
                    f"cycle {k + 1}: scale {a.target} down {what} -> {to} "
                    f"{now - ups[a.target]} after a scale-up (cooldown {cooldown})"
                )
    return out


# ----------------------------------------------------------------------------- (d) evictions
def _value(desired: DesiredState, name: str | None) -> int:
    c = desired.priority_class(name)
    return c.value if c else 0


def budget(desired: DesiredState) -> int:
    return desired.priority.spec.preemption.budget_per_hour if desired.priority else 0


def in_hour(times: list[datetime], now: datetime) -> int:
    return sum(1 for t in times if now - HOUR < t <= now)


def priority_faults(desired: DesiredState, before: ObservedState, p: Plan) -> list[str]:
    """Preemptions whose victim does not have a lower priority than the pending demand it
    names (a pending pod, or a replica the same plan scales up; a pod without a class has
    priority 0, as kube-scheduler gives it), or than any pending demand when it names none.
    A preemption that names none enforces a team's cap and must say so."""
    pending_at = {
        w.key: _value(desired, w.priority_class) if w.priority_class else 0
        for w in before.workloads
        if w.phase == "Pending"
    }
    pending = list(pending_at.values())
    services = {s.key: s for s in before.services}
    pending += [
        _value(desired, services[a.target].priority_class)
        for a in p.actions
        if isinstance(a, Scale) and a.up and a.target in services
    ]
    pending += [  # the replicas an autoscaler's grown max makes room for
        _value(desired, services[key].priority_class)
        for a in p.actions
        if isinstance(a, SetScaleEnvelope)
        and a.to_max > a.from_max
        and (key := f"{a.target.split('/')[0]}/{a.workload}") in services
    ]
    work = {w.key: w for w in before.workloads}
    out = []
    for a in p.actions:
        w = work.get(a.target)
        if not isinstance(a, Preempt) or w is None:
            continue
        value = _value(desired, w.priority_class)
        if a.preemptor is None:
            if "over its cap" not in a.reason:
                out.append(f"{a.id}: names no preemptor and enforces no cap ({a.reason})")
            continue
        if a.preemptor in pending_at and pending_at[a.preemptor] <= value:
            out.append(
                f"{a.id}: victim priority {value} ({w.priority_class}) is not lower than "
                f"its preemptor {a.preemptor}'s {pending_at[a.preemptor]} ({a.reason})"
            )
        elif not any(v > value for v in pending):
            out.append(
                f"{a.id}: victim priority {value} ({w.priority_class}); nothing pending is "
                f"higher (pending: {sorted(set(pending), reverse=True)}; reason: {a.reason})"
            )
    return out


def eviction_faults(
    desired: DesiredState, before: ObservedState, p: Plan, after: ObservedState
) -> list[str]:
    """Evictions of a class that may not be preempted, before minRuntime (unless spot), or
    beyond the hour's budget. A recovery's stops (`lost`: the gang lost a member) keep no
    such rule, but count in the hour once done."""
    out = []
    now = before.observed_at
    work = {w.key: w for w in before.workloads}
    pre = desired.priority.spec.preemption if desired.priority else None
    every = [a for a in p.actions if a.kind in EVICTION_KINDS]
    evictions = [a for a in every if not a.lost]
    for a in evictions:
        w = work.get(a.target)
        if w is None or w.phase != "Running":
            out.append(f"{a.id}: no running workload {a.target}")
            continue
        cls = desired.priority_class(w.priority_class)
        if cls is None or not cls.preemptible:
            out.append(f"{a.id}: class {w.priority_class} is not preemptible")
            continue
        if not cls.spot:
            ran = None if w.started_at is None else now - w.started_at
            if pre is None or ran is None or ran < pre.min_runtime:
                out.append(f"{a.id}: ran {ran}, minRuntime {pre and pre.min_runtime}")
    if evictions:
        n = in_hour(after.recent_preemptions, now) - (len(every) - len(evictions))
        if n > budget(desired):
            out.append(
                f"{len(evictions)} evictions ({', '.join(a.id for a in evictions)}) make "
                f"{n} in the last hour, budgetPerHour {budget(desired)}"
            )
    return out


# ----------------------------------------------------------------------------- (e) settling
def unsettled(trace: Trace) -> list[str]:
    """Actions that still act after SETTLED cycles. A scale of a service that only ever moved
    one way in this run is progress, not churn (the effect model keeps demand signals as they
    were, so a hot service climbs to maxReplicas one step per cooldown); any other one is."""
    out = []
    ways: dict[str, set[bool]] = {}
    for k, p in enumerate(trace.plans):
        late = []
        for a in p.actions:
            if isinstance(a, Scale | SetScaleEnvelope):
                up = (
                    a.up
                    if isinstance(a, Scale)
                    else (a.to_max, a.to_min) > (a.from_max, a.from_min)
                )
                ways.setdefault(a.target, set()).add(up)
                if len(ways[a.target]) == 1:
                    continue
            if a.kind in ACTING:
                late.append(a.id)
        if k >= SETTLED and late:
            out.append(f"cycle {k + 1}: {late}")
    return out


# ----------------------------------------------------------------------------- (f) order
def _shuffled(value, rnd: random.Random):
    if isinstance(value, list):
        items = [_shuffled(v, rnd) for v in value]
        rnd.shuffle(items)
        return items
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: _shuffled(value[k], rnd) for k in keys}
    return value


def permuted(state: ObservedState, rnd: random.Random) -> ObservedState:
    """The same snapshot with every list (nodes, gpus, MIG instances, taints, workloads,
    allocations, services, quotas, priority classes, recent preemptions) and every mapping
    (labels, annotations, requests, quota limits) in a random order."""
    data = _shuffled(state.model_dump(mode="python"), rnd)
    return ObservedState.model_validate(data)


def order_faults(desired: DesiredState, state: ObservedState, rnd: random.Random) -> list[str]:
    first = to_json(plan(desired, state))
    again = to_json(plan(desired, permuted(state, rnd)))
    if again == first:
        return []
    a, b = first.splitlines(), again.splitlines()
    at = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return [f"plans differ at line {at + 1}: {a[at : at + 1]} vs {b[at : at + 1]}"]


# ----------------------------------------------------------------------------- all checks
def crash_and_overcommit(t: Trace, case: Case) -> list[str]:
    out = [f"after cycle {k}: {m}" for k, s in enumerate(t.states) for m in overcommits(s)]
    out += [
        f"after cycle {k}: {m}" for k, s in enumerate(t.states) for m in short_slices(t.desired, s)
    ]
    out += [
        f"cycle {k + 1}: {m}"
        for k, p in enumerate(t.plans)
        for m in unsafe_repartitions(t.states[k], p)
    ]
    if t.error is not None:
        out.append(f"cycle {len(t.plans) + 1} raised {type(t.error).__name__}: {t.error}")
    return out


def eviction_rules(t: Trace, case: Case) -> list[str]:
    return [
        f"cycle {k + 1}: {m}"
        for k, p in enumerate(t.plans)
        for m in eviction_faults(t.desired, t.states[k], p, t.states[k + 1])
    ]


def preempt_priority(t: Trace, case: Case) -> list[str]:
    return [
        f"cycle {k + 1}: {m}"
        for k, p in enumerate(t.plans)
        for m in priority_faults(t.desired, t.states[k], p)
    ]


def settling(t: Trace, case: Case) -> list[str]:
    """(e) on a run whose every wait is over by the next cycle (period SETTLE_PERIOD)."""
    return unsettled(simulate(t.desired, case.observed, SETTLE_PERIOD))


def list_order(t: Trace, case: Case) -> list[str]:
    rnd = random.Random(case.seed)
    out = []
    for k in (0, 1, 3):
        if k < len(t.plans):  # a state the planner did not crash on
            out += [f"cycle {k + 1}: {m}" for m in order_faults(t.desired, t.states[k], rnd)]
    return out


CHECKS: dict[str, Callable[[Trace, Case], list[str]]] = {
    "crash/over-commit": crash_and_overcommit,
    "undone": lambda t, case: undone(t),
    "evictions": eviction_rules,
    "preempt-priority": preempt_priority,
    "unsettled": settling,
    "order": list_order,
}


@lru_cache(maxsize=4096)
def _faults(documents: str, snapshot_json: str, period: timedelta, seed: int):
    case = Case(documents, ObservedState.model_validate_json(snapshot_json), period, seed)
    t = simulate(case.desired, case.observed, case.period)
    return {name: check(t, case) for name, check in CHECKS.items()}, t.error


def faults_of(case: Case) -> tuple[dict[str, list[str]], BaseException | None]:
    """Every check's findings for a case (simulated once: the properties share examples),
    and the exception a cycle raised, if any."""
    return _faults(case.documents, case.observed.model_dump_json(), case.period, case.seed)
