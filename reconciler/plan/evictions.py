"""Who may be stopped, at what cost, and the one place that stops work in the working view.

Every preemption, reclaim and move passes `stop_refusal` (why `w` and its gang may not be
stopped now: class, min runtime, priority, the hourly budget; '' when they may) and goes
through `evict`, the only code that releases a workload's cards and usage from the ledger.
`victims_for` is the narrow API the stages ask: the cheapest victims for `need` cards that the
priority rules (or a team reclaiming its guarantee, as its Quota's `reclaimWithinCohort` lets
it) let a preemptor displace; their cost order is victims.py's."""

from __future__ import annotations

import math
from fractions import Fraction

from reconciler.observe.model import (
    Workload,
)
from reconciler.plan.actions import (
    Checkpoint,
    Eviction,
    Move,
    Preempt,
    Reclaim,
)
from reconciler.plan.cluster import (
    PoolView,
    card_equivalents,
)
from reconciler.plan.run import (
    BUDGET,
    INF_PRIORITY,
    Demand,
    Run,
    kueue_mode,
    suspended_job,
)
from reconciler.plan.victims import Candidate, order_victims
from reconciler.policy.quantity import format_duration


def victim_classes(run: Run, preemptor: str | None, extra: tuple[str, ...] = ()) -> set[str]:
    """The classes the priority rules let `preemptor`'s class (default: defaultClass)
    displace, and `extra` (ScalingPolicy.borrowFrom)."""
    out = set(extra)
    for r in run.terms.rules:
        if r.preemptor == (preemptor or run.terms.default_class):
            out.update(r.victims)
    return out


def min_runtime(run: Run) -> float:
    return run.terms.min_runtime


def stop_refusal(
    run: Run, w: Workload, preemptor_priority: int | None = None, *, budget: bool = True
) -> str:
    """The one eviction check every preemption, reclaim and move passes: '' when `w` (and
    its gang) may be stopped now, otherwise why not. Unknown class or start: never."""
    members = run.gang(w)
    for m in members:
        if m.key in run.evicted:
            return f"{m.key} is already stopped by this plan"
        cls = run.pclass(m.priority_class)
        if cls is None:
            return f"{m.key}'s class {m.priority_class or '(none)'} is unknown"
        if not cls.preemptible:
            return f"{m.key}'s class {cls.name} is not preemptible"
        running = run.seconds_since(m.started_at)
        if running is None:
            return f"{m.key}'s start time is unknown"
        if not cls.spot and running < min_runtime(run):
            return (
                f"{m.key} has run {format_duration(max(running, 0))} of minRuntime "
                f"{format_duration(min_runtime(run))}"
            )
        if preemptor_priority is not None and cls.value >= preemptor_priority:
            return f"{m.key}'s priority {cls.value} is not lower"
    if budget and run.budget_left < len(members):
        return f"the {BUDGET} is spent"
    return ""


def refused(run: Run, w: Workload, preemptor_priority: int | None = None) -> bool:
    """`stop_refusal(run, w, preemptor_priority, budget=False)` is not '': the same answer
    without the words. What does not change during a run (classes, start times, `now`) is
    judged once per workload and priority; only whether a member is already stopped is
    looked at each time."""
    members = run.gang(w)
    if any(m.key in run.evicted for m in members):
        return True
    key = (id(w), preemptor_priority)
    known = run.memo.get(("refused", key))
    if known is None or known[0] is not w:
        no = bool(stop_refusal(run, w, preemptor_priority, budget=False))
        known = run.memo[("refused", key)] = (w, no)
    return known[1]


def as_candidate(run: Run, w: Workload, pool: str | None) -> Candidate:
    known = run.memo.get(("candidate", id(w)))
    if known is None or known[0] is not w:
        cls = run.pclass(w.priority_class)
        lost = 0.0
        gpus = 0.0
        for m in run.gang(w):
            n = float(len(m.allocations) or m.request.gpus or 1)
            gpus += n
            lost += n * (run.unsaved_seconds(m) or 0.0)
        known = run.memo[("candidate", id(w))] = (w, cls.value if cls else 0, gpus, lost)
    _, priority, gpus, lost = known
    return Candidate(
        key=w.key,
        priority=priority,
        preemptible=True,  # the gate decided
        over_quota=borrowing(run, w, pool),
        running_seconds=math.inf,
        seconds_since_checkpoint=lost / max(gpus, 1.0),
        gpus=gpus,
        lost_gpu_seconds=lost,
    )


def borrowing(run: Run, w: Workload, pool: str | None) -> bool:
    """`w`'s team holds more whole cards in `pool` than its guarantee (or has none there)."""
    q = run.desired.quota_for_namespace(w.namespace)
    if q is None or pool is None:
        return True
    pq = next((p for p in q.spec.pools if p.pool == pool), None)
    return pq is None or run.running_whole.get((q.team, pool), 0) > pq.whole.guaranteed


