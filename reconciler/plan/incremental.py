"""Plan from what changed: the dirty set of a cycle, the pools it couples, and a memo.

`plan_incremental(desired, observed, now, previous)` is `plan_with_facts` with a memo carried
from one cycle to the next as an explicit value (`PlanMemo`, returned, never kept here: the
planner stays pure). It returns the previous plan unchanged when nothing it was made from has
changed, and plans again otherwise; it says which (`Incremental.mode`) and why.

Why no cycle reuses part of a plan: a pool's plan depends on more than its own objects.

- Pools are coupled (`coupled_pools`): a team's cap (`maxGPUs`) and usage count every pool it
  runs in; the PriorityPolicy's hourly preemption budget is one for all pools; Kueue mode
  renders one cohort for all; the desired objects (ResourceQuotas, PriorityClasses, pool
  labels, Kueue's objects) and the findings about them are the cluster's, not a pool's.
- Time couples everything: `now` decides idle reclaim, cooldowns, the budget's window and,
  continuously, how much work a preemption loses (the victims' order), so a plan made a
  second ago is not the plan of now even where no object changed.

So the plan is reused only whole, with its whole input: the same desired state, the same
snapshot (object by object, `dirty`), the same `now`. Anything else plans afresh, and
every `full_every`-th cycle (and on any doubt the shell names: a relist, an apply error, a
change of leadership) plans afresh whatever the dirty set says. `dirty` and `coupled_pools`
say which pools a change reaches (for the shell's metrics and logs, and as the seam a
finer reuse would start from: docs/planner.md, "Incremental planning").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from reconciler.observe.model import Node, ObservedState
from reconciler.plan.cluster import node_pool_name
from reconciler.plan.kept import ViewMemo, shared_ends
from reconciler.plan.model import Plan
from reconciler.plan.planner import PlanFacts, plan_with_view
from reconciler.policy.state import DesiredState

FULL_PLAN_EVERY = 10
"""Every this many cycles a plan is made afresh whatever the memo says (1: always)."""

POOLED_FIELDS = ("nodes", "workloads", "services")
"""The parts of a snapshot whose objects belong to pools; a change anywhere else (quotas,
priority classes, suspended Jobs, gated namespaces, preemption times, unreadable objects,
Prometheus readings, Kueue's objects, the snapshot's time: any field, present or future)
reaches every pool."""


@dataclass(frozen=True)
class Dirty:
    """What changed between two cycles' inputs."""

    pools: frozenset[str] = frozenset()
    """Pools one of whose nodes, workloads or services changed (added, removed, edited)."""
    reasons: tuple[str, ...] = ()
    """Changes that reach every pool: a global part of the snapshot, a node or workload in no
    pool, a node that moved between pools."""
    time: bool = False
    """`now` moved."""

    @property
    def clean(self) -> bool:
        return not self.pools and not self.reasons and not self.time


def _changed(before: list, after: list, key: Callable) -> dict | None:
    """Key -> the object (after's, else before's) of the objects added, removed or changed;
    an object that is the same object (the adapter hands back what did not change) is not
    compared field by field. None when either side lists a key twice (a snapshot built
    without validation): by key, a change there cannot be told. The objects both lists
    hold at the same place from either end are the same object, so unchanged, and their
    keys are the same: only what lies between is keyed and compared (one object added to a
    snapshot of thousands costs a pass of `is` and one key per object of `before`)."""
    i, j = shared_ends(before, after)
    old_mid = before[i : len(before) - j]
    new_mid = after[i : len(after) - j]
    everything = set(map(key, before))
    if len(everything) != len(before):
        return None
    old = {key(x): x for x in old_mid}
    new = {key(x): x for x in new_mid}
    # after lists a key twice: twice among its own, or once there and once among what it
    # shares with before (before's keys but those it holds only between the shared ends)
    if len(new) != len(new_mid) or any(k in everything and k not in old for k in new):
        return None
    out = {k: x for k, x in old.items() if k not in new}
    for k, x in new.items():
        if k not in old or (old[k] is not x and old[k] != x):
            out[k] = x
    return out


