"""Steps 6, 7 and 11: admission (who may take capacity at all: reachable, within team caps,
borrowing and lending limits, training maxGPUs, the ResourceQuota for new replicas; the rest is
held), the reservations of gated gangs from earlier cycles, and the Admit / Resume actions for
what the plan placed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

from reconciler.observe.model import (
    Workload,
)
from reconciler.plan.actions import (
    Admit,
    PodAdmission,
    Repartition,
    Resume,
    Uncordon,
)
from reconciler.plan.cluster import (
    GpuSlot,
    PoolView,
    card_equivalents,
)
from reconciler.plan.demand import (
    describe,
    largest_node,
    memory_beyond_share,
    pending_pool,
    record_wait,
    unreachable,
)
from reconciler.plan.dra_admit import planned_devices
from reconciler.plan.objects.wanted import resource_quotas
from reconciler.plan.quotas import (
    QUOTA_PREFIX,
    quota_use,
    quota_use_by_namespace,
    shared_slices,
)
from reconciler.plan.run import Demand, Run, kueue_mode
from reconciler.policy.models import Allotment, PoolQuota


def admit_demand(run: Run, pending: list[Demand]) -> list[Demand]:
    """Demand that may be worked for: reachable in its pool, within the team's cap,
    borrowing limits, the other teams' unlent guarantees, the pool's training maximum and,
    for replicas not created yet, the namespace's ResourceQuota. Highest priority first."""
    out = []
    pending = sorted(
        pending,
        key=lambda p: (
            -run.demand_priority(p),
            p.created or run.now,
            p.key.split("#")[0],
            p.order,
            p.key,
        ),
    )
    tally = _Tally(
        quotas=resource_quotas(run),
        ns_use=quota_use_by_namespace(run.cluster.workloads.values()),
        partitions=_partitions_held(run),
    )
    for (_, pool), n in run.running_whole.items():
        tally.training_whole[pool] += n
    # what every unit is judged against and nothing in this step changes: each pool's largest
    # node and its whole cards (once per pool, not once per unit: linear in the demand)
    shapes = {
        name: _PoolShape(largest_node(pv), pv.count("whole"))
        for name, pv in run.cluster.pools.items()
    }
    for p in pending:
        pool = pending_pool(run, p)
        if pool is None:
            record_wait(
                run,
                p,
                "no-pool",
                f"no pool can run it ({describe(p)}); it stays pending",
                "warning",
            )
            continue
        p.pool = pool
        pv = run.cluster.pools[pool]
        why = unreachable(run, pv, p, shapes[pool].largest_node)
        if why:
            record_wait(
                run, p, "unreachable", f"{p.origin} {why}: it can never run as asked", "warning"
            )
            continue
        memory_beyond_share(run, pv, p)
        held = _held(run, p, pv, tally, shapes[pool].whole_cards)
        if held:
            record_wait(run, p, held[0], held[1])
            continue
        _count_admitted(run, p, pv, tally)
        out.append(p)
    return out


@dataclass
class _Tally:
    """What admission counts as it admits demand, besides the team ledger on `Run`: each
    pool's whole cards held by training, each namespace's ResourceQuota use (against
    `quotas`, the quotas gpupool keeps), and each team's MIG devices per profile and shared
    slices where a borrowing limit counts them (`_partitions_held`)."""

    quotas: dict[tuple[str, str], dict[str, str]]
    ns_use: dict[str, Counter]
    partitions: Counter
    training_whole: Counter = field(default_factory=Counter)