def reclaim_within_cohort(run: Run, namespace: str) -> str | None:
    """How the team of `namespace` takes its guarantee back (Quota `reclaimWithinCohort`):
    as set, else `Any` where gpupool gates every namespace of the team in gpupool mode (the
    borrower's stopped pods come back gated and wait for the plan, so they cannot take the
    cards straight back), else `LowerPriority`. None: the namespace has no Quota."""
    q = run.desired.quota_for_namespace(namespace)
    if q is None:
        return None
    if q.spec.reclaim_within_cohort is not None:
        return q.spec.reclaim_within_cohort
    gated = run.observed.gated_namespaces
    if gated is not None and not kueue_mode(run) and set(q.spec.namespaces) <= set(gated):
        return "Any"
    return "LowerPriority"


def reclaims(run: Run, p: Demand, pool: str) -> str | None:
    """The team `p` belongs to, when `p` only takes back its own guarantee in `pool` and its
    Quota lets it preempt for that (`reclaimWithinCohort` not `Never`): then work other teams
    run on borrowed cards may be preempted for it, whatever the class rules say (the Quota
    promise; Kueue's reclaimWithinCohort). Which priorities: `reclaim_victim`."""
    q = run.desired.quota_for_namespace(p.namespace)
    if q is None or not p.request.gpus:
        return None
    if reclaim_within_cohort(run, p.namespace) == "Never":
        return None
    pq = next((x for x in q.spec.pools if x.pool == pool), None)
    if pq is None:
        return None
    need = len(p.members) * p.request.gpus  # every pod of the gang
    if run.running_whole.get((q.team, pool), 0) + need > pq.whole.guaranteed:
        return None
    return q.team


def reclaim_victim(run: Run, w: Workload, p: Demand, pool: str, team: str) -> bool:
    """`w` may be preempted for `p`, which reclaims `team`'s guarantee in `pool`: `w` is
    another team's and that team holds more whole cards there than its guarantee. Lower
    priority than `p`: the gate as for any preemption (`LowerPriority`). Equal or higher
    (`Any` only): the gate without its priority check (never a non-preemptible class, nor
    before minRuntime), and only where it cannot come straight back: its stopped pods are
    held for the plan (`held_back`), its class may not preempt `p`'s by the rules, and its
    team keeps at least its guarantee (`borrowed`)."""
    if run.team(w.namespace) in (None, team) or not borrowing(run, w, pool):
        return False
    if not refused(run, w, run.demand_priority(p)):
        return True
    return (
        reclaim_within_cohort(run, p.namespace) == "Any"
        and not refused(run, w)
        and held_back(run, w)
        and (p.priority_class or default_class(run)) not in victim_classes(run, w.priority_class)
        and borrowed(run, w, pool) >= whole_cards(run, w)
    )


def held_back(run: Run, w: Workload) -> bool:
    """Once stopped, `w`'s gang waits for the plan: each pod's Job is suspended (no pod is
    created until the plan resumes it) or its namespace is gated (the recreated pod waits
    for an Admit). In kueue mode only the gate holds it back: gpupool suspends no Job there
    (Kueue would resume one whose Workload it admitted), so a stopped gang is evicted."""
    gated = set(run.observed.gated_namespaces or ())
    if kueue_mode(run):
        return all(m.namespace in gated for m in run.gang(w))
    return all(suspended_job(m) or m.namespace in gated for m in run.gang(w))


def whole_cards(run: Run, w: Workload) -> int:
    """Whole cards `w`'s gang holds (what stopping it takes from its team's usage)."""
    return sum(m.request.gpus for m in run.gang(w))


def borrowed(run: Run, w: Workload, pool: str) -> int:
    """Whole cards `w`'s team holds in `pool` beyond its guarantee there (none: all it holds;
    0 without a Quota: no team to account)."""
    q = run.desired.quota_for_namespace(w.namespace)
    if q is None:
        return 0
    pq = next((x for x in q.spec.pools if x.pool == pool), None)
    guaranteed = pq.whole.guaranteed if pq else 0
    return max(0, run.running_whole.get((q.team, pool), 0) - guaranteed)


def overdrawn(run: Run, p: Demand, pool: str, victims: list[Candidate]) -> str:
    """Why stopping all of `victims` for `p` would take a team below its guarantee in `pool`
    through work `p` does not outrank ('' when it would not): `reclaim_victim` judges each
    victim alone, a gang of several pods may choose victims of one team on several nodes."""
    prio = run.demand_priority(p)
    taken: dict[str, int] = {}
    relaxed: dict[str, Workload] = {}
    for c in victims:
        w = run.cluster.workloads[c.key]
        team = run.team(w.namespace)
        if team is None:
            continue
        taken[team] = taken.get(team, 0) + whole_cards(run, w)
        if c.priority >= prio:
            relaxed.setdefault(team, w)
    for team, w in sorted(relaxed.items()):
        if taken[team] > borrowed(run, w, pool):
            return (
                f"reclaiming it would stop {taken[team]} whole cards of team {team}, which "
                f"borrows {borrowed(run, w, pool)} in {pool}"
            )
    return ""


