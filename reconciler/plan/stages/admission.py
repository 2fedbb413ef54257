"""Steps 6, 7 and 11: admission (who may take capacity at all: reachable, within team caps,
borrowing and lending limits, training maxGPUs, the ResourceQuota for new replicas; the rest is
held), the reservations of gated gangs from earlier cycles, and the Admit / Resume actions for
what the plan placed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

from reconciler.plan.actions import (
    Admit,
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
from reconciler.plan.objects.wanted import resource_quotas
from reconciler.plan.partition import NotYet, partition_for
from reconciler.plan.quotas import (
    QUOTA_PREFIX,
    quota_use,
    shared_slices,
)
from reconciler.plan.run import Demand, Run, kueue_mode, quota_use_of
from reconciler.policy.models import Allotment, MemoryAllotment, PoolQuota


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
        ns_use=quota_use_of(run),
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
    `quotas`, the quotas gpupool keeps), each team's MIG devices per profile and shared
    slices where a borrowing or lending limit counts them (`_partitions_held`), and each
    pool's free MIG devices and shared slices for the lending rule (`_room`)."""

    quotas: dict[tuple[str, str], dict[str, str]]
    ns_use: dict[str, Counter]
    partitions: Counter
    training_whole: Counter = field(default_factory=Counter)
    admitted: Counter = field(default_factory=Counter)
    """(pool, profile or `SHARED`) -> MIG devices and shared slices admitted this cycle (every
    team's and no team's), taken from the room `_room` read before any was admitted."""
    room: dict[tuple[str, str], int] = field(default_factory=dict)


def _count_admitted(run: Run, p: Demand, pv: PoolView, tally: _Tally) -> None:
    """`p` is admitted: what it will hold counts against its team, pool and namespace."""
    pods, pool, r = len(p.members), pv.name, p.request
    team = run.team(p.namespace)
    if team is not None:
        need = pods * card_equivalents(r, pv)
        run.team_usage[team] = run.team_usage.get(team, Fraction(0)) + need
        if r.gpus:
            run.pool_whole_usage[(team, pool)] = (
                run.pool_whole_usage.get((team, pool), 0) + pods * r.gpus
            )
        for prof, n in r.mig.items():
            tally.partitions[(team, pool, prof)] += pods * n
        if r.shared_slices:
            tally.partitions[(team, pool, SHARED)] += pods * r.shared_slices
    for prof, n in r.mig.items():
        tally.admitted[(pool, prof)] += pods * n
    if r.shared_slices:
        tally.admitted[(pool, SHARED)] += pods * r.shared_slices
    if r.gpus:
        tally.training_whole[pool] += pods * r.gpus
    if p.origin != "pending pod":
        tally.ns_use.setdefault(p.namespace, Counter()).update(quota_use(r))


SHARED = "shared slices"
"""The key of a team's shared slices in `_Tally.partitions` (beside its MIG profiles)."""
WHOLE = "whole GPUs"
"""The kind of whole cards in `_over_limits` (beside MIG profiles and `SHARED`)."""
WHAT = {WHOLE: WHOLE, SHARED: SHARED}
FREE = {WHOLE: "cards", SHARED: "shared slices"}


def _partitions_held(run: Run) -> Counter:
    """(team, pool, profile or `SHARED`) -> the MIG devices of each profile, and the shared
    slices, the team's placed pods hold in each pool where its Quota limits their borrowing,
    and every team's in a pool where a Quota limits their lending (the pods stopped this
    cycle left out). gpupool keeps no ResourceQuota in the namespaces it gates, and on DRA
    Kubernetes' quota counts a class's devices per namespace only, so admission holds the
    team to `guaranteed + borrowingLimit` (`_borrowing`) and to the guarantees other teams
    do not lend (`_lending`) itself."""
    limited, lending = set(), set()
    for q in run.desired.quotas.values():
        for pq in q.spec.pools:
            allots = [*pq.mig.values(), *([pq.shared_memory] if pq.shared_memory else [])]
            if any(a.borrowing_limit is not None for a in allots):
                limited.add((q.team, pq.pool))
            if any(a.lending_limit is not None for a in allots):
                lending.add(pq.pool)
    held: Counter = Counter()
    if not limited and not lending:
        return held
    # the view's census (placed pods per namespace, pool and request), less what was stopped
    for (ns, pool, placed, _, mig, shared), n in run.cluster.census.items():
        team = run.team(ns)
        counted = (team, pool) in limited or (team is not None and pool in lending)
        if placed and (mig or shared) and counted:
            for prof, k in mig:
                held[(team, pool, prof)] += k * n
            held[(team, pool, SHARED)] += shared * n
    for key in sorted(run.evicted):
        w = run.cluster.workloads.get(key)
        if w is None or not (w.request.mig or w.request.shared_slices) or not w.placed:
            continue
        team, pool = run.team(w.namespace), run.cluster.pool_of(w)
        if (team, pool) in limited or (team is not None and pool in lending):
            for prof, k in w.request.mig.items():
                held[(team, pool, prof)] -= k
            held[(team, pool, SHARED)] -= w.request.shared_slices
    return held