def _count_admitted(run: Run, p: Demand, pv: PoolView, tally: _Tally) -> None:
    """`p` is admitted: what it will hold counts against its team, pool and namespace."""
    pods, pool, r = len(p.members), pv.name, p.request
    team = run.team(p.namespace)
    if team is not None:
        need = pods * card_equivalents(Workload(namespace=p.namespace, name="x", request=r), pv)
        run.team_usage[team] = run.team_usage.get(team, Fraction(0)) + need
        if r.gpus:
            run.pool_whole_usage[(team, pool)] = (
                run.pool_whole_usage.get((team, pool), 0) + pods * r.gpus
            )
        for prof, n in r.mig.items():
            tally.partitions[(team, pool, prof)] += pods * n
        if r.shared_slices:
            tally.partitions[(team, pool, SHARED)] += pods * r.shared_slices
    if r.gpus:
        tally.training_whole[pool] += pods * r.gpus
    if p.origin != "pending pod":
        tally.ns_use.setdefault(p.namespace, Counter()).update(quota_use(r))


SHARED = "shared slices"
"""The key of a team's shared slices in `_Tally.partitions` (beside its MIG profiles)."""


def _partitions_held(run: Run) -> Counter:
    """(team, pool, profile or `SHARED`) -> the MIG devices of each profile, and the shared
    slices, the team's placed pods hold in each pool where its Quota limits their borrowing
    (the pods stopped this cycle left out). gpupool keeps no ResourceQuota in the namespaces
    it gates, and on DRA Kubernetes' quota counts a class's devices per namespace only, so
    admission holds the team to `guaranteed + borrowingLimit` itself (`_borrowing`)."""
    limited = {
        (q.team, pq.pool)
        for q in run.desired.quotas.values()
        for pq in q.spec.pools
        if any(a.borrowing_limit is not None for a in pq.mig.values())
        or (pq.shared_memory is not None and pq.shared_memory.borrowing_limit is not None)
    }
    held: Counter = Counter()
    if not limited:
        return held
    for w in run.cluster.workloads.values():
        r = w.request
        if not (r.mig or r.shared_slices) or not w.placed or w.key in run.evicted:
            continue
        team, pool = run.team(w.namespace), run.cluster.pool_of(w)
        if (team, pool) in limited:
            for prof, n in r.mig.items():
                held[(team, pool, prof)] += n
            held[(team, pool, SHARED)] += r.shared_slices
    return held


def _shared_allotment(pv: PoolView, pq: PoolQuota) -> Allotment | None:
    """A team's shared-memory allotment in the pool's slices, rounded up as the rendered
    ResourceQuota counts it (`quotas.shared_slices`); None without a borrowing limit."""
    sh, m = pv.pool.spec.inference.shared, pq.shared_memory
    if sh is None or m is None or m.borrowing_limit is None:
        return None
    guaranteed, borrowing = shared_slices(m, sh)
    return Allotment(guaranteed=guaranteed, borrowing_limit=borrowing)