def victims_for(
    run: Run,
    workloads: list[Workload],
    preemptor: Demand | None,
    pool: str,
    classes: set[str],
    need: int,
) -> list[Candidate]:
    """Victims for `need` cards among `workloads`, cheapest first, each gang once: those
    the priority rules let `preemptor` displace (class in `classes`, lower priority), and
    work of teams borrowing beyond their guarantee when `preemptor` reclaims its own
    (`reclaim_victim`; of equal or higher priority, at most what each team borrows)."""
    team = reclaims(run, preemptor, pool) if preemptor else None
    cands = victim_candidates(run, workloads, preemptor, pool, classes, team)
    return ordered_victims(run, cands, preemptor, pool, need, team)


def victim_candidates(
    run: Run,
    workloads: list[Workload],
    preemptor: Demand | None,
    pool: str,
    classes: set[str],
    team: str | None,
) -> list[Candidate]:
    """The workloads of `victims_for` that may be stopped for `preemptor`, unordered, each
    gang once (its first member among `workloads`); `team`: the team whose guarantee
    `preemptor` takes back (`reclaims`), None for none."""
    prio = run.demand_priority(preemptor) if preemptor else INF_PRIORITY
    default = default_class(run)
    seen: set[str] = set()
    cands = []
    for w in workloads:
        head = run.gang(w)
        if any(m.key in seen for m in head):
            continue
        seen.update(m.key for m in head)
        in_rules = (w.priority_class or default) in classes and not refused(run, w, prio)
        reclaim = (
            team is not None
            and preemptor is not None
            and reclaim_victim(run, w, preemptor, pool, team)
        )
        if in_rules or reclaim:
            cands.append(as_candidate(run, w, pool))
    return cands


def ordered_victims(
    run: Run,
    cands: list[Candidate],
    preemptor: Demand | None,
    pool: str,
    need: int,
    team: str | None,
) -> list[Candidate]:
    """`victim_candidates` cheapest first for `need` cards (victims.py); when `preemptor`
    reclaims `team`'s guarantee, work it does not outrank at most what each team borrows."""
    ordered = order_victims(cands, need)
    if team is None or preemptor is None:
        return ordered
    prio = run.demand_priority(preemptor)
    if all(c.priority < prio for c in ordered):
        return ordered  # `overdrawn` judges only work `preemptor` does not outrank
    # work `preemptor` does not outrank: at most what each team borrows, all victims together
    out: list[Candidate] = []
    for c in ordered:
        if not overdrawn(run, preemptor, pool, [*out, c]):
            out.append(c)
    return out


def default_class(run: Run) -> str | None:
    return run.terms.default_class


# -- evictions ---------------------------------------------------------------------
def evict(
    run: Run,
    w: Workload,
    kind: str,
    reason: str,
    pool: str | None,
    target: str | None = None,
    preemptor: str | None = None,
    to_gpus: tuple[int, ...] = (),
) -> str:
    """checkpoint (grace period) -> evict, for `w` and the rest of its gang; frees their
    GPUs in the working view. Each eviction spends one unit of the hourly budget."""
    first = ""
    for i, m in enumerate(run.gang(w)):
        why = reason if i == 0 else f"{m.key} belongs to the same job as {w.key}: {reason}"
        aid = _evict_one(
            run, m, kind, why, run.cluster.pool_of(m) or pool, target, preemptor, to_gpus
        )
        first = first or aid
    run.freed()
    return first


def stop_lost(
    run: Run,
    w: Workload,
    reason: str,
    *,
    checkpoint: bool,
    recoveries: int | None,
    after: tuple[str, ...] = (),
) -> str:
    """Recovery (stages/recovery.py): stop `w` alone because its gang lost a member or its
    node failed, past `stop_refusal` (a gang that cannot progress is stopped whatever its
    class) and without spending the hourly budget; `checkpoint` False for a pod on a failed
    node (nobody there to see the request); `after`: actions it waits for (the survivors'
    stops, so a suspension for a lost pod does not cut their checkpoint short). A Reclaim,
    its Job suspended (with the Job's new `recoveries` count) when it has one. The action is
    made whole (its `after` among its dependencies) before it is added: the run keeps the first
    action of an id, and one added earlier is never changed here."""
    return _evict_one(
        run,
        w,
        "reclaim",
        reason,
        run.cluster.pool_of(w),
        None,
        None,
        checkpoint=checkpoint,
        spend=False,
        recoveries=recoveries,
        after=after,
    )