def _allotment(pv: PoolView, pq: PoolQuota | None, kind: str) -> Allotment | None:
    """A team's allotment in `pv` of `kind`: `WHOLE` cards, one MIG profile's devices, or
    `SHARED` slices (its sharedMemory in the pool's slices, each limit rounded up as the
    rendered quota counts it, `quotas.shared_slices`); None where its Quota has none."""
    if pq is None:
        return None
    if kind == WHOLE:
        return pq.whole
    if kind != SHARED:
        return pq.mig.get(kind)
    sh, m = pv.pool.spec.inference.shared, pq.shared_memory
    if sh is None or m is None:
        return None
    guaranteed, borrowing = shared_slices(m, sh)
    lending = None
    if m.lending_limit is not None:
        lending = shared_slices(MemoryAllotment(guaranteed=m.lending_limit), sh)[0]
    return Allotment(guaranteed=guaranteed, borrowing_limit=borrowing, lending_limit=lending)


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
    need = pods * card_equivalents(r, pv)
    used = run.team_usage.get(team, Fraction(0))
    if q.spec.max_gpus is not None and used + need > q.spec.max_gpus:
        return "held-cap", (
            f"held: team {team} would use {float(used + need):g} GPUs, "
            f"over its cap of {q.spec.max_gpus}"
        )
    pq = next((x for x in q.spec.pools if x.pool == pool), None)
    return _over_limits(run, p, pv, tally, team, pq, whole_cards)


def _over_limits(
    run: Run,
    p: Demand,
    pv: PoolView,
    tally: _Tally,
    team: str,
    pq: PoolQuota | None,
    whole_cards: int,
) -> tuple[str, str] | None:
    """`held-borrowing` or `held-lending` for what `p` asks of each kind (each MIG profile,
    shared slices, whole cards): what the team would hold of it against its own allotment,
    and the room of it left in the pool against the other teams' unlent guarantees."""
    r, pool, pods = p.request, pv.name, len(p.members)
    asks = [(prof, pods * n) for prof, n in sorted(r.mig.items())]
    if r.shared_slices:
        asks.append((SHARED, pods * r.shared_slices))
    if r.gpus:
        asks.append((WHOLE, pods * r.gpus))
    for kind, n in asks:
        if kind == WHOLE:
            holds = run.pool_whole_usage.get((team, pool), 0) + n
        else:
            holds = tally.partitions[(team, pool, kind)] + n
        allotment = _allotment(pv, pq, kind)
        over = _borrowing(team, pool, holds, WHAT.get(kind, f"{kind} MIG devices"), allotment)
        over = over or _lending(run, pv, tally, team, kind, (n, holds), allotment, whole_cards)
        if over:
            return over
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


