"""Step 8, training's last resort: move a few single-card workloads (each an eviction through
the one eviction check) so that a pending gang gets its cards on one node (MaintenancePolicy
defragmentation)."""

from __future__ import annotations

from datetime import UTC, datetime

from reconciler.plan import placement
from reconciler.plan.cluster import (
    PoolView,
)
from reconciler.plan.evictions import evict, stop_refusal
from reconciler.plan.run import BUDGET, Demand, Run
from reconciler.plan.stages.whole_cards import place_gang, whole_state


def defragment(run: Run, pv: PoolView, p: Demand) -> bool:
    """Move a few one-card workloads off the node closest to fitting gang `p` (the shared
    defragmenter, `placement.defragment`), each to a free card elsewhere, then place `p`.
    A node that needs more moves than the cycle allows gets the allowed ones now (`p` waits)."""
    rules = [
        m.spec.defragmentation
        for m in run.desired.maintenance_for(pv.name)
        if m.spec.defragmentation and m.spec.defragmentation.enabled
    ]
    if not rules:
        return False
    rule = rules[0]
    if rule.when == "window" and not _in_window(run.now, rule.window.start, rule.window.end):
        return False
    n = p.request.gpus
    if len(p.members) != 1 or pv.total_free_whole() < n:
        return False
    prio = run.demand_priority(p)
    by_node = pv.by_node()
    used = run.memo.get(("defrag-moves", pv.name), (0,))[0]
    moves = min(rule.max_migrations_per_cycle - used, n, max(run.budget_left, 0))
    if moves <= 0:
        run.blocked.setdefault(
            p.key,
            f"the {BUDGET} is spent"
            if run.budget_left <= 0
            else f"this cycle's {rule.max_migrations_per_cycle} move(s) are taken "
            "(MaintenancePolicy maxMigrationsPerCycle)",
        )
        return False
    names = pv.nodes_with_free(min(1, n - moves), len(pv.gpus))
    states = [whole_state(pv, node) for node in names]
    residents = _residents(run, pv, names, prio, rule.only_migratable)

    demand = placement.PodDemand(num_gpu=n, gpu_milli=1000)

    def search(most: int):
        return placement.defragment(
            states,
            demand,
            residents,
            _first_free,
            lambda trial, req: placement.Placement(trial.name, ()),
            max_moves=most,
        )

    found = search(moves)
    staged = False
    if found is None and moves < n:
        # maxMigrationsPerCycle caps a cycle's moves, not a gang's: when the node closest to
        # fitting needs more, its first moves go now and the rest in the next cycles (the
        # same node stays closest, with fewer left to move; nothing is reserved meanwhile)
        found = search(n)
        staged = found is not None
    if found is None:
        return False
    _, migrations = found
    rest: tuple[placement.Migration, ...] = ()
    if staged:
        migrations, rest = migrations[:moves], migrations[moves:]
    run.memo[("defrag-moves", pv.name)] = (used + len(migrations),)
    for m in migrations:
        w = run.cluster.workloads[m.key]
        dest = by_node[m.target.node][m.target.gpus[0]]
        pv.reserve([dest], w.key)
        evict(
            run,
            w,
            "move",
            f"defragment {m.source.node}: move {w.key} to {dest.key} "
            f"so pending {p.key} gets {n} GPUs on one node",
            pv.name,
            target=dest.node,
            to_gpus=(dest.index,),
        )
    if staged:
        # what the gang will need stays out of this cycle's later placements: the node's
        # free cards and those the next moves go to (the gang, older, comes first next
        # cycle too, so it keeps them until it runs)
        source = migrations[0].source.node
        hold = [by_node[m.target.node][m.target.gpus[0]] for m in rest]
        hold += [g for g in by_node[source] if g.free_whole]
        pv.reserve(hold, f"{p.key}#defragmenting")
        run.blocked[p.key] = (
            f"defragmenting {source} for it: {moves} move(s) this cycle, "
            f"{len(rest)} more to come (MaintenancePolicy maxMigrationsPerCycle)"
        )
        return False
    return place_gang(run, pv, p)


def _residents(
    run: Run, pv: PoolView, names: list[str], prio: int, only_migratable: bool
) -> dict[str, list[placement.Resident]]:
    """The one-card workloads on `names`, as the defragmenter sees them: which may move."""
    by_node = pv.by_node()
    residents: dict[str, list[placement.Resident]] = {}
    one_card = placement.PodDemand(num_gpu=1, gpu_milli=1000)
    for node in names:
        slots = by_node[node]
        held = {
            h
            for g in slots
            if g.target_mode == "whole"
            for h in g.holders
            if h in run.cluster.workloads
        }
        # the defragmenter moves a node's first movable residents among equals: those that
        # lose the least work since their last checkpoint first
        for key in sorted(
            held, key=lambda h: (run.unsaved_seconds(run.cluster.workloads[h]) or 0.0, h)
        ):
            w = run.cluster.workloads[key]
            if len(w.allocations) != 1 or w.key in run.evicted or len(run.gang(w)) != 1:
                continue
            at = next(i for i, g in enumerate(slots) if g.index == w.allocations[0].gpu)
            residents.setdefault(node, []).append(
                placement.Resident(
                    key,
                    one_card,
                    placement.Placement(node, (at,)),
                    # a move is an eviction: it passes the same gate as a preemption, but a
                    # job of the same priority may be moved (it restarts at once elsewhere)
                    movable=(w.migratable or not only_migratable)
                    and not stop_refusal(run, w, prio + 1, budget=False),
                )
            )
    return residents


def _first_free(
    req: placement.PodDemand, others: list[placement.NodeState]
) -> placement.Placement | None:
    return next(
        (
            placement.Placement(o.name, (i,))
            for o in others
            for i, f in enumerate(o.gpu_free_milli)
            if f >= req.gpu_milli
        ),
        None,
    )


def _in_window(now: datetime, start: str, end: str) -> bool:
    """Maintenance windows are written in UTC (the reference says so), whatever offset
    `now` carries."""
    now = now.astimezone(UTC)
    t = now.hour * 60 + now.minute
    s = int(start[:2]) * 60 + int(start[3:])
    e = int(end[:2]) * 60 + int(end[3:])
    return s <= t < e if s <= e else (t >= s or t < e)