def dirty(
    desired: DesiredState,
    before: ObservedState,
    after: ObservedState,
    before_now: datetime | None = None,
    after_now: datetime | None = None,
) -> Dirty:
    """The pools whose inputs differ between `before` and `after` (each as of its `now`)."""
    pools: set[str] = set()
    reasons: list[str] = []
    pool_of_node = _node_pools(desired, before, after, reasons)
    changed = _changed(before.nodes, after.nodes, lambda n: n.name)
    if changed is None:
        reasons.append("a node is listed twice")
    for name in sorted(changed or ()):
        p = pool_of_node(name)
        if p is None:
            reasons.append(f"node {name} (in no pool) changed")
        else:
            pools.add(p)
    changed = _changed(before.workloads, after.workloads, lambda w: w.key)
    if changed is None:
        reasons.append("a workload is listed twice")
    for key in sorted(changed or ()):
        w = changed[key]
        p = pool_of_node(w.node) if w.node else w.pool
        if p is None:
            reasons.append(f"workload {key} (in no pool) changed")
        else:
            pools.add(p)
    changed = _changed(before.services, after.services, lambda s: (s.kind, s.key))
    if changed is None:
        reasons.append("a service is listed twice")
    for key in sorted(changed or ()):
        p = changed[key].pool
        if p is None:
            reasons.append(f"service {key[1]} (in no pool) changed")
        else:
            pools.add(p)
    for name in type(after).model_fields:
        if name not in POOLED_FIELDS and getattr(before, name) != getattr(after, name):
            reasons.append(f"{name.replace('_', ' ')} changed")
    moved = (before_now or before.observed_at) != (after_now or after.observed_at)
    return Dirty(frozenset(pools), tuple(dict.fromkeys(reasons)), moved)


def _node_pools(
    desired: DesiredState, before: ObservedState, after: ObservedState, reasons: list[str]
) -> Callable[[str], str | None]:
    """Node name -> its pool (as `before` lists the node, else as `after` does), asked
    when needed; a node whose pool differs from one listing to the next is a reason, in the
    order the listings come. Each snapshot listing each name once, only a node of `after`
    that is not the very object `before` lists is asked its pool twice."""
    first: dict[str, Node] = {}
    later: dict[str, Node] = {}
    for n in before.nodes:
        first.setdefault(n.name, n)
    for n in after.nodes:
        later.setdefault(n.name, n)
    known: dict[str, str | None] = {}
    if len(first) != len(before.nodes) or len(later) != len(after.nodes):
        for n in [*before.nodes, *after.nodes]:  # a name listed twice: every listing asked
            p = node_pool_name(desired, n)
            if n.name in known and known[n.name] != p:
                reasons.append(f"node {n.name} moved from pool {known[n.name]} to {p}")
            known.setdefault(n.name, p)
    else:
        for n in after.nodes:
            was = first.get(n.name)
            if was is None or was is n:
                continue
            p, q = node_pool_name(desired, was), node_pool_name(desired, n)
            known[n.name] = p
            if p != q:
                reasons.append(f"node {n.name} moved from pool {p} to {q}")

    def pool_of(name: str) -> str | None:
        if name not in known:
            n = first.get(name)
            n = later.get(name) if n is None else n
            known[name] = node_pool_name(desired, n) if n is not None else None
        return known[name]

    return pool_of


def coupled_pools(desired: DesiredState, observed: ObservedState) -> list[frozenset[str]]:
    """The pools in groups whose plans depend on each other (sorted, each group sorted by its
    first pool): a team's quota or workloads in several pools join them; an hourly preemption
    budget, or Kueue admission, joins all."""
    names = sorted(desired.pools)
    parent = {p: p for p in names}

    def find(p: str) -> str:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    def join(group: Iterable[str]) -> None:
        roots = sorted({find(p) for p in group if p in parent})
        for r in roots[1:]:
            parent[r] = roots[0]

    if desired.priority is not None and (
        desired.priority.spec.preemption.budget_per_hour is not None
        or desired.admission_controller == "kueue"
    ):
        join(names)
        return [frozenset(names)] if names else []  # one group: nothing can split it
    team_pools: dict[str, set[str]] = {}
    for q in desired.quotas.values():
        team_pools.setdefault(q.team, set()).update(e.pool for e in q.spec.pools)
    node_pool = {n.name: node_pool_name(desired, n) for n in observed.nodes}
    ns_pools: dict[str, set[str]] = {}
    for w in observed.workloads:
        p = node_pool.get(w.node) if w.node else w.pool
        if p is not None:
            ns_pools.setdefault(w.namespace, set()).add(p)
    for ns, used in ns_pools.items():
        q = desired.quota_for_namespace(ns)
        if q is not None:
            team_pools.setdefault(q.team, set()).update(used)
    for group in team_pools.values():
        join(group)
    groups: dict[str, set[str]] = {}
    for p in names:
        groups.setdefault(find(p), set()).add(p)
    return sorted((frozenset(g) for g in groups.values()), key=min)