def _lending(
    run: Run,
    pv: PoolView,
    tally: _Tally,
    team: str,
    kind: str,
    asked: tuple[int, int],
    allotment: Allotment | None,
    whole_cards: int,
) -> tuple[str, str] | None:
    """`held-lending` when `team`, asking `asked` = (n, holds): n of `kind` that makes it hold
    `holds` in the pool, would borrow beyond its guarantee and the room the pool has free of
    `kind` once it has the n is less than the other teams' unused guarantees of `kind` they do
    not lend (`_unlent`). The one rule for whole cards, each MIG profile and shared slices.
    The room: of whole cards, the pool's `whole_cards` less what the teams hold; of the
    others, `_room` less what admission let in this cycle."""
    n, holds = asked
    if holds <= (allotment.guaranteed if allotment is not None else 0):
        return None
    locked = _unlent(run, pv, tally, team, kind)
    if not locked:
        return None
    if kind == WHOLE:
        room = whole_cards - sum(u for (_, pl), u in run.pool_whole_usage.items() if pl == pv.name)
    else:
        room = _room(run, pv, tally, kind) - tally.admitted[(pv.name, kind)]
    if room - n >= locked:
        return None
    return "held-lending", (
        f"held: team {team} would borrow beyond its guarantee in {pv.name}, and the free "
        f"{FREE.get(kind, f'{kind} MIG devices')} are other teams' guarantees they do not "
        f"lend ({locked})"
    )


def _unlent(run: Run, pv: PoolView, tally: _Tally, team: str, kind: str) -> int:
    """How much of `kind` in the pool is other teams' unused guarantees that their
    lendingLimit keeps from borrowers (None lends all of it)."""
    locked = 0
    for q in run.desired.quotas.values():
        if q.team == team:
            continue
        for pq in q.spec.pools:
            if pq.pool != pv.name:
                continue
            a = _allotment(pv, pq, kind)
            if a is None or a.lending_limit is None:
                continue
            if kind == WHOLE:
                use = run.pool_whole_usage.get((q.team, pv.name), 0)
            else:
                use = tally.partitions[(q.team, pv.name, kind)]
            locked += max(0, max(0, a.guaranteed - use) - a.lending_limit)
    return locked


def _room(run: Run, pv: PoolView, tally: _Tally, kind: str) -> int:
    """The MIG devices of profile `kind`, or the shared slices, free in the pool before
    admission (what placed pods leave; read once per pool and kind). On dynamic MIG also what
    the driver's counters still allow on the free whole cards: each may become the offered
    layout with the most devices of the profile (the pool view reads a card nothing is
    allocated on as whole, `DynamicMigBackend.read_observed`)."""
    key = (pv.name, kind)
    if key not in tally.room:
        if kind == SHARED:
            n = sum(g.free_slices for g in pv.inference_slots())
        else:
            n = sum(len(g.free_instances(kind)) for _, g in pv.mig_with_free(kind))
            mig = pv.pool.spec.inference.mig
            if pv.pool.spec.dynamic_mig and mig is not None:
                most = max(lay.profiles.count(kind) for lay in mig.layouts)
                n += most * pv.total_free_whole()
        tally.room[key] = n
    return tally.room[key]


@dataclass(frozen=True)
class _PoolShape:
    largest_node: int
    whole_cards: int


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


def emit_admissions(run: Run, pending: list[Demand]) -> None:
    """An Admit for every gated gang the plan placed: each pod's node and cards, after the
    repartitions and uncordons of those nodes, and once the pods stopped to free the cards
    are gone. Demand kube-scheduler places itself (no gate) is never admitted."""
    wanted = {m for p in pending for m in p.members}  # only their cards are asked for
    where: dict[str, list[GpuSlot]] = {}
    for g in run.cluster.slot.values():
        if g.reserved_by in wanted:
            where.setdefault(g.reserved_by, []).append(g)
        for h in g.holders:
            if h in wanted:
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
        pv = run.cluster.pools[p.pool]
        backend = partition_for(run, pv)  # how the Admit names each pod's place
        pods, after, deps = [], set(), set()
        for m in p.members:
            cards = sorted(where[m], key=lambda g: g.index)
            node = cards[0].node
            admission = backend.pod_admission(run, pv, m, cards)
            if isinstance(admission, NotYet):  # e.g. a DRA device not published yet
                record_wait(run, p, admission.code, admission.why)
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
        claims = backend.held_beyond(run, pv, after) if after else ()
        freed = f", once {len(after)} pod(s) stopped for it are gone" if after else ""
        if claims:
            freed += f" and their {len(claims)} ResourceClaim(s) deallocated"
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
                after_claims=claims,
            )
        )
