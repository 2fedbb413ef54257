"""Step 5: reclaim whole cards whose workloads stayed under the MaintenancePolicy's
utilization threshold for `idleFor` (from the agent, or the DCGM exporter in Prometheus)."""

from __future__ import annotations

from reconciler.observe.model import (
    Workload,
)
from reconciler.plan import signals as sig
from reconciler.plan.evictions import default_class, evict, stop_refusal
from reconciler.plan.run import Run
from reconciler.policy.models import (
    MaintenancePolicy,
)
from reconciler.policy.quantity import format_duration


def reclaim_idle(run: Run) -> None:
    policies: dict[str, list[MaintenancePolicy]] = {}  # pool -> its policies, read once
    maybe = _maybe_idle(run)
    for key, w in run.cluster.workloads.items():
        if maybe is not None and key not in maybe:
            continue  # none of its cards is idle by any policy: judged below, it is skipped
        if w.phase != "Running" or w.key in run.evicted or not w.allocations:
            continue
        pool = run.cluster.pool_of(w)
        if pool is None:
            continue
        if pool not in policies:
            policies[pool] = run.desired.maintenance_for(pool)
        for m in policies[pool]:
            rule = m.spec.idle_reclaim
            if rule is None or not rule.enabled:
                continue
            slots = [run.cluster.slot.get((w.node or "", a.gpu)) for a in w.allocations]
            if any(s is None or s.holders != {w.key} or s.mode != "whole" for s in slots):
                continue  # MIG/shared cards: NVML's utilization is not this workload's alone
            limit = rule.idle_for.total_seconds()
            shown = ""
            if rule.utilization.source == "prometheus":
                got = _prometheus_idle(run, m, w, slots)
                if got is None:
                    continue
                idle, shown = got
                if any(i < limit for i in idle):
                    continue
            else:
                # A card's idleness is its time under the policy's threshold (processes or not,
                # from the levels the agent publishes), counted from when this workload started
                # at the earliest: the card may have been idle before the job came.
                since = [s.idle_since_below(rule.utilization_below) for s in slots]
                idle = [
                    run.seconds_since(max(t, w.started_at) if w.started_at else None)
                    if t is not None
                    else None
                    for t in since
                ]
                if any(s.utilization >= rule.utilization_below for s in slots) or any(
                    i is None or i < limit for i in idle
                ):
                    continue
            cls = w.priority_class or default_class(run)
            if cls in rule.exclude_classes:
                continue
            why = (
                f"{w.key} has used < {rule.utilization_below:g}% of its {len(slots)} GPU(s) "
                f"for {format_duration(min(idle))} (limit {format_duration(limit)}){shown}"
            )
            if rule.action == "report":
                run.find("info", "idle-report", w.key, why)
                break
            refused = stop_refusal(run, w)
            if refused:
                run.find("info", "idle-protected", w.key, f"{why}; not reclaimed: {refused}")
            else:
                evict(run, w, "reclaim", why + ": reclaim the cards", pool)
            break


def _maybe_idle(run: Run) -> set[str] | None:
    """The workloads `reclaim_idle` may stop or report, a superset read from the cards: the
    holders of every card below an enabled rule's `utilizationBelow` that is known to have
    stayed there (`idle_since_below`). A workload that passes the agent-source check holds
    only such cards (each held by it alone), and nothing in step 5 adds a holder, so every
    other workload is skipped there without a side effect. None (judge every workload) when
    a rule reads Prometheus: that path reports on workloads whatever their cards say."""
    levels: set[float] = set()
    for pool in run.cluster.pools:
        for m in run.desired.maintenance_for(pool):
            rule = m.spec.idle_reclaim
            if rule is None or not rule.enabled:
                continue
            if rule.utilization.source == "prometheus":
                return None
            levels.add(rule.utilization_below)
    out: set[str] = set()
    if not levels:
        return out
    top = max(levels)
    for s in run.cluster.slot.values():
        if (
            s.utilization < top
            and s.holders
            and any(s.utilization < lv and s.idle_since_below(lv) is not None for lv in levels)
        ):
            out.update(s.holders)
    return out


def _prometheus_idle(
    run: Run, m: MaintenancePolicy, w: Workload, slots: list
) -> tuple[list[float], str] | None:
    """Idle reclaim from the DCGM exporter's utilization in Prometheus: every card of `w` has a
    sample in the policy's reading, each below utilizationBelow over the window (idleFor); the
    idle time is idleFor, or the time since `w` started when that is shorter (unknown start:
    not idle). A failed reading, or a card without a sample, is a finding and nothing is
    reclaimed on it. Returns the idle seconds per card and the evidence for the reason."""
    rule = m.spec.idle_reclaim
    assert rule is not None
    q = sig.utilization_query(m.metadata.name, m)
    assert q is not None
    why = sig.unavailable(run.observed, q)
    if why:
        if q.id not in run.signals_reported:
            run.signals_reported.add(q.id)
            run.find(
                "warning",
                "signal-unavailable",
                f"MaintenancePolicy/{m.metadata.name}",
                f"cannot read GPU utilization ({q.query}): {why}; nothing is reclaimed as idle",
            )
        return None
    r = sig.reading(run.observed, q)
    assert r is not None
    cards = {(n.name, g.index): g for n in run.observed.nodes for g in n.gpus}
    values = []
    for s in slots:
        gpu = cards.get((s.node, s.index))
        u = sig.card_utilization(r, s.node, gpu) if gpu is not None else None
        if u is None:
            run.find(
                "warning",
                "signal-unavailable",
                w.key,
                f"MaintenancePolicy/{m.metadata.name}: no utilization sample for {s.node} "
                f"GPU {s.index} in ({q.query}); not reclaimed as idle",
            )
            return None
        values.append(u)
    if max(values) >= rule.utilization_below or w.started_at is None:
        return None
    span = min(rule.idle_for.total_seconds(), run.seconds_since(w.started_at) or 0.0)
    return [span] * len(slots), f" [utilization: {q.query} = {max(values):g}]"