def _held(
    run: Run, p: Demand, pv: PoolView, tally: _Tally, whole_cards: int
) -> tuple[str, str] | None:
    """(code, why) when admission holds `p`; None when it may go ahead. `whole_cards`: the
    pool's whole cards (`PoolView.count("whole")`, unchanged while demand is admitted)."""
    r, pool, pods = p.request, pv.name, len(p.members)
    tmax = pv.pool.spec.training.max_gpus
    training = tally.training_whole[pool]
    if r.gpus and tmax is not None and training + pods * r.gpus > tmax:
        return "held-training-max", (
            f"held: training in {pool} would hold {training + pods * r.gpus} "
            f"whole GPUs, over training.maxGPUs {tmax}"
        )
    q = run.desired.quota_for_namespace(p.namespace)
    if q is None:
        return None
    if kueue_mode(run) and r.kind == "whole":
        return None  # Kueue admitted it within its ClusterQueue: the Quota is Kueue's to keep
    team = q.team
    if p.origin != "pending pod":  # a replica not created yet: the API server would refuse it
        hard = tally.quotas.get((p.namespace, QUOTA_PREFIX + team), {})
        use = tally.ns_use.get(p.namespace, Counter())
        for res, n in sorted(quota_use(r).items()):
            if res in hard and use[res] + n > int(hard[res]):
                return "held-quota", (
                    f"held: {p.namespace}'s ResourceQuota allows {hard[res]} {res}, "
                    f"{use[res]} in use"
                )
    need = pods * card_equivalents(Workload(namespace=p.namespace, name="x", request=r), pv)
    used = run.team_usage.get(team, Fraction(0))
    if q.spec.max_gpus is not None and used + need > q.spec.max_gpus:
        return "held-cap", (
            f"held: team {team} would use {float(used + need):g} GPUs, "
            f"over its cap of {q.spec.max_gpus}"
        )
    pq = next((x for x in q.spec.pools if x.pool == pool), None)
    if r.mig and pq is not None:
        for prof, n in sorted(r.mig.items()):
            holds = tally.partitions[(team, pool, prof)] + pods * n
            over = _borrowing(team, pool, holds, f"{prof} MIG devices", pq.mig.get(prof))
            if over:
                return over
    if r.shared_slices and pq is not None:
        holds = tally.partitions[(team, pool, SHARED)] + pods * r.shared_slices
        over = _borrowing(team, pool, holds, SHARED, _shared_allotment(pv, pq))
        if over:
            return over
    if not r.gpus:
        return None
    whole = run.pool_whole_usage.get((team, pool), 0) + pods * r.gpus
    over = _borrowing(team, pool, whole, "whole GPUs", pq.whole if pq else None)
    if over:
        return over
    guaranteed = pq.whole.guaranteed if pq else 0
    if whole > guaranteed:
        locked = _unlent(run, pool, team)
        total = sum(n for (_, pl), n in run.pool_whole_usage.items() if pl == pool)
        if locked and total + pods * r.gpus + locked > whole_cards:
            return "held-lending", (
                f"held: team {team} would borrow beyond its guarantee in {pool}, and the "
                f"free cards are other teams' guarantees they do not lend ({locked})"
            )
    return None


def _borrowing(
    team: str, pool: str, holds: int, what: str, allotment: Allotment | None
) -> tuple[str, str] | None:
    """`held-borrowing` when `team` would hold `holds` of `what` (whole GPUs, one MIG
    profile's devices, or shared slices) in `pool`, over its allotment's guarantee +
    borrowingLimit (none: no limit)."""
    if allotment is None or allotment.borrowing_limit is None:
        return None
    limit = allotment.guaranteed + allotment.borrowing_limit
    if holds <= limit:
        return None
    return "held-borrowing", (
        f"held: team {team} would hold {holds} {what} in {pool}, "
        f"over guarantee + borrowing ({limit})"
    )


@dataclass(frozen=True)
class _PoolShape:
    largest_node: int
    whole_cards: int


def _unlent(run: Run, pool: str, team: str) -> int:
    """Cards of other teams' unused guarantees in `pool` that their lendingLimit keeps
    from borrowers (None lends all of it)."""
    locked = 0
    for q in run.desired.quotas.values():
        if q.team == team:
            continue
        for pq in q.spec.pools:
            if pq.pool != pool or pq.whole.lending_limit is None:
                continue
            unused = max(0, pq.whole.guaranteed - run.pool_whole_usage.get((q.team, pool), 0))
            locked += max(0, unused - pq.whole.lending_limit)
    return locked


def honour_reservations(run: Run, pending: list[Demand]) -> None:
    """Cards freed for a gated gang in earlier cycles stay its own: when every card its pods'
    reservations name is free now (their victims gone or terminating), the gang is placed
    there before any other demand is (highest priority first, as admission sorted them)."""
    for p in pending:
        if not p.gated or p.request.kind != "whole" or set(p.reserved) != set(p.members):
            continue
        pv = run.pool_view(p.pool)
        if pv is None:
            continue
        cards: list[list[GpuSlot]] = []
        for m in p.members:
            node, gpus = p.reserved[m]
            slots = [run.cluster.slot.get((node, i)) for i in gpus]
            if (
                node not in pv.nodes
                or len(gpus) != p.request.gpus
                or not all(g is not None and g.free_whole for g in slots)
                or any(g in c for c in cards for g in slots)
            ):
                break
            cards.append([g for g in slots if g is not None])
        else:
            for m, got in zip(p.members, cards, strict=True):
                pv.reserve(got, m)
            p.on_reservation = True