def reached(d: Dirty, groups: list[frozenset[str]], every: Iterable[str]) -> frozenset[str]:
    """The pools a change reaches: the groups of its dirty pools; all when it is global or
    time moved."""
    if d.reasons or d.time:
        return frozenset(every)
    return frozenset(p for g in groups if g & d.pools for p in g)


@dataclass(frozen=True)
class PlanMemo:
    """What one cycle leaves for the next: its inputs and its plan. A value: never changed."""

    desired: DesiredState
    now: datetime
    observed: ObservedState
    plan: Plan
    facts: PlanFacts
    since_full: int = 0
    """Cycles since the last plan made afresh (0: this one)."""
    view: ViewMemo | None = None
    """The per-object answers of the working view of the last plan made afresh, for `desired`
    (`reconciler.plan.kept`): the next plan made afresh of this desired state builds its view
    from them, redoing the work only for objects that are not the ones they were asked of."""


@dataclass(frozen=True)
class Incremental:
    plan: Plan
    facts: PlanFacts
    memo: PlanMemo
    mode: Literal["full", "reused"]
    """`full`: planned afresh; `reused`: the previous plan, whose inputs are these."""
    why: str
    """Why a plan was made afresh (or `nothing changed`)."""
    reached: frozenset[str] = frozenset()
    """The pools the cycle's changes reach (`reached`); every pool on a full plan."""


def plan_incremental(
    desired: DesiredState,
    observed: ObservedState,
    now: datetime | None,
    previous: PlanMemo | None,
    *,
    full_every: int = FULL_PLAN_EVERY,
    doubt: str = "",
) -> Incremental:
    """The plan of (desired, observed, now), byte-identical to `plan_with_facts`'s, and the
    memo for the next cycle. `doubt`: a reason the shell has to plan afresh ('' none)."""
    at = now or observed.observed_at
    same = previous is not None and (previous.desired is desired or previous.desired == desired)
    why = _full_reason(desired, previous, same, full_every, doubt, at)
    touched = frozenset(desired.pools)
    if previous is not None and not why:
        d = dirty(desired, previous.observed, observed, previous.now, at)
        if d.clean:
            memo = replace(previous, now=at, observed=observed, since_full=previous.since_full + 1)
            return Incremental(previous.plan, previous.facts, memo, "reused", "nothing changed")
        groups = coupled_pools(desired, observed)
        why = _describe(d, groups)
        touched = reached(d, groups, desired.pools)
    # a plan of the same (or an equal) desired state builds its view from the last one's,
    # whatever else made it plan afresh (a doubt, the cycle count, time, a change): a kept
    # answer is only ever read for the very object it was asked of
    kept = previous.view if same and previous is not None else None
    p, facts, view = plan_with_view(desired, observed, at, kept)
    memo = PlanMemo(desired, at, observed, p, facts, 0, view)
    return Incremental(p, facts, memo, "full", why, touched)


def _full_reason(
    desired: DesiredState,
    previous: PlanMemo | None,
    same: bool,
    full_every: int,
    doubt: str,
    at: datetime,
) -> str:
    """Why the memo cannot serve, before any object is compared ('' when it may). `same`:
    `previous` was made for `desired` or an equal desired state."""
    if previous is None:
        return "no previous plan"
    if doubt:
        return doubt
    if not same:
        was, new = previous.desired.revision, desired.revision
        return "desired state changed" + (f" (revision {was} -> {new})" if was != new else "")
    if full_every <= 1 or previous.since_full + 1 >= full_every:
        return "every cycle" if full_every <= 1 else f"every {full_every} cycles"
    if previous.now != at:  # every pool: see the module's docstring (no object is compared)
        return "time moved"
    return ""


def _describe(d: Dirty, groups: list[frozenset[str]]) -> str:
    if d.time:
        return "time moved"
    if d.reasons:
        return d.reasons[0]
    touched = sorted(p for g in groups if g & d.pools for p in g)
    return (
        "changed: pools "
        + ", ".join(sorted(d.pools))
        + (f" (coupled: {', '.join(touched)})" if len(touched) > len(d.pools) else "")
    )