def _evict_one(
    run: Run,
    w: Workload,
    kind: str,
    reason: str,
    pool: str | None,
    target: str | None,
    preemptor: str | None,
    to_gpus: tuple[int, ...] = (),
    *,
    checkpoint: bool = True,
    spend: bool = True,
    recoveries: int | None = None,
    after: tuple[str, ...] = (),
) -> str:
    cls = run.pclass(w.priority_class)
    deps: tuple[str, ...] = ()
    if checkpoint and not (cls and cls.spot):
        grace = run.terms.grace
        lost = run.unsaved_seconds(w)
        ck = run.add(
            Checkpoint(
                id=f"checkpoint:{w.key}",
                target=w.key,
                pool=pool,
                reason=(
                    f"ask {w.key} to checkpoint before it is stopped "
                    f"({format_duration(lost or 0)} since its last checkpoint)"
                ),
                grace_period_seconds=int(grace.total_seconds()),
                checkpointable=w.checkpointable,
            )
        )
        deps = (ck,)
    deps = (*deps, *after)
    job = suspended_job(w)
    # stop the gang by suspending its Job: no replacement pod, no retry spent (not in kueue
    # mode: Kueue unsuspends a suspended Job whose Workload it admitted, kubernetes-sigs/kueue
    # v0.17.0 pkg/controller/jobframework/reconciler.go "handle job is suspended"; so the pods
    # are evicted)
    suspend = job if job and not kueue_mode(run) else None
    action = _eviction(kind, w, pool, reason, deps, suspend, target, preemptor, to_gpus)
    if not spend:  # recovery (`stop_lost`)
        update = {"lost": True, "recoveries": recoveries if suspend else None}
        action = action.model_copy(update=update)
    aid = run.add(action)
    for a in w.allocations:
        run.evictions_on.setdefault((w.node or "", a.gpu), set()).add(aid)
    run.evicted.add(w.key)
    run.budget_left -= 1 if spend else 0
    team = run.team(w.namespace)
    pv = run.pool_view(pool)
    if team is not None:
        run.team_usage[team] = run.team_usage.get(team, Fraction(0)) - card_equivalents(
            w.request, pv
        )
        if w.request.gpus and pool:
            for usage in (run.pool_whole_usage, run.running_whole):
                usage[(team, pool)] = usage.get((team, pool), 0) - w.request.gpus
    run.cluster.release(w)
    return aid


def _eviction(
    kind: str,
    w: Workload,
    pool: str | None,
    reason: str,
    deps: tuple[str, ...],
    suspend: str | None,
    target: str | None,
    preemptor: str | None,
    to_gpus: tuple[int, ...],
) -> Eviction:
    """The action that stops `w`: a move (never a suspension: the job restarts at once
    elsewhere), a preemption or a reclaim (its Job suspended when there is one)."""
    ident, gpus = f"{kind}:{w.key}", tuple(sorted(a.gpu for a in w.allocations))
    if kind == "move":
        return Move(
            id=ident,
            target=w.key,
            pool=pool,
            reason=reason,
            depends_on=deps,
            node=w.node,
            gpus=gpus,
            priority_class=w.priority_class,
            to_node=target or "",
            to_gpus=to_gpus,
        )
    if kind == "preempt":
        return Preempt(
            id=ident,
            target=w.key,
            pool=pool,
            reason=reason,
            depends_on=deps,
            node=w.node,
            gpus=gpus,
            priority_class=w.priority_class,
            suspend_job=suspend,
            preemptor=preemptor,
        )
    return Reclaim(
        id=ident,
        target=w.key,
        pool=pool,
        reason=reason,
        depends_on=deps,
        node=w.node,
        gpus=gpus,
        priority_class=w.priority_class,
        suspend_job=suspend,
    )


def nodes_hosting(run: Run, pv: PoolView, classes: set[str]) -> list[str]:
    """Nodes of the pool where a running whole-card workload of one of `classes` is placed
    (from the snapshot; evictions only ever shrink this, so it never misses one). The index
    is made for every pool in one pass over the workloads, the first time a pool asks."""
    if pv.name not in run._hosts:
        default = default_class(run) or ""
        for name in [*run.cluster.pools, pv.name]:
            run._hosts.setdefault(name, {})
        for w in run.cluster.workloads.values():
            if w.phase == "Running" and w.request.gpus:
                hosts = run._hosts.get(run.cluster.node_pool.get(w.node or "", ""))
                if hosts is not None:
                    hosts.setdefault(w.priority_class or default, set()).add(w.node)
    hosts = run._hosts[pv.name]
    return sorted(set().union(*(hosts.get(c, set()) for c in classes)))