def _pod_admission(run: Run, pool: str, member: str, cards: list[GpuSlot]) -> PodAdmission | None:
    """One pod's node and cards; on a DRA pool also the devices its claims are pinned to (None
    when one is not published: exact admission cannot name it)."""
    name, node = member.split("/", 1)[1], cards[0].node
    gpus = tuple(g.index for g in cards)
    spec = run.desired.pools.get(pool)
    if spec is None or spec.spec.backend != "dra":
        return PodAdmission(name=name, node=node, gpus=gpus)
    observed = next((n for n in run.observed.nodes if n.name == node), None)
    devices = planned_devices(run.observed.dra, observed, cards, member)
    if devices is None:
        return None
    return PodAdmission(name=name, node=node, gpus=gpus, devices=devices)


def emit_admissions(run: Run, pending: list[Demand]) -> None:
    """An Admit for every gated gang the plan placed: each pod's node and cards, after the
    repartitions and uncordons of those nodes, and once the pods stopped to free the cards
    are gone. Demand kube-scheduler places itself (no gate) is never admitted."""
    where: dict[str, list[GpuSlot]] = {}
    for g in run.cluster.slot.values():
        if g.reserved_by:
            where.setdefault(g.reserved_by, []).append(g)
        for h in g.holders:
            where.setdefault(h, []).append(g)
    node_steps: dict[str, list[str]] = {}
    for aid, a in run.actions.items():
        if isinstance(a, Repartition | Uncordon):
            node_steps.setdefault(a.target, []).append(aid)
    for p in pending:
        if any(m not in where for m in p.members):
            continue
        if p.origin == "suspended job":
            nodes = sorted({where[m][0].node for m in p.members})
            run.add(
                Resume(
                    id=f"resume:{p.key}",
                    target=p.key,
                    pool=p.pool,
                    reason=(
                        f"resume Job {p.key}, suspended to stop its gang: its {describe(p)} "
                        f"fit on {', '.join(nodes)} now (its pods are admitted once created)"
                    ),
                )
            )
            continue
        if not p.gated or p.origin != "pending pod":
            continue
        pods, after, deps = [], set(), set()
        for m in p.members:
            cards = sorted(where[m], key=lambda g: g.index)
            node = cards[0].node
            admission = _pod_admission(run, p.pool, m, cards)
            if admission is None:  # a DRA device not published yet: the gang waits, whole
                why = (
                    f"the devices planned for it on {node} are not published by NVIDIA's DRA "
                    f"driver yet (it republishes a node's slices after a repartition); admitted "
                    f"once they are, on exactly those devices"
                )
                record_wait(run, p, "dra-devices-unpublished", why)
                break
            pods.append(admission)
            deps.update(node_steps.get(node, ()))
            for g in cards:
                after.update(
                    run.actions[e].target for e in run.evictions_on.get((node, g.index), ())
                )
                after.update(run.stopping.get((node, g.index), ()))
        if len(pods) != len(p.members):
            continue
        nodes = sorted({a.node for a in pods})
        freed = f", once {len(after)} pod(s) stopped for it are gone" if after else ""
        run.add(
            Admit(
                id=f"admit:{p.key}",
                target=p.key,
                pool=p.pool,
                reason=(f"admit {p.origin} {p.key} ({describe(p)}) to {', '.join(nodes)}{freed}"),
                depends_on=tuple(sorted(deps)),
                namespace=p.namespace,
                pods=tuple(pods),
                after=tuple(sorted(after)),
            )
        )
